//! `zcnet perf` against iperf3, measured in one run (the figures in docs/perf.md): over
//! loopback and over the lab's veth pair, TCP with -l 128K at -P 1 and -P 4, four pairs each:
//! iperf3↔iperf3 (the baseline), zcnet↔zcnet, zcnet client → iperf3 server and iperf3 client →
//! zcnet server; then UDP to a sink (the veth pair with a tc filter that drops the client's
//! data datagrams on egress, so nothing copies them on receipt, as the lab's ifb sink does for
//! `bench tx`): iperf3 -u against zcnet -u with GSO, copy and zero-copy, at the same -l and -b 0.
//!
//! Rounds are interleaved (every case once, then again) and the table shows the median of each
//! case, its ratio to the baseline of the same network and -P, and the CPU seconds per GB of each
//! side (iperf3's own cpu_utilization_percent, as both programs report it in -J: the process's
//! user + system time over the test's wall time), and for a zcnet client the share of its bytes
//! the kernel reported as sent without a copy (its -J `zerocopy` section). Compare rows of one run on an otherwise idle
//! machine.
//!
//! Not part of the default test run (it measures, it asserts nothing about speed); run
//! `cargo test --release -p zcnet-cli --test vs_iperf3` (docs/perf.md). Root (for the lab)
//! and iperf3 are needed; the veth and UDP cases are left out, saying so, without root.
//! Environment: `ZCNET_VS_SECS` (default 3) per case, `ZCNET_VS_ROUNDS` (default 3),
//! `ZCNET_VS_TX`/`ZCNET_VS_RX` (zcnet's modes, default msg-zerocopy and uring), `ZCNET_VS_ONLY`
//! (`tcp` or `udp`).

mod perf_common;

use std::process::Command;
use std::time::Duration;

use perf_common::{json, Net};
use serde_json::Value;

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Who runs each end.
#[derive(Clone, Copy, PartialEq)]
enum Who {
    Iperf3,
    Zcnet,
}

/// One measured run: receiver throughput (TCP) or sender throughput (UDP), and CPU seconds per
/// GB of the client and the server.
#[derive(Clone, Copy, Default)]
struct Sample {
    gbit: f64,
    client_cpu: f64,
    server_cpu: f64,
    /// The fraction of a zcnet client's sent bytes that the kernel reported as zero-copied.
    client_zc: Option<f64>,
}

struct Case {
    net: &'static str,
    label: String,
    parallel: u32,
    udp: bool,
    baseline: bool,
    client: Who,
    server: Who,
    /// Extra flags for a zcnet client (its data path).
    zcnet_client: Vec<String>,
    samples: Vec<Sample>,
    error: Option<String>,
}

fn program(who: Who, iperf3: &std::path::Path) -> std::path::PathBuf {
    match who {
        Who::Iperf3 => iperf3.to_path_buf(),
        Who::Zcnet => perf_common::zcnet_perf(),
    }
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

fn run_case(
    case: &Case,
    net: Net<'_>,
    iperf3: &std::path::Path,
    secs: u32,
) -> Result<Sample, String> {
    let tx = std::env::var("ZCNET_VS_TX").unwrap_or_else(|_| "msg-zerocopy".into());
    let rx = std::env::var("ZCNET_VS_RX").unwrap_or_else(|_| "uring".into());
    let mut sargs = vec!["-1", "-J"];
    if case.server == Who::Zcnet {
        sargs.extend(["--rx", &rx]);
    }
    let (mut server, port) = match case.server {
        Who::Zcnet => perf_common::zcnet_server_in(net.server_ns(), &sargs),
        Who::Iperf3 => perf_common::iperf3_server_in(net.server_ns(), iperf3, &sargs),
    };
    let (port, addr, t, p) = (
        port.to_string(),
        net.server_addr(),
        secs.to_string(),
        case.parallel.to_string(),
    );
    let mut args: Vec<&str> = vec!["-c", &addr, "-p", &port, "-J", "-t", &t, "-P", &p];
    if case.udp {
        args.extend(["-u", "-b", "0", "-l", "1460"]);
    } else {
        args.extend(["-l", "128K"]);
    }
    if case.client == Who::Zcnet {
        if case.zcnet_client.is_empty() {
            args.extend(["--tx", &tx]);
        }
        args.extend(case.zcnet_client.iter().map(String::as_str));
    }
    let limit = Duration::from_secs(u64::from(secs) + 30);
    let (client, st) =
        perf_common::run_in(net.client_ns(), &program(case.client, iperf3), &args, limit);
    let _ = server.wait(limit);
    if !st.success() {
        let why = format!("{}{}", client.stderr(), client.stdout());
        return Err(why.lines().last().unwrap_or("client failed").to_string());
    }
    let doc = json(&client.stdout());
    if let Some(e) = doc.get("error") {
        return Err(e.to_string());
    }
    let end = &doc["end"];
    // TCP: what the receiver got; UDP: what the client handed to the kernel (the sink drops it).
    let sum = if case.udp {
        if end.get("sum_sent").is_some() {
            &end["sum_sent"]
        } else {
            &end["sum"]
        }
    } else {
        &end["sum_received"]
    };
    let (bytes, seconds) = (num(&sum["bytes"]), num(&sum["seconds"]));
    let gb = bytes / 1e9;
    let cpu = &end["cpu_utilization_percent"];
    let per_gb = |pct: f64| {
        if gb > 0.0 {
            pct / 100.0 * seconds / gb
        } else {
            0.0
        }
    };
    let ztx = &end["zerocopy"]["tx"];
    let client_zc = ztx["bytes"]
        .as_f64()
        .filter(|b| *b > 0.0)
        .map(|b| num(&ztx["zerocopy_bytes"]) / b);
    Ok(Sample {
        gbit: num(&sum["bits_per_second"]) / 1e9,
        client_cpu: per_gb(num(&cpu["host_total"])),
        server_cpu: per_gb(num(&cpu["remote_total"])),
        client_zc,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn tcp_cases(net: &'static str, out: &mut Vec<Case>) {
    for parallel in [1, 4] {
        for (client, server) in [
            (Who::Iperf3, Who::Iperf3),
            (Who::Zcnet, Who::Zcnet),
            (Who::Zcnet, Who::Iperf3),
            (Who::Iperf3, Who::Zcnet),
        ] {
            let name = |w| if w == Who::Zcnet { "zcnet" } else { "iperf3" };
            out.push(Case {
                net,
                label: format!("{} -> {}", name(client), name(server)),
                parallel,
                udp: false,
                baseline: client == Who::Iperf3 && server == Who::Iperf3,
                client,
                server,
                zcnet_client: Vec::new(),
                samples: Vec::new(),
                error: None,
            });
        }
    }
}

fn udp_cases(out: &mut Vec<Case>) {
    let zc = |label: &str, flags: &[&str]| Case {
        net: "veth-sink",
        label: label.into(),
        parallel: 1,
        udp: true,
        baseline: false,
        client: Who::Zcnet,
        server: Who::Iperf3,
        zcnet_client: flags.iter().map(|s| s.to_string()).collect(),
        samples: Vec::new(),
        error: None,
    };
    out.push(Case {
        baseline: true,
        client: Who::Iperf3,
        ..zc("iperf3 -u", &[])
    });
    out.push(zc("zcnet -u --tx copy", &["--tx", "copy"]));
    out.push(zc("zcnet -u --gso --tx copy", &["--gso", "--tx", "copy"]));
    out.push(zc(
        "zcnet -u --gso --tx msg-zerocopy",
        &["--gso", "--tx", "msg-zerocopy"],
    ));
    out.push(zc(
        "zcnet -u --gso --tx uring-zc",
        &["--gso", "--tx", "uring-zc"],
    ));
}

/// Sends the client's UDP datagrams of 256 B or more (the data; iperf3's 4-byte UDP connect
/// handshake and the TCP control connection pass) to a sink on the veth's egress, so UDP senders
/// run against a receiver that never copies their payload. This kernel has only the u32
/// classifier and the mirred action (no gact drop, no flower or basic), so: eight u32 filters,
/// one per bit of the IP total length's high byte, redirect a match to `vS`, a veth whose peer
/// is down, where it is freed without being read.
fn add_udp_sink(ns: &str) -> Result<(), String> {
    let run = |prog: &str, args: &[&str]| -> Result<(), String> {
        let out = Command::new("ip")
            .args(["netns", "exec", ns, prog])
            .args(args)
            .output()
            .map_err(|e| format!("{prog}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            let err = String::from_utf8_lossy(&out.stderr);
            Err(format!("{prog} {}: {}", args.join(" "), err.trim()))
        }
    };
    run(
        "ip",
        &["link", "add", "vS", "type", "veth", "peer", "name", "vS2"],
    )?;
    run("ip", &["link", "set", "vS", "up"])?;
    run("tc", &["qdisc", "add", "dev", "vA", "clsact"])?;
    for bit in 8..16 {
        let (m, prio) = (format!("{:#06x}", 1u32 << bit), (bit - 7).to_string());
        run(
            "tc",
            &[
                "filter", "add", "dev", "vA", "egress", "prio", &prio, "protocol", "ip", "u32",
                "match", "ip", "protocol", "17", "0xff", "match", "u16", &m, &m, "at", "2",
                "action", "mirred", "egress", "redirect", "dev", "vS",
            ],
        )?;
    }
    Ok(())
}

fn main() {
    let Some(iperf3) = perf_common::iperf3() else {
        eprintln!("SKIP: iperf3 is not installed (apt-get install iperf3)");
        return;
    };
    let secs: u32 = env_or("ZCNET_VS_SECS", 3);
    let rounds: usize = env_or("ZCNET_VS_ROUNDS", 3);
    let only = std::env::var("ZCNET_VS_ONLY").unwrap_or_default();
    let (tcp, udp) = (only != "udp", only != "tcp");
    let mut cases = Vec::new();
    if tcp {
        tcp_cases("loopback", &mut cases);
    }
    let lab = perf_common::try_veth_lab();
    if lab.is_some() {
        if tcp {
            tcp_cases("veth", &mut cases);
        }
        if udp {
            udp_cases(&mut cases);
        }
    }
    let mut sink_ready: Option<Result<(), String>> = None;
    for round in 0..rounds {
        for case in cases.iter_mut() {
            let net = match (case.net, &lab) {
                ("loopback", _) => Net::Loopback,
                (_, Some((_, veth))) => Net::Veth(veth),
                _ => continue,
            };
            if case.udp {
                let ready = sink_ready.get_or_insert_with(|| match &lab {
                    Some((_, veth)) => add_udp_sink(&veth.a),
                    None => Err("no lab".into()),
                });
                if let Err(e) = ready {
                    case.error = Some(e.clone());
                    continue;
                }
            }
            eprint!(
                "\rround {}/{rounds}: {} -P {} {}                    ",
                round + 1,
                case.net,
                case.parallel,
                case.label
            );
            match run_case(case, net, &iperf3, secs) {
                Ok(s) => case.samples.push(s),
                Err(e) => case.error = Some(e),
            }
        }
    }
    eprintln!();
    print_table(&cases, secs, rounds);
}

fn print_table(cases: &[Case], secs: u32, rounds: usize) {
    let tx = std::env::var("ZCNET_VS_TX").unwrap_or_else(|_| "msg-zerocopy".into());
    let rx = std::env::var("ZCNET_VS_RX").unwrap_or_else(|_| "uring".into());
    println!(
        "zcnet perf vs iperf3: -t {secs}, median of {rounds} interleaved rounds; zcnet --tx {tx} --rx {rx} unless named"
    );
    println!(
        "{:<10} {:>3} {:<34} {:>9} {:>7} {:>12} {:>12} {:>10}",
        "net",
        "-P",
        "client -> server",
        "Gbit/s",
        "ratio",
        "client s/GB",
        "server s/GB",
        "client zc"
    );
    let mut base = 0.0;
    for c in cases {
        let med = |f: fn(&Sample) -> f64| median(c.samples.iter().map(f).collect());
        let gbit = med(|s| s.gbit);
        if c.baseline {
            base = gbit;
        }
        let ratio = if base > 0.0 && !c.samples.is_empty() {
            format!("{:.2}x", gbit / base)
        } else {
            "-".into()
        };
        let p = if c.udp {
            "1".to_string()
        } else {
            c.parallel.to_string()
        };
        if c.samples.is_empty() {
            let e = c.error.as_deref().unwrap_or("not run");
            println!("{:<10} {:>3} {:<34} error: {e}", c.net, p, c.label);
            continue;
        }
        let zc = match c
            .samples
            .iter()
            .filter_map(|s| s.client_zc)
            .collect::<Vec<_>>()
        {
            v if v.is_empty() => "-".to_string(),
            v => format!("{:.0}%", median(v) * 100.0),
        };
        println!(
            "{:<10} {:>3} {:<34} {:>9.2} {:>7} {:>12.3} {:>12.3} {:>10}",
            c.net,
            p,
            c.label,
            gbit,
            ratio,
            med(|s| s.client_cpu),
            med(|s| s.server_cpu),
            zc
        );
        if let Some(e) = &c.error {
            println!("{:<10} {:>3} {:<34} (one round failed: {e})", "", "", "");
        }
    }
}
