//! What a bench measures: the model and data of every row, how long to measure, which rows,
//! and what to compare against ([`BenchSettings`]).

use crate::CommandError;
use std::path::PathBuf;

use super::configs::Workload;
use super::peers::Peers;
use crate::error::{Error, Result};
use crate::{Handoff, MatmulPrecision, Timing};

/// The settings of a CPU bench ([`run`](super::run)): the MLP every row trains (and the GPT of
/// the `GPT schedules` rows), the measurement, the rows, and the PyTorch peers and MPI launcher
/// when those rows and columns are wanted.
#[derive(Clone, Debug)]
pub struct BenchSettings {
    /// MLP: hidden width (also the input dimension, as the peers' workload).
    pub width: usize,
    /// MLP: hidden Linear+ReLU blocks (at least 1: the 2-stage rows need two layers).
    pub hidden_layers: usize,
    /// Model width of the `GPT schedules` rows' GPT; 0 leaves those rows out.
    pub gpt_width: usize,
    /// Tokens per sequence of the GPT rows.
    pub gpt_context: usize,
    /// Hidden width of the `Llama` row's model (even; 512: the 4-layer d512 Llama); 0 leaves
    /// the row out.
    pub llama_width: usize,
    /// Output classes.
    pub classes: usize,
    /// Rows per step, split over replicas and micro-batches.
    pub batch: usize,
    /// Measured steps per row and repetition (after the warm-up).
    pub steps: usize,
    /// Untimed warm-up steps before the measured ones.
    pub warmup: usize,
    /// Repetitions of the whole table; each row's statistics pool every repetition's steps.
    pub reps: usize,
    /// Micro-batch counts of the pipelined rows.
    pub micro_batches: Vec<usize>,
    /// Compute threads per worker (the peers' workload: 1).
    pub threads: usize,
    /// Only the rows whose label contains this text, case-insensitively (and the single-device
    /// and independent-worker rows their limits are computed from).
    pub only: Option<String>,
    /// The PyTorch peers to run after each of our rows that has one ([`Peers::find`]).
    pub peers: Option<Peers>,
    /// The `pipetrain` binary to start under `mpirun` for the MPI rows; `None` leaves them out.
    pub mpi_binary: Option<PathBuf>,
    /// The GPU rows: what f32 matmuls compute in (the PyTorch peer runs with the same
    /// `allow_tf32`). Fixed for the GPU when it is first used.
    pub matmul_precision: MatmulPrecision,
    /// The GPU rows: what the action times measure ([`Timing::Host`]: no synchronisation after
    /// each action; each step is still timed until the device finished it).
    pub gpu_timing: Timing,
    /// The GPU rows: how tensors cross between worker threads.
    pub handoff: Handoff,
    /// The dtype every row computes in: fp32, or bf16 with fp32 masters. The CPU peers run
    /// fp32 (they have no autocast): under bf16 the CPU table leaves them out; the GPU peer
    /// runs `torch.autocast(bfloat16)`.
    pub precision: crate::Precision,
    /// The GPU rows: which library runs the dense products; `None` leaves the builder's
    /// default (cuBLAS on CUDA). The CPU rows ignore it (burn's matmul).
    pub gemm: Option<crate::GemmLibrary>,
}

impl Default for BenchSettings {
    /// The published table's settings: MLP-8x1024 on batch 256, the GPT at width 256 and context
    /// 64, 2 warm-up and 8 measured steps, m ∈ {1, 4, 8, 32}, one thread per worker, no peers,
    /// no MPI rows.
    fn default() -> Self {
        Self {
            width: 1024,
            hidden_layers: 8,
            gpt_width: 256,
            gpt_context: 64,
            llama_width: 512,
            classes: 10,
            batch: 256,
            steps: 8,
            warmup: 2,
            reps: 1,
            micro_batches: vec![1, 4, 8, 32],
            threads: 1,
            only: None,
            peers: None,
            mpi_binary: None,
            matmul_precision: MatmulPrecision::default(),
            gpu_timing: Timing::Host,
            handoff: Handoff::default(),
            precision: crate::Precision::default(),
            gemm: None,
        }
    }
}

impl BenchSettings {
    /// The model and data every row trains.
    pub fn workload(&self) -> Workload {
        Workload {
            width: self.width,
            hidden: self.hidden_layers,
            classes: self.classes,
            batch: self.batch,
            threads: self.threads,
            warmup: self.warmup,
            steps: self.steps,
            gpt_width: self.gpt_width,
            gpt_context: self.gpt_context,
            llama_width: self.llama_width,
            precision: self.precision,
        }
    }

    /// Refuses settings no row could run with.
    ///
    /// # Errors
    /// [`CommandError::BenchZero`](crate::CommandError::BenchZero) naming the first setting that is 0 but must not be.
    pub fn check(&self) -> Result<()> {
        for (setting, value) in [
            ("batch", self.batch),
            ("steps", self.steps),
            ("reps", self.reps),
            ("threads", self.threads),
            ("width", self.width),
            ("classes", self.classes),
            // The 2-stage rows need 2 layers: a hidden block and the head.
            ("hidden_layers", self.hidden_layers),
        ] {
            if value == 0 {
                return Err(Error::Command(CommandError::BenchZero { setting }));
            }
        }
        if self.micro_batches.contains(&0) {
            return Err(Error::Command(CommandError::BenchZero {
                setting: "micro_batches",
            }));
        }
        Ok(())
    }
}
