//! The API end to end over TCP on 127.0.0.1: a sender thread and a receiver, both driven
//! through the exported functions only.

use super::*;
use crate::error::zcnet_status::*;
use crate::rx::*;
use crate::tx::*;
use std::ffi::CString;
use std::time::{Duration, Instant};

pub(super) fn ok(st: zcnet_status) {
    assert_eq!(st, ZCNET_OK, "{}", last_error());
}

/// Connects to 127.0.0.1:`port` and sends `total` bytes of the pattern for `seed`.
pub(super) fn send_pattern(
    port: u16,
    cfg: zcnet_tx_config,
    total: u64,
    seed: u64,
) -> zcnet_tx_stats {
    let addr = CString::new(format!("127.0.0.1:{port}")).unwrap();
    let (st, tx) = connect(addr.as_ptr(), Some(&cfg), ptr::null_mut());
    ok(st);
    let mut off = 0u64;
    while off < total {
        let mut b = zcnet_txbuf {
            data: ptr::null_mut(),
            capacity: 0,
            id: 0,
            reserved: 0,
        };
        // SAFETY: `tx` is live and used by this thread only; `b` is a local.
        ok(unsafe { zcnet_sender_buffer(tx, &mut b) });
        let n = b.capacity.min(total - off) as usize;
        // SAFETY: `b.data` points to `b.capacity` >= n writable bytes lent to this thread.
        ok(unsafe { crate::zcnet_pattern_fill(seed, off, b.data, n) });
        // SAFETY: `tx` is live; buffer `b.id` is lent.
        ok(unsafe { zcnet_sender_send(tx, b.id, n) });
        off += n as u64;
    }
    let mut stats = zcnet_tx_stats::default();
    // SAFETY: `tx` is live; `stats` is a local. Then freed once.
    unsafe {
        ok(zcnet_sender_finish(tx, &mut stats));
        zcnet_sender_free(tx);
    }
    stats
}

/// Receives one connection to its end with `zcnet_receiver_poll`, verifying every byte.
fn receive_verified(rx: *mut zcnet_receiver, seed: u64) -> u64 {
    let mut conn = 0u64;
    // SAFETY: `rx` is live on this thread; `conn` is a local.
    ok(unsafe { zcnet_receiver_accept(rx, &mut conn) });
    let pattern = zcnet::Pattern::new(seed);
    let mut evs = [zcnet_rx_event::default(); 3];
    let (mut got, deadline) = (0u64, Instant::now() + Duration::from_secs(60));
    'outer: while Instant::now() < deadline {
        let mut n = 0usize;
        // SAFETY: `evs` holds 3 writable events; `n` is a local.
        ok(unsafe { zcnet_receiver_poll(rx, evs.as_mut_ptr(), evs.len(), 100, &mut n) });
        for ev in &evs[..n] {
            assert_eq!(ev.conn, conn);
            match ev.kind {
                ZCNET_RX_DATA => {
                    assert!(!ev.data.is_null() && ev.len > 0);
                    // SAFETY: a DATA event's `data` holds `len` bytes until it is released.
                    let bytes = unsafe { std::slice::from_raw_parts(ev.data, ev.len as usize) };
                    pattern.verify(got, bytes).unwrap();
                    got += ev.len;
                    // SAFETY: `rx` is live; `ev.buf` is lent.
                    ok(unsafe { zcnet_receiver_release(rx, ev.buf) });
                }
                ZCNET_RX_EOF => break 'outer,
                _ => panic!("unexpected event {ev:?}"),
            }
        }
    }
    // SAFETY: `rx` is live; the connection is its own.
    ok(unsafe { zcnet_receiver_close(rx, conn) });
    got
}

fn stats_of(rx: *mut zcnet_receiver) -> zcnet_rx_stats {
    let mut s = zcnet_rx_stats::default();
    // SAFETY: `rx` is live on this thread; `s` is a local.
    ok(unsafe { zcnet_receiver_stats(rx, &mut s) });
    s
}

#[zcnet_testkit::test]
fn every_mode_pair_delivers_every_byte() {
    let total = (1 << 20) + 12_345;
    for (rx_mode, tx_mode) in [
        (ZCNET_RX_COPY, ZCNET_TX_COPY),
        (ZCNET_RX_URING, ZCNET_TX_MSG_ZEROCOPY),
        (ZCNET_RX_AUTO, ZCNET_TX_URING_ZC),
        (ZCNET_RX_COPY, ZCNET_TX_AUTO),
    ] {
        let cfg = zcnet_rx_config {
            mode: rx_mode,
            buffers: 8,
            buf_size: 8192,
            ..Default::default()
        };
        let (rx, port) = listening_receiver(&cfg);
        let tcfg = zcnet_tx_config {
            mode: tx_mode,
            inflight: 4,
            buf_size: 16 << 10,
            ..Default::default()
        };
        let sender = std::thread::spawn(move || send_pattern(port, tcfg, total, 9));
        let got = receive_verified(rx, 9);
        let ts = sender.join().unwrap();
        assert_eq!(got, total);
        assert_eq!(ts.bytes, total);
        assert_eq!(ts.zerocopy_bytes + ts.copied_bytes, ts.bytes, "{ts:?}");
        let rs = stats_of(rx);
        assert_eq!((rs.bytes, rs.held, rs.eofs), (total, 0, 1), "{rs:?}");
        assert_eq!(rs.copied_bytes + rs.zerocopy_bytes, rs.bytes);
        let mut name = ptr::null();
        // SAFETY: `rx` is live; `name` is a local.
        ok(unsafe { zcnet_receiver_mode(rx, &mut name) });
        // SAFETY: the mode's name is a static string.
        let name = unsafe { CStr::from_ptr(name) }.to_str().unwrap();
        assert!(["copy", "uring"].contains(&name), "{name}");
        free_receiver(rx);
    }
}

#[zcnet_testkit::test]
fn recv_stream_verifies_the_pattern() {
    let (rx, port) = listening_receiver(&zcnet_rx_config::default());
    let cfg = zcnet_tx_config::default();
    let sender = std::thread::spawn(move || send_pattern(port, cfg, 3 << 20, 5));
    let mut rep = zcnet_stream_report::default();
    // SAFETY: `rx` is live on this thread; `rep` is a local.
    ok(unsafe { zcnet_receiver_recv_stream(rx, 1, 5, &mut rep) });
    sender.join().unwrap();
    assert_eq!(
        (rep.bytes, rep.device_bytes, rep.stats.bytes),
        (3 << 20, 0, 3 << 20)
    );

    // The same stream checked against another seed fails at its first byte.
    let sender = std::thread::spawn(move || send_pattern(port, cfg, 1 << 16, 6));
    // SAFETY: as above.
    let st = unsafe { zcnet_receiver_recv_stream(rx, 1, 5, &mut rep) };
    let mut first = [0u8; 1];
    zcnet::Pattern::new(6).fill(0, &mut first);
    let got = format!("got {:#04x}", first[0]);
    assert_fails(
        st,
        ZCNET_E_DATA,
        &["mismatch at byte 0", &got, "pattern seed"],
    );
    free_receiver(rx);
    // The sender may see the reset or finish first; either way it ends.
    let _ = sender.join();
}

#[zcnet_testkit::test]
fn a_sender_refuses_misuse() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = CString::new(listener.local_addr().unwrap().to_string()).unwrap();
    let (st, region) = region(c"host", 1 << 20);
    ok(st);
    let cfg = zcnet_tx_config {
        mode: ZCNET_TX_COPY,
        inflight: 2,
        buf_size: 4096,
        ..Default::default()
    };
    let (st, tx) = connect(addr.as_ptr(), Some(&cfg), region);
    ok(st);
    let (st, again) = connect(addr.as_ptr(), Some(&cfg), region);
    assert_fails(
        st,
        ZCNET_E_INVALID,
        &["region was already given to a sender"],
    );
    assert!(again.is_null());
    let (_peer, _) = listener.accept().unwrap();
    let mut bufs = [zcnet_txbuf {
        data: ptr::null_mut(),
        capacity: 0,
        id: 0,
        reserved: 0,
    }; 2];
    // SAFETY: `tx` is live and used by this thread only; the out-pointers are locals.
    unsafe {
        ok(zcnet_sender_buffer(tx, &mut bufs[0]));
        ok(zcnet_sender_buffer(tx, &mut bufs[1]));
        assert_fails(
            zcnet_sender_buffer(tx, &mut bufs[1]),
            ZCNET_E_INVALID,
            &["every buffer is lent"],
        );
        let mut written = 0usize;
        ok(zcnet_sender_write(
            tx,
            bufs[0].id,
            b"hello".as_ptr(),
            5,
            &mut written,
        ));
        assert_eq!(written, 5);
        assert_eq!(std::slice::from_raw_parts(bufs[0].data, 5), b"hello");
        // Bytes inside the buffer itself are refused (the copy would alias), the buffer's own
        // and the one next to it alike.
        assert_fails(
            zcnet_sender_write(tx, bufs[0].id, bufs[0].data.add(1), 3, &mut written),
            ZCNET_E_INVALID,
            &["lies in buffer"],
        );
        assert_eq!(std::slice::from_raw_parts(bufs[0].data, 5), b"hello");
        assert_fails(
            zcnet_sender_send(tx, 7, 1),
            ZCNET_E_INVALID,
            &["buffer 7 is not lent"],
        );
        assert_fails(
            zcnet_sender_send(tx, bufs[1].id, 4097),
            ZCNET_E_INVALID,
            &["send"],
        );
        ok(zcnet_sender_send(tx, bufs[0].id, 5));
        assert_fails(
            zcnet_sender_send(tx, bufs[0].id, 5),
            ZCNET_E_INVALID,
            &["already sent"],
        );
        let mut stats = zcnet_tx_stats::default();
        ok(zcnet_sender_finish(tx, &mut stats));
        assert_eq!((stats.bytes, stats.copied_bytes), (5, 5));
        assert_fails(
            zcnet_sender_finish(tx, ptr::null_mut()),
            ZCNET_E_INVALID,
            &["finished"],
        );
        assert_fails(zcnet_sender_flush(tx), ZCNET_E_INVALID, &["finished"]);
        zcnet_sender_free(tx);
    }
    free_region(region);
}

/// A region smaller than the configuration needs is refused before any connection is made,
/// and stays the caller's to give again.
#[zcnet_testkit::test]
fn a_region_too_small_is_refused_before_connecting() {
    let (st, region) = region(c"host", 4096);
    ok(st);
    let cfg = zcnet_tx_config {
        mode: ZCNET_TX_COPY,
        inflight: 2,
        buf_size: 4096,
        ..Default::default()
    };
    // Nothing listens on port 1: a connection attempt would be refused instead.
    let (st, tx) = connect(c"127.0.0.1:1".as_ptr(), Some(&cfg), region);
    assert_fails(st, ZCNET_E_INVALID, &["4096"]);
    assert!(tx.is_null());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = CString::new(listener.local_addr().unwrap().to_string()).unwrap();
    let one = zcnet_tx_config { inflight: 1, ..cfg };
    let (st, tx) = connect(addr.as_ptr(), Some(&one), region);
    ok(st);
    // SAFETY: `tx` is the live sender just made, freed once.
    unsafe { zcnet_sender_free(tx) };
    free_region(region);
}

#[zcnet_testkit::test]
fn probe_json_is_the_report() {
    let mut json = ptr::null_mut();
    // SAFETY: NULL iface means every interface; `json` is a local.
    ok(unsafe { crate::probe::zcnet_probe_json(ptr::null(), 0, &mut json) });
    // SAFETY: `json` is the NUL-terminated string just returned, freed once below.
    let text = unsafe { CStr::from_ptr(json) }
        .to_str()
        .unwrap()
        .to_string();
    // SAFETY: as above.
    unsafe { crate::zcnet_string_free(json) };
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(v["kernel"]["release"].is_string(), "{text}");
    assert_eq!(v["active"], false);
    assert!(v["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .any(|i| i["name"] == "lo"));
    assert!(v["gpu"].is_object());
    // SAFETY: the interface name is a literal; `json` is a local.
    let st = unsafe { crate::probe::zcnet_probe_json(c"nope0".as_ptr(), 0, &mut json) };
    assert_fails(st, ZCNET_E_INVALID, &["no interface named 'nope0'"]);
    assert!(json.is_null());
}

#[zcnet_testkit::test]
fn failures_and_ends_become_events() {
    let mut rx = zcnet_receiver::new(None).unwrap();
    let e = zcnet::Error::PeerReset {
        accepted: 10,
        confirmed: 4,
    };
    let shown = e.to_string();
    let ev = rx.event(zcnet::RxEvent::Failed(zcnet::ConnId(3), e));
    assert_eq!(
        (ev.kind, ev.status, ev.conn, ev.buf),
        (ZCNET_RX_FAILED, ZCNET_E_CONNECTION, 3, 0)
    );
    assert!(ev.data.is_null());
    // SAFETY: a FAILED event's message lives until its connection is closed.
    let msg = unsafe { CStr::from_ptr(ev.error) }.to_str().unwrap();
    assert_eq!(msg, shown);
    rx.close(3);
    let ev = rx.event(zcnet::RxEvent::Eof(zcnet::ConnId(4)));
    assert_eq!((ev.kind, ev.status, ev.conn), (ZCNET_RX_EOF, ZCNET_OK, 4));
    assert!(ev.error.is_null() && ev.data.is_null());
    // Events of a connection closed before they were polled go with it: a failure polled after
    // the close would keep its message until the receiver is freed.
    let reset = || zcnet::Error::PeerReset {
        accepted: 1,
        confirmed: 1,
    };
    rx.queue(zcnet::RxEvent::Failed(zcnet::ConnId(5), reset()));
    rx.queue(zcnet::RxEvent::Eof(zcnet::ConnId(6)));
    rx.queue(zcnet::RxEvent::Failed(zcnet::ConnId(6), reset()));
    rx.close(6);
    let mut evs = [std::mem::MaybeUninit::uninit(); 4];
    assert_eq!(rx.poll(&mut evs, 0).unwrap(), 1);
    // SAFETY: poll wrote the first event.
    let ev = unsafe { evs[0].assume_init() };
    assert_eq!((ev.kind, ev.conn), (ZCNET_RX_FAILED, 5));
    assert_eq!(rx.failures_kept(), 1, "only connection 5's message is kept");
}

/// The caller's own memory sent without a copy into the sender's buffers
/// (`zcnet_sender_send_borrowed`), interleaved with region buffers, arrives verified in every
/// mode that takes it; msg-zerocopy refuses it in one line and sends nothing.
#[zcnet_testkit::test]
fn borrowed_memory_is_sent_as_it_is() {
    let total: u64 = (3 << 20) + 777;
    for mode in [
        ZCNET_TX_COPY,
        ZCNET_TX_URING,
        ZCNET_TX_URING_ZC,
        ZCNET_TX_AUTO,
    ] {
        let (rx, port) = listening_receiver(&zcnet_rx_config::default());
        let tcfg = zcnet_tx_config {
            mode,
            inflight: 4,
            buf_size: 64 << 10,
            ..Default::default()
        };
        let sender = std::thread::spawn(move || {
            let addr = CString::new(format!("127.0.0.1:{port}")).unwrap();
            let (st, tx) = connect(addr.as_ptr(), Some(&tcfg), ptr::null_mut());
            ok(st);
            // The caller's memory: the whole stream, sent in pieces of odd sizes, every
            // third piece through a region buffer instead.
            let mut mine = vec![0u8; total as usize];
            // SAFETY: `mine` holds `total` writable bytes.
            ok(unsafe { crate::zcnet_pattern_fill(4, 0, mine.as_mut_ptr(), mine.len()) });
            let (mut off, mut i) = (0usize, 0u32);
            while off < mine.len() {
                let n = (100_000 + 7_919 * i as usize).min(mine.len() - off);
                if i % 3 == 2 {
                    let mut b = zcnet_txbuf {
                        data: ptr::null_mut(),
                        capacity: 0,
                        id: 0,
                        reserved: 0,
                    };
                    // SAFETY: `tx` is live on this thread; `b` is a local.
                    ok(unsafe { zcnet_sender_buffer(tx, &mut b) });
                    let n = n.min(b.capacity as usize);
                    let mut w = 0usize;
                    // SAFETY: `mine[off..off + n]` is readable; `w` is a local.
                    ok(unsafe { zcnet_sender_write(tx, b.id, mine[off..].as_ptr(), n, &mut w) });
                    // SAFETY: buffer `b.id` is lent.
                    ok(unsafe { zcnet_sender_send(tx, b.id, w) });
                    off += w;
                } else {
                    // SAFETY: `mine` stays unchanged and alive until the finish below.
                    ok(unsafe { zcnet_sender_send_borrowed(tx, mine[off..].as_ptr(), n) });
                    off += n;
                }
                i += 1;
            }
            let mut stats = zcnet_tx_stats::default();
            // SAFETY: `tx` is live; `stats` is a local. Then freed once; `mine` outlives both.
            unsafe {
                ok(zcnet_sender_finish(tx, &mut stats));
                zcnet_sender_free(tx);
            }
            drop(mine);
            stats
        });
        let got = receive_verified(rx, 4);
        let ts = sender.join().unwrap();
        assert_eq!((got, ts.bytes), (total, total), "mode {mode:?}");
        assert_eq!(ts.zerocopy_bytes + ts.copied_bytes, ts.bytes, "{ts:?}");
        free_receiver(rx);
    }

    let (rx, port) = listening_receiver(&zcnet_rx_config::default());
    let tcfg = zcnet_tx_config {
        mode: ZCNET_TX_MSG_ZEROCOPY,
        ..Default::default()
    };
    let addr = CString::new(format!("127.0.0.1:{port}")).unwrap();
    let (st, tx) = connect(addr.as_ptr(), Some(&tcfg), ptr::null_mut());
    ok(st);
    let mine = [1u8; 100];
    // SAFETY: `tx` is live; `mine` is readable (and refused before use).
    let st = unsafe { zcnet_sender_send_borrowed(tx, mine.as_ptr(), mine.len()) };
    assert_ne!(st, ZCNET_OK);
    assert!(last_error().contains("lent memory"), "{}", last_error());
    // SAFETY: `tx` is live; NULL data is refused by name.
    let st = unsafe { zcnet_sender_send_borrowed(tx, ptr::null(), 5) };
    assert_ne!(st, ZCNET_OK);
    assert!(last_error().contains("data"), "{}", last_error());
    // SAFETY: `tx` is live; freed once.
    unsafe { zcnet_sender_free(tx) };
    free_receiver(rx);
}
