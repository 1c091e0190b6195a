//! A readiness fd registered with tokio's reactor (feature `tokio`), for zcnet-tokio.
//!
//! tokio's `AsyncFd::register_with_interest` is `unsafe`: the fd must stay open, and be the same
//! fd, for as long as the registration. Handing it an [`OwnedFd`] it owns (a duplicate of the
//! readiness fd: the same file description, so the same readiness) meets that by construction,
//! so [`register`] is safe.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// A duplicate of `fd` registered with the current runtime's reactor for readability. Must be
/// called inside a tokio runtime with I/O enabled (else an error, or tokio's panic where it has
/// no reactor at all).
pub fn register(fd: BorrowedFd<'_>) -> io::Result<AsyncFd<OwnedFd>> {
    let owned = fd.try_clone_to_owned()?;
    // SAFETY: `owned` is a valid, open fd that the AsyncFd takes ownership of: it stays open
    // and refers to the same file description until the AsyncFd is dropped (or `into_inner`
    // hands it back), and `OwnedFd::as_raw_fd` always returns that same number.
    unsafe { AsyncFd::register_with_interest(owned, Interest::READABLE) }.map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[zcnet_testkit::test]
    fn an_eventfd_signal_wakes_the_reactor() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        let efd = crate::epoll::EventFd::new().unwrap();
        rt.block_on(async {
            let afd = register(efd.as_fd()).unwrap();
            efd.signal().unwrap();
            let mut g = afd.readable().await.unwrap();
            assert_eq!(efd.drain().unwrap(), 1);
            g.clear_ready();
        });
    }
}
