//! `zcnet probe`: the one-screen table and the JSON document (schema in docs/cli.md).

mod gpu;

use clap::Args;
use serde_json::{json, Map, Value};
use zcnet::probe::{self, IfaceReport, KernelReport, Mechanism, ProbeOptions, ProbeReport};

/// Options of `zcnet probe`.
#[derive(Args, Debug)]
pub struct ProbeArgs {
    /// One interface (default: all of this network namespace).
    #[arg(long)]
    pub iface: Option<String>,
    /// Confirm each verdict by trying the mechanism and undoing it (registers a zcrx queue,
    /// binds AF_XDP sockets, sends over TCP loopback). On a real NIC this briefly restarts the
    /// last RX queue.
    #[arg(long)]
    pub active: bool,
    /// Print one JSON document.
    #[arg(long)]
    pub json: bool,
}

/// Runs `zcnet probe`.
pub fn run(a: &ProbeArgs) -> zcnet::Result<()> {
    let r = probe::probe(&ProbeOptions {
        iface: a.iface.clone(),
        active: a.active,
    })?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&to_json(&r)).unwrap_or_default()
        );
    } else {
        print!("{}", table(&r));
    }
    Ok(())
}

fn on_off(v: &[(&str, bool)]) -> Value {
    Value::Object(v.iter().map(|(k, b)| (k.to_string(), json!(b))).collect())
}

fn kernel_json(k: &KernelReport) -> Value {
    let setup: Map<String, Value> = k
        .setup_flags
        .iter()
        .map(|(n, r)| {
            let v = match r {
                Ok(()) => json!(true),
                Err(e) => json!(e),
            };
            (n.to_string(), v)
        })
        .collect();
    json!({
        "release": k.release,
        "version": [k.facts.version.0, k.facts.version.1],
        "io_uring": {
            "disabled": k.io_uring_disabled,
            "usable": k.facts.uring.unusable.is_none(),
            "unusable_reason": k.facts.uring.unusable,
            "ops": on_off(&k.uring_ops),
            "features": on_off(&k.uring_features),
            "setup_flags": setup,
        },
        "memlock": {"soft": k.memlock.0, "hard": k.memlock.1, "cap_ipc_lock": k.facts.ipc_lock},
        "hugepages": {"total": k.hugepages.0, "free": k.hugepages.1, "size_kib": k.hugepages.2},
        "optmem_max": k.optmem_max,
        "netdev_family": match &k.netdev_family {
            Ok(ops) => json!({"present": true, "ops": ops}),
            Err(e) => json!({"present": false, "error": e}),
        },
        "ethtool_netlink": match &k.ethtool_family {
            Ok(v) => json!({"present": true, "version": v}),
            Err(e) => json!({"present": false, "error": e}),
        },
        "root": k.facts.net_admin,
        "af_xdp": k.facts.af_xdp,
    })
}

fn iface_json(i: &IfaceReport) -> Value {
    let f = &i.facts;
    let mechanisms: Map<String, Value> = i
        .mechanisms
        .iter()
        .map(|(m, x)| {
            (
                m.name().to_string(),
                json!({"verdict": x.verdict.name(), "reason": x.reason, "remedy": x.remedy, "confirmed": x.confirmed}),
            )
        })
        .collect();
    json!({
        "name": i.name,
        "ifindex": i.ifindex,
        "driver": f.driver,
        "kind": f.kind.name(),
        "up": i.up,
        "queues": i.queues.iter().map(|(t, id, napi)| json!({"type": t, "id": id, "napi_id": napi})).collect::<Vec<_>>(),
        "napi_ids": i.napi_ids,
        "xdp_features": i.xdp_features,
        "xsk_features": i.xsk_features,
        "header_split": f.header_split.name(),
        "hds_thresh": f.hds_thresh,
        "hds_thresh_max": i.hds_thresh_max,
        "channels": i.channels.iter().map(|(k, c, m)| (k.to_string(), json!({"current": c, "max": m}))).collect::<Map<_, _>>(),
        "ntuple": f.ntuple,
        "rss_contexts": i.rss_contexts,
        "bindings": i.bindings,
        "notes": i.notes,
        "mechanisms": mechanisms,
    })
}

/// The `--json` document.
pub fn to_json(r: &ProbeReport) -> Value {
    json!({
        "kernel": kernel_json(&r.kernel),
        "active": r.active,
        "interfaces": r.interfaces.iter().map(iface_json).collect::<Vec<_>>(),
        "gpu": gpu::gpu_json(&r.gpu),
    })
}

fn mib(v: Option<u64>) -> String {
    match v {
        None => "unlimited".into(),
        Some(b) if b >= 1 << 20 => format!("{} MiB", b >> 20),
        Some(b) => format!("{} KiB", b >> 10),
    }
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
        "memlock {} (CAP_IPC_LOCK {})   hugepages {} free of {} ({} KiB)   optmem_max {}   netdev family: {}   ethtool netlink: {}\n\n",
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
    out.push_str("\nwhy:\n");
    // Each distinct (mechanism, reason, remedy) once, with the interfaces it applies to.
    for m in Mechanism::ALL {
        let mut seen: Vec<(String, Option<String>, Vec<&str>)> = Vec::new();
        for i in &r.interfaces {
            let Some((_, x)) = i.mechanisms.iter().find(|(mm, _)| *mm == m) else {
                continue;
            };
            match seen
                .iter_mut()
                .find(|(r, f, _)| *r == x.reason && *f == x.remedy)
            {
                Some(s) => s.2.push(&i.name),
                None => seen.push((x.reason.clone(), x.remedy.clone(), vec![&i.name])),
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
    for i in r.interfaces.iter().filter(|i| !i.notes.is_empty()) {
        out.push_str(&format!("note {}: {}\n", i.name, i.notes.join("; ")));
    }
    out.push('\n');
    out.push_str(&gpu::gpu_table(&r.gpu));
    out
}
