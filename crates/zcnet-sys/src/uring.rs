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
    /// The socket registered as fixed file 0 ([`Ring::register_file`]).
    file: Option<RawFd>,
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
            file: None,
            flags: RingFlags { coop_taskrun: coop },
        })
    }

    /// The setup flags in force.
    pub fn flags(&self) -> RingFlags {
        self.flags
    }

    /// Registers `efd` (`IOring_REGISTER_EVENTFD`): the kernel signals it for every completion
    /// posted (and, on a DEFER_TASKRUN ring, when work is queued for the next wait), so an
    /// event loop can wait on it. The kernel takes its own reference: `efd` may be dropped
    /// later. `EBUSY` when one is registered already.
    pub fn register_eventfd(&self, efd: &crate::epoll::EventFd) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        self.ring.submitter().register_eventfd(efd.as_raw_fd())
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

    /// Registers `fd` as fixed file 0 (IORING_REGISTER_FILES, Linux 5.1): sends on `fd` then
    /// name it by index (`IOSQE_FIXED_FILE`), which spares the kernel a file lookup and a
    /// reference count per request. The ring holds its own reference to the file until it is
    /// dropped. The caller keeps `fd` open, and names no other file by that number, for as long
    /// as it queues sends on this ring: a send whose `SendOp::fd` equals `fd` goes to the
    /// registered file. Only one file: a second call is `EBUSY`.
    pub fn register_file(&mut self, fd: RawFd) -> io::Result<()> {
        if self.file.is_some() {
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        self.ring.submitter().register_files(&[fd])?;
        self.file = Some(fd);
        Ok(())
    }

    /// The file registered with [`Ring::register_file`], if any.
    pub fn registered_file(&self) -> Option<RawFd> {
        self.file
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
        let ptr = slot.addr() as *const u8;
        let flags = op.msg_flags | libc::MSG_NOSIGNAL;
        // The registered socket by index (no per-request file lookup), any other by number.
        let entry = match (self.file == Some(op.fd), op.zero_copy) {
            (true, true) => opcode::SendZc::new(types::Fixed(0), ptr, op.len)
                .buf_index(buf_index)
                .flags(flags)
                .zc_flags(IORING_SEND_ZC_REPORT_USAGE)
                .build(),
            (false, true) => opcode::SendZc::new(types::Fd(op.fd), ptr, op.len)
                .buf_index(buf_index)
                .flags(flags)
                .zc_flags(IORING_SEND_ZC_REPORT_USAGE)
                .build(),
            (true, false) => opcode::Send::new(types::Fixed(0), ptr, op.len)
                .flags(flags)
                .build(),
            (false, false) => opcode::Send::new(types::Fd(op.fd), ptr, op.len)
                .flags(flags)
                .build(),
        };
        let mut entry = entry.user_data(id as u64);
        if op.link {
            entry = entry.flags(squeue::Flags::IO_LINK);
        }
        // One view of the submission queue (each view reads the kernel's head when made and
        // publishes the tail when dropped): a second only where the queue was full.
        // SAFETY: the SQE points at `slot`'s bytes; the slot is moved into `self.held` below and
        // given back only with this request's final CQE (or leaked if the ring is dropped while
        // the kernel still holds it), so the memory outlives the kernel's use.
        let full = unsafe { self.ring.submission().push(&entry) }.is_err();
        if full {
            if let Err(e) = self.ring.submit() {
                return Err((slot, e));
            }
            // SAFETY: as above, the same SQE and slot.
            if unsafe { self.ring.submission().push(&entry) }.is_err() {
                return Err((slot, io::Error::from_raw_os_error(libc::EAGAIN)));
            }
        }
        self.held[id] = Some(slot);
        self.in_flight += 1;
        Ok(())
    }

    /// SQEs queued and not yet handed to the kernel.
    pub fn queued(&mut self) -> usize {
        self.ring.submission().len()
    }

    /// Whether completions wait in the completion queue (no system call).
    pub fn completions_ready(&mut self) -> bool {
        !self.ring.completion().is_empty()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::Mapping;
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    use zcnet_core::sendzc::{IORING_CQE_F_MORE, IORING_CQE_F_NOTIF};
    use zcnet_core::SendZcTracker;
    use zcnet_testkit::{skip, Need};

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let a = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (b, _) = l.accept().expect("accept");
        (a, b)
    }

    /// What one drained completion said, and the slot it handed back.
    #[derive(Debug)]
    struct Seen {
        slot_id: u32,
        res: i32,
        flags: u32,
        returned: Option<Slot>,
    }

    /// Drains until `done(seen so far)`; fails after 5 s.
    fn drain_until(ring: &mut Ring, seen: &mut Vec<Seen>, done: impl Fn(&[Seen]) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !done(seen) {
            assert!(Instant::now() < deadline, "completions so far: {seen:?}");
            ring.submit_and_wait(1, Duration::from_millis(50))
                .expect("io_uring_enter");
            ring.drain(|c| {
                seen.push(Seen {
                    slot_id: c.slot_id,
                    res: c.res,
                    flags: c.flags,
                    returned: c.slot,
                })
            });
        }
    }

    /// The memory rule itself. A zero-copy send's result CQE (`F_MORE`) must not hand
    /// its slot back: the kernel still references the bytes until the notification
    /// (`F_NOTIF`), which is the CQE that returns it. A CQE without `F_MORE` (a plain send's
    /// only CQE: no notification will come) returns its slot at once. The send is made with
    /// `MSG_MORE` so the kernel holds the partial segment after accepting it: the result
    /// arrives while the notification cannot have (it comes once the next send without
    /// `MSG_MORE` pushes the segment out). Every completion is also fed to `SendZcTracker`,
    /// whose `released` must agree with the ring.
    #[zcnet_testkit::test]
    fn a_zero_copy_send_keeps_its_slot_until_the_notification() {
        let mut ring =
            Ring::new(8, 2).unwrap_or_else(|e| skip(Need::Kernel, format!("io_uring: {e}")));
        if !ring.supports_send_zc().unwrap_or(false) {
            skip(Need::Kernel, "no IORING_OP_SEND_ZC (Linux 6.0)");
        }
        let (_map, slots) = Mapping::anonymous(2 * 4096)
            .expect("mmap")
            .into_slots(4096, 2)
            .expect("slots");
        let [mut zc, mut plain] = <[Slot; 2]>::try_from(slots).expect("two slots");
        zc.bytes_mut().expect("cpu memory").fill(0x5a);
        plain.bytes_mut().expect("cpu memory").fill(0xa5);
        let (a, mut b) = pair();
        let op = |zero_copy: bool, more: bool| SendOp {
            fd: a.as_raw_fd(),
            len: 4096,
            zero_copy,
            fixed: false,
            msg_flags: if more { libc::MSG_MORE } else { 0 },
            link: false,
        };
        let mut tracker = SendZcTracker::new(2);
        let mut seen = Vec::new();

        ring.push_send(zc, &op(true, true))
            .map_err(|(_, e)| e)
            .expect("queue the zero-copy send");
        tracker.on_submit(0, 4096).expect("submit");
        ring.submit().expect("submit");
        drain_until(&mut ring, &mut seen, |s| {
            s.iter()
                .any(|c| c.slot_id == 0 && c.flags & IORING_CQE_F_NOTIF == 0)
        });
        let result = seen
            .iter()
            .find(|c| c.slot_id == 0 && c.flags & IORING_CQE_F_NOTIF == 0)
            .expect("the result");
        assert_eq!(result.res, 4096, "{seen:?}");
        assert_ne!(
            result.flags & IORING_CQE_F_MORE,
            0,
            "a zero-copy result announces its notification: {seen:?}"
        );
        assert!(
            result.returned.is_none(),
            "the slot came back with the result CQE (F_MORE): the kernel may still read it"
        );
        let finals = seen.iter().filter(|c| c.returned.is_some()).count();
        assert_eq!(
            ring.in_flight(),
            1 - finals,
            "in flight until the notification: {seen:?}"
        );

        // A plain send: its only CQE has no F_MORE and returns its slot. Without MSG_MORE it
        // also pushes the held segment out, so the zero-copy notification follows.
        ring.push_send(plain, &op(false, false))
            .map_err(|(_, e)| e)
            .expect("queue the plain send");
        tracker.on_submit(1, 4096).expect("submit");
        ring.submit().expect("submit");
        let mut got = vec![0u8; 8192];
        b.read_exact(&mut got).expect("read");
        assert!(got[..4096].iter().all(|&x| x == 0x5a));
        assert!(got[4096..].iter().all(|&x| x == 0xa5));
        drain_until(&mut ring, &mut seen, |s| {
            s.iter().filter(|c| c.returned.is_some()).count() == 2
        });
        assert_eq!(ring.in_flight(), 0);

        for c in &seen {
            let out = tracker
                .on_cqe(c.slot_id as usize, c.res, c.flags)
                .unwrap_or_else(|e| panic!("{e}: {seen:?}"));
            let last = c.flags & IORING_CQE_F_MORE == 0;
            assert_eq!(
                c.returned.is_some(),
                last,
                "a slot comes back with its request's final CQE and only then: {c:?}"
            );
            assert_eq!(out.released, last, "the tracker agrees: {c:?}");
            if let Some(s) = &c.returned {
                assert_eq!(s.id(), c.slot_id);
            }
        }
        let notif = seen
            .iter()
            .find(|c| c.flags & IORING_CQE_F_NOTIF != 0)
            .expect("the notification");
        assert_eq!(notif.slot_id, 0);
        assert!(
            notif.returned.is_some(),
            "the notification returns the slot"
        );
        let plain_cqe = seen.iter().find(|c| c.slot_id == 1).expect("plain CQE");
        assert_eq!(
            (plain_cqe.res, plain_cqe.flags & IORING_CQE_F_MORE),
            (4096, 0)
        );
        assert_eq!(
            seen.len(),
            3,
            "result, notification, plain result: {seen:?}"
        );
        assert_eq!(tracker.in_flight(), 0);
    }
}
