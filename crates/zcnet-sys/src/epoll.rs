//! A level-triggered epoll set keyed by caller tokens (epoll(7)).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Readable (`EPOLLIN`).
pub const IN: u32 = libc::EPOLLIN as u32;
/// Writable (`EPOLLOUT`).
pub const OUT: u32 = libc::EPOLLOUT as u32;
/// The peer closed its writing half (`EPOLLRDHUP`, Linux 2.6.17).
pub const RDHUP: u32 = libc::EPOLLRDHUP as u32;
/// Hang-up (`EPOLLHUP`, always reported).
pub const HUP: u32 = libc::EPOLLHUP as u32;
/// Error (`EPOLLERR`, always reported).
pub const ERR: u32 = libc::EPOLLERR as u32;
/// Edge-triggered (`EPOLLET`): reported when the fd becomes ready (for an eventfd: at each
/// signal), not for as long as it is.
pub const ET: u32 = libc::EPOLLET as u32;

/// An epoll instance. Tokens are the caller's; the set does not own the watched fds.
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
    events: Vec<libc::epoll_event>,
}

impl Epoll {
    /// A new set (`epoll_create1(EPOLL_CLOEXEC)`) returning up to `batch` events per wait.
    pub fn new(batch: usize) -> io::Result<Epoll> {
        // SAFETY: no pointer arguments; the fd returned is new and owned below.
        let fd = crate::cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        Ok(Epoll {
            // SAFETY: `fd` was just returned by epoll_create1 and nothing else owns it.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            events: vec![libc::epoll_event { events: 0, u64: 0 }; batch.max(1)],
        })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` is a live epoll_event; the kernel copies it (and ignores it for DEL).
        crate::cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) }).map(drop)
    }

    /// Watches `fd` for `events` (a mask of [`IN`], [`OUT`], [`RDHUP`]), reported as `token`.
    pub fn add(&self, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, events)
    }

    /// Changes the events (and token) of a watched fd.
    pub fn modify(&self, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, token, events)
    }

    /// Stops watching `fd`.
    pub fn delete(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Waits up to `timeout_ms` (-1: forever, 0: poll) and appends `(token, events)` of every
    /// ready fd to `out`. `EINTR` returns with nothing appended.
    pub fn wait(&mut self, out: &mut Vec<(u64, u32)>, timeout_ms: i32) -> io::Result<()> {
        let cap = self.events.len().min(i32::MAX as usize) as libc::c_int;
        // SAFETY: `events` holds `cap` initialised entries the kernel may overwrite.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                self.events.as_mut_ptr(),
                cap,
                timeout_ms,
            )
        };
        if n < 0 {
            let e = crate::last_err();
            return if e.raw_os_error() == Some(libc::EINTR) {
                Ok(())
            } else {
                Err(e)
            };
        }
        out.extend(
            self.events[..n as usize]
                .iter()
                .map(|e| ({ e.u64 }, { e.events })),
        );
        Ok(())
    }
}

impl std::os::fd::AsFd for Epoll {
    /// The epoll fd itself: readable while any watched fd is ready (an epoll set can be
    /// watched by another poller).
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[zcnet_testkit::test]
    fn reports_readable_and_hangup_by_token() {
        let (mut a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut ep = Epoll::new(4).unwrap();
        ep.add(b.as_raw_fd(), 42, IN | RDHUP).unwrap();
        let mut out = Vec::new();
        ep.wait(&mut out, 0).unwrap();
        assert!(out.is_empty(), "nothing written yet: {out:?}");
        a.write_all(b"x").unwrap();
        ep.wait(&mut out, 1000).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, 42);
        assert_ne!(out[0].1 & IN, 0);
        drop(a);
        out.clear();
        ep.wait(&mut out, 1000).unwrap();
        assert_ne!(out[0].1 & RDHUP, 0, "{out:?}");
        ep.delete(b.as_raw_fd()).unwrap();
        out.clear();
        ep.wait(&mut out, 0).unwrap();
        assert!(out.is_empty());
        assert_eq!(
            ep.delete(b.as_raw_fd()).unwrap_err().raw_os_error(),
            Some(libc::ENOENT)
        );
    }
}

/// An eventfd (eventfd(2), `EFD_NONBLOCK | EFD_CLOEXEC`): a counter the kernel adds to and a
/// poller sees as readable while it is not 0. zcnet registers one with an io_uring
/// (`IORING_REGISTER_EVENTFD`) as the readiness fd an event loop waits on: the kernel signals it
/// for every completion posted and, on a DEFER_TASKRUN ring, whenever receive work is queued for
/// the owner's next `io_uring_enter` (io_uring/tw.c `io_req_local_work_add`) — which, unlike
/// the ring fd itself, wakes an epoll waiter.
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    /// A new eventfd with a count of 0.
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: no pointer arguments; the fd returned is new and owned below.
        let fd = crate::cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        Ok(EventFd {
            // SAFETY: `fd` was just returned by eventfd and nothing else owns it.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Reads (and so resets) the count without blocking: how many signals since the last
    /// read, 0 when none.
    pub fn drain(&self) -> io::Result<u64> {
        let mut n = 0u64;
        // SAFETY: `n` is a live, writable 8-byte buffer, the size an eventfd read needs.
        let r = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut n as *mut u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        if r < 0 {
            let e = crate::last_err();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) => Ok(0),
                _ => Err(e),
            };
        }
        Ok(n)
    }

    /// A second handle on the same eventfd (`dup`): a signal through either wakes waiters on
    /// both.
    pub fn try_clone(&self) -> io::Result<EventFd> {
        Ok(EventFd {
            fd: self.fd.try_clone()?,
        })
    }

    /// Adds one to the count (wakes a waiter).
    pub(crate) fn signal(&self) -> io::Result<()> {
        let one = 1u64;
        // SAFETY: `one` is a live 8-byte value, the size an eventfd write needs.
        let r = unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        if r < 0 {
            return Err(crate::last_err());
        }
        Ok(())
    }
}

impl std::os::fd::AsFd for EventFd {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod eventfd_tests {
    use super::*;

    #[zcnet_testkit::test]
    fn counts_signals_and_reads_back_zero_when_none() {
        let e = EventFd::new().unwrap();
        assert_eq!(e.drain().unwrap(), 0);
        e.signal().unwrap();
        e.signal().unwrap();
        let mut ep = Epoll::new(4).unwrap();
        ep.add(e.as_raw_fd(), 9, IN).unwrap();
        let mut out = Vec::new();
        ep.wait(&mut out, 0).unwrap();
        assert_eq!(out.len(), 1, "readable while the count is not 0");
        assert_eq!(e.drain().unwrap(), 2);
        assert_eq!(e.drain().unwrap(), 0);
        out.clear();
        ep.wait(&mut out, 0).unwrap();
        assert!(out.is_empty(), "not readable once read: {out:?}");
    }
}

/// Things handed back, from any thread, to an owner that takes them when it polls: received
/// buffers whose last reference went. The owner polls from an event loop that sleeps on its
/// readiness eventfd, which only the kernel signals; when the owner can make no progress
/// until something comes back (every buffer held, receives paused: [`set_starving`]), the next
/// [`push`] signals that eventfd once ([`set_wake`]), so the loop wakes and polls again
/// instead of sleeping for good.
///
/// [`set_starving`]: ReturnQueue::set_starving
/// [`push`]: ReturnQueue::push
/// [`set_wake`]: ReturnQueue::set_wake
#[derive(Debug)]
pub struct ReturnQueue<T> {
    items: std::sync::Mutex<Vec<T>>,
    wake: std::sync::Mutex<Option<EventFd>>,
    starving: std::sync::atomic::AtomicBool,
}

impl<T> Default for ReturnQueue<T> {
    fn default() -> Self {
        ReturnQueue {
            items: std::sync::Mutex::new(Vec::new()),
            wake: std::sync::Mutex::new(None),
            starving: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl<T> ReturnQueue<T> {
    /// Hands `item` back; wakes the owner's loop if it starves (once per starvation: it says
    /// again at its next poll if it still does). A poisoned lock (a panic while pushing)
    /// loses the item; the owner's held count shows it.
    pub fn push(&self, item: T) {
        if let Ok(mut q) = self.items.lock() {
            q.push(item);
        }
        if self
            .starving
            .swap(false, std::sync::atomic::Ordering::AcqRel)
        {
            self.wake();
        }
    }

    fn wake(&self) {
        if let Ok(w) = self.wake.lock() {
            // A failed signal (only an overflowing count) loses nothing: the count is non-zero
            // then, and the loop wakes anyway.
            if let Some(e) = w.as_ref() {
                let _ = e.signal();
            }
        }
    }

    /// Moves everything handed back so far to the end of `out`.
    pub fn take_into(&self, out: &mut Vec<T>) {
        if let Ok(mut q) = self.items.lock() {
            out.append(&mut q);
        }
    }

    /// Whether nothing waits to be taken.
    pub(crate) fn is_empty(&self) -> bool {
        self.items.lock().map_or(true, |q| q.is_empty())
    }

    /// The owner's readiness eventfd (a duplicate: [`EventFd::try_clone`]) for [`push`] to
    /// signal while the owner starves.
    ///
    /// [`push`]: ReturnQueue::push
    pub fn set_wake(&self, efd: EventFd) {
        if let Ok(mut w) = self.wake.lock() {
            *w = Some(efd);
        }
    }

    /// Says whether the owner waits for things to come back before it can go on. Something
    /// handed back since the owner last took (before the flag went up, so it signalled
    /// nothing) signals now: the owner has not seen it.
    pub fn set_starving(&self, starving: bool) {
        use std::sync::atomic::Ordering;
        self.starving.store(starving, Ordering::Release);
        // A push after this check sees the flag (the queue's lock orders the two).
        if starving && !self.is_empty() && self.starving.swap(false, Ordering::AcqRel) {
            self.wake();
        }
    }
}

#[cfg(test)]
mod return_queue_tests {
    use super::*;

    #[zcnet_testkit::test]
    fn a_return_wakes_a_starving_owner_once() {
        let efd = EventFd::new().expect("eventfd");
        let q = ReturnQueue::<u16>::default();
        q.set_wake(efd.try_clone().expect("dup"));
        // Not starving: returns are queued without a signal.
        q.push(1);
        assert_eq!(efd.drain().expect("read"), 0);
        let mut out = Vec::new();
        q.take_into(&mut out);
        q.set_starving(true);
        q.push(2);
        q.push(3);
        assert_eq!(efd.drain().expect("read"), 1, "one signal per starvation");
        q.take_into(&mut out);
        assert_eq!(out, [1, 2, 3]);
        assert!(q.is_empty());
        // Starving again: the next return signals again.
        q.set_starving(true);
        q.push(4);
        assert_eq!(efd.drain().expect("read"), 1);
        // A return the owner has not taken when it says it starves signals at once.
        q.set_starving(true);
        assert_eq!(efd.drain().expect("read"), 1);
        q.take_into(&mut out);
        q.set_starving(true);
        assert_eq!(efd.drain().expect("read"), 0, "nothing waiting: no signal");
    }
}
