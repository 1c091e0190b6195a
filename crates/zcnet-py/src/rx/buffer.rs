//! `zcnet.Buffer`: one buffer a receiver lent, exported without a copy (DLPack, the buffer
//! protocol), and the reference to its receiver it keeps.

use super::*;

/// One received buffer, lent by its `Receiver` until the last reference to it (and to every
/// array or tensor made from it) is gone; then it goes back to the kernel.
///
/// `np.from_dlpack(buf)` / `torch.from_dlpack(buf)`: a 1-D uint8 view of the bytes, no copy
/// (read-only where the consumer honours DLPack's flag). `buf.memoryview()`: the same bytes for
/// buffer-protocol consumers, read-only, no copy. `len(buf)`, `bytes(buf)` and `buf.tobytes()` (copies),
/// `buf.offset` (its first byte's offset in its connection's stream), `buf.conn`, `buf.copied`
/// (whether the kernel copied the bytes).
#[pyclass(frozen, weakref, module = "zcnet")]
pub(crate) struct Buffer {
    /// Address of the bytes (0: device memory).
    pub(super) ptr: usize,
    pub(super) len: usize,
    pub(super) conn: u64,
    pub(super) offset: u64,
    pub(super) copied: bool,
    pub(super) device: bool,
    /// Device memory of this CUDA device (`ptr` is then a device address): a range of the
    /// GPU memory a `mem="cuda:N"` receiver bound (shared here), written by the NIC.
    pub(super) cuda: Option<(u32, Arc<zcnet::Region>)>,
    /// A range of the udmabuf a `mem="udmabuf"` receiver bound (`ptr` is then its offset
    /// there), written by the NIC: read back by `bytes(buf)`.
    pub(super) udmabuf: Option<Udmabuf>,
    /// Gives the buffer back when dropped.
    #[allow(dead_code)]
    pub(super) buf: Arc<zcnet::RxBuf>,
    /// The receiver, whose memory holds the bytes: alive while the buffer is.
    #[allow(dead_code)]
    pub(super) rx: KeepReceiver,
}

/// A reference to a [`Receiver`] that a [`Buffer`] keeps. A `Receiver` may only be destroyed
/// on the thread that made it (its io_uring rings belong to that thread; PyO3 leaks an
/// `unsendable` object dropped elsewhere, with a warning): when the last reference would go
/// on another thread, it is handed to that thread instead ([`collect_receivers`]), which
/// drops it at its next call into zcnet.
pub(crate) struct KeepReceiver {
    obj: Option<Py<PyAny>>,
    owner: std::thread::ThreadId,
}

/// Receivers whose last reference went on another thread, with the thread that made them.
static ORPHANS: std::sync::Mutex<Vec<(std::thread::ThreadId, Py<PyAny>)>> =
    std::sync::Mutex::new(Vec::new());

impl KeepReceiver {
    pub(super) fn new(obj: Py<PyAny>) -> KeepReceiver {
        KeepReceiver {
            obj: Some(obj),
            owner: std::thread::current().id(),
        }
    }

    fn clone_ref(&self, py: Python<'_>) -> KeepReceiver {
        KeepReceiver {
            obj: self.obj.as_ref().map(|o| o.clone_ref(py)),
            owner: self.owner,
        }
    }
}

impl Drop for KeepReceiver {
    fn drop(&mut self) {
        let Some(obj) = self.obj.take() else {
            return;
        };
        if std::thread::current().id() == self.owner {
            return drop(obj);
        }
        // Counted and dropped under the GIL: no other reference can go in between.
        Python::attach(|_py| {
            // SAFETY: `obj` is a live object this thread holds a reference to, read with the
            // GIL held (the FFI call PyO3 itself names for this).
            let others = unsafe { pyo3::ffi::Py_REFCNT(obj.as_ptr()) } > 1;
            if others {
                drop(obj);
            } else if let Ok(mut o) = ORPHANS.lock() {
                o.push((self.owner, obj));
            }
        });
    }
}

/// Drops the receivers handed to this thread by [`KeepReceiver`]'s drop on another one.
pub(crate) fn collect_receivers() {
    let me = std::thread::current().id();
    let mine: Vec<Py<PyAny>> = match ORPHANS.lock() {
        Ok(mut o) => {
            let (mine, rest) = std::mem::take(&mut *o)
                .into_iter()
                .partition(|(t, _)| *t == me);
            *o = rest;
            mine.into_iter().map(|(_, p)| p).collect()
        }
        Err(_) => return,
    };
    drop(mine);
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer")
            .field("len", &self.len)
            .field("conn", &self.conn)
            .field("offset", &self.offset)
            .finish_non_exhaustive()
    }
}

impl Buffer {
    /// The same buffer from byte `from` on (sharing its return to the kernel).
    pub(super) fn tail(&self, py: Python<'_>, from: usize) -> Buffer {
        Buffer {
            ptr: self.ptr + from,
            len: self.len - from,
            conn: self.conn,
            offset: self.offset + from as u64,
            copied: self.copied,
            device: self.device,
            cuda: self.cuda.clone(),
            udmabuf: self.udmabuf.clone(),
            buf: Arc::clone(&self.buf),
            rx: self.rx.clone_ref(py),
        }
    }

    /// The received buffer itself, when this is all of it (not a tail) and nothing else
    /// references it; else the Buffer back.
    #[allow(clippy::result_large_err)] // the buffer comes back
    pub(super) fn into_whole(self) -> Result<zcnet::RxBuf, Buffer> {
        if self.len != self.buf.len() {
            return Err(self);
        }
        Arc::try_unwrap(self.buf).map_err(|buf| Buffer { buf, ..self })
    }

    fn host(&self) -> PyResult<*const u8> {
        if let Some((n, _)) = &self.cuda {
            return Err(PyBufferError::new_err(format!(
                "zcnet: this buffer is GPU memory (cuda:{n}), not host memory: take it with torch.from_dlpack(buf) (kDLCUDA, no copy), or bytes(buf) for a copy"
            )));
        }
        if self.udmabuf.is_some() {
            return Err(PyBufferError::new_err(
                "zcnet: this buffer is in the receiver's udmabuf (the dma-buf the NIC wrote into), not in a host buffer zcnet can lend: bytes(buf) copies it out",
            ));
        }
        if self.device || self.ptr == 0 {
            return Err(PyBufferError::new_err(
                "zcnet: this buffer is device memory outside the receiver's own (a dma-buf zcnet did not allocate): make the Receiver with mem=\"cuda:N\" to get kDLCUDA buffers, or mem=\"udmabuf\" to read it with bytes(buf)",
            ));
        }
        Ok(self.ptr as *const u8)
    }
}

#[pymethods]
impl Buffer {
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        slf: &Bound<'py, Self>,
        stream: Option<&Bound<'py, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let this = slf.get();
        if let Some(n) = this.cuda.as_ref().map(|(n, _)| *n) {
            // The NIC wrote the bytes by DMA before the kernel delivered them: there is no
            // stream to order against, so any `stream` is accepted and nothing is waited for.
            let _ = stream;
            let here = (crate::dlpack::DL_CUDA, n as i32);
            let versioned = crate::dlpack::check_request(
                "zcnet.Buffer",
                here,
                &format!("GPU memory {here:?} (kDLCUDA, ordinal)"),
                dl_device,
                copy,
                "bytes(buf) copies it to the host",
                max_version,
            )?;
            return crate::dlpack::export(
                py,
                // A device address: carried in the tensor, never dereferenced by the host.
                this.ptr as *const u8,
                this.len,
                slf.clone().unbind().into_any(),
                // The kernel owns the memory again once the buffer goes: read-only.
                crate::dlpack::cuda(n, true, versioned),
            );
        }
        let ptr = this.host()?;
        if let Some(s) = stream {
            // CPU memory has no stream: None (or -1, "no synchronization") only.
            if !s.is_none() && s.extract::<i64>().ok() != Some(-1) {
                return Err(PyValueError::new_err(
                    "zcnet.Buffer is host memory: __dlpack__'s stream must be None",
                ));
            }
        }
        let versioned = crate::dlpack::check_request(
            "zcnet.Buffer",
            (crate::dlpack::DL_CPU, 0),
            "host memory (kDLCPU, 0)",
            dl_device,
            copy,
            "copy=True: copy after import, e.g. np.array(np.from_dlpack(buf))",
            max_version,
        )?;
        crate::dlpack::export(
            py,
            ptr,
            this.len,
            slf.clone().unbind().into_any(),
            crate::dlpack::host_read_only(versioned),
        )
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        match &self.cuda {
            Some((n, _)) => (crate::dlpack::DL_CUDA, *n as i32),
            None => (crate::dlpack::DL_CPU, 0),
        }
    }

    /// A read-only `memoryview` of the bytes, **without a copy** (for consumers of the buffer
    /// protocol rather than DLPack). The view, and anything made from it, keeps the buffer lent
    /// until the last of them goes. `memoryview(buf)` itself is not possible in this abi3 build
    /// for CPython 3.9 (README.md, "Python").
    fn memoryview<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let this = slf.get();
        let ptr = this.host()?;
        crate::pybuf::readonly_memoryview(slf.as_any(), ptr, this.len)
    }

    /// The bytes as a new `bytes` object: **a copy** (the buffer itself can be dropped then).
    /// The same as `bytes(buf)`.
    fn tobytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        self.__bytes__(py)
    }

    fn __len__(&self) -> usize {
        self.len
    }

    fn __bytes__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        if let Some((_, area)) = &self.cuda {
            // A copy from the GPU memory the receiver bound, at this buffer's place in it.
            let mut out = vec![0u8; self.len];
            read_device(py, area, self.ptr as u64, &mut out)?;
            return Ok(PyBytes::new(py, &out));
        }
        if let Some(u) = &self.udmabuf {
            // A copy out of the udmabuf the receiver bound, at this buffer's offset in it.
            let mut out = vec![0u8; self.len];
            let mut region = u.lock().map_err(|_| {
                PyBufferError::new_err("zcnet: the receiver's udmabuf lock is poisoned")
            })?;
            region
                .read_back(self.ptr, &mut out)
                .map_err(errors::to_py)?;
            return Ok(PyBytes::new(py, &out));
        }
        let ptr = self.host()?;
        // SAFETY: `ptr` holds `len` bytes lent by the receiver (kept alive by `self.rx`) while
        // `self.buf` lives.
        let b = unsafe { std::slice::from_raw_parts(ptr, self.len) };
        Ok(PyBytes::new(py, b))
    }

    /// The connection (the id `Receiver.add` returned).
    #[getter]
    fn conn(&self) -> u64 {
        self.conn
    }

    /// Offset of the first byte in its connection's stream.
    #[getter]
    fn offset(&self) -> u64 {
        self.offset
    }

    /// Whether the kernel copied the bytes (copy and uring always; zcrx when it fell back).
    #[getter]
    fn copied(&self) -> bool {
        self.copied
    }

    fn __repr__(&self) -> String {
        format!(
            "zcnet.Buffer(len={}, conn={}, offset={}, copied={})",
            self.len,
            self.conn,
            self.offset,
            if self.copied { "True" } else { "False" }
        )
    }
}
