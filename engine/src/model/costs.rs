//! Measuring per-layer costs: the short profiling pass behind balance-by-time.

use std::time::Instant;

use burn::prelude::*;
use pipetrain_partitioner::LayerCost;

use crate::adapter;
use crate::error::EngineError;
use crate::linears::Linears;
use crate::model::activation::Activation;
use crate::model::bundle::Bundle;
use crate::model::layer::Layer;

/// Forward and backward time of each layer on `sample` (one micro-batch), measured one layer at
/// a time on `device` (the first layer's backward without an input gradient, as stage 0 runs
/// it; best of `repeats`, after one untimed pass over every layer so that
/// first-use costs — allocations, GEMM packing buffers, page faults — are not charged to the
/// first layers), with parameter bytes, the bytes its training forward keeps in the autodiff
/// graph ([`Layer::graph_bytes`] of the input it took and the output it gave:
/// [`LayerCost::activation_bytes`]) and its output's bytes ([`LayerCost::output_bytes`]), each
/// for one micro-batch, in fp32 (the profile does not cast), its `Linear`s as burn runs them
/// ([`layer_costs_split`] for the split backward's graph).
///
/// Like torchgpipe's `balance_by_time`, this times the real layers on real data; it runs on the
/// calling thread before any worker starts. The device is synchronised before each clock
/// reading, so on a GPU the times are the device's work, not the host's enqueueing (a no-op on
/// a CPU).
pub fn layer_costs<L: Layer>(
    layers: &[L],
    sample: &Activation,
    device: &Device,
    repeats: usize,
) -> Result<Vec<LayerCost>, EngineError> {
    layer_costs_split(layers, sample, device, repeats, false)
}

/// [`layer_costs`], with each layer's graph as its training forward keeps it when `split`, the
/// split backward's ([`Layer::graph_bytes`] with its `Linear`s split where it
/// [splits them](Layer::splits_linears): a split `Linear` without a bias keeps a zeros leaf of
/// its output's size). The times are the same either way: the profile runs the `Linear`s as
/// burn does.
pub fn layer_costs_split<L: Layer>(
    layers: &[L],
    sample: &Activation,
    device: &Device,
    repeats: usize,
    split: bool,
) -> Result<Vec<LayerCost>, EngineError> {
    let plain = device.clone();
    let synced = || {
        plain
            .sync()
            .map_err(|e| EngineError::DeviceFailed(e.to_string()))
    };
    let device = adapter::autodiff_device(device);
    let layers: Vec<L> = layers
        .iter()
        .map(|l| adapter::trainable(l.clone(), &device))
        .collect();
    // Warm-up: one untimed forward and backward through every layer.
    let mut x = sample.clone().plain().to_device(&device);
    for (i, layer) in layers.iter().enumerate() {
        let y = layer.forward(crate::model::tracking::leaf(x.clone(), i > 0))?;
        if let Some(ones) = ones_like(&y) {
            let _ = crate::model::tracking::backward_seeded(&y, ones)?;
        }
        x = y.plain();
    }
    let mut x = sample.clone().plain().to_device(&device);
    let mut costs = Vec::with_capacity(layers.len());
    for (i, layer) in layers.iter().enumerate() {
        let (mut forward, mut backward) = (f64::INFINITY, f64::INFINITY);
        let mut out = None;
        for _ in 0..repeats.max(1) {
            // The model's input is data: no gradient flows to it (as on stage 0), so the first
            // layer's backward computes no input gradient.
            let leaf = crate::model::tracking::leaf(x.clone(), i > 0);
            synced()?;
            let t0 = Instant::now();
            let y = layer.forward(leaf)?;
            synced()?;
            let t1 = Instant::now();
            if let Some(ones) = ones_like(&y) {
                let _ = crate::model::tracking::backward_seeded(&y, ones)?;
            }
            synced()?;
            let t2 = Instant::now();
            forward = forward.min((t1 - t0).as_secs_f64());
            backward = backward.min((t2 - t1).as_secs_f64());
            out = Some(y.plain());
        }
        let out = out.expect("at least one repeat");
        let param_bytes = (layer.num_params() * 4) as u64;
        let output_bytes = (out.elements() * 4) as u64;
        // What its training forward keeps per micro-batch, from the input it took.
        let graph_bytes = layer.graph_bytes(&x, &out, split && layer.splits_linears());
        costs.push(
            LayerCost::new(forward, backward)
                .with_memory(param_bytes, graph_bytes)
                .with_output(output_bytes),
        );
        x = out;
    }
    Ok(costs)
}

/// Per layer, the bytes its split backward keeps for one micro-batch (`sample`) from the
/// input-gradient pass to the weight-gradient pass: a [dense](crate::dense) layer's input and
/// pre-activation gradient, the input and output gradient of each `Linear` call of a layer
/// that [splits them](Layer::splits_linears), nothing for other layers. Measured by one
/// forward through every layer on `device`.
pub fn split_bytes<L: Layer>(
    layers: &[L],
    sample: &Activation,
    device: &Device,
) -> Result<Vec<u64>, EngineError> {
    Ok(split_parts(layers, sample, device)?
        .into_iter()
        .map(|p| p.held)
        .collect())
}

/// What one layer's split backward keeps for one micro-batch ([`split_parts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SplitBytes {
    /// Everything it keeps from its input-gradient pass to its weight-gradient pass
    /// ([`split_bytes`]).
    pub held: u64,
    /// The largest of one `Linear` call's input and output gradient (a dense layer's input and
    /// pre-activation gradient): what a weight-gradient pass over a group of micro-batches
    /// stacks into one tensor at a time, per micro-batch. 0 for a layer that defers nothing.
    pub stack: u64,
}

/// Per layer, [`split_bytes`] and the largest per-call stack ([`SplitBytes`]), measured by one
/// forward through every layer on `device`.
pub fn split_parts<L: Layer>(
    layers: &[L],
    sample: &Activation,
    device: &Device,
) -> Result<Vec<SplitBytes>, EngineError> {
    let device = adapter::autodiff_device(device);
    let rows_bytes = |t: &Tensor<2>| (t.dims().iter().product::<usize>() * t.dtype().size()) as u64;
    let mut x = sample.clone().plain().to_device(&device);
    let mut out = Vec::with_capacity(layers.len());
    for layer in layers {
        let layer = adapter::trainable(layer.clone(), &device);
        let input_bytes = (x.elements() * 4) as u64;
        let mut linears = Linears::split();
        let y = match layer.splits_linears() {
            true => layer.forward_linears(crate::model::tracking::leaf(x, true), &mut linears)?,
            false => layer.forward(crate::model::tracking::leaf(x, true))?,
        };
        let y = y.plain();
        out.push(if layer.dense().is_some() {
            let output_bytes = (y.elements() * 4) as u64;
            SplitBytes {
                held: input_bytes + output_bytes,
                stack: input_bytes.max(output_bytes),
            }
        } else {
            let taps = linears.into_taps();
            let calls = taps
                .iter()
                .map(|t| (rows_bytes(&t.input), rows_bytes(&t.output)));
            // A call sharing the previous call's input keeps it once ([`Linears::forward_each`]);
            // `W` still stacks it per call.
            let kept = taps
                .iter()
                .zip(calls.clone())
                .map(|(t, (i, o))| if t.shared_input { o } else { i + o });
            SplitBytes {
                held: kept.sum(),
                stack: calls.map(|(i, o)| i.max(o)).max().unwrap_or(0),
            }
        });
        x = y;
    }
    Ok(out)
}

/// The seed of a measuring backward: ones shaped like every differentiable float tensor of `a`
/// (a bundle of them for a bundle), or `None` when `a` has none.
fn ones_like(a: &Activation) -> Option<Activation> {
    if let Activation::Bundle(b) = a {
        let mut ones = Bundle::new();
        for part in b.parts().iter().filter(|p| p.differentiable) {
            ones = ones.with(part.name.clone(), ones_like(&part.value)?);
        }
        return Some(ones.into());
    }
    let device = adapter::plain_device(&match a {
        Activation::Float1(t) => t.device(),
        Activation::Float2(t) => t.device(),
        Activation::Float3(t) => t.device(),
        Activation::Float4(t) => t.device(),
        _ => return None,
    });
    Some(match a {
        Activation::Float1(t) => Tensor::<1>::ones(t.shape(), &device).into(),
        Activation::Float2(t) => Tensor::<2>::ones(t.shape(), &device).into(),
        Activation::Float3(t) => Tensor::<3>::ones(t.shape(), &device).into(),
        Activation::Float4(t) => Tensor::<4>::ones(t.shape(), &device).into(),
        _ => return None,
    })
}
