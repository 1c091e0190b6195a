//! # zcnet-nixl: a NIXL backend plugin named ZCNET
//!
//! Built as `libplugin_ZCNET.so`, which NIXL's agent (the stock `nixl-cu12==1.5.1` wheel)
//! loads from `NIXL_PLUGIN_DIR`. Two halves in one shared object:
//!
//! ```text
//!  libnixl.so (the wheel's agent)
//!      │ dlsym("nixl_plugin_init")         ── here (Rust: the cdylib exports only Rust's symbols)
//!      ▼
//!  cxx/engine.cpp   nixlBackendPlugin, ZcnetEngine : nixlBackendEngine   (NIXL's C++ ABI,
//!      │            declared in cxx/nixl_abi.hpp from NIXL's headers, checked against the wheel)
//!      │ extern "C" zcnet_nixl_rs_*
//!      ▼
//!  transport        TCP connections the plugin owns, threads blocked in the kernel when idle
//! ```
//!
//! Phase 1 (see docs/design.md, "NIXL backend (ZCNET)"): DRAM_SEG and VRAM_SEG memory (VRAM
//! staged through host memory by zcnet's GPU code), WRITE and READ between agents in different
//! processes, notifications with a transfer and alone, stale connection info refused. Sends go
//! through zcnet's `Sender` (`auto`), receives are plain `read()`s into registered memory: see
//! [`transport`].
//!
//! Backend parameters (`create_backend("ZCNET", {...})`): `ip_addr` (the address to listen on
//! and to publish to peers, default `127.0.0.1`), `port` (default `0`: any free port), `tx`
//! (zcnet's send mode: `auto`, the default, `copy`, `uring` or `uring-zc`), `streams` (TCP
//! connections to each peer, 1 to 16, default 1: a request of 4 MiB or more is cut across
//! them, its notification queued at the target once every part arrived).
//! `ZCNET_NIXL_STATS=FILE` (`{pid}` in it is replaced by the process id): when an engine is
//! destroyed, its senders' counters as one JSON object.

#![allow(non_snake_case)]

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

pub mod transport;

use transport::{Desc, Engine, Xfer, ERR_BACKEND, ERR_INVALID_PARAM, SUCCESS};

extern "C" {
    fn zcnet_nixl_cxx_plugin_init() -> *mut c_void;
    fn zcnet_nixl_cxx_plugin_fini();
}

/// NIXL's entry point (backend_plugin.h:121-122): the plugin's `nixlBackendPlugin`, made by the
/// C++ half.
#[no_mangle]
pub extern "C" fn nixl_plugin_init() -> *mut c_void {
    // SAFETY: a C++ function without arguments that returns a pointer to a static and catches
    // every exception itself.
    unsafe { zcnet_nixl_cxx_plugin_init() }
}

/// NIXL's exit point (backend_plugin.h:125-126).
#[no_mangle]
pub extern "C" fn nixl_plugin_fini() {
    // SAFETY: as above; it does nothing that can fail.
    unsafe { zcnet_nixl_cxx_plugin_fini() }
}

/// Runs `f`, turning a panic into NIXL's backend error (no unwinding into C++).
fn guard(f: impl FnOnce() -> i32) -> i32 {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        transport::log("internal error (a panic), reported as NIXL_ERR_BACKEND");
        ERR_BACKEND
    })
}

/// # Safety
/// `p` is NULL with `len` 0, or points to `len` readable bytes.
unsafe fn bytes<'a>(p: *const u8, len: usize) -> &'a [u8] {
    if p.is_null() || len == 0 {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(p, len) }
}

/// # Safety
/// As `bytes`.
unsafe fn text(p: *const u8, len: usize) -> String {
    // SAFETY: the caller's contract.
    String::from_utf8_lossy(unsafe { bytes(p, len) }).into_owned()
}

/// Makes an engine listening on `ip:port` whose connections send with zcnet mode `tx`; on
/// failure writes the reason (NUL-terminated, cut to
/// `errcap`) to `err`.
///
/// # Safety
/// Strings are (pointer, length) pairs as for `bytes`; `out` points to a writable pointer;
/// `err` points to `errcap` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn zcnet_nixl_rs_engine_new(
    agent: *const u8,
    agent_len: usize,
    ip: *const u8,
    ip_len: usize,
    port: u16,
    tx: *const u8,
    tx_len: usize,
    streams: *const u8,
    streams_len: usize,
    out: *mut *mut Engine,
    err: *mut u8,
    errcap: usize,
) -> i32 {
    guard(|| {
        // SAFETY: the caller's contract.
        let (agent, ip, tx, streams) = unsafe {
            (
                text(agent, agent_len),
                text(ip, ip_len),
                text(tx, tx_len),
                text(streams, streams_len),
            )
        };
        match Engine::new(&agent, &ip, port, &tx, &streams) {
            Ok(e) => {
                // SAFETY: `out` is writable (the caller's contract).
                unsafe { *out = Box::into_raw(Box::new(e)) };
                SUCCESS
            }
            Err(msg) => {
                let n = msg.len().min(errcap.saturating_sub(1));
                if !err.is_null() && errcap > 0 {
                    // SAFETY: `err` holds `errcap` bytes and n + 1 <= errcap.
                    unsafe {
                        std::ptr::copy_nonoverlapping(msg.as_ptr(), err, n);
                        *err.add(n) = 0;
                    }
                }
                ERR_BACKEND
            }
        }
    })
}

/// # Safety
/// `e` is NULL or an engine from [`zcnet_nixl_rs_engine_new`] not freed before, with no request
/// of it left unfreed.
#[no_mangle]
pub unsafe extern "C" fn zcnet_nixl_rs_engine_free(e: *mut Engine) {
    if !e.is_null() {
        // SAFETY: the caller's contract.
        let e = unsafe { Box::from_raw(e) };
        let _ = catch_unwind(AssertUnwindSafe(move || drop(e)));
    }
}

/// Writes the connection info (no NUL) to `out` and its length to `len`; fails when it does
/// not fit in `cap`.
///
/// # Safety
/// `e` is a live engine; `out` points to `cap` writable bytes; `len` is writable.
#[no_mangle]
pub unsafe extern "C" fn zcnet_nixl_rs_conn_info(
    e: *const Engine,
    out: *mut u8,
    cap: usize,
    len: *mut usize,
) -> i32 {
    guard(|| {
        // SAFETY: the caller's contract.
        let s = unsafe { &*e }.conn_info();
        if s.len() > cap {
            return ERR_BACKEND;
        }
        // SAFETY: `out` holds `cap` >= s.len() bytes; `len` is writable.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), out, s.len());
            *len = s.len();
        }
        SUCCESS
    })
}

/// # Safety
/// `e` is a live engine; strings as for `bytes`.
#[no_mangle]
pub unsafe extern "C" fn zcnet_nixl_rs_load_remote(
    e: *const Engine,
    agent: *const u8,
    agent_len: usize,
    info: *const u8,
    info_len: usize,
) -> i32 {
    guard(|| {
        // SAFETY: the caller's contract.
        let (e, agent, info) = unsafe { (&*e, text(agent, agent_len), text(info, info_len)) };
        e.load_remote(&agent, &info)
    })
}

/// # Safety
/// `e` is a live engine; the string as for `bytes`.
#[no_mangle]
pub unsafe extern "C" fn zcnet_nixl_rs_connect(
    e: *const Engine,
    agent: *const u8,
    agent_len: usize,
) -> i32 {
    guard(|| {
        // SAFETY: the caller's contract.
        let (e, agent) = unsafe { (&*e, text(agent, agent_len)) };
        match e.conn(&agent) {
            Ok(_) => SUCCESS,
            Err(st) => st,
        }
    })
}

/// # Safety
/// `e` is a live engine; the string as for `bytes`.
#[no_mangle]
pub unsafe extern "C" fn zcnet_nixl_rs_disconnect(
    e: *const Engine,
    agent: *const u8,
    agent_len: usize,
) -> i32 {
    guard(|| {
        // SAFETY: the caller's contract.
        let (e, agent) = unsafe { (&*e, text(agent, agent_len)) };
        e.disconnect(&agent)
    })
}

/// Registers `addr..addr+len` (which stays mapped until deregistered) for peers to write and
/// read; `key` receives its key.
///
/// # Safety
/// `e` is a live engine; `key` is writable.
#[no_mangle]
pub unsafe extern "C" fn zcnet_nixl_rs_register(
    e: *const Engine,
    addr: u64,
    len: u64,
    key: *mut u64,
) -> i32 {
    guard(|| {
        if addr.checked_add(len).is_none() {
            return ERR_INVALID_PARAM;
        }
        // SAFETY: the caller's contract.
        unsafe { *key = (*e).register(addr, len) };
        SUCCESS
    })
}

/// Registers `len` bytes of device memory at device address `addr` on CUDA device `dev` (NIXL's
/// VRAM), reached through zcnet's GPU code; `key` receives its key. The cause of a failure (no
/// CUDA driver, no such device) goes to stderr.
///
/// # Safety
/// `e` is a live engine; `key` is writable; the memory stays allocated on that device until
/// deregistered (NIXL's contract for registered memory).
#[no_mangle]
pub unsafe extern "C" fn zcnet_nixl_rs_register_vram(
    e: *const Engine,
    dev: u64,
    addr: u64,
    len: u64,
    key: *mut u64,
) -> i32 {
    guard(|| {
        // SAFETY: the caller's contract, which is register_device's.
        match unsafe { (*e).register_device(dev, addr, len) } {
            Ok(k) => {
                // SAFETY: `key` is writable (the caller's contract).
                unsafe { *key = k };
                SUCCESS
            }
            Err(st) => st,
        }
    })
}

/// # Safety
/// `e` is a live engine.
#[no_mangle]
pub unsafe extern "C" fn zcnet_nixl_rs_deregister(e: *const Engine, key: u64) -> i32 {
    // SAFETY: the caller's contract.
    guard(|| unsafe { &*e }.deregister(key))
}

/// A request of `n` descriptors to `agent` (`op`: 0 READ, 1 WRITE), or NULL on failure.
///
/// # Safety
/// `e` is a live engine; the string as for `bytes`; `descs` points to `n` descriptors whose
/// local ranges lie in live registrations of `e` until the request is freed.
#[no_mangle]
pub unsafe extern "C" fn zcnet_nixl_rs_xfer_new(
    e: *const Engine,
    op: u32,
    agent: *const u8,
    agent_len: usize,
    descs: *const Desc,
    n: usize,
) -> *const Xfer {
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller's contract.
        let (e, agent) = unsafe { (&*e, text(agent, agent_len)) };
        let descs = if n == 0 {
            Vec::new()
        } else {
            // SAFETY: `descs` holds `n` descriptors (the caller's contract).
            unsafe { std::slice::from_raw_parts(descs, n) }.to_vec()
        };
        Arc::into_raw(Arc::new(e.new_xfer(op, &agent, descs)))
    }))
    .unwrap_or(std::ptr::null())
}

/// Posts the request (again, after it completed); `has_notif` non-zero sends `notif` to the
/// target once the transfer is complete there. Returns NIXL_IN_PROG or an error.
///
/// # Safety
/// `e` is a live engine; `x` a live request of it; the string as for `bytes`.
#[no_mangle]
pub unsafe extern "C" fn zcnet_nixl_rs_xfer_post(
    e: *const Engine,
    x: *const Xfer,
    has_notif: i32,
    notif: *const u8,
    notif_len: usize,
) -> i32 {
    guard(|| {
        // SAFETY: the caller's contract: `x` came from Arc::into_raw and is still counted.
        let x = unsafe {
            Arc::increment_strong_count(x);
            Arc::from_raw(x)
        };
        // SAFETY: the caller's contract.
        let notif = (has_notif != 0).then(|| unsafe { bytes(notif, notif_len) }.to_vec());
        // SAFETY: the caller's contract.
        unsafe { &*e }.post(&x, notif)
    })
}

/// NIXL_IN_PROG, NIXL_SUCCESS or the request's error.
///
/// # Safety
/// `x` is a live request.
#[no_mangle]
pub unsafe extern "C" fn zcnet_nixl_rs_xfer_check(x: *const Xfer) -> i32 {
    // SAFETY: the caller's contract.
    guard(|| transport::status(unsafe { &*x }))
}

/// Releases the request: from the return on, its local memory is not touched.
///
/// # Safety
/// `x` is NULL or a request not freed before.
#[no_mangle]
pub unsafe extern "C" fn zcnet_nixl_rs_xfer_free(x: *const Xfer) {
    if x.is_null() {
        return;
    }
    // SAFETY: the caller's contract: this gives back the count Arc::into_raw kept.
    let x = unsafe { Arc::from_raw(x) };
    let _ = catch_unwind(AssertUnwindSafe(|| transport::release(&x)));
}

/// Sends `msg` to `agent` as a notification of its own, after what was posted to it before.
///
/// # Safety
/// `e` is a live engine; strings as for `bytes`.
#[no_mangle]
pub unsafe extern "C" fn zcnet_nixl_rs_gen_notif(
    e: *const Engine,
    agent: *const u8,
    agent_len: usize,
    msg: *const u8,
    msg_len: usize,
) -> i32 {
    guard(|| {
        // SAFETY: the caller's contract.
        let (e, agent, msg) = unsafe { (&*e, text(agent, agent_len), bytes(msg, msg_len)) };
        e.gen_notif(&agent, msg.to_vec())
    })
}

/// Called once per notification received: (ctx, agent, agent_len, msg, msg_len).
pub type NotifFn = unsafe extern "C" fn(*mut c_void, *const u8, usize, *const u8, usize);

/// Hands every notification received since the last call to `f`, oldest first.
///
/// # Safety
/// `e` is a live engine; `f` is safe to call with `ctx` and the pointers it is given.
#[no_mangle]
pub unsafe extern "C" fn zcnet_nixl_rs_take_notifs(
    e: *const Engine,
    f: NotifFn,
    ctx: *mut c_void,
) -> i32 {
    guard(|| {
        // SAFETY: the caller's contract.
        for (agent, msg) in unsafe { &*e }.take_notifs() {
            // SAFETY: the caller's contract; the slices live through the call.
            unsafe { f(ctx, agent.as_ptr(), agent.len(), msg.as_ptr(), msg.len()) };
        }
        SUCCESS
    })
}
