//! Activation re-materialization (torchgpipe's `checkpoint` modes): the [`Remat`] policy, and
//! what a worker does under it — a forward without a graph that keeps only the stage input, and
//! the backward's recomputation of the forward with the graph.

use std::fmt;
use std::str::FromStr;

use pipetrain_schedules::MicroBatchId;

use crate::comm::transport::Flow;
use crate::error::EngineError;
use crate::model::activation::Activation;
use crate::model::layer::Layer;
use crate::worker::{Failure, Stashed, Tape, Worker};

/// What a stage keeps between a micro-batch's forward and its backward.
///
/// With re-materialization the forward keeps no autodiff graph, only the stage input; the
/// backward first recomputes the forward with the graph. Memory per stashed micro-batch drops
/// from every intermediate activation to one input, for one extra forward. Results are
/// identical either way: the first forward runs the training forward's ops on the autodiff
/// backend, on copies of the layers whose parameters require no gradient, so it records no
/// graph (a forward on `Module::valid()` copies rounded some bf16 products otherwise, and a
/// recorded graph, dropped, kept its saved values until the stage's next backward). Layers whose forward changes state (batch norm's running statistics)
/// need `Remat::Never`: their forward runs twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Remat {
    /// Keep the autodiff graph of every micro-batch.
    Never,
    /// Re-materialize every micro-batch but the last, whose backward follows at once
    /// (torchgpipe's default).
    #[default]
    ExceptLast,
    /// Re-materialize every micro-batch.
    Always,
}

impl Remat {
    /// Whether micro-batch `mb` of `micro_batches` is re-materialized.
    pub fn applies(self, mb: usize, micro_batches: usize) -> bool {
        match self {
            Remat::Never => false,
            Remat::ExceptLast => mb + 1 < micro_batches,
            Remat::Always => true,
        }
    }
}

impl fmt::Display for Remat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Remat::Never => "never",
            Remat::ExceptLast => "except_last",
            Remat::Always => "always",
        })
    }
}

impl FromStr for Remat {
    type Err = EngineError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().replace('-', "_").as_str() {
            "never" => Ok(Remat::Never),
            "except_last" => Ok(Remat::ExceptLast),
            "always" => Ok(Remat::Always),
            _ => Err(EngineError::UnknownRemat(s.to_string())),
        }
    }
}

impl<L: Layer> Worker<'_, L> {
    /// The forward of a re-materialized micro-batch: an inner stage computes its output as the
    /// training forward does, recording no graph ([`Worker::forward_untracked`]: its only
    /// consumer is downstream), and queues it; the last stage's output feeds only its own backward, so it computes nothing
    /// yet. Both keep only the input (and the targets).
    pub(crate) fn forward_remat(
        &mut self,
        mb: MicroBatchId,
        input: Activation,
        target: Option<Activation>,
    ) -> Result<(), Failure> {
        if !self.is_last() {
            // The training forward's bits (the backward's recomputation makes the same graph),
            // with nothing recorded: a dropped graph's values would stay until the next backward.
            let out = self.forward_untracked(input.clone())?;
            self.queue(Flow::Activation, mb, out.plain())?;
        }
        self.scratch.stash.put(mb, Stashed::Input { input, target });
        Ok(())
    }

    /// The backward's first half for a re-materialized micro-batch: the forward again, with
    /// the graph. Its output was sent already: it is dropped, never queued.
    pub(crate) fn recompute(
        &mut self,
        mb: MicroBatchId,
        input: Activation,
        target: Option<Activation>,
    ) -> Result<Tape, Failure> {
        let (tape, _sent) = self.forward_tape(mb, input, target)?;
        Ok(tape)
    }
}
