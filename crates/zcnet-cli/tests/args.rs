//! Bad values are rejected before anything is connected, listened on, allocated or set up: exit
//! code 2, one line on stderr that names the flag, no errno text, at once. A benchmark whose
//! cases fail, or that has nothing it can run, exits non-zero.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;
use common::{need_nobody, stderr, zcnet, zcnet_as_nobody};

use std::net::TcpListener;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use zcnet_tools::lab::Lab;

/// `ADDR` in a case stands for the address of a listener that must see no connection.
const ADDR: &str = "ADDR";

#[zcnet_testkit::test]
fn bad_values_exit_2_naming_the_flag_before_anything_happens() {
    let cases: &[(&[&str], &str)] = &[
        (&["send", ADDR, "--verify", "--size", "0"], "--size"),
        (&["send", ADDR, "--verify", "--size", "10G"], "--size"),
        (&["send", ADDR, "--verify", "--size", "lots"], "--size"),
        (&["send", ADDR, "--verify", "--bytes", "0"], "--bytes"),
        (&["send", ADDR, "--bytes", "0"], "--bytes"),
        (&["send", ADDR, "--duration", "0"], "--duration"),
        (&["send", ADDR, "--duration", "-1"], "--duration"),
        (&["send", ADDR, "--duration=-0.5"], "--duration"),
        (&["send", ADDR, "--verify", "--inflight", "0"], "--inflight"),
        (
            &["send", ADDR, "--verify", "--inflight", "-1"],
            "--inflight",
        ),
        (
            &["send", ADDR, "--verify", "--inflight", "5000"],
            "--inflight",
        ),
        (
            &[
                "send",
                ADDR,
                "--verify",
                "--size",
                "64M",
                "--inflight",
                "64",
            ],
            "--inflight",
        ),
        (
            &["send", ADDR, "--udp", "--verify", "--size", "65508"],
            "--size",
        ),
        (&["send", ADDR, "--mem", "cuda", "--size", "0"], "--size"),
        (
            &["recv", "--listen", "127.0.0.1:0", "--buf-size", "0"],
            "--buf-size",
        ),
        (
            &["recv", "--listen", "127.0.0.1:0", "--buf-size", "10G"],
            "--buf-size",
        ),
        (
            &["recv", "--listen", "127.0.0.1:0", "--buffers", "0"],
            "--buffers",
        ),
        (
            &["recv", "--listen", "127.0.0.1:0", "--area", "0"],
            "--area",
        ),
        (&["bench", "tx", "--size", "0"], "--size"),
        (&["bench", "tx", "--size", "4K,10G"], "--size"),
        (
            &["bench", "tx", "--path", "sink", "--size", "65508"],
            "--size",
        ),
        (&["bench", "tx", "--duration", "0"], "--duration"),
        (&["bench", "tx", "--duration", "-3"], "--duration"),
        (&["bench", "tx", "--inflight", "0"], "--inflight"),
        (&["bench", "tx", "--inflight", "5000"], "--inflight"),
        (&["bench", "tx", "--window", "2G"], "--window"),
        (&["bench", "tx", "--window", "wide"], "--window"),
        (&["send", ADDR, "--verify", "--window", "-1"], "--window"),
        (&["bench", "rx", "--size", "0"], "--size"),
        (&["bench", "rx", "--size", "10G"], "--size"),
        (&["bench", "rx", "--duration", "0"], "--duration"),
        (&["bench", "rx", "--duration", "-1"], "--duration"),
        (&["bench", "rx", "--connections", "0"], "--connections"),
        (&["bench", "rx", "--threads", "0"], "--threads"),
        (&["bench", "rx", "--buffers", "0"], "--buffers"),
        (&["bench", "rx", "--buf-size", "0"], "--buf-size"),
        (&["bench", "rx", "--mem", "cuda", "--size", "0"], "--size"),
        (
            &["bench", "rx", "--mem", "cuda", "--duration", "0"],
            "--duration",
        ),
    ];
    for (args, flag) in cases {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let args: Vec<&str> = args
            .iter()
            .map(|a| if *a == ADDR { addr.as_str() } else { a })
            .collect();
        let t0 = Instant::now();
        let o = zcnet(&args);
        let took = t0.elapsed();
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        let lines: Vec<&str> = e.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{args:?}: one line expected: {e}");
        assert!(
            lines[0].contains(flag),
            "{args:?}: does not name {flag}: {e}"
        );
        assert!(
            !e.contains("os error") && !e.contains("invalid input parameter"),
            "{args:?}: errno text: {e}"
        );
        assert!(o.stdout.is_empty(), "{args:?}: printed a result");
        // Rejected, not run: a bench would take seconds per case, a send would connect.
        assert!(took < Duration::from_secs(2), "{args:?}: took {took:?}");
        match l.accept() {
            Err(x) if x.kind() == std::io::ErrorKind::WouldBlock => {}
            other => panic!("{args:?}: connected before rejecting: {other:?}"),
        }
    }
}

#[zcnet_testkit::test]
fn parser_errors_are_one_line_naming_the_flag() {
    for (args, flag) in [
        (
            &["send", "127.0.0.1:9", "--inflight", "many"][..],
            "--inflight",
        ),
        (&["bench", "rx", "--threads", "-2"][..], "--threads"),
        (&["send", "127.0.0.1:9", "--sise", "4K"][..], "--size"),
        (&["nic", "setup", "--queue", "1"][..], "--iface"),
        // Sizes and counts past what a run can use: said before anything is allocated.
        (
            &["recv", "--listen", "127.0.0.1:0", "--area", "1T"][..],
            "--area 1T is over its limit of 64G",
        ),
        (
            &["bench", "rx", "--connections", "100000"][..],
            "--connections 100000: give a number from 1 to 4096",
        ),
        (
            &["bench", "rx", "--threads", "5000"][..],
            "--threads 5000: give a number from 1 to 1024",
        ),
        // Options that would be ignored are refused: a protocol without a port to steer, and
        // --keep with a command it would never run.
        (
            &[
                "nic", "setup", "--iface", "lo", "--queue", "0", "--proto", "udp",
            ][..],
            "--port",
        ),
        (
            &["nic", "setup", "--iface", "lo", "--queue", "0", "--ipv6"][..],
            "--port",
        ),
        (
            &[
                "nic", "setup", "--iface", "lo", "--queue", "0", "--keep", "--", "true",
            ][..],
            "--keep",
        ),
    ] {
        let o = zcnet(args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert_eq!(e.lines().count(), 1, "{args:?}: {e}");
        assert!(e.contains(flag), "{args:?}: {e}");
    }
}

#[zcnet_testkit::test]
fn a_failed_bench_case_makes_the_run_fail() {
    // devmem TX cannot run on loopback (no dma-buf without a device, or lo has no netmem TX):
    // its row fails; copy's runs. The table is printed, and the run exits 1 saying so.
    let o = zcnet(&[
        "bench",
        "tx",
        "--path",
        "loopback",
        "--tx",
        "copy,devmem",
        "--size",
        "16K",
        "--duration",
        "0.2",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{e}");
    assert!(
        out.contains("loopback  devmem") && out.contains("failed:"),
        "{out}"
    );
    assert!(
        e.lines()
            .last()
            .unwrap()
            .contains("bench tx: 1 of 2 case(s) failed"),
        "{e}"
    );
    // The same with --json: the document, then the exit code.
    let o = zcnet(&[
        "bench",
        "tx",
        "--path",
        "loopback",
        "--tx",
        "devmem",
        "--size",
        "16K",
        "--duration",
        "0.2",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(doc["results"][0]["error"].is_string(), "{doc}");
}

#[zcnet_testkit::test]
fn bench_tx_without_root_and_without_loopback_says_nothing_can_run() {
    need_nobody();
    for path in ["sink,veth", "sink", "veth"] {
        let o = zcnet_as_nobody(&["bench", "tx", "--path", path, "--duration", "0.2"]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{path}: {e}");
        assert!(o.stdout.is_empty(), "{path}: printed a table");
        assert_eq!(e.lines().count(), 1, "{path}: {e}");
        assert!(
            e.contains("nothing can run") && e.contains("needs root"),
            "{path}: {e}"
        );
    }
    // With loopback in the list, loopback runs and a note says what was left out.
    let o = zcnet_as_nobody(&[
        "bench",
        "tx",
        "--path",
        "sink,veth,loopback",
        "--tx",
        "copy",
        "--size",
        "16K",
        "--duration",
        "0.2",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["results"].as_array().unwrap().len(), 1, "{doc}");
    let notes = doc["notes"].to_string();
    assert!(
        notes.contains(
            "not root: running the loopback path only (sink and veth need network namespaces"
        ),
        "{notes}"
    );
}

/// `zcnet nic channels --iface vA ARGS` inside namespace `ns`.
fn channels_in(ns: &str, args: &[&str]) -> Output {
    Command::new("ip")
        .args(["netns", "exec", ns, env!("CARGO_BIN_EXE_zcnet")])
        .args(["nic", "channels", "--iface", "vA"])
        .args(args)
        .output()
        .unwrap()
}

#[zcnet_testkit::test]
fn nic_channels_bad_input_is_one_line_naming_it_and_changes_nothing() {
    // The parser and the interface lookup: no device, no root needed.
    for (args, named) in [
        (&["nic", "channels"][..], "--iface"),
        (&["nic", "channels", "--iface", "nosuch0"][..], "'nosuch0'"),
        (
            &["nic", "channels", "--iface", "nosuch0", "--combined", "2"][..],
            "'nosuch0'",
        ),
        (
            &["nic", "channels", "--iface", "lo", "--rx", "lots"][..],
            "--rx",
        ),
        (
            &["nic", "channels", "--iface", "lo", "--tx", ""][..],
            "--tx",
        ),
        (
            &[
                "nic",
                "channels",
                "--iface",
                "lo",
                "--combined",
                "99999999999",
            ][..],
            "--combined",
        ),
        (
            &["nic", "channels", "--iface", "lo", "--rx", "-1"][..],
            "--rx",
        ),
        (
            &["nic", "setup", "--iface", "lo", "--queue", "-1"][..],
            "--queue",
        ),
    ] {
        let o = zcnet(args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert_eq!(e.lines().count(), 1, "{args:?}: {e}");
        assert!(e.contains(named), "{args:?}: does not name {named}: {e}");
        assert!(o.stdout.is_empty(), "{args:?}: printed counts");
    }
    // Counts a device refuses, on a veth (rx and tx channels, at most one per CPU; no
    // combined ones) in a lab namespace.
    let mut lab = match Lab::new() {
        Ok(l) => l,
        Err(zcnet::Error::NotRoot { .. }) => zcnet_testkit::skip(
            zcnet_testkit::Need::Root,
            "the device half needs network namespaces",
        ),
        Err(e) => panic!("lab: {e}"),
    };
    let v = lab.veth().unwrap();
    let counts = || {
        let o = channels_in(&v.a, &["--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["channels"].clone()
    };
    let before = counts();
    assert_eq!(before["combined"]["max"], 0, "{before}");
    // Past the driver's maximum: a usage error, said before anything is asked of the kernel.
    for (args, flag) in [
        (&["--rx", "100000"][..], "--rx 100000"),
        (&["--tx", "4294967295"][..], "--tx 4294967295"),
        (&["--combined", "1"][..], "--combined 1"),
        (&["--rx", "1", "--combined", "1"][..], "--combined 1"),
    ] {
        let o = channels_in(&v.a, args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert_eq!(e.lines().count(), 1, "{args:?}: {e}");
        assert!(
            e.contains(flag) && e.contains("allows at most"),
            "{args:?}: {e}"
        );
        assert!(o.stdout.is_empty(), "{args:?}: printed counts");
        assert_eq!(counts(), before, "{args:?} changed the channels");
    }
    // A count of 0 that leaves no RX (or TX) channel (the kernel would refuse it): a usage
    // error naming the flag, said before the kernel is asked.
    for (args, count) in [(&["--rx", "0"][..], "rx"), (&["--tx", "0"][..], "tx")] {
        let o = channels_in(&v.a, args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert_eq!(e.lines().count(), 1, "{args:?}: {e}");
        assert!(
            e.contains(&format!("--{count} 0")) && e.contains("no"),
            "{args:?}: does not name the count: {e}"
        );
        assert_eq!(counts(), before, "{args:?} changed the channels");
    }
}

zcnet_testkit::main!();
