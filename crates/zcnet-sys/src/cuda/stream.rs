//! Asynchronous copies: streams, an event per copy, and the host memory a copy may read while it runs.

use super::*;
use crate::mem::StableBytes;

/// A stream of asynchronous copies, with an event per copy to learn when each completed.
/// Dropping it waits for the copies it still runs.
#[derive(Debug)]
pub struct Stream {
    ctx: Arc<Context>,
    raw: Handle,
}

// SAFETY: stream handles may be used from any thread with the context current (done per call).
unsafe impl Send for Stream {}

/// A recorded point in a stream; complete when every copy queued before it is.
#[derive(Debug)]
pub(crate) struct Event {
    ctx: Arc<Context>,
    raw: Handle,
}

// SAFETY: as for Stream.
unsafe impl Send for Event {}

impl Stream {
    /// A non-blocking stream on `ctx`.
    pub fn new(ctx: &Arc<Context>) -> Result<Stream> {
        let mut raw: Handle = std::ptr::null_mut();
        ctx.call("cuStreamCreate", |f| {
            // SAFETY: `raw` is a live out-parameter.
            unsafe { (f.stream_create)(&mut raw, STREAM_NON_BLOCKING) }
        })?;
        Ok(Stream {
            ctx: Arc::clone(ctx),
            raw,
        })
    }

    fn event(&self) -> Result<Event> {
        let mut raw: Handle = std::ptr::null_mut();
        self.ctx.call("cuEventCreate", |f| {
            // SAFETY: `raw` is a live out-parameter.
            unsafe { (f.event_create)(&mut raw, EVENT_DISABLE_TIMING) }
        })?;
        let ev = Event {
            ctx: Arc::clone(&self.ctx),
            raw,
        };
        let s = self.raw;
        // SAFETY: both handles are live (owned by `ev` and `self`).
        self.ctx.call("cuEventRecord", |f| {
            // SAFETY: the handles are live (owned by these values) and the context is current.
            unsafe { (f.event_record)(ev.raw, s) }
        })?;
        Ok(ev)
    }

    /// Queues a copy of `src`'s bytes (which must lie inside `reg`, host memory registered with
    /// CUDA) to `dst[off..]`. The source is moved into the returned [`Pending`], which gives it
    /// back only once the copy's event completed: the type system, not a rule in a comment,
    /// keeps the bytes alive and unwritten while the GPU reads them (a ring buffer cannot go
    /// back to the kernel early). On error the source comes back with it, safe to reuse (when
    /// the copy was queued but its event could not be made, the stream was waited for first).
    /// `reg` keeps the memory mapped; the stream is synchronised before it is dropped.
    #[allow(clippy::result_large_err)] // the source must come back with the error
    pub fn copy_to_device<S: StableBytes>(
        &self,
        reg: &HostRegistration,
        src: S,
        dst: &DeviceMem,
        off: u64,
    ) -> std::result::Result<Pending<S>, (S, CudaError)> {
        let bytes = src.host_bytes();
        let (p, len) = (bytes.as_ptr(), bytes.len());
        if !reg.contains(p as usize, len) {
            let e = CudaError::Call {
                call: "cuMemcpyHtoDAsync",
                code: E::CUDA_ERROR_INVALID_VALUE as i32,
                text: "the source is not inside the registered host memory".into(),
            };
            return Err((src, e));
        }
        let d = match dst.range(off, len) {
            Ok(d) => d,
            Err(e) => return Err((src, e)),
        };
        let s = self.raw;
        let r = self.ctx.call("cuMemcpyHtoDAsync", |f| {
            // SAFETY: the source lies in pinned memory kept mapped by `reg` (checked above); the
            // copy only reads it, and `src` (whose bytes nobody writes while it lives, by
            // StableBytes's contract) moves into the Pending below until the copy completed. The
            // destination was bounds-checked against `dst`.
            unsafe { (f.memcpy_htod_async)(d, p.cast(), len, s) }
        });
        if let Err(e) = r {
            return Err((src, e));
        }
        match self.event() {
            Ok(event) => Ok(Pending {
                value: Some(src),
                event,
            }),
            Err(e) => {
                // The copy is queued but nothing will say when it read `src`: wait for the
                // stream before the caller gets its source back (and may hand it to the kernel).
                let _ = self.synchronize();
                Err((src, e))
            }
        }
    }

    /// Queues a copy of `dst.len()` bytes from `src[off..]` into the host slot `dst` (inside
    /// `reg`), which the returned [`PendingSlot`] keeps until the copy completed: nobody can
    /// read the slot while the GPU writes it.
    pub fn copy_to_host(
        &self,
        reg: &HostRegistration,
        src: &DeviceMem,
        off: u64,
        mut dst: crate::mem::Slot,
        len: usize,
    ) -> std::result::Result<PendingSlot, (crate::mem::Slot, CudaError)> {
        let addr = dst.addr();
        if len > dst.len() || !reg.contains(addr, len) || !Arc::ptr_eq(dst.mapping(), reg.mapping())
        {
            let e = CudaError::Call {
                call: "cuMemcpyDtoHAsync",
                code: E::CUDA_ERROR_INVALID_VALUE as i32,
                text: "the destination is not a slot of the registered host memory".into(),
            };
            return Err((dst, e));
        }
        let s = match src.range(off, len) {
            Ok(s) => s,
            Err(e) => return Err((dst, e)),
        };
        let stream = self.raw;
        let Some(bytes) = dst.bytes_mut() else {
            let e = CudaError::Call {
                call: "cuMemcpyDtoHAsync",
                code: E::CUDA_ERROR_INVALID_VALUE as i32,
                text: "the destination is not host memory".into(),
            };
            return Err((dst, e));
        };
        let p = bytes.as_mut_ptr();
        // SAFETY: `p` points at `len` bytes of the slot, which is moved into the PendingSlot
        // below and so cannot be read or written by anyone until the copy's event completed;
        // the memory is pinned and kept mapped by `reg` (checked above).
        let r = self.ctx.call("cuMemcpyDtoHAsync", |f| unsafe {
            (f.memcpy_dtoh_async)(p.cast(), s, len, stream)
        });
        if let Err(e) = r {
            return Err((dst, e));
        }
        match self.event() {
            Ok(event) => Ok(Pending {
                value: Some(dst),
                event,
            }),
            Err(e) => {
                // Without an event, wait for the stream so the slot can be given back safely.
                let _ = self.synchronize();
                Err((dst, e))
            }
        }
    }

    /// Waits for every copy queued on the stream.
    pub(crate) fn synchronize(&self) -> Result<()> {
        let s = self.raw;
        self.ctx.call("cuStreamSynchronize", |f| {
            // SAFETY: the handles are live (owned by these values) and the context is current.
            unsafe { (f.stream_synchronize)(s) }
        })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let s = self.raw;
        // SAFETY: waits for the stream's copies (so no copy touches memory freed after this),
        // then destroys the stream created in `new`.
        let _ = self.ctx.call("cuStreamSynchronize", |f| {
            // SAFETY: the handles are live (owned by these values) and the context is current.
            unsafe { (f.stream_synchronize)(s) }
        });
        let _ = self.ctx.call("cuStreamDestroy", |f| {
            // SAFETY: the handles are live (owned by these values) and the context is current.
            unsafe { (f.stream_destroy)(s) }
        });
    }
}

impl Event {
    /// `Ok(true)` once complete, `Ok(false)` while pending, `Err` if the work before it failed.
    pub(crate) fn query(&self) -> Result<bool> {
        let d = driver()?;
        let _bound = self.ctx.bind();
        // SAFETY: the event is live (owned by self).
        let code = unsafe { (d.fns.event_query)(self.raw) };
        match code {
            0 => Ok(true),
            ERR_NOT_READY => Ok(false),
            c => d.check("cuEventQuery", c).map(|_| false),
        }
    }

    /// Blocks until complete.
    pub(crate) fn wait(&self) -> Result<()> {
        let r = self.raw;
        self.ctx.call("cuEventSynchronize", |f| {
            // SAFETY: the handles are live (owned by these values) and the context is current.
            unsafe { (f.event_synchronize)(r) }
        })
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let r = self.raw;
        // SAFETY: destroys the event created by Stream::event; the driver defers the release
        // until the event's work completed if it is still pending.
        let _ = self.ctx.call("cuEventDestroy", |f| {
            // SAFETY: the handles are live (owned by these values) and the context is current.
            unsafe { (f.event_destroy)(r) }
        });
    }
}

/// Part of a [`StableBytes`]: `len` bytes from `start` (a range of a ring buffer that several
/// copies read, each its own range of one shared buffer).
#[derive(Debug)]
pub struct SourceRange<S> {
    src: S,
    start: usize,
    len: usize,
}

impl<S: StableBytes> SourceRange<S> {
    /// `len` bytes of `src` from `start`; `None` when they are not all inside it.
    pub fn new(src: S, start: usize, len: usize) -> std::result::Result<SourceRange<S>, S> {
        match start.checked_add(len) {
            Some(end) if end <= src.host_bytes().len() => Ok(SourceRange { src, start, len }),
            _ => Err(src),
        }
    }
}

// SAFETY: a sub-range of `S`'s bytes, which by `S`'s contract stay put and unwritten; `start`
// and `len` never change after `new` checked them.
unsafe impl<S: StableBytes> StableBytes for SourceRange<S> {
    fn host_bytes(&self) -> &[u8] {
        &self.src.host_bytes()[self.start..self.start + self.len]
    }
}

/// Host memory an asynchronous copy is reading ([`Stream::copy_to_device`], the source) or
/// writing ([`Stream::copy_to_host`], the destination slot): the value comes back only once
/// the copy completed, so nobody can touch those bytes while the GPU does.
///
/// Dropped while the copy runs, it waits for the copy before it lets go of the value: the
/// bytes are never released (a slot reused, a received buffer given back) under the GPU.
#[derive(Debug)]
pub struct Pending<T> {
    /// `Some` until a consuming method takes it.
    value: Option<T>,
    event: Event,
}

impl<T> Drop for Pending<T> {
    fn drop(&mut self) {
        if self.value.is_some() {
            // A failed copy ends too: either way the GPU no longer touches the bytes.
            let _ = self.event.wait();
        }
    }
}

/// A host slot the GPU is writing; the slot comes back only once the copy completed.
pub type PendingSlot = Pending<crate::mem::Slot>;

impl<T> Pending<T> {
    /// The value once the copy completed (`Ok(Ok(value))`), itself while pending
    /// (`Ok(Err(self))`), or the error with the value (waited for, so it is safe to reuse) when
    /// the copy failed.
    #[allow(clippy::result_large_err)] // the value must come back with the error
    pub fn poll(self) -> std::result::Result<std::result::Result<T, Self>, (T, CudaError)> {
        match self.event.query() {
            Ok(true) => Ok(Ok(self.take())),
            Ok(false) => Ok(Err(self)),
            Err(e) => {
                let _ = self.event.wait();
                Err((self.take(), e))
            }
        }
    }

    /// The value, once the copy is known to be over (the drop then waits for nothing).
    fn take(mut self) -> T {
        self.value
            .take()
            .expect("a Pending holds its value until a consuming method takes it")
    }

    /// Whether the copy finished (or failed: [`Self::poll`] then says how).
    pub fn ready(&self) -> bool {
        self.event.query().unwrap_or(true)
    }

    /// Blocks until the copy completed.
    #[allow(clippy::result_large_err)] // the value must come back with the error
    pub fn wait(self) -> std::result::Result<T, (T, CudaError)> {
        match self.event.wait() {
            Ok(()) => Ok(self.take()),
            Err(e) => Err((self.take(), e)),
        }
    }
}
