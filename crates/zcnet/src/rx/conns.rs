//! The connections a multishot receive backend serves (`uring`'s provided-buffer receives and
//! `zcrx`'s zero-copy receives): one request per connection, armed, ended and re-armed, and
//! cancelled on removal. Each backend keeps its ring and what a completion means; this set
//! keeps the rest, once:
//!
//! - **receiving**: each connection's socket while its request is armed or waits to be;
//! - **waiting**: connections whose request the kernel ended for want of buffers (or another
//!   reason to try again), oldest first, re-armed by [`Conns::rearm_waiting`];
//! - **detached**: connections no longer received whose request is still in the kernel
//!   (cancelled): their completions are given straight back, and a removed one is reported
//!   closable at its final completion ([`Conns::detached_completion`]).

use super::ConnId;
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::io;
use std::os::fd::RawFd;

/// What happens to the completions of a connection that is no longer received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Detached {
    /// Removed by the application: reported closable at its final completion.
    Removed,
    /// Failed and cancelled (or its cancel could not be queued): its completions are dropped
    /// and nothing more is reported.
    Failed,
}

/// What a re-arm that fails does to the connections waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OnRearmError {
    /// The failed connection and those behind it keep waiting; the error is the poll's.
    KeepWaiting,
    /// The failed connection has failed (it is reported and forgotten); the others go on.
    FailConnection,
}

/// What one pass of [`Conns::rearm_waiting`] did.
#[derive(Debug, Default)]
pub(super) struct Rearmed {
    /// Connections re-armed.
    pub count: u64,
    /// [`OnRearmError::KeepWaiting`]: the refusal that stopped the pass (that connection and
    /// those behind it still wait).
    pub stopped: Option<Error>,
    /// [`OnRearmError::FailConnection`]: the connections that could not be re-armed, with
    /// their errors (they are no longer received).
    pub failed: Vec<(ConnId, Error)>,
}

/// The connection set of a multishot backend (see the module docs).
#[derive(Debug, Default)]
pub(super) struct Conns {
    fds: HashMap<ConnId, RawFd>,
    waiting: Vec<ConnId>,
    detached: HashMap<ConnId, Detached>,
}

impl Conns {
    /// `conn` receives on `fd` (not yet armed).
    pub fn insert(&mut self, conn: ConnId, fd: RawFd) {
        self.fds.insert(conn, fd);
    }

    /// The socket of a connection receiving; `ENOENT`, naming the connection, otherwise.
    pub fn fd(&self, conn: ConnId) -> Result<RawFd> {
        self.fds.get(&conn).copied().ok_or_else(|| {
            Error::io(
                format!("arming connection {conn}"),
                io::Error::from_raw_os_error(libc::ENOENT),
            )
        })
    }

    /// Whether `conn` is receiving.
    pub fn contains(&self, conn: ConnId) -> bool {
        self.fds.contains_key(&conn)
    }

    /// Receiving on `conn` has ended (end of stream, an error); whether it was receiving.
    pub fn end(&mut self, conn: ConnId) -> bool {
        self.fds.remove(&conn).is_some()
    }

    /// The kernel ended `conn`'s request for a reason to try again: it waits to be re-armed.
    pub fn wait(&mut self, conn: ConnId) {
        self.waiting.push(conn);
    }

    /// Whether any connection waits to be re-armed.
    pub fn any_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// The connections waiting, oldest first.
    #[cfg(test)]
    pub fn waiting(&self) -> &[ConnId] {
        &self.waiting
    }

    /// Re-arms every waiting connection still receiving, oldest first, with `arm`. A refusal
    /// does what `on_error` says ([`Rearmed`] holds which).
    pub fn rearm_waiting(
        &mut self,
        on_error: OnRearmError,
        mut arm: impl FnMut(ConnId, RawFd) -> Result<()>,
    ) -> Rearmed {
        let mut done = Rearmed::default();
        let mut waiting = std::mem::take(&mut self.waiting).into_iter();
        while let Some(conn) = waiting.next() {
            let armed = match self.fds.get(&conn) {
                Some(&fd) => arm(conn, fd),
                // Ended while it waited: nothing to re-arm.
                None if on_error == OnRearmError::FailConnection => continue,
                // Named but no longer received: the arm's own words for it.
                None => self.fd(conn).map(drop),
            };
            match armed {
                Ok(()) => done.count += 1,
                Err(e) => match on_error {
                    OnRearmError::KeepWaiting => {
                        // This one and the rest still wait: the next poll tries them again.
                        self.waiting.push(conn);
                        self.waiting.extend(waiting);
                        done.stopped = Some(e);
                        return done;
                    }
                    OnRearmError::FailConnection => {
                        self.fds.remove(&conn);
                        done.failed.push((conn, e));
                    }
                },
            }
        }
        done
    }

    /// Stops receiving on `conn`: `armed` says whether its request is still in the kernel, and
    /// `cancel` asks the kernel to end it (whether the cancel was queued). `Some(true)` when
    /// the socket may be closed now; `Some(false)` when the cancel was queued and the
    /// connection is reported closable at its final completion. A request that runs on
    /// without a cancel is detached as [`Detached::Failed`]: the kernel holds its own
    /// reference to the socket, and what still comes is given back unread.
    pub fn remove(&mut self, conn: ConnId, armed: bool, cancel: impl FnOnce() -> bool) -> bool {
        self.fds.remove(&conn);
        self.waiting.retain(|&c| c != conn);
        if armed && cancel() {
            self.detached.insert(conn, Detached::Removed);
            return false;
        }
        if armed {
            self.detached.insert(conn, Detached::Failed);
        }
        true
    }

    /// `conn` has failed while its request may run on: stops receiving on it and, where
    /// `armed` and `cancel` queued a cancel, detaches it as [`Detached::Failed`]. Whether it
    /// was receiving (a connection already ended is not failed twice).
    pub fn fail(&mut self, conn: ConnId, armed: bool, cancel: impl FnOnce() -> bool) -> bool {
        if self.fds.remove(&conn).is_none() {
            return false;
        }
        self.waiting.retain(|&c| c != conn);
        if armed && cancel() {
            self.detached.insert(conn, Detached::Failed);
        }
        true
    }

    /// For a completion of `conn`: `None` when the connection is not detached (the backend
    /// reads the completion); otherwise the backend gives its buffers straight back, and
    /// when `ended` (its final completion) the detachment ends: `Some(true)` when it was
    /// removed and is now closable.
    pub fn detached_completion(&mut self, conn: ConnId, ended: bool) -> Option<bool> {
        let d = *self.detached.get(&conn)?;
        if !ended {
            return Some(false);
        }
        self.detached.remove(&conn);
        Some(d == Detached::Removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[zcnet_testkit::test]
    fn a_removed_connection_is_closable_at_its_final_completion_only() {
        let mut c = Conns::default();
        c.insert(ConnId(1), 10);
        assert!(
            !c.remove(ConnId(1), true, || true),
            "cancel queued: not yet"
        );
        assert!(!c.contains(ConnId(1)));
        assert_eq!(c.detached_completion(ConnId(1), false), Some(false));
        assert_eq!(c.detached_completion(ConnId(1), true), Some(true));
        assert_eq!(
            c.detached_completion(ConnId(1), true),
            None,
            "then forgotten"
        );
    }

    #[zcnet_testkit::test]
    fn a_request_whose_cancel_could_not_be_queued_is_detached_and_closable_now() {
        let mut c = Conns::default();
        c.insert(ConnId(2), 11);
        assert!(c.remove(ConnId(2), true, || false));
        // Its completions are given back, and its end reports nothing.
        assert_eq!(c.detached_completion(ConnId(2), false), Some(false));
        assert_eq!(c.detached_completion(ConnId(2), true), Some(false));
        // Not armed: nothing to wait for, nothing detached.
        c.insert(ConnId(3), 12);
        c.wait(ConnId(3));
        assert!(c.remove(ConnId(3), false, || unreachable!("no request to cancel")));
        assert!(!c.any_waiting());
        assert_eq!(c.detached_completion(ConnId(3), true), None);
    }

    #[zcnet_testkit::test]
    fn rearming_keeps_or_fails_as_told() {
        let refuse_two = |conn: ConnId, _fd: RawFd| {
            if conn == ConnId(2) {
                Err(Error::io("arm", io::Error::from_raw_os_error(libc::EAGAIN)))
            } else {
                Ok(())
            }
        };
        let mut c = Conns::default();
        for n in 1..=3 {
            c.insert(ConnId(n), n as RawFd);
            c.wait(ConnId(n));
        }
        let r = c.rearm_waiting(OnRearmError::KeepWaiting, refuse_two);
        assert_eq!(r.count, 1);
        assert!(r.stopped.is_some() && r.failed.is_empty());
        assert_eq!(c.waiting(), [ConnId(2), ConnId(3)]);
        let r = c.rearm_waiting(OnRearmError::FailConnection, refuse_two);
        assert_eq!(r.count, 1);
        assert!(r.stopped.is_none(), "failures are per connection");
        assert_eq!(r.failed.len(), 1);
        assert_eq!(r.failed[0].0, ConnId(2));
        assert!(!c.contains(ConnId(2)) && c.contains(ConnId(3)));
        assert!(!c.any_waiting());
        // A connection that ended while it waited is skipped (or, kept waiting, named).
        c.wait(ConnId(9));
        let r = c.rearm_waiting(OnRearmError::FailConnection, refuse_two);
        assert_eq!(r.count, 0);
        assert!(r.stopped.is_none() && r.failed.is_empty());
        c.wait(ConnId(9));
        let r = c.rearm_waiting(OnRearmError::KeepWaiting, refuse_two);
        let e = r.stopped.expect("named, not receiving");
        assert!(e.to_string().contains("#9"), "{e}");
        assert_eq!(c.waiting(), [ConnId(9)]);
    }

    #[zcnet_testkit::test]
    fn a_failed_connection_is_failed_once() {
        let mut c = Conns::default();
        c.insert(ConnId(4), 13);
        c.wait(ConnId(4));
        assert!(c.fail(ConnId(4), true, || true));
        assert!(!c.any_waiting());
        assert!(!c.fail(ConnId(4), true, || unreachable!("already failed")));
        assert_eq!(c.detached_completion(ConnId(4), true), Some(false));
    }
}
