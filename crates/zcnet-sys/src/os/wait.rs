//! Waiting on a descriptor or sleeping, cut short by an interrupt (the pipe of
//! [`install_interrupt_handler`]) or by a caller's stop flag.
//!
//! [`install_interrupt_handler`]: super::install_interrupt_handler

use super::signal::{interrupted, set_interrupted, WAKE_READ};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// How a [`wait_fd`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The descriptor is ready: its `revents` (may include `POLLERR`/`POLLHUP`).
    Ready(i16),
    /// SIGINT, SIGTERM or SIGHUP arrived (or [`set_interrupted`]`(true)`), or for [`wait_fd_until`] its
    /// stop flag was set (for [`poll_until`] ending at signals: or a signal came): stop and clean
    /// up.
    Interrupted,
    /// The timeout passed first.
    TimedOut,
}

/// Waits until `fd` is ready for `events` (`POLLIN`, `POLLOUT`, ...), SIGINT/SIGTERM/SIGHUP arrives, or
/// `timeout` (none: no limit) passes — poll(2) on `fd` and on the interrupt pipe of
/// [`install_interrupt_handler`] (without it, only the flag checked around an `EINTR` ends the
/// wait early). An interrupt wins over readiness. `EINTR` is handled here: it ends the wait
/// only when the interrupt flag is set, else the wait goes on for the time left.
///
/// [`install_interrupt_handler`]: super::install_interrupt_handler
pub fn wait_fd(
    fd: std::os::fd::BorrowedFd<'_>,
    events: i16,
    timeout: Option<std::time::Duration>,
) -> io::Result<Wake> {
    poll_with_wake(Some((fd.as_raw_fd(), events)), timeout)
}

/// The longest single poll(2) of [`wait_fd_until`] and [`sleep_until`]: how late at most they
/// see their stop flag set by another thread.
pub const STOP_CHECK: std::time::Duration = std::time::Duration::from_millis(20);

/// Waits until `fd` is ready for `events`, `stop` is set, or `timeout` (none: no limit) passes;
/// a stop wins over readiness. Unlike [`wait_fd`] it knows nothing of signals: `stop` belongs
/// to the caller, who may set it from any thread (or from a signal handler, see
/// [`set_on_interrupt`]), and is looked at between polls of at most [`STOP_CHECK`]. `EINTR`
/// ends the wait only when `stop` is set, else the wait goes on for the time left.
///
/// [`set_on_interrupt`]: super::set_on_interrupt
pub fn wait_fd_until(
    fd: std::os::fd::BorrowedFd<'_>,
    events: i16,
    timeout: Option<std::time::Duration>,
    stop: &AtomicBool,
) -> io::Result<Wake> {
    poll_until(Some((fd.as_raw_fd(), events)), timeout, stop, false)
}

/// Sleeps for `d`, or less when `stop` is set (looked at every [`STOP_CHECK`] at most);
/// returns whether it is.
pub fn sleep_until(d: std::time::Duration, stop: &AtomicBool) -> bool {
    if poll_until(None, Some(d), stop, false).is_err() {
        // poll without descriptors does not fail; if it ever did, sleep the plain way.
        std::thread::sleep(d);
    }
    stop.load(Ordering::SeqCst)
}

/// The wait of [`wait_fd_until`] and [`sleep_until`] (no `target`: a sleep), on a raw fd, with
/// a choice of what a signal does: with `eintr_ends` a poll cut short by one (`EINTR`: a
/// handler installed without `SA_RESTART`) ends the wait as [`Wake::Interrupted`], for callers
/// whose runtime runs its signal handlers between calls (CPython), leaving `stop` as it was;
/// without, the wait goes on for the time left.
pub fn poll_until(
    target: Option<(RawFd, i16)>,
    timeout: Option<std::time::Duration>,
    stop: &AtomicBool,
    eintr_ends: bool,
) -> io::Result<Wake> {
    let deadline = timeout.map(|t| std::time::Instant::now() + t);
    loop {
        if stop.load(Ordering::SeqCst) {
            return Ok(Wake::Interrupted);
        }
        let now = std::time::Instant::now();
        let left = deadline.map_or(STOP_CHECK, |d| d.saturating_duration_since(now));
        if deadline.is_some() && left.is_zero() {
            return Ok(Wake::TimedOut);
        }
        // Round up: a wait of 0.4 ms must not become a busy loop of 0 ms polls.
        let ms = left.min(STOP_CHECK).as_micros().div_ceil(1000) as libc::c_int;
        let (fd, events) = target.unwrap_or((-1, 0));
        // A negative fd is ignored by poll(2): without a target the call only sleeps.
        let mut pfd = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: one live pollfd, the count passed.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            let e = crate::last_err();
            if e.raw_os_error() == Some(libc::EINTR) {
                if eintr_ends {
                    return Ok(Wake::Interrupted);
                }
                continue;
            }
            return Err(e);
        }
        if target.is_some() && pfd.revents != 0 {
            if stop.load(Ordering::SeqCst) {
                return Ok(Wake::Interrupted);
            }
            return Ok(Wake::Ready(pfd.revents));
        }
    }
}

/// Sleeps for `d`, or less when SIGINT/SIGTERM/SIGHUP arrives; returns [`interrupted`] (poll(2) on the
/// interrupt pipe alone).
pub fn sleep(d: std::time::Duration) -> bool {
    match poll_with_wake(None, Some(d)) {
        Ok(_) => interrupted(),
        Err(_) => {
            // poll on a pipe we own does not fail; if it ever did, sleep the plain way.
            std::thread::sleep(d);
            interrupted()
        }
    }
}

fn poll_with_wake(
    target: Option<(RawFd, i16)>,
    timeout: Option<std::time::Duration>,
) -> io::Result<Wake> {
    let deadline = timeout.map(|t| std::time::Instant::now() + t);
    loop {
        if interrupted() {
            return Ok(Wake::Interrupted);
        }
        let ms: libc::c_int = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(std::time::Instant::now());
                // Round up: a wait of 0.4 ms must not become a busy loop of 0 ms polls.
                left.as_micros()
                    .div_ceil(1000)
                    .min(libc::c_int::MAX as u128) as libc::c_int
            }
        };
        let (fd, events) = target.unwrap_or((-1, 0));
        // A negative fd is ignored by poll(2): without a target (sleep) or without the pipe
        // (no handler installed), the other entry alone is waited on.
        let mut fds = [
            libc::pollfd {
                fd: WAKE_READ.load(Ordering::SeqCst),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd,
                events,
                revents: 0,
            },
        ];
        // SAFETY: two live pollfds, the count passed.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n < 0 {
            let e = crate::last_err();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        if fds[0].revents != 0 && interrupted() {
            return Ok(Wake::Interrupted);
        }
        if target.is_some() && fds[1].revents != 0 {
            return Ok(Wake::Ready(fds[1].revents));
        }
        if n == 0 && deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            return Ok(Wake::TimedOut);
        }
        if fds[0].revents != 0 {
            // Readable but the flag is clear: set_interrupted(false) raced with a signal's
            // byte. Drain it so that the wait does not spin.
            set_interrupted(false);
        }
    }
}
