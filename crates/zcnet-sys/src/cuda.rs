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

/// A device's primary context, retained while this lives. Every call below makes it current on
/// the calling thread first, so objects can be used from any thread.
#[derive(Debug)]
pub struct Context {
    dev: CuDevice,
    ctx: Handle,
    ordinal: u32,
}

// SAFETY: a CUDA context may be made current on any thread; the handle is an opaque token.
unsafe impl Send for Context {}
// SAFETY: as above; the driver serialises what needs it.
unsafe impl Sync for Context {}

impl Context {
    /// Retains device `ordinal`'s primary context.
    pub fn new(ordinal: u32) -> Result<Arc<Context>> {
        let d = driver()?;
        let dev = device_handle(d, ordinal)?;
        let mut ctx: Handle = std::ptr::null_mut();
        // SAFETY: `ctx` is a live out-parameter; `dev` a valid device handle.
        d.check("cuDevicePrimaryCtxRetain", unsafe {
            (d.fns.primary_ctx_retain)(&mut ctx, dev)
        })?;
        let c = Context { dev, ctx, ordinal };
        // Bound (and unbound) here only to check it can be.
        drop(c.bind()?);
        Ok(Arc::new(c))
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> u32 {
        self.ordinal
    }

    /// Waits for every piece of work queued in the context, on every stream
    /// (`cuCtxSynchronize`): another producer's kernels or copies writing memory zcnet is
    /// about to read (a tensor handed over through DLPack) have finished then.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: no arguments; waits for the current context's work.
        self.call("cuCtxSynchronize", |f| unsafe { (f.ctx_synchronize)() })
    }

    /// Makes the context current on the calling thread for the life of the guard, which puts
    /// back the one that was current before: the CUDA runtime takes a context made current
    /// through the driver API for its own, so leaving ours current would move the caller's
    /// (torch's, CuPy's) work on this thread to our device.
    fn bind(&self) -> Result<Rebind> {
        let d = driver()?;
        let mut prev: Handle = std::ptr::null_mut();
        // SAFETY: `prev` is a live out-parameter.
        let known = unsafe { (d.fns.ctx_get_current)(&mut prev) } == 0;
        if known && prev == self.ctx {
            return Ok(Rebind { prev: None });
        }
        // SAFETY: the context is retained by `self`.
        d.check("cuCtxSetCurrent", unsafe {
            (d.fns.ctx_set_current)(self.ctx)
        })?;
        // Where the previous one could not be read, ours stays current (as before this guard).
        Ok(Rebind {
            prev: known.then_some(prev),
        })
    }

    fn call(&self, call: &'static str, f: impl FnOnce(&Fns) -> c_int) -> Result<()> {
        let _bound = self.bind()?;
        let d = driver()?;
        d.check(call, f(&d.fns))
    }

    /// Whether this context is the calling thread's current one.
    pub fn is_current(&self) -> Result<bool> {
        let d = driver()?;
        let mut cur: Handle = std::ptr::null_mut();
        // SAFETY: `cur` is a live out-parameter.
        d.check("cuCtxGetCurrent", unsafe {
            (d.fns.ctx_get_current)(&mut cur)
        })?;
        Ok(cur == self.ctx)
    }
}

/// The context to put back when a [`Context::bind`] ends (`None`: nothing to do).
struct Rebind {
    prev: Option<Handle>,
}

impl Drop for Rebind {
    fn drop(&mut self) {
        if let (Some(prev), Ok(d)) = (self.prev, driver()) {
            // SAFETY: `prev` was the thread's current context (or null) when the bind began.
            unsafe { (d.fns.ctx_set_current)(prev) };
        }
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        if let Ok(d) = driver() {
            // SAFETY: releases the retain taken in `new`.
            unsafe { (d.fns.primary_ctx_release)(self.dev) };
        }
    }
}

/// Device memory: `cuMemAlloc`, page-aligned in address and length so that it can be exported
/// as a dma-buf; freed on drop. Or memory someone else allocated ([`DeviceMem::borrowed`]: a
/// tensor's), which is never freed or exported here.
#[derive(Debug)]
pub struct DeviceMem {
    ctx: Arc<Context>,
    base: CuPtr,
    ptr: CuPtr,
    len: usize,
    /// Allocated here (freed on drop), not borrowed.
    owned: bool,
}

impl DeviceMem {
    /// `len` bytes (rounded up to the host page size) on `ctx`'s device.
    pub fn alloc(ctx: &Arc<Context>, len: usize) -> Result<DeviceMem> {
        let page = crate::mem::page_size();
        let len = len.max(1).div_ceil(page) * page;
        // cuMemAlloc aligns to at least 256 B (2 MiB for large sizes in practice); ask for one
        // page more and align, so the export's page-alignment rule holds whatever it gives.
        let mut base: CuPtr = 0;
        let alloc_len = len + page;
        ctx.call("cuMemAlloc", |f| {
            // SAFETY: `base` is a live out-parameter.
            unsafe { (f.mem_alloc)(&mut base, alloc_len) }
        })?;
        let ptr = base.div_ceil(page as u64) * page as u64;
        Ok(DeviceMem {
            ctx: Arc::clone(ctx),
            base,
            ptr,
            len,
            owned: true,
        })
    }

    /// The device memory `b` names, in `ctx` (which must be `cuda:b.ordinal`'s): copies read
    /// and write it like any `DeviceMem`, but dropping the value frees nothing, and it is never
    /// exported as a dma-buf (its owner may free or reuse the pages). The promise that the memory
    /// stays valid was made where `b` was made ([`BorrowedDevice::new`]).
    pub fn borrowed(ctx: &Arc<Context>, b: BorrowedDevice) -> DeviceMem {
        DeviceMem {
            ctx: Arc::clone(ctx),
            base: b.ptr,
            ptr: b.ptr,
            len: b.len,
            owned: false,
        }
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device address (for kernels and descriptors; not a host pointer).
    pub fn device_addr(&self) -> u64 {
        self.ptr
    }

    /// The context it lives in.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    fn range(&self, off: u64, len: usize) -> Result<CuPtr> {
        match off.checked_add(len as u64) {
            Some(end) if end <= self.len as u64 => Ok(self.ptr + off),
            _ => Err(CudaError::Call {
                call: "zcnet range check",
                code: E::CUDA_ERROR_INVALID_VALUE as i32,
                text: format!(
                    "{len} B at offset {off} is outside the {} B device buffer",
                    self.len
                ),
            }),
        }
    }

    /// Exports the memory as a dma-buf (`cuMemGetHandleForAddressRange`). The fd must not outlive
    /// this memory's users: keep both in one owner (zcnet's `Region` does).
    pub fn export_dmabuf(&self) -> Result<OwnedFd> {
        if !self.owned {
            return Err(CudaError::Call {
                call: "cuMemGetHandleForAddressRange",
                code: E::CUDA_ERROR_NOT_SUPPORTED as i32,
                text: "zcnet exports only device memory it allocated; this memory is borrowed (its owner may free or reuse it while a dma-buf of it lives)".into(),
            });
        }
        let mut fd: c_int = -1;
        let (ptr, len) = (self.ptr, self.len);
        let d = driver()?;
        let export = d.fns.get_handle_for_range.ok_or(CudaError::MissingSymbol {
            name: "cuMemGetHandleForAddressRange",
        })?;
        // Map through the PCIe BAR where the driver knows the flag (CUDA 12.8+; an older driver
        // rejects any non-zero flags), as a NIC importing the dma-buf needs. A driver that knows
        // it but will not map this way here (the flag is for platforms with more than one path
        // to GPU memory) refuses it: then the default mapping, as NCCL's and aws-ofi-nccl's
        // exporters retry.
        let pcie = driver_version().is_ok_and(|v| v >= DMA_BUF_PCIE_MIN_DRIVER);
        let try_export = |flags: u64, fd: &mut c_int| {
            self.ctx.call("cuMemGetHandleForAddressRange", |_| {
                // SAFETY: `fd` is a live int out-parameter (the handle type DMA_BUF_FD writes
                // an int); [ptr, ptr+len) is page-aligned memory allocated here.
                unsafe {
                    export(
                        (fd as *mut c_int).cast(),
                        ptr,
                        len,
                        HANDLE_DMA_BUF_FD,
                        flags,
                    )
                }
            })
        };
        let first = try_export(if pcie { DMA_BUF_MAPPING_TYPE_PCIE } else { 0 }, &mut fd);
        match first {
            Err(CudaError::Call { code, .. })
                if pcie
                    && (code == E::CUDA_ERROR_NOT_SUPPORTED as i32
                        || code == E::CUDA_ERROR_INVALID_VALUE as i32) =>
            {
                try_export(0, &mut fd)?
            }
            r => r?,
        }
        // SAFETY: the driver returned a new fd that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Copies `src` to `off` (synchronous: for setup and verification, not the data path),
    /// and waits until the bytes are in device memory. cuMemcpyHtoD from pageable memory returns
    /// once the source is staged, "but the DMA to final destination may not have completed"
    /// (CUDA driver API, API synchronization behavior), on the legacy stream, which the staging
    /// pipelines' non-blocking copy stream does not wait for: on an H100 a staged send's copy
    /// out of the buffer read zeros not yet written. Hence the cuCtxSynchronize.
    pub fn write(&self, off: u64, src: &[u8]) -> Result<()> {
        let dst = self.range(off, src.len())?;
        self.ctx.call("cuMemcpyHtoD", |f| {
            // SAFETY: `src` is a live slice; `dst` was bounds-checked against this allocation.
            unsafe { (f.memcpy_htod)(dst, src.as_ptr().cast(), src.len()) }
        })?;
        self.settle()
    }

    /// Waits for the context's work on the legacy stream (`cuCtxSynchronize`): a synchronous
    /// write or a memset is then visible to every stream.
    fn settle(&self) -> Result<()> {
        // SAFETY: no arguments; waits for the current context's work.
        self.ctx
            .call("cuCtxSynchronize", |f| unsafe { (f.ctx_synchronize)() })
    }

    /// Copies from `off` into `dst` (synchronous).
    pub fn read(&self, off: u64, dst: &mut [u8]) -> Result<()> {
        let src = self.range(off, dst.len())?;
        self.ctx.call("cuMemcpyDtoH", |f| {
            // SAFETY: `dst` is a live, exclusively borrowed slice; `src` was bounds-checked.
            unsafe { (f.memcpy_dtoh)(dst.as_mut_ptr().cast(), src, dst.len()) }
        })
    }

    /// Fills the whole buffer with `byte` and waits until it is done (cuMemsetD8 is
    /// asynchronous with respect to the host for device memory; see [`Self::write`]).
    pub fn fill(&self, byte: u8) -> Result<()> {
        let (ptr, len) = (self.ptr, self.len);
        self.ctx.call("cuMemsetD8", |f| {
            // SAFETY: the range is this allocation.
            unsafe { (f.memset_d8)(ptr, byte, len) }
        })?;
        self.settle()
    }

    /// A [`Mapping`] over this memory, for cutting into send buffers: its slots' addresses are
    /// device addresses (offset in the dma-buf = slot address - mapping address) and the CPU
    /// cannot read or write them.
    pub fn into_mapping(self: Arc<Self>) -> Mapping {
        let len = self.len;
        Mapping::device(self, len)
    }
}

/// Device memory someone else allocated (a tensor's: torch's, a DLPack producer's), lent to
/// zcnet: the one `unsafe` promise about it is made here, where the address arrives; zcnet's
/// `gpu::borrow_device` turns it into a region ([`DeviceMem::borrowed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BorrowedDevice {
    ordinal: u32,
    ptr: u64,
    len: usize,
}

impl BorrowedDevice {
    /// `len` bytes at device address `ptr` on `cuda:ordinal`.
    ///
    /// # Safety
    /// `[ptr, ptr + len)` must be device memory on that device (in its primary context, as
    /// torch's and the CUDA runtime's is) and stay allocated, and not be reused, for as long as
    /// anything made from this value lives and until every copy it took part in completed (the
    /// staging pipelines and synchronous copies return only then).
    pub unsafe fn new(ordinal: u32, ptr: u64, len: usize) -> BorrowedDevice {
        BorrowedDevice { ordinal, ptr, len }
    }

    /// The device.
    pub fn ordinal(&self) -> u32 {
        self.ordinal
    }

    /// The device address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for DeviceMem {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let base = self.base;
        // SAFETY: frees the allocation made in `alloc`; nothing refers to it any more (copies
        // hold an Arc to their buffers through their owners and are synchronised before drop).
        let _ = self
            .ctx
            .call("cuMemFree", |f| unsafe { (f.mem_free)(base) });
    }
}

/// Host memory page-locked for the GPU's copy engines (`cuMemHostRegister`), unregistered on
/// drop before the memory can be unmapped (this holds the mapping).
#[derive(Debug)]
pub struct HostRegistration {
    ctx: Arc<Context>,
    map: Arc<Mapping>,
}

impl HostRegistration {
    /// Registers all of `map`.
    pub fn new(ctx: &Arc<Context>, map: Arc<Mapping>) -> Result<HostRegistration> {
        if !map.cpu_accessible() {
            return Err(CudaError::Call {
                call: "cuMemHostRegister",
                code: E::CUDA_ERROR_INVALID_VALUE as i32,
                text: "device memory cannot be registered as host memory".into(),
            });
        }
        let (addr, len) = (map.addr(), map.len());
        ctx.call("cuMemHostRegister", |f| {
            // SAFETY: [addr, addr+len) is a live mapping held by the Arc kept in `self`.
            unsafe { (f.mem_host_register)(addr as *mut c_void, len, 1) }
        })?;
        Ok(HostRegistration {
            ctx: Arc::clone(ctx),
            map,
        })
    }

    /// The registered mapping.
    pub(crate) fn mapping(&self) -> &Arc<Mapping> {
        &self.map
    }

    fn contains(&self, p: usize, len: usize) -> bool {
        p >= self.map.addr() && p + len <= self.map.addr() + self.map.len()
    }
}

impl Drop for HostRegistration {
    fn drop(&mut self) {
        let addr = self.map.addr();
        // SAFETY: undoes the registration made in `new`; the mapping is still alive (held here).
        let _ = self.ctx.call("cuMemHostUnregister", |f| unsafe {
            (f.mem_host_unregister)(addr as *mut c_void)
        });
    }
}

/// A stream of asynchronous copies, with an event per copy to learn when each completed.
/// Dropping it waits for the copies it still runs.
#[derive(Debug)]
pub struct Stream {
    ctx: Arc<Context>,
    raw: Handle,
}

// SAFETY: stream handles may be used from any thread with the context current (done per call).
unsafe impl Send for Stream {}

/// A recorded point in a stream; complete when every copy queued before it is.
#[derive(Debug)]
pub(crate) struct Event {
    ctx: Arc<Context>,
    raw: Handle,
}

// SAFETY: as for Stream.
unsafe impl Send for Event {}

impl Stream {
    /// A non-blocking stream on `ctx`.
    pub fn new(ctx: &Arc<Context>) -> Result<Stream> {
        let mut raw: Handle = std::ptr::null_mut();
        ctx.call("cuStreamCreate", |f| {
            // SAFETY: `raw` is a live out-parameter.
            unsafe { (f.stream_create)(&mut raw, STREAM_NON_BLOCKING) }
        })?;
        Ok(Stream {
            ctx: Arc::clone(ctx),
            raw,
        })
    }

    fn event(&self) -> Result<Event> {
        let mut raw: Handle = std::ptr::null_mut();
        self.ctx.call("cuEventCreate", |f| {
            // SAFETY: `raw` is a live out-parameter.
            unsafe { (f.event_create)(&mut raw, EVENT_DISABLE_TIMING) }
        })?;
        let ev = Event {
            ctx: Arc::clone(&self.ctx),
            raw,
        };
        let s = self.raw;
        // SAFETY: both handles are live (owned by `ev` and `self`).
        self.ctx.call("cuEventRecord", |f| {
            // SAFETY: the handles are live (owned by these values) and the context is current.
            unsafe { (f.event_record)(ev.raw, s) }
        })?;
        Ok(ev)
    }

    /// Queues a copy of `src`'s bytes (which must lie inside `reg`, host memory registered with
    /// CUDA) to `dst[off..]`. The source is moved into the returned [`Pending`], which gives it
    /// back only once the copy's event completed: the type system, not a rule in a comment,
    /// keeps the bytes alive and unwritten while the GPU reads them (a ring buffer cannot go
    /// back to the kernel early). On error the source comes back with it, safe to reuse (when
    /// the copy was queued but its event could not be made, the stream was waited for first).
    /// `reg` keeps the memory mapped; the stream is synchronised before it is dropped.
    #[allow(clippy::result_large_err)] // the source must come back with the error
    pub fn copy_to_device<S: CopySource>(
        &self,
        reg: &HostRegistration,
        src: S,
        dst: &DeviceMem,
        off: u64,
    ) -> std::result::Result<Pending<S>, (S, CudaError)> {
        let bytes = src.host_bytes();
        let (p, len) = (bytes.as_ptr(), bytes.len());
        if !reg.contains(p as usize, len) {
            let e = CudaError::Call {
                call: "cuMemcpyHtoDAsync",
                code: E::CUDA_ERROR_INVALID_VALUE as i32,
                text: "the source is not inside the registered host memory".into(),
            };
            return Err((src, e));
        }
        let d = match dst.range(off, len) {
            Ok(d) => d,
            Err(e) => return Err((src, e)),
        };
        let s = self.raw;
        let r = self.ctx.call("cuMemcpyHtoDAsync", |f| {
            // SAFETY: the source lies in pinned memory kept mapped by `reg` (checked above); the
            // copy only reads it, and `src` (whose bytes nobody writes while it lives, by
            // CopySource's contract) moves into the Pending below until the copy completed. The
            // destination was bounds-checked against `dst`.
            unsafe { (f.memcpy_htod_async)(d, p.cast(), len, s) }
        });
        if let Err(e) = r {
            return Err((src, e));
        }
        match self.event() {
            Ok(event) => Ok(Pending {
                value: Some(src),
                event,
            }),
            Err(e) => {
                // The copy is queued but nothing will say when it read `src`: wait for the
                // stream before the caller gets its source back (and may hand it to the kernel).
                let _ = self.synchronize();
                Err((src, e))
            }
        }
    }

    /// Queues a copy of `dst.len()` bytes from `src[off..]` into the host slot `dst` (inside
    /// `reg`), which the returned [`PendingSlot`] keeps until the copy completed: nobody can
    /// read the slot while the GPU writes it.
    pub fn copy_to_host(
        &self,
        reg: &HostRegistration,
        src: &DeviceMem,
        off: u64,
        mut dst: crate::mem::Slot,
        len: usize,
    ) -> std::result::Result<PendingSlot, (crate::mem::Slot, CudaError)> {
        let addr = dst.addr();
        if len > dst.len() || !reg.contains(addr, len) || !Arc::ptr_eq(dst.mapping(), reg.mapping())
        {
            let e = CudaError::Call {
                call: "cuMemcpyDtoHAsync",
                code: E::CUDA_ERROR_INVALID_VALUE as i32,
                text: "the destination is not a slot of the registered host memory".into(),
            };
            return Err((dst, e));
        }
        let s = match src.range(off, len) {
            Ok(s) => s,
            Err(e) => return Err((dst, e)),
        };
        let stream = self.raw;
        let Some(bytes) = dst.bytes_mut() else {
            let e = CudaError::Call {
                call: "cuMemcpyDtoHAsync",
                code: E::CUDA_ERROR_INVALID_VALUE as i32,
                text: "the destination is not host memory".into(),
            };
            return Err((dst, e));
        };
        let p = bytes.as_mut_ptr();
        // SAFETY: `p` points at `len` bytes of the slot, which is moved into the PendingSlot
        // below and so cannot be read or written by anyone until the copy's event completed;
        // the memory is pinned and kept mapped by `reg` (checked above).
        let r = self.ctx.call("cuMemcpyDtoHAsync", |f| unsafe {
            (f.memcpy_dtoh_async)(p.cast(), s, len, stream)
        });
        if let Err(e) = r {
            return Err((dst, e));
        }
        match self.event() {
            Ok(event) => Ok(Pending {
                value: Some(dst),
                event,
            }),
            Err(e) => {
                // Without an event, wait for the stream so the slot can be given back safely.
                let _ = self.synchronize();
                Err((dst, e))
            }
        }
    }

    /// Waits for every copy queued on the stream.
    pub(crate) fn synchronize(&self) -> Result<()> {
        let s = self.raw;
        self.ctx.call("cuStreamSynchronize", |f| {
            // SAFETY: the handles are live (owned by these values) and the context is current.
            unsafe { (f.stream_synchronize)(s) }
        })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let s = self.raw;
        // SAFETY: waits for the stream's copies (so no copy touches memory freed after this),
        // then destroys the stream created in `new`.
        let _ = self.ctx.call("cuStreamSynchronize", |f| {
            // SAFETY: the handles are live (owned by these values) and the context is current.
            unsafe { (f.stream_synchronize)(s) }
        });
        let _ = self.ctx.call("cuStreamDestroy", |f| {
            // SAFETY: the handles are live (owned by these values) and the context is current.
            unsafe { (f.stream_destroy)(s) }
        });
    }
}

impl Event {
    /// `Ok(true)` once complete, `Ok(false)` while pending, `Err` if the work before it failed.
    pub(crate) fn query(&self) -> Result<bool> {
        let d = driver()?;
        let _bound = self.ctx.bind();
        // SAFETY: the event is live (owned by self).
        let code = unsafe { (d.fns.event_query)(self.raw) };
        match code {
            0 => Ok(true),
            ERR_NOT_READY => Ok(false),
            c => d.check("cuEventQuery", c).map(|_| false),
        }
    }

    /// Blocks until complete.
    pub(crate) fn wait(&self) -> Result<()> {
        let r = self.raw;
        self.ctx.call("cuEventSynchronize", |f| {
            // SAFETY: the handles are live (owned by these values) and the context is current.
            unsafe { (f.event_synchronize)(r) }
        })
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let r = self.raw;
        // SAFETY: destroys the event created by Stream::event; the driver defers the release
        // until the event's work completed if it is still pending.
        let _ = self.ctx.call("cuEventDestroy", |f| {
            // SAFETY: the handles are live (owned by these values) and the context is current.
            unsafe { (f.event_destroy)(r) }
        });
    }
}

/// Host memory an asynchronous copy to the device may read: [`Stream::copy_to_device`] takes
/// the value and gives it back only once the copy completed.
///
/// # Safety
/// `host_bytes` returns the same bytes (address and length) for as long as the value lives,
/// wherever the value is moved, and nobody writes those bytes while it lives (only shared
/// access, or exclusive access that needs the value itself).
pub unsafe trait CopySource: Send {
    /// The bytes to copy.
    fn host_bytes(&self) -> &[u8];
}

// SAFETY: a slot is a unique range of a mapping its Arc keeps mapped (its address does not move
// with the value); writing it needs `&mut Slot`, which nobody has while the value is held.
// Device memory has no host bytes: an empty slice, which no registration contains.
unsafe impl CopySource for crate::mem::Slot {
    fn host_bytes(&self) -> &[u8] {
        self.bytes().unwrap_or(&[])
    }
}

// SAFETY: an Arc gives only shared access to `T`, which stays where it is on the heap however
// the Arc moves; `T`'s own contract holds while any clone (and so `T`) lives.
unsafe impl<T: CopySource + Sync> CopySource for Arc<T> {
    fn host_bytes(&self) -> &[u8] {
        (**self).host_bytes()
    }
}

/// Part of a [`CopySource`]: `len` bytes from `start` (a range of a ring buffer that several
/// copies read, each its own range of one shared buffer).
#[derive(Debug)]
pub struct SourceRange<S> {
    src: S,
    start: usize,
    len: usize,
}

impl<S: CopySource> SourceRange<S> {
    /// `len` bytes of `src` from `start`; `None` when they are not all inside it.
    pub fn new(src: S, start: usize, len: usize) -> std::result::Result<SourceRange<S>, S> {
        match start.checked_add(len) {
            Some(end) if end <= src.host_bytes().len() => Ok(SourceRange { src, start, len }),
            _ => Err(src),
        }
    }
}

// SAFETY: a sub-range of `S`'s bytes, which by `S`'s contract stay put and unwritten; `start`
// and `len` never change after `new` checked them.
unsafe impl<S: CopySource> CopySource for SourceRange<S> {
    fn host_bytes(&self) -> &[u8] {
        &self.src.host_bytes()[self.start..self.start + self.len]
    }
}

/// Host memory an asynchronous copy is reading ([`Stream::copy_to_device`], the source) or
/// writing ([`Stream::copy_to_host`], the destination slot): the value comes back only once
/// the copy completed, so nobody can touch those bytes while the GPU does.
///
/// Dropped while the copy runs, it waits for the copy before it lets go of the value: the
/// bytes are never released (a slot reused, a received buffer given back) under the GPU.
#[derive(Debug)]
pub struct Pending<T> {
    /// `Some` until a consuming method takes it.
    value: Option<T>,
    event: Event,
}

impl<T> Drop for Pending<T> {
    fn drop(&mut self) {
        if self.value.is_some() {
            // A failed copy ends too: either way the GPU no longer touches the bytes.
            let _ = self.event.wait();
        }
    }
}

/// A host slot the GPU is writing; the slot comes back only once the copy completed.
pub type PendingSlot = Pending<crate::mem::Slot>;

impl<T> Pending<T> {
    /// The value once the copy completed (`Ok(Ok(value))`), itself while pending
    /// (`Ok(Err(self))`), or the error with the value (waited for, so it is safe to reuse) when
    /// the copy failed.
    #[allow(clippy::result_large_err)] // the value must come back with the error
    pub fn poll(self) -> std::result::Result<std::result::Result<T, Self>, (T, CudaError)> {
        match self.event.query() {
            Ok(true) => Ok(Ok(self.take())),
            Ok(false) => Ok(Err(self)),
            Err(e) => {
                let _ = self.event.wait();
                Err((self.take(), e))
            }
        }
    }

    /// The value, once the copy is known to be over (the drop then waits for nothing).
    fn take(mut self) -> T {
        self.value
            .take()
            .expect("a Pending holds its value until a consuming method takes it")
    }

    /// Whether the copy finished (or failed: [`Self::poll`] then says how).
    pub fn ready(&self) -> bool {
        self.event.query().unwrap_or(true)
    }

    /// Blocks until the copy completed.
    #[allow(clippy::result_large_err)] // the value must come back with the error
    pub fn wait(self) -> std::result::Result<T, (T, CudaError)> {
        match self.event.wait() {
            Ok(()) => Ok(self.take()),
            Err(e) => Err((self.take(), e)),
        }
    }
}

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
