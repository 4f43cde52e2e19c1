//! A checkpoint's weights as the state dict of the PyTorch module that mirrors its model
//! (`docs/pytorch.md`): [`to_pytorch`] gives the safetensors bytes that
//! `model.load_state_dict(safetensors.torch.load_file(FILE))` loads.
//!
//! | model | pipetrain name, layout | PyTorch name, layout |
//! |---|---|---|
//! | MLP | `{i}.linear.weight` `[in, out]`, head `{L}.weight` | `{2i}.weight` `[out, in]` (`nn.Sequential`, ReLUs at odd indices) |
//! | GPT | Linear `….weight` `[in, out]`, LayerNorm `gamma`/`beta` | the same names, `[out, in]`, `weight`/`bias` |
//!
//! `pipetrain train --init FILE` reads the file back exactly (`tests/cli/pytorch.rs`).

use crate::CommandError;
use std::collections::HashMap;
use std::path::Path;

use pipetrain_engine::checkpoint::{Checkpoint, OPTIMIZER_PREFIX};
use safetensors::tensor::{Dtype, TensorView};

use crate::error::{Error, Result};

/// A checkpoint converted to PyTorch's names and layout.
#[derive(Clone, Debug)]
pub struct PytorchExport {
    /// The safetensors file (`format: pt`), tensors sorted by name.
    pub bytes: Vec<u8>,
    /// Tensors in it (the optimizer state is left out).
    pub tensors: usize,
    /// The training step the checkpoint was written at.
    pub step: u64,
}

/// Which PyTorch module's names and layout, from the checkpoint's model.
enum Naming {
    /// `nn.Sequential(Linear, ReLU, …, Linear)`.
    Mlp,
    /// The documented GPT module (same names).
    Gpt,
}

/// Reads the checkpoint at `path` and converts its weights to the PyTorch module's names and
/// layout (Linear weights transposed to `[out, in]`).
///
/// # Errors
/// [`Error::Engine`] for a file that is not a pipetrain checkpoint, [`CommandError::ExportModel`]
/// for a model without a PyTorch mirror (ResNet, U-Net), [`CommandError::ExportTensor`] for a tensor
/// that is not F32, [`CommandError::ExportFile`] when the file cannot be read or encoded.
pub fn to_pytorch(path: &Path) -> Result<PytorchExport> {
    let checkpoint = Checkpoint::read(path)?;
    let model = checkpoint.progress().extra.get("model").cloned();
    let naming = match model.as_deref() {
        Some(m) if m.starts_with("MLP") => Naming::Mlp,
        Some(m) if m.starts_with("GPT") => Naming::Gpt,
        _ => return Err(Error::Command(CommandError::ExportModel { model })),
    };
    let file_error = |reason: String| {
        Error::Command(CommandError::ExportFile {
            path: path.to_path_buf(),
            reason,
        })
    };
    let bytes = std::fs::read(path).map_err(|e| file_error(e.to_string()))?;
    let file =
        safetensors::SafeTensors::deserialize(&bytes).map_err(|e| file_error(e.to_string()))?;
    let mut out: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, view) in file.tensors() {
        if name.starts_with(OPTIMIZER_PREFIX) {
            continue;
        }
        if view.dtype() != Dtype::F32 {
            return Err(Error::Command(CommandError::ExportTensor {
                tensor: name,
                dtype: format!("{:?}", view.dtype()),
            }));
        }
        let (torch_name, linear) = pytorch_name(&naming, &name);
        let (shape, data) = match (linear, view.shape()) {
            (true, &[rows, cols]) => (vec![cols, rows], transpose(view.data(), rows, cols)),
            _ => (view.shape().to_vec(), view.data().to_vec()),
        };
        out.push((torch_name, shape, data));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    let views: Vec<(String, TensorView<'_>)> = out
        .iter()
        .map(|(n, s, d)| (n.clone(), TensorView::new(Dtype::F32, s.clone(), d)))
        .map(|(n, v)| v.map(|v| (n, v)))
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| file_error(e.to_string()))?;
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    let bytes =
        safetensors::serialize(views, Some(metadata)).map_err(|e| file_error(e.to_string()))?;
    Ok(PytorchExport {
        bytes,
        tensors: out.len(),
        step: checkpoint.progress().step,
    })
}

/// The PyTorch name of parameter `name`, and whether it is a Linear weight (transposed).
fn pytorch_name(naming: &Naming, name: &str) -> (String, bool) {
    let (layer, rest) = name.split_once('.').unwrap_or((name, ""));
    match naming {
        Naming::Mlp => {
            let index = layer.parse::<usize>().map_or(0, |i| 2 * i);
            let field = rest.strip_prefix("linear.").unwrap_or(rest);
            (format!("{index}.{field}"), field == "weight")
        }
        Naming::Gpt => {
            let renamed = match rest.rsplit_once('.') {
                Some((path, "gamma")) => format!("{layer}.{path}.weight"),
                Some((path, "beta")) => format!("{layer}.{path}.bias"),
                _ => name.to_string(),
            };
            let embedding = rest == "token.weight" || rest == "position.weight";
            let linear = rest.ends_with(".weight") && !embedding;
            (renamed, linear)
        }
    }
}

/// The F32 matrix `data` (`rows × cols`, row-major) transposed.
fn transpose(data: &[u8], rows: usize, cols: usize) -> Vec<u8> {
    let mut out = vec![0u8; data.len()];
    for r in 0..rows {
        for c in 0..cols {
            let (from, to) = (4 * (r * cols + c), 4 * (c * rows + r));
            out[to..to + 4].copy_from_slice(&data[from..from + 4]);
        }
    }
    out
}
