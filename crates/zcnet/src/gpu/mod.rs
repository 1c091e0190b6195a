//! GPU (CUDA) memory: what the devices are, device regions, and the errors a user can act on.
//!
//! CUDA is opened at run time (`zcnet_sys::cuda`): nothing here needs a GPU, a driver or a
//! toolkit until CUDA memory is asked for, and then a missing piece is one [`Error::Gpu`] line
//! with the cause and the fix. Device memory is a [`crate::Region`] like any other
//! ([`crate::Region::cuda`]): it can be exported as a dma-buf for devmem TCP, and its send
//! buffers are written with a copy to the device ([`crate::TxBuf::write`]).
//!
//! Where the NIC cannot reach GPU memory, data is staged through pinned host memory
//! ([`staging`]): receives land in host buffers and are copied to the GPU asynchronously, sends
//! copy from the GPU into host buffers that are then sent with zero copy.

mod engine;
pub mod fill;
pub mod path;
pub mod receive;
pub mod staging;

pub use fill::{DeviceFill, FillStats};
pub use path::{prepare_receive, GpuPath, GpuSendStats, GpuSender, Refusal};
pub use receive::{receive, GpuRecvReport, PreparedReceive};
pub use staging::{NotStaged, StagedReceiver, StagedSender, StagedStats, StagingOptions};

use crate::cuda::{context, gpu_error};
use crate::error::{Error, Result};
use std::sync::Arc;
use zcnet_sys::cuda;

pub use zcnet_sys::cuda::{BorrowedDevice, DeviceInfo, STANDIN_LABEL};

/// The device address of `slice`, a range a devmem or zcrx-dmabuf receiver delivered
/// ([`crate::RxBuf::device`]), in `region`: the GPU memory whose dma-buf that receiver bound
/// ([`prepare_receive`]), where the NIC wrote it at the slice's offset. `None` when `region` is
/// host memory or the range does not lie inside it. What a consumer of the bytes in place needs
/// (a DLPack kDLCUDA tensor over them, a kernel's argument): no copy is made.
pub fn device_addr_of(region: &crate::Region, slice: &crate::rx::DeviceSlice) -> Option<u64> {
    let base = region.device_addr()?;
    let end = slice.offset.checked_add(slice.len as u64)?;
    (end <= region.len() as u64).then(|| base + slice.offset)
}

/// The staging pipeline without a GPU: a [`StagedReceiver`] over `stream` whose "device" is the
/// host buffer `dev` (its length is the ring's), with copies that complete newest first, as a
/// real copy engine may. For testing code built on staged receives on machines without CUDA
/// (zcnet-tools runs its GPU receive bench's harness this way); read what landed with
/// [`receive::drain_staged`]. Only with the `testing` feature: not part of the library.
#[cfg(feature = "testing")]
pub fn host_staged_receiver(
    stream: std::net::TcpStream,
    dev: Arc<std::sync::Mutex<Vec<u8>>>,
    opts: &StagingOptions,
) -> Result<StagedReceiver> {
    let ring_len = dev.lock().map(|d| d.len() as u64).unwrap_or(0);
    let faults = engine::HostEngineFaults {
        reorder: true,
        fail: None,
    };
    let engine = engine::HostEngine::new(dev, faults);
    StagedReceiver::with_engine(
        stream,
        Box::new(engine),
        ring_len,
        staging::new_ring(opts)?,
        opts,
    )
}

/// A [`Region`](crate::Region) over device memory zcnet did not allocate (a tensor's: torch's,
/// a DLPack producer's; the caller's promise is [`BorrowedDevice::new`]), for
/// [`StagedSender::send_from`] and [`Region::write_at`](crate::Region::write_at) /
/// [`Region::read_at`](crate::Region::read_at). Dropping the region frees nothing, and it is
/// never exported as a dma-buf ([`Region::dmabuf`](crate::Region::dmabuf) refuses it), so devmem
/// TX does not send from it: staging does. It first waits for the work queued in the device's
/// context (`cuCtxSynchronize`), so that what the owner's streams were writing is there.
pub fn borrow_device(b: BorrowedDevice) -> Result<crate::Region> {
    let ordinal = b.ordinal();
    if b.ptr() == 0 || b.is_empty() {
        return Err(Error::invalid_input(format!(
            "borrowing cuda:{ordinal} memory: {} B at {:#x} is no memory (a null address or no bytes)",
            b.len(),
            b.ptr()
        )));
    }
    let ctx = context(ordinal)?;
    // Work another producer queued on its own streams (a kernel writing the tensor) must be
    // done before zcnet's non-blocking copy stream reads or writes the memory.
    ctx.synchronize()
        .map_err(|e| gpu_error(format!("waiting for cuda:{ordinal}'s queued work"), e))?;
    Ok(crate::Region::of_device(Arc::new(
        cuda::DeviceMem::borrowed(&ctx, b),
    )))
}

/// The CUDA driver's version as (major, minor), e.g. (13, 0).
pub fn driver_version() -> Result<(u32, u32)> {
    let v = cuda::driver_version().map_err(|e| gpu_error("reading the CUDA driver version", e))?;
    Ok(((v / 1000) as u32, ((v % 1000) / 10) as u32))
}

/// Every CUDA device with its capabilities. An error when there is no usable driver.
pub fn devices() -> Result<Vec<DeviceInfo>> {
    let n = cuda::device_count().map_err(|e| gpu_error("counting CUDA devices", e))?;
    (0..n as u32)
        .map(|i| cuda::device_info(i).map_err(|e| gpu_error(format!("reading cuda:{i}"), e)))
        .collect()
}

/// What the driver says about `cuda:ordinal`.
pub fn device_info(ordinal: u32) -> Result<DeviceInfo> {
    cuda::device_info(ordinal).map_err(|e| gpu_error(format!("reading cuda:{ordinal}"), e))
}

/// [`STANDIN_LABEL`] when `cuda:ordinal` is zcnet's CUDA driver stand-in
/// ([`DeviceInfo::standin`]), for every line that reports it or a rate measured against it;
/// `None` for a GPU (or a device that cannot be read).
pub fn standin_label(ordinal: u32) -> Option<&'static str> {
    device_info(ordinal).ok()?.standin_label()
}
