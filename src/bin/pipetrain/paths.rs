//! The files the flags name, checked before anything runs: an input file must exist, and so
//! must an output file's directory. A typo is then a usage error at once, not a read error, nor
//! a write error after the whole training run.

use std::path::{Path, PathBuf};

/// Each `(flag, path)` given must name an existing file.
///
/// # Errors
/// The first path that is not a file, with its flag.
pub fn inputs_exist(files: &[(&str, &Option<PathBuf>)]) -> Result<(), String> {
    for (flag, path) in files {
        if let Some(path) = path.as_ref().filter(|p| !p.is_file()) {
            return Err(format!("{flag} {}: no such file", path.display()));
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
