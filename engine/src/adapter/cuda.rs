//! The CUDA probe: cudarc's driver and NVRTC entry points, called under `catch_unwind` because
//! cudarc panics (rather than returning an error) when it cannot load libcuda or libnvrtc.

use std::panic::{AssertUnwindSafe, catch_unwind};

use burn::prelude::*;

use crate::MatmulPrecision;
use crate::error::EngineError;
use crate::error::panic_message;

/// Runs `f`, turning a panic into its message. The panic hook is silenced meanwhile: a missing
/// library is an answer here, not a crash to print. Called before any worker thread starts.
fn quietly<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let outcome = catch_unwind(AssertUnwindSafe(f));
    std::panic::set_hook(hook);
    outcome.map_err(|payload| panic_message(payload.as_ref()))
}

/// cudarc's "unable to load" panic without its list of every library name it tried.
fn shorten(detail: String) -> String {
    match detail.split_once(" - searched for library names") {
        Some((head, _)) => format!(
            "{head}: none of libcuda.so, libcuda.so.1 and the other names cudarc tries was found"
        ),
        None => detail,
    }
}

/// The GPUs the driver reports; `index` only labels errors.
pub(crate) fn device_count(index: usize) -> Result<usize, EngineError> {
    match quietly(cudarc::driver::CudaContext::device_count) {
        Err(detail) => Err(EngineError::NoDriver {
            index,
            detail: shorten(detail),
        }),
        Ok(Err(e)) => Err(EngineError::Driver {
            index,
            detail: e.to_string(),
        }),
        Ok(Ok(n)) => Ok(n.max(0) as usize),
    }
}

/// A kernel that does nothing, compiled by NVRTC to check it loads and works.
const EMPTY_KERNEL: &str = "extern \"C\" __global__ void pipetrain_probe() {}";

/// Asks cubecl-cuda (pipetrain's copy) for `precision` on GPU `index`: taken if the device has
/// not started yet, an error if it started with the other one.
fn request(index: usize, precision: MatmulPrecision) -> Result<(), EngineError> {
    cubecl_cuda::request_matmul_tf32(index, precision.allows_tf32()).map_err(|running| {
        EngineError::MatmulPrecisionFixed {
            index,
            running: MatmulPrecision::of_tf32(running),
            requested: precision,
        }
    })
}

/// The CUDA index of `device`, if it is a CUDA device of burn's dispatch backend (up to 64 GPUs).
fn index_of(device: &Device) -> Option<usize> {
    let plain = super::plain_device(device);
    (0..64).find(|&i| Device::cuda(i) == plain)
}

/// What GPU `device` runs its f32 matmuls at; `None` if it is not a CUDA device or has not
/// started.
pub(crate) fn running_precision(device: &Device) -> Option<MatmulPrecision> {
    cubecl_cuda::matmul_tf32(index_of(device)?).map(MatmulPrecision::of_tf32)
}

/// Points cubecl's persistent caches (compiled kernels and autotune results, its `persistence`
/// feature) at `dir`, before any device starts: kernels compiled and shapes tuned by one process
/// are read back by the next. A `cubecl.toml` the user keeps is read first and its other
/// settings kept. `false` when cubecl's configuration was already fixed in this process (a
/// device already started): the caches then stay where that configuration put them.
pub(crate) fn use_kernel_cache(dir: &std::path::Path) -> bool {
    use cubecl::config::cache::CacheConfig;
    use cubecl::config::{CubeClRuntimeConfig, RuntimeConfig};
    let mut config = CubeClRuntimeConfig::from_current_dir().override_from_env();
    config.compilation.cache = true;
    config.environment.path = CacheConfig::Directory(dir.to_path_buf());
    CubeClRuntimeConfig::try_set(config)
}

/// Whether started CUDA device `index` runs its f32 matmuls in TF32 (fp32 if it has not
/// started).
pub(crate) fn running_tf32(index: usize) -> bool {
    cubecl_cuda::matmul_tf32(index).unwrap_or(false)
}

/// Chooses the library of CUDA device `device`'s dense products (a no-op for another device).
pub(crate) fn use_gemm_library(device: &Device, library: crate::GemmLibrary) {
    if let Some(index) = index_of(device) {
        cubecl_cuda::blas::use_cublas(index, library == crate::GemmLibrary::Cublas);
    }
}

/// Whether libcublas loads here.
pub(crate) fn cublas_available() -> bool {
    quietly(cubecl_cuda::blas::available).unwrap_or(false)
}

/// See [`crate::device::require_matmul_precision`].
pub(crate) fn require_precision(
    device: &Device,
    precision: MatmulPrecision,
) -> Result<(), EngineError> {
    match index_of(device) {
        Some(index) => request(index, precision),
        None => Ok(()),
    }
}

/// GPU `index`: the driver, the index, NVRTC, then one operation through burn; its f32 matmuls
/// at `precision` when one is given (else as it started, or fp32 if it has not); cubecl's
/// persistent caches in `cache` if no device started yet.
pub(crate) fn probe(
    index: usize,
    precision: Option<MatmulPrecision>,
    cache: &std::path::Path,
) -> Result<Device, EngineError> {
    let count = device_count(index)?;
    use_kernel_cache(cache);
    if index >= count {
        return Err(EngineError::NoSuchDevice { index, count });
    }
    if let Some(precision) = precision {
        request(index, precision)?;
    }
    match quietly(|| cudarc::nvrtc::compile_ptx(EMPTY_KERNEL)) {
        Err(detail) => {
            return Err(EngineError::NoNvrtc {
                index,
                detail: shorten(detail).replace("libcuda", "libnvrtc"),
            });
        }
        Ok(Err(e)) => {
            return Err(EngineError::NoNvrtc {
                index,
                detail: e.to_string(),
            });
        }
        Ok(Ok(_)) => {}
    }
    quietly(|| {
        let device = Device::cuda(index);
        Tensor::<1>::zeros([1], &device).into_data();
        device
    })
    .map_err(|detail| EngineError::Driver { index, detail })
}
