//! Devices by name: the CPU (burn's `flex`) and CUDA GPUs, checked before any worker starts.
//!
//! A CUDA device is only handed out after the three things it needs were found: the driver
//! library (libcuda), a GPU with that index, and NVRTC (libnvrtc), which compiles the kernels of
//! pipetrain's CUDA build (see `vendor/cubecl-cuda/PIPETRAIN.md`). burn, cubecl and cudarc
//! panic on a missing library, some of them on a thread of their own, which surfaces as an
//! unrelated `RecvError`; [`cuda`] probes first and answers with a [`EngineError`] that names
//! the library and the remedy.

use crate::error::EngineError;
use burn::prelude::*;

/// The number of CUDA GPUs the driver reports.
///
/// # Errors
/// [`EngineError::NotBuilt`] without the `cuda` feature, [`EngineError::NoDriver`] without
/// libcuda, [`EngineError::Driver`] if the driver fails to initialise.
pub fn cuda_device_count() -> Result<usize, EngineError> {
    #[cfg(feature = "cuda")]
    {
        crate::adapter::cuda::device_count(0)
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err(EngineError::NotBuilt { index: 0 })
    }
}

/// CUDA GPU `index` as a burn device, after checking the driver, the index and NVRTC, and
/// running a first operation on it.
///
/// # Errors
/// The first of [`EngineError::NotBuilt`], [`EngineError::NoDriver`],
/// [`EngineError::NoSuchDevice`], [`EngineError::NoNvrtc`], [`EngineError::Driver`] that
/// applies.
pub fn cuda(index: usize) -> Result<Device, EngineError> {
    #[cfg(feature = "cuda")]
    {
        crate::adapter::cuda::probe(index)
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err(EngineError::NotBuilt { index })
    }
}

/// Whether `device` is a CPU device (burn's `flex` or `ndarray`), where an operation's work is
/// done when the call that enqueued it returns. On any other device work is asynchronous: a host
/// clock measures enqueueing unless the device is synchronised first.
pub fn is_cpu(device: &Device) -> bool {
    let name = format!("{:?}", crate::adapter::plain_device(device));
    ["Flex", "NdArray", "Cpu"]
        .iter()
        .any(|cpu| name.contains(cpu))
}
