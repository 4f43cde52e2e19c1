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
use crate::model::layer::Layer;
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
        // Under ZeRO-3 each local replica holds only what it owns: every one gives its share.
        if seen.contains(&w.id.stage) && !w.is_sharded() {
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
        let part = encode(path, &layers, offset, &empty, progress)?;
        parts.push(match w.is_sharded() {
            true => held_only(path, &part)?,
            false => part,
        });
    }
    parts.push(encode::<L>(path, &[], 0, &state, progress)?);
    merge_parts(path, &parts, Copies::MustAgree)
}

/// `part` without the tensors that hold no value: the parameters a ZeRO-3 replica does not own
/// (emptied by its reshard), which the owner's part holds.
fn held_only(path: &Path, part: &[u8]) -> Result<Vec<u8>> {
    let file = SafeTensors::deserialize(part).map_err(|e| corrupt(path, e))?;
    let (_, header) = SafeTensors::read_metadata(part).map_err(|e| corrupt(path, e))?;
    let views: BTreeMap<String, TensorView<'_>> = file
        .tensors()
        .into_iter()
        .filter(|(_, view)| view.shape().iter().product::<usize>() > 0)
        .collect();
    safetensors::serialize(views, header.metadata().clone())
        .map_err(|e| corrupt(path, format!("serializing: {e}")))
}

/// What [`merge_parts`] makes of a weight that several parts hold (the replicas of one stage in
/// several processes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Copies {
    /// Every copy must hold the same bytes, or the merge is refused naming the two parts
    /// ([`EngineError::PartsDiffer`]): a checkpoint, which must not pick one replica silently.
    MustAgree,
    /// The first part's copy is kept: a model gathered for evaluation, replica 0's, whose
    /// replicas' agreement is checked apart (or not at all).
    FirstKept,
}

/// Merges the parts of every process, in rank order (rank 0's first: its progress is kept),
/// into one checkpoint and writes it to `path`, atomically. A weight found in two parts must
/// have the same bytes in both (replicas hold equal weights): else nothing is written and the
/// error names both ranks. Optimizer entries found twice are equal copies (the first is kept).
pub fn write_parts(path: &Path, parts: &[Vec<u8>]) -> Result<()> {
    let bytes = merge_parts(path, parts, Copies::MustAgree)?;
    // The merged file must read back as a checkpoint before it replaces the last one.
    super::Checkpoint::from_bytes(path, bytes.clone())?;
    write_atomically(path, &bytes)
}

/// The checkpoint bytes [`write_parts`] writes: the parts merged, in rank order (a part's index
/// is its rank in errors), a weight that several parts hold as `copies` says; `path` names the
/// checkpoint in errors.
///
/// # Errors
/// A part is no safetensors file; under [`Copies::MustAgree`], two parts hold different values
/// of one weight ([`EngineError::PartsDiffer`], naming the first tensor and both ranks).
pub fn merge_parts(path: &Path, parts: &[Vec<u8>], copies: Copies) -> Result<Vec<u8>> {
    let mut files = Vec::with_capacity(parts.len());
    for part in parts {
        files.push(SafeTensors::deserialize(part).map_err(|e| corrupt(path, e))?);
    }
    // Each name's view, and the part it came from.
    let mut views: BTreeMap<String, (TensorView<'_>, usize)> = BTreeMap::new();
    for (rank, file) in files.iter().enumerate() {
        for (name, view) in file.tensors() {
            match views.get(&name) {
                None => {
                    views.insert(name, (view, rank));
                }
                Some((kept, first))
                    if copies == Copies::MustAgree
                        && !name.starts_with(OPTIMIZER_PREFIX)
                        && kept.data() != view.data() =>
                {
                    return Err(EngineError::PartsDiffer {
                        path: path.to_path_buf(),
                        tensor: name,
                        first: *first,
                        second: rank,
                    });
                }
                Some(_) => {}
            }
        }
    }
    let views: BTreeMap<String, TensorView<'_>> =
        views.into_iter().map(|(n, (v, _))| (n, v)).collect();
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
    // The merged file's checksums, as one process's `save` writes them.
    let checksums: BTreeMap<String, String> = views
        .iter()
        .map(|(name, view)| (name.clone(), super::format::checksum(view.data())))
        .collect();
    super::format::with_metadata(checksums, &mut metadata);
    safetensors::serialize(views, Some(metadata))
        .map_err(|e| corrupt(path, format!("serializing: {e}")))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use safetensors::Dtype;
    use safetensors::tensor::{SafeTensors, TensorView};

    use super::{Copies, merge_parts};
    use crate::error::EngineError;

    /// A part holding `layers.0.weight` = `value` (two f32s).
    fn part(value: f32) -> Vec<u8> {
        let data: Vec<u8> = [value, 1.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let view = TensorView::new(Dtype::F32, vec![2], &data).unwrap();
        safetensors::serialize([("layers.0.weight", view)], None).unwrap()
    }

    /// Ranks 0 and 1 agree and rank 2 differs: a checkpoint's merge is refused naming ranks 0
    /// and 2 and the tensor; a model's merge keeps rank 0's values.
    #[test]
    fn parts_that_disagree_are_refused_naming_both_ranks() {
        let parts = [part(0.5), part(0.5), part(0.25)];
        let path = Path::new("run.st");
        match merge_parts(path, &parts, Copies::MustAgree) {
            Err(EngineError::PartsDiffer {
                tensor,
                first,
                second,
                ..
            }) => assert_eq!((tensor.as_str(), first, second), ("layers.0.weight", 0, 2)),
            other => panic!("expected PartsDiffer, got {other:?}"),
        }
        let e = merge_parts(path, &parts, Copies::MustAgree).unwrap_err();
        assert!(
            e.to_string()
                .contains("ranks 0 and 2 hold different values"),
            "{e}"
        );
        let kept = merge_parts(path, &parts, Copies::FirstKept).unwrap();
        let kept = SafeTensors::deserialize(&kept).unwrap();
        assert_eq!(
            kept.tensor("layers.0.weight").unwrap().data(),
            SafeTensors::deserialize(&parts[0])
                .unwrap()
                .tensor("layers.0.weight")
                .unwrap()
                .data()
        );
        assert!(merge_parts(path, &parts[..2], Copies::MustAgree).is_ok());
    }
}
