//! What the device needs, found or not: the NVIDIA driver, NVRTC, cuBLAS and the kernel cache
//! ([`findings`]). On a CPU none of them: it says so, and why.

use std::path::{Path, PathBuf};

use burn::prelude::Device;

/// One thing the doctor looked for, and what it found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// What was looked for: `driver`, `nvrtc`, `cublas`, `cache`, ...
    pub what: &'static str,
    /// What was found, or why nothing is needed, or where it was looked for.
    pub found: String,
    /// Whether it is missing where the device needs it (the sweep still runs; the table says).
    pub missing: bool,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:<7} {}", format!("{}:", self.what), self.found)
    }
}

/// The folders searched for the CUDA libraries, in order: `library_path`'s (as
/// `LD_LIBRARY_PATH` gives them), then the loader's usual ones and a CUDA install's.
pub fn search_path(library_path: Option<&str>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = library_path
        .unwrap_or_default()
        .split(':')
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .collect();
    for d in [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/usr/local/cuda/lib64",
        "/usr/local/cuda/targets/x86_64-linux/lib",
    ] {
        dirs.push(PathBuf::from(d));
    }
    dirs
}

/// The first file in `dirs` whose name starts with `stem` (`libcublas.so`), and its version
/// suffix if any.
pub fn find_library(dirs: &[PathBuf], stem: &str) -> Option<PathBuf> {
    dirs.iter().find_map(|dir| {
        let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(stem))
            })
            .collect();
        names.sort();
        names.into_iter().next()
    })
}

/// What `device` needs and what was found in `dirs` (the library search path) and `cache`
/// (the kernel cache folder, `pipetrain_engine::device::kernel_cache_dir`, if known).
pub fn findings(device: &Device, dirs: &[PathBuf], cache: Option<&Path>) -> Vec<Finding> {
    if crate::engine::device::is_cpu(device) {
        return vec![
            Finding {
                what: "device",
                found: "cpu (burn's flex): no driver, NVRTC or cuBLAS needed".into(),
                missing: false,
            },
            Finding {
                what: "cache",
                found: "none: flex's kernels are compiled into the binary, so nothing is \
                        compiled or tuned at run time and there is nothing to cache"
                    .into(),
                missing: false,
            },
        ];
    }
    let library = |what: &'static str, stem: &str, role: &str| match find_library(dirs, stem) {
        Some(path) => Finding {
            what,
            found: format!("{} ({role})", path.display()),
            missing: false,
        },
        None => Finding {
            what,
            found: format!(
                "no {stem}* in {} folders searched ({role}); put its folder on LD_LIBRARY_PATH",
                dirs.len()
            ),
            missing: true,
        },
    };
    let count = match crate::engine::device::cuda_device_count() {
        Ok(n) => format!("{n} CUDA device(s)"),
        Err(e) => e.to_string(),
    };
    let mut out = vec![
        library("driver", "libcuda.so", &count),
        library("nvrtc", "libnvrtc.so", "compiles the kernels at run time"),
        library("cublas", "libcublas.so", "cuBLAS"),
        library("cublas", "libcublasLt.so", "cuBLASLt"),
    ];
    out.push(match cache {
        Some(dir) if dir.is_dir() => {
            let (files, bytes) = crate::engine::device::folder_size(dir);
            Finding {
                what: "cache",
                found: format!(
                    "{}: {files} files, {:.1} MiB (compiled kernels and autotune results)",
                    dir.display(),
                    bytes as f64 / (1024.0 * 1024.0)
                ),
                missing: false,
            }
        }
        Some(dir) => Finding {
            what: "cache",
            found: format!(
                "{}: not there yet; this run compiles and tunes from nothing and writes it",
                dir.display()
            ),
            missing: false,
        },
        None => Finding {
            what: "cache",
            found: "PIPETRAIN_CACHE_DIR is not set: cubecl's own place (the outermost \
                    Cargo.toml's target/, else ~/.cache/cubecl), kept across processes only \
                    in a build with cubecl's persistent cache"
                .into(),
            missing: false,
        },
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_is_found_by_its_stem_in_the_first_folder_that_holds_it() {
        let root = std::env::temp_dir().join(format!("doctor-libs-{}", std::process::id()));
        let (a, b) = (root.join("a"), root.join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(b.join("libcublas.so.13"), b"").unwrap();
        std::fs::write(b.join("libcublasLt.so.13"), b"").unwrap();
        let dirs = [a.clone(), b.clone()];
        assert_eq!(
            find_library(&dirs, "libcublas.so"),
            Some(b.join("libcublas.so.13"))
        );
        assert_eq!(
            find_library(&dirs, "libcublasLt.so"),
            Some(b.join("libcublasLt.so.13"))
        );
        assert_eq!(find_library(&dirs, "libnvrtc.so"), None);
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(
            search_path(Some("/x::/y"))[..2],
            [PathBuf::from("/x"), "/y".into()]
        );
    }

    #[test]
    fn the_cpu_needs_no_library_and_says_why_there_is_no_cache() {
        let found = findings(&Device::flex(), &[], None);
        assert_eq!(found.len(), 2);
        assert!(found[1].found.starts_with("none: "), "{}", found[1]);
    }
}
