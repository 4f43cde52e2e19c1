//! The file format: metadata keys, the run's [`Progress`], parameter names.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::adapter::{self, ParamId};
use crate::model::layer::Layer;

/// Metadata key of the format version.
pub(super) const FORMAT_KEY: &str = "pipetrain.format";
/// This format's version.
pub(super) const FORMAT: &str = "1";
/// Metadata key of the [`Progress`] (JSON).
pub(super) const PROGRESS_KEY: &str = "pipetrain.progress";
/// Metadata key of the optimizer's name.
pub(super) const OPTIMIZER_KEY: &str = "pipetrain.optimizer";
/// Metadata key of the optimizer's per-parameter scalars (JSON).
pub(super) const SCALARS_KEY: &str = "pipetrain.optimizer_scalars";
/// Metadata key of the tensors' checksums (JSON: tensor name → CRC-32 of its bytes, 8 hex
/// digits). Files written before it have none and are read unchecked.
pub(super) const CHECKSUMS_KEY: &str = "pipetrain.checksums";
/// Prefix of the optimizer-state tensors in a checkpoint file.
pub const OPTIMIZER_PREFIX: &str = "__optimizer__/";

/// Where a run stands: saved with the weights so a resumed run continues where it stopped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// Optimizer steps taken.
    pub step: u64,
    /// Anything else the trainer needs to continue bit for bit (data position, seed, model
    /// shape…), as text.
    pub extra: BTreeMap<String, String>,
}

/// The checksum of a tensor's bytes as the metadata stores it: CRC-32, 8 hex digits.
pub(super) fn checksum(bytes: &[u8]) -> String {
    format!("{:08x}", crc32fast::hash(bytes))
}

/// The prefix of a metadata entry's checksum among the checksums (`metadata:pipetrain.progress`):
/// the header's keys and values are checked too, so that a flipped bit in the saved step or
/// the run's identity is refused as one in a weight is.
const METADATA_PREFIX: &str = "metadata:";

/// `checksums` (of the tensors) with those of every entry of `metadata`, and the whole as the
/// JSON that `metadata` then stores under [`CHECKSUMS_KEY`].
pub(super) fn with_metadata(
    mut checksums: BTreeMap<String, String>,
    metadata: &mut std::collections::HashMap<String, String>,
) {
    metadata.remove(CHECKSUMS_KEY);
    for (key, value) in metadata.iter() {
        checksums.insert(
            format!("{METADATA_PREFIX}{key}"),
            checksum(value.as_bytes()),
        );
    }
    let json = serde_json::to_string(&checksums).expect("plain JSON");
    metadata.insert(CHECKSUMS_KEY.to_string(), json);
}

/// Checks every tensor of the checkpoint `bytes` against the checksums its metadata stores
/// (none stored: nothing to check); `path` names the file in errors.
///
/// # Errors
/// [`EngineError::Checksum`] naming the first tensor whose bytes differ, or that the metadata
/// lists and the file lacks; [`EngineError::Corrupt`] for an unreadable file or list.
pub(super) fn verify(path: &std::path::Path, bytes: &[u8]) -> crate::error::Result<()> {
    use safetensors::SafeTensors;
    let corrupt = |reason: String| crate::error::EngineError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| corrupt(e.to_string()))?;
    let Some(stored) = header
        .metadata()
        .as_ref()
        .and_then(|m| m.get(CHECKSUMS_KEY))
    else {
        return Ok(());
    };
    let mut stored: BTreeMap<String, String> = serde_json::from_str(stored)
        .map_err(|e| corrupt(format!("metadata `{CHECKSUMS_KEY}`: {e}")))?;
    // The header's entries first (files written before these checksums have none).
    let entries: Vec<String> = stored
        .keys()
        .filter(|k| k.starts_with(METADATA_PREFIX))
        .cloned()
        .collect();
    for entry in entries {
        let expected = stored.remove(&entry).unwrap_or_default();
        let key = &entry[METADATA_PREFIX.len()..];
        let found = header
            .metadata()
            .as_ref()
            .and_then(|m| m.get(key))
            .map_or_else(|| "no such entry".to_string(), |v| checksum(v.as_bytes()));
        if expected != found {
            return Err(crate::error::EngineError::Checksum {
                path: path.to_path_buf(),
                tensor: format!("metadata entry {key}"),
                expected,
                found,
            });
        }
    }
    let file = SafeTensors::deserialize(bytes).map_err(|e| corrupt(e.to_string()))?;
    let mut tensors = file.tensors();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, view) in tensors {
        let found = checksum(view.data());
        let expected = stored.remove(&name).unwrap_or_else(|| "none".into());
        if expected != found {
            return Err(crate::error::EngineError::Checksum {
                path: path.to_path_buf(),
                tensor: name,
                expected,
                found,
            });
        }
    }
    if let Some((name, expected)) = stored.into_iter().next() {
        return Err(crate::error::EngineError::Checksum {
            path: path.to_path_buf(),
            tensor: name,
            expected,
            found: "no such tensor".into(),
        });
    }
    Ok(())
}

/// Full-model names of the parameters of `layers`, by parameter id; `offset` is the index of
/// `layers[0]` in the whole model.
pub(super) fn names<L: Layer>(layers: &[L], offset: usize) -> HashMap<ParamId, String> {
    adapter::named_parameters(layers, offset)
        .into_iter()
        .map(|n| (n.id, n.name))
        .collect()
}
