//! Devices by name: the CPU (burn's `flex`) and CUDA GPUs, checked before any worker starts.
//!
//! A CUDA device is only handed out after the three things it needs were found: the driver
//! library (libcuda), a GPU with that index, and NVRTC (libnvrtc), which compiles the kernels of
//! pipetrain's CUDA build (see `vendor/cubecl-cuda/PIPETRAIN.md`). burn, cubecl and cudarc
//! panic on a missing library, some of them on a thread of their own, which surfaces as an
//! unrelated `RecvError`; [`cuda`] probes first and answers with a [`EngineError`] that names
//! the library and the remedy.

pub(crate) mod handoff;
pub mod pool;

use crate::MatmulPrecision;
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
/// running a first operation on it; its f32 matmuls at the default
/// [`MatmulPrecision::Fp32`] unless the device already started otherwise
/// ([`cuda_with`] chooses).
///
/// # Errors
/// As [`cuda_with`].
pub fn cuda(index: usize) -> Result<Device, EngineError> {
    #[cfg(feature = "cuda")]
    {
        crate::adapter::cuda::probe(index, None, &kernel_cache_dir())
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err(EngineError::NotBuilt { index })
    }
}

/// CUDA GPU `index` as [`cuda`] gives it, its f32 matmuls at `precision`. The precision is fixed
/// when the device is first used in a process, so choose it before anything else runs there.
///
/// # Errors
/// The first of [`EngineError::NotBuilt`], [`EngineError::NoDriver`],
/// [`EngineError::NoSuchDevice`], [`EngineError::NoNvrtc`], [`EngineError::Driver`] and
/// [`EngineError::MatmulPrecisionFixed`] (the device already started with the other precision)
/// that applies.
pub fn cuda_with(index: usize, precision: MatmulPrecision) -> Result<Device, EngineError> {
    #[cfg(feature = "cuda")]
    {
        crate::adapter::cuda::probe(index, Some(precision), &kernel_cache_dir())
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = precision;
        Err(EngineError::NotBuilt { index })
    }
}

/// The precision `device`'s f32 matmuls run at: always [`MatmulPrecision::Fp32`] on a CPU; on a
/// GPU what it started with, `None` for a GPU not used yet in this process.
pub fn matmul_precision(device: &Device) -> Option<MatmulPrecision> {
    if is_cpu(device) {
        return Some(MatmulPrecision::Fp32);
    }
    #[cfg(feature = "cuda")]
    {
        crate::adapter::cuda::running_precision(device)
    }
    #[cfg(not(feature = "cuda"))]
    {
        None
    }
}

/// Makes sure `device` runs its f32 matmuls at `precision`: nothing to do on a CPU (no TF32
/// there); a GPU not used yet is set to it; a GPU that started otherwise is an error.
///
/// # Errors
/// [`EngineError::MatmulPrecisionFixed`].
pub fn require_matmul_precision(
    device: &Device,
    precision: MatmulPrecision,
) -> Result<(), EngineError> {
    if is_cpu(device) {
        return Ok(());
    }
    #[cfg(feature = "cuda")]
    {
        crate::adapter::cuda::require_precision(device, precision)
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = precision;
        Ok(())
    }
}

/// Makes `device`'s dense products (the GEMM seam: every `Linear`, dense layer and GPT
/// projection) run on `library`. On a CPU every product is burn's matmul and nothing changes; on
/// a CUDA GPU it holds for the device for the whole process, as PyTorch's backend flags do, and
/// takes effect at the next product.
pub fn use_gemm_library(device: &Device, library: crate::GemmLibrary) {
    if is_cpu(device) {
        return;
    }
    #[cfg(feature = "cuda")]
    crate::adapter::cuda::use_gemm_library(device, library);
    #[cfg(not(feature = "cuda"))]
    let _ = library;
}

/// Where a GPU's compiled kernels and autotune results persist between processes:
/// `PIPETRAIN_CACHE_DIR` if set, else `$XDG_CACHE_HOME/pipetrain/kernels`, else
/// `~/.cache/pipetrain/kernels`, else `./.pipetrain-kernels`. Fixed when the first GPU of the
/// process is probed (`docs/gpu.md`, "Kernel cache").
pub fn kernel_cache_dir() -> std::path::PathBuf {
    use std::path::PathBuf;
    if let Some(dir) = std::env::var_os("PIPETRAIN_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|d| !d.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        });
    match base {
        Some(base) => base.join("pipetrain").join("kernels"),
        None => PathBuf::from(".pipetrain-kernels"),
    }
}

/// Files and bytes under `dir`, recursively: what the kernel cache holds
/// ([`kernel_cache_dir`]); `(0, 0)` for a folder that is not there.
pub fn folder_size(dir: &std::path::Path) -> (u64, u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (0, 0);
    };
    entries
        .filter_map(|e| e.ok())
        .fold((0, 0), |(n, b), e| match e.metadata() {
            Ok(m) if m.is_dir() => {
                let (dn, db) = folder_size(&e.path());
                (n + dn, b + db)
            }
            Ok(m) => (n + 1, b + m.len()),
            Err(_) => (n, b),
        })
}

/// Whether cuBLAS can be loaded on this machine (libcublas and libcublasLt found at run time):
/// always `false` without the `cuda` feature.
pub fn cublas_available() -> bool {
    #[cfg(feature = "cuda")]
    {
        crate::adapter::cuda::cublas_available()
    }
    #[cfg(not(feature = "cuda"))]
    {
        false
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
