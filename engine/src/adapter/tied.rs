//! Tied parameters' gradients: summed over the copies (see [`crate::tie`]).

use std::collections::HashMap;

use burn::optim::GradientsParams;
use burn::prelude::*;

use crate::collective::Collective;
use crate::error::EngineError;
use crate::tie::TieSlot;

/// A rank-2 gradient in the tie's (first parameter's) layout.
fn canonical(grads: &GradientsParams, slot: &TieSlot) -> Option<Tensor<2>> {
    let g = grads.get::<2>(slot.id)?;
    Some(if slot.transpose { g.transpose() } else { g })
}

/// Sums each tie's gradients: the worker's own slots first (in tie-member order), then across
/// `links[tie]` (the other workers holding the tie, in stage order) when there are any; every
/// slot gets the sum.
pub(crate) fn sum_tied_gradients(
    mut grads: GradientsParams,
    slots: &[TieSlot],
    links: &mut HashMap<usize, Box<dyn Collective + '_>>,
    device: &Device,
) -> Result<GradientsParams, EngineError> {
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
            grads.remove::<2>(slot.id);
            let g = if slot.transpose {
                sum.clone().transpose()
            } else {
                sum.clone()
            };
            grads.register::<2>(slot.id, g);
        }
    }
    Ok(grads)
}
