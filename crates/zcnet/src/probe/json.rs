//! The probe report as the JSON document `zcnet probe --json` prints (schema in docs/cli.md);
//! the one builder the command and the C ABI (`zcnet_probe_json`) share. Reasons and remedies
//! are rendered in the caller's [`Words`] (the command's flags, or the library's names), and
//! each remedy's terms are listed beside it as objects (`"remedy_terms"`), so that a program
//! reads the call or setting a remedy names without parsing its words.

use super::gpu::{ExportTrial, GpuDriver, GpuFinding, GpuReport};
use super::{BindMode, IfaceReport, KernelReport, ProbeReport, QueueBind, QueueTrials};
use crate::text::{Call, Library, Term, Text, Words};
use serde_json::{json, Map, Value};

/// One term as a JSON object: `{"field": "RxConfig::queue"}`, `{"tx_mode": "uring-zc"}`,
/// `{"rx_mode": "zcrx"}`, `{"memory": "cuda"}`, `{"call": "nic_setup", "iface": "eth1",
/// "queue": 3}`.
pub fn term_json(t: &Term) -> Value {
    match t {
        Term::Field(f) => json!({"field": Library.term(t), "name": f.path().map(|p| p.1)}),
        Term::TxMode { name, .. } => json!({"tx_mode": name}),
        Term::RxMode { name, .. } => json!({"rx_mode": name}),
        Term::Memory(m) => json!({"memory": m.name()}),
        Term::Call(c) => match c {
            Call::NicSetup { iface, queue } => json!({"call": "nic_setup",
                "iface": iface.map(|i| i.to_string()), "queue": queue}),
            Call::NicSetupFlow => json!({"call": "nic_setup", "iface": null, "queue": null}),
            Call::NicRestore { iface } => {
                json!({"call": "nic_restore", "iface": iface.map(|i| i.to_string())})
            }
            Call::SetChannels { iface, change } => json!({"call": "set_channels",
                "iface": iface.map(|i| i.to_string()),
                "kind": change.map(|c| c.0), "count": change.map(|c| c.1)}),
            other => json!({"call": Library.term(&Term::Call(*other))}),
        },
        other => json!({"term": Library.term(other)}),
    }
}

/// A text's terms as [`term_json`] objects.
fn terms_json(t: Option<&Text>) -> Value {
    Value::Array(t.map_or_else(Vec::new, |t| t.terms().map(term_json).collect()))
}

fn on_off(v: &[(&str, bool)]) -> Value {
    Value::Object(v.iter().map(|(k, b)| (k.to_string(), json!(b))).collect())
}

fn kernel_json(k: &KernelReport, w: &dyn Words) -> Value {
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
        "zcrx_query": zcrx_query_json(&k.zcrx_query, w),
        "root": k.facts.net_admin,
        "af_xdp": k.facts.af_xdp,
    })
}

/// `{"queryable", "zcrx_answered", "how", "zcrx_features": [...], "ctrl_ops": [...],
/// "verdicts": {name: {"available", "what", "reason", "remedy"}}}`.
fn zcrx_query_json(q: &super::zcrx_query::ZcrxQuery, w: &dyn Words) -> Value {
    let verdicts: Map<String, Value> = q
        .verdicts
        .iter()
        .map(|v| {
            (
                v.name.to_string(),
                json!({"available": v.available, "what": v.what, "reason": v.reason.render(w),
                       "remedy": v.remedy}),
            )
        })
        .collect();
    json!({
        "queryable": q.queryable,
        "zcrx_answered": q.caps.zcrx.is_some(),
        "how": q.how,
        "zcrx_features": q.features,
        "ctrl_ops": q.caps.ctrl_op_names(),
        "verdicts": verdicts,
    })
}

/// One mode of one queue: `{"accepted", "errno", "meaning", "error"}` (the last three null when
/// accepted).
fn bind_json(b: &QueueBind, mode: BindMode) -> Value {
    match b.get(mode) {
        Ok(()) => json!({"accepted": true, "errno": null, "meaning": null, "error": null}),
        Err(r) => json!({
            "accepted": false,
            "errno": zcnet_core::probe::xsk::errno_name(r.errno),
            "meaning": b.meaning(mode),
            "error": r.message,
        }),
    }
}

fn xsk_bind_json(t: &QueueTrials) -> Value {
    json!({
        "queues_total": t.plan.total,
        "capped": t.plan.capped,
        "cap": super::MAX_BIND_QUEUES,
        "queues": t.binds.iter().map(|b| json!({
            "queue": b.queue,
            "copy": bind_json(b, BindMode::Copy),
            "zero-copy": bind_json(b, BindMode::ZeroCopy),
        })).collect::<Vec<_>>(),
        "summary": t.summary(),
    })
}

fn iface_json(i: &IfaceReport, w: &dyn Words) -> Value {
    let f = &i.facts;
    let mechanisms: Map<String, Value> = i
        .mechanisms
        .iter()
        .map(|(m, x)| {
            (
                m.name().to_string(),
                json!({"verdict": x.verdict.name(), "reason": x.reason.render(w),
                       "remedy": x.remedy.as_ref().map(|r| r.render(w)),
                       "remedy_terms": terms_json(x.remedy.as_ref()), "confirmed": x.confirmed}),
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
        "generic_zc_xmit": {
            "answer": i.generic_zc_xmit.answer.name(),
            "reason": i.generic_zc_xmit.reason,
            "inferred": i.generic_zc_xmit.inferred,
        },
        "xsk_bind": i.xsk_queues.as_ref().map(xsk_bind_json),
    })
}

/// The `--json` document, its reasons and remedies in `w`'s words.
pub fn to_json(r: &ProbeReport, w: &dyn Words) -> Value {
    json!({
        "kernel": kernel_json(&r.kernel, w),
        "active": r.active,
        "iface_trials": r.iface_trials,
        "notes": report_notes(r).iter().map(|n| n.render(w)).collect::<Vec<_>>(),
        "interfaces": r.interfaces.iter().map(|i| iface_json(i, w)).collect::<Vec<_>>(),
        "gpu": gpu_json(&r.gpu, w),
    })
}

/// What the whole report should say besides its findings: that `active` ran no trial on any
/// interface because none was named.
pub fn report_notes(r: &ProbeReport) -> Vec<Text> {
    let mut notes = Vec::new();
    if r.active && !r.iface_trials {
        notes.push(active_needs_iface());
    }
    notes
}

/// The note of an active probe that named no interface.
pub fn active_needs_iface() -> Text {
    use crate::text::Field;
    crate::text!(
        "active trials on interfaces (zcrx, AF_XDP, devmem bindings) need ",
        Field::ProbeIface,
        ", or ",
        Field::ProbeAllIfaces,
        " to run them on every interface (on a real NIC each briefly reconfigures a queue, the uplink's included): only the sends over TCP loopback (and the GPU checks) were tried",
    )
}

pub(crate) fn export_words(e: &ExportTrial) -> (&'static str, Option<&str>) {
    match e {
        ExportTrial::NotTried => ("not-tried", None),
        ExportTrial::Confirmed => ("confirmed", None),
        ExportTrial::Refused(m) => ("refused", Some(m)),
        ExportTrial::Inconclusive(m) => ("inconclusive", Some(m)),
    }
}

fn gpu_finding_json(f: &GpuFinding, w: &dyn Words) -> Value {
    json!({"verdict": f.verdict.name(), "reason": f.reason.render(w),
           "remedy": f.remedy.as_ref().map(|r| r.render(w)),
           "remedy_terms": terms_json(f.remedy.as_ref()),
           "warning": f.warning, "confirmed": f.confirmed})
}

/// Adds `"standin_note"` with the stand-in's label to `v` (an object) when there is one.
fn with_standin(mut v: Value, label: Option<&str>) -> Value {
    if let (Some(l), Some(o)) = (label, v.as_object_mut()) {
        o.insert("standin_note".into(), json!(l));
    }
    v
}

/// The `gpu` object of the `--json` document. The driver, device and path objects of zcnet's
/// CUDA driver stand-in carry `"standin_note": "(stand-in driver: not GPU figures)"` (and
/// devices `"standin": true`).
pub fn gpu_json(g: &GpuReport, w: &dyn Words) -> Value {
    let driver = match &g.driver {
        GpuDriver::Missing { .. } => Value::Null,
        GpuDriver::Present {
            version,
            open_modules,
        } => with_standin(
            json!({
                "cuda": version.map(|(a, b)| [a, b]),
                "module": g.module,
                "open_modules": open_modules,
            }),
            g.standin_label(),
        ),
    };
    let devices: Vec<Value> = g
        .devices
        .iter()
        .map(|d| {
            let (export, export_error) = export_words(&d.facts.export);
            let v = json!({
                "ordinal": d.info.ordinal, "name": d.info.name, "pci_bus_id": d.info.pci_bus_id,
                "pci_path": d.facts.pci_path, "total_mem": d.info.total_mem,
                "dma_buf": d.info.dma_buf, "gpudirect_rdma": d.info.gpudirect_rdma,
                "vmm": d.info.vmm, "gpudirect_rdma_vmm": d.info.gpudirect_rdma_vmm,
                "export": export, "export_error": export_error, "standin": d.info.standin,
            });
            with_standin(v, d.info.standin_label())
        })
        .collect();
    let interfaces: Vec<Value> = g
        .interfaces
        .iter()
        .map(|i| {
            let paths: Vec<Value> = i
                .paths
                .iter()
                .map(|p| {
                    let v = json!({
                        "gpu": p.gpu,
                        "pcie": p.relation.as_ref().map(|r| json!({
                            "relation": r.name(), "common": r.common(), "text": r.describe(),
                        })),
                        "gpu-rx": gpu_finding_json(&p.rx, w),
                        "gpu-tx": gpu_finding_json(&p.tx, w),
                    });
                    with_standin(v, g.device_label(p.gpu))
                })
                .collect();
            json!({"name": i.name, "pci_path": i.pci_path, "paths": paths})
        })
        .collect();
    json!({"driver": driver, "error": g.error.as_ref().map(|e| e.render(w)),
           "devices": devices, "interfaces": interfaces})
}
