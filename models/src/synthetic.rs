//! Seeded synthetic data: the same bytes on every machine for the same seed (ChaCha8).

use burn::prelude::*;
use burn::tensor::{Int, TensorData};
use pipetrain_engine::Batch;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;

/// Classification batch number `index` of a run seeded with `seed`: a Gaussian mixture. Each
/// row draws a uniform class `c` and `x = centre[c] + N(0, 1)` of shape `[batch, features]`,
/// with class centres drawn `N(0, 0.3²)` per feature from `seed` alone; the label is `c`,
/// replaced by a uniform random class for one row in ten (so no model passes ~91 % held-out
/// accuracy). The classes are far apart in the whole space (`0.3·√(2·features)` noise standard
/// deviations: 13.6 at 1024 features) while each feature stays close to `N(0, 1)`, the inputs of
/// the PyTorch peer workload, on which the benchmarks' compute depends: a short run visibly
/// learns it. Batches are independent of each other and of the order they are asked for.
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
    let centres = centres(seed, features, classes);
    let mut x = Vec::with_capacity(batch * features);
    let mut y = Vec::with_capacity(batch);
    for _ in 0..batch {
        let class = rng.random_range(0..classes.max(1));
        let centre = &centres[class * features..(class + 1) * features];
        x.extend(
            centre
                .iter()
                .map(|c| c + rng.sample::<f32, _>(StandardNormal)),
        );
        // One label in ten is noise: a uniform random class, whatever x says.
        let label = match rng.random_range(0..10) {
            0 => rng.random_range(0..classes.max(1)),
            _ => class,
        };
        y.push(label as i64);
    }
    Batch {
        inputs: Tensor::<2>::from_data(TensorData::new(x, [batch, features]), device).into(),
        targets: Tensor::<1, Int>::from_data(TensorData::new(y, [batch]), device).into(),
    }
}

/// How far apart the class centres of [`classification`] are, per feature: each centre is
/// `N(0, CENTRE_SCALE²)` per feature, so two classes are `CENTRE_SCALE·√(2·features)` noise
/// standard deviations apart. 0.1 was too close for MLP-8x1024 to separate in 20 steps.
const CENTRE_SCALE: f32 = 0.3;

/// The class centres of [`classification`]: `classes` rows of `features` values, drawn from
/// `seed` alone (a stream no batch uses).
fn centres(seed: u64, features: usize, classes: usize) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(u64::MAX);
    (0..features * classes)
        .map(|_| CENTRE_SCALE * rng.sample::<f32, _>(StandardNormal))
        .collect()
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

/// Image classification batch: `[batch, channels, side, side]` images and labels uniform in
/// `0..classes`. Each class shifts every pixel of channel `c` by its own mean `μ[class][c]`
/// (drawn `N(0, 1)` once per `seed`, the same for every batch of the run) on top of `N(0, 1)`
/// noise, so a model that pools globally can learn the labels.
///
/// ```
/// use burn::prelude::*;
/// use pipetrain_models::synthetic::images;
/// let a = images(7, 3, 4, 2, 8, 3, &Device::flex());
/// assert_eq!(a.inputs.dims(), vec![4, 2, 8, 8]);
/// assert_eq!(a.targets.dims(), vec![4]);
/// assert_eq!(a.inputs.to_f64_vec(), images(7, 3, 4, 2, 8, 3, &Device::flex()).inputs.to_f64_vec());
/// ```
pub fn images(
    seed: u64,
    index: u64,
    batch: usize,
    channels: usize,
    side: usize,
    classes: usize,
    device: &Device,
) -> Batch {
    let mut means = ChaCha8Rng::seed_from_u64(seed ^ 0x1a6e_5eed);
    let mu: Vec<f32> = (0..classes * channels)
        .map(|_| means.sample(StandardNormal))
        .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x1a6e_da7a);
    rng.set_stream(index);
    let y: Vec<i64> = (0..batch)
        .map(|_| rng.random_range(0..classes as i64))
        .collect();
    let pixels = side * side;
    let mut x = Vec::with_capacity(batch * channels * pixels);
    for &label in &y {
        for c in 0..channels {
            let shift = mu[label as usize * channels + c];
            x.extend((0..pixels).map(|_| shift + rng.sample::<f32, _>(StandardNormal)));
        }
    }
    Batch {
        inputs: Tensor::<4>::from_data(TensorData::new(x, [batch, channels, side, side]), device)
            .into(),
        targets: Tensor::<1, Int>::from_data(TensorData::new(y, [batch]), device).into(),
    }
}

/// Language-modelling batch: `[batch, context]` token ids and their next tokens (the same
/// sequences shifted by one), both rank-2 int.
///
/// The sequences come from a Markov chain fixed by `seed`: every token `v` has a successor
/// `s(v)` (uniform, drawn once per seed); the first token is uniform, and each next token is
/// `s(previous)` with probability 3/4, else uniform in `0..vocab`. The best achievable loss is
/// the chain's entropy, well below the `ln(vocab)` of a uniform guess.
///
/// ```
/// use burn::prelude::*;
/// use pipetrain_models::synthetic::tokens;
/// let b = tokens(7, 0, 2, 8, 16, &Device::flex());
/// assert_eq!(b.inputs.dims(), vec![2, 8]);
/// assert_eq!(b.targets.dims(), vec![2, 8]);
/// let (x, y) = (b.inputs.to_f64_vec(), b.targets.to_f64_vec());
/// assert_eq!(x[1..8], y[0..7]); // targets are the inputs shifted by one
/// ```
pub fn tokens(
    seed: u64,
    index: u64,
    batch: usize,
    context: usize,
    vocab: usize,
    device: &Device,
) -> Batch {
    let mut chain = ChaCha8Rng::seed_from_u64(seed ^ 0x70c3_c4a1);
    let successor: Vec<i64> = (0..vocab)
        .map(|_| chain.random_range(0..vocab as i64))
        .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x70c3_da7a);
    rng.set_stream(index);
    let (mut x, mut y) = (
        Vec::with_capacity(batch * context),
        Vec::with_capacity(batch * context),
    );
    for _ in 0..batch {
        let mut token = rng.random_range(0..vocab as i64);
        for _ in 0..context {
            let next = if rng.random_bool(0.75) {
                successor[token as usize]
            } else {
                rng.random_range(0..vocab as i64)
            };
            x.push(token);
            y.push(next);
            token = next;
        }
    }
    Batch {
        inputs: Tensor::<2, Int>::from_data(TensorData::new(x, [batch, context]), device).into(),
        targets: Tensor::<2, Int>::from_data(TensorData::new(y, [batch, context]), device).into(),
    }
}
