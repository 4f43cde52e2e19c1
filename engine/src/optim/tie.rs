//! Tied parameters: two parameters of the model that are one (DeepSpeed's `TiedLayerSpec`), such
//! as a GPT's input embedding on the first stage and its output projection on the last.
//!
//! Each holder keeps its own copy. The copies start equal (the second takes the first's value)
//! and stay equal: every step, at the all-reduce, the tie's gradients are summed between the
//! workers that hold them (a [`Collective`](crate::Collective) group of those workers, or a local
//! sum when one worker holds both), and each copy gets the sum. The optimizer, element-wise,
//! then updates both copies identically. A tie may be **transposed** (`[V, D]` embedding against
//! a `[D, V]` Linear weight): the second copy's gradient is transposed into the first's layout
//! before the sum and back after.
//!
//! Parameters are named as in checkpoints (full-model names, enum variants skipped), e.g.
//! `0.token.weight` and `3.unembed.weight`. Tied parameters must be rank 2.

use std::collections::HashMap;

use burn::prelude::*;

use crate::adapter::{self, Grads, Named, ParamId, named_parameters};
use crate::comm::collective::Collective;
use crate::error::EngineError;
use crate::model::layer::Layer;

/// Two parameters that are one.
///
/// ```
/// use pipetrain_engine::Tie;
/// let tie = Tie::transposed("0.token.weight", "3.unembed.weight");
/// assert_eq!(tie.to_string(), "0.token.weight = 3.unembed.weight^T");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tie {
    /// The parameter whose value both start from.
    pub first: String,
    /// The parameter tied to it.
    pub second: String,
    /// Whether `second` is stored transposed (`[D, V]` against `[V, D]`).
    pub transpose: bool,
}

impl Tie {
    /// `second` is `first`, same layout.
    pub fn new(first: impl Into<String>, second: impl Into<String>) -> Self {
        Self {
            first: first.into(),
            second: second.into(),
            transpose: false,
        }
    }

    /// `second` is `first` transposed.
    pub fn transposed(first: impl Into<String>, second: impl Into<String>) -> Self {
        Self {
            transpose: true,
            ..Self::new(first, second)
        }
    }
}

impl std::fmt::Display for Tie {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let t = if self.transpose { "^T" } else { "" };
        write!(f, "{} = {}{t}", self.first, self.second)
    }
}

/// One tied parameter held by one worker.
#[derive(Clone, Debug)]
pub(crate) struct TieSlot {
    /// Which tie.
    pub tie: usize,
    pub id: ParamId,
    pub transpose: bool,
    /// The tie's shape (the first parameter's).
    pub shape: [usize; 2],
}

/// Where each tie's two parameters live: (stage, slot) for first and second.
pub(crate) type Placed = Vec<[(usize, TieSlot); 2]>;

/// Finds each tie's parameters among the stages (`stages[s]` = stage s's layers, in order) and
/// checks their shapes.
pub(crate) fn place<L: Layer>(ties: &[Tie], stages: &[&[L]]) -> Result<Placed, EngineError> {
    let mut offset = 0;
    let named: Vec<Vec<Named>> = stages
        .iter()
        .map(|layers| {
            let named = named_parameters(layers, offset);
            offset += layers.len();
            named
        })
        .collect();
    place_named(ties, &named)
}

/// [`place`] over each stage's named parameters.
fn place_named(ties: &[Tie], stages: &[Vec<Named>]) -> Result<Placed, EngineError> {
    let mut by_name: HashMap<String, (usize, ParamId, Vec<usize>)> = HashMap::new();
    let mut examples = Vec::new();
    for (s, named) in stages.iter().enumerate() {
        for n in named {
            if examples.len() < 4 {
                examples.push(format!("`{}`", n.name));
            }
            by_name.insert(n.name.clone(), (s, n.id, n.shape.clone()));
        }
    }
    ties.iter()
        .enumerate()
        .map(|(i, tie)| {
            let find = |name: &String| {
                by_name
                    .get(name)
                    .cloned()
                    .ok_or_else(|| EngineError::TieUnknown {
                        tie: tie.to_string(),
                        name: name.clone(),
                        examples: examples.join(", "),
                    })
            };
            let (s1, id1, shape1) = find(&tie.first)?;
            let (s2, id2, shape2) = find(&tie.second)?;
            let flipped: Vec<usize> = shape2.iter().rev().copied().collect();
            let fits = shape1.len() == 2
                && shape2.len() == 2
                && shape1
                    == if tie.transpose {
                        flipped
                    } else {
                        shape2.clone()
                    };
            if !fits {
                let hint = if shape1.len() != 2 || shape2.len() != 2 {
                    " (tied parameters must be rank 2)".to_string()
                } else if tie.transpose {
                    " (drop the transposition?)".to_string()
                } else {
                    " (tie them transposed?)".to_string()
                };
                return Err(EngineError::TieShape {
                    tie: tie.to_string(),
                    first: shape1,
                    second: shape2,
                    hint,
                });
            }
            let slot = |id, transpose| TieSlot {
                tie: i,
                id,
                transpose,
                shape: [shape1[0], shape1[1]],
            };
            Ok([(s1, slot(id1, false)), (s2, slot(id2, tie.transpose))])
        })
        .collect()
}

/// `layers` (the whole model) with each tie's second parameter set to its first's value
/// (transposed if the tie says so): tied copies must start equal.
pub fn equalize<L: Layer>(layers: Vec<L>, ties: &[Tie]) -> Result<Vec<L>, EngineError> {
    let placed = place(ties, &[&layers[..]])?;
    let mut layers = layers;
    for [(_, first), (_, second)] in placed {
        let (value, dims) = adapter::value_of(&layers, first.id).expect("placed parameters exist");
        let value = value.reshape([dims[0], dims[1]]); // placed parameters are rank 2
        let value = if second.transpose {
            value.transpose()
        } else {
            value
        };
        let n = dims[0] * dims[1];
        layers = adapter::set_values(layers, HashMap::from([(second.id, value.reshape([n]))]));
    }
    Ok(layers)
}

/// Where every tie lives in a pipeline: built once from replica 0's stages (replicas hold clones,
/// with the same parameter ids), held by the [`Runtime`](crate::Runtime).
#[derive(Clone, Debug, Default)]
pub struct TiePlan {
    placed: Placed,
}

impl TiePlan {
    /// No ties.
    pub fn none() -> Self {
        Self::default()
    }

    /// Places `ties` among the stages whose named parameters are `stages` (every stage's,
    /// also those another process runs: [`Workers::tie_plan`](crate::Workers::tie_plan)).
    pub(crate) fn new(ties: &[Tie], stages: &[Vec<Named>]) -> Result<Self, EngineError> {
        if ties.is_empty() {
            return Ok(Self::none());
        }
        Ok(Self {
            placed: place_named(ties, stages)?,
        })
    }

    /// Whether there is nothing to tie.
    pub fn is_empty(&self) -> bool {
        self.placed.is_empty()
    }

    /// The slots stage `stage` holds.
    pub(crate) fn slots(&self, stage: usize) -> Vec<TieSlot> {
        self.placed
            .iter()
            .flat_map(|pair| pair.iter())
            .filter(|(s, _)| *s == stage)
            .map(|(_, slot)| slot.clone())
            .collect()
    }

    /// Ties whose two parameters are on different stages: (tie, lower stage, higher stage).
    pub(crate) fn links(&self) -> Vec<(usize, usize, usize)> {
        self.placed
            .iter()
            .enumerate()
            .filter(|(_, [(a, _), (b, _)])| a != b)
            .map(|(i, [(a, _), (b, _)])| (i, *a.min(b), *a.max(b)))
            .collect()
    }
}

// Tied parameters' gradients: summed over the copies.

/// A rank-2 gradient in the tie's (first parameter's) layout.
fn canonical(grads: &Grads, slot: &TieSlot) -> Option<Tensor<2>> {
    let g = adapter::matrix_grad(grads, slot.id)?;
    Some(if slot.transpose { g.transpose() } else { g })
}

/// Sums each tie's gradients: the worker's own slots first (in tie-member order), then across
/// `links[tie]` (the other workers holding the tie, in stage order) when there are any; every
/// slot gets the sum.
pub(crate) fn sum_tied_gradients(
    mut grads: Grads,
    slots: &[TieSlot],
    links: &mut HashMap<usize, Box<dyn Collective + '_>>,
    device: &Device,
) -> Result<Grads, EngineError> {
    let mut ties: Vec<usize> = slots.iter().map(|s| s.tie).collect();
    ties.sort_unstable();
    ties.dedup();
    for tie in ties {
        let members: Vec<&TieSlot> = slots.iter().filter(|s| s.tie == tie).collect();
        let mut sum: Option<Tensor<2>> = None;
        for slot in &members {
            // A parameter with no gradient (unused this step) contributes zero.
            if let Some(g) = canonical(&grads, slot) {
                sum = Some(match sum {
                    Some(s) => s + g,
                    None => g,
                });
            }
        }
        // Every holder takes part in the sum, even without a gradient of its own.
        let mut sum = sum.unwrap_or_else(|| Tensor::zeros(members[0].shape, device));
        if let Some(link) = links.get_mut(&tie) {
            let [rows, cols] = sum.dims();
            let summed = link.all_reduce_tensors(vec![sum.reshape([rows * cols])])?;
            let flat = summed.into_iter().next().expect("one tensor in, one out");
            sum = flat.to_device(device).reshape([rows, cols]);
        }
        for slot in members {
            let g = if slot.transpose {
                sum.clone().transpose()
            } else {
                sum.clone()
            };
            adapter::set_matrix_grad(&mut grads, slot.id, g);
        }
    }
    Ok(grads)
}
