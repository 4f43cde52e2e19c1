//! The sweep's cases, by section: each section adds its cases' verdicts to the table, on one
//! device, against single-device training on that same device.
//!
//! Cases: the MLP on 1–3 stages under GPipe, 1F1B, ZB-H1, ZB-V, interleaved, looped BFS,
//! interleaved zero bubble and DualPipeV, split and fused backward, every remat mode; the GPT
//! (plain and with tied embeddings), the ResNet and the U-Net (skips) on 2–3 stages; 2 replicas
//! on one device (plain all-reduce, ZeRO-1, accumulation), uneven micro-batches; a checkpoint
//! saved on the device and resumed on the CPU, and the reverse; the device hand-off; the
//! regression cases of the first H200 run (issue 25); bf16 on 1–3 stages × 1–2 replicas. The
//! quick sweep keeps a few of each section (SGD, 2 stages, the ends of each range).

mod all_reduce;
mod checkpoints;
mod data_parallel;
mod handoffs;
mod mixed_precision;
mod mlp;
mod models;
mod precision;
mod regressions;

use std::path::PathBuf;

use burn::prelude::Device;

use super::fixtures::On;
use super::progress::Progress;
use super::table::Table;
use crate::MatmulPrecision;

/// What every case runs on and how much of it.
pub(super) struct Scope<'a> {
    /// The device of the pipelines and of their single-device references.
    pub device: Device,
    /// The quick sweep: a few cases of each section.
    pub quick: bool,
    /// The matmul precision the device was started with.
    pub precision: MatmulPrecision,
    /// A folder the cases may write (checkpoints).
    pub scratch: PathBuf,
    /// The sweep's progress (the heartbeat reads each case's phase from it).
    pub progress: &'a Progress<'a>,
}

impl Scope<'_> {
    /// Training on `device`, telling this sweep's progress.
    pub(super) fn on<'s>(&'s self, device: &'s Device) -> On<'s> {
        On {
            device,
            progress: self.progress,
        }
    }
}

/// One section of the sweep: adds its cases' verdicts to the table.
pub(super) type Section = fn(&mut Table<'_>, &Scope<'_>);

/// The sections in the order they run. bf16 last: its first use of each shape compiles and
/// tunes tensor-core kernels, which on the H100 check of 2026-11-27 had not ended one case in
/// 240 s.
pub(super) const SECTIONS: [(&str, Section); 9] = [
    ("matmul_precision", precision::matmul_precision),
    ("regressions", regressions::regressions),
    ("handoffs", handoffs::handoffs),
    ("mlp_schedules", mlp::mlp_schedules),
    ("mlp_virtual_stages", mlp::mlp_virtual_stages),
    ("models", models::models),
    ("data_parallel", data_parallel::data_parallel),
    ("checkpoints", checkpoints::checkpoints),
    ("mixed_precision", mixed_precision::mixed_precision),
];

/// `all` in the full sweep; in the quick one, the items at `keep` (indices into `all`).
fn pick<T, const N: usize>(quick: bool, all: [T; N], keep: &[usize]) -> Vec<T> {
    all.into_iter()
        .enumerate()
        .filter(|(i, _)| !quick || keep.contains(i))
        .map(|(_, item)| item)
        .collect()
}
