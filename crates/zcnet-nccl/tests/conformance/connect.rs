//! Connection set-up that never finishes: each case gets its ncclResult (remote error 6) in
//! about `ZCNET_NCCL_CONNECT_TIMEOUT_MS`, never a hang, and leaves no file descriptor behind.
//! On the listening side: a peer that connects and says nothing, one that sends part of its
//! hello, one that closes in the middle of it, a connection whose second socket never comes,
//! and more silent peers than the plugin keeps waiting at once. On the connecting side: a
//! peer that accepts and never reads or answers, one that goes away, a refused connect, and a
//! connect the peer never answers (its accept queue full). All on 127.0.0.1, in a process of
//! its own (`ZCNET_NCCL_ROLE=conn-faults`) so the timeout knob can be short.

use super::*;
use nccl_net_zcnet::handle::{Handle, Hello, WELCOME};
use std::net::{SocketAddr, TcpListener, TcpStream};

/// The knob the child runs with.
const TIMEOUT: Duration = Duration::from_millis(500);

/// The case (in this process): runs the child and wants its OK.
pub fn all() {
    let mut c = Command::new(std::env::current_exe().expect("exe"));
    c.env(
        "ZCNET_NCCL_CONNECT_TIMEOUT_MS",
        TIMEOUT.as_millis().to_string(),
    );
    run_role("conn-faults", "connection set-up faults", &mut c);
}

type Case = fn(&Table, P);

/// The child: every case, each checked for file descriptors left open.
pub fn child() {
    let t = load(12);
    let ctx = init(&t);
    let cases: [(&str, Case); 9] = [
        ("a_silent_peer_fails_accept", silent_peer),
        ("a_partial_hello_fails_accept", partial_hello),
        ("a_peer_closing_mid_hello_fails_accept", closed_mid_hello),
        ("a_connection_missing_a_socket_fails_accept", missing_socket),
        (
            "silent_peers_beyond_the_cap_wait_in_the_kernel",
            more_silent_peers_than_the_cap,
        ),
        ("a_peer_that_never_reads_fails_connect", never_reads),
        ("a_peer_that_goes_away_fails_connect", goes_away),
        ("a_refused_connect_fails_connect", refused),
        ("a_connect_never_answered_fails_connect", never_answered),
    ];
    let threads0 = threads();
    for (name, f) in cases {
        let fds = open_fds();
        f(&t, ctx);
        assert_eq!(open_fds(), fds, "{name}: file descriptors left behind");
        println!("{name} ok");
    }
    // Connect threads end right after their answer.
    let start = Instant::now();
    while threads() > threads0 && start.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(threads(), threads0, "connect threads left behind");
    assert_eq!(t.finalize(ctx), 0);
}

/// Polls accept on `l` until it fails: its code and how long it took. A comm, or no failure
/// within LIMIT, fails the test.
fn accept_error(t: &Table, l: P) -> (c_int, Duration) {
    let start = Instant::now();
    loop {
        let (rc, r) = t.accept(l);
        if rc != 0 {
            return (rc, start.elapsed());
        }
        assert!(r.is_null(), "accept made a connection of a broken greeting");
        assert!(start.elapsed() < LIMIT, "accept never failed: a hang");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Polls connect to `addr` until it fails: its code and how long it took.
fn connect_error(t: &Table, ctx: P, addr: SocketAddr) -> (c_int, Duration) {
    let mut h = [0u8; NET_HANDLE_MAXSIZE];
    let hd = Handle {
        addr,
        nsocks: 2,
        nonce: 0x1234_5679,
    };
    h[..hd.encode().len()].copy_from_slice(&hd.encode());
    let start = Instant::now();
    loop {
        let (rc, s) = t.connect(ctx, 0, &mut h);
        if rc != 0 {
            return (rc, start.elapsed());
        }
        assert!(s.is_null(), "connect made a connection to a broken peer");
        assert!(start.elapsed() < LIMIT, "connect never failed: a hang");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn listen(t: &Table, ctx: P) -> (P, Handle) {
    let mut h = [0u8; NET_HANDLE_MAXSIZE];
    let (rc, l) = t.listen(ctx, 0, &mut h);
    assert_eq!(rc, 0, "listen");
    (l, Handle::decode(&h).expect("our handle"))
}

fn hello(hd: &Handle, index: u16) -> [u8; 20] {
    Hello {
        nonce: hd.nonce,
        index,
        nsocks: hd.nsocks,
    }
    .encode()
}

/// `s` was closed by the plugin: it reads EOF (after `skip` bytes the plugin sent).
fn closed_by_plugin(mut s: TcpStream, skip: usize) {
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut b = vec![0u8; skip];
    s.read_exact(&mut b).expect("the plugin's answer");
    let mut one = [0u8; 1];
    assert_eq!(
        s.read(&mut one).expect("EOF, not a timeout"),
        0,
        "the plugin kept the socket"
    );
}

fn expect_remote_after_timeout((rc, took): (c_int, Duration), what: &str) {
    assert_eq!(rc, NCCL_REMOTE_ERROR, "{what}");
    assert!(
        took >= TIMEOUT - Duration::from_millis(50),
        "{what}: failed after {took:?}, before its {TIMEOUT:?}"
    );
}

fn silent_peer(t: &Table, ctx: P) {
    let (l, hd) = listen(t, ctx);
    let raw = TcpStream::connect(hd.addr).expect("connect");
    expect_remote_after_timeout(accept_error(t, l), "a silent peer");
    closed_by_plugin(raw, 0);
    assert_eq!(t.close_listen(l), 0);
}

fn partial_hello(t: &Table, ctx: P) {
    let (l, hd) = listen(t, ctx);
    let mut raw = TcpStream::connect(hd.addr).expect("connect");
    raw.write_all(&hello(&hd, 0)[..7]).expect("7 bytes");
    expect_remote_after_timeout(accept_error(t, l), "a partial hello");
    closed_by_plugin(raw, 0);
    assert_eq!(t.close_listen(l), 0);
}

fn closed_mid_hello(t: &Table, ctx: P) {
    let (l, hd) = listen(t, ctx);
    let mut raw = TcpStream::connect(hd.addr).expect("connect");
    raw.write_all(&hello(&hd, 0)[..7]).expect("7 bytes");
    drop(raw);
    let (rc, took) = accept_error(t, l);
    assert_eq!(rc, NCCL_REMOTE_ERROR, "a peer gone mid-hello");
    assert!(took < LIMIT);
    assert_eq!(t.close_listen(l), 0);
}

fn missing_socket(t: &Table, ctx: P) {
    let (l, hd) = listen(t, ctx);
    assert_eq!(hd.nsocks, 2, "the default ZCNET_NCCL_NSOCKS");
    let mut raw = TcpStream::connect(hd.addr).expect("connect");
    raw.write_all(&hello(&hd, 0)).expect("hello");
    expect_remote_after_timeout(accept_error(t, l), "socket 1 of 2 never came");
    closed_by_plugin(raw, WELCOME.len());
    assert_eq!(t.close_listen(l), 0);
}

fn more_silent_peers_than_the_cap(t: &Table, ctx: P) {
    let cap = nccl_net_zcnet::MAX_GREETING;
    let (l, hd) = listen(t, ctx);
    let before = open_fds();
    let raws: Vec<TcpStream> = (0..cap + 8)
        .map(|_| TcpStream::connect(hd.addr).expect("connect"))
        .collect();
    let (rc, r) = t.accept(l);
    assert_eq!((rc, r.is_null()), (0, true));
    assert_eq!(
        open_fds() - before,
        raws.len() + cap,
        "the plugin holds at most {cap} sockets waiting for a hello"
    );
    // The first `cap` run out of time and are closed; then the 8 left in the kernel's queue
    // are taken, and run out of time in turn.
    expect_remote_after_timeout(accept_error(t, l), "silent peers at the cap");
    assert_eq!(open_fds() - before, raws.len(), "the first {cap} closed");
    let (rc, r) = t.accept(l);
    assert_eq!((rc, r.is_null()), (0, true));
    assert_eq!(open_fds() - before, raws.len() + 8, "the late ones taken");
    expect_remote_after_timeout(accept_error(t, l), "the silent peers after the cap");
    assert_eq!(open_fds() - before, raws.len());
    drop(raws);
    assert_eq!(t.close_listen(l), 0);
}

fn never_reads(t: &Table, ctx: P) {
    // The kernel completes the handshake into the accept queue; nobody reads or answers.
    let peer = TcpListener::bind("127.0.0.1:0").expect("bind");
    let r = connect_error(t, ctx, peer.local_addr().expect("addr"));
    expect_remote_after_timeout(r, "a peer that never reads");
}

fn goes_away(t: &Table, ctx: P) {
    let peer = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = peer.local_addr().expect("addr");
    let th = std::thread::spawn(move || {
        // Takes the first socket and closes it, and the listener with it.
        let (s, _) = peer.accept().expect("accept");
        drop(s);
    });
    let (rc, took) = connect_error(t, ctx, addr);
    th.join().expect("peer thread");
    assert_eq!(rc, NCCL_REMOTE_ERROR, "a peer that went away");
    assert!(
        took < TIMEOUT,
        "known at once, not at the timeout: {took:?}"
    );
}

fn refused(t: &Table, ctx: P) {
    let addr = TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let (rc, took) = connect_error(t, ctx, addr);
    assert_eq!(rc, NCCL_REMOTE_ERROR, "connect refused");
    assert!(took < TIMEOUT, "known at once: {took:?}");
}

fn never_answered(t: &Table, ctx: P) {
    // A listener with a backlog of 0 and one connection queued: its accept queue is full, so
    // the kernel drops further SYNs and a connect is never answered.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0, "socket");
    let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    sa.sin_family = libc::AF_INET as libc::sa_family_t;
    sa.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    assert_eq!(
        unsafe { libc::bind(fd, (&sa as *const libc::sockaddr_in).cast(), len) },
        0,
        "bind"
    );
    assert_eq!(unsafe { libc::listen(fd, 0) }, 0, "listen");
    let mut got = len;
    assert_eq!(
        unsafe { libc::getsockname(fd, (&mut sa as *mut libc::sockaddr_in).cast(), &mut got) },
        0
    );
    let addr = SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, u16::from_be(sa.sin_port)));
    let filler = TcpStream::connect(addr).expect("the one queued connection");
    let probe = TcpStream::connect_timeout(&addr, Duration::from_millis(200));
    assert!(probe.is_err(), "the accept queue is not full: {probe:?}");
    drop(probe);
    let r = connect_error(t, ctx, addr);
    expect_remote_after_timeout(r, "a connect never answered");
    drop(filler);
    assert_eq!(unsafe { libc::close(fd) }, 0);
}
