//! `uring` and `uring-zc`: io_uring `IORING_OP_SEND` / `IORING_OP_SEND_ZC`, several in flight.
//!
//! Zero-copy sends come from the region registered as fixed buffer 0 and set
//! `IORING_SEND_ZC_REPORT_USAGE`, so every notification says whether the kernel copied.
//! The sends go through [`crate::engine::Engine`]: its ring holds each buffer until its final
//! CQE, and it reads and counts what each CQE means.
//!
//! Ordering: io_uring issues SQEs in order but a send that must wait for socket space is retried
//! later, so two sends in flight on one *stream* socket can reach it out of order (liburing issue
//! #1001). For streams, sends are therefore submitted as linked chains (`IOSQE_IO_LINK`, with
//! `MSG_WAITALL` so a short send breaks the chain instead of leaving a hole), and a new chain
//! starts only when every send of the previous one has its result. Buffers still awaiting their
//! *notification* do not hold the next chain back, so zero-copy keeps many buffers in flight.
//! Datagram sends are independent: each goes out with the next submit, in any order.

use super::{memlock, Payload, Shared, TxBackend, WAIT_SLICE};
use crate::engine::{Counts, Engine, Lease, Op, Outcome, Request};
use crate::error::{Error, Result};
use crate::region::TxBuf;
use crate::remedy::Remedy;
use crate::tx::TxMode;
use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;
use zcnet_sys::mem::Mapping;

/// What an io_uring sender of `buffers` buffers locks: without CAP_IPC_LOCK the ring itself is
/// charged to RLIMIT_MEMLOCK when it is set up, and (zero copy) the registered region after it:
/// a remedy must cover both (tx/memlock.rs).
pub(crate) struct Charges {
    /// SQ entries of the ring.
    pub entries: u32,
    /// Bytes the ring locks.
    pub ring_bytes: u64,
    /// Bytes registering the region locks (0 without zero copy).
    pub region_bytes: u64,
    /// Both in words, for [`memlock::too_small`].
    pub what: String,
}

impl Charges {
    pub(crate) fn of(map: &Mapping, buffers: usize, zero_copy: bool) -> Charges {
        let entries = (2 * buffers as u32).next_power_of_two().max(8);
        let ring_bytes = memlock::ring_bytes(entries);
        let region_bytes = if zero_copy {
            memlock::registered_bytes(map)
        } else {
            0
        };
        let what = if zero_copy && ring_bytes == 0 {
            format!(
                "the {} region registered with io_uring (the ring itself is not charged on this kernel)",
                crate::error::size_words(region_bytes)
            )
        } else if zero_copy {
            format!(
                "the io_uring ring ({}) and the {} region registered with it",
                crate::error::size_words(ring_bytes),
                crate::error::size_words(region_bytes)
            )
        } else {
            format!(
                "the io_uring ring ({})",
                crate::error::size_words(ring_bytes)
            )
        };
        Charges {
            entries,
            ring_bytes,
            region_bytes,
            what,
        }
    }
}

#[derive(Debug)]
pub(crate) struct UringTx {
    engine: Engine,
    /// The engine's counts already added to the sender's stats.
    counted: Counts,
    /// The region's fixed buffer index (zero copy).
    fixed: Option<u16>,
    zero_copy: bool,
    stream: bool,
    /// Stream sends waiting for the running chain to end: the memory, the offset, the length.
    staged: VecDeque<(Lease, usize, u32)>,
    error: Option<Error>,
    /// The readiness fd, registered with the ring at the first [`TxBackend::ready_fd`].
    efd: Option<zcnet_sys::epoll::EventFd>,
    /// A zero-copy sender told to copy for now ([`Self::set_copying`]): its sends are
    /// IORING_OP_SEND on the same ring, in the same order.
    copying: bool,
}

impl UringTx {
    /// A sender on the socket `fd` (which the caller keeps open for as long as the sender
    /// lives) from `map` cut into `buffers` buffers.
    pub(crate) fn new(
        fd: RawFd,
        map: &Arc<Mapping>,
        buffers: usize,
        zero_copy: bool,
        stream: bool,
    ) -> Result<Self> {
        let Charges {
            entries,
            ring_bytes,
            region_bytes,
            what,
        } = Charges::of(map, buffers, zero_copy);
        // `charged`: what the kernel has been asked to lock when `e` came (the ring at setup,
        // the ring and the region at registration).
        let memlock_error = |e: std::io::Error, doing: &str, charged: u64| {
            let what = what.clone();
            match e.raw_os_error() {
                // Nothing charged (a ring on a kernel that does not charge rings): not memlock.
                Some(libc::ENOMEM) if charged > 0 => {
                    memlock::too_small(what, ring_bytes + region_bytes, charged)
                        .unwrap_or_else(|| Error::io(doing.to_string(), e))
                }
                _ => Error::io(doing.to_string(), e),
            }
        };
        let mut engine = Engine::new(entries, 0).map_err(|e| match e.raw_os_error() {
            Some(libc::EPERM) => Error::Unsupported {
                what: "io_uring".into(),
                source: e,
                remedy: Remedy::EnableIoUring,
            },
            Some(libc::ENOSYS) => Error::Unsupported {
                what: "io_uring".into(),
                source: e,
                remedy: Remedy::NeedKernel("Linux 5.1 or later"),
            },
            _ => memlock_error(e, "io_uring_setup", ring_bytes),
        })?;
        let mut fixed = None;
        if zero_copy {
            let supported = engine.supports_send_zc();
            if !supported {
                return Err(Error::Unsupported {
                    what: "IORING_OP_SEND_ZC".into(),
                    source: std::io::Error::from_raw_os_error(libc::EOPNOTSUPP),
                    remedy: Remedy::Any(&[
                        Remedy::NeedKernel("Linux 6.0 (usage reports 6.2)"),
                        Remedy::UseTxMode(TxMode::MsgZerocopy),
                        Remedy::UseTxMode(TxMode::Copy),
                    ]),
                });
            }
            let idx = engine.register_mapping(map).map_err(|e| {
                memlock_error(
                    e,
                    "registering the region with io_uring",
                    ring_bytes + region_bytes,
                )
            })?;
            fixed = Some(idx);
        }
        // The socket as fixed file 0: the kernel then skips a file lookup and a reference count
        // per send. Where the kernel refuses, sends name the socket by its number.
        let _ = engine.register_file(fd);
        Ok(UringTx {
            engine,
            counted: Counts::default(),
            fixed,
            zero_copy,
            stream,
            staged: VecDeque::new(),
            error: None,
            efd: None,
            copying: false,
        })
    }

    #[inline]
    fn push(
        &mut self,
        sh: &mut Shared,
        lease: Lease,
        off: usize,
        len: u32,
        link: bool,
    ) -> Result<()> {
        let op = if self.zero_copy && !self.copying {
            // The region's fixed buffer where the bytes lie in it (lent memory elsewhere pins
            // its pages per send).
            let fixed = match &lease {
                Lease::Slot(_) => self.fixed,
                Lease::Borrowed(b) => self.engine.fixed_index(b.addr() + off, len as usize),
            };
            Op::SendZc { fixed }
        } else {
            Op::Send
        };
        let req = Request {
            fd: sh.fd,
            off,
            len,
            op,
            flags: if self.stream { libc::MSG_WAITALL } else { 0 },
            link,
        };
        if let Err((lease, e)) = self.engine.push(lease, &req) {
            if let Some(slot) = lease.into_slot() {
                sh.free.push(TxBuf { slot });
            }
            return Err(Error::io("queueing an io_uring send", e));
        }
        sh.stats.sends += 1;
        Ok(())
    }

    /// Streams: submits everything staged as one linked chain, if no chain is running.
    fn start_chain(&mut self, sh: &mut Shared) -> Result<()> {
        if self.engine.awaiting_result() > 0 || self.staged.is_empty() {
            return Ok(());
        }
        if self.error.is_some() {
            // The stream broke: sends staged behind the failure would arrive after a hole.
            // They never go; their buffers come back (lent memory is let go).
            for (lease, _, _) in self.staged.drain(..) {
                if let Some(slot) = lease.into_slot() {
                    sh.free.push(TxBuf { slot });
                }
            }
            return Ok(());
        }
        // A chain must fit the submission queue: one cut by a submit in the middle becomes two
        // chains the kernel may run side by side (a link does not span io_uring_enter calls),
        // reordering the stream. Region buffers never fill it (two entries per buffer); lent
        // memory has no such bound, so the rest waits for the next chain.
        if self.engine.queued() > 0 {
            self.engine
                .submit()
                .map_err(|e| Error::io("io_uring_enter", e))?;
        }
        let n = self.staged.len().min(self.engine.sq_capacity());
        for i in 0..n {
            let Some((lease, off, len)) = self.staged.pop_front() else {
                break;
            };
            self.push(sh, lease, off, len, i + 1 < n)?;
        }
        self.engine
            .submit()
            .map_err(|e| Error::io("io_uring_enter", e))?;
        Ok(())
    }

    /// A zero-copy sender sends with IORING_OP_SEND (`true`: the kernel copies anyway, and a
    /// notification per send is overhead) or SEND_ZC again (`false`), on the same ring and in
    /// the same order (a stream's sends stay one chain): nothing to wait for at a switch.
    pub(crate) fn set_copying(&mut self, copying: bool) {
        self.copying = copying;
    }

    /// Streams: waits until every send handed over so far has its result (the data is in the
    /// socket, in order). Notifications may still be outstanding.
    pub(crate) fn settle(&mut self, sh: &mut Shared) -> Result<()> {
        while !self.staged.is_empty() || self.engine.awaiting_result() > 0 {
            if sh.cancelled() {
                return Err(Error::Interrupted);
            }
            let before = (self.staged.len(), self.engine.awaiting_result());
            self.start_chain(sh)?;
            self.reap(sh, WAIT_SLICE)?;
            let moved = (self.staged.len(), self.engine.awaiting_result()) != before;
            sh.stall_clock(moved, self.outstanding())?;
        }
        Ok(())
    }

    fn on_completions(&mut self, sh: &mut Shared) -> Result<()> {
        /// The first failure of a reap, made an error once the reap's bytes are counted (a
        /// reset reports how many bytes the kernel accepted, this reap's included).
        enum First {
            Send(std::io::Error),
            Other(Error),
        }
        let mut first: Option<First> = None;
        let broken = self.error.is_some();
        self.engine.reap(|ev| {
            match ev.outcome {
                Outcome::Sent {
                    res: Ok(n), asked, ..
                } if n < asked && first.is_none() => {
                    // With MSG_WAITALL (streams) the kernel retries partial sends, so a short
                    // result means the send was ended part-way: say why. A reset often leaves
                    // no error on the socket by then (EPIPE: the peer reset); a connection still
                    // established means the kernel cancelled the send instead.
                    first = Some(match zcnet_sys::sock::take_error(sh.fd).ok().flatten() {
                        Some(cause) => First::Send(cause),
                        None if crate::net::tcp_info(sh.fd).is_some_and(|i| i.is_established()) => First::Other(Error::io(
                            format!("a send was cancelled after {n} of {asked} B on a connection still up: io_uring cancels the requests of a thread that exits, so the thread that sent must live until its sends complete (flush)"),
                            std::io::Error::from_raw_os_error(libc::ECANCELED),
                        )),
                        None => First::Send(std::io::Error::from_raw_os_error(libc::EPIPE)),
                    });
                }
                // A cancelled link follows the failure that broke the chain: report that one.
                Outcome::Sent {
                    res: Err(libc::ECANCELED),
                    ..
                } if first.is_none() && !broken => {
                    // No failure before it: the kernel cancelled the send itself, which it does
                    // to the requests of a thread that exits.
                    first = Some(First::Other(Error::io(
                        "send cancelled by the kernel: io_uring cancels the requests of a thread that exits, so the thread that sent must live until its sends complete (flush)",
                        std::io::Error::from_raw_os_error(libc::ECANCELED),
                    )));
                }
                Outcome::Sent {
                    res: Err(errno), ..
                } if errno != libc::ECANCELED && first.is_none() => {
                    first = Some(First::Send(std::io::Error::from_raw_os_error(errno)));
                }
                Outcome::Protocol(e) => {
                    first.get_or_insert(First::Other(Error::Protocol(e)));
                }
                _ => {}
            }
            if let Some(slot) = ev.lease.and_then(Lease::into_slot) {
                sh.free.push(TxBuf { slot });
            }
        });
        let now = self.engine.counts();
        let d = now.since(&self.counted);
        self.counted = now;
        sh.stats.bytes += d.bytes_sent;
        sh.stats.copied_bytes += d.copied_bytes;
        sh.stats.zerocopy_bytes += d.zerocopy_bytes;
        sh.stats.notifications += d.notifications;
        sh.stats.copied_notifications += d.copied_notifications;
        if let Some(first) = first {
            let e = match first {
                First::Send(cause) => sh.send_error(cause),
                First::Other(e) => e,
            };
            // Keep the first error; later calls report it too (the stream is broken).
            let msg = e.to_string();
            if self.error.is_none() {
                self.error = Some(Error::io(msg, std::io::Error::from_raw_os_error(libc::EIO)));
            }
            return Err(e);
        }
        Ok(())
    }
}

impl TxBackend for UringTx {
    fn send(&mut self, sh: &mut Shared, p: Payload, len: usize) -> Result<()> {
        if let Some(e) = &self.error {
            let err = Error::io(e.to_string(), std::io::Error::from_raw_os_error(libc::EIO));
            p.release(sh);
            return Err(err);
        }
        let (lease, off) = p.into_lease();
        if self.stream {
            self.staged.push_back((lease, off, len as u32));
            self.start_chain(sh)
        } else {
            self.push(sh, lease, off, len as u32, false)
        }
    }

    fn reap(&mut self, sh: &mut Shared, wait: Duration) -> Result<()> {
        let mut signalled = false;
        if !wait.is_zero() && self.engine.in_flight() > 0 {
            // Hand over what is queued without waiting first: a datagram send usually
            // completes inside that call, and the task work run on its way out posts the
            // notifications, so the completions are there and the timed wait (its argument
            // copied in, a timer armed) is needed only when nothing came back. Completions
            // already in the queue with nothing to submit need no system call at all.
            // A signal or a full completion queue is not an error here either (the engine's
            // submit says so): the timed wait below retries.
            if self.engine.queued() > 0 {
                self.engine
                    .submit()
                    .map_err(|e| Error::io("io_uring_enter", e))?;
            }
            if !self.engine.completions_ready() {
                signalled = self
                    .engine
                    .submit_and_wait(1, wait.min(WAIT_SLICE))
                    .map_err(|e| Error::io("io_uring_enter", e))?;
            }
        } else {
            self.engine
                .submit()
                .map_err(|e| Error::io("io_uring_enter", e))?;
        }
        let done = self.on_completions(sh);
        if self.stream {
            // After a failure this lets the staged sends go (they never will), so every buffer
            // is back when the error is.
            self.start_chain(sh)?;
        }
        if signalled && sh.cancel.ends_at_signals() {
            // The token ends calls at signals: what came back is taken, then the wait ends.
            done?;
            return Err(Error::Interrupted);
        }
        done
    }

    fn outstanding(&self) -> usize {
        self.engine.in_flight() + self.staged.len()
    }

    fn ready_fd(&mut self) -> Result<Option<std::os::fd::BorrowedFd<'_>>> {
        use std::os::fd::AsFd;
        let engine = &self.engine;
        let efd = crate::engine::ready_eventfd(&mut self.efd, |e| engine.register_eventfd(e))?;
        Ok(Some(efd.as_fd()))
    }
}
