//! The files the flags name, checked before anything runs: an input file must exist, and so
//! must an output file's directory. A typo is then a usage error at once, not a read error, nor
//! a write error after the whole training run; the files written at the end are even tried.

use std::path::{Path, PathBuf};

/// Each `(flag, path)` given must name an existing file.
///
/// # Errors
/// The first path that is not a file, with its flag.
pub fn inputs_exist(files: &[(&str, &Option<PathBuf>)]) -> Result<(), String> {
    for (flag, path) in files {
        if let Some(path) = path.as_ref().filter(|p| !p.is_file()) {
            return Err(match path.is_dir() {
                true => format!(
                    "{flag} {}: is a directory; give the .safetensors file in it",
                    path.display()
                ),
                false => format!("{flag} {}: no such file", path.display()),
            });
        }
    }
    Ok(())
}

/// Each `(flag, path)` given can be written at the end of the run: a regular file or a new
/// one, in a directory where a file can be created, synced and removed (tried now with a probe
/// file, the way checkpoints are written), so that a bad path does not lose the trained weights
/// or the run's plot after the whole run.
///
/// # Errors
/// The first path that cannot be written, with its flag, what is wrong and a remedy.
pub fn outputs_writable(files: &[(&str, &Option<PathBuf>)]) -> Result<(), String> {
    for (flag, path) in files {
        if let Some(path) = path {
            pipetrain::engine::checkpoint::probe(path)
                .map_err(|e| format!("{flag} {}: {e}", path.display()))?;
        }
    }
    Ok(())
}

/// Each `(flag, path)` given must be in an existing directory (the file itself is written
/// later).
///
/// # Errors
/// The first path whose directory does not exist, with its flag and a remedy.
pub fn output_dirs_exist(files: &[(&str, &Option<PathBuf>)]) -> Result<(), String> {
    for (flag, path) in files {
        if let Some(path) = path {
            let dir = path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            if !dir.is_dir() {
                return Err(format!(
                    "{flag} {}: directory {} does not exist; create it or choose another path",
                    path.display(),
                    dir.display()
                ));
            }
        }
    }
    Ok(())
}
