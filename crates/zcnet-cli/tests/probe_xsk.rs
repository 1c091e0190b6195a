//! `zcnet probe --active --iface` trying AF_XDP binds on each RX queue, inside lab namespaces:
//! both modes on every queue of a two-queue veth, a queue whose socket someone else holds,
//! queues and interfaces that do not exist, and no socket left bound afterwards.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;
use common::probe::{assert_generic_zc_xmit_no, iface, json_in, lab, state_dir, zcnet_in};

use std::path::PathBuf;

use serde_json::Value;
use zcnet_testkit::ip;

/// Adds a veth pair `vx0`/`vx1` with two RX and two TX queues inside namespace `ns` (it goes
/// with the namespace), both up.
fn two_queue_veth(ns: &str) {
    ip(&[
        "-n",
        ns,
        "link",
        "add",
        "vx0",
        "numrxqueues",
        "2",
        "numtxqueues",
        "2",
        "type",
        "veth",
        "peer",
        "name",
        "vx1",
    ]);
    for dev in ["vx0", "vx1"] {
        ip(&["-n", ns, "link", "set", dev, "up"]);
    }
}

/// The per-queue results of a probe document's `vx0`: (queue, copy, zero-copy) per queue.
fn xsk_queues(doc: &Value) -> Vec<(u64, Value, Value)> {
    iface(doc, "vx0")["xsk_bind"]["queues"]
        .as_array()
        .unwrap_or_else(|| panic!("no per-queue results: {doc}"))
        .iter()
        .map(|q| {
            (
                q["queue"].as_u64().unwrap(),
                q["copy"].clone(),
                q["zero-copy"].clone(),
            )
        })
        .collect()
}

/// Whether `vx0` shows no AF_XDP socket on any queue (netdev queue-get), waiting up to 2 s: the
/// kernel releases a closed socket's buffer pool asynchronously.
fn no_xsk_left(ns: &str, st: &PathBuf) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        let doc = json_in(ns, st, &["probe", "--json", "--iface", "vx0"]);
        let b = iface(&doc, "vx0")["bindings"].as_array().unwrap().clone();
        if !b.iter().any(|x| x.as_str().unwrap().contains("AF_XDP")) {
            return true;
        }
        if std::time::Instant::now() > deadline {
            eprintln!("still bound: {b:?}");
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[zcnet_testkit::test]
fn active_iface_probe_tries_each_queue_in_both_modes_and_leaves_nothing_bound() {
    let mut lab = lab();
    let veth = lab.veth().unwrap();
    two_queue_veth(&veth.a);
    let st = state_dir("xsk-queues");
    let doc = json_in(
        &veth.a,
        &st,
        &["probe", "--active", "--json", "--iface", "vx0"],
    );
    let v = iface(&doc, "vx0");
    assert_generic_zc_xmit_no(v, "veth");
    let x = &v["xsk_bind"];
    assert_eq!(
        (x["queues_total"].as_u64(), x["capped"].as_bool()),
        (Some(2), Some(false)),
        "{x}"
    );
    let qs = xsk_queues(&doc);
    assert_eq!(qs.iter().map(|q| q.0).collect::<Vec<_>>(), [0, 1], "{x}");
    for (q, copy, zc) in &qs {
        // Copy mode works on every queue (generic XDP); veth has no AF_XDP zero-copy.
        assert_eq!(copy["accepted"], true, "queue {q}: {copy}");
        assert!(copy["errno"].is_null(), "{copy}");
        assert_eq!(zc["accepted"], false, "queue {q}: {zc}");
        assert_eq!(zc["errno"], "EOPNOTSUPP", "{zc}");
        assert!(
            zc["meaning"]
                .as_str()
                .unwrap()
                .contains("lacks AF_XDP zero-copy"),
            "{zc}"
        );
        assert!(
            zc["error"]
                .as_str()
                .unwrap()
                .contains("Operation not supported"),
            "{zc}"
        );
    }
    // The single-queue verdicts agree with queue 1, the trial queue.
    let m = &v["mechanisms"];
    assert_eq!(
        (&m["af-xdp-copy"]["verdict"], &m["af-xdp-copy"]["confirmed"]),
        (&"copies".into(), &true.into())
    );
    assert_eq!(m["af-xdp-zerocopy"]["verdict"], "unsupported");
    // The table says the same in one line for both queues.
    let o = zcnet_in(&veth.a, &st, &["probe", "--active", "--iface", "vx0"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("[vx0] AF_XDP bind modes per RX queue: all 2 queues tried"),
        "{out}"
    );
    assert!(
        out.contains("[vx0]   queues 0-1: copy accepted; zero-copy refused: EOPNOTSUPP"),
        "{out}"
    );
    assert!(
        out.contains("generic zero-copy xmit: no (inferred"),
        "{out}"
    );
    // Nothing stays bound: netdev lists no AF_XDP socket on vx0's queues.
    assert!(
        no_xsk_left(&veth.a, &st),
        "an AF_XDP socket outlived the probe"
    );

    // The probe sees a socket someone else holds: queue 0 is busy, queue 1 is not. This is
    // what a socket left bound by the probe would look like, so the checks above can fail.
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let ns = veth.a.clone();
    let holder = std::thread::spawn(move || {
        zcnet_tools::lab::enter(&ns).unwrap();
        let cfg = zcnet::xsk::XskConfig {
            rx_frames: 64,
            tx_frames: 64,
            ring_size: 64,
            ..zcnet::xsk::XskConfig::new(0)
        };
        let region = zcnet::Region::anonymous(cfg.umem_len()).unwrap();
        let xsk = zcnet::xsk::Xsk::open("vx0", region, &cfg).unwrap();
        bound_tx.send(()).unwrap();
        let _ = release_rx.recv();
        drop(xsk);
    });
    bound_rx.recv().unwrap();
    let busy = json_in(
        &veth.a,
        &st,
        &["probe", "--active", "--json", "--iface", "vx0"],
    );
    release_tx.send(()).unwrap();
    holder.join().unwrap();
    let b = iface(&busy, "vx0")["bindings"].as_array().unwrap().clone();
    assert!(b.iter().any(|x| x == "rx queue 0: AF_XDP socket"), "{b:?}");
    let qs = xsk_queues(&busy);
    for mode in [&qs[0].1, &qs[0].2] {
        assert_eq!(mode["errno"], "EBUSY", "{mode}");
        assert!(
            mode["meaning"].as_str().unwrap().contains("in use"),
            "{mode}"
        );
    }
    assert_eq!(qs[1].1["accepted"], true, "{:?}", qs[1]);
    // Released: both modes answer as before.
    assert!(
        no_xsk_left(&veth.a, &st),
        "the test's own socket was not released"
    );
    let again = json_in(
        &veth.a,
        &st,
        &["probe", "--active", "--json", "--iface", "vx0"],
    );
    assert!(xsk_queues(&again)
        .iter()
        .all(|q| q.1["accepted"] == true && q.2["errno"] == "EOPNOTSUPP"));
    let _ = std::fs::remove_dir_all(&st);
}

#[zcnet_testkit::test]
fn per_queue_probe_refuses_a_queue_or_interface_that_does_not_exist() {
    let mut lab = lab();
    let veth = lab.veth().unwrap();
    two_queue_veth(&veth.a);
    let st = state_dir("xsk-bad");
    let usage = |args: &[&str], want: &str| {
        let o = zcnet_in(&veth.a, &st, args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(o.stdout.is_empty(), "{args:?} printed a report");
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.contains(want), "{args:?}: {e}");
    };
    usage(
        &["probe", "--active", "--iface", "vx0", "--queue", "2"],
        "vx0 has 2 RX queues (0-1), so there is no queue 2",
    );
    usage(&["probe", "--iface", "vx0", "--queue", "1"], "--active");
    usage(&["probe", "--active", "--queue", "1"], "--iface");
    usage(
        &["probe", "--active", "--iface", "nope0"],
        "no interface named 'nope0'",
    );
    usage(
        &["probe", "--active", "--iface", "nope0", "--queue", "0"],
        "no interface named 'nope0'",
    );
    // The queue it has: only that one is tried.
    let doc = json_in(
        &veth.a,
        &st,
        &[
            "probe", "--active", "--json", "--iface", "vx0", "--queue", "1",
        ],
    );
    let qs = xsk_queues(&doc);
    assert_eq!(qs.len(), 1, "{qs:?}");
    assert_eq!(
        (qs[0].0, &qs[0].1["accepted"], &qs[0].2["errno"]),
        (1, &true.into(), &"EOPNOTSUPP".into())
    );
    assert_eq!(iface(&doc, "vx0")["xsk_bind"]["queues_total"], 2);
    assert!(
        no_xsk_left(&veth.a, &st),
        "an AF_XDP socket outlived the probe"
    );
    let _ = std::fs::remove_dir_all(&st);
}

zcnet_testkit::main!();
