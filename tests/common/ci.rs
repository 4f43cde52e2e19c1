//! The one reading of the `CI` variable in the workspace's tests (issue 48 item 5): the tests
//! that skip where a tool or root is missing (the two-host MPI test, the disk-full tests) must
//! not skip under CI, and the golden files are never rewritten there. `tests/common/mod.rs`
//! re-exports it; `schedules/tests/golden.rs` includes this file through `#[path]`.

/// `CI`'s value when the tests run under CI: set to anything but empty, `false` or `0`
/// (`.ci/run` sets `CI=true`).
pub fn ci() -> Option<String> {
    ci_from(std::env::var("CI").ok())
}

/// [`ci`] of a given value of the variable.
pub fn ci_from(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.is_empty() && v != "false" && v != "0")
}
