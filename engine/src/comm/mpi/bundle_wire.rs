//! A [`Bundle`] on the wire: its kind word, its part count, then per part the name's length
//! (u32) and UTF-8 bytes, the differentiable flag (u32), the part's byte length (u64) and the
//! part as an activation message ([`activation_bytes`]), so bundles nest.

use burn::prelude::*;

use super::wire::{activation_bytes, activation_from};
use crate::error::EngineError;
use crate::model::activation::Activation;
use crate::model::bundle::{Bundle, Part};

/// `bundle` as bytes, opening with `kind`.
pub(crate) fn bundle_bytes(bundle: Bundle, kind: u32) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&(bundle.len() as u32).to_le_bytes());
    for part in bundle.into_parts() {
        out.extend_from_slice(&(part.name.len() as u32).to_le_bytes());
        out.extend_from_slice(part.name.as_bytes());
        out.extend_from_slice(&u32::from(part.differentiable).to_le_bytes());
        let body = activation_bytes(part.value);
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend_from_slice(&body);
    }
    out
}

/// The bundle of [`activation_bytes`] after its kind and part count (`parts`), on `device`.
pub(crate) fn bundle_from(
    bytes: &[u8],
    parts: usize,
    device: &Device,
) -> Result<Activation, EngineError> {
    let bad = |why: &str| EngineError::MalformedMessage(format!("a bundle message: {why}"));
    let mut at = 8;
    let mut take = |n: usize| -> Result<&[u8], EngineError> {
        let slice = bytes
            .get(at..at + n)
            .ok_or_else(|| bad("it ends inside a part"))?;
        at += n;
        Ok(slice)
    };
    let mut bundle = Bundle::new();
    for _ in 0..parts {
        let len = u32::from_le_bytes(take(4)?.try_into().expect("4")) as usize;
        let name = String::from_utf8(take(len)?.to_vec()).map_err(|_| bad("a name not UTF-8"))?;
        let differentiable = u32::from_le_bytes(take(4)?.try_into().expect("4")) == 1;
        let body = u64::from_le_bytes(take(8)?.try_into().expect("8")) as usize;
        let value = activation_from(take(body)?, device)?;
        bundle = bundle.with_part(Part {
            name,
            value,
            differentiable,
        });
    }
    Ok(bundle.into())
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Int, TensorData};

    use super::*;

    #[test]
    fn a_bundle_round_trips_with_names_flags_and_bits() {
        let device = Device::flex();
        let hidden = Tensor::<3>::from_data(
            TensorData::new(vec![0.1f32, -2.5, 3.25, 1e-30, 7.0, -0.0], [1, 2, 3]),
            &device,
        );
        let ids = Tensor::<2, Int>::from_data(TensorData::new(vec![3i64, 9], [1, 2]), &device);
        let inner = Bundle::new().with_constant("mask", Tensor::<2>::ones([1, 2], &device));
        let sent: Activation = Bundle::new()
            .with("hidden", hidden)
            .with("positions", ids)
            .with("nested", Activation::from(inner))
            .into();
        let got = activation_from(&activation_bytes(sent.clone()), &device).unwrap();
        assert_eq!(got.to_string(), sent.to_string());
        assert_eq!(got.to_f64_vec(), sent.to_f64_vec());
        let parts = got.bundle().unwrap().into_parts();
        let flags: Vec<bool> = parts.iter().map(|p| p.differentiable).collect();
        assert_eq!(flags, [true, false, false]);
        let bytes = activation_bytes(
            Bundle::new()
                .with("x", Tensor::<1>::ones([4], &device))
                .into(),
        );
        let err = activation_from(&bytes[..bytes.len() - 3], &device).unwrap_err();
        assert!(err.to_string().contains("bundle message"), "{err}");
    }
}
