//! `--profile trace.json`: a chrome trace (`chrome://tracing`, <https://ui.perfetto.dev>) of the
//! run, one track per worker, one slice per action, with send → receive flow arrows.
//!
//! The engine already opens `info_span!("action", name, replica, stage, micro_batch)` around
//! every action on every worker thread; [`Profile::start`] installs a `tracing-chrome` layer
//! that records them into a raw file next to the target, and [`Profile::finish`] flushes it,
//! rewrites it with [`crate::trace::post_process`] and renames the result into place, so the
//! target path only ever holds a complete trace.

use std::fs;
use std::path::{Path, PathBuf};

use tracing_chrome::{ChromeLayerBuilder, FlushGuard};
use tracing_subscriber::prelude::*;

/// A chrome trace being recorded.
pub struct Profile {
    path: PathBuf,
    raw: PathBuf,
    guard: FlushGuard,
}

impl Profile {
    /// Starts recording every `tracing` span of the process for the trace at `path`.
    ///
    /// # Errors
    /// When the directory of `path` is not writable, or a global `tracing` subscriber is
    /// already installed.
    pub fn start(path: &Path) -> Result<Self, String> {
        let raw = sibling(path, "raw");
        fs::write(&raw, b"").map_err(|e| format!("--profile {}: {e}", path.display()))?;
        let (layer, guard) = ChromeLayerBuilder::new()
            .file(&raw)
            .include_args(true)
            .build();
        tracing_subscriber::registry()
            .with(layer)
            .try_init()
            .map_err(|e| format!("--profile {}: {e}", path.display()))?;
        Ok(Self {
            path: path.to_path_buf(),
            raw,
            guard,
        })
    }

    /// Flushes the trace, adds the flow events and writes it to its path atomically. Returns
    /// the number of action slices and flow arrows written.
    ///
    /// # Errors
    /// When the raw trace cannot be read or parsed, or the result cannot be written.
    pub fn finish(self) -> Result<(usize, usize), String> {
        let Self { path, raw, guard } = self;
        drop(guard); // writes the closing `]` and joins the writer thread
        let fail = |e: &dyn std::fmt::Display| format!("--profile {}: {e}", path.display());
        let text = fs::read_to_string(&raw).map_err(|e| fail(&e))?;
        let events: Vec<serde_json::Value> = serde_json::from_str(&text).map_err(|e| fail(&e))?;
        let events = crate::trace::post_process(events);
        let slices = events
            .iter()
            .filter(|e| e["ph"] == "X" && e["cat"] == "action")
            .count();
        let flows = events.iter().filter(|e| e["ph"] == "s").count();
        let tmp = sibling(&path, "tmp");
        let json = serde_json::to_vec(&events).map_err(|e| fail(&e))?;
        fs::write(&tmp, json).map_err(|e| fail(&e))?;
        fs::rename(&tmp, &path).map_err(|e| fail(&e))?;
        let _ = fs::remove_file(&raw);
        Ok((slices, flows))
    }
}

/// `dir/.name.suffix`, next to `path` so that a rename stays on one file system.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "trace.json".into());
    path.with_file_name(format!(".{name}.{suffix}"))
}
