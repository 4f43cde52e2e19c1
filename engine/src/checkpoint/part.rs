//! One checkpoint from many processes: each writes its **part** (the weights of the stages it
//! runs and its workers' optimizer state, under full-model names), one process merges the parts
//! and writes the single layout-independent file, atomically as [`save`](super::save) does.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use pipetrain_partitioner::Partition;
use safetensors::tensor::{SafeTensors, TensorView};

use super::error::{Result, corrupt};
use super::format::{
    FORMAT_KEY, OPTIMIZER_KEY, OPTIMIZER_PREFIX, PROGRESS_KEY, Progress, SCALARS_KEY,
};
use super::save::encode;
use super::state::OptimizerState;
use crate::error::EngineError;
use crate::layer::Layer;
use crate::output::write_atomically;
use crate::worker::WorkerState;

/// This process's part of a checkpoint: the weights of each stage it runs (from its first
/// worker of that stage) and every worker's optimizer state, as checkpoint bytes that
/// [`write_parts`] merges. `path` names the checkpoint in errors.
pub fn save_part<L: Layer>(
    path: &Path,
    workers: &[WorkerState<L>],
    partition: &Partition,
    optimizer: &str,
    progress: &Progress,
) -> Result<Vec<u8>> {
    let mut state = OptimizerState {
        optimizer: optimizer.to_string(),
        ..Default::default()
    };
    for w in workers {
        let offset = partition.range(w.id.stage).start;
        state
            .absorb(&w.optimizer, &w.layers, offset)
            .map_err(|reason| corrupt(path, format!("optimizer state of {}: {reason}", w.id)))?;
    }
    // Stage by stage, each from the first local worker holding it; one safetensors file per
    // stage, merged below with the optimizer state.
    let mut parts = Vec::new();
    let mut seen = Vec::new();
    for w in workers {
        if seen.contains(&w.id.stage) {
            continue;
        }
        seen.push(w.id.stage);
        let offset = partition.range(w.id.stage).start;
        let layers: Vec<L> = w
            .layers
            .iter()
            .map(crate::adapter::inference_copy)
            .collect();
        let empty = OptimizerState {
            optimizer: optimizer.to_string(),
            ..Default::default()
        };
        parts.push(encode(path, &layers, offset, &empty, progress)?);
    }
    parts.push(encode::<L>(path, &[], 0, &state, progress)?);
    merge_parts(path, &parts)
}

/// Merges the parts of every process (rank 0's first: its progress is kept) into one
/// checkpoint and writes it to `path`, atomically. A weight found in two parts must have the
/// same bytes in both (replicas hold equal weights); optimizer entries found twice are equal
/// copies (the first is kept).
pub fn write_parts(path: &Path, parts: &[Vec<u8>]) -> Result<()> {
    let bytes = merge_parts(path, parts)?;
    // The merged file must read back as a checkpoint before it replaces the last one.
    super::Checkpoint::from_bytes(path, bytes.clone())?;
    write_atomically(path, &bytes)
}

/// The checkpoint bytes [`write_parts`] writes: the parts merged (see there); `path` names the
/// checkpoint in errors.
pub fn merge_parts(path: &Path, parts: &[Vec<u8>]) -> Result<Vec<u8>> {
    let mut files = Vec::with_capacity(parts.len());
    for part in parts {
        files.push(SafeTensors::deserialize(part).map_err(|e| corrupt(path, e))?);
    }
    let mut views: BTreeMap<String, TensorView<'_>> = BTreeMap::new();
    for file in &files {
        for (name, view) in file.tensors() {
            match views.get(&name) {
                None => {
                    views.insert(name, view);
                }
                Some(kept) if !name.starts_with(OPTIMIZER_PREFIX) && kept.data() != view.data() => {
                    return Err(EngineError::TensorMismatch {
                        path: path.to_path_buf(),
                        tensor: name,
                        reason: "two replicas hold different values; they must stay equal \
                                 (a bug: please report it)"
                            .into(),
                    });
                }
                Some(_) => {}
            }
        }
    }
    let mut metadata: HashMap<String, String> = HashMap::new();
    let mut scalars: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    for part in parts {
        let (_, header) = SafeTensors::read_metadata(part).map_err(|e| corrupt(path, e))?;
        let meta = header.metadata().clone().unwrap_or_default();
        for key in [FORMAT_KEY, PROGRESS_KEY, OPTIMIZER_KEY] {
            if let Some(value) = meta.get(key) {
                metadata.entry(key.to_string()).or_insert(value.clone());
            }
        }
        if let Some(json) = meta.get(SCALARS_KEY) {
            let map: BTreeMap<String, serde_json::Value> = serde_json::from_str(json)
                .map_err(|e| corrupt(path, format!("metadata `{SCALARS_KEY}`: {e}")))?;
            for (name, value) in map {
                scalars.entry(name).or_insert(value);
            }
        }
    }
    metadata.insert(
        SCALARS_KEY.to_string(),
        serde_json::to_string(&scalars).expect("plain JSON"),
    );
    safetensors::serialize(views, Some(metadata))
        .map_err(|e| corrupt(path, format!("serializing: {e}")))
}
