//! `zcnet probe`'s GPU section on a machine without a CUDA driver (these machines, and CI): one
//! line with the cause and the fix, exit 0, and in `--json` no devices, the error, and every
//! interface's gpu-rx / gpu-tx verdict `unavailable` with that cause. `ZCNET_LIBCUDA` pointing
//! at a file that does not exist gives the same on any machine, naming the file.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;
use common::stderr;

use std::process::{Command, Output};

use serde_json::Value;

/// Runs `zcnet ARGS` with `ZCNET_LIBCUDA` set to `libcuda`, or unset.
fn zcnet(args: &[&str], libcuda: Option<&str>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_zcnet"));
    c.args(args);
    match libcuda {
        Some(l) => c.env("ZCNET_LIBCUDA", l),
        None => c.env_remove("ZCNET_LIBCUDA"),
    };
    c.output().unwrap()
}

fn json(args: &[&str], libcuda: Option<&str>) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let o = zcnet(&all, libcuda);
    assert!(o.status.success(), "zcnet {all:?}: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The GPU line of the table.
fn gpu_line(o: &Output) -> String {
    assert!(o.status.success(), "{}", stderr(o));
    let out = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("GPU")).collect();
    assert_eq!(lines.len(), 1, "one GPU line without a GPU: {out}");
    lines[0].to_string()
}

/// Checks the `gpu` object of a probe without a driver; returns the cause every verdict gives.
fn assert_no_gpu(doc: &Value, names_file: &str) -> String {
    let g = &doc["gpu"];
    assert_eq!(g["devices"], Value::Array(vec![]), "{g}");
    assert_eq!(g["driver"], Value::Null, "{g}");
    let err = g["error"].as_str().unwrap();
    assert!(err.contains("no CUDA driver library"), "{err}");
    assert!(err.contains(names_file), "{err}");
    assert!(
        err.contains("install the NVIDIA driver") && err.contains("--mem host"),
        "{err}"
    );
    let ifaces = g["interfaces"].as_array().unwrap();
    let names: Vec<&Value> = doc["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &i["name"])
        .collect();
    assert_eq!(ifaces.iter().map(|i| &i["name"]).collect::<Vec<_>>(), names);
    let mut cause = String::new();
    for i in ifaces {
        let paths = i["paths"].as_array().unwrap();
        assert_eq!(paths.len(), 1, "{i}");
        assert_eq!(paths[0]["gpu"], Value::Null, "{i}");
        for dir in ["gpu-rx", "gpu-tx"] {
            let f = &paths[0][dir];
            assert_eq!(f["verdict"], "unavailable", "{} {dir}: {f}", i["name"]);
            let reason = f["reason"].as_str().unwrap();
            assert!(reason.starts_with("no CUDA driver library"), "{reason}");
            assert!(reason.contains(names_file), "{reason}");
            assert!(
                err.contains(reason),
                "the verdict gives the error's cause: {reason}"
            );
            assert!(f["remedy"].as_str().unwrap().contains("--mem host"), "{f}");
            assert_eq!(f["confirmed"], false);
            cause = reason.to_string();
        }
    }
    cause
}

#[zcnet_testkit::test]
fn without_a_gpu_driver_probe_says_why_and_how_to_fix_it() {
    let doc = json(&["probe"], None);
    if doc["gpu"]["driver"] != Value::Null {
        zcnet_testkit::skip(
            zcnet_testkit::Need::Hardware,
            "this machine has a CUDA driver (this test is about its absence)",
        );
    }
    let cause = assert_no_gpu(&doc, "libcuda.so.1");
    let line = gpu_line(&zcnet(&["probe"], None));
    assert!(
        line.starts_with(
            "GPU: none usable \u{2014} no CUDA driver library (libcuda.so.1, libcuda.so)"
        ),
        "{line}"
    );
    assert!(line.contains(&cause), "{line}");
    assert!(
        line.contains("; install the NVIDIA driver")
            && line.ends_with("or use host memory (--mem host)"),
        "{line}"
    );
}

#[zcnet_testkit::test]
fn a_libcuda_that_does_not_exist_is_named_in_the_gpu_section() {
    const LIB: &str = "/nonexistent/x.so";
    let doc = json(&["probe", "--iface", "lo"], Some(LIB));
    let cause = assert_no_gpu(&doc, LIB);
    assert!(
        cause.starts_with("no CUDA driver library (/nonexistent/x.so)"),
        "{cause}"
    );
    // --active tries nothing on a GPU it cannot open, and says the same.
    let active = json(&["probe", "--iface", "lo", "--active"], Some(LIB));
    assert_no_gpu(&active, LIB);
    let line = gpu_line(&zcnet(&["probe", "--iface", "lo"], Some(LIB)));
    assert!(
        line.contains("(/nonexistent/x.so)") && line.contains("--mem host"),
        "{line}"
    );
}

zcnet_testkit::main!();
