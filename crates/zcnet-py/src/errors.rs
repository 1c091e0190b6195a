//! The Python exceptions: `zcnet.Error` and its subclasses, each carrying the library's message
//! (what failed, the kernel's reason, the remedy), and `errno` where the kernel gave one.

use pyo3::prelude::*;
use zcnet::text::{Call, Field, Library, Memory, Term, Words};
use zcnet::Voice;

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

/// The Python binding's voice: settings as the keyword arguments that set them, modes as
/// `mode="..."`, memory kinds as `mem="..."`, and the NIC calls the binding lacks as the `zcnet`
/// commands that make them.
pub(crate) struct Py;

impl Words for Py {
    fn term(&self, t: &Term) -> String {
        match t {
            Term::Field(Field::RxAreaLen) => "area=".into(),
            Term::Field(Field::RxDmabuf) => "mem=\"cuda\"".into(),
            Term::Field(Field::TxDmabuf) => "a dma-buf (GPU memory)".into(),
            Term::Field(f) => match f.path() {
                Some((_, name)) => format!("{name}="),
                None => Library.term(t),
            },
            Term::TxMode { name, .. } | Term::RxMode { name, .. } => format!("mode=\"{name}\""),
            Term::Memory(Memory::Host) => "host memory (mem=\"host\")".into(),
            Term::Memory(Memory::Cuda) => "GPU memory (mem=\"cuda\")".into(),
            Term::Memory(Memory::Huge) => "huge pages".into(),
            Term::Memory(Memory::Udmabuf) => "a udmabuf".into(),
            Term::Memory(Memory::Auto) => "host memory".into(),
            Term::Call(Call::NicSetup { .. } | Call::NicSetupFlow) => "'zcnet nic setup'".into(),
            Term::Call(Call::SetChannels { .. }) => "'zcnet nic channels'".into(),
            Term::Call(Call::NicRestore { .. }) => "'zcnet nic restore'".into(),
            other => Library.term(other),
        }
    }
}

impl Voice for Py {
    fn remedy(&self, r: &zcnet::Remedy) -> Option<String> {
        use zcnet::{MemoryKind, Remedy};
        Some(match r {
            Remedy::UseRxMode(m) => format!("use mode=\"{}\"", m.name()),
            Remedy::UseTxMode(m) => format!("use mode=\"{}\"", m.name()),
            Remedy::UseMemory(MemoryKind::Anonymous) => "use host memory (mem=\"host\")".into(),
            Remedy::UseMemory(MemoryKind::Cuda(_)) => {
                "use GPU memory (mem=\"cuda\", exported as a dma-buf)".into()
            }
            Remedy::Staging => "receive by staging (mode=\"auto\")".into(),
            Remedy::FewerRxBuffers => "use fewer or smaller buffers (buffers=, buf_size=)".into(),
            Remedy::FewerSends => {
                "use fewer or smaller sends in flight (inflight=, buf_size=)".into()
            }
            Remedy::SmallerArea => "use a smaller area=".into(),
            _ => return None,
        })
    }
}

/// A library error's message in Python's words ([`Py`]).
pub(crate) fn text(e: &zcnet::Error) -> String {
    e.render(&Py)
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
