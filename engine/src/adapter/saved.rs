//! What burn 0.22.1's autodiff keeps of a training forward, op by op, in bytes: the values an
//! op's backward state holds ([`Layer::graph_bytes`](crate::Layer::graph_bytes) adds them up
//! for a layer from its shapes). Each rule is read off burn's source for its pinned release
//! (`burn-autodiff` 0.22.1's `ops/`, `burn-backend`'s default decompositions, burn-flex's
//! in-place reuse of a buffer it holds the only handle of); a burn upgrade revisits them here,
//! where the rest of the engine's burn knowledge lives.
//!
//! Counted: tensors' values. Not counted: the graph's bookkeeping per recorded op (a node, its
//! boxed backward step, its parents' ids: some hundred bytes an op, a few per cent of a layer
//! at the sizes `tests/memory_measured.rs` sweeps, tens of per cent at toy sizes), batch
//! norm's running-statistics updates (about 13 kB a call, whatever its size).
//!
//! Each function takes a tensor's `elements` and the `width` in bytes of one value (4 in fp32,
//! 2 in bf16) and returns what the op keeps **beside its input and its output**: the input is
//! its producer's to count, the output its consumer's (an op that saves its input keeps it;
//! the caller counts it once).

/// Bytes of `elements` values of `width` bytes.
pub fn values(elements: usize, width: usize) -> u64 {
    (elements as u64).saturating_mul(width as u64)
}

/// Layer norm over the last dimension, as burn's default `layer_norm` decomposes it
/// (`burn-backend` `ModuleOps::layer_norm`): `x − mean` (`centered`), squared (`mul` saves both
/// operands: `centered`), `centered / sqrt(var + ε)` (`div` saves both: `centered` and the
/// small denominator) and the product with γ (`mul` saves `normalized`). Keeps `centered` and
/// `normalized`, at `width` (fp32 under bf16 where the norm runs upcast, as the built-in
/// models' norms do). The per-row statistics (one value a row) are left out.
pub fn layer_norm(elements: usize, width: usize) -> u64 {
    2 * values(elements, width)
}

/// Softmax, as burn's default `softmax` decomposes it (`burn-backend` `ActivationOps::softmax`):
/// `x − max` (in place into `x` where the caller holds it no longer), `exp` (its backward
/// checkpoints its input: the shifted values) and `exp / sum` (`div` saves both: `exp`'s
/// output). Keeps the shifted input and `exp`'s output, at `width`.
pub fn softmax(elements: usize, width: usize) -> u64 {
    2 * values(elements, width)
}

/// RMS norm over the last dimension, as burn's `RmsNorm::forward` computes it: `x / rms(x)`
/// (`div` saves both operands: the input itself, which its producer counts, and the small
/// per-row `rms`) times γ (`mul` saves `normalized`). Keeps `normalized`, at `width` (fp32
/// where the norm runs upcast, as the Llama's do). Unlike [`layer_norm`], it keeps its input:
/// a pre-norm block's input stays live until its backward.
pub fn rms_norm(elements: usize, width: usize) -> u64 {
    values(elements, width)
}

/// SiLU, as burn decomposes it (`x · sigmoid(x)`): `sigmoid` checkpoints its input and `mul`
/// saves both operands. Keeps the sigmoid's output beside its input (which `sigmoid` and `mul`
/// save: its producer counts it), at `width`.
pub fn silu(elements: usize, width: usize) -> u64 {
    values(elements, width)
}

/// Rotary position embeddings as `x · cos + rotate_half(x) · sin`, with `cos` and `sin`
/// computed from the positions (no gradient): a `mul` by a tensor that takes no gradient saves
/// that tensor, so the graph keeps `cos` and `sin` (`elements` each: `[N, 1, T, head_dim]`,
/// shared by the queries and the keys), in fp32. The rotated values are the output; `x`, its
/// halves and the products are freed.
pub fn rotary(elements: usize) -> u64 {
    2 * values(elements, 4)
}

/// A boolean mask (`mask_fill` saves it for its backward), one byte a value on the CPU backend.
pub fn mask(elements: usize) -> u64 {
    values(elements, 1)
}

/// A split `Linear` call without a bias ([`Linears`](crate::Linears) split): its leaf `z` is a
/// zeros tensor of the output's shape (fp32), held by the graph and the call's tap until its
/// weight-gradient pass. With a bias the leaf is the bias broadcast (a view): nothing.
pub fn split_leaf(output_elements: usize, bias: bool) -> u64 {
    match bias {
        true => 0,
        false => values(output_elements, 4),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rule_counts_its_kept_values() {
        assert_eq!(values(10, 2), 20);
        assert_eq!(layer_norm(10, 4), 80);
        assert_eq!(softmax(10, 4), 80);
        assert_eq!(mask(10), 10);
        assert_eq!(rms_norm(10, 4), 40);
        assert_eq!(silu(10, 2), 20);
        assert_eq!(rotary(10), 80);
        assert_eq!(split_leaf(10, true), 0);
        assert_eq!(split_leaf(10, false), 40);
    }
}
