//! `zcnet bench tx`: the table, the JSON document, the progress line.

use crate::units::parse_size;
use crate::BenchTxArgs;
use serde::Serialize;
use std::io::{IsTerminal, Write};
use std::time::Duration;
use zcnet::bench::{self, PathKind, Progress, TxBenchConfig, TxReport, RAW_BASELINE};
use zcnet::{Error, MemoryKind, TxMode};

/// One result in `--json` (schema in docs/cli.md).
#[derive(Serialize)]
struct JsonRow<'a> {
    path: &'a str,
    tx: &'a str,
    size: usize,
    inflight: usize,
    bytes: u64,
    seconds: f64,
    mb_per_s: f64,
    zerocopy_bytes: u64,
    copied_bytes: u64,
    cpu_seconds: f64,
    notifications: u64,
    received_bytes: Option<u64>,
    ratio_to_copy: Option<f64>,
    switches: &'a [String],
    error: Option<&'a str>,
}

#[derive(Serialize)]
struct JsonDoc<'a> {
    results: Vec<JsonRow<'a>>,
    notes: &'a [String],
}

fn config(a: &BenchTxArgs) -> Result<TxBenchConfig, Error> {
    let paths = a
        .path
        .iter()
        .map(|p| PathKind::parse(p.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    let modes =
        a.tx.iter()
            .map(|m| TxMode::parse(m.trim()))
            .collect::<Result<Vec<_>, _>>()?;
    let sizes = a
        .size
        .iter()
        .map(|s| parse_size(s))
        .collect::<Result<Vec<_>, _>>()?;
    let memory = MemoryKind::parse(&a.mem).ok_or_else(|| {
        Error::io(
            format!("unknown --mem '{}': use anon or huge", a.mem),
            std::io::Error::from(std::io::ErrorKind::InvalidInput),
        )
    })?;
    if !(a.duration > 0.0 && a.duration.is_finite()) || a.inflight == 0 || a.inflight > 4096 {
        return Err(Error::io(
            "bad --duration or --inflight: give a positive duration and 1..=4096 in flight",
            std::io::Error::from(std::io::ErrorKind::InvalidInput),
        ));
    }
    Ok(TxBenchConfig {
        paths,
        modes,
        sizes,
        duration: Duration::from_secs_f64(a.duration),
        inflight: a.inflight,
        memory,
        baseline: !a.no_baseline,
    })
}

pub fn run(a: &BenchTxArgs) -> Result<(), Error> {
    let cfg = config(a)?;
    let tty = std::io::stderr().is_terminal();
    let mut progress = |p: Progress<'_>| match p {
        Progress::Start {
            index,
            total,
            path,
            tx,
            size,
        } => {
            let line = format!("[{index}/{total}] {path} {tx} {size} B ...");
            if tty {
                eprint!("\r\x1b[K{line}");
            } else {
                eprintln!("{line}");
            }
            let _ = std::io::stderr().flush();
        }
        Progress::Done(row) => {
            if tty {
                eprint!("\r\x1b[K");
            }
            if let Some(e) = &row.error {
                eprintln!("  {} {} {} B failed: {e}", row.path, row.tx, row.size);
            }
        }
    };
    let report = bench::run_tx(&cfg, &mut progress)?;
    if a.json {
        print_json(&report);
    } else {
        print_table(&report);
    }
    Ok(())
}

fn print_json(r: &TxReport) {
    let results = r
        .rows
        .iter()
        .map(|row| JsonRow {
            path: row.path,
            tx: &row.tx,
            size: row.size,
            inflight: row.inflight,
            bytes: row.bytes,
            seconds: row.seconds,
            mb_per_s: row.mb_per_s,
            zerocopy_bytes: row.zerocopy_bytes,
            copied_bytes: row.copied_bytes,
            cpu_seconds: row.cpu_seconds,
            notifications: row.notifications,
            received_bytes: row.received_bytes,
            ratio_to_copy: r.ratio_to(row, "copy"),
            switches: &row.switches,
            error: row.error.as_deref(),
        })
        .collect();
    let doc = JsonDoc {
        results,
        notes: &r.notes,
    };
    match serde_json::to_string_pretty(&doc) {
        Ok(s) => println!("{s}"),
        Err(e) => eprintln!("zcnet: JSON: {e}"),
    }
}

fn print_table(r: &TxReport) {
    for n in &r.notes {
        println!("note: {n}");
    }
    println!(
        "{:<9} {:<13} {:>7} {:>10} {:>7} {:>6} {:>9} {:>8}",
        "path", "tx", "size", "MB/s", "x copy", "zc %", "CPU s/GB", "notifs"
    );
    for row in &r.rows {
        if let Some(e) = &row.error {
            println!("{:<9} {:<13} {:>7} failed: {e}", row.path, row.tx, row.size);
            continue;
        }
        let ratio = r
            .ratio_to(row, "copy")
            .map_or("-".to_string(), |x| format!("{x:.2}"));
        let zc = row
            .zerocopy_percent()
            .map_or("-".to_string(), |x| format!("{x:.0}"));
        let cpu = row
            .cpu_seconds_per_gb()
            .map_or("-".to_string(), |x| format!("{x:.3}"));
        println!(
            "{:<9} {:<13} {:>7} {:>10.0} {:>7} {:>6} {:>9} {:>8}",
            row.path, row.tx, row.size, row.mb_per_s, ratio, zc, cpu, row.notifications
        );
        for s in &row.switches {
            println!("{:<9}   auto: {s}", "");
        }
    }
    for row in r
        .rows
        .iter()
        .filter(|x| x.tx == "uring-zc" && x.error.is_none())
    {
        if let Some(x) = r.ratio_to(row, RAW_BASELINE) {
            println!("zcnet overhead: {} {} B: uring-zc / raw SEND_ZC loop = {x:.3} (1.000 = no overhead)", row.path, row.size);
        }
    }
}
