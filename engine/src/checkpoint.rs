//! Layout-independent checkpoints: one safetensors file with the full model's weights under
//! their full-model names, the optimizer state keyed by the same names, and the run's progress.
//!
//! - **Names.** Weights are named as burn's store names the whole layer sequence, enum variants
//!   skipped: `"{layer}.{field}…"`, e.g. `3.linear.weight` — the names of a PyTorch
//!   `nn.Sequential` state dict. Stage and replica boundaries appear nowhere, so a run saved at
//!   2 replicas × 2 stages resumes at 4 × 1 or 1 × 1.
//! - **Optimizer state** is stored as `__optimizer__/{name}/{key}` tensors, plus the per-parameter
//!   scalars (for example Adam's step count) in the metadata, all keyed by parameter name; on
//!   load each worker takes the entries of the parameters it holds. Replicas are merged (with
//!   ZeRO-1 each holds a disjoint share).
//! - **Atomic writes.** The file is written to `{path}.tmp`, flushed and fsynced, then renamed
//!   over `path` (and the directory fsynced): a kill during a write leaves the previous
//!   checkpoint intact.
//! - **Errors name the tensor.** A missing tensor, a shape mismatch, an unexpected tensor or a
//!   corrupt file is an error that names the file and the tensor; nothing is loaded partly.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use burn::module::ParamId;
use burn::optim::ModuleOptimizer;
use burn::store::burn_pack::{self, Bytes, DType, Scalar};
use burn::store::{ApplyError, ModuleSnapshot, PyTorchToBurnAdapter, SafetensorsStore};
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use serde::{Deserialize, Serialize};

use crate::layer::Layer;
use crate::worker::WorkerState;

const FORMAT_KEY: &str = "pipetrain.format";
const FORMAT: &str = "1";
const PROGRESS_KEY: &str = "pipetrain.progress";
const OPTIMIZER_KEY: &str = "pipetrain.optimizer";
const SCALARS_KEY: &str = "pipetrain.optimizer_scalars";
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

/// Why a checkpoint could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The file system refused.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Not a readable safetensors file, or not one pipetrain wrote.
    #[error("{}: not a readable checkpoint or safetensors weights file: {reason}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A safetensors file without pipetrain's metadata: plain weights (e.g. a PyTorch state
    /// dict), usable with [`init_from`] but not to resume.
    #[error(
        "{}: a weights file, not a pipetrain checkpoint (no optimizer state or step); start \
         from it with --init instead",
        path.display()
    )]
    NotACheckpoint {
        /// The file.
        path: PathBuf,
    },
    /// The model has a parameter the file lacks.
    #[error("{}: tensor `{tensor}` is missing (the model expects it{detail})", path.display())]
    Missing {
        /// The file.
        path: PathBuf,
        /// The parameter's full-model name.
        tensor: String,
        /// More context.
        detail: String,
    },
    /// A tensor's shape or type does not fit the model.
    #[error("{}: tensor `{tensor}` does not fit the model: {reason}", path.display())]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// The tensor's name.
        tensor: String,
        /// How it differs.
        reason: String,
    },
    /// The file has a tensor the model does not: a different model, or a renamed layer.
    #[error(
        "{}: tensor `{tensor}` matches no parameter of the model (a different model or layer \
         order?)",
        path.display()
    )]
    Unexpected {
        /// The file.
        path: PathBuf,
        /// The tensor's name.
        tensor: String,
    },
    /// The optimizer state was saved for another optimizer.
    #[error(
        "{}: the optimizer state is for `{saved}`, but this run uses `{current}`; resume with \
         the same optimizer (or start fresh with --init to take only the weights)",
        path.display()
    )]
    Optimizer {
        /// The file.
        path: PathBuf,
        /// The saved optimizer.
        saved: String,
        /// This run's.
        current: String,
    },
}

type Result<T> = std::result::Result<T, CheckpointError>;

/// One optimizer-state tensor or scalar of one parameter.
#[derive(Clone, Debug)]
struct StateTensor {
    dtype: DType,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

/// Optimizer state by parameter name, then by key.
#[derive(Clone, Debug, Default)]
pub struct OptimizerState {
    optimizer: String,
    tensors: BTreeMap<String, BTreeMap<String, StateTensor>>,
    scalars: BTreeMap<String, BTreeMap<String, Scalar>>,
}

/// A checkpoint read from disk.
pub struct Checkpoint {
    path: PathBuf,
    bytes: Vec<u8>,
    progress: Progress,
    optimizer: OptimizerState,
}

/// Full-model names of the parameters of `layers`, by parameter id; `offset` is the index of
/// `layers[0]` in the whole model.
fn names<L: Layer>(layers: &[L], offset: usize) -> HashMap<ParamId, String> {
    crate::tie::named_parameters(layers, offset)
        .into_iter()
        .map(|n| (n.id, n.name))
        .collect()
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn corrupt(path: &Path, reason: impl std::fmt::Display) -> CheckpointError {
    CheckpointError::Corrupt {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

fn to_safetensors(dtype: DType) -> Option<Dtype> {
    Some(match dtype {
        DType::F64 => Dtype::F64,
        DType::F32 => Dtype::F32,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::I64 => Dtype::I64,
        DType::I32 => Dtype::I32,
        DType::I16 => Dtype::I16,
        DType::I8 => Dtype::I8,
        DType::U64 => Dtype::U64,
        DType::U32 => Dtype::U32,
        DType::U16 => Dtype::U16,
        DType::U8 => Dtype::U8,
        DType::Bool(_) => Dtype::BOOL,
        _ => return None,
    })
}

fn from_safetensors(dtype: Dtype) -> Option<DType> {
    Some(match dtype {
        Dtype::F64 => DType::F64,
        Dtype::F32 => DType::F32,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::I64 => DType::I64,
        Dtype::I32 => DType::I32,
        Dtype::I16 => DType::I16,
        Dtype::I8 => DType::I8,
        Dtype::U64 => DType::U64,
        Dtype::U32 => DType::U32,
        Dtype::U16 => DType::U16,
        Dtype::U8 => DType::U8,
        Dtype::BOOL => DType::Bool(burn::tensor::BoolStore::Native),
        _ => return None,
    })
}

impl OptimizerState {
    /// The state of `optimizer` over `layers` (whose first layer is model layer `offset`), merged
    /// into `self` (entries already present win: replicas hold equal copies).
    fn absorb<L: Layer>(
        &mut self,
        optimizer: &ModuleOptimizer,
        layers: &[L],
        offset: usize,
    ) -> std::result::Result<(), String> {
        let names = names(layers, offset);
        let bytes = optimizer.into_bytes().map_err(|e| e.to_string())?;
        let reader = burn_pack::Reader::from_bytes(bytes).map_err(|e| e.to_string())?;
        let split = |key: &str| -> Option<(String, String)> {
            let (id, rest) = key.split_once('.')?;
            let name = names.get(&ParamId::from(id.parse::<u64>().ok()?))?;
            Some((name.clone(), rest.to_string()))
        };
        for (key, value) in reader.scalars() {
            if let Some((name, rest)) = split(key) {
                self.scalars
                    .entry(name)
                    .or_default()
                    .entry(rest)
                    .or_insert(*value);
            }
        }
        for tensor in reader.into_tensors().map_err(|e| e.to_string())? {
            let (key, dtype, shape, _, bytes) = tensor.into_parts().map_err(|e| e.to_string())?;
            if let Some((name, rest)) = split(&key) {
                self.tensors
                    .entry(name)
                    .or_default()
                    .entry(rest)
                    .or_insert(StateTensor {
                        dtype,
                        shape: shape.to_vec(),
                        bytes: bytes.to_vec(),
                    });
            }
        }
        Ok(())
    }

    /// `optimizer` loaded with the entries of the parameters of `layers`.
    fn restore<L: Layer>(
        &self,
        optimizer: &mut ModuleOptimizer,
        layers: &[L],
        offset: usize,
        keep: &dyn Fn(ParamId) -> bool,
    ) -> std::result::Result<(), String> {
        let mut tensors = Vec::new();
        let mut writer_scalars = Vec::new();
        for (id, name) in names(layers, offset) {
            if !keep(id) {
                continue;
            }
            let id = id.val();
            for (key, t) in self.tensors.get(&name).into_iter().flatten() {
                tensors.push(burn_pack::Tensor::new(
                    format!("{id}.{key}"),
                    t.dtype,
                    t.shape.clone(),
                    Some(id),
                    Bytes::from_bytes_vec(t.bytes.clone()),
                ));
            }
            for (key, value) in self.scalars.get(&name).into_iter().flatten() {
                writer_scalars.push((format!("{id}.{key}"), *value));
            }
        }
        let mut writer = burn_pack::Writer::new(tensors);
        for (key, value) in &writer_scalars {
            writer = writer.with_scalar(key, *value);
        }
        let bytes = writer.into_bytes().map_err(|e| e.to_string())?;
        let current = std::mem::replace(optimizer, burn::optim::SgdConfig::new().init());
        *optimizer = current.from_bytes(bytes).map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// Writes a checkpoint of the model whose stages are `workers` (any replicas, replica-major;
/// weights are taken from replica 0, optimizer state merged over all), atomically.
pub fn save<L: Layer>(
    path: &Path,
    workers: &[WorkerState<L>],
    stages: usize,
    optimizer: &str,
    progress: &Progress,
) -> Result<()> {
    let model: Vec<L> = workers
        .iter()
        .take(stages)
        .flat_map(|w| w.layers.iter().map(|l| l.valid()))
        .collect();
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

/// Writes `model` (the whole layer sequence), `state` and `progress` to `path`, atomically.
fn write<L: Layer>(
    path: &Path,
    model: &[L],
    state: &OptimizerState,
    progress: &Progress,
) -> Result<()> {
    let model: Vec<L> = model.to_vec();
    let mut store = SafetensorsStore::from_bytes(None).skip_enum_variants(true);
    model
        .save_into(&mut store)
        .map_err(|e| corrupt(path, format!("serializing the model: {e}")))?;
    let weights = store
        .get_bytes()
        .map_err(|e| corrupt(path, format!("serializing the model: {e}")))?;
    let weights = SafeTensors::deserialize(&weights)
        .map_err(|e| corrupt(path, format!("serializing the model: {e}")))?;

    let mut views: Vec<(String, TensorView<'_>)> = Vec::new();
    for (name, view) in weights.tensors() {
        views.push((name, view));
    }
    for (name, entries) in &state.tensors {
        for (key, t) in entries {
            let dtype = to_safetensors(t.dtype).ok_or_else(|| {
                corrupt(
                    path,
                    format!(
                        "optimizer state `{name}/{key}` has unsupported type {:?}",
                        t.dtype
                    ),
                )
            })?;
            let view = TensorView::new(dtype, t.shape.clone(), &t.bytes)
                .map_err(|e| corrupt(path, format!("optimizer state `{name}/{key}`: {e}")))?;
            views.push((format!("{OPTIMIZER_PREFIX}{name}/{key}"), view));
        }
    }
    let metadata: HashMap<String, String> = [
        (FORMAT_KEY.to_string(), FORMAT.to_string()),
        (PROGRESS_KEY.to_string(), to_json(progress)),
        (OPTIMIZER_KEY.to_string(), state.optimizer.clone()),
        (SCALARS_KEY.to_string(), to_json(&state.scalars)),
    ]
    .into_iter()
    .collect();
    let bytes = safetensors::serialize(views, Some(metadata))
        .map_err(|e| corrupt(path, format!("serializing: {e}")))?;
    write_atomically(path, &bytes)
}

/// JSON of plain data (maps of strings and numbers always serialize).
fn to_json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("plain data serializes")
}

/// temp file in the same directory, fsync, rename over `path`, fsync the directory.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut file = File::create(&tmp).map_err(io(&tmp))?;
    file.write_all(bytes).map_err(io(&tmp))?;
    file.sync_all().map_err(io(&tmp))?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(io(path))?;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if let Ok(dir) = File::open(dir) {
        let _ = dir.sync_all(); // not every file system syncs directories
    }
    Ok(())
}

impl Checkpoint {
    /// Reads and checks the file (header, metadata, optimizer entries).
    pub fn read(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(io(path))?;
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
                return Err(CheckpointError::NotACheckpoint {
                    path: path.to_path_buf(),
                });
            }
        }
        let field = |key: &str| {
            meta.get(key)
                .ok_or_else(|| corrupt(path, format!("metadata `{key}` is missing")))
        };
        let progress: Progress = serde_json::from_str(field(PROGRESS_KEY)?)
            .map_err(|e| corrupt(path, format!("metadata `{PROGRESS_KEY}`: {e}")))?;
        let scalars = serde_json::from_str(field(SCALARS_KEY)?)
            .map_err(|e| corrupt(path, format!("metadata `{SCALARS_KEY}`: {e}")))?;
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
            let (param, key) = rest
                .rsplit_once('/')
                .ok_or_else(|| CheckpointError::Mismatch {
                    path: path.to_path_buf(),
                    tensor: name.clone(),
                    reason: "an optimizer tensor is named `__optimizer__/<param>/<key>`".into(),
                })?;
            let dtype =
                from_safetensors(view.dtype()).ok_or_else(|| CheckpointError::Mismatch {
                    path: path.to_path_buf(),
                    tensor: name.clone(),
                    reason: format!("unsupported type {:?}", view.dtype()),
                })?;
            state.tensors.entry(param.to_string()).or_default().insert(
                key.to_string(),
                StateTensor {
                    dtype,
                    shape: view.shape().to_vec(),
                    bytes: view.data().to_vec(),
                },
            );
        }
        Ok(Self {
            path: path.to_path_buf(),
            bytes,
            progress,
            optimizer: state,
        })
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
            return Err(CheckpointError::Optimizer {
                path: self.path.clone(),
                saved: self.optimizer.optimizer.clone(),
                current: optimizer.to_string(),
            });
        }
        Ok(())
    }

    /// `model` (the whole layer sequence) with every parameter replaced by the checkpoint's.
    pub fn load_model<L: Layer>(&self, model: Vec<L>) -> Result<Vec<L>> {
        apply(&self.path, model, self.bytes.clone(), false)
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
        if self.optimizer.optimizer != optimizer {
            return Err(CheckpointError::Optimizer {
                path: self.path.clone(),
                saved: self.optimizer.optimizer.clone(),
                current: optimizer.to_string(),
            });
        }
        let owners = zero_replicas.map(|r| crate::adapter::owners_of(&worker.layers, r));
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
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(io(path))?;
    SafeTensors::read_metadata(&bytes).map_err(|e| corrupt(path, e))?;
    apply(path, model, bytes, pytorch)
}

fn apply<L: Layer>(path: &Path, model: Vec<L>, bytes: Vec<u8>, pytorch: bool) -> Result<Vec<L>> {
    let mut model: Vec<L> = model.iter().map(|l| l.valid()).collect();
    let mut store = SafetensorsStore::from_bytes(Some(bytes))
        .skip_enum_variants(true)
        .allow_partial(true) // missing tensors are reported below, by name
        .validate(true);
    if pytorch {
        store = store.with_from_adapter(PyTorchToBurnAdapter);
    }
    let result = model.load_from(&mut store).map_err(|e| corrupt(path, e))?;
    if let Some(error) = result.errors.first() {
        let (tensor, reason) = match error {
            ApplyError::ShapeMismatch {
                path,
                expected,
                found,
            } => (
                path,
                format!("the model's shape is {expected:?}, the file's {found:?}"),
            ),
            ApplyError::DTypeMismatch {
                path,
                expected,
                found,
            } => (
                path,
                format!("the model's type is {expected:?}, the file's {found:?}"),
            ),
            ApplyError::AdapterError { path, message }
            | ApplyError::LoadError { path, message } => (path, message.clone()),
        };
        return Err(CheckpointError::Mismatch {
            path: path.to_path_buf(),
            tensor: tensor.clone(),
            reason,
        });
    }
    if let Some((tensor, container)) = result.missing.first() {
        return Err(CheckpointError::Missing {
            path: path.to_path_buf(),
            tensor: tensor.clone(),
            detail: if container.is_empty() {
                String::new()
            } else {
                format!(" in a {container}")
            },
        });
    }
    if let Some(tensor) = result
        .unused
        .iter()
        .find(|t| !t.starts_with(OPTIMIZER_PREFIX))
    {
        return Err(CheckpointError::Unexpected {
            path: path.to_path_buf(),
            tensor: tensor.clone(),
        });
    }
    Ok(model)
}
