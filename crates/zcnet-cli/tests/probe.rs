//! `zcnet probe` against the real kernel, inside lab namespaces: the verdicts Linux 6.18 gives
//! veth, lo and ifb (inferred and `--active`; docs/cli.md, "zcnet probe"), which interfaces
//! the active trials touch, the zcrx features as the kernel answers them, what an unprivileged
//! user gets, and the command's words in its table and JSON.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;
use common::probe::{
    assert_generic_zc_xmit_no, assert_software_verdicts, iface, json_in, lab, state_dir, zcnet_in,
};
use common::{need_nobody, zcnet_as_nobody};

use std::process::Command;

use serde_json::Value;
use zcnet_testkit::ip;

#[zcnet_testkit::test]
fn veth_lo_and_ifb_get_this_kernels_verdicts() {
    let mut lab = lab();
    let veth = lab.veth().unwrap();
    let sink = lab.sink().unwrap();
    let st = state_dir("verdicts");
    let doc = json_in(&veth.a, &st, &["probe", "--json"]);
    assert_eq!(doc["active"], false);
    let k = &doc["kernel"];
    assert!(
        k["release"].as_str().unwrap().starts_with(char::is_numeric),
        "{k}"
    );
    // What the kernel has depends on its version (README promises 6.2+): SEND_ZC came in
    // 6.0, DEFER_TASKRUN (6.1) with CQE32 makes the zcrx ring, RECV_ZC came in 6.15, the
    // netdev family's bind-rx in 6.12 (devmem TCP) and bind-tx in 6.16 (devmem TX).
    let at_least = |a, b| zcnet_testkit::kernel_version().is_some_and(|v| v >= (a, b));
    assert_eq!(k["io_uring"]["ops"]["send-zc"], true, "{k}");
    assert_eq!(k["io_uring"]["ops"]["recv-zc"], at_least(6, 15), "{k}");
    assert_eq!(k["io_uring"]["setup_flags"]["zcrx-ring"], true, "{k}");
    let ops = k["netdev_family"]["ops"].as_array().unwrap();
    assert_eq!(ops.iter().any(|o| o == "bind-rx"), at_least(6, 12), "{k}");
    assert_eq!(ops.iter().any(|o| o == "bind-tx"), at_least(6, 16), "{k}");
    let v = iface(&doc, "vA");
    assert_eq!(
        (v["driver"].as_str(), v["kind"].as_str()),
        (Some("veth"), Some("veth"))
    );
    let xdp: Vec<&str> = v["xdp_features"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    // veth has always reported basic, redirect and rx-sg (since the netdev family, 6.3);
    // ndo-xmit only while its peer runs XDP or GRO (drivers/net/veth.c).
    for f in ["basic", "redirect", "rx-sg"] {
        assert!(xdp.contains(&f), "veth xdp-features {xdp:?} lack {f}");
    }
    assert_eq!(v["header_split"], "not-reported");
    assert!(
        v["queues"]
            .as_array()
            .unwrap()
            .iter()
            .any(|q| q["type"] == "rx" && q["id"] == 0),
        "{v}"
    );
    assert_software_verdicts(v, false);
    let lo = iface(&doc, "lo");
    assert_eq!(lo["kind"], "loopback");
    assert_software_verdicts(lo, false);
    let s = json_in(&sink.ns, &st, &["probe", "--json", "--iface", "sinkA"]);
    assert_eq!(s["interfaces"].as_array().unwrap().len(), 1);
    let ifb = iface(&s, "sinkA");
    assert_eq!(ifb["driver"], "ifb");
    assert_software_verdicts(ifb, false);
    // None of the three sets IFF_TX_SKB_NO_LINEAR (only virtio_net does): inferred "no"; and
    // without --active nothing is bound, so there is no per-queue answer.
    for (i, drv) in [(v, "veth"), (lo, "loopback"), (ifb, "ifb")] {
        assert_generic_zc_xmit_no(i, drv);
        assert!(i["xsk_bind"].is_null(), "{}", i["xsk_bind"]);
    }
}

/// `probe --active` without `--iface` once made the zero-copy trials (a zcrx queue, AF_XDP
/// binds, netdev bindings) on every interface, the uplink's NIC included: now only on the one
/// named, or on all with `--all-ifaces`; without either the output says they need `--iface`.
#[zcnet_testkit::test]
fn active_probe_tries_interfaces_only_when_named_or_all_asked() {
    let mut lab = lab();
    let veth = lab.veth().unwrap();
    let st = state_dir("active-named");
    let doc = json_in(&veth.a, &st, &["probe", "--active", "--json"]);
    assert_eq!(
        (&doc["active"], &doc["iface_trials"]),
        (&true.into(), &false.into()),
        "{doc}"
    );
    assert!(
        doc["notes"][0]
            .as_str()
            .unwrap()
            .contains("need --iface IF"),
        "{doc}"
    );
    for name in ["vA", "lo"] {
        let i = iface(&doc, name);
        for m in [
            "zcrx",
            "devmem-rx",
            "devmem-tx",
            "af-xdp-copy",
            "af-xdp-zerocopy",
        ] {
            assert_eq!(i["mechanisms"][m]["confirmed"], false, "{name} {m}: {i}");
        }
    }
    // lo's send verdicts are still confirmed: the sends over TCP loopback touch no queue.
    assert_eq!(
        iface(&doc, "lo")["mechanisms"]["uring-zc"]["confirmed"],
        true
    );
    let o = zcnet_in(&veth.a, &st, &["probe", "--active"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("note: active trials on interfaces") && out.contains("--all-ifaces"),
        "{out}"
    );
    // Named: that interface only.
    let doc = json_in(
        &veth.a,
        &st,
        &["probe", "--active", "--json", "--iface", "vA"],
    );
    assert_eq!(doc["iface_trials"], true);
    assert!(doc["notes"].as_array().unwrap().is_empty(), "{doc}");
    assert_eq!(
        iface(&doc, "vA")["mechanisms"]["af-xdp-copy"]["confirmed"],
        true,
        "{doc}"
    );
    // --all-ifaces needs --active, and names no interface.
    let o = zcnet_in(&veth.a, &st, &["probe", "--all-ifaces"]);
    assert_eq!(o.status.code(), Some(2));
    let o = zcnet_in(
        &veth.a,
        &st,
        &["probe", "--active", "--all-ifaces", "--iface", "vA"],
    );
    assert_eq!(o.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&st);
}

#[zcnet_testkit::test]
fn active_probe_confirms_and_leaves_nothing_behind() {
    let mut lab = lab();
    let veth = lab.veth().unwrap();
    let st = state_dir("active");
    let doc = json_in(
        &veth.a,
        &st,
        &["probe", "--active", "--all-ifaces", "--json"],
    );
    assert_eq!(doc["active"], true);
    for name in ["vA", "lo"] {
        let i = iface(&doc, name);
        assert_software_verdicts(i, true);
        let zcrx = i["mechanisms"]["zcrx"]["reason"].as_str().unwrap();
        assert!(
            zcrx.contains("Operation not supported"),
            "{name} zcrx: {zcrx}"
        );
        let tx = i["mechanisms"]["devmem-tx"]["reason"].as_str().unwrap();
        assert!(
            tx.contains("Driver does not support netmem TX"),
            "{name} devmem-tx: {tx}"
        );
        let lo_send = i["mechanisms"]["uring-zc"]["reason"].as_str().unwrap();
        assert!(lo_send.contains("loopback"), "{name} uring-zc: {lo_send}");
    }
    // Nothing bound or registered afterwards: no queue has an io_uring or dma-buf binding,
    // and a second active probe gets the same answers (an XSK left bound would make it EBUSY).
    let again = json_in(
        &veth.a,
        &st,
        &["probe", "--active", "--json", "--iface", "vA"],
    );
    let v = iface(&again, "vA");
    assert!(v["bindings"].as_array().unwrap().is_empty(), "{v}");
    assert_software_verdicts(v, true);
    // Per-queue binds run only for the interface named: not in the first, all-interface run.
    for name in ["vA", "lo"] {
        assert!(iface(&doc, name)["xsk_bind"].is_null(), "{name}");
    }
    assert_eq!(v["xsk_bind"]["queues"].as_array().unwrap().len(), 1, "{v}");
}

#[zcnet_testkit::test]
fn an_ifbs_send_verdicts_are_not_confirmed_by_a_trial_over_loopback() {
    // `probe --active` once marked an ifb's TCP verdicts confirmed (`*`) when
    // the MSG_ZEROCOPY / SEND_ZC trial had run over loopback.
    let mut lab = lab();
    let sink = lab.sink().unwrap();
    let st = state_dir("ifb-active");
    let doc = json_in(
        &sink.ns,
        &st,
        &["probe", "--active", "--all-ifaces", "--json"],
    );
    let ifb = iface(&doc, "sinkA");
    assert_software_verdicts(ifb, true);
    for m in ["msg-zerocopy", "uring-zc"] {
        let x = &ifb["mechanisms"][m];
        assert!(
            x["reason"]
                .as_str()
                .unwrap()
                .contains("not tried over this device"),
            "{x}"
        );
        // lo is the path the trial ran over: confirmed there.
        assert_eq!(iface(&doc, "lo")["mechanisms"][m]["confirmed"], true);
    }
    // The table marks confirmed verdicts with '*': not the ifb's send columns.
    let o = zcnet_in(&sink.ns, &st, &["probe", "--active", "--iface", "sinkA"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    let row = out
        .lines()
        .find(|l| l.starts_with("sinkA "))
        .unwrap_or_else(|| panic!("no sinkA row: {out}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    // IFACE DRIVER QUEUES HDS NTUPLE copy msg-zerocopy uring-zc ...
    assert_eq!((cols[6], cols[7]), ("copies", "copies"), "{row}");
}

#[zcnet_testkit::test]
fn active_probe_in_a_namespace_whose_lo_is_down_finishes() {
    // The loopback trial's reader thread waited in accept for a connect that had failed
    // (lo down), and the probe waited for that thread forever.
    let mut lab = lab();
    let sink = lab.sink().unwrap();
    ip(&["-n", &sink.ns, "link", "set", "lo", "down"]);
    let st = state_dir("lo-down");
    let mut child = Command::new("ip")
        .args(["netns", "exec", &sink.ns, env!("CARGO_BIN_EXE_zcnet")])
        .args(["probe", "--active", "--json", "--iface", "sinkA"])
        .env("ZCNET_STATE_DIR", &st)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("zcnet probe --active hung with lo down");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let m = &iface(&doc, "sinkA")["mechanisms"]["uring-zc"];
    assert!(
        m["reason"]
            .as_str()
            .unwrap()
            .contains("over loopback failed"),
        "{m}"
    );
    assert_eq!(m["confirmed"], false, "{m}");
}

/// The zcrx features are what the kernel answers `IORING_REGISTER_QUERY`, and each verdict
/// follows that answer, not the kernel's version. On this host (6.18) the query interface
/// exists and has no zcrx query: no features, and zcrx without a device is "no" with why.
#[zcnet_testkit::test]
fn zcrx_features_and_verdicts_are_the_kernels_answer() {
    use zcnet::probe::ZcrxCaps;
    let caps = ZcrxCaps::query().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_zcnet"))
        .args(["probe", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let q = &doc["kernel"]["zcrx_query"];
    assert_eq!(q["queryable"], caps.queryable(), "{q}");
    assert_eq!(q["zcrx_answered"], caps.zcrx.is_some(), "{q}");
    let names: Vec<&str> = q["zcrx_features"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(names, caps.feature_names(), "{q}");
    let how = q["how"].as_str().unwrap();
    if caps.queryable() {
        assert!(
            how.starts_with("asked the kernel (IORING_REGISTER_QUERY)"),
            "{how}"
        );
    } else {
        assert!(
            how.starts_with("this kernel cannot be asked (no IORING_REGISTER_QUERY)"),
            "{how}"
        );
    }
    let v = &q["verdicts"];
    for (name, has) in [
        ("no-device", caps.nodev()),
        ("copy-stats", caps.stats().is_some()),
        ("events", caps.events()),
        ("large-rx-buffers", caps.rx_buf_len()),
    ] {
        let x = &v[name];
        assert_eq!(x["available"], has, "{name}: {x}");
        assert!(!x["reason"].as_str().unwrap().is_empty(), "{name}: {x}");
        assert_eq!(
            x["remedy"].is_string(),
            !has,
            "{name}: a fix only when absent: {x}"
        );
    }
    let nd = v["no-device"]["reason"].as_str().unwrap();
    if !caps.nodev() {
        assert!(
            nd.contains("ZCRX_REG_NODEV (Linux 7.1 added it)"),
            "why not, with the version only as a hint: {nd}"
        );
    }
    // This host: queryable, no zcrx query, so nothing is listed and every verdict is "no".
    if caps.queryable() && caps.zcrx.is_none() {
        assert!(names.is_empty(), "{q}");
        assert_eq!(
            nd,
            "this kernel has no zcrx query (IO_URING_QUERY_ZCRX), so no ZCRX_REG_NODEV (Linux \
             7.1 added it)"
        );
    }
    // The table says the same.
    let o = Command::new(env!("CARGO_BIN_EXE_zcnet"))
        .arg("probe")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let first = out
        .lines()
        .find(|l| l.starts_with("zcrx features: "))
        .unwrap_or_else(|| panic!("no zcrx features line: {out}"));
    assert!(first.contains(how), "{first}");
    let yes = if caps.nodev() { "yes" } else { "no" };
    assert!(
        out.contains(&format!("  zcrx without a device: {yes} \u{2014} {nd}\n")),
        "{out}"
    );
}

#[zcnet_testkit::test]
fn probe_table_fits_a_screen_and_unknown_interfaces_are_usage_errors() {
    let mut lab = lab();
    let veth = lab.veth().unwrap();
    let st = state_dir("table");
    let o = zcnet_in(&veth.a, &st, &["probe"]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.lines().count() <= 50, "{out}");
    assert!(
        out.contains("IFACE") && out.contains("vA") && out.contains("zcrx"),
        "{out}"
    );
    assert!(out.contains("no queue-management ops"), "{out}");
    let o = zcnet_in(&veth.a, &st, &["probe", "--iface", "nope0"]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("no interface named 'nope0'"), "{e}");
}

#[zcnet_testkit::test]
fn without_privileges_probe_still_answers_and_nic_setup_says_why_not() {
    need_nobody();
    let as_nobody = zcnet_as_nobody;
    let o = as_nobody(&["probe", "--iface", "lo", "--active", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let lo = iface(&doc, "lo");
    // Refused trials (EPERM) confirm nothing and do not change the verdicts.
    assert_software_verdicts(lo, false);
    let zcrx = &lo["mechanisms"]["zcrx"];
    assert_eq!(zcrx["confirmed"], false, "{zcrx}");
    assert!(
        zcrx["reason"].as_str().unwrap().contains("not confirmed"),
        "{zcrx}"
    );
    // Root is refused on lo too, so the answer is lo's, not "needs root".
    let o = as_nobody(&["nic", "setup", "--iface", "lo", "--queue", "0"]);
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.lines().count() == 1, "{e}");
    assert!(
        e.contains("header split cannot be turned on") && !e.contains("needs root"),
        "{e}"
    );
    assert!(!zcrx["remedy"].is_string(), "root is refused too: {zcrx}");
}

/// A Rust path in `text` (`RxConfig::area_len`, `nic::NicGuard::apply`, `probe::probe`), if any:
/// an identifier that starts with a letter, `::`, and another that does. IPv6 addresses
/// (`::1`, `fe80::1`) have no letter after their `::` or no word before it.
fn rust_path(text: &str) -> Option<String> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    for (at, _) in text.match_indices("::") {
        let before = &text[..at];
        let start = before.rfind(|c: char| !is_ident(c)).map_or(0, |n| n + 1);
        let word = &before[start..];
        let after = &text[at + 2..];
        let end = after.find(|c: char| !is_ident(c)).unwrap_or(after.len());
        let next = &after[..end];
        let starts_alpha = |w: &str| w.chars().next().is_some_and(|c| c.is_ascii_alphabetic());
        if starts_alpha(word) && starts_alpha(next) && !next.chars().all(|c| c.is_ascii_hexdigit())
        {
            return Some(format!("{word}::{next}"));
        }
    }
    None
}

/// The probe's table and JSON, passive and active, name settings and calls as the command's
/// flags and commands: no line the command prints names a Rust path.
#[zcnet_testkit::test]
fn the_probe_speaks_the_commands_words_in_its_table_and_json() {
    assert_eq!(rust_path("use RxMode::Uring"), Some("RxMode::Uring".into()));
    assert_eq!(
        rust_path("[::1]:5201 and fe80::1 and ::ffff:127.0.0.1"),
        None
    );
    let mut lab = lab();
    let veth = lab.veth().unwrap();
    let st = state_dir("words");
    for args in [
        &["probe"][..],
        &["probe", "--json"],
        &["probe", "--active", "--iface", "vA"],
        &["probe", "--active", "--iface", "vA", "--json"],
        &[
            "nic", "setup", "--iface", "vA", "--queue", "0", "--port", "5201",
        ],
    ] {
        let o = zcnet_in(&veth.a, &st, args);
        for text in [&o.stdout, &o.stderr] {
            let text = String::from_utf8_lossy(text);
            assert_eq!(rust_path(&text), None, "zcnet {args:?}:\n{text}");
        }
    }
    // This host's own interfaces, read only: a NIC of a real driver gets the findings a veth
    // does not (netmem TX inferred from the driver, header split to turn on).
    for args in [&["probe"][..], &["probe", "--json"]] {
        let o = Command::new(env!("CARGO_BIN_EXE_zcnet"))
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "zcnet {args:?}: {text}");
        assert_eq!(rust_path(&text), None, "zcnet {args:?}:\n{text}");
    }
}

zcnet_testkit::main!();
