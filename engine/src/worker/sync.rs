//! Synchronisation at the end of a step: tied parameters summed between their stages, the
//! stage's gradients summed over its replicas (bucketed all-reduce, ZeRO-1's reduce, or
//! ZeRO-2/3's `RG`), the optimizer step, replica 0's buffers broadcast, and ZeRO-2/3's unshard
//! (`US`) and reshard (`RS`) of the parameters.

use burn::prelude::*;

use super::interpreter::{Failure, Worker};
use crate::adapter::{self, Buffers, Grads, Slots};
use crate::model::layer::Layer;
use crate::optim::zero::{Sharded, ZeroState};

/// Gradients after the all-reduce, waiting for the optimizer step.
pub(crate) struct Reduced {
    grads: Grads,
    /// With ZeRO-1: which replica owns (updates) which parameter.
    sharded: Option<Sharded>,
}

impl<L: Layer> Worker<'_, L> {
    /// The `RG` action (ZeRO-2/3): ties first, then each gradient summed over the replicas into
    /// its owner; the others drop theirs. What is left is this replica's shard, which the next
    /// accumulation step adds to (or the optimizer step takes).
    pub(super) fn reduce_grad(&mut self) -> Result<(), Failure> {
        let started = self.ctx.start.elapsed();
        let micro_batches = self.state.grads.micro_batches();
        let grads = self.state.grads.take();
        let grads = self.sum_ties(grads)?;
        let replicas = self.links.collective.size();
        let grads = if replicas > 1 {
            let layers = &self.state.layers;
            let zero = self
                .state
                .zero
                .get_or_insert_with(|| ZeroState::new(layers, replicas));
            let reduced = zero.reduce(layers, grads, self.links.collective.as_mut())?;
            self.scratch.all_reduce = Some((started, self.ctx.start.elapsed()));
            reduced
        } else {
            grads
        };
        self.state.grads.restart(&self.state.layers, grads);
        for _ in 0..micro_batches {
            self.state.grads.count_micro_batch();
        }
        Ok(())
    }

    /// The `US` action (ZeRO-2/3): every replica takes each parameter's value from its owner.
    pub(super) fn unshard(&mut self) -> Result<(), Failure> {
        let replicas = self.links.collective.size();
        let device = adapter::plain_device(&self.state.device);
        let layers = std::mem::take(&mut self.state.layers);
        let zero = self
            .state
            .zero
            .get_or_insert_with(|| ZeroState::new(&layers, replicas));
        let bucket_elems = self
            .ctx
            .job
            .training()
            .map_or(usize::MAX, |t| t.bucket_elems);
        self.state.layers = zero.unshard(
            layers,
            self.links.collective.as_mut(),
            &device,
            bucket_elems,
        )?;
        self.scratch.valid = None;
        Ok(())
    }

    /// The `RS` action (ZeRO-3): the values this replica does not own are dropped.
    pub(super) fn reshard(&mut self) -> Result<(), Failure> {
        let (replicas, rank) = (self.links.collective.size(), self.links.collective.rank());
        let layers = std::mem::take(&mut self.state.layers);
        let zero = self
            .state
            .zero
            .get_or_insert_with(|| ZeroState::new(&layers, replicas));
        self.state.layers = zero.reshard(layers, rank);
        // The graph-free copy of the layers holds every value too.
        self.scratch.valid = None;
        Ok(())
    }

    /// Tied parameters' gradients summed between the stages that hold them.
    fn sum_ties(&mut self, grads: Grads) -> Result<Grads, Failure> {
        if self.tie_slots.is_empty() {
            return Ok(grads);
        }
        let device = adapter::plain_device(&self.state.device);
        Ok(crate::optim::tie::sum_tied_gradients(
            grads,
            self.tie_slots,
            &mut self.links.ties,
            &device,
        )?)
    }

    /// The `AR` action: ties first, then the sum over the replicas.
    pub(super) fn all_reduce(&mut self) -> Result<(), Failure> {
        let started = self.ctx.start.elapsed();
        let grads = self.state.grads.take();
        let grads = self.sum_ties(grads)?;
        self.scratch.reduced = Some(if self.links.collective.size() > 1 {
            let reduced = self.all_reduce_grads(grads)?;
            self.scratch.all_reduce = Some((started, self.ctx.start.elapsed()));
            reduced
        } else {
            // One replica: its gradients are already the sum.
            Reduced {
                grads,
                sharded: None,
            }
        });
        Ok(())
    }

    /// Sums this stage's gradients over its replicas (two or more). Plain data parallelism: an
    /// all-reduce, bucket by bucket in module order. ZeRO-1: a reduce, so each replica holds the
    /// summed gradients of the parameters it owns.
    fn all_reduce_grads(&mut self, grads: Grads) -> Result<Reduced, Failure> {
        let layers = &self.state.layers;
        let (slots, tensors) = Slots::of_grads(layers, &grads);
        drop(grads);
        let training = self.training();
        if training.zero.shards_optimizer_state() {
            let (grads, sharded) =
                Sharded::reduce(layers, slots, tensors, self.links.collective.as_mut())?;
            return Ok(Reduced {
                grads,
                sharded: Some(sharded),
            });
        }
        let mut summed = Vec::with_capacity(tensors.len());
        let mut tensors = tensors.into_iter();
        for bucket in slots.buckets(training.bucket_elems) {
            let part: Vec<Tensor<1>> = tensors.by_ref().take(bucket.len()).collect();
            summed.extend(
                self.links
                    .collective
                    .all_reduce_tensors(part)?
                    .into_iter()
                    .map(Some),
            );
        }
        Ok(Reduced {
            grads: slots.grads(layers, summed),
            sharded: None,
        })
    }

    /// The optimizer step on the summed gradients; with ZeRO-1 each replica updates its own
    /// parameters, then they exchange the updated values.
    pub(super) fn optimizer_step(&mut self) -> Result<(), Failure> {
        let (grads, sharded) = match self.scratch.reduced.take() {
            Some(Reduced { grads, sharded }) => (grads, sharded),
            None => (self.state.grads.take(), None),
        };
        // A skipped (or failed) step changes no parameter: no update, and no ZeRO-1 exchange
        // (every replica's parameters are unchanged). ZeRO-2/3's gradients are this replica's
        // shard already (its `RG` ran), and its `US` hands the values out.
        let grads = self.guard(grads)?;
        let sharded = sharded.filter(|_| grads.is_some());
        if let Some(grads) = grads {
            let learning_rate = self.training().learning_rate;
            adapter::step(
                &mut self.state.optimizer,
                learning_rate,
                &mut self.state.layers,
                grads,
            );
        }
        if let Some(sharded) = sharded {
            let device = adapter::plain_device(&self.state.device);
            let layers = std::mem::take(&mut self.state.layers);
            let bucket_elems = self.training().bucket_elems;
            self.state.layers = sharded.exchange(
                layers,
                self.links.collective.as_mut(),
                &device,
                bucket_elems,
            )?;
        }
        if self.links.collective.size() > 1 {
            self.broadcast_buffers()?;
        }
        self.scratch.valid = None;
        Ok(())
    }

    /// Replica 0's buffers (batch-norm running statistics) to every replica, as PyTorch DDP's
    /// `broadcast_buffers` does: replicas stay identical, parameters and buffers.
    fn broadcast_buffers(&mut self) -> Result<(), Failure> {
        let buffers = Buffers::of(&self.state.layers);
        if buffers.ids.is_empty() {
            return Ok(());
        }
        let owners = vec![0; buffers.ids.len()];
        let lens: Vec<usize> = buffers.values.iter().map(|t| t.dims()[0]).collect();
        let values = if self.links.collective.rank() == 0 {
            buffers.values.iter().cloned().map(Some).collect()
        } else {
            vec![None; lens.len()]
        };
        let device = adapter::plain_device(&self.state.device);
        let all = self
            .links
            .collective
            .broadcast_tensors(values, &owners, &lens, &device)?;
        if self.links.collective.rank() != 0 {
            let layers = std::mem::take(&mut self.state.layers);
            self.state.layers = buffers.load(layers, all);
        }
        Ok(())
    }
}
