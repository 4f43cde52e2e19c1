//! Reading checkpoints: [`Checkpoint`] (resume: weights, optimizer state, progress) and
//! [`init_from`] (start from weights only).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use safetensors::tensor::SafeTensors;

use super::convert::to_f32_weights;
use super::error::{Result, corrupt, io};
use super::format::{
    FORMAT, FORMAT_KEY, OPTIMIZER_KEY, OPTIMIZER_PREFIX, PROGRESS_KEY, Progress, SCALARS_KEY,
    verify,
};
use super::sane;
use super::state::OptimizerState;
use crate::adapter::{self, ParamId, StateScalar, StateTensor};
use crate::error::EngineError;
use crate::model::layer::Layer;
use crate::worker::WorkerState;

/// A checkpoint read from disk.
pub struct Checkpoint {
    path: PathBuf,
    bytes: Vec<u8>,
    progress: Progress,
    optimizer: OptimizerState,
}

impl Checkpoint {
    /// Reads and checks the file (header, metadata, optimizer entries).
    pub fn read(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(io(path))?;
        Self::from_bytes(path, bytes)
    }

    /// Checks a checkpoint's `bytes` as [`read`](Self::read) does (for one read elsewhere, for
    /// example broadcast from another process); `path` names it in errors.
    pub fn from_bytes(path: impl AsRef<Path>, bytes: Vec<u8>) -> Result<Self> {
        let path = path.as_ref();
        let (_, metadata) = SafeTensors::read_metadata(&bytes).map_err(|e| corrupt(path, e))?;
        let meta = metadata.metadata().clone().unwrap_or_default();
        match meta.get(FORMAT_KEY) {
            Some(v) if v == FORMAT => {}
            Some(v) => {
                return Err(corrupt(
                    path,
                    format!("format version {v}, expected {FORMAT}"),
                ));
            }
            None => {
                return Err(EngineError::NotACheckpoint {
                    path: path.to_path_buf(),
                });
            }
        }
        verify(path, &bytes)?;
        let field = |key: &str| {
            meta.get(key)
                .ok_or_else(|| corrupt(path, format!("metadata `{key}` is missing")))
        };
        let progress: Progress = serde_json::from_str(field(PROGRESS_KEY)?)
            .map_err(|e| corrupt(path, format!("metadata `{PROGRESS_KEY}`: {e}")))?;
        let scalars: BTreeMap<String, BTreeMap<String, StateScalar>> =
            serde_json::from_str(field(SCALARS_KEY)?)
                .map_err(|e| corrupt(path, format!("metadata `{SCALARS_KEY}`: {e}")))?;
        for (param, entries) in &scalars {
            for (key, &value) in entries {
                sane::check_scalar(path, param, key, value, progress.step)?;
            }
        }
        let mut state = OptimizerState {
            optimizer: field(OPTIMIZER_KEY)?.clone(),
            tensors: BTreeMap::new(),
            scalars,
        };
        let tensors = SafeTensors::deserialize(&bytes).map_err(|e| corrupt(path, e))?;
        for (name, view) in tensors.tensors() {
            let Some(rest) = name.strip_prefix(OPTIMIZER_PREFIX) else {
                continue;
            };
            let (param, key) =
                rest.rsplit_once('/')
                    .ok_or_else(|| EngineError::TensorMismatch {
                        path: path.to_path_buf(),
                        tensor: name.clone(),
                        reason: "an optimizer tensor is named `__optimizer__/<param>/<key>`".into(),
                    })?;
            sane::check_tensor(path, &name, key, &view)?;
            let tensor = StateTensor::from_safetensors(&view).ok_or_else(|| {
                EngineError::TensorMismatch {
                    path: path.to_path_buf(),
                    tensor: name.clone(),
                    reason: format!("unsupported type {:?}", view.dtype()),
                }
            })?;
            state
                .tensors
                .entry(param.to_string())
                .or_default()
                .insert(key.to_string(), tensor);
        }
        Ok(Self {
            path: path.to_path_buf(),
            bytes,
            progress,
            optimizer: state,
        })
    }

    /// The file's bytes, as read.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The run's progress when it was saved.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// The optimizer the state was saved for (e.g. `adam`).
    pub fn optimizer(&self) -> &str {
        &self.optimizer.optimizer
    }

    /// Whether the optimizer state was saved for `optimizer` (this run's); the error names both.
    pub fn check_optimizer(&self, optimizer: &str) -> Result<()> {
        if self.optimizer.optimizer != optimizer {
            return Err(EngineError::OptimizerMismatch {
                path: self.path.clone(),
                saved: self.optimizer.optimizer.clone(),
                current: optimizer.to_string(),
            });
        }
        Ok(())
    }

    /// `model` (the whole layer sequence) with every parameter replaced by the checkpoint's.
    pub fn load_model<L: Layer>(&self, model: Vec<L>) -> Result<Vec<L>> {
        apply(&self.path, model, self.bytes.clone(), false, &[])
    }

    /// `layers` (model layers `offset` … `offset + layers.len() − 1`, for example one stage)
    /// with every parameter replaced by the checkpoint's: a process that holds only some
    /// stages loads them without the whole model. Checked as strictly as
    /// [`load_model`](Self::load_model) within those layers.
    pub fn load_layers<L: Layer>(&self, layers: Vec<L>, offset: usize) -> Result<Vec<L>> {
        let file = SafeTensors::deserialize(&self.bytes).map_err(|e| corrupt(&self.path, e))?;
        let range = offset..offset + layers.len();
        let mut views = Vec::new();
        for (name, view) in file.tensors() {
            let Some((index, rest)) = name.split_once('.') else {
                continue;
            };
            match index.parse::<usize>() {
                Ok(i) if range.contains(&i) => {
                    views.push((format!("{}.{rest}", i - offset), view));
                }
                _ => {}
            }
        }
        let bytes = safetensors::serialize(views, None).map_err(|e| corrupt(&self.path, e))?;
        apply(&self.path, layers, bytes, false, &[])
    }

    /// Loads `worker`'s optimizer state (the entries of the parameters it holds; with ZeRO-1,
    /// `replicas` > 1, only those it owns); its first layer is model layer `offset`.
    /// `optimizer` names this run's optimizer, which must be the saved one.
    pub fn load_optimizer<L: Layer>(
        &self,
        worker: &mut WorkerState<L>,
        offset: usize,
        optimizer: &str,
        zero_replicas: Option<usize>,
    ) -> Result<()> {
        self.check_optimizer(optimizer)?;
        let owners = zero_replicas.map(|r| adapter::owners_of(&worker.layers, r));
        let rank = worker.id.replica.index();
        let keep = |id: ParamId| {
            owners
                .as_ref()
                .is_none_or(|o| o.get(&id).is_none_or(|&owner| owner == rank))
        };
        self.optimizer
            .restore(&mut worker.optimizer, &worker.layers, offset, &keep)
            .map_err(|reason| corrupt(&self.path, format!("optimizer state: {reason}")))
    }
}

/// Initial weights for `model` (the whole layer sequence) from a safetensors file: every
/// parameter must be present with its shape, and every tensor must be used (extra tensors are
/// an error, like PyTorch's `load_state_dict(strict=True)`). With `pytorch`, the file is a
/// PyTorch state dict: Linear weights are transposed (`[out, in]` → burn's `[in, out]`) and
/// norm `weight`/`bias` read as `gamma`/`beta`, as burn's PyTorch adapter does. A pipetrain
/// checkpoint works too (its optimizer state is ignored).
pub fn init_from<L: Layer>(path: impl AsRef<Path>, model: Vec<L>, pytorch: bool) -> Result<Vec<L>> {
    init_renamed(path, model, pytorch, &[])
}

/// [`init_from`], with the file's tensor names rewritten first by `renames` (each a regex and
/// its replacement, `$1` for groups, applied in order to every name, as burn-store's key
/// remapper does): a state dict whose module names differ from the model's (a model's PyTorch
/// names, `module.` prefixes, renamed layers). The keys are then matched strictly: missing and
/// unexpected ones are listed together ([`EngineError::Keys`]) before any shape is compared.
pub fn init_renamed<L: Layer>(
    path: impl AsRef<Path>,
    model: Vec<L>,
    pytorch: bool,
    renames: &[(String, String)],
) -> Result<Vec<L>> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(io(path))?;
    // A pipetrain checkpoint's tensors against their checksums (a PyTorch file has none).
    verify(path, &bytes)?;
    let (_, header) = SafeTensors::read_metadata(&bytes).map_err(|e| corrupt(path, e))?;
    if !renames.is_empty() {
        let names: Vec<String> = header.tensors().keys().cloned().collect();
        rename_all(&names, renames).map_err(|reason| EngineError::Rename {
            path: path.to_path_buf(),
            reason,
        })?;
    }
    apply(path, model, bytes, pytorch, renames)
}

/// Checks rename rules (see [`init_renamed`]) before any file is read.
///
/// # Errors
/// The first pattern that is not a regular expression, named.
pub fn check_renames(renames: &[(String, String)]) -> std::result::Result<(), String> {
    adapter::rename_rules(renames).map(|_| ())
}

/// `names` rewritten by `renames` as [`init_renamed`] rewrites a file's tensor names.
///
/// # Errors
/// A pattern that is not a regular expression, named.
pub fn rename_all(
    names: &[String],
    renames: &[(String, String)],
) -> std::result::Result<Vec<String>, String> {
    let rules = adapter::rename_rules(renames)?.to_regex_pairs();
    let renamed: Vec<String> = names
        .iter()
        .map(|name| {
            rules
                .iter()
                .fold(name.clone(), |n, (pattern, replacement)| {
                    pattern.replace_all(&n, replacement.as_str()).into_owned()
                })
        })
        .collect();
    // In name order, so that the collision named is the same whatever order `names` came in.
    let mut pairs: Vec<(&String, &String)> = names.iter().zip(&renamed).collect();
    pairs.sort();
    let mut seen = std::collections::HashMap::new();
    for (name, new) in pairs {
        if let Some(first) = seen.insert(new, name) {
            return Err(format!(
                "`{first}` and `{name}` are both renamed to `{new}`, so one of them would be \
                 lost; make the rules map them to different names"
            ));
        }
    }
    Ok(renamed)
}

/// `model` with the tensors of the safetensors `bytes` (read from `path`) applied, checked
/// strictly (see [`init_from`]).
fn apply<L: Layer>(
    path: &Path,
    model: Vec<L>,
    bytes: Vec<u8>,
    pytorch: bool,
    renames: &[(String, String)],
) -> Result<Vec<L>> {
    let bytes = to_f32_weights(path, bytes)?;
    let mut model: Vec<L> = model.iter().map(crate::adapter::inference_copy).collect();
    // The store lets missing tensors through: they are reported below, by name.
    let applied = adapter::apply_safetensors(&mut model, bytes, pytorch, renames)
        .map_err(|e| corrupt(path, e))?;
    let unexpected: Vec<String> = (applied.unused.into_iter())
        .filter(|t| !t.starts_with(OPTIMIZER_PREFIX))
        .collect();
    // Names first, as PyTorch's strict load: a shape error of a wrongly named tensor misleads.
    if !applied.missing.is_empty() || !unexpected.is_empty() {
        return Err(EngineError::Keys {
            path: path.to_path_buf(),
            missing: applied.missing.into_iter().map(|(name, _)| name).collect(),
            unexpected,
        });
    }
    if let Some((tensor, reason)) = applied.errors.into_iter().next() {
        return Err(EngineError::TensorMismatch {
            path: path.to_path_buf(),
            tensor,
            reason,
        });
    }
    Ok(model)
}
