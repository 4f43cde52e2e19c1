//! The files the flags name, checked before anything runs (the library's
//! [`pipetrain::trainer::paths`], named by flag): a missing input, an output that cannot be
//! written or two flags that name one file are usage errors at once.

use std::path::PathBuf;

use pipetrain::trainer::paths;

use crate::failure::Failure;

/// Each `(flag, path)` given names an existing regular file this machine can load.
///
/// # Errors
/// The first path that is not a file, or too large to load, with its flag.
pub fn inputs_exist(files: &[(&str, &Option<PathBuf>)]) -> Result<(), String> {
    paths::inputs_exist(files).map_err(|e| e.to_string())
}

/// Each `(flag, path)` given can be written at the end of the run.
///
/// # Errors
/// The first path that cannot be written, with its flag, what is wrong and a remedy.
pub fn outputs_writable(files: &[(&str, &Option<PathBuf>)]) -> Result<(), String> {
    paths::outputs_writable(files).map_err(|e| e.to_string())
}

/// No output among `files` is another flag's file (the library's one rule for every
/// subcommand, [`paths::Files`]).
///
/// # Errors
/// A usage failure naming both flags and the file.
pub fn distinct(files: paths::Files) -> Result<(), Failure> {
    files.check().map_err(|e| Failure::usage(e.to_string()))
}
