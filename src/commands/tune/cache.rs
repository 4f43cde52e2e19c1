//! The measured cost table, cached per model shape and machine: a JSON file named after a hash
//! of its key (the model, batch, optimizer, workers, micro-batch sizes, CPU model and
//! pipetrain version), holding the key itself so that a hash collision is never read as a hit.

use crate::CommandError;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use pipetrain_tune::CostTable;

use crate::Error;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Entry {
    key: String,
    table: CostTable,
}

/// The cache directory: `dir`, else `$XDG_CACHE_HOME/pipetrain`, else `~/.cache/pipetrain`.
pub fn cache_dir(dir: Option<&Path>) -> PathBuf {
    if let Some(d) = dir {
        return d.to_path_buf();
    }
    match (std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME")) {
        (Some(x), _) if !x.is_empty() => PathBuf::from(x).join("pipetrain"),
        (_, Some(home)) => PathBuf::from(home).join(".cache/pipetrain"),
        _ => std::env::temp_dir().join("pipetrain"),
    }
}

/// The file that holds `key`'s table in `dir`.
pub(crate) fn path(dir: &Path, key: &str) -> PathBuf {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut hasher);
    dir.join(format!("tune-{:016x}.json", hasher.finish()))
}

/// The table cached at `path` for `key`, if there is one (a file that does not parse, or
/// holds another key, is none: the table is measured again and replaces it).
///
/// # Errors
/// [`CommandError::TuneCache`](crate::CommandError::TuneCache): the table holds a value no measurement gives (0, negative, not
/// finite, beyond [`pipetrain_tune::MAX_SECONDS`]; [`CostTable::check_measured`]), which would
/// scale and rank every configuration wrongly.
/// A table without times at one of `rows` (the micro-batch sizes the search tries) is refused
/// the same way, naming the size.
pub(crate) fn load(path: &Path, key: &str, rows: &[usize]) -> Result<Option<CostTable>, Error> {
    let Some(table) = read(path, key) else {
        return Ok(None);
    };
    let refused = |problem| {
        Error::Command(CommandError::TuneCache {
            path: path.to_path_buf(),
            problem,
        })
    };
    table.check_measured().map_err(refused)?;
    for &r in rows {
        table.at(r).map_err(refused)?;
    }
    Ok(Some(table))
}

/// Largest cache file read: a table of a few hundred layers at a few sizes is far smaller.
const MAX_CACHE: u64 = 64 << 20;

/// The table that the file at `path` holds for `key`, if it holds one.
fn read(path: &Path, key: &str) -> Option<CostTable> {
    // Bounded, and only a regular file: a FIFO would block the read for ever.
    let text = pipetrain_schedules::read_bounded(path, MAX_CACHE).ok()?;
    let entry: Entry = serde_json::from_str(&text).ok()?;
    (entry.key == key).then_some(entry.table)
}

/// Writes `table` for `key` at `path` (the directory is created).
pub(crate) fn store(path: &Path, key: &str, table: &CostTable) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let entry = Entry {
        key: key.to_string(),
        table: table.clone(),
    };
    let text = serde_json::to_string_pretty(&entry).map_err(std::io::Error::other)?;
    pipetrain_engine::output::write_atomically(path, text.as_bytes()).map_err(std::io::Error::other)
}
