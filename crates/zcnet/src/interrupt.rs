//! Stopping on SIGINT/SIGTERM, in every state.
//!
//! [`install_interrupt_handler`] makes both signals set a flag ([`interrupted`]) and wake every
//! wait made here, whichever thread the kernel delivered the signal to. Loops check the flag
//! between steps; blocking waits (accept, connect, a read of stdin, a write to a full pipe, a
//! child process) go through [`wait_readable`], [`wait_writable`], [`sleep`] and [`wait_child`]
//! instead of a plain blocking call, which the standard library would restart after `EINTR`.
//! Either way the run ends with [`Error::Interrupted`] and its cleanup (namespaces, NIC changes,
//! registrations) runs on the normal path; the `zcnet` command then exits 130.

use crate::error::{Error, Result};
use std::os::fd::AsFd;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};
use zcnet_sys::os::Wake;

/// Installs the SIGINT/SIGTERM handler: long runs stop at their next check and clean up, and
/// the waits of this module return at once.
pub fn install_interrupt_handler() -> Result<()> {
    zcnet_sys::os::install_interrupt_handler().map_err(|e| Error::io("sigaction", e))
}

/// Whether SIGINT/SIGTERM arrived.
pub fn interrupted() -> bool {
    zcnet_sys::os::interrupted()
}

/// Sleeps for `d`, or less when SIGINT/SIGTERM arrives; returns whether it did.
pub fn sleep(d: Duration) -> bool {
    zcnet_sys::os::sleep(d)
}

fn wait(fd: impl AsFd, events: i16, what: &str) -> Result<()> {
    match zcnet_sys::os::wait_fd(fd.as_fd(), events, None) {
        Ok(Wake::Ready(_)) | Ok(Wake::TimedOut) => Ok(()),
        Ok(Wake::Interrupted) => Err(Error::Interrupted),
        Err(e) => Err(Error::io(format!("poll ({what})"), e)),
    }
}

/// Waits until `fd` has something to read (or its end, or an error, which the read then
/// reports); [`Error::Interrupted`] when SIGINT/SIGTERM arrives first.
pub fn wait_readable(fd: impl AsFd) -> Result<()> {
    wait(fd, libc::POLLIN, "waiting to read")
}

/// Waits until `fd` can take a write (or has an error, which the write then reports);
/// [`Error::Interrupted`] when SIGINT/SIGTERM arrives first.
pub fn wait_writable(fd: impl AsFd) -> Result<()> {
    wait(fd, libc::POLLOUT, "waiting to write")
}

/// How long [`wait_child`] gives a child to exit after SIGTERM before it kills it.
pub const CHILD_GRACE: Duration = Duration::from_secs(5);

/// Waits for `child` to exit. When SIGINT/SIGTERM arrives first, the child is sent SIGTERM (a
/// SIGINT from the terminal reached it already, but a SIGTERM sent to this process alone did
/// not), given [`CHILD_GRACE`] to exit, then killed; the result is [`Error::Interrupted`] once
/// it is gone, so that the caller's cleanup runs after the child's.
pub fn wait_child(child: &mut Child) -> Result<ExitStatus> {
    let waiting = |e| Error::io("waiting for the child process", e);
    loop {
        if let Some(st) = child.try_wait().map_err(waiting)? {
            return Ok(st);
        }
        if sleep(Duration::from_millis(50)) {
            break;
        }
    }
    let _ = zcnet_sys::os::terminate(child.id());
    let until = Instant::now() + CHILD_GRACE;
    while child.try_wait().map_err(waiting)?.is_none() {
        if Instant::now() >= until {
            let _ = child.kill();
            child.wait().map_err(waiting)?;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(Error::Interrupted)
}
