//! AF_XDP frames coming back to their `Xsk` (dropped, released, recycled, completed), and
//! sockets sharing one UMEM across the two queues of a veth pair and another device
//! (`XDP_SHARED_UMEM`), in the namespace lab (root; each test skips with a printed reason
//! otherwise): every frame verified and counted per queue, none lost or used twice, bad sharing
//! refused in one line, nothing left bound or attached after close.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use common::{in_ns, ip, serial, veth_lab};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use zcnet::xsk::{interface_mac, RxFrame, TxFrame, Xsk, XskConfig, XskMode, XskStats};
use zcnet::{Error, Region};
use zcnet_core::udp_frame::{parse_udp, UdpFlow};
use zcnet_lab::VethPath;

const PORT: u16 = 47_100;
const OTHER_PORT: u16 = 47_101;
const SEED: u64 = 0x5eed_05a1;

/// A second veth pair in the lab's namespaces with two RX and two TX queues each way:
/// vA2 10.11.0.1 (ns a) ⇄ vB2 10.11.0.2 (ns b). It goes with the namespaces.
fn two_queue_pair(p: &VethPath) {
    #[rustfmt::skip]
    ip(&[
        "-n", &p.a, "link", "add", "vA2", "numtxqueues", "2", "numrxqueues", "2", "type", "veth",
        "peer", "name", "vB2", "numtxqueues", "2", "numrxqueues", "2", "netns", &p.b,
    ]);
    ip(&["-n", &p.a, "addr", "add", "10.11.0.1/24", "dev", "vA2"]);
    ip(&["-n", &p.b, "addr", "add", "10.11.0.2/24", "dev", "vB2"]);
    ip(&["-n", &p.a, "link", "set", "vA2", "up"]);
    ip(&["-n", &p.b, "link", "set", "vB2", "up"]);
}

/// Queue `q`, 64-entry rings, `rx`/`tx` frames, and the XDP program for [`PORT`] if `rx > 0`.
fn cfg(q: u32, rx: u32, tx: u32) -> XskConfig {
    let mut c = XskConfig::new(q);
    c.ring_size = 64;
    c.rx_frames = rx;
    c.tx_frames = tx;
    c.rx_port = (rx > 0).then_some(PORT);
    c
}

/// The first socket of a UMEM with room for `sockets` sockets of `c`'s size.
fn open_first(iface: &str, c: &XskConfig, sockets: usize) -> Xsk {
    Xsk::open(iface, Region::anonymous(c.umem_len() * sockets).unwrap(), c).unwrap()
}

/// Payload of frame `seq` (see [`common::frame_payload`]).
fn payload(seq: u64) -> Vec<u8> {
    common::frame_payload(SEED, 13, 200, seq)
}

/// Checks a payload against [`payload`]; returns its sequence number.
fn check_payload(p: &[u8]) -> u64 {
    common::check_frame_payload(SEED, 13, 200, p)
}

fn one_line(e: &Error) -> String {
    let s = e.to_string();
    assert!(!s.contains('\n'), "one line: {s}");
    s
}

fn write(fr: &mut TxFrame, f: &UdpFlow, seq: u64) {
    let len = f.write(fr.bytes_mut(), seq as u16, &payload(seq)).unwrap();
    fr.set_len(len).unwrap();
}

#[zcnet_testkit::test]
fn frames_come_back_dropped_released_and_completed() {
    let _g = serial();
    let (_lab, p) = veth_lab();
    let f = UdpFlow {
        src_mac: in_ns(&p.a, || interface_mac("vA").unwrap()),
        dst_mac: in_ns(&p.b, || interface_mac("vB").unwrap()),
        src: Ipv4Addr::new(10, 10, 0, 1),
        dst: Ipv4Addr::new(10, 10, 0, 2),
        src_port: 40_000,
        dst_port: OTHER_PORT,
        udp_checksum: true,
    };
    in_ns(&p.a, || {
        let c = cfg(0, 0, 16);
        let mut x = open_first("vA", &c, 1);
        assert_eq!(x.unassigned_frames(), 0, "a region of one socket's size");
        let mut v = Vec::new();
        assert_eq!(x.tx_frames(&mut v, 100).unwrap(), 16, "all 16 frames");
        assert!(x.tx_frame().unwrap().is_none(), "none left");
        // Four dropped by the application come back through the shared list.
        v.truncate(12);
        let mut w = Vec::new();
        assert_eq!(x.tx_frames(&mut w, 100).unwrap(), 4, "the dropped four");
        // Released without a lock: back too.
        x.release(&mut v);
        assert!(v.is_empty());
        assert_eq!(x.tx_frames(&mut w, 100).unwrap(), 12, "the released twelve");
        // A frame with no packet is refused and nothing is sent.
        let s = one_line(&x.send(&mut w).unwrap_err());
        assert!(s.contains("no packet"), "{s}");
        assert_eq!((w.len(), x.tx_in_flight()), (16, 0));
        for (i, fr) in w.iter_mut().enumerate() {
            write(fr, &f, i as u64);
        }
        let mut sent = 0;
        while !w.is_empty() {
            sent += x.send(&mut w).unwrap();
        }
        assert_eq!(sent, 16);
        assert!(x.flush(Duration::from_secs(5)).unwrap());
        let mut all = Vec::new();
        assert_eq!(
            x.tx_frames(&mut all, 100).unwrap(),
            16,
            "every sent frame back"
        );
        let indexes: std::collections::BTreeSet<u32> =
            all.iter().map(TxFrame::frame_index).collect();
        assert_eq!(
            indexes.len(),
            16,
            "16 different frames: none handed out twice"
        );
        let st = x.stats().unwrap();
        assert_eq!((st.tx_frames, st.tx_completed), (16, 16));
        // Frames outliving their Xsk are simply dropped (to the UMEM's spare frames).
        drop(x);
        drop(all);
    });
}

/// Receives on both sockets until `n` frames or 30 s: queue 0 gives its frames back with
/// `recycle`, queue 1 by dropping them. Returns the sequence numbers per queue.
fn receive_two(xs: &mut [Xsk; 2], n: u64, acked: &AtomicU64) -> [Vec<u64>; 2] {
    let mut got = [Vec::new(), Vec::new()];
    let mut frames: Vec<RxFrame> = Vec::new();
    let end = Instant::now() + Duration::from_secs(30);
    while ((got[0].len() + got[1].len()) as u64) < n && Instant::now() < end {
        let mut any = false;
        for (q, x) in xs.iter_mut().enumerate() {
            x.recv(&mut frames, 64, Duration::ZERO).unwrap();
            any |= !frames.is_empty();
            for fr in &frames {
                let pkt = parse_udp(fr.data()).expect("a valid Ethernet/IPv4/UDP frame");
                assert_eq!(pkt.dst_port, PORT);
                got[q].push(check_payload(pkt.payload));
            }
            if q == 0 {
                x.recycle(&mut frames);
                assert!(frames.is_empty());
            } else {
                frames.clear();
            }
        }
        acked.store((got[0].len() + got[1].len()) as u64, Ordering::Release);
        if !any {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    got
}

/// Sends frames `0..n` to vB2:[`PORT`], frame `seq` on queue `seq % 2` (two sockets of one
/// UMEM on vA2), at most `window` ahead of `acked`; then a few through a third socket of the
/// UMEM on lo. Checks that a frame of one socket is refused by the other.
fn send_two(p: &VethPath, f: UdpFlow, n: u64, window: u64, acked: &AtomicU64) -> [XskStats; 3] {
    in_ns(&p.a, || {
        let c0 = cfg(0, 0, 128);
        let mut ta = open_first("vA2", &c0, 3);
        let mut tb = ta.open_shared("vA2", &cfg(1, 0, 128)).unwrap();
        let mut tl = ta.open_shared("lo", &cfg(0, 0, 128)).unwrap();
        assert!(tb.shares_umem_with(&ta) && tl.shares_umem_with(&tb));
        assert_eq!(ta.unassigned_frames(), 0);
        // A frame of queue 0's socket, handed to queue 1's: refused, kept by the caller.
        let mut stray = vec![ta.tx_frame().unwrap().unwrap()];
        write(&mut stray[0], &f, 0);
        let s = one_line(&tb.send(&mut stray).unwrap_err());
        assert!(
            s.contains("another socket") && s.contains("queue 1 of vA2"),
            "{s}"
        );
        assert_eq!((stray.len(), tb.tx_in_flight()), (1, 0));
        ta.release(&mut stray);
        let mut batch: [Vec<TxFrame>; 2] = [Vec::new(), Vec::new()];
        let mut next = 0;
        let end = Instant::now() + Duration::from_secs(30);
        while next < n || batch.iter().any(|b| !b.is_empty()) {
            assert!(Instant::now() < end, "sender stuck at frame {next}");
            while next < n && next < acked.load(Ordering::Acquire) + window {
                let x = if next % 2 == 0 { &mut ta } else { &mut tb };
                let Some(mut fr) = x.tx_frame().unwrap() else {
                    break;
                };
                write(&mut fr, &f, next);
                batch[(next % 2) as usize].push(fr);
                next += 1;
            }
            // Frames the TX ring had no room for stay at the front of their batch.
            ta.send(&mut batch[0]).unwrap();
            tb.send(&mut batch[1]).unwrap();
            std::thread::yield_now();
        }
        assert!(ta.flush(Duration::from_secs(10)).unwrap());
        assert!(tb.flush(Duration::from_secs(10)).unwrap());
        // The same queue of another device: lo, in this namespace.
        let mut lo = Vec::new();
        assert_eq!(tl.tx_frames(&mut lo, 10).unwrap(), 10);
        for (i, fr) in lo.iter_mut().enumerate() {
            write(fr, &f, i as u64);
        }
        assert_eq!(tl.send(&mut lo).unwrap(), 10);
        assert!(tl.flush(Duration::from_secs(10)).unwrap());
        [
            ta.stats().unwrap(),
            tb.stats().unwrap(),
            tl.stats().unwrap(),
        ]
    })
}

#[zcnet_testkit::test]
fn one_umem_on_two_queues_and_another_device_every_frame_once() {
    let _g = serial();
    let (_lab, p) = veth_lab();
    two_queue_pair(&p);
    let f = UdpFlow {
        src_mac: in_ns(&p.a, || interface_mac("vA2").unwrap()),
        dst_mac: in_ns(&p.b, || interface_mac("vB2").unwrap()),
        src: Ipv4Addr::new(10, 11, 0, 1),
        dst: Ipv4Addr::new(10, 11, 0, 2),
        src_port: 40_000,
        dst_port: PORT,
        udp_checksum: true,
    };
    let n = 3000; // each socket's 64-entry rings wrap about 23 times
    let acked = AtomicU64::new(0);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (got, rx_stats, tx_stats) = std::thread::scope(|s| {
        let rx = s.spawn(|| {
            zcnet_lab::enter(&p.b).unwrap();
            let c0 = cfg(0, 128, 0);
            let first = open_first("vB2", &c0, 2);
            assert_eq!(first.unassigned_frames(), 128);
            let second = first.open_shared("vB2", &cfg(1, 128, 0)).unwrap();
            assert_eq!(first.unassigned_frames(), 0);
            assert!(second.shares_umem_with(&first));
            // One XDP program per interface: the second socket joined the first's.
            assert!(first.xdp_link_id().is_some());
            assert_eq!(second.xdp_link_id(), first.xdp_link_id());
            assert_eq!(second.xdp_mode(), Some("native"));
            let mut xs = [first, second];
            ready_tx.send(()).unwrap();
            let got = receive_two(&mut xs, n, &acked);
            (got, xs.map(|x| x.stats().unwrap()))
        });
        ready_rx.recv().unwrap();
        let tx_stats = send_two(&p, f, n, 48, &acked);
        let (got, st) = rx.join().unwrap();
        (got, st, tx_stats)
    });
    let evens: Vec<u64> = (0..n).filter(|s| s % 2 == 0).collect();
    let odds: Vec<u64> = (0..n).filter(|s| s % 2 == 1).collect();
    assert_eq!(
        got[0], evens,
        "queue 0: every frame sent on queue 0, once, in order"
    );
    assert_eq!(
        got[1], odds,
        "queue 1: every frame sent on queue 1, once, in order"
    );
    for (q, st) in rx_stats.iter().enumerate() {
        let k = st.kernel;
        assert_eq!(
            k.rx_dropped + k.rx_invalid_descs + k.rx_ring_full,
            0,
            "queue {q}: {k:?}"
        );
        assert_eq!(st.rx_frames, n / 2, "queue {q}");
    }
    let half = n / 2;
    assert_eq!(
        (tx_stats[0].tx_frames, tx_stats[0].tx_completed),
        (half, half)
    );
    assert_eq!(
        (tx_stats[1].tx_frames, tx_stats[1].tx_completed),
        (half, half)
    );
    assert_eq!((tx_stats[2].tx_frames, tx_stats[2].tx_completed), (10, 10));
    for st in &tx_stats {
        assert_eq!(st.kernel.tx_invalid_descs, 0);
    }
    // Everything closed: no program on vB2, and every queue takes a fresh socket at once.
    assert!(
        !common::ip_link_has_xdp(&p.b, "vB2"),
        "the shared program went with its last socket"
    );
    in_ns(&p.b, || {
        // (A second UMEM's program on vB2 would be refused: one per interface.)
        let a = open_first("vB2", &cfg(0, 128, 0), 1);
        let _b = open_first("vB2", &cfg(1, 0, 128), 1);
        assert!(a.xdp_link_id().is_some());
    });
    in_ns(&p.a, || {
        let _a = open_first("vA2", &cfg(0, 0, 128), 1);
        let _b = open_first("vA2", &cfg(1, 0, 128), 1);
        let _l = open_first("lo", &cfg(0, 0, 128), 1);
    });
}

#[zcnet_testkit::test]
fn bad_sharing_is_one_line_and_leaves_nothing_bound() {
    let _g = serial();
    let (_lab, p) = veth_lab();
    two_queue_pair(&p);
    in_ns(&p.b, || {
        let c = cfg(0, 128, 0);
        let first = open_first("vB2", &c, 4);
        let spare = first.unassigned_frames();
        assert_eq!(spare, 3 * 128);
        let shared = |c: &XskConfig| first.open_shared("vB2", c).map(drop);

        let s = one_line(&shared(&cfg(5, 128, 0)).unwrap_err());
        assert!(s.contains("queue 5") && s.contains("no such queue"), "{s}");
        let s = one_line(&shared(&cfg(0, 128, 0)).unwrap_err());
        assert!(s.contains("is the queue of the socket"), "{s}");
        let mut other_port = cfg(1, 128, 0);
        other_port.rx_port = Some(OTHER_PORT);
        let s = one_line(&shared(&other_port).unwrap_err());
        assert!(s.contains(&format!("redirects UDP port {PORT}")), "{s}");
        let mut big = cfg(1, 64, 0);
        big.frame_size = 4096;
        let s = one_line(&shared(&big).unwrap_err());
        assert!(s.contains("frame size"), "{s}");
        let mut zc = cfg(1, 128, 0);
        zc.mode = XskMode::ZeroCopy;
        let s = one_line(&shared(&zc).unwrap_err());
        assert!(s.contains("binds as the first one did"), "{s}");
        let s = one_line(&shared(&cfg(1, 1000, 0)).unwrap_err());
        assert!(s.contains("384 frames no socket holds"), "{s}");
        let e = first.open_shared("nosuch0", &cfg(1, 128, 0)).unwrap_err();
        assert!(matches!(e, Error::UnknownInterface { .. }), "{e}");
        // A frame of a socket on another UMEM (the lab's first veth pair) is refused.
        let mut other = open_first("vB", &cfg(0, 0, 16), 1);
        let mut stray = vec![other.tx_frame().unwrap().unwrap()];
        stray[0].write(&[0u8; 60]).unwrap();
        let mut first_tx = first.open_shared("vB2", &cfg(1, 0, 16)).unwrap();
        let s = one_line(&first_tx.send(&mut stray).unwrap_err());
        assert!(s.contains("another socket"), "{s}");
        other.release(&mut stray);
        drop(first_tx);
        // Nothing refused kept a frame or a binding: queue 1 takes a shared socket.
        assert_eq!(
            first.unassigned_frames(),
            spare,
            "refused sockets gave their frames back"
        );
        let second = first.open_shared("vB2", &cfg(1, 128, 0)).unwrap();
        assert_eq!(second.xdp_link_id(), first.xdp_link_id());
        drop(second);
        // Its 64 fill-ring frames went with the socket (the kernel had them); the other 64
        // came back to the UMEM.
        assert_eq!(first.unassigned_frames(), spare - 64);
        let again = first.open_shared("vB2", &cfg(1, 128, 0)).unwrap();
        drop((again, first));
        assert!(
            !common::ip_link_has_xdp(&p.b, "vB2"),
            "detached with the last socket"
        );
        let a = open_first("vB2", &cfg(0, 128, 0), 1);
        let _b = open_first("vB2", &cfg(1, 0, 128), 1);
        assert!(a.xdp_link_id().is_some());
    });
}

zcnet_testkit::main!();
