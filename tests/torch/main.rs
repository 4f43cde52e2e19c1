//! pipetrain against PyTorch, from committed fixtures (no torch needed): the optimizers against
//! torch.optim's documented algorithms (`optim`) and its own trajectories (`fixtures`), bf16
//! against torch's autocast (`bf16`).
//!
//! One test binary for the area (docs/design.md, "Test layout").

#[path = "../common/mod.rs"]
mod common;

mod bf16;
mod fixtures;
mod llama;
mod optim;
