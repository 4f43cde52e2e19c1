//! # pipetrain-models
//!
//! Reference models for pipetrain, each a sequence of [`Layer`](pipetrain_engine::Layer)s that
//! the partitioner can cut between any two layers, and seeded synthetic data for them:
//!
//! | model | config | input | output | data |
//! |---|---|---|---|---|
//! | MLP | [`MlpConfig`] | float `[N, F]` | logits `[N, classes]` | [`synthetic::classification`] |
//! | ResNet-like CNN | [`ResNetConfig`] | float `[N, C, H, W]` | logits `[N, classes]` | [`synthetic::images`] |
//! | GPT-like decoder | [`GptConfig`] | int `[N, T]` | logits `[N, T, vocab]` | [`synthetic::tokens`] |
//! | Llama-family decoder (Hugging Face checkpoints) | [`LlamaConfig`] | int `[N, T]` | logits `[N, T, vocab]` | [`synthetic::tokens`] |
//! | U-Net-like CNN (long skips) | [`UNetConfig`] | float `[N, C, S, S]` | logits `[N, classes]` | [`synthetic::images`] |
//!
//! The ResNet uses batch norm: see [`resnet`] for how it behaves with micro-batches (train it
//! with `Remat::Never`; its single-device reference is `SingleDevice::step_chunked`).

pub mod gpt;
pub mod llama;
mod mlp;
pub mod resnet;
pub mod synthetic;
pub mod unet;

pub use gpt::{GptConfig, GptLayer};
pub use llama::{LlamaConfig, LlamaLayer};
pub use mlp::{Block, MlpConfig, MlpLayer};
pub use pipetrain_engine::Batch;
pub use resnet::{ResNetConfig, ResNetLayer};
pub use unet::{UNetConfig, UNetLayer};
