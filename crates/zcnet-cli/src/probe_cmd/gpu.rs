//! The GPU section of `zcnet probe`: the table's lines and the `gpu` object of `--json`.

use zcnet::probe::gpu::{ExportTrial, GpuDriver, GpuFinding, GpuReport};
use zcnet_cli::cli_text::Cli;

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// The GPU section: one line without a usable GPU; else the driver, a line per device, the
/// PCIe relation of each NIC with a PCI device, and the gpu-rx / gpu-tx verdicts, each
/// distinct one said once with the interfaces it applies to.
pub(super) fn gpu_table(g: &GpuReport) -> String {
    if let Some((cause, fix)) = g.none_usable() {
        return format!(
            "GPU: none usable \u{2014} {}; {}\n",
            cause.render(&Cli),
            fix.render(&Cli)
        );
    }
    let mut out = String::new();
    // zcnet's CUDA driver stand-in: every line about it says so.
    let label = |l: Option<&str>| l.map_or(String::new(), |l| format!("  {l}"));
    if let GpuDriver::Present {
        version,
        open_modules,
    } = &g.driver
    {
        out.push_str(&format!(
            "GPU driver: CUDA {}, NVIDIA kernel module {}{}{}\n",
            version.map_or("?".into(), |(a, b)| format!("{a}.{b}")),
            g.module.as_deref().unwrap_or("?"),
            match open_modules {
                Some(true) => " (open)",
                Some(false) => " (proprietary)",
                None => "",
            },
            label(g.standin_label()),
        ));
    }
    for d in &g.devices {
        let (i, f) = (&d.info, &d.facts);
        let export = match &f.export {
            ExportTrial::NotTried => String::new(),
            ExportTrial::Confirmed => ", export confirmed".into(),
            ExportTrial::Refused(m) => format!(", export refused: {m}"),
            ExportTrial::Inconclusive(m) => format!(", export not tried: {m}"),
        };
        out.push_str(&format!(
            "GPU cuda:{} {}  pci {}  {} GiB  dma-buf {}{export}  GPUDirect RDMA {}  VMM {} (RDMA with VMM {}){}\n",
            i.ordinal,
            i.name,
            i.pci_bus_id,
            i.total_mem >> 30,
            yes_no(i.dma_buf),
            yes_no(i.gpudirect_rdma),
            yes_no(i.vmm),
            yes_no(i.gpudirect_rdma_vmm),
            label(i.standin_label()),
        ));
    }
    for i in &g.interfaces {
        for p in &i.paths {
            if let (Some(n), Some(rel), Some(_)) = (p.gpu, &p.relation, &i.pci_path) {
                out.push_str(&format!(
                    "  pcie   {} / cuda:{n}: {}{}\n",
                    i.name,
                    rel.describe(),
                    label(g.device_label(Some(n))),
                ));
            }
        }
    }
    for dir in ["gpu-rx", "gpu-tx"] {
        // (gpu, finding, interfaces), each distinct finding once.
        let mut seen: Vec<(Option<u32>, &GpuFinding, Vec<&str>)> = Vec::new();
        for i in &g.interfaces {
            for p in &i.paths {
                let f = if dir == "gpu-rx" { &p.rx } else { &p.tx };
                match seen.iter_mut().find(|s| s.0 == p.gpu && s.1 == f) {
                    Some(s) => s.2.push(&i.name),
                    None => seen.push((p.gpu, f, vec![&i.name])),
                }
            }
        }
        for (gpu, f, ifs) in seen {
            let to = gpu.map_or(String::new(), |n| format!(" cuda:{n}"));
            let mark = if f.confirmed { "*" } else { "" };
            out.push_str(&format!(
                "  {dir} [{}]{to}: {}{mark} \u{2014} {}{}\n",
                ifs.join(","),
                f.verdict.name(),
                f.reason.render(&Cli),
                label(g.device_label(gpu)),
            ));
            if let Some(fix) = &f.remedy {
                out.push_str(&format!("         fix: {}\n", fix.render(&Cli)));
            }
            if let Some(w) = &f.warning {
                out.push_str(&format!("         warning: {w}\n"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};
    use zcnet::gpu::DeviceInfo;
    use zcnet::probe::gpu::{GpuDevice, GpuFacts, GpuPaths, GpuVerdict, IfaceGpu, PciRelation};
    use zcnet::probe::json::gpu_json;

    fn finding(verdict: GpuVerdict, reason: &str) -> GpuFinding {
        GpuFinding {
            verdict,
            reason: reason.to_string().into(),
            remedy: None,
            warning: None,
            confirmed: false,
        }
    }

    /// An H100 with an mlx5 under its switch and two software devices.
    fn machine() -> GpuReport {
        let staging = |dir| GpuPaths {
            gpu: Some(0),
            relation: Some(PciRelation::NoPciDevice("veth has no PCI device".into())),
            rx: finding(GpuVerdict::Staging, dir),
            tx: finding(
                GpuVerdict::Staging,
                "devmem: veth does not support netmem TX",
            ),
        };
        let mut rx = finding(
            GpuVerdict::Devmem,
            "devmem TCP: eth1 writes payloads straight into a dma-buf of GPU 0's memory",
        );
        rx.remedy = Some("ethtool -K eth1 ntuple on".into());
        rx.confirmed = true;
        let mut tx = finding(
            GpuVerdict::Devmem,
            "devmem TCP: eth1 sends payloads straight from a dma-buf of GPU 0's memory",
        );
        tx.warning = Some("GPU 0 reports no GPUDirect RDMA support".into());
        GpuReport {
            driver: GpuDriver::Present {
                version: Some((12, 8)),
                open_modules: Some(true),
            },
            module: Some("570.86.15".into()),
            error: None,
            devices: vec![GpuDevice {
                info: DeviceInfo {
                    ordinal: 0,
                    name: "NVIDIA H100 80GB HBM3".into(),
                    pci_bus_id: "0000:1b:00.0".into(),
                    total_mem: 80 << 30,
                    dma_buf: true,
                    gpudirect_rdma: true,
                    vmm: true,
                    gpudirect_rdma_vmm: false,
                    standin: false,
                },
                facts: GpuFacts {
                    ordinal: 0,
                    name: "NVIDIA H100 80GB HBM3".into(),
                    pci_bus_id: "0000:1b:00.0".into(),
                    dma_buf: true,
                    gpudirect_rdma: true,
                    export: ExportTrial::Confirmed,
                    pci_path: Some("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:1b:00.0".into()),
                },
            }],
            interfaces: vec![
                IfaceGpu {
                    name: "eth1".into(),
                    pci_path: Some("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:1c:00.0".into()),
                    paths: vec![GpuPaths {
                        gpu: Some(0),
                        relation: Some(PciRelation::SameSwitch {
                            bridge: "0000:01:00.0".into(),
                        }),
                        rx,
                        tx,
                    }],
                },
                IfaceGpu {
                    name: "lo".into(),
                    pci_path: None,
                    paths: vec![staging("devmem, zcrx-dmabuf: veth has no queue-management ops")],
                },
                IfaceGpu {
                    name: "vA".into(),
                    pci_path: None,
                    paths: vec![staging("devmem, zcrx-dmabuf: veth has no queue-management ops")],
                },
            ],
        }
    }

    #[test]
    fn gpu_section_lists_devices_topology_and_each_verdict_once() {
        let out = gpu_table(&machine());
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0],
            "GPU driver: CUDA 12.8, NVIDIA kernel module 570.86.15 (open)"
        );
        assert_eq!(
            lines[1],
            "GPU cuda:0 NVIDIA H100 80GB HBM3  pci 0000:1b:00.0  80 GiB  dma-buf yes, export confirmed  GPUDirect RDMA yes  VMM yes (RDMA with VMM no)"
        );
        assert_eq!(
            lines[2],
            "  pcie   eth1 / cuda:0: same PCIe switch (below 0000:01:00.0)"
        );
        assert!(
            lines[3]
                .starts_with("  gpu-rx [eth1] cuda:0: devmem* \u{2014} devmem TCP: eth1 writes"),
            "{out}"
        );
        assert_eq!(lines[4], "         fix: ethtool -K eth1 ntuple on");
        assert!(lines[5].starts_with("  gpu-rx [lo,vA] cuda:0: staging \u{2014} devmem, zcrx-dmabuf: veth has no queue-management ops"), "{out}");
        assert!(
            lines[6].starts_with("  gpu-tx [eth1] cuda:0: devmem \u{2014}"),
            "{out}"
        );
        assert_eq!(
            lines[7],
            "         warning: GPU 0 reports no GPUDirect RDMA support"
        );
        assert!(
            lines[8].starts_with("  gpu-tx [lo,vA] cuda:0: staging"),
            "{out}"
        );
        assert_eq!(lines.len(), 9, "{out}");
    }

    #[test]
    fn gpu_json_has_devices_driver_and_paths() {
        let v = gpu_json(&machine(), &Cli);
        assert_eq!(v["driver"]["cuda"], json!([12, 8]));
        assert_eq!(v["driver"]["open_modules"], true);
        assert_eq!(v["error"], Value::Null);
        assert_eq!(v["devices"][0]["export"], "confirmed");
        assert_eq!(v["devices"][0]["dma_buf"], true);
        let eth1 = &v["interfaces"][0]["paths"][0];
        assert_eq!(eth1["gpu-rx"]["verdict"], "devmem");
        assert_eq!(eth1["gpu-rx"]["confirmed"], true);
        assert_eq!(eth1["pcie"]["relation"], "same-switch");
        assert_eq!(eth1["pcie"]["common"], "0000:01:00.0");
        assert_eq!(
            v["interfaces"][1]["paths"][0]["gpu-tx"]["verdict"],
            "staging"
        );
    }
}
