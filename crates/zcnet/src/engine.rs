//! The engine: one io_uring ring that owns the memory of every request until the kernel let go
//! of it, one reading of what each completion means, and one count of what moved and how.
//!
//! ```text
//!   owner ── push(Lease, Request) ──► Ring (zcnet-sys: holds the lease) ──► kernel
//!     ▲                                                                      │ CQEs
//!     └── Event { tag, Outcome, lease at the final CQE } ◄── reap: SendZcTracker (zcnet-core)
//!                                                              + Counts
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
//! What a CQE means is [`SendZcTracker`]'s job (io_uring_prep_send_zc(3)): a send's result
//! (bytes accepted, or `-errno`), then for a `SEND_ZC` whose result had `IORING_CQE_F_MORE` a
//! notification saying whether the kernel copied after all (`IORING_NOTIF_USAGE_ZC_COPIED`,
//! asked for with `IORING_SEND_ZC_REPORT_USAGE`, Linux 6.2). [`Counts`] is therefore honest by
//! construction: bytes are zero-copy only when a notification said so; an `IORING_OP_SEND`'s
//! bytes are copied.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;
use zcnet_core::{SendZcTracker, TrackerError};
pub use zcnet_sys::foreign::ForeignBuf;
use zcnet_sys::uring::{Completion, Ring};
pub use zcnet_sys::uring::{ForeignMr, Lease, Op, Request, RingFlags};

/// What moved through an engine, as the kernel reported it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Send requests queued.
    pub sends: u64,
    /// Bytes the kernel accepted from sends.
    pub bytes_sent: u64,
    /// Bytes of `SEND_ZC` requests whose notification said the kernel did not copy.
    pub zerocopy_bytes: u64,
    /// Bytes of `IORING_OP_SEND` requests, and of `SEND_ZC` requests whose notification said
    /// the kernel copied.
    pub copied_bytes: u64,
    /// Zero-copy notifications.
    pub notifications: u64,
    /// Notifications that said the kernel copied.
    pub copied_notifications: u64,
    /// Bytes receives filled.
    pub bytes_received: u64,
}

impl Counts {
    /// Counts what `outcome` says moved: the one rule. A send's accepted bytes are sent, and
    /// copied unless it was a `SEND_ZC`; a `SEND_ZC`'s bytes are zero-copy or copied as its
    /// notification says (none without one: a failed or refused send moved nothing); a
    /// receive's bytes are received. Failures count nothing.
    pub fn add(&mut self, outcome: &Outcome) {
        match *outcome {
            Outcome::Sent {
                res: Ok(n),
                zero_copy,
                ..
            } => {
                self.bytes_sent += u64::from(n);
                if !zero_copy {
                    self.copied_bytes += u64::from(n);
                }
            }
            Outcome::Notified { bytes, copied } => {
                self.notifications += 1;
                if copied {
                    self.copied_notifications += 1;
                    self.copied_bytes += bytes;
                } else {
                    self.zerocopy_bytes += bytes;
                }
            }
            Outcome::Received(Ok(n)) => self.bytes_received += u64::from(n),
            _ => {}
        }
    }

    /// What was counted since `earlier` (a snapshot of the same engine's counts).
    pub fn since(&self, earlier: &Counts) -> Counts {
        Counts {
            sends: self.sends - earlier.sends,
            bytes_sent: self.bytes_sent - earlier.bytes_sent,
            zerocopy_bytes: self.zerocopy_bytes - earlier.zerocopy_bytes,
            copied_bytes: self.copied_bytes - earlier.copied_bytes,
            notifications: self.notifications - earlier.notifications,
            copied_notifications: self.copied_notifications - earlier.copied_notifications,
            bytes_received: self.bytes_received - earlier.bytes_received,
        }
    }
}

/// What one completion meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A send's result: bytes accepted or the errno, with the length asked for.
    Sent {
        /// Bytes accepted (`Ok`) or the errno (`Err`).
        res: Result<u32, i32>,
        /// The length the request asked for.
        asked: u32,
        /// It was a `SEND_ZC` (its bytes are counted by its notification, if one follows).
        zero_copy: bool,
    },
    /// A `SEND_ZC` notification: the kernel no longer references the bytes.
    Notified {
        /// Bytes the request had sent.
        bytes: u64,
        /// The kernel copied them.
        copied: bool,
    },
    /// A receive's result: bytes filled (0: the peer closed) or the errno.
    Received(Result<u32, i32>),
    /// A completion that contradicts the protocol (a bug here or in the kernel).
    Protocol(TrackerError),
}

/// One completion, interpreted.
#[derive(Debug)]
pub struct Event {
    /// The tag [`Engine::push`] returned for the request.
    pub tag: u32,
    /// What it meant.
    pub outcome: Outcome,
    /// The request's memory, given back with its final CQE (and only then).
    pub lease: Option<Lease>,
}

/// One io_uring engine (see the module documentation).
#[derive(Debug)]
pub struct Engine {
    /// Dropped first (cancel, wait) while the tracker is still there to read what comes.
    ring: Ring,
    tracker: SendZcTracker,
    /// Slots the tracker has (tags below it can be tracked).
    tracked: usize,
    counts: Counts,
}

impl Engine {
    /// An engine of `entries` SQEs with room for `fixed_slots` fixed buffers (see
    /// [`Engine::register_mapping`], [`Engine::register_foreign`]).
    pub fn new(entries: u32, fixed_slots: u32) -> io::Result<Engine> {
        Ok(Engine {
            ring: Ring::new(entries, fixed_slots)?,
            tracker: SendZcTracker::new(entries as usize),
            tracked: entries as usize,
            counts: Counts::default(),
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
        self.tracker.awaiting_result()
    }

    /// What moved so far.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// Queues `req` on `lease`; the request's tag. On error the lease is handed back.
    #[inline]
    pub fn push(&mut self, lease: Lease, req: &Request) -> Result<u32, (Lease, io::Error)> {
        let tag = self.ring.push(lease, req)?;
        let i = tag as usize;
        if i >= self.tracked {
            self.tracked = (i + 1).next_power_of_two();
            self.tracker.ensure(self.tracked);
        }
        if req.op != Op::Recv {
            // The ring hands out a tag only when its previous request ended, so the tracker's
            // slot is idle; an error here is a bug, reported at the request's completion.
            let _ = self.tracker.on_submit(i, req.len);
            self.counts.sends += 1;
        }
        Ok(tag)
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

    /// Submits and waits up to `timeout` for `want` completions (a timeout is not an error).
    pub fn submit_and_wait(&mut self, want: usize, timeout: Duration) -> io::Result<()> {
        self.ring.submit_and_wait(want, timeout)
    }

    /// Takes every completion there is, interpreted, counted, handed to `f`.
    #[inline]
    pub fn reap(&mut self, mut f: impl FnMut(Event)) {
        let Engine {
            ring,
            tracker,
            counts,
            ..
        } = self;
        ring.drain(|c| f(interpret(tracker, counts, c)));
    }

    /// Cancels what is in flight and waits up to `timeout` for the final CQEs (interpreted,
    /// handed to `f`); whether none is left. Dropping the engine does the same with
    /// [`zcnet_sys::uring::DROP_WAIT`].
    pub fn cancel_all(&mut self, timeout: Duration, mut f: impl FnMut(Event)) -> bool {
        let Engine {
            ring,
            tracker,
            counts,
            ..
        } = self;
        ring.cancel_all(timeout, |c| f(interpret(tracker, counts, c)))
    }
}

/// What completion `c` means, counted in `counts`.
#[inline]
fn interpret(tracker: &mut SendZcTracker, counts: &mut Counts, c: Completion) -> Event {
    let outcome = if c.op == Op::Recv {
        Outcome::Received(if c.res >= 0 {
            Ok(c.res as u32)
        } else {
            Err(c.res.saturating_neg())
        })
    } else {
        match tracker.on_cqe(c.tag as usize, c.res, c.flags) {
            Err(e) => Outcome::Protocol(e),
            Ok(out) => match (out.notification, out.result) {
                (Some(n), _) => Outcome::Notified {
                    bytes: n.bytes,
                    copied: n.copied,
                },
                (None, Some((res, asked))) => Outcome::Sent {
                    res,
                    asked,
                    zero_copy: c.op != Op::Send,
                },
                (None, None) => Outcome::Protocol(TrackerError::Unexpected(c.tag as usize)),
            },
        }
    };
    counts.add(&outcome);
    Event {
        tag: c.tag,
        outcome,
        lease: c.lease,
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
