//! # zcnet-ffi: the C ABI of zcnet
//!
//! Opaque handles (`zcnet_region`, `zcnet_sender`, `zcnet_receiver`) over the library's
//! [`zcnet::Region`], [`zcnet::Sender`] and [`zcnet::Receiver`]; plain `#[repr(C)]` structs
//! with explicit padding for configurations, statistics and events; one status code per
//! failure ([`error::status_of`] is the only mapping from [`zcnet::Error`]) with the message
//! in `zcnet_last_error()`. The header `include/zcnet.h` is generated from this crate by
//! cbindgen and committed (`tests/header.rs` checks it is current).
//!
//! The boundary: every exported function is `extern "C"`, runs its body inside
//! [`error::call`] (which catches panics), turns each raw argument into a safe type at once
//! (`Option<&T>`, `Option<&CStr>`, a slice) in an `unsafe` block of its own, and hands them to
//! a safe function of its module, which holds the logic and is what the unit tests drive.

// In this order in the header: errors, memory, sending, receiving, the probe.
pub mod error;

pub mod region;

pub mod tx;

pub mod rx;

pub mod probe;

pub mod words;

#[cfg(test)]
mod tests;

use error::{call, need, zcnet_status};
use std::ffi::{c_char, c_int, CString};

/// The library's version, e.g. "0.1.0" (a static string: never free it).
#[no_mangle]
pub extern "C" fn zcnet_version() -> *const c_char {
    error::no_panic(c"".as_ptr(), || {
        concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
    })
}

/// The message of the last failure of a zcnet call on the calling thread: one line naming the
/// cause and, where there is one, the fix; "" when the last call succeeded. Never NULL. The
/// string stays valid until the next zcnet call on this thread.
#[no_mangle]
pub extern "C" fn zcnet_last_error() -> *const c_char {
    error::no_panic(c"".as_ptr(), error::last_error_ptr)
}

/// The remedy of the last failure of a zcnet call on the calling thread, in the ABI's words (the
/// `zcnet_rx_config`/`zcnet_tx_config` fields and `ZCNET_*` constants that carry it out, or the
/// `zcnet` command that makes a NIC change); "" when the last call succeeded or its failure
/// has no typed remedy (`zcnet_last_error()` still says what it can). Never NULL. The string
/// stays valid until the next zcnet call on this thread.
#[no_mangle]
pub extern "C" fn zcnet_last_remedy() -> *const c_char {
    error::no_panic(c"".as_ptr(), error::last_remedy_ptr)
}

/// The name of a status code, e.g. "ZCNET_E_INVALID"; "ZCNET_E_UNKNOWN" for a number that
/// is no code. A static string: never free it.
#[no_mangle]
pub extern "C" fn zcnet_status_name(status: c_int) -> *const c_char {
    let unknown = c"ZCNET_E_UNKNOWN".as_ptr();
    error::no_panic(unknown, || {
        usize::try_from(status)
            .ok()
            .and_then(|i| zcnet_status::ALL.get(i))
            .map_or(unknown, |s| s.name().as_ptr())
    })
}

/// Frees a string that zcnet allocated (`zcnet_probe_json`). NULL is ignored.
///
/// # Safety
/// `s` is NULL or a string returned by zcnet that was not freed before.
#[no_mangle]
pub unsafe extern "C" fn zcnet_string_free(s: *mut c_char) {
    error::call_void("zcnet_string_free", || {
        if !s.is_null() {
            // SAFETY: non-NULL, and by the contract a pointer from CString::into_raw in this
            // library, not freed before: from_raw takes that allocation back once.
            drop(unsafe { CString::from_raw(s) });
        }
        Ok(())
    })
}

/// Fills `data[0..len]` with zcnet's seeded test pattern as it stands at byte `offset` of a
/// stream: what `zcnet send --verify --seed SEED` sends and what `zcnet_receiver_recv_stream`
/// (or `zcnet recv --verify --seed SEED`) checks.
///
/// # Safety
/// `data` is NULL or points to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn zcnet_pattern_fill(
    seed: u64,
    offset: u64,
    data: *mut u8,
    len: usize,
) -> zcnet_status {
    call("zcnet_pattern_fill", || {
        let data = (!data.is_null() && len <= isize::MAX as usize).then(|| {
            // SAFETY: non-NULL, len within isize::MAX, and by the contract `len` writable
            // bytes that nothing else uses during the call.
            unsafe { std::slice::from_raw_parts_mut(data, len) }
        });
        pattern_fill(seed, offset, data)
    })
}

fn pattern_fill(seed: u64, offset: u64, data: Option<&mut [u8]>) -> error::Result<()> {
    let data = need(data, "data (or len is above PTRDIFF_MAX)")?;
    zcnet::Pattern::new(seed).fill(offset, data);
    Ok(())
}

// The unit tests' harness (`[lib] harness = false`): see zcnet-testkit.
#[cfg(test)]
zcnet_testkit::main!();
