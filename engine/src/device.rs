//! Devices by name: the CPU (burn's `flex`) and CUDA GPUs, checked before any worker starts.
//!
//! A CUDA device is only handed out after the three things it needs were found: the driver
//! library (libcuda), a GPU with that index, and NVRTC (libnvrtc), which compiles the kernels of
//! pipetrain's CUDA build (see `vendor/cubecl-cuda/PIPETRAIN.md`). burn, cubecl and cudarc
//! panic on a missing library, some of them on a thread of their own, which surfaces as an
//! unrelated `RecvError`; [`cuda`] probes first and answers with a [`DeviceError`] that names
//! the library and the remedy.

use burn::prelude::*;

/// Why a device cannot be used. The facade and the binary render the remedy in their own words
/// (a builder call, a flag); the facts are the fields.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// This build has no CUDA backend.
    #[error(
        "cuda:{index}: this build has no CUDA backend (it was built without the `cuda` feature)"
    )]
    NotBuilt {
        /// The GPU asked for.
        index: usize,
    },
    /// The NVIDIA driver library could not be loaded.
    #[error(
        "cuda:{index}: the NVIDIA driver library libcuda.so could not be loaded ({detail}); install \
         the NVIDIA driver, or put the directory holding libcuda.so.1 on LD_LIBRARY_PATH"
    )]
    NoDriver {
        /// The GPU asked for.
        index: usize,
        /// What the loader said (the library names it searched for).
        detail: String,
    },
    /// The driver is there but has no GPU with that index.
    #[error(
        "cuda:{index}: this machine has {count} CUDA device(s){}; use a device index below {count} \
         (nvidia-smi lists them)",
        if *count > 0 { format!(" (cuda:0..cuda:{})", count - 1) } else { String::new() }
    )]
    NoSuchDevice {
        /// The GPU asked for.
        index: usize,
        /// GPUs the driver reports.
        count: usize,
    },
    /// NVRTC, which compiles the CUDA build's kernels at run time, could not be loaded.
    #[error(
        "cuda:{index}: NVRTC (libnvrtc.so) could not be loaded ({detail}); it compiles pipetrain's \
         CUDA kernels at run time: install the CUDA runtime, or put the directory holding \
         libnvrtc.so.13 on LD_LIBRARY_PATH (PyTorch ships one in site-packages/nvidia/cu13/lib)"
    )]
    NoNvrtc {
        /// The GPU asked for.
        index: usize,
        /// What the loader or NVRTC said.
        detail: String,
    },
    /// The driver refused: initialisation failed, or the device did not run a first operation.
    #[error("cuda:{index}: the CUDA driver failed: {detail}")]
    Driver {
        /// The GPU asked for.
        index: usize,
        /// The driver's words.
        detail: String,
    },
}

/// The number of CUDA GPUs the driver reports.
///
/// # Errors
/// [`DeviceError::NotBuilt`] without the `cuda` feature, [`DeviceError::NoDriver`] without
/// libcuda, [`DeviceError::Driver`] if the driver fails to initialise.
pub fn cuda_device_count() -> Result<usize, DeviceError> {
    #[cfg(feature = "cuda")]
    {
        crate::adapter::cuda::device_count(0)
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err(DeviceError::NotBuilt { index: 0 })
    }
}

/// CUDA GPU `index` as a burn device, after checking the driver, the index and NVRTC, and
/// running a first operation on it.
///
/// # Errors
/// The first of [`DeviceError::NotBuilt`], [`DeviceError::NoDriver`],
/// [`DeviceError::NoSuchDevice`], [`DeviceError::NoNvrtc`], [`DeviceError::Driver`] that
/// applies.
pub fn cuda(index: usize) -> Result<Device, DeviceError> {
    #[cfg(feature = "cuda")]
    {
        crate::adapter::cuda::probe(index)
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err(DeviceError::NotBuilt { index })
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
