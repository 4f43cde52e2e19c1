//! Running a CPU bench: pick the rows, run them (ours, then the peer's, row by row, for every
//! repetition), and set each against its references: the [`Line`]s [`render`](super::render)
//! prints.

use crate::CommandError;
use std::collections::BTreeSet;

use super::configs::{self, BenchModel, Row, Shape, Workload};
use super::measure::{self, Measured};
use super::peers::PeerResult;
use super::settings::BenchSettings;
use super::table::{self, Line};
use crate::error::{Error, Result};

/// What a bench reports while it runs, for a progress display.
#[derive(Clone, Debug)]
pub enum Progress {
    /// The MPI rows are left out, and why.
    MpiLeftOut(String),
    /// One of our rows ran.
    Row {
        /// Rows run so far, this one included (over every repetition).
        done: usize,
        /// Rows to run in all.
        total: usize,
        /// The row's label.
        label: String,
        /// Its median samples/s.
        samples_per_sec: f64,
    },
    /// A row's PyTorch peer ran: its median samples/s, or why it gave none.
    Peer {
        /// The peer's script.
        script: String,
        /// Its median samples/s, or why there is none.
        result: std::result::Result<f64, String>,
    },
}

/// What a CPU bench measured: the document's rows and why the MPI rows are missing, if they are.
#[derive(Clone, Debug)]
pub struct BenchReport {
    /// The model and data every row trained.
    pub workload: Workload,
    /// Each row, measured, with its limit, ceiling and peer.
    pub lines: Vec<Line>,
    /// Why the MPI rows were left out, if they were.
    pub mpi_left_out: Option<String>,
}

/// Runs the bench `settings` describe on this machine's CPU, reporting each row through
/// `progress` as it finishes.
///
/// # Errors
/// [`CommandError::BenchZero`](crate::CommandError::BenchZero), [`CommandError::BenchBatchSplit`](crate::CommandError::BenchBatchSplit) or [`CommandError::BenchNoRow`](crate::CommandError::BenchNoRow) for settings no
/// row can run with (before anything runs); [`CommandError::BenchRow`](crate::CommandError::BenchRow) when one of our rows fails.
pub fn run(settings: &BenchSettings, progress: &mut dyn FnMut(Progress)) -> Result<BenchReport> {
    settings.check()?;
    let workload = settings.workload();
    let mpi = match &settings.mpi_binary {
        Some(_) => super::mpi::available(),
        None => Err("no pipetrain binary to start under mpirun was given".to_string()),
    };
    if let Err(why) = &mpi {
        progress(Progress::MpiLeftOut(why.clone()));
    }
    let rows = select(settings, mpi.is_ok())?;
    // The CPU peers run fp32 only: beside bf16 rows they would compare other arithmetic.
    let peers = settings
        .peers
        .as_ref()
        .filter(|_| !settings.precision.casts());
    let mut ours: Vec<Measured> = vec![Measured::default(); rows.len()];
    let mut theirs: Vec<Vec<std::result::Result<PeerResult, String>>> =
        vec![Vec::new(); rows.len()];
    let total = rows.len() * settings.reps;
    for rep in 0..settings.reps {
        for (i, row) in rows.iter().enumerate() {
            let measured = measure::run_row(&row.shape, &workload, settings.mpi_binary.as_deref())
                .map_err(|reason| {
                    Error::Command(CommandError::BenchRow {
                        row: row.label(),
                        reason,
                    })
                })?;
            progress(Progress::Row {
                done: rep * rows.len() + i + 1,
                total,
                label: row.label(),
                samples_per_sec: table::median(&measured.rates),
            });
            ours[i].merge(measured);
            if let (Some(peers), Some(peer)) = (peers, &row.peer) {
                let mut peer = peer.clone();
                if row.shape.model() == BenchModel::Llama {
                    // The same model on the PyTorch side: the workload's width.
                    peer.args
                        .extend(configs::llama_peer_args(workload.llama_width));
                }
                let result = peers.run(&peer, &workload);
                progress(Progress::Peer {
                    script: peer.script.to_string(),
                    result: result.as_ref().map(|r| r.median).map_err(Clone::clone),
                });
                theirs[i].push(result);
            }
        }
    }
    Ok(BenchReport {
        lines: lines(&rows, ours, theirs, workload.batch),
        workload,
        mpi_left_out: mpi.err(),
    })
}

/// The rows to run, in order: the single-device and independent-worker rows the others'
/// limits need (and any `only` names), then the configurations.
fn select(args: &BenchSettings, mpi: bool) -> Result<Vec<Row>> {
    let batch = args.batch;
    let matches = |row: &Row| {
        args.only
            .as_ref()
            .is_none_or(|only| row.label().to_lowercase().contains(&only.to_lowercase()))
    };
    // A row that cuts more chunks than the model has layers (hidden blocks + head) cannot run.
    let all: Vec<Row> = super::rows::rows(&args.micro_batches, args.threads, mpi)
        .into_iter()
        .filter(|r| match r.shape.model() {
            BenchModel::Mlp => r.shape.chunks() <= args.hidden_layers + 1,
            BenchModel::Gpt => args.gpt_width > 0,
            BenchModel::Llama => args.llama_width > 0,
        })
        .collect();
    let mut main: Vec<Row> = all.iter().filter(|r| matches(r)).cloned().collect();
    // An MPI row is read against the same layout in this process: that row runs too.
    let twins: Vec<Row> = all
        .iter()
        .filter(|r| {
            !main.contains(r)
                && main
                    .iter()
                    .any(|m| m.shape.processes() > 1 && m.shape.in_process() == r.shape)
        })
        .cloned()
        .collect();
    main.splice(0..0, twins);
    for row in main.iter().filter(|r| r.shape.is_mlp()) {
        if let Some(layout) = row.shape.layout()
            && batch % layout.parts() != 0
        {
            return Err(Error::Command(CommandError::BenchBatchSplit {
                batch,
                replicas: layout.replicas(),
                micro_batches: layout.micro_batches(),
                row: row.label(),
            }));
        }
    }
    // Rows per micro-batch of every single-device reference, and (workers, rows) of every
    // independent-workers reference.
    let mut singles: BTreeSet<usize> = BTreeSet::new();
    let mut independents: BTreeSet<(usize, usize)> = BTreeSet::new();
    for row in main.iter().filter(|r| r.shape.is_mlp()) {
        let rows = row.shape.rows_per_micro_batch(batch);
        singles.insert(rows);
        if row.shape.workers() > 1 {
            independents.insert((row.shape.workers(), rows));
        }
    }
    // The whole batch at once is everyone's baseline; every micro-batch count is a row too.
    singles.insert(batch);
    for &m in &args.micro_batches {
        if batch % m == 0 {
            singles.insert(batch / m);
        }
    }
    let mut refs: Vec<Row> = singles
        .iter()
        .rev()
        .map(|&rows| configs::single(batch, rows, args.threads))
        .collect();
    refs.extend(
        independents
            .iter()
            .rev()
            .map(|&(workers, rows)| configs::independent(batch, workers, rows)),
    );
    let needed = |row: &Row| {
        args.only.is_none()
            || matches(row)
            || main.iter().filter(|m| m.shape.is_mlp()).any(|m| {
                let rows = m.shape.rows_per_micro_batch(batch);
                let r = row.shape.rows_per_micro_batch(batch);
                rows == r && (row.shape.workers() == 1 || row.shape.workers() == m.shape.workers())
            })
    };
    let mut rows: Vec<Row> = refs.into_iter().filter(|r| needed(r)).collect();
    rows.extend(main);
    if rows.is_empty() {
        return Err(Error::Command(CommandError::BenchNoRow {
            only: args.only.clone().unwrap_or_default(),
            rows: all.iter().map(Row::label).collect(),
        }));
    }
    Ok(rows)
}

/// Each row with its limit and ceiling (from the reference rows) and its peer's pooled result.
fn lines(
    rows: &[Row],
    ours: Vec<Measured>,
    theirs: Vec<Vec<std::result::Result<PeerResult, String>>>,
    batch: usize,
) -> Vec<Line> {
    let median_of = |want: &dyn Fn(&Shape) -> bool| {
        rows.iter()
            .zip(&ours)
            .find(|(r, _)| want(&r.shape))
            .map(|(_, m)| table::median(&m.rates))
    };
    rows.iter()
        .zip(ours.iter())
        .zip(theirs)
        .map(|((row, measured), peer)| {
            let shape = row.shape;
            let rows_mb = shape.rows_per_micro_batch(batch);
            let workers = shape.workers();
            let is_single = matches!(
                shape,
                Shape::Pipeline {
                    replicas: 1,
                    stages: 1,
                    ..
                }
            );
            let single = median_of(&|s: &Shape| {
                matches!(
                    s,
                    Shape::Pipeline {
                        replicas: 1,
                        stages: 1,
                        threads: None,
                        ..
                    }
                ) && s.rows_per_micro_batch(batch) == rows_mb
            });
            // The GPT rows have no single-device or independent reference rows.
            let is_single = is_single || !shape.is_mlp();
            let limit = (!is_single)
                .then(|| single.map(|t| workers as f64 * t * shape.bubble_bound()))
                .flatten();
            let ceiling =
                (workers > 1 && shape.is_mlp() && !matches!(shape, Shape::Independent { .. }))
                    .then(|| {
                        median_of(&|s: &Shape| {
                            matches!(s, Shape::Independent { .. })
                                && s.workers() == workers
                                && s.rows_per_micro_batch(batch) == rows_mb
                        })
                        .map(|t| t * shape.bubble_bound())
                    })
                    .flatten();
            Line {
                row: row.clone(),
                ours: measured.clone(),
                limit,
                ceiling,
                peer: pool(peer),
            }
        })
        .collect()
}

/// A row's peer runs as one: median of medians, min of mins, max of maxes, the busiest
/// `others`; the first failure if none succeeded; `None` if the row had no peer run.
fn pool(
    runs: Vec<std::result::Result<PeerResult, String>>,
) -> Option<std::result::Result<PeerResult, String>> {
    let first_error = runs.iter().find_map(|r| r.as_ref().err().cloned());
    let ok: Vec<PeerResult> = runs.into_iter().filter_map(Result::ok).collect();
    if ok.is_empty() {
        return first_error.map(Err);
    }
    let medians: Vec<f64> = ok.iter().map(|r| r.median).collect();
    Some(Ok(PeerResult {
        median: table::median(&medians),
        min: ok.iter().map(|r| r.min).fold(f64::INFINITY, f64::min),
        max: ok.iter().map(|r| r.max).fold(0.0, f64::max),
        others: ok.iter().filter_map(|r| r.others).reduce(f64::max),
    }))
}
