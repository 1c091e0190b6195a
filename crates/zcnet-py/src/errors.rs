//! The Python exceptions: `zcnet.Error` and its subclasses, each carrying the library's message
//! (what failed, the kernel's reason, the remedy), and `errno` where the kernel gave one.

use pyo3::prelude::*;

pyo3::create_exception!(
    zcnet,
    Error,
    pyo3::exceptions::PyException,
    "Any zcnet failure; the message is the library's (cause and remedy)."
);
pyo3::create_exception!(
    zcnet,
    UnsupportedError,
    Error,
    "The kernel, the device or the machine refuses a mechanism (the message says why and what would make it work)."
);
pyo3::create_exception!(
    zcnet,
    MemlockError,
    UnsupportedError,
    "Locked memory (RLIMIT_MEMLOCK) or socket option memory (optmem_max) is too small for the mechanism."
);
pyo3::create_exception!(
    zcnet,
    GpuError,
    UnsupportedError,
    "The GPU, its driver or CUDA refused or failed (no driver, out of GPU memory, a failed copy, no dma-buf export); the message names the CUDA call and its error."
);
pyo3::create_exception!(
    zcnet,
    NotRootError,
    Error,
    "The operation needs root (CAP_NET_ADMIN / CAP_SYS_ADMIN)."
);
pyo3::create_exception!(
    zcnet,
    ArgumentError,
    Error,
    "A bad argument: an unknown mode, interface or address, a size out of range."
);
pyo3::create_exception!(
    zcnet,
    ConnectionError,
    Error,
    "The peer reset the connection, or nobody listens at the address."
);
pyo3::create_exception!(
    zcnet,
    StalledError,
    Error,
    "Sending made no progress for the stall timeout (the peer stopped reading)."
);
pyo3::create_exception!(
    zcnet,
    VerifyError,
    Error,
    "Received data differs from the expected pattern."
);
pyo3::create_exception!(
    zcnet,
    StarvedError,
    Error,
    "The receiver has no buffer left to receive into because Python holds them (zcnet.Buffer objects, or arrays and tensors made from them, still referenced); `held` says how many."
);

/// One remedy in Python's words: the keyword arguments that carry it out.
fn remedy_text(r: &zcnet::Remedy) -> String {
    use zcnet::{MemoryKind, Remedy};
    match r {
        Remedy::UseRxMode(m) => format!("use mode=\"{}\"", m.name()),
        Remedy::UseTxMode(m) => format!("use mode=\"{}\"", m.name()),
        Remedy::UseMemory(MemoryKind::Anonymous) => "use host memory (mem=\"host\")".into(),
        Remedy::UseMemory(MemoryKind::Cuda(_)) => {
            "use GPU memory (mem=\"cuda\", exported as a dma-buf)".into()
        }
        Remedy::Staging => "receive by staging (mode=\"auto\")".into(),
        Remedy::FewerRxBuffers => "use fewer or smaller buffers (buffers=, buf_size=)".into(),
        Remedy::FewerSends => "use fewer or smaller sends in flight (inflight=, buf_size=)".into(),
        Remedy::SmallerArea => "use a smaller area=".into(),
        other => words(&other.library_text()),
    }
}

/// The library's names for what a keyword sets, as the keyword: `RxConfig::area_len` is
/// `area=`, `TxMode::UringZc` is `mode="uring-zc"`, `MemoryKind::Anonymous` host memory.
pub(crate) fn words(text: &str) -> String {
    let mut pairs: Vec<(String, String)> = vec![
        ("RxConfig::area_len".into(), "area=".into()),
        ("RxConfig::low_water".into(), "low_water=".into()),
        ("RxConfig::dmabuf".into(), "mem=\"cuda\"".into()),
        ("TxConfig::dmabuf".into(), "a dma-buf (GPU memory)".into()),
        (
            "MemoryKind::Anonymous".into(),
            "host memory (mem=\"host\")".into(),
        ),
        (
            "MemoryKind::Cuda".into(),
            "GPU memory (mem=\"cuda\")".into(),
        ),
        ("MemoryKind::Huge".into(), "huge pages".into()),
        ("MemoryKind::Udmabuf".into(), "a udmabuf".into()),
        ("MemoryKind::Auto".into(), "host memory".into()),
    ];
    pairs.extend(
        zcnet::tx::TxMode::NAMED
            .iter()
            .map(|m| (format!("TxMode::{m:?}"), format!("mode=\"{}\"", m.name()))),
    );
    pairs.extend(
        zcnet::rx::RxMode::ALL
            .iter()
            .map(|m| (format!("RxMode::{m:?}"), format!("mode=\"{}\"", m.name()))),
    );
    // Longest first: `TxMode::UringZc` before `TxMode::Uring`.
    pairs.sort_by_key(|(a, _)| std::cmp::Reverse(a.len()));
    let mut s = text.to_string();
    for (from, to) in &pairs {
        s = s.replace(from.as_str(), to);
    }
    // The NIC calls the binding does not have: the commands that make them.
    s = s.replace(zcnet::nic::NIC_SETUP, "'zcnet nic setup' (");
    s = s.replace(zcnet::nic::SET_CHANNELS, "'zcnet nic channels' (");
    s = s.replace("nic::NicGuard::apply", "'zcnet nic setup'");
    s = s.replace("nic::restore_from_file", "'zcnet nic restore'");
    // Any other field: its keyword (`RxConfig::buffers` is `buffers=`).
    for prefix in ["RxConfig::", "TxConfig::", "ProbeOptions::"] {
        while let Some(at) = s.find(prefix) {
            let rest = &s[at + prefix.len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            let field = rest[..end].to_string();
            s = format!("{}{field}={}", &s[..at], &rest[end..]);
        }
    }
    s
}

/// A library error's message in Python's words ([`words`], [`remedy_text`]).
pub(crate) fn text(e: &zcnet::Error) -> String {
    words(&e.display_with(&remedy_text).to_string())
}

/// The Python exception for a library error.
pub(crate) fn to_py(e: zcnet::Error) -> PyErr {
    use zcnet::Error as E;
    let msg = text(&e);
    let errno = e.errno();
    let err = match &e {
        E::MemlockTooSmall { .. } | E::OptmemExhausted { .. } => MemlockError::new_err(msg),
        E::Gpu {
            bad_argument: false,
            ..
        } => GpuError::new_err(msg),
        E::Unsupported { .. }
        | E::Busy { .. }
        | E::NotCpuAccessible
        | E::NoHugePages { .. }
        | E::Kernel { .. } => UnsupportedError::new_err(msg),
        E::NotRoot { .. } => NotRootError::new_err(msg),
        E::PeerReset { .. } | E::ConnectionRefused { .. } => ConnectionError::new_err(msg),
        E::Stalled { .. } => StalledError::new_err(msg),
        E::Verify(_) => VerifyError::new_err(msg),
        E::Interrupted => pyo3::exceptions::PyKeyboardInterrupt::new_err(msg),
        _ if e.is_caller_mistake() => ArgumentError::new_err(msg),
        _ => Error::new_err(msg),
    };
    if let Some(n) = errno {
        Python::attach(|py| {
            // Best effort: an exception object that refuses the attribute still carries the
            // message, which names the errno too.
            let _ = err.value(py).setattr("errno", n);
        });
    }
    err
}

/// Adds the exception classes to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("UnsupportedError", py.get_type::<UnsupportedError>())?;
    m.add("MemlockError", py.get_type::<MemlockError>())?;
    m.add("GpuError", py.get_type::<GpuError>())?;
    m.add("NotRootError", py.get_type::<NotRootError>())?;
    m.add("ArgumentError", py.get_type::<ArgumentError>())?;
    m.add("ConnectionError", py.get_type::<ConnectionError>())?;
    m.add("StalledError", py.get_type::<StalledError>())?;
    m.add("VerifyError", py.get_type::<VerifyError>())?;
    m.add("StarvedError", py.get_type::<StarvedError>())?;
    Ok(())
}
