//! The fabric: what connects the workers. It makes each local worker's [`Links`] — the
//! transport to its neighbouring stages (and to the stages it exchanges skips with), the collective over its stage group, and the pairs
//! that sum tied parameters — and is injected into the [`Runtime`](crate::Runtime), so another
//! transport (MPI, NCCL) plugs in without touching the engine. [`ChannelFabric`], in-process
//! channels, is the default.
//!
//! Links are made once, when the runtime starts, and live across steps; after a failed step the
//! runtime asks for fresh ones (a failure can leave messages in flight).

use std::collections::HashMap;
use std::sync::Arc;

use pipetrain_schedules::{SkipRoute, StageId, WorkerId};

use crate::comm::abort::Abort;
use crate::comm::collective::{ChannelCollective, Collective};
use crate::comm::transport::{ChannelTransport, Transport};
use crate::device::handoff::Handoff;
use crate::error::Result;
use crate::world::World;

/// A tie whose two parameters sit on different stages of a replica: its index in the tie plan
/// and the two stages (lower first). Their holders sum the tie's gradient in a 2-member group
/// (the lower stage is rank 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TieLink {
    /// The tie's index.
    pub tie: usize,
    /// The lower stage (rank 0 of the pair).
    pub low: StageId,
    /// The higher stage (rank 1).
    pub high: StageId,
}

/// One worker's connections.
pub struct Links {
    /// To the neighbouring stages of its replica, and to the stages of its skip routes.
    pub transport: Box<dyn Transport>,
    /// Over its stage group (its rank is its replica index).
    pub collective: Box<dyn Collective>,
    /// Per tie it shares with another stage of its replica: the pair's group.
    pub ties: HashMap<usize, Box<dyn Collective>>,
    /// Over the stages of its replica (its rank is its stage index): the gradient guard's
    /// global norm (see [`GradGuard`](crate::GradGuard)).
    pub stages: Box<dyn Collective>,
}

/// Makes the links of a world's local workers.
pub trait Fabric: Send {
    /// The links of every local worker of `world`, in `world.local()` order; each replica's
    /// transports also link the two stages of every skip route in `skips` directly. Every wait
    /// on them must also watch `abort` (see [`Abort::watch`]), so that a failure anywhere ends
    /// it.
    fn connect(
        &mut self,
        world: &World,
        ties: &[TieLink],
        skips: &[SkipRoute],
        abort: &Arc<Abort>,
    ) -> Result<Vec<Links>>;
}

/// In-process channels: [`ChannelTransport`] within each replica, [`ChannelCollective`] within
/// each stage group and tie pair. Needs the whole world in this process.
#[derive(Clone, Copy, Debug, Default)]
pub struct ChannelFabric {
    /// How the collectives hand tensors to each other's threads on a GPU (the transports'
    /// activations follow the runtime's [`RuntimeConfig::handoff`](crate::RuntimeConfig)).
    pub handoff: Handoff,
}

impl Fabric for ChannelFabric {
    fn connect(
        &mut self,
        world: &World,
        ties: &[TieLink],
        skips: &[SkipRoute],
        abort: &Arc<Abort>,
    ) -> Result<Vec<Links>> {
        if !world.is_whole() {
            return Err(crate::error::EngineError::PartialWorld {
                operation: "in-process channels",
                local: world.local().len(),
                size: world.size(),
                remedy: pipetrain_schedules::Remedy::sentence(
                    "connect the processes with a multi-process fabric",
                ),
            });
        }
        let (replicas, stages) = (world.replicas(), world.stages());
        let mut transports: HashMap<WorkerId, ChannelTransport> = HashMap::new();
        for r in 0..replicas {
            let ids = world.replica(r.into());
            transports.extend(ids.zip(ChannelTransport::pipeline(stages, skips, abort)));
        }
        let mut collectives: HashMap<WorkerId, ChannelCollective> = HashMap::new();
        for s in 0..stages {
            let ids = world.stage_group(s.into());
            collectives.extend(ids.zip(ChannelCollective::group_with(
                replicas,
                abort,
                self.handoff,
            )));
        }
        let mut lines: HashMap<WorkerId, ChannelCollective> = HashMap::new();
        for r in 0..replicas {
            let ids = world.replica(r.into());
            lines.extend(ids.zip(ChannelCollective::group_with(stages, abort, self.handoff)));
        }
        let mut pairs: HashMap<WorkerId, HashMap<usize, Box<dyn Collective>>> = HashMap::new();
        for r in 0..replicas {
            for link in ties {
                let pair = ChannelCollective::group_with(2, abort, self.handoff);
                for (stage, member) in [link.low, link.high].into_iter().zip(pair) {
                    pairs
                        .entry(WorkerId::new(r.into(), stage))
                        .or_default()
                        .insert(link.tie, Box::new(member));
                }
            }
        }
        Ok(world
            .local()
            .iter()
            .map(|id| Links {
                transport: Box::new(transports.remove(id).expect("one per worker")),
                collective: Box::new(collectives.remove(id).expect("one per worker")),
                ties: pairs.remove(id).unwrap_or_default(),
                stages: Box::new(lines.remove(id).expect("one per worker")),
            })
            .collect())
    }
}
