//! Unit tests of the boundary: the exported functions called as C would call them.

mod boundary;
mod loopback;
mod mapping;
mod nic_queue;

use crate::error::zcnet_status;
use crate::region::{zcnet_region, zcnet_region_free, zcnet_region_new};
use crate::rx::{zcnet_receiver, zcnet_receiver_free, zcnet_receiver_listen, zcnet_receiver_new};
use crate::rx::{zcnet_receiver_local_port, zcnet_rx_config};
use crate::tx::{zcnet_sender, zcnet_sender_connect, zcnet_tx_config};
use std::ffi::{c_char, CStr};
use std::ptr;

/// The calling thread's last error message.
fn last_error() -> String {
    // SAFETY: zcnet_last_error never returns NULL and its string lives until the next zcnet
    // call on this thread; it is copied at once.
    unsafe { CStr::from_ptr(crate::zcnet_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// Asserts `status` and that the message contains every one of `words`.
#[track_caller]
fn assert_fails(status: zcnet_status, want: zcnet_status, words: &[&str]) {
    let msg = last_error();
    assert_eq!(status, want, "message: {msg}");
    for w in words {
        assert!(msg.contains(w), "{w:?} is not in the message {msg:?}");
    }
    assert!(
        !msg.contains('\n'),
        "the message is more than one line: {msg:?}"
    );
}

/// A region of `kind`, or the status and NULL.
fn region(kind: &CStr, len: usize) -> (zcnet_status, *mut zcnet_region) {
    let mut out = ptr::null_mut();
    // SAFETY: `kind` is a NUL-terminated string and `out` a local pointer.
    let st = unsafe { zcnet_region_new(kind.as_ptr(), len, &mut out) };
    (st, out)
}

fn free_region(r: *mut zcnet_region) {
    // SAFETY: `r` is NULL or a region from zcnet_region_new, freed once here.
    unsafe { zcnet_region_free(r) }
}

/// A sender connected to `addr` (a C string), or the status and NULL.
fn connect(
    addr: *const c_char,
    cfg: Option<&zcnet_tx_config>,
    region: *mut zcnet_region,
) -> (zcnet_status, *mut zcnet_sender) {
    let mut out = ptr::null_mut();
    let cfg = cfg.map_or(ptr::null(), |c| c as *const _);
    // SAFETY: `addr` is NULL or a NUL-terminated string (the callers pass literals or NULL),
    // `cfg` NULL or a live config, `region` NULL or a live region, `out` a local pointer.
    let st = unsafe { zcnet_sender_connect(addr, cfg, region, &mut out) };
    (st, out)
}

/// A receiver listening on 127.0.0.1 (a free port) with `cfg`, and its port.
fn listening_receiver(cfg: &zcnet_rx_config) -> (*mut zcnet_receiver, u16) {
    let mut rx = ptr::null_mut();
    // SAFETY: `cfg` is a live config, `rx` a local pointer.
    let st = unsafe { zcnet_receiver_new(cfg, &mut rx) };
    assert_eq!(st, zcnet_status::ZCNET_OK, "{}", last_error());
    // SAFETY: `rx` is the live receiver just made, on this thread; the address is a literal.
    let st = unsafe { zcnet_receiver_listen(rx, c"127.0.0.1:0".as_ptr()) };
    assert_eq!(st, zcnet_status::ZCNET_OK, "{}", last_error());
    let mut port = 0u16;
    // SAFETY: `rx` is live; `port` is a local.
    let st = unsafe { zcnet_receiver_local_port(rx, &mut port) };
    assert_eq!(st, zcnet_status::ZCNET_OK, "{}", last_error());
    assert_ne!(port, 0);
    (rx, port)
}

fn free_receiver(rx: *mut zcnet_receiver) {
    // SAFETY: `rx` is NULL or a receiver from zcnet_receiver_new made on this thread, freed
    // once here.
    unsafe { zcnet_receiver_free(rx) }
}
