//! The CUDA driver as the library's lower modules meet it: the primary context of a device
//! that exists, and a CUDA failure turned into the one-line error a user can act on. Below
//! [`crate::region`] (GPU regions) and [`crate::gpu`] (devices, staging, the GPU paths), so that
//! neither needs the other for these.

use crate::error::Error;
use crate::error::Result;
use crate::kinds::MemoryKind;
use crate::remedy::Remedy;
use std::sync::Arc;
use zcnet_sys::cuda::{self, Context, CudaError};

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
}
