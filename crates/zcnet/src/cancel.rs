//! Stopping a long call: a cancel token that belongs to the caller.
//!
//! The library reads no process-wide state to decide when to stop: a [`Sender`], a
//! [`Receiver`] and the other calls that may wait a long time take a [`Cancel`] (in their
//! config, or as an argument) and check it between steps and in every wait. A wait on a
//! descriptor polls in slices of at most [`zcnet_sys::os::STOP_CHECK`] (20 ms), so a token
//! cancelled by another thread ends it within that; a system call cut short by a signal
//! (`EINTR`) is retried unless the token is cancelled. A cancelled call returns
//! [`Error::Interrupted`], after the cleanup it owes (buffers back, registrations undone).
//!
//! What cancels the token is the caller's business: another thread, a timer, a GUI button. An
//! application that wants Ctrl-C to stop a run connects its SIGINT handler to the token — the
//! `zcnet` command does it with [`zcnet_sys::os::set_on_interrupt`], which sets the token's
//! flag from the handler, before the interrupted system call returns `EINTR`; a handler built
//! on `signal-hook` can use [`Cancel::from`] an `Arc<AtomicBool>` its `flag::register` sets.
//!
//! [`Sender`]: crate::Sender
//! [`Receiver`]: crate::Receiver

use crate::error::{Error, Result};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use zcnet_sys::os::Wake;

/// A cancel token: cheap to clone, every clone shares one flag. [`Cancel::cancel`] from any
/// thread makes every call holding a clone return [`Error::Interrupted`] soon (within
/// [`zcnet_sys::os::STOP_CHECK`] of a wait); it stays cancelled. The default token is a fresh
/// one that nobody cancels.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// A token not cancelled.
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// Cancels every call that holds this token (or a clone of it). Lock-free: a store to an
    /// atomic, safe from a signal handler too.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether [`Cancel::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// [`Error::Interrupted`] once cancelled.
    pub(crate) fn check(&self) -> Result<()> {
        if self.is_cancelled() {
            return Err(Error::Interrupted);
        }
        Ok(())
    }

    /// Sleeps for `d`, or less when cancelled; returns whether it is.
    pub(crate) fn sleep(&self, d: Duration) -> bool {
        zcnet_sys::os::sleep_until(d, &self.0)
    }

    /// The flag itself, for the waits of zcnet-sys.
    pub(crate) fn flag(&self) -> &AtomicBool {
        &self.0
    }

    fn wait(&self, fd: impl AsFd, events: i16, what: &str) -> Result<()> {
        match zcnet_sys::os::wait_fd_until(fd.as_fd(), events, None, &self.0) {
            Ok(Wake::Ready(_)) | Ok(Wake::TimedOut) => Ok(()),
            Ok(Wake::Interrupted) => Err(Error::Interrupted),
            Err(e) => Err(Error::io(format!("poll ({what})"), e)),
        }
    }

    /// Waits until `fd` has something to read (or its end, or an error, which the read then
    /// reports); [`Error::Interrupted`] once cancelled.
    pub(crate) fn wait_readable(&self, fd: impl AsFd) -> Result<()> {
        self.wait(fd, libc::POLLIN, "waiting to read")
    }

    /// Waits until `fd` can take a write (or has an error, which the write then reports);
    /// [`Error::Interrupted`] once cancelled.
    pub(crate) fn wait_writable(&self, fd: impl AsFd) -> Result<()> {
        self.wait(fd, libc::POLLOUT, "waiting to write")
    }
}

/// A token whose flag is `flag`: whoever sets it (a signal handler registered with
/// `signal-hook`'s `flag::register`, say) cancels the calls holding the token.
impl From<Arc<AtomicBool>> for Cancel {
    fn from(flag: Arc<AtomicBool>) -> Cancel {
        Cancel(flag)
    }
}
