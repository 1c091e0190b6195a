//! `zcnet.Sender`.

use crate::errors;
use crate::OnThisThread;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zcnet::gpu::StagedSender;
use zcnet::{Region, TxConfig, TxMode};

/// The longest the GIL stays released while sending: signals (Ctrl-C) are checked between slices.
const SLICE: Duration = Duration::from_millis(100);

/// A send from CUDA memory goes to the staging pipeline in pieces of at most this many bytes,
/// with signals checked between them (a piece returns once its bytes were copied out of the
/// device and handed to the kernel).
const DEVICE_PIECE: usize = 4 << 20;

/// Sends on a connected TCP or UDP socket with one mechanism, from zcnet's registered buffers.
///
/// `Sender(sock, mode="auto", *, buf_size=None, inflight=8, window=524288, stall_timeout=10.0)`:
/// `mode` is copy, msg-zerocopy, uring, uring-zc, devmem or auto; `buf_size` is 65536 on a
/// stream and 64000 on a UDP socket, where each `send` is one datagram. Once the sender is
/// made, the Python socket object is closed and zcnet owns the connection; when making it fails,
/// the socket is left as it was (another mode can be tried on it). `send(obj)` takes bytes-like objects (bytes, bytearray, memoryview,
/// numpy arrays: the buffer protocol) and tensors (`__dlpack__`: torch), C-contiguous, in host
/// memory or (on a TCP socket) CUDA device memory, which is staged through the sender's buffers
/// by the library's GPU staging pipeline; `finish()` waits for every send to complete, closes the
/// connection and returns the statistics. A sender dropped without `finish()` abandons what has
/// not gone out yet: a TCP peer then sees the connection reset, never a stream cut short that
/// ends as if complete. Ctrl-C during `send` or `finish` raises
/// `KeyboardInterrupt` within 100 ms, also while a send waits on a peer that stopped reading
/// (from CUDA memory: after the 4 MiB piece under way, which waits for such a peer up to
/// `stall_timeout`); the exception's `sent` attribute says how many bytes of that `send` went
/// out, in order. A signal whose handler returns does not disturb a send: it goes on from there.
/// A sender dropped after an interrupt with sends still held by the kernel (a peer that stopped
/// reading) aborts the connection (a reset), which gives the buffers back at once.
#[pyclass(module = "zcnet")]
pub(crate) struct Sender {
    inner: Mutex<Option<Leg>>,
    /// A UDP sender: each `send` is one datagram of at most `chunk` bytes.
    datagrams: bool,
    /// Bytes sent from CUDA device memory.
    device_bytes: std::sync::atomic::AtomicU64,
    /// The sender's buffer size: the most a host send hands the kernel at a time.
    chunk: usize,
}

/// How the sender's buffers are used now: by host sends (copies into them), or by the library's
/// GPU staging pipeline (copies from device memory into them), which owns the sender while CUDA
/// tensors are sent and gives it back for the next host send or `finish`. The bytes leave on the
/// one connection in the order `send` was called.
enum Leg {
    Host(Box<zcnet::Sender>),
    Staged(Box<StagedSender>),
}

impl Leg {
    fn sender(&self) -> &zcnet::Sender {
        match self {
            Leg::Host(tx) => tx,
            Leg::Staged(st) => st.sender(),
        }
    }
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender").finish_non_exhaustive()
    }
}

fn finished() -> PyErr {
    errors::Error::new_err("zcnet.Sender: finish() was called: the sender is closed")
}

fn stats_dict<'py>(
    py: Python<'py>,
    s: &zcnet::TxStats,
    mode: TxMode,
    note: Option<&str>,
    device_bytes: u64,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("mode", mode.name())?;
    d.set_item("bytes", s.bytes)?;
    d.set_item("device_bytes", device_bytes)?;
    d.set_item("sends", s.sends)?;
    d.set_item("notifications", s.notifications)?;
    d.set_item("copied_notifications", s.copied_notifications)?;
    d.set_item("zerocopy_bytes", s.zerocopy_bytes)?;
    d.set_item("copied_bytes", s.copied_bytes)?;
    d.set_item("zerocopy_fraction", s.zerocopy_fraction())?;
    d.set_item("enobufs_waits", s.enobufs_waits)?;
    d.set_item("seconds", s.seconds)?;
    d.set_item("cpu_seconds", s.cpu_seconds)?;
    d.set_item("mb_per_s", s.mb_per_s())?;
    let sw = PyList::empty(py);
    for w in &s.switches {
        let e = PyDict::new(py);
        e.set_item("at_ns", w.at_ns)?;
        e.set_item("to", w.to.name())?;
        e.set_item("copied", w.copied)?;
        e.set_item("of", w.of)?;
        e.set_item(
            "reason",
            w.reason.as_ref().map(|r| r.render(&crate::errors::Py)),
        )?;
        sw.append(e)?;
    }
    d.set_item("switches", sw)?;
    d.set_item("note", note)?;
    Ok(d)
}

/// Sends `len` bytes from `data` in the sender's buffers, for at most one slice; returns the
/// bytes sent (fewer, even 0, when the slice ended waiting for a buffer). The library's waits
/// with a deadline ([`zcnet::Sender::buffer_until`]) end at the slice's end, and carry the
/// stall timeout over the slices.
fn send_slice(
    tx: &mut zcnet::Sender,
    data: *const u8,
    len: usize,
    chunk: usize,
) -> zcnet::Result<usize> {
    let until = Instant::now() + SLICE;
    if tx.mode() == TxMode::Copy {
        return send_slice_in_place(tx, data, len, chunk, until);
    }
    let mut done = 0;
    while done < len {
        let mut buf = match tx.buffer_until(until) {
            Ok(Some(buf)) => buf,
            // The slice ended, or a signal ended the wait (the host token ends waits at
            // signals): the caller looks at the signals and goes on.
            Ok(None) | Err(zcnet::Error::Interrupted) => break,
            Err(e) => return Err(e),
        };
        // SAFETY: the caller guarantees `len` readable bytes at `data` for this call (the
        // exporter's view or capsule is held by the caller).
        let src = unsafe { std::slice::from_raw_parts(data.add(done), len - done) };
        let n = buf.write(src)?;
        match tx.send(buf, n) {
            Ok(()) => done += n,
            // A signal (or a slice without room) cut the send short: what of it went is the
            // stream's, the rest is sent again after the signals were looked at.
            Err(zcnet::Error::Interrupted) => return Ok(cut_short(tx, done)),
            Err(e) => return Err(e),
        }
        if Instant::now() >= until {
            break;
        }
    }
    Ok(done)
}

/// The host sender's cancel token: it ends a blocking send or wait at a signal
/// ([`zcnet::Cancel::ending_at_signals`]), so the binding can run Python's handlers and go on
/// from [`zcnet::Sender::last_call_accepted`].
fn host_token() -> zcnet::Cancel {
    zcnet::Cancel::new().ending_at_signals()
}

/// A slice whose send the library ended early (`Interrupted`: a signal, or a slice without
/// room in the socket, which the host token ends too): the bytes of the slice that went, `done`
/// and what of the cut send went ([`zcnet::Sender::last_call_accepted`]); the caller looks at
/// the signals and goes on from there. The library's stall clock runs on over such calls:
/// nothing moving for the stall timeout is [`zcnet::Error::Stalled`].
fn cut_short(tx: &zcnet::Sender, done: usize) -> usize {
    done + tx.last_call_accepted() as usize
}

/// `send_slice` for the copy mode: `send(2)` copies the caller's bytes into the socket before it
/// returns, so they are lent to the sender in place (`send_lent`) instead of first being copied
/// into one of its buffers: one copy per byte, the kernel's, as `zcnet send --tx copy` makes.
/// At most `chunk` bytes per call, as the buffers would carry.
fn send_slice_in_place(
    tx: &mut zcnet::Sender,
    data: *const u8,
    len: usize,
    chunk: usize,
    until: Instant,
) -> zcnet::Result<usize> {
    let mut done = 0;
    while done < len {
        let n = chunk.min(len - done);
        // SAFETY: the caller guarantees `len` readable bytes at `data` for this call (the
        // exporter's view or capsule is held by the caller), and nothing writes them while it
        // runs (the GIL-free sender only reads). The copy mode sends them before `send_lent`
        // returns and lets go of the lease (`Sender::send_lent`'s contract, asserted by the
        // library's conformance test), so none of it outlives the call.
        let lent = unsafe { zcnet::engine::ForeignBuf::new(data.add(done).cast_mut(), n) }
            .map(Arc::new)
            .ok_or_else(|| {
                zcnet::Error::io(
                    "zcnet.Sender.send: a null buffer",
                    std::io::Error::from_raw_os_error(libc::EINVAL),
                )
            })?;
        match tx.send_lent(lent, 0, n) {
            Ok(()) => done += n,
            Err(zcnet::Error::Interrupted) => return Ok(cut_short(tx, done)),
            Err(e) => return Err(e),
        }
        if Instant::now() >= until {
            break;
        }
    }
    Ok(done)
}

/// Waits, for at most one slice, until the kernel holds none of the sender's buffers (every send
/// completed, every notification arrived); returns whether it does not any more.
fn flush_slice(tx: &mut zcnet::Sender) -> zcnet::Result<bool> {
    match tx.flush_until(Instant::now() + SLICE) {
        // A signal ended the wait (the host token ends waits at signals): the caller looks at
        // the signals and waits again.
        Err(zcnet::Error::Interrupted) => Ok(false),
        r => r,
    }
}

#[pymethods]
impl Sender {
    #[new]
    #[pyo3(signature = (sock, mode="auto", *, buf_size=None, inflight=8, window=524288, stall_timeout=10.0))]
    fn new(
        py: Python<'_>,
        sock: &Bound<'_, PyAny>,
        mode: &str,
        buf_size: Option<usize>,
        inflight: usize,
        window: usize,
        stall_timeout: f64,
    ) -> PyResult<Self> {
        let mode = TxMode::parse(mode).map_err(errors::to_py)?;
        let mut cfg = TxConfig::new(mode);
        let (sock, taken) = crate::take_socket(sock, "zcnet.Sender")?;
        // A datagram carries at most 65,507 B of UDP payload over IPv4: 64,000 B by default,
        // as `zcnet send --udp`.
        let buf_size = buf_size.unwrap_or(if sock.is_stream() { 65536 } else { 64000 });
        let datagrams = !sock.is_stream();
        if buf_size == 0 || inflight == 0 {
            return Err(PyValueError::new_err(
                "buf_size and inflight must be positive",
            ));
        }
        if !(stall_timeout.is_finite() && stall_timeout > 0.0) {
            return Err(PyValueError::new_err(
                "stall_timeout must be a positive number of seconds",
            ));
        }
        cfg.buf_size = buf_size;
        cfg.inflight = inflight;
        cfg.window = window;
        cfg.stall_timeout = Duration::from_secs_f64(stall_timeout);
        // CPython's handlers have no SA_RESTART: a signal (Ctrl-C) cuts a blocking send short
        // with EINTR, and the send must come back for the handler to run (PEP 475).
        cfg.cancel = host_token();
        let inner = py
            .detach(move || {
                let region = Region::for_sender(zcnet::MemoryKind::Auto, &cfg)?;
                zcnet::Sender::new(sock, region, &cfg)
            })
            .map_err(errors::to_py)?;
        taken.keep()?;
        Ok(Sender {
            inner: Mutex::new(Some(Leg::Host(Box::new(inner)))),
            datagrams,
            device_bytes: std::sync::atomic::AtomicU64::new(0),
            chunk: buf_size,
        })
    }

    /// Sends the bytes of `obj`: a bytes-like object (buffer protocol) or a tensor
    /// (`__dlpack__`), C-contiguous, in host memory or CUDA device memory. Returns the bytes
    /// sent. Their copy into zcnet's registered buffers (from the device: by the GPU's copy
    /// engine) is done when this returns: `obj` may be changed or freed then. On a UDP socket
    /// each call sends one datagram of at most `buf_size` bytes (64,000 by default there; larger
    /// is a `ValueError`), from host or device memory; an empty object sends nothing.
    fn send(&self, py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<usize> {
        // Keep the exporter's view or capsule until the bytes are copied.
        let (data, len, view, capsule) = match crate::pybuf::get(obj, false)? {
            Some(v) => (v.ptr().cast_const(), v.len(), Some(v), None),
            None => {
                if !obj.hasattr("__dlpack__")? {
                    return Err(PyTypeError::new_err(format!(
                        "zcnet.Sender.send takes a bytes-like object or a tensor with __dlpack__, not {}",
                        obj.get_type().name()?
                    )));
                }
                let (cap, imp) = crate::dlpack::import(obj, "zcnet.Sender.send")?;
                if imp.cuda.is_some() {
                    let r = self
                        .fits_one_datagram(imp.len)
                        .and_then(|()| self.send_device(py, &imp));
                    drop(cap);
                    return r;
                }
                (imp.data, imp.len, None, Some(cap))
            }
        };
        let r = self
            .fits_one_datagram(len)
            .and_then(|()| self.send_all(py, data, len));
        if let Some(v) = view {
            v.release(py);
        }
        drop(capsule);
        r
    }

    /// Waits until every send completed (every zero-copy notification arrived), closes the
    /// connection and returns the statistics: bytes, sends, zero-copy and copied bytes, the mode
    /// and `auto`'s switches with their reasons.
    ///
    /// The wait is done in slices with the GIL released and Ctrl-C checked between them: a
    /// `KeyboardInterrupt` leaves the sender open (`finish()` may be called again; dropping it
    /// closes the connection).
    fn finish<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let mut g = self.lock()?;
        let tx = host_leg(py, &mut g)?;
        self.flush_host(py, tx)?;
        let Some(Leg::Host(tx)) = g.take() else {
            return Err(finished());
        };
        drop(g);
        let mode = tx.mode();
        let note = tx.note().map(|n| n.render(&crate::errors::Py));
        // Nothing is outstanding: the library's flush returns at once.
        let stats = py
            .detach(move || OnThisThread(tx.finish()))
            .get()
            .map_err(errors::to_py)?;
        stats_dict(py, &stats, mode, note.as_deref(), self.device_bytes())
    }

    /// The statistics so far (`device_bytes`: how many of `bytes` came from CUDA memory).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let g = self.lock()?;
        let tx = g.as_ref().ok_or_else(finished)?.sender();
        let note = tx.note().map(|n| n.render(&errors::Py));
        stats_dict(
            py,
            &tx.stats(),
            tx.mode(),
            note.as_deref(),
            self.device_bytes(),
        )
    }

    /// The mechanism.
    #[getter]
    fn mode(&self) -> PyResult<&'static str> {
        let g = self.lock()?;
        Ok(g.as_ref().ok_or_else(finished)?.sender().mode().name())
    }

    fn __repr__(&self) -> String {
        match self
            .inner
            .lock()
            .ok()
            .and_then(|g| g.as_ref().map(|t| t.sender().mode()))
        {
            Some(m) => format!("zcnet.Sender(mode={:?})", m.name()),
            None => "zcnet.Sender(finished)".to_string(),
        }
    }
}

impl Sender {
    /// The sender, if no other thread is using it: waiting for the lock while holding the GIL
    /// would deadlock with a thread that released the GIL inside a send.
    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, Option<Leg>>> {
        self.inner.try_lock().map_err(|e| match e {
            std::sync::TryLockError::WouldBlock => errors::Error::new_err(
                "zcnet.Sender is in use by another thread: use one sender per thread",
            ),
            std::sync::TryLockError::Poisoned(_) => {
                errors::Error::new_err("zcnet.Sender: an earlier send panicked")
            }
        })
    }

    fn device_bytes(&self) -> u64 {
        self.device_bytes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Waits, in slices with signals checked between them, until the kernel holds none of the
    /// sender's buffers.
    fn flush_host(&self, py: Python<'_>, tx: &mut zcnet::Sender) -> PyResult<()> {
        loop {
            let t = OnThisThread(&mut *tx);
            let done = py
                .detach(move || OnThisThread(flush_slice(t.get())))
                .get()
                .map_err(errors::to_py)?;
            if done {
                return Ok(());
            }
            py.check_signals()?;
        }
    }

    /// On a UDP sender, the refusal of `len` bytes that do not fit one datagram.
    fn fits_one_datagram(&self, len: usize) -> PyResult<()> {
        let max = self.chunk;
        if self.datagrams && len > max {
            return Err(PyValueError::new_err(format!(
                "zcnet.Sender.send: {len} B do not fit one datagram of this sender ({max} B, buf_size=): each send on a UDP socket is one datagram; send less, or make the sender with a larger buf_size (at most 65507)"
            )));
        }
        Ok(())
    }

    /// Sends a CUDA tensor's bytes through the library's staging pipeline
    /// (`zcnet::gpu::StagedSender`, the path of `zcnet send --mem cuda`), whose host leg is this
    /// sender: its host sends complete first, and the pipeline keeps the sender until the next
    /// host send or `finish`. Returns once every byte was copied out of the device memory and
    /// handed to the kernel (also on an error: no copy reads the tensor after this returns).
    /// On a UDP sender the tensor fits one host buffer (checked by the caller), so the pipeline
    /// copies it into one buffer and sends it as one datagram.
    fn send_device(&self, py: Python<'_>, imp: &crate::dlpack::Imported) -> PyResult<usize> {
        if imp.len == 0 {
            return Ok(0);
        }
        let region = crate::cuda::borrow(py, imp, "zcnet.Sender.send")?;
        let mut g = self.lock()?;
        if let Some(Leg::Host(_)) = *g {
            let Some(Leg::Host(mut tx)) = g.take() else {
                return Err(finished());
            };
            // The pipeline takes every buffer: the host sends before complete first.
            if let Err(e) = self.flush_host(py, &mut tx) {
                *g = Some(Leg::Host(tx));
                return Err(e);
            }
            let ordinal = imp.cuda.unwrap_or(0);
            // The pipeline cannot pick up a send a signal ended part-way: while it has the
            // sender, signals are retried (its waits end at the stall timeout).
            tx.set_cancel(zcnet::Cancel::new());
            match py
                .detach(move || OnThisThread(StagedSender::over(*tx, ordinal)))
                .get()
            {
                Ok(st) => *g = Some(Leg::Staged(Box::new(st))),
                Err(mut n) => {
                    // The sender comes back whole: host sends go on on the same connection.
                    n.sender.set_cancel(host_token());
                    *g = Some(Leg::Host(n.sender));
                    return Err(errors::to_py(n.error));
                }
            }
        }
        let Some(Leg::Staged(staged)) = g.as_mut() else {
            return Err(finished());
        };
        let mut done = 0usize;
        while done < imp.len {
            let n = (imp.len - done).min(DEVICE_PIECE);
            let st = OnThisThread(&mut **staged);
            let r = OnThisThread(&region);
            py.detach(move || OnThisThread(st.get().send_from(r.get(), done as u64, n as u64)))
                .get()
                .map_err(errors::to_py)?;
            done += n;
            self.device_bytes
                .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
            py.check_signals()?;
        }
        Ok(done)
    }

    fn send_all(&self, py: Python<'_>, data: *const u8, len: usize) -> PyResult<usize> {
        let mut g = self.lock()?;
        let tx = host_leg(py, &mut g)?;
        let mut done = 0;
        while done < len {
            let t = OnThisThread(&mut *tx);
            // SAFETY (of the pointer's use): `data` holds `len` bytes while the caller keeps the
            // exporter's view or capsule, which it does until this returns.
            let d = OnThisThread(data.wrapping_add(done));
            let rest = len - done;
            let chunk = self.chunk;
            let n = py
                .detach(move || OnThisThread(send_slice(t.get(), d.get(), rest, chunk)))
                .get()
                .map_err(errors::to_py)?;
            done += n;
            py.check_signals().inspect_err(|e| {
                // Like `recv_into`'s `filled`: what of this call is the stream's now.
                let _ = e.value(py).setattr("sent", done);
            })?;
        }
        Ok(done)
    }
}

/// The sender for host sends: the staging pipeline, if CUDA tensors were sent last, gives it
/// back first (waiting for its sends to complete, GIL released).
fn host_leg<'a>(py: Python<'_>, g: &'a mut Option<Leg>) -> PyResult<&'a mut zcnet::Sender> {
    if let Some(Leg::Staged(_)) = g {
        let Some(Leg::Staged(st)) = g.take() else {
            return Err(finished());
        };
        let mut tx = py
            .detach(move || OnThisThread(st.into_sender()))
            .get()
            .map_err(errors::to_py)?;
        tx.set_cancel(host_token());
        *g = Some(Leg::Host(Box::new(tx)));
    }
    match g {
        Some(Leg::Host(tx)) => Ok(tx),
        _ => Err(finished()),
    }
}
