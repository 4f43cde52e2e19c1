//! The runtime: runs one step of a lowered plan on every worker, one scoped thread each.
//!
//! Why scoped threads: a step borrows every worker's state mutably, and no thread may outlive
//! the step — `std::thread::scope` gives both, with no `Arc<Mutex<_>>` around the model.
//! Each worker computes inside its own rayon pool (see [`crate::pool`]). First error wins
//! (see [`crate::abort`]): the step returns the first failure once every thread has joined.

use std::sync::Arc;
use std::time::Instant;

use pipetrain_schedules::{Plan, StageId};

use crate::abort::Abort;
use crate::activation::Activation;
use crate::error::{EngineError, Result, panic_message};
use crate::layer::Layer;
use crate::loss::Loss;
use crate::remat::Remat;
use crate::report::StepOutcome;
use crate::stage::StageState;
use crate::transport::ChannelTransport;
use crate::worker::{Feed, StepContext, Worker};

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

/// Runs one training step. `workers` are replica-major (`replicas × plan.stages()`), `shards`
/// one per replica, each with `plan.micro_batches()` micro-batches.
pub fn run_step<L: Layer>(
    workers: &mut [StageState<L>],
    shards: Vec<Shard>,
    config: &StepConfig<'_>,
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
        loss: config.loss,
        loss_scale: 1.0 / (micro_batches * replicas) as f64,
        abort: Arc::clone(&abort),
        start: Instant::now(),
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
    let transports: Vec<ChannelTransport> = (0..replicas)
        .flat_map(|_| ChannelTransport::pipeline(stages, &abort))
        .collect();

    let results = std::thread::scope(|scope| {
        let handles: Vec<_> = workers
            .iter_mut()
            .zip(feeds)
            .zip(transports)
            .map(|((state, feed), transport)| {
                let id = state.id;
                let ctx = &ctx;
                let abort = &abort;
                let handle = std::thread::Builder::new()
                    .name(format!("pipetrain-r{}s{}", id.replica.0, id.stage.0))
                    .spawn_scoped(scope, move || {
                        let program = plan.program(StageId::from(id.stage.index()));
                        let pool = Arc::clone(&state.pool);
                        let outcome =
                            pool.install(|| Worker::new(state, transport, feed, ctx).run(program));
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
    let wall = ctx.start.elapsed();

    let mut loss = 0.0;
    let mut reports = Vec::with_capacity(results.len());
    for (id, joined) in results {
        match joined {
            Ok(Some((worker_loss, report))) => {
                loss += worker_loss;
                reports.push(report);
            }
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
    if let Some(error) = abort.take_error() {
        return Err(error);
    }
    Ok(StepOutcome {
        loss,
        wall,
        workers: reports,
    })
}
