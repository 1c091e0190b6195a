//! Staging through pinned host memory, for NICs that cannot reach GPU memory.
//!
//! ```text
//!  receive: socket ─► io_uring multishot into pinned host buffers ─► async copy ─► GPU ring
//!                         ▲                                              │ event
//!                         └────────── buffer re-added to the ring ◄──────┘
//!  send:    GPU memory ─► async copy into a pinned host buffer ─► SEND_ZC (in stream order)
//!                                        ▲                              │ notification
//!                                        └──────── buffer free ◄────────┘
//! ```
//! The bookkeeping (which host buffer waits on which copy, in-order delivery, back-pressure) is
//! `zcnet_core::staging`; this module runs it against the kernel and a `CopyEngine`. Copies
//! overlap with the network: a host buffer is handed back as soon as its copy finished, while
//! the next receives or sends are under way.

use super::engine::{CopyEngine, CudaEngine, Done};
use crate::cancel::Cancel;
use crate::error::{Error, Result};
use crate::region::{Region, TxBuf};
use crate::tx::{Sender, Socket, TxConfig, TxStats};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;
use zcnet_core::staging::{StagingConfig, StagingError, StagingRx, StagingStats, StagingTx};
use zcnet_sys::bufring::{HeldBuf, RecvRing};
use zcnet_sys::cuda::{DeviceMem, SourceRange};

const ARM_TAG: u64 = 1;

/// Host staging buffers for a staged transfer.
#[derive(Debug, Clone)]
pub struct StagingOptions {
    /// Pinned host buffers (receive: a power of two). Default 32.
    pub host_bufs: u16,
    /// Bytes per host buffer. Default 256 KiB.
    pub host_buf_size: u32,
    /// Copies in flight at most. Default: one per host buffer.
    pub max_copies: Option<u32>,
    /// The caller's cancel token: a staged receive run to its end ([`drain_staged`]) stops
    /// with [`Error::Interrupted`] once it is cancelled. (A staged send takes its sender's,
    /// [`TxConfig::cancel`].) Default: a fresh token nobody cancels.
    ///
    /// [`drain_staged`]: super::receive::drain_staged
    pub cancel: Cancel,
}

impl Default for StagingOptions {
    fn default() -> Self {
        StagingOptions {
            host_bufs: 32,
            host_buf_size: 256 << 10,
            max_copies: None,
            cancel: Cancel::new(),
        }
    }
}

impl StagingOptions {
    fn core(&self) -> StagingConfig {
        let c = StagingConfig::new(self.host_buf_size, self.host_bufs);
        match self.max_copies {
            Some(n) => c.with_max_copies(n),
            None => c,
        }
    }
}

fn staging_error(e: StagingError) -> Error {
    Error::io(
        format!("staging pipeline: {e} (please report this)"),
        std::io::Error::from(std::io::ErrorKind::InvalidData),
    )
}

pub(crate) fn device_of(region: &Region, what: &str) -> Result<Arc<DeviceMem>> {
    region.device_mem().ok_or_else(|| {
        Error::invalid_input(crate::text!(
            format!("{what}: the region is host memory; staging is for device memory ("),
            crate::text::Call::RegionCuda,
            ")",
        ))
    })
}

/// Receives one TCP stream into a ring in GPU memory through pinned host buffers.
///
/// Stream bytes are placed back to back at `position % ring length`; [`Self::readable`] says
/// which ring bytes hold delivered data (in stream order), and [`Self::release`] gives them
/// back. When the application does not release, receiving pauses (TCP flow control slows the
/// peer) and [`StagedStats::pauses`] counts it.
#[derive(Debug)]
pub struct StagedReceiver {
    // Drop order: the engine (waits for its copies) before the ring that holds the buffers.
    engine: Box<dyn CopyEngine>,
    ring: RecvRing,
    /// Received buffers taken out of the ring, by id, while copies read them: each copy holds
    /// a clone, and the buffer goes back to the ring only once the last copy completed.
    held: Vec<Option<Arc<HeldBuf>>>,
    core: StagingRx,
    stream: TcpStream,
    armed: bool,
    eof: bool,
    done: Vec<Done>,
    comps: Vec<(Option<u16>, std::io::Result<usize>, bool)>,
    pauses: u64,
    cancel: Cancel,
}

/// What a staged transfer did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StagedStats {
    /// Bytes that reached the destination (GPU memory, or the socket for sends).
    pub bytes: u64,
    /// The pipeline's counters (copies, stalls for host buffers or ring space).
    pub pipeline: StagingStats,
    /// Times receiving paused because the application held the whole ring.
    pub pauses: u64,
}

impl StagedReceiver {
    /// Receives `stream` into `dest` (GPU memory, used as a ring) with CUDA copies.
    pub fn new(stream: TcpStream, dest: &Region, opts: &StagingOptions) -> Result<StagedReceiver> {
        StagedReceiver::from_device(stream, device_of(dest, "staged receive")?, opts)
    }

    pub(crate) fn from_device(
        stream: TcpStream,
        dev: Arc<DeviceMem>,
        opts: &StagingOptions,
    ) -> Result<StagedReceiver> {
        let ring = new_ring(opts)?;
        let host = ring_mapping(&ring)?;
        let engine = CudaEngine::new(Arc::clone(&dev), host)?;
        StagedReceiver::with_engine(stream, Box::new(engine), dev.len() as u64, ring, opts)
    }

    pub(crate) fn with_engine(
        stream: TcpStream,
        engine: Box<dyn CopyEngine>,
        ring_len: u64,
        ring: RecvRing,
        opts: &StagingOptions,
    ) -> Result<StagedReceiver> {
        let core = StagingRx::new(&opts.core(), ring_len).map_err(|e| {
            Error::invalid_input(format!(
                "staged receive: {e}: use a larger GPU buffer or smaller host buffers"
            ))
        })?;
        Ok(StagedReceiver {
            engine,
            held: (0..ring.nbufs()).map(|_| None).collect(),
            ring,
            core,
            stream,
            armed: false,
            eof: false,
            done: Vec::new(),
            comps: Vec::new(),
            pauses: 0,
            cancel: opts.cancel.clone(),
        })
    }

    /// Delivered, unreleased bytes as (ring offset, len) ranges in stream order (the second is
    /// empty unless the data wraps around the end of the ring).
    pub fn readable(&self) -> [(u64, u64); 2] {
        self.core.readable()
    }

    /// Gives the next `n` delivered bytes back to the ring. zcnet's stream copies new data
    /// over them at once, on a stream of its own: work the caller queued on its own streams
    /// that reads those bytes (a kernel consuming them) must have completed first (synchronize
    /// that stream, or wait on an event recorded after the work).
    pub fn release(&mut self, n: u64) -> Result<()> {
        self.core.release(n).map_err(staging_error)
    }

    /// The peer closed the stream and every byte it sent is delivered.
    pub fn finished(&self) -> bool {
        self.eof && self.core.delivered() == self.core.received() && self.engine.in_flight() == 0
    }

    /// The token of [`StagingOptions::cancel`].
    pub(crate) fn cancel(&self) -> &Cancel {
        &self.cancel
    }

    /// Stream bytes delivered into GPU memory so far.
    pub fn delivered(&self) -> u64 {
        self.core.delivered()
    }

    /// The counters.
    pub fn stats(&self) -> StagedStats {
        StagedStats {
            bytes: self.core.delivered(),
            pipeline: self.core.stats().clone(),
            pauses: self.pauses,
        }
    }

    /// Runs the pipeline: finished copies hand their host buffers back, new copies start,
    /// receiving is (re-)armed when the pipeline has room, and completions are waited for up to
    /// `timeout`. Returns once something happened or the time is up.
    pub fn poll(&mut self, timeout: Duration) -> Result<()> {
        self.reap_copies()?;
        self.issue_copies()?;
        if !self.eof && !self.armed {
            if self.core.can_receive() {
                self.ring
                    .arm(self.stream.as_raw_fd(), ARM_TAG, false)
                    .map_err(|e| Error::io("arming the staged receive", e))?;
                self.armed = true;
            } else if self.engine.in_flight() == 0 {
                // Nothing will free space but the application.
                self.pauses += 1;
                return Ok(());
            }
        }
        if self.engine.in_flight() > 0 {
            self.engine.wait(timeout.min(Duration::from_micros(200)));
            let _ = self.ring.wait(0, Duration::ZERO);
        } else if self.armed {
            self.ring
                .wait(1, timeout)
                .map_err(|e| Error::io("waiting for the staged receive", e))?;
        }
        self.drain()?;
        self.reap_copies()?;
        self.issue_copies()
    }

    fn drain(&mut self) -> Result<()> {
        let comps = &mut self.comps;
        self.ring
            .drain(|c| comps.push((c.buf_id, c.result, c.more)));
        for (buf, res, more) in std::mem::take(&mut self.comps) {
            if !more {
                self.armed = false;
            }
            match (res, buf) {
                (Ok(0), _) => self.eof = true,
                (Ok(n), Some(b)) => {
                    // Out of the ring until its copies completed (see `recycle`).
                    let h = self
                        .ring
                        .take(b)
                        .map_err(|e| Error::io(format!("taking staging buffer {b}"), e))?;
                    if let Some(slot) = self.held.get_mut(b as usize) {
                        *slot = Some(Arc::new(h));
                    }
                    self.core.on_recv(b, n as u32).map_err(staging_error)?
                }
                (Ok(_), None) => {}
                // The ring ran dry (every host buffer waits on a copy): re-armed at the next poll.
                (Err(e), _) if e.raw_os_error() == Some(libc::ENOBUFS) => {}
                (Err(e), _) => {
                    self.stop();
                    return Err(Error::io("staged receive", e));
                }
            }
        }
        Ok(())
    }

    fn reap_copies(&mut self) -> Result<()> {
        self.engine.poll(&mut self.done);
        let mut failed = None;
        for d in std::mem::take(&mut self.done) {
            let Done {
                id, result, src, ..
            } = d;
            // The copy's share of its ring buffer: the buffer goes back once no copy holds it.
            drop(src);
            match result {
                Ok(()) => {
                    if let Some(b) = self.core.on_copy_done(id).map_err(staging_error)? {
                        self.recycle(b)?;
                    }
                }
                Err(e) => {
                    for b in self.core.on_copy_failed(id).map_err(staging_error)? {
                        self.recycle(b)?;
                    }
                    failed.get_or_insert(e);
                }
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Gives received buffer `b` back to the ring (and so to the kernel): only once no copy
    /// holds it, which the handle's ownership, not only the pipeline's count, guarantees.
    fn recycle(&mut self, b: u16) -> Result<()> {
        let what = || format!("returning staging buffer {b}");
        let einval = || std::io::Error::from_raw_os_error(libc::EINVAL);
        let Some(h) = self.held.get_mut(b as usize).and_then(Option::take) else {
            return Err(Error::io(what(), einval()));
        };
        match Arc::try_unwrap(h) {
            Ok(h) => self
                .ring
                .give_back(h)
                .map_err(|(_, e)| Error::io(what(), e)),
            Err(h) => {
                // A copy still reads it: the pipeline's bookkeeping is wrong; keep it out.
                self.held[b as usize] = Some(h);
                Err(staging_error(StagingError::HostBufHeld(b)))
            }
        }
    }

    fn issue_copies(&mut self) -> Result<()> {
        while let Some(c) = self.core.next_copy() {
            let held = self.held.get(c.host_buf as usize).and_then(Option::as_ref);
            let src = held.and_then(|h| {
                SourceRange::new(Arc::clone(h), c.host_off as usize, c.len as usize).ok()
            });
            let r = match src {
                // On failure the engine gives the source back: dropped, it is the ring's again
                // once the pipeline says so (below).
                Some(src) => self
                    .engine
                    .to_device(c.copy, src, c.dev_off)
                    .map_err(|(_, e)| e),
                None => Err(Error::io(
                    "reading a staging buffer",
                    std::io::Error::from_raw_os_error(libc::EINVAL),
                )),
            };
            if let Err(e) = r {
                for b in self.core.on_copy_failed(c.copy).map_err(staging_error)? {
                    self.recycle(b)?;
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Ends the transfer: every host buffer no copy reads goes back now.
    fn stop(&mut self) {
        for b in self.core.abort() {
            let _ = self.recycle(b);
        }
    }
}

impl Drop for StagedReceiver {
    fn drop(&mut self) {
        self.stop();
        // Let copies in flight finish before the buffers they read can be reused or unmapped.
        while self.engine.in_flight() > 0 {
            self.engine.wait(Duration::from_millis(10));
            self.engine.poll(&mut self.done);
            self.done.clear();
        }
    }
}

pub(crate) fn new_ring(opts: &StagingOptions) -> Result<RecvRing> {
    let n = opts.host_bufs.max(1).next_power_of_two() as u32;
    RecvRing::new(64, n, opts.host_buf_size, 0)
        .map_err(|e| Error::io("creating the staging receive ring", e))
}

fn ring_mapping(ring: &RecvRing) -> Result<Arc<zcnet_sys::mem::Mapping>> {
    ring.buffers_mapping()
        .cloned()
        .ok_or_else(|| Error::invalid_input("staging ring without buffers"))
}

/// Sends from GPU memory through pinned host buffers: each chunk is copied device-to-host and
/// then sent with the host-memory mode of `cfg` (`auto` under `auto`: see `GpuSender::open`), in stream order.
#[derive(Debug)]
pub struct StagedSender {
    engine: Box<dyn CopyEngine>,
    tx: Sender,
    core: StagingTx,
    /// Host buffers the pipeline holds (free, or copied and waiting for their turn), by id.
    bufs: Vec<Option<TxBuf>>,
    /// Ids of buffers handed to the socket, whose return means the send completed.
    sending: Vec<bool>,
    handed: u64,
    done: Vec<Done>,
}

/// A [`Sender`] that [`StagedSender::over`] could not take, given back with the reason.
#[derive(Debug)]
pub struct NotStaged {
    /// The sender, as it was (every buffer its own).
    pub sender: Box<Sender>,
    /// Why the pipeline could not be made.
    pub error: Error,
}

impl std::fmt::Display for NotStaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for NotStaged {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl StagedSender {
    /// A staged sender on `sock` from `src` (GPU memory): [`TxConfig::buffers`] host buffers of
    /// `cfg.buf_size` bytes, pinned, sent with `cfg.mode`.
    pub fn new(sock: Socket, src: &Region, cfg: &TxConfig) -> Result<StagedSender> {
        StagedSender::from_device(sock, device_of(src, "staged send")?, cfg)
    }

    pub(crate) fn from_device(
        sock: Socket,
        dev: Arc<DeviceMem>,
        cfg: &TxConfig,
    ) -> Result<StagedSender> {
        let region = Region::anonymous(crate::tx::region_len(cfg))?;
        let tx = Sender::new(sock, region, cfg)?;
        StagedSender::with_sender(tx, |host| {
            Ok(Box::new(CudaEngine::new(Arc::clone(&dev), host)?) as Box<dyn CopyEngine>)
        })
        .map_err(|n| n.error)
    }

    /// A staged sender whose host leg is `tx` (an ordinary [`Sender`], which may have sent from
    /// host memory before: the staged bytes follow its bytes on the connection), copying from
    /// memory of `cuda:ordinal` named by each [`Self::send_from`] (a caller's tensor through
    /// [`super::borrow_device`], or a [`Region::cuda`]). Every send of `tx` must have completed
    /// ([`Sender::flush`]): the pipeline takes all its buffers. [`Self::into_sender`] gives `tx`
    /// back. When the pipeline cannot be made (no CUDA, a stream or event the driver refuses),
    /// `tx` comes back with the error ([`NotStaged`]), every buffer its own again: the
    /// connection is as it was, for host sends or another try.
    pub fn over(tx: Sender, ordinal: u32) -> std::result::Result<StagedSender, NotStaged> {
        let ctx = if tx.outstanding() > 0 {
            Err(Error::invalid_input(format!(
                "staged send: the sender still has {} sends in flight: flush it first",
                tx.outstanding()
            )))
        } else {
            crate::cuda::context(ordinal)
        };
        match ctx {
            Ok(ctx) => StagedSender::with_sender(tx, |host| {
                Ok(Box::new(CudaEngine::on(ctx, host)?) as Box<dyn CopyEngine>)
            }),
            Err(error) => Err(NotStaged {
                sender: Box::new(tx),
                error,
            }),
        }
    }

    /// Sends `len` bytes at `off` of `src` (device memory on the sender's device, e.g. a
    /// caller's tensor through [`super::borrow_device`]) like [`Self::send`]: returns once every
    /// byte was copied out of `src` and handed to the kernel. No copy reads `src` after it
    /// returned, error or not (an error waits for the copies still running), and the pipeline
    /// keeps no hold on it: the caller's memory is free again then.
    pub fn send_from(&mut self, src: &Region, off: u64, len: u64) -> Result<()> {
        let dev = device_of(src, "staged send")?;
        if off
            .checked_add(len)
            .is_none_or(|end| end > dev.len() as u64)
        {
            return Err(Error::invalid_input(format!(
                "staged send: {len} B at {off} lie outside the {} B of device memory",
                dev.len()
            )));
        }
        self.engine.set_device(Some(dev))?;
        let r = self.send(off, len);
        self.settle_copies();
        // No copy runs now: forgetting the memory cannot fail.
        let _ = self.engine.set_device(None);
        r
    }

    /// Waits for every send to complete and gives the host leg back, with all its buffers
    /// (its statistics count the staged bytes too).
    pub fn into_sender(mut self) -> Result<Sender> {
        self.flush()?;
        for b in std::mem::take(&mut self.bufs).into_iter().flatten() {
            // A send of 0 bytes hands the buffer back to the sender's free list.
            self.tx.send(b, 0)?;
        }
        Ok(self.tx)
    }

    /// Waits until no copy runs (after a failure: the copies out of the device memory still
    /// under way finish before the caller may free it), keeping their host buffers. A no-op
    /// after a send that succeeded: every copy of it completed before its bytes were sent.
    fn settle_copies(&mut self) {
        while self.engine.in_flight() > 0 {
            self.engine.wait(Duration::from_millis(10));
            self.engine.poll(&mut self.done);
            for d in std::mem::take(&mut self.done) {
                if let Some(slot) = d.slot {
                    let id = slot.id() as usize;
                    self.bufs[id] = Some(TxBuf { slot });
                }
            }
        }
    }

    /// The host leg: the [`Sender`] that sends from the pinned host buffers.
    pub fn sender(&self) -> &Sender {
        &self.tx
    }

    /// The mechanism of the host leg (the sends from the pinned host buffers).
    pub fn mode(&self) -> crate::tx::TxMode {
        self.tx.mode()
    }

    /// The host leg's statistics so far.
    pub fn stats(&self) -> TxStats {
        self.tx.stats()
    }

    pub(crate) fn with_sender(
        mut tx: Sender,
        engine: impl FnOnce(Arc<zcnet_sys::mem::Mapping>) -> Result<Box<dyn CopyEngine>>,
    ) -> std::result::Result<StagedSender, NotStaged> {
        let n = tx.buffers();
        let mut bufs: Vec<Option<TxBuf>> = (0..n).map(|_| None).collect();
        let mut size = 0;
        let made = (|| {
            while let Some(b) = tx.try_buffer()? {
                size = b.capacity();
                let id = b.id() as usize;
                bufs[id] = Some(b);
            }
            let host = bufs
                .iter()
                .flatten()
                .next()
                .map(|b| Arc::clone(b.slot.mapping()))
                .ok_or_else(|| Error::invalid_input("staged send: the sender has no buffers"))?;
            let cfg = StagingConfig::new(size as u32, n as u16);
            let core = StagingTx::new(&cfg)
                .map_err(|e| Error::invalid_input(format!("staged send: {e}")))?;
            Ok((engine(host)?, core))
        })();
        match made {
            Ok((engine, core)) => Ok(StagedSender {
                engine,
                tx,
                core,
                sending: vec![false; n],
                bufs,
                handed: 0,
                done: Vec::new(),
            }),
            Err(error) => {
                // The buffers taken go back (a send of 0 bytes hands one back).
                for b in bufs.into_iter().flatten() {
                    let _ = tx.send(b, 0);
                }
                Err(NotStaged {
                    sender: Box::new(tx),
                    error,
                })
            }
        }
    }

    /// Sends `len` bytes at `off` of the GPU memory: returns once every byte has been handed to
    /// the kernel (the last ones may still be in flight: [`Self::finish`] waits for them).
    pub fn send(&mut self, off: u64, len: u64) -> Result<()> {
        self.core.push_source(off, len).map_err(staging_error)?;
        let target = self.core.pushed();
        let r = self.pump(|s| s.handed >= target);
        if r.is_err() {
            self.stop();
        }
        r
    }

    /// Waits until every byte handed to [`Self::send`] so far was sent and its send completed
    /// (for zero copy: notified); more may be sent afterwards.
    pub fn flush(&mut self) -> Result<()> {
        self.pump(|s| s.core.is_finished())
    }

    /// Waits for every send to complete and returns the statistics of the host leg (bytes,
    /// zero-copy bytes from the kernel's notifications) with the pipeline's.
    pub fn finish(mut self) -> Result<(TxStats, StagedStats)> {
        self.flush()?;
        let staged = StagedStats {
            bytes: self.core.confirmed(),
            pipeline: self.core.stats().clone(),
            pauses: 0,
        };
        Ok((self.tx.stats(), staged))
    }

    fn pump(&mut self, done: impl Fn(&Self) -> bool) -> Result<()> {
        loop {
            self.reap_sends()?;
            self.reap_copies()?;
            self.issue()?;
            if done(self) {
                return Ok(());
            }
            self.tx.cancel().check()?;
            if self.engine.in_flight() > 0 {
                self.engine.wait(Duration::from_micros(200));
            } else if self.sending.iter().any(|&s| s) {
                // Only the kernel can make progress: wait for a send to complete (a copying
                // backend's buffers are back at once; zero-copy ones at their notification).
                let b = self.tx.buffer()?;
                self.returned(b)?;
            } else {
                return Err(staging_error(StagingError::Stopped(
                    self.core
                        .stopped()
                        .unwrap_or(zcnet_core::staging::Cause::Aborted),
                )));
            }
        }
    }

    fn returned(&mut self, b: TxBuf) -> Result<()> {
        let id = b.id() as usize;
        self.bufs[id] = Some(b);
        if std::mem::take(&mut self.sending[id]) {
            self.core.on_send_done(id as u16).map_err(staging_error)?;
        }
        Ok(())
    }

    fn reap_sends(&mut self) -> Result<()> {
        while let Some(b) = self.tx.try_buffer()? {
            self.returned(b)?;
        }
        Ok(())
    }

    fn reap_copies(&mut self) -> Result<()> {
        self.engine.poll(&mut self.done);
        let mut failed = None;
        for d in std::mem::take(&mut self.done) {
            if let Some(slot) = d.slot {
                let id = slot.id() as usize;
                self.bufs[id] = Some(TxBuf { slot });
            }
            match d.result {
                Ok(()) => {
                    self.core.on_copy_done(d.id).map_err(staging_error)?;
                }
                Err(e) => {
                    self.core.on_copy_failed(d.id).map_err(staging_error)?;
                    failed.get_or_insert(e);
                }
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn issue(&mut self) -> Result<()> {
        while let Some(c) = self.core.next_copy() {
            let Some(b) = self.bufs[c.host_buf as usize].take() else {
                return Err(staging_error(StagingError::HostBufHeld(c.host_buf)));
            };
            if let Err((slot, e)) = self
                .engine
                .to_host(c.copy, c.dev_off, b.slot, c.len as usize)
            {
                self.bufs[c.host_buf as usize] = Some(TxBuf { slot });
                self.core.on_copy_failed(c.copy).map_err(staging_error)?;
                return Err(e);
            }
        }
        while let Some(s) = self.core.next_send() {
            let Some(b) = self.bufs[s.host_buf as usize].take() else {
                return Err(staging_error(StagingError::HostBufHeld(s.host_buf)));
            };
            self.sending[s.host_buf as usize] = true;
            if let Err(e) = self.tx.send(b, s.len as usize) {
                self.sending[s.host_buf as usize] = false;
                self.core
                    .on_send_failed(s.host_buf)
                    .map_err(staging_error)?;
                return Err(e);
            }
            self.handed += s.len as u64;
        }
        Ok(())
    }

    fn stop(&mut self) {
        let _ = self.core.abort();
    }
}

#[cfg(test)]
mod tests;
