//! `zcnet probe` and `zcnet nic` against the real kernel, inside lab namespaces: the verdicts
//! Linux 6.18 gives veth, lo and ifb (inferred and `--active`; docs/cli.md, "zcnet probe"), and `nic setup`
//! refused by a veth with the kernel's own message and nothing left changed.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;
use common::{need_nobody, zcnet_as_nobody};

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;
use zcnet_tools::lab::Lab;

/// A lab; skips the calling test when not root.
fn lab() -> Lab {
    zcnet_testkit::require_root("network namespaces for the lab");
    Lab::new().unwrap()
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

/// The verdicts of this kernel (6.18) for software devices, as measured on it: TCP over lo and
/// veth is copied (Documentation/networking/msg_zerocopy.rst, "Loopback"), and none of them
/// has AF_XDP zero copy, queue-management ops or netmem TX.
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

/// The interface's "generic zero-copy xmit" answer is the inferred "no" of driver `drv`.
fn assert_generic_zc_xmit_no(i: &Value, drv: &str) {
    let g = &i["generic_zc_xmit"];
    assert_eq!(g["answer"], "no", "{}: {g}", i["name"]);
    assert_eq!(g["inferred"], true, "{g}");
    let why = g["reason"].as_str().unwrap();
    assert!(
        why.starts_with("inferred")
            && why.contains(&format!("{drv} does not set IFF_TX_SKB_NO_LINEAR")),
        "{why}"
    );
}

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

use zcnet_testkit::ip;

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
