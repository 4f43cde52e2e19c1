//! Model weights to and from safetensors bytes, through burn's store: tensors named over the
//! whole layer sequence with enum variants skipped (see [`names`](super::names)).

use burn::module::Module;
use burn::store::{
    ApplyError, KeyRemapper, ModuleSnapshot, PyTorchToBurnAdapter, SafetensorsStore,
};

/// `model`'s tensors as the bytes of a safetensors file.
pub(crate) fn save_safetensors<M: Module>(model: &M) -> Result<Vec<u8>, String> {
    let mut store = SafetensorsStore::from_bytes(None).skip_enum_variants(true);
    model.save_into(&mut store).map_err(|e| e.to_string())?;
    store.get_bytes().map_err(|e| e.to_string())
}

/// burn-store's key remapper for `renames` (regex, replacement), in order.
///
/// # Errors
/// A pattern that is not a regular expression, named.
pub(crate) fn rename_rules(renames: &[(String, String)]) -> Result<KeyRemapper, String> {
    let mut remapper = KeyRemapper::new();
    for (pattern, replacement) in renames {
        remapper = remapper
            .add_pattern(pattern, replacement.as_str())
            .map_err(|e| format!("rename pattern `{pattern}`: {e}"))?;
    }
    Ok(remapper)
}

/// What applying a file to a model found, besides the tensors that were applied.
pub(crate) struct Applied {
    /// Tensors that do not fit their parameter: (name, how they differ).
    pub errors: Vec<(String, String)>,
    /// Parameters the file lacks: (name, the container type that holds them, or empty).
    pub missing: Vec<(String, String)>,
    /// Tensors of the file that matched no parameter.
    pub unused: Vec<String>,
}

/// Applies the tensors of the safetensors file `bytes` to `model`, checking shapes and types;
/// with `pytorch`, through burn's PyTorch adapter (Linear weights transposed, norm
/// `weight`/`bias` read as `gamma`/`beta`). A missing tensor is reported, not an error. `Err` if
/// the file cannot be read at all.
pub(crate) fn apply_safetensors<M: Module>(
    model: &mut M,
    bytes: Vec<u8>,
    pytorch: bool,
    renames: &[(String, String)],
) -> Result<Applied, String> {
    let remapper = rename_rules(renames)?;
    let mut store = SafetensorsStore::from_bytes(Some(bytes))
        .remap(remapper)
        .skip_enum_variants(true)
        .allow_partial(true) // missing tensors are reported by the caller, by name
        // Shape and type errors come back in the result, so that the caller reports wrong
        // names first (a validating store fails on a shape before any name is compared).
        .validate(false);
    if pytorch {
        store = store.with_from_adapter(PyTorchToBurnAdapter);
    }
    let result = model.load_from(&mut store).map_err(|e| e.to_string())?;
    let errors = result
        .errors
        .into_iter()
        .map(|error| match error {
            ApplyError::ShapeMismatch {
                path,
                expected,
                found,
            } => (
                path,
                format!(
                    "the model's shape is {:?}, the file's {:?}",
                    expected.as_slice(),
                    found.as_slice()
                ),
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
            | ApplyError::LoadError { path, message } => (path, message),
        })
        .collect();
    Ok(Applied {
        errors,
        missing: result.missing,
        unused: result.unused,
    })
}
