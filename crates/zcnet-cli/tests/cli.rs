//! The `zcnet` command's refusals as a user meets them: exit codes, one-line errors that
//! name the flag and the fix, and a bad argument refused before anything is made.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;
use common::cli::run;
use common::{is_root, need_nobody, need_root, stderr, zcnet_as_nobody};

use std::net::UdpSocket;
use std::process::{Command, Output};

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

/// A link-local address is said back with its scope by name, as it can be typed again: the
/// standard library would say `[fe80::1%1]`.
#[zcnet_testkit::test(timeout = 30)]
fn a_scoped_address_is_said_by_its_interface_name() {
    // Nothing on lo has fe80::1: the connect fails at once (no route), the listen with
    // EADDRNOTAVAIL ("not an address of this host"), and both lines name the address.
    let o = run(&["send", "[fe80::1%lo]:9", "--bytes", "1K"]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(e.contains("[fe80::1%lo]:9") && !e.contains("%1]"), "{e}");
    let o = run(&["recv", "--listen", "[fe80::1%lo]:9"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("[fe80::1%lo]:9") && !e.contains("%1]"), "{e}");
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
