//! An io_uring ring for sends that holds each buffer for exactly as long as the kernel may use it.
//!
//! The ring takes ownership of a [`Slot`] when a send is queued and gives it back only with the
//! request's *final* CQE — the one without `IORING_CQE_F_MORE` (io_uring_prep_send_zc(3): a
//! zero-copy send's final CQE is its notification). The accounting of what each CQE means is
//! `zcnet_core::SendZcTracker`'s job; this module only guarantees the memory rule, which is what
//! makes the API safe. Dropping the ring cancels what is in flight and waits (bounded) for the
//! kernel to let go; a slot the kernel still holds after that is leaked on purpose, never freed
//! under it ([`leaked_slots`] counts them).

use crate::mem::{Mapping, Slot};
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

static LEAKED: AtomicU64 = AtomicU64::new(0);

/// Slots leaked because the kernel still held them when their ring was dropped.
pub fn leaked_slots() -> u64 {
    LEAKED.load(Ordering::Relaxed)
}

/// `IORING_SEND_ZC_REPORT_USAGE` (include/uapi/linux/io_uring.h, Linux 6.2): ask the notification
/// to say whether the kernel copied. Not exported by the io-uring crate.
pub const IORING_SEND_ZC_REPORT_USAGE: u16 = 1 << 3;

/// user_data of the ring's own cancel requests.
const CANCEL_TAG: u64 = u64::MAX;

/// One send request.
#[derive(Debug, Clone, Copy)]
pub struct SendOp {
    /// The socket.
    pub fd: RawFd,
    /// Bytes to send from the start of the slot.
    pub len: u32,
    /// `IORING_OP_SEND_ZC` instead of `IORING_OP_SEND`.
    pub zero_copy: bool,
    /// Use the ring's registered buffer (zero-copy only); the slot must belong to the
    /// registered mapping.
    pub fixed: bool,
    /// `msg_flags` for the send (`MSG_WAITALL` for streams, `MSG_NOSIGNAL` is always added).
    pub msg_flags: i32,
    /// `IOSQE_IO_LINK`: the next request starts only after this one completes.
    pub link: bool,
}

/// A completion, with the slot if this was the request's final CQE.
#[derive(Debug)]
pub struct Completion {
    /// The slot id the request was queued with.
    pub slot_id: u32,
    /// `res` of the CQE.
    pub res: i32,
    /// `flags` of the CQE.
    pub flags: u32,
    /// The slot, returned with the final CQE.
    pub slot: Option<Slot>,
}

/// Ring setup flags that worked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingFlags {
    /// IORING_SETUP_COOP_TASKRUN.
    pub coop_taskrun: bool,
}

/// An io_uring instance for sends from slots.
pub struct Ring {
    ring: IoUring,
    held: Vec<Option<Slot>>,
    in_flight: usize,
    registered: Option<Arc<Mapping>>,
    flags: RingFlags,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("in_flight", &self.in_flight)
            .field("flags", &self.flags)
            .finish()
    }
}

impl Ring {
    /// A ring with `entries` SQEs for slots with ids `0..max_slots`.
    /// Tries IORING_SETUP_COOP_TASKRUN (5.19) and falls back to no flags.
    pub fn new(entries: u32, max_slots: usize) -> io::Result<Ring> {
        let (ring, coop) = match IoUring::builder().setup_coop_taskrun().build(entries) {
            Ok(r) => (r, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (IoUring::new(entries)?, false),
            Err(e) => return Err(e),
        };
        let mut held = Vec::with_capacity(max_slots);
        held.resize_with(max_slots, || None);
        Ok(Ring {
            ring,
            held,
            in_flight: 0,
            registered: None,
            flags: RingFlags { coop_taskrun: coop },
        })
    }

    /// The setup flags in force.
    pub fn flags(&self) -> RingFlags {
        self.flags
    }

    /// Whether the kernel supports IORING_OP_SEND_ZC (Linux 6.0).
    pub fn supports_send_zc(&self) -> io::Result<bool> {
        self.supports(opcode::SendZc::CODE)
    }

    /// Whether the kernel supports opcode `op` (IORING_REGISTER_PROBE).
    pub fn supports(&self, op: u8) -> io::Result<bool> {
        let mut probe = io_uring::Probe::new();
        self.ring.submitter().register_probe(&mut probe)?;
        Ok(probe.is_supported(op))
    }

    /// Registers `map` as fixed buffer 0 (IORING_REGISTER_BUFFERS). The kernel pins its pages and
    /// charges them to RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK; `ENOMEM` means that
    /// limit is too small. One buffer may not exceed 1 GiB.
    pub fn register(&mut self, map: &Arc<Mapping>) -> io::Result<()> {
        if self.registered.is_some() {
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        let iov = libc::iovec {
            iov_base: map.addr() as *mut libc::c_void,
            iov_len: map.len(),
        };
        // SAFETY: the iovec covers a live mapping; we keep an Arc to it in `self.registered`
        // until the buffers are unregistered (drop), so the range stays mapped while registered.
        unsafe {
            self.ring
                .submitter()
                .register_buffers(std::slice::from_ref(&iov))?
        };
        self.registered = Some(Arc::clone(map));
        Ok(())
    }

    /// Requests queued or running and not yet finished.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Queues a send of `op.len` bytes from the start of `slot`. The ring keeps the slot until the
    /// request's final completion. On error the slot is handed back.
    pub fn push_send(&mut self, slot: Slot, op: &SendOp) -> Result<(), (Slot, io::Error)> {
        let id = slot.id() as usize;
        if id >= self.held.len() || self.held[id].is_some() {
            return Err((slot, io::Error::from_raw_os_error(libc::EBUSY)));
        }
        if op.len as usize > slot.len() {
            return Err((slot, io::Error::from_raw_os_error(libc::EINVAL)));
        }
        let buf_index = if op.fixed {
            match &self.registered {
                Some(m) if Arc::ptr_eq(m, slot.mapping()) => Some(0u16),
                _ => return Err((slot, io::Error::from_raw_os_error(libc::EFAULT))),
            }
        } else {
            None
        };
        let fd = types::Fd(op.fd);
        let ptr = slot.addr() as *const u8;
        let flags = op.msg_flags | libc::MSG_NOSIGNAL;
        let entry = if op.zero_copy {
            opcode::SendZc::new(fd, ptr, op.len)
                .buf_index(buf_index)
                .flags(flags)
                .zc_flags(IORING_SEND_ZC_REPORT_USAGE)
                .build()
        } else {
            opcode::Send::new(fd, ptr, op.len).flags(flags).build()
        };
        let mut entry = entry.user_data(id as u64);
        if op.link {
            entry = entry.flags(squeue::Flags::IO_LINK);
        }
        if self.ring.submission().is_full() {
            if let Err(e) = self.ring.submit() {
                return Err((slot, e));
            }
        }
        // SAFETY: the SQE points at `slot`'s bytes; the slot is moved into `self.held` below and
        // given back only with this request's final CQE (or leaked if the ring is dropped while the
        // kernel still holds it), so the memory outlives the kernel's use.
        let pushed = unsafe { self.ring.submission().push(&entry) };
        if pushed.is_err() {
            return Err((slot, io::Error::from_raw_os_error(libc::EAGAIN)));
        }
        self.held[id] = Some(slot);
        self.in_flight += 1;
        Ok(())
    }

    /// Submits queued SQEs without waiting.
    pub fn submit(&mut self) -> io::Result<usize> {
        self.ring.submit()
    }

    /// Submits and waits for at least `want` completions or `timeout`, whichever first.
    /// A timeout is not an error.
    pub fn submit_and_wait(&mut self, want: usize, timeout: Duration) -> io::Result<()> {
        submit_and_wait(&self.ring, want, timeout)
    }

    /// Takes every available completion, handing the slot back with each final CQE.
    pub fn drain(&mut self, mut f: impl FnMut(Completion)) {
        let mut cq = self.ring.completion();
        cq.sync();
        for cqe in &mut cq {
            let ud = cqe.user_data();
            if ud == CANCEL_TAG {
                continue;
            }
            let slot = if cqueue::more(cqe.flags()) {
                None
            } else {
                let s = self.held.get_mut(ud as usize).and_then(Option::take);
                if s.is_some() {
                    self.in_flight -= 1;
                }
                s
            };
            f(Completion {
                slot_id: ud as u32,
                res: cqe.result(),
                flags: cqe.flags(),
                slot,
            });
        }
    }
}

/// Submits what `ring` has queued and waits for `want` completions or `timeout`, whichever comes
/// first (IORING_ENTER_EXT_ARG, Linux 5.11). A timeout, a signal or a full completion queue
/// (`ETIME`, `EINTR`, `EBUSY`) is not an error: the caller reaps what is there and decides.
pub(crate) fn submit_and_wait(ring: &IoUring, want: usize, timeout: Duration) -> io::Result<()> {
    let ts = types::Timespec::new()
        .sec(timeout.as_secs())
        .nsec(timeout.subsec_nanos());
    let args = types::SubmitArgs::new().timespec(&ts);
    match ring.submitter().submit_with_args(want, &args) {
        Ok(_) => Ok(()),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        if self.in_flight > 0 {
            for (id, s) in self.held.iter().enumerate() {
                if s.is_some() {
                    let e = opcode::AsyncCancel::new(id as u64)
                        .build()
                        .user_data(CANCEL_TAG);
                    // SAFETY: a cancel SQE references no user memory.
                    let _ = unsafe { self.ring.submission().push(&e) };
                }
            }
            let deadline = Instant::now() + Duration::from_secs(2);
            while self.in_flight > 0 && Instant::now() < deadline {
                if self.submit_and_wait(1, Duration::from_millis(50)).is_err() {
                    break;
                }
                self.drain(drop);
            }
        }
        let mut leaked = 0;
        for s in self.held.iter_mut() {
            if let Some(slot) = s.take() {
                // The kernel may still read this memory: never free it.
                std::mem::forget(slot);
                leaked += 1;
            }
        }
        if leaked > 0 {
            LEAKED.fetch_add(leaked, Ordering::Relaxed);
            // Leaking the registration's Arc too keeps the mapping alive.
            if let Some(m) = self.registered.take() {
                std::mem::forget(m);
            }
        }
    }
}
