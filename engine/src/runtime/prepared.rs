//! [`Prepared`]: everything a [`Runtime`](crate::Runtime) runs, resolved and validated before any
//! thread starts: the workers (their layers, devices and optimizers), the step's settings, the
//! tie placement, and the lowered plans of every mode ([`Plans`]). Data only: no thread, no
//! link; [`Runtime::new`](crate::Runtime::new) is wiring.
//!
//! ```text
//! schedule.plan(p, m) ─► split or join backwards per stage (dense layers) ─► route skips
//!   ─► lower + validate per rank (interleaved: the rank order is deadlock-free)
//!   ─► by stage ─► lower + validate: a step, an accumulating step
//! inference(p, m) and inference(p, 1) ─► route skips ─► validate
//! ```

use std::sync::Arc;

use pipetrain_schedules::{
    ActionKind, Lowering, Plan, StageId, WorkerId, Zero, inference_at, lower, route_skips,
    validate, validate_inference,
};

use crate::error::{EngineError, Result};
use crate::model::layer::Layer;
use crate::optim::tie::TiePlan;
use crate::runtime::workers::Workers;
use crate::runtime::{Backward, RuntimeConfig};
use crate::world::World;

/// The lowered, validated plans a runtime interprets, one per mode. Cheap to clone (shared).
#[derive(Clone, Debug)]
pub struct Plans {
    /// A training step that ends with the all-reduce and the optimizer step: one program per
    /// stage, with the backward split on the stages that can split it.
    pub(crate) step: Arc<Plan>,
    /// A non-final step of an accumulation: no all-reduce, no optimizer step.
    pub(crate) accumulating: Arc<Plan>,
    /// The compute plan per rank, when ranks hold several stages: the order of
    /// [`Turns`](crate::worker::turns::Turns).
    pub(crate) ranks: Option<Arc<Plan>>,
    /// Inference of a batch cut into m micro-batches.
    inference: Arc<Plan>,
    /// Inference of a batch too small for m micro-batches: one.
    inference_whole: Arc<Plan>,
    /// Stages that run a full backward where the schedule places split ones.
    fused: Vec<StageId>,
}

impl Plans {
    /// The lowered plan of a training step that ends with the optimizer step.
    pub fn step(&self) -> &Plan {
        &self.step
    }

    /// The lowered plan of a non-final step of a gradient accumulation (no all-reduce, no
    /// optimizer step).
    pub fn accumulating(&self) -> &Plan {
        &self.accumulating
    }

    /// The plan per rank when ranks hold several stages (interleaved, ZB-V), lowered as the
    /// stages' plans are, whose compute order the stages of a rank take turns in; `None` with
    /// one stage per rank.
    pub fn ranks(&self) -> Option<&Plan> {
        self.ranks.as_deref()
    }

    /// The inference plan of a batch cut into `micro_batches` pieces: the runtime cuts one
    /// into m micro-batches, or runs it whole (`1`) when it has fewer than m rows; any other
    /// count gets the whole-batch plan.
    pub fn inference(&self, micro_batches: usize) -> &Arc<Plan> {
        match micro_batches == self.inference.micro_batches() {
            true => &self.inference,
            false => &self.inference_whole,
        }
    }

    /// The stages whose backward cannot be split (no [dense](crate::dense) layer, or
    /// [`Backward::Fused`]) although the schedule places split backwards (`I`, `W`): they run
    /// a full backward `B` where the schedule has `I` and nothing where it has `W`. The result
    /// is the same; the bubble the `W`s were to fill stays there. Empty for schedules that
    /// place full backwards.
    pub fn fused(&self) -> &[StageId] {
        &self.fused
    }
}

/// What a [`Runtime`](crate::Runtime) runs, resolved before any thread starts: the workers,
/// the settings, the tie placement and every plan, validated.
///
/// ```
/// use std::sync::Arc;
/// use burn::nn::{Linear, LinearConfig};
/// use burn::prelude::*;
/// use pipetrain_engine::*;
/// use pipetrain_partitioner::Partition;
/// use pipetrain_schedules::{ActionKind, ScheduleKind, StageId};
///
/// #[derive(Module, Debug)]
/// struct Plain { linear: Linear }
/// impl Layer for Plain {
///     fn forward(&self, x: Activation) -> Result<Activation, EngineError> {
///         Ok(self.linear.forward(x.float::<2>()?).into())
///     }
/// }
/// let device = Device::flex();
/// let model = vec![
///     Plain { linear: LinearConfig::new(4, 8).init(&device) },
///     Plain { linear: LinearConfig::new(8, 2).init(&device) },
/// ];
/// let split = Partition::from_balance(&[1, 1], 2)?;
/// let workers = Workers::build(World::new(1, 2)?, split, &model, &[device], &OptimizerConfig::sgd(), 1)?;
/// let config = RuntimeConfig {
///     schedule: ScheduleKind::ZbH1.into(),
///     micro_batches: 4,
///     learning_rate: 0.1,
///     remat: Remat::Never,
///     loss: Arc::new(Mse),
///     data_parallel: DataParallel::default(),
///     ties: Vec::new(),
///     backward: Backward::default(),
///     guard: Default::default(),
///     timing: Default::default(),
///     handoff: Default::default(),
///     precision: Default::default(),
///     warm_up: Default::default(),
/// };
/// let prepared = Prepared::new(workers, config)?; // no thread yet
/// // No dense layer: ZB-H1's split backwards run fused, on both stages.
/// assert_eq!(prepared.plans().fused(), [StageId(0), StageId(1)]);
/// assert_eq!(prepared.plans().step().count(StageId(1), ActionKind::Backward), 4);
/// assert_eq!(prepared.plans().inference(4).micro_batches(), 4);
/// let runtime = Runtime::new(prepared, Box::new(ChannelFabric::default()))?; // the threads start here
/// assert_eq!(runtime.threads().len(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Prepared<L: Layer> {
    pub(crate) workers: Workers<L>,
    pub(crate) config: RuntimeConfig,
    pub(crate) plans: Plans,
    pub(crate) tie_plan: TiePlan,
}

impl<L: Layer> Prepared<L> {
    /// Resolves what `workers` run under `config`: the schedule's plan with the backward split
    /// on the stages holding a dense layer (or joined where the schedule places split ones and
    /// a stage cannot), skips routed between the stages that stash and pop them, each mode's
    /// plan lowered and validated (complete, deadlock-free), and the ties placed.
    pub fn new(mut workers: Workers<L>, config: RuntimeConfig) -> Result<Self> {
        // Replicas other than the first get weights of their own where a shared buffer could be
        // written on one stream while another reads it (`WorkerState::needs_own_buffers`).
        workers.own_replica_buffers(config.handoff);
        let stages = workers.world().stages();
        let planned = config.schedule.plan(stages, config.micro_batches)?;
        // Under bf16 the dense layers and split `Linear`s run on the autodiff path
        // ([`Precision::splits_by_hand`](crate::Precision::splits_by_hand)).
        let split =
            matches!(config.backward, Backward::Split { .. }) && config.precision.splits_by_hand();
        check_precision(&workers, config.precision)?;
        // The stages that can split their backward: those holding a dense layer or a layer that
        // splits its `Linear` calls.
        let dense: Vec<bool> = (0..stages)
            .map(|s| {
                split
                    && workers.states().iter().any(|w| {
                        w.id.stage.index() == s
                            && w.layers
                                .iter()
                                .any(|l| l.dense().is_some() || l.splits_linears())
                    })
            })
            .collect();
        let unlowered = if planned.places_weights() {
            // The schedule places each `W`: the other stages run fused `B`s (see `fused`).
            planned.join_backward(|s| !dense[s.index()])
        } else {
            planned.split_backward(|s| dense[s.index()])
        };
        // Skips that cross stages go straight from the stashing to the popping stage.
        let skips = workers.skip_routes().pairs();
        let unlowered = route_skips(&unlowered, &skips)?;
        // ZeRO-2/3 add their reduce, unshard and reshard; with one replica there is nothing to
        // shard (the builder refuses that setting).
        let zero = match workers.world().replicas() {
            1 => Zero::Off,
            _ => config.data_parallel.zero,
        };
        // Ranks holding several stages: the dry run proves the rank order deadlock-free, then
        // every stage runs on its own worker (its actions in rank order), taking turns. The
        // turns follow the rank plan lowered as the stages' are: ZeRO-3 runs a stage's last `B`
        // as an `I` and a `W` around its reshard, each its own turn.
        let by_rank = lower(
            &unlowered,
            Lowering {
                zero,
                ..Lowering::default()
            },
        );
        validate(&by_rank)?;
        let ranks = unlowered.is_interleaved().then(|| Arc::new(by_rank));
        if let Some(plan) = &ranks {
            whole_ranks(workers.world(), plan)?;
        }
        let unlowered = unlowered.by_stage();
        let step = lower(
            &unlowered,
            Lowering {
                zero,
                ..Lowering::default()
            },
        );
        validate(&step)?;
        let accumulating = lower(
            &unlowered,
            Lowering {
                all_reduce: false,
                optimizer_step: false,
                zero,
            },
        );
        validate(&accumulating)?;
        let inference_of = |parts: usize| -> Result<Arc<Plan>> {
            let plan = route_skips(&inference_at(stages, parts, zero)?, &skips)?;
            validate_inference(&plan)?;
            Ok(Arc::new(plan))
        };
        let input = ActionKind::BackwardInput;
        let placed = planned.by_stage();
        let fused = StageId::range(stages)
            .filter(|&s| placed.count(s, input) > 0 && step.count(s, input) == 0)
            .collect();
        let plans = Plans {
            step: Arc::new(step),
            accumulating: Arc::new(accumulating),
            ranks,
            inference: inference_of(config.micro_batches)?,
            inference_whole: inference_of(1)?,
            fused,
        };
        Ok(Self {
            tie_plan: workers.tie_plan(&config.ties)?,
            workers,
            config,
            plans,
        })
    }

    /// The workers: each one's layers, device and optimizer, and the world they form.
    pub fn workers(&self) -> &Workers<L> {
        &self.workers
    }

    /// What the runtime runs.
    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    /// Every plan, lowered and validated.
    pub fn plans(&self) -> &Plans {
        &self.plans
    }
}

/// The modules that cannot compute in a cast precision: burn's `BatchNorm` keeps its running
/// statistics in fp32 and would mix them with bf16 batch statistics.
const FP32_ONLY: [&str; 1] = ["BatchNorm"];

/// Refuses a precision that a layer cannot compute in (see [`FP32_ONLY`]), naming the layer
/// and the module.
fn check_precision<L: Layer>(workers: &Workers<L>, precision: crate::Precision) -> Result<()> {
    if !precision.casts() {
        return Ok(());
    }
    for state in workers.states() {
        let offset = workers.partition().range(state.id.stage).start;
        for (i, layer) in state.layers.iter().enumerate() {
            let types = crate::adapter::module_types(layer);
            if let Some(module) = types.iter().find(|t| FP32_ONLY.contains(&t.as_str())) {
                return Err(EngineError::PrecisionUnsupported {
                    layer: offset + i,
                    module: module.clone(),
                    precision,
                });
            }
        }
    }
    Ok(())
}

/// Refuses a world whose process runs some of a pipeline rank's stages but not all (a
/// multi-process world cut inside a rank): the stages of a rank take turns
/// ([`Turns`](crate::worker::turns::Turns)), which pass inside one process only.
fn whole_ranks(world: &World, plan: &Plan) -> Result<()> {
    let local = world.local();
    for &worker in local {
        let Some(rank) = plan.rank_of(worker.stage) else {
            continue;
        };
        if let Some(missing) = plan
            .stages_of(rank)
            .map(|s| WorkerId::new(worker.replica, s))
            .find(|id| !local.contains(id))
        {
            return Err(EngineError::RankAcrossProcesses {
                worker,
                missing,
                rank,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use burn::nn::{Linear, LinearConfig};
    use burn::prelude::*;
    use pipetrain_partitioner::Partition;
    use pipetrain_schedules::ScheduleKind;

    use super::*;
    use crate::adapter::{plain, sole_holder};
    use crate::model::activation::Activation;
    use crate::optim::optimizer::OptimizerConfig;
    use crate::{DataParallel, Handoff, Mse, Remat};

    /// A layer of one `Linear` (the engine's tests' smallest model).
    #[derive(Module, Debug)]
    pub(crate) struct Plain {
        pub(crate) linear: Linear,
    }

    impl Layer for Plain {
        fn forward(&self, x: Activation) -> Result<Activation, EngineError> {
            Ok(self.linear.forward(x.float::<2>()?).into())
        }
    }

    /// GPipe, 2 micro-batches, SGD at 0.1, MSE, under `handoff`.
    pub(crate) fn config(handoff: Handoff) -> RuntimeConfig {
        RuntimeConfig {
            schedule: ScheduleKind::GPipe.into(),
            micro_batches: 2,
            learning_rate: 0.1,
            remat: Remat::Never,
            loss: Arc::new(Mse),
            data_parallel: DataParallel::default(),
            ties: Vec::new(),
            backward: Backward::default(),
            guard: Default::default(),
            timing: Default::default(),
            handoff,
            precision: Default::default(),
            warm_up: Default::default(),
        }
    }

    /// Whether each replica's weight, taken out of its layer while the other replica keeps its
    /// own, is the only handle of its buffer (flex counts a buffer's holders).
    fn weights_alone(handoff: Handoff) -> Vec<Option<bool>> {
        let device = Device::flex();
        let model = vec![Plain {
            linear: LinearConfig::new(3, 2).init(&device),
        }];
        let split = Partition::from_balance(&[1], 1).unwrap();
        let world = World::new(2, 1).unwrap();
        let workers =
            Workers::build(world, split, &model, &[device], &OptimizerConfig::sgd(), 1).unwrap();
        drop(model);
        let prepared = Prepared::new(workers, config(handoff)).unwrap();
        let mut workers = prepared.workers;
        let mut layers: Vec<Vec<Plain>> = workers
            .take_states()
            .into_iter()
            .map(|w| w.into_layers())
            .collect();
        (0..layers.len())
            .map(|r| {
                let layer = layers[r].pop().expect("one layer");
                sole_holder(plain(layer.linear.weight.into_value())).1
            })
            .collect()
    }

    /// `Prepared::new` gives replica 1 weights of its own when the device hand-off is forced on
    /// a CPU (`Handoff::DeviceOnCpuToo`, the GPU's path), and leaves a CPU run's replicas
    /// sharing the model's buffers otherwise (no copy where no stream can race).
    #[test]
    fn replicas_hold_weights_of_their_own_where_the_device_handoff_applies() {
        // Replica 0's weight is taken first, while replica 1 still holds its layer.
        assert_eq!(
            weights_alone(Handoff::DeviceOnCpuToo)[0],
            Some(true),
            "replica 1 shares replica 0's weight buffer: own_buffers was not applied"
        );
        assert_eq!(
            weights_alone(Handoff::Host)[0],
            Some(false),
            "on a CPU, without the forcing, replicas share the model's buffers"
        );
    }
}
