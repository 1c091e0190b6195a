//! `zcnet_probe_json`: what this machine and its NICs can do for zero copy, as the JSON
//! document `zcnet probe --json` prints (schema in docs/cli.md).
//!
//! The document is built here from the library's [`zcnet::probe::ProbeReport`] the same way
//! `zcnet-cli` builds it (the library has no serde): keep the two in step.

use crate::error::{call, need, need_str, zcnet_status, Result};
use std::ffi::{c_char, c_int, CStr, CString};
use std::mem::MaybeUninit;
use zcnet::probe::ProbeOptions;

/// Probes the kernel and the interfaces of the calling thread's network namespace (only
/// `iface` when it is not NULL) and writes the report as a JSON document, the one
/// `zcnet probe --json` prints, to `*json`; free it with `zcnet_string_free`. With `active`
/// non-zero each mechanism is also tried and undone: sends over TCP loopback and, only when
/// `iface` names an interface, a zcrx queue registered and AF_XDP sockets bound on it (on a
/// real NIC this briefly restarts its last RX queue); with `iface` NULL the report's notes say
/// that the interface trials need one.
/// A fact that cannot be read is a note in the report, not a failure.
///
/// # Safety
/// `iface` is NULL or a NUL-terminated string; `json` is NULL or points to writable memory
/// for one pointer.
#[no_mangle]
pub unsafe extern "C" fn zcnet_probe_json(
    iface: *const c_char,
    active: c_int,
    json: *mut *mut c_char,
) -> zcnet_status {
    call("zcnet_probe_json", || {
        // SAFETY: by the contract, non-NULL `iface` is a NUL-terminated string that outlives
        // the call.
        let iface = (!iface.is_null()).then(|| unsafe { CStr::from_ptr(iface) });
        // SAFETY: by the contract, non-NULL `json` is aligned and writable.
        let json = unsafe { json.cast::<MaybeUninit<*mut c_char>>().as_mut() };
        let json = need(json, "json")?;
        json.write(std::ptr::null_mut());
        let iface = iface.map(|s| need_str(Some(s), "iface")).transpose()?;
        json.write(probe_json(iface, active != 0)?.into_raw());
        Ok(())
    })
}

/// Runs the probe and returns its JSON document.
pub fn probe_json(iface: Option<&str>, active: bool) -> Result<CString> {
    let r = zcnet::probe::probe(&ProbeOptions {
        iface: iface.map(str::to_string),
        active,
        all_ifaces: false,
    })?;
    let text = serde_json::to_string_pretty(&zcnet::probe::json::to_json(&r, &crate::words::C))
        .unwrap_or_default();
    // JSON escapes control characters, so the text has no NUL.
    Ok(CString::new(text).unwrap_or_default())
}
