//! The `zcnet` command as a user runs it: exit codes, one-line errors, send/recv round trips,
//! the JSON document, and Ctrl-C during a lab benchmark leaving nothing behind.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;
use common::{is_root, need_nobody, need_root, stderr, zcnet_as_nobody};

use std::io::{BufRead, BufReader, Read, Write};
use std::net::UdpSocket;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn zcnet() -> Command {
    Command::new(env!("CARGO_BIN_EXE_zcnet"))
}

fn run(args: &[&str]) -> Output {
    zcnet().args(args).output().unwrap()
}

fn netns_list() -> String {
    String::from_utf8_lossy(
        &Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap()
            .stdout,
    )
    .into_owned()
}

/// Runs `zcnet ARGS` (which must print one JSON document), asserts success, returns the document.
fn run_json(args: &[&str]) -> serde_json::Value {
    let o = run(args);
    assert!(o.status.success(), "zcnet {args:?}: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Starts `zcnet recv` on an ephemeral port, stdout piped; returns the child and the port.
fn start_recv(extra: &[&str]) -> (Child, u16) {
    common::start_recv(extra, Stdio::piped())
}

#[zcnet_testkit::test]
fn unknown_mode_is_a_one_line_usage_error() {
    let o = run(&["send", "127.0.0.1:9", "--tx", "bogus"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.contains("unknown send mode 'bogus'") && e.contains("msg-zerocopy"),
        "{e}"
    );
    let o = run(&["bench", "tx", "--path", "wifi"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unknown path 'wifi'"));
    let o = run(&["send", "not-an-address", "--verify"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("bad address"));
}

#[zcnet_testkit::test]
fn refused_connection_names_the_fix() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    let o = run(&[
        "send",
        &format!("127.0.0.1:{port}"),
        "--verify",
        "--bytes",
        "1M",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("connection refused") && e.contains("zcnet recv"),
        "{e}"
    );
}

#[zcnet_testkit::test]
fn oversized_udp_payload_is_refused() {
    // A bad argument: exit 2 (docs/cli.md, "Exit codes").
    let o = run(&[
        "send",
        "127.0.0.1:9",
        "--udp",
        "--size",
        "65508",
        "--verify",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("65507"), "{}", stderr(&o));
}

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

#[zcnet_testkit::test]
fn recv_refusals_are_one_line_errors() {
    let o = run(&["recv", "--listen", "127.0.0.1:0", "--rx", "bogus"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("unknown receive mode 'bogus'") && e.contains("uring"),
        "{e}"
    );
    for rx in ["zcrx", "devmem"] {
        // The flag, not the library's field (RxConfig::iface); a missing
        // flag is a usage error (exit 2), said before anything is opened.
        for mem in ["host", "cuda"] {
            let o = run(&["recv", "--listen", "127.0.0.1:0", "--rx", rx, "--mem", mem]);
            assert_eq!(o.status.code(), Some(2), "{rx} {mem}: {}", stderr(&o));
            let e = stderr(&o);
            assert_eq!(e.lines().count(), 1, "{rx}: {e}");
            assert!(
                e.contains(&format!("--rx {rx} needs --iface IFACE")),
                "{rx}: {e}"
            );
            assert!(!e.contains("RxConfig"), "{rx}: {e}");
        }
    }
    let o = run(&[
        "recv",
        "--listen",
        "127.0.0.1:0",
        "--rx",
        "zcrx",
        "--iface",
        "nosuch0",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("no interface named 'nosuch0'"),
        "{}",
        stderr(&o)
    );
}

/// Asserts that `o` is the one-line refusal of `--queue Q` on `iface` (which has `n` queues):
/// exit 2, naming the flag, the count and the fix, and nothing listened on.
pub fn assert_no_such_queue(o: &Output, iface: &str, queue: u32, n: u32) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.contains(&format!("--queue {queue}: {iface} has {n} ")) && e.contains("pick one of them"),
        "{e}"
    );
    assert!(!e.contains("listening on"), "{e}");
}

/// A queue the interface does not have is a bad argument (exit 2) said before anything is made:
/// no ring, no listening socket, no XDP program, no NIC change.
#[zcnet_testkit::test]
fn a_queue_the_interface_lacks_is_refused_before_anything_is_made() {
    for rx in ["zcrx", "devmem", "auto"] {
        let o = run(&[
            "recv",
            "--listen",
            "127.0.0.1:0",
            "--rx",
            rx,
            "--iface",
            "lo",
            "--queue",
            "7",
        ]);
        assert_no_such_queue(&o, "lo", 7, 1);
        assert!(stderr(&o).contains("leave --queue out"), "{}", stderr(&o));
    }
    let o = run(&[
        "recv",
        "--udp",
        "--rx",
        "af-xdp",
        "--iface",
        "lo",
        "--queue",
        "9",
        "--listen",
        "127.0.0.1:0",
    ]);
    assert_no_such_queue(&o, "lo", 9, 1);
    let o = run(&[
        "send",
        "--udp",
        "--tx",
        "af-xdp",
        "--iface",
        "lo",
        "--queue",
        "9",
        "--size",
        "1K",
        "--bytes",
        "1K",
        "127.0.0.2:9",
    ]);
    assert_no_such_queue(&o, "lo", 9, 1);
    let o = run(&["nic", "setup", "--iface", "lo", "--queue", "99"]);
    assert_no_such_queue(&o, "lo", 99, 1);
    // lo cannot split headers: no command to add queues is offered for zero-copy receive.
    assert!(
        stderr(&o).contains("more queues would not help"),
        "{}",
        stderr(&o)
    );
    // The queue it has is not refused as missing (lo's own reason comes instead).
    let o = run(&["nic", "setup", "--iface", "lo", "--queue", "0"]);
    assert!(!stderr(&o).contains("--queue 0:"), "{}", stderr(&o));
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

/// `nic restore` restores every state file it can and says which it could not: one whose
/// interface is gone does not stop the others (it did, at the first), and `nic status` shows
/// the rest too.
#[zcnet_testkit::test(timeout = 60)]
fn nic_restore_goes_on_past_a_file_it_cannot_restore() {
    need_root("nic restore");
    let dir = std::env::temp_dir().join(format!("zcnet-restore-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let netns = std::os::unix::fs::MetadataExt::ino(
        &std::fs::metadata("/proc/thread-self/ns/net").unwrap(),
    );
    // Owners long gone (pid 0 is no process's); "zzgone0" is no interface; lo's file records
    // no change, so restoring it only removes it.
    for iface in ["aa-zzgone0", "lo"] {
        let name = iface.trim_start_matches("aa-");
        std::fs::write(
            dir.join(format!("nic-{netns}-{iface}.state")),
            format!(
                "zcnet-nic-state 1\nowner pid=0 iface={name} ifindex=999 netns={netns} queue=0\n"
            ),
        )
        .unwrap();
    }
    let nic = |args: &[&str]| {
        zcnet()
            .args(args)
            .env("ZCNET_STATE_DIR", &dir)
            .output()
            .unwrap()
    };
    let st = nic(&["nic", "status"]);
    assert!(
        stderr(&st).is_empty() || st.status.success(),
        "{}",
        stderr(&st)
    );
    let out = String::from_utf8_lossy(&st.stdout).into_owned();
    assert!(out.contains("zzgone0") && out.contains("lo:"), "{out}");
    let o = nic(&["nic", "restore"]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("zzgone0") && e.contains("1 of 2 state file(s) not restored"),
        "{e}"
    );
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(
        left.len(),
        1,
        "lo's file restored and removed, the other left: {left:?}"
    );
    assert!(left[0].to_string_lossy().contains("zzgone0"), "{left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
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
fn unprivileged_zcrx_and_devmem_on_lo_are_refused_for_los_reason_not_for_root() {
    // Without CAP_NET_ADMIN the kernel says EPERM before it looks at the
    // device, and the message told the user to run it as root, where lo is refused too.
    need_nobody();
    for rx in ["zcrx", "devmem"] {
        let o = zcnet_as_nobody(&[
            "recv",
            "--listen",
            "127.0.0.1:0",
            "--rx",
            rx,
            "--iface",
            "lo",
        ]);
        assert_eq!(o.status.code(), Some(1), "{rx}: {}", stderr(&o));
        let e = stderr(&o);
        assert_eq!(e.lines().count(), 1, "{rx}: {e}");
        assert!(!e.contains("run it as root"), "{rx}: {e}");
        assert!(e.contains("root is refused too"), "{rx}: {e}");
        assert!(e.contains("no queue-management ops"), "{rx}: {e}");
        // What root gets: the same device reason, from the kernel.
        if is_root() {
            let o = run(&[
                "recv",
                "--listen",
                "127.0.0.1:0",
                "--rx",
                rx,
                "--iface",
                "lo",
            ]);
            assert_eq!(o.status.code(), Some(1), "{rx}");
            assert!(
                stderr(&o).contains("Operation not supported"),
                "{rx}: {}",
                stderr(&o)
            );
        }
    }
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

#[zcnet_testkit::test]
fn bench_json_on_loopback_has_the_documented_schema() {
    let o = run(&[
        "bench",
        "tx",
        "--path",
        "loopback",
        "--tx",
        "copy,uring-zc",
        "--size",
        "16K",
        "--duration",
        "0.3",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = doc["results"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for r in rows {
        for k in [
            "path",
            "tx",
            "size",
            "inflight",
            "bytes",
            "seconds",
            "mb_per_s",
            "zerocopy_bytes",
            "copied_bytes",
            "cpu_seconds",
        ] {
            assert!(r.get(k).is_some(), "missing {k} in {r}");
        }
        assert_eq!(r["path"], "loopback");
        assert_eq!(r["size"], 16384);
        assert!(r["bytes"].as_u64().unwrap() > 0);
        assert_eq!(r["zerocopy_bytes"], 0, "loopback TCP is copied");
    }
    assert!(
        stderr(&o).contains("[1/2] loopback copy"),
        "progress lines: {}",
        stderr(&o)
    );
}

#[zcnet_testkit::test]
fn ctrl_c_during_a_lab_bench_leaves_no_namespace() {
    need_root("the namespace lab");
    let mut child = zcnet()
        .args(["bench", "tx", "--path", "sink,veth", "--duration", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let start = Instant::now();
    // Wait until the second case runs: the lab exists and a sender is busy.
    while !line.contains("[2/") && start.elapsed() < Duration::from_secs(30) {
        line.clear();
        if err.read_line(&mut line).unwrap() == 0 {
            break;
        }
    }
    let prefix = format!("zcnet-{pid}-");
    let before = netns_list();
    assert!(before.contains(&prefix), "lab not up: {before}");
    assert!(Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    let status = child.wait().unwrap();
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    assert_eq!(status.code(), Some(130), "{rest}");
    assert!(rest.contains("interrupted"), "{rest}");
    let after = netns_list();
    assert!(!after.contains(&prefix), "namespaces left behind: {after}");
}

#[zcnet_testkit::test]
fn memlock_too_small_is_named_with_the_fix() {
    // Root has CAP_IPC_LOCK, which exempts it from RLIMIT_MEMLOCK: drop it with setpriv so the
    // limit applies, then ask for a region larger than the limit.
    let have_setpriv = Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    need_root("dropping CAP_IPC_LOCK");
    if !have_setpriv {
        zcnet_testkit::skip(
            zcnet_testkit::Need::Tool,
            "setpriv (util-linux) drops CAP_IPC_LOCK",
        );
    }
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let script = format!(
        "ulimit -l 64 && exec {} send 127.0.0.1:{port} --tx uring-zc --size 1M --inflight 8 --verify --bytes 1M",
        env!("CARGO_BIN_EXE_zcnet")
    );
    let o = Command::new("setpriv")
        .args([
            "--bounding-set",
            "-ipc_lock",
            "--inh-caps",
            "-ipc_lock",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .output()
        .unwrap();
    let e = stderr(&o);
    // Found before connecting: exit 2 (memlock.rs, memlock_refusal_comes_before_any_connection).
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("RLIMIT_MEMLOCK (65536 B) is too small") && e.contains("ulimit -l"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
    drop(l);
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

/// `send --udp --tx devmem` is refused as a usage error (exit 2) before any socket or memory
/// is made: devmem transmit is TCP only (it exited 1 after creating the socket).
#[zcnet_testkit::test]
fn udp_devmem_send_is_refused_before_anything_is_made() {
    let rx = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let port = rx.local_addr().expect("addr").port();
    let to = format!("127.0.0.1:{port}");
    for mem in ["host", "hugepage"] {
        let o = run(&[
            "send", "--udp", &to, "--tx", "devmem", "--size", "1K", "--bytes", "1M", "--mem", mem,
        ]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "--mem {mem}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(
            err.contains("--tx devmem") && err.contains("--udp"),
            "{err}"
        );
    }
}

/// Negative numbers reach the checks that name the flag (clap took them for options:
/// "unexpected argument '-1' found").
#[zcnet_testkit::test]
fn negative_numbers_are_refused_naming_the_flag() {
    for (args, flag) in [
        (&["send", "127.0.0.1:9", "--size", "-1"][..], "--size"),
        (
            &["send", "127.0.0.1:9", "--verify", "--bytes", "-5"][..],
            "--bytes",
        ),
        (&["send", "127.0.0.1:9", "--queue", "-1"][..], "--queue"),
        (&["send", "127.0.0.1:9", "--seed", "-1"][..], "--seed"),
        (
            &["send", "127.0.0.1:9", "--inflight", "-1"][..],
            "--inflight",
        ),
        (&["recv", "--udp", "--bytes", "-5"][..], "--bytes"),
        (&["recv", "--buf-size", "-1"][..], "--buf-size"),
        (&["recv", "--area", "-1"][..], "--area"),
        (&["recv", "--queue", "-1"][..], "--queue"),
        (&["recv", "--seed", "-1"][..], "--seed"),
        (&["recv", "--buffers", "-1"][..], "--buffers"),
    ] {
        let o = run(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag) && err.contains('-'), "{args:?}: {err}");
        assert!(!err.contains("unexpected argument"), "{args:?}: {err}");
    }
}

zcnet_testkit::main!();

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
