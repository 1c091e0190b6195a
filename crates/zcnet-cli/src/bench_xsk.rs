//! `zcnet bench xsk`: AF_XDP against AF_PACKET on the lab veth pair; the table, the JSON
//! document (schema in docs/cli.md), the progress lines.

use crate::output::{all_ran, clear_progress, show_progress};
use crate::units::{bytes_arg, count_arg, seconds_arg};
use clap::Args;
use serde::Serialize;
use std::io::IsTerminal;
use zcnet::Error;
use zcnet_cli::cli_text::Cli;
use zcnet_tools::xskbench::{
    self, Mode, PathKind, Progress, Row, RxWait, XskBenchConfig, XskReport,
};

/// Options of `zcnet bench xsk`.
#[derive(Args, Debug)]
pub struct BenchXskArgs {
    /// Lab paths: veth (a sender on one end, a receiver on the other), sink (an ifb device
    /// that drops every frame: the senders alone).
    #[arg(long, value_delimiter = ',', default_value = "veth,sink")]
    pub path: Vec<String>,
    /// Frame sizes in bytes (the Ethernet frame without FCS: 50 to 1514).
    #[arg(long, value_delimiter = ',', default_value = "64,512,1500")]
    pub size: Vec<String>,
    /// Seconds the sender sends in each run.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub duration: f64,
    /// Runs of each case, interleaved; each row reports their medians.
    #[arg(long, default_value_t = 5)]
    pub repeat: usize,
    /// Modes: af-xdp-copy, af-xdp-zerocopy, af-packet (every AF_PACKET variant).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "af-xdp-copy,af-xdp-zerocopy,af-packet"
    )]
    pub mode: Vec<String>,
    /// The sender's and the receiver's CPU, as TX,RX (default: the first two this process may
    /// use).
    #[arg(long, value_delimiter = ',')]
    pub cpus: Option<Vec<usize>>,
    /// veth: address the frames to another host's MAC address, which the receiving stack drops
    /// right after the AF_PACKET tap: the best case for AF_PACKET (default: to vB's own, whose
    /// stack then also processes each one; AF_XDP is the same either way).
    #[arg(long)]
    pub other_host: bool,
    /// How receivers wait when their ring is empty: sleep (50 µs, then look again), poll (on
    /// the socket: the kernel wakes them, from the sending CPU), spin.
    #[arg(long, default_value = "sleep")]
    pub rx_wait: String,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
}

fn config(a: &BenchXskArgs) -> Result<XskBenchConfig, Error> {
    let mut sizes = Vec::new();
    for s in &a.size {
        let n = bytes_arg("--size", s.trim())?;
        sizes.push(usize::try_from(n).unwrap_or(usize::MAX));
    }
    let cpus = match a.cpus.as_deref() {
        None => None,
        Some(&[t, r]) => Some((t, r)),
        Some(_) => {
            return Err(Error::invalid_input(
                "--cpus: give two CPUs, the sender's and the receiver's, like --cpus 0,1",
            ))
        }
    };
    let modes = a
        .mode
        .iter()
        .map(|m| Mode::parse(m.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    let paths = a
        .path
        .iter()
        .map(|p| PathKind::parse(p.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    let cfg = XskBenchConfig {
        paths,
        cases: xskbench::default_cases()
            .into_iter()
            .filter(|c| modes.contains(&c.mode))
            .collect(),
        sizes,
        duration: seconds_arg("--duration", a.duration)?,
        repeat: count_arg("--repeat", a.repeat, 1000)?,
        cpus,
        other_host: a.other_host,
        rx_wait: RxWait::parse(a.rx_wait.trim())?,
    };
    cfg.check()?;
    Ok(cfg)
}

pub fn run(a: &BenchXskArgs) -> Result<(), Error> {
    let cfg = config(a)?;
    let tty = std::io::stderr().is_terminal();
    let mut progress = |p: Progress| match p {
        Progress::Run {
            index,
            total,
            path,
            case,
            size,
            rep,
        } => show_progress(
            tty,
            &format!("[{index}/{total}] {path} {size} B {case}, run {rep} ..."),
        ),
    };
    let report = xskbench::run(&cfg, &mut progress)?;
    clear_progress(tty);
    if a.json {
        print_json(&report);
    } else {
        print_table(&report);
    }
    all_ran("bench xsk", report.failed(), report.rows.len())
}

/// One row of `--json`.
#[derive(Serialize)]
struct JsonRow<'a> {
    path: &'a str,
    mode: &'a str,
    tx_variant: &'a str,
    rx_variant: &'a str,
    size: usize,
    tx_pps: Option<f64>,
    rx_pps: Option<f64>,
    cpu_s_per_mpkt: Option<f64>,
    tx_cpu_s_per_mpkt: Option<f64>,
    rx_cpu_s_per_mpkt: Option<f64>,
    drops: Option<u64>,
    sent: u64,
    received: u64,
    kernel_drops: u64,
    runs: usize,
    error: Option<String>,
}

#[derive(Serialize)]
struct JsonRatio {
    path: &'static str,
    size: usize,
    best_af_packet_tx: Option<&'static str>,
    best_af_packet_tx_pps: Option<f64>,
    tx_ratio: Option<f64>,
    best_af_packet_rx: Option<String>,
    best_af_packet_rx_pps: Option<f64>,
    rx_ratio: Option<f64>,
}

#[derive(Serialize)]
struct JsonDoc<'a> {
    results: Vec<JsonRow<'a>>,
    ratios: Vec<JsonRatio>,
    sender_cpu: usize,
    receiver_cpu: usize,
    placement: &'a str,
    repeat: usize,
    duration_s: f64,
}

fn json_row(r: &Row) -> JsonRow<'_> {
    JsonRow {
        path: r.path,
        mode: r.case.mode.name(),
        tx_variant: r.case.tx.name(),
        rx_variant: r.case.rx.name(),
        size: r.size,
        tx_pps: r.tx_pps(),
        rx_pps: r.rx_pps(),
        cpu_s_per_mpkt: r.cpu_s_per_mpkt(),
        tx_cpu_s_per_mpkt: r.tx_cpu_s_per_mpkt(),
        rx_cpu_s_per_mpkt: r.rx_cpu_s_per_mpkt(),
        drops: r.drops(),
        sent: r.sent(),
        received: r.received(),
        kernel_drops: r.kernel_drops(),
        runs: r.runs.len(),
        error: r.error_line(&Cli),
    }
}

fn print_json(r: &XskReport) {
    let doc = JsonDoc {
        results: r.rows.iter().map(json_row).collect(),
        ratios: r
            .ratios
            .iter()
            .map(|x| JsonRatio {
                path: x.path,
                size: x.size,
                best_af_packet_tx: x.best_af_packet_tx.map(|b| b.0),
                best_af_packet_tx_pps: x.best_af_packet_tx.map(|b| b.1),
                tx_ratio: x.tx_ratio,
                best_af_packet_rx: x.best_af_packet_rx.as_ref().map(|b| b.0.clone()),
                best_af_packet_rx_pps: x.best_af_packet_rx.as_ref().map(|b| b.1),
                rx_ratio: x.rx_ratio,
            })
            .collect(),
        sender_cpu: r.sender_cpu,
        receiver_cpu: r.receiver_cpu,
        placement: &r.placement,
        repeat: r.repeat,
        duration_s: r.duration.as_secs_f64(),
    };
    match serde_json::to_string_pretty(&doc) {
        Ok(s) => zcnet_tools::outln!("{s}"),
        Err(e) => zcnet_tools::eoutln!("zcnet: JSON: {e}"),
    }
}

/// What the `drops` column counts, printed under the table.
const DROPS_LEGEND: &str = "drops: frames sent minus frames received over all runs: frames the receiver never got (lost on the veth, dropped by the kernel because the receive ring was full or the fill ring empty, or still in flight when a run ended); the kernel's own counters of them (AF_XDP XDP_STATISTICS rx_dropped + rx_ring_full, AF_PACKET tp_drops, ENOBUFS from the device) are kernel_drops in --json; '-' for the sink, which has no receiver";

fn mpps(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{:.3}", v / 1e6))
}

fn cpu(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{v:.3}"))
}

fn print_table(r: &XskReport) {
    zcnet_tools::outln!(
        "{}; medians of {} run(s) of {:.1} s each, interleaved",
        r.placement,
        r.repeat,
        r.duration.as_secs_f64()
    );
    zcnet_tools::outln!(
        "{:<5} {:<16} {:<21} {:<10} {:>5} {:>8} {:>8} {:>10} {:>9} {:>9} {:>10}",
        "path",
        "mode",
        "tx",
        "rx",
        "size",
        "TX Mpps",
        "RX Mpps",
        "CPU s/Mpkt",
        "(TX s/Mp",
        "RX s/Mp)",
        "drops"
    );
    for row in &r.rows {
        let head = format!(
            "{:<5} {:<16} {:<21} {:<10} {:>5}",
            row.path,
            row.case.mode.name(),
            row.case.tx.name(),
            row.case.rx.name(),
            row.size
        );
        if let Some(e) = row.error_line(&Cli) {
            let what = if row.refused { "refused" } else { "failed" };
            zcnet_tools::outln!("{head} {what}: {e}");
            continue;
        }
        zcnet_tools::outln!(
            "{head} {:>8} {:>8} {:>10} {:>9} {:>9} {:>10}",
            mpps(row.tx_pps()),
            mpps(row.rx_pps()),
            cpu(row.cpu_s_per_mpkt()),
            cpu(row.tx_cpu_s_per_mpkt()),
            cpu(row.rx_cpu_s_per_mpkt()),
            row.drops().map_or("-".into(), |d| d.to_string())
        );
    }
    if r.rows.iter().any(|row| row.drops().is_some()) {
        zcnet_tools::outln!("{DROPS_LEGEND}");
    }
    for x in &r.ratios {
        let tx = match (x.tx_ratio, x.best_af_packet_tx) {
            (Some(q), Some((name, pps))) => {
                format!(
                    "TX {q:.2}x the best AF_PACKET TX ({name}, {:.3} Mpps)",
                    pps / 1e6
                )
            }
            _ => "TX: no ratio (a row is missing)".into(),
        };
        let rx = match (x.rx_ratio, &x.best_af_packet_rx) {
            (Some(q), Some((name, pps))) => {
                format!(
                    "RX {q:.2}x the best AF_PACKET RX ({name}, {:.3} Mpps)",
                    pps / 1e6
                )
            }
            _ if x.path == "sink" => "no RX (the sink drops every frame)".into(),
            _ => "RX: no ratio (a row is missing)".into(),
        };
        zcnet_tools::outln!("{} {} B: af-xdp-copy {tx}; {rx}", x.path, x.size);
    }
}

#[cfg(test)]
mod drops_tests {
    /// The drops column says what it counts and where the kernel's own counts are.
    #[test]
    fn the_drops_legend_names_what_it_counts() {
        let l = super::DROPS_LEGEND;
        for w in [
            "sent minus frames received",
            "rx_ring_full",
            "tp_drops",
            "kernel_drops",
        ] {
            assert!(l.contains(w), "{w}: {l}");
        }
    }
}
