//! Helpers of the `probe`, `probe_xsk` and `nic` tests: a lab, `zcnet` run inside one of its
//! namespaces, and the verdicts this kernel gives software devices.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;
use zcnet_tools::lab::Lab;

/// A lab; skips the calling test when not root.
pub fn lab() -> Lab {
    zcnet_testkit::require_root("network namespaces for the lab");
    Lab::new().unwrap()
}

/// Runs `zcnet ARGS` inside namespace `ns` with its own state directory.
pub fn zcnet_in(ns: &str, state: &PathBuf, args: &[&str]) -> Output {
    Command::new("ip")
        .args(["netns", "exec", ns, env!("CARGO_BIN_EXE_zcnet")])
        .args(args)
        .env("ZCNET_STATE_DIR", state)
        .output()
        .unwrap()
}

pub fn json_in(ns: &str, state: &PathBuf, args: &[&str]) -> Value {
    let o = zcnet_in(ns, state, args);
    assert!(
        o.status.success(),
        "zcnet {args:?} in {ns}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

pub fn state_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("zcnet-probe-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

pub fn iface<'a>(doc: &'a Value, name: &str) -> &'a Value {
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
pub const SOFTWARE: [(&str, &str); 8] = [
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
pub fn assert_software_verdicts(i: &Value, confirmed: bool) {
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

/// The interface's "generic zero-copy xmit" answer is the inferred "no" of driver `drv`.
pub fn assert_generic_zc_xmit_no(i: &Value, drv: &str) {
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
