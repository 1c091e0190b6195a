//! `zcnet bench rx` with its `zcrx-nodev` rows: zcrx without a network device (ZCRX_REG_NODEV,
//! Linux 7.1+), the kernel copying every byte into the area. On a kernel without it (this
//! host's 6.18) the row is skipped with the kernel's reason in the default set, and asking for
//! it alone is a one-line error naming the cause and the fix. On Linux 7.1+ (the kernel lab's
//! 7.2 guest runs this executable: scripts/kernel-lab-tests.sh) a short loopback run measures
//! it and counts every received byte as copied, none as zero-copy.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;
use common::{stderr, zcnet};

use serde_json::Value;
use std::process::Output;

/// A short loopback run, small enough for the lab's TCG guest.
const SHORT: &[&str] = &[
    "bench",
    "rx",
    "--path",
    "loopback",
    "--duration",
    "0.3",
    "--size",
    "16K",
    "--connections",
    "2",
    "--threads",
    "1",
];

fn short(extra: &[&str]) -> Output {
    let mut a = SHORT.to_vec();
    a.extend_from_slice(extra);
    zcnet(&a)
}

fn nodev_row(doc: &Value) -> &Value {
    doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["path"] == "loopback" && r["rx"] == "zcrx-nodev")
        .unwrap_or_else(|| panic!("no loopback/zcrx-nodev row in {doc}"))
}

/// Skips on a kernel that has ZCRX_REG_NODEV; the refusal needs root (zcrx checks
/// CAP_NET_ADMIN before it looks at the flag).
fn need_a_kernel_without_nodev() {
    zcnet_testkit::require_root("zcrx checks CAP_NET_ADMIN before the flag");
    if zcnet::probe::ZcrxCaps::get().nodev() {
        zcnet_testkit::skip(
            zcnet_testkit::Need::KernelVersion,
            "this kernel's zcrx query lists ZCRX_REG_NODEV",
        );
    }
}

#[zcnet_testkit::test]
fn alone_it_is_a_one_line_error_before_linux_7_1() {
    need_a_kernel_without_nodev();
    let o = short(&["--rx", "zcrx-nodev"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("needs ZCRX_REG_NODEV"), "{err}");
    assert!(err.contains("os error 22"), "the kernel's EINVAL: {err}");
    assert!(err.contains("needs Linux 7.1 or later"), "the fix: {err}");
    assert!(o.stdout.is_empty(), "nothing ran: {err}");
}

#[zcnet_testkit::test]
fn default_set_shows_it_skipped_with_the_reason_before_linux_7_1() {
    need_a_kernel_without_nodev();
    let mut a = SHORT.to_vec();
    a.push("--json");
    let o = zcnet(&a);
    assert!(
        o.status.success(),
        "skipped is not a failure: {}",
        stderr(&o)
    );
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let r = nodev_row(&doc);
    let why = r["skipped"].as_str().unwrap_or_else(|| panic!("{r}"));
    assert!(why.contains("needs ZCRX_REG_NODEV"), "{r}");
    assert!(r["refused"].is_null() && r["error"].is_null(), "{r}");
    assert!(r["qps"].is_null() && r["ratio_to_copy"].is_null(), "{r}");
    assert!(r["zero_copy_pct"].is_null(), "{r}");
    // The other modes still ran.
    let copy = doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rx"] == "copy")
        .unwrap();
    assert!(copy["qps"].as_f64().unwrap() > 0.0, "{copy}");
    // The table: one line for the row, saying skipped and why.
    let o = short(&["--rx", "copy,zcrx-nodev"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<_> = out.lines().filter(|l| l.contains("zcrx-nodev")).collect();
    assert_eq!(lines.len(), 1, "{out}");
    assert!(
        lines[0].starts_with("loopback  zcrx-nodev") && lines[0].contains("skipped: "),
        "{out}"
    );
    assert!(lines[0].contains("needs ZCRX_REG_NODEV"), "{out}");
}

#[zcnet_testkit::test(timeout = 120)]
fn measured_and_counted_as_copied_on_linux_7_1() {
    zcnet_testkit::require_kernel(7, 1, "zcrx without a device (ZCRX_REG_NODEV)");
    zcnet_testkit::require_root("zcrx needs CAP_NET_ADMIN");
    let o = short(&["--rx", "zcrx-nodev", "--verify", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let r = nodev_row(&doc);
    assert!(r["refused"].is_null() && r["skipped"].is_null(), "{r}");
    assert!(r["error"].is_null(), "{r}");
    assert_eq!(r["chosen"], "zcrx-nodev", "{r}");
    assert!(r["requests"].as_u64().unwrap() > 0, "{r}");
    assert!(r["qps"].as_f64().unwrap() > 0.0, "{r}");
    let bytes = r["rx_bytes"].as_u64().unwrap();
    assert!(bytes > 0, "{r}");
    // The kernel copied every byte: none is zero-copy, none unknown.
    assert_eq!(r["copied_bytes"], bytes, "{r}");
    assert_eq!(r["zerocopy_bytes"], 0, "{r}");
    assert_eq!(r["unknown_copy_bytes"], 0, "{r}");
    assert_eq!(r["zero_copy_pct"], 0.0, "{r}");
    // The table says so too.
    let o = short(&["--rx", "zcrx-nodev"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.lines()
            .any(|l| l.contains("B copied by the kernel, 0 B zero-copy (0 %), 0 B unknown")),
        "{out}"
    );
}

zcnet_testkit::main!();
