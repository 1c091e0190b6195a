//! Tests of the buffer ring: the entry layout, refused sizes, the state after `new`, and
//! the eventfd that wakes a poller.

use super::*;

#[zcnet_testkit::test]
fn entry_layout_matches_uapi() {
    assert_eq!(std::mem::align_of::<IoUringBuf>(), 8);
    assert_eq!(std::mem::offset_of!(IoUringBuf, len), 8);
    assert_eq!(std::mem::offset_of!(IoUringBuf, bid), 12);
}

#[zcnet_testkit::test]
fn bad_sizes_are_refused() {
    for (n, s) in [(0, 4096), (3, 4096), (65536, 64), (8, 0)] {
        let e = RecvRing::new(8, n, s, 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{n} x {s}");
    }
}

#[zcnet_testkit::test]
fn all_buffers_start_in_the_kernel() {
    let r = RecvRing::new(8, 16, 1024, 3).unwrap();
    assert_eq!(r.held_count(), 0);
    assert_eq!(r.tail, 16);
    // SAFETY: test: reads the tail we wrote, through the same atomic view.
    let t = unsafe { AtomicU16::from_ptr(std::ptr::addr_of_mut!((*r.entries).resv)) };
    assert_eq!(t.load(Ordering::Acquire), 16);
    assert!(r.buf(0, 1).is_err());
}

/// The readiness fd an event loop waits on: an eventfd registered with the ring becomes
/// readable when data arrives for an armed receive — on a DEFER_TASKRUN ring too, where
/// the work only runs inside the owner's next wait — and the wait then completes it.
#[zcnet_testkit::test]
fn a_registered_eventfd_wakes_a_poller_when_data_arrives() {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let mut r = RecvRing::new(8, 16, 4096, 0).unwrap();
    let efd = crate::epoll::EventFd::new().unwrap();
    r.register_eventfd(&efd).unwrap();
    assert_eq!(
        r.register_eventfd(&efd).unwrap_err().raw_os_error(),
        Some(libc::EBUSY)
    );
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    r.arm(b.as_raw_fd(), 5, false).unwrap();
    let mut ep = crate::epoll::Epoll::new(4).unwrap();
    ep.add(efd.as_raw_fd(), 1, crate::epoll::IN).unwrap();
    // Arming may itself complete something to signal: start from a quiet state.
    r.wait(1, std::time::Duration::ZERO).unwrap();
    r.drain(|_| {});
    efd.drain().unwrap();
    let mut out = Vec::new();
    ep.wait(&mut out, 0).unwrap();
    assert!(out.is_empty(), "nothing arrived yet: {out:?}");
    a.write_all(b"hello").unwrap();
    ep.wait(&mut out, 5000).unwrap();
    assert_eq!(
        out.len(),
        1,
        "the eventfd woke the poller (defer_taskrun: {})",
        r.defer_taskrun()
    );
    let mut got = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while got == 0 && std::time::Instant::now() < deadline {
        // min 1 (with a zero timeout) so that the call runs the deferred work.
        r.wait(1, std::time::Duration::ZERO).unwrap();
        r.drain(|c| got += c.result.as_ref().copied().unwrap_or(0));
    }
    assert_eq!(got, 5);
}
