//! The echo server under faults, for every receive mode that runs here (copy, uring, auto): a
//! peer that sends garbage, half-closes, resets mid-message, stops reading, a buffer ring
//! exhausted by load, and (as root, in a lab) an interface that disappears. In every case the
//! healthy connections keep completing verified round trips, and after stop the receiver holds
//! no buffer and no connection.
#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::thread;
use std::time::{Duration, Instant};
use zcnet::RxMode;
use zcnet_tools::echo::{
    run_clients, Check, ClientConfig, ClientReport, ConnEnd, EchoConfig, EchoReport, EchoServer,
    FailKind,
};
use zcnet_tools::lab::Lab;

/// The modes that run on this machine (zcrx and devmem are refused by every device here).
const MODES: [RxMode; 3] = [RxMode::Copy, RxMode::Uring, RxMode::Auto];

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn start(mode: RxMode, tweak: impl FnOnce(&mut EchoConfig)) -> EchoServer {
    let mut cfg = EchoConfig::new(mode, loopback());
    tweak(&mut cfg);
    let s = EchoServer::start(cfg).unwrap();
    if mode == RxMode::Auto {
        assert_eq!(s.mode(), RxMode::Uring, "auto picks uring here");
        assert!(!s.fallbacks().is_empty(), "auto says why not zcrx");
    } else {
        assert_eq!(s.mode(), mode);
    }
    s
}

/// Closed-loop clients that check every byte of every response.
fn healthy_cfg(addr: SocketAddr, connections: usize, dur: Duration) -> ClientConfig {
    let mut c = ClientConfig::new(addr);
    c.size = 48 << 10;
    c.connections = connections;
    c.threads = 2;
    c.duration = dur;
    c.check = Check::Full;
    c.timeout = Duration::from_secs(5);
    c
}

fn assert_healthy(what: &str, r: &ClientReport) {
    assert!(
        r.errors.is_empty(),
        "{what}: healthy clients failed: {:?}",
        r.errors
    );
    assert_eq!(r.mismatches, 0, "{what}");
    assert!(r.requests >= 4, "{what}: only {} round trips", r.requests);
    assert_eq!(
        r.checked_bytes,
        (r.requests + r.late) * r.size as u64,
        "{what}: every byte of every response checked"
    );
}

/// After stop: nothing held, nothing open, every byte received was echoed or belongs to a
/// connection that failed.
fn assert_clean_stop(what: &str, rep: &EchoReport) {
    assert_eq!(rep.held_at_stop, 0, "{what}: buffers still lent: {rep:?}");
    assert_eq!(
        rep.open_at_stop, 0,
        "{what}: connections left open: {rep:?}"
    );
    assert!(rep.error.is_none(), "{what}: {:?}", rep.error);
    assert_eq!(
        rep.rx.returned, rep.rx.buffers,
        "{what}: every buffer returned"
    );
}

/// xorshift64.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

#[zcnet_testkit::test]
fn healthy_clients_get_verified_echoes_and_close_cleanly() {
    for mode in MODES {
        let server = start(mode, |_| {});
        let r = run_clients(&healthy_cfg(server.addr(), 6, Duration::from_millis(300))).unwrap();
        assert_healthy(mode.name(), &r);
        let rep = server.stop().unwrap();
        assert_clean_stop(mode.name(), &rep);
        assert!(rep.failures.is_empty(), "{mode}: {:?}", rep.failures);
        assert_eq!(rep.accepted, 6);
        assert_eq!(
            rep.clean_closes, 6,
            "{mode}: every client half-closed and got EOF"
        );
        assert_eq!(rep.bytes_echoed, rep.bytes_received);
        assert_eq!(rep.bytes_echoed, (r.requests + r.late) * r.size as u64);
        assert_eq!(rep.connections.len(), 6, "{mode}");
        for c in &rep.connections {
            assert_eq!(c.end, ConnEnd::Clean, "{mode}: {c:?}");
            assert_eq!(c.bytes_in, c.bytes_out, "{mode}: {c:?}");
            assert!(c.bytes_in > 0, "{mode}: {c:?}");
        }
        assert!(rep.cpu_seconds > 0.0);
    }
}

#[zcnet_testkit::test]
fn garbage_is_echoed_back_exactly() {
    for mode in MODES {
        let server = start(mode, |c| c.send_buffer = Some(64 << 10));
        let addr = server.addr();
        let healthy = thread::spawn(move || {
            run_clients(&healthy_cfg(addr, 3, Duration::from_millis(300))).unwrap()
        });
        // 2 MiB of random bytes in random-sized writes, read back by a reader with a small
        // receive buffer that starts late: the server's sends come up short and the rest waits
        // in its outbox, which must keep every byte in order.
        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ mode as u64;
        let data: Vec<u8> = (0..2 << 20).map(|_| next(&mut x) as u8).collect();
        let s = TcpStream::connect(addr).unwrap();
        zcnet::os::set_recv_buffer(s.as_raw_fd(), 16 << 10).unwrap();
        let mut w = s.try_clone().unwrap();
        let sent = data.clone();
        let writer = thread::spawn(move || {
            let mut off = 0;
            let mut y = 7u64;
            while off < sent.len() {
                let n = (1 + next(&mut y) as usize % 70_000).min(sent.len() - off);
                w.write_all(&sent[off..off + n]).unwrap();
                off += n;
            }
            w.shutdown(Shutdown::Write).unwrap();
        });
        let mut back = Vec::new();
        let mut r = s;
        thread::sleep(Duration::from_millis(200));
        r.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        r.read_to_end(&mut back).unwrap();
        writer.join().unwrap();
        assert_eq!(back.len(), data.len(), "{mode}");
        assert!(back == data, "{mode}: echo differs from the garbage sent");
        assert_healthy(mode.name(), &healthy.join().unwrap());
        let rep = server.stop().unwrap();
        assert_clean_stop(mode.name(), &rep);
        assert!(rep.failures.is_empty(), "{mode}: {:?}", rep.failures);
        assert!(
            rep.partial_sends > 0 && rep.outbox_bytes > 0,
            "{mode}: the outbox was never used: {rep:?}"
        );
    }
}

#[zcnet_testkit::test]
fn half_close_gets_the_whole_echo_then_end_of_stream() {
    for mode in MODES {
        let server = start(mode, |_| {});
        let mut s = TcpStream::connect(server.addr()).unwrap();
        let req: Vec<u8> = (0..300_000u32).map(|i| (i * 31 + 7) as u8).collect();
        s.write_all(&req).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut back = Vec::new();
        // read_to_end returns only at end of stream: the server closed after the last byte.
        s.read_to_end(&mut back).unwrap();
        assert!(
            back == req,
            "{mode}: {} of {} B back",
            back.len(),
            req.len()
        );
        let rep = server.stop().unwrap();
        assert_clean_stop(mode.name(), &rep);
        assert_eq!(rep.clean_closes, 1, "{mode}");
        assert_eq!(rep.rx.eofs, 1, "{mode}");
        assert!(rep.failures.is_empty(), "{mode}: {:?}", rep.failures);
    }
}

/// Sends a small message and waits for its echo: the server has accepted and added the stream.
fn ping(s: &mut TcpStream) {
    s.write_all(b"ping").unwrap();
    let mut b = [0u8; 4];
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"ping");
}

#[zcnet_testkit::test]
fn a_reset_mid_message_is_reported_and_others_go_on() {
    for mode in MODES {
        let server = start(mode, |_| {});
        let addr = server.addr();
        let healthy = thread::spawn(move || {
            run_clients(&healthy_cfg(addr, 3, Duration::from_millis(400))).unwrap()
        });
        let mut s = TcpStream::connect(addr).unwrap();
        ping(&mut s);
        let peer = s.local_addr().unwrap();
        // Half of a 64 KiB request, then an abortive close (RST).
        s.write_all(&vec![0xa5; 32 << 10]).unwrap();
        zcnet::os::set_linger_zero(s.as_raw_fd()).unwrap();
        drop(s);
        assert_healthy(mode.name(), &healthy.join().unwrap());
        let rep = server.stop().unwrap();
        assert_clean_stop(mode.name(), &rep);
        assert_eq!(rep.failures.len(), 1, "{mode}: {:?}", rep.failures);
        let f = &rep.failures[0];
        assert_eq!(f.peer, Some(peer), "{mode}");
        assert!(
            matches!(f.kind, FailKind::Receive | FailKind::Send),
            "{mode}: {f}"
        );
        assert!(f.reason.to_string().contains("reset"), "{mode}: {f}");
        assert_eq!(
            rep.clean_closes, 3,
            "{mode}: the healthy ones ended cleanly"
        );
    }
}

#[zcnet_testkit::test]
fn a_peer_that_stops_reading_is_closed_and_does_not_block_others() {
    for mode in MODES {
        let cap = 1 << 20;
        let server = start(mode, |c| c.outbox_cap = cap);
        let addr = server.addr();
        let stuck = TcpStream::connect(addr).unwrap();
        zcnet::os::set_recv_buffer(stuck.as_raw_fd(), 16 << 10).unwrap();
        let peer = stuck.local_addr().unwrap();
        // Writes until the server gives up on it (reset), never reading.
        let mut w = stuck.try_clone().unwrap();
        let writer = thread::spawn(move || {
            w.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
            let chunk = vec![0x5a; 256 << 10];
            let mut total = 0u64;
            while total < (256 << 20) {
                match w.write(&chunk) {
                    Ok(n) => total += n as u64,
                    Err(e) => return (total, Some(e)),
                }
            }
            (total, None)
        });
        // Meanwhile, healthy clients.
        let t0 = Instant::now();
        let r = run_clients(&healthy_cfg(addr, 3, Duration::from_millis(400))).unwrap();
        assert_healthy(mode.name(), &r);
        let (total, err) = writer.join().unwrap();
        let err = err.unwrap_or_else(|| panic!("{mode}: {total} B written and never cut off"));
        assert!(
            matches!(
                err.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
            ),
            "{mode}: {err}"
        );
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{mode}: the writer was not cut off in time"
        );
        drop(stuck);
        let rep = server.stop().unwrap();
        assert_clean_stop(mode.name(), &rep);
        let f: Vec<_> = rep
            .failures
            .iter()
            .filter(|f| f.peer == Some(peer))
            .collect();
        assert_eq!(f.len(), 1, "{mode}: {:?}", rep.failures);
        assert_eq!(f[0].kind, FailKind::OutboxFull, "{mode}: {}", f[0]);
        let c = rep
            .connections
            .iter()
            .find(|c| c.peer == Some(peer))
            .unwrap();
        assert_eq!(c.end, ConnEnd::Failed(FailKind::OutboxFull), "{mode}");
        assert!(
            c.outbox_peak > cap && c.bytes_in > c.bytes_out,
            "{mode}: {c:?}"
        );
        assert!(rep.outbox_peak > cap, "{mode}");
        assert_eq!(
            rep.failures.len(),
            1,
            "{mode}: only the stuck one: {:?}",
            rep.failures
        );
    }
}

#[zcnet_testkit::test]
fn an_exhausted_buffer_ring_stalls_no_one() {
    for mode in MODES {
        // Two 4 KiB buffers for six connections sending 48 KiB requests: receiving runs out
        // of buffers all the time and must resume by itself.
        let server = start(mode, |c| {
            c.rx.buffers = 2;
            c.rx.buf_size = 4096;
        });
        let r = run_clients(&healthy_cfg(server.addr(), 6, Duration::from_millis(400))).unwrap();
        assert_healthy(mode.name(), &r);
        let rep = server.stop().unwrap();
        assert_clean_stop(mode.name(), &rep);
        assert!(rep.failures.is_empty(), "{mode}: {:?}", rep.failures);
        if mode == RxMode::Copy {
            // The pool ran empty with connections still ready to read.
            assert!(
                rep.rx.starved > 0,
                "{mode}: starvation not counted: {:?}",
                rep.rx
            );
        } else {
            // The ring ran dry: the kernel ended the multishot receives, which were re-armed
            // once buffers came back (by then the server had returned them, so `starved`,
            // which counts re-arms that found no buffer, may stay 0).
            assert!(
                rep.rx.rearms > 0,
                "{mode}: multishot never re-armed: {:?}",
                rep.rx
            );
        }
        assert!(rep.rx.buffers >= rep.bytes_received / 4096, "{mode}");
    }
}

#[zcnet_testkit::test]
fn an_interface_that_disappears_fails_its_connections_only() {
    zcnet_testkit::require_root("the namespace lab");
    for mode in MODES {
        // Each step's time since the mode began, on stderr: a run that hits the time limit
        // says which step it was in.
        let m0 = Instant::now();
        let mut lab = Lab::new().unwrap();
        let v = lab.veth().unwrap();
        let mut cfg = EchoConfig::new(mode, "0.0.0.0:0".parse().unwrap());
        cfg.netns = Some(v.b.clone());
        cfg.keepalive = Some(Duration::from_secs(1));
        cfg.user_timeout = Some(Duration::from_secs(1));
        let server = EchoServer::start(cfg).unwrap();
        let port = server.addr().port();
        // Over the veth: clients in namespace a. Healthy: clients in namespace b over its lo.
        // Long enough to outlast the wait for every connection below on a loaded machine; the
        // clients end when the fault has failed all their connections.
        let mut over_veth =
            healthy_cfg(SocketAddr::new(v.b_addr, port), 4, Duration::from_secs(30));
        over_veth.netns = Some(v.a.clone());
        over_veth.timeout = Duration::from_millis(800);
        let mut local = healthy_cfg(
            SocketAddr::new("127.0.0.1".parse().unwrap(), port),
            3,
            Duration::from_millis(1200),
        );
        local.netns = Some(v.b.clone());
        let veth_clients = thread::spawn(move || run_clients(&over_veth).unwrap());
        let local2 = local.clone();
        let healthy = thread::spawn(move || run_clients(&local2).unwrap());
        // The fault comes once every connection is up and echoing: deleting the link while a
        // client's handshake is still on it (a loaded machine is slow to run the client
        // threads) would test a lost SYN instead, which the client's connect timeout covers
        // (a_handshake_lost_on_a_dead_path_fails_within_the_client_timeout).
        let t0 = Instant::now();
        while (server.live().accepted < 7 || server.live().bytes_echoed == 0)
            && t0.elapsed() < Duration::from_secs(20)
        {
            thread::sleep(Duration::from_millis(20));
        }
        let live = server.live();
        assert!(
            live.accepted == 7 && live.bytes_echoed > 0,
            "{mode}: before the fault, 7 connections up and echoing: {live:?}"
        );
        let phase = |what: &str| eprintln!("{mode}: {what} at {:.1} s", m0.elapsed().as_secs_f64());
        phase("7 connections up and echoing");
        thread::sleep(Duration::from_millis(200));
        // Bounded: the kernel's unregistering of a device waits for every reference to it to
        // go, and would hold the test (and the report would only say it timed out).
        let del = Instant::now();
        let out = std::process::Command::new("timeout")
            .args(["-k", "5", "60", "ip", "-n", &v.a, "link", "del", "vA"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{mode}: ip link del vA exited {} after {:.1} s: {}",
            out.status,
            del.elapsed().as_secs_f64(),
            String::from_utf8_lossy(&out.stderr)
        );
        phase(&format!(
            "vA deleted ({:.2} s for ip link del)",
            del.elapsed().as_secs_f64()
        ));
        let h = healthy.join().unwrap();
        assert_healthy(mode.name(), &h);
        phase("the healthy clients ended");
        let vr = veth_clients.join().unwrap();
        phase("the veth clients ended");
        assert_eq!(
            vr.errors.len(),
            4,
            "{mode}: every veth connection broke: {:?}",
            vr.errors
        );
        // The server notices (keepalive + TCP_USER_TIMEOUT) and keeps serving.
        let t0 = Instant::now();
        while server.live().failed < 4 && t0.elapsed() < Duration::from_secs(8) {
            thread::sleep(Duration::from_millis(50));
        }
        eprintln!(
            "{mode}: the server noticed {} broken connection(s) {:.1} s after the veth clients ended",
            server.live().failed,
            t0.elapsed().as_secs_f64()
        );
        local.duration = Duration::from_millis(300);
        let after = run_clients(&local).unwrap();
        assert_healthy(mode.name(), &after);
        phase("clients served after the fault");
        let rep = server.stop().unwrap();
        phase("the server stopped");
        assert_clean_stop(mode.name(), &rep);
        let veth_failures: Vec<_> = rep
            .failures
            .iter()
            .filter(|f| f.peer.map(|p| p.ip()) == Some(v.a_addr))
            .collect();
        assert_eq!(veth_failures.len(), 4, "{mode}: {:?}", rep.failures);
        assert_eq!(
            rep.failures.len(),
            4,
            "{mode}: only the veth ones: {:?}",
            rep.failures
        );
        for f in &veth_failures {
            eprintln!("{mode}: {f}");
            assert!(
                matches!(
                    f.kind,
                    FailKind::Receive | FailKind::Send | FailKind::Stalled
                ),
                "{mode}: {f}"
            );
        }
        assert_eq!(
            rep.clean_closes, 6,
            "{mode}: both healthy runs ended cleanly"
        );
        drop(lab);
    }
}

/// A client whose handshake is lost (the path went down before the SYN-ACK came back) fails
/// that connection within its timeout, instead of waiting out the kernel's SYN retries (about
/// two minutes): the echo test above once hung on that.
#[zcnet_testkit::test]
fn a_handshake_lost_on_a_dead_path_fails_within_the_client_timeout() {
    zcnet_testkit::require_root("the namespace lab");
    let mut lab = Lab::new().unwrap();
    let v = lab.veth().unwrap();
    // The peer's address resolved for good (as it was for the connections that were up), then
    // vB down: the SYN from namespace a leaves vA and is dropped there (the veth's peer is not
    // running), silently, as when the path dies after the handshake started.
    let ip = |args: &[&str]| {
        let out = std::process::Command::new("ip")
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ip {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let mac = "02:7a:63:00:00:02";
    ip(&["-n", &v.b, "link", "set", "vB", "address", mac]);
    ip(&[
        "-n",
        &v.a,
        "neigh",
        "replace",
        "10.10.0.2",
        "lladdr",
        mac,
        "dev",
        "vA",
        "nud",
        "permanent",
    ]);
    ip(&["-n", &v.b, "link", "set", "vB", "down"]);
    let mut cfg = healthy_cfg(SocketAddr::new(v.b_addr, 9), 1, Duration::from_millis(100));
    cfg.threads = 1;
    cfg.netns = Some(v.a.clone());
    cfg.connect_timeout = Duration::from_secs(1);
    let t0 = Instant::now();
    let err = run_clients(&cfg).unwrap_err().to_string();
    let took = t0.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "connect gave up after {took:?}, not within the 1 s timeout"
    );
    assert!(
        err.contains("no answer within 1.0 s") && err.contains("10.10.0.2:9"),
        "{err}"
    );
    drop(lab);
}

zcnet_testkit::main!();
