//! `zcnet send` and `zcnet recv` on loopback as a user runs them: verified round trips in
//! every mode, netcat-style stdin and stdout, UDP datagram sizes, exact byte counts with and
//! without `--verify`, and what the sender says about tiny zero-copy windows and stalls.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;
use common::cli::{run, run_json, start_recv, zcnet};
use common::stderr;

use std::io::{Read, Write};
use std::net::UdpSocket;
use std::process::Stdio;
use std::time::{Duration, Instant};

#[zcnet_testkit::test]
fn send_recv_verified_round_trip_for_every_mode() {
    for mode in ["copy", "msg-zerocopy", "uring", "uring-zc", "auto"] {
        let (child, port) = start_recv(&["--verify", "--seed", "9", "--json"]);
        let sj = run_json(&[
            "send",
            &format!("127.0.0.1:{port}"),
            "--tx",
            mode,
            "--verify",
            "--seed",
            "9",
            "--bytes",
            "8M",
            "--size",
            "60000",
            "--json",
        ]);
        assert_eq!(sj["bytes"], 8 << 20, "{mode}");
        let r = child.wait_with_output().unwrap();
        assert!(r.status.success(), "{mode}: {}", stderr(&r));
        let rj: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
        assert_eq!(rj["bytes"], 8 << 20, "{mode}");
        assert_eq!(rj["verified"], true);
    }
}

#[zcnet_testkit::test]
fn recv_rcvlowat_is_taken_as_given_and_refused_when_bad() {
    for (flag, want) in [
        ("off", serde_json::Value::Null),
        ("4K", 4096.into()),
        ("auto", (128 << 10).into()),
    ] {
        let (child, port) = start_recv(&["--rcvlowat", flag, "--discard", "--json"]);
        run_json(&[
            "send",
            &format!("127.0.0.1:{port}"),
            "--bytes",
            "1000001",
            "--json",
        ]);
        let r = child.wait_with_output().unwrap();
        assert!(r.status.success(), "{flag}: {}", stderr(&r));
        let rj: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
        assert_eq!(rj["bytes"], 1_000_001, "{flag}");
        assert_eq!(rj["rcvlowat"], want, "{flag}: {rj}");
    }
    let o = run(&["recv", "--listen", "127.0.0.1:0", "--rcvlowat", "lots"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--rcvlowat"), "{}", stderr(&o));
}

#[zcnet_testkit::test]
fn recv_every_host_rx_mode_verifies_and_says_what_it_used() {
    for (rx, used) in [("copy", "copy"), ("uring", "uring"), ("auto", "uring")] {
        let (child, port) = start_recv(&["--rx", rx, "--verify", "--seed", "5", "--json"]);
        run_json(&[
            "send",
            &format!("127.0.0.1:{port}"),
            "--tx",
            "copy",
            "--verify",
            "--seed",
            "5",
            "--bytes",
            "6M",
            "--size",
            "100000",
            "--json",
        ]);
        let r = child.wait_with_output().unwrap();
        assert!(r.status.success(), "{rx}: {}", stderr(&r));
        let rj: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
        assert_eq!(rj["bytes"], 6 << 20, "{rx}");
        assert_eq!(rj["verified"], true);
        assert_eq!(rj["rx"], used, "{rx}: {rj}");
        assert_eq!(rj["requested"], rx);
        // Not written out (--verify, --json): the bulk receive low-water mark, and 6 MiB sent
        // in 100,000 B sends ends below it, so the exact count shows the tail came.
        assert_eq!(rj["rcvlowat"], 128 << 10, "{rx}: {rj}");
        assert_eq!(
            rj["copied_bytes"],
            6 << 20,
            "{rx}: the kernel copies on loopback"
        );
        assert_eq!(rj["zerocopy_bytes"], 0);
        if rx == "auto" {
            assert_eq!(rj["fallbacks"][0]["tried"], "zcrx", "{rj}");
            assert!(
                rj["fallbacks"][0]["reason"]
                    .as_str()
                    .unwrap()
                    .contains("--iface"),
                "{rj}"
            );
        }
    }
}

/// netcat-style `send` passes on what stdin brings as it comes: a line typed reaches the peer
/// at once, not when a 64 KiB buffer has filled or stdin has ended.
#[zcnet_testkit::test(timeout = 60)]
fn send_from_stdin_passes_a_line_on_at_once() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let mut child = zcnet()
        .args(["send", &addr])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut peer, _) = l.accept().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"hello\n").unwrap();
    peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = [0u8; 6];
    let r = peer.read_exact(&mut got);
    // stdin stays open until here: the line went before its end.
    drop(stdin);
    let o = child.wait_with_output().unwrap();
    r.unwrap_or_else(|e| {
        panic!(
            "the line did not come while stdin was open: {e}; {}",
            stderr(&o)
        )
    });
    assert_eq!(&got, b"hello\n");
    assert!(o.status.success(), "{}", stderr(&o));
}

/// Zero-copy sends with less than one segment in flight crawl at one window per delayed ACK
/// (~40 ms) against a receiver that does not read at once (`recv` under its default
/// --rcvlowat): the sender says so and names the fixes; each named fix makes 200 one-byte
/// sends take well under 200 x 37 ms.
#[zcnet_testkit::test]
fn tiny_zero_copy_windows_name_the_delayed_ack_and_its_fixes() {
    let send = |port: u16, extra: &[&str]| {
        let p = format!("127.0.0.1:{port}");
        let mut args = vec!["send", &p, "--json"];
        args.extend_from_slice(extra);
        let o = run(&args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        o
    };
    let one = [
        "--tx",
        "uring-zc",
        "--size",
        "1",
        "--inflight",
        "1",
        "--window",
        "0",
    ];
    // The hint, against the default receiver (3 sends: ~0.1 s).
    let (r, port) = start_recv(&["--discard"]);
    let o = send(port, &[&one[..], &["--bytes", "3"]].concat());
    r.wait_with_output().unwrap();
    let e = stderr(&o);
    let note = e
        .lines()
        .find(|l| l.starts_with("zcnet: note:") && l.contains("ACK"))
        .unwrap_or_else(|| panic!("no hint: {e}"));
    for fix in ["--window", "--inflight", "--tx copy", "--rcvlowat off"] {
        assert!(note.contains(fix), "{fix} not in: {note}");
    }
    // The fixes it names, 200 sends each.
    for (recv_extra, send_extra) in [
        (&["--discard", "--rcvlowat", "off"][..], &one[..]),
        (
            &["--discard"][..],
            &[
                "--tx",
                "copy",
                "--size",
                "1",
                "--inflight",
                "1",
                "--window",
                "0",
            ][..],
        ),
    ] {
        let (r, port) = start_recv(recv_extra);
        let t = Instant::now();
        let o = send(port, &[send_extra, &["--bytes", "200"]].concat());
        let took = t.elapsed();
        r.wait_with_output().unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(doc["bytes"], 200, "{doc}");
        assert!(
            took < Duration::from_millis(1500),
            "{recv_extra:?} {send_extra:?}: 200 one-byte sends took {took:?} (37 ms each would be 7.4 s)"
        );
    }
    // Enough bytes in flight (one 64 KiB buffer fills a loopback segment): no hint.
    let (r, port) = start_recv(&["--discard"]);
    let o = send(
        port,
        &["--tx", "uring-zc", "--size", "64K", "--bytes", "1M"],
    );
    r.wait_with_output().unwrap();
    assert!(!stderr(&o).contains("ACK"), "{}", stderr(&o));
}

#[zcnet_testkit::test]
fn wrong_seed_fails_verification() {
    let (child, port) = start_recv(&["--verify", "--seed", "1"]);
    let s = run(&[
        "send",
        &format!("127.0.0.1:{port}"),
        "--tx",
        "uring-zc",
        "--verify",
        "--seed",
        "2",
        "--bytes",
        "64K",
    ]);
    let r = child.wait_with_output().unwrap();
    assert_eq!(r.status.code(), Some(1));
    assert!(
        stderr(&r).contains("payload mismatch at byte 0"),
        "{}",
        stderr(&r)
    );
    drop(s);
}

#[zcnet_testkit::test]
fn stdin_to_stdout_like_netcat() {
    let (child, port) = start_recv(&[]);
    let mut s = zcnet()
        .args([
            "send",
            &format!("127.0.0.1:{port}"),
            "--tx",
            "msg-zerocopy",
            "--size",
            "7",
        ])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let text = "zero-copy is a contract between you and the kernel\n".repeat(100);
    s.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    assert!(s.wait().unwrap().success());
    let mut out = String::new();
    let mut child = child;
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(out, text);
}

#[zcnet_testkit::test]
fn udp_send_sends_datagrams_as_large_as_the_route_carries() {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let port = rx.local_addr().unwrap().port();
    let sj = run_json(&[
        "send",
        "--udp",
        &format!("127.0.0.1:{port}"),
        "--tx",
        "uring-zc",
        "--size",
        "8000",
        "--verify",
        "--bytes",
        "80000",
        "--json",
    ]);
    assert_eq!(sj["bytes"], 80000);
    assert_eq!(sj["proto"], "udp");
    // lo's MTU (65536) carries 8000 B whole: no GSO, each send one datagram (a route of MTU
    // 1500 cuts them into 1472 B segments: crates/zcnet/tests/udp_segment.rs).
    let mut buf = [0u8; 65536];
    for _ in 0..10 {
        assert_eq!(rx.recv(&mut buf).unwrap(), 8000);
    }
}

#[zcnet_testkit::test]
fn send_without_verify_sends_exact_counts_of_zeros_and_with_verify_the_pattern() {
    // `send --bytes/--duration` once wrote the pattern into every send, which
    // capped it at the speed of the fill (~3 GB/s against ~90 GB/s for `bench tx`). Without
    // --verify nothing is written (the buffers are zero-filled); these are the functions the
    // hot path must keep: exact byte counts, zeros without --verify, and the pattern at each
    // send's own offset with it, across buffer reuse (more sends than buffers in flight).
    for (mode, size, bytes) in [
        ("copy", "4K", 1_000_003u64),
        ("uring-zc", "60000", 3 << 20),
        ("msg-zerocopy", "64K", 2_000_001),
    ] {
        let (mut child, port) = start_recv(&[]);
        let mut out = Vec::new();
        let mut stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            stdout.read_to_end(&mut out).unwrap();
            out
        });
        let sj = run_json(&[
            "send",
            &format!("127.0.0.1:{port}"),
            "--tx",
            mode,
            "--size",
            size,
            "--inflight",
            "4",
            "--bytes",
            &bytes.to_string(),
            "--json",
        ]);
        assert_eq!(sj["bytes"], bytes, "{mode}: {sj}");
        let out = reader.join().unwrap();
        assert!(child.wait().unwrap().success(), "{mode}");
        assert_eq!(out.len() as u64, bytes, "{mode}: bytes received");
        assert!(
            out.iter().all(|&b| b == 0),
            "{mode}: without --verify the buffers go unwritten (zeros)"
        );
    }
    // --duration alone: the same path, bounded by time; the receiver gets every byte sent.
    let (child, port) = start_recv(&["--json"]);
    let sj = run_json(&[
        "send",
        &format!("127.0.0.1:{port}"),
        "--tx",
        "uring-zc",
        "--duration",
        "0.3",
        "--json",
    ]);
    let r = child.wait_with_output().unwrap();
    assert!(r.status.success(), "{}", stderr(&r));
    let rj: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert!(sj["bytes"].as_u64().unwrap() > 0, "{sj}");
    assert_eq!(rj["bytes"], sj["bytes"], "{rj} {sj}");
    // UDP with --verify: every datagram carries the pattern at its own stream offset, the
    // last one short, and 41 sends through 4 buffers means each buffer is rewritten.
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let port = rx.local_addr().unwrap().port();
    let sj = run_json(&[
        "send",
        "--udp",
        &format!("127.0.0.1:{port}"),
        "--tx",
        "uring-zc",
        "--size",
        "1000",
        "--inflight",
        "4",
        "--verify",
        "--seed",
        "7",
        "--bytes",
        "40500",
        "--json",
    ]);
    assert_eq!(
        (sj["bytes"].as_u64(), sj["sends"].as_u64()),
        (Some(40500), Some(41))
    );
    let pattern = zcnet::Pattern::new(7);
    let mut buf = [0u8; 2048];
    for i in 0..41u64 {
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(n, if i == 40 { 500 } else { 1000 }, "datagram {i}");
        pattern
            .verify(i * 1000, &buf[..n])
            .unwrap_or_else(|m| panic!("datagram {i}: {m}"));
    }
    // UDP without --verify: the same counts, zeros.
    let sj = run_json(&[
        "send",
        "--udp",
        &format!("127.0.0.1:{port}"),
        "--tx",
        "msg-zerocopy",
        "--size",
        "1000",
        "--inflight",
        "4",
        "--bytes",
        "9999",
        "--json",
    ]);
    assert_eq!(
        (sj["bytes"].as_u64(), sj["sends"].as_u64()),
        (Some(9999), Some(10))
    );
    for i in 0..10 {
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(n, if i == 9 { 999 } else { 1000 }, "datagram {i}");
        assert!(buf[..n].iter().all(|&b| b == 0), "datagram {i}");
    }
}

/// `send --udp` with its default `--size` (64K) sends 64,000 B per send, as `bench tx` does on
/// its UDP path (65,536 B do not fit a datagram: it was refused with its own default).
#[zcnet_testkit::test]
fn udp_send_with_the_default_size_sends_64000_bytes_per_send() {
    let rx = UdpSocket::bind("127.0.0.1:0").expect("bind");
    rx.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let port = rx.local_addr().expect("addr").port();
    let o = run(&[
        "send",
        "--udp",
        &format!("127.0.0.1:{port}"),
        "--tx",
        "copy",
        "--verify",
        "--bytes",
        "64000",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(
        (v["bytes"].as_u64(), v["sends"].as_u64()),
        (Some(64000), Some(1))
    );
    // Cut by UDP GSO into 1,472-byte datagrams (sizes above 1472 B use it), 64,000 B in all.
    let (mut buf, mut got) = (vec![0u8; 65536], 0);
    while got < 64000 {
        got += rx.recv(&mut buf).expect("the send's datagrams");
    }
    assert_eq!(got, 64000);
}

/// `--stall-timeout`: a receiver that accepts and never reads fills the socket, and the sender
/// gives up after the seconds given (exit 1, the stall named), not the default 10.
#[zcnet_testkit::test(timeout = 60)]
fn a_sender_to_a_receiver_that_never_reads_gives_up_at_its_stall_timeout() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let held = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        // Held open, never read, until the sender has given up.
        std::thread::sleep(Duration::from_secs(20));
        drop(s);
    });
    let t0 = Instant::now();
    let o = run(&[
        "send",
        &addr,
        "--tx",
        "copy",
        "--verify",
        "--bytes",
        "1G",
        "--stall-timeout",
        "1.5",
    ]);
    let took = t0.elapsed();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("for 1 s") || err.contains("for 2 s"), "{err}");
    assert!(err.contains("is the receiver reading?"), "{err}");
    assert!(
        took < Duration::from_secs(9),
        "gave up after {took:?}: {err}"
    );
    drop(held);
}

zcnet_testkit::main!();
