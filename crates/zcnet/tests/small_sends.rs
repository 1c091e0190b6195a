//! Small TCP sends with zero copy (issue 13, item 1): a window of zero-copy buffers smaller than
//! an MSS stalled on Nagle and the receiver's delayed ACK (about 1 MB/s at 4 KiB x 8), and `auto`
//! chose zero copy for sends too small to gain from it.

use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use zcnet::{Region, Sender, Socket, TxConfig, TxMode};

/// A sender with `mode`, `inflight` buffers of `size` bytes, to a loopback drain; sends 64
/// buffers and returns (TCP_NODELAY after setup, the stats, the note).
fn run(mode: TxMode, size: usize, inflight: usize) -> (bool, zcnet::TxStats, Option<String>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("listen");
    let addr = l.local_addr().expect("addr");
    let drain = std::thread::spawn(move || {
        std::io::copy(&mut l.accept().expect("accept").0, &mut std::io::sink()).expect("drain")
    });
    let mut cfg = TxConfig::new(mode);
    cfg.buf_size = size;
    cfg.inflight = inflight;
    let region = Region::anonymous(zcnet::tx::region_len(&cfg)).expect("region");
    let sock = Socket::from(TcpStream::connect(addr).expect("connect"));
    let mut tx = Sender::new(sock, region, &cfg).expect("sender");
    let nodelay = zcnet_sys::sock::nodelay(tx.socket().as_raw_fd()).expect("getsockopt");
    let note = tx.note().map(str::to_string);
    for _ in 0..64 {
        let mut b = tx.buffer().expect("buffer");
        b.write(&vec![7u8; size]).expect("write");
        tx.send(b, size).expect("send");
    }
    let st = tx.finish().expect("finish");
    assert_eq!(drain.join().expect("drain thread"), 64 * size as u64);
    (nodelay, st, note)
}

#[test]
fn a_small_zero_copy_window_turns_nagle_off_and_a_large_one_or_copy_leaves_it() {
    for mode in [TxMode::UringZc, TxMode::MsgZerocopy, TxMode::Auto] {
        assert!(
            run(mode, 4096, 8).0,
            "{mode:?} 4 KiB x 8 must not wait on Nagle"
        );
        assert!(
            !run(mode, 64 << 10, 8).0,
            "{mode:?} 512 KiB in flight keeps the socket as given"
        );
    }
    assert!(
        !run(TxMode::Copy, 4096, 8).0,
        "copy keeps the socket as given"
    );
}

#[test]
fn auto_copies_sends_too_small_to_gain_and_says_why() {
    let (_, st, note) = run(TxMode::Auto, 4096, 8);
    assert_eq!(st.notifications, 0, "no zero-copy send was made");
    assert_eq!(st.copied_bytes, 64 * 4096);
    let note = note.expect("a note");
    assert!(
        note.contains("auto: copying") && note.contains("16 KiB"),
        "{note}"
    );
    let (_, st, note) = run(TxMode::Auto, 64 << 10, 8);
    assert!(st.notifications > 0, "64 KiB sends start zero-copy");
    assert!(note.is_none_or(|n| !n.contains("auto: copying")));
}
