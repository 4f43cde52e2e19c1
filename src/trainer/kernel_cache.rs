//! The kernel cache's line after a GPU run's first step: whether that step compiled kernels
//! or tuned shapes (the cache grew) or the cache served them. cubecl 0.11.3 counts neither, so
//! the cache folder's size before and after the step tells.

use std::path::Path;

/// The line for the kernel cache at `dir`, which held `before` (files, bytes) before the first
/// step and holds `after` now.
///
/// ```
/// use std::path::Path;
/// let line = pipetrain::trainer::kernel_cache_line_of(Path::new("/c"), (2, 1 << 20), (2, 1 << 20));
/// assert!(line.contains("served"), "{line}");
/// let line = pipetrain::trainer::kernel_cache_line_of(Path::new("/c"), (0, 0), (3, 3 << 20));
/// assert!(line.contains("compiled or tuned"), "{line}");
/// ```
pub fn kernel_cache_line_of(dir: &Path, before: (u64, u64), after: (u64, u64)) -> String {
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let now = format!(
        "kernel cache: {} ({} files, {:.1} MiB)",
        dir.display(),
        after.0,
        mib(after.1)
    );
    if after.1 > before.1 || after.0 > before.0 {
        format!(
            "{now}: the first step compiled or tuned what it lacked ({:+.1} MiB); the next run \
             reads it back",
            mib(after.1) - mib(before.1)
        )
    } else {
        format!("{now}: the first step was served from it (nothing compiled or tuned was added)")
    }
}

/// [`kernel_cache_line_of`] for the cache pipetrain configures
/// ([`kernel_cache_dir`](crate::engine::device::kernel_cache_dir)), as it is now.
pub fn kernel_cache_line(before: (u64, u64)) -> String {
    let dir = crate::engine::device::kernel_cache_dir();
    let after = crate::engine::device::folder_size(&dir);
    kernel_cache_line_of(&dir, before, after)
}
