//! The engine's error type, its one public error: every failure the engine reports, from a
//! worker's panic to a checkpoint that does not fit, is a variant with its facts as typed
//! fields. `Display` states the facts, never a flag or a builder call; [`Remedied::remedy`]
//! says what would fix them, for a front end to word.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pipetrain_schedules::remedy::{Remedied, Remedy, Setting, Value};
use pipetrain_schedules::{Action, MicroBatchId, ReplicaId, ScheduleError, StageId, WorkerId};

use crate::ids::Tag;

/// Everything the engine can return: the crate's one error type. Each variant holds its facts as
/// fields; [`StageFailed`](EngineError::StageFailed) holds the failing worker's reason as an
/// `EngineError` of its own (a panic, a layer's rejection, a transfer, a collective, …).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// One worker failed; this is the first failure of the step (others were stopped).
    #[error(
        "{replica} / {stage} failed at `{action}` ({kind}{mb}): {source}",
        kind = action.kind,
        mb = micro_batch.map(|m| format!(" of {m}")).unwrap_or_default()
    )]
    StageFailed {
        /// The failing worker's replica.
        replica: ReplicaId,
        /// The failing worker's stage.
        stage: StageId,
        /// The micro-batch it was working on, if the action has one.
        micro_batch: Option<MicroBatchId>,
        /// The action that failed.
        action: Action,
        /// Why: one of the variants from [`Panic`](EngineError::Panic) on. (In the
        /// [`source`](std::error::Error::source) chain it is this `Box`.)
        #[source]
        source: Box<EngineError>,
    },
    /// A step already failed: stage states may be partly updated, so the pipeline refuses to go
    /// on. Rebuild it (or reload a checkpoint).
    #[error(
        "the pipeline is unusable after a failed step (its stages may be partly updated); \
         build a new one or load a checkpoint"
    )]
    Poisoned,
    /// The batch cannot be fed to the pipeline: why (e.g. a [`Mismatch`](EngineError::Mismatch)).
    #[error("bad batch: {0}")]
    Batch(Box<EngineError>),
    /// The batch has fewer rows than `replicas × micro_batches` (each micro-batch needs a
    /// row). Found before any worker runs: the pipeline stays usable.
    #[error(
        "a batch of {rows} rows does not split into {replicas} replicas × {micro_batches} \
         micro-batches of at least one row: it needs at least {} rows",
        replicas * micro_batches
    )]
    BatchSplit {
        /// Rows in the batch.
        rows: usize,
        /// Data-parallel replicas.
        replicas: usize,
        /// Micro-batches per replica.
        micro_batches: usize,
    },
    /// Another process of a multi-process run failed (or stopped answering): this step is over.
    #[error("rank {rank} failed: {message}")]
    Peer {
        /// The failed process's rank.
        rank: usize,
        /// What it was doing and why it failed, as it reported (or as its silence shows).
        message: String,
        /// What would fix it, as it reported (or as its silence shows).
        remedy: Option<Remedy>,
    },
    /// Something that needs every worker of the world in this process, in a process that runs
    /// only some.
    #[error(
        "{operation} needs the whole world in one process, but this process runs {local} of its \
         {size} workers"
    )]
    PartialWorld {
        /// What needs it, e.g. "inference (it gathers every replica's outputs)".
        operation: &'static str,
        /// The workers this process runs.
        local: usize,
        /// The world's workers.
        size: usize,
        /// What does without it.
        remedy: Remedy,
    },
    /// A world with no workers.
    #[error("a world of {replicas} replicas × {stages} stages has no workers")]
    EmptyWorld {
        /// Replicas given.
        replicas: usize,
        /// Stages given.
        stages: usize,
    },
    /// A local worker that is not in the world.
    #[error("worker {worker} is outside the world of {replicas} replicas × {stages} stages")]
    OutsideWorld {
        /// The worker.
        worker: WorkerId,
        /// The world's replicas.
        replicas: usize,
        /// The world's stages.
        stages: usize,
    },
    /// A process that runs some of a pipeline rank's stages but not all: the stages of a rank
    /// take turns, which only works inside one process.
    #[error(
        "this process runs {worker} but not {missing}, another stage of pipeline rank {rank}: \
         a rank's stages take turns, so one process runs them all"
    )]
    RankAcrossProcesses {
        /// A local worker.
        worker: WorkerId,
        /// A worker of the same replica and pipeline rank that this process does not run.
        missing: WorkerId,
        /// Their pipeline rank.
        rank: usize,
    },
    /// A stage split that does not fit the world or the model.
    #[error(
        "the split {split} ({split_stages} stages, {split_layers} layers) does not fit a world \
         of {stages} stages and a model of {layers} layers"
    )]
    SplitMismatch {
        /// The split, as its text form.
        split: String,
        /// Its stages.
        split_stages: usize,
        /// Its layers.
        split_layers: usize,
        /// The world's stages.
        stages: usize,
        /// The model's layers.
        layers: usize,
    },
    /// A device list that is neither one device, one per stage nor one per worker.
    #[error("{devices} devices for {replicas} replicas × {stages} stages")]
    DeviceCount {
        /// Devices given.
        devices: usize,
        /// Replicas.
        replicas: usize,
        /// Stages.
        stages: usize,
    },
    /// Weights to load that lack a parameter of the model (or hold it in another shape).
    #[error("load_weights: the model has no parameter `{name}` of shape {shape:?}")]
    MissingParameter {
        /// The parameter's full-model name.
        name: String,
        /// Its shape in the model.
        shape: Vec<usize>,
    },
    /// A world to connect whose workers are not those the launch gave this process.
    #[cfg(feature = "mpi")]
    #[error(
        "rank {rank} runs {expected:?} of {layout_replicas} replicas × {layout_stages} stages, \
         but the world to connect has {local:?} of {replicas} × {stages}"
    )]
    LaunchMismatch {
        /// This process's rank.
        rank: usize,
        /// The workers the launch gave it.
        expected: Vec<WorkerId>,
        /// The launch's replicas.
        layout_replicas: usize,
        /// The launch's stages.
        layout_stages: usize,
        /// The world's local workers.
        local: Vec<WorkerId>,
        /// The world's replicas.
        replicas: usize,
        /// The world's stages.
        stages: usize,
    },
    /// A checkpoint cannot be saved now.
    #[error(
        "{pending} of {accumulation} accumulated batches are not applied yet; save after the \
         optimizer step (when the step report says optimizer_step)"
    )]
    MidAccumulation {
        /// Batches accumulated since the last optimizer step.
        pending: usize,
        /// Batches per optimizer step.
        accumulation: usize,
    },
    /// The plan is invalid.
    #[error(transparent)]
    Plan(#[from] ScheduleError),
    /// A worker thread died outside any action (an engine bug).
    #[error("{replica} / {stage}: worker thread died: {message}")]
    WorkerDied {
        /// Replica.
        replica: ReplicaId,
        /// Stage.
        stage: StageId,
        /// The panic message.
        message: String,
    },
    // ---- Why one action of one worker failed: the `source` of a `StageFailed`. ----
    /// A layer, the loss or burn panicked.
    #[error("panicked: {message}{context}")]
    Panic {
        /// The panic message.
        message: String,
        /// What the worker was computing on, e.g. " (input: rank-2 float [2, 8] received from
        /// stage 0)".
        context: String,
    },
    /// A layer rejected its input (wrong rank or kind, or its own reason).
    #[error("{error} (input: {input}{from})")]
    Layer {
        /// What the layer said (e.g. a [`Mismatch`](EngineError::Mismatch) or
        /// [`LayerRejected`](EngineError::LayerRejected)).
        error: Box<EngineError>,
        /// The input it was given.
        input: String,
        /// Where the input came from, e.g. " received from stage 0" (empty for stage 0).
        from: String,
    },
    /// The loss rejected the last stage's output or the targets.
    #[error("loss: {0}")]
    Loss(Box<EngineError>),
    /// The upstream gradient does not fit this stage's output.
    #[error("gradient: {0}")]
    Gradient(Box<EngineError>),
    /// The device failed to run the action's work (found when it was synchronised).
    #[error("device: {0}")]
    DeviceFailed(String),
    /// The backward reached a stage's input with no gradient: the stage's output does not
    /// depend on its input.
    #[error("no gradient reached this stage's input; the stage's output does not depend on it")]
    NoInputGradient,
    /// The skips of a route (a bundle's parts passed from a stashing to a popping stage) did not
    /// fit what a layer returned or a stage received.
    #[error("skips {names:?} from {stash} to {pop}: {what}: {error}")]
    SkipBundle {
        /// The skips' names.
        names: Vec<String>,
        /// The stashing stage.
        stash: StageId,
        /// The popping stage.
        pop: StageId,
        /// What did not fit, e.g. "received no bundle".
        what: String,
        /// Why.
        error: Box<EngineError>,
    },
    /// A gradient of the step is NaN or infinite (or its squared norm overflows f32); no stage
    /// applied the step. This is the lowest stage where one appeared.
    #[error(
        "non-finite gradient of `{parameter}` (the first stage and parameter with one; no \
         stage applied this step)"
    )]
    NonFinite {
        /// The parameter's full-model name, e.g. `3.linear.weight`.
        parameter: String,
    },

    // ---- What a layer or loss says of an activation ([`Layer::forward`](crate::Layer)). ----
    /// An activation of the wrong rank or kind.
    #[error("expected a {expected} tensor, got a {found} tensor of shape {shape:?}")]
    Mismatch {
        /// What was expected, e.g. "rank-2 float".
        expected: String,
        /// What was found, e.g. "rank-3 float".
        found: String,
        /// The shape found.
        shape: Vec<usize>,
    },
    /// The batch has fewer rows than the parts asked for (every part needs a row).
    #[error(
        "batch of {batch} rows does not split into {parts} parts of at least one row; use a batch \
         of at least {parts} rows (micro-batches × replicas) or fewer micro-batches"
    )]
    Ragged {
        /// Rows in the batch.
        batch: usize,
        /// Number of parts asked for.
        parts: usize,
    },
    /// A layer's own reason to reject its input: what a [`Layer`](crate::Layer) returns when
    /// no other variant fits.
    #[error("{0}")]
    LayerRejected(String),

    // ---- Transfers between stages ([`Transport`](crate::Transport)) and collectives over a
    // group ([`Collective`](crate::Collective)). ----
    /// Another worker failed: this step is over (a worker that sees it stops without an error
    /// of its own).
    #[error("step aborted by another worker's failure")]
    Aborted,
    /// A neighbouring stage is gone without an error of its own.
    #[error("transport: {peer} hung up while {tag:?} was awaited")]
    HungUp {
        /// The neighbour.
        peer: StageId,
        /// What was awaited or sent.
        tag: Tag,
    },
    /// Nothing came from a neighbouring stage within the communication timeout (multi-process
    /// runs).
    #[error(
        "transport: {peer} (MPI rank {rank}) sent nothing for {timeout:?} (the communication \
         timeout) while {tag:?} was awaited; it may be dead or stuck, waiting on a rank that is, \
         or its steps that slow"
    )]
    TransportTimeout {
        /// The neighbour.
        peer: StageId,
        /// The neighbour's process.
        rank: usize,
        /// What was awaited.
        tag: Tag,
        /// The communication timeout.
        timeout: Duration,
    },
    /// A neighbouring stage sent the same tag twice.
    #[error("transport: {peer} sent {tag:?} twice")]
    Duplicate {
        /// The neighbour.
        peer: StageId,
        /// The repeated tag.
        tag: Tag,
    },
    /// A member of a collective's group went away without an error of its own.
    #[error("collective: member {peer} of the {size}-member group hung up")]
    MemberHungUp {
        /// The peer's rank in the group.
        peer: usize,
        /// Group size.
        size: usize,
    },
    /// Nothing came from a member within the communication timeout (multi-process runs).
    #[error(
        "collective: member {peer} (MPI rank {rank}) of the {size}-member group sent nothing \
         for {timeout:?} (the communication timeout); it may be dead or stuck, waiting on a rank \
         that is, or its steps that slow"
    )]
    CollectiveTimeout {
        /// The peer's rank in the group.
        peer: usize,
        /// The peer's process.
        rank: usize,
        /// Group size.
        size: usize,
        /// The communication timeout.
        timeout: Duration,
    },
    /// Members disagree on a collective's buffer: they hold different models or different
    /// gradients.
    #[error(
        "collective: member {peer} sent {got} values for rank {rank}'s range, which holds \
         {expected}; the replicas of a stage must hold the same parameters"
    )]
    MemberMismatch {
        /// The sender's rank.
        peer: usize,
        /// This member's rank.
        rank: usize,
        /// Values expected.
        expected: usize,
        /// Values received.
        got: usize,
    },
    /// A collective's `bounds` do not split the buffer into one range per member.
    #[error(
        "collective: bounds {bounds:?} do not split {len} values into {size} consecutive ranges"
    )]
    Bounds {
        /// The ranges given.
        bounds: Vec<Range<usize>>,
        /// Buffer length.
        len: usize,
        /// Group size.
        size: usize,
    },

    // ---- The device probe ([`device::cuda`](crate::device::cuda)): what a CUDA device lacks. The
    // facade and the binary word the remedy (a builder call, a flag); the facts are the fields. ----
    /// This build has no CUDA backend.
    #[error(
        "cuda:{index}: this build has no CUDA backend (it was built without the `cuda` feature)"
    )]
    NotBuilt {
        /// The GPU asked for.
        index: usize,
    },
    /// The NVIDIA driver library could not be loaded.
    #[error(
        "cuda:{index}: the NVIDIA driver library libcuda.so could not be loaded ({detail}); install \
         the NVIDIA driver, or put the directory holding libcuda.so.1 on LD_LIBRARY_PATH"
    )]
    NoDriver {
        /// The GPU asked for.
        index: usize,
        /// What the loader said (the library names it searched for).
        detail: String,
    },
    /// The driver is there but has no GPU with that index.
    #[error(
        "cuda:{index}: this machine has {count} CUDA device(s){}; use a device index below {count} \
         (nvidia-smi lists them)",
        if *count > 0 { format!(" (cuda:0..cuda:{})", count - 1) } else { String::new() }
    )]
    NoSuchDevice {
        /// The GPU asked for.
        index: usize,
        /// GPUs the driver reports.
        count: usize,
    },
    /// NVRTC, which compiles the CUDA build's kernels at run time, could not be loaded.
    #[error(
        "cuda:{index}: NVRTC (libnvrtc.so) could not be loaded ({detail}); it compiles pipetrain's \
         CUDA kernels at run time: install the CUDA runtime, or put the directory holding \
         libnvrtc.so.13 on LD_LIBRARY_PATH (PyTorch ships one in site-packages/nvidia/cu13/lib)"
    )]
    NoNvrtc {
        /// The GPU asked for.
        index: usize,
        /// What the loader or NVRTC said.
        detail: String,
    },
    /// The driver refused: initialisation failed, or the device did not run a first operation.
    #[error("cuda:{index}: the CUDA driver failed: {detail}")]
    Driver {
        /// The GPU asked for.
        index: usize,
        /// The driver's words.
        detail: String,
    },

    /// A GPU already runs f32 matmuls at another precision than the one asked for: cubecl fixes
    /// it when the device starts, once per process ([`MatmulPrecision`](crate::MatmulPrecision)).
    #[error(
        "cuda:{index}: f32 matmuls on this GPU already run in {running} (fixed when the device \
         was first used in this process), not the {requested} asked for"
    )]
    MatmulPrecisionFixed {
        /// The GPU.
        index: usize,
        /// The precision it runs with.
        running: crate::MatmulPrecision,
        /// The precision asked for.
        requested: crate::MatmulPrecision,
    },

    /// A layer holds a module that cannot compute in the precision asked for.
    #[error(
        "layer {layer} holds a {module}, which cannot train in {precision}: burn's {module} keeps \
         its running statistics in fp32"
    )]
    PrecisionUnsupported {
        /// The layer, counted in the whole model.
        layer: usize,
        /// The module's type.
        module: String,
        /// The precision asked for.
        precision: crate::Precision,
    },

    // ---- Ties ([`Tie`](crate::Tie)): a tie the model does not fit. ----
    /// A tie names a parameter the model lacks.
    #[error("tie `{tie}`: the model has no parameter `{name}` (it has e.g. {examples})")]
    TieUnknown {
        /// The tie.
        tie: String,
        /// The missing name.
        name: String,
        /// A few names the model does have.
        examples: String,
    },
    /// A tie's two shapes do not match (after the transposition, if any).
    #[error("tie `{tie}`: shapes {first:?} and {second:?} do not match{hint}")]
    TieShape {
        /// The tie.
        tie: String,
        /// The first parameter's shape.
        first: Vec<usize>,
        /// The second's.
        second: Vec<usize>,
        /// A remedy.
        hint: String,
    },

    // ---- Skips ([`check_skips`](crate::check_skips)): a layer sequence whose stashes and pops do
    // not pair up. Layers are numbered in model order. ----
    /// A pop with no stash of that name before it.
    #[error(
        "layer {pop} pops skip `{name}`, which no earlier layer stashes{later}; stash it in a \
         layer before {pop} or drop the pop",
        later = match stash {
            Some(s) => format!(" (layer {s} stashes it, after the pop)"),
            None => String::new(),
        }
    )]
    PopWithoutStash {
        /// The skip.
        name: String,
        /// The popping layer.
        pop: usize,
        /// A later layer that stashes it, if one does.
        stash: Option<usize>,
    },
    /// Two stashes of one name.
    #[error("layers {first} and {second} both stash skip `{name}`; give each skip its own name")]
    StashedTwice {
        /// The skip.
        name: String,
        /// The first stashing layer.
        first: usize,
        /// The second.
        second: usize,
    },
    /// A stash nothing pops.
    #[error("layer {stash} stashes skip `{name}`, which no later layer pops; pop it or drop it")]
    NeverPopped {
        /// The skip.
        name: String,
        /// The stashing layer.
        stash: usize,
    },
    /// Two pops of one name.
    #[error("layers {first} and {second} both pop skip `{name}`; a stashed skip is popped once")]
    PoppedTwice {
        /// The skip.
        name: String,
        /// The first popping layer.
        first: usize,
        /// The second.
        second: usize,
    },

    // ---- Files ([`output`](crate::output), [`checkpoint`](crate::checkpoint)): why a file could not
    // be written or read. ----
    /// The destination exists and is not a regular file: it is never replaced.
    #[error(
        "{} is {what}, not a regular file, and is never replaced: give the path of a file (a \
         new one, or one this command wrote before)",
        path.display()
    )]
    NotRegular {
        /// The destination.
        path: PathBuf,
        /// What it is, e.g. "a directory".
        what: &'static str,
    },
    /// The destination's directory does not exist.
    #[error("directory {} does not exist; create it or choose another path", dir.display())]
    NoDirectory {
        /// The destination.
        path: PathBuf,
        /// Its directory.
        dir: PathBuf,
    },
    /// No file can be created beside the destination.
    #[error(
        "{}: cannot create a file in its directory ({source}); choose a writable directory",
        path.display()
    )]
    Unwritable {
        /// The destination.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The destination's name leaves no room for its temp file's name within the file system's
    /// limit (255 bytes on most): the temp file adds some 30 bytes to it.
    #[error(
        "{}: its name is {name} bytes, and the temp file written beside it first ({temp} bytes: \
         `.NAME.PID@HOST.XXXXXX.tmp`) is too long for the file system; choose a name shorter \
         by {over} bytes or more",
        path.display()
    )]
    NameTooLong {
        /// The destination.
        path: PathBuf,
        /// Its file name's length, in bytes.
        name: usize,
        /// The temp file name's length, in bytes.
        temp: usize,
        /// How far the temp file's name is above 255 bytes.
        over: usize,
    },
    /// Writing, syncing or renaming failed (a full disk, an I/O error).
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// The file was renamed into place, but its directory could not be synced: a crash now may
    /// lose it.
    #[error(
        "fsync of directory {} failed after writing a file into it ({source}); it may not \
         survive a crash: check the file system",
        dir.display()
    )]
    DirectorySync {
        /// The directory.
        dir: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },

    // ---- Checkpoints ([`checkpoint`](crate::checkpoint)): a file that does not fit. ----
    /// A checkpoint that is not a readable safetensors file, or not one pipetrain wrote.
    #[error("{}: not a readable checkpoint or safetensors weights file: {reason}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A safetensors file without pipetrain's metadata: plain weights (e.g. a PyTorch state
    /// dict), usable with [`init_from`](crate::checkpoint::init_from) but not to resume.
    #[error(
        "{}: a weights file, not a pipetrain checkpoint (no optimizer state or step)",
        path.display()
    )]
    NotACheckpoint {
        /// The file.
        path: PathBuf,
    },
    /// A checkpoint tensor whose bytes differ from the checksum written with it: the file was
    /// changed or damaged after it was written.
    #[error(
        "{}: tensor `{tensor}` does not match the checksum written with it (stored {expected}, \
         read {found}): the file was changed or damaged after it was written",
        path.display()
    )]
    Checksum {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// The checksum stored in the file's metadata (`none`: the tensor is not listed).
        expected: String,
        /// The checksum of the bytes read (`no such tensor`: listed but absent).
        found: String,
    },
    /// Checkpoint keys that do not match, listed the way PyTorch's `load_state_dict(strict=True)` lists
    /// them: parameters of the model the file lacks, and tensors of the file no parameter takes.
    #[error(
        "{}: error(s) in loading the state dict: {}",
        path.display(),
        keys_text(missing, unexpected)
    )]
    Keys {
        /// The file.
        path: PathBuf,
        /// The model's parameters the file lacks (full-model names).
        missing: Vec<String>,
        /// The file's tensors that match no parameter (after renaming).
        unexpected: Vec<String>,
    },
    /// Checkpoint rename rules that do not apply: a pattern that is not a regular expression, or two
    /// tensors renamed onto one name.
    #[error("{}: rename rules: {reason}", path.display())]
    Rename {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the tensors or the pattern.
        reason: String,
    },
    /// A checkpoint tensor's shape or type does not fit the model.
    #[error("{}: tensor `{tensor}` does not fit the model: {reason}", path.display())]
    TensorMismatch {
        /// The file.
        path: PathBuf,
        /// The tensor's name.
        tensor: String,
        /// How it differs.
        reason: String,
    },
    /// Two processes' parts of one checkpoint hold different values of a weight: the replicas
    /// they run no longer hold equal weights, which every step must keep them doing.
    #[error(
        "{}: ranks {first} and {second} hold different values of tensor `{tensor}`: the \
         replicas they run must hold equal weights after every step",
        path.display()
    )]
    PartsDiffer {
        /// The checkpoint.
        path: PathBuf,
        /// The first tensor found to differ.
        tensor: String,
        /// The first rank holding it (the part kept so far).
        first: usize,
        /// The rank whose value differs.
        second: usize,
    },
    /// A checkpoint weight that is NaN or infinite: training from it would make every step NaN.
    #[error(
        "{}: tensor `{tensor}` element {index} is {value}; every weight must be finite: use \
         the file of a run from before it diverged",
        path.display()
    )]
    NonFiniteWeight {
        /// The file.
        path: PathBuf,
        /// The tensor's name.
        tensor: String,
        /// The element's flat index.
        index: usize,
        /// The value (and the type it was converted from).
        value: String,
    },
    /// A checkpoint's optimizer state holds a value no run writes (a NaN or negative second
    /// moment, a step count above the file's steps): resumed, it would make the weights NaN or
    /// overflow the step counter.
    #[error("{}: optimizer state `{entry}` {reason}", path.display())]
    OptimizerState {
        /// The file.
        path: PathBuf,
        /// The entry: the tensor's name (`__optimizer__/0.linear.weight/momentum.moment_2`) or
        /// the parameter's scalar (`0.linear.weight/momentum.time`).
        entry: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A checkpoint's optimizer state was saved for another optimizer.
    #[error(
        "{}: the optimizer state is for `{saved}`, but this run uses `{current}`",
        path.display()
    )]
    OptimizerMismatch {
        /// The file.
        path: PathBuf,
        /// The saved optimizer.
        saved: String,
        /// This run's.
        current: String,
    },

    // ---- Multi-process runs ([`mpi`](crate::comm::mpi), feature `mpi`): why one cannot start or go
    // on (another rank's failure is [`Peer`](EngineError::Peer)). ----
    /// MPI could not be initialised (not started by `mpirun`/`srun`, or initialised twice).
    #[cfg(feature = "mpi")]
    #[error(
        "MPI could not be initialised ({0}); pipetrain needs an MPI launcher (`mpirun -np N \
         pipetrain ...` or `srun`) and a build with the cargo feature `mpi`"
    )]
    MpiInit(String),
    /// MPI did not start within the communication timeout: a process of the launch never
    /// joined the world.
    #[cfg(feature = "mpi")]
    #[error(
        "MPI did not start within {seconds} s: a process of the launch never joined it (an \
         MPMD command that runs another subcommand, or a process that ended first)"
    )]
    MpiStartTimeout {
        /// The communication timeout, in seconds.
        seconds: f64,
    },
    /// The MPI library grants less thread support than the communication thread needs.
    #[cfg(feature = "mpi")]
    #[error(
        "the MPI library grants thread level {granted}, pipetrain needs at least Funneled (one \
         thread makes every MPI call); use an MPI built with thread support"
    )]
    MpiThreading {
        /// What the library granted.
        granted: String,
    },
    /// An MPI launcher's variable disagrees with what MPI says.
    #[cfg(feature = "mpi")]
    #[error(
        "{variable}={value} disagrees with MPI, which says {what} is {mpi}; launch every rank \
         the same way (a stale {variable} from another launcher is the usual cause: unset it)"
    )]
    LauncherEnvironment {
        /// The variable, e.g. `SLURM_PROCID`.
        variable: String,
        /// Its value.
        value: String,
        /// What it stands for: `rank`, `world size` or `local rank`.
        what: &'static str,
        /// MPI's value.
        mpi: String,
    },
    /// The MPI processes cannot hold the world.
    #[cfg(feature = "mpi")]
    #[error(
        "{processes} processes × {per_process} workers per process cannot run {replicas} \
         replicas × {stages} stages ({workers} workers){}",
        match needed {
            Some(_) => String::new(),
            None => format!(
                "; no process count does, as {per_process} workers per process do not divide \
                 {workers}"
            ),
        }
    )]
    ProcessLayout {
        /// MPI's world size.
        processes: usize,
        /// `--workers-per-process`.
        per_process: usize,
        /// Replicas.
        replicas: usize,
        /// Stages.
        stages: usize,
        /// replicas × stages.
        workers: usize,
        /// The process count that fits, if one does.
        needed: Option<usize>,
    },
    /// An MPI message is malformed (a version mismatch between ranks, or corruption).
    #[cfg(feature = "mpi")]
    #[error("malformed message: {0}; run the same pipetrain build on every rank")]
    MalformedMessage(String),
    /// Another MPI rank stopped answering.
    #[cfg(feature = "mpi")]
    #[error(
        "rank {rank} failed: sent nothing for {seconds} s (the communication timeout) {during}; \
         it may be dead or stuck, or waiting on a rank that is"
    )]
    Silent {
        /// The rank.
        rank: usize,
        /// How long it has been silent: the communication timeout, in seconds.
        seconds: f64,
        /// What this process waited in, e.g. "at a broadcast or gather of the launcher".
        during: &'static str,
    },
    /// The communication thread is gone (MPI failed under it).
    #[cfg(feature = "mpi")]
    #[error("the MPI communication thread is gone: {0}")]
    MpiGone(String),

    // ---- Settings ([`OptimizerConfig`](crate::OptimizerConfig), [`Remat`](crate::Remat)). ----
    /// An optimizer setting torch.optim would refuse.
    #[error("optimizer {setting} = {value:?}: {remedy}")]
    OptimizerSetting {
        /// The setting, e.g. `beta1`.
        setting: &'static str,
        /// Its value.
        value: f64,
        /// What would be accepted.
        remedy: &'static str,
    },
    /// An unknown re-materialization mode (parsing a [`Remat`](crate::Remat)).
    #[error("unknown remat mode `{0}`: expected never, except_last or always")]
    UnknownRemat(String),
}

impl Remedied for EngineError {
    fn remedy(&self) -> Option<Remedy> {
        let init_from = || Remedy::set(Setting::InitFrom, Value::Any);
        match self {
            EngineError::StageFailed { source, .. } => source.remedy(),
            EngineError::NonFinite { .. } => Some(Remedy::one_of([
                Remedy::set(Setting::LearningRate, Value::Smaller),
                Remedy::set(Setting::ClipGradNorm, Value::Number(1.0)),
                Remedy::set(Setting::SkipNonFinite, Value::On),
            ])),
            // A timeout: a larger communication timeout, if the peer is only slow.
            EngineError::TransportTimeout { .. } | EngineError::CollectiveTimeout { .. } => {
                Some(Remedy::set(Setting::CommTimeout, Value::Larger))
            }
            // No replica or no micro-batch: at least one of each.
            EngineError::BatchSplit {
                replicas,
                micro_batches,
                ..
            } if *replicas == 0 || *micro_batches == 0 => Some(Remedy::one_of(
                [
                    (*replicas == 0).then(|| Remedy::set(Setting::Replicas, Value::Count(1))),
                    (*micro_batches == 0)
                        .then(|| Remedy::set(Setting::MicroBatches, Value::Count(1))),
                ]
                .into_iter()
                .flatten(),
            )),
            // The least batch that splits, or as many micro-batches as each replica has rows.
            EngineError::BatchSplit {
                rows,
                replicas,
                micro_batches,
            } => Some(Remedy::one_of(
                [
                    Some(Remedy::set(
                        Setting::Batch,
                        Value::Count(replicas * micro_batches),
                    )),
                    (*replicas > 0 && rows >= replicas)
                        .then(|| Remedy::set(Setting::MicroBatches, Value::Count(rows / replicas))),
                ]
                .into_iter()
                .flatten(),
            )),
            EngineError::Peer { remedy, .. } => remedy.clone(),
            EngineError::PartialWorld { remedy, .. } => Some(remedy.clone()),
            EngineError::DeviceCount {
                replicas, stages, ..
            } => Some(Remedy::sentence(format!(
                "give one device for all workers, one per stage ({stages}) or one per worker \
                 ({})",
                replicas * stages
            ))),
            EngineError::RankAcrossProcesses { .. } => Some(Remedy::sentence(
                "give each process whole pipeline ranks, every stage the plan places on them \
                 (`mpi::Placement::with_ranks`)",
            )),
            #[cfg(feature = "mpi")]
            EngineError::LaunchMismatch { .. } => Some(Remedy::sentence(
                "build the workers' world from the launch's local workers",
            )),
            #[cfg(feature = "mpi")]
            EngineError::ProcessLayout {
                needed,
                processes,
                per_process,
                workers,
                ..
            } => {
                // Only a count that fits these processes: `-np 3` for 2 workers has none.
                let fits = (*processes > 0 && workers % processes == 0)
                    .then_some(workers / processes)
                    .filter(|k| *k > 0 && k != per_process)
                    .map(|k| Remedy::set(Setting::WorkersPerProcess, Value::Count(k)));
                let processes = needed.map(|n| Remedy::set(Setting::Processes, Value::Count(n)));
                Some(match (processes, fits) {
                    (Some(p), Some(k)) => Remedy::one_of([p, k]),
                    (Some(p), None) => p,
                    (None, Some(k)) => k,
                    (None, None) => Remedy::sentence(format!(
                        "start a number of processes that divides the {workers} workers"
                    )),
                })
            }
            #[cfg(feature = "mpi")]
            EngineError::Silent { .. } => Some(Remedy::set(Setting::CommTimeout, Value::Larger)),
            #[cfg(feature = "mpi")]
            EngineError::MpiStartTimeout { .. } => Some(Remedy::one_of([
                Remedy::sentence(
                    "start every process of the launch with the same training command",
                ),
                Remedy::set(Setting::CommTimeout, Value::Larger),
            ])),
            EngineError::PartsDiffer { .. } => Some(Remedy::sentence(
                "this is a bug: please report it with the command line (verifying the run \
                 names the replica and the step from which the weights parted)",
            )),
            EngineError::NotACheckpoint { .. } => Some(init_from()),
            EngineError::Checksum { .. } => Some(Remedy::sentence(
                "use another checkpoint (an earlier one, or a copy of this one made before the \
                 damage); a file changed on purpose must drop its `pipetrain.checksums` metadata",
            )),
            EngineError::Keys { .. } => Some(Remedy::set(Setting::Rename, Value::Any)),
            EngineError::OptimizerMismatch { .. } => Some(Remedy::one_of([
                Remedy::sentence("resume with the same optimizer"),
                init_from(),
            ])),
            // Its weights may be sound: start from them, with a fresh optimizer state.
            EngineError::OptimizerState { .. } => Some(Remedy::one_of([
                Remedy::sentence("use the file of a run from before it diverged"),
                init_from(),
            ])),
            EngineError::Plan(e) => e.remedy(),
            EngineError::PrecisionUnsupported { .. } => Some(Remedy::set(
                Setting::Precision,
                Value::mode(crate::Precision::Fp32.name()),
            )),
            EngineError::MatmulPrecisionFixed { running, .. } => Some(Remedy::one_of([
                Remedy::set(Setting::MatmulPrecision, Value::mode(running.name())),
                Remedy::sentence(
                    "choose the precision before the GPU's first use (pipetrain_engine::device::cuda_with)",
                ),
            ])),
            _ => None,
        }
    }
}

/// The engine's result type.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

impl EngineError {
    /// Whether a checkpoint or a file could not be written or read: the file and checkpoint
    /// variants, from [`NotRegular`](EngineError::NotRegular) to
    /// [`OptimizerMismatch`](EngineError::OptimizerMismatch).
    pub fn is_file(&self) -> bool {
        use EngineError as E;
        let output = matches!(
            self,
            E::NotRegular { .. }
                | E::NoDirectory { .. }
                | E::Unwritable { .. }
                | E::NameTooLong { .. }
        );
        let io = matches!(self, E::Io { .. } | E::DirectorySync { .. });
        let checkpoint = matches!(
            self,
            E::Corrupt { .. }
                | E::NotACheckpoint { .. }
                | E::Checksum { .. }
                | E::Keys { .. }
                | E::Rename { .. }
        );
        let weights = matches!(
            self,
            E::TensorMismatch { .. }
                | E::NonFiniteWeight { .. }
                | E::OptimizerMismatch { .. }
                | E::OptimizerState { .. }
        );
        output || io || checkpoint || weights
    }

    /// `self` as the reason a batch cannot be fed: [`EngineError::Batch`].
    pub fn bad_batch(self) -> Self {
        EngineError::Batch(Box::new(self))
    }
}

/// The I/O error on `path` as an [`EngineError::Io`].
pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> EngineError + '_ {
    move |source| EngineError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A panic payload as text.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-text panic payload".to_string()
    }
}

/// `Missing key(s): "a", "b". Unexpected key(s): "c"` (at most 8 of each named).
fn keys_text(missing: &[String], unexpected: &[String]) -> String {
    let list = |keys: &[String]| {
        let mut text: Vec<String> = keys.iter().take(8).map(|k| format!("\"{k}\"")).collect();
        if keys.len() > 8 {
            text.push(format!("and {} more", keys.len() - 8));
        }
        text.join(", ")
    };
    let mut parts = Vec::new();
    if !missing.is_empty() {
        parts.push(format!("missing key(s) in the file: {}", list(missing)));
    }
    if !unexpected.is_empty() {
        parts.push(format!(
            "unexpected key(s) in the file: {}",
            list(unexpected)
        ));
    }
    parts.join("; ")
}
