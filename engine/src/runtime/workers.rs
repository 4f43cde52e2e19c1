//! `Workers<L>`: the local workers' states, indexed by the [`World`].

use std::borrow::Cow;

use burn::prelude::*;
use pipetrain_partitioner::Partition;
use pipetrain_schedules::{ReplicaId, StageId, WorkerId};

use crate::adapter::{Named, named_parameters};
use crate::device::handoff::Handoff;
use crate::error::{EngineError, Result};
use crate::model::layer::Layer;
use crate::optim::optimizer::OptimizerConfig;
use crate::optim::tie::{Tie, TiePlan};
use crate::skips::SkipRoutes;
use crate::worker::WorkerState;
use crate::world::World;

/// The states of the workers this process runs (replica-major), the world they belong to and
/// the stage split they hold.
///
/// ```
/// use burn::nn::{Linear, LinearConfig};
/// use burn::prelude::*;
/// use pipetrain_engine::*;
/// use pipetrain_partitioner::Partition;
/// use pipetrain_schedules::{ReplicaId, StageId, WorkerId};
///
/// #[derive(Module, Debug)]
/// struct Dense { linear: Linear }
/// impl Layer for Dense {
///     fn forward(&self, x: Activation) -> Result<Activation, EngineError> {
///         Ok(self.linear.forward(x.float::<2>()?).into())
///     }
/// }
/// let device = Device::flex();
/// let model: Vec<Dense> = (0..3).map(|_| Dense { linear: LinearConfig::new(4, 4).init(&device) }).collect();
/// let workers = Workers::build(
///     World::new(2, 2)?,
///     Partition::from_balance(&[2, 1], 3)?,
///     &model,
///     &[device],
///     &OptimizerConfig::sgd(),
///     1,
/// )?;
/// assert_eq!(workers.replica(ReplicaId(1)).count(), 2);
/// assert_eq!(workers.get(WorkerId::new(ReplicaId(1), StageId(0))).unwrap().layers().len(), 2);
/// assert_eq!(workers.into_model().len(), 3);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Workers<L: Layer> {
    world: World,
    partition: Partition,
    optimizer: OptimizerConfig,
    states: Vec<WorkerState<L>>,
    /// Every stage's parameter names and shapes (and this process's ids for them), kept from
    /// the whole model: what a process that runs only some stages knows of the others (where a
    /// tie's other half lives).
    skeleton: Vec<Vec<Named>>,
    /// The skips that cross stages, by stage pair.
    skips: SkipRoutes,
}

impl<L: Layer> Workers<L> {
    /// Cuts `model` by `partition` and gives every local worker of `world` a copy of its stage's
    /// layers (replicas start from clones: same values, same parameter ids), on its device
    /// (`devices`: one for all, one per stage, or one per worker, replica-major), with a fresh
    /// `optimizer` and a compute pool of `threads` threads.
    pub fn build(
        world: World,
        partition: Partition,
        model: &[L],
        devices: &[Device],
        optimizer: &OptimizerConfig,
        threads: usize,
    ) -> Result<Self> {
        let stages = world.stages();
        if partition.stages() != stages || partition.layers() != model.len() {
            return Err(EngineError::SplitMismatch {
                split: partition.to_string(),
                split_stages: partition.stages(),
                split_layers: partition.layers(),
                stages,
                layers: model.len(),
            });
        }
        let device = |id: WorkerId| match devices.len() {
            1 => Ok(&devices[0]),
            n if n == stages => Ok(&devices[id.stage.index()]),
            n if n == world.size() => Ok(&devices[world.rank(id)]),
            devices => Err(EngineError::DeviceCount {
                devices,
                replicas: world.replicas(),
                stages,
            }),
        };
        let skeleton = (0..stages)
            .map(|s| {
                let range = partition.range(StageId(s as u32));
                named_parameters(&model[range.clone()], range.start)
            })
            .collect();
        let mut states = Vec::with_capacity(world.local().len());
        for &id in world.local() {
            let layers = model[partition.range(id.stage)].to_vec();
            states.push(WorkerState::new(
                id,
                layers,
                device(id)?,
                optimizer,
                threads,
            ));
        }
        Ok(Self {
            skips: SkipRoutes::new(model, &partition),
            world,
            partition,
            optimizer: optimizer.clone(),
            states,
            skeleton,
        })
    }

    /// Every stage's named parameters: a local worker's (its layers as they are now), else the
    /// whole model's as it was built.
    pub(crate) fn named_stages(&self) -> Vec<Vec<Named>> {
        (0..self.world.stages())
            .map(|s| {
                let stage = StageId(s as u32);
                match self.states.iter().find(|w| w.id.stage == stage) {
                    Some(w) => named_parameters(w.layers(), self.partition.range(stage).start),
                    None => self.skeleton[s].clone(),
                }
            })
            .collect()
    }

    /// Places `ties` among these workers' stages — all of them, also those another process runs
    /// (from the model they were built from).
    pub fn tie_plan(&self, ties: &[Tie]) -> Result<TiePlan, EngineError> {
        TiePlan::new(ties, &self.named_stages())
    }

    /// The world these workers belong to.
    pub fn world(&self) -> &World {
        &self.world
    }

    /// The stage split.
    pub fn partition(&self) -> &Partition {
        &self.partition
    }

    /// The skips that cross stages under this partition: sent straight from the stashing to the
    /// popping stage.
    pub fn skip_routes(&self) -> &SkipRoutes {
        &self.skips
    }

    /// The optimizer every worker runs.
    pub fn optimizer(&self) -> &OptimizerConfig {
        &self.optimizer
    }

    /// Gives every worker that needs them weights in buffers of its own
    /// ([`WorkerState::needs_own_buffers`] under `handoff`).
    pub(crate) fn own_replica_buffers(&mut self, handoff: Handoff) {
        for state in &mut self.states {
            if state.needs_own_buffers(handoff) {
                state.own_buffers();
            }
        }
    }

    /// The local states, replica-major.
    pub(crate) fn states(&self) -> &[WorkerState<L>] {
        &self.states
    }

    /// Worker `id`'s state, if this process runs it.
    pub fn get(&self, id: WorkerId) -> Option<&WorkerState<L>> {
        self.index(id).map(|i| &self.states[i])
    }

    /// Worker `id`'s state, mutably, if this process runs it.
    pub fn get_mut(&mut self, id: WorkerId) -> Option<&mut WorkerState<L>> {
        self.index(id).map(|i| &mut self.states[i])
    }

    /// The local workers of replica `replica`, stage order.
    pub fn replica(&self, replica: ReplicaId) -> impl Iterator<Item = &WorkerState<L>> + '_ {
        self.states
            .iter()
            .filter(move |w| w.id().replica == replica)
    }

    /// Every local worker, replica-major.
    pub fn iter(&self) -> impl Iterator<Item = &WorkerState<L>> + '_ {
        self.states.iter()
    }

    /// Every local worker, mutably, replica-major.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut WorkerState<L>> + '_ {
        self.states.iter_mut()
    }

    /// Replica 0's copy of the whole model, stage 0's layers first (cloned). Under ZeRO-3
    /// between steps each replica holds only the parameters it owns: a stage is put together
    /// from its local replicas (all of them in one process; a multi-process run gathers
    /// checkpoint parts instead).
    pub fn model(&self) -> Vec<L> {
        self.replica(ReplicaId(0))
            .flat_map(|w| self.whole_layers(w).into_owned())
            .collect()
    }

    /// Replica 0's copy of the whole model, stage 0's layers first.
    pub fn into_model(self) -> Vec<L> {
        let whole: Vec<Vec<L>> = self
            .replica(ReplicaId(0))
            .filter(|w| w.is_sharded())
            .map(|w| self.whole_layers(w).into_owned())
            .collect();
        let mut whole = whole.into_iter();
        self.states
            .into_iter()
            .filter(|w| w.id().replica == ReplicaId(0))
            .flat_map(|w| match w.is_sharded() {
                true => whole.next().expect("one whole stage per sharded one"),
                false => w.into_layers(),
            })
            .collect()
    }

    /// `w`'s layers, whole: as they are, or under ZeRO-3 between steps
    /// ([`WorkerState::is_sharded`]) a copy with the values `w` does not own taken from the
    /// local replicas of its stage that do (all of them in one process; a value no local
    /// replica holds stays empty: a multi-process run gathers checkpoint parts instead).
    pub fn whole_layers<'a>(&'a self, w: &'a WorkerState<L>) -> Cow<'a, [L]> {
        let Some(zero) = w.zero.as_ref().filter(|z| z.is_sharded()) else {
            return Cow::Borrowed(w.layers());
        };
        let whole = self
            .states
            .iter()
            .filter(|o| o.id().stage == w.id().stage && o.id() != w.id())
            .fold(w.layers.clone(), |layers, owner| {
                zero.fill_from(layers, &owner.layers, owner.id().replica.0 as usize)
            });
        Cow::Owned(whole)
    }

    /// Lends the states out (for a step on the worker threads); [`restore`](Self::restore)
    /// takes them back.
    pub(crate) fn take_states(&mut self) -> Vec<WorkerState<L>> {
        std::mem::take(&mut self.states)
    }

    /// Takes the lent states back (replica-major, as [`take_states`](Self::take_states) gave).
    /// A worker whose thread died is missing: the runtime is then unusable.
    pub(crate) fn restore(&mut self, states: Vec<WorkerState<L>>) {
        self.states = states;
    }

    fn index(&self, id: WorkerId) -> Option<usize> {
        self.states.iter().position(|w| w.id() == id)
    }
}
