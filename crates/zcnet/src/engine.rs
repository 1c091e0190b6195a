//! The engine: one io_uring ring that owns the memory of every request until the kernel let go
//! of it, one reading of what each completion means, and one count of what moved and how.
//!
//! ```text
//!   owner ── push(Lease, Request) ──► Ring (zcnet-sys: per tag, the lease and a ReqState) ──► kernel
//!     ▲                                                                                    │ CQEs
//!     └── Event { tag, Outcome, lease at the final CQE } ◄── reap: ReqState::on_cqe (zcnet-core)
//!                                                              + Counts::add
//! ```
//!
//! Every io_uring send and receive on memory in zcnet goes through it: the [`crate::Sender`]'s
//! `uring`, `uring-zc` and `auto` backends (owned slots of a [`crate::Region`]), and the NCCL
//! plugin (NCCL's buffers, borrowed; its own chunk headers). Memory is a
//! [`Lease`]: an owned [`zcnet_sys::mem::Slot`] or a borrowed [`ForeignBuf`]; either comes back
//! only with its request's final CQE (a zero-copy send's notification), and dropping the engine
//! cancels what is in flight and waits, boundedly, leaking rather than freeing what the kernel
//! still holds (zcnet_sys::uring's one drop rule).
//!
//! What a CQE means is [`zcnet_core::ReqState`]'s job (io_uring_prep_send_zc(3)), kept per tag
//! beside the lease so a completion touches one place: a send's result
//! (bytes accepted, or `-errno`), then for a `SEND_ZC` whose result had `IORING_CQE_F_MORE` a
//! notification saying whether the kernel copied after all (`IORING_NOTIF_USAGE_ZC_COPIED`,
//! asked for with `IORING_SEND_ZC_REPORT_USAGE`, Linux 6.2). [`Counts`] is therefore honest by
//! construction: bytes are zero-copy only when a notification said so; an `IORING_OP_SEND`'s
//! bytes are copied.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;
pub use zcnet_core::{Counts, Outcome};
pub use zcnet_sys::foreign::ForeignBuf;
use zcnet_sys::uring::Ring;
pub use zcnet_sys::uring::{ForeignMr, Lease, Op, Request, RingFlags};

/// One completion, read: the tag [`Engine::push`] returned for the request (`tag`), what it
/// meant (`outcome`, already counted in [`Engine::counts`]) and the request's memory (`lease`),
/// given back with its final CQE and only then.
pub type Event = zcnet_sys::uring::Completion;

/// One io_uring engine (see the module documentation).
#[derive(Debug)]
pub struct Engine {
    ring: Ring,
}

impl Engine {
    /// An engine of `entries` SQEs with room for `fixed_slots` fixed buffers (see
    /// [`Engine::register_mapping`], [`Engine::register_foreign`]).
    pub fn new(entries: u32, fixed_slots: u32) -> io::Result<Engine> {
        Ok(Engine {
            ring: Ring::new(entries, fixed_slots)?,
        })
    }

    /// The ring's setup flags.
    pub fn flags(&self) -> RingFlags {
        self.ring.flags()
    }

    /// Whether the kernel runs IORING_OP_SEND_ZC (Linux 6.0).
    pub fn supports_send_zc(&self) -> bool {
        self.ring.supports_send_zc().unwrap_or(false)
    }

    /// Registers `efd` to be signalled at every completion (an event loop waits on it).
    pub fn register_eventfd(&self, efd: &zcnet_sys::epoll::EventFd) -> io::Result<()> {
        self.ring.register_eventfd(efd)
    }

    /// Makes `map` a fixed buffer; its index.
    pub fn register_mapping(
        &mut self,
        map: &std::sync::Arc<zcnet_sys::mem::Mapping>,
    ) -> io::Result<u16> {
        self.ring.register_mapping(map)
    }

    /// Makes `mr` a fixed buffer; its index (`ENOSPC`: the table is full or absent).
    pub fn register_foreign(&mut self, mr: ForeignMr) -> io::Result<u16> {
        self.ring.register_foreign(mr)
    }

    /// Clears fixed buffer `idx`.
    pub fn unregister(&mut self, idx: u16) -> io::Result<()> {
        self.ring.unregister(idx)
    }

    /// The fixed buffer covering `addr..addr + len`, if one does.
    pub fn fixed_index(&self, addr: usize, len: usize) -> Option<u16> {
        self.ring.fixed_index(addr, len)
    }

    /// Registers the socket `fd` as the ring's fixed file (see
    /// [`zcnet_sys::uring::Ring::register_file`]).
    pub fn register_file(&mut self, fd: RawFd) -> io::Result<()> {
        self.ring.register_file(fd)
    }

    /// Requests whose final CQE has not come.
    pub fn in_flight(&self) -> usize {
        self.ring.in_flight()
    }

    /// Sends whose result has not come (their bytes may not be in the socket yet).
    pub fn awaiting_result(&self) -> usize {
        self.ring.awaiting_result()
    }

    /// What moved so far.
    pub fn counts(&self) -> Counts {
        self.ring.counts()
    }

    /// Queues `req` on `lease`; the request's tag. On error the lease is handed back.
    #[inline]
    pub fn push(&mut self, lease: Lease, req: &Request) -> Result<u32, (Lease, io::Error)> {
        self.ring.push(lease, req)
    }

    /// Entries the submission queue holds: the longest chain of linked requests that can be
    /// queued without a submit cutting it in two.
    pub fn sq_capacity(&mut self) -> usize {
        self.ring.sq_capacity()
    }

    /// SQEs queued and not yet handed to the kernel.
    pub fn queued(&mut self) -> usize {
        self.ring.queued()
    }

    /// Whether completions wait (no system call).
    pub fn completions_ready(&mut self) -> bool {
        self.ring.completions_ready()
    }

    /// Hands what is queued to the kernel and runs the work it owes this task, without
    /// waiting; no system call when there is nothing to do (a signal or a busy ring is not an
    /// error: it goes in with the next call).
    pub fn submit(&mut self) -> io::Result<()> {
        self.ring.submit()
    }

    /// Submits and waits up to `timeout` for `want` completions (a timeout is not an error);
    /// true when a signal cut the wait short.
    pub fn submit_and_wait(&mut self, want: usize, timeout: Duration) -> io::Result<bool> {
        self.ring.submit_and_wait(want, timeout)
    }

    /// Takes every completion there is, interpreted, counted, handed to `f`.
    #[inline]
    pub fn reap(&mut self, f: impl FnMut(Event)) {
        self.ring.drain(f)
    }

    /// Cancels what is in flight and waits up to `timeout` for the final CQEs (interpreted,
    /// handed to `f`); whether none is left. Dropping the engine does the same with
    /// [`zcnet_sys::uring::DROP_WAIT`].
    pub fn cancel_all(&mut self, timeout: Duration, f: impl FnMut(Event)) -> bool {
        self.ring.cancel_all(timeout, f)
    }
}

/// The eventfd in `slot`, made and registered (by `register`) with an io_uring the first
/// time: the readiness fd of the io_uring backends, send and receive.
pub(crate) fn ready_eventfd(
    slot: &mut Option<zcnet_sys::epoll::EventFd>,
    register: impl FnOnce(&zcnet_sys::epoll::EventFd) -> std::io::Result<()>,
) -> crate::Result<&zcnet_sys::epoll::EventFd> {
    if slot.is_none() {
        let e = zcnet_sys::epoll::EventFd::new().map_err(|e| crate::Error::io("eventfd", e))?;
        register(&e).map_err(|e| {
            crate::Error::io(
                "registering the readiness eventfd (IORING_REGISTER_EVENTFD)",
                e,
            )
        })?;
        *slot = Some(e);
    }
    // Set just above when it was not.
    slot.as_ref()
        .ok_or_else(|| crate::Error::invalid_input("no readiness eventfd"))
}
