//! `zcnet bench tx` as a user runs it: the warning when other processes took CPU during a case,
//! and the "zcnet overhead" lines (what the ratio means, the spread of repeated runs); and the
//! raw SEND_ZC loop of `zcnet bench raw` with its kernel-facing choices flipped.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;
use common::zcnet;

use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs `zcnet ARGS` while this process (another process, to zcnet) keeps every CPU busy.
fn zcnet_on_a_busy_machine(args: &[&str]) -> Output {
    let stop = AtomicBool::new(false);
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..cpus {
            s.spawn(|| {
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                }
            });
        }
        let o = zcnet(args);
        stop.store(true, Ordering::Relaxed);
        o
    })
}

#[zcnet_testkit::test(timeout = 60)]
fn a_case_that_shared_the_machine_says_so() {
    let args = [
        "bench",
        "tx",
        "--path",
        "loopback",
        "--tx",
        "copy",
        "--size",
        "64K",
        "--duration",
        "1",
    ];
    let o = zcnet_on_a_busy_machine(&args);
    let out = stdout(&o);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains("warning: other processes used") && out.contains("not quiet"),
        "{out}"
    );
    let o = zcnet_on_a_busy_machine(&[&args[..], &["--json"]].concat());
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let other = doc["results"][0]["other_cpu_seconds"].as_f64();
    assert!(other.is_some_and(|x| x > 0.1), "{doc}");
}

#[zcnet_testkit::test(timeout = 120)]
fn overhead_lines_say_what_the_ratio_means_and_show_the_spread() {
    zcnet_testkit::require_root("the sink path is in a namespace lab");
    let o = zcnet(&[
        "bench",
        "tx",
        "--path",
        "sink",
        "--tx",
        "copy,msg-zerocopy",
        "--size",
        "16K",
        "--duration",
        "0.6",
    ]);
    let out = stdout(&o);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let head = out
        .lines()
        .find(|l| l.starts_with("zcnet overhead"))
        .unwrap_or_else(|| panic!("no overhead heading: {out}"));
    assert!(
        head.contains("1.00 = no overhead") && head.contains("noise"),
        "{out}"
    );
    let line = out
        .lines()
        .find(|l| l.contains("msg-zerocopy / raw-msg-zerocopy"))
        .unwrap_or_else(|| panic!("no overhead line: {out}"));
    // Two decimals and the range of the paired runs, not one number to three decimals.
    assert!(line.contains("3 paired runs"), "{line}");
    let ratio = line.split(": ").nth(1).unwrap().split(' ').next().unwrap();
    assert_eq!(ratio.split('.').nth(1).map(str::len), Some(2), "{line}");
}

/// `bench raw --loop send-zc` over loopback, where the kernel copies every zero-copy send
/// (the datagram is delivered to a local socket): with zcnet's choices every notification says
/// so (IORING_SEND_ZC_REPORT_USAGE); with liburing's example's (`--no-report-usage` and the
/// rest) none does, because nobody asked. A send-zc flag with another loop is refused by name.
#[zcnet_testkit::test(timeout = 60)]
fn the_raw_send_zc_loop_takes_the_examples_choices_one_by_one() {
    let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = sink.local_addr().unwrap().to_string();
    let run = |extra: &[&str]| {
        let args = [
            &[
                "bench",
                "raw",
                "--loop",
                "send-zc",
                "--size",
                "1000",
                "--duration",
                "0.3",
                "--json",
            ][..],
            extra,
            &[to.as_str()],
        ]
        .concat();
        let o = zcnet(&args);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        if !o.status.success() && err.contains("Invalid argument") {
            zcnet_testkit::skip(
                zcnet_testkit::Need::Kernel,
                format!("SEND_ZC refused: {err}"),
            );
        }
        assert!(o.status.success(), "{args:?}: {}{err}", stdout(&o));
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let n = |k: &str| doc[k].as_u64().unwrap_or_else(|| panic!("{k}: {doc}"));
        assert!(n("sends") > 100, "{doc}");
        assert_eq!(n("bytes"), 1000 * n("sends"), "{doc}");
        assert!(n("notifications") > 0, "{doc}");
        let example = extra.contains(&"--one-buffer");
        assert_eq!(doc["choices"]["one_buffer"], example, "{doc}");
        assert_eq!(doc["choices"]["report_usage"], !example, "{doc}");
        (n("notifications"), n("copied_notifications"))
    };
    let (notes, copied) = run(&[]);
    assert_eq!(
        copied, notes,
        "loopback copies every send, and zcnet's choice asks the kernel to say so"
    );
    let (notes, copied) = run(&[
        "--no-report-usage",
        "--one-buffer",
        "--ring-fd",
        "--single-issuer",
        "--no-fixed-file",
    ]);
    assert!(notes > 0);
    assert_eq!(
        copied, 0,
        "without REPORT_USAGE no notification says anything"
    );
    let o = zcnet(&[
        "bench",
        "raw",
        "--loop",
        "msg-zerocopy",
        "--one-buffer",
        &to,
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "a usage error: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("--one-buffer applies to --loop send-zc or send only"),
        "{err}"
    );
}

/// `bench raw --loop send`: the same loop of IORING_OP_SEND (the `uring` backend's yardstick),
/// which the kernel answers with one CQE per send and no notification; the example's choices
/// apply to it, all but `--no-report-usage` (no usage to report), which is refused by name.
#[zcnet_testkit::test(timeout = 60)]
fn the_raw_send_loop_sends_without_notifications() {
    let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = sink.local_addr().unwrap().to_string();
    let base = [
        "bench",
        "raw",
        "--loop",
        "send",
        "--size",
        "1000",
        "--duration",
        "0.3",
        "--json",
    ];
    for extra in [
        &[][..],
        &["--one-buffer", "--ring-fd", "--single-issuer"][..],
    ] {
        let args = [&base[..], extra, &[to.as_str()]].concat();
        let o = zcnet(&args);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{args:?}: {}{err}", stdout(&o));
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let n = |k: &str| doc[k].as_u64().unwrap_or_else(|| panic!("{k}: {doc}"));
        assert!(n("sends") > 100, "{doc}");
        assert_eq!(n("bytes"), 1000 * n("sends"), "{doc}");
        assert_eq!(n("notifications"), 0, "IORING_OP_SEND has none: {doc}");
        assert_eq!(doc["choices"]["zero_copy"], false, "{doc}");
        assert_eq!(
            doc["choices"]["report_usage"], false,
            "no usage to report: {doc}"
        );
        assert_eq!(doc["choices"]["one_buffer"], !extra.is_empty(), "{doc}");
        assert_eq!(doc["choices"]["single_issuer"], !extra.is_empty(), "{doc}");
    }
    let o = zcnet(&[&base[..], &["--no-report-usage", to.as_str()][..]].concat());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "a usage error: {err}");
    assert!(
        err.contains("--no-report-usage applies to --loop send-zc only"),
        "{err}"
    );
}

zcnet_testkit::main!();
