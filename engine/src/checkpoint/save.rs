//! Writing checkpoints: [`save`] (a running pipeline) and [`save_model`] (a model not stepped
//! yet).

use std::collections::HashMap;
use std::path::Path;

use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use serde::Serialize;

use super::error::{Result, corrupt};
use super::format::{
    FORMAT, FORMAT_KEY, OPTIMIZER_KEY, OPTIMIZER_PREFIX, PROGRESS_KEY, Progress, SCALARS_KEY,
    checksum,
};
use super::state::OptimizerState;
use crate::adapter;
use crate::error::EngineError;
use crate::model::layer::Layer;
use crate::output::write_atomically;
use crate::worker::WorkerState;

/// Writes a checkpoint of the model whose stages are `workers` (any replicas, replica-major;
/// weights are taken from replica 0, optimizer state merged over all), atomically.
pub fn save<L: Layer>(
    path: &Path,
    model: &[L],
    workers: &[WorkerState<L>],
    stages: usize,
    optimizer: &str,
    progress: &Progress,
) -> Result<()> {
    let model: Vec<L> = model.iter().map(crate::adapter::inference_copy).collect();
    let mut state = OptimizerState {
        optimizer: optimizer.to_string(),
        ..Default::default()
    };
    for w in workers {
        let offset: usize = workers
            .iter()
            .take(stages)
            .take(w.id.stage.index())
            .map(|u| u.layers.len())
            .sum();
        state
            .absorb(&w.optimizer, &w.layers, offset)
            .map_err(|reason| corrupt(path, format!("optimizer state of {}: {reason}", w.id)))?;
    }
    write(path, &model, &state, progress)
}

/// Writes a checkpoint of `model` (the whole layer sequence) with no optimizer state yet (a
/// run that has not stepped), atomically.
pub fn save_model<L: Layer>(
    path: &Path,
    model: &[L],
    optimizer: &str,
    progress: &Progress,
) -> Result<()> {
    let state = OptimizerState {
        optimizer: optimizer.to_string(),
        ..Default::default()
    };
    write(path, model, &state, progress)
}

/// The checkpoint bytes [`save_model`] would write (for a process that hands them to others
/// rather than to a file).
pub fn model_bytes<L: Layer>(model: &[L], optimizer: &str, progress: &Progress) -> Result<Vec<u8>> {
    let state = OptimizerState {
        optimizer: optimizer.to_string(),
        ..Default::default()
    };
    encode(Path::new("(in memory)"), model, 0, &state, progress)
}

/// Writes `model` (the whole layer sequence), `state` and `progress` to `path`, atomically.
fn write<L: Layer>(
    path: &Path,
    model: &[L],
    state: &OptimizerState,
    progress: &Progress,
) -> Result<()> {
    let bytes = encode(path, model, 0, state, progress)?;
    write_atomically(path, &bytes)
}

/// The checkpoint bytes of `layers` (whose first layer is model layer `offset`), `state` and
/// `progress`; `path` only names the file in errors.
pub(super) fn encode<L: Layer>(
    path: &Path,
    layers: &[L],
    offset: usize,
    state: &OptimizerState,
    progress: &Progress,
) -> Result<Vec<u8>> {
    let model: Vec<L> = layers.to_vec();
    let weights = adapter::save_safetensors(&model)
        .map_err(|e| corrupt(path, format!("serializing the model: {e}")))?;
    let weights = SafeTensors::deserialize(&weights)
        .map_err(|e| corrupt(path, format!("serializing the model: {e}")))?;

    let mut views: Vec<(String, TensorView<'_>)> = Vec::new();
    for (name, view) in weights.tensors() {
        let name = shift(&name, offset);
        // A step that made a weight infinite (from finite gradients) must not replace a good
        // file: refused, naming the weight.
        if view.dtype() == Dtype::F32 {
            let values = view.data().chunks_exact(4);
            let bad = values
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .enumerate()
                .find(|(_, x)| !x.is_finite());
            if let Some((index, value)) = bad {
                return Err(EngineError::NonFiniteWeight {
                    path: path.to_path_buf(),
                    tensor: name,
                    index,
                    value: value.to_string(),
                });
            }
        }
        views.push((name, view));
    }
    for (name, entries) in &state.tensors {
        for (key, t) in entries {
            let dtype = t.safetensors_dtype().map_err(|dtype| {
                corrupt(
                    path,
                    format!("optimizer state `{name}/{key}` has unsupported type {dtype}"),
                )
            })?;
            let view = TensorView::new(dtype, t.shape.clone(), &t.bytes)
                .map_err(|e| corrupt(path, format!("optimizer state `{name}/{key}`: {e}")))?;
            views.push((format!("{OPTIMIZER_PREFIX}{name}/{key}"), view));
        }
    }
    let checksums: std::collections::BTreeMap<String, String> = views
        .iter()
        .map(|(name, view)| (name.clone(), checksum(view.data())))
        .collect();
    let mut metadata: HashMap<String, String> = [
        (FORMAT_KEY.to_string(), FORMAT.to_string()),
        (PROGRESS_KEY.to_string(), to_json(progress)),
        (OPTIMIZER_KEY.to_string(), state.optimizer.clone()),
        (SCALARS_KEY.to_string(), to_json(&state.scalars)),
    ]
    .into_iter()
    .collect();
    super::format::with_metadata(checksums, &mut metadata);
    safetensors::serialize(views, Some(metadata))
        .map_err(|e| corrupt(path, format!("serializing: {e}")))
}

/// A weight's name in a stage (`0.linear.weight`) as its name in the whole model, whose layer
/// `offset` is the stage's first (`3.linear.weight` at offset 3).
fn shift(name: &str, offset: usize) -> String {
    match name
        .split_once('.')
        .map(|(i, rest)| (i.parse::<usize>(), rest))
    {
        Some((Ok(i), rest)) if offset > 0 => format!("{}.{rest}", i + offset),
        _ => name.to_string(),
    }
}

/// JSON of plain data (maps of strings and numbers always serialize).
fn to_json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("plain data serializes")
}
