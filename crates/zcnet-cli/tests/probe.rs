//! `zcnet probe` and `zcnet nic` against the real kernel, inside lab namespaces: the verdicts
//! KERNEL-FACTS.md records for veth, lo and ifb (inferred and `--active`), and `nic setup`
//! refused by a veth with the kernel's own message and nothing left changed.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;
use common::{can_run_as_nobody, is_root, zcnet_as_nobody};

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;
use zcnet_tools::lab::Lab;

/// A lab, or `None` (with the reason printed) when not root.
fn lab() -> Option<Lab> {
    if !is_root() {
        eprintln!("skipped: needs root for network namespaces");
        return None;
    }
    Some(Lab::new().unwrap())
}

/// Runs `zcnet ARGS` inside namespace `ns` with its own state directory.
fn zcnet_in(ns: &str, state: &PathBuf, args: &[&str]) -> Output {
    Command::new("ip")
        .args(["netns", "exec", ns, env!("CARGO_BIN_EXE_zcnet")])
        .args(args)
        .env("ZCNET_STATE_DIR", state)
        .output()
        .unwrap()
}

fn json_in(ns: &str, state: &PathBuf, args: &[&str]) -> Value {
    let o = zcnet_in(ns, state, args);
    assert!(
        o.status.success(),
        "zcnet {args:?} in {ns}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

fn state_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("zcnet-probe-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn iface<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == name)
        .unwrap_or_else(|| panic!("no interface {name} in {doc}"))
}

/// The verdicts of this kernel for software devices (KERNEL-FACTS.md, issue 3).
const SOFTWARE: [(&str, &str); 8] = [
    ("copy", "copies"),
    ("msg-zerocopy", "copies"),
    ("uring-zc", "copies"),
    ("zcrx", "unsupported"),
    ("devmem-rx", "unsupported"),
    ("devmem-tx", "unsupported"),
    ("af-xdp-copy", "copies"),
    ("af-xdp-zerocopy", "unsupported"),
];

/// With `confirmed`, every verdict the active probe tried on this interface must say so, and
/// the send verdicts of any interface but lo must not: their trial runs over TCP loopback.
fn assert_software_verdicts(i: &Value, confirmed: bool) {
    for (m, v) in SOFTWARE {
        let x = &i["mechanisms"][m];
        assert_eq!(x["verdict"], v, "{} {m}: {x}", i["name"]);
        assert!(!x["reason"].as_str().unwrap().is_empty(), "{m}: no reason");
        let send = matches!(m, "msg-zerocopy" | "uring-zc");
        if confirmed && m != "copy" && (!send || i["name"] == "lo") {
            assert_eq!(x["confirmed"], true, "{} {m} was not tried: {x}", i["name"]);
        }
        if send && i["name"] != "lo" {
            assert_eq!(
                x["confirmed"], false,
                "{} {m}: a trial over loopback confirms nothing here: {x}",
                i["name"]
            );
        }
    }
}

#[test]
fn veth_lo_and_ifb_get_this_kernels_verdicts() {
    let Some(mut lab) = lab() else { return };
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
    assert_eq!(k["io_uring"]["ops"]["send-zc"], true, "{k}");
    assert_eq!(k["io_uring"]["ops"]["recv-zc"], true, "{k}");
    assert_eq!(k["io_uring"]["setup_flags"]["zcrx-ring"], true, "{k}");
    let ops = k["netdev_family"]["ops"].as_array().unwrap();
    assert!(
        ops.iter().any(|o| o == "bind-rx") && ops.iter().any(|o| o == "bind-tx"),
        "{k}"
    );
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
    assert_eq!(
        xdp,
        ["basic", "redirect", "rx-sg"],
        "veth xdp-features are 0x23"
    );
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
}

#[test]
fn active_probe_confirms_and_leaves_nothing_behind() {
    let Some(mut lab) = lab() else { return };
    let veth = lab.veth().unwrap();
    let st = state_dir("active");
    let doc = json_in(&veth.a, &st, &["probe", "--active", "--json"]);
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
}

#[test]
fn an_ifbs_send_verdicts_are_not_confirmed_by_a_trial_over_loopback() {
    // Issue 13 defect 5: `probe --active` marked an ifb's TCP verdicts confirmed (`*`) when
    // the MSG_ZEROCOPY / SEND_ZC trial had run over loopback.
    let Some(mut lab) = lab() else { return };
    let sink = lab.sink().unwrap();
    let st = state_dir("ifb-active");
    let doc = json_in(&sink.ns, &st, &["probe", "--active", "--json"]);
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

#[test]
fn active_probe_in_a_namespace_whose_lo_is_down_finishes() {
    // The loopback trial's reader thread waited in accept for a connect that had failed
    // (lo down), and the probe waited for that thread forever.
    let Some(mut lab) = lab() else { return };
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

#[test]
fn nic_setup_on_lo_and_ifb_offers_no_command_that_cannot_work() {
    // Issue 13 defect 5: `nic setup --iface lo` suggested `ethtool -L lo combined 2`: lo (and
    // ifb) have no channel control, and ethtool may not even be installed.
    let Some(mut lab) = lab() else { return };
    let sink = lab.sink().unwrap();
    let st = state_dir("nic-lo");
    for (dev, queue) in [("lo", "0"), ("lo", "3"), ("sinkA", "0")] {
        let o = zcnet_in(
            &sink.ns,
            &st,
            &["nic", "setup", "--iface", dev, "--queue", queue],
        );
        assert_eq!(o.status.code(), Some(1), "{dev}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(!e.contains("ethtool -L"), "{dev} {queue}: {e}");
        assert!(
            e.contains("no command can give it more RX queues"),
            "{dev} {queue}: {e}"
        );
        assert!(e.contains("nothing was changed"), "{e}");
        // `nic channels` says the same thing about the device.
        let o = zcnet_in(&sink.ns, &st, &["nic", "channels", "--iface", dev]);
        assert_eq!(o.status.code(), Some(1), "{dev}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("has no channel control"),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // A veth reports RX channels it can change (max = CPUs): the remedy is a zcnet command
    // that works here, and running it gives the device its second queue.
    let veth = lab.veth().unwrap();
    let o = zcnet_in(
        &veth.a,
        &st,
        &["nic", "setup", "--iface", "vA", "--queue", "0"],
    );
    let e = String::from_utf8_lossy(&o.stderr);
    let cpus = std::thread::available_parallelism().unwrap().get();
    if cpus >= 2 {
        let cmd = "zcnet nic channels --iface vA --rx 2";
        assert!(e.contains(cmd), "{e}");
        let o = zcnet_in(
            &veth.a,
            &st,
            &["nic", "channels", "--iface", "vA", "--rx", "2"],
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let ch = json_in(
            &veth.a,
            &st,
            &["nic", "channels", "--iface", "vA", "--json"],
        );
        assert_eq!(ch["channels"]["rx"]["current"], 2, "{ch}");
    } else {
        assert!(e.contains("no command can give it"), "{e}");
    }
    let _ = std::fs::remove_dir_all(&st);
}

#[test]
fn probe_table_fits_a_screen_and_unknown_interfaces_are_usage_errors() {
    let Some(mut lab) = lab() else { return };
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

fn ip(args: &[&str]) {
    let o = Command::new("ip").args(args).output().unwrap();
    assert!(
        o.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn nic_snapshot(ns: &str, dev: &str) -> String {
    let o = Command::new("ip")
        .args(["-n", ns, "-d", "link", "show", dev])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn nic_setup_on_veth_fails_with_the_kernels_message_and_changes_nothing() {
    let Some(mut lab) = lab() else { return };
    let veth = lab.veth().unwrap();
    // A veth with four queues, so that the setup gets past its own checks to the kernel.
    ip(&[
        "-n",
        &veth.a,
        "link",
        "add",
        "vq0",
        "numrxqueues",
        "4",
        "numtxqueues",
        "4",
        "type",
        "veth",
        "peer",
        "name",
        "vq1",
    ]);
    let st = state_dir("nic");
    let before = nic_snapshot(&veth.a, "vq0");
    let o = zcnet_in(
        &veth.a,
        &st,
        &[
            "nic", "setup", "--iface", "vq0", "--queue", "3", "--port", "9999",
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.contains("setting TCP data split is not supported"),
        "not the kernel's message: {e}"
    );
    assert!(e.contains("nothing was changed"), "{e}");
    assert_eq!(nic_snapshot(&veth.a, "vq0"), before);
    let files = std::fs::read_dir(&st).map(|d| d.count()).unwrap_or(0);
    assert_eq!(files, 0, "state file left behind");
    let status = json_in(&veth.a, &st, &["nic", "status", "--json"]);
    assert!(status["applied"].as_array().unwrap().is_empty(), "{status}");
    // The one-queue lab veth is refused before anything is asked of the kernel.
    let o = zcnet_in(
        &veth.a,
        &st,
        &["nic", "setup", "--iface", "vA", "--queue", "0"],
    );
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("one RX queue"), "{e}");
    assert!(e.contains("nothing was changed"), "{e}");
    let o = zcnet_in(&veth.a, &st, &["nic", "restore"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("nothing to restore"));
    let _ = std::fs::remove_dir_all(&st);
}

#[test]
fn without_privileges_probe_still_answers_and_nic_setup_says_why_not() {
    if !can_run_as_nobody() {
        return;
    }
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
    // Issue 13 defect 5: root is refused on lo too, so the answer is lo's, not "needs root".
    let o = as_nobody(&["nic", "setup", "--iface", "lo", "--queue", "0"]);
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.lines().count() == 1, "{e}");
    assert!(
        e.contains("lo has one RX queue") && !e.contains("root"),
        "{e}"
    );
    assert!(!zcrx["remedy"].is_string(), "root is refused too: {zcrx}");
}

#[test]
fn without_privileges_nic_setup_says_what_root_would_be_refused_too() {
    // A device with queues enough but no ring parameters (a veth with 4 queues): root gets
    // the kernel's "setting TCP data split is not supported", so "needs root" would be false.
    if !can_run_as_nobody() {
        return;
    }
    let Some(mut lab) = lab() else { return };
    let veth = lab.veth().unwrap();
    ip(&[
        "-n",
        &veth.a,
        "link",
        "add",
        "vq0",
        "numrxqueues",
        "4",
        "numtxqueues",
        "4",
        "type",
        "veth",
        "peer",
        "name",
        "vq1",
    ]);
    let o = Command::new("ip")
        .args(["netns", "exec", &veth.a, "setpriv"])
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_zcnet"))
        .args(["nic", "setup", "--iface", "vq0", "--queue", "3"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("reports no ring parameters"), "{e}");
    assert!(e.contains("for root too") && !e.contains("sudo"), "{e}");
}
