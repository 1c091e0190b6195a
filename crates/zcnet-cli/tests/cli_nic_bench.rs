//! `zcnet nic restore` and `zcnet bench tx` as a user runs them: restoring past a state file
//! it cannot restore, the bench JSON document, and Ctrl-C during a lab benchmark leaving no
//! namespace behind.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;
use common::cli::{run, zcnet};
use common::{need_root, stderr};

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn netns_list() -> String {
    String::from_utf8_lossy(
        &Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap()
            .stdout,
    )
    .into_owned()
}

/// `nic restore` restores every state file it can and says which it could not: one whose
/// interface is gone does not stop the others (it did, at the first), and `nic status` shows
/// the rest too.
#[zcnet_testkit::test(timeout = 60)]
fn nic_restore_goes_on_past_a_file_it_cannot_restore() {
    need_root("nic restore");
    let dir = std::env::temp_dir().join(format!("zcnet-restore-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let netns = std::os::unix::fs::MetadataExt::ino(
        &std::fs::metadata("/proc/thread-self/ns/net").unwrap(),
    );
    // Owners long gone (pid 0 is no process's); "zzgone0" is no interface; lo's file records
    // no change, so restoring it only removes it.
    for iface in ["aa-zzgone0", "lo"] {
        let name = iface.trim_start_matches("aa-");
        std::fs::write(
            dir.join(format!("nic-{netns}-{iface}.state")),
            format!(
                "zcnet-nic-state 1\nowner pid=0 iface={name} ifindex=999 netns={netns} queue=0\n"
            ),
        )
        .unwrap();
    }
    let nic = |args: &[&str]| {
        zcnet()
            .args(args)
            .env("ZCNET_STATE_DIR", &dir)
            .output()
            .unwrap()
    };
    let st = nic(&["nic", "status"]);
    assert!(
        stderr(&st).is_empty() || st.status.success(),
        "{}",
        stderr(&st)
    );
    let out = String::from_utf8_lossy(&st.stdout).into_owned();
    assert!(out.contains("zzgone0") && out.contains("lo:"), "{out}");
    let o = nic(&["nic", "restore"]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("zzgone0") && e.contains("1 of 2 state file(s) not restored"),
        "{e}"
    );
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(
        left.len(),
        1,
        "lo's file restored and removed, the other left: {left:?}"
    );
    assert!(left[0].to_string_lossy().contains("zzgone0"), "{left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[zcnet_testkit::test]
fn bench_json_on_loopback_has_the_documented_schema() {
    let o = run(&[
        "bench",
        "tx",
        "--path",
        "loopback",
        "--tx",
        "copy,uring-zc",
        "--size",
        "16K",
        "--duration",
        "0.3",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = doc["results"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for r in rows {
        for k in [
            "path",
            "tx",
            "size",
            "inflight",
            "bytes",
            "seconds",
            "mb_per_s",
            "zerocopy_bytes",
            "copied_bytes",
            "cpu_seconds",
        ] {
            assert!(r.get(k).is_some(), "missing {k} in {r}");
        }
        assert_eq!(r["path"], "loopback");
        assert_eq!(r["size"], 16384);
        assert!(r["bytes"].as_u64().unwrap() > 0);
        assert_eq!(r["zerocopy_bytes"], 0, "loopback TCP is copied");
    }
    assert!(
        stderr(&o).contains("[1/2] loopback copy"),
        "progress lines: {}",
        stderr(&o)
    );
}

#[zcnet_testkit::test]
fn ctrl_c_during_a_lab_bench_leaves_no_namespace() {
    need_root("the namespace lab");
    let mut child = zcnet()
        .args(["bench", "tx", "--path", "sink,veth", "--duration", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let start = Instant::now();
    // Wait until the second case runs: the lab exists and a sender is busy.
    while !line.contains("[2/") && start.elapsed() < Duration::from_secs(30) {
        line.clear();
        if err.read_line(&mut line).unwrap() == 0 {
            break;
        }
    }
    let prefix = format!("zcnet-{pid}-");
    let before = netns_list();
    assert!(before.contains(&prefix), "lab not up: {before}");
    assert!(Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    let status = child.wait().unwrap();
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    assert_eq!(status.code(), Some(130), "{rest}");
    assert!(rest.contains("interrupted"), "{rest}");
    let after = netns_list();
    assert!(!after.contains(&prefix), "namespaces left behind: {after}");
}

zcnet_testkit::main!();
