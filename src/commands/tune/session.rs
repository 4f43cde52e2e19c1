//! A whole tune session, as `pipetrain tune` runs it: the cost table (read from the cache and
//! re-anchored by one check run, or measured and cached), the ranking, trial runs of the top
//! candidates, and the winner.

use crate::{BuildError, CommandError};
use std::path::PathBuf;
use std::time::Instant;

use burn::prelude::*;
use pipetrain_engine::{Batch, Layer, OptimizerConfig};
use pipetrain_tune::{CostTable, Ranking, Space, search};

use super::cache;
use super::measure::{Calibration, drift, measure};
use super::trial::{Trial, trials};
use crate::commands::bench::{CpuSnapshot, cpu_model};
use crate::error::{Error, Result};

/// What a tune session searches, measures and runs.
#[derive(Clone, Debug)]
pub struct TuneSettings {
    /// The configurations searched ([`default_space`](super::default_space), narrowed).
    pub space: Space,
    /// The model's description (`MLP-3x16, 10 classes`): part of the cost table's cache key.
    pub model: String,
    /// The optimizer every measurement and trial steps with.
    pub optimizer: OptimizerConfig,
    /// The optimizer's name as the cache key holds it (`sgd`, `adam`).
    pub optimizer_name: String,
    /// Learning rate of the trial runs.
    pub learning_rate: f64,
    /// How many of the top-ranked candidates to run (0: none; the top prediction wins).
    pub runs: usize,
    /// Timed steps of each trial run ([`trials`]).
    pub run_steps: usize,
    /// Where measured cost tables are cached ([`cache_dir`](super::cache_dir)); `None`: measure
    /// and cache nothing.
    pub cache_dir: Option<PathBuf>,
    /// Measure again even when the cache holds a table (and replace it).
    pub remeasure: bool,
    /// How long the measurement runs ([`Calibration::default`] for the CLI's).
    pub calibration: Calibration,
    /// The other files of the command, by the names their user knows them by (its data
    /// set's files, its config, its applied file): the cache file is an output, and may be
    /// none of them (issue 47's rule; checked with the `trainer` feature).
    pub files: Vec<(String, PathBuf)>,
}

/// Where the cost table came from.
#[derive(Clone, Debug)]
pub enum TableSource {
    /// Read from the cache, its times scaled by `factor` after a check run.
    Cached {
        /// The cache file.
        path: PathBuf,
        /// How much slower (> 1) the machine runs the model now than when it was measured.
        factor: f64,
    },
    /// Measured now.
    Measured {
        /// The rows per micro-batch measured.
        rows: Vec<usize>,
        /// Seconds the measurement took.
        seconds: f64,
        /// Cores other processes kept busy meanwhile (None without `/proc`).
        others: Option<f64>,
        /// The cache file it was written to, or why it could not be (`None`: no cache).
        cached: Option<std::result::Result<PathBuf, String>>,
    },
}

/// What a tune session reports while it runs.
#[derive(Debug)]
pub enum TuneProgress<'a> {
    /// The cost table is ready.
    CostTable(&'a TableSource),
    /// The configurations are ranked; the trial runs (if any) start next.
    Ranked(&'a Ranking),
}

/// What a tune session found.
#[derive(Clone, Debug)]
pub struct TuneReport {
    /// Where the cost table came from.
    pub source: TableSource,
    /// Every configuration: ranked by predicted samples/s, equivalent, or left out.
    pub ranking: Ranking,
    /// The trial runs of the first [`TuneSettings::runs`] candidates, in rank order.
    pub trials: Vec<Trial>,
    /// Cores other processes kept busy during the trial runs.
    pub trials_others: Option<f64>,
    /// Index into `ranking.candidates` of the winner: the fastest trial run, or the top
    /// prediction without runs.
    pub winner: usize,
}

impl TuneReport {
    /// The winning configuration.
    pub fn winner(&self) -> &pipetrain_tune::Candidate {
        &self.ranking.candidates[self.winner]
    }
}

/// Tunes `layers` on `device` with `batches` (each of `settings.space.batch` rows; the first is
/// measured, the trial runs cycle through all): cost table, ranking, trial runs, winner.
///
/// # Errors
/// A failed measurement or trial run; [`CommandError::TuneNothingFits`](crate::CommandError::TuneNothingFits) when no configuration fits.
pub fn tune<L: Layer>(
    layers: &[L],
    batches: &[Batch],
    settings: &TuneSettings,
    device: &Device,
    progress: &mut dyn FnMut(TuneProgress<'_>),
) -> Result<TuneReport> {
    let first = batches
        .first()
        .ok_or(Error::Build(BuildError::NoTuneBatch))?;
    let (table, source) = cost_table(layers, first, settings, device)?;
    progress(TuneProgress::CostTable(&source));
    let ranking = search(&table, &settings.space)?;
    progress(TuneProgress::Ranked(&ranking));
    if ranking.candidates.is_empty() {
        return Err(Error::Command(CommandError::TuneNothingFits {
            left_out: ranking
                .infeasible
                .iter()
                .take(5)
                .map(|i| format!("  {}: {}", i.knobs, i.reason))
                .collect(),
        }));
    }
    let runs = settings.runs.min(ranking.candidates.len());
    let cpu = CpuSnapshot::now();
    let measured = match runs {
        0 => Vec::new(),
        _ => trials(
            &ranking.candidates[..runs],
            layers,
            batches,
            &settings.optimizer,
            settings.learning_rate,
            settings.run_steps,
        )?,
    };
    let trials_others = cpu.others_until(&CpuSnapshot::now());
    let winner = measured
        .iter()
        .enumerate()
        .fold(None, |best: Option<(usize, f64)>, (i, t)| match best {
            Some((_, rate)) if rate >= t.samples_per_sec => best,
            _ => Some((i, t.samples_per_sec)),
        })
        .map_or(0, |(i, _)| i);
    Ok(TuneReport {
        source,
        ranking,
        trials: measured,
        trials_others,
        winner,
    })
}

/// The cached table for this model, batch, optimizer and space on this machine, or a fresh
/// measurement (then cached).
fn cost_table<L: Layer>(
    layers: &[L],
    batch: &Batch,
    settings: &TuneSettings,
    device: &Device,
) -> Result<(CostTable, TableSource)> {
    let space = &settings.space;
    let rows = space.rows_in_play(layers.len());
    let key = format!(
        "{} | batch {} | {} | {} workers | rows {rows:?} | schedules {:?} | {} | pipetrain {}",
        settings.model,
        space.batch,
        settings.optimizer_name,
        space.workers,
        space
            .schedules
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        cpu_model(),
        env!("CARGO_PKG_VERSION")
    );
    let path = settings
        .cache_dir
        .as_deref()
        .map(|dir| cache::path(dir, &key));
    #[cfg(feature = "trainer")]
    if let Some(path) = &path {
        let files: Vec<(&str, Option<&std::path::Path>)> = settings
            .files
            .iter()
            .map(|(name, file)| (name.as_str(), Some(file.as_path())))
            .collect();
        crate::trainer::paths::distinct(&files, &[("tune cache", Some(path.as_path()))], &[])?;
    }
    if let Some(path) = &path {
        // The cache file is an output: a FIFO there would block the read for ever, and nothing
        // but a regular file of ours may be replaced (a missing directory is created later).
        match crate::engine::output::regular_or_absent(path) {
            Ok(()) | Err(crate::engine::EngineError::NoDirectory { .. }) => {}
            Err(e) => {
                return Err(Error::Run(crate::RunError::Path {
                    name: "tune cache".to_string(),
                    path: path.clone(),
                    problem: crate::PathProblem::Output(e),
                }));
            }
        }
    }
    if let Some(path) = &path
        && !settings.remeasure
        && let Some(mut table) = cache::load(path, &key, &rows)?
    {
        // The machine's speed drifts (other tenants, clocks): re-anchor the cached times with
        // one check run.
        let factor = drift(&table, layers, batch, &settings.optimizer, device)?;
        table.scale(factor);
        let path = path.clone();
        return Ok((table, TableSource::Cached { path, factor }));
    }
    let (t, cpu) = (Instant::now(), CpuSnapshot::now());
    let table = measure(
        layers,
        batch,
        space,
        &settings.optimizer,
        device,
        settings.calibration,
    )?;
    let (seconds, others) = (
        t.elapsed().as_secs_f64(),
        cpu.others_until(&CpuSnapshot::now()),
    );
    let cached = path.map(|path| {
        cache::store(&path, &key, &table)
            .map(|()| path.clone())
            .map_err(|e| format!("{}: {e}", path.display()))
    });
    let source = TableSource::Measured {
        rows,
        seconds,
        others,
        cached,
    };
    Ok((table, source))
}
