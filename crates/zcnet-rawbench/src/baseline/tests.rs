//! The raw loops over loopback in the test's own namespace (no root needed): a UDP socket
//! connected to a bound one nobody reads, so every send is accepted (the receiver drops what
//! overflows its buffer). Each run's counts must agree with each other and with the datagram
//! size; a halt flag set beforehand stops a loop with `Interrupted` after it drained; a bad fd is
//! the kernel's error, not a result.

use super::*;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;

const LEN: usize = 1000;
const INFLIGHT: usize = 8;
const RUN: Duration = Duration::from_millis(200);

/// A UDP socket connected to a bound loopback socket (returned too: it must outlive the run).
fn connected_pair() -> (UdpSocket, UdpSocket) {
    let sink = UdpSocket::bind("127.0.0.1:0").expect("bind the sink");
    let tx = UdpSocket::bind("127.0.0.1:0").expect("bind the sender");
    tx.connect(sink.local_addr().expect("sink address"))
        .expect("connect");
    (tx, sink)
}

/// What every successful run must satisfy: whole datagrams only, at least one, the copied counts
/// inside the totals, and the clocks running.
fn check_counts(r: &RawResult, what: &str) {
    assert!(r.sends > 0, "{what}: no send accepted: {r:?}");
    assert_eq!(
        r.bytes,
        r.sends * LEN as u64,
        "{what}: whole datagrams: {r:?}"
    );
    assert!(r.copied_notifications <= r.notifications, "{what}: {r:?}");
    assert!(r.copied_sends <= r.sends, "{what}: {r:?}");
    assert!(
        r.seconds >= RUN.as_secs_f64(),
        "{what}: ran {} s",
        r.seconds
    );
    assert!(r.cpu_seconds > 0.0, "{what}: no CPU time counted: {r:?}");
}

#[zcnet_testkit::test(timeout = 30)]
fn send_zc_with_each_choice_counts_one_notification_per_send() {
    let (tx, _sink) = connected_pair();
    let halt = AtomicBool::new(false);
    let r = raw_send_zc(tx.as_raw_fd(), LEN, INFLIGHT, RUN, &halt).expect("raw SEND_ZC loop");
    check_counts(&r, "ZCNET");
    assert_eq!(
        r.notifications, r.sends,
        "a SEND_ZC notification per send: {r:?}"
    );
    let flipped = RawZcChoices {
        report_usage: false,
        one_buffer: true,
        fixed_file: false,
        ring_fd: true,
        single_issuer: true,
        ..RawZcChoices::ZCNET
    };
    let r = raw_send_zc_with(tx.as_raw_fd(), LEN, INFLIGHT, RUN, &halt, flipped)
        .expect("raw SEND_ZC loop, the example's choices");
    check_counts(&r, "flipped");
    assert_eq!(r.notifications, r.sends, "{r:?}");
    assert_eq!(
        r.copied_notifications, 0,
        "no usage asked, none reported: {r:?}"
    );
}

#[zcnet_testkit::test(timeout = 30)]
fn plain_send_loop_has_no_notifications() {
    let (tx, _sink) = connected_pair();
    let halt = AtomicBool::new(false);
    let r = raw_send_zc_with(
        tx.as_raw_fd(),
        LEN,
        INFLIGHT,
        RUN,
        &halt,
        RawZcChoices::ZCNET_SEND,
    )
    .expect("raw SEND loop");
    check_counts(&r, "ZCNET_SEND");
    assert_eq!(
        r.notifications, 0,
        "IORING_OP_SEND has no notification: {r:?}"
    );
}

#[zcnet_testkit::test(timeout = 30)]
fn msg_zerocopy_completes_every_send() {
    let (tx, _sink) = connected_pair();
    let halt = AtomicBool::new(false);
    let r =
        raw_msg_zerocopy(tx.as_raw_fd(), LEN, INFLIGHT, RUN, &halt).expect("raw MSG_ZEROCOPY loop");
    check_counts(&r, "MSG_ZEROCOPY");
    // One notification covers a range of ids: at least one, never more than the sends.
    assert!(r.notifications > 0 && r.notifications <= r.sends, "{r:?}");
}

#[zcnet_testkit::test(timeout = 30)]
fn a_halt_set_beforehand_stops_each_loop_as_interrupted() {
    let (tx, _sink) = connected_pair();
    let halt = AtomicBool::new(true);
    let long = Duration::from_secs(60);
    for (what, r) in [
        (
            "SEND_ZC",
            raw_send_zc(tx.as_raw_fd(), LEN, INFLIGHT, long, &halt),
        ),
        (
            "MSG_ZEROCOPY",
            raw_msg_zerocopy(tx.as_raw_fd(), LEN, INFLIGHT, long, &halt),
        ),
    ] {
        let e = r.expect_err(what);
        assert_eq!(e.kind(), io::ErrorKind::Interrupted, "{what}: {e}");
    }
}

#[zcnet_testkit::test(timeout = 30)]
fn a_bad_fd_is_the_kernels_error() {
    let halt = AtomicBool::new(false);
    let e = raw_send_zc(-1, LEN, INFLIGHT, RUN, &halt).expect_err("SEND_ZC on fd -1");
    assert_ne!(e.kind(), io::ErrorKind::Interrupted, "{e}");
    let e = raw_msg_zerocopy(-1, LEN, INFLIGHT, RUN, &halt).expect_err("MSG_ZEROCOPY on fd -1");
    assert_eq!(e.raw_os_error(), Some(libc::EBADF), "{e}");
}
