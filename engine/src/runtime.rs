//! The runtime: runs one step of a lowered plan on every worker, one scoped thread each.
//!
//! Why scoped threads: a step borrows every worker's state mutably, and no thread may outlive
//! the step — `std::thread::scope` gives both, with no `Arc<Mutex<_>>` around the model.
//! Each worker computes inside its own rayon pool (see [`crate::pool`]). First error wins
//! (see [`crate::abort`]): the step returns the first failure once every thread has joined.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use pipetrain_schedules::{Plan, StageId};

use crate::abort::Abort;
use crate::activation::Activation;
use crate::collective::ChannelCollective;
use crate::error::{EngineError, Result, panic_message};
use crate::layer::Layer;
use crate::loss::Loss;
use crate::remat::Remat;
use crate::report::StepOutcome;
use crate::tie::TiePlan;
use crate::transport::ChannelTransport;
use crate::worker::WorkerState;
use crate::worker::{Feed, Finished, StepContext, Tied, Worker};

/// One replica's share of a step: its micro-batches' inputs and targets.
#[derive(Clone, Debug, Default)]
pub struct Shard {
    /// Inputs, one per micro-batch (fed to stage 0).
    pub inputs: Vec<Activation>,
    /// Targets, one per micro-batch (fed to the loss on the last stage).
    pub targets: Vec<Activation>,
}

/// What a step needs besides the workers and the data.
pub struct StepConfig<'a> {
    /// The lowered plan every replica runs.
    pub plan: &'a Plan,
    /// Learning rate of this step's optimizer step.
    pub learning_rate: f64,
    /// Re-materialization mode.
    pub remat: Remat,
    /// The loss on the last stage.
    pub loss: &'a dyn Loss,
}

/// How replicas combine their gradients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataParallel {
    /// Bytes per all-reduce bucket (PyTorch DDP's default: 25 MiB). The gradients of a stage
    /// are reduced bucket by bucket, in a fixed order.
    pub bucket_bytes: usize,
    /// ZeRO stage 1: optimizer state sharded across the replicas of each stage.
    pub zero: bool,
    /// Steps whose gradients are summed before one optimizer step (DDP's `no_sync`): the loss
    /// is scaled by 1/(m·R·accumulation). Only the last of them should run a plan with an
    /// all-reduce and an optimizer step.
    pub accumulation: usize,
}

impl Default for DataParallel {
    fn default() -> Self {
        Self {
            bucket_bytes: 25 << 20,
            zero: false,
            accumulation: 1,
        }
    }
}

/// Runs one training step. `workers` are replica-major (`replicas × plan.stages()`), `shards`
/// one per replica, each with `plan.micro_batches()` micro-batches. Replicas sum their gradients
/// with [`DataParallel::default`]; see [`run_step_with`].
pub fn run_step<L: Layer>(
    workers: &mut [WorkerState<L>],
    shards: Vec<Shard>,
    config: &StepConfig<'_>,
) -> Result<StepOutcome> {
    run_step_with(
        workers,
        shards,
        config,
        &DataParallel::default(),
        &TiePlan::none(),
    )
}

/// [`run_step`] with explicit data-parallel settings and tied parameters. The stage-s workers of
/// all replicas form one collective group (in-process [`ChannelCollective`]); each all-reduces
/// right after its own last backward, overlapping the backward of upstream stages. Tied
/// parameters are summed between their holders first (see [`TiePlan`]).
pub fn run_step_with<L: Layer>(
    workers: &mut [WorkerState<L>],
    shards: Vec<Shard>,
    config: &StepConfig<'_>,
    data_parallel: &DataParallel,
    ties: &TiePlan,
) -> Result<StepOutcome> {
    let plan = config.plan;
    let (stages, micro_batches, replicas) = (plan.stages(), plan.micro_batches(), shards.len());
    assert_eq!(
        workers.len(),
        replicas * stages,
        "one worker per (replica, stage)"
    );
    assert!(
        shards
            .iter()
            .all(|s| s.inputs.len() == micro_batches && s.targets.len() == micro_batches),
        "one input and one target per micro-batch"
    );
    let abort = Arc::new(Abort::new());
    let ctx = StepContext {
        stages,
        micro_batches,
        learning_rate: config.learning_rate,
        remat: config.remat,
        loss: Some(config.loss),
        loss_scale: 1.0 / (micro_batches * replicas * data_parallel.accumulation.max(1)) as f64,
        abort: Arc::clone(&abort),
        start: Instant::now(),
        bucket_elems: (data_parallel.bucket_bytes / std::mem::size_of::<f32>()).max(1),
        zero: data_parallel.zero,
    };
    let mut feeds: Vec<Feed> = Vec::with_capacity(workers.len());
    for shard in shards {
        for s in 0..stages {
            let mut feed = Feed::default();
            if s == 0 {
                feed.inputs = shard.inputs.iter().cloned().map(Some).collect();
            }
            if s + 1 == stages {
                feed.targets = shard.targets.iter().cloned().map(Some).collect();
            }
            feeds.push(feed);
        }
    }
    let finished = launch(workers, feeds, plan, &ctx, ties)?;
    let wall = ctx.start.elapsed();
    let loss = finished.iter().map(|f| f.loss).sum();
    let reports = finished.into_iter().map(|f| f.report).collect();
    Ok(StepOutcome {
        loss,
        wall,
        workers: reports,
    })
}

/// Inference through the pipeline: replica r's micro-batches `inputs[r]` stream through its
/// stages under `plan` (an [`inference`](pipetrain_schedules::inference) plan: stage s forwards
/// micro-batch i while stage s+1 forwards i−1), with no autodiff. Returns each replica's outputs
/// in micro-batch order. Failures are reported like a training step's.
pub fn run_inference<L: Layer>(
    workers: &mut [WorkerState<L>],
    inputs: Vec<Vec<Activation>>,
    plan: &Plan,
) -> Result<Vec<Vec<Activation>>> {
    let (stages, micro_batches, replicas) = (plan.stages(), plan.micro_batches(), inputs.len());
    assert_eq!(
        workers.len(),
        replicas * stages,
        "one worker per (replica, stage)"
    );
    assert!(
        inputs.iter().all(|i| i.len() == micro_batches),
        "one input per micro-batch"
    );
    let abort = Arc::new(Abort::new());
    let ctx = StepContext {
        stages,
        micro_batches,
        learning_rate: 0.0,
        remat: Remat::Never,
        loss: None,
        loss_scale: 0.0,
        abort: Arc::clone(&abort),
        start: Instant::now(),
        bucket_elems: 1,
        zero: false,
    };
    let mut feeds: Vec<Feed> = Vec::with_capacity(workers.len());
    for replica_inputs in inputs {
        for s in 0..stages {
            let mut feed = Feed::default();
            if s == 0 {
                feed.inputs = replica_inputs.iter().cloned().map(Some).collect();
            }
            feeds.push(feed);
        }
    }
    let finished = launch(workers, feeds, plan, &ctx, &TiePlan::none())?;
    Ok(finished
        .into_iter()
        .filter(|f| f.report.worker.stage.index() + 1 == stages)
        .map(|f| {
            let mut outputs = f.outputs;
            outputs.sort_by_key(|(mb, _)| *mb);
            outputs.into_iter().map(|(_, a)| a).collect()
        })
        .collect())
}

/// Runs `plan` on every worker, one scoped thread each, and joins them all. Returns what every
/// worker finished with (replica-major), or the step's first failure.
fn launch<L: Layer>(
    workers: &mut [WorkerState<L>],
    feeds: Vec<Feed>,
    plan: &Plan,
    ctx: &StepContext<'_>,
    ties: &TiePlan,
) -> Result<Vec<Finished>> {
    let stages = plan.stages();
    let replicas = workers.len() / stages;
    let abort = &ctx.abort;
    let transports: Vec<ChannelTransport> = (0..replicas)
        .flat_map(|_| ChannelTransport::pipeline(stages, abort))
        .collect();
    // groups[s][r]: stage s's member for replica r; handed out replica-major below.
    let mut groups: Vec<std::vec::IntoIter<ChannelCollective>> = (0..stages)
        .map(|_| ChannelCollective::group(replicas, abort).into_iter())
        .collect();
    let collectives: Vec<ChannelCollective> = (0..replicas * stages)
        .map(|i| groups[i % stages].next().expect("one member per replica"))
        .collect();
    // Tied parameters: each worker's slots, and a 2-member group per tie that spans two stages
    // of one replica (the lower stage is rank 0).
    let mut tied: Vec<Tied<'_>> = (0..replicas * stages)
        .map(|i| Tied {
            slots: ties.slots(i % stages),
            links: HashMap::new(),
        })
        .collect();
    for replica in 0..replicas {
        for (tie, low, high) in ties.links() {
            let mut pair = ChannelCollective::group(2, abort).into_iter();
            for stage in [low, high] {
                let member = pair.next().expect("two members");
                tied[replica * stages + stage]
                    .links
                    .insert(tie, Box::new(member));
            }
        }
    }

    let results = std::thread::scope(|scope| {
        let handles: Vec<_> = workers
            .iter_mut()
            .zip(feeds)
            .zip(transports)
            .zip(collectives)
            .zip(tied)
            .map(|((((state, feed), transport), collective), tied)| {
                let id = state.id;
                let handle = std::thread::Builder::new()
                    .name(format!("pipetrain-r{}s{}", id.replica.0, id.stage.0))
                    .spawn_scoped(scope, move || {
                        let program = plan.program(StageId::from(id.stage.index()));
                        let pool = Arc::clone(&state.pool);
                        let outcome = pool.install(|| {
                            Worker::new(state, transport, Box::new(collective), tied, feed, ctx)
                                .run(program)
                        });
                        if outcome.is_none() && !abort.is_aborted() {
                            unreachable!("a worker that stops early has recorded why");
                        }
                        outcome
                    })
                    .expect("cannot spawn a worker thread");
                (id, handle)
            })
            .collect();
        handles
            .into_iter()
            .map(|(id, h)| (id, h.join()))
            .collect::<Vec<_>>()
    });

    let mut finished = Vec::with_capacity(results.len());
    for (id, joined) in results {
        match joined {
            Ok(Some(f)) => finished.push(f),
            Ok(None) => {}
            Err(payload) => {
                abort.fail(EngineError::WorkerDied {
                    replica: id.replica,
                    stage: id.stage,
                    message: panic_message(payload.as_ref()),
                });
            }
        }
    }
    match abort.take_error() {
        Some(error) => Err(error),
        None => Ok(finished),
    }
}
