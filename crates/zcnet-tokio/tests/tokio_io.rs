//! A `Sender` and a `Receiver` driven only by a tokio runtime over loopback (no root needed):
//! bytes verified end to end, futures cancelled mid-wait without losing data or buffers.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;
use zcnet::rx::{Receiver, RxConfig, RxEvent, RxMode};
use zcnet::{Error, Region, Sender, Socket, TxConfig, TxMode};
use zcnet_tokio::{AsyncReceiver, AsyncSender};

fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    (a, b)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The stream's byte at offset `i`: the low byte of a 64-bit mix of `i / 8`, so that any
/// misplaced or repeated 8-byte run is caught (and fills and checks run a word at a time).
fn word(i: u64) -> u64 {
    (i / 8).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5a5a_5a5a_0f0f_0f0f
}

fn byte(i: u64) -> u8 {
    word(i).to_le_bytes()[(i % 8) as usize]
}

fn fill(dst: &mut [u8], at: u64) {
    for (k, x) in dst.iter_mut().enumerate() {
        *x = byte(at + k as u64);
    }
}

/// The offset of the first byte of `got` (read from offset `at`) that is wrong.
fn first_wrong(got: &[u8], at: u64) -> Option<u64> {
    got.iter()
        .enumerate()
        .find(|&(k, &x)| x != byte(at + k as u64))
        .map(|(k, _)| at + k as u64)
}

/// Where `move_verified`'s sender stops until the receiver had a wait cut short: a multiple of
/// the senders' 64 KiB buffers, so that a send ends there.
const PAUSE_AT: u64 = 16 << 20;

fn sender(stream: TcpStream, mode: TxMode) -> Sender {
    let mut cfg = TxConfig::new(mode);
    cfg.buf_size = 64 << 10;
    cfg.inflight = 8;
    let region = Region::anonymous(zcnet::tx::region_len(&cfg)).unwrap();
    Sender::new(Socket::from(stream), region, &cfg).unwrap()
}

fn receiver(mode: RxMode) -> Receiver {
    let mut cfg = RxConfig::new(mode);
    cfg.buf_size = 64 << 10;
    cfg.buffers = 16;
    Receiver::new(&cfg).unwrap()
}

/// Moves `len` bytes from an `AsyncSender` (`tx_mode`) to an `AsyncReceiver` (`rx_mode`) on one
/// current-thread runtime, both sides dropping futures mid-wait every few steps (a `select!`
/// against a timer that fires first); checks every byte, and that every buffer came back.
/// Whether those waits had to wait depends on timing; one is cut short for certain: the sender
/// stops at [`PAUSE_AT`] until the receiver, holding every byte sent so far, had a wait for more
/// dropped (nothing could arrive meanwhile).
fn move_verified(tx_mode: TxMode, rx_mode: RxMode, len: u64) {
    assert!(len > PAUSE_AT);
    runtime().block_on(async {
        let (a, b) = pair();
        let mut tx = AsyncSender::new(sender(a, tx_mode)).unwrap();
        let mut rx = AsyncReceiver::new(receiver(rx_mode)).unwrap();
        let conn = rx.add(b).unwrap();
        let (resume, resumed) = tokio::sync::oneshot::channel::<()>();
        let mut resumed = Some(resumed);
        let send = async {
            let (mut sent, mut cancelled) = (0u64, 0u64);
            while sent < len {
                if sent == PAUSE_AT {
                    if let Some(r) = resumed.take() {
                        tx.flush().await.unwrap();
                        r.await.unwrap();
                    }
                }
                // Every 16th wait is cut short: the future is dropped while it waits.
                let b = if sent / (64 << 10) % 16 == 0 {
                    match tokio::time::timeout(Duration::from_micros(1), tx.buffer()).await {
                        Ok(b) => b.unwrap(),
                        Err(_) => {
                            cancelled += 1;
                            continue;
                        }
                    }
                } else {
                    tx.buffer().await.unwrap()
                };
                let mut b = b;
                let n = (b.capacity() as u64).min(len - sent) as usize;
                fill(&mut b.bytes_mut().unwrap()[..n], sent);
                tx.send(b, n).unwrap();
                sent += n as u64;
            }
            tx.flush().await.unwrap();
            let stats = tx.sender().stats();
            assert_eq!(stats.bytes, len, "{stats:?}");
            assert_eq!(stats.zerocopy_bytes + stats.copied_bytes, len, "{stats:?}");
            if tx_mode == TxMode::Auto {
                // Loopback copies: auto must have switched to copying (through its ring).
                assert!(!stats.switches.is_empty(), "{stats:?}");
            }
            assert_eq!(tx.sender().outstanding(), 0);
            // Every buffer can be taken again: none was lost to a cancelled wait.
            let mut all = Vec::new();
            for _ in 0..tx.sender().buffers() {
                all.push(tx.buffer().await.unwrap());
            }
            // With every buffer held here and none in flight, nothing can come back: a wait
            // says so at once instead of waiting for good.
            let e = tokio::time::timeout(Duration::from_secs(5), tx.buffer())
                .await
                .expect("the wait ended")
                .unwrap_err();
            assert!(e.to_string().contains("none is in flight"), "{e}");
            assert_eq!(tx.sender().outstanding(), 0);
            drop(all);
            drop(tx); // closes the socket: end of stream for the receiver
            cancelled
        };
        let recv = async {
            let (mut got, mut cancelled, mut turns) = (0u64, 0u64, 0u64);
            let mut resume = Some(resume);
            loop {
                turns += 1;
                if got == PAUSE_AT {
                    if let Some(resume) = resume.take() {
                        let r = tokio::time::timeout(Duration::from_millis(20), rx.recv()).await;
                        assert!(r.is_err(), "data arrived while the sender was paused: {r:?}");
                        cancelled += 1;
                        resume.send(()).unwrap();
                    }
                }
                // Every 8th wait is cut short after 50 µs: dropped while it waits, if it had to.
                let ev = if turns % 8 == 0 {
                    match tokio::time::timeout(Duration::from_micros(50), rx.recv()).await {
                        Ok(ev) => ev,
                        Err(_) => {
                            cancelled += 1;
                            continue;
                        }
                    }
                } else {
                    rx.recv().await
                };
                match ev.unwrap() {
                    Some(RxEvent::Data(buf)) => {
                        let bytes = rx.bytes(&buf).unwrap();
                        if let Some(at) = first_wrong(bytes, got) {
                            panic!("{rx_mode}: byte {at} is wrong");
                        }
                        got += bytes.len() as u64;
                    }
                    Some(RxEvent::Eof(c)) => {
                        assert_eq!(c, conn);
                        rx.close(c);
                    }
                    Some(RxEvent::Failed(c, e)) => panic!("{rx_mode}: connection {c}: {e}"),
                    None => break,
                }
            }
            assert_eq!(rx.receiver().held(), 0, "every buffer went back");
            (got, cancelled)
        };
        let (tx_cancelled, (got, rx_cancelled)) = tokio::join!(send, recv);
        assert_eq!(got, len, "{tx_mode} -> {rx_mode}");
        eprintln!("{tx_mode} -> {rx_mode}: {tx_cancelled} send and {rx_cancelled} receive waits cancelled");
        assert!(
            rx_cancelled > 0,
            "no receive wait was cut short: the test tested no cancellation ({tx_cancelled} send waits were)"
        );
    });
}

#[zcnet_testkit::test(timeout = 300)]
fn one_gib_uring_zc_to_uring_verified_with_cancelled_futures() {
    move_verified(TxMode::UringZc, RxMode::Uring, 1 << 30);
}

#[zcnet_testkit::test(timeout = 120)]
fn uring_to_copy_receiver_verified() {
    move_verified(TxMode::Uring, RxMode::Copy, 64 << 20);
}

#[zcnet_testkit::test(timeout = 120)]
fn auto_to_auto_verified() {
    move_verified(TxMode::Auto, RxMode::Auto, 64 << 20);
}

/// A receive cancelled while nothing has arrived loses nothing: the data that comes later is
/// the next call's.
#[zcnet_testkit::test(timeout = 60)]
fn a_cancelled_receive_loses_nothing() {
    runtime().block_on(async {
        let (mut a, b) = pair();
        let mut rx = AsyncReceiver::new(receiver(RxMode::Uring)).unwrap();
        rx.add(b).unwrap();
        let r = tokio::time::timeout(Duration::from_millis(20), rx.recv()).await;
        assert!(r.is_err(), "nothing was sent yet");
        a.write_all(b"after the cancel").unwrap();
        drop(a);
        let mut got = Vec::new();
        while let Some(ev) = rx.recv().await.unwrap() {
            match ev {
                RxEvent::Data(buf) => got.extend_from_slice(rx.bytes(&buf).unwrap()),
                RxEvent::Eof(c) => rx.close(c),
                RxEvent::Failed(c, e) => panic!("{c}: {e}"),
            }
        }
        assert_eq!(got, b"after the cancel");
    });
}

/// Waiting for a buffer while a peer does not read: the wait is cancelled, every buffer is
/// still the sender's (in flight), and once the peer reads they all come back.
#[zcnet_testkit::test(timeout = 60)]
fn a_cancelled_buffer_wait_leaves_every_buffer_accounted_for() {
    runtime().block_on(async {
        let (a, mut b) = pair();
        let mut tx = AsyncSender::new(sender(a, TxMode::UringZc)).unwrap();
        let total = tx.sender().buffers();
        let mut sent = 0u64;
        // Fill the socket until no buffer comes back within 200 ms.
        loop {
            match tokio::time::timeout(Duration::from_millis(200), tx.buffer()).await {
                Ok(buf) => {
                    let mut buf = buf.unwrap();
                    let n = buf.capacity();
                    fill(&mut buf.bytes_mut().unwrap()[..n], sent);
                    tx.send(buf, n).unwrap();
                    sent += n as u64;
                }
                Err(_) => break,
            }
            assert!(sent < 1 << 30, "the peer's socket never filled");
        }
        assert_eq!(tx.sender().outstanding(), total, "all in flight, none lost");
        let reader = std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 20];
            let mut got = 0u64;
            while got < sent {
                let n = b.read(&mut buf).unwrap();
                assert!(first_wrong(&buf[..n], got).is_none());
                got += n as u64;
            }
            got
        });
        tokio::time::timeout(Duration::from_secs(30), tx.flush())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(tx.sender().outstanding(), 0);
        assert_eq!(reader.join().unwrap(), sent);
    });
}

/// Buffers the application took and dropped unsent never come back: a wait for one with
/// nothing in flight ends at once with the reason, instead of waiting for a completion no
/// request will post (the blocking sender says the same, at once, not after its stall timeout).
#[zcnet_testkit::test(timeout = 60)]
fn a_buffer_wait_with_every_buffer_dropped_unsent_ends_with_the_reason() {
    runtime().block_on(async {
        let (a, _b) = pair();
        let mut tx = AsyncSender::new(sender(a, TxMode::Uring)).unwrap();
        let total = tx.sender().buffers();
        let mut taken = Vec::new();
        for _ in 0..total {
            taken.push(tx.buffer().await.unwrap());
        }
        drop(taken);
        let e = tokio::time::timeout(Duration::from_secs(5), tx.buffer())
            .await
            .expect("the wait ended")
            .unwrap_err();
        assert!(e.to_string().contains("a TxBuf dropped unsent"), "{e}");
    });
    let (a, _b) = pair();
    let mut tx = sender(a, TxMode::Copy);
    let taken: Vec<_> = (0..tx.buffers()).map(|_| tx.buffer().unwrap()).collect();
    drop(taken);
    let t = std::time::Instant::now();
    let e = tx.buffer().unwrap_err();
    assert!(e.to_string().contains("none is in flight"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
}

#[zcnet_testkit::test]
fn blocking_send_modes_are_refused_with_the_reason() {
    runtime().block_on(async {
        for mode in [TxMode::Copy, TxMode::MsgZerocopy] {
            let (a, _b) = pair();
            match AsyncSender::new(sender(a, mode)) {
                Err(e @ Error::Unsupported { .. }) => {
                    let m = e.to_string();
                    assert!(m.contains(mode.name()), "{m}");
                    assert!(!m.contains("--"), "no command-line flags: {m}");
                }
                r => panic!("{mode}: {:?}", r.map(|_| ())),
            }
        }
    });
}

/// An echo's forward path on the runtime alone: 64 MiB written into one connection, each
/// received buffer lent on (`AsyncReceiver::lend`) and sent out of another with
/// `AsyncSender::send_lent` (no copy in user space), checked byte for byte on the far end;
/// every lent buffer is back in the receive ring at the end.
#[zcnet_testkit::test(timeout = 120)]
fn received_buffers_sent_on_by_the_runtime_arrive_verified() {
    const LEN: u64 = 64 << 20;
    let (mut src, inb) = pair();
    let (out, mut far) = pair();
    let writer = std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 20];
        let mut at = 0;
        while at < LEN {
            fill(&mut buf, at);
            src.write_all(&buf).unwrap();
            at += buf.len() as u64;
        }
    });
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 20];
        let mut at = 0u64;
        while at < LEN {
            let n = far.read(&mut buf).unwrap();
            assert!(n > 0, "the forwarder closed at {at}");
            assert_eq!(first_wrong(&buf[..n], at), None, "forwarded bytes");
            at += n as u64;
        }
        at
    });
    runtime().block_on(async {
        let mut rx = AsyncReceiver::new(receiver(RxMode::Uring)).unwrap();
        rx.add(inb).unwrap();
        let mut tx = AsyncSender::new(sender(out, TxMode::UringZc)).unwrap();
        let mut moved = 0u64;
        while moved < LEN {
            match rx.recv().await.unwrap() {
                Some(RxEvent::Data(b)) => {
                    let n = b.len();
                    let lent = rx.lend(b).map_err(|(_, e)| e).unwrap();
                    tx.send_lent(lent, 0, n).await.unwrap();
                    moved += n as u64;
                }
                other => panic!("at {moved}: {other:?}"),
            }
        }
        tx.finish().await.unwrap();
        // The last leases went with the sends: a poll puts them back in the ring.
        rx.receiver_mut()
            .poll(&mut Vec::new(), Duration::ZERO)
            .unwrap();
        assert_eq!(rx.receiver().held(), 0, "every lent buffer is back");
    });
    writer.join().unwrap();
    assert_eq!(reader.join().unwrap(), LEN);
}

/// An echo with more connections (8) than receive buffers (4), written as zcnet-tokio's docs
/// say: each received buffer is lent to its connection's task, which sends it back and drives
/// its sender (`flush` between sends), so the buffer comes back to the ring as soon as the
/// kernel is done with it. A task that did not drive its sender would keep its last buffer
/// until its connection's next message, which cannot arrive once the others hold every buffer:
/// the echo would hang (bounded by the test's timeout).
#[zcnet_testkit::test(timeout = 120)]
fn an_echo_with_fewer_buffers_than_connections_never_stalls() {
    use std::sync::Arc;
    use tokio::sync::mpsc;
    use zcnet::engine::ForeignBuf;
    const CONNS: usize = 8;
    const LEN: u64 = 4 << 20;
    let mut clients = Vec::new();
    let mut servers = Vec::new();
    for _ in 0..CONNS {
        let (c, s) = pair();
        clients.push(c);
        servers.push(s);
    }
    // Each client writes LEN bytes in 64 KiB messages, reading each echo back before the next.
    let clients: Vec<_> = clients
        .into_iter()
        .map(|mut c| {
            std::thread::spawn(move || {
                let mut msg = vec![0u8; 64 << 10];
                let mut back = vec![0u8; 64 << 10];
                let mut at = 0u64;
                while at < LEN {
                    fill(&mut msg, at);
                    c.write_all(&msg).unwrap();
                    c.read_exact(&mut back).unwrap();
                    assert_eq!(first_wrong(&back, at), None, "echoed bytes");
                    at += msg.len() as u64;
                }
                at
            })
        })
        .collect();
    let local = tokio::task::LocalSet::new();
    let starved = local.block_on(&runtime(), async {
        let mut cfg = RxConfig::new(RxMode::Uring);
        cfg.buf_size = 64 << 10;
        cfg.buffers = 4;
        let mut rx = AsyncReceiver::new(Receiver::new(&cfg).unwrap()).unwrap();
        let mut to = std::collections::HashMap::new();
        let mut tasks = Vec::new();
        for s in servers {
            let out = s.try_clone().unwrap();
            let conn = rx.add(s).unwrap();
            let mut tx = AsyncSender::new(sender(out, TxMode::Uring)).unwrap();
            let (put, mut take) = mpsc::unbounded_channel::<(Arc<ForeignBuf>, usize)>();
            to.insert(conn, put);
            tasks.push(tokio::task::spawn_local(async move {
                loop {
                    let busy = tx.sender().outstanding() > 0;
                    tokio::select! {
                        m = take.recv() => match m {
                            Some((lent, n)) => tx.send_lent(lent, 0, n).await.unwrap(),
                            None => break,
                        },
                        r = tx.flush(), if busy => r.unwrap(),
                    }
                }
                tx.finish().await.unwrap();
            }));
        }
        let mut left = CONNS;
        while left > 0 {
            match rx.recv().await.unwrap() {
                Some(RxEvent::Data(b)) => {
                    let (c, n) = (b.conn(), b.len());
                    let lent = rx.lend(b).map_err(|(_, e)| e).unwrap();
                    to[&c].send((lent, n)).unwrap();
                }
                Some(RxEvent::Eof(c)) => {
                    to.remove(&c);
                    rx.close(c);
                    left -= 1;
                }
                other => panic!("{other:?}"),
            }
        }
        for t in tasks {
            t.await.unwrap();
        }
        rx.receiver().stats().starved
    });
    // The clients end after their last echo; their ends close, the receiver saw every EOF.
    for c in clients {
        assert_eq!(c.join().unwrap(), LEN);
    }
    assert!(starved > 0, "the receiver never ran out of buffers");
}

/// One connection, two receive buffers, both held by another task for a while: the receiver's
/// task sleeps on the readiness fd with nothing the kernel could signal (its only receive
/// ended for want of a buffer). The buffers that task drops must wake it; else the stream
/// stalls for good (bounded by the test's timeout).
#[zcnet_testkit::test(timeout = 60)]
fn buffers_dropped_by_another_task_wake_a_starving_receiver() {
    const LEN: u64 = 1 << 20;
    let (mut src, inb) = pair();
    let writer = std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        let mut at = 0;
        while at < LEN {
            fill(&mut buf, at);
            src.write_all(&buf).unwrap();
            at += buf.len() as u64;
        }
    });
    let local = tokio::task::LocalSet::new();
    let (got, starved) = local.block_on(&runtime(), async {
        let mut cfg = RxConfig::new(RxMode::Uring);
        cfg.buf_size = 16 << 10;
        cfg.buffers = 2;
        let mut rx = AsyncReceiver::new(Receiver::new(&cfg).unwrap()).unwrap();
        rx.add(inb).unwrap();
        let (put, mut take) = tokio::sync::mpsc::unbounded_channel();
        // Holds each pair of buffers for 20 ms, then drops it.
        let holder = tokio::task::spawn_local(async move {
            let mut held = Vec::new();
            while let Some(b) = take.recv().await {
                held.push(b);
                if held.len() == 2 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    held.clear();
                }
            }
        });
        let mut got = 0u64;
        loop {
            match rx.recv().await.unwrap() {
                Some(RxEvent::Data(b)) => {
                    assert_eq!(first_wrong(rx.bytes(&b).unwrap(), got), None);
                    got += b.len() as u64;
                    put.send(b).unwrap();
                }
                Some(RxEvent::Eof(c)) => {
                    rx.close(c);
                    break;
                }
                other => panic!("at {got}: {other:?}"),
            }
        }
        drop(put);
        holder.await.unwrap();
        (got, rx.receiver().stats().starved)
    });
    writer.join().unwrap();
    assert_eq!(got, LEN);
    assert!(starved > 0, "the receiver never ran out of buffers");
}

/// The echo example refuses bad input in one line that names the flag, before it listens.
#[zcnet_testkit::test(timeout = 60)]
fn the_echo_example_refuses_bad_input_naming_the_flag() {
    // target/<profile>/deps/<this test> -> target/<profile>/examples/echo (`cargo test` of the
    // package builds its examples; `--test tokio_io` alone does not, and may find an old one).
    let exe = std::env::current_exe().unwrap();
    let echo = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples/echo");
    if !echo.exists() {
        zcnet_testkit::skip(
            zcnet_testkit::Need::Tool,
            "the echo example is not built (cargo test builds it; a filtered build may not)",
        );
    }
    for (args, flag) in [
        (&["--buffers", "0"][..], "--buffers"),
        (&["--buffers", "many"][..], "--buffers"),
        (&["--conns", "-1"][..], "--conns"),
        (&["--seconds", "0"][..], "--seconds"),
        (&["--tx", "copy"][..], "--tx copy"),
    ] {
        let o = std::process::Command::new(&echo)
            .args(["server", "127.0.0.1:0"])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success(),
            "{args:?} accepted (an echo example older than this test? `cargo test -p zcnet-tokio` rebuilds it): {err}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
    }
}

zcnet_testkit::main!();
