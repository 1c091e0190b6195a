//! `zcnet probe`: the one-screen table and the JSON document (schema in docs/cli.md).

mod gpu;

use clap::Args;
use zcnet::probe::{self, Mechanism, ProbeOptions, ProbeReport};
use zcnet_cli::cli_text::Cli;

/// Options of `zcnet probe`.
#[derive(Args, Debug)]
pub struct ProbeArgs {
    /// One interface (default: all of this network namespace).
    #[arg(long)]
    pub iface: Option<String>,
    /// Confirm each verdict by trying the mechanism and undoing it: sends over TCP loopback,
    /// and on the interface named by --iface (or on every one with --all-ifaces) a zcrx queue
    /// registered and AF_XDP sockets bound, which on a real NIC briefly restarts its last RX
    /// queue. With --iface, also binds an AF_XDP socket to each RX queue (the first 16) in copy
    /// and in zero-copy mode and closes it at once, to report which mode each queue accepts; on
    /// a NIC with AF_XDP zero-copy each zero-copy bind briefly reconfigures that queue.
    #[arg(long)]
    pub active: bool,
    /// With --active and no --iface: run the interface trials on every interface, the uplink's
    /// NIC included (without it, --active alone tries only the sends over TCP loopback).
    #[arg(long, requires = "active", conflicts_with = "iface")]
    pub all_ifaces: bool,
    /// With --active --iface IF: bind-test only this RX queue (instead of the first 16).
    #[arg(long, requires_all = ["iface", "active"])]
    pub queue: Option<u32>,
    /// Print one JSON document.
    #[arg(long)]
    pub json: bool,
}

/// Runs `zcnet probe`.
pub fn run(a: &ProbeArgs) -> zcnet::Result<()> {
    let r = probe::probe_queue(
        &ProbeOptions {
            iface: a.iface.clone(),
            active: a.active,
            all_ifaces: a.all_ifaces,
        },
        a.queue,
    )?;
    if a.json {
        // Reasons and remedies in the command's words (flags and commands).
        let doc = probe::json::to_json(&r, &zcnet_cli::cli_text::Cli);
        let json = serde_json::to_string_pretty(&doc).unwrap_or_default();
        zcnet_tools::outln!("{json}");
    } else {
        zcnet_tools::out!("{}", table(&r));
    }
    Ok(())
}

fn mib(v: Option<u64>) -> String {
    match v {
        None => "unlimited".into(),
        Some(b) if b >= 1 << 20 => format!("{} MiB", b >> 20),
        Some(b) => format!("{} KiB", b >> 10),
    }
}

/// The AF_XDP lines: generic zero-copy xmit per interface (equal answers once, with the
/// interfaces they apply to, as the reasons are), then the per-queue bind modes where that
/// trial ran, or how to run it.
fn af_xdp(r: &ProbeReport) -> String {
    let mut out = String::from("AF_XDP:\n");
    let mut seen: Vec<(String, Vec<&str>)> = Vec::new();
    for i in &r.interfaces {
        let line = i.generic_zc_xmit.line();
        match seen.iter_mut().find(|(l, _)| *l == line) {
            Some(s) => s.1.push(&i.name),
            None => seen.push((line, vec![&i.name])),
        }
    }
    for (line, ifs) in seen {
        out.push_str(&format!("  [{}] {line}\n", ifs.join(",")));
    }
    let mut tried = false;
    for i in &r.interfaces {
        if let Some(t) = &i.xsk_queues {
            tried = true;
            for (n, l) in t.summary().iter().enumerate() {
                let indent = if n == 0 { "" } else { "  " };
                out.push_str(&format!("  [{}] {indent}{l}\n", i.name));
            }
        }
    }
    if !tried {
        out.push_str(
            "  per-queue bind modes: zcnet probe --active --iface IF (binds and closes an AF_XDP \
             socket on each RX queue, copy then zero-copy)\n",
        );
    }
    out
}

/// The zcrx features the kernel said it has and how that was learned, then one verdict line
/// per feature zcnet uses, with the fix under each "no".
fn zcrx_features(q: &probe::zcrx_query::ZcrxQuery) -> String {
    let names = if q.features.is_empty() {
        "none".to_string()
    } else {
        q.features.join(" ")
    };
    let mut out = format!("zcrx features: {names} \u{2014} {}\n", q.how);
    for v in &q.verdicts {
        let yes = if v.available { "yes" } else { "no" };
        out.push_str(&format!(
            "  {}: {yes} \u{2014} {}\n",
            v.what,
            v.reason.render(&Cli)
        ));
        if let Some(fix) = &v.remedy {
            out.push_str(&format!("    fix: {fix}\n"));
        }
    }
    out
}

fn short(v: probe::Verdict) -> &'static str {
    match v {
        probe::Verdict::ZeroCopy => "ZERO-COPY",
        probe::Verdict::Copies => "copies",
        probe::Verdict::Unsupported => "-",
    }
}

/// The human report: kernel lines, one row per interface, then the reasons, each said once.
pub fn table(r: &ProbeReport) -> String {
    let k = &r.kernel;
    let mut out = String::new();
    let names = |v: &[(&str, bool)]| -> String {
        let on: Vec<&str> = v.iter().filter(|(_, b)| *b).map(|(n, _)| *n).collect();
        if on.is_empty() {
            "none".into()
        } else {
            on.join(" ")
        }
    };
    out.push_str(&format!("kernel {}", k.release));
    match &k.facts.uring.unusable {
        Some(why) => out.push_str(&format!("   io_uring: unusable ({why})\n")),
        None => {
            let setup: Vec<&str> = k
                .setup_flags
                .iter()
                .filter(|(_, r)| r.is_ok())
                .map(|(n, _)| *n)
                .collect();
            out.push_str(&format!(
                "   io_uring ops: {}; features: {}; setup: {}\n",
                names(&k.uring_ops),
                names(&k.uring_features),
                setup.join(" ")
            ));
        }
    }
    out.push_str(&format!(
        "memlock {} (CAP_IPC_LOCK {})   hugepages {} free of {} ({} KiB)   optmem_max {}   netdev family: {}   ethtool netlink: {}\n",
        mib(k.memlock.0),
        if k.facts.ipc_lock { "yes" } else { "no" },
        k.hugepages.1,
        k.hugepages.0,
        k.hugepages.2,
        k.optmem_max.map_or("?".into(), |v| v.to_string()),
        match &k.netdev_family {
            Ok(ops) if ops.iter().any(|o| o == "bind-tx") => "yes (bind-rx, bind-tx)".to_string(),
            Ok(_) => "yes".to_string(),
            Err(e) => format!("no ({e})"),
        },
        if k.ethtool_family.is_ok() { "yes" } else { "no" },
    ));
    out.push_str(&zcrx_features(&k.zcrx_query));
    out.push('\n');
    let rows: Vec<Vec<String>> = r
        .interfaces
        .iter()
        .map(|i| {
            let f = &i.facts;
            let rxq = i.queues.iter().filter(|q| q.0 == "rx").count();
            let txq = i.queues.iter().filter(|q| q.0 == "tx").count();
            let mut row = vec![
                i.name.clone(),
                f.driver.clone().unwrap_or_else(|| "-".into()),
                format!("{rxq}/{txq}"),
                f.header_split.name().replace("not-reported", "n/a"),
                match f.ntuple {
                    None => "n/a",
                    Some(true) => "on",
                    Some(false) => "off",
                }
                .to_string(),
            ];
            for (_, x) in &i.mechanisms {
                let mark = if x.confirmed { "*" } else { "" };
                row.push(format!("{}{mark}", short(x.verdict)));
            }
            row
        })
        .collect();
    let mut header: Vec<String> = ["IFACE", "DRIVER", "QUEUES", "HDS", "NTUPLE"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    header.extend(Mechanism::ALL.iter().map(|m| m.name().to_string()));
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            rows.iter()
                .map(|r| r[c].len())
                .chain([header[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in std::iter::once(&header).chain(rows.iter()) {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(cells.join(" ").trim_end());
        out.push('\n');
    }
    if r.active {
        out.push_str("(* confirmed by trying it)\n");
    }
    for n in probe::json::report_notes(r) {
        out.push_str(&format!("note: {}\n", n.render(&Cli)));
    }
    out.push_str("\nwhy:\n");
    // Each distinct (mechanism, reason, remedy) once, with the interfaces it applies to.
    for m in Mechanism::ALL {
        let mut seen: Vec<(String, Option<String>, Vec<&str>)> = Vec::new();
        for i in &r.interfaces {
            let Some((_, x)) = i.mechanisms.iter().find(|(mm, _)| *mm == m) else {
                continue;
            };
            match seen.iter_mut().find(|(r, f, _)| {
                *r == x.reason.render(&Cli) && *f == x.remedy.as_ref().map(|r| r.render(&Cli))
            }) {
                Some(s) => s.2.push(&i.name),
                None => seen.push((
                    x.reason.render(&Cli),
                    x.remedy.as_ref().map(|r| r.render(&Cli)),
                    vec![&i.name],
                )),
            }
        }
        for (reason, remedy, ifs) in seen {
            out.push_str(&format!(
                "  {:<15} [{}] {reason}\n",
                m.name(),
                ifs.join(",")
            ));
            if let Some(fix) = remedy {
                out.push_str(&format!("  {:<15}   fix: {fix}\n", ""));
            }
        }
    }
    out.push_str(&af_xdp(r));
    for i in r.interfaces.iter().filter(|i| !i.notes.is_empty()) {
        out.push_str(&format!("note {}: {}\n", i.name, i.notes.join("; ")));
    }
    out.push('\n');
    out.push_str(&gpu::gpu_table(&r.gpu));
    out
}
