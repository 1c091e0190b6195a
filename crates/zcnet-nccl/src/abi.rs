//! The NCCL net plugin ABI, versions 8 to 12, written here from NCCL's plugin interface
//! (`src/include/plugin/net/net_v8.h` .. `net_v12.h`, `nccl_common.h`, `net_device.h` of the
//! NCCL sources: NCCL ships no package with these headers). Field order and types follow those
//! headers exactly; the layout tests at the end pin every size and offset for LP64 Linux.

#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::{c_char, c_int, c_ulong, c_void};

/// `ncclResult_t`.
pub type ncclResult_t = c_int;
/// Success.
pub const NCCL_SUCCESS: ncclResult_t = 0;
/// A system call failed (socket errors, out of memory).
pub const NCCL_SYSTEM_ERROR: ncclResult_t = 2;
/// A bug in the plugin (a panic caught at the boundary).
pub const NCCL_INTERNAL_ERROR: ncclResult_t = 3;
/// A bad argument (null pointer, device out of range, size over the limit).
pub const NCCL_INVALID_ARGUMENT: ncclResult_t = 4;
/// A call NCCL should not have made in this state (foreign handle, unsupported pointer type).
pub const NCCL_INVALID_USAGE: ncclResult_t = 5;
/// The peer misbehaved (garbage on the data socket, closed mid-transfer).
pub const NCCL_REMOTE_ERROR: ncclResult_t = 6;

/// `NCCL_NET_HANDLE_MAXSIZE`.
pub const NET_HANDLE_MAXSIZE: usize = 128;
/// `NCCL_PTR_HOST`.
pub const PTR_HOST: c_int = 0x1;
/// `NCCL_PTR_CUDA`.
pub const PTR_CUDA: c_int = 0x2;
/// `NCCL_PTR_DMABUF`.
pub const PTR_DMABUF: c_int = 0x4;
/// `NCCL_NET_MAX_REQUESTS`: requests in flight per comm.
pub const NET_MAX_REQUESTS: usize = 32;
/// `MAX_NET_SIZE`: the largest message NCCL gives a pre-v9 plugin (and what we announce).
pub const MAX_NET_SIZE: usize = 1 << 30;
/// `NCCL_NET_ID_UNDEF`.
pub const NET_ID_UNDEF: i16 = -1;
/// `NCCL_NET_DEVICE_HOST`.
pub const NET_DEVICE_HOST: c_int = 0;
/// `NCCL_NET_DEVICE_INVALID_VERSION`.
pub const NET_DEVICE_INVALID_VERSION: c_int = 0;
/// `NCCL_LOG_WARN`.
pub const LOG_WARN: c_int = 2;
/// `NCCL_LOG_INFO`.
pub const LOG_INFO: c_int = 3;
/// `NCCL_INIT | NCCL_NET` (subsystem flags of our log lines).
pub const LOG_FLAGS: c_ulong = 0x1 | 0x10;

/// `ncclDebugLogger_t`: NCCL's printf-style logger.
pub type ncclDebugLogger_t = Option<
    unsafe extern "C" fn(
        level: c_int,
        flags: c_ulong,
        file: *const c_char,
        line: c_int,
        fmt: *const c_char,
        ...
    ),
>;
/// `ncclProfilerCallback_t` (not used: kept opaque).
pub type ncclProfilerCallback_t = *mut c_void;

/// `ncclNetDeviceHandle_v7_t` .. `_v12_t` (unchanged since v7).
#[repr(C)]
#[derive(Debug)]
pub struct ncclNetDeviceHandle_t {
    /// Offload type.
    pub netDeviceType: c_int,
    /// Offload version.
    pub netDeviceVersion: c_int,
    /// Opaque.
    pub handle: *mut c_void,
    /// Its size.
    pub size: usize,
    /// Whether the proxy must progress it.
    pub needsProxyProgress: c_int,
}

/// `ncclNetProperties_v8_t`.
#[repr(C)]
#[derive(Debug)]
pub struct ncclNetProperties_v8_t {
    pub name: *mut c_char,
    pub pciPath: *mut c_char,
    pub guid: u64,
    pub ptrSupport: c_int,
    pub regIsGlobal: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub maxComms: c_int,
    pub maxRecvs: c_int,
    pub netDeviceType: c_int,
    pub netDeviceVersion: c_int,
}

/// `ncclNetVDeviceProps_v9_t` / `_v10_t` / `_v11_t` (`NCCL_NET_MAX_DEVS_PER_NIC_V11` = 4) and
/// `_v12_t` (8).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ncclNetVDeviceProps<const N: usize> {
    pub ndevs: c_int,
    pub devs: [c_int; N],
}

/// `ncclNetProperties_v9_t` and `_v10_t` (identical).
#[repr(C)]
#[derive(Debug)]
pub struct ncclNetProperties_v9_t {
    pub name: *mut c_char,
    pub pciPath: *mut c_char,
    pub guid: u64,
    pub ptrSupport: c_int,
    pub regIsGlobal: c_int,
    pub forceFlush: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub maxComms: c_int,
    pub maxRecvs: c_int,
    pub netDeviceType: c_int,
    pub netDeviceVersion: c_int,
    pub vProps: ncclNetVDeviceProps<4>,
    pub maxP2pBytes: usize,
    pub maxCollBytes: usize,
}

/// `ncclNetProperties_v11_t`.
#[repr(C)]
#[derive(Debug)]
pub struct ncclNetProperties_v11_t {
    pub v9: ncclNetProperties_v9_t,
    pub maxMultiRequestSize: c_int,
}

/// `ncclNetProperties_v12_t`.
#[repr(C)]
#[derive(Debug)]
pub struct ncclNetProperties_v12_t {
    pub name: *mut c_char,
    pub pciPath: *mut c_char,
    pub guid: u64,
    pub ptrSupport: c_int,
    pub regIsGlobal: c_int,
    pub forceFlush: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub maxComms: c_int,
    pub maxRecvs: c_int,
    pub netDeviceType: c_int,
    pub netDeviceVersion: c_int,
    pub vProps: ncclNetVDeviceProps<8>,
    pub maxP2pBytes: usize,
    pub maxCollBytes: usize,
    pub maxMultiRequestSize: c_int,
    pub railId: i16,
    pub planeId: i16,
}

/// `ncclNetCommConfig_v10_t` .. `_v12_t`.
#[repr(C)]
#[derive(Debug)]
pub struct ncclNetCommConfig_t {
    pub trafficClass: c_int,
}

/// An opaque `void*` argument.
pub type Ptr = *mut c_void;
/// `void**`.
pub type PtrPtr = *mut *mut c_void;
/// `ncclNetDeviceHandle_t**`.
pub type DevPtrPtr = *mut *mut ncclNetDeviceHandle_t;

/// Functions shared by every version from v8 on.
pub type RegMrFn = unsafe extern "C" fn(Ptr, Ptr, usize, c_int, PtrPtr) -> ncclResult_t;
pub type RegMrDmaBufFn =
    unsafe extern "C" fn(Ptr, Ptr, usize, c_int, u64, c_int, PtrPtr) -> ncclResult_t;
pub type DeregMrFn = unsafe extern "C" fn(Ptr, Ptr) -> ncclResult_t;
pub type IflushFn =
    unsafe extern "C" fn(Ptr, c_int, PtrPtr, *mut c_int, PtrPtr, PtrPtr) -> ncclResult_t;
pub type TestFn = unsafe extern "C" fn(Ptr, *mut c_int, *mut c_int) -> ncclResult_t;
pub type CloseFn = unsafe extern "C" fn(Ptr) -> ncclResult_t;
pub type AcceptFn = unsafe extern "C" fn(Ptr, PtrPtr, DevPtrPtr) -> ncclResult_t;
pub type DevicesFn = unsafe extern "C" fn(*mut c_int) -> ncclResult_t;
pub type GetDeviceMrFn = unsafe extern "C" fn(Ptr, Ptr, PtrPtr) -> ncclResult_t;
pub type IrecvConsumedFn = unsafe extern "C" fn(Ptr, c_int, Ptr) -> ncclResult_t;
pub type MakeVDeviceFn = unsafe extern "C" fn(*mut c_int, Ptr) -> ncclResult_t;

/// `ncclNet_v8_t`.
#[repr(C)]
#[derive(Debug)]
pub struct ncclNet_v8_t {
    pub name: *const c_char,
    pub init: unsafe extern "C" fn(ncclDebugLogger_t) -> ncclResult_t,
    pub devices: DevicesFn,
    pub getProperties: unsafe extern "C" fn(c_int, *mut ncclNetProperties_v8_t) -> ncclResult_t,
    pub listen: unsafe extern "C" fn(c_int, Ptr, PtrPtr) -> ncclResult_t,
    pub connect: unsafe extern "C" fn(c_int, Ptr, PtrPtr, DevPtrPtr) -> ncclResult_t,
    pub accept: AcceptFn,
    pub regMr: RegMrFn,
    pub regMrDmaBuf: Option<RegMrDmaBufFn>,
    pub deregMr: DeregMrFn,
    pub isend: unsafe extern "C" fn(Ptr, Ptr, c_int, c_int, Ptr, PtrPtr) -> ncclResult_t,
    pub irecv: unsafe extern "C" fn(
        Ptr,
        c_int,
        PtrPtr,
        *mut c_int,
        *mut c_int,
        PtrPtr,
        PtrPtr,
    ) -> ncclResult_t,
    pub iflush: IflushFn,
    pub test: TestFn,
    pub closeSend: CloseFn,
    pub closeRecv: CloseFn,
    pub closeListen: CloseFn,
    pub getDeviceMr: Option<GetDeviceMrFn>,
    pub irecvConsumed: Option<IrecvConsumedFn>,
}

/// `ncclNet_v9_t`.
#[repr(C)]
#[derive(Debug)]
pub struct ncclNet_v9_t {
    pub name: *const c_char,
    pub init: unsafe extern "C" fn(ncclDebugLogger_t) -> ncclResult_t,
    pub devices: DevicesFn,
    pub getProperties: unsafe extern "C" fn(c_int, *mut ncclNetProperties_v9_t) -> ncclResult_t,
    pub listen: unsafe extern "C" fn(c_int, Ptr, PtrPtr) -> ncclResult_t,
    pub connect: unsafe extern "C" fn(c_int, Ptr, PtrPtr, DevPtrPtr) -> ncclResult_t,
    pub accept: AcceptFn,
    pub regMr: RegMrFn,
    pub regMrDmaBuf: Option<RegMrDmaBufFn>,
    pub deregMr: DeregMrFn,
    pub isend: unsafe extern "C" fn(Ptr, Ptr, usize, c_int, Ptr, PtrPtr) -> ncclResult_t,
    pub irecv: unsafe extern "C" fn(
        Ptr,
        c_int,
        PtrPtr,
        *mut usize,
        *mut c_int,
        PtrPtr,
        PtrPtr,
    ) -> ncclResult_t,
    pub iflush: IflushFn,
    pub test: TestFn,
    pub closeSend: CloseFn,
    pub closeRecv: CloseFn,
    pub closeListen: CloseFn,
    pub getDeviceMr: Option<GetDeviceMrFn>,
    pub irecvConsumed: Option<IrecvConsumedFn>,
    pub makeVDevice: Option<MakeVDeviceFn>,
}

/// `isend` of v10 and later (with the profiler handle).
pub type IsendV10Fn =
    unsafe extern "C" fn(Ptr, Ptr, usize, c_int, Ptr, Ptr, PtrPtr) -> ncclResult_t;
/// `irecv` of v10 and later (with the profiler handles).
pub type IrecvV10Fn = unsafe extern "C" fn(
    Ptr,
    c_int,
    PtrPtr,
    *mut usize,
    *mut c_int,
    PtrPtr,
    PtrPtr,
    PtrPtr,
) -> ncclResult_t;

/// `ncclNet_v10_t`.
#[repr(C)]
#[derive(Debug)]
pub struct ncclNet_v10_t {
    pub name: *const c_char,
    pub init: unsafe extern "C" fn(ncclDebugLogger_t, ncclProfilerCallback_t) -> ncclResult_t,
    pub devices: DevicesFn,
    pub getProperties: unsafe extern "C" fn(c_int, *mut ncclNetProperties_v9_t) -> ncclResult_t,
    pub listen: unsafe extern "C" fn(c_int, Ptr, PtrPtr) -> ncclResult_t,
    pub connect: unsafe extern "C" fn(
        c_int,
        *mut ncclNetCommConfig_t,
        Ptr,
        PtrPtr,
        DevPtrPtr,
    ) -> ncclResult_t,
    pub accept: AcceptFn,
    pub regMr: RegMrFn,
    pub regMrDmaBuf: Option<RegMrDmaBufFn>,
    pub deregMr: DeregMrFn,
    pub isend: IsendV10Fn,
    pub irecv: IrecvV10Fn,
    pub iflush: IflushFn,
    pub test: TestFn,
    pub closeSend: CloseFn,
    pub closeRecv: CloseFn,
    pub closeListen: CloseFn,
    pub getDeviceMr: Option<GetDeviceMrFn>,
    pub irecvConsumed: Option<IrecvConsumedFn>,
    pub makeVDevice: Option<MakeVDeviceFn>,
}

/// `init` of v11 and later: a context per communicator.
pub type InitV11Fn = unsafe extern "C" fn(
    PtrPtr,
    u64,
    *mut ncclNetCommConfig_t,
    ncclDebugLogger_t,
    ncclProfilerCallback_t,
) -> ncclResult_t;

/// `ncclNet_v11_t`; `ncclNet_v12_t` differs only in its properties struct.
#[repr(C)]
#[derive(Debug)]
pub struct ncclNet_v11_t<P> {
    pub name: *const c_char,
    pub init: InitV11Fn,
    pub devices: DevicesFn,
    pub getProperties: unsafe extern "C" fn(c_int, *mut P) -> ncclResult_t,
    pub listen: unsafe extern "C" fn(Ptr, c_int, Ptr, PtrPtr) -> ncclResult_t,
    pub connect: unsafe extern "C" fn(Ptr, c_int, Ptr, PtrPtr, DevPtrPtr) -> ncclResult_t,
    pub accept: AcceptFn,
    pub regMr: RegMrFn,
    pub regMrDmaBuf: Option<RegMrDmaBufFn>,
    pub deregMr: DeregMrFn,
    pub isend: IsendV10Fn,
    pub irecv: IrecvV10Fn,
    pub iflush: IflushFn,
    pub test: TestFn,
    pub closeSend: CloseFn,
    pub closeRecv: CloseFn,
    pub closeListen: CloseFn,
    pub getDeviceMr: Option<GetDeviceMrFn>,
    pub irecvConsumed: Option<IrecvConsumedFn>,
    pub makeVDevice: Option<MakeVDeviceFn>,
    pub finalize: unsafe extern "C" fn(Ptr) -> ncclResult_t,
    pub setNetAttr: Option<unsafe extern "C" fn(Ptr, Ptr) -> ncclResult_t>,
}

/// A table NCCL finds by `dlsym`: a static of raw pointers, which Rust does not share between
/// threads unless told.
#[repr(transparent)]
#[derive(Debug)]
pub struct Exported<T>(pub T);

// SAFETY: the tables are immutable statics holding function pointers and a pointer to a static
// string; reading them from any thread is sound.
unsafe impl<T> Sync for Exported<T> {}

#[cfg(all(test, target_pointer_width = "64"))]
mod layout {
    //! Sizes and offsets for LP64 Linux, computed by hand from the C headers.
    use super::*;
    use std::mem::{offset_of, size_of};

    #[zcnet_testkit::test]
    fn device_handle() {
        assert_eq!(size_of::<ncclNetDeviceHandle_t>(), 32);
        assert_eq!(offset_of!(ncclNetDeviceHandle_t, handle), 8);
        assert_eq!(offset_of!(ncclNetDeviceHandle_t, size), 16);
        assert_eq!(offset_of!(ncclNetDeviceHandle_t, needsProxyProgress), 24);
    }

    #[zcnet_testkit::test]
    fn properties_v8() {
        assert_eq!(size_of::<ncclNetProperties_v8_t>(), 64);
        assert_eq!(offset_of!(ncclNetProperties_v8_t, guid), 16);
        assert_eq!(offset_of!(ncclNetProperties_v8_t, ptrSupport), 24);
        assert_eq!(offset_of!(ncclNetProperties_v8_t, speed), 32);
        assert_eq!(offset_of!(ncclNetProperties_v8_t, latency), 40);
        assert_eq!(offset_of!(ncclNetProperties_v8_t, maxRecvs), 48);
        assert_eq!(offset_of!(ncclNetProperties_v8_t, netDeviceVersion), 56);
    }

    #[zcnet_testkit::test]
    fn properties_v9_v10_v11() {
        assert_eq!(size_of::<ncclNetProperties_v9_t>(), 104);
        assert_eq!(offset_of!(ncclNetProperties_v9_t, forceFlush), 32);
        assert_eq!(offset_of!(ncclNetProperties_v9_t, latency), 44);
        assert_eq!(offset_of!(ncclNetProperties_v9_t, netDeviceVersion), 60);
        assert_eq!(offset_of!(ncclNetProperties_v9_t, vProps), 64);
        assert_eq!(offset_of!(ncclNetProperties_v9_t, maxP2pBytes), 88);
        assert_eq!(offset_of!(ncclNetProperties_v9_t, maxCollBytes), 96);
        assert_eq!(size_of::<ncclNetProperties_v11_t>(), 112);
        assert_eq!(
            offset_of!(ncclNetProperties_v11_t, maxMultiRequestSize),
            104
        );
    }

    #[zcnet_testkit::test]
    fn properties_v12() {
        assert_eq!(size_of::<ncclNetProperties_v12_t>(), 128);
        assert_eq!(offset_of!(ncclNetProperties_v12_t, vProps), 64);
        assert_eq!(offset_of!(ncclNetProperties_v12_t, maxP2pBytes), 104);
        assert_eq!(offset_of!(ncclNetProperties_v12_t, maxCollBytes), 112);
        assert_eq!(
            offset_of!(ncclNetProperties_v12_t, maxMultiRequestSize),
            120
        );
        assert_eq!(offset_of!(ncclNetProperties_v12_t, railId), 124);
        assert_eq!(offset_of!(ncclNetProperties_v12_t, planeId), 126);
    }

    #[zcnet_testkit::test]
    fn tables_are_a_name_and_function_pointers_in_header_order() {
        assert_eq!(size_of::<ncclNet_v8_t>(), 19 * 8);
        assert_eq!(offset_of!(ncclNet_v8_t, isend), 10 * 8);
        assert_eq!(offset_of!(ncclNet_v8_t, irecvConsumed), 18 * 8);
        assert_eq!(size_of::<ncclNet_v9_t>(), 20 * 8);
        assert_eq!(offset_of!(ncclNet_v9_t, makeVDevice), 19 * 8);
        assert_eq!(size_of::<ncclNet_v10_t>(), 20 * 8);
        assert_eq!(offset_of!(ncclNet_v10_t, test), 13 * 8);
        type V11 = ncclNet_v11_t<ncclNetProperties_v11_t>;
        // v9's 19 functions, then finalize and setNetAttr.
        assert_eq!(size_of::<V11>(), 22 * 8);
        assert_eq!(offset_of!(V11, makeVDevice), 19 * 8);
        assert_eq!(offset_of!(V11, finalize), 20 * 8);
        assert_eq!(offset_of!(V11, setNetAttr), 21 * 8);
        // Option<fn> is a nullable pointer: NULL where a function is absent.
        assert_eq!(size_of::<Option<RegMrDmaBufFn>>(), 8);
    }
}
