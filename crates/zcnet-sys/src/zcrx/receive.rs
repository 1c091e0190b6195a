//! Receiving on a registered ifq (see the parent module).

use super::*;
// ---------------------------------------------------------------------------------------------
// Receiving: multishot RECV_ZC requests on a registered ifq, their 32-byte completions, and the
// fragments the application reads until it gives them back.
// ---------------------------------------------------------------------------------------------

use io_uring::{opcode, types};
use std::time::Duration;
use zcnet_core::rxring::{Frag, RecvZcCqe, RxError, RxEvent, ZcrxRx};

/// `user_data` of the cancel requests [`ZcrxReceiver`] submits (the ring core's); never a
/// connection's.
pub(crate) const ZCRX_CANCEL_TAG: u64 = crate::ring::CANCEL_TAG;

/// The index of interface `name` in the *calling thread's* network namespace
/// (`if_nametoindex(3)`, an ioctl on a socket of that namespace); `None` when there is none.
/// Unlike `/sys/class/net`, which shows the namespace sysfs was mounted in, this follows a
/// thread that moved with `setns`.
pub fn if_index(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: `c` is a NUL-terminated string that outlives the call; if_nametoindex only reads it.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (idx != 0).then_some(idx)
}

/// The name of interface `index` in the calling thread's network namespace
/// (`if_indextoname(3)`); `None` when there is none.
pub fn if_name(index: u32) -> Option<String> {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: `buf` holds IF_NAMESIZE bytes, the most if_indextoname writes (the name and its
    // NUL); it returns NULL, writing nothing usable, when there is no such interface.
    let p = unsafe { libc::if_indextoname(index, buf.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: on success `buf` holds a NUL-terminated name.
    let name = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    Some(name.to_string_lossy().into_owned())
}

/// Completion-queue entries of the ring [`receive_ring`] makes (the `*_for_receive` ifqs'): every
/// received fragment is one CQE, and a RECV_ZC request that finds the CQ full ends with
/// `-ENOSPC` (io_uring/zcrx.c `io_zcrx_queue_cqe`), so the CQ is sized for a burst.
pub(crate) const RECEIVE_CQ_ENTRIES: u32 = 4096;
/// Submission-queue entries of that ring (arms and cancels only).
pub(crate) const RECEIVE_SQ_ENTRIES: u32 = 64;

/// A ring sized for receiving: [`RECEIVE_SQ_ENTRIES`] SQEs and [`RECEIVE_CQ_ENTRIES`] CQEs,
/// SINGLE_ISSUER|DEFER_TASKRUN|CQE32.
fn receive_ring() -> io::Result<ZcrxRing> {
    ZcrxRing::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_taskrun_flag()
        .setup_cqsize(RECEIVE_CQ_ENTRIES)
        .build(RECEIVE_SQ_ENTRIES)
}

impl ZcrxIfq {
    /// As [`Self::register`], with a ring sized for receiving: `RECEIVE_SQ_ENTRIES` SQEs and
    /// `RECEIVE_CQ_ENTRIES` CQEs (SINGLE_ISSUER|DEFER_TASKRUN|CQE32). On error nothing stays
    /// pinned or open.
    #[cfg(test)]
    pub(crate) fn register_for_receive(
        ifindex: u32,
        rx_queue: u32,
        area_len: usize,
        rq_entries: u32,
    ) -> io::Result<ZcrxIfq> {
        if area_len == 0 {
            return Err(einval());
        }
        let ring = receive_ring()?;
        let area = Mapping::anonymous(area_len)?;
        Self::register_on(ring, ifindex, rx_queue, area, rq_entries).map(Self::with_taskrun_flag)
    }

    /// As `Self::register_host_on` with a ring sized for receiving (`RECEIVE_SQ_ENTRIES`
    /// SQEs, `RECEIVE_CQ_ENTRIES` CQEs): the way to ask for a buffer size
    /// ([`HostRegistration::rx_buf_len`], with an area of huge pages). On error nothing stays
    /// pinned or open.
    pub fn register_for_receive_with(area: Mapping, reg: HostRegistration) -> io::Result<ZcrxIfq> {
        Self::register_host_on(receive_ring()?, area, reg).map(Self::with_taskrun_flag)
    }

    /// Marks an ifq whose ring [`receive_ring`] made (with `IORING_SETUP_TASKRUN_FLAG`).
    fn with_taskrun_flag(mut self) -> ZcrxIfq {
        self.ring.mark_taskrun_flag();
        self
    }

    /// With a ring sized for receiving, as [`Self::register_for_receive_with`], but without a
    /// network device (`Self::register_nodev_on`, Linux 7.1+): an area of `area_len` bytes of
    /// anonymous memory that the kernel copies every received byte into. On error nothing
    /// stays pinned or open.
    pub fn register_nodev_for_receive(area_len: usize, rq_entries: u32) -> io::Result<ZcrxIfq> {
        if area_len == 0 {
            return Err(einval());
        }
        let ring = receive_ring()?;
        let area = Mapping::anonymous(area_len)?;
        Self::register_nodev_on(ring, area, rq_entries).map(Self::with_taskrun_flag)
    }

    /// With a ring sized for receiving, as [`Self::register_for_receive_with`], on queue
    /// `rx_queue` of `ifindex` with a dma-buf area of `len` bytes at `offset` of `dmabuf`
    /// (`Self::register_dmabuf_on`: Linux 6.16+; 6.18 wants `offset` 0 and `len` the dma-buf's
    /// size). On error nothing stays registered or open (`dmabuf` is the caller's).
    pub fn register_dmabuf_for_receive(
        ifindex: u32,
        rx_queue: u32,
        dmabuf: Arc<OwnedFd>,
        offset: u64,
        len: u64,
        rq_entries: u32,
    ) -> io::Result<ZcrxIfq> {
        let ring = receive_ring()?;
        Self::register_dmabuf_on(ring, ifindex, rx_queue, dmabuf, offset, len, rq_entries)
            .map(Self::with_taskrun_flag)
    }
}

/// One RECV_ZC completion read by [`ZcrxReceiver::drain`]: the raw fields and what the
/// bookkeeping ([`ZcrxRx::on_cqe32`]) made of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZcrxCompletion {
    /// `user_data`, `res`, `flags` and the `io_uring_zcrx_cqe` offset.
    pub cqe: RecvZcCqe,
    /// A fragment now held by the application, the end of the request (EOF, re-arm, error), or
    /// a completion that contradicts the protocol (nothing changed then).
    pub event: Result<RxEvent, RxError>,
}

/// What [`ZcrxReceiver::flush_refills`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RefillFlush {
    /// Entries pushed into the refill ring and published.
    pub(crate) pushed: usize,
    /// Released fragments still waiting because the refill ring was full.
    pub waiting: usize,
}

/// Zero-copy receive on a registered [`ZcrxIfq`] with its bookkeeping ([`ZcrxRx`]): arms
/// multishot RECV_ZC requests on sockets, reads their 32-byte completions, lends the received
/// fragments and returns them through the refill ring.
///
/// The one rule memory safety rests on lives here: [`Self::bytes`] gives a fragment's bytes only
/// while the bookkeeping says the application holds it (delivered by a data completion, not
/// released). Its refill entry — after which the NIC may write the buffer again — can only be
/// pushed by [`Self::flush_refills`], which takes `&mut self`, so no slice from `bytes` outlives
/// the fragment's return.
///
/// Requests are `IORING_OP_RECV_ZC` with `IORING_RECV_MULTISHOT` and `len` 0 (6.18 rejects
/// RECV_ZC without the multishot flag, io_uring/net.c `io_recvzc_prep`; `len` 0 means no byte
/// limit) and `zcrx_ifq_idx` = `ZcrxIfq::id`. The request runs until the stream ends
/// (`res` 0), fails, is cancelled, or the kernel ends it with `-ENOSPC` (no CQ room), `-ENOMEM`
/// (no free buffer for the copy fallback) or `-EINTR`: then re-arm ([`RxEvent::Rearm`]).
/// Data arriving on another queue than the registered one (flow not steered) is *copied* into
/// the area by the kernel (`io_zcrx_copy_chunk`), indistinguishably in 6.18's completions.
///
/// dma-buf areas (`IORING_ZCRX_AREA_DMABUF`, 6.16+: `area.flags`, `area.dmabuf_fd`, `addr` the
/// offset in the dma-buf; [`ZcrxIfq::register_dmabuf_for_receive`]) fit the same shape:
/// completions carry offsets within the area, the refill ring and the bookkeeping are the same,
/// and only `bytes` changes — it returns `None` (device memory) and callers describe the
/// fragment as a device range instead ([`dmabuf_range`]). Data the kernel would have
/// to copy ends the request instead of being copied: `-EFAULT` before Linux 6.18, `-ENOMEM`
/// since (see the module docs).
///
/// Like the ring, it must stay on the thread that made it (SINGLE_ISSUER; `!Send`).
pub struct ZcrxReceiver {
    ifq: ZcrxIfq,
    core: ZcrxRx,
    events: ZcrxEvents,
}

/// The kernel's zcrx events seen by a [`ZcrxReceiver`] (Linux 7.2: `ZCRX_EVENT_*` completions
/// with `ZCRX_EVENT_TAG`, asked for where the kernel says it has them). Each type fires once
/// until re-armed: ALLOC_FAIL is re-armed by [`ZcrxReceiver::flush_refills`] once buffers went
/// back (one event per drought), COPY only by `ZcrxReceiver::rearm_event` (the statistics
/// count every copy: the event only says copying happened).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ZcrxEvents {
    /// `ZCRX_EVENT_ALLOC_FAIL`: the device's page pool found no free buffer in the area
    /// (every buffer held by the application or waiting to be refilled): packets may have
    /// been dropped and retransmitted. Device mode only: without a device the kernel ends the
    /// request with `-ENOMEM` instead.
    pub alloc_fail: u64,
    /// `ZCRX_EVENT_COPY`: the kernel copied received data into the area.
    pub(crate) copy: u64,
    /// Event completions of a type zcnet does not know.
    pub(crate) other: u64,
    /// Types that fired and are not re-armed yet (`1 << ZCRX_EVENT_*`).
    pub(crate) fired: u32,
}

impl std::fmt::Debug for ZcrxReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZcrxReceiver")
            .field("ifq", &self.ifq)
            .field("stats", self.core.stats())
            .field("events", &self.events)
            .finish()
    }
}

impl ZcrxReceiver {
    /// Receiving on `ifq`: its whole area in buffers of `ZcrxIfq::buf_len` (one `net_iov`
    /// each, `io_zcrx_create_area`; a page unless a larger `rx_buf_len` was granted), every
    /// one the kernel's.
    pub fn new(ifq: ZcrxIfq) -> io::Result<ZcrxReceiver> {
        let core = ZcrxRx::with_buf_size(ifq.area_len() as u64, ifq.buf_len(), ifq.area_token())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        Ok(ZcrxReceiver {
            ifq,
            core,
            events: ZcrxEvents::default(),
        })
    }

    /// The kernel's events seen so far ([`ZcrxEvents`]).
    pub fn events(&self) -> ZcrxEvents {
        self.events
    }

    /// Lets event type `ty` (`ZCRX_EVENT_*`) fire again ([`ZcrxIfq::arm_event`]); nothing to
    /// do (`Ok`) when it has not fired since it was last armed.
    pub(crate) fn rearm_event(&mut self, ty: u32) -> io::Result<()> {
        if ty >= 32 || self.events.fired & (1 << ty) == 0 {
            return Ok(());
        }
        self.ifq.arm_event(ty)?;
        self.events.fired &= !(1 << ty);
        Ok(())
    }

    /// The registration (interface, queue, area, refill ring).
    pub fn ifq(&self) -> &ZcrxIfq {
        &self.ifq
    }

    /// The bookkeeping: counters, held fragments, queued refills.
    pub fn core(&self) -> &ZcrxRx {
        &self.core
    }

    /// Arms a multishot RECV_ZC on socket `fd` for `user_data` (unique among armed requests,
    /// else `EBUSY`; not `ZCRX_CANCEL_TAG` or `ZCRX_EVENT_TAG`, else `EINVAL`) and submits it. The caller keeps
    /// `fd` open until the request's final completion. If `io_uring_enter` fails for good the
    /// error is returned but the SQE stays queued and counts as armed: it goes in with the next
    /// [`Self::wait`].
    pub fn arm(&mut self, fd: std::os::fd::RawFd, user_data: u64) -> io::Result<()> {
        if user_data == ZCRX_CANCEL_TAG || user_data == ZCRX_EVENT_TAG {
            return Err(einval());
        }
        if self.core.is_armed(user_data) {
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        let sqe = opcode::RecvZc::new(types::Fd(fd), 0)
            .ifq(self.ifq.id())
            .build()
            .user_data(user_data);
        self.push(&sqe)?;
        // Cannot fail: not armed (checked above) and len 0.
        self.core.arm(user_data, 0).map_err(|_| einval())?;
        self.ifq.ring_mut().submit()
    }

    /// Asks the kernel to cancel request `user_data` (`IORING_OP_ASYNC_CANCEL` by user_data) and
    /// submits. Its final completion (`-ECANCELED`, or whatever ended it first) arrives through
    /// [`Self::drain`]. `ENOENT` when no such request is armed.
    pub fn cancel(&mut self, user_data: u64) -> io::Result<()> {
        if !self.core.is_armed(user_data) {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        self.ifq.ring_mut().cancel(user_data)
    }

    /// Whether request `user_data` is armed (its final completion not yet drained).
    pub fn is_armed(&self, user_data: u64) -> bool {
        self.core.is_armed(user_data)
    }

    /// Queues an SQE that references no user memory.
    fn push(&mut self, sqe: &squeue::Entry) -> io::Result<()> {
        // SAFETY: RECV_ZC SQEs carry no pointer: the kernel writes into the area registered
        // with the ifq, which `self` owns until the ring is closed.
        unsafe { self.ifq.ring_mut().push_unowned(sqe) }
    }

    /// Pushes released fragments' refill entries, oldest first, into the refill ring and
    /// publishes them. Entries that do not fit wait for the next flush (counted in the
    /// bookkeeping's `refill_starved`). On a NODEV ifq ([`ZcrxIfq::is_nodev`]) the kernel is
    /// then told to consume them (`ZcrxIfq::flush_refill_queue`): nothing else would, and
    /// receiving would stall once the area is out. Its error is the only one.
    pub fn flush_refills(&mut self) -> io::Result<RefillFlush> {
        let ZcrxReceiver { ifq, core, .. } = self;
        let pushed = core.flush_refills(|e| ifq.refill_push(e.off, e.len));
        if pushed > 0 {
            ifq.refill_commit();
            if ifq.is_nodev() {
                ifq.flush_refill_queue()?;
            }
            // Buffers went back: the next drought is a new one.
            self.rearm_event(ZCRX_EVENT_ALLOC_FAIL)?;
        }
        let core = &self.core;
        Ok(RefillFlush {
            pushed,
            waiting: core.queued_refills(),
        })
    }

    /// Submits what is queued and waits for at least `min` completions or `timeout`. With
    /// DEFER_TASKRUN the kernel does the receive work inside this call. A timeout or `EINTR`
    /// is not an error.
    pub fn wait(&mut self, min: usize, timeout: Duration) -> io::Result<()> {
        self.ifq.ring_mut().wait(min, timeout).map(drop)
    }

    /// Hands every available RECV_ZC completion to `f`, interpreted by the bookkeeping: a data
    /// completion's fragment is held by the application from then on, until
    /// [`Self::release`]d. Cancel completions are consumed here, and so are event completions
    /// (counted in [`Self::events`]).
    pub fn drain(&mut self, mut f: impl FnMut(ZcrxCompletion)) {
        let ZcrxReceiver { ifq, core, events } = self;
        let mut cq = ifq.ring_mut().uring_mut().completion();
        cq.sync();
        for cqe in &mut cq {
            if cqe.user_data() == ZCRX_CANCEL_TAG {
                continue;
            }
            if cqe.user_data() == ZCRX_EVENT_TAG {
                // io_uring/zcrx.c zcrx_send_notif: an auxiliary CQE, `res` the event type.
                match u32::try_from(cqe.result()) {
                    Ok(ZCRX_EVENT_ALLOC_FAIL) => events.alloc_fail += 1,
                    Ok(ZCRX_EVENT_COPY) => events.copy += 1,
                    _ => events.other += 1,
                }
                if let Ok(ty @ 0..=31) = u32::try_from(cqe.result()) {
                    events.fired |= 1 << ty;
                }
                continue;
            }
            let c = RecvZcCqe {
                user_data: cqe.user_data(),
                res: cqe.result(),
                flags: cqe.flags(),
                off: cqe.big_cqe()[0],
            };
            let event = core.on_cqe32(&c);
            f(ZcrxCompletion { cqe: c, event });
        }
    }

    /// The bytes of `frag` while the application holds it (see the type's docs); `None` for
    /// anything else (never delivered, released, a sub-range, outside the area) and for every
    /// fragment of a dma-buf area.
    pub fn bytes(&self, frag: Frag) -> Option<&[u8]> {
        if !self.core.is_held(frag) {
            return None;
        }
        // SAFETY: the bookkeeping says `frag` was delivered by a RECV_ZC data completion and has
        // not been released since, so its refill entry has not been pushed and the kernel does
        // not write those bytes; pushing one needs `&mut self`, which the returned borrow of
        // `self` excludes until the slice is gone.
        unsafe { self.ifq.area_bytes(frag.off, frag.len as usize) }
    }

    /// The application is done with `frag`: its refill entry is queued for the next
    /// [`Self::flush_refills`]. Refuses a fragment not held (never delivered, or released).
    pub fn release(&mut self, frag: Frag) -> Result<(), RxError> {
        self.core.release(frag)
    }
}

fn einval() -> io::Error {
    io::Error::from_raw_os_error(libc::EINVAL)
}
