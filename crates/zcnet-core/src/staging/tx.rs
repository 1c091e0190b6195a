//! Send staging: [`StagingTx`].

use super::StagingStats;
use super::{Cause, CopyCmd, CopyId, Pause, Run, SendCmd, StagingConfig, StagingError};
use std::collections::VecDeque;

/// Where a host buffer of [`StagingTx`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Buf {
    Free,
    Copying,
    /// Copied, waiting for its turn to be sent.
    Ready,
    /// In the send with this sequence number.
    Sending(u64),
    /// Handed back to the caller after the stop.
    Returned,
}

/// A copied or copying chunk not yet handed to the socket.
#[derive(Debug, Clone, Copy)]
struct Chunk {
    host_buf: u16,
    stream_off: u64,
    len: u32,
    run: Run,
}

/// Send staging: source bytes in GPU memory ([`Self::push_source`], in stream order) are cut
/// into chunks of at most a host buffer, copied device-to-host into free host buffers, and
/// handed to the socket strictly in stream order as their copies complete (in any order). A
/// host buffer is copied into again only after the send of its previous chunk completed.
///
/// `confirmed` is the in-order watermark of completed sends: stream bytes `[0, confirmed)` were
/// all sent, whatever ended the transfer.
#[derive(Debug, Clone)]
pub struct StagingTx {
    buf_size: u32,
    max_copies: u32,
    max_sends: u32,
    bufs: Vec<Buf>,
    free: Vec<u16>,
    /// Source ranges `(dev_off, len)` not yet copied, in stream order.
    source: VecDeque<(u64, u64)>,
    pushed: u64,
    next_stream: u64,
    /// Issued copies whose chunk is not sent yet, in id (= stream) order: index `id - first`.
    chunks: VecDeque<Chunk>,
    first: u64,
    next_id: u64,
    /// Sends not yet confirmed: `(len, run)`, index `seq - first_send`.
    sends: VecDeque<(u32, Run)>,
    first_send: u64,
    confirmed: u64,
    copies: u32,
    in_send: u32,
    stopped: Option<Cause>,
    copy_pause: Option<Pause>,
    send_pause: Option<Pause>,
    stats: StagingStats,
}

impl StagingTx {
    /// A pipeline over `cfg.host_bufs` host buffers, all free, with no source bytes yet.
    pub fn new(cfg: &StagingConfig) -> Result<StagingTx, StagingError> {
        cfg.validate()?;
        Ok(StagingTx {
            buf_size: cfg.host_buf_size,
            max_copies: cfg.max_copies,
            max_sends: cfg.max_sends,
            bufs: vec![Buf::Free; usize::from(cfg.host_bufs)],
            free: (0..cfg.host_bufs).rev().collect(),
            source: VecDeque::new(),
            pushed: 0,
            next_stream: 0,
            chunks: VecDeque::new(),
            first: 0,
            next_id: 0,
            sends: VecDeque::new(),
            first_send: 0,
            confirmed: 0,
            copies: 0,
            in_send: 0,
            stopped: None,
            copy_pause: None,
            send_pause: None,
            stats: StagingStats::default(),
        })
    }

    /// The counters.
    pub fn stats(&self) -> &StagingStats {
        &self.stats
    }

    /// Stream bytes pushed as source.
    pub fn pushed(&self) -> u64 {
        self.pushed
    }

    /// Stream bytes `[0, confirmed)` were sent: every send up to there completed.
    pub fn confirmed(&self) -> u64 {
        self.confirmed
    }

    /// Host buffers free for the next copy.
    #[cfg(test)]
    pub(crate) fn free_host_bufs(&self) -> usize {
        self.free.len()
    }

    /// Host buffers being copied into, waiting to be sent, or being sent.
    #[cfg(test)]
    pub(crate) fn held_host_bufs(&self) -> u64 {
        self.stats.host_bufs_held
    }

    /// Why the pipeline stopped, if it did.
    pub fn stopped(&self) -> Option<Cause> {
        self.stopped
    }

    /// Every pushed byte was sent and confirmed (and the pipeline did not stop).
    pub fn is_finished(&self) -> bool {
        self.stopped.is_none() && self.confirmed == self.pushed
    }

    /// Why [`Self::next_copy`] issues nothing although source bytes wait: stopped, `max_copies`
    /// in flight, or no free host buffer. `None` when it can, or when no source byte waits.
    pub(crate) fn pause(&self) -> Option<Pause> {
        if self.stopped.is_some() {
            Some(Pause::Stopped)
        } else if self.source.is_empty() {
            None
        } else if self.copies >= self.max_copies {
            Some(Pause::CopiesInFlight)
        } else if self.free.is_empty() {
            Some(Pause::NoHostBuffer)
        } else {
            None
        }
    }

    /// Appends `len` bytes at `dev_off` in GPU memory to the stream.
    pub fn push_source(&mut self, dev_off: u64, len: u64) -> Result<(), StagingError> {
        if let Some(cause) = self.stopped {
            return self.reject(StagingError::Stopped(cause));
        }
        let Some(end) = dev_off.checked_add(len) else {
            return self.reject(StagingError::BadSource { dev_off, len });
        };
        if len == 0 {
            return Ok(());
        }
        match self.source.back_mut() {
            Some((off, n)) if *off + *n == dev_off => *n += len,
            _ => self.source.push_back((dev_off, end - dev_off)),
        }
        self.pushed += len;
        self.stats.bytes_in += len;
        self.note();
        Ok(())
    }

    /// The next copy to run: the next source bytes (at most a host buffer, never across two
    /// pushed ranges) into a free host buffer at offset 0, if fewer than `max_copies` are in
    /// flight. Call until `None` after every event.
    pub fn next_copy(&mut self) -> Option<CopyCmd> {
        if self.pause().is_some() {
            return None;
        }
        let (dev_off, left) = self.source.front_mut()?;
        let host_buf = self.free.pop()?;
        let len = (*left).min(u64::from(self.buf_size)) as u32;
        let cmd_off = *dev_off;
        *dev_off += u64::from(len);
        *left -= u64::from(len);
        if *left == 0 {
            self.source.pop_front();
        }
        let cmd = CopyCmd {
            copy: CopyId(self.next_id),
            host_buf,
            host_off: 0,
            dev_off: cmd_off,
            len,
            stream_off: self.next_stream,
        };
        self.next_id += 1;
        self.next_stream += u64::from(len);
        self.bufs[usize::from(host_buf)] = Buf::Copying;
        self.chunks.push_back(Chunk {
            host_buf,
            stream_off: cmd.stream_off,
            len,
            run: Run::InFlight,
        });
        self.copies += 1;
        self.stats.host_bufs_held += 1;
        self.stats.issued();
        self.note();
        Some(cmd)
    }

    /// Copy `copy` completed: its chunk is ready to be sent in its turn. After a stop this is a
    /// late completion: the host buffer is handed back (returned here).
    pub fn on_copy_done(&mut self, copy: CopyId) -> Result<Option<u16>, StagingError> {
        let i = match self.lookup(copy) {
            Ok(i) => i,
            Err(e) => return self.reject(e),
        };
        let c = &mut self.chunks[i];
        c.run = Run::Done;
        let (host_buf, len) = (c.host_buf, c.len);
        self.copies -= 1;
        let stopped = self.stopped.is_some();
        self.stats.copy_ended(len, true, stopped);
        let back = if stopped {
            self.hand_back(host_buf);
            Some(host_buf)
        } else {
            self.bufs[usize::from(host_buf)] = Buf::Ready;
            None
        };
        self.note();
        Ok(back)
    }

    /// Copy `copy` failed. The first failure stops the pipeline and returns every host buffer
    /// not in a copy or send in flight (those come back from later completions); after a stop,
    /// this copy's buffer.
    pub fn on_copy_failed(&mut self, copy: CopyId) -> Result<Vec<u16>, StagingError> {
        let i = match self.lookup(copy) {
            Ok(i) => i,
            Err(e) => return self.reject(e),
        };
        let c = &mut self.chunks[i];
        c.run = Run::Failed;
        let (host_buf, len) = (c.host_buf, c.len);
        self.copies -= 1;
        self.stats.copy_ended(len, false, self.stopped.is_some());
        self.hand_back(host_buf);
        Ok(self.ended_badly(host_buf, Cause::CopyFailed(copy)))
    }

    /// The next chunk to send: the oldest unsent one, once its copy completed and fewer than
    /// `max_sends` are in flight. Call until `None` after every event.
    pub fn next_send(&mut self) -> Option<SendCmd> {
        if self.stopped.is_some() || self.in_send >= self.max_sends {
            return None;
        }
        let c = *self.chunks.front().filter(|c| c.run == Run::Done)?;
        self.chunks.pop_front();
        self.first += 1;
        let seq = self.first_send + self.sends.len() as u64;
        self.sends.push_back((c.len, Run::InFlight));
        self.bufs[usize::from(c.host_buf)] = Buf::Sending(seq);
        self.in_send += 1;
        self.stats.sends_issued += 1;
        self.stats.sends_in_flight += 1;
        self.note();
        Some(SendCmd {
            host_buf: c.host_buf,
            len: c.len,
            stream_off: c.stream_off,
        })
    }

    /// The send from `host_buf` completed (its zero-copy notification arrived; in any order):
    /// the buffer is free for the next copy. After a stop it is handed back (returned here).
    pub fn on_send_done(&mut self, host_buf: u16) -> Result<Option<u16>, StagingError> {
        let i = match self.send_index(host_buf) {
            Ok(i) => i,
            Err(e) => return self.reject(e),
        };
        let len = self.sends[i].0;
        self.sends[i].1 = Run::Done;
        self.in_send -= 1;
        let s = &mut self.stats;
        s.sends_in_flight -= 1;
        s.sends_completed += 1;
        s.bytes_sent += u64::from(len);
        while self.sends.front().is_some_and(|s| s.1 == Run::Done) {
            if let Some((len, _)) = self.sends.pop_front() {
                self.first_send += 1;
                self.confirmed += u64::from(len);
            }
        }
        let back = if self.stopped.is_some() {
            self.stats.late_completions += 1;
            self.hand_back(host_buf);
            Some(host_buf)
        } else {
            self.bufs[usize::from(host_buf)] = Buf::Free;
            self.free.push(host_buf);
            self.stats.host_bufs_held -= 1;
            None
        };
        self.note();
        Ok(back)
    }

    /// The send from `host_buf` failed (a short send the caller does not finish is a failure):
    /// as [`Self::on_copy_failed`]; `confirmed` stays below its bytes for good.
    pub fn on_send_failed(&mut self, host_buf: u16) -> Result<Vec<u16>, StagingError> {
        let i = match self.send_index(host_buf) {
            Ok(i) => i,
            Err(e) => return self.reject(e),
        };
        self.sends[i].1 = Run::Failed;
        self.in_send -= 1;
        self.stats.sends_in_flight -= 1;
        self.stats.sends_failed += 1;
        self.hand_back(host_buf);
        Ok(self.ended_badly(host_buf, Cause::SendFailed(host_buf)))
    }

    /// Stops the pipeline: returns every host buffer not in a copy or send in flight; those
    /// come back from their completions. Empty when already stopped.
    pub fn abort(&mut self) -> Vec<u16> {
        if self.stopped.is_some() {
            return Vec::new();
        }
        self.stop(Cause::Aborted, Vec::new())
    }

    /// After a failed copy or send whose buffer was handed back: the stop, or a late failure.
    fn ended_badly(&mut self, host_buf: u16, cause: Cause) -> Vec<u16> {
        if self.stopped.is_some() {
            self.stats.late_completions += 1;
            self.note();
            return vec![host_buf];
        }
        self.stop(cause, vec![host_buf])
    }

    fn stop(&mut self, cause: Cause, mut out: Vec<u16>) -> Vec<u16> {
        self.stopped = Some(cause);
        self.source.clear();
        for b in std::mem::take(&mut self.free) {
            self.bufs[usize::from(b)] = Buf::Returned;
            out.push(b);
        }
        let ready: Vec<u16> = self
            .chunks
            .iter()
            .filter(|c| c.run == Run::Done)
            .map(|c| c.host_buf)
            .collect();
        for b in ready {
            self.hand_back(b);
            out.push(b);
        }
        self.note();
        out
    }

    /// A held buffer goes back to the caller.
    fn hand_back(&mut self, host_buf: u16) {
        self.bufs[usize::from(host_buf)] = Buf::Returned;
        self.stats.host_bufs_held -= 1;
    }

    fn lookup(&self, copy: CopyId) -> Result<usize, StagingError> {
        if copy.0 >= self.next_id {
            return Err(StagingError::UnknownCopy(copy));
        }
        let i = copy
            .0
            .checked_sub(self.first)
            .and_then(|i| usize::try_from(i).ok());
        match i.and_then(|i| self.chunks.get(i).map(|c| (i, c.run))) {
            Some((i, Run::InFlight)) => Ok(i),
            _ => Err(StagingError::CopyAlreadyDone(copy)),
        }
    }

    fn send_index(&self, host_buf: u16) -> Result<usize, StagingError> {
        match self.bufs.get(usize::from(host_buf)) {
            None => Err(StagingError::UnknownHostBuf(host_buf)),
            Some(&Buf::Sending(seq)) => Ok((seq - self.first_send) as usize),
            Some(_) => Err(StagingError::NotSending(host_buf)),
        }
    }

    fn note(&mut self) {
        let now = self.pause();
        self.stats.edge(&mut self.copy_pause, now);
        let blocked = self.stopped.is_none()
            && self.in_send >= self.max_sends
            && self.chunks.front().is_some_and(|c| c.run == Run::Done);
        let now = blocked.then_some(Pause::SendsInFlight);
        self.stats.edge(&mut self.send_pause, now);
    }

    fn reject<T>(&mut self, e: StagingError) -> Result<T, StagingError> {
        self.stats.rejected += 1;
        Err(e)
    }

    /// Recomputes the gauges and stream positions from the per-buffer, per-chunk and per-send
    /// state; `Err` says what broke. For tests and debug assertions: O(buffers + chunks).
    #[cfg(test)]
    pub(crate) fn check(&self) -> Result<(), String> {
        let count = |f: fn(&Buf) -> bool| self.bufs.iter().filter(|b| f(b)).count() as u64;
        let free = count(|b| *b == Buf::Free);
        let copying = count(|b| *b == Buf::Copying);
        let ready = count(|b| *b == Buf::Ready);
        let sending = count(|b| matches!(b, Buf::Sending(_)));
        let chunks_in = |r| self.chunks.iter().filter(|c| c.run == r).count() as u64;
        let sends_in = self.sends.iter().filter(|s| s.1 == Run::InFlight).count() as u64;
        let stopped = self.stopped.is_some();
        let source: u64 = self.source.iter().map(|s| s.1).sum();
        let s = &self.stats;
        let checks = [
            ("free list", self.free.len() as u64, free),
            ("copying", copying, chunks_in(Run::InFlight)),
            (
                "ready",
                ready,
                if stopped { 0 } else { chunks_in(Run::Done) },
            ),
            ("sending", sending, sends_in),
            ("copies", u64::from(self.copies), copying),
            ("copies_in_flight", s.copies_in_flight, copying),
            ("in_send", u64::from(self.in_send), sending),
            ("sends_in_flight", s.sends_in_flight, sending),
            (
                "host_bufs_held",
                s.host_bufs_held,
                copying + ready + sending,
            ),
            (
                "first + chunks",
                self.first + self.chunks.len() as u64,
                self.next_id,
            ),
            (
                "next_stream + source",
                self.next_stream + source,
                self.pushed,
            ),
        ];
        for (what, counted, actual) in checks {
            if counted != actual && !(stopped && what == "next_stream + source") {
                return Err(format!("{what} is {counted}, state says {actual}"));
            }
        }
        if stopped && free != 0 {
            return Err("stopped with free buffers not handed back".into());
        }
        let mut at = self.confirmed + self.sends.iter().map(|s| u64::from(s.0)).sum::<u64>();
        for c in &self.chunks {
            if c.stream_off != at {
                return Err(format!("chunk {c:?} out of stream order at {at}"));
            }
            at += u64::from(c.len);
        }
        if at != self.next_stream {
            return Err(format!(
                "chunks end at {at}, copies at {}",
                self.next_stream
            ));
        }
        Ok(())
    }
}
