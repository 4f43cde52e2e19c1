//! What a run will hold in memory, estimated before anything is allocated, so that a run the
//! machine cannot give it is refused at once: a model of a million-wide layer, ten million
//! layers, a text corpus read from `/dev/zero` or a plan of ten million cells once ran into the
//! OOM killer after minutes.
//!
//! ## What is counted
//! - **the model**, as [`crate::memory`] counts a worker: per parameter, 4 bytes of weight,
//!   4 of gradient and 4 per optimizer slot, once per replica (each holds a copy), once more
//!   for the verification's single-device reference; plus a fixed overhead per layer object;
//! - **activations**: every layer's output for the whole mini-batch (an upper bound over the
//!   schedules: GPipe keeps every micro-batch in flight), with the autodiff graph's copies;
//! - **input data**: a file's bytes, times what the loader makes of each byte ([`DATA_FACTOR`]).
//!
//! ## Against what
//! [`available`]: the memory the kernel says is available (`MemAvailable`), or less under an
//! address-space limit (`ulimit -v`), less what the process has mapped already. Where neither
//! can be read nothing is refused.
//!
//! The estimate is a model, not a measurement: it is meant to refuse what cannot fit by far,
//! not to tell a run that fits from one that almost does.

use crate::trainer::ReferenceModel;

/// Bytes of bookkeeping per layer object besides its tensors (module structs, parameter ids,
/// the autodiff graph's nodes): a generous round figure.
const LAYER_OVERHEAD: u128 = 16 << 10;

/// Memory per byte of a data file once loaded: a text byte becomes an i64 input and an i64
/// target (17 bytes with the file's own); float and image files convert to f32 (at most 4 per
/// byte) beside the bytes read.
pub const DATA_FACTOR: u64 = 17;

/// What a model will hold, in bytes.
#[derive(Clone, Copy, Debug)]
pub struct Estimate {
    /// Parameters of one copy of the model.
    pub params: u128,
    /// Activation values per example (one forward's layer outputs).
    pub activations_per_example: u128,
    /// Layer objects of one copy.
    pub layers: u128,
}

impl Estimate {
    /// The model `model` describes.
    pub fn of(model: &ReferenceModel) -> Self {
        let n = |x: usize| x as u128;
        match model {
            ReferenceModel::Mlp(c) => {
                let (w, h, k) = (n(c.width), n(c.hidden_layers), n(c.classes));
                let first = if h == 0 { k } else { w };
                let params = (n(c.input) + 1) * first + h.saturating_sub(1) * (w + 1) * w;
                let head = if h == 0 { 0 } else { (w + 1) * k };
                Self {
                    params: params + head,
                    // A linear's output and its ReLU's, per hidden layer; the logits.
                    activations_per_example: n(c.input) + 2 * w * h + k,
                    layers: h + 1,
                }
            }
            ReferenceModel::Gpt(c) => {
                let (v, t, d, l, r) = (
                    n(c.vocab),
                    n(c.context),
                    n(c.d_model),
                    n(c.layers),
                    n(c.mlp_ratio),
                );
                let block = (4 + 2 * r) * d * d + (9 + r) * d;
                Self {
                    params: v * d + t * d + l * block + d * v + v + 2 * d,
                    // Per block: the residual stream, q/k/v, attention scores per head, the
                    // MLP's widened hidden layer; the logits.
                    activations_per_example: l * (t * d * (8 + 2 * r) + n(c.heads) * t * t * 2)
                        + t * v * 2,
                    layers: l + 2,
                }
            }
            ReferenceModel::Llama { config: c, context } => {
                let (v, t, d, l, i) = (
                    n(c.vocab),
                    n(*context),
                    n(c.hidden),
                    n(c.layers),
                    n(c.intermediate),
                );
                let (q, kv) = (n(c.heads * c.head_dim), n(c.kv_heads * c.head_dim));
                let bias = |on: bool, width: u128| if on { width } else { 0 };
                let block = d * (q + 2 * kv)
                    + q * d
                    + 3 * d * i
                    + bias(c.qkv_bias, q + 2 * kv)
                    + bias(c.output_bias, d)
                    + bias(c.mlp_bias, 2 * i + d)
                    + 2 * d;
                let head = if c.tie_word_embeddings { 0 } else { d * v };
                Self {
                    params: v * d + l * block + d + head,
                    // Per block: the residual stream and norms, q/k/v and their rotations, the
                    // attention scores per head, the SwiGLU's three wide tensors; the logits.
                    activations_per_example: l
                        * (t * (6 * d + 3 * (q + 2 * kv) + 4 * i) + n(c.heads) * t * t * 2)
                        + t * v * 2,
                    layers: l + 2,
                }
            }
            ReferenceModel::ResNet(c) => {
                let (mut ch, mut side) = (n(c.channels), n(c.image));
                let mut params = 9 * n(c.in_channels) * ch + 4 * ch;
                let mut acts = 3 * ch * side * side;
                // Past 2^100 the answer is "no" whatever follows: stop counting.
                for j in 0..c.blocks {
                    if params > 1 << 100 || acts > 1 << 100 {
                        break;
                    }
                    let down = c.downsample_every > 0 && j > 0 && j % c.downsample_every == 0;
                    let out = if down { 2 * ch } else { ch };
                    if down {
                        params += ch * out;
                        side = side.div_ceil(2);
                    }
                    params += 9 * ch * out + 9 * out * out + 8 * out;
                    acts += 6 * out * side * side;
                    ch = out;
                }
                Self {
                    params: params + (ch + 1) * n(c.classes),
                    activations_per_example: acts + n(c.classes),
                    layers: n(c.blocks) + 2,
                }
            }
            ReferenceModel::UNet(c) => {
                let width = |level: usize| n(c.channels) << level.min(100);
                let mut params = 9 * n(c.in_channels) * width(0);
                let mut acts = width(0) * n(c.image) * n(c.image);
                for level in 0..c.depth.min(100) {
                    let side = n(c.image) >> (level + 1).min(127);
                    params += 2 * (9 * width(level) * width(level + 1) + width(level + 1));
                    acts += 4 * width(level + 1) * side.max(1) * side.max(1);
                }
                Self {
                    params: params + (width(0) + 1) * n(c.classes),
                    activations_per_example: acts + n(c.classes) * n(c.image) * n(c.image),
                    layers: 2 * n(c.depth) + 2,
                }
            }
        }
    }

    /// Bytes to train it on `batch` examples with an optimizer of `slots` state slots per
    /// parameter, over `copies` copies of the model (replicas, plus a reference; a fraction in
    /// one process of a multi-process run).
    pub fn training_bytes(&self, batch: usize, slots: u64, copies: f64) -> u128 {
        let per_param = 4 * (2 + u128::from(slots));
        // The autodiff graph keeps an output and its gradient: twice the values.
        let activations = 2 * 4 * self.activations_per_example * batch as u128;
        let one = self.params * per_param + self.layers * LAYER_OVERHEAD + activations;
        // f64 keeps the magnitude (to 2^1023) where it matters: far past any machine.
        (one as f64 * copies.max(0.0)) as u128
    }
}

/// Where the limit on memory comes from, for the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// The kernel's `MemAvailable`.
    Available,
    /// The address-space limit (`ulimit -v`), less what is mapped already.
    AddressSpace,
}

/// The memory this process can still take, in bytes, and what limits it; `None` when neither
/// `/proc/meminfo` nor `/proc/self/limits` can be read.
pub fn available() -> Option<(u128, Limit)> {
    let field = |text: &str, name: &str| -> Option<u128> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        line[name.len()..].split_whitespace().next()?.parse().ok()
    };
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok();
    let memory = meminfo
        .as_deref()
        .and_then(|m| field(m, "MemAvailable:").or_else(|| field(m, "MemTotal:")))
        .map(|kib| (kib * 1024, Limit::Available));
    let limits = std::fs::read_to_string("/proc/self/limits").ok();
    let status = std::fs::read_to_string("/proc/self/status").ok();
    let address = limits
        .as_deref()
        .and_then(|l| field(l, "Max address space"))
        .map(|limit| {
            let mapped = status
                .as_deref()
                .and_then(|s| field(s, "VmSize:"))
                .map_or(0, |kib| kib * 1024);
            (limit.saturating_sub(mapped), Limit::AddressSpace)
        });
    match (memory, address) {
        (Some(m), Some(a)) => Some(if a.0 < m.0 { a } else { m }),
        (m, a) => m.or(a),
    }
}

/// `bytes` as GiB with one decimal.
pub fn gib(bytes: u128) -> String {
    format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
}

/// Whether `needed` bytes fit; else the sentence that says how much is available and why.
pub fn exceeds(needed: u128) -> Option<String> {
    let (free, limit) = available()?;
    (needed > free).then(|| match limit {
        Limit::Available => format!("more than the {} this machine has available", gib(free)),
        Limit::AddressSpace => format!(
            "more than the {} this process may still map (ulimit -v)",
            gib(free)
        ),
    })
}

/// Refuses a model that this machine cannot train: `batch` examples a step, an optimizer of
/// `slots` state slots per parameter, `copies` copies of the model in this process (replicas,
/// plus `--verify`'s reference); `sizes` names the settings that size the model, in the front
/// end's words, for the remedy.
///
/// # Errors
/// [`CommandError::TooLargeToTrain`](crate::CommandError::TooLargeToTrain) (usage): the
/// estimate and the memory available.
pub fn check_training(
    model: &ReferenceModel,
    batch: usize,
    slots: u64,
    copies: f64,
    sizes: &str,
) -> Result<(), crate::Error> {
    let estimate = Estimate::of(model);
    let needed = estimate.training_bytes(batch, slots, copies);
    match exceeds(needed) {
        None => Ok(()),
        Some(why) => Err(crate::Error::Command(
            crate::CommandError::TooLargeToTrain {
                model: model.describe(),
                needed,
                params: estimate.params,
                activations_per_example: estimate.activations_per_example,
                batch,
                copies,
                why,
                sizes: sizes.to_string(),
            },
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pipetrain_models::{GptConfig, MlpConfig};

    #[test]
    fn the_mlp_count_is_its_parameter_count() {
        let device = burn::prelude::Device::flex();
        for (w, h, k, input) in [(8, 2, 3, 5), (16, 0, 4, 7), (4, 1, 2, 4)] {
            let config = MlpConfig::new(w, h, k).with_input(input);
            let layers = config.init(&device);
            let real: usize = layers.iter().map(burn::module::Module::num_params).sum();
            assert_eq!(
                Estimate::of(&ReferenceModel::Mlp(config)).params,
                real as u128
            );
        }
        let config = GptConfig::new(16, 8, 16, 2, 2);
        let real: usize = config
            .init(&device)
            .iter()
            .map(burn::module::Module::num_params)
            .sum();
        let estimated = Estimate::of(&ReferenceModel::Gpt(config)).params as f64;
        assert!(
            (estimated / real as f64 - 1.0).abs() < 0.1,
            "{estimated} vs {real}"
        );
    }

    #[test]
    fn a_million_wide_layer_does_not_fit() {
        let huge = ReferenceModel::Mlp(MlpConfig::new(1_000_000, 2, 10));
        assert!(Estimate::of(&huge).training_bytes(32, 0, 1.0) > 1 << 42);
    }
}
