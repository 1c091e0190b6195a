//! # zcnet for Python
//!
//! The native module `zcnet._zcnet`, re-exported by the Python package `zcnet`
//! (python/zcnet/__init__.py). Built with maturin (pyproject.toml) as an abi3 extension for
//! CPython 3.9 and later:
//!
//! - `rx::Receiver` receives on connected sockets it takes over; iterating it yields
//!   `rx::Buffer`s, each one buffer lent by the receiver, exported without a copy through DLPack
//!   (`np.from_dlpack(buf)`, `torch.from_dlpack(buf)`). Dropping the last reference (the Buffer
//!   and every array made from it) gives the buffer back to the kernel.
//! - `tx::Sender` sends bytes-like objects (the buffer protocol) and tensors (`__dlpack__`),
//!   C-contiguous, from host memory or CUDA device memory (staged through its buffers by the
//!   library's GPU pipeline, `zcnet::gpu::StagedSender`).
//! - `cuda::DeviceBuffer` (`cuda_buffer()`) is CUDA device memory allocated through zcnet's
//!   driver wrapper, exported as a kDLCUDA DLPack tensor.
//! - `probe()` is `zcnet probe --json` as a dict; `pattern()` is the `--verify` byte pattern.
//!
//! Blocking calls release the GIL in slices of at most 100 ms and check for signals between
//! them, so Ctrl-C raises `KeyboardInterrupt`. Library errors are `zcnet.Error` subclasses
//! carrying the library's message (cause and remedy).
//!
//! The crate is tested by the pytest suite in tests/ (see docs/design.md, "Python"), not by
//! Rust tests: the extension never links libpython (abi3 + `extension-module`), so a Rust test
//! binary could not run Python.

mod cuda;
mod dlpack;
mod errors;
mod pybuf;
mod rx;
mod tx;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

/// Lets a value cross `Python::detach`, which asks for `Send` because a closure could in
/// principle run elsewhere: it runs on the calling thread, so a `!Send` receiver (its io_uring
/// rings accept submissions only from the thread that made them) stays on its thread.
pub(crate) struct OnThisThread<T>(T);

// SAFETY: `Python::detach` runs its closure synchronously on the calling thread (it only
// releases the GIL around it); an `OnThisThread` is made and taken apart in that closure's
// caller and the closure, never anywhere else.
unsafe impl<T> Send for OnThisThread<T> {}

impl<T> OnThisThread<T> {
    /// Takes the value out (a method, so that a closure captures the whole wrapper, not the
    /// field).
    pub(crate) fn get(self) -> T {
        self.0
    }
}

/// The `socket.socket`'s type (`SOCK_STREAM`, `SOCK_DGRAM`, ...), `None` for an object that is
/// not one.
fn socket_type(sock: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    if !sock.hasattr("detach")? || !sock.hasattr("type")? {
        return Ok(None);
    }
    Ok(sock.getattr("type")?.extract::<i64>().ok())
}

/// A connected `socket.socket` taken over on trial: zcnet works on a duplicate of its fd, and
/// the Python object is closed only by [`Taken::keep`], once what was built on the duplicate
/// exists. Dropped without `keep` (the build failed), the duplicate has closed and the Python
/// socket is as it was, its timeout (and so its blocking mode) restored: the caller may try
/// again, e.g. with another mode.
pub(crate) struct Taken<'py> {
    sock: Bound<'py, PyAny>,
    /// What `gettimeout()` said, until kept.
    timeout: Option<Py<PyAny>>,
}

impl Taken<'_> {
    /// What was built on the socket exists: the Python object closes (zcnet's duplicate keeps
    /// the connection).
    pub(crate) fn keep(mut self) -> PyResult<()> {
        self.timeout = None;
        self.sock.call_method0("close")?;
        Ok(())
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.timeout.take() {
            let _ = self.sock.call_method1("settimeout", (t,));
        }
    }
}

/// A duplicate of a connected `socket.socket`'s fd: checks it is connected (getpeername raises
/// OSError otherwise: a stream needs its peer, a datagram its destination) and makes it
/// blocking (the mode is the open file's, shared with the duplicate).
fn dup_connected<'py>(sock: &Bound<'py, PyAny>) -> PyResult<(std::os::fd::OwnedFd, Taken<'py>)> {
    sock.call_method0("getpeername")?;
    let timeout = sock.call_method0("gettimeout")?.unbind();
    let fd: i32 = sock.call_method0("fileno")?.extract()?;
    // SAFETY: `fd` is the live socket object's, open for the length of this call (the GIL is
    // held, nothing closes it meanwhile); it is only duplicated here.
    let dup = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }.try_clone_to_owned()?;
    let taken = Taken {
        sock: sock.clone(),
        timeout: Some(timeout),
    };
    sock.call_method1("setblocking", (true,))?;
    Ok((dup, taken))
}

/// Takes over a connected TCP `socket.socket` for `who` (named in the error), on trial
/// ([`Taken`]): checks it is a connected stream socket and makes it blocking.
pub(crate) fn take_tcp_socket<'py>(
    sock: &Bound<'py, PyAny>,
    who: &str,
) -> PyResult<(std::net::TcpStream, Taken<'py>)> {
    if socket_type(sock)? != Some(libc::SOCK_STREAM.into()) {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "{who} takes a connected TCP socket.socket (SOCK_STREAM)"
        )));
    }
    dup_connected(sock).map(|(fd, t)| (std::net::TcpStream::from(fd), t))
}

/// Takes over a connected `socket.socket` for `who`, on trial ([`Taken`]): a TCP stream (as
/// [`take_tcp_socket`]) or a connected UDP socket (SOCK_DGRAM: each send is one datagram to
/// its peer).
pub(crate) fn take_socket<'py>(
    sock: &Bound<'py, PyAny>,
    who: &str,
) -> PyResult<(zcnet::Socket, Taken<'py>)> {
    match socket_type(sock)? {
        Some(t) if t == i64::from(libc::SOCK_STREAM) => {
            dup_connected(sock).map(|(fd, t)| (std::net::TcpStream::from(fd).into(), t))
        }
        Some(t) if t == i64::from(libc::SOCK_DGRAM) => {
            dup_connected(sock).map(|(fd, t)| (std::net::UdpSocket::from(fd).into(), t))
        }
        _ => Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "{who} takes a connected TCP or UDP socket.socket (SOCK_STREAM or SOCK_DGRAM)"
        ))),
    }
}

/// A `serde_json` value as the Python object `json.loads` would give.
pub(crate) fn json_to_py<'py>(
    py: Python<'py>,
    v: &serde_json::Value,
) -> PyResult<Bound<'py, PyAny>> {
    let text = serde_json::to_string(v)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
    py.import("json")?.call_method1("loads", (text,))
}

/// What the kernel and the interfaces offer: the same content as `zcnet probe --json`.
#[pyfunction]
#[pyo3(signature = (iface=None, active=false, all_ifaces=false, queue=None))]
fn probe(
    py: Python<'_>,
    iface: Option<String>,
    active: bool,
    all_ifaces: bool,
    queue: Option<u32>,
) -> PyResult<Bound<'_, PyAny>> {
    let opts = zcnet::probe::ProbeOptions {
        iface,
        active,
        all_ifaces,
    };
    let report = py
        .detach(move || zcnet::probe::probe_queue(&opts, queue))
        .map_err(errors::to_py)?;
    json_to_py(py, &zcnet::probe::json::to_json(&report, &errors::Py))
}

/// `n` bytes of the seeded pattern that `zcnet send --verify --seed SEED` sends, from stream
/// offset `offset` (what `zcnet recv --verify` checks against).
#[pyfunction]
#[pyo3(signature = (seed, offset, n))]
fn pattern(py: Python<'_>, seed: u64, offset: u64, n: usize) -> PyResult<Bound<'_, PyBytes>> {
    let p = zcnet::Pattern::new(seed);
    PyBytes::new_with(py, n, |b| {
        p.fill(offset, b);
        Ok(())
    })
}

/// The receive modes and send modes, by name.
fn modes<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let rx: Vec<&str> = zcnet::RxMode::ALL.iter().map(|m| m.name()).collect();
    let tx: Vec<&str> = zcnet::TxMode::NAMED.iter().map(|m| m.name()).collect();
    d.set_item("rx", rx)?;
    d.set_item("tx", tx)?;
    Ok(d)
}

#[pymodule]
fn _zcnet(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_function(wrap_pyfunction!(probe, m)?)?;
    m.add_function(wrap_pyfunction!(pattern, m)?)?;
    m.add_class::<rx::Receiver>()?;
    m.add_class::<rx::Buffer>()?;
    m.add_class::<tx::Sender>()?;
    m.add_class::<cuda::DeviceBuffer>()?;
    m.add_function(wrap_pyfunction!(cuda::cuda_buffer, m)?)?;
    m.add("MODES", modes(py)?)?;
    errors::register(m)?;
    Ok(())
}
