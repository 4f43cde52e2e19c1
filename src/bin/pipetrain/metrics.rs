//! `--metrics run.csv` / `run.jsonl`: one row per optimizer step.
//!
//! ```text
//! step,loss,lr,samples_per_sec,wall_ms,bubble,all_reduce_ms,grad_norm,skipped,stage0_compute_ms,...
//! 1,2.406145,0.01,2241.0,7.14,0.435,0.012,1.0318,0,2.28,...
//! ```
//!
//! Times of an optimizer step are summed over its `--accumulate` batches; `bubble` is the mean
//! over the stages of replica 0 of idle / (compute + idle). The file is flushed after every
//! row, so a run that stops early leaves every finished step.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::failure::Failure;

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
    /// Steps skipped for a non-finite loss or gradient so far (`--skip-nonfinite`).
    pub skipped: u64,
    /// `(compute_ms, idle_ms)` of each stage of replica 0.
    pub stages: Vec<(f64, f64)>,
}

impl Row {
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

/// File formats, by extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Csv,
    Jsonl,
}

/// An open metrics file.
pub struct Metrics {
    path: PathBuf,
    format: Format,
    out: BufWriter<File>,
    rows: usize,
}

impl Metrics {
    /// Creates `path`; its extension picks the format.
    ///
    /// # Errors
    /// An extension other than `.csv` or `.jsonl` (usage), or a file that cannot be created
    /// (runtime).
    pub fn create(path: &Path) -> Result<Self, Failure> {
        let format = match path.extension().and_then(|e| e.to_str()) {
            Some("csv") => Format::Csv,
            Some("jsonl") => Format::Jsonl,
            _ => {
                return Err(Failure::usage(format!(
                    "--metrics {}: unknown format; name the file *.csv or *.jsonl",
                    path.display()
                )));
            }
        };
        let file = File::create(path)
            .map_err(|e| Failure::runtime(format!("--metrics {}: {e}", path.display())))?;
        Ok(Self {
            path: path.to_path_buf(),
            format,
            out: BufWriter::new(file),
            rows: 0,
        })
    }

    /// Appends one row (after the CSV header, written with the first row).
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn write(&mut self, row: &Row) -> Result<(), String> {
        let fields = row.fields();
        let result = match self.format {
            Format::Csv => {
                let mut text = String::new();
                if self.rows == 0 {
                    let names: Vec<&str> = fields.iter().map(|(n, _)| n.as_str()).collect();
                    text += &names.join(",");
                    text.push('\n');
                }
                let values: Vec<String> = fields.iter().map(|(_, v)| v.to_string()).collect();
                text += &values.join(",");
                text.push('\n');
                self.out.write_all(text.as_bytes())
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
                writeln!(self.out, "{}", Value::Object(object))
            }
        };
        self.rows += 1;
        result
            .and_then(|()| self.out.flush())
            .map_err(|e| format!("--metrics {}: {e}", self.path.display()))
    }
}
