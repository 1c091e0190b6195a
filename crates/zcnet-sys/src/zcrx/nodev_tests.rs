use super::*;
use std::io::{Read, Write};
use std::time::Duration;
use zcnet_core::rxring::RxEvent;

/// A connected loopback TCP pair in the calling thread's network namespace.
fn tcp_pair() -> (std::net::TcpStream, std::net::TcpStream) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    (a, b)
}

/// Skips unless the kernel's zcrx query lists `ZCRX_REG_NODEV` (asked, not by version).
fn require_nodev() {
    zcnet_testkit::require_root("zcrx needs CAP_NET_ADMIN");
    if !ZcrxCaps::get().nodev() {
        zcnet_testkit::skip(
            zcnet_testkit::Need::KernelVersion,
            "this kernel's zcrx query (IORING_REGISTER_QUERY) lists no ZCRX_REG_NODEV (Linux 7.1 added it)",
        );
    }
}

#[zcnet_testkit::test]
fn nodev_is_einval_where_the_kernel_does_not_list_it() {
    zcnet_testkit::require_kernel(6, 15, "zcrx");
    zcnet_testkit::require_root("CAP_NET_ADMIN, checked before the flags");
    if ZcrxCaps::get().nodev() {
        zcnet_testkit::skip(
            zcnet_testkit::Need::KernelVersion,
            "this kernel's zcrx query lists ZCRX_REG_NODEV",
        );
    }
    // 6.18 refuses any flag (`reg.flags` must be 0), whatever the area.
    let e = ZcrxIfq::register_nodev_for_receive(4 << 12, 4).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
}

/// What one [`receive_exact`] saw besides the bytes.
#[derive(Debug, Default)]
struct Seen {
    /// Requests the kernel ended that were re-armed, by errno.
    rearms: Vec<i32>,
    eof: bool,
}

/// Receives `len` bytes of the pattern `(i % 251)` (numbered from `from`) on `sock`
/// through `rx` (request `7`, armed by the caller), checking every byte and re-arming
/// requests the kernel ends; stops early at end of stream.
fn receive_exact(
    rx: &mut ZcrxReceiver,
    sock: &std::net::TcpStream,
    from: usize,
    len: usize,
) -> Seen {
    let mut seen = Seen::default();
    let mut got = 0usize;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while got < len && !seen.eof {
        assert!(
            std::time::Instant::now() < deadline,
            "stalled at {got} of {len} B ({seen:?}, {:?})",
            rx.core().stats()
        );
        rx.flush_refills().unwrap();
        rx.wait(1, Duration::from_millis(100)).unwrap();
        let mut done = Vec::new();
        rx.drain(|c| done.push(c));
        for c in done {
            match c.event.unwrap() {
                RxEvent::Data { frag, .. } => {
                    let b = rx.bytes(frag).unwrap();
                    for (k, &x) in b.iter().enumerate() {
                        let i = from + got + k;
                        assert_eq!(x, (i % 251) as u8, "byte {i}");
                    }
                    got += b.len();
                    rx.release(frag).unwrap();
                }
                RxEvent::Eof { .. } => seen.eof = true,
                RxEvent::Rearm { errno, .. } => {
                    seen.rearms.push(errno);
                    rx.arm(sock.as_raw_fd(), 7).unwrap()
                }
                RxEvent::Done { .. } => rx.arm(sock.as_raw_fd(), 7).unwrap(),
                RxEvent::Error { errno, .. } => {
                    panic!("RECV_ZC: {}", io::Error::from_raw_os_error(errno))
                }
            }
        }
    }
    assert_eq!(got, len, "{seen:?}");
    seen
}

/// Writes `len` bytes of the pattern, numbered from `from`, on another thread.
fn send_pattern(
    mut tx: std::net::TcpStream,
    from: usize,
    len: usize,
) -> std::thread::JoinHandle<std::net::TcpStream> {
    std::thread::spawn(move || {
        let data: Vec<u8> = (from..from + len).map(|i| (i % 251) as u8).collect();
        tx.write_all(&data).unwrap();
        tx
    })
}

/// Receives `len` bytes of a pattern on loopback through `ifq`, checking every byte, then
/// the end of the stream; returns what was seen and the kernel's statistics at the end.
fn receive_over_loopback(ifq: ZcrxIfq, len: usize) -> (Seen, Option<ZcrxStats>) {
    assert!(ifq.is_nodev());
    let mut rx = ZcrxReceiver::new(ifq).unwrap();
    let (tx, sock) = tcp_pair();
    let sender = send_pattern(tx, 0, len);
    rx.arm(sock.as_raw_fd(), 7).unwrap();
    let seen = receive_exact(&mut rx, &sock, 0, len);
    drop(sender.join().unwrap());
    let end = receive_exact(&mut rx, &sock, len, 0);
    assert!(seen.eof || end.eof || Read::read(&mut &sock, &mut [0u8; 1]).unwrap() == 0);
    (seen, rx.ifq().kernel_stats())
}

fn nodev_ifq(pages: usize) -> ZcrxIfq {
    let page = crate::mem::page_size();
    ZcrxIfq::register_nodev_for_receive(pages * page, pages as u32).unwrap()
}

#[zcnet_testkit::test]
fn nodev_receives_loopback_through_a_small_area() {
    require_nodev();
    // 4 pages for 1 MiB: every buffer goes round 64 times; without the flush it stalls.
    let (_, stats) = receive_over_loopback(nodev_ifq(4), 1 << 20);
    if ZcrxCaps::get().stats().is_some() {
        let st = stats.expect("the kernel says it keeps zcrx statistics");
        // NODEV copies everything. (`copy_count` counts copy runs, not completions: 108
        // for this 1 MiB in the kernel lab's 7.2.)
        assert_eq!(st.copy_bytes, 1 << 20, "{st:?}");
        assert!(st.copy_count > 0, "{st:?}");
    } else {
        assert!(stats.is_none());
    }
}

/// A completion queue too small for what arrives: the kernel ends the request with
/// `-ENOSPC` (io_uring/zcrx.c `io_zcrx_queue_cqe` finds no room; its final CQE waits in
/// the overflow list) and re-arming goes on where it stopped, losing nothing.
#[zcnet_testkit::test]
fn a_full_completion_queue_ends_the_request_and_rearming_recovers() {
    require_nodev();
    let page = crate::mem::page_size();
    let ring = ZcrxRing::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_cqsize(8)
        .build(8)
        .unwrap();
    let area = Mapping::anonymous(64 * page).unwrap();
    let ifq = ZcrxIfq::register_nodev_on(ring, area, 64).unwrap();
    let (seen, _) = receive_over_loopback(ifq, 1 << 20);
    assert!(
        seen.rearms.contains(&libc::ENOSPC),
        "8 CQEs for 256 pages must run out: {seen:?}"
    );
}

/// Where the kernel has them, a COPY event arrives once, stays quiet until re-armed, and
/// comes again after re-arming; re-arming one that has not fired is the kernel's EINVAL.
#[zcnet_testkit::test]
fn the_copy_event_fires_once_until_rearmed() {
    require_nodev();
    let caps = ZcrxCaps::get();
    if !(caps.event(ZCRX_EVENT_COPY) && caps.arm_event()) {
        zcnet_testkit::skip(
            zcnet_testkit::Need::KernelVersion,
            "this kernel's zcrx query lists no COPY event or ZCRX_CTRL_ARM_EVENT (Linux 7.2 added them)",
        );
    }
    let ifq = nodev_ifq(16);
    assert_eq!(
        ifq.event_mask() & (1 << ZCRX_EVENT_COPY),
        1 << ZCRX_EVENT_COPY
    );
    let mut rx = ZcrxReceiver::new(ifq).unwrap();
    let (tx, sock) = tcp_pair();
    rx.arm(sock.as_raw_fd(), 7).unwrap();
    let tx = send_pattern(tx, 0, 256 << 10).join().unwrap();
    receive_exact(&mut rx, &sock, 0, 256 << 10);
    let ev = rx.events();
    assert_eq!((ev.copy, ev.alloc_fail, ev.other), (1, 0, 0), "{ev:?}");
    assert_eq!(ev.fired, 1 << ZCRX_EVENT_COPY);
    rx.rearm_event(ZCRX_EVENT_COPY).unwrap();
    assert_eq!(rx.events().fired, 0);
    let e = rx.ifq().arm_event(ZCRX_EVENT_COPY).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "not fired since: {e}");
    let tx = send_pattern(tx, 256 << 10, 64 << 10).join().unwrap();
    receive_exact(&mut rx, &sock, 256 << 10, 64 << 10);
    assert_eq!(rx.events().copy, 2, "{:?}", rx.events());
    drop(tx);
}

/// `rx_buf_len`: a page is what a device-less ifq has (and the kernel says so back); a
/// larger buffer needs a device (`EOPNOTSUPP`, io_uring/zcrx.c `io_zcrx_create_area`);
/// not a power of two is `EINVAL`.
#[zcnet_testkit::test]
fn buffer_size_without_a_device_is_a_page() {
    require_nodev();
    if !ZcrxCaps::get().rx_buf_len() {
        zcnet_testkit::skip(
            zcnet_testkit::Need::KernelVersion,
            "this kernel's zcrx query lists no ZCRX_FEATURE_RX_PAGE_SIZE",
        );
    }
    let page = crate::mem::page_size();
    let reg = |rx_buf_len: u32| {
        let area = Mapping::huge_tlb(2 << 20)
            .or_else(|_| Mapping::anonymous(2 << 20))
            .unwrap();
        ZcrxIfq::register_for_receive_with(
            area,
            HostRegistration {
                rq_entries: 64,
                rx_buf_len,
                nodev: true,
                ..HostRegistration::default()
            },
        )
    };
    let ifq = reg(page as u32).unwrap();
    assert_eq!(ifq.buf_len() as usize, page);
    assert_eq!(reg(0).unwrap().buf_len() as usize, page, "written back");
    let e = reg(16 << 10).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}");
    let e = reg(3 * page as u32).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
}

/// Where the kernel takes no event descriptor (6.18), none is asked for: no statistics,
/// no events, and registration still works (the device check is what refuses here).
#[zcnet_testkit::test]
fn no_event_descriptor_where_the_kernel_lists_none() {
    let caps = ZcrxCaps::get();
    assert_eq!(event_request(&caps).is_some(), caps.events(), "{caps:?}");
    let c72 = ZcrxCaps::answered_by_linux_7_2_13();
    assert_eq!(event_request(&c72), Some((8, 3)));
    // No ARM_EVENT: events would fire once for good; only the statistics are asked for.
    let mut no_arm = c72;
    no_arm.zcrx = no_arm.zcrx.map(|z| crate::uring_query::QueryZcrx {
        nr_ctrl_opcodes: 2,
        ..z
    });
    assert_eq!(event_request(&no_arm), Some((8, 0)));
    assert_eq!(event_request(&ZcrxCaps::default()), None);
    let off = stats_offset_in(8192, 8);
    assert!(off.is_multiple_of(8) && off + 16 <= 8192 && off >= 4096 + 64 * 16);
}
