//! The [`Pipeline`] that `pipetrain train` runs: the builder set from the flags (schedule,
//! split, devices, replicas, threads, memory budget, ties, the gradient guard) and, under MPI,
//! this process's share of the workers.

use pipetrain::{Batch, CrossEntropy, Layer, Pipeline};

use crate::failure::Failure;
use crate::train::Settings;
use pipetrain::trainer::Distributed;

/// Builds the pipeline for `layers` as the flags in `s` ask; a split by time or by memory
/// budget is measured on `sample` (a training batch).
///
/// # Errors
/// A configuration the builder refuses (usage).
pub fn pipeline<L: Layer>(
    s: &Settings<'_>,
    layers: Vec<L>,
    dist: Option<&Distributed>,
    sample: &Batch,
) -> Result<Pipeline<L>, Failure> {
    let args = s.args;
    let mut builder = Pipeline::builder()
        .layers(layers)
        .micro_batches(args.micro_batches)
        .schedule(s.schedule.clone())
        .remat(s.remat)
        .backward(args.backward.with_group(args.weight_group))
        .optimizer(s.optimizer.clone())
        .devices(s.devices.iter().cloned())
        .timing(args.timing())
        .handoff(args.handoff)
        .matmul_precision(args.matmul_precision)
        .precision(args.precision)
        .learning_rate(args.lr())
        .loss(CrossEntropy)
        .replicas(args.replicas)
        .accumulation(args.accumulate)
        .zero(args.zero)
        .bucket_bytes((args.bucket_mb * (1u64 << 20) as f64) as usize);
    if let Some(library) = args.gemm_library()? {
        builder = builder.gemm(library);
    }
    builder = crate::guard::configure(builder, args);
    // A multi-process run without --balance: the library's even split (Pipeline::distributed).
    let balance = args.balance.clone();
    if let Some(d) = dist {
        builder = builder.distributed(d.local(), d.fabric());
    }
    builder = match (&balance, args.stages) {
        (Some(balance), stages) => {
            let b = builder.balance(balance.iter().copied());
            if let Some(p) = stages { b.stages(p) } else { b }
        }
        (None, _) => builder.stages(args.stages()),
    };
    if let Some(t) = args.threads {
        let workers = dist.map_or(args.layout().workers(), |d| d.local().len());
        let (t, warning) =
            pipetrain::trainer::threads::capped(t, workers, pipetrain::trainer::threads::cores());
        warning.inspect(|w| eprintln!("{w}"));
        builder = builder.threads_per_worker(t);
    }
    if let Some(bytes) = args.memory_budget {
        builder = builder.memory_budget(bytes);
    }
    for tie in &s.ties {
        builder = builder.tie(tie.clone());
    }
    builder.build_with(sample).map_err(Failure::of_build)
}
