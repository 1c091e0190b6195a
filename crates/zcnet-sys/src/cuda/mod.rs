//! The CUDA driver API, opened at run time: device memory, memory pinned for the GPU's copy
//! engines, asynchronous copies with events, and dma-buf export of device memory.
//!
//! Nothing links against CUDA. `libcuda.so.1` (the driver's soname; `ZCNET_LIBCUDA` names another
//! file) is opened by `driver` the first time CUDA memory is asked for, and every symbol zcnet
//! calls is resolved then, so a machine without a GPU or a driver gets one error
//! ([`CudaError::NoLibrary`]) instead of a crash. The driver API's constants and types come from
//! `cudarc`'s `driver::sys` (generated from cuda.h); zcnet does its own loading because cudarc's
//! loader looks for `libcuda.so` / `libcuda.so.<toolkit major>` (absent where only the driver is
//! installed) and panics when a library or symbol is missing. Return codes are read as plain
//! integers, so a code newer than the bindings is reported, not undefined behaviour.
//!
//! Facts used (CUDA Driver API reference, cuda.h 12.x/13.x):
//! - `cuMemGetHandleForAddressRange(.., CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0)` exports device
//!   memory as a dma-buf fd (CUDA 11.7+, driver r515+); address and size must be aligned to the
//!   host page size; the device must report `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`. The fd is
//!   the caller's to close; the memory must outlive every importer (here: the region owns both).
//! - `cuMemHostRegister(.., CU_MEMHOSTREGISTER_PORTABLE)` page-locks existing host memory so the
//!   copy engines can DMA from/to it asynchronously; `cuMemHostUnregister` before it is unmapped.
//! - `cuMemcpy{HtoD,DtoH}Async` on a stream run in stream order; an event recorded after a copy
//!   completes when the copy has (`cuEventQuery` returns CUDA_ERROR_NOT_READY until then).

use crate::mem::Mapping;
use cudarc::driver::sys::{cudaError_enum as E, CUdevice_attribute_enum as A};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::fmt;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::{Arc, OnceLock};

/// `CUDA_ERROR_OUT_OF_MEMORY`.
pub const ERR_OUT_OF_MEMORY: i32 = E::CUDA_ERROR_OUT_OF_MEMORY as i32;
/// `CUDA_ERROR_NO_DEVICE`.
pub const ERR_NO_DEVICE: i32 = E::CUDA_ERROR_NO_DEVICE as i32;
/// `CUDA_ERROR_INVALID_DEVICE`.
pub const ERR_INVALID_DEVICE: i32 = E::CUDA_ERROR_INVALID_DEVICE as i32;
/// `CUDA_ERROR_NOT_SUPPORTED`.
pub const ERR_NOT_SUPPORTED: i32 = E::CUDA_ERROR_NOT_SUPPORTED as i32;
/// `CUDA_ERROR_NOT_READY`: an event or stream has work pending.
const ERR_NOT_READY: i32 = E::CUDA_ERROR_NOT_READY as i32;
/// `CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD`.
const HANDLE_DMA_BUF_FD: c_int = 1;
/// `CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE` (cuda.h, enum CUmemRangeFlags, CUDA 12.8):
/// the dma-buf is mapped through the GPU's PCIe BAR1, as a peer device's DMA needs.
pub(crate) const DMA_BUF_MAPPING_TYPE_PCIE: u64 =
    cudarc::driver::sys::CUmemRangeFlags_enum::CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE as u64;
/// The first driver version (`cuDriverGetVersion`) that knows [`DMA_BUF_MAPPING_TYPE_PCIE`].
pub(crate) const DMA_BUF_PCIE_MIN_DRIVER: i32 = 12080;
/// `CU_STREAM_NON_BLOCKING`: no implicit synchronisation with the legacy default stream.
/// A device attribute no CUDA driver knows (cuda.h's `CUdevice_attribute` ends far below it, and
/// a driver answers an unknown one with `CUDA_ERROR_INVALID_VALUE`); zcnet's CUDA driver
/// stand-in (crates/zcnet-sys/tests/cuda-standin) answers 1, which marks its device as a
/// stand-in ([`DeviceInfo::standin`]): nothing measured against it is a GPU figure.
pub(crate) const STANDIN_ATTRIBUTE: c_int = 0x7a63_6e74; // "zcnt"

/// What every line or JSON object that reports a stand-in device, or a rate measured against
/// it, carries.
pub const STANDIN_LABEL: &str = "(stand-in driver: not GPU figures)";

const STREAM_NON_BLOCKING: c_uint = 1;
/// `CU_EVENT_DISABLE_TIMING`: cheaper events, used only for completion.
const EVENT_DISABLE_TIMING: c_uint = 2;

/// Why CUDA could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CudaError {
    /// No CUDA driver library could be opened.
    NoLibrary {
        /// The files tried.
        tried: String,
        /// `dlerror()` for each of them, joined with "; ".
        reason: String,
    },
    /// A CUDA driver library is there but could not be loaded (not an ELF file, another
    /// architecture, a missing dependency): a broken install, not a machine without a driver.
    BadLibrary {
        /// The file.
        library: String,
        /// `dlerror()`.
        reason: String,
    },
    /// The library lacks a function zcnet needs (a driver older than CUDA 11.7).
    MissingSymbol {
        /// The function.
        name: &'static str,
    },
    /// A driver call returned an error.
    Call {
        /// The function.
        call: &'static str,
        /// The `CUresult`.
        code: i32,
        /// Its name and description from the driver (`cuGetErrorName`/`cuGetErrorString`).
        text: String,
    },
}

impl CudaError {
    /// The `CUresult` of a failed call.
    pub fn code(&self) -> Option<i32> {
        match self {
            CudaError::Call { code, .. } => Some(*code),
            _ => None,
        }
    }
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CudaError::NoLibrary { tried, reason } => {
                write!(f, "no CUDA driver library ({tried}): {reason}")
            }
            CudaError::BadLibrary { library, reason } => write!(
                f,
                "the CUDA driver library {library} is present but could not be loaded: {reason}"
            ),
            CudaError::MissingSymbol { name } => {
                write!(
                    f,
                    "the CUDA driver lacks {name} (needs CUDA 11.7 / driver r515 or newer)"
                )
            }
            CudaError::Call { call, code, text } => write!(f, "{call}: {text} (CUresult {code})"),
        }
    }
}

impl std::error::Error for CudaError {}

/// Result alias.
pub(crate) type Result<T> = std::result::Result<T, CudaError>;

type CuDevice = c_int;
type CuPtr = u64;
type Handle = *mut c_void;

macro_rules! driver_fns {
    (
        required { $( $field:ident : $sym:literal => fn($($arg:ty),*); )* }
        optional { $( $ofield:ident : $osym:literal => fn($($oarg:ty),*); )* }
    ) => {
        /// The driver functions zcnet calls, resolved once; the optional ones are `None` in a
        /// driver that lacks them (only the features that need them are then refused).
        struct Fns {
            $( $field: unsafe extern "C" fn($($arg),*) -> c_int, )*
            $( $ofield: Option<unsafe extern "C" fn($($oarg),*) -> c_int>, )*
        }
        impl Fns {
            /// # Safety
            /// `lib` is a live handle from `dlopen` of a CUDA driver library, which exports each
            /// symbol with the C signature written here (cuda.h).
            unsafe fn load(lib: *mut c_void) -> Result<Fns> {
                Ok(Fns {
                    $( $field: {
                        // SAFETY: the name is a NUL-terminated literal; dlsym only reads it.
                        let p = unsafe { libc::dlsym(lib, concat!($sym, "\0").as_ptr().cast()) };
                        if p.is_null() {
                            return Err(CudaError::MissingSymbol { name: $sym });
                        }
                        // SAFETY: per this function's contract the symbol has this signature.
                        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> c_int>(p) }
                    }, )*
                    $( $ofield: {
                        // SAFETY: the name is a NUL-terminated literal; dlsym only reads it.
                        let p = unsafe { libc::dlsym(lib, concat!($osym, "\0").as_ptr().cast()) };
                        if p.is_null() {
                            None
                        } else {
                            // SAFETY: per this function's contract the symbol has this signature.
                            Some(unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($oarg),*) -> c_int>(p) })
                        }
                    }, )*
                })
            }
        }
    };
}

driver_fns! {
    required {
    init: "cuInit" => fn(c_uint);
    driver_get_version: "cuDriverGetVersion" => fn(*mut c_int);
    device_get_count: "cuDeviceGetCount" => fn(*mut c_int);
    device_get: "cuDeviceGet" => fn(*mut CuDevice, c_int);
    device_get_name: "cuDeviceGetName" => fn(*mut c_char, c_int, CuDevice);
    device_get_pci_bus_id: "cuDeviceGetPCIBusId" => fn(*mut c_char, c_int, CuDevice);
    device_get_attribute: "cuDeviceGetAttribute" => fn(*mut c_int, c_int, CuDevice);
    device_total_mem: "cuDeviceTotalMem_v2" => fn(*mut usize, CuDevice);
    primary_ctx_retain: "cuDevicePrimaryCtxRetain" => fn(*mut Handle, CuDevice);
    primary_ctx_release: "cuDevicePrimaryCtxRelease_v2" => fn(CuDevice);
    ctx_set_current: "cuCtxSetCurrent" => fn(Handle);
    ctx_get_current: "cuCtxGetCurrent" => fn(*mut Handle);
    ctx_synchronize: "cuCtxSynchronize" => fn();
    mem_alloc: "cuMemAlloc_v2" => fn(*mut CuPtr, usize);
    mem_free: "cuMemFree_v2" => fn(CuPtr);
    memcpy_htod: "cuMemcpyHtoD_v2" => fn(CuPtr, *const c_void, usize);
    memcpy_dtoh: "cuMemcpyDtoH_v2" => fn(*mut c_void, CuPtr, usize);
    memcpy_htod_async: "cuMemcpyHtoDAsync_v2" => fn(CuPtr, *const c_void, usize, Handle);
    memcpy_dtoh_async: "cuMemcpyDtoHAsync_v2" => fn(*mut c_void, CuPtr, usize, Handle);
    memset_d8: "cuMemsetD8_v2" => fn(CuPtr, u8, usize);
    mem_host_register: "cuMemHostRegister_v2" => fn(*mut c_void, usize, c_uint);
    mem_host_unregister: "cuMemHostUnregister" => fn(*mut c_void);
    stream_create: "cuStreamCreate" => fn(*mut Handle, c_uint);
    stream_destroy: "cuStreamDestroy_v2" => fn(Handle);
    stream_synchronize: "cuStreamSynchronize" => fn(Handle);
    event_create: "cuEventCreate" => fn(*mut Handle, c_uint);
    event_record: "cuEventRecord" => fn(Handle, Handle);
    event_query: "cuEventQuery" => fn(Handle);
    event_synchronize: "cuEventSynchronize" => fn(Handle);
    event_destroy: "cuEventDestroy_v2" => fn(Handle);
    get_error_name: "cuGetErrorName" => fn(c_int, *mut *const c_char);
    get_error_string: "cuGetErrorString" => fn(c_int, *mut *const c_char);
    }
    optional {
    // CUDA 11.7 / r515: only dma-buf export needs it; staging and --naive work without it.
    get_handle_for_range: "cuMemGetHandleForAddressRange" => fn(*mut c_void, CuPtr, usize, c_int, u64);
    }
}

/// The opened driver library.
struct Driver {
    fns: Fns,
}

// SAFETY: `Driver` holds only function pointers into a library that is never closed; the CUDA
// driver API is thread-safe (CUDA Programming Guide, "Driver API": all entry points are
// thread-safe).
unsafe impl Send for Driver {}
// SAFETY: as above.
unsafe impl Sync for Driver {}

/// The library names tried, in order: `ZCNET_LIBCUDA` when set, else the driver's soname, then
/// the development link.
pub(crate) fn library_candidates() -> Vec<String> {
    match std::env::var("ZCNET_LIBCUDA") {
        Ok(p) if !p.is_empty() => vec![p],
        _ => vec!["libcuda.so.1".into(), "libcuda.so".into()],
    }
}

fn open_driver() -> Result<Driver> {
    open_from(&library_candidates())
}

/// glibc's `dlerror()` text when the file does not exist (ENOENT); any other failure means a
/// library was found and is broken.
fn is_not_found(dlerror: &str) -> bool {
    dlerror.contains("No such file or directory") || dlerror == "not found"
}

fn open_from(names: &[String]) -> Result<Driver> {
    let mut reasons = Vec::new();
    let mut broken: Option<CudaError> = None;
    for name in names {
        let c = std::ffi::CString::new(name.as_str()).map_err(|_| CudaError::NoLibrary {
            tried: name.clone(),
            reason: "the name contains a NUL byte".into(),
        })?;
        // SAFETY: `c` is NUL-terminated; dlopen of the CUDA driver runs its initialisers, which
        // have no preconditions on this process.
        let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if lib.is_null() {
            // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl call.
            let e = unsafe { libc::dlerror() };
            let reason: String = if e.is_null() {
                "not found".into()
            } else {
                // SAFETY: non-null, NUL-terminated, read before any other dl call.
                unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
            };
            if !is_not_found(&reason) && broken.is_none() {
                broken = Some(CudaError::BadLibrary {
                    library: name.clone(),
                    reason: reason.clone(),
                });
            }
            reasons.push(reason);
            continue;
        }
        // SAFETY: `lib` is the CUDA driver just opened; the handle is never closed.
        let fns = unsafe { Fns::load(lib) }?;
        let d = Driver { fns };
        // SAFETY: cuInit takes flags (must be 0).
        d.check("cuInit", unsafe { (d.fns.init)(0) })?;
        return Ok(d);
    }
    // A library that is there but broken says so, rather than reading as "no driver".
    Err(broken.unwrap_or_else(|| CudaError::NoLibrary {
        tried: names.join(", "),
        reason: reasons.join("; "),
    }))
}

fn driver() -> Result<&'static Driver> {
    static D: OnceLock<Result<Driver>> = OnceLock::new();
    D.get_or_init(open_driver).as_ref().map_err(Clone::clone)
}

/// Whether the driver library opens and initialises (the first call opens it).
pub fn available() -> Result<()> {
    driver().map(|_| ())
}

impl Driver {
    fn check(&self, call: &'static str, code: c_int) -> Result<()> {
        if code == 0 {
            return Ok(());
        }
        Err(CudaError::Call {
            call,
            code,
            text: self.describe(code),
        })
    }

    fn describe(&self, code: c_int) -> String {
        let mut name: *const c_char = std::ptr::null();
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: both out-pointers are live locals; the driver stores pointers to static strings.
        let (a, b) = unsafe {
            (
                (self.fns.get_error_name)(code, &mut name),
                (self.fns.get_error_string)(code, &mut text),
            )
        };
        let read = |ok: c_int, p: *const c_char| {
            if ok == 0 && !p.is_null() {
                // SAFETY: the driver returned a static NUL-terminated string.
                Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
            } else {
                None
            }
        };
        match (read(a, name), read(b, text)) {
            (Some(n), Some(t)) => format!("{n}: {t}"),
            (Some(n), None) => n,
            _ => format!("unknown CUDA error {code}"),
        }
    }

    fn string_of(
        &self,
        call: &'static str,
        f: impl FnOnce(*mut c_char, c_int) -> c_int,
    ) -> Result<String> {
        let mut buf = [0 as c_char; 256];
        self.check(call, f(buf.as_mut_ptr(), buf.len() as c_int - 1))?;
        // SAFETY: the buffer is zeroed and one byte longer than what the driver may write.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }
}

/// The driver's CUDA version, e.g. 13000 for 13.0.
pub fn driver_version() -> Result<i32> {
    let d = driver()?;
    let mut v = 0;
    // SAFETY: `v` is a live out-parameter.
    d.check("cuDriverGetVersion", unsafe {
        (d.fns.driver_get_version)(&mut v)
    })?;
    Ok(v)
}

/// Number of CUDA devices.
pub fn device_count() -> Result<usize> {
    let d = driver()?;
    let mut n = 0;
    // SAFETY: `n` is a live out-parameter.
    d.check("cuDeviceGetCount", unsafe {
        (d.fns.device_get_count)(&mut n)
    })?;
    Ok(n.max(0) as usize)
}

/// What a device is and can do, from the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Ordinal (`cuda:N`).
    pub ordinal: u32,
    /// Marketing name, e.g. "NVIDIA H100 80GB HBM3".
    pub name: String,
    /// PCI address, e.g. "0000:1B:00.0".
    pub pci_bus_id: String,
    /// Device memory in bytes.
    pub total_mem: u64,
    /// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`: device memory can be exported as a dma-buf.
    pub dma_buf: bool,
    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED`: third-party devices can DMA to it.
    pub gpudirect_rdma: bool,
    /// `CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED` (cuMemCreate/cuMemMap).
    pub vmm: bool,
    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED`.
    pub gpudirect_rdma_vmm: bool,
    /// The device is zcnet's CUDA driver stand-in, not a GPU (it answers
    /// `STANDIN_ATTRIBUTE`, which no real driver knows): its figures are not GPU figures.
    pub standin: bool,
}

impl DeviceInfo {
    /// [`STANDIN_LABEL`] for the stand-in, `None` for a GPU.
    pub fn standin_label(&self) -> Option<&'static str> {
        self.standin.then_some(STANDIN_LABEL)
    }
}

fn device_handle(d: &Driver, ordinal: u32) -> Result<CuDevice> {
    let mut dev = 0;
    let ord = c_int::try_from(ordinal).unwrap_or(c_int::MAX);
    // SAFETY: `dev` is a live out-parameter.
    d.check("cuDeviceGet", unsafe { (d.fns.device_get)(&mut dev, ord) })?;
    Ok(dev)
}

/// Facts about device `ordinal`.
pub fn device_info(ordinal: u32) -> Result<DeviceInfo> {
    let d = driver()?;
    let dev = device_handle(d, ordinal)?;
    let raw_attr = |a: c_int| -> Result<bool> {
        let mut v = 0;
        // SAFETY: `v` is a live out-parameter; the driver checks the attribute's value (an
        // unknown one is CUDA_ERROR_INVALID_VALUE).
        d.check("cuDeviceGetAttribute", unsafe {
            (d.fns.device_get_attribute)(&mut v, a, dev)
        })?;
        Ok(v != 0)
    };
    let attr = |a: A| raw_attr(a as c_int);
    // SAFETY: `p` has room for `n` bytes (string_of); `dev` is a valid device.
    let name = d.string_of("cuDeviceGetName", |p, n| unsafe {
        (d.fns.device_get_name)(p, n, dev)
    })?;
    // SAFETY: as above.
    let pci_bus_id = d.string_of("cuDeviceGetPCIBusId", |p, n| unsafe {
        (d.fns.device_get_pci_bus_id)(p, n, dev)
    })?;
    let mut total = 0usize;
    // SAFETY: `total` is a live out-parameter.
    d.check("cuDeviceTotalMem", unsafe {
        (d.fns.device_total_mem)(&mut total, dev)
    })?;
    Ok(DeviceInfo {
        ordinal,
        name,
        pci_bus_id,
        total_mem: total as u64,
        // Older drivers reject attributes they do not know: read that as "no".
        dma_buf: attr(A::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED).unwrap_or(false),
        gpudirect_rdma: attr(A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED).unwrap_or(false),
        vmm: attr(A::CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED).unwrap_or(false),
        gpudirect_rdma_vmm: attr(A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED)
            .unwrap_or(false),
        // A real driver refuses the attribute: not a stand-in.
        standin: raw_attr(STANDIN_ATTRIBUTE).unwrap_or(false),
    })
}

mod mem;
mod stream;
pub use mem::{BorrowedDevice, Context, DeviceMem, HostRegistration};
pub use stream::{Pending, PendingSlot, SourceRange, Stream};

#[cfg(test)]
mod tests {
    use super::*;

    /// Tests run with no GPU: the loader must fail cleanly with the files it tried.
    #[zcnet_testkit::test]
    fn missing_library_is_an_error_not_a_panic() {
        let e = open_from(&["/nonexistent/libcuda-zcnet-test.so".to_string()])
            .err()
            .expect("no such library");
        match &e {
            CudaError::NoLibrary { tried, reason } => {
                assert!(tried.contains("libcuda-zcnet-test.so"), "{tried}");
                assert!(!reason.is_empty());
            }
            other => panic!("expected NoLibrary, got {other:?}"),
        }
        assert!(e.to_string().starts_with("no CUDA driver library"), "{e}");
    }

    /// A libcuda.so.1 that is there but not a loadable ELF file is a broken driver install, not
    /// "no driver": the error names the file and the loader's reason, whichever candidate it is.
    #[zcnet_testkit::test]
    fn a_corrupt_library_is_not_read_as_no_driver() {
        let dir = std::env::temp_dir().join(format!("zcnet-cuda-corrupt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let bad = dir.join("libcuda.so.1");
        std::fs::write(&bad, b"this is not an ELF shared object\n").expect("write");
        let bad = bad.to_string_lossy().into_owned();
        for names in [
            vec![bad.clone()],
            vec!["/nonexistent/zcnet/libcuda.so.1".to_string(), bad.clone()],
            vec![bad.clone(), "/nonexistent/zcnet/libcuda.so".to_string()],
        ] {
            let e = open_from(&names)
                .err()
                .expect("a corrupt library does not load");
            match &e {
                CudaError::BadLibrary { library, reason } => {
                    assert_eq!(library, &bad);
                    assert!(
                        reason.contains("ELF") || reason.contains("too short"),
                        "{reason}"
                    );
                }
                other => panic!("{names:?}: expected BadLibrary, got {other:?}"),
            }
            let text = e.to_string();
            assert!(!text.contains("no CUDA driver library"), "{text}");
            assert!(text.contains("present but could not be loaded"), "{text}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Every candidate's reason is kept, not only the last one's.
    #[zcnet_testkit::test]
    fn each_missing_candidate_keeps_its_reason() {
        let names = [
            "/nonexistent/a/libcuda.so.1".to_string(),
            "/nonexistent/b/libcuda.so".to_string(),
        ];
        match open_from(&names) {
            Err(CudaError::NoLibrary { tried, reason }) => {
                assert_eq!(tried, names.join(", "));
                assert!(
                    reason.contains("/nonexistent/a/") && reason.contains("/nonexistent/b/"),
                    "{reason}"
                );
            }
            other => panic!("expected NoLibrary, got {:?}", other.err()),
        }
    }

    #[zcnet_testkit::test]
    fn pcie_mapping_flag_matches_cuda_h() {
        // cuda.h (12.8+): CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE = 0x1.
        assert_eq!(DMA_BUF_MAPPING_TYPE_PCIE, 1);
        assert_eq!(DMA_BUF_PCIE_MIN_DRIVER, 12080);
    }

    #[zcnet_testkit::test]
    fn default_candidates_prefer_the_soname() {
        if std::env::var_os("ZCNET_LIBCUDA").is_none() {
            assert_eq!(library_candidates()[0], "libcuda.so.1");
        }
    }

    #[zcnet_testkit::test]
    fn constants_match_cuda_h() {
        // cuda.h: CUDA_ERROR_OUT_OF_MEMORY = 2, CUDA_ERROR_NO_DEVICE = 100,
        // CUDA_ERROR_INVALID_DEVICE = 101, CUDA_ERROR_NOT_READY = 600,
        // CUDA_ERROR_NOT_SUPPORTED = 801; CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124.
        assert_eq!(
            (
                ERR_OUT_OF_MEMORY,
                ERR_NO_DEVICE,
                ERR_INVALID_DEVICE,
                ERR_NOT_READY,
                ERR_NOT_SUPPORTED
            ),
            (2, 100, 101, 600, 801)
        );
        assert_eq!(A::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED as i32, 124);
        assert_eq!(A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED as i32, 116);
    }
}
