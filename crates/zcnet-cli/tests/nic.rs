//! `zcnet nic` against the real kernel, inside lab namespaces: `nic setup` refused by lo, ifb
//! and veth with the kernel's own reason first and nothing left changed, `nic channels`, and
//! what an unprivileged user is told that root would be refused too.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;
use common::need_nobody;
use common::probe::{json_in, lab, state_dir, zcnet_in};

use std::process::Command;

use zcnet_testkit::ip;

#[zcnet_testkit::test]
fn nic_setup_on_lo_ifb_and_veth_says_no_header_split_before_any_queue_advice() {
    // `nic setup --iface lo` once suggested `ethtool -L lo combined 2` (lo and ifb have no
    // channel control), and on a veth `zcnet nic channels --iface vA --rx 2`: a change zcnet
    // does not undo, only for the setup to be refused on header split afterwards, which none
    // of these devices can do (no ring parameters). That reason comes first, and alone; a
    // queue the device does not have is a bad argument (exit 2) said before it, which offers
    // no command to add queues either, for the same reason.
    let mut lab = lab();
    let sink = lab.sink().unwrap();
    let veth = lab.veth().unwrap();
    let st = state_dir("nic-lo");
    for (ns, dev, queue) in [
        (&sink.ns, "lo", "0"),
        (&sink.ns, "lo", "3"),
        (&sink.ns, "sinkA", "0"),
        (&veth.a, "vA", "0"),
        (&veth.a, "vA", "5"),
    ] {
        let o = zcnet_in(ns, &st, &["nic", "setup", "--iface", dev, "--queue", queue]);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(
            !e.contains("ethtool -L") && !e.contains("nic channels"),
            "{dev} {queue}: {e}"
        );
        if queue == "0" {
            assert_eq!(o.status.code(), Some(1), "{dev}");
            assert!(
                e.contains("header split cannot be turned on"),
                "{dev} {queue}: {e}"
            );
            assert!(!e.contains("RX queue"), "{dev} {queue}: {e}");
            assert!(e.contains("nothing was changed"), "{e}");
        } else {
            assert_eq!(o.status.code(), Some(2), "{dev} {queue}: {e}");
            assert!(
                e.contains(&format!("--queue {queue}: {dev} has 1 RX queue"))
                    && e.contains("more queues would not help")
                    && e.contains("cannot split headers"),
                "{dev} {queue}: {e}"
            );
        }
    }
    for dev in ["lo", "sinkA"] {
        // `nic channels` says what it can of the device.
        let o = zcnet_in(&sink.ns, &st, &["nic", "channels", "--iface", dev]);
        assert_eq!(o.status.code(), Some(1), "{dev}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("has no channel control"),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // A veth reports RX channels it can change (max = CPUs).
    if std::thread::available_parallelism().unwrap().get() >= 2 {
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
    }
    let _ = std::fs::remove_dir_all(&st);
}

fn nic_snapshot(ns: &str, dev: &str) -> String {
    let o = Command::new("ip")
        .args(["-n", ns, "-d", "link", "show", dev])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[zcnet_testkit::test]
fn nic_setup_on_veth_fails_on_header_split_and_changes_nothing() {
    let mut lab = lab();
    let veth = lab.veth().unwrap();
    // A veth with four queues, so that the queues are not what stands in the way.
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
    // veth has no get_ringparam: the kernel refuses every rings-set, root's included.
    assert!(
        e.contains("reports no ring parameters") && e.contains("header split cannot be turned on"),
        "{e}"
    );
    assert!(e.contains("nothing was changed"), "{e}");
    assert_eq!(nic_snapshot(&veth.a, "vq0"), before);
    let files = std::fs::read_dir(&st).map(|d| d.count()).unwrap_or(0);
    assert_eq!(files, 0, "state file left behind");
    let status = json_in(&veth.a, &st, &["nic", "status", "--json"]);
    assert!(status["applied"].as_array().unwrap().is_empty(), "{status}");
    // The one-queue lab veth: header split is the reason, not its one queue.
    let o = zcnet_in(
        &veth.a,
        &st,
        &["nic", "setup", "--iface", "vA", "--queue", "0"],
    );
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && e.contains("header split cannot"),
        "{e}"
    );
    assert!(!e.contains("one RX queue"), "{e}");
    assert!(e.contains("nothing was changed"), "{e}");
    let o = zcnet_in(&veth.a, &st, &["nic", "restore"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("nothing to restore"));
    let _ = std::fs::remove_dir_all(&st);
}

#[zcnet_testkit::test]
fn without_privileges_nic_setup_says_what_root_would_be_refused_too() {
    // A device with queues enough but no ring parameters (a veth with 4 queues): root gets
    // the kernel's "setting TCP data split is not supported", so "needs root" would be false.
    need_nobody();
    let mut lab = lab();
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

zcnet_testkit::main!();
