//! What crosses the wire: a small header on every message that says which local inbox it goes
//! to, and the body, in one of two framings.
//!
//! ```text
//!   bytes  (tag TAG):         body | u32 LE × 6: to (worker rank, or PROCESS) · channel · epoch · a · b · from
//!   values (tag TAG_HEAD):    u32 LE × 6 as above | u64 LE: value count
//!          (tag TAG_VALUES):  the f32 values, as MPI floats, next from the same sender
//! ```
//! Byte bodies (activations, control messages, failure notices) carry the header after the body
//! (after, not before: the body's buffer takes it without a copy). `f32` bodies (the
//! collectives' gradients and sums) travel as they are, straight from and into the `Vec<f32>` a
//! tensor's data comes in or goes out as: their header goes ahead in its own small message, and
//! MPI's order between one sender's messages of one tag pairs each header with its values.
//!
//! The (to, channel, epoch) triple is a [`Route`]: a worker's transport, its stage-group collective, a
//! tie pair, or the process itself (control messages, failure notices). The epoch counts the
//! fabric's connections (every process connects the same number of times: at start and after
//! each checkpoint load), so a message sent over fresh links is never delivered to the stale
//! inbox of links being replaced. `a` and `b` key the
//! message inside its inbox: (flow, micro-batch) for the transport, (call, member and tensor) for a
//! collective. Bodies are plain little-endian values.

use std::sync::Arc;

use burn::prelude::*;
use burn::tensor::{DType, Int, bf16};

use crate::error::EngineError;
use crate::model::activation::Activation;

/// The MPI tag of byte messages (header after the body).
pub(crate) const TAG: i32 = 7;

/// The MPI tag of the header of an `f32` message; its values follow on [`TAG_VALUES`].
pub(crate) const TAG_HEAD: i32 = 8;

/// The MPI tag of an `f32` message's values.
pub(crate) const TAG_VALUES: i32 = 9;

/// `Route::to` of messages for the process itself rather than one of its workers.
pub(crate) const PROCESS: u32 = u32::MAX;

/// Channels: what a message is for.
pub(crate) mod channel {
    /// Activations and input gradients between neighbouring stages.
    pub const TRANSPORT: u32 = 0;
    /// The stage group's collective.
    pub const COLLECTIVE: u32 = 1;
    /// Process-level control: broadcasts and gathers of the launcher.
    pub const CONTROL: u32 = u32::MAX - 1;
    /// The group of a replica's stages (the gradient guard's norm).
    pub const STAGES: u32 = u32::MAX - 2;
    /// A failure notice: the sending process failed, the body says how.
    pub const FAILURE: u32 = u32::MAX;
    /// The sending process has reported its error and ends (an error exit): the process whose
    /// failure it learned of may end too.
    pub const ENDED: u32 = u32::MAX - 3;

    /// The pair group of tie `tie`.
    pub fn tie(tie: usize) -> u32 {
        2 + tie as u32
    }
}

/// Which inbox of which process a message goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Route {
    /// The receiving worker's rank in the world (replica-major), or [`PROCESS`].
    pub to: u32,
    /// What it is for (see [`channel`]).
    pub channel: u32,
    /// The connection it belongs to (0 for process routes).
    pub epoch: u32,
}

impl Route {
    /// The process's own route for `channel`.
    pub fn process(channel: u32) -> Self {
        Self {
            to: PROCESS,
            channel,
            epoch: 0,
        }
    }
}

/// One message, decoded.
#[derive(Clone, Debug)]
pub(crate) struct Envelope {
    /// Where it goes.
    pub route: Route,
    /// First key inside the inbox.
    pub a: u32,
    /// Second key inside the inbox.
    pub b: u32,
    /// The sending process's rank.
    pub from: u32,
    /// The payload.
    pub body: Body,
}

/// A message's payload.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Body {
    /// Bytes: activations, control messages, failure notices.
    Bytes(Vec<u8>),
    /// `f32` values: a collective's contributions and sums, sent without conversion.
    Values(Vec<f32>),
    /// `f32` values that several messages send, or the sender keeps: the values arrive as
    /// [`Body::Values`]; the sender gets its buffer back from the `Arc` once every send is done.
    Shared(Arc<Vec<f32>>),
}

impl Body {
    /// The payload as bytes (`f32` values viewed as their little-endian bytes).
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Body::Bytes(b) => b,
            Body::Values(v) => bytemuck::cast_slice(v),
            Body::Shared(v) => bytemuck::cast_slice(v),
        }
    }

    /// The payload's bytes, owned (a copy for `f32` values).
    pub fn into_bytes(self) -> Vec<u8> {
        match self {
            Body::Bytes(b) => b,
            Body::Values(v) => bytemuck::cast_slice(&v).to_vec(),
            Body::Shared(v) => bytemuck::cast_slice(&v).to_vec(),
        }
    }
}

impl From<Vec<u8>> for Body {
    fn from(bytes: Vec<u8>) -> Self {
        Body::Bytes(bytes)
    }
}

/// What the communication thread sends for one envelope.
pub(crate) enum Frames {
    /// One message on [`TAG`].
    Bytes(Vec<u8>),
    /// The header on [`TAG_HEAD`], then the values on [`TAG_VALUES`].
    Values { head: Vec<u8>, values: Values },
}

/// The values of a [`Frames::Values`], owned or shared.
pub(crate) enum Values {
    Owned(Vec<f32>),
    Shared(Arc<Vec<f32>>),
}

impl std::ops::Deref for Values {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        match self {
            Values::Owned(v) => v,
            Values::Shared(v) => v,
        }
    }
}

const HEADER: usize = 6 * 4;

impl Envelope {
    fn header_words(&self) -> [u32; 6] {
        let r = self.route;
        [r.to, r.channel, r.epoch, self.a, self.b, self.from]
    }

    fn from_words(words: [u32; 6], body: Body) -> Self {
        let [to, channel, epoch, a, b, from] = words;
        Self {
            route: Route { to, channel, epoch },
            a,
            b,
            from,
            body,
        }
    }

    /// What goes on the wire: a byte body with the header appended, or an `f32` body's header
    /// and its values.
    pub fn frames(self) -> Frames {
        let words = self.header_words();
        let values = match self.body {
            Body::Bytes(mut out) => {
                out.reserve_exact(HEADER);
                for v in words {
                    out.extend_from_slice(&v.to_le_bytes());
                }
                return Frames::Bytes(out);
            }
            Body::Values(v) => Values::Owned(v),
            Body::Shared(v) => Values::Shared(v),
        };
        let mut head = Vec::with_capacity(HEADER + 8);
        for v in words {
            head.extend_from_slice(&v.to_le_bytes());
        }
        head.extend_from_slice(&(values.len() as u64).to_le_bytes());
        Frames::Values { head, values }
    }

    /// Reads a byte message of [`frames`](Self::frames) ([`TAG`]).
    pub fn decode(mut bytes: Vec<u8>) -> Result<Self, EngineError> {
        if bytes.len() < HEADER {
            return Err(EngineError::MalformedMessage(format!(
                "a message of {} bytes is shorter than the {HEADER}-byte header",
                bytes.len()
            )));
        }
        let at = bytes.len() - HEADER;
        let words = read_words(&bytes[at..]);
        bytes.truncate(at);
        Ok(Self::from_words(words, Body::Bytes(bytes)))
    }

    /// Reads an `f32` message's header ([`TAG_HEAD`]): the envelope (with no values yet) and
    /// how many values follow.
    pub fn decode_head(bytes: &[u8]) -> Result<(Self, usize), EngineError> {
        if bytes.len() != HEADER + 8 {
            return Err(EngineError::MalformedMessage(format!(
                "a value header of {} bytes, not {}",
                bytes.len(),
                HEADER + 8
            )));
        }
        let words = read_words(&bytes[..HEADER]);
        let count = u64::from_le_bytes(bytes[HEADER..].try_into().expect("8 bytes"));
        Ok((
            Self::from_words(words, Body::Values(Vec::new())),
            count as usize,
        ))
    }
}

/// The six header words at the start of `bytes`.
fn read_words(bytes: &[u8]) -> [u32; 6] {
    std::array::from_fn(|i| u32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().expect("4")))
}

/// `f32` values as little-endian bytes.
pub(crate) fn f32_bytes(values: &[f32]) -> Vec<u8> {
    bytemuck::cast_slice::<f32, u8>(values).to_vec()
}

/// The `f32` values of [`f32_bytes`].
pub(crate) fn f32_values(bytes: &[u8]) -> Result<Vec<f32>, EngineError> {
    if bytes.len() % 4 != 0 {
        return Err(EngineError::MalformedMessage(format!(
            "{} bytes are not a whole number of f32 values",
            bytes.len()
        )));
    }
    Ok(bytemuck::pod_collect_to_vec::<u8, f32>(bytes))
}

/// Kinds of [`Activation`] on the wire: float or int, and the rank.
const FLOAT: u32 = 0;
const INT: u32 = 1;
const BUNDLE: u32 = 2;
/// A bf16 float tensor (mixed precision): 2 bytes a value, half an f32 one's.
const FLOAT_BF16: u32 = 3;

/// An activation as bytes: kind, rank, dims (u32 each), then the values (`f32`, `bf16` for a
/// bf16 tensor, or `i64` for int tensors). Float values are sent as they are, in their own
/// dtype, so the receiver gets the same bits and the same dtype. A bundle: see
/// [`bundle_wire`](super::bundle_wire).
pub(crate) fn activation_bytes(activation: Activation) -> Vec<u8> {
    if let Activation::Bundle(bundle) = activation {
        return super::bundle_wire::bundle_bytes(bundle, BUNDLE);
    }
    let dims = activation.dims();
    let (kind, values): (u32, Vec<u8>) = match activation.plain() {
        Activation::Float1(t) => floats(t.into_data()),
        Activation::Float2(t) => floats(t.into_data()),
        Activation::Float3(t) => floats(t.into_data()),
        Activation::Float4(t) => floats(t.into_data()),
        Activation::Int1(t) => (INT, ints(t.into_data())),
        Activation::Int2(t) => (INT, ints(t.into_data())),
        Activation::Int3(t) => (INT, ints(t.into_data())),
        Activation::Bundle(_) => unreachable!("encoded above"),
    };
    let mut out = Vec::with_capacity(8 + 4 * dims.len() + values.len());
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
    for d in &dims {
        out.extend_from_slice(&(*d as u32).to_le_bytes());
    }
    out.extend_from_slice(&values);
    out
}

/// A float tensor's kind on the wire and its values' bytes: bf16 as bf16, any other as `f32`.
fn floats(data: TensorData) -> (u32, Vec<u8>) {
    if data.dtype() == DType::BF16 {
        let values = data.try_into_vec::<bf16>().expect("bf16 data");
        return (
            FLOAT_BF16,
            bytemuck::cast_slice::<bf16, u8>(&values).to_vec(),
        );
    }
    let values = data
        .convert::<f32>()
        .try_into_vec::<f32>()
        .expect("f32 after convert");
    (FLOAT, f32_bytes(&values))
}

fn ints(data: TensorData) -> Vec<u8> {
    let values = data
        .convert::<i64>()
        .try_into_vec::<i64>()
        .expect("i64 after convert");
    bytemuck::cast_slice::<i64, u8>(&values).to_vec()
}

/// The activation of [`activation_bytes`], on `device`.
pub(crate) fn activation_from(bytes: &[u8], device: &Device) -> Result<Activation, EngineError> {
    let bad = |why: String| EngineError::MalformedMessage(format!("an activation message: {why}"));
    let word = |i: usize| -> Result<u32, EngineError> {
        bytes
            .get(4 * i..4 * i + 4)
            .map(|w| u32::from_le_bytes(w.try_into().expect("4")))
            .ok_or_else(|| bad(format!("{} bytes end inside the header", bytes.len())))
    };
    let (kind, rank) = (word(0)?, word(1)? as usize);
    if kind == BUNDLE {
        return super::bundle_wire::bundle_from(bytes, rank, device);
    }
    let dims: Vec<usize> = (0..rank)
        .map(|i| word(2 + i).map(|d| d as usize))
        .collect::<Result<_, _>>()?;
    let values = &bytes[4 * (2 + rank)..];
    let count: usize = dims.iter().product();
    let width = match kind {
        FLOAT => 4,
        FLOAT_BF16 => 2,
        _ => 8,
    };
    if values.len() != count * width {
        return Err(bad(format!(
            "dims {dims:?} need {} value bytes, got {}",
            count * width,
            values.len()
        )));
    }
    let activation = match (kind, rank) {
        (FLOAT | FLOAT_BF16, r) => {
            let (data, dtype) = if kind == FLOAT {
                (
                    TensorData::new(f32_values(values)?, dims.clone()),
                    DType::F32,
                )
            } else {
                let values = bytemuck::pod_collect_to_vec::<u8, bf16>(values);
                (TensorData::new(values, dims.clone()), DType::BF16)
            };
            let to = (device, dtype);
            match r {
                1 => Tensor::<1>::from_data(data, to).into(),
                2 => Tensor::<2>::from_data(data, to).into(),
                3 => Tensor::<3>::from_data(data, to).into(),
                4 => Tensor::<4>::from_data(data, to).into(),
                r => return Err(bad(format!("float rank {r} (1–4 travel)"))),
            }
        }
        (INT, r) => {
            let data = TensorData::new(bytemuck::pod_collect_to_vec::<u8, i64>(values), dims);
            match r {
                1 => Tensor::<1, Int>::from_data(data, device).into(),
                2 => Tensor::<2, Int>::from_data(data, device).into(),
                3 => Tensor::<3, Int>::from_data(data, device).into(),
                r => return Err(bad(format!("int rank {r} (1–3 travel)"))),
            }
        }
        (k, _) => return Err(bad(format!("unknown kind {k}"))),
    };
    Ok(activation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_and_activations_round_trip() {
        let e = Envelope {
            route: Route {
                to: 3,
                channel: channel::tie(1),
                epoch: 2,
            },
            a: 1,
            b: 9,
            from: 2,
            body: Body::Bytes(vec![1, 2, 3]),
        };
        let Frames::Bytes(bytes) = e.clone().frames() else {
            panic!("a byte body is one frame")
        };
        let d = Envelope::decode(bytes).unwrap();
        assert_eq!(
            (d.route, d.a, d.b, d.from, d.body),
            (e.route, 1, 9, 2, e.body.clone())
        );
        assert!(Envelope::decode(vec![0; 7]).is_err());
        let v = Envelope {
            body: Body::Values(vec![1.5, f32::NAN, -0.0]),
            ..e.clone()
        };
        let Frames::Values { head, values } = v.clone().frames() else {
            panic!("an f32 body is two frames")
        };
        let (d, count) = Envelope::decode_head(&head).unwrap();
        assert_eq!((d.route, d.a, d.b, d.from, count), (e.route, 1, 9, 2, 3));
        assert_eq!(bytemuck::cast_slice::<f32, u8>(&values), v.body.as_bytes());
        let shared = Arc::new(vec![2.0f32; 3]);
        let s = Envelope {
            body: Body::Shared(Arc::clone(&shared)),
            ..e.clone()
        };
        let Frames::Values { values, .. } = s.frames() else {
            panic!("a shared body is two frames")
        };
        assert_eq!(&values[..], &shared[..]);
        drop(values);
        assert!(
            Arc::try_unwrap(shared).is_ok(),
            "the frames let go of a shared body"
        );
        assert!(Envelope::decode_head(&head[1..]).is_err());

        let device = Device::flex();
        let x: Activation = Tensor::<2>::from_data([[1.5f32, -0.1], [3e-9, 7.0]], &device).into();
        let y = activation_from(&activation_bytes(x.clone()), &device).unwrap();
        assert_eq!(x.to_f64_vec(), y.to_f64_vec());
        assert_eq!(y.dims(), vec![2, 2]);
        let ids: Activation = Tensor::<1, Int>::from_data([4i64, 0, 9], &device).into();
        let back = activation_from(&activation_bytes(ids.clone()), &device).unwrap();
        assert_eq!(back.to_f64_vec(), vec![4.0, 0.0, 9.0]);
        assert!(!back.is_float());
        assert!(activation_from(&[0, 0, 0], &device).is_err());
        // bf16 travels as bf16: the same bits and dtype, half the value bytes.
        let wide = Tensor::<2>::from_data([[1.5f32, -0.1], [3e-9, 7.0]], &device);
        let narrow: Activation = wide.clone().cast(burn::tensor::FloatDType::BF16).into();
        let bytes = activation_bytes(narrow.clone());
        assert_eq!(bytes.len(), 8 + 2 * 4 + 2 * 4);
        assert!(bytes.len() < activation_bytes(wide.into()).len());
        let back = activation_from(&bytes, &device).unwrap();
        assert_eq!(back.float_dtype(), Some(DType::BF16));
        assert_eq!(back.to_f64_vec(), narrow.to_f64_vec());
        assert!(activation_from(&bytes[..bytes.len() - 1], &device).is_err());
    }
}
