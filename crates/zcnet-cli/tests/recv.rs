//! `zcnet recv` as a user runs it: what `--verify` may claim, and `--bytes` on a TCP stream.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::io::Write;
use std::net::{TcpStream, UdpSocket};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn recv(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_zcnet"))
        .arg("recv")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn connect(port: u16) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => return s,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("connect: {e}"),
        }
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Zero bytes verified nothing: an empty datagram ends a `--udp --verify` run that must not
/// say "verified" or exit 0.
#[zcnet_testkit::test(timeout = 60)]
fn udp_verify_with_nothing_received_is_not_verified() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = recv(&[
        "--udp", "--verify", "--listen", &addr, "--idle", "0.3", "--json",
    ]);
    // Once it listens (its first line), one empty datagram: the run's only one.
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut err, &mut first).unwrap();
    assert!(first.contains("listening on"), "{first}");
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.send_to(&[], &addr).unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    let mut o = child.wait_with_output().unwrap();
    o.stderr = rest.into_bytes();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(!out.contains("pattern verified"), "{out}");
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["verified"], false, "{doc}");
    assert!(out.contains("nothing to verify"), "{out}");
}

/// The same on a TCP stream: a peer that connects and closes at once leaves nothing to
/// verify, which is exit 1 and `"verified": false`, not a pass.
#[zcnet_testkit::test(timeout = 60)]
fn tcp_verify_with_nothing_received_is_not_verified() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let child = recv(&["--verify", "--listen", &addr, "--json"]);
    drop(connect(port));
    let o = child.wait_with_output().unwrap();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(!out.contains("pattern verified"), "{out}");
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (doc["verified"].clone(), doc["bytes"].clone()),
        (false.into(), 0.into()),
        "{doc}"
    );
    assert!(out.contains("nothing to verify"), "{out}");
}

/// `recv --verify --bytes N` fails on a stream cut short (and says how much came), passes on
/// one of exactly N bytes.
#[zcnet_testkit::test(timeout = 60)]
fn recv_bytes_requires_the_stream_length() {
    for (sent, ok) in [(1000usize, false), (4096, true), (5000, false)] {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let child = recv(&["--listen", &addr, "--bytes", "4096", "--discard"]);
        let mut s = connect(port);
        s.write_all(&vec![7u8; sent]).unwrap();
        drop(s);
        let o = child.wait_with_output().unwrap();
        let out = text(&o);
        assert_eq!(o.status.success(), ok, "{sent} B: {out}");
        assert!(out.contains(&format!("zcnet recv: {sent} B")), "{out}");
        if !ok {
            assert!(out.contains("--bytes 4096"), "{out}");
        }
    }
}

/// A peer that sends some bytes and then resets the connection (SO_LINGER 0, close): `recv`
/// still prints its summary (the bytes that came, checked against the pattern) and the JSON
/// document, then exits 1 naming the reset.
#[zcnet_testkit::test(timeout = 60)]
fn a_peer_reset_still_gets_the_totals_then_exit_1() {
    use std::os::fd::AsRawFd;
    const SENT: usize = 100_000;
    let mut data = vec![0u8; SENT];
    zcnet::Pattern::new(3).fill(0, &mut data);
    for json in [false, true] {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let mut args = vec!["--listen", &addr, "--verify", "--seed", "3"];
        if json {
            args.push("--json");
        }
        let child = recv(&args);
        let mut s = connect(port);
        s.write_all(&data).unwrap();
        // Let the receiver read it all before the reset (a reset drops what is unread).
        std::thread::sleep(Duration::from_millis(300));
        zcnet::os::set_linger_zero(s.as_raw_fd()).unwrap();
        drop(s);
        let o = child.wait_with_output().unwrap();
        let out = text(&o);
        assert_eq!(o.status.code(), Some(1), "{out}");
        let err = String::from_utf8_lossy(&o.stderr);
        let last = err.lines().last().unwrap_or_default();
        assert!(last.contains("reset"), "{out}");
        if json {
            let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            assert_eq!(doc["bytes"], SENT as u64, "{doc}");
            assert_eq!(doc["verified"], true, "{doc}");
        } else {
            assert!(
                err.contains(&format!("zcnet recv: {SENT} B from"))
                    && err.contains("pattern verified"),
                "{out}"
            );
        }
    }
}

zcnet_testkit::main!();
