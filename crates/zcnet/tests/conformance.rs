//! The send conformance suite: the same scenarios against every backend, over loopback (no root
//! needed). The kernel's truth on loopback TCP is that it copies: every backend must say so.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use common::drain_stream;
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};
use zcnet::net::RecvReport;
use zcnet::{Cancel, Error, Pattern, Region, Sender, Socket, TxConfig, TxMode, TxStats};

/// Deterministic message sizes in 1..=max.
fn sizes(seed: u64, n: usize, max: usize) -> Vec<usize> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            1 + (s % max as u64) as usize
        })
        .collect()
}

fn sender(stream: TcpStream, mode: TxMode, buf_size: usize, inflight: usize) -> Sender {
    let mut cfg = TxConfig::new(mode);
    cfg.buf_size = buf_size;
    cfg.inflight = inflight;
    cfg.stall_timeout = Duration::from_secs(5);
    let region = Region::anonymous(zcnet::tx::region_len(&cfg)).unwrap();
    Sender::new(Socket::from(stream), region, &cfg).unwrap()
}

/// Sends `msgs` (sizes) of the pattern over a loopback TCP connection; the receiver verifies.
fn send_verified(
    mode: TxMode,
    seed: u64,
    msgs: &[usize],
    buf_size: usize,
) -> (TxStats, RecvReport) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let pattern = Pattern::new(seed);
    let rx = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        drain_stream(&mut s, Some(pattern))
    });
    let mut tx = sender(TcpStream::connect(addr).unwrap(), mode, buf_size, 8);
    let mut off = 0u64;
    for &n in msgs {
        let mut b = tx.buffer().unwrap();
        pattern.fill(off, &mut b.bytes_mut().unwrap()[..n]);
        tx.send(b, n).unwrap();
        off += n as u64;
    }
    assert!(tx.outstanding() <= tx.buffers());
    let st = tx.finish().unwrap();
    let rep = rx
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("{mode}: receiver: {e}"));
    assert_eq!(rep.bytes, off, "{mode}: receiver got every byte");
    (st, rep)
}

#[zcnet_testkit::test]
fn every_backend_moves_verified_data_over_loopback() {
    for mode in TxMode::ALL {
        let msgs = sizes(mode as u64 + 7, 1500, 65536);
        let total: u64 = msgs.iter().map(|&n| n as u64).sum();
        let (st, _) = send_verified(mode, 42 + mode as u64, &msgs, 65536);
        assert_eq!(st.bytes, total, "{mode}: bytes accepted");
        assert_eq!(
            st.zerocopy_bytes + st.copied_bytes,
            st.bytes,
            "{mode}: every byte confirmed after finish"
        );
        assert_eq!(
            st.zerocopy_bytes, 0,
            "{mode}: loopback TCP is always copied by the kernel"
        );
        assert_eq!(
            st.unknown_completions, 0,
            "{mode}: id sequence in step with the kernel"
        );
        match mode {
            TxMode::MsgZerocopy | TxMode::UringZc => {
                assert!(st.notifications > 0, "{mode}: notifications counted");
                assert_eq!(
                    st.copied_notifications, st.notifications,
                    "{mode}: every notification said COPIED"
                );
            }
            TxMode::Copy | TxMode::Uring => {
                assert_eq!(st.notifications, 0, "{mode}: no notifications")
            }
            TxMode::Auto => {}
            TxMode::Devmem => unreachable!("devmem is not in TxMode::ALL"),
        }
        assert!(
            st.sends >= msgs.len() as u64,
            "{mode}: at least one send per message"
        );
    }
}

#[zcnet_testkit::test]
fn tiny_and_odd_sizes_stay_in_order() {
    // Many small sends keep several linked io_uring chains in flight: ordering must hold.
    for mode in TxMode::ALL {
        let msgs = sizes(99, 4000, 700);
        send_verified(mode, 5, &msgs, 1024);
    }
}

#[zcnet_testkit::test]
fn auto_switches_to_copy_when_the_kernel_copies() {
    let msgs = vec![16384; 3000];
    let (st, _) = send_verified(TxMode::Auto, 3, &msgs, 16384);
    let first = st
        .switches
        .first()
        .expect("auto must switch on loopback, where every notification says COPIED");
    assert_eq!(first.to, zcnet_core::Mode::Copy);
    assert!(first.copied * 2 > first.of);
    assert_eq!(st.zerocopy_bytes, 0);
}

#[zcnet_testkit::test]
fn peer_reset_mid_stream_is_reported_with_confirmed_bytes() {
    for mode in TxMode::ALL {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let rx = thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = vec![0u8; 1 << 16];
            let mut got = 0;
            while got < (1 << 20) {
                got += std::io::Read::read(&mut s, &mut buf).unwrap();
            }
            thread::sleep(Duration::from_millis(50));
            // Closing with unread data in the receive queue sends a RST (RFC 2525 2.17).
            drop(s);
        });
        let mut tx = sender(TcpStream::connect(addr).unwrap(), mode, 65536, 8);
        let mut err = None;
        for _ in 0..200_000 {
            let r = tx.buffer().and_then(|b| tx.send(b, 65536));
            if let Err(e) = r {
                err = Some(e);
                break;
            }
        }
        rx.join().unwrap();
        match err {
            Some(Error::PeerReset {
                accepted,
                confirmed,
            }) => {
                assert!(accepted >= 1 << 20, "{mode}: accepted {accepted}");
                assert!(confirmed <= accepted, "{mode}");
            }
            other => panic!("{mode}: expected PeerReset, got {other:?}"),
        }
        assert!(Error::PeerReset {
            accepted: 5,
            confirmed: 3
        }
        .to_string()
        .contains("3 B confirmed"));
        // Every buffer comes back after the error: sends staged behind the failure never go
        // (their buffers are released with it), and what the kernel held it lets go of once
        // the reset frees the socket's queue.
        let t0 = Instant::now();
        let mut back = Vec::new();
        while back.len() < tx.buffers() && t0.elapsed() < Duration::from_secs(3) {
            match tx.try_buffer() {
                Ok(Some(b)) => back.push(b),
                Ok(None) => thread::sleep(Duration::from_millis(1)),
                Err(e) => panic!("{mode}: try_buffer after the reset: {e}"),
            }
        }
        assert_eq!(
            (back.len(), tx.outstanding()),
            (tx.buffers(), 0),
            "{mode}: buffers back after the reset"
        );
        // Dropping after the error must not hang or leak: every buffer is accounted for.
        drop(back);
        drop(tx);
    }
}

/// A peer that stops reading: every mode gives up with `Stalled` after its stall timeout, the
/// copying modes too (their blocking send() returns every 100 ms without room, SO_SNDTIMEO),
/// instead of blocking for good; the message says what is stuck.
#[zcnet_testkit::test(timeout = 120)]
fn every_mode_meets_the_stall_timeout_when_the_peer_stops_reading() {
    for mode in TxMode::ALL {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (idle, _) = listener.accept().unwrap();
        let mut cfg = TxConfig::new(mode);
        cfg.stall_timeout = Duration::from_secs(1);
        let region = Region::anonymous(zcnet::tx::region_len(&cfg)).unwrap();
        let mut tx = Sender::new(Socket::from(stream), region, &cfg).unwrap();
        let t0 = Instant::now();
        let e = loop {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "{mode}: still sending to a peer that does not read"
            );
            match tx.buffer() {
                Ok(b) => {
                    let len = b.capacity();
                    if let Err(e) = tx.send(b, len) {
                        break e;
                    }
                }
                Err(e) => break e,
            }
        };
        let took = t0.elapsed();
        assert!(matches!(e, Error::Stalled { .. }), "{mode}: {e}");
        assert!(e.to_string().contains("is the receiver reading?"), "{e}");
        assert!(
            took < Duration::from_secs(10),
            "{mode}: stalled after {took:?}"
        );
        drop(tx);
        drop(idle);
    }
}

/// io_uring cancels the requests of a thread that exits. A sender whose sends were queued by
/// a thread that then exited, before the peer could take them, must not lose them quietly:
/// the flush that follows (on another thread) fails, and every buffer is back.
#[zcnet_testkit::test(timeout = 60)]
fn sends_cancelled_by_their_threads_exit_are_an_error_not_a_silent_loss() {
    for mode in [TxMode::Uring, TxMode::UringZc] {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut peer, _) = listener.accept().unwrap();
        // 8 sends of 4 MiB: more than the socket buffers hold while the peer does not read.
        let tx = sender(stream, mode, 4 << 20, 8);
        let mut tx = thread::spawn(move || {
            let mut tx = tx;
            for _ in 0..8 {
                let b = tx.buffer().unwrap();
                let n = b.capacity();
                tx.send(b, n).unwrap();
            }
            tx.submit().unwrap();
            thread::sleep(Duration::from_millis(100));
            tx
        })
        .join()
        .unwrap();
        let reader = thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 20];
            let mut got = 0u64;
            peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            while let Ok(n @ 1..) = std::io::Read::read(&mut peer, &mut buf) {
                got += n as u64;
            }
            got
        });
        let flushed = tx.flush();
        // What the kernel still holds (a zero-copy buffer until its notification) comes back.
        let t0 = Instant::now();
        while tx.outstanding() > 0 && t0.elapsed() < Duration::from_secs(10) {
            tx.submit().unwrap();
            thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(tx.outstanding(), 0, "{mode}: every buffer is back");
        drop(tx);
        let got = reader.join().unwrap();
        if got < 8 * (4 << 20) {
            let e = flushed.expect_err("bytes were lost and the flush said nothing");
            eprintln!("{mode}: the peer got {got} B; the flush: {e}");
            // Not a reset: the peer never reset anything. The message says what happened.
            assert!(e.to_string().contains("a thread that exits"), "{mode}: {e}");
        }
    }
}

#[zcnet_testkit::test]
fn refused_connection_says_so() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    match zcnet::net::connect_tcp(addr, &Cancel::new()) {
        Err(Error::ConnectionRefused { addr: a }) => assert_eq!(a, addr),
        other => panic!("expected ConnectionRefused, got {other:?}"),
    }
}

#[zcnet_testkit::test]
fn bad_input_is_one_line_with_the_fix() {
    let e = TxMode::parse("zerocopy").unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("unknown send mode 'zerocopy'") && msg.contains("uring-zc"),
        "{msg}"
    );
    assert!(!msg.contains('\n'));
    assert!(matches!(
        zcnet::net::parse_addr("nohost"),
        Err(Error::BadAddress { .. })
    ));
    // An unknown bench path is zcnet-tools' to refuse: its tests/lab.rs checks it.
}

/// Sizes whose arithmetic would wrap are refused, never a division by a wrapped stride.
#[zcnet_testkit::test]
fn sizes_past_the_address_space_are_refused_not_wrapped() {
    let mut cfg = TxConfig::new(TxMode::Copy);
    cfg.buf_size = usize::MAX;
    assert_eq!(zcnet::tx::buffer_stride(usize::MAX), usize::MAX);
    assert_eq!(zcnet::tx::region_len(&cfg), usize::MAX);
    cfg.buf_size = 1 << 40;
    cfg.inflight = u32::MAX as usize;
    assert_eq!(zcnet::tx::region_len(&cfg), usize::MAX, "saturates");
    for buf_size in [usize::MAX, u32::MAX as usize + 1] {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let mut cfg = TxConfig::new(TxMode::Copy);
        cfg.buf_size = buf_size;
        let region = Region::anonymous(1 << 20).unwrap();
        let e = Sender::new(Socket::from(s), region, &cfg).unwrap_err();
        assert!(e.to_string().contains("buffer size"), "{e}");
    }
}

#[zcnet_testkit::test]
fn region_too_small_is_refused_before_anything_is_registered() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let mut cfg = TxConfig::new(TxMode::UringZc);
    cfg.inflight = 4;
    cfg.buf_size = 8192;
    let region = Region::anonymous(8192).unwrap();
    match Sender::new(Socket::from(s), region, &cfg) {
        Err(Error::RegionTooSmall { need, have }) => assert!(need > have),
        other => panic!("expected RegionTooSmall, got {other:?}"),
    }
}

#[zcnet_testkit::test]
fn huge_pages_fall_back_to_thp_and_say_so() {
    let free = std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(0);
    if free > 0 {
        zcnet_testkit::skip(
            zcnet_testkit::Need::Hardware,
            format!("{free} huge pages are free here, the no-huge-pages path cannot be exercised"),
        );
    }
    match Region::huge_strict(4 << 20) {
        Err(Error::NoHugePages { pages: 2 }) => {}
        other => panic!("expected NoHugePages{{2}}, got {other:?}"),
    }
    let r = Region::huge(4 << 20).unwrap();
    assert_eq!(r.backing(), zcnet_sys::mem::Backing::TransparentHuge);
    assert!(r.note().unwrap().contains("transparent huge pages"));
}

/// `MemoryKind::Auto` for a sender: transparent huge pages for msg-zerocopy (verified data
/// sent from them), 4 KiB pages for every other mode (a SEND_ZC from a huge page is charged to
/// the socket buffers as if it spanned the page: see `Region::for_sender`), and for a region
/// made without a mode.
#[zcnet_testkit::test]
fn auto_memory_is_huge_pages_for_msg_zerocopy_only() {
    use zcnet_sys::mem::Backing;
    let thp =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if thp.is_empty() || thp.contains("[never]") {
        zcnet_testkit::skip(
            zcnet_testkit::Need::Kernel,
            format!("transparent huge pages are off here ({})", thp.trim()),
        );
    }
    let auto = zcnet::MemoryKind::Auto;
    assert_eq!(
        Region::new(auto, 600 << 10).unwrap().backing(),
        Backing::Anonymous
    );
    for mode in TxMode::ALL {
        let mut cfg = TxConfig::new(mode);
        cfg.buf_size = 64 << 10;
        cfg.stall_timeout = Duration::from_secs(5);
        let region = Region::for_sender(auto, &cfg).unwrap();
        if mode != TxMode::MsgZerocopy {
            assert_eq!(region.backing(), Backing::Anonymous, "{mode}");
            continue;
        }
        assert_eq!(region.backing(), Backing::TransparentHuge);
        assert_eq!(region.len() % (2 << 20), 0);
        assert!(region.note().is_none(), "{:?}", region.note());
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let rx = thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            drain_stream(&mut s, Some(Pattern::new(5))).unwrap()
        });
        let mut tx = Sender::new(
            Socket::from(TcpStream::connect(addr).unwrap()),
            region,
            &cfg,
        )
        .unwrap();
        let mut off = 0u64;
        for i in 0..200usize {
            let n = 1 + (i * 7919) % (64 << 10);
            let mut b = tx.buffer().unwrap();
            Pattern::new(5).fill(off, &mut b.bytes_mut().unwrap()[..n]);
            tx.send(b, n).unwrap();
            off += n as u64;
        }
        let st = tx.finish().unwrap();
        assert_eq!(rx.join().unwrap().bytes, off, "{mode}");
        assert_eq!(st.bytes, off, "{mode}");
    }
}

/// A zero-copy io_uring sender on huge pages says what the kernel's accounting does to it
/// (`Sender::note`); the other cases say nothing about it.
#[zcnet_testkit::test]
fn uring_zc_on_huge_pages_says_so() {
    let note_of = |mode: TxMode, huge: bool| {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let mut cfg = TxConfig::new(mode);
        cfg.buf_size = 64 << 10;
        let len = zcnet::tx::region_len(&cfg);
        let region = if huge {
            Region::huge(len).unwrap()
        } else {
            Region::anonymous(len).unwrap()
        };
        let tx = Sender::new(Socket::from(s), region, &cfg).unwrap();
        tx.note().map(|n| n.to_string()).unwrap_or_default()
    };
    const SAYS: &str = "SEND_ZC from huge pages";
    for mode in [TxMode::UringZc, TxMode::Auto] {
        let n = note_of(mode, true);
        assert!(
            n.contains(SAYS) && n.contains("MemoryKind::Anonymous"),
            "{mode}: {n}"
        );
        assert!(!n.contains("--"), "{n}");
        assert!(!note_of(mode, false).contains(SAYS), "{mode}");
    }
    for mode in [TxMode::MsgZerocopy, TxMode::Uring, TxMode::Copy] {
        assert!(!note_of(mode, true).contains(SAYS), "{mode}");
    }
}

#[zcnet_testkit::test]
fn caller_memory_region_sends() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let rx = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        drain_stream(&mut s, Some(Pattern::new(11))).unwrap()
    });
    let mut cfg = TxConfig::new(TxMode::UringZc);
    cfg.buf_size = 4096;
    cfg.inflight = 2;
    let region = Region::from_boxed(vec![0u8; 2 * 4096].into_boxed_slice()).unwrap();
    let mut tx = Sender::new(
        Socket::from(TcpStream::connect(addr).unwrap()),
        region,
        &cfg,
    )
    .unwrap();
    for i in 0..100u64 {
        let mut b = tx.buffer().unwrap();
        Pattern::new(11).fill(i * 4096, b.bytes_mut().unwrap());
        tx.send(b, 4096).unwrap();
    }
    let st = tx.finish().unwrap();
    assert_eq!(rx.join().unwrap().bytes, 409_600);
    assert_eq!(st.bytes, 409_600);
}

/// Owned and borrowed memory through the same engine: region buffers and lent memory
/// (`Sender::send_lent`) interleaved on one connection, verified byte for byte by the receiver;
/// the sender holds each lent `Arc` until the kernel is done with it (so it is unique again
/// after `finish`, and not before the sender reaped its completion), and the accounting covers
/// both. `msg-zerocopy` sends only from its region and says so.
#[zcnet_testkit::test]
fn lent_memory_goes_through_the_same_engine_as_region_buffers() {
    use std::sync::Arc;
    use zcnet::engine::ForeignBuf;
    for mode in TxMode::ALL {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let pattern = Pattern::new(77 + mode as u64);
        let rx = thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            drain_stream(&mut s, Some(pattern))
        });
        let mut tx = sender(TcpStream::connect(addr).unwrap(), mode, 65536, 8);
        let msgs = sizes(mode as u64 + 3, 400, 65536);
        let mut off = 0u64;
        let mut lent = Vec::new();
        let mut refused = false;
        for (i, &n) in msgs.iter().enumerate() {
            if i % 2 == 0 {
                let mut b = tx.buffer().unwrap();
                pattern.fill(off, &mut b.bytes_mut().unwrap()[..n]);
                tx.send(b, n).unwrap();
            } else {
                // Lent at an offset: 3 bytes of something else before the payload.
                let mut bytes = vec![0xeeu8; n + 3];
                pattern.fill(off, &mut bytes[3..]);
                let buf = Arc::new(ForeignBuf::owned(bytes.into_boxed_slice()));
                match tx.send_lent(Arc::clone(&buf), 3, n) {
                    Ok(()) => {}
                    Err(Error::Unsupported { what, .. }) if mode == TxMode::MsgZerocopy => {
                        assert!(what.contains("lent memory"), "{what}");
                        assert_eq!(Arc::strong_count(&buf), 1, "refused: not kept");
                        refused = true;
                        break;
                    }
                    Err(e) => panic!("{mode}: send_lent: {e}"),
                }
                if matches!(mode, TxMode::Uring | TxMode::UringZc) && i == 1 {
                    assert_eq!(
                        Arc::strong_count(&buf),
                        2,
                        "{mode}: the sender holds lent memory until its completion is reaped"
                    );
                }
                if mode == TxMode::Copy {
                    // The Python binding's in-place copy sends rely on this.
                    assert_eq!(
                        Arc::strong_count(&buf),
                        1,
                        "copy: lent memory is let go inside send_lent"
                    );
                }
                lent.push(buf);
            }
            off += n as u64;
        }
        assert_eq!(refused, mode == TxMode::MsgZerocopy, "{mode}");
        if refused {
            drop(tx);
            let _ = rx.join();
            continue;
        }
        let st = tx.finish().unwrap();
        let rep = rx
            .join()
            .unwrap()
            .unwrap_or_else(|e| panic!("{mode}: receiver: {e}"));
        assert_eq!(rep.bytes, off, "{mode}: receiver got every byte, in order");
        assert_eq!(st.bytes, off, "{mode}: bytes accepted");
        assert_eq!(
            st.zerocopy_bytes + st.copied_bytes,
            st.bytes,
            "{mode}: every byte confirmed, lent or not"
        );
        assert_eq!(st.zerocopy_bytes, 0, "{mode}: loopback copies");
        for b in &lent {
            assert_eq!(Arc::strong_count(b), 1, "{mode}: lent memory given back");
        }
    }
}

/// Bytes outside the lent memory are refused before anything is sent.
#[zcnet_testkit::test]
fn lent_bytes_outside_the_memory_are_refused() {
    use std::sync::Arc;
    use zcnet::engine::ForeignBuf;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut tx = sender(
        TcpStream::connect(listener.local_addr().unwrap()).unwrap(),
        TxMode::UringZc,
        4096,
        2,
    );
    let buf = Arc::new(ForeignBuf::owned(vec![1u8; 100].into_boxed_slice()));
    let e = tx
        .send_lent(Arc::clone(&buf), 50, 51)
        .unwrap_err()
        .to_string();
    assert!(e.contains("outside the lent memory"), "{e}");
    assert!(tx.send_lent(Arc::clone(&buf), usize::MAX, 2).is_err());
    assert_eq!(Arc::strong_count(&buf), 1);
    assert_eq!(tx.finish().unwrap().bytes, 0);
}

zcnet_testkit::main!();
