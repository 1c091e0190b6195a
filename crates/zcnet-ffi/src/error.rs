//! Status codes, the one mapping from [`zcnet::Error`] to them, the thread's last error message,
//! and the panic boundary every exported function runs inside.

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::io::ErrorKind;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What a zcnet function returns: `ZCNET_OK`, or why it failed. The message of the last
/// failure on the calling thread is `zcnet_last_error()`.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum zcnet_status {
    /// Success.
    ZCNET_OK = 0,
    /// An argument is wrong: a NULL pointer, a string that is not UTF-8, an unknown mode,
    /// memory kind or interface, an address that does not parse, a size out of range, a handle
    /// used after it was finished or on the wrong thread.
    ZCNET_E_INVALID = 1,
    /// The kernel or the machine refuses the mechanism (the message names the errno and the fix).
    ZCNET_E_UNSUPPORTED = 2,
    /// The operation needs privileges the process lacks (root, CAP_NET_ADMIN).
    ZCNET_E_PERMISSION = 3,
    /// A limit is too small: RLIMIT_MEMLOCK, reserved huge pages, net.core.optmem_max.
    ZCNET_E_RESOURCE = 4,
    /// A system call failed.
    ZCNET_E_IO = 5,
    /// The peer refused, reset or closed the connection.
    ZCNET_E_CONNECTION = 6,
    /// No send completion arrived within the stall timeout (is the receiver reading?).
    ZCNET_E_STALLED = 7,
    /// A system call was cut short by a signal (`EINTR`), or the call was cancelled.
    ZCNET_E_INTERRUPTED = 8,
    /// CUDA memory could not be had or used (no driver, no such device, out of memory).
    ZCNET_E_GPU = 9,
    /// Received data does not match the expected pattern.
    ZCNET_E_DATA = 10,
    /// The kernel's completions contradict the protocol: a bug in zcnet or the kernel.
    ZCNET_E_INTERNAL = 11,
    /// A panic inside zcnet was caught at the boundary; the handle involved may be unusable.
    ZCNET_E_PANIC = 12,
    /// An error this version has no code for; the message says what it is.
    ZCNET_E_OTHER = 13,
}

use zcnet_status::*;

impl zcnet_status {
    /// Every code, in order (for `zcnet_status_name` and the tests).
    pub(crate) const ALL: [zcnet_status; 14] = [
        ZCNET_OK,
        ZCNET_E_INVALID,
        ZCNET_E_UNSUPPORTED,
        ZCNET_E_PERMISSION,
        ZCNET_E_RESOURCE,
        ZCNET_E_IO,
        ZCNET_E_CONNECTION,
        ZCNET_E_STALLED,
        ZCNET_E_INTERRUPTED,
        ZCNET_E_GPU,
        ZCNET_E_DATA,
        ZCNET_E_INTERNAL,
        ZCNET_E_PANIC,
        ZCNET_E_OTHER,
    ];

    /// The constant's name, NUL-terminated.
    pub fn name(self) -> &'static std::ffi::CStr {
        match self {
            ZCNET_OK => c"ZCNET_OK",
            ZCNET_E_INVALID => c"ZCNET_E_INVALID",
            ZCNET_E_UNSUPPORTED => c"ZCNET_E_UNSUPPORTED",
            ZCNET_E_PERMISSION => c"ZCNET_E_PERMISSION",
            ZCNET_E_RESOURCE => c"ZCNET_E_RESOURCE",
            ZCNET_E_IO => c"ZCNET_E_IO",
            ZCNET_E_CONNECTION => c"ZCNET_E_CONNECTION",
            ZCNET_E_STALLED => c"ZCNET_E_STALLED",
            ZCNET_E_INTERRUPTED => c"ZCNET_E_INTERRUPTED",
            ZCNET_E_GPU => c"ZCNET_E_GPU",
            ZCNET_E_DATA => c"ZCNET_E_DATA",
            ZCNET_E_INTERNAL => c"ZCNET_E_INTERNAL",
            ZCNET_E_PANIC => c"ZCNET_E_PANIC",
            ZCNET_E_OTHER => c"ZCNET_E_OTHER",
        }
    }
}

/// The code for a library error: the one place where [`zcnet::Error`] meets the C codes.
pub fn status_of(e: &zcnet::Error) -> zcnet_status {
    use zcnet::Error as E;
    match e {
        E::UnknownMode { .. }
        | E::UnknownRxMode { .. }
        | E::BadAddress { .. }
        | E::Unresolved { .. }
        | E::NotLocalAddress { .. }
        | E::UnknownInterface { .. }
        | E::RegionTooSmall { .. }
        | E::NotCpuAccessible => ZCNET_E_INVALID,
        E::Gpu {
            bad_argument: true, ..
        } => ZCNET_E_INVALID,
        E::Gpu { .. } => ZCNET_E_GPU,
        E::Unsupported { .. } | E::Busy { .. } | E::Kernel { .. } | E::NicSetup { .. } => {
            ZCNET_E_UNSUPPORTED
        }
        E::NotRoot { .. } => ZCNET_E_PERMISSION,
        E::MemlockTooSmall { .. } | E::NoHugePages { .. } | E::OptmemExhausted { .. } => {
            ZCNET_E_RESOURCE
        }
        E::ConnectionRefused { .. } | E::PeerReset { .. } => ZCNET_E_CONNECTION,
        E::Stalled { .. } => ZCNET_E_STALLED,
        E::Interrupted => ZCNET_E_INTERRUPTED,
        E::Verify(_) => ZCNET_E_DATA,
        E::Protocol(_) => ZCNET_E_INTERNAL,
        E::NicState { .. } => ZCNET_E_IO,
        // The library reports bad arguments as `Io` with ErrorKind::InvalidInput
        // (`Error::invalid_input`, EINVAL); the kind says what the errno means.
        E::Io { source, .. } => match source.kind() {
            ErrorKind::InvalidInput => ZCNET_E_INVALID,
            ErrorKind::PermissionDenied => ZCNET_E_PERMISSION,
            ErrorKind::Interrupted => ZCNET_E_INTERRUPTED,
            ErrorKind::ConnectionRefused
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::BrokenPipe => ZCNET_E_CONNECTION,
            _ => ZCNET_E_IO,
        },
        // `zcnet::Error` is non-exhaustive: a variant added later gets its own code here.
        _ => ZCNET_E_OTHER,
    }
}

/// Why a call failed: a library error, or an argument the boundary refused.
#[derive(Debug)]
pub enum Failure {
    /// From the library.
    Lib(zcnet::Error),
    /// A bad argument, in words (the function's name is added in front).
    Invalid(String),
    /// A library error met on the way to something else, which the words say: the code is the
    /// library error's.
    Within(String, zcnet::Error),
}

impl From<zcnet::Error> for Failure {
    fn from(e: zcnet::Error) -> Self {
        Failure::Lib(e)
    }
}

/// Result of the safe functions behind the boundary.
pub type Result<T, E = Failure> = std::result::Result<T, E>;

/// A bad argument.
pub fn invalid(msg: impl Into<String>) -> Failure {
    Failure::Invalid(msg.into())
}

/// A required pointer argument: `None` (it was NULL) is an error naming it.
pub fn need<T>(arg: Option<T>, name: &str) -> Result<T> {
    arg.ok_or_else(|| invalid(format!("{name} is NULL")))
}

/// A required string argument: NULL and invalid UTF-8 are errors naming it.
pub fn need_str<'a>(arg: Option<&'a std::ffi::CStr>, name: &str) -> Result<&'a str> {
    need(arg, name)?
        .to_str()
        .map_err(|e| invalid(format!("{name} is not valid UTF-8 ({e})")))
}

/// One of the calling thread's last-failure strings.
type Slot = std::thread::LocalKey<RefCell<CString>>;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    static LAST_REMEDY: RefCell<CString> = RefCell::new(CString::default());
}

/// The slot's string for C ("" during thread teardown, when the slot may be gone).
fn slot_ptr(slot: &'static Slot) -> *const c_char {
    slot.try_with(|e| e.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// The slot's string as a Rust string (for the tests).
fn slot_string(slot: &'static Slot) -> String {
    slot.try_with(|e| e.borrow().to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Records a library error: its message and its remedy, both in the ABI's words.
fn set_last_lib_error(prefix: &str, e: &zcnet::Error) {
    set_last_error(&format!("{prefix}{}", e.render(&crate::words::C)));
    let remedy = e
        .remedy()
        .map(|r| r.render(&crate::words::C))
        .unwrap_or_default();
    set_cstring(&LAST_REMEDY, &remedy);
}

/// The calling thread's last remedy ("" when there is none).
pub fn last_remedy_ptr() -> *const c_char {
    slot_ptr(&LAST_REMEDY)
}

/// The remedy of the last failure on this thread, as a Rust string (for the tests).
pub fn last_remedy_string() -> String {
    slot_string(&LAST_REMEDY)
}

fn set_last_error(msg: &str) {
    set_cstring(&LAST_ERROR, msg);
    if msg.is_empty() {
        set_cstring(&LAST_REMEDY, "");
    }
}

fn set_cstring(slot: &'static Slot, msg: &str) {
    // One line, no interior NUL: what a C caller can print as it is.
    let line: Vec<u8> = msg
        .bytes()
        .map(|b| match b {
            0 => b'?',
            b'\n' | b'\r' => b' ',
            b => b,
        })
        .collect();
    let c = CString::new(line).unwrap_or_default();
    // try_with: during thread teardown the slot may be gone; nothing to record then.
    let _ = slot.try_with(|e| *e.borrow_mut() = c);
}

/// The calling thread's last error message ("" after a success, or during thread teardown).
pub fn last_error_ptr() -> *const c_char {
    slot_ptr(&LAST_ERROR)
}

/// Runs the body of an exported function that cannot fail: a panic gives `fallback`.
pub fn no_panic<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}

/// The message of the last failure on this thread, as a Rust string (for the tests).
pub fn last_error_string() -> String {
    slot_string(&LAST_ERROR)
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "(no message)"
    }
}

/// Runs the body of exported function `func`: clears the thread's last error, catches a panic,
/// and turns a failure into its code and message.
pub fn call(func: &str, body: impl FnOnce() -> Result<()>) -> zcnet_status {
    set_last_error("");
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => ZCNET_OK,
        Ok(Err(Failure::Lib(e))) => {
            set_last_lib_error("", &e);
            status_of(&e)
        }
        Ok(Err(Failure::Invalid(msg))) => {
            set_last_error(&format!("{func}: {msg}"));
            ZCNET_E_INVALID
        }
        Ok(Err(Failure::Within(what, e))) => {
            set_last_lib_error(&format!("{func}: {what}: "), &e);
            status_of(&e)
        }
        Err(payload) => {
            set_last_error(&format!(
                "{func}: panic inside zcnet (please report it): {}",
                panic_message(payload.as_ref())
            ));
            ZCNET_E_PANIC
        }
    }
}

/// [`call`] for functions that return nothing (the `_free`s): a failure is only recorded.
pub fn call_void(func: &str, body: impl FnOnce() -> Result<()>) {
    let _ = call(func, body);
}
