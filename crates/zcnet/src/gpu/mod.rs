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

use crate::error::{Error, Result};
use crate::region::MemoryKind;
use crate::remedy::Remedy;
use std::sync::Arc;
use zcnet_sys::cuda::{self, Context, CudaError};

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

/// The primary context of `cuda:ordinal`, after checking that the device exists.
pub(crate) fn context(ordinal: u32) -> Result<Arc<Context>> {
    let n = cuda::device_count().map_err(|e| gpu_error(format!("opening cuda:{ordinal}"), e))?;
    if ordinal as usize >= n {
        return Err(no_such_device(ordinal, n));
    }
    Context::new(ordinal).map_err(|e| gpu_error(format!("opening cuda:{ordinal}"), e))
}

/// Or do without the GPU: host memory.
const HOST: Remedy = Remedy::UseMemory(MemoryKind::Anonymous);

fn no_such_device(ordinal: u32, count: usize) -> Error {
    Error::Gpu {
        what: format!("cuda:{ordinal}").into(),
        cause: match count {
            0 => "this machine has no CUDA device".into(),
            1 => "this machine has one CUDA device (cuda:0)".into(),
            n => format!(
                "this machine has {n} CUDA devices (cuda:0 to cuda:{})",
                n - 1
            )
            .into(),
        },
        remedy: if count == 0 {
            Remedy::All(&[
                HOST,
                Remedy::Other("nvidia-smi lists the GPUs the driver sees"),
            ])
        } else {
            Remedy::Other("pick one of those (nvidia-smi lists them)")
        },
        bad_argument: true,
    }
}

/// Turns a CUDA failure into the one-line error users see, with the fix for the common causes.
pub(crate) fn gpu_error(what: impl Into<String>, e: CudaError) -> Error {
    let what = what.into();
    let (cause, fix, bad_argument) = match &e {
        CudaError::NoLibrary { .. } => (
            e.to_string(),
            Remedy::Any(&[
                Remedy::Other("install the NVIDIA driver (or set ZCNET_LIBCUDA to libcuda.so.1's path)"),
                HOST,
            ]),
            false,
        ),
        CudaError::BadLibrary { .. } => (
            e.to_string(),
            Remedy::Any(&[
                Remedy::Other("reinstall the NVIDIA driver (this libcuda is damaged or not for this machine), or set ZCNET_LIBCUDA to a working libcuda.so.1"),
                HOST,
            ]),
            false,
        ),
        CudaError::MissingSymbol { .. } => (
            e.to_string(),
            Remedy::Any(&[
                Remedy::Other("update the NVIDIA driver to r515 or newer"),
                HOST,
            ]),
            false,
        ),
        CudaError::Call { code, call, .. } => {
            let fix = match *code {
                // Pinning host memory (the staging buffers) refused: some VMs and containers
                // do; nothing of dma-buf is involved.
                cuda::ERR_NOT_SUPPORTED if call.starts_with("cuMemHostRegister") => {
                    Remedy::Other("this driver refuses to pin host memory here (cuMemHostRegister: some VMs and containers do), which staging through host memory needs; run where the driver can pin memory")
                }
                // CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: the caller pinned it already.
                712 => Remedy::Other("the host memory is registered with CUDA already (cudaHostRegister by the application): give zcnet memory it registers itself"),
                cuda::ERR_NO_DEVICE => {
                    Remedy::Any(&[Remedy::Other("check that nvidia-smi sees a GPU"), HOST])
                }
                cuda::ERR_INVALID_DEVICE => {
                    Remedy::Other("pick a device that exists (nvidia-smi lists them)")
                }
                cuda::ERR_OUT_OF_MEMORY => Remedy::LessGpuMemory,
                cuda::ERR_NOT_SUPPORTED => {
                    Remedy::Other("this driver or kernel refuses it: dma-buf export needs the open NVIDIA kernel modules (r515+) and CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED; without it only staging through host memory reaches this memory")
                }
                _ => Remedy::Say(&[
                    crate::text::Piece::Str("see the CUDA error above; the probe ("),
                    crate::text::Piece::Term(crate::text::Term::Call(crate::text::Call::Probe)),
                    crate::text::Piece::Str(") shows what the GPU supports"),
                ]),
            };
            (e.to_string(), fix, *code == cuda::ERR_INVALID_DEVICE)
        }
    };
    Error::Gpu {
        what: what.into(),
        cause: cause.into(),
        remedy: fix,
        bad_argument,
    }
}

/// Human size for messages: "64 MiB", "4 KiB", "100 B".
pub(crate) fn size_words(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[zcnet_testkit::test]
    fn a_refused_pin_is_not_told_to_install_dma_buf_modules() {
        let call = |call: &'static str, code: i32| {
            gpu_error(
                "staging",
                CudaError::Call {
                    call,
                    code,
                    text: "refused".into(),
                },
            )
            .to_string()
        };
        let pin = call("cuMemHostRegister_v2", cuda::ERR_NOT_SUPPORTED);
        assert!(
            pin.contains("pin host memory") && !pin.contains("dma-buf"),
            "{pin}"
        );
        let export = call("cuMemGetHandleForAddressRange", cuda::ERR_NOT_SUPPORTED);
        assert!(export.contains("dma-buf export needs"), "{export}");
        let twice = call("cuMemHostRegister_v2", 712);
        assert!(twice.contains("registered with CUDA already"), "{twice}");
    }

    #[zcnet_testkit::test]
    fn missing_driver_reads_as_cause_and_fix() {
        let e = gpu_error(
            "allocating 64 MiB on cuda:0",
            CudaError::NoLibrary {
                tried: "libcuda.so.1, libcuda.so".into(),
                reason: "libcuda.so.1: cannot open shared object file".into(),
            },
        );
        let s = e.to_string();
        assert!(
            s.starts_with("allocating 64 MiB on cuda:0: no CUDA driver library"),
            "{s}"
        );
        assert!(
            s.contains("MemoryKind::Anonymous") && !s.contains("--"),
            "{s}"
        );
        assert!(!s.contains('\n'));
        assert!(!e.is_caller_mistake());
    }

    #[zcnet_testkit::test]
    fn a_device_that_does_not_exist_is_a_bad_argument() {
        let e = no_such_device(7, 2);
        assert_eq!(
            e.to_string(),
            "cuda:7: this machine has 2 CUDA devices (cuda:0 to cuda:1): pick one of those (nvidia-smi lists them)"
        );
        assert!(e.is_caller_mistake());
        assert!(no_such_device(0, 0).to_string().contains("no CUDA device"));
    }

    #[zcnet_testkit::test]
    fn out_of_memory_names_the_knobs() {
        let e = gpu_error(
            "allocating 1 GiB on cuda:0",
            CudaError::Call {
                call: "cuMemAlloc",
                code: cuda::ERR_OUT_OF_MEMORY,
                text: "CUDA_ERROR_OUT_OF_MEMORY: out of memory".into(),
            },
        );
        let s = e.to_string();
        assert!(
            s.contains("CUresult 2") && s.contains("less GPU memory"),
            "{s}"
        );
        assert!(!e.is_caller_mistake());
    }

    #[zcnet_testkit::test]
    fn sizes_in_words() {
        assert_eq!(size_words(64 << 20), "64 MiB");
        assert_eq!(size_words(4096), "4 KiB");
        assert_eq!(size_words(100), "100 B");
    }
}
