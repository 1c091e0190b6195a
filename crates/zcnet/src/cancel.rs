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
///
/// A token made with [`Cancel::ending_at_signals`] also ends a call, with
/// [`Error::Interrupted`], whenever a signal cuts one of its system calls short (`EINTR`: a
/// handler installed without `SA_RESTART`), without cancelling the token: for runtimes that run
/// their signal handlers between calls and then call again (CPython, PEP 475). It applies to a
/// [`crate::Sender`]'s calls and waits and to the free functions of [`crate::net`] (a
/// [`crate::Receiver`] polls in slices and needs no such token). A send that has found no room
/// in its socket for [`crate::tx::SEND_SLICE`] ends the same way (a signal that came between
/// two system calls, or that a send which had copied some bytes swallowed, leaves no `EINTR`):
/// the caller looks at its signals and calls again. What of an interrupted send call's
/// payload went is [`crate::Sender::last_call_accepted`].
#[derive(Debug, Clone, Default)]
pub struct Cancel {
    flag: Arc<AtomicBool>,
    /// An `EINTR` ends the call ([`Cancel::ending_at_signals`]).
    at_signal: bool,
}

impl Cancel {
    /// A token not cancelled.
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// This token, and from now on every call holding it (or a clone made after this) also ends
    /// with [`Error::Interrupted`] when a signal cuts one of its system calls short (see the
    /// type's documentation), instead of retrying the call.
    pub fn ending_at_signals(mut self) -> Cancel {
        self.at_signal = true;
        self
    }

    /// Cancels every call that holds this token (or a clone of it). Lock-free: a store to an
    /// atomic, safe from a signal handler too.
    pub fn cancel(&self) {
        self.flag.store(true, Ordering::SeqCst);
    }

    /// Whether [`Cancel::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.flag.load(Ordering::Relaxed)
    }

    /// Whether a system call cut short by a signal ends the call rather than being retried:
    /// the token was cancelled, or it ends at signals.
    pub(crate) fn ends_at_eintr(&self) -> bool {
        self.at_signal || self.is_cancelled()
    }

    /// Whether the token ends calls at signals ([`Cancel::ending_at_signals`]).
    pub(crate) fn ends_at_signals(&self) -> bool {
        self.at_signal
    }

    /// [`Error::Interrupted`] once cancelled.
    pub(crate) fn check(&self) -> Result<()> {
        if self.is_cancelled() {
            return Err(Error::Interrupted);
        }
        Ok(())
    }

    /// Sleeps for `d`, or less when cancelled (or, ending at signals, when a signal comes);
    /// returns whether it stopped early for either.
    pub(crate) fn sleep(&self, d: Duration) -> bool {
        match self.poll(None, Some(d)) {
            Ok(Wake::Interrupted) => true,
            Ok(_) => self.is_cancelled(),
            Err(_) => {
                // poll without descriptors does not fail; if it ever did, sleep the plain way.
                std::thread::sleep(d);
                self.is_cancelled()
            }
        }
    }

    /// The one wait of the token's waits: `target` (`None`: a sleep) for up to `timeout`,
    /// ended by a cancel and, for a token that ends at signals, by a signal.
    fn poll(
        &self,
        target: Option<(std::os::fd::RawFd, i16)>,
        timeout: Option<Duration>,
    ) -> std::io::Result<Wake> {
        zcnet_sys::os::poll_until(target, timeout, &self.flag, self.at_signal)
    }

    /// The flag itself, for the waits of zcnet-sys.
    pub(crate) fn flag(&self) -> &AtomicBool {
        &self.flag
    }

    fn wait(&self, fd: impl AsFd, events: i16, what: &str) -> Result<()> {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&fd.as_fd());
        match self.poll(Some((fd, events)), None) {
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

    /// Waits up to `max` until the socket `fd` can take a write (a timeout is not an error:
    /// the caller tries again); [`Error::Interrupted`] once cancelled, or at a signal for a
    /// token that ends at signals.
    pub(crate) fn wait_writable_for(&self, fd: std::os::fd::RawFd, max: Duration) -> Result<()> {
        match self.poll(Some((fd, libc::POLLOUT)), Some(max)) {
            Ok(Wake::Ready(_)) | Ok(Wake::TimedOut) => Ok(()),
            Ok(Wake::Interrupted) => Err(Error::Interrupted),
            Err(e) => Err(Error::io("poll (waiting to write)", e)),
        }
    }
}

/// A token whose flag is `flag`: whoever sets it (a signal handler registered with
/// `signal-hook`'s `flag::register`, say) cancels the calls holding the token.
impl From<Arc<AtomicBool>> for Cancel {
    fn from(flag: Arc<AtomicBool>) -> Cancel {
        Cancel {
            flag,
            at_signal: false,
        }
    }
}
