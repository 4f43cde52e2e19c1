//! Free space on a file system, checked before a run against the outputs whose size is known
//! at the start (issue 47, class 1): a checkpoint is the model's weights and its optimizer
//! state, whatever the run learns, so one too large for its disk is refused before training
//! rather than found after the whole run.

use std::path::Path;

use crate::{Error, PathProblem, RunError};

/// Bytes of one parameter in a checkpoint: f32 weights, and f32 optimizer state per slot.
const BYTES_PER_VALUE: u128 = 4;

/// The bytes a checkpoint of `params` parameters with `slots` optimizer values per parameter
/// holds at least (its tensors; the header and metadata come on top).
pub fn checkpoint_bytes(params: u128, slots: u64) -> u128 {
    params * BYTES_PER_VALUE * (1 + u128::from(slots))
}

/// The bytes free to this user on the file system that holds `path`'s directory, if the
/// system says.
pub fn free_bytes(path: &Path) -> Option<u128> {
    let dir = crate::engine::output::directory(path);
    let stat = rustix::fs::statvfs(dir).ok()?;
    Some(u128::from(stat.f_bavail) * u128::from(stat.f_frsize))
}

/// `needed` bytes can be written at `path`, named `name`: its file system has that much free
/// (a file system that does not say passes). The file written is a temp file beside `path`,
/// renamed over it, so an earlier file there frees nothing until then.
///
/// # Errors
/// [`RunError::Path`] with [`PathProblem::NoSpace`], naming both figures.
pub fn fits(name: &str, path: &Path, needed: u128) -> Result<(), Error> {
    match free_bytes(path) {
        Some(free) if free < needed => Err(Error::Run(RunError::Path {
            name: name.to_string(),
            path: path.to_path_buf(),
            problem: PathProblem::NoSpace {
                needed: bytes(needed),
                free: bytes(free),
            },
        })),
        _ => Ok(()),
    }
}

/// `n` bytes in words (`20.5 KiB`).
fn bytes(n: u128) -> String {
    crate::memory::Bytes(u64::try_from(n).unwrap_or(u64::MAX)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_larger_than_the_free_space_is_refused_naming_both() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ck.safetensors");
        fits("--checkpoint", &path, 1).unwrap();
        let e = fits("--checkpoint", &path, u128::MAX)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--checkpoint") && e.contains("free"), "{e}");
        assert_eq!(checkpoint_bytes(10, 2), 120);
    }
}
