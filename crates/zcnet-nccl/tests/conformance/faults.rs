//! Faults and bad input through the v12 and v9 tables: each gives its ncclResult (invalid
//! argument 4, invalid usage 5, system error 2, remote error 6) and nothing hangs. A peer that
//! dies is a child process (this binary, `ZCNET_NCCL_ROLE=recv-then-hang` or
//! `send-then-hang`) killed with SIGKILL.

use super::*;
use nccl_net_zcnet::handle::{Handle, Hello};
use std::net::TcpStream;

pub fn all() {
    bad_arguments();
    garbage_on_a_data_socket_is_a_remote_error();
    closing_one_side_mid_transfer_fails_the_other();
    a_receiver_killed_mid_transfer_fails_the_sender();
    a_sender_killed_mid_message_fails_the_receiver();
    a_send_closed_mid_transfer_counts_every_accepted_byte();
}

/// Child (`send-abandon`; ZCNET_NCCL_TX and ZCNET_NCCL_STATS from the parent): a 64 MiB send
/// to a receiver that posts one receive and hangs, pushed along until some of it is in flight,
/// then the send comm closed mid-transfer (the stats file is written at that close).
pub fn send_abandon() -> ! {
    let t = load(12);
    let ctx = init(&t);
    let (mut c, s, req, big) = a_send_to_a_hung_receiver(&t, ctx, 5);
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(300) {
        let mut sz = [0 as c_int; 1];
        let _ = t.test(req, &mut sz);
    }
    assert_eq!(t.close_send(s), 0, "closeSend mid-transfer");
    kill9(&mut c);
    drop(big);
    println!("OK");
    std::process::exit(0)
}

/// A receiver child (`recv-then-hang`: one receive posted, then nothing) connected to, with a
/// 64 MiB send of `byte`s queued to it: the child, the send comm, the request, and the buffer,
/// which must outlive the request.
fn a_send_to_a_hung_receiver(t: &Table, ctx: P, byte: u8) -> (std::process::Child, P, P, Vec<u8>) {
    let mut c = receiver_command("recv-then-hang")
        .env_remove("ZCNET_NCCL_STATS")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut out = BufReader::new(c.stdout.take().expect("stdout"));
    let mut h = read_handle(&mut out);
    let s = connect(t, ctx, &mut h);
    wait_line(&mut out, "READY");
    let mut big = vec![byte; 64 << 20];
    let (rc, req) = t.isend(s, big.as_mut_ptr(), big.len(), 0, NULLP);
    assert_eq!((rc, req.is_null()), (0, false));
    (c, s, req, big)
}

/// Closing a send comm while its zero-copy sends are in flight (the receiver stopped taking
/// data): the notifications reaped by the close are counted, so every byte the kernel accepted
/// has its verdict, zero-copy or copied, in the totals.
fn a_send_closed_mid_transfer_counts_every_accepted_byte() {
    let f = std::env::temp_dir().join(format!("zcnet-nccl-abandon-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&f);
    let mut cmd = Command::new(std::env::current_exe().expect("exe"));
    cmd.env("ZCNET_NCCL_TX", "uring-zc")
        .env("ZCNET_NCCL_STATS", &f);
    run_role("send-abandon", "a send comm closed mid-transfer", &mut cmd);
    let s = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
    let _ = std::fs::remove_file(&f);
    let sent = json_u64(&s, "bytes_sent");
    assert!(sent > 0 && sent < 64 << 20, "a transfer cut short: {s}");
    assert_eq!(
        json_u64(&s, "zerocopy_bytes") + json_u64(&s, "copied_bytes"),
        sent,
        "every accepted byte has the kernel's verdict: {s}"
    );
}

fn sleep_forever() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Child: accept, post a receive, say READY, then hang until killed.
pub fn recv_then_hang() -> ! {
    let t = load(12);
    let ctx = init(&t);
    let mut h = [0u8; NET_HANDLE_MAXSIZE];
    let (rc, l) = t.listen(ctx, 0, &mut h);
    assert_eq!(rc, 0);
    println!("HANDLE {}", hex(&h));
    let r = accept_within(&t, l);
    let mut buf = vec![0u8; 1 << 20];
    let (rc, _req) = t.irecv(r, &[(buf.as_mut_ptr(), buf.len())], &[0], &[NULLP]);
    assert_eq!(rc, 0);
    println!("READY");
    sleep_forever()
}

/// Child: connect to the handle in ZCNET_NCCL_HANDLE, queue a 64 MiB send, say SENDING, push it
/// along for a moment, then hang until killed.
pub fn send_then_hang() -> ! {
    let t = load(12);
    let ctx = init(&t);
    let mut h = unhex(&std::env::var("ZCNET_NCCL_HANDLE").expect("handle"));
    let s = connect(&t, ctx, &mut h);
    let mut big = vec![3u8; 64 << 20];
    let (rc, req) = t.isend(s, big.as_mut_ptr(), big.len(), 0, NULLP);
    assert_eq!((rc, req.is_null()), (0, false));
    println!("SENDING");
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(200) {
        let mut sz = [0 as c_int; 1];
        let _ = t.test(req, &mut sz);
    }
    sleep_forever()
}

fn kill9(c: &mut std::process::Child) {
    c.kill().expect("SIGKILL");
    c.wait().expect("reap");
}

fn wait_line(out: &mut impl BufRead, want: &str) {
    let mut line = String::new();
    out.read_line(&mut line).expect("child line");
    assert_eq!(line.trim(), want, "the child said {line:?}");
}

fn a_receiver_killed_mid_transfer_fails_the_sender() {
    let t = load(12);
    let ctx = init(&t);
    let (mut c, s, req, big) = a_send_to_a_hung_receiver(&t, ctx, 9);
    kill9(&mut c);
    // The dead peer's kernel resets the connection: the send fails, it does not hang.
    let rc = until_failure(&t, req);
    assert!(rc == NCCL_REMOTE_ERROR || rc == NCCL_SYSTEM_ERROR, "{rc}");
    assert_eq!(t.close_send(s), 0);
    assert_eq!(t.finalize(ctx), 0);
    drop(big);
}

fn a_sender_killed_mid_message_fails_the_receiver() {
    let t = load(12);
    let ctx = init(&t);
    let mut h = [0u8; NET_HANDLE_MAXSIZE];
    let (rc, l) = t.listen(ctx, 0, &mut h);
    assert_eq!(rc, 0);
    let mut c = receiver_command("send-then-hang")
        .env("ZCNET_NCCL_HANDLE", hex(&h))
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut out = BufReader::new(c.stdout.take().expect("stdout"));
    let r = accept_within(&t, l);
    wait_line(&mut out, "SENDING");
    std::thread::sleep(Duration::from_millis(50));
    kill9(&mut c);
    // Part of the 64 MiB message is in our socket buffers, the rest died with the sender.
    let mut dst = vec![0u8; 64 << 20];
    let (rc, req) = t.irecv(r, &[(dst.as_mut_ptr(), dst.len())], &[0], &[NULLP]);
    assert_eq!(rc, 0);
    assert_eq!(until_failure(&t, req), NCCL_REMOTE_ERROR);
    assert_eq!(t.close_recv(r), 0);
    assert_eq!(t.close_listen(l), 0);
    assert_eq!(t.finalize(ctx), 0);
}

fn pair(t: &Table, ctx: P) -> (P, P, P) {
    let mut h = [0u8; NET_HANDLE_MAXSIZE];
    let (rc, l) = t.listen(ctx, 0, &mut h);
    assert_eq!(rc, 0);
    let start = Instant::now();
    let (mut s, mut r) = (NULLP, NULLP);
    while s.is_null() || r.is_null() {
        assert!(start.elapsed() < LIMIT, "pair never connected");
        if s.is_null() {
            let (rc, x) = t.connect(ctx, 0, &mut h);
            assert_eq!(rc, 0);
            s = x;
        }
        if r.is_null() {
            let (rc, x) = t.accept(l);
            assert_eq!(rc, 0);
            r = x;
        }
    }
    (l, s, r)
}

/// Accepts on `l` until the peer's sockets are all in; a failed accept or one that takes longer
/// than the limit (the peer never connected) fails the test.
fn accept_within(t: &Table, l: P) -> P {
    let start = Instant::now();
    loop {
        let (rc, r) = t.accept(l);
        assert_eq!(rc, 0, "accept");
        if !r.is_null() {
            return r;
        }
        assert!(start.elapsed() < LIMIT, "the peer never connected");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Polls `req` until it fails (its code) or the limit (a hang) passes.
fn until_failure(t: &Table, req: P) -> c_int {
    let start = Instant::now();
    loop {
        let mut sz = [0 as c_int; 8];
        let (rc, done) = t.test(req, &mut sz);
        if rc != 0 {
            return rc;
        }
        assert!(!done, "the request completed although the peer failed");
        assert!(
            start.elapsed() < LIMIT,
            "test() never reported the failure: a hang"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn bad_arguments() {
    let t = load(12);
    let ctx = init(&t);
    let Table::V12(raw) = &t else { unreachable!() };
    unsafe {
        assert_eq!(
            (raw.devices)(std::ptr::null_mut()),
            NCCL_INVALID_ARGUMENT,
            "NULL ndev"
        );
        assert_eq!(
            (raw.getProperties)(7, std::ptr::null_mut()),
            NCCL_INVALID_ARGUMENT
        );
        let mut p = std::mem::zeroed::<ncclNetProperties_v12_t>();
        assert_eq!(
            (raw.getProperties)(99, &mut p),
            NCCL_INVALID_ARGUMENT,
            "device out of range"
        );
        assert_eq!((raw.getProperties)(-1, &mut p), NCCL_INVALID_ARGUMENT);
        let mut done = 0;
        assert_eq!(
            (raw.test)(std::ptr::null_mut(), &mut done, std::ptr::null_mut()),
            NCCL_INVALID_ARGUMENT
        );
        // A handle from another plugin, or garbage.
        let foreign = 0xdead_beef_usize as P;
        assert_eq!(
            (raw.test)(foreign, &mut done, std::ptr::null_mut()),
            NCCL_INVALID_USAGE
        );
        assert_eq!((raw.closeSend)(foreign), NCCL_INVALID_USAGE);
    }
    let mut h = [0u8; NET_HANDLE_MAXSIZE];
    assert_eq!(t.listen(ctx, 99, &mut h).0, NCCL_INVALID_ARGUMENT);
    h[..4].copy_from_slice(b"SOCK");
    assert_eq!(
        t.connect(ctx, 0, &mut h).0,
        NCCL_INVALID_USAGE,
        "another plugin's handle"
    );
    let (l, s, r) = pair(&t, ctx);
    let mut buf = vec![0u8; 4096];
    assert_eq!(
        t.reg_mr(s, buf.as_mut_ptr(), buf.len(), PTR_CUDA).0,
        NCCL_INVALID_ARGUMENT,
        "CUDA without ptrSupport"
    );
    assert_eq!(
        t.isend(s, std::ptr::null_mut(), 10, 0, NULLP).0,
        NCCL_INVALID_ARGUMENT,
        "NULL data"
    );
    assert_eq!(
        t.isend(r, buf.as_mut_ptr(), 10, 0, NULLP).0,
        NCCL_INVALID_USAGE,
        "isend on a receive comm"
    );
    assert_eq!(t.irecv(r, &[], &[], &[]).0, NCCL_INVALID_ARGUMENT, "n = 0");
    let nine: Vec<(*mut u8, usize)> = (0..9).map(|_| (buf.as_mut_ptr(), 1)).collect();
    assert_eq!(
        t.irecv(r, &nine, &[0; 9], &[NULLP; 9]).0,
        NCCL_INVALID_ARGUMENT,
        "n > maxRecvs"
    );
    let (rc, mr) = t.reg_mr(s, buf.as_mut_ptr(), 100, PTR_HOST);
    assert_eq!(rc, 0);
    assert_eq!(
        t.isend(s, buf.as_mut_ptr(), 200, 0, mr).0,
        NCCL_INVALID_ARGUMENT,
        "outside its registration"
    );
    assert_eq!(t.dereg_mr(s, mr), 0);
    assert_eq!(t.dereg_mr(s, mr), NCCL_INVALID_USAGE, "twice");
    // Over the size limit, through v9's size_t (nothing is read: refused first).
    let t9 = load(9);
    assert_eq!(
        t9.isend(s, buf.as_mut_ptr(), 3 << 30, 0, NULLP).0,
        NCCL_INVALID_ARGUMENT
    );
    for c in [t.close_send(s), t.close_recv(r), t.close_listen(l)] {
        assert_eq!(c, 0);
    }
    assert_eq!(t.close_send(s), NCCL_INVALID_USAGE, "closed already");
    assert_eq!(t.finalize(ctx), 0);
}

fn garbage_on_a_data_socket_is_a_remote_error() {
    let t = load(12);
    let ctx = init(&t);
    let mut h = [0u8; NET_HANDLE_MAXSIZE];
    let (rc, l) = t.listen(ctx, 0, &mut h);
    assert_eq!(rc, 0);
    let hd = Handle::decode(&h).expect("our handle");
    // A stranger first: dropped, and the listener keeps waiting for the real peer.
    let mut stranger = TcpStream::connect(hd.addr).expect("connect");
    stranger
        .write_all(b"GET / HTTP/1.0\r\n\r\nxx")
        .expect("write");
    let mut socks: Vec<TcpStream> = (0..hd.nsocks)
        .map(|index| {
            let mut s = TcpStream::connect(hd.addr).expect("connect");
            let hello = Hello {
                nonce: hd.nonce,
                index,
                nsocks: hd.nsocks,
            };
            s.write_all(&hello.encode()).expect("hello");
            s
        })
        .collect();
    let r = accept_within(&t, l);
    socks[0].write_all(&[0x42u8; 40]).expect("garbage header");
    let mut buf = vec![0u8; 1 << 16];
    let (rc, req) = t.irecv(r, &[(buf.as_mut_ptr(), buf.len())], &[0], &[NULLP]);
    assert_eq!(rc, 0);
    assert_eq!(until_failure(&t, req), NCCL_REMOTE_ERROR);
    drop(socks);
    drop(stranger);
    assert_eq!(t.close_recv(r), 0);
    assert_eq!(t.close_listen(l), 0);
    assert_eq!(t.finalize(ctx), 0);
}

fn closing_one_side_mid_transfer_fails_the_other() {
    let t = load(12);
    let ctx = init(&t);
    // The receiver goes away while a 64 MiB send is in flight.
    let (l, s, r) = pair(&t, ctx);
    let mut big = vec![7u8; 64 << 20];
    let (rc, req) = t.isend(s, big.as_mut_ptr(), big.len(), 0, NULLP);
    assert_eq!((rc, req.is_null()), (0, false));
    assert_eq!(t.close_recv(r), 0);
    let rc = until_failure(&t, req);
    assert!(rc == NCCL_REMOTE_ERROR || rc == NCCL_SYSTEM_ERROR, "{rc}");
    assert_eq!(t.close_send(s), 0);
    // The sender goes away in the middle of a message the receiver is taking.
    let (l, s, r) = pair_on(&t, ctx, l);
    let mut small = vec![1u8; 1 << 20];
    let (rc, sreq) = t.isend(s, small.as_mut_ptr(), small.len(), 0, NULLP);
    assert_eq!((rc, sreq.is_null()), (0, false));
    let mut dst = vec![0u8; 64 << 20];
    let (rc, rreq) = t.irecv(r, &[(dst.as_mut_ptr(), dst.len())], &[0], &[NULLP]);
    assert_eq!(rc, 0);
    // Two messages expected by a grouped receive of one: the first completes...
    let start = Instant::now();
    loop {
        let mut sz = [0 as c_int; 1];
        let (rc, done) = t.test(rreq, &mut sz);
        assert_eq!(rc, 0);
        if done {
            assert_eq!(sz[0], 1 << 20);
            break;
        }
        assert!(start.elapsed() < LIMIT);
        let _ = t.test(sreq, &mut sz);
    }
    // ...then a second receive waits for a message that never comes: the sender closes.
    let (rc, rreq) = t.irecv(r, &[(dst.as_mut_ptr(), dst.len())], &[0], &[NULLP]);
    assert_eq!(rc, 0);
    let mut part = vec![2u8; 32 << 20];
    let (rc, _) = t.isend(s, part.as_mut_ptr(), part.len(), 0, NULLP);
    assert_eq!(rc, 0);
    assert_eq!(t.close_send(s), 0);
    assert_eq!(until_failure(&t, rreq), NCCL_REMOTE_ERROR);
    assert_eq!(t.close_recv(r), 0);
    assert_eq!(t.close_listen(l), 0);
    assert_eq!(t.finalize(ctx), 0);
    drop((big, small, part));
}

/// Like `pair`, on an existing listener (its handle is gone: listen again to get one).
fn pair_on(t: &Table, ctx: P, l: P) -> (P, P, P) {
    assert_eq!(t.close_listen(l), 0);
    let (l2, s, r) = pair(t, ctx);
    (l2, s, r)
}
