//! What crosses the wire: one MPI tag, and a small header after every message's body that says
//! which local inbox it goes to (after, not before: the body's buffer takes it without a copy).
//!
//! ```text
//!   body | u32 LE × 6: to (worker rank, or PROCESS) · channel · epoch · a · b · from (process rank)
//! ```
//! The (to, channel, epoch) triple is a [`Route`]: a worker's transport, its stage-group collective, a
//! tie pair, or the process itself (control messages, failure notices). The epoch counts the
//! fabric's connections (every process connects the same number of times: at start and after
//! each checkpoint load), so a message sent over fresh links is never delivered to the stale
//! inbox of links being replaced. `a` and `b` key the
//! message inside its inbox: (flow, micro-batch) for the transport, (call, member) for a
//! collective. Bodies are plain little-endian values.

use burn::prelude::*;
use burn::tensor::Int;

use super::error::MpiError;
use crate::activation::Activation;

/// The one MPI tag pipetrain's messages carry.
pub(crate) const TAG: i32 = 7;

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
    /// A failure notice: the sending process failed, the body says how.
    pub const FAILURE: u32 = u32::MAX;

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
    pub body: Vec<u8>,
}

const HEADER: usize = 6 * 4;

impl Envelope {
    /// The bytes on the wire: the body's buffer with the header appended.
    pub fn encode(self) -> Vec<u8> {
        let mut out = self.body;
        out.reserve_exact(HEADER);
        let r = self.route;
        for v in [r.to, r.channel, r.epoch, self.a, self.b, self.from] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out
    }

    /// Reads the bytes of [`encode`](Self::encode).
    pub fn decode(mut bytes: Vec<u8>) -> Result<Self, MpiError> {
        if bytes.len() < HEADER {
            return Err(MpiError::Wire(format!(
                "a message of {} bytes is shorter than the {HEADER}-byte header",
                bytes.len()
            )));
        }
        let at = bytes.len() - HEADER;
        let word =
            |i: usize| u32::from_le_bytes(bytes[at + 4 * i..at + 4 * i + 4].try_into().expect("4"));
        let (to, channel, epoch) = (word(0), word(1), word(2));
        let (a, b, from) = (word(3), word(4), word(5));
        bytes.truncate(at);
        let body = bytes;
        Ok(Self {
            route: Route { to, channel, epoch },
            a,
            b,
            from,
            body,
        })
    }
}

/// `f32` values as little-endian bytes.
pub(crate) fn f32_bytes(values: &[f32]) -> Vec<u8> {
    bytemuck::cast_slice::<f32, u8>(values).to_vec()
}

/// The `f32` values of [`f32_bytes`].
pub(crate) fn f32_values(bytes: &[u8]) -> Result<Vec<f32>, MpiError> {
    if bytes.len() % 4 != 0 {
        return Err(MpiError::Wire(format!(
            "{} bytes are not a whole number of f32 values",
            bytes.len()
        )));
    }
    Ok(bytemuck::pod_collect_to_vec::<u8, f32>(bytes))
}

/// Kinds of [`Activation`] on the wire: float or int, and the rank.
const FLOAT: u32 = 0;
const INT: u32 = 1;

/// An activation as bytes: kind, rank, dims (u32 each), then the values (`f32`, or `i64` for
/// int tensors). Float values are sent as they are, so the receiver gets the same bits.
pub(crate) fn activation_bytes(activation: Activation) -> Vec<u8> {
    let dims = activation.dims();
    let (kind, values): (u32, Vec<u8>) = match activation.detach() {
        Activation::Float1(t) => (FLOAT, floats(t.into_data())),
        Activation::Float2(t) => (FLOAT, floats(t.into_data())),
        Activation::Float3(t) => (FLOAT, floats(t.into_data())),
        Activation::Float4(t) => (FLOAT, floats(t.into_data())),
        Activation::Int1(t) => (INT, ints(t.into_data())),
        Activation::Int2(t) => (INT, ints(t.into_data())),
        Activation::Int3(t) => (INT, ints(t.into_data())),
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

fn floats(data: TensorData) -> Vec<u8> {
    let values = data
        .convert::<f32>()
        .try_into_vec::<f32>()
        .expect("f32 after convert");
    f32_bytes(&values)
}

fn ints(data: TensorData) -> Vec<u8> {
    let values = data
        .convert::<i64>()
        .try_into_vec::<i64>()
        .expect("i64 after convert");
    bytemuck::cast_slice::<i64, u8>(&values).to_vec()
}

/// The activation of [`activation_bytes`], on `device`.
pub(crate) fn activation_from(bytes: &[u8], device: &Device) -> Result<Activation, MpiError> {
    let bad = |why: String| MpiError::Wire(format!("an activation message: {why}"));
    let word = |i: usize| -> Result<u32, MpiError> {
        bytes
            .get(4 * i..4 * i + 4)
            .map(|w| u32::from_le_bytes(w.try_into().expect("4")))
            .ok_or_else(|| bad(format!("{} bytes end inside the header", bytes.len())))
    };
    let (kind, rank) = (word(0)?, word(1)? as usize);
    let dims: Vec<usize> = (0..rank)
        .map(|i| word(2 + i).map(|d| d as usize))
        .collect::<Result<_, _>>()?;
    let values = &bytes[4 * (2 + rank)..];
    let count: usize = dims.iter().product();
    let width = if kind == FLOAT { 4 } else { 8 };
    if values.len() != count * width {
        return Err(bad(format!(
            "dims {dims:?} need {} value bytes, got {}",
            count * width,
            values.len()
        )));
    }
    let activation = match (kind, rank) {
        (FLOAT, r) => {
            let data = TensorData::new(f32_values(values)?, dims.clone());
            match r {
                1 => Tensor::<1>::from_data(data, device).into(),
                2 => Tensor::<2>::from_data(data, device).into(),
                3 => Tensor::<3>::from_data(data, device).into(),
                4 => Tensor::<4>::from_data(data, device).into(),
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
            body: vec![1, 2, 3],
        };
        let d = Envelope::decode(e.clone().encode()).unwrap();
        assert_eq!(
            (d.route, d.a, d.b, d.from, d.body),
            (e.route, 1, 9, 2, e.body)
        );
        assert!(Envelope::decode(vec![0; 7]).is_err());

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
    }
}
