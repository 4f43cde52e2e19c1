//! The `CI` variable (issue 48 item 5): read in one place, `tests/common/ci.rs`, so that every
//! test means the same by it (`disk_full` once took `CI=false` for CI, `tests/mpi.rs` did not).

use crate::common;

use std::path::{Path, PathBuf};

#[test]
fn ci_is_set_to_anything_but_empty_false_or_0() {
    for value in ["", "false", "0"] {
        assert_eq!(common::ci_from(Some(value.into())), None, "CI={value:?}");
    }
    assert_eq!(common::ci_from(None), None);
    for value in ["true", "1", "yes"] {
        assert_eq!(common::ci_from(Some(value.into())).as_deref(), Some(value));
    }
}

/// Every `.rs` file under `dir`, `target/` and `vendor/` left out.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().map(Result::unwrap) {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() && name != "target" && name != "vendor" && name != ".git" {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_ci_variable_is_read_in_one_place() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(root, &mut files);
    let readers: Vec<String> = files
        .iter()
        .filter(|f| !f.ends_with("tests/common/ci.rs"))
        .filter(|f| std::fs::read_to_string(f).unwrap().contains("(\"CI\")"))
        .map(|f| f.strip_prefix(root).unwrap().display().to_string())
        .collect();
    assert!(
        readers.is_empty(),
        "`CI` read outside tests/common/ci.rs (use common::ci()): {readers:?}"
    );
}
