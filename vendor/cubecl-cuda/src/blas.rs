//! pipetrain: dense products through cuBLAS on the stream a resource was resolved on.
//!
//! pipetrain's GEMM seam (`engine/src/adapter/gemm/`) asks burn's client for each operand's
//! [`GpuResource`] (`ComputeClient::get_resource`, which orders the calling thread's stream
//! after the buffer's producer and, with this copy's change, records that stream beside the
//! pointer) and calls [`gemm`], a safe function: it checks every operand's extent against its
//! resource's size before any pointer reaches cuBLAS, and keeps the resources (and whatever the
//! caller gives it to keep) alive until the product has run.
//!
//! **Ordering.** A resource's allocation is never freed, handed out again or relocated while its
//! `ManagedResource` lives. [`gemm`] records an event on the stream after the product and holds
//! the caller's keep-alive until that event has completed (checked without blocking at every
//! later call on the thread, and at [`release_finished`]), so an operand produced on another
//! worker's stream cannot be reused under a queued product.
//!
//! **Handles.** One cuBLAS handle per (thread, stream), made in the stream's context, with one
//! fixed workspace of [`WORKSPACE_BYTES`] (cuBLAS is then deterministic for a given GPU and
//! shape, as `CUBLAS_WORKSPACE_CONFIG` makes it for PyTorch) and reduced-precision reductions
//! disallowed (a bf16 product accumulates and rounds once, in fp32).

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;

use cudarc::cublas::sys as cublas;
use cudarc::driver::sys as cuda;

use std::sync::Mutex;

use cubecl_core::client::Client;
use cubecl_core::server::{Handle, ServerError};
pub use cubecl_server::storage::ManagedResource;

pub use crate::compute::storage::gpu::GpuResource;
use crate::compute::CudaServer;

/// The devices for which burn's kernels were chosen over cuBLAS (`use_cublas(index, false)`).
static BURN_KERNELS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// Chooses cuBLAS (`true`, the default) or burn's kernels for the dense products pipetrain's
/// GEMM seam runs on CUDA device `index`. Takes effect at the next product; like PyTorch's
/// backend flags, it holds per device for the whole process.
pub fn use_cublas(index: usize, on: bool) {
    let mut burn = BURN_KERNELS.lock().unwrap_or_else(|p| p.into_inner());
    burn.retain(|&i| i != index);
    if !on {
        burn.push(index);
    }
}

/// Whether pipetrain's GEMM seam runs cuBLAS on CUDA device `index`.
pub fn uses_cublas(index: usize) -> bool {
    !BURN_KERNELS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains(&index)
}

/// The buffer `handle` names on `client`'s CUDA device, resolved on the calling thread's stream
/// (which is ordered after the buffer's producer), with that stream recorded beside its pointer.
pub fn resource(client: &Client, handle: Handle) -> Result<ManagedResource<GpuResource>, ServerError> {
    client.get_resource::<CudaServer>(handle)
}

/// Bytes of the fixed workspace given to each handle (what PyTorch gives a Hopper handle).
pub const WORKSPACE_BYTES: usize = 32 << 20;

/// An element type cuBLAS multiplies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlasType {
    /// IEEE fp32.
    F32,
    /// bfloat16 (fp32 accumulation, one rounding to the output).
    Bf16,
}

impl BlasType {
    fn bytes(self) -> usize {
        match self {
            BlasType::F32 => 4,
            BlasType::Bf16 => 2,
        }
    }

    fn cuda(self) -> cublas::cudaDataType {
        match self {
            BlasType::F32 => cublas::cudaDataType::CUDA_R_32F,
            BlasType::Bf16 => cublas::cudaDataType::CUDA_R_16BF,
        }
    }
}

/// How an fp32 product multiplies (a bf16 product always uses fp32 compute).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlasCompute {
    /// IEEE fp32 (`allow_tf32 = False`).
    Fp32,
    /// TF32 tensor cores (`CUBLAS_COMPUTE_32F_FAST_TF32`).
    Tf32,
}

/// A row-major matrix operand `[rows, cols]` with element strides (a transposed view has a row
/// stride of 1), holding its buffer.
pub struct Matrix {
    /// The buffer, as [`resource`] gave it (offset applied); held until the product has run.
    pub resource: ManagedResource<GpuResource>,
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Elements between consecutive rows.
    pub row_stride: usize,
    /// Elements between consecutive columns.
    pub col_stride: usize,
    /// Matrices in the batch (1: one product).
    pub batches: usize,
    /// Elements between consecutive matrices of the batch.
    pub batch_stride: usize,
    /// Elements from the buffer's start to the first matrix.
    pub offset: usize,
}

impl Matrix {
    /// The device address of the first element.
    fn ptr(&self, dtype: BlasType) -> u64 {
        self.resource.resource().ptr + (self.offset * dtype.bytes()) as u64
    }
}

/// Why a product was not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlasError {
    /// libcublas could not be loaded.
    NoLibrary,
    /// The operands' shapes or layouts do not make a product cuBLAS can run here.
    Layout(String),
    /// An operand reaches past its buffer.
    OutOfBounds(String),
    /// A CUDA driver or cuBLAS call failed.
    Call(String),
}

impl core::fmt::Display for BlasError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            BlasError::NoLibrary => f.write_str("libcublas could not be loaded"),
            BlasError::Layout(s) | BlasError::OutOfBounds(s) | BlasError::Call(s) => f.write_str(s),
        }
    }
}

/// Whether libcublas and libcublasLt load here (a missing library would panic inside cudarc).
pub fn available() -> bool {
    std::panic::catch_unwind(|| {
        // SAFETY: only loads the library (cudarc's lazy loader) and reports whether it did.
        unsafe { cublas::is_culib_present() }
    })
    .unwrap_or(false)
}

/// One cuBLAS handle bound to a stream, with its fixed workspace.
struct BlasHandle {
    handle: cublas::cublasHandle_t,
}

/// A product in flight: its completion event and what must live until then.
struct InFlight {
    event: cuda::CUevent,
    _keep: Box<dyn Any>,
}

thread_local! {
    /// This thread's handles by stream (cuBLAS handles are not to be shared between threads
    /// without care; one per thread and stream is what PyTorch keeps too).
    static HANDLES: RefCell<HashMap<usize, BlasHandle>> = RefCell::new(HashMap::new());
    /// This thread's products not yet known to have run.
    static IN_FLIGHT: RefCell<Vec<InFlight>> = const { RefCell::new(Vec::new()) };
}

/// Drops the keep-alives of every product of this thread whose event has completed.
pub fn release_finished() {
    IN_FLIGHT.with(|list| {
        list.borrow_mut().retain(|f| {
            // SAFETY: `f.event` was created by `cuEventCreate` below and not destroyed yet.
            let done = unsafe { cuda::cuEventQuery(f.event) } == cuda::CUresult::CUDA_SUCCESS;
            if done {
                // SAFETY: the event has completed and is destroyed once, here.
                unsafe { cuda::cuEventDestroy_v2(f.event) };
            }
            !done
        })
    });
}

fn check_cuda(result: cuda::CUresult, what: &str) -> Result<(), BlasError> {
    if result == cuda::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(BlasError::Call(format!("{what}: {result:?}")))
    }
}

fn check_blas(status: cublas::cublasStatus_t, what: &str) -> Result<(), BlasError> {
    if status == cublas::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(BlasError::Call(format!("{what}: {status:?}")))
    }
}

/// This thread's handle for `stream`, made (in the stream's context) on first use.
fn handle_for(stream: cuda::CUstream) -> Result<cublas::cublasHandle_t, BlasError> {
    HANDLES.with(|handles| {
        let mut handles = handles.borrow_mut();
        if let Some(h) = handles.get(&(stream as usize)) {
            return Ok(h.handle);
        }
        let mut ctx = std::ptr::null_mut();
        // SAFETY: `stream` is a live stream of cubecl's server (from `get_resource`); the calls
        // below only write the out-pointers given and create objects owned by this thread.
        unsafe {
            check_cuda(cuda::cuStreamGetCtx(stream, &mut ctx), "cuStreamGetCtx")?;
            check_cuda(cuda::cuCtxSetCurrent(ctx), "cuCtxSetCurrent")?;
            let mut handle = std::ptr::null_mut();
            check_blas(cublas::cublasCreate_v2(&mut handle), "cublasCreate")?;
            check_blas(
                cublas::cublasSetStream_v2(handle, stream as cublas::cudaStream_t),
                "cublasSetStream",
            )?;
            let mut workspace: cuda::CUdeviceptr = 0;
            check_cuda(
                cuda::cuMemAlloc_v2(&mut workspace, WORKSPACE_BYTES),
                "cuMemAlloc (cuBLAS workspace)",
            )?;
            check_blas(
                cublas::cublasSetWorkspace_v2(handle, workspace as *mut c_void, WORKSPACE_BYTES),
                "cublasSetWorkspace",
            )?;
            handles.insert(stream as usize, BlasHandle { handle });
            Ok(handle)
        }
    })
}

/// The column-major form of a row-major operand: (transpose?, leading dimension).
fn column_major(m: &Matrix) -> Result<(bool, usize), BlasError> {
    // Row-major with unit columns: in column-major terms the memory holds the transpose.
    if m.col_stride == 1 || m.cols == 1 {
        let ld = if m.rows == 1 { m.cols.max(1) } else { m.row_stride };
        if ld >= m.cols.max(1) {
            return Ok((false, ld));
        }
    }
    // A transposed view: unit rows, the memory is the matrix itself in column-major.
    if m.row_stride == 1 || m.rows == 1 {
        let ld = if m.cols == 1 { m.rows.max(1) } else { m.col_stride };
        if ld >= m.rows.max(1) {
            return Ok((true, ld));
        }
    }
    Err(BlasError::Layout(format!(
        "a [{}, {}] operand with strides [{}, {}] is neither row- nor column-major",
        m.rows, m.cols, m.row_stride, m.col_stride
    )))
}

/// Checks that `m` lies inside its buffer.
fn in_bounds(m: &Matrix, dtype: BlasType, name: &str) -> Result<(), BlasError> {
    if m.rows == 0 || m.cols == 0 || m.batches == 0 {
        return Ok(());
    }
    let last = m.offset
        + (m.batches - 1) * m.batch_stride
        + (m.rows - 1) * m.row_stride
        + (m.cols - 1) * m.col_stride
        + 1;
    let bytes = last * dtype.bytes();
    if bytes as u64 > m.resource.resource().size {
        return Err(BlasError::OutOfBounds(format!(
            "operand {name} [{}, {}] reaches {bytes} bytes into a buffer of {}",
            m.rows, m.cols, m.resource.resource().size
        )));
    }
    Ok(())
}

/// `c = a·b + beta·c` for row-major `a: [m, k]`, `b: [k, n]` and a contiguous `c: [m, n]` (each
/// product of a batch: the three operands have the same number of matrices), all of `dtype`, with `beta` 0 or 1 (1: `c` holds the bias rows, added in fp32 before the one
/// rounding). Runs on the stream the resources were resolved on; the operands' buffers and `keep`
/// live until the product has run. Nothing is launched when an error is returned.
pub fn gemm(
    a: Matrix,
    b: Matrix,
    c: Matrix,
    dtype: BlasType,
    compute: BlasCompute,
    accumulate: bool,
    keep: Box<dyn Any>,
) -> Result<(), BlasError> {
    release_finished();
    if !available() {
        return Err(BlasError::NoLibrary);
    }
    let (m, k, n) = (a.rows, a.cols, b.cols);
    if b.rows != k || c.rows != m || c.cols != n {
        return Err(BlasError::Layout(format!(
            "[{m}, {k}]·[{}, {n}] into [{}, {}]",
            b.rows, c.rows, c.cols
        )));
    }
    if c.col_stride != 1 || (m > 1 && c.row_stride != n) {
        return Err(BlasError::Layout("the output must be contiguous".into()));
    }
    let batches = c.batches;
    if a.batches != batches || b.batches != batches || (batches > 1 && c.batch_stride != m * n) {
        return Err(BlasError::Layout(format!(
            "batches of {}, {} and {} matrices (the output's contiguous)",
            a.batches, b.batches, c.batches
        )));
    }
    let stream = a.resource.resource().stream;
    if stream.is_null()
        || b.resource.resource().stream != stream
        || c.resource.resource().stream != stream
    {
        return Err(BlasError::Layout(
            "the operands were not resolved on one stream".into(),
        ));
    }
    for (x, name) in [(&a, "a"), (&b, "b"), (&c, "c")] {
        in_bounds(x, dtype, name)?;
    }
    let fits = |v: usize| i32::try_from(v).is_ok();
    if ![
        m,
        n,
        k,
        batches,
        a.row_stride,
        a.col_stride,
        b.row_stride,
        b.col_stride,
    ]
    .into_iter()
    .all(fits)
    {
        return Err(BlasError::Layout("a dimension exceeds cuBLAS's 32-bit sizes".into()));
    }
    if m == 0 || n == 0 || batches == 0 {
        return Ok(());
    }
    // Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: B's memory first.
    let (b_trans, ldb) = column_major(&b)?;
    let (a_trans, lda) = column_major(&a)?;
    let op = |t: bool| {
        if t {
            cublas::cublasOperation_t::CUBLAS_OP_T
        } else {
            cublas::cublasOperation_t::CUBLAS_OP_N
        }
    };
    let compute_type = match (dtype, compute) {
        (BlasType::F32, BlasCompute::Tf32) => cublas::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
        _ => cublas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
    };
    let handle = handle_for(stream)?;
    let alpha: f32 = 1.0;
    let beta: f32 = if accumulate { 1.0 } else { 0.0 };
    // SAFETY: every operand was checked to lie inside its buffer, whose allocation the
    // `ManagedResource`s behind `a`, `b` and `c` keep in place, and which `keep` holds until the
    // event recorded after the product has completed; the handle is this thread's, bound to
    // the stream the operands were resolved on; alpha and beta are host scalars of the compute
    // type's scale type (f32), read before the call returns.
    unsafe {
        check_blas(
            cublas::cublasSetMathMode(
                handle,
                cublas::cublasMath_t::CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION,
            ),
            "cublasSetMathMode",
        )?;
        let status = if batches == 1 {
            cublas::cublasGemmEx(
                handle,
                op(b_trans),
                op(a_trans),
                n as i32,
                m as i32,
                k as i32,
                &alpha as *const f32 as *const c_void,
                b.ptr(dtype) as *const c_void,
                dtype.cuda(),
                ldb as i32,
                a.ptr(dtype) as *const c_void,
                dtype.cuda(),
                lda as i32,
                &beta as *const f32 as *const c_void,
                c.ptr(dtype) as *mut c_void,
                dtype.cuda(),
                n as i32,
                compute_type,
                cublas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        } else {
            cublas::cublasGemmStridedBatchedEx(
                handle,
                op(b_trans),
                op(a_trans),
                n as i32,
                m as i32,
                k as i32,
                &alpha as *const f32 as *const c_void,
                b.ptr(dtype) as *const c_void,
                dtype.cuda(),
                ldb as i32,
                b.batch_stride as i64,
                a.ptr(dtype) as *const c_void,
                dtype.cuda(),
                lda as i32,
                a.batch_stride as i64,
                &beta as *const f32 as *const c_void,
                c.ptr(dtype) as *mut c_void,
                dtype.cuda(),
                n as i32,
                c.batch_stride as i64,
                batches as i32,
                compute_type,
                cublas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        };
        check_blas(status, "cublasGemmEx / cublasGemmStridedBatchedEx")?;
        let mut event = std::ptr::null_mut();
        check_cuda(
            cuda::cuEventCreate(
                &mut event,
                cuda::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32,
            ),
            "cuEventCreate",
        )?;
        check_cuda(cuda::cuEventRecord(event, stream), "cuEventRecord")?;
        let keep: Box<dyn Any> = Box::new((a, b, c, keep));
        IN_FLIGHT.with(|list| list.borrow_mut().push(InFlight { event, _keep: keep }));
    }
    Ok(())
}
