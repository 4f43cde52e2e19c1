//! Initial weights from a file: a pipetrain checkpoint (its weights), or another safetensors
//! weights file in PyTorch's layout or burn's.

use crate::RunError;
use std::path::Path;

use crate::trainer::{ReferenceModel, fits};
use crate::{Checkpoint, EngineError, Error, Layer, RunFile, RunFileProblem};

/// The error of the weights file `path`.
fn failed(path: &Path, reason: RunFileProblem) -> Error {
    Error::Run(RunError::RunFile {
        file: RunFile::Init,
        path: path.to_path_buf(),
        reason,
    })
}

/// `layers` with the weights of `path`: a pipetrain checkpoint (its weights), or any other
/// safetensors file: a PyTorch state dict (Linear weights `[out, in]`) or burn's layout
/// (`[in, out]`), whichever its metadata or its shapes say.
///
/// `renames` (`REGEX=REPLACEMENT` rules, in order) rewrite the file's tensor names first.
///
/// # Errors
/// [`|e| Error::Run(RunError::Renames(e))`]: a rule does not parse; [`RunError::OtherModel`](crate::RunError::OtherModel): a checkpoint of another
/// model; [`RunError::RunFile`](crate::RunError::RunFile) ([`RunFile::Init`]): the file is unreadable, does not fit the
/// model (the error names the tensor) or its layout is ambiguous.
pub fn init_weights<L: Layer>(
    path: &Path,
    layers: Vec<L>,
    renames: &[(String, String)],
    model: &ReferenceModel,
) -> Result<Vec<L>, Error> {
    crate::engine::checkpoint::check_renames(renames)
        .map_err(|e| Error::Run(RunError::Renames(e)))?;
    match Checkpoint::read(path) {
        Ok(checkpoint) if renames.is_empty() => {
            let stored = checkpoint.progress().extra.get("model").cloned();
            checkpoint.load_model(layers).map_err(|e| {
                match stored.filter(|s| fits(&e) && *s != model.describe()) {
                    Some(stored) => Error::Run(RunError::OtherModel {
                        file: RunFile::Init,
                        path: path.to_path_buf(),
                        stored,
                        ours: model.describe(),
                        source: e,
                    }),
                    None => failed(path, e.into()),
                }
            })
        }
        Ok(_) | Err(EngineError::NotACheckpoint { .. }) => {
            plain_weights(path, layers, renames, model)
        }
        Err(e) => Err(failed(path, e.into())),
    }
}

/// A weights file without pipetrain's metadata, in PyTorch's layout or burn's. The metadata
/// says which when it can (`format: pt` from `safetensors.torch.save_file`, `producer: burn`
/// from burn's store); else the shapes do: a non-square Linear weight fits one layout only. A
/// file whose Linear weights are all square fits both and is refused rather than guessed (a
/// wrong guess transposes every matrix).
///
/// `renames` apply first; then the model's PyTorch names (a `nn.Sequential` MLP's
/// `0.weight`, `2.weight`, …, see [`ReferenceModel::pytorch_renames`]) are mapped onto its own when every
/// name has that form.
fn plain_weights<L: Layer>(
    path: &Path,
    layers: Vec<L>,
    renames: &[(String, String)],
    model: &ReferenceModel,
) -> Result<Vec<L>, Error> {
    let bytes = std::fs::read(path).map_err(|e| failed(path, e.into()))?;
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes)
        .map_err(|e| failed(path, RunFileProblem::Invalid(e.to_string())))?;
    let names: Vec<String> = header.tensors().keys().cloned().collect();
    let names = crate::engine::checkpoint::rename_all(&names, renames)
        .map_err(|e| Error::Run(RunError::Renames(e)))?;
    let sequential = names.iter().all(|name| {
        let (index, rest) = name.split_once('.').unwrap_or_default();
        index.parse::<usize>().is_ok() && matches!(rest, "weight" | "bias")
    });
    let mut renames = renames.to_vec();
    if sequential {
        renames.extend(model.pytorch_renames());
    }
    let init_from = |path: &Path, layers: Vec<L>, pytorch: bool| {
        crate::engine::checkpoint::init_renamed(path, layers, pytorch, &renames)
    };
    let meta = header.metadata().clone().unwrap_or_default();
    let known = match (meta.get("format"), meta.get("producer")) {
        (Some(f), _) if f == "pt" => Some(true),
        (_, Some(p)) if p == "burn" => Some(false),
        _ => None,
    };
    if let Some(pytorch) = known {
        return init_from(path, layers, pytorch).map_err(|e| failed(path, e.into()));
    }
    let as_burn = init_from(path, layers.clone(), false);
    let as_pytorch = init_from(path, layers, true);
    let square = header
        .tensors()
        .into_iter()
        .find(|(_, info)| matches!(info.shape[..], [a, b] if a == b));
    match (as_pytorch, as_burn, square) {
        (Ok(_), Ok(_), Some((name, info))) => Err(failed(
            path,
            RunFileProblem::AmbiguousLayout {
                tensor: name,
                shape: info.shape.clone(),
            },
        )),
        (Ok(layers), _, _) | (Err(_), Ok(layers), _) => Ok(layers),
        // Wrong names first (as PyTorch's strict load): a layout's shape error would mislead.
        (Err(e @ EngineError::Keys { .. }), Err(_), _) | (Err(_), Err(e), _) => {
            Err(failed(path, e.into()))
        }
    }
}
