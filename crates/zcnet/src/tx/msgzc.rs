//! `msg-zerocopy`: `SO_ZEROCOPY` + `send(MSG_ZEROCOPY)`, completions from the error queue.
//!
//! Documentation/networking/msg_zerocopy.rst: each successful send call gets the next 32-bit id;
//! the kernel reports ranges of ids on the error queue, signalled by `POLLERR`; a range with
//! `SO_EE_CODE_ZEROCOPY_COPIED` was copied. The kernel extends the unread range at the tail of
//! the queue with ids that complete later and keeps its code (net/core/skbuff.c,
//! `skb_zerocopy_notify_extend`): a copied id merged into a zero-copy range counts as zero copy
//! (docs/design.md, "Accounting"). Sends fail with `ENOBUFS` when the socket's option
//! memory (`net.core.optmem_max`) is full of pending notifications, or when the pages of the
//! sends in flight would take the user over RLIMIT_MEMLOCK: read the error queue and retry.
//! An `ENOBUFS` that waiting cannot cure is reported with the limit that caused it
//! ([`ZcKernel::enobufs_error`]). A stream send may be partial; each partial call has its own
//! id, and a buffer is free only when every id of its sends has completed.
//!
//! The bookkeeping ([`ErrqueueTx`]) is generic over [`ZcKernel`], "how one send call is made
//! and how the error queue is read": [`MsgZcKernel`] here (`send(MSG_ZEROCOPY)` from the
//! buffer's bytes), `super::devmem` (`sendmsg` with `SCM_DEVMEM_DMABUF` from a dma-buf offset),
//! and a simulated kernel in the tests.

use super::{Payload, Shared, TxBackend, TxMode, WAIT_SLICE};
use crate::error::{Error, Result};
use crate::region::TxBuf;
use crate::remedy::Remedy;
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;
use zcnet_core::errqueue::ErrqueueEntry;
use zcnet_core::{Completed, ZcRanges};
use zcnet_sys::sock;

/// The kernel side of an error-queue zero-copy backend.
pub(crate) trait ZcKernel: Send + std::fmt::Debug {
    /// The mode it implements (for messages).
    fn mode(&self) -> TxMode {
        TxMode::MsgZerocopy
    }
    /// Refuses a buffer this kernel cannot send from, before any call (the buffer is not lost:
    /// the caller puts it back).
    fn check(&self, _buf: &TxBuf) -> Result<()> {
        Ok(())
    }
    /// One send call of `buf[off..len]` with zero copy; the bytes the kernel accepted (a
    /// successful call consumes one completion id, a failed one none).
    fn send(&mut self, fd: RawFd, buf: &TxBuf, off: usize, len: usize) -> io::Result<usize>;
    /// Appends every message queued on the error queue to `out`; returns how many.
    fn read_errqueue(&mut self, fd: RawFd, out: &mut Vec<ErrqueueEntry>) -> io::Result<usize> {
        sock::read_errqueue(fd, out)
    }
    /// Appends one message from the error queue to `out` where the kernel reads them one at a
    /// time (returns 1, or 0 when none is queued); by default everything queued
    /// ([`ZcKernel::read_errqueue`]).
    fn read_errqueue_one(&mut self, fd: RawFd, out: &mut Vec<ErrqueueEntry>) -> io::Result<usize> {
        self.read_errqueue(fd, out)
    }
    /// `poll` for `events` (POLLERR and POLLHUP always come); 0 on timeout, `EINTR` when a
    /// signal cut it short.
    fn poll(&mut self, fd: RawFd, events: i16, timeout_ms: i32) -> io::Result<i16> {
        sock::poll_one_or_signal(fd, events, timeout_ms)
    }
    /// The pending socket error (`SO_ERROR`), cleared by reading it.
    fn take_error(&mut self, fd: RawFd) -> io::Result<Option<io::Error>> {
        sock::take_error(fd)
    }
    /// The error a failed send call means to the user.
    fn send_error(&self, sh: &Shared, e: io::Error) -> Error {
        sh.send_error(e)
    }
    /// The error for an `ENOBUFS` that waiting for completions did not cure (nothing was in
    /// flight, or nothing completed for the stall timeout), for a send call of `send_len` bytes
    /// by a sender of `buffers` x `buf_size`. By default option memory: the errqueue
    /// notification skb did not fit in `net.core.optmem_max`.
    fn enobufs_error(
        &self,
        _send_len: usize,
        _buffers: usize,
        _buf_size: usize,
        _in_flight: bool,
    ) -> Error {
        Error::OptmemExhausted {
            optmem_max: crate::sysctl_u64("net/core/optmem_max"),
        }
    }
}

/// `send(MSG_ZEROCOPY)` from the buffer's bytes.
#[derive(Debug)]
pub(crate) struct MsgZcKernel;

impl ZcKernel for MsgZcKernel {
    fn check(&self, buf: &TxBuf) -> Result<()> {
        buf.bytes().map(drop).ok_or(Error::NotCpuAccessible)
    }

    fn send(&mut self, fd: RawFd, buf: &TxBuf, off: usize, len: usize) -> io::Result<usize> {
        let b = buf
            .bytes()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EFAULT))?;
        sock::send(fd, &b[off..len], libc::MSG_ZEROCOPY)
    }

    fn read_errqueue_one(&mut self, fd: RawFd, out: &mut Vec<ErrqueueEntry>) -> io::Result<usize> {
        sock::read_errqueue_max(fd, out, 1)
    }

    /// `ENOBUFS` from `MSG_ZEROCOPY` is RLIMIT_MEMLOCK (the send's pages are charged to the
    /// user's locked memory, net/core/skbuff.c `mm_account_pinned_pages`) or option memory:
    /// the limits decide which (`zcnet_core::memlock::enobufs_cause`).
    fn enobufs_error(
        &self,
        send_len: usize,
        buffers: usize,
        buf_size: usize,
        in_flight: bool,
    ) -> Error {
        super::memlock::msg_zerocopy_enobufs(send_len, buffers, buf_size, in_flight)
    }
}

/// The `msg-zerocopy` backend.
pub(crate) type MsgZcTx = ErrqueueTx<MsgZcKernel>;

impl MsgZcTx {
    pub(crate) fn new(fd: RawFd, buffers: usize) -> Result<Self> {
        sock::enable_zerocopy(fd).map_err(|e| Error::Unsupported {
            what: "SO_ZEROCOPY".into(),
            source: e,
            remedy: Remedy::NeedKernel("Linux 4.14 for MSG_ZEROCOPY over TCP, 5.0 over UDP"),
        })?;
        Ok(ErrqueueTx::with_kernel(MsgZcKernel, buffers))
    }
}

/// Held buffers, pending ids and completion accounting of a backend whose completions come on
/// the socket error queue (MSG_ZEROCOPY ids and ranges).
#[derive(Debug)]
pub(crate) struct ErrqueueTx<K> {
    kernel: K,
    ranges: ZcRanges<u32>,
    held: Vec<Option<TxBuf>>,
    /// Ids not yet completed, per buffer.
    pending: Vec<u32>,
    entries: Vec<ErrqueueEntry>,
    done: Vec<Completed<u32>>,
    outstanding: usize,
}

impl<K: ZcKernel> ErrqueueTx<K> {
    /// Bookkeeping for `buffers` buffers (ids `0..buffers`) over `kernel`. The socket must
    /// already have `SO_ZEROCOPY`.
    pub(crate) fn with_kernel(kernel: K, buffers: usize) -> Self {
        let mut held = Vec::with_capacity(buffers);
        held.resize_with(buffers, || None);
        ErrqueueTx {
            kernel,
            ranges: ZcRanges::new(),
            held,
            pending: vec![0; buffers],
            entries: Vec::new(),
            done: Vec::new(),
            outstanding: 0,
        }
    }

    /// The kernel side.
    #[cfg(test)]
    fn kernel(&self) -> &K {
        &self.kernel
    }

    fn park(&mut self, sh: &mut Shared, buf: TxBuf) {
        let id = buf.id() as usize;
        if self.pending[id] == 0 {
            sh.free.push(buf);
        } else {
            self.held[id] = Some(buf);
            self.outstanding += 1;
        }
    }

    /// Reads the error queue and hands back the buffers whose sends are all reported; returns
    /// how many entries were read. Messages are read one at a time and the reading stops once
    /// every id sent so far is reported: the kernel merges consecutive completions into one
    /// message, so one `recvmsg` usually reports a whole window, and the one more that could
    /// only say `EAGAIN` (one per wait, a system call per buffers' worth of sends) is spared.
    /// Anything else queued behind (an ICMP error) is read by the next call.
    fn read_completions(&mut self, sh: &mut Shared) -> Result<usize> {
        let mut read = 0;
        loop {
            let got = self.read_batch(sh)?;
            read += got;
            if got == 0 || self.ranges.outstanding() == 0 {
                return Ok(read);
            }
        }
    }

    /// After a send call that failed: the failed send may have taken an id whose notification
    /// is already queued ([`ZcRanges::failed_send`]), so the error queue is read to its end
    /// (the tracker skips that id) before anything is sent again. A read that fails leaves
    /// the rest for later: the send's own error is what the caller gets.
    fn after_failed_send(&mut self, sh: &mut Shared) {
        self.ranges.failed_send();
        while let Ok(n) = self.read_batch(sh) {
            if n == 0 {
                break;
            }
        }
    }

    /// One read of the error queue ([`ZcKernel::read_errqueue_one`]) and what it reported;
    /// returns how many entries it held.
    fn read_batch(&mut self, sh: &mut Shared) -> Result<usize> {
        self.entries.clear();
        self.kernel
            .read_errqueue_one(sh.fd, &mut self.entries)
            .map_err(|e| Error::io("reading the error queue", e))?;
        let n = self.entries.len();
        for i in 0..n {
            match self.entries[i] {
                ErrqueueEntry::Zerocopy { lo, hi, copied } => {
                    sh.stats.notifications += 1;
                    if copied {
                        sh.stats.copied_notifications += 1;
                    }
                    self.done.clear();
                    let o = self.ranges.complete(lo, hi, copied, &mut self.done);
                    sh.stats.duplicate_completions += o.duplicate;
                    sh.stats.unknown_completions += o.unknown;
                    for c in self.done.drain(..) {
                        if c.copied {
                            sh.stats.copied_bytes += c.bytes;
                        } else {
                            sh.stats.zerocopy_bytes += c.bytes;
                        }
                        let id = c.token as usize;
                        self.pending[id] -= 1;
                        if self.pending[id] == 0 {
                            if let Some(b) = self.held[id].take() {
                                self.outstanding -= 1;
                                sh.free.push(b);
                            }
                        }
                    }
                }
                ErrqueueEntry::Other { errno, origin } => {
                    return Err(Error::io(
                        format!("error queue (origin {origin})"),
                        io::Error::from_raw_os_error(errno as i32),
                    ));
                }
            }
        }
        Ok(n)
    }
}

impl<K: ZcKernel> TxBackend for ErrqueueTx<K> {
    fn send(&mut self, sh: &mut Shared, p: Payload, len: usize) -> Result<()> {
        let buf = p.region_only(self.kernel.mode())?;
        let id = buf.id();
        if let Err(e) = self.kernel.check(&buf) {
            self.park(sh, buf);
            return Err(e);
        }
        let mut off = 0;
        // Since when ENOBUFS has held this send back with nothing accepted; the clock is read
        // only once that happens, so the hot path reads none.
        let mut waited: Option<std::time::Instant> = None;
        while off < len {
            match self.kernel.send(sh.fd, &buf, off, len) {
                Ok(n) => {
                    self.ranges.push(n as u64, id);
                    self.pending[id as usize] += 1;
                    off += n;
                    sh.stats.sends += 1;
                    sh.stats.bytes += n as u64;
                    sh.call_accepted += n as u64;
                    waited = None;
                    sh.stall.moved();
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    sh.stats.enobufs_waits += 1;
                    let in_flight = self.ranges.outstanding() > 0;
                    // Optmem or RLIMIT_MEMLOCK, before an id was taken; or, where the caller's
                    // socket has IP_RECVERR, a datagram dropped after it took one.
                    self.after_failed_send(sh);
                    let since = *waited.get_or_insert_with(std::time::Instant::now);
                    if !in_flight || since.elapsed() > sh.stall_timeout {
                        let err = self.kernel.enobufs_error(
                            len - off,
                            self.held.len(),
                            buf.capacity(),
                            in_flight,
                        );
                        self.park(sh, buf);
                        return Err(err);
                    }
                    if let Err(e) = self.reap(sh, WAIT_SLICE) {
                        self.park(sh, buf);
                        return Err(e);
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::EINTR) && !sh.cancel.ends_at_eintr() => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // No room for SEND_SLICE: notifications may be what frees it.
                    let r = self.reap(sh, Duration::ZERO).and_then(|()| sh.no_room());
                    if let Err(e) = r {
                        self.park(sh, buf);
                        return Err(e);
                    }
                }
                Err(e) => {
                    self.after_failed_send(sh);
                    let err = self.kernel.send_error(sh, e);
                    self.park(sh, buf);
                    return Err(err);
                }
            }
        }
        self.park(sh, buf);
        // The error queue is read when a buffer is wanted and none is free (`reap`), as the
        // kernel's msg_zerocopy selftest does, not after every send: reading it here cost one
        // recvmsg per send (EAGAIN nearly always) and held the backend at 0.55-0.8x a bare
        // MSG_ZEROCOPY loop (docs/perf.md, "msg-zerocopy's own overhead"). What waits there is bounded by the buffers in
        // flight, and ENOBUFS above reads it when optmem fills.
        Ok(())
    }

    fn reap(&mut self, sh: &mut Shared, wait: Duration) -> Result<()> {
        let n = self.read_completions(sh)?;
        if n > 0 || wait.is_zero() || self.ranges.outstanding() == 0 {
            return Ok(());
        }
        // Whole milliseconds, at least one: a shorter wait would not wait at all.
        let ms = wait.min(WAIT_SLICE).as_micros().div_ceil(1000).max(1) as i32;
        // POLLERR is always reported, whatever the requested events: it signals the error queue.
        let rev = match self.kernel.poll(sh.fd, 0, ms) {
            // A signal ends the wait for a token that ends at signals; else it is a short wait.
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {
                if sh.cancel.ends_at_signals() {
                    return Err(Error::Interrupted);
                }
                0
            }
            r => r.map_err(|e| Error::io("poll", e))?,
        };
        if rev & libc::POLLERR != 0 {
            let got = self.read_completions(sh)?;
            if got == 0 {
                // POLLERR without queued messages: a socket error (e.g. reset).
                if let Ok(Some(e)) = self.kernel.take_error(sh.fd) {
                    return Err(self.kernel.send_error(sh, e));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        } else if rev & libc::POLLHUP != 0 {
            let e = self
                .kernel
                .take_error(sh.fd)
                .ok()
                .flatten()
                .unwrap_or_else(|| io::Error::from_raw_os_error(libc::EPIPE));
            return Err(self.kernel.send_error(sh, e));
        }
        Ok(())
    }

    fn outstanding(&self) -> usize {
        self.outstanding
    }
}

#[cfg(test)]
mod tests {
    //! The bookkeeping against a simulated kernel: partial sends, `EINTR`, one `ENOBUFS`,
    //! completions coalesced, out of order, withheld, duplicated, some COPIED. The simulation
    //! also checks the zero-copy contract from the kernel's side: a buffer must not be sent
    //! again while any id of its earlier sends is still unreported.

    use super::*;
    use std::collections::BTreeMap;
    use std::time::Instant;
    use zcnet_core::TxStats;
    use zcnet_sys::mem::Mapping;

    /// xorshift64*: deterministic, no dependency.
    #[derive(Debug)]
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
        fn chance(&mut self, percent: u64) -> bool {
            self.below(100) < percent
        }
    }

    /// What the simulated kernel did, to compare the backend's statistics with.
    #[derive(Debug, Default)]
    struct Truth {
        accepted: u64,
        calls_accepted: u64,
        zerocopy_bytes: u64,
        copied_bytes: u64,
        ranges: u64,
        copied_ranges: u64,
        duplicate_ids: u64,
        enobufs: u64,
    }

    #[derive(Debug)]
    struct SimKernel {
        rng: Rng,
        next_id: u32,
        /// Ids sent and not reported yet: id -> (buffer, bytes).
        unreported: BTreeMap<u32, (u32, u64)>,
        /// Ranges reported, for duplicates.
        reported: Vec<(u32, u32)>,
        /// A POLLERR was signalled: the next read delivers something.
        must_deliver: bool,
        /// Call number at which to fail once with ENOBUFS (with ids in flight).
        enobufs_at: u64,
        /// Calls at which a datagram takes an id and is then refused (`EPERM`, as from a
        /// netfilter drop): freed in the call, its notification queued before it returns.
        taken_and_refused_at: Vec<u64>,
        /// Notifications queued in a send call, read before anything else.
        queued: Vec<ErrqueueEntry>,
        calls: u64,
        truth: Truth,
    }

    impl SimKernel {
        fn new(seed: u64) -> SimKernel {
            let mut rng = Rng(seed | 1);
            let enobufs_at = 50 + rng.below(200);
            SimKernel {
                rng,
                next_id: 0,
                unreported: BTreeMap::new(),
                reported: Vec::new(),
                must_deliver: false,
                enobufs_at,
                taken_and_refused_at: Vec::new(),
                queued: Vec::new(),
                calls: 0,
                truth: Truth::default(),
            }
        }

        /// Reports `lo..=hi` (all unreported) with a COPIED flag.
        fn report(&mut self, lo: u32, hi: u32, out: &mut Vec<ErrqueueEntry>) {
            let copied = self.rng.chance(30);
            for id in lo..=hi {
                let (_, bytes) = self.unreported.remove(&id).expect("reported once");
                if copied {
                    self.truth.copied_bytes += bytes;
                } else {
                    self.truth.zerocopy_bytes += bytes;
                }
            }
            self.truth.ranges += 1;
            self.truth.copied_ranges += u64::from(copied);
            self.reported.push((lo, hi));
            out.push(ErrqueueEntry::Zerocopy { lo, hi, copied });
        }
    }

    impl ZcKernel for SimKernel {
        fn send(&mut self, _fd: RawFd, buf: &TxBuf, off: usize, len: usize) -> io::Result<usize> {
            self.calls += 1;
            if off == 0 {
                let held: Vec<u32> = self
                    .unreported
                    .iter()
                    .filter(|(_, (b, _))| *b == buf.id())
                    .map(|(id, _)| *id)
                    .collect();
                assert!(
                    held.is_empty(),
                    "buffer {} sent again while the kernel still holds it (ids {held:?})",
                    buf.id()
                );
            }
            if self.calls >= self.enobufs_at
                && self.truth.enobufs == 0
                && !self.unreported.is_empty()
            {
                self.truth.enobufs += 1;
                return Err(io::Error::from_raw_os_error(libc::ENOBUFS));
            }
            if self.taken_and_refused_at.contains(&self.calls) {
                let id = self.next_id;
                self.next_id += 1;
                self.reported.push((id, id));
                self.truth.ranges += 1;
                self.queued.push(ErrqueueEntry::Zerocopy {
                    lo: id,
                    hi: id,
                    copied: false,
                });
                return Err(io::Error::from_raw_os_error(libc::EPERM));
            }
            if self.rng.chance(3) {
                return Err(io::Error::from_raw_os_error(libc::EINTR));
            }
            let left = (len - off) as u64;
            let n = if self.rng.chance(30) {
                1 + self.rng.below(left)
            } else {
                left
            };
            self.unreported.insert(self.next_id, (buf.id(), n));
            self.next_id += 1;
            self.truth.accepted += n;
            self.truth.calls_accepted += 1;
            Ok(n as usize)
        }

        fn read_errqueue(&mut self, _fd: RawFd, out: &mut Vec<ErrqueueEntry>) -> io::Result<usize> {
            let before = out.len();
            if !self.queued.is_empty() {
                out.append(&mut self.queued);
                return Ok(out.len() - before);
            }
            let must = std::mem::take(&mut self.must_deliver);
            if !self.unreported.is_empty() && (must || self.rng.chance(50)) {
                // Cut the unreported ids into runs of consecutive ids, cut the runs into
                // pieces (coalesced ranges), withhold some, deliver the rest shuffled.
                let ids: Vec<u32> = self.unreported.keys().copied().collect();
                let mut pieces = Vec::new();
                let mut start = 0;
                for i in 1..=ids.len() {
                    let run_ends = i == ids.len() || ids[i] != ids[i - 1] + 1;
                    if run_ends || self.rng.chance(25) {
                        pieces.push((ids[start], ids[i - 1]));
                        start = i;
                    }
                }
                let mut chosen: Vec<(u32, u32)> =
                    pieces.into_iter().filter(|_| self.rng.chance(60)).collect();
                if chosen.is_empty() {
                    let (&lo, _) = self.unreported.iter().next().expect("non-empty");
                    chosen.push((lo, lo));
                }
                for i in (1..chosen.len()).rev() {
                    let j = self.rng.below(i as u64 + 1) as usize;
                    chosen.swap(i, j);
                }
                for (lo, hi) in chosen {
                    self.report(lo, hi, out);
                }
            }
            if !self.reported.is_empty() && self.rng.chance(10) {
                let k = self.rng.below(self.reported.len() as u64) as usize;
                let (lo, hi) = self.reported[k];
                let copied = self.rng.chance(50);
                self.truth.ranges += 1;
                self.truth.copied_ranges += u64::from(copied);
                self.truth.duplicate_ids += u64::from(hi - lo) + 1;
                out.push(ErrqueueEntry::Zerocopy { lo, hi, copied });
            }
            Ok(out.len() - before)
        }

        fn poll(&mut self, _fd: RawFd, _events: i16, _timeout_ms: i32) -> io::Result<i16> {
            // Only asked while ids are in flight: the error queue will have something.
            assert!(!self.unreported.is_empty(), "poll with nothing in flight");
            self.must_deliver = true;
            Ok(libc::POLLERR)
        }

        fn take_error(&mut self, _fd: RawFd) -> io::Result<Option<io::Error>> {
            Ok(None)
        }
    }

    fn shared(buffers: usize, buf_size: usize) -> Shared {
        let (_, slots) = Mapping::anonymous(buffers * buf_size)
            .unwrap()
            .into_slots(buf_size, buffers)
            .unwrap();
        Shared {
            fd: -1,
            free: slots.into_iter().map(|slot| TxBuf { slot }).collect(),
            stats: TxStats::default(),
            start: Instant::now(),
            stall_timeout: Duration::from_secs(5),
            stall: zcnet_core::StallClock::default(),
            cancel: crate::Cancel::new(),
            call_accepted: 0,
        }
    }

    fn free_ids(sh: &Shared) -> Vec<u32> {
        let mut ids: Vec<u32> = sh.free.iter().map(TxBuf::id).collect();
        ids.sort_unstable();
        ids
    }

    #[zcnet_testkit::test]
    fn buffers_come_back_once_and_bytes_are_attributed_as_the_kernel_said() {
        const BUFFERS: usize = 6;
        const SIZE: usize = 8192;
        for seed in 1..=24u64 {
            let mut sh = shared(BUFFERS, SIZE);
            let mut tx = ErrqueueTx::with_kernel(SimKernel::new(seed), BUFFERS);
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
            let mut requested = 0u64;
            let mut sent = 0;
            while sent < 1500 {
                let Some(buf) = sh.free.pop() else {
                    tx.reap(&mut sh, WAIT_SLICE).unwrap();
                    continue;
                };
                let len = 1 + rng.below(SIZE as u64) as usize;
                tx.send(&mut sh, Payload::Buf(buf), len).unwrap();
                requested += len as u64;
                sent += 1;
                // Every buffer is either free or held for a completion, never both or lost.
                assert_eq!(sh.free.len() + tx.outstanding(), BUFFERS, "seed {seed}");
                let ids = free_ids(&sh);
                assert!(ids.windows(2).all(|w| w[0] < w[1]), "seed {seed}: {ids:?}");
            }
            while tx.outstanding() > 0 {
                tx.reap(&mut sh, WAIT_SLICE).unwrap();
            }
            let t = &tx.kernel().truth;
            let st = &sh.stats;
            assert_eq!(free_ids(&sh), (0..BUFFERS as u32).collect::<Vec<_>>());
            assert_eq!(tx.ranges.outstanding(), 0);
            assert!(tx.kernel().unreported.is_empty(), "seed {seed}");
            assert_eq!(t.enobufs, 1, "seed {seed}: the ENOBUFS was injected");
            assert_eq!(st.enobufs_waits, 1, "seed {seed}");
            assert_eq!(
                (st.bytes, t.accepted),
                (requested, requested),
                "seed {seed}"
            );
            assert_eq!(st.sends, t.calls_accepted, "seed {seed}");
            assert_eq!(st.zerocopy_bytes, t.zerocopy_bytes, "seed {seed}");
            assert_eq!(st.copied_bytes, t.copied_bytes, "seed {seed}");
            assert_eq!(st.zerocopy_bytes + st.copied_bytes, st.bytes, "seed {seed}");
            assert!(st.zerocopy_bytes > 0 && st.copied_bytes > 0, "seed {seed}");
            assert_eq!(st.notifications, t.ranges, "seed {seed}");
            assert_eq!(st.copied_notifications, t.copied_ranges, "seed {seed}");
            assert_eq!(st.duplicate_completions, t.duplicate_ids, "seed {seed}");
            assert!(
                t.duplicate_ids > 0,
                "seed {seed}: duplicates were exercised"
            );
            assert_eq!(st.unknown_completions, 0, "seed {seed}");
        }
    }

    /// A UDP datagram refused after it took an id (`EPERM` from a netfilter drop: the
    /// datagram is freed in the call and its id notified at once), and the caller sends on.
    /// The id is skipped: no later send is given it, so no buffer comes back while the kernel
    /// still holds it (the simulated kernel asserts that), none is left waiting for an id
    /// that was never its, and nothing is unknown.
    #[zcnet_testkit::test]
    fn a_send_refused_after_taking_an_id_puts_no_later_id_out_of_step() {
        const BUFFERS: usize = 4;
        const SIZE: usize = 4096;
        for seed in 1..=16u64 {
            let mut sh = shared(BUFFERS, SIZE);
            let mut kernel = SimKernel::new(seed);
            kernel.enobufs_at = u64::MAX;
            kernel.taken_and_refused_at = vec![5 + seed, 40 + 3 * seed, 41 + 3 * seed];
            let mut tx = ErrqueueTx::with_kernel(kernel, BUFFERS);
            let (mut sent, mut refused) = (0, 0);
            while sent < 300 {
                let Some(buf) = sh.free.pop() else {
                    tx.reap(&mut sh, WAIT_SLICE).unwrap();
                    continue;
                };
                match tx.send(&mut sh, Payload::Buf(buf), SIZE) {
                    Ok(()) => sent += 1,
                    Err(e) => {
                        assert!(format!("{e}").contains("not permitted"), "{e}");
                        refused += 1;
                    }
                }
                assert_eq!(sh.free.len() + tx.outstanding(), BUFFERS, "seed {seed}");
            }
            while tx.outstanding() > 0 {
                tx.reap(&mut sh, WAIT_SLICE).unwrap();
            }
            assert_eq!(refused, 3, "seed {seed}");
            assert_eq!(free_ids(&sh), (0..BUFFERS as u32).collect::<Vec<_>>());
            assert!(tx.kernel().unreported.is_empty(), "seed {seed}");
            assert_eq!(tx.ranges.next_id(), tx.kernel().next_id, "seed {seed}");
            assert_eq!(sh.stats.unknown_completions, 0, "seed {seed}");
            assert_eq!(sh.stats.bytes, tx.kernel().truth.accepted, "seed {seed}");
            assert_eq!(
                sh.stats.zerocopy_bytes + sh.stats.copied_bytes,
                sh.stats.bytes,
                "seed {seed}: every byte attributed by its own send's notification"
            );
        }
    }

    /// A kernel that refuses every send with `errno`.
    #[derive(Debug)]
    struct Refusing(i32);

    impl ZcKernel for Refusing {
        fn send(&mut self, _: RawFd, _: &TxBuf, _: usize, _: usize) -> io::Result<usize> {
            Err(io::Error::from_raw_os_error(self.0))
        }
        fn read_errqueue(&mut self, _: RawFd, _: &mut Vec<ErrqueueEntry>) -> io::Result<usize> {
            Ok(0)
        }
    }

    #[zcnet_testkit::test]
    fn a_failed_send_keeps_the_buffer_and_consumes_no_id() {
        // ENOBUFS with nothing in flight: optmem cannot hold even one notification.
        let mut sh = shared(2, 4096);
        let mut tx = ErrqueueTx::with_kernel(Refusing(libc::ENOBUFS), 2);
        let b = sh.free.pop().unwrap();
        let e = tx.send(&mut sh, Payload::Buf(b), 100).unwrap_err();
        assert!(matches!(e, Error::OptmemExhausted { .. }), "{e:?}");
        // A reset peer: the errno is the user's error, the buffer is free again.
        let mut tx = ErrqueueTx::with_kernel(Refusing(libc::ECONNRESET), 2);
        let b = sh.free.pop().unwrap();
        let e = tx.send(&mut sh, Payload::Buf(b), 100).unwrap_err();
        assert!(matches!(e, Error::PeerReset { .. }), "{e:?}");
        assert_eq!(free_ids(&sh), [0, 1]);
        assert_eq!((tx.outstanding(), tx.ranges.next_id()), (0, 0));
        assert_eq!(sh.stats.bytes, 0);
    }
}
