//! The facade's error type: configuration errors (found before any thread starts) and
//! everything the crates below return.
//!
//! Each error states its facts as typed fields and, where one is known, a [`Remedy`] (its
//! [`Remedied::remedy`], asked of the inner error for the crates' errors). `Display` renders the
//! remedy as builder calls ([`Builder`]); [`Error::render`] renders it in any front end's
//! [`Style`] (the `pipetrain` binary's is its flags).

use std::fmt;
use std::ops::Range;
use std::path::PathBuf;

use pipetrain_engine::{EngineError, Remat};
use pipetrain_partitioner::PartitionError;
use pipetrain_schedules::{Schedule, ScheduleError, StageId};
use pipetrain_tune::TuneError;

use crate::memory::Bytes;
use crate::remedy::{Builder, Remedied, Remedy, Setting, Style, Value};

/// Everything `pipetrain` can return.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A setting's value breaks a rule of its own (a count of 0, a learning rate that is not a
    /// positive number, …).
    Setting {
        /// The setting.
        setting: Setting,
        /// Its value, as given.
        value: String,
        /// The rule it breaks.
        rule: &'static str,
        /// What would fix it.
        remedy: Option<Remedy>,
    },
    /// The builder was given no layers.
    NoLayers,
    /// The configuration search was given no batch to measure the model on.
    NoTuneBatch,
    /// The layer sequence is empty.
    EmptyModel,
    /// Re-materialization with a batch-norm layer: the first forward would use running
    /// statistics, not the micro-batch's.
    RematWithBatchNorm {
        /// The re-materialization mode given.
        remat: Remat,
        /// The first layer with batch statistics.
        layer: usize,
    },
    /// A schedule with several chunks per rank in a multi-process pipeline, which runs one stage
    /// per rank.
    ChunksAcrossProcesses {
        /// The schedule given.
        schedule: Schedule,
    },
    /// A number of stages that disagrees with the balance's.
    StagesAndBalance {
        /// The stages asked for (ranks, under a schedule of several chunks per rank).
        stages: usize,
        /// Chunks per rank: the balance lists `stages × virtual_stages` of them.
        virtual_stages: usize,
        /// The balance given.
        balance: Vec<usize>,
        /// A stage count, or a balance, that agree.
        remedy: Remedy,
    },
    /// More stages (or chunks, at several per rank) than layers.
    MoreStagesThanLayers {
        /// The stages asked for (ranks, under a schedule of several chunks per rank).
        stages: usize,
        /// Chunks per rank.
        virtual_stages: usize,
        /// The model's layers.
        layers: usize,
        /// A stage count the layers hold, or a schedule of fewer chunks per rank.
        remedy: Remedy,
    },
    /// A balance whose stages do not split into ranks of the schedule's chunks.
    UnevenBalance {
        /// The balance given.
        balance: Vec<usize>,
        /// Chunks per rank.
        virtual_stages: usize,
        /// The schedule.
        schedule: Schedule,
        /// A balance of whole ranks, or a schedule of one chunk per rank.
        remedy: Remedy,
    },
    /// A memory budget, which chooses the split, with a balance, which fixes it.
    BudgetAndBalance {
        /// The budget, bytes per worker.
        budget: u64,
        /// The balance given.
        balance: Vec<usize>,
    },
    /// A multi-process pipeline whose split a memory budget would choose by measuring (each
    /// process could measure another); without a budget its split is even.
    MeasuredSplitAcrossProcesses {
        /// The stages asked for.
        stages: usize,
    },
    /// A device list that is neither one device, one per stage nor one per worker.
    DeviceCount {
        /// Devices given.
        devices: usize,
        /// Replicas.
        replicas: usize,
        /// Stages.
        stages: usize,
    },
    /// Gradient-norm clipping with tied parameters (a tied gradient would count twice).
    ClipWithTies,
    /// The pipeline is used after its build failed (the burn-train strategy builds it on the
    /// first batch).
    BuildFailedBefore,
    /// `build()` of a split that is measured on a batch (by time, or by memory budget).
    NeedsBatch {
        /// The stages to split into.
        stages: usize,
        /// The memory budget that chooses the split, bytes per worker, if one was given.
        budget: Option<u64>,
    },
    /// A burn-train option that the pipeline does not do.
    GradAccumulation {
        /// The batches burn-train would sum.
        batches: usize,
    },
    /// The directory for the pipeline's own state cannot be created.
    StateDir {
        /// The directory.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The engine failed or refused: a worker failed, a bad batch, skips that do not pair up, a
    /// tie the model does not fit, a checkpoint that cannot be written or read, …
    Engine(EngineError),
    /// The stage split failed.
    Partition(PartitionError),
    /// The plan failed.
    Schedule(ScheduleError),
    /// The configuration search ([`crate::commands::tune`]) refused its inputs or found nothing that fits.
    Tune(TuneError),
    /// No split into the asked number of stages fits
    /// [`memory_budget`](crate::PipelineBuilder::memory_budget).
    MemoryBudget {
        /// The budget, per worker.
        budget: Bytes,
        /// The least budget any split into `stages` stages fits.
        smallest: Bytes,
        /// `smallest` in bytes, as `memory_budget` takes it.
        smallest_bytes: u64,
        /// Stages asked for.
        stages: usize,
        /// Micro-batches per step.
        micro_batches: usize,
        /// The fullest stage of the split that needs least.
        stage: StageId,
        /// Its layers.
        layers: Range<usize>,
        /// What would make it fit: the least budget, more stages, re-materialization, smaller
        /// micro-batches, weight gradients every micro-batch.
        remedy: Remedy,
    },

    // ---- The run loop (`trainer`): typed facts of what a training run can fail on, with typed
    // remedies; the binary words both in flags. Their fact types follow the enum. ----
    /// A training step failed.
    Step {
        /// The optimizer step, from 1.
        step: u64,
        /// What failed.
        source: Box<Error>,
    },
    /// A step's loss is NaN or infinite and the gradient guard did not skip it.
    NonFiniteLoss {
        /// The optimizer step, from 1.
        step: u64,
        /// The loss.
        loss: f64,
    },
    /// A file of the run (its checkpoint, metrics, trace, plot, or the checkpoint it resumes)
    /// could not be read or written.
    RunFile {
        /// Which file.
        file: RunFile,
        /// Its path.
        path: PathBuf,
        /// Why.
        reason: RunFileProblem,
    },
    /// The checkpoint to resume was saved by a run with another value of a setting the
    /// batches depend on.
    ResumeMismatch {
        /// The checkpoint.
        path: PathBuf,
        /// The identity entry (`seed`, `batch`, …: [`RunIdentity`](crate::trainer::RunIdentity)).
        setting: String,
        /// The saved run's value.
        saved: String,
        /// This run's value.
        ours: String,
    },
    /// The checkpoint to resume was saved under another learning-rate schedule.
    ResumeSchedule {
        /// The checkpoint.
        path: PathBuf,
        /// The saved run's schedule.
        saved: String,
        /// This run's.
        ours: String,
    },
    /// The checkpoint to resume is at the run's last step already.
    ResumeDone {
        /// The checkpoint.
        path: PathBuf,
        /// Its step.
        saved: u64,
        /// The run's total steps.
        steps: u64,
    },
    /// The checkpoint's next data position is not the one this data gives at its step.
    ResumeData {
        /// The checkpoint.
        path: PathBuf,
        /// The saved position.
        saved: String,
        /// This data's position at `step`.
        expected: String,
        /// The checkpoint's step.
        step: u64,
    },
    /// A step made a weight non-finite from finite gradients: the checkpoint was not written.
    CheckpointNonFinite {
        /// The checkpoint.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// The element.
        index: usize,
        /// Its value, as text (`inf`, `NaN`).
        value: String,
    },
    /// A step failed after a last good step whose checkpoint could be kept: what became of it.
    AfterLastGood {
        /// The step's error.
        source: Box<Error>,
        /// What became of the checkpoint.
        saved: LastGood,
    },
    /// A training batch could not be read or shaped ([`Source`](crate::trainer::Source)).
    Batch {
        /// The batch's index in the run, from 0.
        index: u64,
        /// The spec of the run's [`Data`](crate::trainer::Data) it came from, if it did.
        data: Option<String>,
        /// Why.
        reason: String,
    },
    /// The run's data cannot be used ([`Data::open`](crate::trainer::Data::open)).
    #[cfg(feature = "trainer")]
    Data {
        /// The data's spec, as given.
        spec: String,
        /// What is wrong.
        problem: crate::trainer::DataProblem,
    },
    /// A checkpoint to resume or to take weights from holds another model, whose weights do
    /// not fit this one.
    OtherModel {
        /// Which file.
        file: RunFile,
        /// The checkpoint.
        path: PathBuf,
        /// The model it holds.
        stored: String,
        /// This run's model.
        ours: String,
        /// Why the weights do not fit.
        source: EngineError,
    },
    /// A path a run reads or writes cannot be used ([`trainer::paths`](crate::trainer::paths)).
    Path {
        /// The name its user knows it by.
        name: String,
        /// The path.
        path: PathBuf,
        /// What is wrong.
        problem: PathProblem,
    },
    /// An output of a run is another of its files.
    SameFile {
        /// The first file's name.
        name: String,
        /// Its path.
        path: PathBuf,
        /// The output's name.
        other: String,
        /// Its path.
        other_path: PathBuf,
    },
    /// A multi-process launch does not fit the run: the launcher's processes cannot hold its
    /// workers, they were given different settings, or no MPI launcher started them.
    Launch(String),
    /// Tensor-name rewriting rules (`REGEX=REPLACEMENT`) do not parse or collide.
    Renames(String),
    /// The signal handlers could not be installed, or the stop hook is malformed.
    Signals(String),
    // ---- end of the run loop's block ----

    // ---- The subcommands' library side: bench, tune, plan, export (crate::commands::bench, crate::commands::tune,
    // crate::commands::plan, crate::commands::export). Facts only; the binary names its flags. ----
    /// A bench setting that every row needs at least 1 of is 0.
    BenchZero {
        /// The [`BenchSettings`](crate::commands::bench::BenchSettings) field.
        setting: &'static str,
    },
    /// The batch does not split evenly over a row's replicas × micro-batches.
    BenchBatchSplit {
        /// Rows per step.
        batch: usize,
        /// The row's replicas.
        replicas: usize,
        /// The row's micro-batches.
        micro_batches: usize,
        /// The row's label.
        row: String,
    },
    /// The row filter matches no row.
    BenchNoRow {
        /// The filter.
        only: String,
        /// Every row there is.
        rows: Vec<String>,
    },
    /// One of our bench rows failed.
    BenchRow {
        /// The row's label.
        row: String,
        /// What failed.
        reason: String,
    },
    #[cfg(feature = "commands")]
    /// The folder given for the PyTorch peer scripts does not hold them.
    PeersNoScripts {
        /// The folder.
        dir: std::path::PathBuf,
    },
    #[cfg(feature = "commands")]
    /// No folder was given for the PyTorch peer scripts and none was found.
    PeersNotFound,
    #[cfg(feature = "commands")]
    /// The Python given for the PyTorch peers cannot import torch.
    PeersNoTorch {
        /// The Python.
        python: std::path::PathBuf,
    },
    #[cfg(feature = "commands")]
    /// The Python given for the PyTorch peers did not answer the probe (`import torch, numpy`)
    /// in time, and was stopped.
    PeersNoAnswer {
        /// The Python.
        python: std::path::PathBuf,
        /// How long it was given.
        seconds: f64,
    },
    /// No configuration of the tune search fits (its memory budget, its workers).
    TuneNothingFits {
        /// `  knobs: why` for the first configurations left out.
        left_out: Vec<String>,
    },
    #[cfg(feature = "commands")]
    /// The tune cache holds a cost table that no measurement gives.
    TuneCache {
        /// The cache file.
        path: std::path::PathBuf,
        /// What is wrong with its table.
        problem: TuneError,
    },
    /// A plan cost that is negative, not finite, or a weight gradient above the backward.
    PlanCost {
        /// Which cost: `forward`, `backward`, `weight` or `transfer`.
        cost: &'static str,
        /// The value given.
        value: f64,
        /// What is wrong and what to give instead.
        reason: String,
    },
    /// The checkpoint's model has no PyTorch module to export to.
    ExportModel {
        /// The model the checkpoint records, if it records one.
        model: Option<String>,
    },
    /// A checkpoint tensor that is not F32.
    ExportTensor {
        /// The tensor's name.
        tensor: String,
        /// Its element type.
        dtype: String,
    },
    /// A checkpoint that cannot be read as safetensors, or an export that cannot be encoded.
    ExportFile {
        /// The checkpoint.
        path: std::path::PathBuf,
        /// What failed.
        reason: String,
    },
    // ---- end of the subcommands' block ----
}

impl Error {
    /// The facts and the remedy in `style`'s words: `{facts}; {remedy}`. `Display` is this in
    /// [`Builder`] style.
    pub fn render(&self, style: &dyn Style) -> String {
        self.explain(style)
    }

    /// Whether this is a configuration the builder (or the burn-train strategy) refused
    /// before any thread started, as opposed to one the crates below refused.
    pub fn is_config(&self) -> bool {
        !matches!(
            self,
            Error::StateDir { .. }
                | Error::Engine(_)
                | Error::Partition(_)
                | Error::Schedule(_)
                | Error::Tune(_)
                | Error::MemoryBudget { .. }
                | Error::BenchZero { .. }
                | Error::BenchBatchSplit { .. }
                | Error::BenchNoRow { .. }
                | Error::BenchRow { .. }
                | Error::TuneNothingFits { .. }
                | Error::PlanCost { .. }
                | Error::ExportModel { .. }
                | Error::ExportTensor { .. }
                | Error::ExportFile { .. }
        ) && !self.is_peers()
            && !self.is_tune_cache()
            && !self.is_run()
    }

    /// Whether this is an error of a training run (crate::trainer; not a configuration).
    fn is_run(&self) -> bool {
        #[cfg(feature = "trainer")]
        if matches!(self, Error::Data { .. }) {
            return true;
        }
        matches!(
            self,
            Error::Step { .. }
                | Error::NonFiniteLoss { .. }
                | Error::RunFile { .. }
                | Error::ResumeMismatch { .. }
                | Error::ResumeSchedule { .. }
                | Error::ResumeDone { .. }
                | Error::ResumeData { .. }
                | Error::CheckpointNonFinite { .. }
                | Error::AfterLastGood { .. }
                | Error::Batch { .. }
                | Error::OtherModel { .. }
                | Error::Path { .. }
                | Error::SameFile { .. }
                | Error::Launch(_)
                | Error::Renames(_)
                | Error::Signals(_)
        )
    }

    /// Whether this is a refused tune cache (not a configuration).
    fn is_tune_cache(&self) -> bool {
        #[cfg(feature = "commands")]
        if matches!(self, Error::TuneCache { .. }) {
            return true;
        }
        false
    }

    /// Whether this is a PyTorch-peers error of the bench (not a configuration).
    fn is_peers(&self) -> bool {
        #[cfg(feature = "commands")]
        if matches!(
            self,
            Error::PeersNoScripts { .. }
                | Error::PeersNotFound
                | Error::PeersNoTorch { .. }
                | Error::PeersNoAnswer { .. }
        ) {
            return true;
        }
        false
    }

    /// The facts of a run loop's error that names its files and settings, in `style`'s words
    /// (`checkpoint run.st`, `--checkpoint run.st`).
    fn run_facts(&self, style: &dyn Style) -> Option<String> {
        let file = |setting, path: &std::path::Path| {
            format!("{} {}", style.label(setting), path.display())
        };
        let resume = |path| file(Setting::Resume, path);
        Some(match self {
            Error::Step { step, source } => format!(
                "step {step}: {}",
                source.run_facts(style).unwrap_or_else(|| source.facts())
            ),
            // A checkpoint's error names its path itself.
            Error::RunFile {
                file: which,
                reason: reason @ RunFileProblem::Checkpoint(_),
                ..
            } => format!("{}: {reason}", style.label(which.setting())),
            Error::RunFile {
                file: which,
                path,
                reason,
            } => format!("{}: {reason}", file(which.setting(), path)),
            Error::ResumeMismatch {
                path,
                setting,
                saved,
                ours,
            } => {
                let setting = style.entry(setting);
                format!(
                    "{}: the run was saved with {setting} {saved}, this one has {setting} \
                     {ours} (the batches depend on it)",
                    resume(path)
                )
            }
            Error::ResumeSchedule { path, saved, ours } => {
                let schedule =
                    |s: &String| style.set(Setting::LrSchedule, &Value::Mode(s.clone().into()));
                format!(
                    "{}: the run was saved with {}, this one has {}: a schedule's rates follow \
                     {} and {}, so the steps already taken would have had other rates",
                    resume(path),
                    schedule(saved),
                    schedule(ours),
                    style.label(Setting::LearningRate),
                    style.label(Setting::Steps)
                )
            }
            Error::ResumeDone { path, saved, steps } => format!(
                "{}: the checkpoint is at step {saved} already; {} is the total",
                resume(path),
                style.set(Setting::Steps, &Value::Count(*steps as usize))
            ),
            Error::ResumeData {
                path,
                saved,
                expected,
                step,
            } => format!(
                "{}: the checkpoint's next data is {saved}, this data gives {expected} at step \
                 {step}; the dataset changed",
                resume(path)
            ),
            Error::CheckpointNonFinite {
                path,
                tensor,
                index,
                value,
            } => format!(
                "{}: not written: weight `{tensor}` element {index} is {value} after this step \
                 (its gradients were finite)",
                file(Setting::Checkpoint, path)
            ),
            Error::AfterLastGood { source, saved } => format!(
                "{}\n{}",
                source.run_facts(style).unwrap_or_else(|| source.facts()),
                saved.describe(style)
            ),
            Error::OtherModel {
                file: which,
                path,
                stored,
                ours,
                source,
            } => format!(
                "{}: the file holds {stored}, but this run builds {ours} ({source})",
                file(which.setting(), path)
            ),
            #[cfg(feature = "trainer")]
            Error::Data { spec, problem } => {
                format!("{} {spec}: {problem}", style.label(Setting::Data))
            }
            Error::Renames(text) => format!("{}: {text}", style.label(Setting::Rename)),
            Error::Batch {
                data: Some(spec),
                reason,
                ..
            } => format!("{} {spec}: {reason}", style.label(Setting::Data)),
            Error::Batch { reason, .. } => reason.clone(),
            _ => return None,
        })
    }

    /// The facts of a configuration error (after "invalid configuration: ").
    fn config_facts(&self) -> Option<String> {
        Some(match self {
            Error::Setting {
                setting,
                value,
                rule,
                ..
            } => match setting {
                Setting::Zero => format!("ZeRO stage {value}: {rule}"),
                Setting::BucketBytes | Setting::MemoryBudget => {
                    format!("{} = {value} bytes: {rule}", setting.key())
                }
                _ => format!("{} = {value}: {rule}", setting.key()),
            },
            Error::NoLayers => "no layers: the builder needs the model's layer sequence".into(),
            Error::NoTuneBatch => "tune needs at least one batch to measure the model on".into(),
            Error::EmptyModel => {
                "the layer sequence is empty: a pipeline needs at least one layer".into()
            }
            Error::RematWithBatchNorm { remat, layer } => format!(
                "remat {remat} with batch norm (layer {layer}): re-materialization's first \
                 forward uses running statistics, not the micro-batch's"
            ),
            Error::ChunksAcrossProcesses { schedule } => {
                format!("{schedule}: a multi-process pipeline runs one stage per rank")
            }
            Error::StagesAndBalance {
                stages,
                virtual_stages: 1,
                balance,
                ..
            } => format!(
                "stages = {stages} but balance {balance:?} has {} stages",
                balance.len()
            ),
            Error::StagesAndBalance {
                stages,
                virtual_stages: v,
                balance,
                ..
            } => format!(
                "stages = {stages} at {v} chunks per stage lists {} chunks, but balance \
                 {balance:?} has {}",
                stages * v,
                balance.len()
            ),
            Error::MoreStagesThanLayers {
                stages,
                virtual_stages: 1,
                layers,
                ..
            } => format!(
                "{stages} stages but only {layers} layers: every stage needs at least one layer"
            ),
            Error::MoreStagesThanLayers {
                stages,
                virtual_stages: v,
                layers,
                ..
            } => format!(
                "{stages} stages of {v} chunks each make {} chunks but only {layers} layers: \
                 every chunk needs at least one layer",
                stages * v
            ),
            Error::UnevenBalance {
                balance,
                virtual_stages,
                schedule,
                ..
            } => format!(
                "balance {balance:?} has {} stages, which do not split into stages of \
                 {virtual_stages} chunks each ({schedule}): it needs a multiple of \
                 {virtual_stages}",
                balance.len()
            ),
            Error::BudgetAndBalance { budget, balance } => format!(
                "a memory budget ({budget} bytes) chooses the split, but balance {balance:?} \
                 fixes it"
            ),
            Error::MeasuredSplitAcrossProcesses { stages } => format!(
                "a multi-process pipeline needs a fixed split of its {stages} stages: the split a \
                 memory budget chooses is measured on each process and could differ"
            ),
            Error::DeviceCount {
                devices,
                replicas,
                stages,
            } => format!("{devices} devices for {replicas} replicas × {stages} stages"),
            Error::ClipWithTies => "clip_grad_norm with tied parameters is not supported yet (a \
                                    tied parameter's gradient would count twice in the norm)"
                .into(),
            Error::BuildFailedBefore => "the pipeline's build failed before".into(),
            Error::NeedsBatch {
                stages,
                budget: Some(budget),
            } => format!(
                "a memory budget ({budget} bytes) chooses the split into {stages} stage(s) from                  the layers' memory and times, measured on a batch"
            ),
            Error::NeedsBatch {
                stages,
                budget: None,
            } => format!(
                "{stages} stages without a balance: the split is balanced by the layers' times,                  measured on a batch"
            ),
            Error::GradAccumulation { batches } => format!(
                "grads_accumulation({batches}): burn-train sums the gradients of {batches} \
                 batches, which PipelineStrategy does not do (the pipeline's micro-batches keep \
                 the memory of one micro-batch)"
            ),
            _ => return None,
        })
    }
}

impl Remedied for Error {
    /// The facts, then the remedy in `style`'s words; a failed step after a last good one
    /// says what became of the checkpoint last, after the step's remedy.
    fn explain(&self, style: &dyn Style) -> String {
        if let Error::AfterLastGood { source, saved } = self {
            return format!("{}\n{}", source.explain(style), saved.describe(style));
        }
        // Its facts name settings (the model, its classes), in the style's words too.
        #[cfg(feature = "trainer")]
        if let Error::Data { spec, problem } = self {
            let data = style.label(Setting::Data);
            return format!("{data} {spec}: {}", problem.explain(style));
        }
        let facts = self.run_facts(style).unwrap_or_else(|| self.facts());
        match self.remedy() {
            Some(remedy) => format!("{facts}; {}", remedy.render(style)),
            None => facts,
        }
    }

    fn remedy(&self) -> Option<Remedy> {
        match self {
            Error::Setting { remedy, .. } => remedy.clone(),
            Error::NoLayers => Some(Remedy::sentence(
                "call .layers(model_layers) with the model's layer sequence",
            )),
            Error::RematWithBatchNorm { .. } => {
                Some(Remedy::set(Setting::Remat, Value::mode("never")))
            }
            Error::ChunksAcrossProcesses { .. } => Some(Remedy::one_of([
                Remedy::set(Setting::Schedule, Value::mode("1f1b")),
                Remedy::set(Setting::Schedule, Value::mode("zb-h1")),
            ])),
            Error::StagesAndBalance { remedy, .. }
            | Error::MoreStagesThanLayers { remedy, .. }
            | Error::UnevenBalance { remedy, .. } => Some(remedy.clone()),
            // Either one alone: a stage count does not settle which.
            Error::BudgetAndBalance { .. } => Some(Remedy::one_of([
                Remedy::Drop(Setting::MemoryBudget),
                Remedy::Drop(Setting::Balance),
            ])),
            Error::MeasuredSplitAcrossProcesses { .. } => Some(Remedy::one_of([
                Remedy::set(Setting::Balance, Value::Any),
                Remedy::Drop(Setting::MemoryBudget),
            ])),
            Error::DeviceCount {
                replicas, stages, ..
            } => Some(Remedy::sentence(format!(
                "give one device per stage ({stages}), one per worker ({}), or one for all",
                replicas * stages
            ))),
            Error::ClipWithTies => Some(Remedy::sentence("drop the ties or the clipping")),
            Error::BuildFailedBefore => Some(Remedy::sentence(
                "fix the error its build returned, and start a new run",
            )),
            Error::NeedsBatch { budget, .. } => {
                let measure =
                    Remedy::sentence("build with .build_with(&batch), giving a training batch");
                Some(match budget {
                    Some(_) => measure,
                    None => Remedy::one_of([measure, Remedy::set(Setting::Balance, Value::Any)]),
                })
            }
            Error::GradAccumulation { batches } => Some(Remedy::sentence(format!(
                "drop it and use a {batches}× larger batch"
            ))),
            Error::StateDir { .. } => Some(Remedy::sentence("give a writable directory")),
            Error::Engine(e) => e.remedy(),
            Error::Partition(e) => e.remedy(),
            Error::Schedule(e) => e.remedy(),
            Error::Tune(e) => e.remedy(),
            Error::MemoryBudget { remedy, .. } => Some(remedy.clone()),
            Error::BenchBatchSplit {
                replicas,
                micro_batches,
                ..
            } => Some(Remedy::one_of([
                Remedy::sentence(format!(
                    "give a batch that is a multiple of {}",
                    replicas * micro_batches
                )),
                Remedy::sentence(format!(
                    "leave {micro_batches} out of the micro-batch counts"
                )),
            ])),
            #[cfg(feature = "commands")]
            Error::PeersNoTorch { .. } | Error::PeersNoAnswer { .. } => {
                Some(Remedy::sentence(crate::commands::bench::HOW_TO_GET_TORCH))
            }
            #[cfg(feature = "commands")]
            Error::PeersNoScripts { .. } | Error::PeersNotFound => Some(Remedy::sentence(
                "give the folder that holds the peer scripts (shared/peers)",
            )),
            #[cfg(feature = "commands")]
            Error::TuneCache { .. } => Some(Remedy::set(Setting::Remeasure, Value::On)),
            Error::TuneNothingFits { .. } => Some(Remedy::one_of([
                Remedy::set(Setting::MemoryBudget, Value::Larger),
                Remedy::set(Setting::Remat, Value::mode("always")),
                Remedy::set(Setting::Workers, Value::Larger),
            ])),
            Error::ExportModel { .. } => Some(Remedy::sentence(
                "load the checkpoint with pipetrain instead",
            )),
            Error::BenchZero { .. }
            | Error::BenchNoRow { .. }
            | Error::BenchRow { .. }
            | Error::PlanCost { .. }
            | Error::ExportTensor { .. }
            | Error::ExportFile { .. } => None,
            Error::Step { source, .. } => source.remedy(),
            Error::NonFiniteLoss { .. } => Some(Remedy::one_of([
                Remedy::set(Setting::LearningRate, Value::Smaller),
                Remedy::set(Setting::ClipGradNorm, Value::Number(1.0)),
                Remedy::set(Setting::SkipNonFinite, Value::On),
            ])),
            Error::CheckpointNonFinite { .. } => Some(Remedy::one_of([
                Remedy::set(Setting::LearningRate, Value::Smaller),
                Remedy::set(Setting::ClipGradNorm, Value::Number(1.0)),
            ])),
            Error::ResumeMismatch { setting, .. } => {
                Some(Remedy::sentence(format!("resume with the same {setting}")))
            }
            Error::ResumeSchedule { .. } => Some(Remedy::one_of([
                Remedy::sentence("resume with the saved run's steps and learning rate"),
                Remedy::set(Setting::InitFrom, Value::Any),
            ])),
            Error::ResumeDone { .. } => Some(Remedy::sentence("give more steps to continue")),
            Error::OtherModel { .. } => Some(Remedy::sentence(
                "give the settings of the stored model, or a file of this model",
            )),
            Error::SameFile { .. } => Some(Remedy::sentence("give each its own path")),
            Error::RunFile { reason, .. } => reason.remedy(),
            Error::Path { problem, .. } => problem.remedy(),
            #[cfg(feature = "trainer")]
            Error::Data { problem, .. } => problem.remedy(),
            Error::AfterLastGood { .. }
            | Error::ResumeData { .. }
            | Error::Batch { .. }
            | Error::Launch(_)
            | Error::Renames(_)
            | Error::Signals(_) => None,
            Error::NoTuneBatch | Error::EmptyModel => None,
        }
    }

    fn facts(&self) -> String {
        if let Some(facts) = self.config_facts() {
            return format!("invalid configuration: {facts}");
        }
        if let Some(facts) = self.run_facts(&Builder) {
            return facts;
        }
        match self {
            Error::StateDir { path, source } => format!(
                "cannot create the pipeline state directory {}: {source}",
                path.display()
            ),
            Error::Engine(e) => e.to_string(),
            Error::Partition(e) => e.to_string(),
            Error::Schedule(e) => e.to_string(),
            Error::Tune(e) => e.to_string(),
            Error::MemoryBudget {
                budget,
                smallest,
                stages,
                micro_batches,
                stage,
                layers,
                ..
            } => format!(
                "memory budget {budget} per worker is too small for {stages} stage(s) at \
                 {micro_batches} micro-batch(es): the split that needs least still needs \
                 {smallest} on {stage} (layers {layers:?}: parameters, gradients, optimizer \
                 state, stashed activations and deferred weight-gradient inputs)"
            ),
            Error::BenchZero { setting } => {
                format!("bench setting `{setting}` is 0: every row needs at least 1")
            }
            Error::BenchBatchSplit {
                batch,
                replicas,
                micro_batches,
                row,
            } => format!(
                "batch {batch} does not split into {replicas} replica(s) × {micro_batches} \
                 micro-batches (row `{row}`)"
            ),
            Error::BenchNoRow { only, rows } => {
                format!("{only:?} matches no row; rows are: {}", rows.join("; "))
            }
            Error::BenchRow { row, reason } => format!("{row}: {reason}"),
            #[cfg(feature = "commands")]
            Error::PeersNoScripts { dir } => format!(
                "{}: no common.py there; the peers folder holds bench_single.py, bench_ddp.py, \
                 bench_pipe.py and common.py",
                dir.display()
            ),
            #[cfg(feature = "commands")]
            Error::PeersNotFound => "no PyTorch peer scripts found (looked for \
                                     shared/peers/common.py in every folder above the program \
                                     and the source tree)"
                .into(),
            #[cfg(feature = "commands")]
            Error::PeersNoTorch { python } => format!(
                "{} cannot import torch and numpy, so no PyTorch column",
                python.display()
            ),
            #[cfg(feature = "commands")]
            Error::PeersNoAnswer { python, seconds } => format!(
                "{} did not answer `import torch, numpy` within {seconds} s and was stopped, so \
                 no PyTorch column",
                python.display()
            ),
            #[cfg(feature = "commands")]
            Error::TuneCache { path, problem } => {
                format!("tune cache {}: {problem}", path.display())
            }
            Error::TuneNothingFits { left_out } => format!(
                "no configuration fits; the first left out:\n{}",
                left_out.join("\n")
            ),
            Error::PlanCost {
                cost,
                value,
                reason,
            } => format!(
                "{cost} cost {}: {reason}",
                crate::commands::plan::short(*value)
            ),
            Error::ExportModel { model } => format!(
                "the model {} has no documented PyTorch module (MLP and GPT have)",
                model.as_deref().unwrap_or("(not recorded)")
            ),
            Error::ExportTensor { tensor, dtype } => {
                format!("tensor `{tensor}` is {dtype}; checkpoints hold F32 weights")
            }
            Error::ExportFile { path, reason } => format!("{}: {reason}", path.display()),
            Error::NonFiniteLoss { step, loss } => format!("step {step}: the loss is {loss}"),
            Error::Path {
                name,
                path,
                problem,
            } => format!("{name} {}: {problem}", path.display()),
            Error::SameFile {
                name,
                path,
                other,
                other_path,
            } => format!(
                "{name} {} and {other} {} are the same file; {other} would overwrite it",
                path.display(),
                other_path.display()
            ),
            Error::Launch(text) => text.clone(),
            Error::Signals(text) => format!("signals: {text}"),
            _ => unreachable!("every configuration error has facts"),
        }
    }
}

// ---- The run loop's error facts (the fields of the run loop's variants above). ----

/// A file of a training run, as [`Error::RunFile`] names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunFile {
    /// The checkpoint the run writes.
    Checkpoint,
    /// The checkpoint the run resumes.
    Resume,
    /// The metrics file.
    Metrics,
    /// The chrome trace.
    Profile,
    /// The loss plot.
    Plot,
    /// The weights file a run starts from.
    Init,
}

impl RunFile {
    /// The setting that names the file.
    pub fn setting(self) -> Setting {
        match self {
            RunFile::Checkpoint => Setting::Checkpoint,
            RunFile::Resume => Setting::Resume,
            RunFile::Metrics => Setting::Metrics,
            RunFile::Profile => Setting::Profile,
            RunFile::Plot => Setting::Plot,
            RunFile::Init => Setting::InitFrom,
        }
    }
}

impl fmt::Display for RunFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RunFile::Checkpoint => "checkpoint",
            RunFile::Resume => "resume",
            RunFile::Metrics => "metrics",
            RunFile::Profile => "profile",
            RunFile::Plot => "plot",
            RunFile::Init => "init",
        })
    }
}

/// Why a [`RunFile`] failed: a fact of [`Error::RunFile`].
#[derive(Debug)]
#[non_exhaustive]
pub enum RunFileProblem {
    /// The destination is refused or could not be written ([`engine::output`](crate::engine::output)).
    Output(EngineError),
    /// Reading or writing failed.
    Io(std::io::Error),
    /// A checkpoint could not be read or written.
    Checkpoint(EngineError),
    /// A metrics file's extension names no format.
    MetricsFormat,
    /// An earlier run's metrics file cannot be continued (another layout, or not a metrics
    /// file).
    MetricsEarlier(String),
    /// The file's contents are not what was expected.
    Invalid(String),
    /// A weights file fits PyTorch's layout and burn's alike: every matrix is square and no
    /// metadata says which.
    AmbiguousLayout {
        /// The first square matrix.
        tensor: String,
        /// Its shape.
        shape: Vec<usize>,
    },
}

impl RunFileProblem {
    /// What would fix it, if anything is known.
    fn remedy(&self) -> Option<Remedy> {
        match self {
            RunFileProblem::Checkpoint(e) => e.remedy(),
            RunFileProblem::MetricsFormat => {
                Some(Remedy::sentence("name the file *.csv or *.jsonl"))
            }
            RunFileProblem::MetricsEarlier(_) => {
                Some(Remedy::sentence("give another metrics file"))
            }
            RunFileProblem::AmbiguousLayout { .. } => Some(Remedy::sentence(
                "save it with `safetensors.torch.save_file` (it records format=pt) or burn's \
                 store (it records producer=burn), or add that metadata",
            )),
            _ => None,
        }
    }
}

impl fmt::Display for RunFileProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunFileProblem::Output(e) => e.fmt(f),
            RunFileProblem::Io(e) => e.fmt(f),
            RunFileProblem::Checkpoint(e) => f.write_str(&e.facts()),
            RunFileProblem::MetricsFormat => f.write_str("unknown format"),
            RunFileProblem::MetricsEarlier(text) | RunFileProblem::Invalid(text) => {
                f.write_str(text)
            }
            RunFileProblem::AmbiguousLayout { tensor, shape } => write!(
                f,
                "tensor `{tensor}` {shape:?} and every other matrix is square, so the file fits \
                 PyTorch's [out, in] layout and burn's [in, out] alike"
            ),
        }
    }
}

impl From<EngineError> for RunFileProblem {
    /// A checkpoint's error (a destination's, from [`engine::output`](crate::engine::output), is
    /// [`RunFileProblem::Output`], given explicitly).
    fn from(e: EngineError) -> Self {
        RunFileProblem::Checkpoint(e)
    }
}

impl From<std::io::Error> for RunFileProblem {
    fn from(e: std::io::Error) -> Self {
        RunFileProblem::Io(e)
    }
}

/// What is wrong with a path: a fact of [`Error::Path`].
#[derive(Debug)]
#[non_exhaustive]
pub enum PathProblem {
    /// An input is too large for this machine's memory.
    TooLarge {
        /// Its size.
        size: String,
        /// The memory loading it needs.
        needed: String,
        /// How much is available, and why.
        why: String,
    },
    /// An input is a directory.
    Directory,
    /// An input is a device, FIFO or socket.
    NotRegular,
    /// An input does not exist.
    Missing,
    /// An output cannot be written there.
    Output(EngineError),
}

impl PathProblem {
    /// What would fix it, if anything is known.
    fn remedy(&self) -> Option<Remedy> {
        Some(Remedy::sentence(match self {
            PathProblem::TooLarge { .. } => "load it on a machine with more memory",
            PathProblem::Directory => "give the .safetensors file in it",
            PathProblem::NotRegular => "give a file",
            PathProblem::Missing | PathProblem::Output(_) => return None,
        }))
    }
}

impl fmt::Display for PathProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathProblem::TooLarge { size, needed, why } => {
                write!(f, "a file of {size} needs about {needed} to load, {why}")
            }
            PathProblem::Directory => f.write_str("is a directory"),
            PathProblem::NotRegular => f.write_str("not a regular file (a device, FIFO or socket)"),
            PathProblem::Missing => f.write_str("no such file"),
            PathProblem::Output(e) => e.fmt(f),
        }
    }
}

/// What became of the checkpoint when a step failed before any stage applied it
/// ([`Error::AfterLastGood`]).
#[derive(Clone, Debug, PartialEq)]
pub enum LastGood {
    /// The checkpoint already held the last good step.
    Held {
        /// The checkpoint.
        path: std::path::PathBuf,
        /// The last good step.
        step: u64,
    },
    /// No step completed: nothing was written.
    NoStep {
        /// The checkpoint.
        path: std::path::PathBuf,
    },
    /// A multi-process run does not write it.
    MultiProcess {
        /// The checkpoint.
        path: std::path::PathBuf,
    },
    /// It was written with the weights of the last good step.
    Written {
        /// The checkpoint.
        path: std::path::PathBuf,
        /// The last good step.
        step: u64,
    },
    /// Writing it failed too.
    Failed {
        /// The checkpoint.
        path: std::path::PathBuf,
        /// The last good step.
        step: u64,
        /// Why.
        error: String,
    },
}

impl LastGood {
    /// What became of the checkpoint, naming it in `style`'s words (`checkpoint run.st`,
    /// `--checkpoint run.st`).
    pub fn describe(&self, style: &dyn Style) -> String {
        let checkpoint = |path: &std::path::Path| {
            format!("{} {}", style.label(Setting::Checkpoint), path.display())
        };
        match self {
            LastGood::Held { path, step } => {
                format!("{} holds step {step}, the last good one", checkpoint(path))
            }
            LastGood::NoStep { path } => {
                format!("no step completed, so {} was not written", checkpoint(path))
            }
            LastGood::MultiProcess { path } => {
                format!("{} was not written (a multi-process run)", checkpoint(path))
            }
            LastGood::Written { path, step } => format!(
                "no stage applied it, so {} was written with the weights of step {step}, the \
                 last good one",
                checkpoint(path)
            ),
            LastGood::Failed { path, step, error } => {
                format!("{} of step {step} failed too: {error}", checkpoint(path))
            }
        }
    }
}

impl fmt::Display for LastGood {
    /// [`LastGood::describe`] in [`Builder`] words.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe(&Builder))
    }
}

impl fmt::Display for Error {
    /// The facts and the remedy as builder calls ([`Error::render`] with [`Builder`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(&Builder))
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::StateDir { source, .. } => Some(source),
            Error::Step { source, .. } | Error::AfterLastGood { source, .. } => Some(&**source),
            Error::OtherModel { source, .. } => Some(source),
            Error::Engine(e) => Some(e),
            Error::Partition(e) => e.source(),
            Error::Schedule(e) => e.source(),
            Error::Tune(e) => e.source(),
            _ => None,
        }
    }
}

impl From<EngineError> for Error {
    /// The one route of the engine's errors into the facade.
    fn from(e: EngineError) -> Self {
        Error::Engine(e)
    }
}

/// `From` for the errors that take one variant each.
macro_rules! from {
    ($($error:ty => $variant:ident),* $(,)?) => {$(
        impl From<$error> for Error {
            fn from(e: $error) -> Self {
                Error::$variant(e)
            }
        }
    )*};
}

from! {
    PartitionError => Partition,
    ScheduleError => Schedule,
    TuneError => Tune,
}

/// The facade's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `setting = value` breaks `rule`; `remedy` fixes it.
pub(crate) fn invalid<T>(
    setting: Setting,
    value: impl fmt::Display,
    rule: &'static str,
    remedy: Option<Remedy>,
) -> Result<T> {
    Err(Error::Setting {
        setting,
        value: value.to_string(),
        rule,
        remedy,
    })
}
