//! `Activation`: the rank-erased tensor that crosses stage boundaries.

use std::fmt;

use burn::prelude::*;
use burn::tensor::{DType, FloatDType, Int};

use crate::adapter;
use crate::device::handoff::Handoff;
use crate::error::EngineError;
use crate::model::bundle::Bundle;

/// A tensor of any supported rank and kind: what one layer hands the next, what one stage sends
/// another, and what a micro-batch's inputs and targets are.
///
/// Float tensors of rank 1–4, int tensors (token ids, class labels) of rank 1–3, and a
/// [`Bundle`] of named ones (several tensors across one boundary, some without gradient).
/// Convert with `From` and [`Activation::float`] / [`Activation::int`] / [`Activation::bundle`]:
///
/// ```
/// use burn::prelude::*;
/// use pipetrain_engine::Activation;
/// let device = Device::flex();
/// let x: Activation = Tensor::<2>::zeros([4, 3], &device).into();
/// assert_eq!(x.dims(), vec![4, 3]);
/// let back: Tensor<2> = x.clone().float().unwrap();
/// assert!(x.float::<3>().is_err()); // wrong rank: a clear error, not a panic
/// ```
#[derive(Clone, Debug)]
#[allow(missing_docs)] // the variants are their names
pub enum Activation {
    Float1(Tensor<1>),
    Float2(Tensor<2>),
    Float3(Tensor<3>),
    Float4(Tensor<4>),
    Int1(Tensor<1, Int>),
    Int2(Tensor<2, Int>),
    Int3(Tensor<3, Int>),
    Bundle(Bundle),
}

macro_rules! each_variant {
    ($value:expr, $t:ident => $body:expr, $b:ident => $bundle:expr) => {
        match $value {
            Activation::Bundle($b) => $bundle,
            Activation::Float1($t) => $body,
            Activation::Float2($t) => $body,
            Activation::Float3($t) => $body,
            Activation::Float4($t) => $body,
            Activation::Int1($t) => $body,
            Activation::Int2($t) => $body,
            Activation::Int3($t) => $body,
        }
    };
}

macro_rules! map_variant {
    ($value:expr, $t:ident => $body:expr, $b:ident => $bundle:expr) => {
        match $value {
            Activation::Bundle($b) => Activation::Bundle($bundle),
            Activation::Float1($t) => Activation::Float1($body),
            Activation::Float2($t) => Activation::Float2($body),
            Activation::Float3($t) => Activation::Float3($body),
            Activation::Float4($t) => Activation::Float4($body),
            Activation::Int1($t) => Activation::Int1($body),
            Activation::Int2($t) => Activation::Int2($body),
            Activation::Int3($t) => Activation::Int3($body),
        }
    };
}

/// Conversion from an [`Activation`] to a concrete tensor type (implemented for every variant).
pub trait FromActivation: Sized {
    /// Description used in errors, e.g. "rank-2 float".
    const DESCRIPTION: &'static str;
    /// The tensor, or a mismatch error.
    fn from_activation(a: Activation) -> Result<Self, EngineError>;
}

macro_rules! conversions {
    ($($variant:ident: $ty:ty = $desc:literal;)*) => {$(
        impl From<$ty> for Activation {
            fn from(t: $ty) -> Self {
                Activation::$variant(t)
            }
        }
        impl FromActivation for $ty {
            const DESCRIPTION: &'static str = $desc;
            fn from_activation(a: Activation) -> Result<Self, EngineError> {
                match a {
                    Activation::$variant(t) => Ok(t),
                    other => Err(other.mismatch($desc)),
                }
            }
        }
    )*};
}

conversions! {
    Float1: Tensor<1> = "rank-1 float";
    Float2: Tensor<2> = "rank-2 float";
    Float3: Tensor<3> = "rank-3 float";
    Float4: Tensor<4> = "rank-4 float";
    Int1: Tensor<1, Int> = "rank-1 int";
    Int2: Tensor<2, Int> = "rank-2 int";
    Int3: Tensor<3, Int> = "rank-3 int";
}

impl Activation {
    /// The float tensor of rank `D`, or an error naming what was found.
    pub fn float<const D: usize>(self) -> Result<Tensor<D>, EngineError>
    where
        Tensor<D>: FromActivation,
    {
        Tensor::<D>::from_activation(self)
    }

    /// The int tensor of rank `D`, or an error naming what was found.
    pub fn int<const D: usize>(self) -> Result<Tensor<D, Int>, EngineError>
    where
        Tensor<D, Int>: FromActivation,
    {
        Tensor::<D, Int>::from_activation(self)
    }

    /// The bundle, or an error naming what was found.
    pub fn bundle(self) -> Result<Bundle, EngineError> {
        match self {
            Activation::Bundle(b) => Ok(b),
            other => Err(other.mismatch("bundle")),
        }
    }

    /// The shape (a bundle's: its first part's).
    pub fn dims(&self) -> Vec<usize> {
        each_variant!(self, t => t.shape().to_vec(), b => b.parts().first().map_or(Vec::new(), |p| p.value.dims()))
    }

    /// Values held (a bundle's: all its parts').
    pub fn elements(&self) -> usize {
        match self {
            Activation::Bundle(b) => b.parts().iter().map(|p| p.value.elements()).sum(),
            other => other.dims().iter().product(),
        }
    }

    /// Bytes of the values (a bundle's: all its parts'): elements × their dtype's width — 4 a
    /// value in fp32, 2 in bf16.
    pub fn value_bytes(&self) -> usize {
        each_variant!(self, t => t.shape().num_elements() * t.dtype().size(), b => b.parts().iter().map(|p| p.value.value_bytes()).sum())
    }

    /// Bytes the memory model charges for holding this activation: float values at their
    /// dtype's width (4 in fp32, 2 in bf16), token ids (stored as 32-bit or wider) at 4; a
    /// bundle's parts summed.
    pub fn held_bytes(&self) -> u64 {
        match self {
            Activation::Bundle(b) => b.parts().iter().map(|p| p.value.held_bytes()).sum(),
            float if float.is_float() => float.value_bytes() as u64,
            int => int.elements() as u64 * 4,
        }
    }

    /// Rows along dimension 0 (the batch dimension).
    pub fn batch_size(&self) -> usize {
        self.dims().first().copied().unwrap_or(0)
    }

    /// Whether this is a float tensor (it can carry a gradient).
    pub fn is_float(&self) -> bool {
        matches!(
            self,
            Activation::Float1(_)
                | Activation::Float2(_)
                | Activation::Float3(_)
                | Activation::Float4(_)
        )
    }

    /// "rank-2 float" and the like ("bundle").
    pub fn describe(&self) -> String {
        if let Activation::Bundle(_) = self {
            return "bundle".into();
        }
        let kind = if self.is_float() { "float" } else { "int" };
        format!("rank-{} {kind}", self.dims().len())
    }

    pub(crate) fn mismatch(&self, expected: &str) -> EngineError {
        EngineError::Mismatch {
            expected: expected.to_string(),
            found: self.describe(),
            shape: self.dims(),
        }
    }

    /// Splits along dimension 0 into `parts` contiguous parts whose row counts differ by at most
    /// one, the first ones longer ([`chunk_rows`]; `torch.tensor_split`'s sizes), or says why it
    /// cannot: every part needs at least one row.
    ///
    /// ```
    /// use burn::prelude::*;
    /// use pipetrain_engine::Activation;
    /// let x: Activation = Tensor::<2>::zeros([7, 3], &Device::flex()).into();
    /// let rows: Vec<usize> = x.clone().split(4)?.iter().map(|p| p.batch_size()).collect();
    /// assert_eq!(rows, [2, 2, 2, 1]);
    /// assert!(x.split(8).is_err()); // 7 rows cannot fill 8 parts
    /// # Ok::<(), pipetrain_engine::EngineError>(())
    /// ```
    pub fn split(self, parts: usize) -> Result<Vec<Activation>, EngineError> {
        let batch = self.batch_size();
        if parts == 0 || batch < parts {
            return Err(EngineError::Ragged { batch, parts });
        }
        let sizes = chunk_rows(batch, parts);
        Ok(each_variant!(self, t => t
            .split_with_sizes(sizes, 0)
            .into_iter()
            .map(Into::into)
            .collect(), b => b.split(parts)?.into_iter().map(Into::into).collect()))
    }

    /// Concatenates along dimension 0. All parts must have the variant of the first.
    pub fn cat(parts: Vec<Activation>) -> Result<Activation, EngineError> {
        let first = parts
            .first()
            .ok_or_else(|| EngineError::LayerRejected("nothing to concatenate".into()))?;
        let expected = first.describe();
        macro_rules! cat_as {
            ($variant:ident) => {{
                let tensors = parts
                    .into_iter()
                    .map(|p| match p {
                        Activation::$variant(t) => Ok(t),
                        other => Err(other.mismatch(&expected)),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Activation::$variant(Tensor::cat(tensors, 0))
            }};
        }
        Ok(match first {
            Activation::Float1(_) => cat_as!(Float1),
            Activation::Float2(_) => cat_as!(Float2),
            Activation::Float3(_) => cat_as!(Float3),
            Activation::Float4(_) => cat_as!(Float4),
            Activation::Int1(_) => cat_as!(Int1),
            Activation::Int2(_) => cat_as!(Int2),
            Activation::Int3(_) => cat_as!(Int3),
            Activation::Bundle(_) => {
                let bundles = parts
                    .into_iter()
                    .map(Activation::bundle)
                    .collect::<Result<Vec<_>, _>>()?;
                Activation::Bundle(Bundle::cat(bundles)?)
            }
        })
    }

    /// The same values on `device`.
    pub fn to_device(self, device: &Device) -> Activation {
        map_variant!(self, t => t.to_device(device), b => b.map(|p| p.to_device(device)))
    }

    /// On the receiving worker's thread, a tensor another worker thread sent, as this thread's
    /// own on `device` ([`Handoff::incoming`]).
    pub(crate) fn receive(self, device: &Device, handoff: Handoff) -> Activation {
        map_variant!(self, t => handoff.incoming(t, device), b => b.map(|p| p.receive(device, handoff)))
    }

    /// On the sending worker's thread, after its last write: what to send to another worker
    /// thread ([`Handoff::outgoing`]).
    pub(crate) fn hand_off(self, handoff: Handoff) -> Activation {
        map_variant!(self, t => handoff.outgoing(t), b => b.map(|p| p.hand_off(handoff)))
    }

    /// The float tensors in `dtype` (on the graph: the cast's backward casts the gradient
    /// back), int tensors as they are.
    pub(crate) fn cast_floats(self, dtype: FloatDType) -> Activation {
        match self {
            Activation::Float1(t) => Activation::Float1(cast(t, dtype)),
            Activation::Float2(t) => Activation::Float2(cast(t, dtype)),
            Activation::Float3(t) => Activation::Float3(cast(t, dtype)),
            Activation::Float4(t) => Activation::Float4(cast(t, dtype)),
            Activation::Bundle(b) => Activation::Bundle(b.map(|p| p.cast_floats(dtype))),
            int => int,
        }
    }

    /// The float tensors in the dtype of `like`'s (a gradient in its value's dtype); as it is
    /// when `like` has no float tensor.
    pub(crate) fn cast_like(self, like: &Activation) -> Activation {
        match like.float_dtype() {
            Some(dtype) if self.float_dtype() != Some(dtype) => self.cast_floats(dtype.into()),
            _ => self,
        }
    }

    /// The dtype of the float tensor (a bundle's: its first float part's); `None` for int
    /// tensors.
    pub fn float_dtype(&self) -> Option<DType> {
        match self {
            Activation::Float1(t) => Some(t.dtype()),
            Activation::Float2(t) => Some(t.dtype()),
            Activation::Float3(t) => Some(t.dtype()),
            Activation::Float4(t) => Some(t.dtype()),
            Activation::Bundle(b) => b.parts().iter().find_map(|p| p.value.float_dtype()),
            _ => None,
        }
    }

    /// Without autodiff (no graph, no gradient): the plain tensor that crosses a thread or
    /// process boundary.
    pub fn plain(self) -> Activation {
        map_variant!(self, t => adapter::plain(t), b => b.map(Activation::plain))
    }

    /// All values as `f64`, flattened (for tests, metrics and verification).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        each_variant!(self, t => adapter::plain(t.clone()).into_data().convert::<f64>().try_to_vec::<f64>().expect("f64 data"), b => b.parts().iter().flat_map(|p| p.value.to_f64_vec()).collect())
    }
}

/// `t` in `dtype`; no op when it is.
fn cast<const D: usize>(t: Tensor<D>, dtype: FloatDType) -> Tensor<D> {
    if t.dtype() == DType::from(dtype) {
        t
    } else {
        t.cast(dtype)
    }
}

/// The row counts of `rows` rows cut into `parts` contiguous parts: sizes differ by at most one,
/// the first `rows % parts` parts one row longer (`torch.tensor_split`, `numpy.array_split`).
///
/// ```
/// use pipetrain_engine::chunk_rows;
/// assert_eq!(chunk_rows(7, 4), [2, 2, 2, 1]);
/// assert_eq!(chunk_rows(250, 16).iter().filter(|&&r| r == 16).count(), 10); // 10 × 16 + 6 × 15
/// ```
pub fn chunk_rows(rows: usize, parts: usize) -> Vec<usize> {
    let (base, extra) = (rows / parts.max(1), rows % parts.max(1));
    (0..parts).map(|i| base + usize::from(i < extra)).collect()
}

impl fmt::Display for Activation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Activation::Bundle(b) = self {
            return b.fmt(f);
        }
        write!(f, "{} {:?}", self.describe(), self.dims())
    }
}
