//! [`Handoff`]: how a tensor crosses from one worker thread to another on the same GPU (an
//! activation or gradient to the next stage, a bucket of the in-process all-reduce).
//!
//! On a CPU every mode passes the handle: burn's CPU tensors count their holders, and an
//! operation writes in place only into a buffer nobody else holds. On a GPU that is not enough.
//!
//! ## The rules between threads (burn 0.22.1, cubecl 0.11.3)
//! Each thread enqueues on a CUDA stream of its own, and:
//! - An operation writes its output into an input's buffer whenever the handle count allows
//!   (`cubecl-runtime` `handle.rs` `can_mut`). The count covers live handles only, not kernels
//!   another thread has queued, nor reads: a read holds a *binding*, which does not count.
//! - A stream waits for another only for a buffer that the other stream *made*, not one it last
//!   wrote (`cubecl-server` `stream/event.rs`, `update_shared_bindings`).
//! - burn's `into_data` reads lazily (`Client::read_lazy_async`): the device-to-host copy runs
//!   when the bytes are first used, and "the buffer must not be mutated between this call and
//!   the first read". The handle is given up for a binding when `into_data` is called.
//!
//! So a buffer may cross threads only if nobody can write it afterwards on a stream the reader
//! does not wait for. The two modes meet that differently:
//! - [`Handoff::Host`]: the receiving thread copies the tensor through host memory, holding a
//!   counted handle of the sender's buffer until the bytes are read (so the sender cannot write
//!   it in place meanwhile). Costs a device-to-host and a host-to-device transfer per tensor.
//! - [`Handoff::Device`]: the sending thread copies the tensor into a fresh device buffer right
//!   after its last write, on its own stream, while it still holds the original (so the copy
//!   cannot be made in place), and sends the copy, which nobody else holds. The receiving
//!   stream waits for the sender's before its first use of the copy, since the sender's stream
//!   made it (the second rule). The copy is `x · 1`, exact for every value.
//!
//! **Library calls on a handed-off tensor (cuBLAS).** The GEMM seam (`adapter/gemm/cuda.rs`)
//! reads its operands outside cubecl's launches, so it keeps the same two rules by hand: it
//! asks cubecl for each operand's buffer on the reading thread's stream (`get_resource`, which
//! makes that stream wait for the buffer's producer, as a launch would), and it holds every
//! operand's allocation and handle until an event recorded after the product has completed
//! (`cubecl_cuda::blas`), so neither the sender nor the allocator can write or reuse the buffer
//! under a queued product.
//!
//! History: a first H200 run showed replicas that drift apart under the all-reduce and one
//! 2-stage ResNet run off by 7.6e-2 (`shared/reference/cuda-offline/notes.md`). With a host copy
//! that gave up its handle at once, an H100 ran the ResNet exactly (8 of 8), but the replicas
//! still drifted (8 of 12 runs; 2 of 13 on one CUDA stream, where only the lazy read can
//! explain it). See docs/gpu.md for what each GPU run measured.

use std::fmt;
use std::str::FromStr;

use burn::prelude::*;
use burn::tensor::kind::Numeric;

/// How a tensor crosses from one worker thread to another on the same GPU (see the module
/// documentation for the rules each mode keeps). On a CPU both pass the handle.
///
/// ```
/// use pipetrain_engine::Handoff;
/// assert_eq!(Handoff::default(), Handoff::Device);
/// assert_eq!("device".parse::<Handoff>(), Ok(Handoff::Device));
/// assert_eq!(Handoff::Device.to_string(), "device");
/// ```
// The hidden variant is a test hook, not a marker against exhaustive matches.
#[allow(clippy::manual_non_exhaustive)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Handoff {
    /// The receiver copies through host memory.
    Host,
    /// The sender copies into a fresh device buffer of its own stream and sends that: the
    /// default since the H200 check of 2026-11-28 (docs/gpu.md: the suite's hand-off cases
    /// pass, 0 of 10 replica runs drift, and no host round trip per tensor).
    #[default]
    Device,
    /// Test hook: [`Handoff::Device`]'s copy on a CPU as well, so that CPU tests exercise the
    /// GPU path (a CPU run has no reason to copy).
    #[doc(hidden)]
    DeviceOnCpuToo,
}

impl fmt::Display for Handoff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Handoff::Host => "host",
            Handoff::Device | Handoff::DeviceOnCpuToo => "device",
        })
    }
}

impl FromStr for Handoff {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "host" => Ok(Handoff::Host),
            "device" => Ok(Handoff::Device),
            other => Err(format!("hand-off `{other}`: expected host or device")),
        }
    }
}

impl Handoff {
    /// Whether the sender copies tensors on `device` before it sends them.
    fn copies_on_send(self, device: &Device) -> bool {
        match self {
            Handoff::Host => false,
            Handoff::Device => !crate::device::is_cpu(device),
            Handoff::DeviceOnCpuToo => true,
        }
    }

    /// On the sending thread, after its last write of `t`: what to send.
    pub(crate) fn outgoing<const D: usize, K: Numeric>(self, t: Tensor<D, K>) -> Tensor<D, K> {
        if !self.copies_on_send(&t.device()) {
            return t;
        }
        // Held while the copy is enqueued, so that it cannot be made in place.
        let held = t.clone();
        let copy = t.mul_scalar(1);
        drop(held);
        copy
    }

    /// On the receiving thread: a tensor another worker thread sent, as its own, on `device`.
    pub(crate) fn incoming<const D: usize, K>(
        self,
        t: Tensor<D, K>,
        device: &Device,
    ) -> Tensor<D, K>
    where
        K: burn::tensor::kind::Basic,
    {
        if crate::device::is_cpu(device) || self != Handoff::Host {
            return t.to_device(device);
        }
        // A counted handle until the lazy read below has run (see the module documentation).
        let held = t.clone();
        // The sender's dtype (a bf16 activation stays bf16: `from_data` alone would give the
        // device's default).
        let dtype = t.dtype();
        let copy = Tensor::from_data(t.into_data(), (device, dtype));
        drop(held);
        copy
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapter::sole_holder;

    fn values(t: &Tensor<1>) -> Vec<f32> {
        t.clone().into_data().try_to_vec::<f32>().expect("f32")
    }

    /// The device path, forced on a CPU: the sender keeps its tensor and writes it in place
    /// after sending; what was sent is a buffer of its own and keeps the values sent.
    #[test]
    fn a_sender_that_writes_in_place_after_sending_leaves_the_sent_tensor_alone() {
        let device = Device::flex();
        let mine = Tensor::<1>::from_floats([1.0, -2.0, 0.5, -0.0], &device);
        let sent = Handoff::DeviceOnCpuToo.outgoing(mine.clone());
        let (mine, sole) = sole_holder(mine);
        assert_eq!(
            sole,
            Some(true),
            "the sent tensor must not share the sender's buffer"
        );
        // In place: nobody else holds the buffer.
        let mine = mine.mul_scalar(3.0);
        let received = Handoff::DeviceOnCpuToo.incoming(sent, &device);
        assert_eq!(values(&received), [1.0, -2.0, 0.5, -0.0]);
        assert_eq!(values(&mine), [3.0, -6.0, 1.5, -0.0]);
        // The copy is exact, the sign of zero included.
        assert!(values(&received)[3].is_sign_negative());
    }

    /// Without the forcing, a CPU passes the handle (no copy, no change to CPU runs).
    #[test]
    fn on_a_cpu_the_handle_passes() {
        for handoff in [Handoff::Host, Handoff::Device] {
            let mine = Tensor::<1>::from_floats([1.0, 2.0], &Device::flex());
            let sent = handoff.outgoing(mine.clone());
            let (_mine, sole) = sole_holder(mine);
            assert_eq!(sole, Some(false), "{handoff}: the handle itself is sent");
            assert_eq!(values(&handoff.incoming(sent, &Device::flex())), [1.0, 2.0]);
        }
    }

    #[test]
    fn integers_cross_exactly() {
        let device = Device::flex();
        let ids = Tensor::<1, burn::tensor::Int>::from_ints([7, -3, 0], &device);
        let sent = Handoff::DeviceOnCpuToo.outgoing(ids);
        let received = Handoff::DeviceOnCpuToo.incoming(sent, &device);
        let got = received
            .into_data()
            .convert::<i64>()
            .try_to_vec::<i64>()
            .expect("ints");
        assert_eq!(got, [7, -3, 0]);
    }
}
