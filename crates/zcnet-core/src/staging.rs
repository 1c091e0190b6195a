//! Staging pipelines: transfers between a socket and GPU memory through a set of pinned host
//! buffers, for NICs that cannot DMA into GPU memory. [`StagingRx`] copies received chunks
//! host-to-device into a ring in GPU memory and delivers them in stream order; [`StagingTx`]
//! copies GPU bytes device-to-host and hands them to the socket in stream order. Both only keep
//! books: the caller runs the copies (CUDA streams and events, or a host memcpy engine) and the
//! socket, and reports what completed, in whatever order it completed.
//!
//! What the parts around them do, and what follows here:
//! - Receive buffers come from an io_uring provided-buffer ring: `struct io_uring_buf` names a
//!   buffer by a 16-bit `bid`, and a completion that used one sets `IORING_CQE_F_BUFFER` with
//!   the id in `cqe->flags >> IORING_CQE_BUFFER_SHIFT` (16). Completions of one socket's
//!   receives come in stream order. The buffer goes back to the kernel only when re-added to
//!   the ring, so [`StagingRx`] hands each back exactly once, when no copy reads it any more.
//! - A multishot receive does not stop the moment the application wants to pause: completions
//!   already posted still arrive. So [`StagingRx::on_recv`] takes chunks past a pause and
//!   queues them (at most one per host buffer); only their copies wait for ring space.
//! - `cudaMemcpyAsync` returns before the copy runs; operations in one CUDA stream run in issue
//!   order, those of different streams in any order, and an event recorded after a copy
//!   (`cudaEventQuery`: `cudaErrorNotReady` until then) says when it is done. Hence completions
//!   name a [`CopyId`] and may come in any order. The CUDA runtime may report the error of an
//!   asynchronous operation from a later, unrelated call, so the first failed copy ends the
//!   transfer ([`Cause`]) rather than being retried.
//! - A zero-copy send (`MSG_ZEROCOPY`, io_uring `SEND_ZC`) may read its buffer until the
//!   notification: [`StagingTx`] copies into a host buffer again only after
//!   [`StagingTx::on_send_done`].
//!
//! Every event is O(1) (amortized) except the one that stops a pipeline, O(host buffers).
//! State is bounded by the configuration: at most one queued chunk per host buffer, and
//! undelivered copies cover at most the ring (receive) or the host buffers (send).

use std::collections::VecDeque;

mod tx;
mod types;
pub use tx::StagingTx;
pub(crate) use types::Pause;
pub use types::{Cause, CopyCmd, CopyId, SendCmd, StagingConfig, StagingError, StagingStats};

#[cfg(test)]
mod tests;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    InFlight,
    Done,
    Failed,
}

/// One issued copy of [`StagingRx`], kept until the bytes before it are delivered.
#[derive(Debug, Clone, Copy)]
struct Piece {
    host_buf: u16,
    len: u32,
    run: Run,
}

/// A received chunk some bytes of which have no copy issued yet.
#[derive(Debug, Clone, Copy)]
struct Chunk {
    host_buf: u16,
    stream_off: u64,
    len: u32,
    issued: u32,
}

/// A host buffer [`StagingRx`] holds: bytes not yet copied, copies reading it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    uncopied: u32,
    in_flight: u8,
}

/// Receive staging: chunks received into host buffers are copied into a ring of `ring_len`
/// bytes in GPU memory, at `stream position % ring_len`; a chunk that would cross the end of
/// the ring is copied in two pieces, and its host buffer goes back when both completed.
///
/// Stream bytes are, in order: released by the application `[0, released)`, delivered
/// `[released, delivered)` (every byte before `delivered` copied), issued, received. A copy is
/// issued only into ring bytes the application has released, and at most `max_copies` at once.
#[derive(Debug, Clone)]
pub struct StagingRx {
    buf_size: u32,
    max_copies: u32,
    ring_len: u64,
    /// Per host buffer: `None` when the caller's (the kernel's), else what the copies owe.
    bufs: Vec<Option<Held>>,
    /// Received chunks not wholly issued, in stream order.
    waiting: VecDeque<Chunk>,
    /// Issued copies not yet delivered, in id (= stream) order: index `id - first`.
    pieces: VecDeque<Piece>,
    first: u64,
    next_id: u64,
    received: u64,
    issued: u64,
    delivered: u64,
    released: u64,
    in_flight: u32,
    stopped: Option<Cause>,
    last_pause: Option<Pause>,
    stats: StagingStats,
}

impl StagingRx {
    /// A pipeline over `cfg.host_bufs` host buffers into a GPU ring of `ring_len` bytes (at
    /// least one host buffer: a chunk never wraps onto itself).
    pub fn new(cfg: &StagingConfig, ring_len: u64) -> Result<StagingRx, StagingError> {
        cfg.validate()?;
        if ring_len < u64::from(cfg.host_buf_size) {
            return Err(StagingError::BadConfig(
                "GPU ring smaller than a host buffer",
            ));
        }
        Ok(StagingRx {
            buf_size: cfg.host_buf_size,
            max_copies: cfg.max_copies,
            ring_len,
            bufs: vec![None; usize::from(cfg.host_bufs)],
            waiting: VecDeque::new(),
            pieces: VecDeque::new(),
            first: 0,
            next_id: 0,
            received: 0,
            issued: 0,
            delivered: 0,
            released: 0,
            in_flight: 0,
            stopped: None,
            last_pause: None,
            stats: StagingStats::default(),
        })
    }

    /// The counters.
    pub fn stats(&self) -> &StagingStats {
        &self.stats
    }

    /// Stream bytes received from the socket.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// The delivered watermark: stream bytes `[0, delivered)` are in GPU memory (those not yet
    /// released at `stream position % ring_len`). Never decreases.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// Delivered, unreleased bytes as at most two `(ring offset, len)` ranges, in stream order
    /// (the second has `len` 0 unless the range wraps).
    pub fn readable(&self) -> [(u64, u64); 2] {
        let at = self.released % self.ring_len;
        let len = self.delivered - self.released;
        let first = len.min(self.ring_len - at);
        [(at, first), (0, len - first)]
    }

    /// Copies in flight.
    #[cfg(test)]
    pub(crate) fn copies_in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Host buffers the pipeline holds.
    pub fn held_host_bufs(&self) -> u64 {
        self.stats.host_bufs_held
    }

    /// Why the pipeline stopped, if it did.
    #[cfg(test)]
    pub(crate) fn stopped(&self) -> Option<Cause> {
        self.stopped
    }

    /// Whether the receive side must pause (stop handing buffers to the socket), and why: the
    /// pipeline stopped; the ring has less free space than a host buffer
    /// (`ring_len - (received - released) < host buffer size`); or `max_copies` are in flight.
    pub(crate) fn pause(&self) -> Option<Pause> {
        if self.stopped.is_some() {
            Some(Pause::Stopped)
        } else if self.received - self.released > self.ring_len - u64::from(self.buf_size) {
            Some(Pause::RingFull)
        } else if self.in_flight >= self.max_copies {
            Some(Pause::CopiesInFlight)
        } else {
            None
        }
    }

    /// `Self::pause` is `None`.
    pub fn can_receive(&self) -> bool {
        self.pause().is_none()
    }

    /// The socket filled host buffer `host_buf` with the next `len` stream bytes (from offset
    /// 0). The pipeline holds the buffer until its copies complete. Accepted while paused too
    /// (receives already under way): the chunk waits for ring space.
    pub fn on_recv(&mut self, host_buf: u16, len: u32) -> Result<(), StagingError> {
        let err = match self.bufs.get(usize::from(host_buf)) {
            _ if self.stopped.is_some() => self.stopped.map(StagingError::Stopped),
            None => Some(StagingError::UnknownHostBuf(host_buf)),
            Some(_) if len == 0 => Some(StagingError::EmptyChunk(host_buf)),
            Some(_) if len > self.buf_size => Some(StagingError::ChunkTooLarge {
                host_buf,
                len,
                max: self.buf_size,
            }),
            Some(Some(_)) => Some(StagingError::HostBufHeld(host_buf)),
            Some(None) => None,
        };
        if let Some(e) = err {
            return self.reject(e);
        }
        self.bufs[usize::from(host_buf)] = Some(Held {
            uncopied: len,
            in_flight: 0,
        });
        self.waiting.push_back(Chunk {
            host_buf,
            stream_off: self.received,
            len,
            issued: 0,
        });
        self.received += u64::from(len);
        self.stats.bytes_in += u64::from(len);
        self.stats.host_bufs_held += 1;
        self.note();
        Ok(())
    }

    /// The next copy to run, if one may be issued now: the oldest bytes without a copy, up to
    /// the end of their chunk or of the ring, once the ring bytes they go to are released and
    /// fewer than `max_copies` are in flight. Call until `None` after every event.
    pub fn next_copy(&mut self) -> Option<CopyCmd> {
        if self.stopped.is_some() || self.in_flight >= self.max_copies {
            return None;
        }
        let c = self.waiting.front_mut()?;
        let stream_off = c.stream_off + u64::from(c.issued);
        let dev_off = stream_off % self.ring_len;
        // At most a host buffer (the ring is at least that long): fits u32.
        let len = u64::from(c.len - c.issued).min(self.ring_len - dev_off) as u32;
        if stream_off + u64::from(len) > self.released + self.ring_len {
            return None;
        }
        let (host_buf, host_off) = (c.host_buf, c.issued);
        c.issued += len;
        if c.issued == c.len {
            self.waiting.pop_front();
        }
        if let Some(h) = self.bufs[usize::from(host_buf)].as_mut() {
            h.in_flight += 1;
        }
        let copy = CopyId(self.next_id);
        self.next_id += 1;
        self.pieces.push_back(Piece {
            host_buf,
            len,
            run: Run::InFlight,
        });
        self.issued += u64::from(len);
        self.in_flight += 1;
        self.stats.issued();
        self.note();
        Some(CopyCmd {
            copy,
            host_buf,
            host_off,
            dev_off,
            len,
            stream_off,
        })
    }

    /// Copy `copy` completed: its bytes are in GPU memory. Returns the host buffer to hand
    /// back (re-add to the buffer ring) when this was the last copy that needed it. After a
    /// stop this is a late completion: accepted, and the buffer goes back once no copy reads it.
    pub fn on_copy_done(&mut self, copy: CopyId) -> Result<Option<u16>, StagingError> {
        let i = match self.lookup(copy) {
            Ok(i) => i,
            Err(e) => return self.reject(e),
        };
        let p = &mut self.pieces[i];
        p.run = Run::Done;
        let (host_buf, len) = (p.host_buf, p.len);
        self.in_flight -= 1;
        let stopped = self.stopped.is_some();
        self.stats.copy_ended(len, true, stopped);
        let mut freed = None;
        if let Some(h) = self.bufs[usize::from(host_buf)].as_mut() {
            h.in_flight -= 1;
            h.uncopied -= len;
            if h.uncopied == 0 || (stopped && h.in_flight == 0) {
                freed = Some(host_buf);
            }
        }
        if let Some(b) = freed {
            self.hand_back(b);
        }
        while self.pieces.front().is_some_and(|p| p.run == Run::Done) {
            if let Some(p) = self.pieces.pop_front() {
                self.first += 1;
                self.delivered += u64::from(p.len);
            }
        }
        self.note();
        Ok(freed)
    }

    /// Copy `copy` failed. The first failure stops the pipeline: it returns every host buffer
    /// no copy reads any more (the others come back from later completions), and `delivered`
    /// stays below the failed bytes for good. After a stop: the buffer, if this was its last
    /// copy.
    pub fn on_copy_failed(&mut self, copy: CopyId) -> Result<Vec<u16>, StagingError> {
        let i = match self.lookup(copy) {
            Ok(i) => i,
            Err(e) => return self.reject(e),
        };
        let p = &mut self.pieces[i];
        p.run = Run::Failed;
        let (host_buf, len) = (p.host_buf, p.len);
        self.in_flight -= 1;
        self.stats.copy_ended(len, false, self.stopped.is_some());
        if let Some(h) = self.bufs[usize::from(host_buf)].as_mut() {
            h.in_flight -= 1;
        }
        if self.stopped.is_none() {
            return Ok(self.stop(Cause::CopyFailed(copy)));
        }
        let idle = self.bufs[usize::from(host_buf)].is_some_and(|h| h.in_flight == 0);
        if idle {
            self.hand_back(host_buf);
        }
        self.note();
        Ok(if idle { vec![host_buf] } else { Vec::new() })
    }

    /// The application is done with the next `n` delivered bytes: their ring space is free.
    /// Allowed after a stop (the application finishing with what it was given).
    pub fn release(&mut self, n: u64) -> Result<(), StagingError> {
        let deliverable = self.delivered - self.released;
        if n > deliverable {
            return self.reject(StagingError::ReleasePastDelivered {
                asked: n,
                deliverable,
            });
        }
        self.released += n;
        self.note();
        Ok(())
    }

    /// Stops the pipeline (end of the transfer, or the caller gives up): returns every host
    /// buffer no copy reads; copies in flight hand theirs back as they complete. Empty when
    /// already stopped.
    pub fn abort(&mut self) -> Vec<u16> {
        if self.stopped.is_some() {
            return Vec::new();
        }
        self.stop(Cause::Aborted)
    }

    fn stop(&mut self, cause: Cause) -> Vec<u16> {
        self.stopped = Some(cause);
        self.waiting.clear();
        let idle: Vec<u16> = (0..self.bufs.len())
            .filter(|&b| self.bufs[b].is_some_and(|h| h.in_flight == 0))
            .map(|b| b as u16)
            .collect();
        for &b in &idle {
            self.hand_back(b);
        }
        self.note();
        idle
    }

    fn hand_back(&mut self, host_buf: u16) {
        self.bufs[usize::from(host_buf)] = None;
        self.stats.host_bufs_held -= 1;
    }

    /// Index in `pieces` of copy `copy`, if it is in flight.
    fn lookup(&self, copy: CopyId) -> Result<usize, StagingError> {
        if copy.0 >= self.next_id {
            return Err(StagingError::UnknownCopy(copy));
        }
        let i = copy
            .0
            .checked_sub(self.first)
            .and_then(|i| usize::try_from(i).ok());
        match i.and_then(|i| self.pieces.get(i).map(|p| (i, p.run))) {
            Some((i, Run::InFlight)) => Ok(i),
            _ => Err(StagingError::CopyAlreadyDone(copy)),
        }
    }

    fn note(&mut self) {
        let now = self.pause();
        self.stats.edge(&mut self.last_pause, now);
    }

    fn reject<T>(&mut self, e: StagingError) -> Result<T, StagingError> {
        self.stats.rejected += 1;
        Err(e)
    }

    /// Recomputes the gauges and the stream positions from the per-buffer, per-chunk and
    /// per-copy state; `Err` says what broke. For tests and debug assertions: O(buffers +
    /// copies).
    #[cfg(test)]
    pub(crate) fn check(&self) -> Result<(), String> {
        let held = self.bufs.iter().filter(|b| b.is_some()).count() as u64;
        let running = self.pieces.iter().filter(|p| p.run == Run::InFlight);
        let in_flight = running.clone().count() as u64;
        let mut reads = vec![0u8; self.bufs.len()];
        for p in running {
            reads[usize::from(p.host_buf)] += 1;
        }
        for (b, h) in self.bufs.iter().enumerate() {
            let n = h.map_or(0, |h| h.in_flight);
            if n != reads[b] {
                return Err(format!(
                    "host buffer {b}: {n} copies counted, {} run",
                    reads[b]
                ));
            }
        }
        let undelivered: u64 = self.pieces.iter().map(|p| u64::from(p.len)).sum();
        let mut at = self.issued;
        for c in &self.waiting {
            if c.stream_off + u64::from(c.issued) != at || c.issued >= c.len {
                return Err(format!("waiting chunk {c:?} out of stream order at {at}"));
            }
            at += u64::from(c.len - c.issued);
        }
        let stopped = self.stopped.is_some();
        let s = &self.stats;
        let checks = [
            ("host_bufs_held", s.host_bufs_held, held),
            ("copies_in_flight", s.copies_in_flight, in_flight),
            ("in_flight", u64::from(self.in_flight), in_flight),
            (
                "delivered + undelivered",
                self.delivered + undelivered,
                self.issued,
            ),
            (
                "first + pieces",
                self.first + self.pieces.len() as u64,
                self.next_id,
            ),
            // A stop drops the waiting chunks: their bytes were received, never issued.
            (
                "issued + waiting",
                at,
                if stopped { at } else { self.received },
            ),
            ("bytes_in", s.bytes_in, self.received),
        ];
        for (what, counted, actual) in checks {
            if counted != actual {
                return Err(format!("{what} is {counted}, state says {actual}"));
            }
        }
        if stopped && !self.waiting.is_empty() {
            return Err("stopped with chunks waiting".into());
        }
        if self.released > self.delivered || self.issued > self.released + self.ring_len {
            return Err("released past delivered, or issued past released ring space".into());
        }
        Ok(())
    }
}
