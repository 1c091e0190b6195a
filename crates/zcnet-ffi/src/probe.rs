//! `zcnet_probe_json`: what this machine and its NICs can do for zero copy, as the JSON
//! document `zcnet probe --json` prints (schema in docs/cli.md).
//!
//! The document is built here from the library's [`zcnet::probe::ProbeReport`] the same way
//! `zcnet-cli` builds it (the library has no serde): keep the two in step.

use crate::error::{call, need, need_str, zcnet_status, Result};
use serde_json::{json, Map, Value};
use std::ffi::{c_char, c_int, CStr, CString};
use std::mem::MaybeUninit;
use zcnet::probe::gpu::{ExportTrial, GpuDriver, GpuFinding, GpuReport};
use zcnet::probe::{IfaceReport, KernelReport, ProbeOptions, ProbeReport};

/// Probes the kernel and the interfaces of the calling thread's network namespace (only
/// `iface` when it is not NULL) and writes the report as a JSON document, the one
/// `zcnet probe --json` prints, to `*json`; free it with `zcnet_string_free`. With `active`
/// non-zero each mechanism is also tried and undone (this registers a zcrx queue, binds AF_XDP
/// sockets and sends over TCP loopback; on a real NIC it briefly restarts the last RX queue).
/// A fact that cannot be read is a note in the report, not a failure.
///
/// # Safety
/// `iface` is NULL or a NUL-terminated string; `json` is NULL or points to writable memory
/// for one pointer.
#[no_mangle]
pub unsafe extern "C" fn zcnet_probe_json(
    iface: *const c_char,
    active: c_int,
    json: *mut *mut c_char,
) -> zcnet_status {
    call("zcnet_probe_json", || {
        // SAFETY: by the contract, non-NULL `iface` is a NUL-terminated string that outlives
        // the call.
        let iface = (!iface.is_null()).then(|| unsafe { CStr::from_ptr(iface) });
        // SAFETY: by the contract, non-NULL `json` is aligned and writable.
        let json = unsafe { json.cast::<MaybeUninit<*mut c_char>>().as_mut() };
        let json = need(json, "json")?;
        json.write(std::ptr::null_mut());
        let iface = iface.map(|s| need_str(Some(s), "iface")).transpose()?;
        json.write(probe_json(iface, active != 0)?.into_raw());
        Ok(())
    })
}

/// Runs the probe and returns its JSON document.
pub fn probe_json(iface: Option<&str>, active: bool) -> Result<CString> {
    let r = zcnet::probe::probe(&ProbeOptions {
        iface: iface.map(str::to_string),
        active,
    })?;
    let text = serde_json::to_string_pretty(&to_json(&r)).unwrap_or_default();
    // JSON escapes control characters, so the text has no NUL.
    Ok(CString::new(text).unwrap_or_default())
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

/// The document `zcnet probe --json` prints.
pub fn to_json(r: &ProbeReport) -> Value {
    json!({
        "kernel": kernel_json(&r.kernel),
        "active": r.active,
        "interfaces": r.interfaces.iter().map(iface_json).collect::<Vec<_>>(),
        "gpu": gpu_json(&r.gpu),
    })
}

fn export_words(e: &ExportTrial) -> (&'static str, Option<&str>) {
    match e {
        ExportTrial::NotTried => ("not-tried", None),
        ExportTrial::Confirmed => ("confirmed", None),
        ExportTrial::Refused(m) => ("refused", Some(m)),
        ExportTrial::Inconclusive(m) => ("inconclusive", Some(m)),
    }
}

fn gpu_finding_json(f: &GpuFinding) -> Value {
    json!({"verdict": f.verdict.name(), "reason": f.reason, "remedy": f.remedy,
           "warning": f.warning, "confirmed": f.confirmed})
}

/// The `gpu` object of the document.
fn gpu_json(g: &GpuReport) -> Value {
    let driver = match &g.driver {
        GpuDriver::Missing { .. } => Value::Null,
        GpuDriver::Present {
            version,
            open_modules,
        } => json!({
            "cuda": version.map(|(a, b)| [a, b]),
            "module": g.module,
            "open_modules": open_modules,
        }),
    };
    let devices: Vec<Value> = g
        .devices
        .iter()
        .map(|d| {
            let (export, export_error) = export_words(&d.facts.export);
            json!({
                "ordinal": d.info.ordinal, "name": d.info.name, "pci_bus_id": d.info.pci_bus_id,
                "pci_path": d.facts.pci_path, "total_mem": d.info.total_mem,
                "dma_buf": d.info.dma_buf, "gpudirect_rdma": d.info.gpudirect_rdma,
                "vmm": d.info.vmm, "gpudirect_rdma_vmm": d.info.gpudirect_rdma_vmm,
                "export": export, "export_error": export_error,
            })
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
                    json!({
                        "gpu": p.gpu,
                        "pcie": p.relation.as_ref().map(|r| json!({
                            "relation": r.name(), "common": r.common(), "text": r.describe(),
                        })),
                        "gpu-rx": gpu_finding_json(&p.rx),
                        "gpu-tx": gpu_finding_json(&p.tx),
                    })
                })
                .collect();
            json!({"name": i.name, "pci_path": i.pci_path, "paths": paths})
        })
        .collect();
    json!({"driver": driver, "error": g.error, "devices": devices, "interfaces": interfaces})
}
