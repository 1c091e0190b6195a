//! `zcnet bench xsk` as a user runs it: the JSON document as root (every documented field,
//! AF_PACKET and AF_XDP copy rows that moved packets with their drops adding up, the zero-copy
//! row refused on veth or measured), usage errors, the one-line refusal without root, and
//! Ctrl-C mid-run (exit 130, no namespace left). Lab tests skip with a printed reason when not
//! root.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;
use common::{need_nobody, need_root, stderr, zcnet_as_nobody};

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn zcnet() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_zcnet"));
    c.stdin(Stdio::null());
    c
}

fn netns_list() -> String {
    let o = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

const FIELDS: [&str; 8] = [
    "path",
    "mode",
    "size",
    "tx_pps",
    "rx_pps",
    "cpu_s_per_mpkt",
    "drops",
    "error",
];

fn num(r: &Value, k: &str) -> f64 {
    r[k].as_f64()
        .unwrap_or_else(|| panic!("{k} is not a number: {r}"))
}

#[zcnet_testkit::test]
fn json_has_every_mode_with_counts_that_add_up() {
    need_root("the namespace lab");
    let child = zcnet()
        .args([
            "bench",
            "xsk",
            "--json",
            "--duration",
            "0.3",
            "--repeat",
            "1",
            "--size",
            "64",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let prefix = format!("zcnet-{}-", child.id());
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        !netns_list().contains(&prefix),
        "namespaces left: {}",
        netns_list()
    );
    let doc: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)));
    let rows = doc["results"].as_array().unwrap();
    for r in rows {
        for k in FIELDS {
            assert!(r.get(k).is_some(), "no {k} in {r}");
        }
        assert!(
            ["af-xdp-copy", "af-xdp-zerocopy", "af-packet"].contains(&r["mode"].as_str().unwrap()),
            "{r}"
        );
        assert_eq!(r["size"], 64, "{r}");
    }
    let of = |path: &str, mode: &str| -> Vec<&Value> {
        rows.iter()
            .filter(|r| r["path"] == path && r["mode"] == mode)
            .collect()
    };
    // veth: AF_PACKET (every variant) and AF_XDP copy moved packets both ways, and what was
    // not received is what the drops say.
    let measured: Vec<&Value> = of("veth", "af-packet")
        .into_iter()
        .chain(of("veth", "af-xdp-copy"))
        .collect();
    assert!(measured.len() >= 6, "{doc}");
    for r in measured {
        assert!(r["error"].is_null(), "{r}");
        assert!(num(r, "tx_pps") > 0.0 && num(r, "rx_pps") > 0.0, "{r}");
        assert!(num(r, "cpu_s_per_mpkt") > 0.0, "{r}");
        let (sent, received) = (num(r, "sent") as u64, num(r, "received") as u64);
        assert!(received > 0 && received <= sent, "{r}");
        assert_eq!(r["drops"].as_u64(), Some(sent - received), "{r}");
        // No rate comparison: the receiver's window ends at the last frame received, the
        // sender's once its completions are in, so on a busy machine (CI saw 768 frames at
        // 62,000 pps received and 2,400 pps sent) rx_pps exceeds tx_pps with nothing wrong.
    }
    // Zero-copy: refused (veth has no AF_XDP zero-copy: one line naming the cause), or numbers.
    let zc = of("veth", "af-xdp-zerocopy");
    assert_eq!(zc.len(), 1, "{doc}");
    match zc[0]["error"].as_str() {
        Some(e) => {
            assert!(!e.contains('\n'), "{e}");
            assert!(e.contains("zero-copy") && e.contains("vA"), "{e}");
            assert!(
                zc[0]["tx_pps"].is_null() && zc[0]["drops"].is_null(),
                "{}",
                zc[0]
            );
        }
        None => assert!(num(zc[0], "tx_pps") > 0.0, "{}", zc[0]),
    }
    // The sink: senders only.
    let sink: Vec<&Value> = rows.iter().filter(|r| r["path"] == "sink").collect();
    assert!(sink.len() >= 5, "{doc}");
    for r in sink.iter().filter(|r| r["error"].is_null()) {
        assert!(num(r, "tx_pps") > 0.0, "{r}");
        assert!(r["rx_pps"].is_null() && r["drops"].is_null(), "{r}");
    }
    assert!(sink
        .iter()
        .any(|r| r["mode"] == "af-xdp-copy" && r["error"].is_null()));
    // The ratios against the best AF_PACKET variant, and where each side ran.
    let ratios = doc["ratios"].as_array().unwrap();
    let veth = ratios
        .iter()
        .find(|x| x["path"] == "veth" && x["size"] == 64)
        .unwrap();
    assert!(
        num(veth, "tx_ratio") > 0.0 && num(veth, "rx_ratio") > 0.0,
        "{veth}"
    );
    assert!(veth["best_af_packet_tx"].is_string(), "{veth}");
    assert!(doc["placement"].as_str().unwrap().contains("pinned to CPU"));
}

#[zcnet_testkit::test]
fn usage_errors_are_one_line_and_exit_2() {
    for (args, needle) in [
        (&["--size", "40"][..], "--size 40"),
        (&["--size", "9000"][..], "--size 9000"),
        (&["--mode", "af-xdp"][..], "--mode 'af-xdp'"),
        (&["--path", "lo"][..], "--path 'lo'"),
        (&["--repeat", "0"][..], "--repeat 0"),
        (&["--duration", "-1"][..], "--duration"),
        (&["--cpus", "0"][..], "--cpus"),
        (&["--rx-wait", "nap"][..], "--rx-wait 'nap'"),
    ] {
        let o = zcnet().args(["bench", "xsk"]).args(args).output().unwrap();
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert_eq!(e.lines().count(), 1, "{args:?}: {e}");
        assert!(e.contains(needle), "{args:?}: {e}");
    }
}

#[zcnet_testkit::test]
fn without_root_it_says_so_in_one_line() {
    need_nobody();
    let o = zcnet_as_nobody(&["bench", "xsk", "--duration", "0.1", "--repeat", "1"]);
    let e = stderr(&o);
    assert!(!o.status.success(), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("needs root"), "{e}");
}

#[zcnet_testkit::test]
fn ctrl_c_mid_run_exits_130_and_leaves_no_namespace() {
    need_root("the namespace lab");
    for mode in ["af-xdp-copy", "af-packet"] {
        let mut child = zcnet()
            .args([
                "bench",
                "xsk",
                "--path",
                "veth",
                "--mode",
                mode,
                "--size",
                "64",
                "--duration",
                "20",
                "--repeat",
                "1",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let prefix = format!("zcnet-{}-", child.id());
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let first = lines.next().unwrap().unwrap();
        assert!(first.starts_with("[1/"), "{first}");
        std::thread::sleep(Duration::from_millis(500));
        assert!(netns_list().contains(&prefix), "lab not up");
        let ok = Command::new("kill")
            .args(["-s", "INT", &child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
        let sent = Instant::now();
        let rest: Vec<String> = lines.map_while(Result::ok).collect();
        let status = child.wait().unwrap();
        assert!(
            sent.elapsed() < Duration::from_secs(5),
            "{mode}: {:?} after SIGINT",
            sent.elapsed()
        );
        assert_eq!(status.code(), Some(130), "{mode}: {rest:?}");
        assert_eq!(rest.last().map(String::as_str), Some("zcnet: interrupted"));
        assert!(
            !netns_list().contains(&prefix),
            "{mode}: namespaces left: {}",
            netns_list()
        );
    }
}

zcnet_testkit::main!();
