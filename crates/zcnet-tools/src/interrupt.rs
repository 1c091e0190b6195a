//! Stopping the commands on SIGINT/SIGTERM, in every state.
//!
//! The library has no signal handling of its own: every long call takes a caller-owned
//! [`zcnet::Cancel`]. The commands share one process-wide token, [`token`], and
//! [`install_handler`] makes SIGINT and SIGTERM cancel it from the signal handler itself
//! ([`zcnet::os::set_on_interrupt`]), so that the token is already set when a system call
//! cut short by the signal returns `EINTR`, whichever thread took it. The commands hand that
//! token to every sender, receiver and wait they make, and check [`interrupted`] between the
//! steps of their own loops; their blocking waits (a read of stdin, a write to a full pipe, a
//! child process) go through [`wait_readable`], [`wait_writable`], [`sleep`] and
//! [`wait_child`], which the handler's self-pipe wakes at once. Either way the run ends with
//! [`Error::Interrupted`] and its cleanup (namespaces, NIC changes, registrations) runs on the
//! normal path; the `zcnet` command then exits 130.

use std::os::fd::AsFd;
use std::process::{Child, ExitStatus};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use zcnet::os::Wake;
use zcnet::{Cancel, Error, Result};

static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// The flag under [`token`], made and handed to the signal handler's
/// [`zcnet::os::set_on_interrupt`] on first use.
fn shared() -> &'static Arc<AtomicBool> {
    FLAG.get_or_init(|| {
        let flag = Arc::new(AtomicBool::new(false));
        zcnet::os::set_on_interrupt(Arc::clone(&flag));
        flag
    })
}

/// The flag under [`token`], for the raw baseline loops of `zcnet_rawbench::baseline`, which take
/// a plain flag.
pub fn flag() -> &'static AtomicBool {
    shared()
}

/// The commands' cancel token: cancelled by SIGINT/SIGTERM once [`install_handler`] ran (and by
/// `zcnet::os::set_interrupted(true)`, which tests use to play a signal).
pub fn token() -> Cancel {
    Cancel::from(Arc::clone(shared()))
}

/// Installs the SIGINT/SIGTERM handler that cancels [`token`]: long runs stop at their next
/// check and clean up, and the waits of this module return at once.
pub fn install_handler() -> Result<()> {
    shared();
    zcnet::os::install_interrupt_handler().map_err(|e| Error::io("sigaction", e))
}

/// Whether SIGINT/SIGTERM arrived: [`token`] is cancelled. One relaxed load: send loops call
/// it once per send (a token made and dropped here, two atomic read-modify-writes of the
/// `Arc`'s count, was 2 % of a uring-zc sender's CPU).
#[inline]
pub fn interrupted() -> bool {
    shared().load(std::sync::atomic::Ordering::Relaxed)
}

/// Sleeps for `d`, or less when SIGINT/SIGTERM arrives; returns whether it did.
pub fn sleep(d: Duration) -> bool {
    zcnet::os::sleep(d) || interrupted()
}

fn wait(fd: impl AsFd, events: i16, what: &str) -> Result<()> {
    match zcnet::os::wait_fd(fd.as_fd(), events, None) {
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
    let _ = zcnet::os::terminate(child.id());
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
