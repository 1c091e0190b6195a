//! `--mem cuda` where there is no CUDA driver (this machine, CI): every entry point fails at
//! once with one line naming the cause and the fix, before anything is connected or listened on.
//! `ZCNET_LIBCUDA` points at a file that does not exist, so the tests mean the same on a
//! machine that has a GPU.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use common::stderr;
use std::net::TcpListener;
use std::process::{Command, Output};

const NO_LIB: &str = "/nonexistent/zcnet-test/libcuda.so.1";

fn zcnet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zcnet"))
        .env("ZCNET_LIBCUDA", NO_LIB)
        .args(args)
        .output()
        .expect("run zcnet")
}

fn one_line(o: &Output) -> String {
    let e = stderr(o);
    let lines: Vec<&str> = e.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line expected, got: {e}");
    lines[0].to_string()
}

/// A listener nobody should connect to; returns it and its address.
fn idle_listener() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.set_nonblocking(true).expect("nonblocking");
    let a = l.local_addr().expect("addr").to_string();
    (l, a)
}

fn assert_not_connected(l: &TcpListener) {
    match l.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("zcnet connected before failing: {other:?}"),
    }
}

#[zcnet_testkit::test]
fn send_from_cuda_without_a_driver_names_the_library_and_the_fix() {
    let (l, addr) = idle_listener();
    for extra in [&[][..], &["--naive"][..], &["--tx", "devmem"][..]] {
        let mut args = vec!["send", addr.as_str(), "--mem", "cuda", "--bytes", "1M"];
        args.extend_from_slice(extra);
        let o = zcnet(&args);
        assert_eq!(o.status.code(), Some(1), "{extra:?}: {}", stderr(&o));
        let line = one_line(&o);
        assert!(line.contains("no CUDA driver library"), "{line}");
        assert!(line.contains(NO_LIB), "names the file tried: {line}");
        assert!(line.contains("--mem host"), "names the alternative: {line}");
        assert_not_connected(&l);
    }
}

#[zcnet_testkit::test]
fn recv_into_cuda_without_a_driver_fails_before_listening() {
    for extra in [
        &[][..],
        &["--naive"][..],
        &["--rx", "devmem", "--iface", "lo"][..],
    ] {
        let mut args = vec!["recv", "--listen", "127.0.0.1:0", "--mem", "cuda:0"];
        args.extend_from_slice(extra);
        let o = zcnet(&args);
        assert_eq!(o.status.code(), Some(1), "{extra:?}: {}", stderr(&o));
        let line = one_line(&o);
        assert!(!line.contains("listening"), "{line}");
        assert!(
            line.contains("opening cuda:0") && line.contains(NO_LIB),
            "{line}"
        );
    }
}

#[zcnet_testkit::test]
fn bad_mem_values_are_refused_before_anything_happens() {
    let (l, addr) = idle_listener();
    let cases: &[(&[&str], &str)] = &[
        (
            &["--mem", "cuda:x", "--bytes", "1M"],
            "unknown --mem 'cuda:x'",
        ),
        (
            &["--mem", "gpu0", "--bytes", "1M"],
            "host, hugepage, udmabuf, cuda[:N]",
        ),
        (&["--mem", "cuda"], "give --bytes, --duration or --verify"),
        (
            &["--mem", "cuda", "--udp", "--naive", "--bytes", "1M"],
            "--naive with --udp",
        ),
        // UDP from GPU memory is staged: here it fails at the driver, before connecting.
        (
            &["--mem", "cuda", "--udp", "--bytes", "1M"],
            "no CUDA driver library",
        ),
    ];
    for (extra, want) in cases {
        let mut args = vec!["send", addr.as_str()];
        args.extend_from_slice(extra);
        let o = zcnet(&args);
        assert_ne!(o.status.code(), Some(0), "{extra:?}");
        let line = one_line(&o);
        assert!(line.contains(want), "{extra:?}: {line}");
        assert_not_connected(&l);
    }
}

#[zcnet_testkit::test]
fn bench_tx_from_cuda_without_a_driver_fails_before_making_a_lab() {
    let before = lab_namespaces();
    let o = zcnet(&["bench", "tx", "--path", "loopback", "--mem", "cuda"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let line = one_line(&o);
    assert!(
        line.contains("no CUDA driver library") && line.contains(NO_LIB),
        "{line}"
    );
    assert_eq!(lab_namespaces(), before);
}

#[zcnet_testkit::test]
fn bench_rx_into_cuda_without_a_driver_fails_before_making_a_lab() {
    let before = lab_namespaces();
    let o = zcnet(&["bench", "rx", "--path", "veth,loopback", "--mem", "cuda:1"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let line = one_line(&o);
    assert!(
        line.contains("no CUDA driver library") && line.contains(NO_LIB),
        "{line}"
    );
    assert!(
        o.stdout.is_empty(),
        "no table: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert_eq!(lab_namespaces(), before);
    // Memory the echo bench cannot use is refused with the choices: a bad argument.
    let o = zcnet(&["bench", "rx", "--path", "loopback", "--mem", "hugepage"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let line = one_line(&o);
    assert!(
        line.contains("--mem host") && line.contains("cuda"),
        "{line}"
    );
}

fn lab_namespaces() -> usize {
    std::fs::read_dir("/run/netns")
        .map(|d| d.count())
        .unwrap_or(0)
}

zcnet_testkit::main!();
