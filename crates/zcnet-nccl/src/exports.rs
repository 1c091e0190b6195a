//! The `extern "C"` boundary: the tables NCCL looks up (`ncclNetPlugin_v12` down to `_v8`) and
//! one thin function per entry point. Each checks its pointers, turns them into safe values at
//! once, runs the version-independent call in `api` inside `catch_unwind`, and maps the result
//! to an `ncclResult_t` with one log line on failure. No logic lives here.

use crate::abi::*;
use crate::api;
use crate::error::{PluginError, Result};
use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use zcnet::engine::ForeignBuf;

/// Runs `f`, catching panics; errors are logged once with the call's name.
fn guard(what: &str, f: impl FnOnce() -> Result<()>) -> ncclResult_t {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => NCCL_SUCCESS,
        Ok(Err(e)) => {
            crate::log::warn(&format!("{what}: {e}"));
            e.code()
        }
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            crate::log::warn(&format!(
                "{what}: internal error: panic: {msg} (please report)"
            ));
            NCCL_INTERNAL_ERROR
        }
    }
}

fn null(what: &str) -> PluginError {
    PluginError::Invalid(format!("{what} is NULL"))
}

/// A handle NCCL gave back, as our key.
fn key(p: *mut c_void, what: &str) -> Result<u64> {
    if p.is_null() {
        return Err(null(what));
    }
    Ok(p as usize as u64)
}

fn as_ptr(k: u64) -> *mut c_void {
    k as usize as *mut c_void
}

/// Writes `v` through an out-pointer after checking it.
///
/// # Safety
/// `p` must be NULL or valid for a write of `T`.
unsafe fn put<T>(p: *mut T, v: T, what: &str) -> Result<()> {
    if p.is_null() {
        return Err(null(what));
    }
    // SAFETY: non-null, and the caller promised it is valid for a write.
    unsafe { p.write(v) };
    Ok(())
}

static CTX: u8 = 0;

fn ctx() -> *mut c_void {
    std::ptr::addr_of!(CTX) as *mut c_void
}

// ---- init, devices, properties --------------------------------------------------------------

unsafe extern "C" fn init_v8(logger: ncclDebugLogger_t) -> ncclResult_t {
    crate::log::set_logger(logger);
    guard("init", || api::init().map(drop))
}

unsafe extern "C" fn init_v10(
    logger: ncclDebugLogger_t,
    _p: ncclProfilerCallback_t,
) -> ncclResult_t {
    // SAFETY: same contract as init_v8.
    unsafe { init_v8(logger) }
}

unsafe extern "C" fn init_v11(
    ctx_out: PtrPtr,
    _comm_id: u64,
    _config: *mut ncclNetCommConfig_t,
    logger: ncclDebugLogger_t,
    _p: ncclProfilerCallback_t,
) -> ncclResult_t {
    crate::log::set_logger(logger);
    guard("init", || {
        api::init()?;
        // SAFETY: NCCL passes a valid void** for the context.
        unsafe { put(ctx_out, ctx(), "init: ctx") }
    })
}

unsafe extern "C" fn finalize(c: Ptr) -> ncclResult_t {
    guard("finalize", || {
        if c != ctx() {
            return Err(PluginError::Usage(
                "finalize: not a context of this plugin".into(),
            ));
        }
        api::finalize()
    })
}

unsafe extern "C" fn set_net_attr(_c: Ptr, _attr: Ptr) -> ncclResult_t {
    NCCL_SUCCESS
}

unsafe extern "C" fn devices(n: *mut c_int) -> ncclResult_t {
    guard("devices", || {
        let count = api::engine()?.devices.len() as c_int;
        // SAFETY: NCCL passes a valid int*.
        unsafe { put(n, count, "devices: ndev") }
    })
}

/// The properties every version shares, in v12's shape.
fn props(dev: c_int) -> Result<ncclNetProperties_v12_t> {
    let d = api::device(dev)?;
    let mut devs = [0; 8];
    devs[0] = dev;
    Ok(ncclNetProperties_v12_t {
        name: d.name.as_ptr().cast_mut(),
        pciPath: d
            .pci_path
            .as_ref()
            .map_or(std::ptr::null_mut(), |p| p.as_ptr().cast_mut()),
        guid: dev as u64,
        ptrSupport: PTR_HOST,
        regIsGlobal: 0,
        forceFlush: 0,
        speed: d.speed_mbps,
        port: 0,
        latency: 0.0,
        maxComms: 65_536,
        maxRecvs: crate::data::MAX_RECVS as c_int,
        netDeviceType: NET_DEVICE_HOST,
        netDeviceVersion: NET_DEVICE_INVALID_VERSION,
        vProps: ncclNetVDeviceProps { ndevs: 1, devs },
        maxP2pBytes: MAX_NET_SIZE,
        maxCollBytes: MAX_NET_SIZE,
        maxMultiRequestSize: 1,
        railId: NET_ID_UNDEF,
        planeId: NET_ID_UNDEF,
    })
}

fn v9_of(p: &ncclNetProperties_v12_t) -> ncclNetProperties_v9_t {
    let mut devs = [0; 4];
    devs[0] = p.vProps.devs[0];
    ncclNetProperties_v9_t {
        name: p.name,
        pciPath: p.pciPath,
        guid: p.guid,
        ptrSupport: p.ptrSupport,
        regIsGlobal: p.regIsGlobal,
        forceFlush: p.forceFlush,
        speed: p.speed,
        port: p.port,
        latency: p.latency,
        maxComms: p.maxComms,
        maxRecvs: p.maxRecvs,
        netDeviceType: p.netDeviceType,
        netDeviceVersion: p.netDeviceVersion,
        vProps: ncclNetVDeviceProps { ndevs: 1, devs },
        maxP2pBytes: p.maxP2pBytes,
        maxCollBytes: p.maxCollBytes,
    }
}

unsafe extern "C" fn get_properties_v8(
    dev: c_int,
    out: *mut ncclNetProperties_v8_t,
) -> ncclResult_t {
    guard("getProperties", || {
        let p = props(dev)?;
        let v8 = ncclNetProperties_v8_t {
            name: p.name,
            pciPath: p.pciPath,
            guid: p.guid,
            ptrSupport: p.ptrSupport,
            regIsGlobal: p.regIsGlobal,
            speed: p.speed,
            port: p.port,
            latency: p.latency,
            maxComms: p.maxComms,
            maxRecvs: p.maxRecvs,
            netDeviceType: p.netDeviceType,
            netDeviceVersion: p.netDeviceVersion,
        };
        // SAFETY: NCCL passes a valid properties struct of this version.
        unsafe { put(out, v8, "getProperties: props") }
    })
}

unsafe extern "C" fn get_properties_v9(
    dev: c_int,
    out: *mut ncclNetProperties_v9_t,
) -> ncclResult_t {
    // SAFETY: NCCL passes a valid properties struct of this version.
    guard("getProperties", || unsafe {
        put(out, v9_of(&props(dev)?), "getProperties: props")
    })
}

unsafe extern "C" fn get_properties_v11(
    dev: c_int,
    out: *mut ncclNetProperties_v11_t,
) -> ncclResult_t {
    guard("getProperties", || {
        let p = props(dev)?;
        let v11 = ncclNetProperties_v11_t {
            v9: v9_of(&p),
            maxMultiRequestSize: p.maxMultiRequestSize,
        };
        // SAFETY: NCCL passes a valid properties struct of this version.
        unsafe { put(out, v11, "getProperties: props") }
    })
}

unsafe extern "C" fn get_properties_v12(
    dev: c_int,
    out: *mut ncclNetProperties_v12_t,
) -> ncclResult_t {
    // SAFETY: NCCL passes a valid properties struct of this version.
    guard("getProperties", || unsafe {
        put(out, props(dev)?, "getProperties: props")
    })
}

// ---- connections ----------------------------------------------------------------------------

/// NCCL's handle buffer as a slice.
///
/// # Safety
/// `h` must be NULL or point to NCCL_NET_HANDLE_MAXSIZE writable bytes.
unsafe fn handle_buf<'a>(h: Ptr) -> Result<&'a mut [u8]> {
    if h.is_null() {
        return Err(null("handle"));
    }
    // SAFETY: NCCL's handles are NCCL_NET_HANDLE_MAXSIZE bytes it owns for the call.
    Ok(unsafe { std::slice::from_raw_parts_mut(h.cast::<u8>(), NET_HANDLE_MAXSIZE) })
}

unsafe extern "C" fn listen_v8(dev: c_int, handle: Ptr, out: PtrPtr) -> ncclResult_t {
    guard("listen", || {
        // SAFETY: see handle_buf; `out` is NCCL's void**.
        let buf = unsafe { handle_buf(handle)? };
        if out.is_null() {
            return Err(null("listen: listenComm"));
        }
        let k = api::listen(dev, buf)?;
        // SAFETY: checked non-null above; NCCL's void**.
        unsafe { put(out, as_ptr(k), "listen: listenComm") }
    })
}

unsafe extern "C" fn listen_v11(_c: Ptr, dev: c_int, handle: Ptr, out: PtrPtr) -> ncclResult_t {
    // SAFETY: same contract as listen_v8.
    unsafe { listen_v8(dev, handle, out) }
}

unsafe extern "C" fn connect_v8(
    dev: c_int,
    handle: Ptr,
    out: PtrPtr,
    _d: DevPtrPtr,
) -> ncclResult_t {
    guard("connect", || {
        // SAFETY: see handle_buf.
        let buf = unsafe { handle_buf(handle)? };
        if out.is_null() {
            return Err(null("connect: sendComm"));
        }
        let k = api::connect(dev, buf)?;
        // SAFETY: checked non-null; NULL means "call again".
        unsafe {
            put(
                out,
                k.map_or(std::ptr::null_mut(), as_ptr),
                "connect: sendComm",
            )
        }
    })
}

unsafe extern "C" fn connect_v10(
    dev: c_int,
    _cfg: *mut ncclNetCommConfig_t,
    handle: Ptr,
    out: PtrPtr,
    d: DevPtrPtr,
) -> ncclResult_t {
    // SAFETY: same contract as connect_v8.
    unsafe { connect_v8(dev, handle, out, d) }
}

unsafe extern "C" fn connect_v11(
    _c: Ptr,
    dev: c_int,
    handle: Ptr,
    out: PtrPtr,
    d: DevPtrPtr,
) -> ncclResult_t {
    // SAFETY: same contract as connect_v8.
    unsafe { connect_v8(dev, handle, out, d) }
}

unsafe extern "C" fn accept(listen: Ptr, out: PtrPtr, _d: DevPtrPtr) -> ncclResult_t {
    guard("accept", || {
        let l = key(listen, "accept: listenComm")?;
        if out.is_null() {
            return Err(null("accept: recvComm"));
        }
        let k = api::accept(l)?;
        // SAFETY: checked non-null; NULL means "call again".
        unsafe {
            put(
                out,
                k.map_or(std::ptr::null_mut(), as_ptr),
                "accept: recvComm",
            )
        }
    })
}

unsafe extern "C" fn close_send(c: Ptr) -> ncclResult_t {
    guard("closeSend", || api::close(key(c, "sendComm")?, "send comm"))
}

unsafe extern "C" fn close_recv(c: Ptr) -> ncclResult_t {
    guard("closeRecv", || {
        api::close(key(c, "recvComm")?, "receive comm")
    })
}

unsafe extern "C" fn close_listen(c: Ptr) -> ncclResult_t {
    guard("closeListen", || {
        api::close(key(c, "listenComm")?, "listen comm")
    })
}

// ---- memory and data ------------------------------------------------------------------------

unsafe extern "C" fn reg_mr(
    comm: Ptr,
    data: Ptr,
    size: usize,
    ty: c_int,
    out: PtrPtr,
) -> ncclResult_t {
    guard("regMr", || {
        if data.is_null() && size > 0 {
            return Err(null("regMr: data"));
        }
        let k = api::reg_mr(key(comm, "regMr: comm")?, data as usize, size, ty)?;
        // SAFETY: NCCL's void** for the memory handle.
        unsafe { put(out, as_ptr(k), "regMr: mhandle") }
    })
}

unsafe extern "C" fn dereg_mr(_comm: Ptr, mr: Ptr) -> ncclResult_t {
    guard("deregMr", || api::dereg_mr(key(mr, "deregMr: mhandle")?))
}

/// Lends NCCL's buffer to the comm.
///
/// # Safety
/// `data` must be valid for `len` bytes until `test` reports the request done (NCCL's
/// contract for isend/irecv).
unsafe fn lend(data: Ptr, len: usize, what: &str) -> Result<ForeignBuf> {
    // SAFETY: the caller's promise.
    unsafe { ForeignBuf::new(data.cast::<u8>(), len) }.ok_or_else(|| null(what))
}

fn mr_key(m: Ptr) -> u64 {
    m as usize as u64
}

unsafe fn isend_any(
    comm: Ptr,
    data: Ptr,
    size: usize,
    tag: c_int,
    mr: Ptr,
    req: PtrPtr,
) -> ncclResult_t {
    guard("isend", || {
        let c = key(comm, "isend: sendComm")?;
        if req.is_null() {
            return Err(null("isend: request"));
        }
        // SAFETY: NCCL keeps `data` valid until the request is done.
        let buf = unsafe { lend(data, size, "isend: data")? };
        let r = api::isend(c, buf, tag, mr_key(mr))?;
        // SAFETY: checked non-null; NULL asks NCCL to retry.
        unsafe {
            put(
                req,
                r.map_or(std::ptr::null_mut(), as_ptr),
                "isend: request",
            )
        }
    })
}

unsafe extern "C" fn isend_v8(
    c: Ptr,
    d: Ptr,
    size: c_int,
    tag: c_int,
    m: Ptr,
    r: PtrPtr,
) -> ncclResult_t {
    if size < 0 {
        return guard("isend", || {
            Err(PluginError::Invalid(format!("isend: size {size}")))
        });
    }
    // SAFETY: NCCL's isend contract.
    unsafe { isend_any(c, d, size as usize, tag, m, r) }
}

unsafe extern "C" fn isend_v9(
    c: Ptr,
    d: Ptr,
    size: usize,
    tag: c_int,
    m: Ptr,
    r: PtrPtr,
) -> ncclResult_t {
    // SAFETY: NCCL's isend contract.
    unsafe { isend_any(c, d, size, tag, m, r) }
}

unsafe extern "C" fn isend_v10(
    c: Ptr,
    d: Ptr,
    size: usize,
    tag: c_int,
    m: Ptr,
    _p: Ptr,
    r: PtrPtr,
) -> ncclResult_t {
    // SAFETY: NCCL's isend contract.
    unsafe { isend_any(c, d, size, tag, m, r) }
}

/// irecv for every version: `size_of(i)` reads the i-th size.
unsafe fn irecv_any(
    comm: Ptr,
    n: c_int,
    data: PtrPtr,
    size_of: &dyn Fn(usize) -> Result<usize>,
    tags: *mut c_int,
    mrs: PtrPtr,
    req: PtrPtr,
) -> ncclResult_t {
    guard("irecv", || {
        let c = key(comm, "irecv: recvComm")?;
        let n = usize::try_from(n)
            .ok()
            .filter(|n| (1..=crate::data::MAX_RECVS).contains(n))
            .ok_or_else(|| {
                PluginError::Invalid(format!("irecv: n = {n} (1 to {})", crate::data::MAX_RECVS))
            })?;
        if data.is_null() || tags.is_null() || req.is_null() {
            return Err(null("irecv: data, tags or request"));
        }
        let mut bufs = Vec::with_capacity(n);
        let mut tag_v = Vec::with_capacity(n);
        let mut mr_v = Vec::with_capacity(n);
        for i in 0..n {
            // SAFETY: NCCL passes arrays of n entries.
            let (d, t, m) = unsafe {
                (
                    *data.add(i),
                    *tags.add(i),
                    if mrs.is_null() {
                        std::ptr::null_mut()
                    } else {
                        *mrs.add(i)
                    },
                )
            };
            // SAFETY: NCCL keeps each buffer valid until the request is done.
            bufs.push(unsafe { lend(d, size_of(i)?, "irecv: data[i]")? });
            tag_v.push(t);
            mr_v.push(mr_key(m));
        }
        let r = api::irecv(c, bufs, &tag_v, &mr_v)?;
        // SAFETY: checked non-null; NULL asks NCCL to retry.
        unsafe {
            put(
                req,
                r.map_or(std::ptr::null_mut(), as_ptr),
                "irecv: request",
            )
        }
    })
}

unsafe extern "C" fn irecv_v8(
    c: Ptr,
    n: c_int,
    d: PtrPtr,
    sizes: *mut c_int,
    tags: *mut c_int,
    m: PtrPtr,
    r: PtrPtr,
) -> ncclResult_t {
    let size_of = |i: usize| -> Result<usize> {
        if sizes.is_null() {
            return Err(null("irecv: sizes"));
        }
        // SAFETY: NCCL passes n sizes; i < n.
        let s = unsafe { *sizes.add(i) };
        usize::try_from(s).map_err(|_| PluginError::Invalid(format!("irecv: size {s}")))
    };
    // SAFETY: NCCL's irecv contract.
    unsafe { irecv_any(c, n, d, &size_of, tags, m, r) }
}

unsafe extern "C" fn irecv_v9(
    c: Ptr,
    n: c_int,
    d: PtrPtr,
    sizes: *mut usize,
    tags: *mut c_int,
    m: PtrPtr,
    r: PtrPtr,
) -> ncclResult_t {
    let size_of = |i: usize| -> Result<usize> {
        if sizes.is_null() {
            return Err(null("irecv: sizes"));
        }
        // SAFETY: NCCL passes n sizes; i < n.
        Ok(unsafe { *sizes.add(i) })
    };
    // SAFETY: NCCL's irecv contract.
    unsafe { irecv_any(c, n, d, &size_of, tags, m, r) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn irecv_v10(
    c: Ptr,
    n: c_int,
    d: PtrPtr,
    sizes: *mut usize,
    tags: *mut c_int,
    m: PtrPtr,
    _p: PtrPtr,
    r: PtrPtr,
) -> ncclResult_t {
    // SAFETY: same contract as v9.
    unsafe { irecv_v9(c, n, d, sizes, tags, m, r) }
}

unsafe extern "C" fn iflush(
    _c: Ptr,
    _n: c_int,
    _d: PtrPtr,
    _s: *mut c_int,
    _m: PtrPtr,
    req: PtrPtr,
) -> ncclResult_t {
    // Host memory only: nothing to flush; a request that is already done.
    guard("iflush", || {
        let k = api::done_request()?;
        // SAFETY: NCCL's void** for the request.
        unsafe { put(req, as_ptr(k), "iflush: request") }
    })
}

unsafe extern "C" fn test(req: Ptr, done: *mut c_int, sizes: *mut c_int) -> ncclResult_t {
    guard("test", || {
        let r = key(req, "test: request")?;
        if done.is_null() {
            return Err(null("test: done"));
        }
        let out = api::test(r)?;
        if let (Some(s), false) = (&out, sizes.is_null()) {
            for (i, n) in s.iter().enumerate() {
                // SAFETY: NCCL passes room for one size per buffer of the request.
                unsafe { *sizes.add(i) = *n as c_int };
            }
        }
        // SAFETY: checked non-null.
        unsafe { put(done, c_int::from(out.is_some()), "test: done") }
    })
}

// ---- the tables -----------------------------------------------------------------------------

const NAME: *const std::ffi::c_char = c"zcnet".as_ptr();

/// The newest table NCCL 2.20 - 2.23 look up.
#[no_mangle]
pub static ncclNetPlugin_v8: Exported<ncclNet_v8_t> = Exported(ncclNet_v8_t {
    name: NAME,
    init: init_v8,
    devices,
    getProperties: get_properties_v8,
    listen: listen_v8,
    connect: connect_v8,
    accept,
    regMr: reg_mr,
    regMrDmaBuf: None,
    deregMr: dereg_mr,
    isend: isend_v8,
    irecv: irecv_v8,
    iflush,
    test,
    closeSend: close_send,
    closeRecv: close_recv,
    closeListen: close_listen,
    getDeviceMr: None,
    irecvConsumed: None,
});

/// The newest table NCCL 2.24 - 2.25 look up.
#[no_mangle]
pub static ncclNetPlugin_v9: Exported<ncclNet_v9_t> = Exported(ncclNet_v9_t {
    name: NAME,
    init: init_v8,
    devices,
    getProperties: get_properties_v9,
    listen: listen_v8,
    connect: connect_v8,
    accept,
    regMr: reg_mr,
    regMrDmaBuf: None,
    deregMr: dereg_mr,
    isend: isend_v9,
    irecv: irecv_v9,
    iflush,
    test,
    closeSend: close_send,
    closeRecv: close_recv,
    closeListen: close_listen,
    getDeviceMr: None,
    irecvConsumed: None,
    makeVDevice: None,
});

/// The newest table NCCL 2.26 - 2.27 look up.
#[no_mangle]
pub static ncclNetPlugin_v10: Exported<ncclNet_v10_t> = Exported(ncclNet_v10_t {
    name: NAME,
    init: init_v10,
    devices,
    getProperties: get_properties_v9,
    listen: listen_v8,
    connect: connect_v10,
    accept,
    regMr: reg_mr,
    regMrDmaBuf: None,
    deregMr: dereg_mr,
    isend: isend_v10,
    irecv: irecv_v10,
    iflush,
    test,
    closeSend: close_send,
    closeRecv: close_recv,
    closeListen: close_listen,
    getDeviceMr: None,
    irecvConsumed: None,
    makeVDevice: None,
});

macro_rules! table_v11 {
    ($props:ty, $get:expr) => {
        Exported(ncclNet_v11_t::<$props> {
            name: NAME,
            init: init_v11,
            devices,
            getProperties: $get,
            listen: listen_v11,
            connect: connect_v11,
            accept,
            regMr: reg_mr,
            regMrDmaBuf: None,
            deregMr: dereg_mr,
            isend: isend_v10,
            irecv: irecv_v10,
            iflush,
            test,
            closeSend: close_send,
            closeRecv: close_recv,
            closeListen: close_listen,
            getDeviceMr: None,
            irecvConsumed: None,
            makeVDevice: None,
            finalize,
            setNetAttr: Some(set_net_attr),
        })
    };
}

/// The newest table NCCL 2.28 - 2.29 look up.
#[no_mangle]
pub static ncclNetPlugin_v11: Exported<ncclNet_v11_t<ncclNetProperties_v11_t>> =
    table_v11!(ncclNetProperties_v11_t, get_properties_v11);

/// The newest table NCCL 2.30 and later look up.
#[no_mangle]
pub static ncclNetPlugin_v12: Exported<ncclNet_v11_t<ncclNetProperties_v12_t>> =
    table_v11!(ncclNetProperties_v12_t, get_properties_v12);
