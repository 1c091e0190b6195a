//! `zcnet bench rx` as a user runs it: the JSON document, the table, refusals reported as rows,
//! usage errors, veth as root (namespaces gone afterwards) and without root (loopback only).

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;
use common::{need_nobody, need_root, stderr, zcnet, zcnet_as_nobody};

use serde_json::Value;
use std::process::Command;

fn json(args: &[&str]) -> Value {
    let o = zcnet(args);
    assert!(o.status.success(), "zcnet {args:?}: {}", stderr(&o));
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
}

fn row<'a>(doc: &'a Value, path: &str, rx: &str) -> &'a Value {
    doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["path"] == path && r["rx"] == rx)
        .unwrap_or_else(|| panic!("no {path}/{rx} row in {doc}"))
}

/// A measured row: the documented fields, with sane values.
fn assert_measured(r: &Value, size: u64, connections: u64) {
    assert!(r["refused"].is_null(), "{r}");
    assert!(r["error"].is_null(), "{r}");
    assert_eq!(r["size"], size, "{r}");
    assert_eq!(r["connections"], connections, "{r}");
    let qps = r["qps"].as_f64().unwrap();
    assert!(qps > 0.0, "{r}");
    let gbps = r["gbps"].as_f64().unwrap();
    // Gbit/s is the request payload rate: qps × size × 8.
    assert!(
        (gbps - qps * size as f64 * 8.0 / 1e9).abs() < 1e-6 * gbps.max(1.0),
        "{r}"
    );
    assert!(r["server_cpu_us_per_req"].as_f64().unwrap() > 0.0, "{r}");
    let (p50, p99) = (r["p50_us"].as_f64().unwrap(), r["p99_us"].as_f64().unwrap());
    assert!(p50 > 0.0 && p50 <= p99, "{r}");
    assert_eq!(r["client_errors"].as_array().unwrap().len(), 0, "{r}");
    assert_eq!(r["server_failures"].as_array().unwrap().len(), 0, "{r}");
}

#[zcnet_testkit::test]
fn loopback_json_has_every_mode_with_refusals_as_rows() {
    let doc = json(&[
        "bench",
        "rx",
        "--path",
        "loopback",
        "--duration",
        "0.3",
        "--size",
        "16K",
        "--connections",
        "6",
        "--threads",
        "2",
        "--verify",
        "--json",
    ]);
    // copy, uring, zcrx, zcrx-nodev (measured or skipped: tests/bench_rx_nodev.rs), devmem, auto.
    assert_eq!(doc["results"].as_array().unwrap().len(), 6, "{doc}");
    for rx in ["copy", "uring", "auto"] {
        assert_measured(row(&doc, "loopback", rx), 16384, 6);
    }
    assert_eq!(row(&doc, "loopback", "copy")["ratio_to_copy"], 1.0);
    assert_eq!(row(&doc, "loopback", "uring")["chosen"], "uring");
    let auto = row(&doc, "loopback", "auto");
    assert_eq!(auto["chosen"], "uring", "{auto}");
    let fb = auto["fallbacks"].as_array().unwrap();
    assert!(
        !fb.is_empty() && fb[0].as_str().unwrap().starts_with("zcrx refused"),
        "{auto}"
    );
    // zcrx and devmem: refused by every device here, with the reason, and no numbers.
    for rx in ["zcrx", "devmem"] {
        let r = row(&doc, "loopback", rx);
        assert!(!r["refused"].as_str().unwrap().is_empty(), "{r}");
        assert!(
            r["qps"].is_null() && r["server_cpu_us_per_req"].is_null(),
            "{r}"
        );
        assert!(r["ratio_to_copy"].is_null(), "{r}");
    }
}

#[zcnet_testkit::test]
fn table_shows_ratio_and_refusals() {
    let o = zcnet(&[
        "bench",
        "rx",
        "--path",
        "loopback",
        "--rx",
        "copy,uring,devmem",
        "--duration",
        "0.2",
        "--connections",
        "4",
        "--threads",
        "2",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("qps") && out.contains("CPU µs/req") && out.contains("x copy"),
        "{out}"
    );
    let copy = out
        .lines()
        .find(|l| l.starts_with("loopback  copy"))
        .unwrap();
    assert!(copy.trim_end().ends_with("1.00"), "{out}");
    let devmem = out
        .lines()
        .find(|l| l.starts_with("loopback  devmem"))
        .unwrap();
    assert!(devmem.contains("refused:"), "{out}");
    // Progress goes to stderr, not into the table.
    assert!(stderr(&o).contains("[1/3] loopback copy"), "{}", stderr(&o));
}

#[zcnet_testkit::test]
fn usage_errors_are_one_line() {
    let o = zcnet(&["bench", "rx", "--rx", "bogus"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("unknown receive mode 'bogus'") && e.lines().count() == 1,
        "{e}"
    );
    let o = zcnet(&["bench", "rx", "--path", "sink"]);
    assert_eq!(o.status.code(), Some(2), "a bad argument");
    let e = stderr(&o);
    assert!(
        e.contains("use veth or loopback") && e.lines().count() == 1,
        "{e}"
    );
    let o = zcnet(&["bench", "rx", "--connections", "0"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
}

#[zcnet_testkit::test]
fn veth_as_root_runs_in_a_lab_that_is_gone_afterwards() {
    need_root("the namespace lab");
    let child = Command::new(env!("CARGO_BIN_EXE_zcnet"))
        .args([
            "bench",
            "rx",
            "--path",
            "veth",
            "--rx",
            "copy,uring",
            "--duration",
            "0.3",
            "--connections",
            "4",
            "--threads",
            "2",
            "--json",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    for rx in ["copy", "uring"] {
        assert_measured(row(&doc, "veth", rx), 65536, 4);
    }
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let ns = String::from_utf8_lossy(&ns.stdout);
    assert!(
        !ns.contains(&format!("zcnet-{pid}-")),
        "lab left behind: {ns}"
    );
}

#[zcnet_testkit::test]
fn without_root_veth_is_refused_and_loopback_still_runs() {
    need_nobody();
    let as_nobody = zcnet_as_nobody;
    let o = as_nobody(&["bench", "rx", "--path", "veth", "--rx", "copy"]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(e.contains("needs root") && e.lines().count() == 1, "{e}");
    let o = as_nobody(&[
        "bench",
        "rx",
        "--path",
        "veth,loopback",
        "--rx",
        "copy",
        "--duration",
        "0.2",
        "--connections",
        "2",
        "--threads",
        "1",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = doc["results"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{doc}");
    assert_measured(row(&doc, "loopback", "copy"), 65536, 2);
    let notes = doc["notes"].to_string();
    assert!(notes.contains("not root"), "{notes}");
}

zcnet_testkit::main!();
