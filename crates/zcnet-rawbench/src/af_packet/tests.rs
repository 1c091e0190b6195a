//! As root, in a private network namespace (it dies with the test's thread, so nothing is left
//! behind on any exit path): a veth pair, frames with sequence numbers sent on one end — through
//! a TPACKET_V3 TX ring, or `sendmmsg` with and without `PACKET_QDISC_BYPASS` — and received on
//! the other end's TPACKET_V3 RX ring (or with `recvmmsg`), every frame checked: headers,
//! UDP checksum, payload pattern, order, none missing, none twice; across many ring wraps.
//! Without root each test prints why it is skipped.

use super::*;
use std::net::Ipv4Addr;
use std::sync::atomic::AtomicU64;
use std::time::Instant;
use zcnet_core::udp_frame::{parse_udp, UdpFlow};
use zcnet_sys::zcrx::if_index;

const PORT: u16 = 47_100;

/// Runs `f` in a thread of its own that first moves into a fresh network namespace
/// ([`zcnet_sys::os::unshare_netns`]); the namespace dies with the thread (nothing is named,
/// nothing is left behind). Without root the calling test is skipped. A panic or skip in `f`
/// propagates.
fn in_private_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    zcnet_testkit::require_root("a private network namespace");
    let h = std::thread::spawn(move || {
        zcnet_sys::os::unshare_netns().expect("unshare(CLONE_NEWNET)");
        f()
    });
    zcnet_testkit::propagate(h.join())
}

use zcnet_testkit::ip;

/// In the calling thread's (private) namespace: veth `pa` ↔ `pb`, both up.
fn veth_pair() -> (u32, u32) {
    ip(&["link", "add", "pa", "type", "veth", "peer", "name", "pb"]);
    ip(&["link", "set", "pa", "up"]);
    ip(&["link", "set", "pb", "up"]);
    (if_index("pa").unwrap(), if_index("pb").unwrap())
}

fn flow() -> UdpFlow {
    UdpFlow {
        src_mac: zcnet_sys::ifaddr::if_hwaddr("pa").unwrap(),
        dst_mac: zcnet_sys::ifaddr::if_hwaddr("pb").unwrap(),
        src: Ipv4Addr::new(10, 99, 0, 1),
        dst: Ipv4Addr::new(10, 99, 0, 2),
        src_port: 40_000,
        dst_port: PORT,
        udp_checksum: true,
    }
}

/// Payload of frame `seq`: the sequence number, then `seq % 700` bytes derived from it.
fn payload(seq: u64) -> Vec<u8> {
    let mut p = seq.to_le_bytes().to_vec();
    p.extend(
        (0..(seq % 700) as usize).map(|i| (seq as usize).wrapping_mul(31).wrapping_add(i) as u8),
    );
    p
}

/// Checks a received frame completely; `None` for a frame of another flow (IPv6 ND…).
fn check(frame: &[u8]) -> Option<u64> {
    let Ok(p) = parse_udp(frame) else { return None };
    if p.dst_port != PORT {
        return None;
    }
    let seq = u64::from_le_bytes(p.payload[..8].try_into().unwrap());
    assert_eq!(p.payload, payload(seq).as_slice(), "frame {seq}: payload");
    assert_eq!(p.ip_id, seq as u16, "frame {seq}: IPv4 id");
    Some(seq)
}

fn build(f: &UdpFlow, seq: u64, buf: &mut [u8]) -> usize {
    f.write(buf, seq as u16, &payload(seq)).unwrap()
}

/// Receives `n` frames on a TPACKET_V3 ring of `pb`, publishing progress in `acked`.
fn ring_receive(rx: &mut RxRingV3, n: u64, acked: &AtomicU64) -> Vec<u64> {
    let mut got = Vec::new();
    let end = Instant::now() + Duration::from_secs(30);
    while (got.len() as u64) < n {
        assert!(
            Instant::now() < end,
            "receiver stuck after {} frames",
            got.len()
        );
        let Some(block) = rx.next_block() else {
            rx.wait(Duration::from_millis(20)).unwrap();
            continue;
        };
        for p in block.packets().unwrap() {
            let p = p.unwrap();
            assert!(!p.header.truncated());
            got.extend(check(p.data));
        }
        drop(block);
        acked.store(got.len() as u64, Ordering::Release);
    }
    got
}

fn rx_ring(ifindex: u32, block: u32, blocks: u32) -> RxRingV3 {
    let req = RingRequest::rx_v3(block, blocks, 2, zcnet_sys::mem::page_size()).unwrap();
    RxRingV3::open(ifindex, Protocol::All, &req).unwrap()
}

/// Sends `n` frames through a TX ring, never more than `window` ahead of `acked`.
fn ring_send(tx: &mut TxRing, f: &UdpFlow, n: u64, window: u64, acked: &AtomicU64) {
    let mut seq = 0;
    let end = Instant::now() + Duration::from_secs(30);
    while seq < n {
        assert!(Instant::now() < end, "sender stuck at {seq}");
        while seq < n && seq < acked.load(Ordering::Acquire) + window {
            let Some(mut slot) = tx.next_slot().unwrap() else {
                break;
            };
            let len = build(f, seq, slot.data_mut());
            slot.submit(len).unwrap();
            seq += 1;
        }
        tx.kick().unwrap();
        std::thread::yield_now();
    }
    assert!(
        tx.flush(Duration::from_secs(10)).unwrap(),
        "every frame given back"
    );
}

/// Sends `n` frames with sendmmsg in batches of up to 32, never more than `window` ahead.
fn mmsg_send(s: &PacketSocket, f: &UdpFlow, n: u64, window: u64, acked: &AtomicU64) -> u64 {
    let mut bufs = vec![vec![0u8; 2048]; 32];
    let mut lens = [0usize; 32];
    let mut seq = 0;
    let mut enobufs = 0;
    let end = Instant::now() + Duration::from_secs(30);
    while seq < n {
        assert!(Instant::now() < end, "sender stuck at {seq}");
        let k = (n - seq)
            .min(32)
            .min((acked.load(Ordering::Acquire) + window).saturating_sub(seq));
        if k == 0 {
            std::thread::yield_now();
            continue;
        }
        for i in 0..k as usize {
            lens[i] = build(f, seq + i as u64, &mut bufs[i]);
        }
        let frames: Vec<&[u8]> = (0..k as usize).map(|i| &bufs[i][..lens[i]]).collect();
        match s.send_batch(&frames) {
            Ok(m) => seq += m as u64,
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => enobufs += 1,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
            Err(e) => panic!("sendmmsg: {e}"),
        }
    }
    enobufs
}

fn run_ring_pair(
    n: u64,
    send: impl FnOnce(&UdpFlow, &AtomicU64) + Send,
    rx_block: u32,
    rx_blocks: u32,
) -> (Vec<u64>, PacketStats) {
    let b = if_index("pb").unwrap();
    let f = flow();
    let mut rx = rx_ring(b, rx_block, rx_blocks);
    let acked = AtomicU64::new(0);
    let got = std::thread::scope(|s| {
        let r = s.spawn(|| ring_receive(&mut rx, n, &acked));
        send(&f, &acked);
        r.join().unwrap()
    });
    let st = rx.socket().statistics().unwrap();
    (got, st)
}

#[zcnet_testkit::test]
fn tx_ring_to_rx_ring_every_frame_in_order_across_wraps() {
    in_private_netns(|| {
        let (a, _) = veth_pair();
        // 16 KiB blocks × 4 and a 64-frame TX ring: both wrap many times over 3000 frames.
        let req = RingRequest::tx_v3(1 << 16, 2048, 64, zcnet_sys::mem::page_size()).unwrap();
        let mut tx = TxRing::open(a, &req, false).unwrap();
        let n = 3000;
        let (got, st) = run_ring_pair(
            n,
            |f, acked| ring_send(&mut tx, f, n, 24, acked),
            1 << 14,
            4,
        );
        assert_eq!(
            got,
            (0..n).collect::<Vec<_>>(),
            "every frame once, in order"
        );
        assert_eq!(st.drops, 0, "{st:?}");
        assert!(st.packets as u64 >= n, "{st:?}");
        assert_eq!(tx.in_flight(), 0);
    });
}

#[zcnet_testkit::test]
fn sendmmsg_with_and_without_qdisc_bypass_to_rx_ring() {
    in_private_netns(|| {
        let (a, _) = veth_pair();
        for bypass in [false, true] {
            let s = PacketSocket::open(a, Protocol::SendOnly).unwrap();
            s.set_qdisc_bypass(bypass).unwrap();
            let n = 2000;
            let (got, st) = run_ring_pair(
                n,
                |f, acked| {
                    mmsg_send(&s, f, n, 64, acked);
                },
                1 << 14,
                8,
            );
            assert_eq!(got, (0..n).collect::<Vec<_>>(), "bypass {bypass}");
            assert_eq!(st.drops, 0, "bypass {bypass}: {st:?}");
        }
    });
}

#[zcnet_testkit::test]
fn sendmmsg_to_recvmmsg() {
    in_private_netns(|| {
        let (a, b) = veth_pair();
        let tx = PacketSocket::open(a, Protocol::SendOnly).unwrap();
        let rx = PacketSocket::open(b, Protocol::Ipv4).unwrap();
        rx.set_recv_buffer(4 << 20).unwrap();
        let f = flow();
        let n = 1500u64;
        let acked = AtomicU64::new(0);
        let got = std::thread::scope(|s| {
            let r = s.spawn(|| {
                let mut buf = vec![0u8; 2048 * 16];
                let mut lens = [0usize; 16];
                let mut got = Vec::new();
                let end = Instant::now() + Duration::from_secs(30);
                while (got.len() as u64) < n {
                    assert!(Instant::now() < end, "receiver stuck after {}", got.len());
                    match rx.recv_batch(&mut buf, 2048, &mut lens) {
                        Ok(k) => {
                            for (i, &len) in lens.iter().enumerate().take(k) {
                                got.extend(check(&buf[i * 2048..i * 2048 + len]));
                            }
                            acked.store(got.len() as u64, Ordering::Release);
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            rx.wait(libc::POLLIN, Duration::from_millis(20)).unwrap();
                        }
                        Err(e) => panic!("recvmmsg: {e}"),
                    }
                }
                got
            });
            mmsg_send(&tx, &f, n, 256, &acked);
            r.join().unwrap()
        });
        assert_eq!(got, (0..n).collect::<Vec<_>>());
        let st = rx.statistics().unwrap();
        assert_eq!(st.drops, 0, "{st:?}");
    });
}

#[zcnet_testkit::test]
fn a_full_rx_ring_drops_and_says_so() {
    in_private_netns(|| {
        let (a, b) = veth_pair();
        // One 4 KiB block × 2: ~50 frames of 64 B fit; send 400 without reading.
        let req = RingRequest::rx_v3(4096, 2, 1000, zcnet_sys::mem::page_size()).unwrap();
        let mut rx = RxRingV3::open(b, Protocol::All, &req).unwrap();
        let tx = PacketSocket::open(a, Protocol::SendOnly).unwrap();
        let f = flow();
        let mut buf = [0u8; 128];
        for seq in 0..400u64 {
            let len = f.write(&mut buf, seq as u16, &seq.to_le_bytes()).unwrap();
            assert_eq!(tx.send_batch(&[&buf[..len]]).unwrap(), 1);
        }
        let st = rx.socket().statistics().unwrap();
        assert!(st.drops > 0 && st.freeze_q_cnt > 0, "{st:?}");
        // What was kept is a prefix, in order, and the first block says it was losing.
        let mut got = Vec::new();
        while let Some(block) = rx.next_block() {
            for p in block.packets().unwrap() {
                let p = p.unwrap();
                if let Ok(u) = parse_udp(p.data) {
                    got.push(u64::from_le_bytes(u.payload[..8].try_into().unwrap()));
                }
            }
        }
        assert!(!got.is_empty() && got.len() < 400);
        assert_eq!(got, (0..got.len() as u64).collect::<Vec<_>>());
        // Reading the statistics cleared them.
        assert_eq!(rx.socket().statistics().unwrap().drops, 0);
    });
}

#[zcnet_testkit::test]
fn bad_requests_and_interfaces_are_refused() {
    let bad = RingRequest {
        block_size: 1000,
        block_nr: 1,
        frame_size: 1000,
        frame_nr: 1,
        retire_blk_tov: 0,
        sizeof_priv: 0,
        feature_req_word: 0,
    };
    let e = RxRingV3::open(1, Protocol::All, &bad).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    let e = TxRing::open(1, &bad, false).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    in_private_netns(|| {
        let e = PacketSocket::open(999_999, Protocol::All).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV), "{e}");
        let s = PacketSocket::open(1, Protocol::SendOnly).unwrap();
        assert_eq!(s.send_batch(&[]).unwrap(), 0);
        let frame = [0u8; 8]; // shorter than an Ethernet header
        assert!(s.send_batch(&[&frame]).is_err());
    });
}
