//! Parameter values, for verification: pipelined vs single-device weights.

use burn::module::Module;

use crate::adapter;

/// Every float parameter of `module` — trained weights and buffers such as batch-norm running
/// statistics — flattened, in visiting order (the same order for the same model however it is
/// staged: stage 0's layers first).
pub fn parameters<M: Module>(module: &M) -> Vec<Vec<f32>> {
    adapter::float_values(module, false)
}

/// The trained float parameters of `module` (on an autodiff device, as a training worker's or
/// [`SingleDevice`](crate::SingleDevice)'s layers are), without buffers, flattened, in visiting
/// order.
pub fn trainable_parameters<M: Module>(module: &M) -> Vec<Vec<f32>> {
    adapter::float_values(module, true)
}

/// How far two parameter lists are apart.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Difference {
    /// max over parameter tensors of ‖a − b‖₂ / max(‖b‖₂, 1e-12): the norm-wise relative
    /// difference `--verify` reports (element-wise ratios blow up on weights near zero).
    pub max_relative: f64,
    /// max over all elements of |a − b|.
    pub max_absolute: f64,
    /// The parameter tensor (0-based, in visiting order) whose relative difference is
    /// `max_relative`: the first NaN one, else the largest.
    pub worst_tensor: usize,
}

/// Compares `actual` with `reference` (same structure required). A NaN anywhere (in either,
/// or from `∞ − ∞`) makes both maxima NaN, which no tolerance accepts.
///
/// ```
/// use pipetrain_engine::difference;
/// let d = difference(&[vec![1.0, 2.0]], &[vec![1.0, 2.0]]);
/// assert_eq!(d.max_relative, 0.0);
/// let d = difference(&[vec![1.0], vec![2.0]], &[vec![1.0], vec![1.0]]);
/// assert_eq!((d.max_relative, d.worst_tensor), (1.0, 1));
/// let diverged = difference(&[vec![f32::NAN, 2.0]], &[vec![1.0, 2.0]]);
/// assert!(diverged.max_relative.is_nan() && diverged.max_absolute.is_nan());
/// let both = difference(&[vec![f32::INFINITY]], &[vec![f32::INFINITY]]);
/// assert!(both.max_relative.is_nan());
/// ```
///
/// # Panics
/// If the structures differ (different models).
pub fn difference(actual: &[Vec<f32>], reference: &[Vec<f32>]) -> Difference {
    assert_eq!(
        actual.len(),
        reference.len(),
        "different number of parameter tensors"
    );
    let mut d = Difference {
        max_relative: 0.0,
        max_absolute: 0.0,
        worst_tensor: 0,
    };
    for (i, (a, b)) in actual.iter().zip(reference).enumerate() {
        assert_eq!(a.len(), b.len(), "parameter tensors of different sizes");
        let (mut diff2, mut norm2) = (0f64, 0f64);
        for (&x, &y) in a.iter().zip(b) {
            let e = f64::from(x) - f64::from(y);
            diff2 += e * e;
            norm2 += f64::from(y) * f64::from(y);
            d.max_absolute = max_or_nan(d.max_absolute, e.abs());
        }
        let relative = diff2.sqrt() / norm2.sqrt().max(1e-12);
        if !d.max_relative.is_nan() && (relative.is_nan() || relative > d.max_relative) {
            d.worst_tensor = i;
        }
        d.max_relative = max_or_nan(d.max_relative, relative);
    }
    d
}

/// The larger of `a` and `b`, or NaN if either is: a diverged weight (NaN, or ∞ − ∞) must not
/// vanish from the maximum as it does with `f64::max`.
fn max_or_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}
