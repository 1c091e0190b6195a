//! Small TCP sends with zero copy: a window of zero-copy buffers smaller than
//! an MSS stalled on Nagle and the receiver's delayed ACK (about 1 MB/s at 4 KiB x 8), and `auto`
//! chose zero copy for sends too small to gain from it. The window is now sized in bytes
//! (`TxConfig::window`, 512 KiB by default) as well as in buffers.
// A failed unwrap is a failed test (clippy's allow-unwrap-in-tests sees only libtest's #[test]).
#![allow(clippy::unwrap_used)]

mod common;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use zcnet::{Region, Sender, Socket, TxConfig, TxMode};

struct Run {
    nodelay: bool,
    buffers: usize,
    st: zcnet::TxStats,
    note: Option<String>,
}

/// A sender with `mode`, `inflight` buffers and a `window` of `size` bytes, to a loopback
/// drain, in a region of `region_buffers` buffers (None: `region_len`); sends 64 buffers.
fn run_in(
    mode: TxMode,
    size: usize,
    inflight: usize,
    window: usize,
    region_buffers: Option<usize>,
) -> Run {
    let l = TcpListener::bind("127.0.0.1:0").expect("listen");
    let addr = l.local_addr().expect("addr");
    let drain = std::thread::spawn(move || {
        std::io::copy(&mut l.accept().expect("accept").0, &mut std::io::sink()).expect("drain")
    });
    let mut cfg = TxConfig::new(mode);
    cfg.buf_size = size;
    cfg.inflight = inflight;
    cfg.window = window;
    let len = region_buffers.map_or(zcnet::tx::region_len(&cfg), |n| {
        n * zcnet::tx::buffer_stride(size)
    });
    let region = Region::anonymous(len).expect("region");
    let sock = Socket::from(TcpStream::connect(addr).expect("connect"));
    let mut tx = Sender::new(sock, region, &cfg).expect("sender");
    let nodelay = zcnet_sys::sock::nodelay(tx.socket().as_raw_fd()).expect("getsockopt");
    let note = tx.note().map(|n| n.to_string());
    let buffers = tx.buffers();
    for _ in 0..64 {
        let mut b = tx.buffer().expect("buffer");
        b.write(&vec![7u8; size]).expect("write");
        tx.send(b, size).expect("send");
    }
    let st = tx.finish().expect("finish");
    assert_eq!(drain.join().expect("drain thread"), 64 * size as u64);
    Run {
        nodelay,
        buffers,
        st,
        note,
    }
}

/// [`run_in`] with exactly `inflight` buffers (no window).
fn run(mode: TxMode, size: usize, inflight: usize) -> Run {
    run_in(mode, size, inflight, 0, None)
}

#[zcnet_testkit::test]
fn the_window_in_bytes_gives_small_sends_more_buffers() {
    let d = zcnet::tx::DEFAULT_WINDOW;
    for mode in [TxMode::UringZc, TxMode::MsgZerocopy, TxMode::Copy] {
        let r = run_in(mode, 4096, 8, d, None);
        assert_eq!(r.buffers, d / 4096, "{mode:?}: 4 KiB sends fill the window");
        assert!(
            !r.nodelay,
            "{mode:?}: a 512 KiB window needs no TCP_NODELAY"
        );
        assert_eq!(run_in(mode, 64 << 10, 8, d, None).buffers, 8);
        // More buffers than the window asks for stay.
        assert_eq!(run_in(mode, 4096, 200, d, None).buffers, 200);
    }
    // A region sized for `inflight` alone (as callers did before the window) still works: the
    // window's extra buffers are taken as far as the region holds them.
    let r = run_in(TxMode::UringZc, 4096, 8, d, Some(8));
    assert_eq!(r.buffers, 8);
    assert!(r.nodelay, "32 KiB of zero copy in flight needs TCP_NODELAY");
    assert_eq!(run_in(TxMode::UringZc, 4096, 8, d, Some(20)).buffers, 20);
    // Tiny sends: the window adds at most MAX_WINDOW_BUFFERS.
    let mut cfg = TxConfig::new(TxMode::UringZc);
    cfg.buf_size = 1;
    assert_eq!(cfg.buffers(), zcnet::tx::MAX_WINDOW_BUFFERS);
}

#[zcnet_testkit::test]
fn a_small_zero_copy_window_turns_nagle_off_and_a_large_one_or_copy_leaves_it() {
    for mode in [TxMode::UringZc, TxMode::MsgZerocopy] {
        assert!(
            run(mode, 4096, 8).nodelay,
            "{mode:?} 4 KiB x 8 must not wait on Nagle"
        );
        assert!(
            !run(mode, 64 << 10, 8).nodelay,
            "{mode:?} 512 KiB in flight keeps the socket as given"
        );
    }
    assert!(
        !run(TxMode::Copy, 4096, 8).nodelay,
        "copy keeps the socket as given"
    );
    assert!(
        !run(TxMode::Auto, 4096, 8).nodelay,
        "auto copies 4 KiB sends, and so keeps the socket as given"
    );
}

#[zcnet_testkit::test]
fn auto_copies_sends_too_small_to_gain_and_says_why() {
    let Run { st, note, .. } = run(TxMode::Auto, 4096, 8);
    assert_eq!(st.notifications, 0, "no zero-copy send was made");
    assert_eq!(st.copied_bytes, 64 * 4096);
    let note = note.expect("a note");
    assert!(
        note.contains("auto: copying") && note.contains("16 KiB"),
        "{note}"
    );
    let Run { st, note, .. } = run(TxMode::Auto, 64 << 10, 8);
    assert!(st.notifications > 0, "64 KiB sends start zero-copy");
    assert!(note.is_none_or(|n| !n.contains("auto: copying")));
}

#[zcnet_testkit::test]
fn zero_copy_sends_of_two_segments_or_more_turn_nagle_off() {
    use zcnet::tx::zero_copy_wants_nodelay as wants;
    let w = zcnet::tx::DEFAULT_WINDOW;
    // veth (segments of 1,448 B): 4 KiB is two and more; loopback (65,484 B): 64 KiB is not.
    assert!(wants(TxMode::UringZc, 4096, w, Some(1448)));
    assert!(wants(TxMode::MsgZerocopy, 2896, w, Some(1448)));
    assert!(!wants(TxMode::MsgZerocopy, 2895, w, Some(1448)));
    assert!(!wants(TxMode::UringZc, 64 << 10, w, Some(65_484)));
    assert!(!wants(TxMode::Copy, 64 << 10, w, Some(1448)));
    assert!(!wants(TxMode::UringZc, 64 << 10, w, None));
    assert!(wants(TxMode::UringZc, 4096, 32 << 10, None), "small window");

    // On a real 1500-byte path: the lab's veth pair.
    let (_lab, p) = common::veth_lab();
    let l = common::in_ns(&p.b, || {
        TcpListener::bind(SocketAddr::new(p.b_addr, 0)).unwrap()
    });
    let addr = l.local_addr().unwrap();
    let drain = std::thread::spawn(move || {
        for _ in 0..3 {
            let (mut s, _) = l.accept().unwrap();
            std::io::copy(&mut s, &mut std::io::sink()).unwrap();
        }
    });
    for (mode, size, want) in [
        (TxMode::UringZc, 16 << 10, true),
        (TxMode::MsgZerocopy, 64 << 10, true),
        (TxMode::Copy, 64 << 10, false),
    ] {
        let nodelay = common::in_ns(&p.a, || {
            let mut cfg = TxConfig::new(mode);
            cfg.buf_size = size;
            let region = Region::anonymous(zcnet::tx::region_len(&cfg)).unwrap();
            let sock = Socket::from(TcpStream::connect(addr).unwrap());
            let seg = zcnet::tx::path_segment(sock.as_raw_fd());
            assert_eq!(seg, Some(1448), "a 1500-byte path");
            let mut tx = Sender::new(sock, region, &cfg).unwrap();
            let nodelay = zcnet_sys::sock::nodelay(tx.socket().as_raw_fd()).unwrap();
            let b = tx.buffer().unwrap();
            tx.send(b, size).unwrap();
            tx.finish().unwrap();
            nodelay
        });
        assert_eq!(nodelay, want, "{mode:?} {size} B over veth");
    }
    drain.join().unwrap();
}

zcnet_testkit::main!();
