//! The flags of `pipetrain train` (and `pipetrain eval`, which reads the same model, data and
//! seed flags). Every flag can also come from a TOML file: see [`crate::config`].

use std::path::PathBuf;

use clap::ValueEnum;
use pipetrain::Remat;

use crate::backward::BackwardArg;
use crate::remat::RematArg;
use crate::schedule::ScheduleArg;

/// Which model to train.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum ModelKind {
    /// `--hidden-layers` × (Linear(width, width) + ReLU) + Linear(width, classes).
    #[default]
    Mlp,
    /// ResNet-like CNN with batch norm: stem, `--blocks` residual blocks of `--channels`, pooled
    /// linear head; `--image`-sided inputs. Needs `--remat never`.
    Resnet,
    /// U-Net-like CNN: stem, `--depth` levels down (stride-2 conv, channels doubled) and up
    /// (upsample, conv, + the long skip of its level), pooled linear head; `--channels`,
    /// `--image`-sided inputs. The skips cross stage boundaries wherever the model is cut.
    Unet,
    /// GPT-like decoder: embeddings, `--layers` blocks of `--d-model` with `--heads` heads,
    /// next-token head over `--vocab`; `--context` tokens per example.
    Gpt,
    /// Llama-family decoder (RMSNorm, rotary embeddings, grouped-query attention, SwiGLU):
    /// `--layers` blocks of `--d-model` with `--heads` query and `--kv-heads` key/value heads,
    /// an `--intermediate`-wide MLP, `--vocab` tokens; or a Hugging Face checkpoint's
    /// (`--init hf:DIR`), whose config.json sizes it.
    Llama,
}

/// Which optimizer each stage runs.
#[derive(Clone, Copy, Debug, Default, ValueEnum)]
pub enum OptimizerKind {
    /// Plain SGD.
    Sgd,
    /// SGD with momentum 0.9.
    SgdMomentum,
    /// Adam (the default: the first run, docs/concepts.md, learns in 20 steps).
    #[default]
    Adam,
    /// AdamW.
    Adamw,
}

/// Which learning-rate schedule (`--lr-schedule`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum ScheduleKindArg {
    /// The same rate every step.
    #[default]
    Constant,
    /// Cosine annealing to --min-lr (CosineAnnealingLR).
    Cosine,
    /// A straight line to --min-lr (LinearLR).
    Linear,
    /// x --lr-gamma every --lr-step-size steps (StepLR).
    Step,
}

/// Pipeline stages when neither `--stages` nor `--balance` says: the one default.
pub const DEFAULT_STAGES: usize = 2;

impl TrainArgs {
    /// The GEMM library: `--gemm`, else `PIPETRAIN_GEMM` (what the device check sets), else
    /// none chosen (the builder's default).
    ///
    /// # Errors
    /// A usage failure naming the variable when `PIPETRAIN_GEMM` is neither `cublas` nor `burn`.
    pub fn gemm_library(&self) -> Result<Option<pipetrain::GemmLibrary>, crate::failure::Failure> {
        pipetrain::GemmLibrary::chosen(self.gemm).map_err(crate::failure::Failure::usage)
    }

    /// What the action times measure: `--timing` if given, else device times under
    /// `--profile` (its slices should be the device's work) and host times otherwise (a step
    /// then waits for its device once, at its end).
    pub fn timing(&self) -> pipetrain::Timing {
        match (self.timing, &self.profile) {
            (Some(timing), _) => timing,
            (None, Some(_)) => pipetrain::Timing::Device,
            (None, None) => pipetrain::Timing::Host,
        }
    }

    /// Whether the flag of field `id` was given (on the command line or in `--config`), not
    /// left at its default.
    pub fn given(&self, id: &str) -> bool {
        self.given.iter().any(|g| g == id)
    }

    /// The flags given, as `(key, as given)`: `("lr", "--lr 0.1")`.
    pub fn given_as_typed(&self) -> Vec<(&str, String)> {
        self.given_flags
            .iter()
            .map(|f| (f.key.as_str(), f.shown()))
            .collect()
    }

    /// The pipeline's stages: the length of `--balance`, else `--stages`, else
    /// [`DEFAULT_STAGES`] (the builder refuses a `--stages` that disagrees with `--balance`).
    pub fn stages(&self) -> usize {
        self.balance
            .as_ref()
            .map_or(self.stages.unwrap_or(DEFAULT_STAGES), Vec::len)
    }

    /// `--replicas × stages × --micro-batches`, from which the binary reads every product
    /// (workers, micro-batches per step, rows per micro-batch).
    pub fn layout(&self) -> pipetrain::engine::Layout {
        pipetrain::engine::Layout::new(self.replicas, self.stages(), self.micro_batches)
    }

    /// `--lr`, or the optimizer's default: 1e-3 for Adam and AdamW (torch.optim's), 0.01 for
    /// SGD.
    pub fn lr(&self) -> f64 {
        self.lr_flag.unwrap_or(match self.optimizer {
            OptimizerKind::Adam | OptimizerKind::Adamw => 1e-3,
            OptimizerKind::Sgd | OptimizerKind::SgdMomentum => 0.01,
        })
    }

    /// `--held-out`, or its default.
    pub fn held_out(&self) -> f64 {
        self.held_out.unwrap_or(0.1)
    }

    /// `--remat`, or its default for the model.
    pub fn remat(&self) -> Remat {
        match (self.remat, self.model) {
            (Some(r), _) => r.into(),
            (None, ModelKind::Resnet) => Remat::Never,
            (None, _) => Remat::ExceptLast,
        }
    }
}

/// clap's parser for `--rename REGEX=REPLACEMENT` (split at the last `=`: a replacement holds
/// none, a pattern may).
/// `--init`'s value: `hf:DIR` names the directory DIR.
fn parse_init(text: &str) -> Result<PathBuf, String> {
    Ok(pipetrain::trainer::hf::init_path(text))
}

fn parse_rename(text: &str) -> Result<(String, String), String> {
    match text.rsplit_once('=') {
        Some((pattern, replacement)) if !pattern.is_empty() => {
            Ok((pattern.to_string(), replacement.to_string()))
        }
        _ => Err(format!(
            "`{text}` is not REGEX=REPLACEMENT; e.g. '^model\\.=' drops a `model.` prefix"
        )),
    }
}

/// clap's parser for `--verify-tolerance`: a finite number >= 0 (clap names the flag).
fn parse_tolerance(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!(
            "`{text}` is not a finite number >= 0; give a relative difference such as 1e-5"
        )),
    }
}

/// Arguments of `pipetrain train`.
#[derive(clap::Args, Debug, Default)]
#[command(after_help = crate::help::after_help())]
pub struct TrainArgs {
    /// Read flags from a TOML file (keys are flag names, with `-` or `_`; arrays are
    /// comma-joined; `true` sets a switch). Flags on the command line override the file.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Model to train.
    #[arg(long, value_enum, default_value_t)]
    pub model: ModelKind,
    /// MLP: hidden width (the input dimension is the data's).
    #[arg(long, default_value_t = 1024, help_heading = "MLP")]
    pub width: usize,
    /// MLP: hidden Linear+ReLU blocks.
    #[arg(long, default_value_t = 8, help_heading = "MLP")]
    pub hidden_layers: usize,
    /// MLP and ResNet: output classes; every label of the data must be in 0..classes.
    #[arg(long, default_value_t = 10)]
    pub classes: usize,
    /// ResNet: channels after the stem.
    #[arg(long, default_value_t = 16, help_heading = "ResNet")]
    pub channels: usize,
    /// ResNet: residual blocks (every second one downsamples).
    #[arg(long, default_value_t = 2, help_heading = "ResNet")]
    pub blocks: usize,
    /// ResNet: side of the square synthetic input images (real data brings its own).
    #[arg(long, default_value_t = 32, help_heading = "ResNet")]
    pub image: usize,
    /// U-Net: levels down and up (--image must divide by 2^depth); --channels, --image and
    /// --classes as for the ResNet.
    #[arg(long, default_value_t = 2, help_heading = "U-Net")]
    pub depth: usize,
    /// GPT: vocabulary size; every token id of the data must be in 0..vocab (text: data is
    /// bytes, so up to 256).
    #[arg(long, default_value_t = 256, help_heading = "GPT")]
    pub vocab: usize,
    /// GPT: tokens per example (the window length of `text:` data).
    #[arg(long, default_value_t = 64, help_heading = "GPT")]
    pub context: usize,
    /// GPT: sequences of a length drawn per batch from MIN..MAX (both included, MAX ≤
    /// --context; the first batch is MAX long): shapes that change between steps, no re-planning.
    #[arg(long, value_name = "MIN..MAX", help_heading = "GPT")]
    pub context_range: Option<pipetrain_data::ContextRange>,
    /// GPT: model width.
    #[arg(long, default_value_t = 64, help_heading = "GPT")]
    pub d_model: usize,
    /// GPT: attention heads (must divide --d-model).
    #[arg(long, default_value_t = 4, help_heading = "GPT")]
    pub heads: usize,
    /// GPT: transformer blocks.
    #[arg(long, default_value_t = 2, help_heading = "GPT")]
    pub layers: usize,
    /// Llama: key/value heads (grouped-query attention; must divide --heads). Default: --heads.
    #[arg(long, help_heading = "Llama")]
    pub kv_heads: Option<usize>,
    /// Llama: width of the SwiGLU MLP. Default: 8/3 × --d-model, rounded up to a multiple of 8.
    #[arg(long, help_heading = "Llama")]
    pub intermediate: Option<usize>,
    /// Data: with `--data text:FILE`, tokenize the text with this Hugging Face tokenizer.json
    /// (the `tokenizers` crate) instead of taking its bytes as tokens; every id must be below
    /// the model's vocabulary.
    #[arg(long, value_name = "FILE", help_heading = "Data")]
    pub tokenizer: Option<PathBuf>,
    /// Data: synthetic, mnist:DIR, cifar10:DIR, text:FILE or tensors:FILE (safetensors with
    /// tensors `x` and `y`, or, for --model gpt, int token windows `tokens` [N, context + 1]).
    #[arg(long, default_value = "synthetic", help_heading = "Data")]
    pub data: String,
    /// Train on data with NaN or infinite float values (refused by default, naming the row).
    #[arg(long, help_heading = "Data")]
    pub allow_nonfinite_inputs: bool,
    /// Fraction of loaded data held out of training and evaluated at the end [default: 0.1];
    /// 0 trains on everything (no held-out metric). Synthetic data holds out one batch of
    /// --batch rows instead (and takes only 0).
    #[arg(long, value_name = "FRACTION", help_heading = "Data")]
    pub held_out: Option<f64>,
    /// Loaded data: train each epoch's short last batch too (default: drop it); it needs at
    /// least --replicas × --micro-batches rows, cut into micro-batches that differ by a row.
    #[arg(long, help_heading = "Data")]
    pub keep_last: bool,
    /// Visit loaded data in file order every epoch instead of a seeded shuffle.
    #[arg(long, help_heading = "Data")]
    pub no_shuffle: bool,
    /// Pipeline stages. Default: 2, or the length of --balance.
    #[arg(long)]
    pub stages: Option<usize>,
    /// Layers per stage, e.g. `5,4` (default: balanced by measured time).
    #[arg(long, value_delimiter = ',')]
    pub balance: Option<Vec<usize>>,
    /// Data-parallel replicas of the pipeline: replica i trains on shard i of every batch, and
    /// the replicas all-reduce their gradients.
    #[arg(long, default_value_t = 1)]
    pub replicas: usize,
    /// Batches whose gradients are accumulated (no all-reduce) before each optimizer step.
    #[arg(long, default_value_t = 1)]
    pub accumulate: usize,
    /// ZeRO level, sharding across the replicas of each stage: 0 (off), 1 (optimizer state), 2
    /// (and gradients: reduced to their owners after the stage's last backward), 3 (and
    /// parameters: whole only between the stage's unshard and reshard in each step). Levels 2
    /// and 3 are actions of the plan (`pipetrain plan --zero 3`); docs/zero.md.
    #[arg(long, default_value_t = 0)]
    pub zero: u8,
    /// All-reduce bucket size in MiB.
    #[arg(long, default_value_t = 25.0)]
    pub bucket_mb: f64,
    /// Bytes each worker may hold (parameters, gradients, optimizer state, stashed
    /// activations, deferred weight-gradient inputs): plain bytes or KiB/MiB/GiB, e.g. `2GiB`. The split by measured time is then
    /// the fastest whose every stage fits; an error names the least budget that would.
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    pub memory_budget: Option<u64>,
    /// Micro-batches per step.
    #[arg(long, default_value_t = 8)]
    pub micro_batches: usize,
    /// Mini-batch size (rows per step): any size of at least --replicas × --micro-batches;
    /// micro-batches then differ by at most one row, each loss weighted by its rows.
    #[arg(long, default_value_t = 256)]
    pub batch: usize,
    /// Pipeline schedule.
    #[arg(long, value_enum, default_value_t, ignore_case = true)]
    pub schedule: ScheduleArg,
    /// Chunks of the model per worker under --schedule interleaved, interleaved-zb or
    /// looped-bfs (v ≥ 2) [default: 2]. Refused with any other schedule.
    #[arg(long, value_name = "V")]
    pub virtual_stages: Option<usize>,
    /// Run a hand-written compute plan instead of a schedule: CSV (one row of actions per
    /// stage, e.g. `0F0,0F1,0B0,0B1`) or the text form; `pipetrain plan --format csv` writes
    /// one. Validated (complete, deadlock-free) before training; its stages and micro-batches
    /// must be --stages and --micro-batches.
    #[arg(long, value_name = "FILE", conflicts_with = "schedule")]
    pub plan: Option<PathBuf>,
    /// Re-materialization. Default: except_last, or never for --model resnet (batch norm needs
    /// it; other modes are refused with it).
    #[arg(long, value_enum, ignore_case = true)]
    pub remat: Option<RematArg>,
    /// Backward: split runs the dense layers (the MLP's) by hand, sending input gradients
    /// upstream at once and computing weight gradients once per --weight-group micro-batches;
    /// fused runs every layer's backward through autodiff.
    #[arg(long, value_enum, default_value_t, ignore_case = true)]
    pub backward: BackwardArg,
    /// Micro-batches whose weight gradients are computed together with --backward split
    /// (0: all of the step's, the fastest; smaller holds less memory).
    #[arg(long, default_value_t = 0)]
    pub weight_group: usize,
    /// Optimizer: torch.optim's SGD, Adam or AdamW, with PyTorch's defaults.
    #[arg(long, value_enum, default_value_t, help_heading = "Optimizer")]
    pub optimizer: OptimizerKind,
    /// Learning rate (the base rate of --lr-schedule) [default: 0.001 for adam and adamw,
    /// 0.01 for sgd and sgd-momentum]. Read it through [`TrainArgs::lr`].
    #[arg(long = "lr", help_heading = "Optimizer")]
    pub lr_flag: Option<f64>,
    /// SGD: momentum factor [default: 0; 0.9 with sgd-momentum].
    #[arg(long, help_heading = "Optimizer")]
    pub momentum: Option<f64>,
    /// SGD: dampening of the momentum buffer [default: 0].
    #[arg(long, help_heading = "Optimizer")]
    pub dampening: Option<f64>,
    /// SGD: Nesterov momentum (needs --momentum > 0 and dampening 0).
    #[arg(long, help_heading = "Optimizer")]
    pub nesterov: bool,
    /// Adam/AdamW: beta1,beta2 [default: 0.9,0.999].
    #[arg(
        long,
        value_name = "B1,B2",
        value_parser = crate::optimizer::parse_betas,
        help_heading = "Optimizer"
    )]
    pub betas: Option<(f64, f64)>,
    /// Adam/AdamW: epsilon added to the root of the second moment [default: 1e-8].
    #[arg(long, help_heading = "Optimizer")]
    pub eps: Option<f64>,
    /// Weight decay: SGD and Adam add λw to the gradient, AdamW decays decoupled [default: 0;
    /// AdamW 1e-2].
    #[arg(long, help_heading = "Optimizer")]
    pub weight_decay: Option<f64>,
    /// Learning-rate schedule over the run's optimizer steps (equal to torch.optim.lr_scheduler
    /// step by step; see docs/pytorch.md).
    #[arg(long, value_enum, default_value_t, help_heading = "Optimizer")]
    pub lr_schedule: ScheduleKindArg,
    /// Linear warm-up steps from lr/N to lr before the schedule.
    #[arg(
        long,
        default_value_t = 0,
        value_name = "N",
        help_heading = "Optimizer"
    )]
    pub warmup_steps: u64,
    /// cosine/linear: the rate at the run's last step.
    #[arg(long, default_value_t = 0.0, help_heading = "Optimizer")]
    pub min_lr: f64,
    /// step: steps between decays.
    #[arg(
        long,
        default_value_t = 30,
        value_name = "N",
        help_heading = "Optimizer"
    )]
    pub lr_step_size: u64,
    /// step: the factor of each decay.
    #[arg(long, default_value_t = 0.1, help_heading = "Optimizer")]
    pub lr_gamma: f64,
    /// Scale the gradients so that their global L2 norm (over every stage and replica) is at
    /// most this before each optimizer step, as torch.nn.utils.clip_grad_norm_ does; the norm
    /// before clipping is the `grad_norm` column of --metrics.
    #[arg(long, value_name = "MAX_NORM", value_parser = crate::guard::parse_clip)]
    pub clip_grad_norm: Option<f64>,
    /// Skip a step whose loss or a gradient is NaN or infinite (no stage applies it; counted in
    /// the `skipped` column of --metrics) instead of stopping with an error naming the step,
    /// stage and parameter.
    #[arg(long)]
    pub skip_nonfinite: bool,
    /// Optimizer steps (each takes --accumulate batches).
    #[arg(long, default_value_t = 20)]
    pub steps: u64,
    /// Seed of the model init, the synthetic data and the data order.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Compute threads per worker (default: cores / workers).
    #[arg(long)]
    pub threads: Option<usize>,
    /// What the action times, the measured bubble and --profile's slices measure on a GPU:
    /// `device` synchronises the device after every compute action, so they are its work (the
    /// GPU idles while the next action is enqueued); `host` does not (fastest; they are then
    /// enqueue times, and a step waits for its device once, at its end). Default: `host`, and
    /// `device` under --profile. The same on a CPU.
    #[arg(long, value_name = "device|host")]
    pub timing: Option<pipetrain::Timing>,
    /// What f32 matrix products compute in on a GPU: `fp32` (IEEE fp32, as PyTorch's default)
    /// or `tf32` (tensor cores: inputs rounded to 10 mantissa bits, faster on sm_80+, as
    /// PyTorch's `allow_tf32 = True`). Fixed per GPU for the run. On a CPU it is accepted and
    /// changes nothing (there is no TF32).
    #[arg(long, default_value = "fp32", value_name = "fp32|tf32")]
    pub matmul_precision: pipetrain::MatmulPrecision,
    /// Which library runs a GPU's dense products (every Linear, dense layer and GPT
    /// projection): `cublas` (NVIDIA's, as PyTorch; the default on CUDA) or `burn` (burn's own
    /// kernels, for an A/B in one binary). Without the flag, `PIPETRAIN_GEMM` says it. On a CPU
    /// every product is burn's matmul, so the flag is refused there.
    #[arg(long, value_name = "cublas|burn")]
    pub gemm: Option<pipetrain::GemmLibrary>,
    /// The dtype the layers compute in: `fp32`, or `bf16` — forward and backward in bf16
    /// (weights cast from fp32 masters for each forward, activations and input gradients in
    /// bf16, matmuls accumulating in fp32), the loss in fp32, and fp32 master weights, gradient
    /// accumulation, all-reduce, optimizer state and checkpoints. `--verify` then compares with
    /// single-device training in bf16. The guide's "Mixed precision" has the table of ops and
    /// dtypes.
    #[arg(long, default_value = "fp32", value_name = "fp32|bf16")]
    pub precision: pipetrain::Precision,
    /// How tensors cross between worker threads on one GPU: `device` (the default: the sender
    /// copies them into a fresh device buffer; no host round trip) or `host` (the receiver
    /// copies them through host memory). docs/gpu.md gives the rules each keeps. On a CPU both
    /// pass the tensor as it is.
    #[arg(long, default_value = "device", value_name = "device|host")]
    pub handoff: pipetrain::Handoff,
    /// Devices of the workers: cpu (burn's flex backend), cuda or cuda:N (a build with
    /// `--features cuda`); one for all, or a comma list with one per stage or one per worker
    /// (replica-major), e.g. `--devices cuda:0,cuda:1` for two stages.
    #[arg(long, visible_alias = "devices", default_value = "cpu")]
    pub device: crate::device::Devices,
    /// Also train a single-device copy of the model on the same data, on the pipeline's own
    /// device, and compare it with the pipeline after every step (the copy takes the
    /// pipeline's weights before each step; the worst step is reported); also checks that every
    /// replica holds the same weights. Prints `verify: max_rel_diff=<x>` and exits with 3 if
    /// x > --verify-tolerance.
    #[arg(long, overrides_with = "no_verify")]
    pub verify: bool,
    /// With --verify: compare once, at the end, from the same initial weights, instead of every
    /// step. The strictest check of a short run; over many steps float rounding (summation order
    /// differs with micro-batching and replicas) grows chaotically and fails correct runs
    /// (2 replicas under Adam: 7e-7 after 1 step, 4e-2 after 20).
    #[arg(long, requires = "verify", conflicts_with = "lockstep")]
    pub end_to_end: bool,
    /// With --verify: compare every step (the default; kept for older command lines).
    #[arg(long, requires = "verify")]
    pub lockstep: bool,
    /// With --verify: where the single-device copy trains (default: the pipeline's first
    /// device). `--verify-device cpu` checks a GPU run against the CPU: its kernels round
    /// differently, so per step expect up to ~1e-6 there (end to end, much more).
    #[arg(long, value_name = "DEVICE", requires = "verify")]
    pub verify_device: Option<crate::device::DeviceSpec>,
    /// Largest `max_rel_diff` that `--verify` accepts.
    #[arg(
        long,
        default_value_t = 1e-5,
        value_name = "X",
        value_parser = parse_tolerance,
        allow_negative_numbers = true
    )]
    pub verify_tolerance: f64,
    /// Turn `--verify` off again (e.g. over `verify = true` in a --config file).
    #[arg(long, overrides_with = "verify")]
    pub no_verify: bool,
    /// Write a chrome trace (chrome://tracing, ui.perfetto.dev) of the run to this file: one
    /// track per worker, one slice per action, flow arrows from each send to its receive.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub profile: Option<PathBuf>,
    /// Write one row per optimizer step to this file, CSV (`.csv`) or JSON lines (`.jsonl`):
    /// step, loss, lr, samples/s, wall time, bubble, all-reduce time, and per-stage compute and
    /// idle time of replica 0.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub metrics: Option<PathBuf>,
    /// Draw the loss curve into this PNG file.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub plot: Option<PathBuf>,
    /// Save a checkpoint (safetensors: weights under full-model names, optimizer state, step)
    /// to this file after the last step, and every --checkpoint-every steps. The write is
    /// atomic; any --stages/--replicas layout can resume it.
    #[arg(long, value_name = "FILE", help_heading = "Checkpoints")]
    pub checkpoint: Option<PathBuf>,
    /// Also save the checkpoint every N optimizer steps (0: only at the end).
    #[arg(long, default_value_t = 0, help_heading = "Checkpoints")]
    pub checkpoint_every: u64,
    /// Continue the run saved in this checkpoint: weights, optimizer state and step; --steps is
    /// the total. Model, data, seed, batch and accumulation must be those of the saved run
    /// (checked); the stage/replica layout may differ.
    #[arg(long, value_name = "FILE", help_heading = "Checkpoints")]
    pub resume: Option<PathBuf>,
    /// Initial weights from a safetensors file: a pipetrain checkpoint (weights only), or a
    /// PyTorch state dict saved with safetensors (Linear weights `[out, in]` are transposed).
    /// Every parameter must be present with its shape. `hf:DIR` (or a DIR holding
    /// config.json): a Hugging Face Llama-family checkpoint, whose config.json sizes the model
    /// (`--model llama`). With `eval`: the weights to evaluate.
    #[arg(long, value_name = "FILE|hf:DIR", value_parser = parse_init, help_heading = "Checkpoints")]
    pub init: Option<PathBuf>,
    /// With --init: rewrite the file's tensor names before matching them, REGEX=REPLACEMENT
    /// (`$1` for groups), e.g. `^module\.=` to drop DataParallel's prefix; repeatable, applied
    /// in order before the model's own PyTorch names are mapped (docs/pytorch.md).
    #[arg(
        long,
        value_name = "REGEX=REPLACEMENT",
        value_parser = parse_rename,
        help_heading = "Checkpoints"
    )]
    pub rename: Vec<(String, String)>,
    /// GPT and Llama: tie the token embedding (stage 0) and the output projection (last stage)
    /// into one parameter, GPT-2 style; their gradients are summed between the stages every
    /// step. A Hugging Face checkpoint's config.json says it (tie_word_embeddings) instead.
    #[arg(long, help_heading = "GPT")]
    pub tie_embeddings: bool,
    /// Under an MPI launcher (`mpirun -np N pipetrain ...`, `srun`): workers per process, as
    /// threads connected by channels (MPI between processes). N × this must equal replicas ×
    /// stages. Under a schedule of several chunks per worker, a worker is a pipeline rank with
    /// all its chunks.
    #[arg(
        long,
        default_value_t = 1,
        value_name = "K",
        help_heading = "Multi-process (MPI)"
    )]
    pub workers_per_process: usize,
    /// Under an MPI launcher: seconds to wait on another process before giving up on it (it
    /// may be dead or stuck, or waiting on one that is); every rank then exits non-zero naming
    /// it.
    #[arg(
        long,
        default_value_t = 30.0,
        value_name = "SECONDS",
        help_heading = "Multi-process (MPI)"
    )]
    pub comm_timeout: f64,
    /// The flags given, on the command line or in the `--config` file, by their ids (field
    /// names: `lr_gamma`): a flag left at its default is not in it ([`crate::given`]).
    #[arg(skip)]
    pub given: Vec<String>,
    /// The same flags by their keys (long names with `_`, as `--config` files name them:
    /// `lr`, not the field `lr_flag`) and their values as given ([`crate::given`]).
    #[arg(skip)]
    pub given_flags: Vec<crate::given::GivenFlag>,
}

/// clap's parser for a byte size: the library's [`Bytes`](pipetrain::memory::Bytes) syntax.
fn parse_bytes(text: &str) -> Result<u64, String> {
    text.parse::<pipetrain::memory::Bytes>().map(|b| b.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pipetrain::Timing;

    #[test]
    fn timing_is_host_by_default_device_under_profile_and_as_given_otherwise() {
        let args = |timing, profile: Option<&str>| TrainArgs {
            timing,
            profile: profile.map(PathBuf::from),
            ..Default::default()
        };
        assert_eq!(args(None, None).timing(), Timing::Host);
        assert_eq!(args(None, Some("t.json")).timing(), Timing::Device);
        assert_eq!(
            args(Some(Timing::Host), Some("t.json")).timing(),
            Timing::Host
        );
        assert_eq!(args(Some(Timing::Device), None).timing(), Timing::Device);
    }
}
