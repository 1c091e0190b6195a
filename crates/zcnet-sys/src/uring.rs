//! The one io_uring ring owner for requests on memory the kernel reads or fills: it holds each
//! request's memory for exactly as long as the kernel may use it.
//!
//! A request's memory is a [`Lease`]: a [`Slot`] of a region zcnet mapped (the library's send
//! buffers), or memory foreign code lent ([`ForeignBuf`]: NCCL's buffers, a C caller's, a
//! received buffer sent back out). The ring takes the lease when the request is queued and gives
//! it back only with the request's *final* CQE — the one without `IORING_CQE_F_MORE`
//! (io_uring_prep_send_zc(3): a zero-copy send's final CQE is its notification). Beside each
//! lease the ring keeps the request's [`ReqState`] (zcnet-core, sans-IO): it says what each CQE
//! means (bytes, copied or not: an [`Outcome`], counted in [`Counts`]) and when the memory and
//! the tag are free. This module applies it and guarantees the memory rule, which is what makes
//! the API safe; the library's engine (`zcnet::engine`) is its face.
//!
//! A `SEND_ZC` refused before it ran (seen: `ENOMEM` when RLIMIT_MEMLOCK cannot cover the
//! pages it would pin, on a request linked after another) ends with a failed result *without*
//! `IORING_CQE_F_MORE`, yet the kernel still posts a notification for it later (Linux 6.18,
//! measured by the NCCL plugin's memlock test). The lease comes back with the failed result (the
//! kernel never pinned the bytes), but the tag is not handed out again until that stray
//! notification came, which the ring then swallows: a late notification can never be taken for
//! the next request's. One refused before its notification exists (`EINVAL` for
//! `IOSQE_CQE_SKIP_SUCCESS`, `ENOMEM` when the notification cannot be allocated) looks the same
//! and gets none: its tag is kept for good, which costs one idle table entry and nothing else
//! (nothing waits for it; tested).
//!
//! One drop rule: dropping the ring cancels every request in flight (IORING_OP_ASYNC_CANCEL by
//! tag, Linux 5.5) and waits up to [`DROP_WAIT`] for their final CQEs. A lease the kernel still
//! holds after that is leaked on purpose, with the ring itself, never freed under it
//! (`leaked_leases` counts them). A zero-copy send whose bytes a socket still holds ends only
//! when the socket lets go: an owner that can, resets its sockets before dropping the ring.
//!
//! Fixed buffers: a sparse table (IORING_REGISTER_BUFFERS2 with IORING_RSRC_REGISTER_SPARSE,
//! then IORING_REGISTER_BUFFERS_UPDATE, Linux 5.13) where the ring is made with room for some,
//! else one region registered whole (IORING_REGISTER_BUFFERS, Linux 5.1). Registration pins the
//! pages once instead of per request and charges RLIMIT_MEMLOCK unless the process has
//! CAP_IPC_LOCK (`ENOMEM`: the limit is too small; one buffer may not exceed 1 GiB).
//!
//! The other rings in this crate are separate for what they are: the provided-buffer receive
//! ring ([`crate::bufring`]: the kernel picks the buffer, multishot), the zcrx ring
//! ([`crate::zcrx`]: 32-byte CQEs and an interface queue registration). The deliberately minimal
//! loop zcnet's overhead is measured against is not the library's: it is zcnet-rawbench's
//! `baseline`.

use crate::foreign::ForeignBuf;
use crate::mem::{Mapping, Slot};
use crate::ring::{Core, TaskRun};
use io_uring::{opcode, squeue, types};
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use zcnet_core::{Counts, Outcome};
use zcnet_core::{Kind, ReqState};

static LEAKED: AtomicU64 = AtomicU64::new(0);

/// Leases leaked because the kernel still held them when their ring was dropped (0 in a healthy
/// process).
#[cfg(test)]
pub(crate) fn leaked_leases() -> u64 {
    LEAKED.load(Ordering::Relaxed)
}

/// How long dropping a ring waits for the final CQEs of the requests it cancelled.
pub const DROP_WAIT: Duration = Duration::from_secs(2);

/// `IORING_SEND_ZC_REPORT_USAGE` (include/uapi/linux/io_uring.h, Linux 6.2): ask the notification
/// to say whether the kernel copied. Not exported by the io-uring crate.
pub(crate) const IORING_SEND_ZC_REPORT_USAGE: u16 = 1 << 3;

/// Memory a request reads or fills, held by the ring until the request's final CQE.
#[derive(Debug)]
pub enum Lease {
    /// A slot of a region zcnet mapped.
    Slot(Slot),
    /// Memory foreign code lent, or bytes of our own in that shape ([`ForeignBuf::owned`]).
    Borrowed(Arc<ForeignBuf>),
}

impl Lease {
    /// Its address and length.
    pub(crate) fn range(&self) -> (usize, usize) {
        match self {
            Lease::Slot(s) => (s.addr(), s.len()),
            Lease::Borrowed(b) => (b.addr(), b.len()),
        }
    }

    /// The slot, if it is one.
    pub fn into_slot(self) -> Option<Slot> {
        match self {
            Lease::Slot(s) => Some(s),
            Lease::Borrowed(_) => None,
        }
    }
}

/// Memory foreign code registered for a while (NCCL's `regMr` .. `deregMr`), to become a fixed
/// buffer ([`Ring::register_foreign`]).
#[derive(Debug)]
pub struct ForeignMr {
    addr: usize,
    len: usize,
}

impl ForeignMr {
    /// `len` bytes at `addr`.
    ///
    /// # Safety
    /// `addr..addr + len` must stay mapped until the value is dropped (NCCL's contract between
    /// `regMr` and `deregMr`).
    pub unsafe fn new(addr: usize, len: usize) -> ForeignMr {
        ForeignMr { addr, len }
    }
}

/// What a fixed buffer entry keeps alive while registered.
#[derive(Debug)]
enum Fixed {
    Mapping(Arc<Mapping>),
    Foreign(ForeignMr),
    /// An entry the kernel would not let go of ([`Ring::unregister`] failed): it still holds
    /// the old pages, so it covers no address (memory now at the same addresses is other
    /// memory) and its index is not handed out again.
    Stale,
}

impl Fixed {
    fn range(&self) -> (usize, usize) {
        match self {
            Fixed::Mapping(m) => (m.addr(), m.len()),
            Fixed::Foreign(f) => (f.addr, f.len),
            Fixed::Stale => (0, 0),
        }
    }

    #[inline]
    fn covers(&self, addr: usize, len: usize) -> bool {
        if matches!(self, Fixed::Stale) {
            return false;
        }
        let (a, l) = self.range();
        // Below the start, the difference wraps past any length.
        let at = addr.wrapping_sub(a);
        at <= l && len <= l - at
    }
}

/// The operation of a [`Request`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// IORING_OP_SEND (the kernel copies): one CQE.
    Send,
    /// IORING_OP_SEND_ZC with usage reports, from fixed buffer `fixed` when given (see
    /// [`Ring::fixed_index`]): a result CQE, and a notification when the result has
    /// `IORING_CQE_F_MORE`.
    SendZc {
        /// The fixed buffer covering the bytes.
        fixed: Option<u16>,
    },
    /// IORING_OP_RECV into the bytes: one CQE.
    Recv,
}

/// One request on part of a lease.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    /// The socket.
    pub fd: RawFd,
    /// Offset of the bytes in the lease.
    pub off: usize,
    /// How many bytes.
    pub len: u32,
    /// The operation.
    pub op: Op,
    /// `msg_flags` (`MSG_NOSIGNAL` is always added to sends; `MSG_WAITALL` makes a short result
    /// on a stream mean the connection failed).
    pub flags: i32,
    /// `IOSQE_IO_LINK`: the next request starts only after this one succeeded.
    pub link: bool,
}

/// What the ring keeps per tag: the request's lease while the kernel may use it, and the
/// request's place in its CQE protocol (zcnet_core's [`ReqState`], the one reading of what each
/// CQE means). One entry per tag, so a completion touches one place.
#[derive(Debug, Default)]
struct Tag {
    lease: Option<Lease>,
    state: ReqState,
}

/// A completion, read: what it meant, with the lease if it was the request's final CQE for its
/// memory.
#[derive(Debug)]
pub struct Completion {
    /// The tag [`Ring::push`] gave the request.
    pub tag: u32,
    /// What it meant (counted in [`Ring::counts`]).
    pub outcome: Outcome,
    /// The lease, returned with the request's final CQE (and only then).
    pub lease: Option<Lease>,
}

/// Ring setup flags that worked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingFlags {
    /// IORING_SETUP_COOP_TASKRUN.
    pub(crate) coop_taskrun: bool,
}

/// An io_uring instance for requests on leased memory.
pub struct Ring {
    /// Dropped by hand: kept (leaked) when the kernel would not let go of a request.
    ring: ManuallyDrop<Core>,
    /// The lease and state of each request, by tag.
    held: Vec<Tag>,
    /// Tags not in flight, below `held.len()`.
    free: Vec<u32>,
    /// Leases held.
    in_flight: usize,
    /// Sends whose result has not come.
    awaiting_result: usize,
    /// What moved.
    counts: Counts,
    /// The fixed buffer table: sparse (`sparse`), or one region registered whole.
    fixed: Vec<Option<Fixed>>,
    sparse: bool,
    /// The socket registered as fixed file 0 ([`Ring::register_file`]).
    file: Option<RawFd>,
    flags: RingFlags,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("in_flight", &self.in_flight)
            .field("fixed_slots", &self.fixed.len())
            .field("flags", &self.flags)
            .finish()
    }
}

impl Ring {
    /// A ring of `entries` SQEs with room for `fixed_slots` fixed buffers (a sparse table; where
    /// the kernel refuses one, or with 0, [`Ring::register_mapping`] registers one region whole
    /// and [`Ring::register_foreign`] is refused). Tries IORING_SETUP_COOP_TASKRUN (5.19) and
    /// falls back to no flags.
    pub fn new(entries: u32, fixed_slots: u32) -> io::Result<Ring> {
        // COOP_TASKRUN with TASKRUN_FLAG (both Linux 5.19): the kernel flags pending work in
        // the SQ flags, so a non-blocking `submit` enters only when there is something to do.
        // Not DEFER_TASKRUN: a sender's ring may be used from more than one thread.
        let ring = Core::new(entries, None, TaskRun::Coop)?;
        let coop = ring.taskrun() == TaskRun::Coop;
        let sparse = fixed_slots > 0
            && ring
                .uring()
                .submitter()
                .register_buffers_sparse(fixed_slots)
                .is_ok();
        let mut fixed = Vec::new();
        if sparse {
            fixed.resize_with(fixed_slots as usize, || None);
        }
        Ok(Ring {
            ring: ManuallyDrop::new(ring),
            held: Vec::with_capacity(entries as usize),
            free: Vec::new(),
            in_flight: 0,
            awaiting_result: 0,
            counts: Counts::default(),
            fixed,
            sparse,
            file: None,
            flags: RingFlags { coop_taskrun: coop },
        })
    }

    /// The setup flags in force.
    pub fn flags(&self) -> RingFlags {
        self.flags
    }

    /// Registers `efd` (`IORING_REGISTER_EVENTFD`): the kernel signals it for every completion
    /// posted (and, on a DEFER_TASKRUN ring, when work is queued for the next wait), so an
    /// event loop can wait on it. The kernel takes its own reference: `efd` may be dropped
    /// later. `EBUSY` when one is registered already.
    pub fn register_eventfd(&self, efd: &crate::epoll::EventFd) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        self.ring
            .uring()
            .submitter()
            .register_eventfd(efd.as_raw_fd())
    }

    /// Whether the kernel supports IORING_OP_SEND_ZC (Linux 6.0).
    pub fn supports_send_zc(&self) -> io::Result<bool> {
        self.supports(opcode::SendZc::CODE)
    }

    /// Whether the kernel supports opcode `op` (IORING_REGISTER_PROBE).
    pub(crate) fn supports(&self, op: u8) -> io::Result<bool> {
        let mut probe = io_uring::Probe::new();
        self.ring.uring().submitter().register_probe(&mut probe)?;
        Ok(probe.is_supported(op))
    }

    fn update_fixed(&self, idx: usize, addr: usize, len: usize) -> io::Result<()> {
        let iov = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: the iovec covers memory the caller keeps mapped while registered (a mapping
        // we hold an Arc to, or a ForeignMr whose creator promised so), stored in
        // `self.fixed[idx]` until the entry is cleared again; an empty iovec clears the entry
        // and references no memory.
        unsafe {
            self.ring.uring().submitter().register_buffers_update(
                idx as u32,
                std::slice::from_ref(&iov),
                None,
            )?
        };
        Ok(())
    }

    fn add_fixed(&mut self, entry: Fixed) -> io::Result<u16> {
        let (addr, len) = entry.range();
        if self.sparse {
            let idx = self
                .fixed
                .iter()
                .position(Option::is_none)
                .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOSPC))?;
            self.update_fixed(idx, addr, len)?;
            self.fixed[idx] = Some(entry);
            return Ok(idx as u16);
        }
        if !self.fixed.is_empty() {
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        let iov = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: as in `update_fixed`: the entry is kept in `self.fixed` while registered.
        unsafe {
            self.ring
                .uring()
                .submitter()
                .register_buffers(std::slice::from_ref(&iov))?
        };
        self.fixed.push(Some(entry));
        Ok(0)
    }

    /// Makes `map` a fixed buffer; its index. The ring keeps an Arc to it while registered.
    /// Without a sparse table only one can be registered (`EBUSY` for a second).
    pub fn register_mapping(&mut self, map: &Arc<Mapping>) -> io::Result<u16> {
        self.add_fixed(Fixed::Mapping(Arc::clone(map)))
    }

    /// Makes `mr` a fixed buffer; its index. `ENOSPC` when the table is full or the ring has
    /// no sparse table.
    pub fn register_foreign(&mut self, mr: ForeignMr) -> io::Result<u16> {
        if !self.sparse {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        self.add_fixed(Fixed::Foreign(mr))
    }

    /// Clears fixed buffer `idx` (requests in flight keep the pages pinned until they end).
    /// Where the kernel refuses, the entry is kept as covering nothing: the caller may free
    /// the memory, and new memory at the same addresses must never be sent from the old pages.
    pub fn unregister(&mut self, idx: u16) -> io::Result<()> {
        let i = usize::from(idx);
        if self
            .fixed
            .get(i)
            .and_then(Option::as_ref)
            .is_none_or(|f| matches!(f, Fixed::Stale))
        {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let done = if self.sparse {
            self.update_fixed(i, 0, 0)
        } else {
            self.ring.uring().submitter().unregister_buffers()
        };
        if let Err(e) = done {
            self.fixed[i] = Some(Fixed::Stale);
            return Err(e);
        }
        if self.sparse {
            self.fixed[i] = None;
        } else {
            self.fixed.clear();
        }
        Ok(())
    }

    /// The fixed buffer covering `addr..addr + len`, if one does.
    pub fn fixed_index(&self, addr: usize, len: usize) -> Option<u16> {
        self.fixed
            .iter()
            .position(|m| m.as_ref().is_some_and(|m| m.covers(addr, len)))
            .map(|i| i as u16)
    }

    /// Registers `fd` as fixed file 0 (IORING_REGISTER_FILES, Linux 5.1): requests on `fd` then
    /// name it by index (`IOSQE_FIXED_FILE`), which spares the kernel a file lookup and a
    /// reference count per request. The ring holds its own reference to the file until it is
    /// dropped. The caller keeps `fd` open, and names no other file by that number, for as long
    /// as it queues requests on this ring: a request whose `fd` equals `fd` goes to the
    /// registered file. Only one file: a second call is `EBUSY`.
    pub fn register_file(&mut self, fd: RawFd) -> io::Result<()> {
        if self.file.is_some() {
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        self.ring.uring().submitter().register_files(&[fd])?;
        self.file = Some(fd);
        Ok(())
    }

    /// Requests queued or running whose memory the kernel may still use.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Sends whose result has not come (their bytes may not be in the socket yet).
    pub fn awaiting_result(&self) -> usize {
        self.awaiting_result
    }

    /// What moved so far, as the kernel reported it.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    #[inline]
    fn take_tag(&mut self) -> u32 {
        match self.free.pop() {
            Some(t) => t,
            None => {
                self.held.push(Tag::default());
                (self.held.len() - 1) as u32
            }
        }
    }

    /// Queues `req` on `lease`; the request's tag (unique among requests in flight, reused after
    /// its final CQE). The ring keeps the lease until that CQE. On error the lease is handed
    /// back: `EINVAL` when the bytes lie outside the lease, `EACCES` for a receive into
    /// read-only memory, `EBUSY` for a receive into bytes of our own ([`ForeignBuf::owned`])
    /// that another reference could read meanwhile (the ring must hold the only one: take the
    /// bytes back from the completion's lease), `EFAULT` when the fixed buffer named does not
    /// cover them, `EAGAIN` when the submission queue stays full.
    #[inline]
    pub fn push(&mut self, lease: Lease, req: &Request) -> Result<u32, (Lease, io::Error)> {
        let (addr, size) = lease.range();
        let inside = req
            .off
            .checked_add(req.len as usize)
            .is_some_and(|end| end <= size);
        if !inside {
            return Err((lease, io::Error::from_raw_os_error(libc::EINVAL)));
        }
        if req.op == Op::Recv {
            if let Lease::Borrowed(b) = &lease {
                if b.is_read_only() {
                    return Err((lease, io::Error::from_raw_os_error(libc::EACCES)));
                }
                // The kernel writes the bytes until the final CQE: no `&[u8]` to them may live
                // meanwhile. Foreign memory has that in `ForeignBuf::new`'s contract; our own
                // bytes have it only when the ring holds the one reference (none can be made
                // from it until the lease comes back).
                if b.is_owned() && (Arc::strong_count(b) != 1 || Arc::weak_count(b) != 0) {
                    return Err((lease, io::Error::from_raw_os_error(libc::EBUSY)));
                }
            }
        }
        let ptr = (addr + req.off) as *mut u8;
        if let Op::SendZc { fixed: Some(i) } = req.op {
            let ok = self
                .fixed
                .get(usize::from(i))
                .and_then(Option::as_ref)
                .is_some_and(|m| m.covers(ptr as usize, req.len as usize));
            if !ok {
                return Err((lease, io::Error::from_raw_os_error(libc::EFAULT)));
            }
        }
        let send_flags = req.flags | libc::MSG_NOSIGNAL;
        // The registered socket by index (no per-request file lookup), any other by number.
        let entry = match (self.file == Some(req.fd), req.op) {
            (true, Op::SendZc { fixed }) => opcode::SendZc::new(types::Fixed(0), ptr, req.len)
                .buf_index(fixed)
                .flags(send_flags)
                .zc_flags(IORING_SEND_ZC_REPORT_USAGE)
                .build(),
            (false, Op::SendZc { fixed }) => opcode::SendZc::new(types::Fd(req.fd), ptr, req.len)
                .buf_index(fixed)
                .flags(send_flags)
                .zc_flags(IORING_SEND_ZC_REPORT_USAGE)
                .build(),
            (true, Op::Send) => opcode::Send::new(types::Fixed(0), ptr, req.len)
                .flags(send_flags)
                .build(),
            (false, Op::Send) => opcode::Send::new(types::Fd(req.fd), ptr, req.len)
                .flags(send_flags)
                .build(),
            (true, Op::Recv) => opcode::Recv::new(types::Fixed(0), ptr, req.len)
                .flags(req.flags)
                .build(),
            (false, Op::Recv) => opcode::Recv::new(types::Fd(req.fd), ptr, req.len)
                .flags(req.flags)
                .build(),
        };
        let kind = match req.op {
            Op::Send => Kind::Send,
            Op::SendZc { .. } => Kind::SendZc,
            Op::Recv => Kind::Recv,
        };
        let entry = if req.link {
            entry.flags(squeue::Flags::IO_LINK)
        } else {
            entry
        };
        // SAFETY: the SQE points into the lease (bounds checked above).
        unsafe { self.queue(lease, entry, kind, req.len) }
    }

    /// Queues `entry`, a `kind` request of `len` bytes, on `lease` under a fresh tag (its user
    /// data): the ring's part of [`Ring::push`].
    ///
    /// # Safety
    ///
    /// `entry` references no memory but `lease`'s.
    #[inline(always)]
    unsafe fn queue(
        &mut self,
        lease: Lease,
        entry: squeue::Entry,
        kind: Kind,
        len: u32,
    ) -> Result<u32, (Lease, io::Error)> {
        let tag = self.take_tag();
        let entry = entry.user_data(u64::from(tag));
        // One view of the submission queue (each view reads the kernel's head when made and
        // publishes the tail when dropped): a second only where the queue was full.
        // SAFETY: the SQE points into the lease (the caller's promise); the lease is moved into
        // `self.held` below and given back only with this request's final CQE (or leaked with
        // the ring if the ring is dropped while the kernel still holds it), so the memory
        // outlives the kernel's use.
        let full = unsafe { self.ring.uring_mut().submission().push(&entry) }.is_err();
        if full {
            let pushed = match self.ring.uring().submit() {
                // SAFETY: as above, the same SQE and lease.
                Ok(_) => unsafe { self.ring.uring_mut().submission().push(&entry) }
                    .map_err(|_| io::Error::from_raw_os_error(libc::EAGAIN)),
                Err(e) => Err(e),
            };
            if let Err(e) = pushed {
                self.free.push(tag);
                return Err((lease, e));
            }
        }
        let t = &mut self.held[tag as usize];
        // A tag comes from the free list only once its request ended: the state is idle.
        let _ = t.state.submit(tag as usize, kind, len);
        t.lease = Some(lease);
        self.in_flight += 1;
        if kind != Kind::Recv {
            self.awaiting_result += 1;
            self.counts.sends += 1;
        }
        Ok(tag)
    }

    /// Entries the submission queue holds.
    pub fn sq_capacity(&mut self) -> usize {
        self.ring.uring_mut().submission().capacity()
    }

    /// SQEs queued and not yet handed to the kernel.
    pub fn queued(&mut self) -> usize {
        self.ring.uring_mut().submission().len()
    }

    /// Whether completions wait in the completion queue (no system call).
    pub fn completions_ready(&mut self) -> bool {
        !self.ring.uring_mut().completion().is_empty()
    }

    /// Submits queued SQEs and runs the work the kernel queued for this task (posting the
    /// completions it owes), without waiting; enters the kernel only when there is something
    /// to do: SQEs queued, work flagged (`IORING_SQ_TASKRUN`, with the TASKRUN_FLAG this ring
    /// is made with where COOP_TASKRUN is; without COOP_TASKRUN the kernel runs the work on
    /// its own) or completions in the overflow list. A poller calling this with nothing to do
    /// makes no system call. `EINTR`, `EAGAIN` and `EBUSY` are not errors: what is queued goes
    /// in with the next call.
    pub fn submit(&mut self) -> io::Result<()> {
        self.ring.submit()
    }

    /// Submits and waits for at least `want` completions or `timeout`, whichever first.
    /// A timeout is not an error; true when a signal cut the wait short (`EINTR`).
    pub fn submit_and_wait(&mut self, want: usize, timeout: Duration) -> io::Result<bool> {
        self.ring.wait(want, timeout)
    }

    /// Takes every available completion: reads it ([`ReqState::on_cqe`]), counts it, and hands
    /// it to `f` with the lease if it was the request's final CQE for its memory. The stray
    /// notification of a refused `SEND_ZC` frees its tag and is not handed on.
    #[inline]
    pub fn drain(&mut self, mut f: impl FnMut(Completion)) {
        let mut cq = self.ring.uring_mut().completion();
        cq.sync();
        for cqe in &mut cq {
            let ud = cqe.user_data();
            let tag = ud as u32;
            let Some(t) = self.held.get_mut(ud as usize) else {
                // CANCEL_TAG, or nothing this ring handed out.
                continue;
            };
            let (res, flags) = (cqe.result(), cqe.flags());
            let awaited = t.state.awaits_send_result();
            let step = t.state.on_cqe(tag as usize, res, flags);
            if awaited && !t.state.awaits_send_result() {
                self.awaiting_result -= 1;
            }
            let lease = if step.released { t.lease.take() } else { None };
            if lease.is_some() {
                self.in_flight -= 1;
            }
            if step.ended {
                self.free.push(tag);
            }
            let Some(outcome) = step.outcome else {
                continue;
            };
            self.counts.add(&outcome);
            f(Completion {
                tag,
                outcome,
                lease,
            });
        }
    }

    /// Cancels every request in flight and waits up to `timeout` for their final CQEs (handed
    /// to `f`); whether none is left. A zero-copy send whose data a socket still holds ends
    /// only when the socket lets go of it: close or reset the socket to hurry it.
    pub fn cancel_all(&mut self, timeout: Duration, mut f: impl FnMut(Completion)) -> bool {
        if self.in_flight == 0 {
            return true;
        }
        let tags: Vec<u64> = (0..self.held.len())
            .filter(|&t| self.held[t].lease.is_some())
            .map(|t| t as u64)
            .collect();
        for t in tags {
            // Queued only: they go in with the first wait below.
            let _ = self.ring.queue_cancel(t);
        }
        Core::settle(
            self,
            |r| &mut *r.ring,
            timeout,
            |r| {
                r.drain(&mut f);
                if r.in_flight != 0 {
                    return false;
                }
                // The cancels still queued go in now: one left queued could otherwise reach a
                // later request that reused its tag, if the ring lives on.
                let _ = r.ring.uring().submit();
                true
            },
        )
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        if self.cancel_all(DROP_WAIT, drop) {
            // SAFETY: nothing is in flight, and `self.ring` is not used after this; the fixed
            // buffers' owners (`self.fixed`) are dropped after the ring that registered them.
            unsafe { ManuallyDrop::drop(&mut self.ring) };
            return;
        }
        // The kernel still holds requests after cancellation and the wait. Their memory must
        // never be freed or reused: leak the leases, the registered buffers and the ring.
        let leaked = self.held.iter().filter(|t| t.lease.is_some()).count() as u64;
        LEAKED.fetch_add(leaked, Ordering::Relaxed);
        std::mem::forget(std::mem::take(&mut self.held));
        std::mem::forget(std::mem::take(&mut self.fixed));
    }
}

#[cfg(test)]
mod tests;
