//! Applying the search: [`choose`] the fastest feasible configuration for a model, and the
//! builder methods that take it ([`PipelineBuilder::configure`], [`PipelineBuilder::auto`]).

use crate::BuildError;
use burn::prelude::*;
use pipetrain_engine::{Batch, Layer, OptimizerConfig, Remat};
use pipetrain_schedules::{ScheduleKind, Zero};
use pipetrain_tune::{Candidate, Recompute, Space, TuneError, search};

use super::measure::{Calibration, measure};
use crate::builder::PipelineBuilder;
use crate::error::{Error, Result};

/// The space `auto` searches: `batch` rows per step on `workers` workers (one thread each),
/// every schedule (1F1B, GPipe, ZB-H1, interleaved, looped BFS and interleaved zero bubble
/// with 2 chunks, ZB-V, DualPipeV, V-Min, V-Half, ZB-2P), every
/// re-materialization mode, up to 32 micro-batches.
pub fn default_space(batch: usize, workers: usize, memory_budget: Option<u64>) -> Space {
    Space {
        batch,
        workers,
        memory_budget,
        schedules: vec![
            ScheduleKind::OneFOneB,
            ScheduleKind::GPipe,
            ScheduleKind::ZbH1,
            ScheduleKind::Interleaved { virtual_stages: 2 },
            ScheduleKind::ZbV,
            ScheduleKind::LoopedBfs { virtual_stages: 2 },
            ScheduleKind::InterleavedZb { virtual_stages: 2 },
            ScheduleKind::DualPipeV,
            ScheduleKind::VMin,
            ScheduleKind::VHalf,
            ScheduleKind::Zb2p,
        ],
        remats: Recompute::ALL.to_vec(),
        zeros: vec![Zero::Off, Zero::OptimizerState, Zero::Parameters],
        max_micro_batches: 32,
    }
}

/// Measures `layers` on `device` (rows cut from `batch`) and returns the configuration of
/// `space` the simulator predicts fastest among those that fit its budget.
///
/// # Errors
/// A measurement failure, or [`TuneError::NothingFits`] naming the closest configuration.
pub fn choose<L: Layer>(
    layers: &[L],
    batch: &Batch,
    space: &Space,
    optimizer: &OptimizerConfig,
    device: &Device,
) -> Result<Candidate> {
    let table = measure(
        layers,
        batch,
        space,
        optimizer,
        device,
        Calibration::default(),
    )?;
    let ranking = search(&table, space)?;
    if let Some(best) = ranking.best() {
        return Ok(best.clone());
    }
    let closest = ranking
        .infeasible
        .iter()
        .filter_map(|i| match i.reason {
            pipetrain_tune::Reason::OverBudget { needed, .. } => Some((needed, i.knobs)),
            _ => None,
        })
        .min_by_key(|(needed, _)| *needed);
    Err(match (closest, space.memory_budget) {
        (Some((needed, knobs)), Some(budget)) => TuneError::NothingFits {
            budget,
            closest: knobs.to_string(),
            needed,
        },
        _ => TuneError::EmptySpace {
            what: format!(
                "no configuration of {} layers on {} worker(s) for a batch of {}",
                layers.len(),
                space.workers,
                space.batch
            ),
            remedy: pipetrain_schedules::Remedy::sentence("allow more micro-batches or schedules"),
        },
    }
    .into())
}

impl<L: Layer> PipelineBuilder<L> {
    /// Sets what `candidate` chose: replicas, the split (its chunks' balance), micro-batches,
    /// schedule, re-materialization, one compute thread per worker.
    pub fn configure(self, candidate: &Candidate) -> Self {
        let k = candidate.knobs;
        self.replicas(k.replicas)
            .balance(candidate.partition.balance())
            .micro_batches(k.micro_batches)
            .schedule(k.schedule)
            .remat(match k.remat {
                Recompute::Never => Remat::Never,
                Recompute::ExceptLast => Remat::ExceptLast,
                Recompute::Always => Remat::Always,
            })
            .zero(k.zero.level())
            .threads_per_worker(1)
    }

    /// Chooses replicas × stages × micro-batches × schedule × re-materialization for these
    /// layers by measuring them on `batch` (a training batch: its rows are the step's) and
    /// searching [`default_space`] on this machine's cores (or the devices given) under
    /// `memory_budget` bytes per worker, then [`configure`](Self::configure)s the winner.
    /// Layers whose forward differs between training and inference (batch norm) need
    /// [`choose`] with a space of `Recompute::Never` only.
    ///
    /// ```
    /// use burn::prelude::*;
    /// use pipetrain::Pipeline;
    /// use pipetrain_models::{MlpConfig, synthetic};
    ///
    /// let device = Device::flex();
    /// let batch = synthetic::classification(0, 0, 16, 8, 4, &device);
    /// let mut pipeline = Pipeline::builder()
    ///     .layers(MlpConfig::new(8, 2, 4).init(&device))
    ///     .auto(&batch, Some(64 << 10))? // at most 64 KiB per worker
    ///     .build()?;
    /// let report = pipeline.train_step(&batch)?;
    /// let peak = pipeline.worker_memory(&report)?.iter().map(|w| w.total()).max().unwrap();
    /// assert!(peak <= 64 << 10);
    /// # Ok::<(), pipetrain::Error>(())
    /// ```
    ///
    /// # Errors
    /// No layers set, a measurement failure, or nothing that fits the budget.
    pub fn auto(self, batch: &Batch, memory_budget: Option<u64>) -> Result<Self> {
        let Some(layers) = self.layers_set() else {
            return Err(Error::Build(BuildError::NoLayers));
        };
        let device = self
            .devices_set()
            .first()
            .cloned()
            .unwrap_or_else(Device::flex);
        let workers = match self.devices_set().len() {
            0 | 1 => pipetrain_engine::pool::threads_per_worker(1),
            n => n,
        };
        let space = default_space(batch.len(), workers, memory_budget);
        let chosen = choose(layers, batch, &space, self.optimizer_set(), &device)?;
        Ok(self.configure(&chosen))
    }
}
