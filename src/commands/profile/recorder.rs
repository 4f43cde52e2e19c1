//! A chrome trace (`chrome://tracing`, <https://ui.perfetto.dev>) of the
//! run, one track per worker, one slice per action, with send → receive flow arrows.
//!
//! The engine already opens `info_span!("action", name, replica, stage, micro_batch)` around
//! every action on every worker thread; [`Profile::start`] installs a `tracing-chrome` layer
//! that records them into a raw temp file beside the target as they happen, and
//! [`Profile::finish`] flushes it, rewrites it with [`post_process_into`] (both
//! streaming: memory does not grow with the trace) into an [`AtomicFile`] and renames that into
//! place, so the target path only ever holds a complete trace. Both temp files are created
//! exclusively under random names ([`crate::engine::output`]): a symbolic link planted
//! beside the target is never followed, and a device, FIFO or link at the target is refused.
//!
//! A failed write of the raw stream (a full disk) is reported once and ends the trace, not the
//! training: the writer thread of `tracing-chrome` panics on a write error, so the raw file is
//! handed to it behind [`SoftFail`], which records the first error and drops what follows.

use crate::RunError;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use pipetrain_engine::output::{self, AtomicFile, TempFile};
use tracing_chrome::{ChromeLayerBuilder, FlushGuard};
use tracing_subscriber::prelude::*;

use crate::commands::profile::trace::{Tracks, post_process_into};
use crate::trainer::Warning;
use crate::{Error, RunFile, RunFileProblem};

/// The trace's error at `path`.
fn trace_error(path: &Path, reason: RunFileProblem) -> Error {
    Error::Run(RunError::RunFile {
        file: RunFile::Profile,
        path: path.to_path_buf(),
        reason,
    })
}

/// A chrome trace being recorded.
pub struct Profile {
    path: PathBuf,
    raw: TempFile,
    guard: FlushGuard,
    /// The first write error of the raw stream.
    failed: Arc<Mutex<Option<String>>>,
}

impl Profile {
    /// Starts recording every `tracing` span of the process for the trace at `path`. A write
    /// of the raw stream that fails mid-run is handed to `on_warning` (once) and ends the
    /// trace, not the training.
    ///
    /// # Errors
    /// [`RunError::RunFile`](crate::RunError::RunFile): `path` is not a regular file or a new name in a writable directory
    /// ([`RunFileProblem::Output`]); a global `tracing` subscriber is already installed.
    pub fn start(
        path: &Path,
        on_warning: impl Fn(&Warning) + Send + 'static,
    ) -> Result<Self, Error> {
        output::probe(path).map_err(|e| trace_error(path, RunFileProblem::Output(e)))?;
        let raw = TempFile::beside(path, ".raw.tmp")
            .map_err(|e| trace_error(path, RunFileProblem::Output(e)))?;
        let file = raw
            .as_file()
            .try_clone()
            .map_err(|e| trace_error(path, e.into()))?;
        let failed = Arc::new(Mutex::new(None));
        let writer = SoftFail {
            inner: file,
            failed: Arc::clone(&failed),
            path: path.to_path_buf(),
            on_warning: Box::new(on_warning),
        };
        let (layer, guard) = ChromeLayerBuilder::new()
            .writer(writer)
            .include_args(true)
            .build();
        tracing_subscriber::registry()
            .with(layer)
            .try_init()
            .map_err(|e| trace_error(path, RunFileProblem::Invalid(e.to_string())))?;
        Ok(Self {
            path: path.to_path_buf(),
            raw,
            guard,
            failed,
        })
    }

    /// Flushes the trace, adds the flow events and writes it to its path atomically, streaming:
    /// the raw file is read twice one event at a time and the result written as it is made, so
    /// memory does not grow with the trace. Returns the number of action slices and flow arrows
    /// written, or `None` when the raw stream failed mid-run (reported then; nothing written).
    ///
    /// # Errors
    /// When the raw trace cannot be read or parsed, or the result cannot be written (the path
    /// keeps what it held; both temp files are removed).
    pub fn finish(self) -> Result<Option<(usize, usize)>, Error> {
        let Self {
            path,
            raw,
            guard,
            failed,
        } = self;
        drop(guard); // writes the closing `]` and joins the writer thread
        let fail =
            |e: &dyn std::fmt::Display| trace_error(&path, RunFileProblem::Invalid(e.to_string()));
        if failed.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
            return Ok(None);
        }
        let mut error = None;
        let tracks = Tracks::of(events(raw.path(), &mut error).map_err(|e| fail(&e))?);
        let mut out = AtomicFile::create(&path).map_err(|e| fail(&e))?;
        out.write_all(b"[").map_err(|e| fail(&e))?;
        let mut first = true;
        let counts = post_process_into(
            events(raw.path(), &mut error).map_err(|e| fail(&e))?,
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
            Ok(counts)
        });
        match (counts, error) {
            (_, Some(e)) => Err(fail(&format!("the raw trace: {e}"))),
            (Err(e), None) => Err(fail(&e)),
            (Ok(counts), None) => out
                .commit()
                .map(|()| Some((counts.slices, counts.flows)))
                .map_err(|e| fail(&e)),
        }
        // `raw` (and `out`, when not committed) are removed as they drop.
    }
}

/// The raw trace's writer: the first error is recorded (and reported once on stderr), and
/// every later write is dropped as if written, so that `tracing-chrome`'s writer thread, which
/// panics on an error, never sees one.
struct SoftFail {
    inner: File,
    failed: Arc<Mutex<Option<String>>>,
    path: PathBuf,
    on_warning: Box<dyn Fn(&Warning) + Send>,
}

impl SoftFail {
    /// `result`, or, on the first error, that error recorded and reported.
    fn absorb<T>(&mut self, result: std::io::Result<T>, ok: T) -> std::io::Result<T> {
        let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        if failed.is_some() {
            return Ok(ok);
        }
        match result {
            Ok(v) => Ok(v),
            Err(e) => {
                let message = e.to_string();
                (self.on_warning)(&Warning::TraceStopped(trace_error(&self.path, e.into())));
                *failed = Some(message);
                Ok(ok)
            }
        }
    }
}

impl Write for SoftFail {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let done = self
            .failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some();
        let result = match done {
            true => Ok(buf.len()),
            false => self.inner.write(buf),
        };
        self.absorb(result, buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let result = self.inner.flush();
        self.absorb(result, ())
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
