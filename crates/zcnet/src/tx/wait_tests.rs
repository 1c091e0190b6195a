//! Waits with a deadline ([`Sender::buffer_until`], [`Sender::flush_until`]), on every mode
//! that holds buffers in the kernel, against a peer that stops reading and then reads again:
//! a slice ends at its deadline with nothing, the stall timeout runs over the slices as over
//! one blocking wait, and what the peer takes comes back through the same calls.

use super::*;
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

fn sender(mode: TxMode, stall: Duration) -> Option<(Sender, TcpStream)> {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let stream = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
    let (peer, _) = l.accept().expect("accept");
    let mut cfg = TxConfig::new(mode);
    cfg.stall_timeout = stall;
    let region = Region::anonymous(region_len(&cfg)).expect("region");
    match Sender::new(Socket::from(stream), region, &cfg) {
        Ok(tx) => Some((tx, peer)),
        Err(e @ (Error::Unsupported { .. } | Error::MemlockTooSmall { .. })) => {
            eprintln!("{mode}: not here: {e}");
            None
        }
        Err(e) => panic!("{mode}: {e}"),
    }
}

/// Sends whole buffers until one does not come back within 50 ms: every buffer is then in the
/// kernel, held by the silent peer.
fn fill(tx: &mut Sender, mode: TxMode) {
    let t0 = Instant::now();
    loop {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{mode}: never filled"
        );
        match tx.buffer_until(Instant::now() + Duration::from_millis(50)) {
            Ok(Some(b)) => {
                let n = b.capacity();
                tx.send(b, n)
                    .unwrap_or_else(|e| panic!("{mode}: send: {e}"));
            }
            Ok(None) => return,
            Err(e) => panic!("{mode}: {e}"),
        }
    }
}

#[zcnet_testkit::test(timeout = 120)]
fn a_wait_with_a_deadline_ends_there_and_stalls_over_its_slices() {
    let mut ran = 0;
    for mode in [
        TxMode::MsgZerocopy,
        TxMode::Uring,
        TxMode::UringZc,
        TxMode::Auto,
    ] {
        let Some((mut tx, mut peer)) = sender(mode, Duration::from_millis(600)) else {
            continue;
        };
        ran += 1;
        fill(&mut tx, mode);
        assert!(tx.outstanding() > 0, "{mode}");
        // One slice: nothing, at its deadline.
        let t = Instant::now();
        let got = tx
            .buffer_until(t + Duration::from_millis(30))
            .expect("a slice");
        let took = t.elapsed();
        assert!(got.is_none(), "{mode}: a buffer from a silent peer");
        assert!(
            took >= Duration::from_millis(25) && took < Duration::from_millis(500),
            "{mode}: a 30 ms slice took {took:?}"
        );
        assert!(!tx
            .flush_until(Instant::now() + Duration::from_millis(20))
            .expect("flush slice"));
        // Slices of 30 ms meet the 600 ms stall timeout, as one blocking wait would.
        let t = Instant::now();
        let e = loop {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "{mode}: never stalled"
            );
            match tx.buffer_until(Instant::now() + Duration::from_millis(30)) {
                Ok(None) => {}
                Ok(Some(_)) => panic!("{mode}: a buffer from a silent peer"),
                Err(e) => break e,
            }
        };
        assert!(matches!(e, Error::Stalled { .. }), "{mode}: {e}");
        // The peer reads: the buffers come back through the same calls, and the flush ends.
        let reader = std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 20];
            let mut total = 0u64;
            while let Ok(n) = peer.read(&mut buf) {
                if n == 0 {
                    break;
                }
                total += n as u64;
            }
            total
        });
        let t = Instant::now();
        let mut flushed = false;
        while !flushed {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "{mode}: never flushed"
            );
            flushed = tx
                .flush_until(Instant::now() + Duration::from_millis(30))
                .expect("flush");
        }
        let b = tx
            .buffer_until(Instant::now() + Duration::from_millis(30))
            .expect("a buffer");
        assert!(b.is_some(), "{mode}: every buffer is back");
        drop(b);
        let sent = tx.finish().expect("finish").bytes;
        assert_eq!(reader.join().expect("reader"), sent, "{mode}");
    }
    assert!(ran > 0, "no mode could be made here");
}

#[zcnet_testkit::test]
fn with_nothing_in_flight_a_deadline_wait_returns_at_once() {
    let Some((mut tx, _peer)) = sender(TxMode::Uring, Duration::from_secs(5)) else {
        zcnet_testkit::skip(zcnet_testkit::Need::Kernel, "io_uring");
    };
    let t = Instant::now();
    assert!(tx.flush_until(t + Duration::from_secs(5)).expect("flush"));
    let b = tx.buffer_until(t + Duration::from_secs(5)).expect("buffer");
    assert!(b.is_some());
    assert!(t.elapsed() < Duration::from_millis(500));
}
