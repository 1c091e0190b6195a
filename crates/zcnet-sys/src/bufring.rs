//! Multishot receive into a provided buffer ring (`IORING_REGISTER_PBUF_RING`, Linux 5.19;
//! bundles: `IORING_RECVSEND_BUNDLE`, Linux 6.10).
//!
//! A [`RecvRing`] owns an io_uring, a buffer area cut into `nbufs` buffers of `buf_size` bytes,
//! and the ring of `struct io_uring_buf` entries through which it lends those buffers to the
//! kernel. A multishot `IORING_OP_RECV` armed with [`RecvRing::arm`] picks a buffer from the head
//! of that ring for every chunk of data it receives and posts one CQE per chunk naming the buffer
//! id (`IORING_CQE_F_BUFFER`, id in the upper 16 bits of `cqe->flags`).
//!
//! # Who may touch a buffer
//! Every buffer is either *in the kernel* (published in the ring, or taken by the kernel and its
//! CQE not yet drained) or *held* by the application (its CQE was drained and it was not recycled
//! yet). [`RecvRing::buf`] and [`RecvRing::segments`] give `&[u8]` access to held buffers only
//! and borrow the ring, so no slice survives a [`RecvRing::recycle`] (`&mut self`); recycling a
//! buffer that is not held (twice, or never received) is refused with `EINVAL` and leaves the ring
//! untouched.
//!
//! # Bundles
//! With `IORING_RECVSEND_BUNDLE` one CQE may cover several buffers: `res` bytes were written to
//! the buffers taken *in ring order* from the ring's head, starting with the buffer whose id is in
//! the CQE. The kernel counts them in `io_bundle_nbufs()` (io_uring/net.c): whole iovecs while
//! bytes remain, i.e. `ceil(res / buf_size)` here since every entry this module publishes has
//! `len = buf_size` (when the kernel truncates an entry to the bytes queued on the socket it does
//! so only for the last one it maps, io_ring_buffers_peek() in io_uring/kbuf.c); a CQE with
//! `res <= 0` covers none. Ring order is not id order (the application recycles in any order), so
//! this module keeps a shadow copy of the ids it published at each ring position and links the
//! buffers of one completion together; [`RecvRing::segments`] walks them.
//!
//! # When the multishot ends
//! A CQE without `IORING_CQE_F_MORE` ends the request ([`RecvCompletion::more`] is false):
//! * `Ok(0)`: end of stream;
//! * `Err(ENOBUFS)`: the buffer ring was empty; recycle buffers and [`arm`](RecvRing::arm) again;
//! * with bundles, a data CQE (`Ok(n)`, `n > 0`) may also come without `F_MORE` when the kernel
//!   emptied the ring with it (io_recv_finish(): "bundle with no more immediate buffers, we're
//!   done"): the data is valid, and the request must be re-armed as after `ENOBUFS`;
//! * `Err(ECANCELED)` or another error.
//!
//! # Setup flags
//! The ring is created with `IORING_SETUP_SINGLE_ISSUER|IORING_SETUP_DEFER_TASKRUN` (Linux 6.1),
//! falling back to `IORING_SETUP_COOP_TASKRUN`, then to none, on `EINVAL`. With `DEFER_TASKRUN`
//! the receives run inside `io_uring_enter(GETEVENTS)` — i.e. in [`RecvRing::wait`], right before
//! the application drains them — instead of as task work at any return to user space (with
//! `COOP_TASKRUN`, after every unrelated `sendmsg` of the same thread), so the bytes are still in
//! the cache when the application reads them: measured on an RPC echo over veth, server CPU per
//! request 21.3 → 18.1 µs (docs/perf.md). The price: only the thread that created the ring may
//! submit or wait (others get `EEXIST`), and [`RecvRing::drain`] sees nothing unless
//! [`RecvRing::wait`] ran first. The value stays `Send` (moving it is memory-safe), but use it on
//! the thread that made it; `RecvRing::defer_taskrun` (crate-private, for the tests) says which
//! mode is in force.

use crate::epoll::ReturnQueue;
use crate::mem::{Mapping, Slot};
use crate::ring::{Core, TaskRun, CANCEL_TAG};
use io_uring::{cqueue, opcode, types};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The largest buffer ring the kernel accepts (io_register_pbuf_ring(): `ring_entries` must be a
/// power of two below 65536; the 16-bit tail limits it to 32768, io_uring_register_buf_ring(3)).
pub const MAX_BUFS: u32 = 32768;

/// "No buffer" in the chain tables (ids are below [`MAX_BUFS`]).
const NONE: u16 = u16::MAX;

/// `struct io_uring_buf` (include/uapi/linux/io_uring.h). The ring's tail overlays `resv` of
/// entry 0 (`struct io_uring_buf_ring`: `__u64 resv1; __u32 resv2; __u16 resv3; __u16 tail;`).
#[repr(C)]
struct IoUringBuf {
    addr: u64,
    len: u32,
    bid: u16,
    resv: u16,
}

const _: () = assert!(std::mem::size_of::<IoUringBuf>() == 16);
const _: () = assert!(std::mem::size_of::<types::BufRingEntry>() == 16);
const _: () = assert!(std::mem::offset_of!(IoUringBuf, resv) == 14);

/// One receive completion.
#[derive(Debug)]
pub struct RecvCompletion {
    /// The `user_data` the request was armed with.
    pub user_data: u64,
    /// Bytes received (`Ok(0)` is end of stream), or the kernel's errno (`ENOBUFS`: the buffer
    /// ring ran dry; `ECANCELED`: cancelled).
    pub result: io::Result<usize>,
    /// The first buffer holding the data, now held by the application; `None` when the CQE
    /// carried no buffer.
    pub buf_id: Option<u16>,
    /// How many buffers the data spans (0 without a buffer, 1 without bundles,
    /// `ceil(len / buf_size)` with them). They are linked in ring order, see
    /// [`RecvRing::segments`].
    pub buf_count: u16,
    /// `IORING_CQE_F_MORE`: the request stays armed. When false, it has ended.
    pub more: bool,
    /// Which reception of `buf_id` this is: a stale completion whose buffers were recycled and
    /// received again by a later CQE is refused by [`RecvRing::segments`].
    seq: u64,
}

/// Counters since the ring was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecvStats {
    /// CQEs handed to [`RecvRing::drain`]'s callback.
    pub(crate) completions: u64,
    /// Completions with `ENOBUFS` (the ring ran dry and the multishot ended).
    pub enobufs: u64,
    /// Bytes received.
    pub(crate) bytes: u64,
    /// CQEs whose buffer id did not match the id this ring published at the kernel's head
    /// (should stay 0; the CQE's id is trusted).
    pub desyncs: u64,
}

/// A multishot request armed on the ring.
#[derive(Debug, Clone, Copy)]
struct Armed {
    user_data: u64,
    bundle: bool,
}

mod held;
mod target;
pub use held::HeldBuf;
use target::Target;

/// An io_uring with a registered provided-buffer ring for multishot receives.
pub struct RecvRing {
    ring: Core,
    /// The `io_uring_buf` entries, shared with the kernel (registered under `bgid`).
    ring_mem: Option<Mapping>,
    /// Base of `ring_mem`, as a pointer for writing entries.
    entries: *mut IoUringBuf,
    /// The buffers, by id, each typed by who may touch it ([`target::Target`]): the kernel's
    /// have no way to their bytes.
    bufs: Vec<Target>,
    /// Where a dropped [`HeldBuf`] goes (a lease that ended, or a handle nobody gave back):
    /// given back at the next wait, or [`reclaim_lent`](Self::reclaim_lent).
    lent_back: Arc<ReturnQueue<u16>>,
    /// Ids of one completion's buffers, in ring order.
    next: Vec<u16>,
    prev: Vec<u16>,
    /// The completion (`seq`) each held buffer was received with.
    owner: Vec<u64>,
    /// Completions with buffers so far.
    seq: u64,
    /// The id published at each ring position (`pos & mask`).
    shadow: Vec<u16>,
    /// Next ring position the kernel will take, as far as drained CQEs tell.
    head: u16,
    /// Next ring position to publish into (the value of the shared tail).
    tail: u16,
    mask: u16,
    buf_size: u32,
    bgid: u16,
    registered: bool,
    armed: Vec<Armed>,
    stats: RecvStats,
}

// SAFETY: `entries` points into `ring_mem`, which the value owns; nothing about it is tied to a
// thread. With SINGLE_ISSUER a move to another thread makes the kernel refuse its submissions
// (EEXIST), which is an error, not memory unsafety.
unsafe impl Send for RecvRing {}

impl std::fmt::Debug for RecvRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvRing")
            .field("nbufs", &self.bufs.len())
            .field("buf_size", &self.buf_size)
            .field("bgid", &self.bgid)
            .field("held", &self.held_count())
            .field("armed", &self.armed)
            .field("stats", &self.stats)
            .finish()
    }
}

fn einval() -> io::Error {
    io::Error::from_raw_os_error(libc::EINVAL)
}

impl RecvRing {
    /// A ring with `entries` SQEs and `nbufs` buffers (a power of two, at most [`MAX_BUFS`]) of
    /// `buf_size` bytes, registered as buffer group `bgid`; every buffer starts in the kernel.
    pub fn new(entries: u32, nbufs: u32, buf_size: u32, bgid: u16) -> io::Result<RecvRing> {
        if nbufs == 0 || !nbufs.is_power_of_two() || nbufs > MAX_BUFS || buf_size == 0 {
            return Err(einval());
        }
        let area = (nbufs as usize)
            .checked_mul(buf_size as usize)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        // One CQE per buffer at most, plus the final CQEs: a CQ this big cannot overflow while
        // the application drains it before recycling.
        let cq = nbufs.saturating_add(entries.saturating_mul(2));
        let ring = Core::new(entries, Some(cq), TaskRun::Defer)?;
        let (_, bufs) = Mapping::anonymous(area)?.into_slots(buf_size as usize, nbufs as usize)?;
        // Page-aligned (mmap), zero-filled: the tail starts at 0.
        let ring_mem = Mapping::anonymous(nbufs as usize * std::mem::size_of::<IoUringBuf>())?;
        let entries_ptr = ring_mem.addr() as *mut IoUringBuf;
        let n = nbufs as usize;
        let mut rr = RecvRing {
            ring,
            ring_mem: Some(ring_mem),
            entries: entries_ptr,
            bufs: bufs.into_iter().map(Target::held).collect(),
            lent_back: Arc::default(),
            next: vec![NONE; n],
            prev: vec![NONE; n],
            owner: vec![0; n],
            seq: 0,
            shadow: vec![NONE; n],
            head: 0,
            tail: 0,
            // nbufs <= 32768, so nbufs - 1 fits.
            mask: (nbufs - 1) as u16,
            buf_size,
            bgid,
            registered: false,
            armed: Vec::new(),
            stats: RecvStats::default(),
        };
        // SAFETY: `entries_ptr` is the page-aligned start of `ring_mem`, `nbufs * 16` bytes long,
        // which `rr` owns and keeps mapped until after the group is unregistered (Drop). The
        // kernel pins those pages for as long as the group is registered.
        unsafe {
            rr.ring.uring().submitter().register_buf_ring_with_flags(
                entries_ptr as u64,
                nbufs as u16,
                bgid,
                0,
            )?
        };
        rr.registered = true;
        // Every buffer starts "held" so that recycle() publishes it.
        for id in 0..nbufs {
            rr.recycle(id as u16)?;
        }
        Ok(rr)
    }

    /// Whether the kernel supports `IORING_RECVSEND_BUNDLE` (`IORING_FEAT_RECVSEND_BUNDLE`).
    pub fn bundle_supported(&self) -> bool {
        self.ring.uring().params().is_feature_recvsend_bundle()
    }

    /// Registers `efd` (`IOring_REGISTER_EVENTFD`): the kernel signals it for every completion
    /// posted (and, on a DEFER_TASKRUN ring, when work is queued for the next wait), so an
    /// event loop can wait on it. The kernel takes its own reference: `efd` may be dropped
    /// later. `EBUSY` when one is registered already.
    ///
    /// The eventfd also wakes its waiter when a lent buffer comes back while the ring is
    /// starving ([`set_starving`](Self::set_starving)): the ring has nothing else to signal
    /// then, since no receive can complete without a buffer.
    pub fn register_eventfd(&self, efd: &crate::epoll::EventFd) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        self.ring
            .uring()
            .submitter()
            .register_eventfd(efd.as_raw_fd())?;
        self.lent_back.set_wake(efd.try_clone()?);
        Ok(())
    }

    /// Says whether receives wait for buffers the application holds (every buffer held, some
    /// multishot receive ended for want of one): while this is set, the next lent buffer that
    /// comes back ([`HeldBuf`] dropped, on any thread) signals the registered eventfd once, so
    /// that an event loop waiting on it polls again and re-arms.
    pub fn set_starving(&self, starving: bool) {
        self.lent_back.set_starving(starving);
    }

    /// Whether `IORING_SETUP_SINGLE_ISSUER|IORING_SETUP_DEFER_TASKRUN` is in force (the default).
    #[cfg(test)]
    pub(crate) fn defer_taskrun(&self) -> bool {
        self.ring.taskrun() == TaskRun::Defer
    }

    /// Number of buffers.
    pub fn nbufs(&self) -> usize {
        self.bufs.len()
    }

    /// Bytes per buffer.
    pub fn buf_size(&self) -> usize {
        self.buf_size as usize
    }

    /// Buffers the application holds (received, not yet recycled).
    pub fn held_count(&self) -> usize {
        self.bufs.iter().filter(|t| t.is_held()).count()
    }

    /// Whether the application holds buffer `buf_id`.
    pub fn is_held(&self, buf_id: u16) -> bool {
        self.bufs.get(buf_id as usize).is_some_and(Target::is_held)
    }

    /// Requests armed and not yet ended.
    pub fn armed(&self) -> usize {
        self.armed.len()
    }

    /// Counters.
    pub fn stats(&self) -> RecvStats {
        self.stats
    }

    /// Arms a multishot receive on socket `fd`: `IORING_OP_RECV` with `IOSQE_BUFFER_SELECT` from
    /// this ring's group, `IORING_RECV_MULTISHOT` (and `IORING_RECVSEND_BUNDLE` if `bundle`) in
    /// `sqe->ioprio`, and submits it. `bundle` on a kernel without
    /// `IORING_FEAT_RECVSEND_BUNDLE` is refused with `EOPNOTSUPP` (no silent fallback: the
    /// caller chooses). `user_data` must be unique among armed requests (`EBUSY`) and not
    /// `u64::MAX` (`EINVAL`, reserved). Errors of the request itself arrive as its completion.
    ///
    /// The caller keeps `fd` open until the request's final completion (`more == false`).
    /// If `io_uring_enter` fails with anything but a transient `EINTR`/`EAGAIN`/`EBUSY` the error
    /// is returned, but the SQE is already queued: the request counts as armed and goes in with
    /// the next [`wait`](Self::wait).
    pub fn arm(&mut self, fd: RawFd, user_data: u64, bundle: bool) -> io::Result<()> {
        self.arm_queued(fd, user_data, bundle)?;
        // A transient failure leaves the SQE queued: it goes in with the next `wait`.
        self.ring.submit()
    }

    /// As [`arm`](Self::arm), but only queues the request: it is submitted by the next
    /// [`wait`](Self::wait) (which enters the kernel anyway), saving a system call when several
    /// connections are (re-)armed before waiting. It counts as armed at once.
    pub fn arm_queued(&mut self, fd: RawFd, user_data: u64, bundle: bool) -> io::Result<()> {
        if user_data == CANCEL_TAG {
            return Err(einval());
        }
        if bundle && !self.bundle_supported() {
            return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        }
        if self.armed.iter().any(|a| a.user_data == user_data) {
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        let fd = types::Fd(fd);
        let sqe = if bundle {
            opcode::RecvMultiBundle::new(fd, self.bgid).build()
        } else {
            opcode::RecvMulti::new(fd, self.bgid).build()
        }
        .user_data(user_data);
        self.push(&sqe)?;
        self.armed.push(Armed { user_data, bundle });
        Ok(())
    }

    /// Queues an SQE that references no user memory.
    fn push(&mut self, sqe: &io_uring::squeue::Entry) -> io::Result<()> {
        // SAFETY: receive SQEs built here carry no pointer (the kernel picks buffers from the
        // registered ring, whose memory `self` owns until after unregistration); cancel SQEs
        // carry none either.
        unsafe { self.ring.push_unowned(sqe) }
    }

    /// Submits what is queued and waits for at least `min` completions or `timeout`, whichever
    /// comes first. A timeout (or `EINTR`) is not an error.
    pub fn wait(&mut self, min: usize, timeout: Duration) -> io::Result<()> {
        self.reclaim_lent();
        self.ring.wait(min, timeout).map(drop)
    }

    /// Hands every available completion to `f`. The buffers a completion names are held by the
    /// application from then on, until [`recycle`](Self::recycle)d.
    pub fn drain(&mut self, mut f: impl FnMut(RecvCompletion)) {
        let buf_size = self.buf_size as usize;
        let mut cq = self.ring.uring_mut().completion();
        cq.sync();
        for cqe in &mut cq {
            let user_data = cqe.user_data();
            if user_data == CANCEL_TAG {
                continue;
            }
            let res = cqe.result();
            let flags = cqe.flags();
            let more = cqueue::more(flags);
            let idx = self.armed.iter().position(|a| a.user_data == user_data);
            let bundle = idx.is_some_and(|i| self.armed[i].bundle);
            if !more {
                if let Some(i) = idx {
                    self.armed.swap_remove(i);
                }
            }
            let first = cqueue::buffer_select(flags);
            // How many ring entries this CQE consumed (see the module docs): without bundles,
            // IORING_CQE_F_BUFFER means the one buffer was committed (io_put_kbuf(), nbufs 1);
            // with bundles, io_bundle_nbufs() counts whole buffers and gives 0 for res <= 0.
            let count = match first {
                None => 0,
                Some(_) if !bundle => 1,
                Some(_) if res <= 0 => 0,
                Some(_) => (res as usize).div_ceil(buf_size),
            };
            let mut buf_id = None;
            if let Some(bid) = first.filter(|_| count > 0) {
                self.seq += 1;
                if self.shadow[(self.head & self.mask) as usize] != bid {
                    self.stats.desyncs += 1;
                }
                let mut last = NONE;
                for i in 0..count {
                    let id = if i == 0 {
                        bid
                    } else {
                        self.shadow[(self.head.wrapping_add(i as u16) & self.mask) as usize]
                    };
                    if let Some(t) = self.bufs.get_mut(id as usize) {
                        // The completion names it: the kernel has written it and let go.
                        t.drained();
                    }
                    self.owner[id as usize] = self.seq;
                    self.prev[id as usize] = last;
                    self.next[id as usize] = NONE;
                    if last != NONE {
                        self.next[last as usize] = id;
                    }
                    last = id;
                }
                self.head = self.head.wrapping_add(count as u16);
                buf_id = Some(bid);
            }
            let result = if res < 0 {
                if res == -libc::ENOBUFS {
                    self.stats.enobufs += 1;
                }
                Err(io::Error::from_raw_os_error(-res))
            } else {
                self.stats.bytes += res as u64;
                Ok(res as usize)
            };
            self.stats.completions += 1;
            f(RecvCompletion {
                user_data,
                result,
                buf_id,
                // count <= nbufs <= 32768.
                buf_count: count as u16,
                more,
                seq: if buf_id.is_some() { self.seq } else { 0 },
            });
        }
    }

    /// The mapping that holds the buffers (to register it with a copy engine, e.g. CUDA).
    pub fn buffers_mapping(&self) -> Option<&Arc<Mapping>> {
        self.bufs.first().and_then(Target::mapping)
    }

    /// The first `len` bytes of held buffer `buf_id`. `EINVAL` if the application does not hold
    /// it (never received, or recycled) or `len` exceeds the buffer size.
    pub fn buf(&self, buf_id: u16, len: usize) -> io::Result<&[u8]> {
        if len > self.buf_size as usize {
            return Err(einval());
        }
        let slot = self.bufs.get(buf_id as usize).and_then(Target::held_slot);
        let bytes = slot.and_then(Slot::bytes).ok_or_else(einval)?;
        Ok(&bytes[..len])
    }

    /// The buffers of completion `c` in order, each with the bytes received into it (all full but
    /// the last). `EINVAL` if any of them was recycled since (even if received again), or `c`
    /// carried no data.
    pub fn segments(&self, c: &RecvCompletion) -> io::Result<Segments<'_>> {
        let first = self.check_chain(c)?;
        let len = *c.result.as_ref().map_err(|_| einval())?;
        if len > c.buf_count as usize * self.buf_size as usize {
            return Err(einval());
        }
        Ok(Segments {
            ring: self,
            next: first,
            left: c.buf_count,
            bytes: len,
        })
    }

    /// Checks that the application still holds every buffer of `c`, received with `c` itself;
    /// returns the first id.
    fn check_chain(&self, c: &RecvCompletion) -> io::Result<u16> {
        let first = c.buf_id.ok_or_else(einval)?;
        let mine = |id: u16| self.is_held(id) && self.owner[id as usize] == c.seq;
        if c.buf_count == 0 || !mine(first) || self.prev[first as usize] != NONE {
            return Err(einval());
        }
        let mut id = first;
        for _ in 1..c.buf_count {
            id = self.next[id as usize];
            if id == NONE || !mine(id) {
                return Err(einval());
            }
        }
        Ok(first)
    }

    /// Gives held buffer `buf_id` back to the kernel: writes its entry at the ring's tail and
    /// publishes the new tail. `EINVAL` if the application does not hold it (double recycle);
    /// the ring is then left as it was.
    ///
    /// Ordering: the entry's fields are written with plain stores, then the tail with a
    /// `Release` store; the kernel reads the tail with `smp_load_acquire` before reading entries
    /// (io_ring_head_to_buf()/io_ring_buffers_peek() in io_uring/kbuf.c; liburing's
    /// io_uring_buf_ring_advance() is the same store-release), so it never sees a tail that
    /// covers an entry whose fields are not yet visible.
    /// A buffer taken out as a [`HeldBuf`] is refused (`EINVAL`): it goes back with
    /// [`give_back`](Self::give_back) only.
    pub fn recycle(&mut self, buf_id: u16) -> io::Result<()> {
        let id = buf_id as usize;
        // The buffer becomes the kernel's here (refused, unchanged, unless held and not taken);
        // the entry that lends it is written next.
        let addr = self
            .bufs
            .get_mut(id)
            .and_then(Target::publish)
            .ok_or_else(einval)? as u64;
        let pos = (self.tail & self.mask) as usize;
        // SAFETY: pos < nbufs, so the entry lies inside `ring_mem` (nbufs * 16 bytes, owned and
        // mapped). The kernel reads entries only between its head and the published tail; this
        // position is at the unpublished tail, and its previous use (position tail - nbufs) is
        // behind the kernel's head because at most nbufs - held (< nbufs, this buffer is held)
        // buffers are published or unprocessed. Fields are written one by one through raw
        // pointers, never as a whole struct, so entry 0's `resv` (the tail) is not overwritten.
        unsafe {
            let e = self.entries.add(pos);
            std::ptr::addr_of_mut!((*e).addr).write(addr);
            std::ptr::addr_of_mut!((*e).len).write(self.buf_size);
            std::ptr::addr_of_mut!((*e).bid).write(buf_id);
        }
        self.shadow[pos] = buf_id;
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail is the u16 at offset 14 of entry 0, inside `ring_mem`, 2-byte
        // aligned (page-aligned base); only this value writes it (the kernel only reads it), and
        // all of our accesses to it go through this atomic.
        let tail = unsafe { AtomicU16::from_ptr(std::ptr::addr_of_mut!((*self.entries).resv)) };
        tail.store(self.tail, Ordering::Release);
        let (p, n) = (self.prev[id], self.next[id]);
        if p != NONE {
            self.next[p as usize] = NONE;
        }
        if n != NONE {
            self.prev[n as usize] = NONE;
        }
        self.prev[id] = NONE;
        self.next[id] = NONE;
        Ok(())
    }

    /// Recycles every buffer of completion `c` (in ring order); `EINVAL`, recycling nothing, if
    /// any of them is no longer held with `c`. A completion without buffers is a no-op.
    pub fn recycle_completion(&mut self, c: &RecvCompletion) -> io::Result<()> {
        if c.buf_id.is_none() {
            return Ok(());
        }
        // Validates the whole chain first, so that an error leaves every buffer as it was.
        let first = self.check_chain(c)?;
        let mut id = first;
        for _ in 0..c.buf_count {
            if self.bufs[id as usize].is_taken() {
                return Err(einval());
            }
            id = self.next[id as usize];
        }
        let mut id = first;
        for _ in 0..c.buf_count {
            let n = self.next[id as usize];
            self.recycle(id)?;
            id = n;
        }
        Ok(())
    }

    /// Asks the kernel to cancel the armed request `user_data` (`IORING_OP_ASYNC_CANCEL` by
    /// user_data) and submits. Its final completion (`ECANCELED`, or whatever ended it first)
    /// arrives through [`drain`](Self::drain) as usual; until then the socket must stay open.
    /// `ENOENT` if no such request is armed (it has already ended).
    pub fn cancel(&mut self, user_data: u64) -> io::Result<()> {
        if !self.armed.iter().any(|a| a.user_data == user_data) {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        self.ring.cancel(user_data)
    }

    /// Whether request `user_data` is armed (its final completion has not been drained).
    pub fn is_armed(&self, user_data: u64) -> bool {
        self.armed.iter().any(|a| a.user_data == user_data)
    }

    /// Buffers published to the kernel and not yet taken by a drained completion.
    pub fn available(&self) -> usize {
        self.nbufs() - self.held_count()
    }

    /// Cancels every armed request (`IORING_ASYNC_CANCEL_ANY`) and waits up to `timeout` for
    /// their final completions, which are drained and dropped. Returns whether none is left.
    pub fn cancel_all(&mut self, timeout: Duration) -> bool {
        if self.armed.is_empty() {
            return true;
        }
        if self.ring.cancel_any().is_err() {
            return false;
        }
        Core::settle(
            self,
            |r| &mut r.ring,
            timeout,
            |r| {
                r.drain(drop);
                r.armed.is_empty()
            },
        )
    }
}

impl Drop for RecvRing {
    fn drop(&mut self) {
        if !self.cancel_all(Duration::from_secs(2)) {
            // The kernel may still write into the buffers: never unmap them.
            std::mem::forget(std::mem::take(&mut self.bufs));
            std::mem::forget(self.ring_mem.take());
            return;
        }
        if self.registered
            && self
                .ring
                .uring()
                .submitter()
                .unregister_buf_ring(self.bgid)
                .is_err()
        {
            std::mem::forget(std::mem::take(&mut self.bufs));
            std::mem::forget(self.ring_mem.take());
        }
        // Fields drop next: the io_uring (closed), then the ring memory and the buffers.
    }
}

/// The buffers of one completion, in order: `(buf_id, bytes)`. See [`RecvRing::segments`].
#[derive(Debug)]
pub struct Segments<'a> {
    ring: &'a RecvRing,
    next: u16,
    left: u16,
    bytes: usize,
}

impl<'a> Iterator for Segments<'a> {
    type Item = (u16, &'a [u8]);

    fn next(&mut self) -> Option<(u16, &'a [u8])> {
        if self.left == 0 {
            return None;
        }
        let id = self.next;
        let len = self.bytes.min(self.ring.buf_size as usize);
        // Checked by `segments()`; the shared borrow of the ring keeps it so.
        let bytes = self.ring.buf(id, len).ok()?;
        self.bytes -= len;
        self.left -= 1;
        self.next = self.ring.next[id as usize];
        Some((id, bytes))
    }
}

#[cfg(test)]
mod tests;
