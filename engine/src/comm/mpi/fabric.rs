//! [`MpiFabric`]: the engine's [`Fabric`] over MPI — each local worker gets an
//! [`MpiTransport`] to its neighbours (and, point to point, to the stages of its skip routes:
//! MPI reaches any rank, so skips need no links of their own) and an [`MpiCollective`] over its
//! stage group (and one per tie pair it holds).

use std::collections::HashMap;
use std::sync::Arc;

use pipetrain_schedules::{SkipRoute, WorkerId};

use super::collective::MpiCollective;
use super::comm::Comm;
use super::inbox::Inbox;
use super::launch::Placement;
use super::transport::MpiTransport;
use super::wire::{Route, channel};
use crate::comm::abort::Abort;
use crate::comm::collective::Collective;
use crate::comm::fabric::{Fabric, Links, TieLink};
use crate::error::{EngineError, Result};
use crate::world::World;

/// Connects this process's workers to the others' over MPI.
pub struct MpiFabric {
    comm: Comm,
    placement: Placement,
    /// Connections made so far: each has its own routes.
    epoch: u32,
}

impl MpiFabric {
    /// A fabric for the workers `placement` gives this process, over `comm`.
    pub fn new(comm: Comm, placement: Placement) -> Self {
        Self {
            comm,
            placement,
            epoch: 0,
        }
    }

    /// The inbox for `route`, registered with the communication thread.
    fn inbox(&self, route: Route, abort: &Arc<Abort>) -> Result<Inbox> {
        let (tx, inbox) = Inbox::new(abort, self.comm.timeout());
        self.comm.register(route, tx)?;
        Ok(inbox)
    }

    fn collective(
        &self,
        me: WorkerId,
        members: &[WorkerId],
        channel: u32,
        world: &World,
        abort: &Arc<Abort>,
    ) -> Result<MpiCollective> {
        let rank = members
            .iter()
            .position(|&m| m == me)
            .expect("a worker is a member of its own groups");
        let route = Route {
            to: world.rank(me) as u32,
            channel,
            epoch: self.epoch,
        };
        let members = members
            .iter()
            .map(|&m| (self.placement.process_of(m), world.rank(m) as u32))
            .collect();
        Ok(MpiCollective::new(
            rank,
            members,
            channel,
            self.epoch,
            self.comm.clone(),
            self.inbox(route, abort)?,
        ))
    }
}

impl Fabric for MpiFabric {
    fn connect(
        &mut self,
        world: &World,
        ties: &[TieLink],
        _skips: &[SkipRoute],
        abort: &Arc<Abort>,
    ) -> Result<Vec<Links>> {
        let expected = self.placement.local();
        if world.local() != expected.as_slice()
            || world.replicas() != self.placement.replicas()
            || world.stages() != self.placement.stages()
        {
            return Err(EngineError::LaunchMismatch {
                rank: self.placement.rank(),
                expected,
                layout_replicas: self.placement.replicas(),
                layout_stages: self.placement.stages(),
                local: world.local().to_vec(),
                replicas: world.replicas(),
                stages: world.stages(),
            });
        }
        self.epoch += 1;
        self.comm.watch(abort)?;
        let mut links = Vec::with_capacity(expected.len());
        for &id in world.local() {
            let route = Route {
                to: world.rank(id) as u32,
                channel: channel::TRANSPORT,
                epoch: self.epoch,
            };
            let transport = MpiTransport::new(
                id,
                self.epoch,
                self.comm.clone(),
                self.placement.clone(),
                self.inbox(route, abort)?,
            );
            let group: Vec<WorkerId> = world.stage_group(id.stage).collect();
            let collective = self.collective(id, &group, channel::COLLECTIVE, world, abort)?;
            let mut pairs: HashMap<usize, Box<dyn Collective>> = HashMap::new();
            for link in ties
                .iter()
                .filter(|l| l.low == id.stage || l.high == id.stage)
            {
                let pair = [
                    WorkerId::new(id.replica, link.low),
                    WorkerId::new(id.replica, link.high),
                ];
                let member = self.collective(id, &pair, channel::tie(link.tie), world, abort)?;
                pairs.insert(link.tie, Box::new(member));
            }
            let line: Vec<WorkerId> = world.replica(id.replica).collect();
            let stages = self.collective(id, &line, channel::STAGES, world, abort)?;
            links.push(Links {
                transport: Box::new(transport),
                collective: Box::new(collective),
                ties: pairs,
                stages: Box::new(stages),
            });
        }
        Ok(links)
    }
}
