//! pipetrain: whether f32 matmuls may run on TF32 tensor cores, chosen per device before the
//! device's first use (see `PIPETRAIN.md`).
//!
//! Upstream registers TF32 on every sm_80+ device, and cubek-matmul then computes every f32
//! matmul in TF32 (`adjust_dtypes`), without saying so. In this copy a device runs IEEE fp32
//! matmuls unless TF32 was allowed for it with [`request_matmul_tf32`] before it was
//! initialised: with TF32 unregistered, the f32 tensor-core kernels are unavailable and
//! cubek-matmul picks the kernels that multiply on the FMA units. Like PyTorch's
//! `torch.backends.cuda.matmul.allow_tf32`, this is a process-wide choice per device: cubecl
//! makes one server per device and process, and its properties are fixed when it starts.

use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Default)]
struct Choices {
    /// What was asked for, by device index, before the device started.
    requested: HashMap<usize, bool>,
    /// What each started device runs with.
    started: HashMap<usize, bool>,
}

static CHOICES: Mutex<Option<Choices>> = Mutex::new(None);

fn with<T>(f: impl FnOnce(&mut Choices) -> T) -> T {
    let mut guard = CHOICES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    f(guard.get_or_insert_with(Choices::default))
}

/// Asks for TF32 (`true`) or IEEE fp32 (`false`) f32 matmuls on CUDA device `index`.
///
/// # Errors
/// The setting the device already runs with, when it started before with the other one.
pub fn request_matmul_tf32(index: usize, allow: bool) -> Result<(), bool> {
    with(|c| match c.started.get(&index) {
        Some(&running) if running != allow => Err(running),
        Some(_) => Ok(()),
        None => {
            c.requested.insert(index, allow);
            Ok(())
        }
    })
}

/// Whether CUDA device `index` runs f32 matmuls in TF32: `None` until it has started.
pub fn matmul_tf32(index: usize) -> Option<bool> {
    with(|c| c.started.get(&index).copied())
}

/// Called once when device `index` starts: TF32 when it was asked for and the device has it.
pub(crate) fn on_start(index: usize, available: bool) -> bool {
    with(|c| {
        let tf32 = available && c.requested.get(&index).copied().unwrap_or(false);
        c.started.insert(index, tf32);
        tf32
    })
}
