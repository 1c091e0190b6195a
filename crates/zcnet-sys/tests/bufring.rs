//! Multishot receive into a provided buffer ring, over loopback TCP.
#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::collections::HashMap;
use std::io::Write;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::thread;
use std::time::{Duration, Instant};
use zcnet_sys::bufring::{RecvCompletion, RecvRing};

/// A connected pair over 127.0.0.1: (sender, receiver).
fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let tx = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (rx, _) = l.accept().unwrap();
    (tx, rx)
}

/// A reproducible pseudo-random byte stream (xorshift64), so that a buffer landing in the wrong
/// place cannot go unnoticed.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Sends `data` in chunks of the given sizes (cycled), then shuts the write side.
fn send_in_chunks(
    mut tx: TcpStream,
    data: Vec<u8>,
    sizes: &'static [usize],
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let mut off = 0;
        let mut i = 0;
        while off < data.len() {
            let n = sizes[i % sizes.len()].min(data.len() - off);
            tx.write_all(&data[off..off + n]).unwrap();
            off += n;
            i += 1;
        }
        tx.shutdown(Shutdown::Write).unwrap();
    })
}

#[derive(Debug, Default)]
struct Stream {
    fd: i32,
    data: Vec<u8>,
    eof: bool,
    rearms: usize,
    enobufs: usize,
    ended_on_data: usize,
    max_bufs_per_cqe: u16,
}

/// Copies a data completion's bytes out (checking the buffer accounting) and recycles them.
fn consume(ring: &mut RecvRing, c: &RecvCompletion, out: &mut Vec<u8>, bundle: bool) -> u16 {
    let n = *c.result.as_ref().unwrap();
    let bs = ring.buf_size();
    assert_eq!(c.buf_count as usize, n.div_ceil(bs), "{c:?}");
    if !bundle {
        assert_eq!(c.buf_count, 1);
    }
    let mut got = 0;
    let mut segs = 0;
    for (id, b) in ring.segments(c).unwrap() {
        assert!(ring.is_held(id));
        got += b.len();
        segs += 1;
        out.extend_from_slice(b);
    }
    assert_eq!(got, n);
    assert_eq!(segs, c.buf_count);
    ring.recycle_completion(c).unwrap();
    c.buf_count
}

/// Receives on every armed stream (user_data -> stream) until each reaches EOF, recycling as it
/// goes and re-arming whenever a multishot ends before EOF.
fn receive_all(ring: &mut RecvRing, streams: &mut HashMap<u64, Stream>, bundle: bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while streams.values().any(|s| !s.eof) {
        assert!(Instant::now() < deadline, "timed out: {streams:?} {ring:?}");
        ring.wait(1, Duration::from_millis(100)).unwrap();
        let mut cs = Vec::new();
        ring.drain(|c| cs.push(c));
        for c in cs {
            let s = streams.get_mut(&c.user_data).unwrap();
            assert!(!s.eof, "completion after EOF: {c:?}");
            match &c.result {
                Ok(0) => {
                    assert!(!c.more, "EOF must end the multishot: {c:?}");
                    assert_eq!(c.buf_id, None);
                    s.eof = true;
                }
                Ok(_) => {
                    let k = consume(ring, &c, &mut s.data, bundle);
                    s.max_bufs_per_cqe = s.max_bufs_per_cqe.max(k);
                    if !c.more {
                        s.ended_on_data += 1;
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    assert!(!c.more, "ENOBUFS ends the multishot: {c:?}");
                    assert_eq!(c.buf_id, None);
                    s.enobufs += 1;
                }
                Err(e) => panic!("unexpected error {e}: {c:?}"),
            }
            if !c.more && !s.eof {
                ring.arm(s.fd, c.user_data, bundle).unwrap();
                s.rearms += 1;
            }
        }
    }
    assert_eq!(ring.armed(), 0);
    assert_eq!(ring.held_count(), 0);
    assert_eq!(ring.stats().desyncs, 0);
}

/// Skips the calling test: this kernel has no receive bundles.
fn no_bundles(what: &str) -> ! {
    zcnet_testkit::skip(
        zcnet_testkit::Need::Kernel,
        format!("no IORING_FEAT_RECVSEND_BUNDLE (Linux 6.10) here; {what}"),
    )
}

/// One stream of `total` bytes sent in chunks of `sizes`; returns the stream's record.
fn roundtrip(
    nbufs: u32,
    buf_size: u32,
    total: usize,
    sizes: &'static [usize],
    bundle: bool,
) -> Stream {
    let mut ring = RecvRing::new(64, nbufs, buf_size, 7).unwrap();
    if bundle && !ring.bundle_supported() {
        no_bundles("a stream with bundles");
    }
    let (tx, rx) = tcp_pair();
    let data = pattern(total, total as u64 ^ 0x9e37_79b9);
    ring.arm(rx.as_raw_fd(), 42, bundle).unwrap();
    let sender = send_in_chunks(tx, data.clone(), sizes);
    let mut streams = HashMap::from([(
        42,
        Stream {
            fd: rx.as_raw_fd(),
            ..Default::default()
        },
    )]);
    receive_all(&mut ring, &mut streams, bundle);
    sender.join().unwrap();
    let s = streams.remove(&42).unwrap();
    assert_eq!(s.data.len(), data.len());
    assert!(s.data == data, "stream corrupted");
    s
}

const SIZES: &[usize] = &[1, 100, 4095, 4096, 4097, 65536, 7, 300_000, 1500];

#[zcnet_testkit::test]
fn multishot_stream_arrives_in_order() {
    let s = roundtrip(16, 4096, 2_000_000, SIZES, false);
    eprintln!("plain: rearms {} enobufs {}", s.rearms, s.enobufs);
    assert_eq!(
        s.ended_on_data, 0,
        "without bundles only ENOBUFS/EOF end it"
    );
}

#[zcnet_testkit::test]
fn bundles_stream_arrives_in_order() {
    let ring = RecvRing::new(8, 8, 1024, 1).unwrap();
    if !ring.bundle_supported() {
        let (_tx, rx) = tcp_pair();
        let mut ring = ring;
        let e = ring.arm(rx.as_raw_fd(), 1, true).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP));
        no_bundles("the refusal was checked");
    }
    drop(ring);
    let s = roundtrip(64, 1024, 2_000_000, SIZES, true);
    eprintln!(
        "bundle: rearms {} enobufs {} ended_on_data {} max bufs/CQE {}",
        s.rearms, s.enobufs, s.ended_on_data, s.max_bufs_per_cqe
    );
    assert!(
        s.max_bufs_per_cqe > 1,
        "no CQE covered more than one buffer"
    );
}

#[zcnet_testkit::test]
fn small_ring_many_small_buffers() {
    // 2 buffers of 64 bytes: nearly every CQE drains the ring.
    roundtrip(2, 64, 100_000, &[1, 63, 64, 65, 1000], false);
    roundtrip(2, 64, 100_000, &[1, 63, 64, 65, 1000], true);
}

/// The application withholds every buffer: the multishot must end (ENOBUFS, or with bundles
/// possibly a data CQE without F_MORE), then recycling and re-arming must carry on losslessly.
fn withhold_then_resume(bundle: bool) {
    const N: u32 = 8;
    const BS: u32 = 1024;
    let mut ring = RecvRing::new(16, N, BS, 9).unwrap();
    if bundle && !ring.bundle_supported() {
        no_bundles("withholding with bundles");
    }
    let (tx, rx) = tcp_pair();
    let data = pattern(256 * 1024, 5);
    ring.arm(rx.as_raw_fd(), 1, bundle).unwrap();
    let sender = send_in_chunks(tx, data.clone(), &[65536]);

    let mut kept: Vec<RecvCompletion> = Vec::new();
    // The result of the CQE without F_MORE: Ok(bytes) or Err(errno).
    let mut end: Option<Result<usize, i32>> = None;
    let deadline = Instant::now() + Duration::from_secs(10);
    while end.is_none() {
        assert!(Instant::now() < deadline, "multishot never ended: {ring:?}");
        ring.wait(1, Duration::from_millis(100)).unwrap();
        let mut cs = Vec::new();
        ring.drain(|c| cs.push(c));
        for c in cs {
            assert!(end.is_none(), "completion after the final one: {c:?}");
            let r = match &c.result {
                Ok(n) => {
                    assert!(*n > 0, "unexpected EOF");
                    Ok(*n)
                }
                Err(e) => {
                    assert_eq!(e.raw_os_error(), Some(libc::ENOBUFS), "{c:?}");
                    assert_eq!(c.buf_id, None);
                    Err(libc::ENOBUFS)
                }
            };
            if !c.more {
                end = Some(r);
            }
            if c.buf_id.is_some() {
                kept.push(c);
            }
        }
    }
    let end = end.unwrap();
    eprintln!("bundle={bundle}: the multishot ended with {end:?}");
    if bundle {
        // Either the data CQE that emptied the ring comes without F_MORE (io_recv_finish:
        // REQ_F_BL_EMPTY), or an ENOBUFS CQE follows.
        assert!(matches!(end, Ok(_) | Err(libc::ENOBUFS)));
    } else {
        assert_eq!(end, Err(libc::ENOBUFS));
        assert_eq!(ring.stats().enobufs, 1);
    }
    assert_eq!(ring.armed(), 0);
    // Every buffer is with the application, and they hold the stream's first bytes in order.
    assert_eq!(ring.held_count(), N as usize);
    let held: usize = kept.iter().map(|c| c.buf_count as usize).sum();
    assert_eq!(held, N as usize);
    let mut got = Vec::new();
    let mut ids = Vec::new();
    for c in &kept {
        for (id, b) in ring.segments(c).unwrap() {
            got.extend_from_slice(b);
            ids.push(id);
        }
    }
    assert_eq!(got.len(), (N * BS) as usize);
    // Recycle in descending id order, so that ring order differs from id order from now on and
    // bundles must be walked in ring order, not by consecutive ids.
    ids.sort_unstable();
    for &id in ids.iter().rev() {
        ring.recycle(id).unwrap();
    }
    assert_eq!(ring.held_count(), 0);

    // Re-arm and take the rest.
    ring.arm(rx.as_raw_fd(), 1, bundle).unwrap();
    let mut streams = HashMap::from([(
        1,
        Stream {
            fd: rx.as_raw_fd(),
            data: got,
            ..Default::default()
        },
    )]);
    receive_all(&mut ring, &mut streams, bundle);
    sender.join().unwrap();
    assert!(streams[&1].data == data, "stream corrupted across ENOBUFS");
}

#[zcnet_testkit::test]
fn enobufs_when_app_withholds_then_resume() {
    withhold_then_resume(false);
}

#[zcnet_testkit::test]
fn bundle_ring_exhaustion_then_resume() {
    withhold_then_resume(true);
}

/// A connection armed on `ring` (user_data 5) that has received "hello" into one buffer:
/// (sender, receiver, the completion).
fn hello_in_one_buffer(ring: &mut RecvRing) -> (TcpStream, TcpStream, RecvCompletion) {
    let (mut tx, rx) = tcp_pair();
    ring.arm(rx.as_raw_fd(), 5, false).unwrap();
    tx.write_all(b"hello").unwrap();
    let mut cs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while cs.is_empty() {
        assert!(Instant::now() < deadline);
        ring.wait(1, Duration::from_millis(100)).unwrap();
        ring.drain(|c| cs.push(c));
    }
    (tx, rx, cs.pop().unwrap())
}

#[zcnet_testkit::test]
fn recycled_buffer_is_refused_and_double_recycle_is_refused() {
    let mut ring = RecvRing::new(8, 4, 64, 2).unwrap();
    let (tx, rx, c) = hello_in_one_buffer(&mut ring);
    assert!(c.more);
    assert_eq!(*c.result.as_ref().unwrap(), 5);
    let id = c.buf_id.unwrap();
    assert_eq!(ring.buf(id, 5).unwrap(), b"hello");
    assert_eq!(
        ring.buf(id, 65).unwrap_err().raw_os_error(),
        Some(libc::EINVAL)
    );
    let other = (id + 1) % 4;
    assert!(
        ring.buf(other, 1).is_err(),
        "a buffer the kernel owns must be refused"
    );
    assert!(
        ring.recycle(other).is_err(),
        "a buffer never received must be refused"
    );
    assert!(ring.recycle(4).is_err());
    assert!(ring.recycle(u16::MAX).is_err());

    ring.recycle(id).unwrap();
    assert_eq!(
        ring.buf(id, 5).unwrap_err().raw_os_error(),
        Some(libc::EINVAL)
    );
    assert_eq!(
        ring.recycle(id).unwrap_err().raw_os_error(),
        Some(libc::EINVAL)
    );
    assert!(ring.segments(&c).is_err());
    assert!(ring.recycle_completion(&c).is_err());
    assert_eq!(ring.held_count(), 0);

    // The refusals did not corrupt the ring: more data than the ring holds still flows in order.
    still_flows_in_order(&mut ring, tx, &rx, 11);
}

/// After refusals on `ring` (armed on `rx` as user_data 5): 10,000 B of pattern `seed` sent on
/// `tx` in odd chunks, more than the ring holds, arrive whole and in order.
fn still_flows_in_order(ring: &mut RecvRing, tx: TcpStream, rx: &TcpStream, seed: u64) {
    let data = pattern(10_000, seed);
    let sender = send_in_chunks(tx, data.clone(), &[1, 200, 3000]);
    let mut streams = HashMap::from([(
        5,
        Stream {
            fd: rx.as_raw_fd(),
            ..Default::default()
        },
    )]);
    receive_all(ring, &mut streams, false);
    sender.join().unwrap();
    assert!(streams[&5].data == data);
}

/// A buffer taken out as a HeldBuf stays out of the kernel's reach until its handle comes back:
/// recycling it by id (alone or with its completion) and taking it twice are refused, and
/// give_back returns it to the ring, which receives into it again.
#[zcnet_testkit::test]
fn a_taken_buffer_goes_back_only_with_its_handle() {
    let mut ring = RecvRing::new(8, 4, 64, 3).unwrap();
    let mut other = RecvRing::new(8, 4, 64, 4).unwrap();
    let (tx, rx, c) = hello_in_one_buffer(&mut ring);
    let id = c.buf_id.unwrap();
    assert!(
        ring.take((id + 1) % 4).is_err(),
        "a buffer the kernel owns cannot be taken"
    );
    let h = ring.take(id).unwrap();
    assert_eq!((h.id(), &h.bytes()[..5]), (id, &b"hello"[..]));
    assert_eq!(
        ring.take(id).unwrap_err().raw_os_error(),
        Some(libc::EINVAL)
    );
    assert_eq!(
        ring.recycle(id).unwrap_err().raw_os_error(),
        Some(libc::EINVAL)
    );
    assert!(ring.recycle_completion(&c).is_err());
    assert!(ring.is_held(id), "refusals leave it held");
    // Another ring's give_back refuses the handle and hands it back.
    let (h, e) = other.give_back(h).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    ring.give_back(h).unwrap();
    assert!(!ring.is_held(id));
    assert_eq!(ring.held_count(), 0);

    // The ring still receives everything in order.
    still_flows_in_order(&mut ring, tx, &rx, 12);
}

/// A taken buffer whose handle is dropped instead of given back (an error path that forgot
/// it) is not lost: it goes back to the ring at the next wait, once.
#[zcnet_testkit::test]
fn a_dropped_handle_gives_its_buffer_back() {
    let mut ring = RecvRing::new(8, 4, 64, 3).unwrap();
    let (tx, rx, c) = hello_in_one_buffer(&mut ring);
    let id = c.buf_id.unwrap();
    drop(ring.take(id).unwrap());
    assert!(ring.is_held(id), "out until the next wait");
    ring.wait(0, Duration::ZERO).unwrap();
    assert!(!ring.is_held(id), "back in the ring");
    ring.wait(0, Duration::ZERO).unwrap();
    assert_eq!(ring.held_count(), 0);
    still_flows_in_order(&mut ring, tx, &rx, 14);
}

/// A received buffer lent on (to send it without a copy) is read-only, out of the kernel's
/// reach while any reference to the lease lives (recycling it by id is refused), refused as the
/// memory of a receive, and back in the ring at the first wait after the last reference went.
#[zcnet_testkit::test]
fn a_lent_buffer_comes_back_to_the_ring_when_its_lease_ends() {
    use std::sync::Arc;
    use zcnet_sys::uring::{Lease, Op, Request, Ring};
    let mut ring = RecvRing::new(8, 4, 64, 3).unwrap();
    let (tx, rx, c) = hello_in_one_buffer(&mut ring);
    let id = c.buf_id.unwrap();
    assert!(ring.lend(id, 65).is_err(), "more than the buffer");
    let mut lent = ring.lend(id, 5).unwrap();
    assert_eq!(lent.slice(0, 5), Some(&b"hello"[..]));
    assert!(lent.is_read_only() && lent.slice_mut(0, 1).is_none());
    assert!(ring.recycle(id).is_err(), "lent: not recycled by id");
    let lent = Arc::new(lent);
    let mut sender = Ring::new(8, 0).unwrap();
    let recv = Request {
        fd: rx.as_raw_fd(),
        off: 0,
        len: 5,
        op: Op::Recv,
        flags: 0,
        link: false,
    };
    let (_, e) = sender
        .push(Lease::Borrowed(Arc::clone(&lent)), &recv)
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EACCES), "no receive into it");
    let clone = Arc::clone(&lent);
    drop(lent);
    ring.wait(0, Duration::ZERO).unwrap();
    assert!(ring.is_held(id), "a reference lives: still out");
    drop(clone);
    ring.wait(0, Duration::ZERO).unwrap();
    assert!(!ring.is_held(id), "back in the ring");
    assert_eq!(ring.held_count(), 0);
    still_flows_in_order(&mut ring, tx, &rx, 13);
}

#[zcnet_testkit::test]
fn eof_is_ok_zero_without_more() {
    let mut ring = RecvRing::new(8, 4, 256, 0).unwrap();
    let (tx, rx) = tcp_pair();
    ring.arm(rx.as_raw_fd(), 3, false).unwrap();
    tx.shutdown(Shutdown::Write).unwrap();
    let mut cs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while cs.is_empty() {
        assert!(Instant::now() < deadline);
        ring.wait(1, Duration::from_millis(100)).unwrap();
        ring.drain(|c| cs.push(c));
    }
    assert_eq!(cs.len(), 1);
    let c = &cs[0];
    assert_eq!(c.user_data, 3);
    assert_eq!(*c.result.as_ref().unwrap(), 0);
    assert!(!c.more);
    assert_eq!(c.buf_id, None);
    assert_eq!(c.buf_count, 0);
    assert_eq!(ring.armed(), 0);
    assert_eq!(ring.held_count(), 0);
}

#[zcnet_testkit::test]
fn two_sockets_share_one_group() {
    for bundle in [false, true] {
        let mut ring = RecvRing::new(16, 16, 512, 4).unwrap();
        if bundle && !ring.bundle_supported() {
            no_bundles("the half without bundles ran");
        }
        let (tx1, rx1) = tcp_pair();
        let (tx2, rx2) = tcp_pair();
        let d1 = pattern(500_000, 1);
        let d2 = pattern(300_000, 2);
        ring.arm(rx1.as_raw_fd(), 1, bundle).unwrap();
        ring.arm(rx2.as_raw_fd(), 2, bundle).unwrap();
        let s1 = send_in_chunks(tx1, d1.clone(), &[3000, 100, 9000]);
        let s2 = send_in_chunks(tx2, d2.clone(), &[512, 1, 70000]);
        let mut streams = HashMap::from([
            (
                1,
                Stream {
                    fd: rx1.as_raw_fd(),
                    ..Default::default()
                },
            ),
            (
                2,
                Stream {
                    fd: rx2.as_raw_fd(),
                    ..Default::default()
                },
            ),
        ]);
        receive_all(&mut ring, &mut streams, bundle);
        s1.join().unwrap();
        s2.join().unwrap();
        assert!(
            streams[&1].data == d1,
            "stream 1 corrupted (bundle={bundle})"
        );
        assert!(
            streams[&2].data == d2,
            "stream 2 corrupted (bundle={bundle})"
        );
    }
}

#[zcnet_testkit::test]
fn arm_argument_checks() {
    let mut ring = RecvRing::new(8, 4, 256, 0).unwrap();
    let (_tx, rx) = tcp_pair();
    let e = ring.arm(rx.as_raw_fd(), u64::MAX, false).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    ring.arm(rx.as_raw_fd(), 1, false).unwrap();
    let e = ring.arm(rx.as_raw_fd(), 1, false).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EBUSY));
    assert_eq!(ring.armed(), 1);
}

#[zcnet_testkit::test]
fn drop_cancels_armed_requests_promptly() {
    let (_tx, rx) = tcp_pair();
    let mut ring = RecvRing::new(8, 4, 256, 0).unwrap();
    ring.arm(rx.as_raw_fd(), 1, false).unwrap();
    ring.arm(rx.as_raw_fd(), 2, ring.bundle_supported())
        .unwrap();
    ring.wait(0, Duration::from_millis(10)).unwrap();
    assert!(ring.cancel_all(Duration::from_secs(2)));
    assert_eq!(ring.armed(), 0);
    // And through Drop, with a request armed.
    ring.arm(rx.as_raw_fd(), 3, false).unwrap();
    let t = Instant::now();
    drop(ring);
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "drop waited {:?}",
        t.elapsed()
    );
    // The group id is free again: a new ring may register it (a fresh io_uring anyway) and the
    // socket still works with it.
    let mut ring = RecvRing::new(8, 4, 256, 0).unwrap();
    ring.arm(rx.as_raw_fd(), 1, false).unwrap();
}

#[zcnet_testkit::test]
fn stale_completion_is_refused_after_its_buffer_is_reused() {
    // One buffer: every reception reuses id 0.
    let mut ring = RecvRing::new(8, 1, 64, 0).unwrap();
    let (mut tx, rx) = tcp_pair();
    ring.arm(rx.as_raw_fd(), 1, false).unwrap();
    let next = |ring: &mut RecvRing, tx: &mut TcpStream, msg: &[u8]| {
        tx.write_all(msg).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            assert!(Instant::now() < deadline);
            ring.wait(1, Duration::from_millis(100)).unwrap();
            let mut cs = Vec::new();
            ring.drain(|c| cs.push(c));
            if let Some(c) = cs.into_iter().find(|c| c.buf_id.is_some()) {
                return c;
            }
        }
    };
    let c1 = next(&mut ring, &mut tx, b"first");
    assert_eq!(ring.segments(&c1).unwrap().next().unwrap().1, b"first");
    ring.recycle_completion(&c1).unwrap();
    if ring.armed() == 0 {
        // The single buffer ran out after the first CQE (ENOBUFS): arm again.
        ring.arm(rx.as_raw_fd(), 1, false).unwrap();
    }
    let c2 = next(&mut ring, &mut tx, b"second");
    assert_eq!(c1.buf_id, c2.buf_id);
    assert!(ring.segments(&c1).is_err(), "stale completion accepted");
    assert!(ring.recycle_completion(&c1).is_err());
    assert!(ring.is_held(c2.buf_id.unwrap()), "refusal must not recycle");
    assert_eq!(ring.segments(&c2).unwrap().next().unwrap().1, b"second");
    ring.recycle_completion(&c2).unwrap();
    assert_eq!(ring.held_count(), 0);
}

#[zcnet_testkit::test]
fn cancel_one_request_leaves_the_other_armed() {
    let (mut tx1, rx1) = tcp_pair();
    let (mut tx2, rx2) = tcp_pair();
    let mut ring = RecvRing::new(8, 16, 4096, 0).unwrap();
    ring.arm(rx1.as_raw_fd(), 1, false).unwrap();
    ring.arm(rx2.as_raw_fd(), 2, false).unwrap();
    assert_eq!(
        ring.cancel(9).unwrap_err().raw_os_error(),
        Some(libc::ENOENT)
    );
    ring.cancel(1).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut ended = None;
    while ended.is_none() && Instant::now() < deadline {
        ring.wait(1, Duration::from_millis(100)).unwrap();
        ring.drain(|c| {
            assert_eq!(c.user_data, 1, "only the cancelled request completes");
            assert!(!c.more);
            ended = Some(c.result.as_ref().map_err(|e| e.raw_os_error()).copied());
        });
    }
    assert_eq!(ended, Some(Err(Some(libc::ECANCELED))));
    assert!(!ring.is_armed(1));
    assert!(ring.is_armed(2));
    // The cancelled socket's data stays in the socket; the other still receives.
    tx1.write_all(b"ignored").unwrap();
    tx2.write_all(b"hello").unwrap();
    let mut got = Vec::new();
    while got.is_empty() && Instant::now() < deadline {
        ring.wait(1, Duration::from_millis(100)).unwrap();
        ring.drain(|c| got.push((c.user_data, c.result.as_ref().map(|n| *n).ok(), c.buf_id)));
    }
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].0, got[0].1), (2, Some(5)));
    ring.recycle(got[0].2.unwrap()).unwrap();
    assert_eq!(ring.available(), 16);
}

zcnet_testkit::main!();
