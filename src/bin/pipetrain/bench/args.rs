//! The flags of `pipetrain bench`.

use std::path::PathBuf;

/// The default interpreter for `--compare-pytorch` given without a value.
pub const DEFAULT_PYTHON: &str = "/tmp/peer-venv/bin/python";

/// Worked examples shown under `pipetrain bench --help`.
const EXAMPLES: &str = "\
Examples:
  # the whole table for MLP-8x1024, batch 256 (release build: cargo build --release)
  pipetrain bench --out docs/benchmarks.md

  # against PyTorch in the same run (peers from ../shared/peers, venv at /tmp/peer-venv)
  pipetrain bench --compare-pytorch --reps 2
  pipetrain bench --compare-pytorch /usr/bin/python3 --peers /path/to/peers

  # the GPU rows beside PyTorch on the same GPU (a `--features cuda` build)
  pipetrain bench --device cuda:0 --compare-pytorch /usr/bin/python3

  # a few rows of a small model, quickly
  pipetrain bench --only 1f1b --width 256 --steps 4
  pipetrain bench --width 16 --hidden-layers 2 --batch 32 --steps 2 --warmup 1";

/// Arguments of `pipetrain bench`.
#[derive(clap::Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct BenchArgs {
    /// MLP: hidden width (also the input dimension, as the peers' workload).
    #[arg(long, default_value_t = 1024)]
    pub width: usize,
    /// MLP: hidden Linear+ReLU blocks.
    #[arg(long, default_value_t = 8)]
    pub hidden_layers: usize,
    /// GPT schedules rows: model width of the GPT (4 blocks, 4 heads, vocabulary 512, 32
    /// sequences per batch); 0 leaves those rows out.
    #[arg(long, default_value_t = 256)]
    pub gpt_width: usize,
    /// GPT schedules rows: tokens per sequence.
    #[arg(long, default_value_t = 64)]
    pub gpt_context: usize,
    /// Llama row: hidden width of its Llama (4 layers, 8 heads sharing 4 key/value heads where
    /// the width is a multiple of 16, vocabulary 512, context 32, 32 sequences per batch),
    /// beside transformers' under torch.distributed.pipelining; even; 0 leaves the row out.
    #[arg(long, default_value_t = 512, value_parser = even_width)]
    pub llama_width: usize,
    /// Output classes.
    #[arg(long, default_value_t = 10)]
    pub classes: usize,
    /// Mini-batch size (rows per step), split over replicas and micro-batches.
    #[arg(long, default_value_t = 256)]
    pub batch: usize,
    /// Measured steps per row and repetition (after the warm-up).
    #[arg(long, default_value_t = 8)]
    pub steps: usize,
    /// Untimed warm-up steps before the measured ones.
    #[arg(long, default_value_t = 2)]
    pub warmup: usize,
    /// Repetitions of the whole table; each row's statistics pool the steps of every repetition.
    #[arg(long, default_value_t = 1)]
    pub reps: usize,
    /// Micro-batch counts of the pipelined rows.
    #[arg(long, value_delimiter = ',', default_value = "1,4,8,32")]
    pub micro_batches: Vec<usize>,
    /// Compute threads per worker (the peers' workload: 1).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Only the rows whose name contains this text (and the single-device and independent-worker
    /// rows their limits are computed from).
    #[arg(long, value_name = "TEXT")]
    pub only: Option<String>,
    /// Also run the PyTorch peers with this Python (default /tmp/peer-venv/bin/python), row by
    /// row alternating with ours, and add a PyTorch and a ratio column.
    #[arg(long, value_name = "PYTHON", num_args = 0..=1, default_missing_value = DEFAULT_PYTHON)]
    pub compare_pytorch: Option<PathBuf>,
    /// The PyTorch peer scripts (bench_single.py, bench_ddp.py, bench_pipe.py). Default: the
    /// first of ../shared/peers beside the repository, shared/peers inside it, found from the
    /// binary's location and the source tree (never from the current directory).
    #[arg(long, value_name = "DIR")]
    pub peers: Option<PathBuf>,
    /// Where the rows run: cpu (the table above), or cuda / cuda:N for the GPU rows (a build
    /// with `--features cuda`): MLP-8x1024 b256, MLP-8x4096 b4096, the GPT, 2 stages and 2
    /// replicas on one GPU, each beside PyTorch on the same GPU (`torch_gpu.py` in --peers,
    /// default scripts/peers of the repository).
    #[arg(long, default_value = "cpu")]
    pub device: crate::device::DeviceSpec,
    /// GPU rows: what f32 matrix products compute in, `fp32` (IEEE) or `tf32` (tensor cores);
    /// the PyTorch peer runs with the same `allow_tf32`. The CPU rows ignore it (no TF32).
    #[arg(long, default_value = "fp32", value_name = "fp32|tf32")]
    pub matmul_precision: pipetrain::MatmulPrecision,
    /// The dtype every row computes in: `fp32`, or `bf16` (bf16 compute, fp32 master weights,
    /// as `train --precision bf16`). The CPU peers have no bf16 and are left out under bf16;
    /// the GPU peer runs under `torch.autocast(bfloat16)`.
    #[arg(long, default_value = "fp32", value_name = "fp32|bf16")]
    pub precision: pipetrain::Precision,
    /// GPU rows: `host` (no device synchronisation after each action, as PyTorch) or `device`
    /// (a synchronisation after each compute action); every step is timed until the device
    /// finished it either way.
    #[arg(long, default_value = "host", value_name = "host|device")]
    pub timing: pipetrain::Timing,
    /// GPU rows: how tensors cross between worker threads, `device` (the default, as `train`:
    /// the sender copies into a fresh device buffer) or `host` (the receiver copies through
    /// host memory).
    #[arg(long, default_value = "device", value_name = "device|host")]
    pub handoff: pipetrain::Handoff,
    /// GPU rows: which library runs the dense products, `cublas` (the default on CUDA) or
    /// `burn` (burn's own kernels), as `train --gemm`; without the flag, `PIPETRAIN_GEMM` says
    /// it. Refused with `--device cpu`, where every product is burn's matmul.
    #[arg(long, value_name = "cublas|burn")]
    pub gemm: Option<pipetrain::GemmLibrary>,
    /// Also write the markdown document to this file.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// `--llama-width`: an even width (a rotary head turns pairs of features), or 0.
fn even_width(value: &str) -> Result<usize, String> {
    let width: usize = value
        .parse()
        .map_err(|e| format!("`{value}` is not a width: {e}"))?;
    match width % 2 {
        0 => Ok(width),
        _ => Err(format!(
            "{width} is odd: a rotary head turns pairs of features; use --llama-width {}",
            width + 1
        )),
    }
}
