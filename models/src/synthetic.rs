//! Seeded synthetic data: the same bytes on every machine for the same seed (ChaCha8).

use burn::prelude::*;
use burn::tensor::{Int, TensorData};
use pipetrain_engine::Batch;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;

/// Classification batch number `index` of a run seeded with `seed`: `x ~ N(0, 1)` of shape
/// `[batch, features]`, labels uniform in `0..classes`. Batches are independent of each other
/// and of the order they are asked for.
///
/// ```
/// use burn::prelude::*;
/// use pipetrain_models::synthetic::classification;
/// let a = classification(7, 3, 8, 4, 10, &Device::flex());
/// let b = classification(7, 3, 8, 4, 10, &Device::flex());
/// assert_eq!(a.inputs.to_f64_vec(), b.inputs.to_f64_vec());
/// assert_eq!(a.inputs.dims(), vec![8, 4]);
/// ```
pub fn classification(
    seed: u64,
    index: u64,
    batch: usize,
    features: usize,
    classes: usize,
    device: &Device,
) -> Batch {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(index);
    let x: Vec<f32> = (0..batch * features)
        .map(|_| rng.sample(StandardNormal))
        .collect();
    let y: Vec<i64> = (0..batch)
        .map(|_| rng.random_range(0..classes as i64))
        .collect();
    Batch {
        inputs: Tensor::<2>::from_data(TensorData::new(x, [batch, features]), device).into(),
        targets: Tensor::<1, Int>::from_data(TensorData::new(y, [batch]), device).into(),
    }
}

/// Regression batch: `x ~ N(0, 1)` of `[batch, features]`, targets `~ N(0, 1)` of
/// `[batch, outputs]`.
pub fn regression(
    seed: u64,
    index: u64,
    batch: usize,
    features: usize,
    outputs: usize,
    device: &Device,
) -> Batch {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_0f7e);
    rng.set_stream(index);
    let mut normal =
        |n: usize| -> Vec<f32> { (0..n).map(|_| rng.sample(StandardNormal)).collect() };
    let x = normal(batch * features);
    let y = normal(batch * outputs);
    Batch {
        inputs: Tensor::<2>::from_data(TensorData::new(x, [batch, features]), device).into(),
        targets: Tensor::<2>::from_data(TensorData::new(y, [batch, outputs]), device).into(),
    }
}
