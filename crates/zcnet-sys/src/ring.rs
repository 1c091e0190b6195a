//! The io_uring core every ring owner of this crate is built on: the send ring
//! ([`crate::uring::Ring`], 16-byte completions, leases by tag), the provided-buffer receive
//! ring ([`crate::bufring::RecvRing`]) and the zcrx receiver ([`crate::zcrx::ZcrxReceiver`],
//! 32-byte completions). Each owner keeps what is its own — which memory a request may touch
//! and when it comes back — and leaves to this core what is the same for all of them:
//!
//! - **setup**: the task-run mode, tried from the owner's first choice down on `EINVAL`
//!   (`IORING_SETUP_SINGLE_ISSUER|DEFER_TASKRUN`, Linux 6.1; `COOP_TASKRUN`, 5.19; none), each
//!   with `IORING_SETUP_TASKRUN_FLAG` so that a non-blocking poll enters the kernel only when
//!   work waits;
//! - **submitting**: one rule for the `io_uring_enter` errors after which what is queued goes
//!   in with the next call ([`transient`]);
//! - **waiting**: for some completions or a timeout, a zero timeout without a system call when
//!   nothing is to be done ([`Core::progress_now`]);
//! - **cancelling**: by `user_data` or everything, under the one [`CANCEL_TAG`] no request of
//!   an owner may use, and settling (cancel, then drain until nothing is in flight or a
//!   deadline) for the owners' drop rule ([`Core::settle`]).
//!
//! The one `unsafe` promise here is [`Core::push_unowned`]'s: an SQE that references no user
//! memory, or only memory registered with the ring that its owner keeps until the ring closes.

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::io;
use std::time::{Duration, Instant};

/// `user_data` of the ring's own cancel requests: never a request's.
pub(crate) const CANCEL_TAG: u64 = u64::MAX;

/// `IORING_ENTER_GETEVENTS` (include/uapi/linux/io_uring.h).
const IORING_ENTER_GETEVENTS: u32 = 1;

/// How completions' task work runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskRun {
    /// `SINGLE_ISSUER|DEFER_TASKRUN`: the work runs inside a waiting `io_uring_enter` only,
    /// and only the thread that made the ring may submit or wait (others get `EEXIST`).
    Defer,
    /// `COOP_TASKRUN`: at the next return to user space, without interrupting the task.
    Coop,
    /// Neither: as the kernel does by default.
    Plain,
}

/// `io_uring_enter` errors after which what is queued simply goes in with the next call
/// (`EINTR`, `EAGAIN`, `EBUSY`): not a failure of a request.
pub(crate) fn transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
    )
}

/// An io_uring with 16-byte (`C` = [`cqueue::Entry`]) or 32-byte ([`cqueue::Entry32`])
/// completions, and the task-run mode it was made with.
pub(crate) struct Core<C: cqueue::EntryMarker = cqueue::Entry> {
    ring: IoUring<squeue::Entry, C>,
    taskrun: TaskRun,
    /// Made with `IORING_SETUP_TASKRUN_FLAG`: the SQ flags say when work waits for this task.
    taskrun_flag: bool,
}

impl<C: cqueue::EntryMarker> std::fmt::Debug for Core<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("taskrun", &self.taskrun)
            .field("taskrun_flag", &self.taskrun_flag)
            .finish_non_exhaustive()
    }
}

impl<C: cqueue::EntryMarker> Core<C> {
    /// A ring of `entries` SQEs (and `cq` CQEs where given, clamped to the kernel's limit) in
    /// the first task-run mode from `first` down that the kernel accepts.
    pub(crate) fn new(entries: u32, cq: Option<u32>, first: TaskRun) -> io::Result<Self> {
        let mut taskrun = first;
        loop {
            let mut b = IoUring::<squeue::Entry, C>::builder();
            match taskrun {
                TaskRun::Defer => {
                    b.setup_single_issuer()
                        .setup_defer_taskrun()
                        .setup_taskrun_flag();
                }
                TaskRun::Coop => {
                    b.setup_coop_taskrun().setup_taskrun_flag();
                }
                TaskRun::Plain => {}
            }
            if let Some(cq) = cq {
                b.setup_cqsize(cq).setup_clamp();
            }
            match b.build(entries) {
                Ok(ring) => {
                    return Ok(Core {
                        ring,
                        taskrun,
                        taskrun_flag: taskrun != TaskRun::Plain,
                    })
                }
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) && taskrun != TaskRun::Plain => {
                    taskrun = match taskrun {
                        TaskRun::Defer => TaskRun::Coop,
                        _ => TaskRun::Plain,
                    };
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A ring made elsewhere (a caller's choice of sizes and flags), in `taskrun` mode;
    /// `taskrun_flag` when it was made with `IORING_SETUP_TASKRUN_FLAG`.
    pub(crate) fn adopt(
        ring: IoUring<squeue::Entry, C>,
        taskrun: TaskRun,
        taskrun_flag: bool,
    ) -> Self {
        Core {
            ring,
            taskrun,
            taskrun_flag,
        }
    }

    /// Says that the ring was made with `IORING_SETUP_TASKRUN_FLAG` (an adopted ring whose
    /// maker asked for it): a zero-timeout wait may then skip the system call.
    pub(crate) fn mark_taskrun_flag(&mut self) {
        self.taskrun_flag = true;
    }

    /// The task-run mode in force.
    pub(crate) fn taskrun(&self) -> TaskRun {
        self.taskrun
    }

    /// The io_uring itself (registrations, probes, the submission and completion queues).
    pub(crate) fn uring(&self) -> &IoUring<squeue::Entry, C> {
        &self.ring
    }

    /// As [`Core::uring`], mutably.
    pub(crate) fn uring_mut(&mut self) -> &mut IoUring<squeue::Entry, C> {
        &mut self.ring
    }

    /// Queues `sqe`, submitting once first when the queue is full; `EAGAIN` when it stays
    /// full.
    ///
    /// # Safety
    /// `sqe` references no user memory, or only memory registered with this ring (a buffer
    /// ring, a zcrx area) that its owner keeps mapped until the ring is closed: arms whose
    /// buffers the kernel picks, and cancels.
    pub(crate) unsafe fn push_unowned(&mut self, sqe: &squeue::Entry) -> io::Result<()> {
        if self.ring.submission().is_full() {
            self.ring.submit()?;
        }
        // SAFETY: the caller's promise (above).
        unsafe { self.ring.submission().push(sqe) }
            .map_err(|_| io::Error::from_raw_os_error(libc::EAGAIN))
    }

    /// Hands what is queued to the kernel; a [`transient`] error is not one (it goes in with
    /// the next call). With nothing queued, only the work the kernel flagged is run
    /// ([`Core::progress_now`]).
    pub(crate) fn submit(&mut self) -> io::Result<()> {
        if self.ring.submission().is_empty() {
            return self.progress_now();
        }
        match self.ring.submit() {
            Err(e) if transient(&e) => Ok(()),
            r => r.map(drop),
        }
    }

    /// Non-blocking progress: submits what is queued and runs the work the kernel has queued
    /// for this task (on a DEFER_TASKRUN ring it runs only inside an `io_uring_enter` with
    /// GETEVENTS) without waiting, entering the kernel only when there is something to do:
    /// SQEs queued, work flagged in the SQ flags (`IORING_SQ_TASKRUN`, kept up to date where
    /// the ring has `IORING_SETUP_TASKRUN_FLAG`; without it the kernel runs the work on its
    /// own, and this enters only for SQEs or an overflow), or completions waiting in the
    /// overflow list (`IORING_SQ_CQ_OVERFLOW`). A zero-timeout `io_uring_enter` with
    /// `min_complete` 1 would arm and expire a timer and switch tasks each time;
    /// `min_complete` 0 returns as soon as the work has run (io_uring/io_uring.c
    /// `io_cqring_wait`).
    pub(crate) fn progress_now(&mut self) -> io::Result<()> {
        let (queued, work) = {
            let sq = self.ring.submission();
            (sq.len(), sq.taskrun() || sq.cq_overflow())
        };
        if queued == 0 && !work {
            return Ok(());
        }
        let to_submit = u32::try_from(queued).unwrap_or(u32::MAX);
        // SAFETY: io_uring_enter with no argument pointer (`None`): the kernel consumes up to
        // `to_submit` SQEs already published in the SQ ring (each its pusher's contract) and
        // posts CQEs into the CQ ring, both mapped by `self.ring` for its lifetime.
        let r = unsafe {
            self.ring.submitter().enter::<libc::sigset_t>(
                to_submit,
                0,
                IORING_ENTER_GETEVENTS,
                None,
            )
        };
        match r {
            Err(e) if !transient(&e) => Err(e),
            _ => Ok(()),
        }
    }

    /// Submits what is queued and waits for at least `want` completions or `timeout`,
    /// whichever comes first (IORING_ENTER_EXT_ARG, Linux 5.11). A zero timeout is
    /// [`Core::progress_now`] where the ring has the task-run flag. A timeout, a signal or a
    /// full completion queue (`ETIME`, `EINTR`, `EBUSY`) is not an error: the caller reaps
    /// what is there and decides. True when it was a signal (`EINTR`).
    pub(crate) fn wait(&mut self, want: usize, timeout: Duration) -> io::Result<bool> {
        if timeout.is_zero() && self.taskrun_flag {
            return self.progress_now().map(|()| false);
        }
        let ts = types::Timespec::new()
            .sec(timeout.as_secs())
            .nsec(timeout.subsec_nanos());
        let args = types::SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(want, &args) {
            Ok(_) => Ok(false),
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => Ok(true),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EBUSY)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Queues a cancel of the request with `user_data` (`IORING_OP_ASYNC_CANCEL`, Linux 5.5)
    /// without submitting it. Its final completion arrives as usual.
    pub(crate) fn queue_cancel(&mut self, user_data: u64) -> io::Result<()> {
        let sqe = opcode::AsyncCancel::new(user_data)
            .build()
            .user_data(CANCEL_TAG);
        // SAFETY: a cancel SQE references no user memory.
        unsafe { self.push_unowned(&sqe) }
    }

    /// Cancels the request with `user_data` and submits. Its final completion (`ECANCELED`,
    /// or whatever ended it first) arrives as usual; until then its socket must stay open.
    pub(crate) fn cancel(&mut self, user_data: u64) -> io::Result<()> {
        let sqe = opcode::AsyncCancel2::new(types::CancelBuilder::user_data(user_data))
            .build()
            .user_data(CANCEL_TAG);
        // SAFETY: a cancel SQE references no user memory.
        unsafe { self.push_unowned(&sqe)? };
        self.submit()
    }

    /// Cancels every request (`IORING_ASYNC_CANCEL_ANY`, Linux 6.0) and submits.
    pub(crate) fn cancel_any(&mut self) -> io::Result<()> {
        let sqe = opcode::AsyncCancel2::new(types::CancelBuilder::any())
            .build()
            .user_data(CANCEL_TAG);
        // SAFETY: a cancel SQE references no user memory.
        unsafe { self.push_unowned(&sqe)? };
        self.submit()
    }

    /// The owners' drop rule, after their cancels: runs `settled` (which drains the
    /// completions and says whether nothing is left in flight) until it says so or `timeout`
    /// passes, waiting for completions in slices between. Whether it settled.
    pub(crate) fn settle<O>(
        owner: &mut O,
        core: impl Fn(&mut O) -> &mut Self,
        timeout: Duration,
        mut settled: impl FnMut(&mut O) -> bool,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if settled(owner) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero()
                || core(owner)
                    .wait(1, left.min(Duration::from_millis(20)))
                    .is_err()
            {
                return false;
            }
        }
    }
}
