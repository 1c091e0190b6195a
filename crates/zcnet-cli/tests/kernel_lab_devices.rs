//! The devices this host's kernel lacks, met for real in the kernel lab's Linux 7.2
//! (scripts/kernel-lab.sh; docs/design.md, "Kernel lab"): the `dummy` path of `bench tx`
//! (CONFIG_DUMMY) and udmabuf regions (`--mem udmabuf`, CONFIG_UDMABUF).
//!
//! On the host each feature is checked where it stands: absent (as on this 6.18 without
//! modules), its refusal is one line naming the config option and the fix; present, it works.
//! In the guest (TCG: correctness only, nothing timed) the dummy path confirms 100 % zero copy,
//! the udmabuf region test of this very binary runs with the device required, and `zcnet send
//! --tx devmem --mem udmabuf` over 127.0.0.1 reaches the kernel's own refusal of lo (as does
//! `zcnet recv --rx zcrx --mem udmabuf`, zcrx's dma-buf area, on lo). Without
//! qemu or busybox, or Debian's archive, the guest tests skip with the script's one line.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use common::lab_guest::{self, ExeCopy};
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;
use zcnet::{Error, MemoryKind, Region};

/// Set in the guest: the udmabuf test must find /dev/udmabuf (no refusal branch).
const EXPECT_UDMABUF: &str = "ZCNET_LAB_EXPECT_UDMABUF";

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs CMD as root under Linux 7.2 with `env` added (see [`lab_guest::guest`]).
fn guest(cmd: &[&str], env: &[(&str, &str)]) -> Output {
    lab_guest::guest("7.2", 600, cmd, env)
}

fn have_udmabuf() -> bool {
    Path::new("/dev/udmabuf").exists()
}

/// The refusal of a udmabuf region where /dev/udmabuf is missing: one line, CONFIG_UDMABUF,
/// the fix.
/// `kind`: how the message names the memory kind ("MemoryKind::Udmabuf" in the library's words,
/// "--mem udmabuf" in the command's).
fn assert_udmabuf_refusal(msg: &str, kind: &str) {
    for want in [
        "udmabuf region",
        kind,
        "no /dev/udmabuf",
        "CONFIG_UDMABUF",
        "modprobe udmabuf",
        "No such file or directory",
    ] {
        assert!(msg.contains(want), "missing '{want}' in: {msg}");
    }
    assert!(!msg.trim_end().contains('\n'), "one line: {msg}");
}

/// A udmabuf region here: refused in one line without /dev/udmabuf (this host); where the
/// device exists (the guest, which sets [`EXPECT_UDMABUF`] to rule the refusal out), made, its
/// dma-buf as large as the region, and its memory the memfd's shared pages.
#[zcnet_testkit::test]
fn udmabuf_region_here() {
    let len = 3 * 4096 + 100;
    let expect = std::env::var_os(EXPECT_UDMABUF).is_some();
    if !have_udmabuf() {
        assert!(
            !expect,
            "{EXPECT_UDMABUF} is set but /dev/udmabuf is missing"
        );
        let e = Region::new(MemoryKind::Udmabuf, len).unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
        assert_udmabuf_refusal(&e.to_string(), "MemoryKind::Udmabuf");
        assert!(
            !e.to_string().contains("--"),
            "no flag in the library's words: {e}"
        );
        // The command says the same, before connecting anywhere (exit 1, nothing on stdout).
        let o = Command::new(env!("CARGO_BIN_EXE_zcnet"))
            .args(["send", "127.0.0.1:9", "--tx", "devmem", "--mem", "udmabuf"])
            .args(["--bytes", "1M"])
            .output()
            .unwrap();
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(o.stdout.is_empty());
        assert!(err.starts_with("zcnet: "), "{err}");
        assert_udmabuf_refusal(&err, "--mem udmabuf");
        return;
    }
    zcnet_testkit::require_root("opening /dev/udmabuf (crw------- root)");
    let mut r = Region::new(MemoryKind::Udmabuf, len).unwrap();
    let page = zcnet::os::page_size();
    assert_eq!(r.len(), len.div_ceil(page) * page);
    assert_eq!(r.backing(), zcnet::region::Backing::Memfd);
    assert_eq!(r.device_ordinal(), None, "host memory");
    let d = r.dmabuf().unwrap();
    let size = zcnet::os::dmabuf_size(std::os::fd::AsFd::as_fd(&*d)).unwrap();
    assert_eq!(size, r.len() as u64, "the dma-buf has the region's size");
    eprintln!("udmabuf region: {} B, dma-buf of {size} B", r.len());
}

#[zcnet_testkit::test(timeout = 900)]
fn udmabuf_region_in_7_2() {
    let me = ExeCopy::of(&std::env::current_exe().unwrap(), "devices-test");
    let o = guest(
        &[me.path(), "--exact", "udmabuf_region_here", "--nocapture"],
        &[(EXPECT_UDMABUF, "1")],
    );
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    assert!(
        out.contains("test result: ok. 1 passed") && !out.contains("ignored,"),
        "ran and passed, not skipped: {out}\n{err}"
    );
    assert!(err.contains("udmabuf region: "), "{err}");
}

#[zcnet_testkit::test(timeout = 900)]
fn devmem_tx_from_udmabuf_on_lo_in_7_2_is_the_kernels_refusal() {
    let zcnet = ExeCopy::zcnet();
    // A receiver to connect to; the sender is refused after connecting (bind-tx on lo), the
    // receiver then sees an empty stream and ends.
    let script = format!(
        "{z} recv --listen 127.0.0.1:5301 --rx copy --discard >/dev/null 2>&1 & sleep 1; \
         {z} send 127.0.0.1:5301 --tx devmem --mem udmabuf --bytes 1M; rc=$?; wait; \
         {z} recv --listen 127.0.0.1:5302 --rx zcrx --iface lo --mem udmabuf; \
         echo zcrx-rc=$? >&2; exit $rc",
        z = zcnet.path()
    );
    let o = guest(&["sh", "-c", &script], &[]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("zcnet: "))
        .unwrap_or_else(|| panic!("no refusal: {err}"));
    for want in [
        "devmem TCP transmit on lo",
        "no netmem TX",
        "kernel: Driver does not support netmem TX",
        "Operation not supported",
        "--tx msg-zerocopy",
    ] {
        assert!(line.contains(want), "missing '{want}' in: {line}");
    }
    assert!(
        !err.contains("udmabuf region"),
        "the region was made: {err}"
    );
}

#[zcnet_testkit::test(timeout = 900)]
fn dummy_path_in_7_2_sends_without_copying() {
    let zcnet = ExeCopy::zcnet();
    let o = guest(
        &[
            zcnet.path(),
            "bench",
            "tx",
            "--path",
            "dummy",
            "--tx",
            "uring-zc,msg-zerocopy",
            "--duration",
            "0.2",
            "--json",
        ],
        &[],
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let doc: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{err}", text(&o.stdout)));
    let rows = doc["results"].as_array().unwrap();
    // Both modes at each default size (64 KiB sent as 64,000 B: one datagram).
    assert_eq!(rows.len(), 6, "{doc}");
    for r in rows {
        assert_eq!(r["path"], "dummy", "{r}");
        assert!(r["error"].is_null(), "{r}");
        let zc = r["zerocopy_bytes"].as_u64().unwrap();
        assert!(zc > 0, "{r}");
        assert_eq!(r["copied_bytes"], 0, "100 % zero copy: {r}");
        assert_eq!(r["bytes"].as_u64().unwrap(), zc, "{r}");
    }
    let sizes: Vec<u64> = rows.iter().map(|r| r["size"].as_u64().unwrap()).collect();
    assert!(sizes.contains(&64_000), "{sizes:?}");
}

/// Where this kernel lacks the dummy driver, `bench tx --path dummy` is refused in one line
/// naming CONFIG_DUMMY and the fix, and the default path list leaves dummy out.
#[zcnet_testkit::test]
fn dummy_path_here() {
    let o = Command::new(env!("CARGO_BIN_EXE_zcnet"))
        .args(["bench", "tx", "--path", "dummy", "--tx", "copy"])
        .args(["--size", "4K", "--duration", "0.1", "--json"])
        .output()
        .unwrap();
    let err = text(&o.stderr);
    if zcnet_tools::lab::dummy_driver() {
        // The driver exists: the path runs (as root) or is left out for want of root.
        zcnet_testkit::require_root("the dummy path's namespace");
        assert_eq!(o.status.code(), Some(0), "{err}");
        return;
    }
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(o.stdout.is_empty(), "{}", text(&o.stdout));
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    for want in [
        "zcnet: ",
        "dummy path",
        "CONFIG_DUMMY",
        "kernel-lab.sh",
        "--path sink",
    ] {
        assert!(err.contains(want), "missing '{want}' in: {err}");
    }
    assert!(!zcnet_tools::bench::TxBenchConfig::default()
        .paths
        .contains(&zcnet_tools::bench::PathKind::Dummy));
}

zcnet_testkit::main!();
