//! The yardstick for zcnet's own overhead: the smallest loop that sends as the `uring-zc`
//! backend sends datagrams — `inflight` independent IORING_OP_SEND_ZC requests (`MSG_NOSIGNAL`)
//! from slices of one registered buffer, `IORING_SEND_ZC_REPORT_USAGE`, the same ring flags, one
//! `io_uring_enter` per wait — with no library around it. It is not what the backend does on a
//! TCP stream: there the backend links its sends (`IOSQE_IO_LINK`, with `MSG_WAITALL`) and starts
//! a chain only when the previous chain's results are in, and this loop does neither. So
//! `zcnet bench tx` runs it on the UDP sink only, next to the backend, and prints the ratio.
//! Shaped after the kernel's io_uring_zerocopy_tx selftest (tools/testing/selftests/net).

use crate::uring::IORING_SEND_ZC_REPORT_USAGE;
use io_uring::{cqueue, opcode, types, IoUring};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What the raw loop did.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawResult {
    /// Bytes the kernel accepted.
    pub bytes: u64,
    /// Send calls (or requests) the kernel accepted.
    pub sends: u64,
    /// Notifications that said COPIED.
    pub copied_notifications: u64,
    /// Notifications in all.
    pub notifications: u64,
    /// Wall seconds.
    pub seconds: f64,
    /// CPU seconds of the calling thread.
    pub cpu_seconds: f64,
}

/// Sends `len`-byte messages on the connected socket `fd` for `duration` with `inflight`
/// SEND_ZC requests in flight, each from its own slice of one registered buffer. The caller's
/// `halt` flag, once set (from another thread, or a signal handler), stops it early, with
/// [`io::ErrorKind::Interrupted`] once every request in flight has completed.
pub fn raw_send_zc(
    fd: RawFd,
    len: usize,
    inflight: usize,
    duration: Duration,
    halt: &AtomicBool,
) -> io::Result<RawResult> {
    let (map, slots) = filled_slots(len, inflight)?;
    let mut ring = match IoUring::builder()
        .setup_coop_taskrun()
        .build((2 * inflight as u32).next_power_of_two())
    {
        Ok(r) => r,
        Err(_) => IoUring::new((2 * inflight as u32).next_power_of_two())?,
    };
    let iov = libc::iovec {
        iov_base: map.addr() as *mut libc::c_void,
        iov_len: map.len(),
    };
    // SAFETY: the iovec covers `map`, which lives until after the ring is dropped (declared
    // before it, dropped after it at the end of this function).
    unsafe {
        ring.submitter()
            .register_buffers(std::slice::from_ref(&iov))?
    };
    let mut busy = vec![false; inflight];
    let mut res = RawResult::default();
    let cpu0 = crate::os::thread_cpu_seconds();
    let start = Instant::now();
    let deadline = start + duration;
    let mut outstanding = 0usize;
    let mut stop = false;
    let mut err = None;
    loop {
        if !stop {
            for (i, b) in busy.iter_mut().enumerate() {
                if *b {
                    continue;
                }
                let e =
                    opcode::SendZc::new(types::Fd(fd), slots[i].addr() as *const u8, len as u32)
                        .buf_index(Some(0))
                        .flags(libc::MSG_NOSIGNAL)
                        .zc_flags(IORING_SEND_ZC_REPORT_USAGE)
                        .build()
                        .user_data(i as u64);
                // SAFETY: the SQE points into `map`, registered and alive until the ring is gone;
                // slot i is not reused until its final CQE (busy[i]).
                if unsafe { ring.submission().push(&e) }.is_err() {
                    break;
                }
                *b = true;
                outstanding += 1;
            }
        }
        if outstanding == 0 {
            break;
        }
        match ring.submit_and_wait(1) {
            // A signal cut the wait short: reap what is there; the check below stops the loop
            // if it was SIGINT/SIGTERM.
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            r => drop(r?),
        }
        for cqe in ring.completion() {
            let i = cqe.user_data() as usize;
            if cqueue::notif(cqe.flags()) {
                res.notifications += 1;
                if (cqe.result() as u32) & (1 << 31) != 0 {
                    res.copied_notifications += 1;
                }
            } else if cqe.result() >= 0 {
                res.bytes += cqe.result() as u64;
                res.sends += 1;
            } else if err.is_none() {
                err = Some(io::Error::from_raw_os_error(-cqe.result()));
                stop = true;
            }
            if !cqueue::more(cqe.flags()) {
                busy[i] = false;
                outstanding -= 1;
            }
        }
        if !stop && (Instant::now() >= deadline || halt.load(Ordering::Relaxed)) {
            stop = true;
        }
    }
    drop(ring);
    drop(slots);
    finish(res, start, cpu0, err, halt)
}

/// The same yardstick for the `msg-zerocopy` backend: the smallest MSG_ZEROCOPY loop, shaped
/// after the kernel's msg_zerocopy selftest (tools/testing/selftests/net/msg_zerocopy.c).
/// `SO_ZEROCOPY` on the connected socket `fd`, then `send(MSG_ZEROCOPY)` of `len`-byte
/// messages, one id per accepted call, with at most `inflight` ids not yet completed; when the
/// window is full (or the kernel says `ENOBUFS`, optmem is full) it polls for `POLLERR` and
/// drains the error queue, counting ids by the ranges the completions carry. The payload is
/// written once and never again, so which buffer an id used does not matter, only how many are
/// in flight: that is all the loop tracks. No library around it; `zcnet bench tx` prints the
/// backend's throughput over this loop's. `halt` stops it early as it does [`raw_send_zc`].
pub fn raw_msg_zerocopy(
    fd: RawFd,
    len: usize,
    inflight: usize,
    duration: Duration,
    halt: &AtomicBool,
) -> io::Result<RawResult> {
    use crate::sock::{self, ErrqueueEntry};
    let (_map, slots) = filled_slots(len, inflight)?;
    sock::enable_zerocopy(fd)?;
    let mut res = RawResult::default();
    let mut entries = Vec::with_capacity(64);
    let cpu0 = crate::os::thread_cpu_seconds();
    let start = Instant::now();
    let deadline = start + duration;
    let (mut sent, mut completed) = (0u64, 0u64);
    let (mut stop, mut err) = (false, None);
    let mut stopped_at: Option<Instant> = None;
    let window = inflight as u64;
    loop {
        while !stop && sent - completed < window {
            let i = (sent % window) as usize;
            let Some(buf) = slots[i].bytes() else {
                break;
            };
            match sock::send(fd, buf, libc::MSG_ZEROCOPY) {
                Ok(n) => {
                    res.bytes += n as u64;
                    res.sends += 1;
                    sent += 1;
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) && sent > completed => break,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => {
                    err = Some(e);
                    stop = true;
                }
            }
        }
        if stop {
            let at = *stopped_at.get_or_insert_with(Instant::now);
            if sent == completed {
                break;
            }
            if at.elapsed() > Duration::from_secs(2) && err.is_none() {
                err = Some(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{} MSG_ZEROCOPY completions missing after 2 s",
                        sent - completed
                    ),
                ));
                break;
            }
        }
        match sock::poll_one(fd, libc::POLLERR, 100) {
            Err(e) if e.raw_os_error() != Some(libc::EINTR) => return Err(e),
            _ => {}
        }
        sock::read_errqueue(fd, &mut entries)?;
        for e in entries.drain(..) {
            if let ErrqueueEntry::Zerocopy { lo, hi, copied } = e {
                // Counted as the msg-zerocopy backend counts them: one per error-queue message
                // (a range of ids), so the two rows of `bench tx` compare.
                completed += u64::from(hi.wrapping_sub(lo)) + 1;
                res.notifications += 1;
                if copied {
                    res.copied_notifications += 1;
                }
            }
        }
        if !stop && (Instant::now() >= deadline || halt.load(Ordering::Relaxed)) {
            stop = true;
        }
    }
    finish(res, start, cpu0, err, halt)
}

/// `inflight` slots of `len` bytes, written once (the payload is never written again).
fn filled_slots(
    len: usize,
    inflight: usize,
) -> io::Result<(std::sync::Arc<crate::mem::Mapping>, Vec<crate::mem::Slot>)> {
    let map = crate::mem::Mapping::anonymous(len * inflight)?;
    let (map, mut slots) = map.into_slots(len, inflight)?;
    for s in &mut slots {
        if let Some(b) = s.bytes_mut() {
            b.fill(0x5a);
        }
    }
    Ok((map, slots))
}

/// A raw loop's result: its times, or the first error, or `Interrupted` once `halt` is set.
fn finish(
    mut res: RawResult,
    start: Instant,
    cpu0: f64,
    err: Option<io::Error>,
    halt: &AtomicBool,
) -> io::Result<RawResult> {
    res.seconds = start.elapsed().as_secs_f64();
    res.cpu_seconds = crate::os::thread_cpu_seconds() - cpu0;
    match err {
        Some(e) => Err(e),
        None if halt.load(Ordering::Relaxed) => Err(io::Error::new(
            io::ErrorKind::Interrupted,
            "stopped by its caller",
        )),
        None => Ok(res),
    }
}
