//! The metrics file, `run.csv` or `run.jsonl`: one row per optimizer step.
//!
//! ```text
//! step,loss,lr,samples_per_sec,wall_ms,bubble,all_reduce_ms,grad_norm,skipped,stage0_compute_ms,...
//! 1,2.406145,0.01,2241.0,7.14,0.435,0.012,1.0318,0,2.28,...
//! ```
//!
//! Times of an optimizer step are summed over its accumulated batches; `bubble` is the mean
//! over the stages of replica 0 of idle / (compute + idle).
//!
//! The file is written as every output is ([`crate::engine::output`]): rows go to an
//! exclusive temp file beside it, flushed after every row, and [`Metrics::finish`] renames it
//! into place when the run ends, whether it finished, failed or was stopped by a signal — so
//! the path holds the previous file or every finished step, never a part. At each checkpoint
//! but the last, [`Metrics::publish`] also puts the rows so far in place (a copy of the temp
//! file, synced and renamed), so that a crash that runs nothing at the end (`kill -9`, a power
//! cut) leaves every row up to the checkpoint a resume continues from. A resumed run keeps
//! the earlier run's rows up to the resumed step and the new ones follow (a CSV whose columns
//! differ is refused). A write that fails (a full disk) is reported once (a [`Warning`]) and
//! ends the metrics, not the training.

use crate::RunError;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use pipetrain_engine::output::AtomicFile;
use serde_json::{Map, Value, json};

use crate::trainer::{StepRecord, Warning};
use crate::{Error, RunFile, RunFileProblem};

/// One optimizer step's row.
#[derive(Clone, Debug, Default)]
pub struct Row {
    /// Optimizer step, from 1.
    pub step: u64,
    /// Mean loss over the step's batches.
    pub loss: f64,
    /// Learning rate.
    pub lr: f64,
    /// Training samples per second of wall time.
    pub samples_per_sec: f64,
    /// Wall time of the step's batches, in ms.
    pub wall_ms: f64,
    /// Bubble fraction of replica 0 (mean over its stages).
    pub bubble: f64,
    /// Time in all-reduce, in ms.
    pub all_reduce_ms: f64,
    /// The global gradient norm before clipping (NaN on a step without one).
    pub grad_norm: f64,
    /// Steps skipped for a non-finite loss or gradient so far (`skip_nonfinite`).
    pub skipped: u64,
    /// `(compute_ms, idle_ms)` of each stage of replica 0.
    pub stages: Vec<(f64, f64)>,
}

impl Row {
    /// The row of a finished step.
    pub fn of(record: &StepRecord) -> Self {
        let t = &record.totals;
        Row {
            step: record.step,
            loss: t.loss,
            lr: record.lr,
            samples_per_sec: record.samples_per_sec,
            wall_ms: t.wall.as_secs_f64() * 1e3,
            bubble: t.bubble(),
            all_reduce_ms: t.all_reduce.as_secs_f64() * 1e3,
            grad_norm: t.grad_norm.unwrap_or(f64::NAN),
            skipped: record.skipped,
            stages: t
                .stages
                .iter()
                .map(|(c, i)| (c.as_secs_f64() * 1e3, i.as_secs_f64() * 1e3))
                .collect(),
        }
    }

    /// Column names and values, in file order.
    fn fields(&self) -> Vec<(String, f64)> {
        let mut f = vec![
            ("step".to_string(), self.step as f64),
            ("loss".into(), self.loss),
            ("lr".into(), self.lr),
            ("samples_per_sec".into(), self.samples_per_sec),
            ("wall_ms".into(), self.wall_ms),
            ("bubble".into(), self.bubble),
            ("all_reduce_ms".into(), self.all_reduce_ms),
            ("grad_norm".into(), self.grad_norm),
            ("skipped".into(), self.skipped as f64),
        ];
        for (s, (compute, idle)) in self.stages.iter().enumerate() {
            f.push((format!("stage{s}_compute_ms"), *compute));
            f.push((format!("stage{s}_idle_ms"), *idle));
        }
        f
    }
}

/// Metrics file formats, by extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `.csv`: a header, then one line of values per step.
    Csv,
    /// `.jsonl`: one JSON object per step.
    Jsonl,
}

/// Longest line read back from an earlier run's metrics file: a row of a few hundred stages.
const MAX_LINE: u64 = 1 << 20;

/// An open metrics file.
pub struct Metrics {
    path: PathBuf,
    format: Format,
    /// The temp file being written; `None` once a write failed.
    out: Option<AtomicFile>,
    rows: usize,
    /// A resumed run: the earlier file's rows before the first new step are copied first.
    append: bool,
    /// What went wrong since [`Metrics::take_warnings`] was last called.
    warnings: Vec<Warning>,
}

impl Metrics {
    /// Starts the metrics file `path`; its extension picks the format. With `append` (a
    /// resumed run), the rows of an existing file up to the resumed step are kept.
    ///
    /// # Errors
    /// [`RunError::RunFile`](crate::RunError::RunFile): an extension other than `.csv` or `.jsonl` ([`RunFileProblem::MetricsFormat`]),
    /// a path that is not a regular file (a FIFO, a device, a symbolic link) or not in a
    /// writable directory, or another I/O error ([`RunFileProblem::Output`]).
    pub fn create(path: &Path, append: bool) -> Result<Self, Error> {
        let format = Self::check_format(path)?;
        let out = AtomicFile::create(path).map_err(|e| failed(path, RunFileProblem::Output(e)))?;
        Ok(Self {
            path: path.to_path_buf(),
            format,
            out: Some(out),
            rows: 0,
            append: append && path.is_file(),
            warnings: Vec::new(),
        })
    }

    /// The format `path`'s extension names, checked before anything is written.
    ///
    /// # Errors
    /// [`RunFileProblem::MetricsFormat`]: an extension other than `.csv` or `.jsonl`.
    pub fn check_format(path: &Path) -> Result<Format, Error> {
        match path.extension().and_then(|e| e.to_str()) {
            Some("csv") => Ok(Format::Csv),
            Some("jsonl") => Ok(Format::Jsonl),
            _ => Err(failed(path, RunFileProblem::MetricsFormat)),
        }
    }

    /// The warnings of failed writes since the last call (each failure is reported once).
    pub fn take_warnings(&mut self) -> Vec<Warning> {
        std::mem::take(&mut self.warnings)
    }

    /// Appends one row (after the CSV header, written with the first row). A failed write is
    /// reported once ([`take_warnings`](Self::take_warnings)) and ends the metrics file (the
    /// path keeps its earlier file); training goes on.
    ///
    /// # Errors
    /// [`RunFileProblem::MetricsEarlier`]: the first row of a resumed run whose CSV columns differ
    /// from the earlier run's.
    pub fn write(&mut self, row: &Row) -> Result<(), Error> {
        let Some(out) = self.out.as_mut() else {
            return Ok(());
        };
        let fields = row.fields();
        let names: Vec<&str> = fields.iter().map(|(n, _)| n.as_str()).collect();
        let header = names.join(",");
        if std::mem::take(&mut self.append) {
            match copy_earlier(&self.path, self.format, &header, row.step, out) {
                Ok(copied) => self.rows += copied,
                Err(Earlier::Refused(why)) => {
                    self.out = None;
                    return Err(failed(&self.path, RunFileProblem::MetricsEarlier(why)));
                }
                Err(Earlier::Io(e)) => {
                    self.fail(e);
                    return Ok(());
                }
            }
        }
        let result = match self.format {
            Format::Csv => {
                let mut text = String::new();
                if self.rows == 0 {
                    text += &header;
                    text.push('\n');
                }
                let values: Vec<String> = fields.iter().map(|(_, v)| v.to_string()).collect();
                text += &values.join(",");
                text.push('\n');
                out.write_all(text.as_bytes())
            }
            Format::Jsonl => {
                let object: Map<String, Value> = fields
                    .into_iter()
                    .map(|(n, v)| {
                        let v = if n == "step" || n == "skipped" {
                            json!(v as u64)
                        } else {
                            json!(v)
                        };
                        (n, v)
                    })
                    .collect();
                writeln!(out, "{}", Value::Object(object))
            }
        };
        self.rows += 1;
        if let Err(e) = result.and_then(|()| out.flush()) {
            self.fail(e);
        }
        Ok(())
    }

    /// Before the first step of a resumed run: refuses to continue an earlier CSV whose
    /// columns differ from the rows of this run, whose replica 0 has `stages` stages (the
    /// file is left as it was).
    ///
    /// # Errors
    /// [`RunFileProblem::MetricsEarlier`]: the columns differ, or the earlier file is not a
    /// metrics file.
    pub fn check_columns(&mut self, stages: usize) -> Result<(), Error> {
        if !self.append || self.format != Format::Csv {
            return Ok(());
        }
        let checked = File::open(&self.path)
            .map_err(Earlier::Io)
            .and_then(|f| next_line(&mut BufReader::new(f), 1))
            .and_then(|line| match line {
                Some(line) => same_columns(&line, &header_of(stages)),
                None => Ok(()),
            });
        match checked {
            Ok(()) => Ok(()),
            Err(Earlier::Refused(why)) => {
                self.out = None;
                Err(failed(&self.path, RunFileProblem::MetricsEarlier(why)))
            }
            Err(Earlier::Io(e)) => {
                self.fail(e);
                Ok(())
            }
        }
    }

    /// Renames the rows written into place (see the module docs). Returns the warning when
    /// that fails; the earlier file is then left as it was.
    pub fn finish(self) -> Option<Warning> {
        let out = self.out?;
        let path = self.path;
        out.commit()
            .err()
            .map(|e| Warning::NotWritten(failed(&path, RunFileProblem::Output(e))))
    }

    /// Puts the rows written so far in place at the path, whole (a copy of the temp file,
    /// written atomically: synced, then renamed), while the run goes on writing the temp file.
    /// Called after each checkpoint, so that a crash leaves the metrics of the checkpoint it
    /// resumes from, where the rows lived only in a hidden temp file until the run ended. A
    /// failed write is reported once and ends the metrics file, as [`write`](Self::write)'s.
    pub fn publish(&mut self) {
        let Some(out) = self.out.as_mut() else {
            return;
        };
        let copied = out
            .flush()
            .and_then(|()| std::fs::read(out.temp_path()))
            .and_then(|rows| {
                pipetrain_engine::output::write_atomically(&self.path, &rows)
                    .map_err(std::io::Error::other)
            });
        if let Err(e) = copied {
            self.fail(e);
        }
    }

    /// Reports the failed write `e` once and drops the temp file.
    fn fail(&mut self, e: std::io::Error) {
        self.out = None;
        let error = failed(&self.path, e.into());
        self.warnings.push(Warning::MetricsStopped(error));
    }
}

/// The metrics file's error at `path`.
fn failed(path: &Path, reason: RunFileProblem) -> Error {
    Error::Run(RunError::RunFile {
        file: RunFile::Metrics,
        path: path.to_path_buf(),
        reason,
    })
}

/// Why an earlier run's metrics could not be continued.
enum Earlier {
    /// Not this run's kind of file.
    Refused(String),
    /// Reading it or writing the copy failed.
    Io(std::io::Error),
}

/// Line `number` of `reader` (from 1), at most [`MAX_LINE`] bytes; `None` at the end.
fn next_line(reader: &mut impl BufRead, number: usize) -> Result<Option<String>, Earlier> {
    let mut line = String::new();
    let n = reader
        .take(MAX_LINE)
        .read_line(&mut line)
        .map_err(Earlier::Io)?;
    if !line.ends_with('\n') && n as u64 == MAX_LINE {
        return Err(Earlier::Refused(format!(
            "line {number} of the earlier run's file is over {MAX_LINE} bytes: not a metrics file"
        )));
    }
    Ok((n > 0).then_some(line))
}

/// The earlier run's CSV header `earlier` is this run's `header`.
fn same_columns(earlier: &str, header: &str) -> Result<(), Earlier> {
    if earlier.trim_end() == header {
        return Ok(());
    }
    Err(Earlier::Refused(format!(
        "the earlier run's columns ({} of them) differ from this run's ({}): another layout or \
         model",
        earlier.split(',').count(),
        header.split(',').count()
    )))
}

/// The CSV header of rows with `stages` stages.
fn header_of(stages: usize) -> String {
    let row = Row {
        stages: vec![(0.0, 0.0); stages],
        ..Row::default()
    };
    let fields = row.fields();
    let names: Vec<&str> = fields.iter().map(|(n, _)| n.as_str()).collect();
    names.join(",")
}

/// Copies the rows of the metrics file at `path` whose step is before `step` to `out` (with
/// the CSV header, which must be `header`). Returns the number of lines copied.
fn copy_earlier(
    path: &Path,
    format: Format,
    header: &str,
    step: u64,
    out: &mut AtomicFile,
) -> Result<usize, Earlier> {
    let mut reader = BufReader::new(File::open(path).map_err(Earlier::Io)?);
    let mut copied = 0;
    for number in 1.. {
        let Some(line) = next_line(&mut reader, number)? else {
            break;
        };
        let text = line.trim_end();
        if text.is_empty() {
            continue;
        }
        let row_step = match format {
            Format::Csv if number == 1 => {
                same_columns(text, header)?;
                None
            }
            Format::Csv => text.split(',').next().and_then(|s| s.parse::<u64>().ok()),
            Format::Jsonl => serde_json::from_str::<Value>(text)
                .ok()
                .and_then(|v| v.get("step").and_then(Value::as_u64)),
        };
        match (number, row_step) {
            (1, None) if format == Format::Csv => {}
            (_, None) => {
                return Err(Earlier::Refused(format!(
                    "line {number} of the earlier run's file is not a metrics row"
                )));
            }
            (_, Some(s)) if s >= step => continue,
            _ => {}
        }
        writeln!(out, "{text}").map_err(Earlier::Io)?;
        copied += 1;
    }
    Ok(copied)
}
