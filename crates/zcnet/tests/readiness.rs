//! Event-loop integration: a `Receiver` and a `Sender` driven only by their readiness fds and
//! non-blocking calls, as an event loop (epoll here; tokio in zcnet-tokio) drives them. Over
//! loopback, no root needed. Each run fails if the fd never becomes readable while work is
//! waiting (the loop would sleep forever: bounded here by a deadline) or if bytes are lost.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use zcnet::rx::{Receiver, RxBuf, RxConfig, RxEvent, RxMode};
use zcnet::{Error, Region, Sender, Socket, TxConfig, TxMode};
use zcnet_sys::epoll::{self, Epoll};

fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    (a, b)
}

fn byte(i: u64) -> u8 {
    (i % 251) as u8
}

/// How long one wait may take while work is pending: far more than any completion needs, so
/// only a readiness fd that was never signalled reaches it.
const WAKE: Duration = Duration::from_secs(5);

/// Waits on `ep` while work is pending, as an event loop does (an interrupted wait, EINTR, is
/// retried), and fails unless the fd becomes readable within [`WAKE`].
fn wait(ep: &mut Epoll, deadline: Instant, what: &str) {
    let mut out = Vec::new();
    assert!(
        Instant::now() < deadline,
        "{what}: no progress before the deadline"
    );
    let t = Instant::now();
    while out.is_empty() {
        let left = WAKE.saturating_sub(t.elapsed());
        assert!(
            !left.is_zero(),
            "{what}: the readiness fd did not become readable within {WAKE:?}"
        );
        ep.wait(&mut out, left.as_millis().max(1) as i32).unwrap();
    }
}

/// A receiver made from `cfg` on one end of a loopback pair whose other end a thread fills
/// with `len` bytes of the pattern, and an epoll set waiting on the receiver's readiness fd
/// edge-triggered, as an event loop does.
fn fed_receiver(cfg: &RxConfig, len: u64) -> (Receiver, Epoll, std::thread::JoinHandle<()>) {
    let mut rx = Receiver::new(cfg).unwrap();
    let (mut tx, sock) = pair();
    rx.add(sock).unwrap();
    let ep = Epoll::new(4).unwrap();
    ep.add(
        rx.readiness_fd().unwrap().as_raw_fd(),
        1,
        epoll::IN | epoll::ET,
    )
    .unwrap();
    let writer = std::thread::spawn(move || {
        let data: Vec<u8> = (0..len).map(byte).collect();
        tx.write_all(&data).unwrap();
    });
    (rx, ep, writer)
}

/// Polls `rx` with a zero timeout until a poll brings nothing (each poll resets the fd),
/// checking each buffer against the pattern at `*got` and handing it to `keep`; whether the
/// stream ended.
fn drain_ready(
    rx: &mut Receiver,
    got: &mut u64,
    mut keep: impl FnMut(&mut Receiver, RxBuf),
) -> bool {
    let mode = rx.mode();
    let (mut events, mut eof) = (Vec::new(), false);
    loop {
        rx.poll(&mut events, Duration::ZERO).unwrap();
        if events.is_empty() {
            return eof;
        }
        for ev in events.drain(..) {
            match ev {
                RxEvent::Data(buf) => {
                    let b = rx.bytes(&buf).unwrap();
                    for (k, &x) in b.iter().enumerate() {
                        assert_eq!(x, byte(*got + k as u64), "{mode}: byte {}", *got + k as u64);
                    }
                    *got += b.len() as u64;
                    keep(rx, buf);
                }
                RxEvent::Eof(_) => eof = true,
                RxEvent::Failed(c, e) => panic!("{mode}: connection {c}: {e}"),
            }
        }
    }
}

/// Receives `len` bytes of the pattern with `mode`, polling only with a zero timeout after
/// the readiness fd said so (or after giving buffers back).
fn receive_driven_by_readiness(mode: RxMode, len: u64) {
    let mut cfg = RxConfig::new(mode);
    cfg.buffers = 8;
    let (mut rx, mut ep, writer) = fed_receiver(&cfg, len);
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut got, mut wakeups) = (0u64, 0u64);
    // Each buffer is dropped at once: given back at the next poll.
    while !drain_ready(&mut rx, &mut got, |_, _| {}) {
        wait(
            &mut ep,
            deadline,
            &format!("{mode} receive at {got} of {len} B"),
        );
        wakeups += 1;
    }
    writer.join().unwrap();
    assert_eq!(got, len, "{mode}");
    assert!(wakeups > 0, "{mode}: the loop never had to wait");
    assert_eq!(rx.held(), 0, "{mode}");
}

#[zcnet_testkit::test(timeout = 120)]
fn copy_receiver_is_driven_by_its_epoll_set() {
    receive_driven_by_readiness(RxMode::Copy, 8 << 20);
}

#[zcnet_testkit::test(timeout = 120)]
fn uring_receiver_is_driven_by_its_eventfd() {
    receive_driven_by_readiness(RxMode::Uring, 8 << 20);
}

/// A receiver whose every buffer the application holds (kept, or, with `uring`, lent on for a
/// send) receives nothing more, and nothing the kernel does signals its fd (no receive is
/// armed; data already in a socket makes no new event); the buffers come back from another
/// thread while the loop sleeps on the readiness fd. The first one dropped must wake the loop:
/// without that the loop sleeps for good (here: the wait fails after 5 s).
fn starving_receiver_woken_by_a_buffer_dropped_elsewhere(mode: RxMode) {
    let mut cfg = RxConfig::new(mode);
    cfg.buffers = 4;
    cfg.buf_size = 4096;
    let len = 256u64 << 10;
    let (mut rx, mut ep, writer) = fed_receiver(&cfg, len);
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut got, mut starved) = (0u64, 0u32);
    let mut kept: Vec<RxBuf> = Vec::new();
    let mut lent = Vec::new();
    let mut givers = Vec::new();
    loop {
        // With uring, every other buffer is lent on (as for a send); the rest are kept.
        let eof = drain_ready(&mut rx, &mut got, |rx, buf| {
            if mode == RxMode::Uring && lent.len() <= kept.len() {
                lent.push(rx.lend(buf).map_err(|(_, e)| e).unwrap());
            } else {
                kept.push(buf);
            }
        });
        if eof {
            break;
        }
        if rx.held() == cfg.buffers {
            // Starving: hand everything back from another thread, a while after the loop
            // went to sleep on the fd.
            starved += 1;
            let (k, l) = (std::mem::take(&mut kept), std::mem::take(&mut lent));
            givers.push(std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                drop(k);
                drop(l);
            }));
        }
        wait(
            &mut ep,
            deadline,
            &format!("{mode} receive at {got} of {len} B (starved {starved} times)"),
        );
    }
    writer.join().unwrap();
    assert_eq!(got, len);
    assert!(
        starved >= 2,
        "{mode}: the receiver never starved: {starved}"
    );
    drop((kept, lent));
    for g in givers {
        g.join().unwrap();
    }
    rx.poll(&mut Vec::new(), Duration::ZERO).unwrap();
    assert_eq!(rx.held(), 0);
}

#[zcnet_testkit::test(timeout = 120)]
fn a_starving_uring_receiver_is_woken_by_a_buffer_dropped_elsewhere() {
    starving_receiver_woken_by_a_buffer_dropped_elsewhere(RxMode::Uring);
}

#[zcnet_testkit::test(timeout = 120)]
fn a_starving_copy_receiver_is_woken_by_a_buffer_dropped_elsewhere() {
    starving_receiver_woken_by_a_buffer_dropped_elsewhere(RxMode::Copy);
}

fn sender(stream: TcpStream, mode: TxMode) -> Sender {
    let mut cfg = TxConfig::new(mode);
    cfg.buf_size = 64 << 10;
    cfg.inflight = 4;
    let region = Region::anonymous(zcnet::tx::region_len(&cfg)).unwrap();
    Sender::new(Socket::from(stream), region, &cfg).unwrap()
}

/// Sends `len` bytes of the pattern with `mode` through `try_buffer`/`send`/`submit` only,
/// waiting on the readiness fd whenever every buffer is in flight; a reader thread checks
/// them.
fn send_driven_by_readiness(mode: TxMode, len: u64) {
    let (a, mut b) = pair();
    let reader = std::thread::spawn(move || {
        // Late at first: the socket's queue fills and sends stay in flight, so the loop must
        // wait on the fd (else `uring` may complete every send inside its submit).
        std::thread::sleep(Duration::from_millis(300));
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0u64;
        loop {
            let n = b.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            for (k, &x) in buf[..n].iter().enumerate() {
                assert_eq!(x, byte(got + k as u64), "byte {}", got + k as u64);
            }
            got += n as u64;
        }
        got
    });
    let mut tx = sender(a, mode);
    let mut ep = Epoll::new(4).unwrap();
    ep.add(
        tx.readiness_fd().unwrap().as_raw_fd(),
        1,
        epoll::IN | epoll::ET,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut sent, mut waits) = (0u64, 0u64);
    while sent < len {
        match tx.try_buffer().unwrap() {
            Some(mut buf) => {
                let n = (buf.capacity() as u64).min(len - sent) as usize;
                for (k, x) in buf.bytes_mut().unwrap()[..n].iter_mut().enumerate() {
                    *x = byte(sent + k as u64);
                }
                tx.send(buf, n).unwrap();
                sent += n as u64;
            }
            None => {
                tx.submit().unwrap();
                if tx.outstanding() > 0 {
                    wait(&mut ep, deadline, &format!("{mode} send"));
                    waits += 1;
                }
            }
        }
    }
    // Drain: every buffer back, still without a blocking call.
    while tx.outstanding() > 0 {
        tx.submit().unwrap();
        if tx.outstanding() > 0 {
            wait(&mut ep, deadline, &format!("{mode} flush"));
        }
    }
    let stats = tx.stats();
    assert_eq!(stats.bytes, len, "{mode}: {stats:?}");
    assert_eq!(
        stats.zerocopy_bytes + stats.copied_bytes,
        len,
        "{mode}: {stats:?}"
    );
    drop(tx);
    assert_eq!(reader.join().unwrap(), len, "{mode}");
    assert!(waits > 0, "{mode}: the loop never had to wait");
}

#[zcnet_testkit::test(timeout = 120)]
fn uring_zc_sender_is_driven_by_its_eventfd() {
    send_driven_by_readiness(TxMode::UringZc, 64 << 20);
}

#[zcnet_testkit::test(timeout = 120)]
fn uring_sender_is_driven_by_its_eventfd() {
    send_driven_by_readiness(TxMode::Uring, 64 << 20);
}

#[zcnet_testkit::test]
fn synchronous_senders_have_no_readiness_fd() {
    for mode in [TxMode::Copy, TxMode::MsgZerocopy] {
        let (a, _b) = pair();
        let mut tx = sender(a, mode);
        match tx.readiness_fd() {
            Err(e @ Error::Unsupported { .. }) => {
                let m = e.to_string();
                assert!(
                    m.contains("readiness fd") && !m.contains('\n'),
                    "{mode}: {m}"
                );
            }
            r => panic!("{mode}: {r:?}"),
        }
    }
}

zcnet_testkit::main!();
