//! Parameter ids and full-model names.
//!
//! A parameter's name is what burn's store calls it over the whole layer sequence, enum variants
//! skipped: `"{layer}.{field}…"`, e.g. `3.linear.weight`. Checkpoints and ties name parameters
//! this way; a PyTorch module's names differ per model and are mapped at the edges (`--init`
//! renames, `pipetrain export`).

use burn::module::Module;
use burn::store::ModuleSnapshot;

/// A parameter's identity within a model: the key of gradients, optimizer state and ties.
pub(crate) use burn::module::ParamId;

/// A parameter's id, full-model name and shape.
#[derive(Clone, Debug)]
pub(crate) struct Named {
    pub id: ParamId,
    pub name: String,
    pub shape: Vec<usize>,
}

/// The parameters of `layers` with full-model names (enum variants skipped, as burn's store and
/// PyTorch name them); `offset` is the index of `layers[0]` in the whole model.
pub(crate) fn named_parameters<M: Module>(layers: &[M], offset: usize) -> Vec<Named> {
    let layers: Vec<M> = layers.to_vec();
    layers
        .collect(None, None, true)
        .into_iter()
        .filter_map(|t| {
            let id = ParamId::from(t.param_id?);
            let (index, rest) = t.name.split_once('.').unwrap_or((&t.name, ""));
            let index: usize = index.parse().ok()?;
            let name = if rest.is_empty() {
                (index + offset).to_string()
            } else {
                format!("{}.{rest}", index + offset)
            };
            Some(Named {
                id,
                name,
                shape: t.shape.to_vec(),
            })
        })
        .collect()
}
