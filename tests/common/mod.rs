//! Helpers shared by the integration tests.

/// A fresh directory for one test's files, removed when dropped (also when the test fails).
pub fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("pipetrain-{name}-"))
        .tempdir()
        .expect("a temporary directory")
}
