//! `uring` and `uring-zc`: io_uring `IORING_OP_SEND` / `IORING_OP_SEND_ZC`, several in flight.
//!
//! Zero-copy sends come from the region registered as fixed buffer 0 and set
//! `IORING_SEND_ZC_REPORT_USAGE`, so every notification says whether the kernel copied.
//! `zcnet_core::SendZcTracker` interprets the CQEs; `zcnet_sys::uring::Ring` holds each buffer
//! until its final CQE.
//!
//! Ordering: io_uring issues SQEs in order but a send that must wait for socket space is retried
//! later, so two sends in flight on one *stream* socket can reach it out of order (liburing issue
//! #1001). For streams, sends are therefore submitted as linked chains (`IOSQE_IO_LINK`, with
//! `MSG_WAITALL` so a short send breaks the chain instead of leaving a hole), and a new chain
//! starts only when every send of the previous one has its result. Buffers still awaiting their
//! *notification* do not hold the next chain back, so zero-copy keeps many buffers in flight.
//! Datagram sends are independent: each goes out with the next submit, in any order.

use super::{memlock, Shared, TxBackend};
use crate::error::{Error, Result};
use crate::region::TxBuf;
use crate::remedy::Remedy;
use crate::tx::TxMode;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use zcnet_core::SendZcTracker;
use zcnet_sys::mem::Mapping;
use zcnet_sys::uring::{Ring, SendOp};

const WAIT: Duration = Duration::from_millis(100);

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
                memlock::size_words(region_bytes)
            )
        } else if zero_copy {
            format!(
                "the io_uring ring ({}) and the {} region registered with it",
                memlock::size_words(ring_bytes),
                memlock::size_words(region_bytes)
            )
        } else {
            format!("the io_uring ring ({})", memlock::size_words(ring_bytes))
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
    ring: Ring,
    tracker: SendZcTracker,
    zero_copy: bool,
    stream: bool,
    staged: VecDeque<(TxBuf, u32)>,
    error: Option<Error>,
    /// The readiness fd, registered with the ring at the first [`TxBackend::ready_fd`].
    efd: Option<zcnet_sys::epoll::EventFd>,
    /// Whether registering the socket as a fixed file was tried (at the first send: the ring
    /// is made before the socket is known).
    file_tried: bool,
    /// A zero-copy sender told to copy for now ([`Self::set_copying`]): its sends are
    /// IORING_OP_SEND on the same ring, in the same order.
    copying: bool,
    /// Per slot: its send in flight copies (IORING_OP_SEND), so its result's bytes are copied
    /// bytes; a SEND_ZC's are counted by its notification.
    copies: Vec<bool>,
}

impl UringTx {
    pub(crate) fn new(
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
                        .unwrap_or_else(|| Error::io(doing, e))
                }
                _ => Error::io(doing, e),
            }
        };
        let mut ring = Ring::new(entries, buffers).map_err(|e| match e.raw_os_error() {
            Some(libc::EPERM) => Error::Unsupported {
                what: "io_uring".into(),
                source: e,
                remedy: Remedy::Other("io_uring is disabled: set 'sysctl -w kernel.io_uring_disabled=0' (or join io_uring_group)"),
            },
            Some(libc::ENOSYS) => Error::Unsupported { what: "io_uring".into(), source: e, remedy: Remedy::NeedKernel("Linux 5.1 or later") },
            _ => memlock_error(e, "io_uring_setup", ring_bytes),
        })?;
        if zero_copy {
            let supported = ring.supports_send_zc().unwrap_or(false);
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
            ring.register(map).map_err(|e| {
                memlock_error(
                    e,
                    "registering the region with io_uring",
                    ring_bytes + region_bytes,
                )
            })?;
        }
        Ok(UringTx {
            ring,
            tracker: SendZcTracker::new(buffers),
            zero_copy,
            stream,
            staged: VecDeque::new(),
            error: None,
            efd: None,
            file_tried: false,
            copying: false,
            copies: vec![!zero_copy; buffers],
        })
    }

    fn push(&mut self, sh: &mut Shared, buf: TxBuf, len: u32, link: bool) -> Result<()> {
        if !self.file_tried {
            // The socket as fixed file 0: the kernel then skips a file lookup and a reference
            // count per send. The sender owns the socket for as long as the ring lives. Where
            // the kernel refuses, sends name the socket by its number, as before.
            self.file_tried = true;
            let _ = self.ring.register_file(sh.fd);
        }
        let id = buf.id() as usize;
        let zero_copy = self.zero_copy && !self.copying;
        if let Some(c) = self.copies.get_mut(id) {
            *c = !zero_copy;
        }
        let op = SendOp {
            fd: sh.fd,
            len,
            zero_copy,
            fixed: zero_copy,
            msg_flags: if self.stream { libc::MSG_WAITALL } else { 0 },
            link,
        };
        if let Err((slot, e)) = self.ring.push_send(buf.slot, &op) {
            sh.free.push(TxBuf { slot });
            return Err(Error::io("queueing an io_uring send", e));
        }
        self.tracker.on_submit(id, len)?;
        sh.stats.sends += 1;
        Ok(())
    }

    /// Streams: submits everything staged as one linked chain, if no chain is running.
    fn start_chain(&mut self, sh: &mut Shared) -> Result<()> {
        if self.tracker.awaiting_result() > 0 || self.staged.is_empty() {
            return Ok(());
        }
        while let Some((buf, len)) = self.staged.pop_front() {
            let link = !self.staged.is_empty();
            self.push(sh, buf, len, link)?;
        }
        self.ring
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
        while !self.staged.is_empty() || self.tracker.awaiting_result() > 0 {
            if zcnet_sys::os::interrupted() {
                return Err(Error::Interrupted);
            }
            self.start_chain(sh)?;
            self.reap(sh, true)?;
        }
        Ok(())
    }

    fn on_completions(&mut self, sh: &mut Shared) -> Result<()> {
        let copies = &self.copies;
        let tracker = &mut self.tracker;
        let mut first_err: Option<Error> = None;
        self.ring.drain(|c| {
            let out = match tracker.on_cqe(c.slot_id as usize, c.res, c.flags) {
                Ok(o) => o,
                Err(e) => {
                    first_err.get_or_insert(Error::Protocol(e));
                    if let Some(slot) = c.slot {
                        sh.free.push(TxBuf { slot });
                    }
                    return;
                }
            };
            if let Some((res, len)) = out.result {
                match res {
                    Ok(n) => {
                        sh.stats.bytes += u64::from(n);
                        if copies.get(c.slot_id as usize).copied().unwrap_or(false) {
                            sh.stats.copied_bytes += u64::from(n);
                        }
                        if n < len && first_err.is_none() {
                            // With MSG_WAITALL (streams) the kernel retries partial sends, so a
                            // short result means the connection failed part-way: say why.
                            let cause = zcnet_sys::sock::take_error(sh.fd)
                                .ok()
                                .flatten()
                                .unwrap_or_else(|| std::io::Error::from_raw_os_error(libc::EPIPE));
                            first_err = Some(sh.send_error(cause));
                        }
                    }
                    // A cancelled link follows the failure that broke the chain: report that one.
                    Err(errno) if errno == libc::ECANCELED => {}
                    Err(errno) => {
                        if first_err.is_none() {
                            first_err = Some(std::io::Error::from_raw_os_error(errno))
                                .map(|e| sh.send_error(e));
                        }
                    }
                }
            }
            if let Some(n) = out.notification {
                sh.stats.notifications += 1;
                if n.copied {
                    sh.stats.copied_notifications += 1;
                    sh.stats.copied_bytes += n.bytes;
                } else {
                    sh.stats.zerocopy_bytes += n.bytes;
                }
            }
            if let Some(slot) = c.slot {
                sh.free.push(TxBuf { slot });
            }
        });
        if let Some(e) = first_err {
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
    fn send(&mut self, sh: &mut Shared, buf: TxBuf, len: usize) -> Result<()> {
        if let Some(e) = &self.error {
            let err = Error::io(e.to_string(), std::io::Error::from_raw_os_error(libc::EIO));
            sh.free.push(buf);
            return Err(err);
        }
        if self.stream {
            self.staged.push_back((buf, len as u32));
            self.start_chain(sh)
        } else {
            self.push(sh, buf, len as u32, false)
        }
    }

    fn reap(&mut self, sh: &mut Shared, wait: bool) -> Result<()> {
        if wait && self.ring.in_flight() > 0 {
            // Hand over what is queued without waiting first: a datagram send usually
            // completes inside that call, and the task work run on its way out posts the
            // notifications, so the completions are there and the timed wait (its argument
            // copied in, a timer armed) is needed only when nothing came back. Completions
            // already in the queue with nothing to submit need no system call at all.
            // A signal or a full completion queue (EINTR, EBUSY) is not an error here either:
            // the timed wait below retries, as it did alone.
            if self.ring.queued() > 0 {
                match self.ring.submit() {
                    Err(e) if !matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => {
                        return Err(Error::io("io_uring_enter", e));
                    }
                    _ => {}
                }
            }
            if !self.ring.completions_ready() {
                self.ring
                    .submit_and_wait(1, WAIT)
                    .map_err(|e| Error::io("io_uring_enter", e))?;
            }
        } else {
            self.ring
                .submit()
                .map_err(|e| Error::io("io_uring_enter", e))?;
        }
        self.on_completions(sh)?;
        if self.stream {
            self.start_chain(sh)?;
        }
        Ok(())
    }

    fn outstanding(&self) -> usize {
        self.ring.in_flight() + self.staged.len()
    }

    fn ready_fd(&mut self) -> Result<Option<std::os::fd::BorrowedFd<'_>>> {
        use std::os::fd::AsFd;
        let ring = &self.ring;
        let efd = crate::rx::ready_eventfd(&mut self.efd, |e| ring.register_eventfd(e))?;
        Ok(Some(efd.as_fd()))
    }
}
