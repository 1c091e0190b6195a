//! As root, in a private network namespace: a socket on `lo` that sends UDP frames with
//! sequence numbers through its TX ring and gets them back on its RX ring (lo loops them back,
//! a generic-mode XDP program redirects them to the socket), across several ring wraps; and
//! sockets sharing a UMEM across the two queues of a veth pair (`XDP_SHARED_UMEM`), with the
//! kernel's refusals of bad sharing.

use super::setup::xsk_fd;
use super::*;
use crate::bpf::{BpfProg, XdpAttachMode, XdpLink, XskMap};
use crate::test_util::ip;
use crate::xsk::XskBindMode;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::time::Duration;
use zcnet_core::udp_frame::{parse_udp, UdpFlow};

const PORT: u16 = 4791;

fn cfg() -> XdpSocketConfig {
    XdpSocketConfig {
        frame_size: 2048,
        frame_count: 64,
        headroom: 0,
        fill_size: 16,
        comp_size: 16,
        rx_size: 16,
        tx_size: 16,
        need_wakeup: true,
        mode: XskBindMode::Copy,
    }
}

fn lo_up() {
    let st = std::process::Command::new("ip")
        .args(["link", "set", "lo", "up"])
        .status()
        .expect("ip (iproute2)");
    assert!(st.success());
}

/// What keeps a socket on `lo` receiving the UDP frames to [`PORT`] it sends: its XSKMAP and
/// the generic-mode XDP program that redirects them, attached.
struct LoopedBack {
    _link: XdpLink,
    _prog: BpfProg,
    _map: XskMap,
}

/// A socket on `lo` (in the caller's private namespace) that gets back on its RX ring the UDP
/// frames to [`PORT`] it sends, with its free frames.
fn looped_back() -> (XdpSocket, Vec<UmemFrame>, LoopedBack) {
    lo_up();
    let umem = Mapping::anonymous(cfg().umem_len()).expect("umem");
    let (s, free) = XdpSocket::new(umem, 1, 0, &cfg()).expect("bind on lo");
    let map = XskMap::create(1, "zcnet_test").expect("XSKMAP");
    map.set(0, s.fd()).expect("XSKMAP entry");
    let insns = zcnet_core::xdp_prog::udp_port_redirect(map.fd().as_raw_fd(), PORT);
    let prog = BpfProg::load_xdp(&insns, "zcnet_test").expect("load");
    let link = XdpLink::attach(&prog, 1, XdpAttachMode::Generic).expect("attach");
    let guard = LoopedBack {
        _link: link,
        _prog: prog,
        _map: map,
    };
    (s, free, guard)
}

/// The UDP flow the looped-back tests send on `lo`.
fn flow() -> UdpFlow {
    UdpFlow {
        src_mac: [0; 6],
        dst_mac: [0; 6],
        src: Ipv4Addr::LOCALHOST,
        dst: Ipv4Addr::LOCALHOST,
        src_port: 999,
        dst_port: PORT,
        udp_checksum: true,
    }
}

#[zcnet_testkit::test]
fn frames_loop_back_through_all_four_rings() {
    let r = crate::os::in_private_netns(|| {
        let (mut s, mut free, _looped) = looped_back();
        assert!(!s.is_zerocopy().expect("XDP_OPTIONS"));
        // Half the frames receive, half send.
        let mut rx_frames = free.split_off(32);
        assert_eq!(
            s.fill(&mut rx_frames).expect("fill"),
            16,
            "the fill ring holds 16"
        );
        let flow = flow();
        let total = 200u64;
        let (mut sent, mut got) = (0u64, Vec::new());
        let mut rx = Vec::new();
        let mut batch = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while (got.len() as u64) < total && std::time::Instant::now() < deadline {
            s.complete(&mut free, 64).expect("complete");
            // At most 8 in flight, so that the receiver's 16-entry rings never overflow.
            while sent < total && sent - (got.len() as u64) < 8 {
                let Some(mut f) = free.pop() else { break };
                let n = flow
                    .write(f.bytes_mut(), sent as u16, &sent.to_le_bytes())
                    .expect("frame");
                f.set_data(0, n as u32).expect("span");
                batch.push(f);
                sent += 1;
            }
            s.transmit(&mut batch).expect("transmit");
            assert!(batch.is_empty(), "the TX ring had room");
            s.kick_tx().expect("kick");
            s.receive(&mut rx, 64).expect("receive");
            for f in rx.drain(..) {
                let p = parse_udp(f.data()).expect("a valid frame");
                got.push(u64::from_le_bytes(p.payload.try_into().expect("8 B")));
                rx_frames.push(f);
            }
            s.fill(&mut rx_frames).expect("refill");
            if got.len() as u64 == sent && sent < total {
                continue;
            }
            s.wait_rx(Duration::from_millis(1)).expect("poll");
        }
        // Every frame received was sent: its completion comes with the next kicks.
        while s.frames_in_tx() > 0 && std::time::Instant::now() < deadline {
            s.kick_tx().expect("kick");
            s.complete(&mut free, 64).expect("complete");
        }
        let st = s.statistics().expect("stats");
        (got, st, s.kicks(), s.frames().counts(), s.frames_in_tx())
    });
    let (got, st, kicks, counts, in_tx) = r;
    assert_eq!(got, (0..200).collect::<Vec<u64>>(), "every frame, in order");
    assert_eq!(
        st.rx_dropped + st.rx_ring_full + st.rx_invalid_descs,
        0,
        "{st:?}"
    );
    assert_eq!(st.tx_invalid_descs, 0);
    assert!(kicks > 0);
    assert_eq!(counts.sent, 200);
    assert_eq!(
        (counts.completed, in_tx),
        (200, 0),
        "every frame sent completed"
    );
    assert!(counts.received == 200 && counts.filled >= 200);
}

/// A fill stopped part-way by a frame the frame table refuses (a table out of step with the
/// rings: no caller can make it, so the test puts it out of step) finishes its reservation:
/// the frames before it go, it and the rest stay the caller's, and the next fill publishes
/// its own frames, none of the stopped fill's entries stale before them. Before, the
/// reservation was left open and the refused frame dropped: the next fill published the
/// stopped one's entries, unwritten ones included.
#[zcnet_testkit::test]
fn a_fill_stopped_part_way_finishes_its_reservation() {
    let r = crate::os::in_private_netns(|| {
        lo_up();
        let umem = Mapping::anonymous(cfg().umem_len()).expect("umem");
        let (mut s, mut free) = XdpSocket::new(umem, 1, 0, &cfg()).expect("bind on lo");
        // Four frames; fill takes them from the end, so v[1] is the third to go.
        let mut v = free.split_off(free.len() - 4);
        let addrs: Vec<u64> = v
            .iter()
            .map(|f| u64::from(f.index()) * u64::from(cfg().frame_size))
            .collect();
        let bad = s.frames.give_tx(v[1].index(), 0, 64).expect("out of step");
        let e = s.fill(&mut v).expect_err("the third frame is refused");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        let stopped = (v.len(), s.fill_idx.reserved(), s.fill_idx.producer());
        s.frames.on_complete(bad).expect("back in step");
        let went = s.fill(&mut v).expect("fill the rest");
        let mut published: Vec<u64> = (0..4).map(|i| s.fill.read(i)).collect();
        published.sort_unstable();
        let mut want = addrs.clone();
        want.sort_unstable();
        (
            stopped,
            went,
            v.len(),
            s.fill_idx.producer(),
            published == want,
        )
    });
    assert_eq!(
        r.0,
        (2, 0, 2),
        "(frames left to the caller, entries still reserved, published)"
    );
    assert_eq!(
        (r.1, r.2, r.3, r.4),
        (2, 0, 4, true),
        "(went, left, published, each frame's address once)"
    );
}

/// A receive stopped part-way by a descriptor the frame table refuses (out of step on
/// purpose, as above) releases the entries it took and leaves the refused one and the rest
/// to be read again: once the table is back in step, the next receive gets them. Before,
/// the whole batch stayed peeked and unreleased: the frames behind the refused one were never
/// received, and the ring's consumer index lagged what was read for good.
#[zcnet_testkit::test]
fn a_receive_stopped_part_way_leaves_the_rest_to_the_next() {
    let r = crate::os::in_private_netns(|| {
        let (mut s, mut free, _looped) = looped_back();
        let mut rx_frames = free.split_off(32);
        s.fill(&mut rx_frames).expect("fill");
        let flow = flow();
        let mut batch = Vec::new();
        for seq in 0..3u16 {
            let mut f = free.pop().expect("a free frame");
            let n = flow
                .write(f.bytes_mut(), seq, &seq.to_le_bytes())
                .expect("frame");
            f.set_data(0, n as u32).expect("span");
            batch.push(f);
        }
        s.transmit(&mut batch).expect("transmit");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while s.rx_idx.ready_cached() < 3 && std::time::Instant::now() < deadline {
            s.kick_tx().expect("kick");
            s.wait_rx(Duration::from_millis(1)).expect("poll");
            let rx = &s.rx;
            s.rx_idx.refresh(|| rx.load_producer()).expect("refresh");
        }
        assert_eq!(s.rx_idx.ready_cached(), 3, "three frames looped back");
        // The second descriptor's frame, taken out of the fill state: the table refuses it.
        let second = s.rx.read((s.rx_idx.consumer() as usize + 1) & 15);
        s.frames.on_rx(second.addr, 0).expect("out of step");
        let mut got = Vec::new();
        let e = s.receive(&mut got, 64).expect_err("the second is refused");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        let stopped = (got.len(), s.rx_idx.peeked(), s.rx_idx.consumer());
        let frame = (second.addr / u64::from(cfg().frame_size)) as u32;
        s.frames.give_fill(frame).expect("back in step");
        let n = s.receive(&mut got, 64).expect("receive the rest");
        let seqs: Vec<u16> = got
            .iter()
            .map(|f| {
                let p = parse_udp(f.data()).expect("a valid frame");
                u16::from_le_bytes(p.payload.try_into().expect("2 B"))
            })
            .collect();
        (stopped, n, seqs, s.rx_idx.consumer(), s.rx_idx.peeked())
    });
    assert_eq!(r.0, (1, 0, 1), "(taken, left peeked, released)");
    assert_eq!((r.1, r.2, r.3, r.4), (2, vec![0, 1, 2], 3, 0));
}

/// A TX queue forgotten instead of dropped (`mem::forget` is safe) leaves its reservation;
/// the next queue finishes it first, so the frames it had pushed go out and the next queue's
/// own go out after them, none stale: every frame sent completes.
#[zcnet_testkit::test]
fn a_forgotten_tx_queue_is_finished_by_the_next() {
    let r = crate::os::in_private_netns(|| {
        lo_up();
        let umem = Mapping::anonymous(cfg().umem_len()).expect("umem");
        let (mut s, mut free) = XdpSocket::new(umem, 1, 0, &cfg()).expect("bind on lo");
        let frame = |free: &mut Vec<UmemFrame>| {
            let mut f = free.pop().expect("a free frame");
            f.set_data(0, 64).expect("span");
            Some(f)
        };
        let mut q = s.tx_queue(4).expect("reserve");
        for _ in 0..2 {
            q.push_from(&mut frame(&mut free)).expect("push");
        }
        std::mem::forget(q);
        let mut q = s.tx_queue(4).expect("reserve again");
        for _ in 0..3 {
            q.push_from(&mut frame(&mut free)).expect("push");
        }
        assert_eq!(q.submit().expect("submit"), 3);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut back = Vec::new();
        while back.len() < 5 && std::time::Instant::now() < deadline {
            s.kick_tx().expect("kick");
            s.complete(&mut back, 16).expect("complete");
        }
        (back.len(), s.frames().counts().sent, s.frames_in_tx())
    });
    assert_eq!(r, (5, 5, 0), "(completed, sent, in TX)");
}

#[zcnet_testkit::test]
fn wrong_input_is_refused_before_the_kernel_sees_it() {
    let r = crate::os::in_private_netns(|| {
        let umem = Mapping::anonymous(cfg().umem_len()).expect("umem");
        let too_many = XdpSocketConfig {
            frame_count: 65,
            ..cfg()
        };
        let e1 = XdpSocket::new(umem, 1, 0, &too_many)
            .err()
            .map(|e| e.kind());
        let odd = XdpSocketConfig {
            frame_size: 3000,
            ..cfg()
        };
        let umem = Mapping::anonymous(odd.umem_len()).expect("umem");
        let e2 = XdpSocket::new(umem, 1, 0, &odd)
            .err()
            .and_then(|e| e.raw_os_error());
        let umem = Mapping::anonymous(cfg().umem_len()).expect("umem");
        let e3 = XdpSocket::new(umem, 1, 7, &cfg())
            .err()
            .and_then(|e| e.raw_os_error());
        let (mut a, _fa) = XdpSocket::new(
            Mapping::anonymous(cfg().umem_len()).expect("umem"),
            1,
            0,
            &cfg(),
        )
        .expect("a");
        // Frames of another UMEM (never registered) cannot be given to this socket.
        let (_, slots) = Mapping::anonymous(cfg().umem_len())
            .expect("umem")
            .into_slots(2048, 64)
            .expect("slots");
        let mut fb: Vec<UmemFrame> = slots
            .into_iter()
            .map(|slot| UmemFrame {
                slot,
                off: 0,
                len: 10,
            })
            .collect();
        let e4 = a.fill(&mut fb).err().map(|e| e.kind());
        let e5 = a.transmit(&mut fb).err().map(|e| e.kind());
        (e1, e2, e3, e4, e5, fb.len())
    });
    let (e1, e2, e3, e4, e5, left) = r;
    assert_eq!(
        e1,
        Some(io::ErrorKind::InvalidInput),
        "65 frames in a 64-frame UMEM"
    );
    assert_eq!(e2, Some(libc::EINVAL), "chunk size not a power of two");
    assert_eq!(e3, Some(libc::EINVAL), "lo has one queue");
    assert_eq!(e4, Some(io::ErrorKind::InvalidInput));
    assert_eq!(e5, Some(io::ErrorKind::InvalidInput));
    assert_eq!(left, 64, "a refused call takes no frame");
}

/// vx0 ⇄ vx1, two RX and two TX queues each, up, in the calling thread's (private) namespace:
/// it goes with the namespace.
fn two_queue_veth() -> (u32, u32) {
    ip(&[
        "link",
        "add",
        "vx0",
        "numtxqueues",
        "2",
        "numrxqueues",
        "2",
        "type",
        "veth",
        "peer",
        "name",
        "vx1",
        "numtxqueues",
        "2",
        "numrxqueues",
        "2",
    ]);
    ip(&["link", "set", "vx0", "up"]);
    ip(&["link", "set", "vx1", "up"]);
    lo_up();
    let idx = |n| crate::zcrx::if_index(n).expect("veth ifindex");
    (idx("vx0"), idx("vx1"))
}

fn umem() -> Mapping {
    Mapping::anonymous(cfg().umem_len()).expect("umem")
}

#[zcnet_testkit::test]
fn a_shared_umem_moves_frames_on_two_queues() {
    let r = crate::os::in_private_netns(|| {
        let (vx0, vx1) = two_queue_veth();
        // Receivers on vx1: queue 0 with the UMEM, queue 1 sharing it; one program sends the
        // port's packets to the socket of the queue they arrive on.
        let (mut r0, mut rfree) = XdpSocket::new(umem(), vx1, 0, &cfg()).expect("rx q0");
        let mut r1 = XdpSocket::new_shared(&r0, vx1, 1, &cfg()).expect("rx q1, shared");
        assert!(r1.shares_umem_with(&r0) && r0.shares_umem_with(&r1));
        let map = XskMap::create(2, "zcnet_test").expect("XSKMAP");
        map.set(0, r0.fd()).expect("XSKMAP 0");
        map.set(1, r1.fd()).expect("XSKMAP 1");
        let insns = zcnet_core::xdp_prog::udp_port_redirect(map.fd().as_raw_fd(), PORT);
        let prog = BpfProg::load_xdp(&insns, "zcnet_test").expect("load");
        let _link = XdpLink::attach(&prog, vx1, XdpAttachMode::Native).expect("attach");
        // Frames of the one UMEM go to either fill ring.
        let mut half = rfree.split_off(32);
        assert_eq!(r0.fill(&mut rfree).expect("fill 0"), 16);
        assert_eq!(r1.fill(&mut half).expect("fill 1"), 16);
        // Senders on vx0: queue 0 with the UMEM, queue 1 sharing it, one pool of frames. A
        // frame sent on TX queue q of a veth arrives on RX queue q of its peer (XDP on).
        let (mut t0, mut tfree) = XdpSocket::new(umem(), vx0, 0, &cfg()).expect("tx q0");
        let mut t1 = XdpSocket::new_shared(&t0, vx0, 1, &cfg()).expect("tx q1, shared");
        let flow = UdpFlow {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src: Ipv4Addr::new(10, 99, 0, 1),
            dst: Ipv4Addr::new(10, 99, 0, 2),
            src_port: 999,
            dst_port: PORT,
            udp_checksum: true,
        };
        let total = 300u64;
        let (mut sent, mut got) = (0u64, [Vec::new(), Vec::new()]);
        let mut rx = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let received = |g: &[Vec<u64>; 2]| (g[0].len() + g[1].len()) as u64;
        while received(&got) < total && std::time::Instant::now() < deadline {
            for t in [&mut t0, &mut t1] {
                t.complete(&mut tfree, 64).expect("complete");
            }
            // Frame `seq` goes out on queue seq % 2; at most 8 in flight.
            while sent < total && sent - received(&got) < 8 {
                let Some(mut f) = tfree.pop() else { break };
                let n = flow
                    .write(f.bytes_mut(), sent as u16, &sent.to_le_bytes())
                    .expect("frame");
                f.set_data(0, n as u32).expect("span");
                let t = if sent % 2 == 0 { &mut t0 } else { &mut t1 };
                let mut one = vec![f];
                t.transmit(&mut one).expect("transmit");
                assert!(one.is_empty(), "the TX ring had room");
                t.kick_tx().expect("kick");
                sent += 1;
            }
            for (q, r) in [&mut r0, &mut r1].into_iter().enumerate() {
                r.receive(&mut rx, 64).expect("receive");
                for f in rx.drain(..) {
                    let p = parse_udp(f.data()).expect("a valid frame");
                    got[q].push(u64::from_le_bytes(p.payload.try_into().expect("8 B")));
                    // Back to the fill ring of the other queue: the UMEM is one.
                    half.push(f);
                }
            }
            r0.fill(&mut half).expect("refill 0");
            r1.fill(&mut half).expect("refill 1");
            std::thread::sleep(Duration::from_micros(200));
        }
        for t in [&mut t0, &mut t1] {
            while t.frames_in_tx() > 0 && std::time::Instant::now() < deadline {
                t.kick_tx().expect("kick");
                t.complete(&mut tfree, 64).expect("complete");
            }
        }
        let stats = [r0.statistics(), r1.statistics()].map(|s| s.expect("stats"));
        let counts = [t0.frames().counts(), t1.frames().counts()];
        (got, stats, counts, tfree.len())
    });
    let (got, stats, counts, tfree) = r;
    let evens: Vec<u64> = (0..300).filter(|s| s % 2 == 0).collect();
    let odds: Vec<u64> = (0..300).filter(|s| s % 2 == 1).collect();
    assert_eq!(got[0], evens, "queue 0: every frame it was sent, in order");
    assert_eq!(got[1], odds, "queue 1: every frame it was sent, in order");
    for s in stats {
        assert_eq!(
            s.rx_dropped + s.rx_ring_full + s.rx_invalid_descs,
            0,
            "{s:?}"
        );
    }
    assert_eq!((counts[0].sent, counts[0].completed), (150, 150));
    assert_eq!((counts[1].sent, counts[1].completed), (150, 150));
    assert_eq!(tfree, 64, "every TX frame came back to the one pool");
}

#[zcnet_testkit::test]
fn bad_sharing_is_refused_and_leaves_nothing_bound() {
    let r = crate::os::in_private_netns(|| {
        let (vx0, _) = two_queue_veth();
        let (a, _frames) = XdpSocket::new(umem(), vx0, 0, &cfg()).expect("first");
        let errno = |r: io::Result<XdpSocket>| r.err().and_then(|e| e.raw_os_error());
        let same_queue = errno(XdpSocket::new_shared(&a, vx0, 0, &cfg()));
        let no_queue = errno(XdpSocket::new_shared(&a, vx0, 2, &cfg()));
        let no_dev = errno(XdpSocket::new_shared(&a, 4242, 0, &cfg()));
        let other_size = XdpSocket::new_shared(
            &a,
            vx0,
            1,
            &XdpSocketConfig {
                frame_size: 4096,
                frame_count: 32,
                ..cfg()
            },
        )
        .err()
        .map(|e| e.kind());
        // Not an AF_XDP socket, and an AF_XDP socket that is not bound (as a closed one was).
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
        let not_xsk = errno(XdpSocket::share(
            udp.as_fd(),
            Arc::clone(&a.umem),
            vx0,
            1,
            &cfg(),
        ));
        let unbound = xsk_fd().expect("socket");
        let not_bound = errno(XdpSocket::share(
            unbound.as_fd(),
            Arc::clone(&a.umem),
            vx0,
            1,
            &cfg(),
        ));
        // None of that bound anything: queue 1 of vx0 and queue 0 of lo (another device) take
        // sockets sharing the UMEM, and once all are closed each queue takes a fresh socket.
        let b = XdpSocket::new_shared(&a, vx0, 1, &cfg()).expect("queue 1");
        let l = XdpSocket::new_shared(&a, 1, 0, &cfg()).expect("lo queue 0");
        assert!(l.shares_umem_with(&a) && b.shares_umem_with(&l));
        drop((a, b, l));
        let fresh = [(vx0, 0), (vx0, 1), (1, 0)].map(|(dev, q)| {
            XdpSocket::new(umem(), dev, q, &cfg())
                .map(drop)
                .err()
                .and_then(|e| e.raw_os_error())
        });
        (
            [same_queue, no_queue, no_dev, not_xsk, not_bound],
            other_size,
            fresh,
        )
    });
    let (errs, other_size, fresh) = r;
    assert_eq!(
        errs,
        [
            Some(libc::EINVAL),
            Some(libc::EINVAL),
            Some(libc::ENODEV),
            Some(libc::ENOPROTOOPT),
            Some(libc::EBADF)
        ],
        "own queue, no such queue, no such device, not AF_XDP, not bound"
    );
    assert_eq!(other_size, Some(io::ErrorKind::InvalidInput));
    assert_eq!(fresh, [None; 3], "every queue unbound after close");
}
