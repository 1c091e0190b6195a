//! An io_uring ring for sends and receives on memory that foreign code lends ([`ForeignBuf`]):
//! NCCL's buffers in the net plugin.
//!
//! The memory rule is the one of [`crate::uring`]: a request holds a reference to its buffer
//! from the moment it is queued until its *final* CQE (the one without `IORING_CQE_F_MORE`; for a
//! zero-copy send that is the notification, io_uring_prep_send_zc(3)). Dropping the ring cancels
//! what is in flight (IORING_OP_ASYNC_CANCEL with IORING_ASYNC_CANCEL_ANY, Linux 5.19) and waits
//! for those final CQEs, so no request can touch a buffer after its owner got it back.
//!
//! Memory foreign code registered ([`ForeignMr`], NCCL's `regMr`) can become an io_uring fixed
//! buffer (a sparse table, IORING_REGISTER_BUFFERS2 with IORING_RSRC_REGISTER_SPARSE and
//! IORING_REGISTER_BUFFERS_UPDATE, Linux 5.13): the kernel pins its pages once instead of per
//! request. Registration charges RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK.

use crate::foreign::ForeignBuf;
use io_uring::{opcode, squeue, types, IoUring};
use std::collections::HashMap;
use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// user_data of the ring's own cancel requests.
const CANCEL_TAG: u64 = u64::MAX;

/// Memory foreign code registered for a while (NCCL's `regMr` .. `deregMr`).
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

    /// Whether `addr..addr + len` lies inside.
    pub fn covers(&self, addr: usize, len: usize) -> bool {
        addr >= self.addr && addr.saturating_add(len) <= self.addr.saturating_add(self.len)
    }
}

/// One request: what it does and on which part of which buffer.
#[derive(Debug, Clone)]
pub struct Request {
    /// The socket.
    pub fd: RawFd,
    /// The buffer; the ring keeps a reference until the request's final CQE.
    pub buf: Arc<ForeignBuf>,
    /// Offset of the bytes in `buf`.
    pub off: usize,
    /// How many bytes.
    pub len: u32,
    /// The operation.
    pub op: Op,
    /// `msg_flags` (`MSG_NOSIGNAL` is always added to sends).
    pub flags: i32,
    /// `IOSQE_IO_LINK`: the next request starts only after this one succeeded.
    pub link: bool,
}

/// The operation of a [`Request`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// IORING_OP_SEND (the kernel copies).
    Send,
    /// IORING_OP_SEND_ZC, from fixed buffer `fixed` when given (see [`ForeignRing::fixed_index`]).
    SendZc {
        /// The fixed buffer covering the bytes.
        fixed: Option<u16>,
    },
    /// IORING_OP_RECV into the bytes.
    Recv,
}

/// A completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cqe {
    /// The tag the request was pushed with.
    pub tag: u64,
    /// `res`.
    pub res: i32,
    /// `flags`.
    pub flags: u32,
    /// This was the request's final CQE: its buffer reference is gone.
    pub last: bool,
}

/// An io_uring instance for requests on foreign memory.
pub struct ForeignRing {
    /// Dropped by hand: kept (leaked) when the kernel would not let go of a request.
    ring: std::mem::ManuallyDrop<IoUring>,
    held: HashMap<u64, Arc<ForeignBuf>>,
    fixed: Vec<Option<ForeignMr>>,
}

impl std::fmt::Debug for ForeignRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForeignRing")
            .field("in_flight", &self.held.len())
            .field("fixed_slots", &self.fixed.len())
            .finish()
    }
}

impl ForeignRing {
    /// A ring of `entries` SQEs with room for `fixed_slots` fixed buffers (0 when the kernel
    /// refuses a sparse table: requests then run without fixed buffers).
    pub fn new(entries: u32, fixed_slots: u32) -> io::Result<ForeignRing> {
        let ring = match IoUring::builder().setup_coop_taskrun().build(entries) {
            Ok(r) => r,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => IoUring::new(entries)?,
            Err(e) => return Err(e),
        };
        let slots = if fixed_slots > 0
            && ring
                .submitter()
                .register_buffers_sparse(fixed_slots)
                .is_ok()
        {
            fixed_slots as usize
        } else {
            0
        };
        let mut fixed = Vec::with_capacity(slots);
        fixed.resize_with(slots, || None);
        Ok(ForeignRing {
            ring: std::mem::ManuallyDrop::new(ring),
            held: HashMap::new(),
            fixed,
        })
    }

    /// Whether the kernel runs IORING_OP_SEND_ZC (Linux 6.0).
    pub fn supports_send_zc(&self) -> bool {
        let mut probe = io_uring::Probe::new();
        self.ring.submitter().register_probe(&mut probe).is_ok()
            && probe.is_supported(opcode::SendZc::CODE)
    }

    /// Makes `mr` a fixed buffer; its index. `ENOSPC` when the table is full or absent,
    /// `ENOMEM` when RLIMIT_MEMLOCK is too small, `EINVAL` over 1 GiB.
    pub fn register(&mut self, mr: ForeignMr) -> io::Result<u16> {
        let idx = self
            .fixed
            .iter()
            .position(Option::is_none)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOSPC))?;
        let iov = libc::iovec {
            iov_base: mr.addr as *mut libc::c_void,
            iov_len: mr.len,
        };
        // SAFETY: `mr`'s creator promised the range stays mapped while `mr` lives; we keep `mr`
        // in `self.fixed[idx]` until the slot is cleared again (`unregister` or drop).
        unsafe {
            self.ring.submitter().register_buffers_update(
                idx as u32,
                std::slice::from_ref(&iov),
                None,
            )?
        };
        self.fixed[idx] = Some(mr);
        Ok(idx as u16)
    }

    /// Clears fixed buffer `idx` (requests in flight keep the pages pinned until they end).
    pub fn unregister(&mut self, idx: u16) -> io::Result<()> {
        let slot = self
            .fixed
            .get_mut(usize::from(idx))
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        if slot.is_none() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let empty = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        // SAFETY: an empty iovec clears the slot and references no memory.
        unsafe {
            self.ring.submitter().register_buffers_update(
                u32::from(idx),
                std::slice::from_ref(&empty),
                None,
            )?
        };
        *slot = None;
        Ok(())
    }

    /// The fixed buffer covering `addr..addr + len`, if one does.
    pub fn fixed_index(&self, addr: usize, len: usize) -> Option<u16> {
        self.fixed
            .iter()
            .position(|m| m.as_ref().is_some_and(|m| m.covers(addr, len)))
            .map(|i| i as u16)
    }

    /// Requests queued or running whose final CQE has not been taken.
    pub fn in_flight(&self) -> usize {
        self.held.len()
    }

    /// Queues `req` under `tag` (unique among requests in flight; `u64::MAX` is reserved).
    pub fn push(&mut self, tag: u64, req: &Request) -> io::Result<()> {
        if tag == CANCEL_TAG || self.held.contains_key(&tag) {
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        if req.buf.slice(req.off, req.len as usize).is_none() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let ptr = (req.buf.addr() + req.off) as *mut u8;
        if let Op::SendZc { fixed: Some(i) } = req.op {
            let ok = self
                .fixed
                .get(usize::from(i))
                .and_then(Option::as_ref)
                .is_some_and(|m| m.covers(ptr as usize, req.len as usize));
            if !ok {
                return Err(io::Error::from_raw_os_error(libc::EFAULT));
            }
        }
        let fd = types::Fd(req.fd);
        let entry = match req.op {
            Op::Send => opcode::Send::new(fd, ptr, req.len)
                .flags(req.flags | libc::MSG_NOSIGNAL)
                .build(),
            Op::SendZc { fixed } => opcode::SendZc::new(fd, ptr, req.len)
                .buf_index(fixed)
                .flags(req.flags | libc::MSG_NOSIGNAL)
                .zc_flags(crate::uring::IORING_SEND_ZC_REPORT_USAGE)
                .build(),
            Op::Recv => opcode::Recv::new(fd, ptr, req.len).flags(req.flags).build(),
        };
        let mut entry = entry.user_data(tag);
        if req.link {
            entry = entry.flags(squeue::Flags::IO_LINK);
        }
        if self.ring.submission().is_full() {
            self.ring.submit()?;
        }
        // SAFETY: the SQE points into `req.buf` (bounds checked above); the Arc is kept in
        // `self.held` until this request's final CQE, and dropping the ring waits for the final
        // CQEs, so the memory outlives the kernel's use.
        unsafe { self.ring.submission().push(&entry) }
            .map_err(|_| io::Error::from_raw_os_error(libc::EAGAIN))?;
        self.held.insert(tag, Arc::clone(&req.buf));
        Ok(())
    }

    /// Submits what is queued, without waiting.
    pub fn submit(&mut self) -> io::Result<()> {
        match self.ring.submit() {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EBUSY)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Submits and waits up to `timeout` for at least one completion (a timeout is not an error).
    pub fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        crate::uring::submit_and_wait(&self.ring, 1, timeout)
    }

    /// Takes every available completion, dropping the buffer reference with each final CQE.
    pub fn drain(&mut self, mut f: impl FnMut(Cqe)) {
        let mut cq = self.ring.completion();
        cq.sync();
        for cqe in &mut cq {
            let tag = cqe.user_data();
            if tag == CANCEL_TAG {
                continue;
            }
            let last = !io_uring::cqueue::more(cqe.flags());
            if last {
                self.held.remove(&tag);
            }
            f(Cqe {
                tag,
                res: cqe.result(),
                flags: cqe.flags(),
                last,
            });
        }
    }

    /// Cancels every request in flight and waits up to `timeout` for their final CQEs (handed
    /// to `f`); whether none is left. A zero-copy send whose data the socket still holds ends
    /// only when the socket lets go of it: close or reset the socket to hurry it.
    pub fn cancel_all(&mut self, timeout: Duration, mut f: impl FnMut(Cqe)) -> bool {
        if self.held.is_empty() {
            return true;
        }
        let cancel = opcode::AsyncCancel2::new(types::CancelBuilder::any())
            .build()
            .user_data(CANCEL_TAG);
        // SAFETY: a cancel SQE references no user memory.
        if unsafe { self.ring.submission().push(&cancel) }.is_err() {
            let _ = self.ring.submit();
            // SAFETY: as above.
            let _ = unsafe { self.ring.submission().push(&cancel) };
        }
        let deadline = Instant::now() + timeout;
        loop {
            self.drain(&mut f);
            if self.held.is_empty() {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.wait(left.min(Duration::from_millis(20))).is_err() {
                return false;
            }
        }
    }
}

impl Drop for ForeignRing {
    fn drop(&mut self) {
        if self.cancel_all(Duration::from_secs(10), drop) {
            // SAFETY: nothing is in flight, and `self.ring` is not used after this.
            unsafe { std::mem::ManuallyDrop::drop(&mut self.ring) };
            return;
        }
        // The kernel still holds requests after cancellation and 10 s. Closing the ring would
        // block until they end; keep it (and the buffers it references) alive for good instead.
        LEAKED_RINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        std::mem::forget(std::mem::take(&mut self.held));
    }
}

static LEAKED_RINGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Rings kept alive on drop because the kernel would not release a request (for logs and
/// leak checks; 0 in a healthy process).
pub fn leaked_rings() -> u64 {
    LEAKED_RINGS.load(std::sync::atomic::Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let a = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (b, _) = l.accept().expect("accept");
        (a, b)
    }

    fn collect(ring: &mut ForeignRing, want_last: usize) -> Vec<Cqe> {
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while out.iter().filter(|c: &&Cqe| c.last).count() < want_last {
            assert!(Instant::now() < deadline, "completions: {out:?}");
            ring.wait(Duration::from_millis(50)).expect("wait");
            ring.drain(|c| out.push(c));
        }
        out
    }

    #[zcnet_testkit::test]
    fn send_recv_and_zero_copy_from_a_fixed_buffer() {
        let mut ring = ForeignRing::new(16, 4).unwrap_or_else(|e| {
            zcnet_testkit::skip(zcnet_testkit::Need::Kernel, format!("io_uring: {e}"))
        });
        let (a, mut b) = pair();
        let mut data: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
        let (addr, len) = (data.as_mut_ptr() as usize, data.len());
        // SAFETY: `data` outlives the ring's registration (unregistered below, before drop).
        let idx = ring.register(unsafe { ForeignMr::new(addr, len) });
        // SAFETY: `data` is not touched until every request on it has ended (collect below).
        let buf = Arc::new(unsafe { ForeignBuf::new(data.as_mut_ptr(), len) }.expect("buf"));
        let fixed = idx.as_ref().ok().copied();
        assert_eq!(ring.fixed_index(addr + 10, 100), fixed);
        assert_eq!(ring.fixed_index(addr + len - 1, 2), None);
        let zc = ring.supports_send_zc();
        let send = Request {
            fd: a.as_raw_fd(),
            buf: Arc::clone(&buf),
            off: 0,
            len: 1000,
            op: if zc { Op::SendZc { fixed } } else { Op::Send },
            flags: libc::MSG_WAITALL,
            link: true,
        };
        ring.push(1, &send).expect("push");
        let rest = Request {
            off: 1000,
            len: (len - 1000) as u32,
            op: Op::Send,
            link: false,
            ..send.clone()
        };
        ring.push(2, &rest).expect("push");
        assert_eq!(
            ring.push(2, &rest).err().and_then(|e| e.raw_os_error()),
            Some(libc::EBUSY)
        );
        ring.submit().expect("submit");
        let mut got = vec![0u8; len];
        b.read_exact(&mut got).expect("read");
        assert_eq!(got, data);
        let cqes = collect(&mut ring, 2);
        assert!(cqes.iter().any(|c| c.tag == 1 && c.res == 1000));
        assert!(cqes
            .iter()
            .any(|c| c.tag == 2 && c.res == (len - 1000) as i32));
        assert_eq!(ring.in_flight(), 0);
        if let Ok(i) = idx {
            ring.unregister(i).expect("unregister");
            assert_eq!(ring.fixed_index(addr, 1), None);
        }

        // A receive into the middle of a foreign buffer, with MSG_WAITALL across two writes.
        let mut into = vec![0u8; 100];
        // SAFETY: `into` is not touched until the request ended.
        let rb = Arc::new(unsafe { ForeignBuf::new(into.as_mut_ptr(), 100) }.expect("buf"));
        let recv = Request {
            fd: a.as_raw_fd(),
            buf: rb,
            off: 10,
            len: 80,
            op: Op::Recv,
            flags: libc::MSG_WAITALL,
            link: false,
        };
        ring.push(3, &recv).expect("push");
        ring.submit().expect("submit");
        b.write_all(&[5u8; 30]).expect("write");
        std::thread::sleep(Duration::from_millis(20));
        b.write_all(&[6u8; 50]).expect("write");
        let c = collect(&mut ring, 1);
        assert_eq!(c[0].res, 80);
        assert_eq!(&into[..10], &[0u8; 10]);
        assert_eq!(&into[10..40], &[5u8; 30]);
        assert_eq!(&into[40..90], &[6u8; 50]);
        assert_eq!(&into[90..], &[0u8; 10]);
    }

    #[zcnet_testkit::test]
    fn bad_requests_are_refused_and_drop_cancels_pending_receives() {
        let mut ring = ForeignRing::new(8, 0).unwrap_or_else(|e| {
            zcnet_testkit::skip(zcnet_testkit::Need::Kernel, format!("io_uring: {e}"))
        });
        let (a, _b) = pair();
        let mut into = vec![0u8; 64];
        // SAFETY: `into` is not touched until the ring (and its requests) is gone.
        let rb = Arc::new(unsafe { ForeignBuf::new(into.as_mut_ptr(), 64) }.expect("buf"));
        let mut req = Request {
            fd: a.as_raw_fd(),
            buf: rb,
            off: 60,
            len: 8,
            op: Op::Recv,
            flags: 0,
            link: false,
        };
        let err = |r: io::Result<()>| r.err().and_then(|e| e.raw_os_error());
        assert_eq!(
            err(ring.push(1, &req)),
            Some(libc::EINVAL),
            "outside the buffer"
        );
        req.off = 0;
        assert_eq!(
            err(ring.push(u64::MAX, &req)),
            Some(libc::EBUSY),
            "reserved tag"
        );
        let zc = Request {
            op: Op::SendZc { fixed: Some(0) },
            ..req.clone()
        };
        assert_eq!(
            err(ring.push(1, &zc)),
            Some(libc::EFAULT),
            "no such fixed buffer"
        );
        // SAFETY: never used for I/O: the table is absent.
        let mr = unsafe { ForeignMr::new(into.as_ptr() as usize, 64) };
        assert_eq!(
            ring.register(mr).err().and_then(|e| e.raw_os_error()),
            Some(libc::ENOSPC)
        );
        ring.push(7, &req).expect("push");
        ring.submit().expect("submit");
        assert_eq!(ring.in_flight(), 1);
        let t = Instant::now();
        let mut seen = Vec::new();
        assert!(ring.cancel_all(Duration::from_secs(5), |c| seen.push(c)));
        assert!(t.elapsed() < Duration::from_secs(2));
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].tag, 7);
        assert_eq!(seen[0].res, -libc::ECANCELED);
        drop(ring);
        assert_eq!(into, vec![0u8; 64]);
    }
}
