//! A caller's `Cancel` token ends the library's blocking waits with `Error::Interrupted`, from
//! another thread and promptly: an accept nobody connects to, a read of a silent stream, a
//! receiver's poll with a long timeout, a sender waiting for a buffer a peer that stopped
//! reading holds. No signal is involved: the library reads no process-wide flag.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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

/// Installs a SIGUSR1 handler that does nothing, without `SA_RESTART`: a system call the signal
/// cuts short fails with `EINTR`, as under CPython, whose handlers are installed that way.
fn handle_sigusr1_without_restart() {
    extern "C" fn nothing(_: libc::c_int) {}
    // SAFETY: a handler that does nothing (async-signal-safe) for one signal of this test
    // process; the sigaction struct is zeroed, then its handler and (empty) mask set.
    let r = unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = nothing as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut())
    };
    assert_eq!(r, 0, "sigaction");
}

/// Runs `f` in a thread and, from 300 ms on, sends SIGUSR1 to that thread every 50 ms until
/// `ended` is set, the thread returns or `give_up` passes; the thread and how long after the
/// first signal the signals stopped.
fn signal_thread_while<T: Send + 'static>(
    ended: &AtomicBool,
    give_up: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> (std::thread::JoinHandle<T>, Duration) {
    use std::os::unix::thread::JoinHandleExt;
    let h = std::thread::spawn(f);
    std::thread::sleep(Duration::from_millis(300));
    assert!(!h.is_finished(), "returned before the signal");
    let t0 = Instant::now();
    while !ended.load(Ordering::SeqCst) && !h.is_finished() && t0.elapsed() < give_up {
        // SAFETY: the thread is alive (not joined; a finished thread's id stays valid until
        // the join), and SIGUSR1 has a handler in this process.
        let r = unsafe { libc::pthread_kill(h.as_pthread_t(), libc::SIGUSR1) };
        assert_eq!(r, 0, "pthread_kill");
        std::thread::sleep(Duration::from_millis(50));
    }
    (h, t0.elapsed())
}

/// Sends the pattern (seed 5) on `tx` from stream offset `from` to `to`, then flushes; the
/// sender, the offset the stream has reached (every byte before it went, or is queued to go,
/// in order) and how the run ended. A send call that fails part-way adds what of its payload
/// went ([`Sender::last_call_accepted`]); a failed wait for a buffer adds nothing.
fn send_pattern(mut tx: Sender, from: u64, to: u64) -> (Sender, u64, zcnet::Result<()>) {
    let pattern = zcnet::Pattern::new(5);
    let mut off = from;
    let r = (|| {
        while off < to {
            let mut b = tx.buffer()?;
            let n = (b.capacity() as u64).min(to - off) as usize;
            pattern.fill(off, &mut b.bytes_mut().unwrap()[..n]);
            if let Err(e) = tx.send(b, n) {
                off += tx.last_call_accepted();
                return Err(e);
            }
            off += n as u64;
        }
        tx.flush()
    })();
    (tx, off, r)
}

/// Reads `peer` to its end, checks that it got a prefix of the pattern, and returns its length.
fn read_pattern(mut peer: TcpStream) -> u64 {
    peer.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut peer, &mut got).unwrap();
    let mut expect = vec![0u8; got.len()];
    zcnet::Pattern::new(5).fill(0, &mut expect);
    assert!(got == expect, "the stream is not the pattern's prefix");
    got.len() as u64
}

/// A token made with `ending_at_signals` ends a send blocked on a peer that stopped reading
/// when a signal cuts a system call short (CPython's Ctrl-C: its handlers have no SA_RESTART),
/// leaving the token as it was; `last_call_accepted` then says what of the call went, so the caller can go on
/// from there with nothing lost or sent twice. With a plain token the same signals are retried
/// and the send goes on until the peer reads.
#[zcnet_testkit::test(timeout = 120)]
fn a_token_ending_at_signals_ends_a_blocked_send_and_says_what_went() {
    handle_sigusr1_without_restart();
    for mode in [
        TxMode::Copy,
        TxMode::MsgZerocopy,
        TxMode::Uring,
        TxMode::UringZc,
        TxMode::Auto,
    ] {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (peer, _) = l.accept().unwrap();
        let mut cfg = TxConfig::new(mode);
        let token = Cancel::new().ending_at_signals();
        cfg.cancel = token.clone();
        cfg.stall_timeout = Duration::from_secs(60);
        let region = Region::anonymous(zcnet::tx::region_len(&cfg)).unwrap();
        let tx = match Sender::new(Socket::from(stream), region, &cfg) {
            Ok(tx) => tx,
            Err(e @ Error::Unsupported { .. }) if mode != TxMode::Copy => {
                zcnet_testkit::skip(zcnet_testkit::Need::Kernel, e)
            }
            Err(e) => panic!("{mode:?}: {e}"),
        };
        // Far more than the socket buffers hold: the send blocks until the signal.
        let total = 1u64 << 30;
        let ended = Arc::new(AtomicBool::new(false));
        let (go, wait_go) = std::sync::mpsc::channel::<()>();
        let e = ended.clone();
        let (h, after) = signal_thread_while(&ended, Duration::from_secs(5), move || {
            let (mut tx, reached, r) = send_pattern(tx, 0, total);
            e.store(true, Ordering::SeqCst);
            // Go on from where the stream is, without signals (a plain token), in this thread
            // (io_uring requests belong to the thread that submitted them): 4 MiB more.
            wait_go.recv().unwrap();
            tx.set_cancel(Cancel::new());
            let (tx, end, more) = send_pattern(tx, reached, reached + (4 << 20));
            (r, reached, more.map(|()| end), tx.finish())
        });
        assert!(
            ended.load(Ordering::SeqCst),
            "{mode:?}: the signals did not end the send"
        );
        assert!(
            after < Duration::from_secs(2),
            "{mode:?}: ended {after:?} after the signal"
        );
        assert!(
            !token.is_cancelled(),
            "{mode:?}: the token is left as it was"
        );
        // The peer reads everything: the stream is the pattern, in order, once.
        let reader = std::thread::spawn(move || read_pattern(peer));
        go.send(()).unwrap();
        let (r, reached, end, st) = h.join().unwrap();
        assert!(matches!(r, Err(Error::Interrupted)), "{mode:?}: {r:?}");
        let end = end.unwrap();
        let st = st.unwrap();
        assert!(reached > 0 && reached < total, "{mode:?}: {reached}");
        assert_eq!(end, reached + (4 << 20));
        assert_eq!(
            st.bytes, end,
            "{mode:?}: the kernel accepted every byte once"
        );
        let got = reader.join().unwrap();
        assert_eq!(
            got, end,
            "{mode:?}: the peer got the pattern, resumed where it was cut, once"
        );
    }

    // A plain token: the signals are retried, and only the peer's reading lets the send end.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let stream = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (peer, _) = l.accept().unwrap();
    let cfg = TxConfig::new(TxMode::Copy);
    let region = Region::anonymous(zcnet::tx::region_len(&cfg)).unwrap();
    let tx = Sender::new(Socket::from(stream), region, &cfg).unwrap();
    let total = 64u64 << 20;
    let never = AtomicBool::new(false);
    let (h, _) = signal_thread_while(&never, Duration::from_millis(500), move || {
        send_pattern(tx, 0, total)
    });
    assert!(
        !h.is_finished(),
        "the signals ended a send with a plain token"
    );
    let reader = std::thread::spawn(move || read_pattern(peer));
    let (tx, reached, r) = h.join().unwrap();
    r.unwrap();
    assert_eq!(reached, total);
    assert_eq!(tx.finish().unwrap().bytes, total);
    assert_eq!(reader.join().unwrap(), total);
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
