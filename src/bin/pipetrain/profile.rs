//! `--profile trace.json`: a chrome trace (`chrome://tracing`, <https://ui.perfetto.dev>) of the
//! run, one track per worker, one slice per action, with send → receive flow arrows.
//!
//! The engine already opens `info_span!("action", name, replica, stage, micro_batch)` around
//! every action on every worker thread; [`Profile::start`] installs a `tracing-chrome` layer
//! that records them into a raw file next to the target as they happen, and
//! [`Profile::finish`] flushes it, rewrites it with [`crate::trace::post_process_into`] (both
//! streaming: memory does not grow with the trace) and renames the result into place, so the
//! target path only ever holds a complete trace.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use tracing_chrome::{ChromeLayerBuilder, FlushGuard};
use tracing_subscriber::prelude::*;

use crate::trace::{Tracks, post_process_into};

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

    /// Flushes the trace, adds the flow events and writes it to its path atomically, streaming:
    /// the raw file is read twice one event at a time and the result written as it is made, so
    /// memory does not grow with the trace. Returns the number of action slices and flow arrows
    /// written.
    ///
    /// # Errors
    /// When the raw trace cannot be read or parsed, or the result cannot be written.
    pub fn finish(self) -> Result<(usize, usize), String> {
        let Self { path, raw, guard } = self;
        drop(guard); // writes the closing `]` and joins the writer thread
        let fail = |e: &dyn std::fmt::Display| format!("--profile {}: {e}", path.display());
        let mut error = None;
        let tracks = Tracks::of(events(&raw, &mut error).map_err(|e| fail(&e))?);
        let tmp = sibling(&path, "tmp");
        let mut out = BufWriter::new(File::create(&tmp).map_err(|e| fail(&e))?);
        out.write_all(b"[").map_err(|e| fail(&e))?;
        let mut first = true;
        let counts = post_process_into(
            events(&raw, &mut error).map_err(|e| fail(&e))?,
            &tracks,
            |event| {
                if !std::mem::take(&mut first) {
                    out.write_all(b",\n")?;
                }
                serde_json::to_writer(&mut out, &event).map_err(std::io::Error::from)
            },
        )
        .and_then(|counts| {
            out.write_all(b"]\n")?;
            out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
            Ok(counts)
        });
        let result = match (counts, error) {
            (_, Some(e)) => Err(fail(&format!("the raw trace {}: {e}", raw.display()))),
            (Err(e), None) => Err(fail(&e)),
            (Ok(counts), None) => fs::rename(&tmp, &path)
                .map(|()| (counts.slices, counts.flows))
                .map_err(|e| fail(&e)),
        };
        let _ = fs::remove_file(&tmp);
        let _ = fs::remove_file(&raw);
        result
    }
}

/// The events of the raw trace file `raw`, one per line as `tracing-chrome` writes them
/// (`[`, then `{...},` lines, then `]`). Iteration stops at the first unreadable or unparsable
/// line, which is left in `error`.
fn events<'a>(
    raw: &Path,
    error: &'a mut Option<String>,
) -> std::io::Result<impl Iterator<Item = serde_json::Value> + 'a> {
    let lines = BufReader::new(File::open(raw)?).lines();
    Ok(lines
        .enumerate()
        .map_while(move |(i, line)| {
            let parsed = line.map_err(|e| e.to_string()).and_then(|line| {
                let event = line.trim().trim_end_matches(',');
                match event {
                    "" | "[" | "]" => Ok(None),
                    _ => serde_json::from_str(event)
                        .map(Some)
                        .map_err(|e| e.to_string()),
                }
            });
            parsed
                .map_err(|e| *error = Some(format!("line {}: {e}", i + 1)))
                .ok()
        })
        .flatten())
}

/// `dir/.name.suffix`, next to `path` so that a rename stays on one file system.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "trace.json".into());
    path.with_file_name(format!(".{name}.{suffix}"))
}
