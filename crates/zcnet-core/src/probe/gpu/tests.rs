use super::*;
use crate::probe::{errno, judge, HeaderSplit, Refusal, Trials, UringFacts};
use proptest::prelude::*;

/// A 6.18 kernel with every mechanism (as in the probe's own tests).
fn kernel(version: (u32, u32)) -> KernelFacts {
    KernelFacts {
        version,
        uring: UringFacts {
            unusable: None,
            send_zc: true,
            recv_zc: true,
            zcrx_ring: true,
        },
        net_admin: true,
        memlock: None,
        ipc_lock: true,
        netdev_ops: Some(
            ["dev-get", "queue-get", "bind-rx", "bind-tx"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
        ),
        af_xdp: true,
        ethtool_cli: true,
    }
}

const DRIVER: GpuDriver = GpuDriver::Present {
    version: Some((12, 8)),
    open_modules: Some(true),
};

/// GPU 0: an H100 below switch port 0000:02:00.0 (switch 0000:01:00.0, root port 00:01.0).
const H100_PATH: &str =
    "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0";
/// An mlx5 on another downstream port of the same switch.
const MLX5_PATH: &str =
    "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0";
/// A bnxt behind the other socket's root complex.
const BNXT_PATH: &str = "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0";

fn h100() -> GpuFacts {
    GpuFacts {
        ordinal: 0,
        name: "NVIDIA H100 80GB HBM3".into(),
        pci_bus_id: "0000:03:00.0".into(),
        dma_buf: true,
        gpudirect_rdma: true,
        export: ExportTrial::NotTried,
        pci_path: Some(H100_PATH.into()),
    }
}

fn nic(name: &str, driver: &str, kind: IfaceKind) -> IfaceFacts {
    IfaceFacts {
        name: name.into(),
        kind,
        driver: Some(driver.into()),
        xdp_features: Some(0),
        rx_queues: 8,
        header_split: HeaderSplit::Enabled,
        hds_thresh: Some(0),
        ntuple: Some(true),
        scatter_gather: Some(true),
        channels: None,
    }
}

/// Judges one interface against `gpus` with the interface's own verdicts from the probe.
fn judge_with(
    k: &KernelFacts,
    d: &GpuDriver,
    gpus: &[GpuFacts],
    i: &IfaceFacts,
    t: &Trials,
    path: Option<&str>,
) -> Vec<GpuPaths> {
    let mechanisms = judge(k, i, t);
    judge_gpu(
        k,
        d,
        gpus,
        &NicFacts {
            iface: i,
            mechanisms: &mechanisms,
            pci_path: path,
        },
    )
}

fn one(k: &KernelFacts, g: GpuFacts, i: &IfaceFacts, t: &Trials, path: Option<&str>) -> GpuPaths {
    let mut v = judge_with(k, &DRIVER, &[g], i, t, path);
    assert_eq!(v.len(), 1);
    v.remove(0)
}

#[test]
fn h100_and_mlx5_under_one_switch_use_devmem_both_ways() {
    let k = kernel((6, 18));
    let i = nic("eth1", "mlx5_core", IfaceKind::Physical);
    let p = one(&k, h100(), &i, &Trials::default(), Some(MLX5_PATH));
    assert_eq!(p.gpu, Some(0));
    assert_eq!(
        p.relation,
        Some(PciRelation::SameSwitch {
            bridge: "0000:01:00.0".into()
        })
    );
    for f in [&p.rx, &p.tx] {
        assert_eq!(f.verdict, GpuVerdict::Devmem, "{f:?}");
        assert_eq!(f.warning, None);
        assert_eq!(f.remedy, None);
        assert!(!f.confirmed, "nothing was tried");
    }
    assert!(
        p.rx.reason.contains("straight into a dma-buf of GPU 0"),
        "{}",
        p.rx.reason
    );
    assert!(
        p.tx.reason.contains("straight from a dma-buf of GPU 0"),
        "{}",
        p.tx.reason
    );
}

#[test]
fn without_the_dma_buf_attribute_it_is_staging_with_the_driver_remedy() {
    let k = kernel((6, 18));
    let i = nic("eth1", "mlx5_core", IfaceKind::Physical);
    let mut g = h100();
    g.dma_buf = false;
    let p = one(&k, g.clone(), &i, &Trials::default(), Some(MLX5_PATH));
    for f in [&p.rx, &p.tx] {
        assert_eq!(f.verdict, GpuVerdict::Staging);
        assert!(f.reason.contains("DMA_BUF_SUPPORTED is 0"), "{}", f.reason);
        assert!(f.reason.contains("pinned host memory"), "{}", f.reason);
        assert_eq!(
            f.remedy.as_ref().map(ToString::to_string).as_deref(),
            Some("nvidia driver without dma-buf export: use the open kernel modules r515+")
        );
    }
    // The proprietary module, or an old driver, are named as such.
    let d = GpuDriver::Present {
        version: Some((12, 4)),
        open_modules: Some(false),
    };
    let p = judge_with(
        &k,
        &d,
        &[g.clone()],
        &i,
        &Trials::default(),
        Some(MLX5_PATH),
    );
    assert!(p[0].rx.remedy.as_ref().unwrap().contains("proprietary"));
    let d = GpuDriver::Present {
        version: Some((11, 4)),
        open_modules: None,
    };
    let p = judge_with(
        &k,
        &d,
        &[g.clone()],
        &i,
        &Trials::default(),
        Some(MLX5_PATH),
    );
    assert!(
        p[0].tx
            .remedy
            .as_ref()
            .unwrap()
            .starts_with("the CUDA driver is 11.4"),
        "{:?}",
        p[0].tx.remedy
    );
    // An export that worked beats the attribute.
    g.export = ExportTrial::Confirmed;
    let p = one(&k, g, &i, &Trials::default(), Some(MLX5_PATH));
    assert_eq!(p.rx.verdict, GpuVerdict::Devmem);
}

#[test]
fn a_refused_export_is_staging_with_the_drivers_words() {
    let k = kernel((6, 18));
    let i = nic("eth1", "mlx5_core", IfaceKind::Physical);
    let mut g = h100();
    g.export = ExportTrial::Refused("cuMemGetHandleForAddressRange: CUresult 801".into());
    let p = one(&k, g.clone(), &i, &Trials::default(), Some(MLX5_PATH));
    assert_eq!(p.rx.verdict, GpuVerdict::Staging);
    assert!(p.rx.reason.to_string().starts_with("exporting GPU 0's memory as a dma-buf failed: cuMemGetHandleForAddressRange: CUresult 801"), "{}", p.rx.reason);
    // A trial that never reached the export leaves the attribute's answer.
    g.export = ExportTrial::Inconclusive("out of memory".into());
    assert_eq!(
        one(&k, g, &i, &Trials::default(), Some(MLX5_PATH))
            .rx
            .verdict,
        GpuVerdict::Devmem
    );
}

#[test]
fn bnxt_on_another_socket_is_devmem_with_a_topology_warning() {
    let k = kernel((6, 18));
    let i = nic("eth2", "bnxt_en", IfaceKind::Physical);
    let p = one(&k, h100(), &i, &Trials::default(), Some(BNXT_PATH));
    assert_eq!(
        p.relation.as_ref().unwrap().name(),
        "different-root-complexes"
    );
    for f in [&p.rx, &p.tx] {
        assert_eq!(f.verdict, GpuVerdict::Devmem);
        let w = f.warning.as_deref().unwrap();
        assert!(
            w.starts_with("eth2 and GPU 0 are under different root complexes (0000:80 and 0000:00"),
            "{w}"
        );
    }
    // Same root complex, no shared switch: the example of the brief.
    let p = one(
        &k,
        h100(),
        &i,
        &Trials::default(),
        Some("/sys/devices/pci0000:00/0000:00:03.0/0000:05:00.0"),
    );
    assert_eq!(
        p.rx.warning.as_deref().unwrap(),
        "eth2 shares no PCIe switch with GPU 0 (they meet at the root complex 0000:00): peer-to-peer DMA crosses the CPU; a NIC under the same switch is faster"
    );
    // No GPUDirect RDMA attribute: said too.
    let mut g = h100();
    g.gpudirect_rdma = false;
    let p = one(&k, g, &i, &Trials::default(), Some(MLX5_PATH));
    assert!(p.tx.warning.unwrap().contains("no GPUDirect RDMA"));
}

#[test]
fn no_driver_or_no_gpu_is_unavailable_with_the_fix() {
    let k = kernel((6, 18));
    let i = nic("lo", "lo", IfaceKind::Loopback);
    let d = GpuDriver::Missing {
        cause: "no CUDA driver library (libcuda.so.1, libcuda.so): not found".into(),
        fix: "install the NVIDIA driver, or use host memory (MemoryKind::Anonymous)".into(),
    };
    let v = judge_with(&k, &d, &[], &i, &Trials::default(), None);
    assert_eq!(v.len(), 1);
    assert_eq!((v[0].gpu, &v[0].relation), (None, &None));
    for f in [&v[0].rx, &v[0].tx] {
        assert_eq!(f.verdict, GpuVerdict::Unavailable);
        assert!(
            f.reason.to_string().starts_with("no CUDA driver library"),
            "{}",
            f.reason
        );
        assert_eq!(
            f.remedy.as_ref().map(ToString::to_string).as_deref(),
            Some("install the NVIDIA driver, or use host memory (MemoryKind::Anonymous)")
        );
    }
    // A driver but no device.
    let v = judge_with(&k, &DRIVER, &[], &i, &Trials::default(), None);
    assert_eq!(v[0].rx.verdict, GpuVerdict::Unavailable);
    assert_eq!(v[0].rx.reason, "the CUDA driver sees no GPU");
    assert_eq!(none_usable(&DRIVER, &[h100()]), None);
}

#[test]
fn veth_here_is_staging_because_it_has_no_queue_management_ops() {
    let k = kernel((6, 18));
    let mut i = nic("vA", "veth", IfaceKind::Veth);
    i.header_split = HeaderSplit::NotReported("rings: Operation not supported".into());
    i.rx_queues = 1;
    let p = one(&k, h100(), &i, &Trials::default(), None);
    assert_eq!(
        p.relation,
        Some(PciRelation::NoPciDevice("veth has no PCI device".into()))
    );
    assert_eq!(p.rx.verdict, GpuVerdict::Staging);
    assert_eq!(
        p.rx.reason,
        "devmem, zcrx-dmabuf: veth has no queue-management ops; data is received into pinned host memory, then copied to the GPU"
    );
    assert_eq!(p.tx.verdict, GpuVerdict::Staging);
    assert!(
        p.tx.reason
            .starts_with("devmem: veth does not support netmem TX"),
        "{}",
        p.tx.reason
    );
    assert_eq!((p.rx.remedy, p.tx.remedy), (None, None));
    // Loopback is named by its kind, not by its interface name.
    let lo = IfaceFacts {
        name: "lo".into(),
        kind: IfaceKind::Loopback,
        driver: None,
        ..i
    };
    assert!(one(&k, h100(), &lo, &Trials::default(), None)
        .rx
        .reason
        .contains("loopback has no queue-management ops"));
}

#[test]
fn header_split_off_is_staging_with_the_setup_remedy() {
    let k = kernel((6, 18));
    let mut i = nic("eth1", "mlx5_core", IfaceKind::Physical);
    i.header_split = HeaderSplit::Disabled;
    let p = one(&k, h100(), &i, &Trials::default(), Some(MLX5_PATH));
    assert_eq!(p.rx.verdict, GpuVerdict::Staging);
    assert!(
        p.rx.reason
            .starts_with("devmem: header split is off on eth1")
            && p.rx
                .reason
                .contains("; zcrx-dmabuf: header split is off on eth1"),
        "{}",
        p.rx.reason
    );
    // The same remedy for both is given once.
    assert_eq!(
        p.rx.remedy.as_ref().map(ToString::to_string).as_deref(),
        Some("nic::NicGuard::apply (eth1, queue 7, the flow's port)")
    );
    // Transmit does not need header split.
    assert_eq!(p.tx.verdict, GpuVerdict::Devmem);
}

#[test]
fn zcrx_dmabuf_when_devmem_rx_is_missing_and_the_kernel_is_new_enough() {
    let mut k = kernel((6, 18));
    k.netdev_ops.as_mut().unwrap().retain(|o| o != "bind-rx");
    let i = nic("eth1", "mlx5_core", IfaceKind::Physical);
    let p = one(&k, h100(), &i, &Trials::default(), Some(MLX5_PATH));
    assert_eq!(p.rx.verdict, GpuVerdict::ZcrxDmabuf);
    assert!(
        p.rx.reason
            .contains("devmem refused: the netdev family has no bind-rx"),
        "{}",
        p.rx.reason
    );
    k.version = (6, 15);
    let p = one(&k, h100(), &i, &Trials::default(), Some(MLX5_PATH));
    assert_eq!(p.rx.verdict, GpuVerdict::Staging);
    assert!(
        p.rx.reason
            .contains("zcrx-dmabuf: zcrx with a dma-buf area needs Linux 6.16"),
        "{}",
        p.rx.reason
    );
    assert_eq!(
        p.rx.remedy.as_ref().map(ToString::to_string).as_deref(),
        Some("upgrade the kernel")
    );
}

#[test]
fn confirmed_only_when_export_and_interface_were_both_tried() {
    let k = kernel((6, 18));
    let i = nic("eth1", "mlx5_core", IfaceKind::Physical);
    let t = Trials {
        devmem_tx: Some(Err(Refusal {
            errno: errno::EINVAL,
            message: "Invalid argument".into(),
        })),
        ..Trials::default()
    };
    let mut g = h100();
    assert!(!one(&k, g.clone(), &i, &t, Some(MLX5_PATH)).tx.confirmed);
    g.export = ExportTrial::Confirmed;
    let p = one(&k, g, &i, &t, Some(MLX5_PATH));
    assert!(p.tx.confirmed);
    assert!(!p.rx.confirmed, "bind-rx was not tried");
}

#[test]
fn pci_relations_of_made_up_machines() {
    let sw = pci_relation(H100_PATH, MLX5_PATH);
    assert_eq!(sw.common(), Some("0000:01:00.0"));
    assert_eq!(sw.name(), "same-switch");
    // Both on one downstream port's bus (a two-function card): still below the switch.
    let twin = pci_relation(H100_PATH, &H100_PATH.replace("03:00.0", "03:00.1"));
    assert_eq!(
        twin,
        PciRelation::SameSwitch {
            bridge: "0000:02:00.0".into()
        }
    );
    // Functions of one device directly on a root port.
    assert_eq!(
        pci_relation(
            "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0",
            "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.1"
        ),
        PciRelation::SameRootPort {
            port: "0000:00:01.0".into()
        }
    );
    // A VM: every device on the root bus.
    assert_eq!(
        pci_relation(
            "/sys/devices/pci0000:00/0000:00:05.0",
            "/sys/devices/pci0000:00/0000:00:03.0"
        ),
        PciRelation::SameRootComplex {
            root: "0000:00".into()
        }
    );
    // Different root ports of one host bridge.
    assert_eq!(
        pci_relation(
            H100_PATH,
            "/sys/devices/pci0000:00/0000:00:03.0/0000:05:00.0"
        )
        .name(),
        "same-root-complex"
    );
    assert_eq!(
        pci_relation(H100_PATH, BNXT_PATH),
        PciRelation::DifferentRootComplexes {
            gpu_root: "0000:00".into(),
            nic_root: "0000:80".into()
        }
    );
    // Another PCI domain, upper-case hex, a Hyper-V style prefix and a netdev tail.
    let hv = "/sys/devices/LNXSYSTM:00/VMBUS:00/47505500-0001/pci0001:00/0001:00:00.0/net/eth0";
    assert_eq!(
        pci_relation(H100_PATH, hv).name(),
        "different-root-complexes"
    );
    assert_eq!(
        pci_relation(
            &H100_PATH
                .to_uppercase()
                .replace("/SYS/DEVICES/PCI", "/sys/devices/pci"),
            MLX5_PATH
        ),
        sw
    );
    for bad in [
        "",
        "/sys/devices/virtual/net/veth0",
        "/sys/devices/pci0000:00",
        "/sys/devices/pcixyz/0000:00:01.0",
    ] {
        assert_eq!(
            pci_relation(bad, MLX5_PATH).name(),
            "no-pci-device",
            "{bad}"
        );
        assert!(
            pci_relation(MLX5_PATH, bad)
                .describe()
                .starts_with("not a PCI device path"),
            "{bad}"
        );
    }
    assert!(is_pci_address("0000:1b:00.0") && is_pci_address("0000:1B:00.7"));
    assert!(!is_pci_address("virtio0") && !is_pci_address("0000:1b:00") && !is_pci_address(""));
}

fn any_kind() -> impl Strategy<Value = IfaceKind> {
    prop_oneof![
        Just(IfaceKind::Loopback),
        Just(IfaceKind::Veth),
        Just(IfaceKind::Virtual),
        Just(IfaceKind::Physical),
    ]
}

proptest! {
    /// The GPU gets data straight from the NIC only when its memory exports as a dma-buf and
    /// the NIC is hardware whose own devmem or zcrx verdict is zero copy; every verdict explains
    /// itself.
    #[test]
    fn zero_copy_gpu_paths_need_both_sides(
        kind in any_kind(), dma_buf in any::<bool>(), split in any::<bool>(),
        minor in 10u32..20, export in 0u8..3,
    ) {
        let k = kernel((6, minor));
        let mut i = nic("x", "mlx5_core", kind);
        if !split { i.header_split = HeaderSplit::Disabled; }
        let mut g = h100();
        g.dma_buf = dma_buf;
        g.export = match export {
            0 => ExportTrial::NotTried,
            1 => ExportTrial::Confirmed,
            _ => ExportTrial::Refused("no".into()),
        };
        let mechanisms = judge(&k, &i, &Trials::default());
        let p = &judge_gpu(&k, &DRIVER, &[g], &NicFacts { iface: &i, mechanisms: &mechanisms, pci_path: Some(MLX5_PATH) })[0];
        let exports = export == 1 || (export == 0 && dma_buf);
        for (m, f) in [(Mechanism::DevmemRx, &p.rx), (Mechanism::DevmemTx, &p.tx)] {
            prop_assert!(!f.reason.is_empty());
            prop_assert_ne!(f.verdict, GpuVerdict::Unavailable);
            if f.verdict != GpuVerdict::Staging {
                prop_assert!(exports && kind == IfaceKind::Physical);
            }
            let nic_ok = mechanisms.iter().any(|(mm, x)| *mm == m && x.verdict == Verdict::ZeroCopy);
            if f.verdict == GpuVerdict::Devmem {
                prop_assert!(nic_ok);
            }
            if f.verdict == GpuVerdict::ZcrxDmabuf {
                prop_assert!(minor >= 16 && !nic_ok);
            }
        }
    }
}
