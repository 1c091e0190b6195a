//! `zcnet.Receiver` and `zcnet.Buffer`.

use crate::errors::{self, StarvedError};
use crate::OnThisThread;
use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zcnet::rx::Location;
use zcnet::{ConnId, RxConfig, RxEvent, RxMode};

mod buffer;
pub(crate) use buffer::{collect_receivers, Buffer, KeepReceiver};

/// The longest the GIL stays released in one wait: signals (Ctrl-C) are checked between slices.
const SLICE: Duration = Duration::from_millis(100);

/// The receive buffers' size by default: one 64 KiB buffer per iteration (16 KiB, the library's
/// default, means four times the Python iterations per byte: docs/perf.md, "Python").
const BUF_SIZE: usize = 64 << 10;

/// The receive low-water mark (`SO_RCVLOWAT`) the automatic policy raises a bulk connection to:
/// what `zcnet recv --discard` sets.
const BULK_LOW_WATER: u32 = 128 << 10;

/// With a connection's mark raised, a wait that brings nothing for this long lowers every raised
/// mark back to 1 byte, so that a message below the mark (a request, a stream's tail before a
/// reply) is delivered after at most this delay.
const IDLE: Duration = Duration::from_millis(1);

/// The memory a receiver receives into (`mem=`).
#[derive(Clone, Copy)]
enum Mem {
    /// Host buffers (and zcrx's host area).
    Host,
    /// A udmabuf the receiver allocates and binds (devmem) or registers as the zcrx area.
    Udmabuf,
    /// GPU memory N, by the best path.
    Cuda(u32),
}

/// A udmabuf a receiver bound: host pages the NIC writes through a dma-buf, read back (under
/// the lock) at a buffer's dma-buf offset. Shared with the `Buffer`s in it.
type Udmabuf = Arc<std::sync::Mutex<zcnet::Region>>;

/// The receiver `cfg` asks for; with `mem="udmabuf"` into a udmabuf of `cfg.area_len` bytes
/// (its dma-buf bound by devmem or registered as the zcrx area); with `mem="cuda:N"` into GPU
/// memory N by the best path (`zcnet::gpu::prepare_receive`: devmem, then zcrx with a dma-buf
/// area, else staging, where the receiver is `cfg`'s own with host buffers and `recv_into`
/// copies to the device).
fn make_receiver(
    cfg: &RxConfig,
    mem: Mem,
) -> zcnet::Result<(zcnet::Receiver, Option<GpuRx>, Option<Udmabuf>)> {
    let ordinal = match mem {
        Mem::Host => return Ok((zcnet::Receiver::new(cfg)?, None, None)),
        Mem::Udmabuf => {
            let mut region = zcnet::Region::udmabuf(cfg.area_len)?;
            let mut c = cfg.clone();
            c.dmabuf = Some(region.dmabuf()?);
            let rx = zcnet::Receiver::new(&c)?;
            return Ok((rx, None, Some(Arc::new(std::sync::Mutex::new(region)))));
        }
        Mem::Cuda(n) => n,
    };
    let mut region = zcnet::Region::cuda(ordinal, cfg.area_len)?;
    let (direct, refused) = zcnet::gpu::prepare_receive(&mut region, cfg)?;
    let (rx, path, area) = match direct {
        Some((rx, path)) => (rx, path, Some(Arc::new(region))),
        None => (
            zcnet::Receiver::new(cfg)?,
            zcnet::gpu::GpuPath::Staging,
            None,
        ),
    };
    let gpu = GpuRx {
        ordinal,
        path,
        refused,
        area,
    };
    Ok((rx, Some(gpu), None))
}

/// Copies the device bytes at device address `addr` (inside `area`, the GPU memory a receiver
/// bound) into `out` (synchronous, GIL released).
fn read_device(py: Python<'_>, area: &zcnet::Region, addr: u64, out: &mut [u8]) -> PyResult<()> {
    let off = area
        .device_addr()
        .and_then(|base| addr.checked_sub(base))
        .filter(|off| off.saturating_add(out.len() as u64) <= area.len() as u64);
    let Some(off) = off else {
        return Err(PyBufferError::new_err(
            "zcnet: the buffer is not inside the receiver's GPU memory",
        ));
    };
    let (a, o) = (OnThisThread(area), OnThisThread(out));
    py.detach(move || OnThisThread(a.get().read_at(off as usize, o.get())))
        .get()
        .map_err(errors::to_py)
}

/// A receiver made with `mem="cuda:N"`.
struct GpuRx {
    ordinal: u32,
    path: zcnet::gpu::GpuPath,
    refused: Vec<zcnet::gpu::Refusal>,
    /// The GPU memory whose dma-buf the receiver bound (devmem, zcrx-dmabuf); `None` when
    /// staging (received buffers are host memory, `recv_into` copies them to the device). Shared
    /// with the `Buffer`s in it (`bytes(buf)` reads it, from any thread).
    area: Option<Arc<zcnet::Region>>,
}

/// Receives on connected TCP sockets with one mechanism; iterating yields `zcnet.Buffer`s, in
/// order per connection, until every connection has ended.
///
/// `Receiver(mode="auto", iface=None, queue=None, *, buffers=None, buf_size=None, area=None,
/// low_water=None, starve_timeout=1.0)`: `mode` is copy, uring, zcrx, devmem or auto; `buffers`
/// and `buf_size` size the copy/uring pool (default 64 × 64 KiB), `area` the zcrx area; a
/// receiver whose buffers Python has held for `starve_timeout` seconds while data waits raises
/// `zcnet.StarvedError` instead of stalling.
///
/// `low_water` (copy and uring): `None` (default) is automatic: a connection that fills whole
/// buffers gets a 128 KiB receive low-water mark (`SO_RCVLOWAT`: fewer wakeups for bulk
/// streams), and a wait that brings nothing for 1 ms lowers it back to 1 byte, so a short
/// message is never held for more than that; `0` never sets a mark; `N` sets N bytes on every
/// connection for good (a message shorter than N then waits for more data or the stream's end).
///
/// `mem="cuda:N"` receives into GPU memory N by the best path: devmem TCP, then zcrx with a
/// dma-buf area (both need `iface`, a NIC with header split steered to `queue`; `area` bytes of
/// GPU memory are bound), else staging: host buffers, copied to the device by `recv_into`.
/// Buffers the NIC wrote into GPU memory are kDLCUDA (`torch.from_dlpack(buf)`: a read-only
/// view, no copy; `bytes(buf)` copies to the host). `stats()["gpu"]` names the path and why the
/// better ones were refused; `mode="devmem"` or `"zcrx"` raise their refusal instead.
///
/// `mem="udmabuf"` (with `mode="zcrx"` or `"devmem"` and `iface`) receives into `area` bytes of
/// host memory made a dma-buf (`/dev/udmabuf`): devmem TCP binds it, zcrx registers it as its
/// area. Buffers the NIC wrote there are read with `bytes(buf)` (a copy out of the udmabuf,
/// while the buffer is lent); DLPack, `memoryview()` and `recv_into` refuse them.
#[pyclass(unsendable, weakref, module = "zcnet")]
pub(crate) struct Receiver {
    inner: zcnet::Receiver,
    events: VecDeque<RxEvent>,
    scratch: Vec<RxEvent>,
    /// Stream offset of each connection's next byte.
    offsets: HashMap<ConnId, u64>,
    /// Buffers the backend was made with (for messages).
    capacity: usize,
    starve_timeout: Duration,
    /// `RxStats::starved` last seen.
    starved_seen: u64,
    /// Since when receiving has been starved with nothing coming back, and the returned count
    /// then.
    starving: Option<(Instant, u64)>,
    /// The unread tail of a buffer `recv_into` did not take whole: handed out first.
    partial: Option<Buffer>,
    /// The size of a whole buffer (a connection filling them is a bulk stream).
    buf_size: usize,
    /// The automatic low-water policy's mark (`None`: off, or a fixed mark was asked for).
    auto_low_water: Option<u32>,
    /// Connections whose mark the automatic policy raised.
    raised: Vec<ConnId>,
    /// How many times the automatic policy raised a mark, and lowered one.
    raises: u64,
    lowers: u64,
    /// `recv_into` of device memory: the asynchronous copier of this receiver's buffers (made at
    /// the first such call, for that device), or why there is none (its copies are then
    /// synchronous, one per buffer).
    device_fill: Option<(u32, Result<zcnet::gpu::DeviceFill, String>)>,
    /// Bytes `recv_into` copied to device memory asynchronously, and synchronously.
    device_async_bytes: u64,
    device_sync_bytes: u64,
    /// `mem="cuda:N"`: the path into GPU memory, what was refused, and the memory bound.
    /// After `inner` (fields drop in order): the receiver unbinds the memory before it is freed.
    gpu: Option<GpuRx>,
    /// `mem="udmabuf"`: the udmabuf the receiver bound. After `inner`, like `gpu`.
    udmabuf: Option<Udmabuf>,
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("mode", &self.inner.mode())
            .field("connections", &self.inner.connections())
            .finish_non_exhaustive()
    }
}

/// Bytes from an int.
fn size_arg(name: &str, v: Option<u64>) -> PyResult<Option<usize>> {
    v.map(|n| {
        usize::try_from(n)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| PyValueError::new_err(format!("{name} must be a positive size")))
    })
    .transpose()
}

#[pymethods]
impl Receiver {
    #[new]
    #[pyo3(signature = (mode="auto", iface=None, queue=None, *, buffers=None, buf_size=None, area=None, low_water=None, starve_timeout=1.0, mem=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        mode: &str,
        iface: Option<String>,
        queue: Option<u32>,
        buffers: Option<u64>,
        buf_size: Option<u64>,
        area: Option<u64>,
        low_water: Option<u32>,
        starve_timeout: f64,
        mem: Option<&str>,
    ) -> PyResult<Self> {
        collect_receivers();
        let memory = match mem.map(|m| (m, zcnet::MemoryKind::parse(m))) {
            None | Some(("host", _)) => Mem::Host,
            Some((_, Some(zcnet::MemoryKind::Udmabuf))) => Mem::Udmabuf,
            Some((_, Some(zcnet::MemoryKind::Cuda(n)))) => Mem::Cuda(n),
            Some((m, _)) => {
                return Err(PyValueError::new_err(format!(
                    "zcnet.Receiver: mem={m:?}: say \"host\" (default), \"udmabuf\" (a dma-buf of host memory a NIC queue writes into) or \"cuda\" / \"cuda:N\" (GPU memory N)"
                )))
            }
        };
        let mode = RxMode::parse(mode).map_err(errors::to_py)?;
        if let Mem::Udmabuf = memory {
            if !matches!(mode, RxMode::Zcrx | RxMode::Devmem) {
                return Err(PyValueError::new_err(format!(
                    "zcnet.Receiver: mem=\"udmabuf\" is bound to a NIC queue by mode=\"zcrx\" or \"devmem\", not mode={:?}",
                    mode.name()
                )));
            }
            if iface.is_none() {
                return Err(PyValueError::new_err(
                    "zcnet.Receiver: mem=\"udmabuf\" is bound to a NIC queue: give iface= (and queue=, else the interface's last), the NIC the flows are steered to",
                ));
            }
        }
        let mut cfg = RxConfig::new(mode);
        cfg.iface = iface;
        cfg.queue = queue;
        cfg.buf_size = BUF_SIZE;
        if let Some(n) = size_arg("buffers", buffers)? {
            cfg.buffers = n;
        }
        if let Some(n) = size_arg("buf_size", buf_size)? {
            cfg.buf_size = n;
        }
        if let Some(n) = size_arg("area", area)? {
            cfg.area_len = n;
        }
        // A fixed mark is the library's (applied to each connection added); the automatic one
        // is this binding's.
        cfg.low_water = low_water.filter(|&n| n > 1);
        if !(starve_timeout.is_finite() && starve_timeout >= 0.0) {
            return Err(PyValueError::new_err(
                "starve_timeout must be a number of seconds, 0 or more",
            ));
        }
        // Making a receiver may register memory with the kernel: the GIL is released. The
        // receiver is made on this thread, the one that polls it (io_uring wants that).
        let c = OnThisThread(&cfg);
        let (inner, gpu, udmabuf) = py
            .detach(move || OnThisThread(make_receiver(c.get(), memory)))
            .get()
            .map_err(errors::to_py)?;
        let capacity = match inner.mode() {
            RxMode::Uring => cfg.buffers.next_power_of_two(),
            _ => cfg.buffers,
        };
        let auto_low_water = (low_water.is_none()
            && matches!(inner.mode(), RxMode::Copy | RxMode::Uring))
        .then_some(BULK_LOW_WATER);
        Ok(Receiver {
            inner,
            events: VecDeque::new(),
            scratch: Vec::new(),
            offsets: HashMap::new(),
            capacity,
            starve_timeout: Duration::from_secs_f64(starve_timeout),
            starved_seen: 0,
            starving: None,
            partial: None,
            buf_size: cfg.buf_size,
            auto_low_water,
            raised: Vec::new(),
            raises: 0,
            lowers: 0,
            device_fill: None,
            device_async_bytes: 0,
            device_sync_bytes: 0,
            gpu,
            udmabuf,
        })
    }

    /// Takes over a connected TCP `socket.socket` and starts receiving on it (the Python object
    /// is closed then, zcnet owns the connection; when adding fails, the socket is left as it
    /// was). Returns the connection's id.
    fn add(&mut self, sock: &Bound<'_, PyAny>) -> PyResult<u64> {
        collect_receivers();
        let (stream, taken) = crate::take_tcp_socket(sock, "zcnet.Receiver.add")?;
        let id = self.inner.add(stream).map_err(errors::to_py)?;
        taken.keep()?;
        self.offsets.insert(id, 0);
        Ok(id.0)
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(slf: &Bound<'_, Self>) -> PyResult<Option<Buffer>> {
        collect_receivers();
        let py = slf.py();
        let mut this = slf.borrow_mut();
        if let Some(b) = this.partial.take() {
            return Ok(Some(b));
        }
        loop {
            while let Some(ev) = this.events.pop_front() {
                match ev {
                    RxEvent::Data(b) => {
                        let off = this.offsets.entry(b.conn()).or_insert(0);
                        let offset = *off;
                        *off += b.len() as u64;
                        let ptr = this
                            .inner
                            .bytes(&b)
                            .map_or(std::ptr::null(), <[u8]>::as_ptr);
                        let device = matches!(b.location(), Location::Device(_));
                        // A device range in the bound GPU memory: its device address; in the
                        // bound udmabuf: its offset there.
                        let udmabuf = match (b.device(), &this.udmabuf) {
                            (Some(_), Some(u)) => Some(Arc::clone(u)),
                            _ => None,
                        };
                        let (ptr, cuda) = match (b.device(), &this.gpu) {
                            (
                                Some(d),
                                Some(GpuRx {
                                    area: Some(a),
                                    ordinal,
                                    ..
                                }),
                            ) => match zcnet::gpu::device_addr_of(a, &d) {
                                Some(addr) => (addr as usize, Some((*ordinal, Arc::clone(a)))),
                                None => (0, None),
                            },
                            (Some(d), None) if udmabuf.is_some() => (d.offset as usize, None),
                            _ => (ptr as usize, None),
                        };
                        return Ok(Some(Buffer {
                            ptr,
                            len: b.len(),
                            conn: b.conn().0,
                            offset,
                            copied: b.copied(),
                            device,
                            cuda,
                            udmabuf,
                            buf: Arc::new(b),
                            rx: KeepReceiver::new(slf.clone().unbind().into_any()),
                        }));
                    }
                    RxEvent::Eof(c) => {
                        this.inner.close(c);
                        this.offsets.remove(&c);
                        this.raised.retain(|&r| r != c);
                    }
                    RxEvent::Failed(c, e) => {
                        this.inner.close(c);
                        this.offsets.remove(&c);
                        this.raised.retain(|&r| r != c);
                        return Err(errors::to_py(e));
                    }
                }
            }
            if this.inner.connections() == 0 {
                return Ok(None);
            }
            this.wait(py)?;
        }
    }

    /// Counters since the receiver was made: bytes, buffers, copied and zero-copy bytes,
    /// starvations, the mode in use and the mechanisms `auto` fell back from (with the reasons),
    /// the receive low-water mark (`low_water`: "auto", bytes or None) and how many times the
    /// automatic policy raised and lowered a connection's mark.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.stats();
        let d = PyDict::new(py);
        d.set_item("mode", self.inner.mode().name())?;
        let mem = match (&self.udmabuf, &self.gpu) {
            (Some(_), _) => "udmabuf".to_string(),
            (None, Some(g)) => format!("cuda:{}", g.ordinal),
            (None, None) => "host".to_string(),
        };
        d.set_item("mem", mem)?;
        d.set_item("bytes", s.bytes)?;
        d.set_item("buffers", s.buffers)?;
        d.set_item("copied_bytes", s.copied_bytes)?;
        d.set_item("zerocopy_bytes", s.zerocopy_bytes)?;
        d.set_item("starved", s.starved)?;
        d.set_item("rearms", s.rearms)?;
        d.set_item("eofs", s.eofs)?;
        d.set_item("failures", s.failures)?;
        d.set_item("linear_fallbacks", s.linear_fallbacks)?;
        d.set_item("unsteered", s.unsteered)?;
        d.set_item("returned", s.returned)?;
        d.set_item("held", self.inner.held())?;
        d.set_item("connections", self.inner.connections())?;
        // The receive low-water mark: "auto" (the binding's policy), a fixed byte count, or None.
        match (self.auto_low_water, self.inner.applied_low_water()) {
            (Some(_), _) => d.set_item("low_water", "auto")?,
            (None, n) => d.set_item("low_water", n)?,
        }
        d.set_item("low_water_raises", self.raises)?;
        d.set_item("low_water_lowers", self.lowers)?;
        let fb = pyo3::types::PyList::empty(py);
        for f in self.inner.fallbacks() {
            let e = PyDict::new(py);
            e.set_item("tried", f.tried.name())?;
            e.set_item("reason", f.reason.render(&crate::errors::Py))?;
            fb.append(e)?;
        }
        d.set_item("fallbacks", fb)?;
        // recv_into of device memory: bytes by asynchronous copies out of the pinned receive
        // ring, bytes by synchronous copies, and why the asynchronous path is not used.
        let dev = PyDict::new(py);
        dev.set_item("async_bytes", self.device_async_bytes)?;
        dev.set_item("sync_bytes", self.device_sync_bytes)?;
        match &self.device_fill {
            Some((_, Err(why))) => dev.set_item("async_refused", why)?,
            _ => dev.set_item("async_refused", py.None())?,
        }
        d.set_item("device_copies", dev)?;
        // mem="cuda:N": the path into GPU memory and why the better ones were not taken.
        if let Some(g) = &self.gpu {
            let gd = PyDict::new(py);
            gd.set_item("device", format!("cuda:{}", g.ordinal))?;
            gd.set_item("path", g.path.name())?;
            let rl = pyo3::types::PyList::empty(py);
            for r in &g.refused {
                let e = PyDict::new(py);
                e.set_item("path", r.tried.name())?;
                e.set_item("reason", r.reason.render(&crate::errors::Py))?;
                rl.append(e)?;
            }
            gd.set_item("refused", rl)?;
            d.set_item("gpu", gd)?;
        }
        Ok(d)
    }

    /// The mechanism in use (for auto, the one it chose).
    #[getter]
    fn mode(&self) -> &'static str {
        self.inner.mode().name()
    }

    /// Buffers Python holds now (Buffers alive, or dropped since the last receive).
    #[getter]
    fn held(&self) -> usize {
        self.inner.held()
    }

    /// Connections added and not yet ended.
    #[getter]
    fn connections(&self) -> usize {
        self.inner.connections()
    }

    /// Fills `out` with the next bytes received and returns how many: fewer than it holds only
    /// when every connection has ended (0: nothing left). `out` is a writable, C-contiguous
    /// bytes-like object (bytearray, numpy array, ...) or tensor (`__dlpack__`): host memory,
    /// copied into by the CPU, or CUDA device memory (a torch.cuda tensor, a
    /// `zcnet.DeviceBuffer`), copied into from the received host buffers by the GPU: with a
    /// uring receiver asynchronously out of the pinned receive ring, otherwise by a synchronous
    /// copy per buffer; every copy has finished when this returns (`stats()["device_copies"]`
    /// counts the bytes of each kind). An exception raised after some bytes were placed in
    /// host memory (Ctrl-C while waiting for the rest, a connection that failed) carries their
    /// count as its `filled` attribute: they are the stream's next bytes.
    fn recv_into(slf: &Bound<'_, Self>, out: &Bound<'_, PyAny>) -> PyResult<usize> {
        collect_receivers();
        const WHO: &str = "zcnet.Receiver.recv_into";
        let py = slf.py();
        if let Some(view) = crate::pybuf::get(out, true)? {
            let (dst, cap) = (view.ptr(), view.len());
            let r = Self::fill(slf, cap, |at, src| {
                // SAFETY: `dst` holds `cap` bytes exported by `out` until the view's release
                // (after this), and `at + src.len() <= cap`.
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.add(at), src.len()) };
                Ok(())
            });
            view.release(py);
            return r;
        }
        if !out.hasattr("__dlpack__")? {
            return Err(PyTypeError::new_err(format!(
                "{WHO} takes a writable bytes-like object (bytearray, numpy array, memoryview) or a tensor with __dlpack__ (host or CUDA), not {}",
                out.get_type().name()?
            )));
        }
        // The capsule keeps the tensor's memory alive until the copies are done.
        let (cap, imp) = crate::dlpack::import(out, WHO)?;
        if imp.read_only {
            return Err(PyValueError::new_err(format!(
                "{WHO}: the tensor is read-only (its DLPack flags say so): pass a writable one"
            )));
        }
        let r = match imp.cuda {
            None => {
                let dst = imp.data.cast_mut();
                Self::fill(slf, imp.len, |at, src| {
                    // SAFETY: the tensor (kept by `cap`) holds `imp.len` writable host bytes at
                    // `dst`, and `at + src.len() <= imp.len`.
                    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.add(at), src.len()) };
                    Ok(())
                })
            }
            Some(_) if imp.len == 0 => Ok(0),
            Some(ordinal) => {
                let mut region = crate::cuda::borrow(py, &imp, WHO)?;
                Self::fill_device(slf, &mut region, ordinal, imp.len)
            }
        };
        drop(cap);
        r
    }

    fn __repr__(&self) -> String {
        format!(
            "zcnet.Receiver(mode={:?}, connections={}, held={})",
            self.inner.mode().name(),
            self.inner.connections(),
            self.inner.held()
        )
    }
}

impl Receiver {
    /// Hands the next received bytes, up to `cap` of them, to `put(offset, bytes)` in stream
    /// order; returns how many (fewer only when every connection has ended). A buffer taken in
    /// part has its tail handed out first next time.
    fn fill(
        slf: &Bound<'_, Self>,
        cap: usize,
        mut put: impl FnMut(usize, &[u8]) -> PyResult<()>,
    ) -> PyResult<usize> {
        let py = slf.py();
        let mut filled = 0usize;
        while filled < cap {
            let next = Self::next_host(slf, cap - filled).inspect_err(|e| {
                // Bytes already placed in `out` are the stream's: an exception after them
                // (Ctrl-C in the wait for more, a failed connection) says how many as `filled`,
                // so that none is lost from the caller's view of the stream.
                if filled > 0 {
                    let _ = e.value(py).setattr("filled", filled);
                }
            })?;
            let Some((buf, n)) = next else {
                break;
            };
            // SAFETY: `buf.ptr` holds `buf.len` bytes lent by the receiver while `buf` lives.
            let src = unsafe { std::slice::from_raw_parts(buf.ptr as *const u8, n) };
            put(filled, src)?;
            filled += n;
            if n < buf.len {
                // The rest of the buffer is handed out first next time.
                slf.borrow_mut().partial = Some(buf.tail(py, n));
                break;
            }
        }
        Ok(filled)
    }

    /// The next received buffer for `recv_into` and how many of its bytes fit `room`; `None`
    /// once every connection has ended. Buffers in device memory are refused.
    fn next_host(slf: &Bound<'_, Self>, room: usize) -> PyResult<Option<(Buffer, usize)>> {
        let Some(buf) = Self::__next__(slf)? else {
            return Ok(None);
        };
        if buf.device || buf.ptr == 0 {
            // Not lost: the iteration hands it out next.
            let udmabuf = buf.udmabuf.is_some();
            slf.borrow_mut().partial = Some(buf);
            let why = match udmabuf {
                true => "zcnet: recv_into does not take bytes the NIC wrote into the receiver's udmabuf: iterate the Receiver and copy each buffer out with bytes(buf)",
                false => "zcnet: recv_into does not take bytes the NIC wrote into GPU memory (devmem, zcrx-dmabuf): iterate the Receiver and take each buffer with torch.from_dlpack(buf) (no copy)",
            };
            return Err(PyValueError::new_err(why));
        }
        let n = buf.len.min(room);
        Ok(Some((buf, n)))
    }

    /// `recv_into` of `cap` bytes of device memory `region` (on `cuda:ordinal`): each whole
    /// received buffer by an asynchronous copy out of the pinned receive ring (uring receivers:
    /// [`zcnet::gpu::DeviceFill`]), the rest (a buffer taken in part, other modes) by a
    /// synchronous copy; every copy has finished when this returns. Ordering with the tensor's
    /// other users: `crate::cuda::borrow` waited for the device's queued work (a kernel still
    /// reading the tensor) before this, and the copies are done before it returns.
    fn fill_device(
        slf: &Bound<'_, Self>,
        region: &mut zcnet::Region,
        ordinal: u32,
        cap: usize,
    ) -> PyResult<usize> {
        let py = slf.py();
        {
            let mut this = slf.borrow_mut();
            let this = &mut *this;
            if this.device_fill.as_ref().is_none_or(|(n, _)| *n != ordinal) {
                this.device_fill = None; // the old one waits for its copies as it drops
                let max = (this.capacity / 4).max(1);
                // Pinning the ring with CUDA takes a while: without the GIL.
                let rx = OnThisThread(&this.inner);
                let made = py
                    .detach(move || {
                        OnThisThread(zcnet::gpu::DeviceFill::new(rx.get(), ordinal, max))
                    })
                    .get();
                this.device_fill = Some((ordinal, made.map_err(|e| crate::errors::text(&e))));
            }
            if let Some((_, Ok(f))) = &mut this.device_fill {
                f.set_target(Some(region)).map_err(errors::to_py)?;
            }
        }
        let mut filled = 0usize;
        let r: PyResult<usize> = (|| {
            while filled < cap {
                let Some((buf, n)) = Self::next_host(slf, cap - filled)? else {
                    break;
                };
                let mut this = slf.borrow_mut();
                let this = &mut *this;
                let buf = match (n == buf.len, &mut this.device_fill) {
                    (true, Some((_, Ok(f)))) => match buf.into_whole() {
                        Ok(rx_buf) => {
                            if f.is_full() {
                                // Waiting for the oldest copy: without the GIL.
                                let fr = OnThisThread(&mut *f);
                                py.detach(move || fr.get().make_room());
                            }
                            f.copy(&mut this.inner, rx_buf, filled as u64)
                                .map_err(errors::to_py)?;
                            this.device_async_bytes += n as u64;
                            filled += n;
                            continue;
                        }
                        Err(b) => b,
                    },
                    _ => buf,
                };
                Self::fill_device_sync(py, this, region, buf, n, &mut filled)?;
            }
            Ok(filled)
        })();
        // Every copy finishes (or fails) before the tensor is handed back; the target is
        // forgotten so that nothing holds the caller's memory.
        let mut this = slf.borrow_mut();
        let waited = match &mut this.device_fill {
            Some((_, Ok(f))) => {
                let w = {
                    let f = OnThisThread(&mut *f);
                    py.detach(move || OnThisThread(f.get().wait())).get()
                };
                let _ = f.set_target(None);
                w
            }
            _ => Ok(()),
        };
        let n = r?;
        waited.map_err(errors::to_py)?;
        Ok(n)
    }

    /// The first `n` bytes of `buf` written synchronously at `*filled` of `region`; a tail left
    /// over is handed out first next time.
    fn fill_device_sync(
        py: Python<'_>,
        this: &mut Receiver,
        region: &mut zcnet::Region,
        buf: Buffer,
        n: usize,
        filled: &mut usize,
    ) -> PyResult<()> {
        // SAFETY: `buf.ptr` holds `buf.len` bytes lent by the receiver while `buf` lives, and
        // `n <= buf.len`.
        let src = unsafe { std::slice::from_raw_parts(buf.ptr as *const u8, n) };
        let (r, s, at) = (OnThisThread(&mut *region), OnThisThread(src), *filled);
        py.detach(move || OnThisThread(r.get().write_at(at, s.get())))
            .get()
            .map_err(errors::to_py)?;
        this.device_sync_bytes += n as u64;
        *filled += n;
        if n < buf.len {
            this.partial = Some(buf.tail(py, n));
        }
        Ok(())
    }

    /// Waits one slice (GIL released) for events, then checks signals and starvation.
    fn wait(&mut self, py: Python<'_>) -> PyResult<()> {
        let mut out = std::mem::take(&mut self.scratch);
        let starving = self.starving.is_some();
        // With a mark raised, a short wait first: if nothing comes, the marks are lowered.
        let raised = !self.raised.is_empty();
        let timeout = if raised { IDLE } else { SLICE };
        let r = {
            let rx = OnThisThread(&mut self.inner);
            let o = OnThisThread(&mut out);
            py.detach(move || {
                let (rx, out) = (rx.get(), o.get());
                let t0 = Instant::now();
                let r = rx.poll(out, timeout);
                // A starved copy receiver only looks (returns at once): do not spin.
                if starving && out.is_empty() {
                    std::thread::sleep(Duration::from_millis(10).saturating_sub(t0.elapsed()));
                }
                OnThisThread(r)
            })
            .get()
        };
        let got_data = out.iter().any(|e| matches!(e, RxEvent::Data(_)));
        if let Some(mark) = self.auto_low_water {
            if raised && out.is_empty() {
                // Quiet for IDLE: what is queued (less than the mark) is taken now.
                for c in std::mem::take(&mut self.raised) {
                    let _ = self.inner.set_low_water(c, 1);
                    self.lowers += 1;
                }
            }
            for e in &out {
                if let RxEvent::Data(b) = e {
                    // A whole buffer: more was queued than it holds, a bulk stream.
                    if b.len() >= self.buf_size && !self.raised.contains(&b.conn()) {
                        if let Ok(Some(_)) = self.inner.set_low_water(b.conn(), mark) {
                            self.raised.push(b.conn());
                            self.raises += 1;
                        }
                    }
                }
            }
        }
        self.events.extend(out.drain(..));
        self.scratch = out;
        r.map_err(errors::to_py)?;
        let s = self.inner.stats();
        if s.starved > self.starved_seen {
            // Receiving paused for want of a buffer (possibly in the poll that delivered the last
            // one): the clock starts, or restarts.
            self.starving = Some((Instant::now(), s.returned));
        } else if got_data {
            self.starving = None;
        }
        self.starved_seen = s.starved;
        if let Some((since, returned)) = self.starving {
            if s.returned > returned {
                // Buffers are coming back: not stuck (a new starvation counts again).
                self.starving = None;
            } else if since.elapsed() >= self.starve_timeout && self.events.is_empty() {
                self.starving = None;
                let held = self.inner.held();
                return Err(StarvedError::new_err(format!(
                    "receive starved: Python holds {held} of the receiver's {cap} buffers (zcnet.Buffer objects, or arrays/tensors made from them with from_dlpack, still referenced) and data is waiting; \
                     the kernel cannot receive until some come back. Drop them (del, or copy what you keep: np.array(view)), or make the Receiver with more buffers (buffers=N)",
                    cap = self.capacity
                )));
            }
        }
        py.check_signals()
    }
}
