//! A caller's `Cancel` token ends the library's blocking waits with `Error::Interrupted`, from
//! another thread and promptly: an accept nobody connects to, a read of a silent stream, a
//! receiver's poll with a long timeout, a sender waiting for a buffer a peer that stopped
//! reading holds. No signal is involved: the library reads no process-wide flag.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};
use zcnet::{
    net, Cancel, Error, Receiver, Region, RxConfig, RxMode, Sender, Socket, TxConfig, TxMode,
};

/// Runs `f` in a thread, cancels `token` after 200 ms, and returns what `f` returned and how
/// long after the cancel it did (at most 10 s: a wait the token did not end fails the test).
fn cancel_while<T: Send + 'static>(
    token: &Cancel,
    f: impl FnOnce() -> T + Send + 'static,
) -> (T, Duration) {
    zcnet_testkit::signals::end_while("the cancel", || token.cancel(), Duration::from_secs(10), f)
}

#[zcnet_testkit::test]
fn a_cancelled_token_ends_accept_connect_and_recv() {
    // accept with nobody connecting.
    let token = Cancel::new();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let t = token.clone();
    let (r, after) = cancel_while(&token, move || net::accept(&l, &t).map(|_| ()));
    assert!(matches!(r, Err(Error::Interrupted)), "{r:?}");
    assert!(after < Duration::from_secs(1), "{after:?}");
    assert!(token.is_cancelled());
    // Cancelled for good: connect returns at once too; another token is not affected.
    assert!(matches!(
        net::connect_tcp(addr, &token),
        Err(Error::Interrupted)
    ));
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    net::connect_tcp(other.local_addr().unwrap(), &Cancel::new()).unwrap();

    // A read of a stream whose peer is connected and silent.
    let token = Cancel::new();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (peer, _) = l.accept().unwrap();
    let t = token.clone();
    let (r, after) = cancel_while(&token, move || {
        let mut buf = [0u8; 64];
        net::recv_interruptible(&c, &mut buf, &t)
    });
    let e = r.unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::Interrupted, "{e}");
    assert!(after < Duration::from_secs(1), "{after:?}");
    assert!(matches!(Error::io("recv", e), Error::Interrupted));
    drop(peer);
}

#[zcnet_testkit::test]
fn a_cancelled_token_ends_a_receivers_long_poll() {
    for mode in [RxMode::Copy, RxMode::Uring] {
        let token = Cancel::new();
        let mut cfg = RxConfig::new(mode);
        cfg.cancel = token.clone();
        let mut rx = match Receiver::new(&cfg) {
            Ok(rx) => rx,
            Err(e @ Error::Unsupported { .. }) if mode == RxMode::Uring => {
                zcnet_testkit::skip(zcnet_testkit::Need::Kernel, e)
            }
            Err(e) => panic!("{mode:?}: {e}"),
        };
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let peer = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        rx.add(l.accept().unwrap().0).unwrap();
        // The receiver stays in this thread (it is not Send): another cancels the token.
        let t = token.clone();
        let canceller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            t.cancel();
            Instant::now()
        });
        let mut events = Vec::new();
        // A minute with nothing to receive: only the token ends it early.
        let r = rx.poll(&mut events, Duration::from_secs(60));
        let after = canceller.join().unwrap().elapsed();
        assert!(matches!(r, Err(Error::Interrupted)), "{mode:?}: {r:?}");
        assert!(after < Duration::from_secs(1), "{mode:?}: {after:?}");
        drop(peer);
    }
}

#[zcnet_testkit::test]
fn a_cancelled_token_ends_a_senders_wait_for_a_buffer() {
    // A peer that never reads: once the socket buffers are full, every buffer stays with the
    // kernel and `buffer()` waits (the stall timeout, a minute here, would end it otherwise).
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let stream = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (peer, _) = l.accept().unwrap();
    let token = Cancel::new();
    let mut cfg = TxConfig::new(TxMode::Uring);
    cfg.cancel = token.clone();
    cfg.stall_timeout = Duration::from_secs(60);
    let region = Region::anonymous(zcnet::tx::region_len(&cfg)).unwrap();
    let mut tx = match Sender::new(Socket::from(stream), region, &cfg) {
        Ok(tx) => tx,
        Err(e @ Error::Unsupported { .. }) => zcnet_testkit::skip(zcnet_testkit::Need::Kernel, e),
        Err(e) => panic!("{e}"),
    };
    let (r, after) = cancel_while(&token, move || loop {
        let b = match tx.buffer() {
            Ok(b) => b,
            Err(e) => return e,
        };
        let len = b.capacity();
        if let Err(e) = tx.send(b, len) {
            return e;
        }
    });
    assert!(matches!(r, Error::Interrupted), "{r:?}");
    assert!(after < Duration::from_secs(2), "{after:?}");
    drop(peer);
}

/// Dropping a sender abandons what is in flight, promptly: a zero-copy sender whose buffers a
/// silent peer holds (its receive queue full, the notifications never come) resets the
/// connection, which gives them back at once, instead of waiting out the ring's bound on the
/// caller's thread and leaking them.
#[zcnet_testkit::test]
fn dropping_a_sender_a_silent_peer_holds_is_prompt_and_resets_the_stream() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let stream = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (mut peer, _) = l.accept().unwrap();
    let mut cfg = TxConfig::new(TxMode::UringZc);
    cfg.stall_timeout = Duration::from_millis(500);
    let region = Region::anonymous(zcnet::tx::region_len(&cfg)).unwrap();
    let mut tx = match Sender::new(Socket::from(stream), region, &cfg) {
        Ok(tx) => tx,
        Err(e @ Error::Unsupported { .. }) => zcnet_testkit::skip(zcnet_testkit::Need::Kernel, e),
        Err(e) => panic!("{e}"),
    };
    let t0 = Instant::now();
    let stalled = loop {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the sends never stalled"
        );
        match tx.buffer() {
            Ok(b) => {
                let len = b.capacity();
                tx.send(b, len).unwrap();
            }
            Err(e) => break e,
        }
    };
    assert!(matches!(stalled, Error::Stalled { .. }), "{stalled:?}");
    assert!(tx.outstanding() > 0);
    let t = Instant::now();
    drop(tx);
    let took = t.elapsed();
    assert!(took < Duration::from_millis(1000), "the drop took {took:?}");
    // The peer sees the reset once it reads past what had arrived.
    peer.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let end = loop {
        match std::io::Read::read(&mut peer, &mut buf) {
            Ok(0) => break None,
            Ok(_) => continue,
            Err(e) => break Some(e.kind()),
        }
    };
    assert_eq!(end, Some(std::io::ErrorKind::ConnectionReset));
}

zcnet_testkit::main!();
