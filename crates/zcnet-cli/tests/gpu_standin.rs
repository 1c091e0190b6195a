//! `--mem cuda` end to end against the CUDA driver stand-in (crates/zcnet-sys/tests/
//! cuda-standin, built with `cc`): `send`/`recv` over loopback staged and `--naive`, `bench rx
//! --mem cuda`, and the probe's GPU section, each with `--verify` where it has one. The stand-in
//! is NOT a GPU: these runs prove that zcnet drives the CUDA driver API as the driver requires
//! (a current context, asynchronous copies that complete late, device memory the CPU cannot
//! read, nothing leaked at exit); every rate they print is a stand-in figure, never a GPU one.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use zcnet_testkit::cuda_standin::{self, Summary, Variant};

zcnet_testkit::main!();

const BYTES: u64 = 8 << 20;

/// What every line and JSON object about a device or rate of the stand-in carries.
const LABEL: &str = "(stand-in driver: not GPU figures)";

/// `zcnet` with the stand-in `lib` as its CUDA driver, writing its summary to `summary`.
fn zcnet(lib: &Path, summary: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_zcnet"));
    c.env("ZCNET_LIBCUDA", lib)
        .env("ZCNET_STANDIN_SUMMARY", summary)
        .env_remove("ZCNET_STANDIN_FAIL")
        .env_remove("ZCNET_STANDIN_DRIVER_VERSION");
    c
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn json_of(o: &Output) -> Value {
    assert!(o.status.success(), "{}", text(o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(o)))
}

/// `recv --mem cuda --verify --json` and `send --mem cuda --verify --json` over loopback, both
/// on the stand-in; returns (recv doc, send doc, recv summary, send summary).
fn send_recv(variant: Variant, extra: &[&str]) -> (Value, Value, Summary, Summary) {
    let extra: Vec<&str> = ["--json"].iter().chain(extra).copied().collect();
    let (r, send, rs, ss) = send_recv_output(variant, &extra);
    let (rdoc, sdoc) = (json_of(&r), json_of(&send));
    (rdoc, sdoc, rs, ss)
}

/// `recv --mem cuda --verify` and `send --mem cuda --verify` with `extra` over loopback, both
/// on the stand-in; returns (recv output, send output, recv summary, send summary).
fn send_recv_output(variant: Variant, extra: &[&str]) -> (Output, Output, Summary, Summary) {
    let lib = cuda_standin::build(variant);
    let (rs, ss) = (
        cuda_standin::summary_path("recv"),
        cuda_standin::summary_path("send"),
    );
    let mut recv = zcnet(&lib, &rs)
        .args([
            "recv",
            "--listen",
            "127.0.0.1:0",
            "--mem",
            "cuda",
            "--verify",
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(recv.stderr.take().unwrap());
    // Without --json the refusals come first: the port is on the "listening on" line.
    let (mut before, mut line) = (String::new(), String::new());
    while err.read_line(&mut line).unwrap() > 0 && !line.contains("listening on") {
        before.push_str(&std::mem::take(&mut line));
    }
    let port: u16 = line
        .trim()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| {
            let _ = recv.kill();
            panic!("no port in {line:?}")
        });
    let send = zcnet(&lib, &ss)
        .args([
            "send",
            &format!("127.0.0.1:{port}"),
            "--mem",
            "cuda",
            "--verify",
        ])
        .args(["--bytes", &BYTES.to_string()])
        .args(extra)
        .output()
        .unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    let mut r = recv.wait_with_output().unwrap();
    r.stderr = format!("{before}{line}{rest}").into_bytes();
    (r, send, Summary::read(&rs), Summary::read(&ss))
}

fn assert_path(doc: &Value, path: &str) {
    assert_eq!(doc["mem"], "cuda:0", "{doc}");
    assert_eq!(doc["path"], path, "{doc}");
    assert_eq!(doc["bytes"], BYTES, "{doc}");
    assert_eq!(doc["standin_note"], LABEL, "{doc}");
}

/// Every line of `out` but those `skip` accepts carries the stand-in's label.
fn assert_labelled(out: &str, skip: impl Fn(&str) -> bool) {
    let lines: Vec<&str> = out.lines().filter(|l| !skip(l)).collect();
    assert!(!lines.is_empty(), "no lines: {out}");
    for l in lines {
        assert!(
            l.contains(LABEL),
            "unlabelled stand-in line {l:?} in:\n{out}"
        );
    }
}

/// In the text output too, every line about the stand-in's device or a rate measured against it
/// says it is a stand-in: a rate with no label could be read as a GPU figure.
#[zcnet_testkit::test(timeout = 300)]
fn send_and_recv_lines_say_stand_in() {
    for extra in [&[][..], &["--naive"][..]] {
        let (r, s, rs, ss) = send_recv_output(Variant::Full, extra);
        assert!(
            r.status.success() && s.status.success(),
            "{}\n{}",
            text(&r),
            text(&s)
        );
        let (rerr, serr) = (
            String::from_utf8_lossy(&r.stderr),
            String::from_utf8_lossy(&s.stderr),
        );
        assert!(
            rerr.contains("MB/s") && serr.contains("MB/s"),
            "{rerr}\n{serr}"
        );
        assert_labelled(&rerr, |l| l.starts_with("zcnet recv: listening on"));
        assert_labelled(&serr, |_| false);
        rs.assert_clean();
        ss.assert_clean();
    }
}

#[zcnet_testkit::test(timeout = 300)]
fn staged_send_and_recv_verify_every_byte_on_the_stand_in() {
    let (r, s, rs, ss) = send_recv(Variant::Full, &[]);
    assert_path(&r, "staging");
    assert_path(&s, "staging");
    assert_eq!(r["verified"], true, "{r}");
    assert!(r["copies"].as_u64().unwrap() > 0, "{r}");
    for sum in [&rs, &ss] {
        sum.assert_clean();
        assert_eq!(sum.get("device"), cuda_standin::DEVICE_NAME);
        // Staging copies between pinned host memory and the GPU: none fell back to pageable.
        assert_eq!(sum.count("pageable_async"), 0, "{sum}");
        assert_eq!(sum.count("errors"), 0, "{sum}");
    }
    // The receiver copied host-to-device asynchronously, the sender device-to-host.
    assert!(rs.count("async_htod") > 0, "{rs}");
    assert!(ss.count("async_dtoh") > 0, "{ss}");
    eprintln!(
        "stand-in run (not a GPU figure): {} MB/s send",
        s["mb_per_s"]
    );
}

/// `recv --mem cuda --bytes N` (staged, and `--naive`) holds the stream to N bytes as a host
/// receive does: a sender that stops short is exit 1, "cut short".
#[zcnet_testkit::test(timeout = 300)]
fn gpu_recv_bytes_requires_the_stream_length() {
    let lib = cuda_standin::build(Variant::Full);
    for naive in [false, true] {
        let rs = cuda_standin::summary_path("recv");
        let mut args = vec![
            "recv",
            "--listen",
            "127.0.0.1:0",
            "--mem",
            "cuda",
            "--bytes",
            "2M",
        ];
        if naive {
            args.push("--naive");
        }
        let mut recv = zcnet(&lib, &rs)
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(recv.stderr.take().unwrap());
        let mut line = String::new();
        while err.read_line(&mut line).unwrap() > 0 && !line.contains("listening on") {
            line.clear();
        }
        let port = line.trim().rsplit(':').next().unwrap().to_string();
        let send = Command::new(env!("CARGO_BIN_EXE_zcnet"))
            .args(["send", &format!("127.0.0.1:{port}"), "--bytes", "1M"])
            .output()
            .unwrap();
        assert!(send.status.success(), "{}", text(&send));
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
        let r = recv.wait_with_output().unwrap();
        assert_eq!(r.status.code(), Some(1), "naive {naive}: {rest}");
        assert!(rest.contains("cut short"), "naive {naive}: {rest}");
    }
}

/// `send --udp --mem cuda --verify`: each `--size` buffer of GPU memory (the stand-in's) goes
/// out as one datagram through the staging pipeline, the pattern at its stream offset, the last
/// one short; devmem is not tried on a datagram socket, and says why.
#[zcnet_testkit::test(timeout = 300)]
fn udp_send_from_gpu_memory_sends_each_buffer_as_one_datagram() {
    let lib = cuda_standin::build(Variant::Full);
    let ss = cuda_standin::summary_path("udp-send");
    let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let to = rx.local_addr().unwrap().to_string();
    let o = zcnet(&lib, &ss)
        .args([
            "send", "--udp", &to, "--mem", "cuda", "--verify", "--seed", "9",
        ])
        .args(["--size", "4000", "--bytes", "81000", "--json"])
        .output()
        .unwrap();
    let doc = json_of(&o);
    assert_eq!(doc["path"], "staging", "{doc}");
    assert_eq!(doc["bytes"], 81000, "{doc}");
    assert_eq!(doc["standin_note"], LABEL, "{doc}");
    let why = doc["refused"].to_string();
    assert!(why.contains("devmem") && why.contains("UDP"), "{doc}");
    let pattern = zcnet::Pattern::new(9);
    let mut buf = [0u8; 8192];
    for i in 0..21u64 {
        let n = rx
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("datagram {i}: {e}"));
        assert_eq!(n, if i == 20 { 1000 } else { 4000 }, "datagram {i}");
        pattern
            .verify(i * 4000, &buf[..n])
            .unwrap_or_else(|m| panic!("datagram {i}: {m}"));
    }
    let sum = Summary::read(&ss);
    sum.assert_clean();
    assert!(sum.count("async_dtoh") >= 21, "{sum}");
    // --naive is a TCP stream: refused before anything is made.
    let o = zcnet(&lib, &ss)
        .args([
            "send", "--udp", &to, "--mem", "cuda", "--naive", "--bytes", "1M",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--naive with --udp"), "{}", text(&o));
}

#[zcnet_testkit::test(timeout = 300)]
fn naive_send_and_recv_verify_every_byte_on_the_stand_in() {
    let (r, s, rs, ss) = send_recv(Variant::Full, &["--naive"]);
    assert_path(&r, "naive");
    assert_path(&s, "naive");
    assert_eq!(r["verified"], true, "{r}");
    for sum in [&rs, &ss] {
        sum.assert_clean();
        // The naive loop copies synchronously.
        assert_eq!(
            sum.count("async_htod") + sum.count("async_dtoh"),
            0,
            "{sum}"
        );
        assert_eq!(sum.count("errors"), 0, "{sum}");
    }
    assert!(rs.count("sync_htod") > 0, "{rs}");
    assert!(ss.count("sync_dtoh") > 0, "{ss}");
}

/// A driver older than CUDA 11.7 lacks cuMemGetHandleForAddressRange: only dma-buf export needs
/// it, so staging and the naive loop still run.
#[zcnet_testkit::test(timeout = 300)]
fn staging_and_naive_work_on_a_driver_without_dma_buf_export() {
    for (extra, path) in [(&[][..], "staging"), (&["--naive"][..], "naive")] {
        let (r, s, rs, ss) = send_recv(Variant::NoDmabuf, extra);
        assert_path(&r, path);
        assert_path(&s, path);
        assert_eq!(r["verified"], true, "{r}");
        for sum in [&rs, &ss] {
            sum.assert_clean();
            assert_eq!(sum.get("dmabuf_export"), "absent");
        }
    }
}

#[zcnet_testkit::test(timeout = 300)]
fn bench_rx_into_the_stand_in_verifies_every_case() {
    let lib = cuda_standin::build(Variant::Full);
    let sum = cuda_standin::summary_path("bench-rx");
    let o = zcnet(&lib, &sum)
        .args([
            "bench", "rx", "--path", "loopback", "--mem", "cuda", "--verify",
        ])
        .args(["--duration", "1", "--json"])
        .output()
        .unwrap();
    let doc = json_of(&o);
    assert_eq!(doc["mem"], "cuda:0", "{doc}");
    assert_eq!(doc["standin_note"], LABEL, "{doc}");
    let rows = doc["results"].as_array().unwrap();
    let cases: Vec<&str> = rows.iter().map(|r| r["case"].as_str().unwrap()).collect();
    assert_eq!(cases, ["host", "cuda:0", "naive"], "{doc}");
    for r in rows {
        assert_eq!(r["error"], Value::Null, "{r}");
        assert_eq!(r["path"], "loopback", "{r}");
        assert_eq!(r["verified"], true, "{r}");
        assert!(r["bytes"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(r["bytes"], r["sent"], "every byte sent was received: {r}");
        assert_eq!(r["standin_note"], LABEL, "{r}");
    }
    assert_eq!(rows[1]["via"], "staging", "{doc}");
    assert!(rows[1]["copies"].as_u64().unwrap() > 0, "{doc}");
    let s = Summary::read(&sum);
    s.assert_clean();
    assert!(s.count("async_htod") > 0, "{s}");
    assert_eq!(s.count("pageable_async"), 0, "{s}");

    // The table: every row with a rate says stand-in.
    let sum = cuda_standin::summary_path("bench-rx-table");
    let o = zcnet(&lib, &sum)
        .args(["bench", "rx", "--path", "loopback", "--mem", "cuda"])
        .args(["--duration", "0.5"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("MB/s"), "{out}");
    // The heading and the refusals of a row (indented) are not rows.
    assert_labelled(&out, |l| {
        l.starts_with("path ") || l.starts_with("note: ") || l.starts_with("   ")
    });
    Summary::read(&sum).assert_clean();
}

/// `bench tx --mem cuda` sends from the stand-in's memory (staging, through the library's
/// GpuSender) and labels every row, in the table and in JSON.
#[zcnet_testkit::test(timeout = 300)]
fn bench_tx_from_the_stand_in_says_stand_in() {
    let lib = cuda_standin::build(Variant::Full);
    let bench = |json: bool| {
        let sum = cuda_standin::summary_path(if json { "bench-tx" } else { "bench-tx-table" });
        let o = zcnet(&lib, &sum)
            .args(["bench", "tx", "--path", "loopback", "--mem", "cuda"])
            .args(["--tx", "copy", "--size", "64K", "--duration", "0.3"])
            .args(["--no-baseline"])
            .args(if json { &["--json"][..] } else { &[][..] })
            .output()
            .unwrap();
        let s = Summary::read(&sum);
        s.assert_clean();
        assert!(s.count("async_dtoh") > 0, "{s}");
        o
    };
    let doc = json_of(&bench(true));
    assert_eq!(doc["standin_note"], LABEL, "{doc}");
    let rows = doc["results"].as_array().unwrap();
    assert!(!rows.is_empty(), "{doc}");
    for r in rows {
        assert_eq!(r["error"], Value::Null, "{r}");
        assert!(r["bytes"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(r["standin_note"], LABEL, "{r}");
    }
    let o = bench(false);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("MB/s"), "{out}");
    assert_labelled(&out, |l| {
        l.starts_with("path ") || l.starts_with("note: ") || l.starts_with("   ")
    });
}

fn probe(lib: &Path, summary: &Path, extra: &[&str]) -> Output {
    zcnet(lib, summary)
        .args(["probe", "--iface", "lo"])
        .args(extra)
        .output()
        .unwrap()
}

#[zcnet_testkit::test(timeout = 300)]
fn probe_reports_the_stand_in_and_confirms_its_export() {
    let lib = cuda_standin::build(Variant::Full);
    let sum = cuda_standin::summary_path("probe");
    let doc = json_of(&probe(&lib, &sum, &["--active", "--json"]));
    let g = &doc["gpu"];
    assert_eq!(g["error"], Value::Null, "{g}");
    assert_eq!(g["driver"]["cuda"], serde_json::json!([12, 8]), "{g}");
    let devs = g["devices"].as_array().unwrap();
    assert_eq!(devs.len(), 1, "{g}");
    assert_eq!(devs[0]["name"], cuda_standin::DEVICE_NAME, "{g}");
    assert_eq!(devs[0]["dma_buf"], true, "{g}");
    assert_eq!(devs[0]["export"], "confirmed", "{g}");
    // It says it is a stand-in (an attribute no real driver knows), and so does every object
    // about it.
    assert_eq!(devs[0]["standin"], true, "{g}");
    assert_eq!(devs[0]["standin_note"], LABEL, "{g}");
    assert_eq!(g["driver"]["standin_note"], LABEL, "{g}");
    let paths = g["interfaces"][0]["paths"].as_array().unwrap();
    assert_eq!(paths[0]["gpu"], 0, "{g}");
    assert_eq!(paths[0]["standin_note"], LABEL, "{g}");
    for dir in ["gpu-rx", "gpu-tx"] {
        assert_eq!(paths[0][dir]["verdict"], "staging", "{dir}: {g}");
    }
    let s = Summary::read(&sum);
    s.assert_clean();
    assert_eq!(
        (s.count("exports"), s.count("export_flags_pcie")),
        (1, 1),
        "{s}"
    );

    // The table names the stand-in on its GPU line: no output passes it off as a GPU.
    let sum = cuda_standin::summary_path("probe-table");
    let o = probe(&lib, &sum, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .find(|l| l.starts_with("GPU cuda:0"))
        .unwrap_or_else(|| panic!("no device line: {out}"));
    assert!(line.contains("zcnet stand-in"), "{line}");
    // Every line of the GPU section says stand-in (the driver's "CUDA 12.8" too), but a
    // verdict's fix and warning lines, which go with their labelled line.
    let start = out
        .find("GPU driver:")
        .unwrap_or_else(|| panic!("no driver line: {out}"));
    let gpu: String = out[start..]
        .lines()
        .take_while(|l| l.starts_with("GPU ") || l.starts_with("  "))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(gpu.contains("gpu-rx") && gpu.contains("gpu-tx"), "{gpu}");
    assert_labelled(&gpu, |l| {
        let t = l.trim_start();
        t.starts_with("fix: ") || t.starts_with("warning: ")
    });
    Summary::read(&sum).assert_clean();
}

#[zcnet_testkit::test]
fn probe_on_a_driver_without_dma_buf_export_stages() {
    let lib = cuda_standin::build(Variant::NoDmabuf);
    let sum = cuda_standin::summary_path("probe-nodmabuf");
    let doc = json_of(&probe(&lib, &sum, &["--active", "--json"]));
    let g = &doc["gpu"];
    assert_eq!(g["devices"][0]["dma_buf"], false, "{g}");
    assert_ne!(g["devices"][0]["export"], "confirmed", "{g}");
    let paths = g["interfaces"][0]["paths"].as_array().unwrap();
    assert_eq!(paths[0]["gpu-rx"]["verdict"], "staging", "{g}");
    Summary::read(&sum).assert_clean();
}

/// A libcuda.so.1 that is not an ELF file is a broken install, named as such, not "no driver".
#[zcnet_testkit::test]
fn a_corrupt_libcuda_is_reported_as_broken_not_missing() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("corrupt-libcuda");
    std::fs::create_dir_all(&dir).unwrap();
    let lib = dir.join("libcuda.so.1");
    std::fs::write(&lib, b"#!/bin/sh\necho not a library\n").unwrap();
    let sum = dir.join("unused-summary");
    let o = probe(&lib, &sum, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out.lines().find(|l| l.starts_with("GPU")).unwrap();
    assert!(
        line.contains("present but could not be loaded") && line.contains(lib.to_str().unwrap()),
        "{line}"
    );
    assert!(!line.contains("no CUDA driver library"), "{line}");
    let o = zcnet(&lib, &sum)
        .args(["recv", "--listen", "127.0.0.1:0", "--mem", "cuda"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        common::stderr(&o).contains("present but could not be loaded"),
        "{}",
        text(&o)
    );
}
