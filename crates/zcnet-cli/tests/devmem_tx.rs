//! `--tx devmem` from the command line: it parses for `zcnet send` and `zcnet bench tx`, is
//! refused on host memory here (no dma-buf: no /dev/udmabuf on this kernel) with one line that
//! names devmem and the fix, and stays out of the benchmark's default set.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;
use common::stderr;

use std::net::TcpListener;
use std::process::Command;

fn zcnet(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_zcnet"))
        .args(args)
        .output()
        .unwrap()
}

#[zcnet_testkit::test]
fn send_devmem_without_a_dmabuf_exits_1_with_one_line_and_the_fix() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let o = zcnet(&["send", &addr, "--tx", "devmem", "--bytes", "1M", "--verify"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let line = err.trim_end();
    assert!(!line.contains('\n'), "one line: {err}");
    for want in [
        "zcnet: ",
        "devmem TCP transmit (--tx devmem)",
        "without a dma-buf",
        "--mem cuda",
        "udmabuf",
        "--tx msg-zerocopy",
    ] {
        assert!(line.contains(want), "missing '{want}' in: {line}");
    }
    drop(l);
}

#[zcnet_testkit::test]
fn bench_tx_devmem_gives_a_row_with_the_refusal() {
    let o = zcnet(&[
        "bench",
        "tx",
        "--path",
        "loopback",
        "--tx",
        "devmem",
        "--size",
        "4K",
        "--duration",
        "0.2",
        "--json",
    ]);
    // The document is printed; the failed case makes the run exit 1.
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("bench tx: 1 of 1 case(s) failed"),
        "{}",
        stderr(&o)
    );
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = doc["results"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{doc}");
    assert_eq!(rows[0]["tx"], "devmem");
    assert_eq!(rows[0]["bytes"], 0);
    let e = rows[0]["error"].as_str().unwrap();
    assert!(
        e.contains("dma-buf") && e.contains("--tx msg-zerocopy"),
        "{e}"
    );
}

#[zcnet_testkit::test]
fn devmem_is_not_in_the_default_benchmark_set() {
    let o = zcnet(&["bench", "tx", "--help"]);
    assert!(o.status.success());
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(
        help.contains("[default: copy,msg-zerocopy,uring,uring-zc,auto]"),
        "{help}"
    );
    // Named in the help all the same.
    assert!(help.contains("devmem"), "{help}");
}

zcnet_testkit::main!();
