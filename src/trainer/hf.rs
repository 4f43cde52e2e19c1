//! Hugging Face checkpoints of Llama-family decoders: a directory holding `config.json` and
//! `model.safetensors`, or shards listed by `model.safetensors.index.json` (what
//! `save_pretrained` writes), read into a [`LlamaConfig`] and its layers ([`load_llama`]), and
//! written back so that transformers' `AutoModelForCausalLM.from_pretrained` loads them
//! ([`save_llama`]).
//!
//! Tensors may be stored in fp32, bf16 or fp16; they are widened to fp32 (pipetrain's master
//! weights). Every problem names the file, and the tensor where there is one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use burn::prelude::*;
use burn::tensor::TensorData;
use pipetrain_models::{LlamaConfig, LlamaLayer};

use crate::{Error, RunError, RunFile, RunFileProblem};

/// A checkpoint directory's configuration and tensors (Hugging Face names and layouts, fp32).
#[derive(Debug)]
pub struct HfCheckpoint {
    /// What `config.json` says.
    pub config: LlamaConfig,
    /// Every tensor of every shard, by name.
    pub tensors: BTreeMap<String, TensorData>,
}

/// The error of file `path` of a checkpoint read as initial weights.
fn failed(path: &Path, reason: impl Into<String>) -> Error {
    Error::Run(RunError::RunFile {
        file: RunFile::Init,
        path: path.to_path_buf(),
        reason: RunFileProblem::Invalid(reason.into()),
    })
}

/// The error of reading `path`.
fn io(path: &Path, e: std::io::Error) -> Error {
    Error::Run(RunError::RunFile {
        file: RunFile::Init,
        path: path.to_path_buf(),
        reason: RunFileProblem::Io(e),
    })
}

/// Whether `path` is a Hugging Face checkpoint directory: a directory holding `config.json`
/// (what `--init hf:DIR`, or `--init DIR`, names).
pub fn is_checkpoint_dir(path: &Path) -> bool {
    path.is_dir() && path.join("config.json").is_file()
}

/// `--init`'s value as a path: `hf:DIR` names the checkpoint directory DIR.
pub fn init_path(value: &str) -> PathBuf {
    PathBuf::from(value.strip_prefix("hf:").unwrap_or(value))
}

/// The configuration of the checkpoint in `dir` (its `config.json` alone).
///
/// # Errors
/// [`RunError::RunFile`] ([`RunFile::Init`]) naming `config.json`: unreadable, not JSON, or
/// not a Llama-family configuration pipetrain implements (the field and a remedy).
pub fn read_config(dir: &Path) -> Result<LlamaConfig, Error> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| io(&path, e))?;
    LlamaConfig::from_hf_config(&text).map_err(|e| failed(&path, e))
}

/// The layers of a Llama-family run: the checkpoint's in `init` when it is a Hugging Face
/// checkpoint directory of this very `config`, else `config`'s random init on `device`.
///
/// # Errors
/// [`load_llama`]'s errors; a checkpoint whose `config.json` is not `config` (it changed since
/// the model was sized).
pub fn llama_layers(
    config: &LlamaConfig,
    init: Option<&Path>,
    device: &Device,
) -> Result<Vec<LlamaLayer>, Error> {
    match init.filter(|p| is_checkpoint_dir(p)) {
        Some(dir) => {
            let (stored, layers) = load_llama(dir, device)?;
            if &stored != config {
                return Err(failed(
                    &dir.join("config.json"),
                    "changed while the run started: its config is not the one the model was \
                     sized from",
                ));
            }
            Ok(layers)
        }
        None => Ok(config.init(device)),
    }
}

/// Reads the checkpoint in `dir`: `config.json`, then `model.safetensors` or, when
/// `model.safetensors.index.json` is there, every shard its `weight_map` names.
///
/// # Errors
/// [`RunError::RunFile`] ([`RunFile::Init`]) naming the file: unreadable, not JSON or not a
/// Llama-family config (the field and a remedy), a shard missing, a tensor of a dtype other
/// than fp32, bf16 or fp16, or a tensor stored twice.
pub fn read(dir: &Path) -> Result<HfCheckpoint, Error> {
    let config = read_config(dir)?;
    let index = dir.join("model.safetensors.index.json");
    let shards: Vec<PathBuf> = match index.exists() {
        true => {
            let text = std::fs::read_to_string(&index).map_err(|e| io(&index, e))?;
            let value: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| failed(&index, format!("not JSON: {e}")))?;
            let map = value
                .get("weight_map")
                .and_then(|m| m.as_object())
                .ok_or_else(|| failed(&index, "no `weight_map` object"))?;
            let mut files: Vec<String> = map
                .values()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect();
            files.sort();
            files.dedup();
            files.into_iter().map(|f| dir.join(f)).collect()
        }
        false => vec![dir.join("model.safetensors")],
    };
    let mut tensors = BTreeMap::new();
    for shard in &shards {
        let bytes = std::fs::read(shard).map_err(|e| io(shard, e))?;
        let file = safetensors::SafeTensors::deserialize(&bytes)
            .map_err(|e| failed(shard, format!("not a safetensors file: {e}")))?;
        for (name, view) in file.tensors() {
            let data = widen(&view).map_err(|e| failed(shard, format!("tensor `{name}`: {e}")))?;
            if tensors.insert(name.clone(), data).is_some() {
                return Err(failed(shard, format!("tensor `{name}` is stored twice")));
            }
        }
    }
    Ok(HfCheckpoint { config, tensors })
}

/// A stored tensor as fp32 data.
fn widen(view: &safetensors::tensor::TensorView<'_>) -> Result<TensorData, String> {
    use safetensors::Dtype;
    let bytes = view.data();
    let values: Vec<f32> = match view.dtype() {
        Dtype::F32 => bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::BF16 => bytes
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        Dtype::F16 => bytes
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        other => {
            return Err(format!(
                "dtype {other:?} is not a float pipetrain reads (F32, BF16, F16)"
            ));
        }
    };
    Ok(TensorData::new(values, view.shape().to_vec()))
}

/// The configuration and layers of the checkpoint in `dir`, on `device`.
///
/// # Errors
/// [`read`]'s errors, and a tensor missing, of another shape (both shapes named) or without a
/// place in the model, naming the file that holds the weights.
pub fn load_llama(dir: &Path, device: &Device) -> Result<(LlamaConfig, Vec<LlamaLayer>), Error> {
    let HfCheckpoint { config, tensors } = read(dir)?;
    let layers = config
        .from_hf_tensors(&tensors, device)
        .map_err(|e| failed(&weights_file(dir), e))?;
    Ok((config, layers))
}

/// The file a message about the weights names: the index when the checkpoint is sharded.
fn weights_file(dir: &Path) -> PathBuf {
    let index = dir.join("model.safetensors.index.json");
    match index.exists() {
        true => index,
        false => dir.join("model.safetensors"),
    }
}

/// Writes `layers` (of `config`) to `dir` as transformers' `save_pretrained` would: a
/// `config.json` (`LlamaForCausalLM`, the fields [`LlamaConfig`] holds) and one
/// `model.safetensors` in fp32 with `format: pt`. `dir` is created if needed; each file is
/// written atomically.
///
/// # Errors
/// [`RunError::RunFile`] naming the file that could not be written, or a tied configuration
/// whose head is no longer the embedding's transpose (a model trained without the tie: its
/// checkpoint would lose the head, which transformers rebuilds from the embedding).
pub fn save_llama(dir: &Path, config: &LlamaConfig, layers: &[LlamaLayer]) -> Result<(), Error> {
    if let Some(drift) = config.tie_drift(layers).filter(|d| *d != 0.0) {
        return Err(failed(
            &dir.join("model.safetensors"),
            format!(
                "tie_word_embeddings is true but the head differs from the token embedding's \
                 transpose by up to {drift:.3e}: train with the tie (Pipeline::builder().tie(\
                 config.tie_embeddings()), as --model llama does), or save it with \
                 tie_word_embeddings false"
            ),
        ));
    }
    let written = |path: &Path, e: crate::EngineError| {
        Error::Run(RunError::RunFile {
            file: RunFile::Checkpoint,
            path: path.to_path_buf(),
            reason: RunFileProblem::Output(e),
        })
    };
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let tensors = config.hf_tensors(layers);
    let owned: Vec<(String, Vec<u8>, Vec<usize>)> = tensors
        .into_iter()
        .map(|(name, data)| {
            let shape = data.shape().to_vec();
            let values = data.try_to_vec::<f32>().unwrap_or_default();
            let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            (name, bytes, shape)
        })
        .collect();
    let views = owned
        .iter()
        .map(|(name, bytes, shape)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), bytes)
                .map(|v| (name.clone(), v))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| failed(dir, format!("a tensor does not fit its shape: {e}")))?;
    let metadata = Some(std::collections::HashMap::from([(
        "format".to_string(),
        "pt".to_string(),
    )]));
    let bytes = safetensors::serialize(views, metadata)
        .map_err(|e| failed(dir, format!("safetensors: {e}")))?;
    let weights = dir.join("model.safetensors");
    crate::engine::output::write_atomically(&weights, &bytes).map_err(|e| written(&weights, e))?;
    let json = config_json(config);
    let config_path = dir.join("config.json");
    crate::engine::output::write_atomically(&config_path, json.as_bytes())
        .map_err(|e| written(&config_path, e))?;
    Ok(())
}

/// What [`export`] wrote.
#[derive(Clone, Debug)]
pub struct HfExport {
    /// The decoder's configuration (as `config.json` says it).
    pub config: LlamaConfig,
    /// Tensors in `model.safetensors`.
    pub tensors: usize,
    /// The training step the checkpoint was written at.
    pub step: u64,
}

/// The checkpoint identity key under which a Llama run records its `config.json` (so that
/// [`export`] can write it back, and a resume must match it).
pub const CONFIG_KEY: &str = "hf-config";

/// Writes the weights of the pipetrain checkpoint `checkpoint` (of a Llama-family run, which
/// records its `config.json` under [`CONFIG_KEY`]) to `dir` as a Hugging Face checkpoint
/// ([`save_llama`]). `dir` must not exist or be empty.
///
/// # Errors
/// [`CommandError::ExportHfModel`](crate::CommandError::ExportHfModel): a checkpoint of
/// another model; [`CommandError::ExportHfDirectory`](crate::CommandError::ExportHfDirectory):
/// `dir` holds files; the checkpoint's reading errors; [`save_llama`]'s.
pub fn export(checkpoint: &Path, dir: &Path) -> Result<HfExport, Error> {
    use crate::CommandError;
    if std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some()) || dir.is_file() {
        return Err(Error::Command(CommandError::ExportHfDirectory {
            path: dir.to_path_buf(),
        }));
    }
    let stored = crate::Checkpoint::read(checkpoint)?;
    let extra = &stored.progress().extra;
    let config = extra
        .get(CONFIG_KEY)
        .and_then(|json| LlamaConfig::from_hf_config(json).ok())
        .ok_or_else(|| {
            Error::Command(CommandError::ExportHfModel {
                model: extra.get("model").cloned(),
            })
        })?;
    let layers = stored.load_model(config.init(&Device::flex()))?;
    save_llama(dir, &config, &layers)?;
    Ok(HfExport {
        config,
        tensors: config.hf_names().len(),
        step: stored.progress().step,
    })
}

/// `config.json` for `config`: a `LlamaForCausalLM` (`attention_bias` on q, k, v and o, so a
/// Qwen2-style model with q/k/v biases alone has no Llama form and is written as `qwen2`).
pub fn config_json(config: &LlamaConfig) -> String {
    let qwen2 = config.qkv_bias && !config.output_bias;
    let value = serde_json::json!({
        "architectures": [if qwen2 { "Qwen2ForCausalLM" } else { "LlamaForCausalLM" }],
        "model_type": if qwen2 { "qwen2" } else { "llama" },
        "vocab_size": config.vocab,
        "hidden_size": config.hidden,
        "intermediate_size": config.intermediate,
        "num_hidden_layers": config.layers,
        "num_attention_heads": config.heads,
        "num_key_value_heads": config.kv_heads,
        "head_dim": config.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": config.max_positions,
        "rms_norm_eps": config.rms_norm_eps,
        "rope_theta": config.rope_theta,
        "attention_bias": config.qkv_bias && !qwen2,
        "mlp_bias": config.mlp_bias,
        "tie_word_embeddings": config.tie_word_embeddings,
        "initializer_range": config.initializer_range,
        "torch_dtype": "float32",
    });
    serde_json::to_string_pretty(&value).unwrap_or_default()
}
