//! Whether a tensor is the only handle of its buffer, read from burn's CPU backend: what the
//! tests of the GPU hand-off paths check on a CPU, where no stream shows a shared buffer.

use burn::prelude::*;

/// `t` back, and whether it is the only handle of its buffer: `Some` on burn's `flex` CPU
/// backend (its tensors count their holders), `None` where the backend does not say.
pub(crate) fn sole_holder<const D: usize>(t: Tensor<D>) -> (Tensor<D>, Option<bool>) {
    let primitive = t.into_dispatch();
    // flex's tensor describes itself with `unique: bool` (its buffer's holder count is 1).
    let described = format!("{primitive:?}");
    let sole = if described.contains("unique: true") {
        Some(true)
    } else if described.contains("unique: false") {
        Some(false)
    } else {
        None
    };
    (Tensor::from_dispatch(primitive), sole)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clone_shares_the_buffer_and_a_dropped_one_no_longer_does() {
        let t = Tensor::<1>::from_floats([1.0, 2.0], &Device::flex());
        let (t, sole) = sole_holder(t);
        assert_eq!(sole, Some(true));
        let other = t.clone();
        let (t, sole) = sole_holder(t);
        assert_eq!(sole, Some(false));
        drop(other);
        assert_eq!(sole_holder(t).1, Some(true));
    }
}
