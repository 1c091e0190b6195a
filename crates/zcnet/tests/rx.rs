//! Receive conformance: every backend that runs here delivers every byte, in order, per
//! connection; buffers go back when dropped; slow consumers are counted, not stalled silently.
#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};
use zcnet::rx::{ConnId, Receiver, RxConfig, RxEvent, RxMode};
use zcnet::Pattern;

/// The backends that run on this machine (zcrx and devmem are refused by every device here).
const HOST_MODES: [RxMode; 3] = [RxMode::Copy, RxMode::Uring, RxMode::Auto];

fn pair(l: &TcpListener) -> (TcpStream, TcpStream) {
    let tx = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (rx, _) = l.accept().unwrap();
    (tx, rx)
}

/// xorshift64: message sizes.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Sends `msgs` messages of the seeded pattern, then shuts down. Sizes are log-uniform from
/// 1 B to `max` (every order of magnitude equally often), so thousands of messages stay quick.
fn sender(mut s: TcpStream, seed: u64, msgs: usize, max: u64) -> thread::JoinHandle<u64> {
    thread::spawn(move || {
        let p = Pattern::new(seed);
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut off = 0u64;
        let mut buf = Vec::new();
        for _ in 0..msgs {
            let bits = 64 - max.leading_zeros() as u64;
            let n = (1 + next(&mut x) % (1u64 << (next(&mut x) % bits))).min(max);
            buf.resize(n as usize, 0);
            p.fill(off, &mut buf);
            s.write_all(&buf).unwrap();
            off += n;
        }
        s.shutdown(Shutdown::Write).unwrap();
        off
    })
}

/// Receives every connection to its end, verifying the pattern. With `hold` > 0 it is a slow
/// consumer: it keeps every buffer until it holds `hold` of them or a poll brings nothing, and
/// only then drops them all.
fn receive_all(
    rx: &mut Receiver,
    seeds: &HashMap<ConnId, u64>,
    hold: usize,
) -> HashMap<ConnId, u64> {
    let mut got: HashMap<ConnId, u64> = seeds.keys().map(|&c| (c, 0)).collect();
    let mut open = seeds.len();
    let mut events = Vec::new();
    let mut held = std::collections::VecDeque::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while open > 0 {
        assert!(
            Instant::now() < deadline,
            "timed out; got {got:?}, stats {:?}",
            rx.stats()
        );
        rx.poll(&mut events, Duration::from_millis(50)).unwrap();
        if events.is_empty() || held.len() >= hold {
            held.clear();
        }
        for ev in events.drain(..) {
            match ev {
                RxEvent::Data(b) => {
                    let c = b.conn();
                    let bytes = rx.bytes(&b).expect("host bytes");
                    assert_eq!(bytes.len(), b.len());
                    let off = got.get_mut(&c).unwrap();
                    Pattern::new(seeds[&c]).verify(*off, bytes).unwrap();
                    *off += b.len() as u64;
                    if hold > 0 {
                        held.push_back(b);
                    }
                }
                RxEvent::Eof(c) => {
                    open -= 1;
                    rx.close(c);
                }
                RxEvent::Failed(c, e) => panic!("connection {c} failed: {e}"),
            }
        }
    }
    drop(held);
    got
}

fn integrity(
    mode: RxMode,
    conns: usize,
    msgs: usize,
    max: u64,
    cfg_fn: impl Fn(&mut RxConfig),
    hold: usize,
) -> Receiver {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut cfg = RxConfig::new(mode);
    cfg_fn(&mut cfg);
    let mut rx = Receiver::new(&cfg).unwrap();
    let mut seeds = HashMap::new();
    let mut senders = Vec::new();
    for i in 0..conns {
        let (tx, s) = pair(&l);
        let id = rx.add(s).unwrap();
        let seed = 1000 + i as u64;
        seeds.insert(id, seed);
        senders.push((id, sender(tx, seed, msgs, max)));
    }
    let got = receive_all(&mut rx, &seeds, hold);
    for (id, h) in senders {
        assert_eq!(got[&id], h.join().unwrap(), "{mode} connection {id}: bytes");
    }
    // One more poll hands back the buffers dropped last.
    rx.poll(&mut Vec::new(), Duration::ZERO).unwrap();
    assert_eq!(rx.held(), 0, "{mode}: every buffer is back");
    let st = rx.stats();
    assert_eq!(st.returned, st.buffers, "{mode}: {st:?}");
    assert_eq!(st.eofs as usize, conns);
    rx
}

#[zcnet_testkit::test]
fn every_byte_arrives_in_order_on_every_backend() {
    for mode in HOST_MODES {
        let rx = integrity(mode, 4, 1000, 1 << 20, |_| {}, 0);
        let st = rx.stats();
        assert_eq!(st.copied_bytes, st.bytes, "{mode}: host backends copy");
        assert_eq!(st.zerocopy_bytes, 0);
        if mode == RxMode::Auto {
            assert_eq!(
                rx.mode(),
                RxMode::Uring,
                "auto picks uring here: {:?}",
                rx.fallbacks()
            );
            assert_eq!(rx.fallbacks()[0].tried, RxMode::Zcrx);
        }
    }
}

#[zcnet_testkit::test]
fn slow_consumer_starves_the_ring_and_it_resumes() {
    for mode in [RxMode::Copy, RxMode::Uring] {
        // 8 buffers of 4 KiB, the consumer keeps all it gets until a poll brings nothing: every
        // pause is counted, nothing is lost.
        let rx = integrity(
            mode,
            3,
            300,
            64 << 10,
            |c| {
                c.buffers = 8;
                c.buf_size = 4096;
            },
            8,
        );
        let st = rx.stats();
        assert!(st.starved > 0, "{mode}: {st:?}");
        if mode == RxMode::Uring {
            assert!(st.rearms > 0, "{mode}: {st:?}");
        }
    }
}

/// Bytes delivered on `conn` by polls over `wait`.
fn delivered_within(rx: &mut Receiver, wait: Duration) -> usize {
    let mut events = Vec::new();
    let mut n = 0;
    let end = Instant::now() + wait;
    while Instant::now() < end {
        rx.poll(&mut events, Duration::from_millis(20)).unwrap();
        for ev in events.drain(..) {
            if let RxEvent::Data(b) = ev {
                n += b.len();
            }
        }
    }
    n
}

#[zcnet_testkit::test]
fn the_low_water_mark_holds_small_data_until_lowered_and_streams_stay_whole() {
    for mode in [RxMode::Copy, RxMode::Uring] {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut cfg = RxConfig::new(mode);
        cfg.low_water = Some(64 << 10);
        let mut rx = Receiver::new(&cfg).unwrap();
        let (mut tx, s) = pair(&l);
        let conn = rx.add(s).unwrap();
        assert_eq!(rx.low_water(conn), Some(64 << 10), "{mode}: read back");
        // The mark gates wakeups; a receive that is armed when data is already queued takes
        // it (uring's arm goes in with the first poll), so arm before sending.
        assert_eq!(delivered_within(&mut rx, Duration::from_millis(40)), 0);
        tx.write_all(&[7u8; 1000]).unwrap();
        assert_eq!(
            delivered_within(&mut rx, Duration::from_millis(200)),
            0,
            "{mode}: 1000 B stay below a 64 KiB mark"
        );
        // Lowering the mark wakes the receiver for what is queued.
        assert_eq!(rx.set_low_water(conn, 1).unwrap(), Some(1), "{mode}");
        assert_eq!(rx.low_water(conn), None, "{mode}: back to the default");
        let got = delivered_within(&mut rx, Duration::from_millis(300));
        assert_eq!(got, 1000, "{mode}: the held bytes arrive once lowered");
        rx.close(conn);
    }
    // With the mark set, bulk streams arrive whole, the tail of each below the mark delivered
    // at the end of the stream.
    for mode in [RxMode::Copy, RxMode::Uring] {
        integrity(mode, 3, 300, 1 << 20, |c| c.low_water = Some(128 << 10), 0);
    }
}

/// Both sides take a `zcnet::Socket`: a receiver adds one made from a TCP stream and receives
/// every byte, and refuses a datagram socket, saying why.
#[zcnet_testkit::test]
fn a_receiver_takes_a_socket_as_the_sender_does() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let (tx, conn) = pair(&l);
    let mut rx = Receiver::new(&RxConfig::new(RxMode::Uring)).unwrap();
    let id = rx.add(zcnet::Socket::from(conn)).unwrap();
    let sent = sender(tx, 21, 200, 1 << 16);
    let got = receive_all(&mut rx, &HashMap::from([(id, 21)]), 0);
    assert_eq!(got[&id], sent.join().unwrap());
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let e = rx.add(zcnet::Socket::from(udp)).unwrap_err().to_string();
    assert!(e.contains("datagrams"), "{e}");
}

/// A received buffer lent on and sent without a copy (an echo's forward path): every byte of a
/// verified stream goes out through `Sender::send_lent` from the receive ring's own buffers,
/// arrives verified on the far side, and every buffer is back in the ring at the end. A mode
/// that cannot lend hands the buffer back with the reason.
#[zcnet_testkit::test]
fn received_buffers_are_sent_on_without_a_copy() {
    use zcnet::{Region, Sender, Socket, TxConfig, TxMode};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let (tx, conn) = pair(&l);
    let mut cfg = RxConfig::new(RxMode::Uring);
    cfg.buffers = 64;
    let mut rx = Receiver::new(&cfg).unwrap();
    let id = rx.add(conn).unwrap();
    let sent = sender(tx, 31, 300, 1 << 17);
    // The far side: verifies the same pattern, in order.
    let (out, far) = pair(&l);
    let check = thread::spawn(move || {
        let mut far = far;
        common::drain_stream(&mut far, Some(Pattern::new(31))).unwrap()
    });
    let mut tcfg = TxConfig::new(TxMode::UringZc);
    tcfg.stall_timeout = Duration::from_secs(10);
    let region = Region::anonymous(zcnet::tx::region_len(&tcfg)).unwrap();
    let mut fwd = Sender::new(Socket::from(out), region, &tcfg).unwrap();
    let mut events = Vec::new();
    let mut open = true;
    let mut forwarded = 0u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    while open {
        assert!(Instant::now() < deadline, "timed out at {forwarded}");
        rx.poll(&mut events, Duration::from_millis(50)).unwrap();
        for ev in events.drain(..) {
            match ev {
                RxEvent::Data(b) => {
                    let n = b.len();
                    Pattern::new(31)
                        .verify(forwarded, rx.bytes(&b).unwrap())
                        .unwrap();
                    let lent = rx.lend(b).map_err(|(_, e)| e).unwrap();
                    assert!(lent.slice(0, n).is_some() && lent.is_read_only());
                    fwd.send_lent(lent, 0, n).unwrap();
                    forwarded += n as u64;
                }
                RxEvent::Eof(c) => {
                    assert_eq!(c, id);
                    open = false;
                }
                RxEvent::Failed(c, e) => panic!("connection {c} failed: {e}"),
            }
        }
        // Completions let go of lent buffers; the next poll puts them back in the ring.
        fwd.submit().unwrap();
    }
    let st = fwd.finish().unwrap();
    assert_eq!(forwarded, sent.join().unwrap());
    assert_eq!(st.bytes, forwarded);
    assert_eq!(
        check.join().unwrap().bytes,
        forwarded,
        "verified on the far side"
    );
    rx.poll(&mut events, Duration::ZERO).unwrap();
    assert_eq!(rx.held(), 0, "every lent buffer went back to the ring");

    // copy mode cannot lend: the buffer comes back with the reason.
    let (mut tx, conn) = pair(&l);
    let mut rx = Receiver::new(&RxConfig::new(RxMode::Copy)).unwrap();
    rx.add(conn).unwrap();
    tx.write_all(b"x").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        assert!(Instant::now() < deadline);
        rx.poll(&mut events, Duration::from_millis(50)).unwrap();
        if let Some(RxEvent::Data(b)) = events.pop() {
            let (b, e) = rx.lend(b).unwrap_err();
            assert_eq!(rx.bytes(&b), Some(&b"x"[..]));
            assert!(e.to_string().contains("lending copy"), "{e}");
            break;
        }
    }
}

zcnet_testkit::main!();
