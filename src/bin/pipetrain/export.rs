//! `pipetrain export CKPT --format pytorch -o FILE`: a checkpoint's weights as the state dict of
//! the PyTorch module that mirrors its model (docs/pytorch.md), loadable with
//! `model.load_state_dict(safetensors.torch.load_file(FILE))`.
//!
//! | model | pipetrain name, layout | PyTorch name, layout |
//! |---|---|---|
//! | MLP | `{i}.linear.weight` `[in, out]`, head `{L}.weight` | `{2i}.weight` `[out, in]` (`nn.Sequential`, ReLUs at odd indices) |
//! | GPT | Linear `….weight` `[in, out]`, LayerNorm `gamma`/`beta` | the same names, `[out, in]`, `weight`/`bias` |
//!
//! `--init FILE` reads the file back exactly (`tests/cli_pytorch.rs`).

use std::collections::HashMap;
use std::path::PathBuf;

use clap::ValueEnum;
use pipetrain::Checkpoint;
use pipetrain::engine::checkpoint::OPTIMIZER_PREFIX;
use safetensors::tensor::{Dtype, TensorView};

use crate::exit::Exit;
use crate::failure::Failure;

/// Layouts `export` writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// The PyTorch module's state dict (safetensors, `format: pt`).
    #[default]
    Pytorch,
}

/// Arguments of `pipetrain export`.
#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// A checkpoint written by `pipetrain train --checkpoint`.
    pub checkpoint: PathBuf,
    /// The layout to write.
    #[arg(long, value_enum, default_value_t)]
    pub format: ExportFormat,
    /// The file to write.
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
}

/// Which PyTorch module's names and layout, from the checkpoint's model.
enum Naming {
    /// `nn.Sequential(Linear, ReLU, …, Linear)`.
    Mlp,
    /// The documented GPT module (same names).
    Gpt,
}

/// Runs `pipetrain export`.
///
/// # Errors
/// Usage: not a pipetrain checkpoint, a model without a PyTorch mirror (ResNet), an output
/// directory that does not exist. Runtime: unreadable input, unwritable output.
pub fn run(args: &ExportArgs) -> Result<Exit, Failure> {
    crate::paths::inputs_exist(&[("CKPT", &Some(args.checkpoint.clone()))])
        .map_err(Failure::usage)?;
    crate::paths::distinct(
        &[("CKPT", Some(&args.checkpoint))],
        &[("-o", Some(&args.output))],
        &[],
    )?;
    crate::paths::outputs_writable(&[("-o", &Some(args.output.clone()))])
        .map_err(Failure::usage)?;
    let shown = args.checkpoint.display();
    let checkpoint = Checkpoint::read(&args.checkpoint)
        .map_err(|e| Failure::usage(format!("export {shown}: {e}")))?;
    let model = checkpoint.progress().extra.get("model").cloned();
    let naming = match model.as_deref() {
        Some(m) if m.starts_with("MLP") => Naming::Mlp,
        Some(m) if m.starts_with("GPT") => Naming::Gpt,
        other => {
            return Err(Failure::usage(format!(
                "export {shown}: the model {} has no documented PyTorch module (MLP and GPT \
                 have); load the checkpoint with pipetrain instead",
                other.unwrap_or("(not recorded)")
            )));
        }
    };
    let bytes = std::fs::read(&args.checkpoint).map_err(|e| format!("export {shown}: {e}"))?;
    let file = safetensors::SafeTensors::deserialize(&bytes)
        .map_err(|e| format!("export {shown}: {e}"))?;
    let mut out: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, view) in file.tensors() {
        if name.starts_with(OPTIMIZER_PREFIX) {
            continue;
        }
        if view.dtype() != Dtype::F32 {
            return Err(Failure::runtime(format!(
                "export {shown}: tensor `{name}` is {:?}; checkpoints hold F32 weights",
                view.dtype()
            )));
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
        .collect::<Result<_, _>>()
        .map_err(|e| format!("export {shown}: {e}"))?;
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    let data = safetensors::serialize(views, Some(metadata))
        .map_err(|e| format!("export {shown}: {e}"))?;
    // Atomically: a failed write (a full disk) leaves the file that was there.
    pipetrain::engine::output::write_atomically(&args.output, &data)
        .map_err(|e| format!("export -o {}: {e}", args.output.display()))?;
    println!(
        "export: {} ({} tensors, PyTorch names and [out, in] Linear weights) from {shown} (step {})",
        args.output.display(),
        out.len(),
        checkpoint.progress().step
    );
    Ok(Exit::Success)
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
