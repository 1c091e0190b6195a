//! `zcnet bench rx --mem cuda[:N]`: the table and JSON of the GPU receive bench
//! (`zcnet_tools::gpu_rxbench`): host memory, GPU memory by the best path, and the naive loop, with
//! the ratios of docs/perf.md measured in one run.

use crate::args::BenchRxArgs;
use crate::output::{self, all_ran, clear_progress, show_progress};
use crate::units::{seconds_arg, size_arg, MAX_BUFFER};
use serde::Serialize;
use std::io::IsTerminal;
use zcnet::{Error, MemoryKind};
use zcnet_cli::cli_text::{notes, Cli};
use zcnet_tools::bench::PathKind;
use zcnet_tools::gpu_rxbench::{self, GpuRxBenchConfig, GpuRxProgress, GpuRxReport};

#[derive(Serialize)]
struct Refused {
    path: &'static str,
    reason: String,
}

/// One result of `bench rx --mem cuda --json` (schema in docs/cli.md).
#[derive(Serialize)]
struct Row<'a> {
    path: &'static str,
    case: &'a str,
    via: &'static str,
    bytes: u64,
    sent: u64,
    seconds: f64,
    mb_per_s: f64,
    cpu_seconds: f64,
    cpu_seconds_per_gb: Option<f64>,
    copies: u64,
    ring_full: u64,
    verified: bool,
    ratio_to_host: Option<f64>,
    ratio_to_naive: Option<f64>,
    refused: Vec<Refused>,
    error: Option<String>,
    /// `"(stand-in driver: not GPU figures)"` on zcnet's CUDA driver stand-in; absent on a GPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    standin_note: Option<&'static str>,
}

#[derive(Serialize)]
struct Doc<'a> {
    mem: String,
    results: Vec<Row<'a>>,
    notes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    standin_note: Option<&'static str>,
}

fn config(a: &BenchRxArgs, memory: MemoryKind) -> Result<GpuRxBenchConfig, Error> {
    let paths = a
        .path
        .iter()
        .map(|p| PathKind::parse(p.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    let size = size_arg("--size", &a.size, MAX_BUFFER)?;
    let duration = seconds_arg("--duration", a.duration)?;
    Ok(GpuRxBenchConfig {
        paths,
        memory,
        size,
        duration,
        verify: a.verify,
        ..GpuRxBenchConfig::default()
    })
}

pub fn run_rx(a: &BenchRxArgs, memory: MemoryKind) -> Result<(), Error> {
    let cfg = config(a, memory)?;
    let tty = std::io::stderr().is_terminal();
    let mut progress = |p: GpuRxProgress<'_>| match p {
        GpuRxProgress::Start {
            index,
            total,
            path,
            case,
        } => show_progress(tty, &format!("[{index}/{total}] {path} {case} ...")),
        GpuRxProgress::Done(row) => {
            clear_progress(tty);
            if let Some(e) = &row.error {
                zcnet_tools::eoutln!("  {} {}: {}", row.path, row.case, e.render(&Cli));
            }
        }
    };
    let report = gpu_rxbench::run(&cfg, &mut progress)?;
    // Every row of a run on zcnet's CUDA driver stand-in says so: its rates are not a GPU's.
    let standin = match memory {
        MemoryKind::Cuda(n) => zcnet::gpu::standin_label(n),
        _ => None,
    };
    if a.json {
        print_json(&report, memory, standin)?;
    } else {
        print_table(&report, standin);
    }
    let failed = report.rows.iter().filter(|r| r.error.is_some()).count();
    all_ran("bench rx", failed, report.rows.len())
}

fn print_json(
    r: &GpuRxReport,
    memory: MemoryKind,
    standin_note: Option<&'static str>,
) -> Result<(), Error> {
    let results = r
        .rows
        .iter()
        .map(|row| Row {
            path: row.path,
            case: &row.case,
            via: row.via,
            bytes: row.report.bytes,
            sent: row.sent,
            seconds: row.report.seconds,
            mb_per_s: row.mb_per_s(),
            cpu_seconds: row.report.cpu_seconds,
            cpu_seconds_per_gb: row.cpu_seconds_per_gb(),
            copies: row.report.copies,
            ring_full: row.report.ring_full,
            verified: row.report.verified,
            ratio_to_host: r.ratio(row, "host"),
            ratio_to_naive: r.ratio(row, "naive"),
            refused: row
                .report
                .refused
                .iter()
                .map(|x| Refused {
                    path: x.tried.name(),
                    reason: x.reason.render(&Cli),
                })
                .collect(),
            error: row.error.as_ref().map(|e| e.render(&Cli)),
            standin_note,
        })
        .collect();
    output::print_json(&Doc {
        mem: memory.name(),
        results,
        notes: notes(&r.notes),
        standin_note,
    })
}

fn print_table(r: &GpuRxReport, standin: Option<&str>) {
    let label = standin.map_or(String::new(), |l| format!("  {l}"));
    for n in notes(&r.notes) {
        zcnet_tools::outln!("note: {n}");
    }
    zcnet_tools::outln!(
        "{:<9} {:<8} {:<12} {:>9} {:>9} {:>7} {:>8}",
        "path",
        "case",
        "via",
        "MB/s",
        "CPU s/GB",
        "x host",
        "x naive"
    );
    let opt = |x: Option<f64>, d: usize| x.map_or("-".to_string(), |v| format!("{v:.d$}"));
    for row in &r.rows {
        if let Some(e) = &row.error {
            zcnet_tools::outln!(
                "{:<9} {:<8} failed: {}{label}",
                row.path,
                row.case,
                e.render(&Cli)
            );
            continue;
        }
        zcnet_tools::outln!(
            "{:<9} {:<8} {:<12} {:>9.0} {:>9} {:>7} {:>8}{label}",
            row.path,
            row.case,
            row.via,
            row.mb_per_s(),
            opt(row.cpu_seconds_per_gb(), 3),
            opt(r.ratio(row, "host"), 2),
            opt(r.ratio(row, "naive"), 2)
        );
        for x in &row.report.refused {
            zcnet_tools::outln!("{:<9}   not {}: {}", "", x.tried, x.reason.render(&Cli));
        }
    }
    zcnet_tools::outln!("targets: GPU row >= 0.90 x host and >= 2.00 x naive on each path{label}");
}
