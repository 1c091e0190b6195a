//! Log lines through NCCL's logger (`init` hands it over), or stderr when `ZCNET_NCCL_DEBUG` is
//! set and there is no logger (the conformance harness).

use crate::abi::{self, ncclDebugLogger_t};
use std::ffi::{c_int, CString};
use std::sync::Mutex;

static LOGGER: Mutex<ncclDebugLogger_t> = Mutex::new(None);

/// Keeps NCCL's logger for later lines.
pub fn set_logger(l: ncclDebugLogger_t) {
    if let Ok(mut g) = LOGGER.lock() {
        if l.is_some() {
            *g = l;
        }
    }
}

fn emit(level: c_int, msg: &str) {
    let logger = LOGGER.lock().map(|g| *g).unwrap_or(None);
    match logger {
        Some(f) => {
            let line =
                CString::new(format!("NET/zcnet {msg}").replace('\0', " ")).unwrap_or_default();
            // SAFETY: NCCL's logger is printf-like; "%s" with one NUL-terminated string is a
            // valid call, and the file name is a static NUL-terminated string.
            unsafe {
                f(
                    level,
                    abi::LOG_FLAGS,
                    c"zcnet-nccl".as_ptr(),
                    0,
                    c"%s".as_ptr(),
                    line.as_ptr(),
                )
            };
        }
        None if std::env::var_os("ZCNET_NCCL_DEBUG").is_some() => {
            eprintln!("NET/zcnet {msg}");
        }
        None => {}
    }
}

/// An INFO line.
pub fn info(msg: &str) {
    emit(abi::LOG_INFO, msg);
}

/// A WARN line.
pub fn warn(msg: &str) {
    emit(abi::LOG_WARN, msg);
}
