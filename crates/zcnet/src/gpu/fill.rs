//! Received host buffers copied into device memory by the GPU's copy engine, asynchronously.
//!
//! ```text
//!  Receiver (uring) ─► RxBuf ─► taken out of the ring ─► cuMemcpyHtoDAsync ─► the caller's
//!        ▲                                                     │ event          device memory
//!        └──────── buffer back to the kernel at the next poll ◄┘
//! ```
//! A [`Receiver`]'s buffers are pinned once (a CUDA host registration of its ring), so a copy
//! is a DMA the GPU runs while the receiver goes on receiving into other buffers. This is what
//! a program that iterates a [`Receiver`] and wants the bytes in GPU memory (the Python
//! binding's `recv_into` of a CUDA tensor) uses instead of a synchronous copy per buffer, which
//! on an H100 held receiving to ~1.9 GB/s (docs/perf.md, "GPU memory").

use super::engine::{CopyEngine, CudaEngine, Done};
use crate::error::{Error, Result};
use crate::region::Region;
use crate::rx::{Receiver, RxBuf};
use std::sync::Arc;
use std::time::Duration;
use zcnet_core::staging::CopyId;
use zcnet_sys::cuda::SourceRange;

/// Copies in flight at most by default: a quarter of the Python binding's 64 receive buffers,
/// so that the kernel always has most of the ring to receive into.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 16;

/// Copies whole received buffers of one [`Receiver`] into device memory, asynchronously.
///
/// Made once per receiver and device ([`DeviceFill::new`] pins the receiver's buffers with
/// CUDA); each call of [`Self::copy`] takes a buffer out of the receive ring and starts its copy
/// to the target set with [`Self::set_target`]; the buffer goes back to the kernel once the copy
/// completed. [`Self::wait`] waits for every copy: only then are the bytes in device memory.
/// Dropping it waits too. `uring` receivers only (their buffers are a ring the library owns).
#[derive(Debug)]
pub struct DeviceFill {
    engine: Box<dyn CopyEngine>,
    next: u64,
    done: Vec<Done>,
    /// The first failed copy's error, until [`Self::wait`] reports it.
    error: Option<Error>,
    max_in_flight: usize,
    stats: FillStats,
    /// The CUDA device.
    ordinal: u32,
    /// The device address of the memory copies write now ([`Self::set_target`]).
    target: Option<u64>,
}

/// What a [`DeviceFill`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FillStats {
    /// Copies started.
    pub copies: u64,
    /// Bytes they copied.
    pub bytes: u64,
    /// Times a copy waited for an earlier one, because `max_in_flight` were running.
    pub throttled: u64,
}

impl DeviceFill {
    /// Pins `rx`'s receive buffers for copies to device memory on `cuda:ordinal`, with at most
    /// `max_in_flight` copies (and so buffers held out of the ring) at a time. Refused for a
    /// receiver that is not `uring` ([`Error::Unsupported`], remedy: the uring mode) and where
    /// CUDA or the device is missing ([`Error::Gpu`]).
    pub fn new(rx: &Receiver, ordinal: u32, max_in_flight: usize) -> Result<DeviceFill> {
        let Some(host) = rx.host_mapping() else {
            return Err(rx.uring_only(
                "asynchronous copies to the GPU from {} receive buffers (uring buffers can be)",
            ));
        };
        let engine = CudaEngine::on(crate::cuda::context(ordinal)?, host)?;
        Ok(DeviceFill {
            engine: Box::new(engine),
            next: 0,
            done: Vec::new(),
            error: None,
            max_in_flight: max_in_flight.max(1),
            stats: FillStats::default(),
            ordinal,
            target: None,
        })
    }

    /// Makes `dst` (device memory on this fill's device: [`Region::cuda`], or a tensor's through
    /// [`super::borrow_device`]) the memory later copies write, or none. Refused while copies are
    /// in flight ([`Self::wait`] first) and for host memory or another device's.
    pub fn set_target(&mut self, dst: Option<&Region>) -> Result<()> {
        let dev = dst
            .map(|r| super::staging::device_of(r, "DeviceFill::set_target"))
            .transpose()?;
        let addr = dev.as_ref().map(|d| d.device_addr());
        self.engine.set_device(dev)?;
        self.target = addr;
        Ok(())
    }

    /// The device address of the memory copies write now (`None`: no target set).
    pub fn target(&self) -> Option<u64> {
        self.target
    }

    /// Whether `max_in_flight` copies are running, so that [`Self::copy`] would first wait for
    /// the oldest (a caller holding a lock others need, Python's GIL, calls [`Self::make_room`]
    /// without it first).
    pub fn is_full(&self) -> bool {
        self.engine.in_flight() >= self.max_in_flight
    }

    /// Waits until a copy can start without waiting (fewer than `max_in_flight` running).
    pub fn make_room(&mut self) {
        self.reap();
        if self.is_full() {
            self.stats.throttled += 1;
            while self.is_full() {
                self.engine.wait(Duration::from_millis(10));
                self.reap();
            }
        }
    }

    /// Takes `buf` (a buffer of the receiver this fill was made for, delivered whole) out of the
    /// receive ring and starts copying its bytes to `dst_off` of the target, first waiting for
    /// the oldest copy when `max_in_flight` run. On error `buf` goes back to the ring and its
    /// bytes are not copied: the caller treats the transfer as failed.
    ///
    /// The copies run on the engine's own non-blocking stream, unordered with other streams'
    /// work on the target: whoever else writes or reads it must be done before (a borrowed
    /// tensor: [`super::borrow_device`] waits for the device's queued work) and must not start
    /// before [`Self::wait`].
    pub fn copy(&mut self, rx: &mut Receiver, buf: RxBuf, dst_off: u64) -> Result<()> {
        self.make_room();
        let len = buf.len();
        let held = rx.take(buf).map_err(|(_, e)| e)?;
        let src = SourceRange::new(Arc::new(held), 0, len).map_err(|_| {
            Error::invalid_input(format!(
                "DeviceFill::copy: {len} B do not fit the receive buffer"
            ))
        })?;
        let id = CopyId(self.next);
        self.next += 1;
        self.engine
            .to_device(id, src, dst_off)
            .map_err(|(_, e)| e)?;
        self.stats.copies += 1;
        self.stats.bytes += len as u64;
        Ok(())
    }

    /// Waits until every copy started has completed; the first that failed, if any, is the
    /// error (reported once).
    pub fn wait(&mut self) -> Result<()> {
        while self.engine.in_flight() > 0 {
            self.engine.wait(Duration::from_millis(10));
            self.reap();
        }
        self.reap();
        self.error.take().map_or(Ok(()), Err)
    }

    /// Copies started and not yet seen complete.
    pub fn in_flight(&self) -> usize {
        self.engine.in_flight()
    }

    /// The CUDA device the copies go to.
    pub fn ordinal(&self) -> u32 {
        self.ordinal
    }

    /// Counters so far.
    pub fn stats(&self) -> FillStats {
        self.stats
    }

    /// Collects finished copies: their buffers go back to the ring (dropped), the first error is
    /// kept for [`Self::wait`].
    fn reap(&mut self) {
        self.engine.poll(&mut self.done);
        for d in self.done.drain(..) {
            if let (Err(e), None) = (d.result, &self.error) {
                self.error = Some(e);
            }
        }
    }
}

impl Drop for DeviceFill {
    fn drop(&mut self) {
        // Copies in flight read ring buffers and write the target: let them finish first.
        let _ = self.wait();
    }
}
