//! The yardstick for zcnet's own overhead: the smallest loop that sends as the `uring-zc`
//! backend sends datagrams — `inflight` independent IORING_OP_SEND_ZC requests (`MSG_NOSIGNAL`)
//! from slices of one registered buffer, `IORING_SEND_ZC_REPORT_USAGE`, the socket as a fixed
//! file, the same ring flags, one `io_uring_enter` per batch — with no library around it
//! ([`RawZcChoices`] flips those choices one by one, to measure what each costs the kernel).
//! It is not what the backend does on a TCP stream: there the backend links its sends
//! (`IOSQE_IO_LINK`, with `MSG_WAITALL`) and starts a chain only when the previous chain's
//! results are in, and this loop does neither. So
//! `zcnet bench tx` runs it on the UDP sink only, next to the backend, and prints the ratio.
//! Shaped after the kernel's io_uring_zerocopy_tx selftest (tools/testing/selftests/net).

use io_uring::{cqueue, opcode, types, IoUring};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use zcnet_sys::mem::{Mapping, Slot};
use zcnet_sys::os::thread_cpu_seconds;

/// `IORING_SEND_ZC_REPORT_USAGE` (include/uapi/linux/io_uring.h, Linux 6.2): ask the
/// notification to say whether the kernel copied (bit 31 of its result,
/// `IORING_NOTIF_USAGE_ZC_COPIED`). Not exported by the io-uring crate.
const IORING_SEND_ZC_REPORT_USAGE: u16 = 1 << 3;

/// What the raw loop did.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawResult {
    /// Bytes the kernel accepted.
    pub bytes: u64,
    /// Send calls (or requests) the kernel accepted.
    pub sends: u64,
    /// Notifications that said COPIED.
    pub copied_notifications: u64,
    /// Sends those COPIED notifications covered (a MSG_ZEROCOPY notification covers a range
    /// of sends, a SEND_ZC one its own send).
    pub copied_sends: u64,
    /// Notifications in all.
    pub notifications: u64,
    /// Wall seconds.
    pub seconds: f64,
    /// CPU seconds of the calling thread.
    pub cpu_seconds: f64,
}

/// The kernel-facing choices of the raw io_uring send loop. [`RawZcChoices::ZCNET`] are the
/// `uring-zc` backend's, [`RawZcChoices::ZCNET_SEND`] the `uring` backend's; each field says
/// where liburing's examples/send-zerocopy (the peer of scripts/send-tax.sh) differs, so that a
/// run with one choice flipped measures what that choice costs the kernel, apart from any
/// library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawZcChoices {
    /// `IORING_OP_SEND_ZC` from the registered buffer (`uring-zc`, the example's `-z 1`), or
    /// `IORING_OP_SEND` with no buffer registered (`uring`, the example's `-z 0`), where
    /// `report_usage` has no meaning.
    pub zero_copy: bool,
    /// `IORING_SEND_ZC_REPORT_USAGE` on every send: zcnet asks, to count copied bytes; the
    /// example does not.
    pub report_usage: bool,
    /// Every request sends the same bytes (the example) instead of a slice of its own (zcnet:
    /// a buffer is not written while the kernel holds it).
    pub one_buffer: bool,
    /// The socket as fixed file 0 (both).
    pub fixed_file: bool,
    /// The ring's fd registered (`IORING_REGISTER_RING_FDS`, Linux 5.18): the example does;
    /// zcnet does not, as the registration belongs to the thread that made it and a `Sender`
    /// may move between threads.
    pub ring_fd: bool,
    /// `IORING_SETUP_SINGLE_ISSUER` (Linux 6.0): the example; zcnet does not, for the same
    /// reason.
    pub single_issuer: bool,
}

impl RawZcChoices {
    /// The `uring-zc` backend's choices.
    pub const ZCNET: RawZcChoices = RawZcChoices {
        zero_copy: true,
        report_usage: true,
        one_buffer: false,
        fixed_file: true,
        ring_fd: false,
        single_issuer: false,
    };

    /// The `uring` backend's choices: [`RawZcChoices::ZCNET`] with `IORING_OP_SEND`.
    pub const ZCNET_SEND: RawZcChoices = RawZcChoices {
        zero_copy: false,
        ..RawZcChoices::ZCNET
    };
}

/// Sends `len`-byte messages on the connected socket `fd` for `duration` with `inflight`
/// SEND_ZC requests in flight, each from its own slice of one registered buffer, with the
/// backend's choices ([`RawZcChoices::ZCNET`]). The caller's `halt` flag, once set (from
/// another thread, or a signal handler), stops it early, with [`io::ErrorKind::Interrupted`]
/// once every request in flight has completed.
pub fn raw_send_zc(
    fd: RawFd,
    len: usize,
    inflight: usize,
    duration: Duration,
    halt: &AtomicBool,
) -> io::Result<RawResult> {
    raw_send_zc_with(fd, len, inflight, duration, halt, RawZcChoices::ZCNET)
}

/// [`raw_send_zc`] with the kernel-facing choices `c` (with `c.zero_copy` false, the same loop
/// of IORING_OP_SEND: the `uring` backend's yardstick). Like the backend (and the example), it
/// hands the queued requests over without waiting and waits (one `io_uring_enter` with
/// `IORING_ENTER_GETEVENTS`) only when no completion is there.
pub fn raw_send_zc_with(
    fd: RawFd,
    len: usize,
    inflight: usize,
    duration: Duration,
    halt: &AtomicBool,
    c: RawZcChoices,
) -> io::Result<RawResult> {
    let (map, slots) = filled_slots(len, inflight)?;
    let entries = (2 * inflight as u32).next_power_of_two();
    let mut builder = IoUring::builder();
    builder.setup_coop_taskrun();
    if c.single_issuer {
        builder.setup_single_issuer();
    }
    let mut ring = match builder.build(entries) {
        Ok(r) => r,
        Err(_) if !c.single_issuer => IoUring::new(entries)?,
        Err(e) => return Err(e),
    };
    let iov = libc::iovec {
        iov_base: map.addr() as *mut libc::c_void,
        iov_len: map.len(),
    };
    // As the backends: only a zero-copy sender registers its region.
    if c.zero_copy {
        // SAFETY: the iovec covers `map`, which lives until after the ring is dropped
        // (declared before it, dropped after it at the end of this function).
        unsafe {
            ring.submitter()
                .register_buffers(std::slice::from_ref(&iov))?
        };
    }
    if c.fixed_file {
        ring.submitter().register_files(&[fd])?;
    }
    let zc_flags = if c.report_usage {
        IORING_SEND_ZC_REPORT_USAGE
    } else {
        0
    };
    let addrs: Vec<usize> = slots
        .iter()
        .map(|s| {
            if c.one_buffer {
                slots[0].addr()
            } else {
                s.addr()
            }
        })
        .collect();
    let (mut submitter, mut sq, mut cq) = ring.split();
    if c.ring_fd {
        submitter.register_ring_fd()?;
    }
    let mut busy = vec![false; inflight];
    let mut res = RawResult::default();
    let cpu0 = thread_cpu_seconds();
    let start = Instant::now();
    let deadline = start + duration;
    let mut outstanding = 0usize;
    let mut stop = false;
    let mut err = None;
    loop {
        if !stop {
            sq.sync();
            for (i, b) in busy.iter_mut().enumerate() {
                if *b {
                    continue;
                }
                let ptr = addrs[i] as *const u8;
                let e = if !c.zero_copy {
                    if c.fixed_file {
                        opcode::Send::new(types::Fixed(0), ptr, len as u32)
                    } else {
                        opcode::Send::new(types::Fd(fd), ptr, len as u32)
                    }
                    .flags(libc::MSG_NOSIGNAL)
                    .build()
                } else if c.fixed_file {
                    opcode::SendZc::new(types::Fixed(0), ptr, len as u32)
                        .buf_index(Some(0))
                        .flags(libc::MSG_NOSIGNAL)
                        .zc_flags(zc_flags)
                        .build()
                } else {
                    opcode::SendZc::new(types::Fd(fd), ptr, len as u32)
                        .buf_index(Some(0))
                        .flags(libc::MSG_NOSIGNAL)
                        .zc_flags(zc_flags)
                        .build()
                }
                .user_data(i as u64);
                // SAFETY: the SQE points into `map`, alive until the ring is gone (and registered
                // for a zero-copy send);
                // slot i is not reused until its final CQE (busy[i]); with `one_buffer` every
                // request reads slot 0, which is never written after `filled_slots`.
                if unsafe { sq.push(&e) }.is_err() {
                    break;
                }
                *b = true;
                outstanding += 1;
            }
            sq.sync();
        }
        if outstanding == 0 {
            break;
        }
        cq.sync();
        let r = if cq.is_empty() {
            submitter.submit_and_wait(1)
        } else {
            submitter.submit()
        };
        match r {
            // A signal cut the wait short: reap what is there; the check below stops the loop
            // if it was SIGINT/SIGTERM.
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            r => drop(r?),
        }
        cq.sync();
        for cqe in &mut cq {
            let i = cqe.user_data() as usize;
            if cqueue::notif(cqe.flags()) {
                res.notifications += 1;
                if (cqe.result() as u32) & (1 << 31) != 0 {
                    res.copied_notifications += 1;
                    res.copied_sends += 1;
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
    drop((submitter, sq, cq));
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
    use zcnet_core::errqueue::ErrqueueEntry;
    use zcnet_sys::sock;
    let (_map, slots) = filled_slots(len, inflight)?;
    sock::enable_zerocopy(fd)?;
    let mut res = RawResult::default();
    let mut entries = Vec::with_capacity(64);
    let cpu0 = thread_cpu_seconds();
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
                let ids = u64::from(hi.wrapping_sub(lo)) + 1;
                completed += ids;
                res.notifications += 1;
                if copied {
                    res.copied_notifications += 1;
                    res.copied_sends += ids;
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
fn filled_slots(len: usize, inflight: usize) -> io::Result<(std::sync::Arc<Mapping>, Vec<Slot>)> {
    let map = Mapping::anonymous(len * inflight)?;
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
    res.cpu_seconds = thread_cpu_seconds() - cpu0;
    match err {
        Some(e) => Err(e),
        None if halt.load(Ordering::Relaxed) => Err(io::Error::new(
            io::ErrorKind::Interrupted,
            "stopped by its caller",
        )),
        None => Ok(res),
    }
}

#[cfg(test)]
mod tests;
