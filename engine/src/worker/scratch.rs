//! A worker's scratch: everything one step's program builds up and drops — messages in and
//! out, the stash, deferred weight gradients, losses and outputs, timings — apart from the
//! worker's state (kept across steps), links and the step's shared context.

use std::collections::HashMap;
use std::time::Duration;

use burn::prelude::*;
use pipetrain_schedules::{MicroBatchId, WorkerId};

use super::job::{Feed, Finished};
use super::stash::Stash;
use super::sync::Reduced;
use crate::adapter;
use crate::comm::transport::Tag;
use crate::model::activation::Activation;
use crate::model::split::deferred::Deferred;
use crate::worker::report::{ActionTimes, WorkerReport};

/// One step's working values on one worker.
pub(crate) struct Scratch<L> {
    /// This worker's share of the batch.
    pub feed: Feed,
    /// Messages received and not yet used, by tag.
    pub received: HashMap<Tag, Activation>,
    /// Results computed and not yet sent, by tag.
    pub outgoing: HashMap<Tag, Activation>,
    /// What each micro-batch's backward needs from its forward.
    pub stash: Stash,
    /// Weight-gradient work waiting for its `W`.
    pub deferred: Deferred,
    /// The layers without autodiff, made once a step when a forward needs no graph (dropped at
    /// the optimizer step, which changes the layers).
    pub valid: Option<Vec<L>>,
    /// Gradients after the all-reduce, waiting for the optimizer step.
    pub reduced: Option<Reduced>,
    /// The last stage's scaled micro-batch losses, read back once when the program ends.
    pub losses: Vec<Tensor<1>>,
    /// The last stage's outputs of an inference run.
    pub outputs: Vec<(MicroBatchId, Activation)>,
    /// Set while layers run: the input and its origin, for panic messages.
    pub input_context: Option<String>,
    /// Time in compute actions, in total and per kind.
    pub compute: Duration,
    pub actions: ActionTimes,
    /// Device synchronisations so far (see [`Timing`](crate::Timing)).
    pub device_syncs: u32,
    /// Compute actions run one at a time (a warm-up step, `worker/warm_up.rs`).
    pub serialized: u32,
    /// Blocking reads of device values so far (the guard's one a step, shared with the loss).
    pub read_backs: u32,
    /// The step's loss, when the guard's read-back already brought the losses.
    pub loss: Option<f64>,
    /// Bytes of the values sent to other stages so far.
    pub sent_bytes: u64,
    /// When the all-reduce started and ended (from the step's start).
    pub all_reduce: Option<(Duration, Duration)>,
    /// When the last backward (or `W`) ended.
    pub backward_end: Option<Duration>,
    /// The global gradient norm the optimizer step saw.
    pub grad_norm: Option<f64>,
    /// Whether the optimizer step skipped a non-finite step.
    pub skipped: bool,
}

impl<L> Scratch<L> {
    /// Empty, with `feed`; deferred weight gradients grouped by `weight_group` of
    /// `micro_batches`.
    pub fn new(feed: Feed, weight_group: usize, micro_batches: usize) -> Self {
        Self {
            feed,
            received: HashMap::new(),
            outgoing: HashMap::new(),
            stash: Stash::default(),
            deferred: Deferred::new(weight_group, micro_batches),
            valid: None,
            reduced: None,
            losses: Vec::new(),
            outputs: Vec::new(),
            input_context: None,
            compute: Duration::ZERO,
            actions: ActionTimes::default(),
            device_syncs: 0,
            serialized: 0,
            read_backs: 0,
            loss: None,
            sent_bytes: 0,
            all_reduce: None,
            backward_end: None,
            grad_norm: None,
            skipped: false,
        }
    }

    /// What worker `worker` hands back after a program that ran `wall` since the step started.
    pub fn finish(mut self, worker: WorkerId, wall: Duration) -> Finished {
        // The losses were read with the guard's norm, or are read now (no optimizer step).
        let loss = match self.loss {
            Some(loss) => loss,
            None if self.losses.is_empty() => 0.0,
            None => {
                self.read_backs += 1;
                adapter::sum_scalars(std::mem::take(&mut self.losses))
            }
        };
        let idle = wall.saturating_sub(self.compute);
        let report = WorkerReport {
            worker,
            compute: self.compute,
            idle,
            bubble_fraction: if wall.is_zero() {
                0.0
            } else {
                idle.as_secs_f64() / wall.as_secs_f64()
            },
            peak_stash: self.stash.peak(),
            peak_deferred_bytes: self.deferred.peak_bytes(),
            all_reduce: self.all_reduce,
            backward_end: self.backward_end,
            actions: self.actions,
            device_syncs: self.device_syncs,
            serialized_actions: self.serialized,
            read_backs: self.read_backs,
            sent_bytes: self.sent_bytes,
            grad_norm: self.grad_norm,
            skipped: self.skipped,
        };
        Finished {
            loss,
            report,
            outputs: self.outputs,
        }
    }
}
