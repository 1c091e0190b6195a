//! `zcnet bench tx` and `zcnet bench rx`: the tables, the JSON documents, the progress lines.

use crate::args::{parse_mem, BenchRxArgs, BenchTxArgs};
use crate::output::{all_ran, clear_progress, show_progress};
use crate::units::{
    count_arg, seconds_arg, size_arg, total_arg, window_arg, MAX_BUFFER, MAX_INFLIGHT,
};
use serde::Serialize;
use std::io::IsTerminal;
use zcnet::{Error, MemoryKind, TxMode};
use zcnet_cli::cli_text::{notes, Cli};
use zcnet_tools::bench::{self, PathKind, Progress, TxBenchConfig, TxReport};
use zcnet_tools::rxbench::{self, BenchRxMode, IfaceTarget, RxBenchConfig, RxProgress, RxReport};

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
    switches: Vec<String>,
    samples_mb_per_s: &'a [f64],
    other_cpu_seconds: Option<f64>,
    why: Option<String>,
    error: Option<String>,
    /// `"(stand-in driver: not GPU figures)"` for `--mem cuda` on zcnet's CUDA driver stand-in.
    #[serde(skip_serializing_if = "Option::is_none")]
    standin_note: Option<&'static str>,
}

#[derive(Serialize)]
struct JsonDoc<'a> {
    /// Ctrl-C ended the run (present only then): `results` are the cases measured before it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    interrupted: bool,
    results: Vec<JsonRow<'a>>,
    notes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    standin_note: Option<&'static str>,
}

fn config(a: &BenchTxArgs) -> Result<TxBenchConfig, Error> {
    let mut paths = a
        .path
        .iter()
        .map(|p| PathKind::parse(p.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    if paths.is_empty() {
        // The default set: dummy only where the kernel has the driver.
        paths = bench::default_paths(zcnet_tools::lab::dummy_driver());
    }
    let modes =
        a.tx.iter()
            .map(|m| TxMode::parse(m.trim()))
            .collect::<Result<Vec<_>, _>>()?;
    // Every argument is checked before any lab is made or memory allocated (exit code 2).
    let inflight = count_arg("--inflight", a.inflight, MAX_INFLIGHT)?;
    let window = window_arg(&a.window)?;
    let duration = seconds_arg("--duration", a.duration)?;
    let mut sizes = Vec::new();
    for s in &a.size {
        let size = size_arg("--size", s.trim(), MAX_BUFFER)?;
        total_arg(("--size", size), ("--inflight", inflight))?;
        let on_sink = bench::effective_size(PathKind::Sink, size);
        if let Some(p) = paths.iter().find(|p| p.is_udp_drop()) {
            if on_sink > bench::UDP_MAX_PAYLOAD {
                return Err(Error::invalid_input(format!(
                    "--size {} ({on_sink} B) is larger than one UDP datagram can carry ({} B over IPv4) on the {} path: use a smaller --size, or leave {} out of --path",
                    s.trim(),
                    bench::UDP_MAX_PAYLOAD,
                    p.name(),
                    p.name()
                )));
            }
        }
        sizes.push(size);
    }
    let memory = parse_mem(&a.mem)?;
    if memory.is_device() {
        // Fail before any lab is made when there is no GPU (one line, with the fix).
        zcnet::gpu::devices()?;
    }
    if memory == zcnet::MemoryKind::Udmabuf {
        // Without /dev/udmabuf every case would fail alike: one line, before any lab (exit 1).
        zcnet::Region::udmabuf(4096)?;
    }
    Ok(TxBenchConfig {
        paths,
        modes,
        sizes,
        duration,
        inflight,
        window,
        memory,
        baseline: !a.no_baseline,
        repeats: bench::OVERHEAD_RUNS,
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
            run: (run, runs),
        } => {
            let of = if runs > 1 {
                format!(" (run {run} of {runs})")
            } else {
                String::new()
            };
            show_progress(
                tty,
                &format!("[{index}/{total}] {path} {tx} {size} B{of} ..."),
            );
        }
        Progress::Done(row) => {
            clear_progress(tty);
            if let Some(e) = &row.error {
                zcnet_tools::eoutln!(
                    "  {} {} {} B failed: {}",
                    row.path,
                    row.tx,
                    row.size,
                    e.render(&Cli)
                );
            }
        }
    };
    let report = bench::run_tx(&cfg, &mut progress)?;
    // `--mem cuda` on zcnet's CUDA driver stand-in: every row says its rates are not a GPU's.
    let standin = match cfg.memory {
        MemoryKind::Cuda(n) => zcnet::gpu::standin_label(n),
        _ => None,
    };
    if a.json {
        print_json(&report, standin);
    } else {
        print_table(&report, standin);
    }
    if report.interrupted {
        // The cases measured before Ctrl-C are printed above; the exit is still 130.
        return Err(Error::Interrupted);
    }
    let failed = report.rows.iter().filter(|r| r.error.is_some()).count();
    all_ran("bench tx", failed, report.rows.len())
}

fn print_json(r: &TxReport, standin_note: Option<&'static str>) {
    let frags = bench::max_skb_frags();
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
            switches: row.switches.iter().map(|s| s.render(&Cli)).collect(),
            samples_mb_per_s: &row.samples_mb_per_s,
            other_cpu_seconds: row.other_cpu_seconds,
            why: bench::slow_zero_copy_reason(row, r.ratio_to(row, "copy"), frags),
            error: row.error.as_ref().map(|e| e.render(&Cli)),
            standin_note,
        })
        .collect();
    let doc = JsonDoc {
        interrupted: r.interrupted,
        results,
        notes: notes(&r.notes),
        standin_note,
    };
    match serde_json::to_string_pretty(&doc) {
        Ok(s) => zcnet_tools::outln!("{s}"),
        Err(e) => zcnet_tools::eoutln!("zcnet: JSON: {e}"),
    }
}

fn print_table(r: &TxReport, standin: Option<&str>) {
    let label = standin.map_or(String::new(), |l| format!("  {l}"));
    let frags = bench::max_skb_frags();
    for n in notes(&r.notes) {
        zcnet_tools::outln!("note: {n}");
    }
    zcnet_tools::outln!(
        "{:<9} {:<16} {:>7} {:>10} {:>7} {:>6} {:>9} {:>8}",
        "path",
        "tx",
        "size",
        "MB/s",
        "x copy",
        "zc %",
        "CPU s/GB",
        "notifs"
    );
    for row in &r.rows {
        if let Some(e) = &row.error {
            zcnet_tools::outln!(
                "{:<9} {:<16} {:>7} failed: {}{label}",
                row.path,
                row.tx,
                row.size,
                e.render(&Cli)
            );
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
        zcnet_tools::outln!(
            "{:<9} {:<16} {:>7} {:>10.0} {:>7} {:>6} {:>9} {:>8}{label}",
            row.path,
            row.tx,
            row.size,
            row.mb_per_s,
            ratio,
            zc,
            cpu,
            row.notifications
        );
        for s in &row.switches {
            zcnet_tools::outln!("{:<9}   auto: {}", "", s.render(&Cli));
        }
        if let Some(why) = bench::slow_zero_copy_reason(row, r.ratio_to(row, "copy"), frags) {
            zcnet_tools::outln!("{:<9}   why: {why}", "");
        }
        if let Some(w) = zcnet_tools::cpu::busy_warning(row.other_cpu_seconds, row.seconds) {
            zcnet_tools::outln!("{:<9}   {w}", "");
        }
    }
    let mut heading = false;
    for (mode, raw) in bench::RAW_LOOPS {
        let rows = r
            .rows
            .iter()
            .filter(|x| x.tx == mode.name() && x.error.is_none());
        for row in rows {
            if let Some(o) = r.overhead(row, raw) {
                if !std::mem::replace(&mut heading, true) {
                    zcnet_tools::outln!("{}", bench::OVERHEAD_HEADING);
                }
                zcnet_tools::outln!("{}{label}", o.line(row.path, row.size, mode.name(), raw));
            }
        }
    }
}

/// One result of `bench rx --json` (schema in docs/cli.md).
#[derive(Serialize)]
struct RxJsonRow<'a> {
    path: &'a str,
    rx: &'a str,
    size: usize,
    connections: usize,
    threads: usize,
    qps: Option<f64>,
    gbps: Option<f64>,
    server_cpu_us_per_req: Option<f64>,
    p50_us: Option<f64>,
    p99_us: Option<f64>,
    ratio_to_copy: Option<f64>,
    chosen: Option<&'a str>,
    refused: Option<String>,
    skipped: Option<String>,
    fallbacks: Vec<String>,
    requests: u64,
    seconds: f64,
    server_cpu: Option<usize>,
    server_cpu_seconds: f64,
    client_cpu_seconds: f64,
    polls_per_req: Option<f64>,
    sends_per_req: Option<f64>,
    buffers_per_req: Option<f64>,
    partial_sends: u64,
    starved: u64,
    rearms: u64,
    rx_bytes: u64,
    copied_bytes: u64,
    zerocopy_bytes: u64,
    unknown_copy_bytes: u64,
    zero_copy_pct: Option<f64>,
    server_failures: Vec<String>,
    client_errors: &'a [String],
    other_cpu_seconds: Option<f64>,
    error: Option<String>,
}

#[derive(Serialize)]
struct RxJsonDoc<'a> {
    results: Vec<RxJsonRow<'a>>,
    notes: Vec<String>,
}

fn rx_config(a: &BenchRxArgs) -> Result<RxBenchConfig, Error> {
    let paths = a
        .path
        .iter()
        .map(|p| PathKind::parse(p.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    let modes =
        a.rx.iter()
            .map(|m| BenchRxMode::parse(m.trim()))
            .collect::<Result<Vec<_>, _>>()?;
    // Every argument is checked before any lab is made or memory allocated (exit code 2).
    let size = size_arg("--size", &a.size, MAX_BUFFER)?;
    let buf_size = a
        .buf_size
        .as_deref()
        .map(|b| size_arg("--buf-size", b, MAX_BUFFER))
        .transpose()?;
    let buffers = a
        .buffers
        .map(|n| count_arg("--buffers", n, usize::MAX))
        .transpose()?;
    if let (Some(b), Some(n)) = (buf_size, buffers) {
        total_arg(("--buf-size", b), ("--buffers", n))?;
    }
    let connections = count_arg(
        "--connections",
        a.connections,
        crate::units::MAX_CONNECTIONS,
    )?;
    let threads = count_arg("--threads", a.threads, crate::units::MAX_THREADS)?;
    let duration = seconds_arg("--duration", a.duration)?;
    let iface = rx_iface(a)?;
    Ok(RxBenchConfig {
        paths,
        modes,
        size,
        connections,
        threads,
        duration,
        cpu: a.cpu,
        full_check: a.verify,
        buf_size,
        buffers,
        bundle: !a.no_bundle,
        steer_rx: a.steer_rx,
        iface,
    })
}

/// `--iface` and the options that go with it (`--queue`, `--listen`, `--client-netns`).
fn rx_iface(a: &BenchRxArgs) -> Result<Option<IfaceTarget>, Error> {
    let Some(iface) = a.iface.clone() else {
        if a.queue.is_some() || a.listen.is_some() || a.client_netns.is_some() {
            return Err(Error::invalid_input(
                "--queue, --listen and --client-netns go with --iface (a NIC to run on): add --iface IF or drop them",
            ));
        }
        return Ok(None);
    };
    let Some(listen) = a.listen.as_deref() else {
        return Err(Error::invalid_input(format!(
            "--iface {iface} needs --listen ADDR:PORT, the server's address on {iface} and the port steered to its queue"
        )));
    };
    let listen = zcnet::net::parse_addr(listen)?;
    if listen.port() == 0 {
        return Err(Error::invalid_input(format!(
            "--listen {listen}: give the port the flows are steered by (zcnet nic setup --port), not 0"
        )));
    }
    Ok(Some(IfaceTarget {
        iface,
        queue: a.queue,
        listen,
        client_netns: a.client_netns.clone(),
    }))
}

pub fn run_rx(a: &BenchRxArgs) -> Result<(), Error> {
    match parse_mem(&a.mem)? {
        MemoryKind::Anonymous => {}
        m @ MemoryKind::Cuda(_) => return crate::bench_gpu::run_rx(a, m),
        m => {
            return Err(Error::invalid_input(format!(
                "bench rx --mem {}: the echo server receives into its own host buffers: use --mem host, or --mem cuda[:N] for GPU memory",
                m.name()
            )))
        }
    }
    let cfg = rx_config(a)?;
    let tty = std::io::stderr().is_terminal();
    let mut progress = |p: RxProgress<'_>| match p {
        RxProgress::Start {
            index,
            total,
            path,
            rx,
        } => {
            show_progress(tty, &format!("[{index}/{total}] {path} {rx} ..."));
        }
        RxProgress::Done(row) => {
            clear_progress(tty);
            if let Some(e) = &row.error {
                zcnet_tools::eoutln!("  {} {}: {}", row.path, row.rx, e.render(&Cli));
            }
        }
    };
    let report = rxbench::run_rx(&cfg, &mut progress)?;
    if a.json {
        print_rx_json(&report);
    } else {
        print_rx_table(&report);
    }
    // A refused backend is a result (the kernel's answer), not a failure; an error is.
    let failed = report
        .rows
        .iter()
        .filter(|r| r.refused.is_none() && r.error.is_some())
        .count();
    all_ran("bench rx", failed, report.rows.len())
}

fn print_rx_json(r: &RxReport) {
    let results = r
        .rows
        .iter()
        .map(|row| {
            let measured = row.measured();
            RxJsonRow {
                path: row.path,
                rx: row.rx,
                size: row.size,
                connections: row.connections,
                threads: row.threads,
                qps: measured.then_some(row.qps),
                gbps: measured.then_some(row.gbps),
                server_cpu_us_per_req: row.server_cpu_us_per_req,
                p50_us: row.p50_us,
                p99_us: row.p99_us,
                ratio_to_copy: r.ratio_to_copy(row),
                chosen: row.chosen,
                refused: row.refused.as_ref().map(|x| x.render(&Cli)),
                skipped: row.skipped.as_ref().map(|x| x.render(&Cli)),
                fallbacks: row.fallbacks.iter().map(|f| f.render(&Cli)).collect(),
                requests: row.requests,
                seconds: row.seconds,
                server_cpu: row.server_cpu,
                server_cpu_seconds: row.server_cpu_seconds,
                client_cpu_seconds: row.client_cpu_seconds,
                polls_per_req: row.polls_per_req,
                sends_per_req: row.sends_per_req,
                buffers_per_req: row.buffers_per_req,
                partial_sends: row.partial_sends,
                starved: row.starved,
                rearms: row.rearms,
                rx_bytes: row.rx_bytes,
                copied_bytes: row.copied_bytes,
                zerocopy_bytes: row.zerocopy_bytes,
                unknown_copy_bytes: row.unknown_copy_bytes,
                zero_copy_pct: row.zero_copy_pct(),
                server_failures: row.server_failures.iter().map(|f| f.render(&Cli)).collect(),
                client_errors: &row.client_errors,
                other_cpu_seconds: row.other_cpu_seconds,
                error: row.error.as_ref().map(|e| e.render(&Cli)),
            }
        })
        .collect();
    let doc = RxJsonDoc {
        results,
        notes: notes(&r.notes),
    };
    match serde_json::to_string_pretty(&doc) {
        Ok(s) => zcnet_tools::outln!("{s}"),
        Err(e) => zcnet_tools::eoutln!("zcnet: JSON: {e}"),
    }
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or("-".to_string(), |v| format!("{v:.digits$}"))
}

fn print_rx_table(r: &RxReport) {
    for n in notes(&r.notes) {
        zcnet_tools::outln!("note: {n}");
    }
    zcnet_tools::outln!(
        "{:<9} {:<13} {:>7} {:>9} {:>8} {:>12} {:>8} {:>8} {:>7}",
        "path",
        "rx",
        "size",
        "qps",
        "Gbit/s",
        "CPU µs/req",
        "p50 µs",
        "p99 µs",
        "x copy"
    );
    for row in &r.rows {
        let name = match row.chosen {
            Some(c) if c != row.rx => format!("{}→{c}", row.rx),
            _ => row.rx.to_string(),
        };
        if let Some(why) = &row.refused {
            zcnet_tools::outln!(
                "{:<9} {:<13} {:>7} refused: {}",
                row.path,
                name,
                row.size,
                why.render(&Cli)
            );
            continue;
        }
        if let Some(why) = &row.skipped {
            zcnet_tools::outln!(
                "{:<9} {:<13} {:>7} skipped: {}",
                row.path,
                name,
                row.size,
                why.render(&Cli)
            );
            continue;
        }
        if row.requests == 0 {
            match &row.error {
                Some(e) => zcnet_tools::outln!(
                    "{:<9} {:<13} {:>7} failed: {}",
                    row.path,
                    name,
                    row.size,
                    e.render(&Cli)
                ),
                None => zcnet_tools::outln!(
                    "{:<9} {:<13} {:>7} no round trip inside the {:.1} s window ({} after it): give it a longer --duration",
                    row.path,
                    name,
                    row.size,
                    row.seconds,
                    row.late
                ),
            }
            continue;
        }
        zcnet_tools::outln!(
            "{:<9} {:<13} {:>7} {:>9.0} {:>8.2} {:>12} {:>8} {:>8} {:>7}",
            row.path,
            name,
            row.size,
            row.qps,
            row.gbps,
            opt(row.server_cpu_us_per_req, 1),
            opt(row.p50_us, 0),
            opt(row.p99_us, 0),
            opt(r.ratio_to_copy(row), 2)
        );
        // Where copying is the question (zcrx, devmem): how the received bytes came in.
        let copies = matches!(row.chosen, Some("copy") | Some("uring"));
        if let (false, Some(pct)) = (copies, row.zero_copy_pct()) {
            zcnet_tools::outln!(
                "{:<9}   {} B received: {} B copied by the kernel, {} B zero-copy ({pct:.0} %), {} B unknown",
                "",
                row.rx_bytes,
                row.copied_bytes,
                row.zerocopy_bytes,
                row.unknown_copy_bytes
            );
        }
        for f in &row.fallbacks {
            zcnet_tools::outln!(
                "{:<9}   {} chose {}: {}",
                "",
                row.rx,
                row.chosen.unwrap_or("?"),
                f.render(&Cli)
            );
        }
        if let Some(e) = &row.error {
            zcnet_tools::outln!("{:<9}   warning: {}", "", e.render(&Cli));
        }
        if let Some(w) = zcnet_tools::cpu::busy_warning(row.other_cpu_seconds, row.seconds) {
            zcnet_tools::outln!("{:<9}   {w}", "");
        }
    }
    zcnet_tools::outln!("Gbit/s: request payload, one direction (the echo carries as much back); CPU µs/req: the pinned server thread's CPU time / round trips");
}
