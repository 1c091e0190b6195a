//! `zcnet recv --rx zcrx --no-device`: zcrx without a network device (ZCRX_REG_NODEV, Linux
//! 7.1+). On this host's kernel (6.18) it is refused with the kernel's EINVAL and one line
//! naming Linux 7.1 (exit 1); wrong combinations are usage errors (exit 2). In the kernel lab
//! (scripts/kernel-lab.sh --kernel 7.2, QEMU TCG) two receivers each take a stream of a
//! different size over 127.0.0.1 through an area of four pages (every buffer goes round
//! hundreds of times: the refill ring must be flushed), check it byte for byte, and report
//! every byte as copied, none as zero-copy. When the lab cannot start (no qemu, busybox, or
//! Debian archive: exit 2 before booting) the lab test skips with the script's one line.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;
use common::zcnet;

use common::lab_guest::{self, ExeCopy};
use std::process::Command;

use serde_json::Value;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[zcnet_testkit::test]
fn refused_where_the_kernel_does_not_list_it_with_the_kernels_errno() {
    zcnet_testkit::require_root("zcrx checks CAP_NET_ADMIN before the flag");
    if zcnet::probe::ZcrxCaps::get().nodev() {
        zcnet_testkit::skip(
            zcnet_testkit::Need::KernelVersion,
            "this kernel's zcrx query lists ZCRX_REG_NODEV",
        );
    }
    let o = zcnet(&[
        "recv",
        "--rx",
        "zcrx",
        "--no-device",
        "--listen",
        "127.0.0.1:0",
        "--discard",
    ]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("needs ZCRX_REG_NODEV, which this kernel's zcrx query does not list"),
        "{err}"
    );
    assert!(err.contains("os error 22"), "the kernel's EINVAL: {err}");
    assert!(err.contains("--rx uring"), "the fix: {err}");
    assert!(
        !err.contains("listening"),
        "refused before listening: {err}"
    );
}

#[zcnet_testkit::test]
fn wrong_combinations_are_usage_errors() {
    for (args, want) in [
        (&["--rx", "auto"][..], "--no-device applies to --rx zcrx"),
        (&["--rx", "uring"][..], "--no-device applies to --rx zcrx"),
        (&["--rx", "zcrx", "--iface", "lo"][..], "drop --iface"),
        (&["--rx", "zcrx", "--queue", "0"][..], "drop --queue"),
        (&["--udp"][..], "drop it, or drop --udp"),
        (&["--rx", "af-xdp"][..], "drop it, or drop --udp"),
        // Without a device the kernel copies into pages: no other buffer size.
        (
            &["--rx", "zcrx", "--rx-buf-len", "64K"][..],
            "receives into buffers of a page",
        ),
    ] {
        let mut a = vec!["recv", "--no-device", "--listen", "127.0.0.1:0"];
        a.extend_from_slice(args);
        let o = zcnet(&a);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{a:?}: {err}");
        assert!(err.contains(want), "{a:?}: {err}");
    }
}

#[zcnet_testkit::test]
fn buffer_sizes_are_checked_before_listening() {
    for (args, want) in [
        (
            &["--rx", "uring", "--rx-buf-len", "64K"][..],
            "add --rx zcrx",
        ),
        (
            &["--rx", "zcrx", "--iface", "lo", "--rx-buf-len", "12K"][..],
            "power of two",
        ),
        (
            &["--rx", "zcrx", "--iface", "lo", "--rx-buf-len", "4M"][..],
            "--rx-buf-len",
        ),
    ] {
        let mut a = vec!["recv", "--listen", "127.0.0.1:0"];
        a.extend_from_slice(args);
        let o = zcnet(&a);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{a:?}: {err}");
        assert!(err.contains(want), "{a:?}: {err}");
        assert!(!err.contains("listening"), "{a:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{a:?}: {err}");
    }
}

/// The guest's script: `$1` is zcnet; two receivers (4 MiB seed 1 on :7001, 1 MiB seed 7 on
/// :7002, a 16 KiB area each) and their senders, all at once; then each sender's exit status
/// as `S<n> <status>` and each receiver's with its JSON document as `R<n> <status> <json>`
/// (their stderr goes to the script's, for the failure message).
const SCRIPT: &str = r#"
Z=$1
up() { for _ in $(seq 300); do grep -q listening "$1" && return 0; sleep 0.1; done; cat "$1" >&2; return 1; }
recv() { "$Z" recv --rx zcrx --no-device --area 16K --verify --json --bytes "$2" --seed "$3" --listen 127.0.0.1:"$1"; }
recv 7001 4M 1 >/tmp/r1 2>/tmp/e1 & p1=$!
recv 7002 1M 7 >/tmp/r2 2>/tmp/e2 & p2=$!
up /tmp/e1 && up /tmp/e2 || exit 3
"$Z" send --verify --bytes 4M --seed 1 127.0.0.1:7001 & s1=$!
"$Z" send --verify --bytes 1M --seed 7 127.0.0.1:7002 & s2=$!
wait $s1; echo "S1 $?"; wait $s2; echo "S2 $?"
wait $p1; echo "R1 $? $(cat /tmp/r1)"
wait $p2; echo "R2 $? $(cat /tmp/r2)"
cat /tmp/e1 /tmp/e2 >&2
"#;

#[zcnet_testkit::test(timeout = 900)]
fn loopback_streams_verified_and_counted_as_copied_on_7_2() {
    // Already on 7.2 (this test inside the lab's guest, scripts/kernel-lab-tests.sh): the
    // script runs here; else in a 7.2 guest of its own.
    let here = zcnet_testkit::kernel_version().is_some_and(|v| v >= (7, 2));
    let o = if here {
        zcnet_testkit::require_root("zcrx needs CAP_NET_ADMIN");
        Command::new("sh")
            .args(["-c", SCRIPT, "sh", env!("CARGO_BIN_EXE_zcnet")])
            .output()
            .unwrap()
    } else {
        let z = ExeCopy::zcnet();
        lab_guest::guest("7.2", 600, &["sh", "-c", SCRIPT, "sh", z.path()], &[])
    };
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "the guest script: {err}");
    let out = text(&o.stdout);
    for tag in ["S1 0", "S2 0"] {
        assert!(out.lines().any(|l| l == tag), "{tag}: {out}\n{err}");
    }
    for (tag, len) in [("R1", 4u64 << 20), ("R2", 1 << 20)] {
        let line = out
            .lines()
            .find_map(|l| l.strip_prefix(tag))
            .unwrap_or_else(|| panic!("no {tag} in: {out}\n{err}"));
        let (status, json) = line.trim().split_once(' ').unwrap_or((line.trim(), ""));
        assert_eq!(status, "0", "{tag}: {line}\n{err}");
        let j: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{tag} ({e}): {line}"));
        assert_eq!(j["rx"], "zcrx", "{j}");
        assert_eq!(j["verified"], true, "{j}");
        assert_eq!(j["bytes"], len, "{j}");
        // The kernel copied every byte: none of it is zero-copy, nothing is unknown.
        assert_eq!(j["copied_bytes"], len, "{j}");
        assert_eq!(j["zerocopy_bytes"], 0, "{j}");
        assert_eq!(j["unknown_copy_bytes"], 0, "{j}");
    }
}

zcnet_testkit::main!();
