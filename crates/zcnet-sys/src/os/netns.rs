//! Network namespaces: moving the calling thread into one, or into a new private one.

use std::io;
use std::os::fd::AsRawFd;

/// Moves the calling *thread* into the network namespace of `ns` (an fd of /run/netns/NAME).
/// Sockets created afterwards belong to that namespace; sockets keep their namespace for life.
pub fn enter_netns(ns: &std::fs::File) -> io::Result<()> {
    // SAFETY: setns takes an fd we own (borrowed for the call) and a flag; no memory is passed.
    crate::cvt(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) }).map(drop)
}

/// Moves the calling *thread* into a new, private network namespace (`unshare(CLONE_NEWNET)`):
/// it holds only a loopback device (ifindex 1), down. Other threads keep theirs. The namespace
/// goes away when nothing uses it any more (this thread has exited or moved, and its sockets and
/// rings are closed). Needs CAP_SYS_ADMIN. Tests use it to touch no device of the root namespace.
pub fn unshare_netns() -> io::Result<()> {
    // SAFETY: unshare takes only a flag; CLONE_NEWNET changes this thread's network namespace
    // and nothing in this process's memory.
    crate::cvt(unsafe { libc::unshare(libc::CLONE_NEWNET) }).map(drop)
}

/// Runs `f` in a new thread that first moves into a private network namespace
/// ([`unshare_netns`]); the namespace dies with the thread. Without root the calling test is
/// skipped (reported as such by zcnet-testkit). A panic or skip in `f` propagates.
#[cfg(test)]
pub(crate) fn in_private_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    zcnet_testkit::require_root("a private network namespace");
    let h = std::thread::spawn(move || {
        unshare_netns().expect("unshare(CLONE_NEWNET)");
        f()
    });
    zcnet_testkit::propagate(h.join())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[zcnet_testkit::test]
    fn unshare_netns_gives_a_private_loopback() {
        zcnet_testkit::require_root("unshare(CLONE_NEWNET)");
        let ours = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
        let before = ours.clone();
        std::thread::spawn(move || {
            unshare_netns().unwrap();
            let new = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
            assert_ne!(new, before);
            // Only `lo`, ifindex 1: the root namespace's devices are not visible.
            let index = |name: &str| {
                let c = std::ffi::CString::new(name).unwrap();
                // SAFETY: c is a NUL-terminated string that outlives the call.
                unsafe { libc::if_nametoindex(c.as_ptr()) }
            };
            assert_eq!(index("lo"), 1);
            assert_eq!(index("eth0"), 0);
            assert_eq!(index("ifb0"), 0);
        })
        .join()
        .unwrap();
        // This thread is unchanged.
        assert_eq!(
            std::fs::read_link("/proc/thread-self/ns/net").unwrap(),
            ours
        );
    }
}
