//! A stage's training forward of one micro-batch, recorded for its backward.
//!
//! The stage's layers run as maximal *segments*: consecutive layers on the autodiff path form a
//! [`Segment::Graph`] (an input leaf and an output carrying the graph); consecutive
//! [dense](crate::dense) layers, when the backward is split, form a [`Segment::Dense`] run by
//! hand (each layer's input and output kept for its backward). Between segments the activation
//! is plain, as between stages.

use std::ops::Range;

use burn::prelude::*;

use crate::model::activation::Activation;
use crate::model::layer::Layer;
use crate::model::split::linears::Tap;

/// Consecutive layers of a stage, and whether they run by hand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    pub layers: Range<usize>,
    pub dense: bool,
}

/// The stage's layers cut into maximal runs of dense (when `split`) and autodiff layers.
pub(crate) fn runs<L: Layer>(layers: &[L], split: bool) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    for (i, layer) in layers.iter().enumerate() {
        let dense = split && layer.dense().is_some();
        match runs.last_mut() {
            Some(run) if run.dense == dense => run.layers.end = i + 1,
            _ => runs.push(Run {
                layers: i..i + 1,
                dense,
            }),
        }
    }
    runs
}

/// One dense layer's forward, kept for its backward (rank-2 views: rows × features).
pub(crate) struct Saved {
    pub input: Tensor<2>,
    pub output: Tensor<2>,
}

/// One segment of a stage's forward.
// A stage has a handful of segments per stashed micro-batch: boxing would save nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Segment {
    /// Layers on the autodiff path.
    Graph {
        /// The segment's input (an autodiff leaf, requiring grad when a gradient must flow to
        /// it).
        input: Activation,
        /// The segment's output, carrying the graph.
        output: Activation,
        /// Per layer that [splits its `Linear`s](crate::Layer::splits_linears) (its index in
        /// the stage), its calls' kept values; empty without a split backward.
        taps: Vec<(usize, Vec<Tap>)>,
    },
    /// Dense layers run by hand.
    Dense {
        /// Which of the stage's layers.
        layers: Range<usize>,
        /// Per layer, in order.
        saved: Vec<Saved>,
        /// The leading dimensions of the segment's input and output (`[rows]` for rank 2).
        lead: Vec<usize>,
        /// Whether the segment's input needs a gradient (not on stage 0's first segment).
        input_grad: bool,
    },
}

/// A stage's forward of one micro-batch with what its backward needs.
pub(crate) struct Tape {
    pub segments: Vec<Segment>,
    /// On the last stage: the scaled loss, and the leaf it was computed from when the last
    /// segment is dense (its gradient seeds the dense backward).
    pub loss: Option<(Tensor<1>, Option<Activation>)>,
}
