//! The probe's GPU facts: the CUDA devices and driver ([`crate::gpu::devices`], opened at run
//! time, so a machine without a driver gets the reason instead of a crash), with `--active` a
//! real dma-buf export of 2 MiB of each GPU's memory (closed and freed at once), and where each
//! GPU and each NIC sit on PCIe (the resolved sysfs path of `/sys/bus/pci/devices/<address>`;
//! PCI devices are not per network namespace, so sysfs is right here). The verdicts come from
//! the pure rules in [`zcnet_core::probe::gpu`].

use std::path::Path;

use zcnet_core::probe::gpu::{is_pci_address, judge_gpu, none_usable, NicFacts};
pub use zcnet_core::probe::gpu::{
    Direction, ExportTrial, GpuDriver, GpuFacts, GpuFinding, GpuPaths, GpuVerdict, PciRelation,
};
use zcnet_core::probe::{IfaceKind, KernelFacts};

use super::IfaceReport;
use crate::gpu::DeviceInfo;
use crate::{Error, Region, Remedy};

/// GPU memory exported by the `--active` trial.
const TRIAL_LEN: usize = 2 << 20;

/// One GPU as the probe saw it.
#[derive(Debug, Clone)]
pub struct GpuDevice {
    /// What the driver says about it.
    pub info: DeviceInfo,
    /// What the rules use (with the export trial and the PCI path).
    pub facts: GpuFacts,
}

/// One interface's GPU paths.
#[derive(Debug, Clone)]
pub struct IfaceGpu {
    /// Interface name.
    pub name: String,
    /// Resolved sysfs path of its PCI function (`None`: a virtual device, or not on PCI).
    pub pci_path: Option<String>,
    /// Per GPU (one entry with `gpu: None` when there is none), both directions.
    pub paths: Vec<GpuPaths>,
}

/// The GPU part of the probe report.
#[derive(Debug, Clone)]
pub struct GpuReport {
    /// The CUDA driver, or why there is none.
    pub driver: GpuDriver,
    /// The NVIDIA kernel module's version (`/proc/driver/nvidia/version`), if one is loaded.
    pub module: Option<String>,
    /// Why no GPU can be used, as one line (cause: fix), if so.
    pub error: Option<crate::text::Text>,
    /// The GPUs.
    pub devices: Vec<GpuDevice>,
    /// Per interface, in the report's order.
    pub interfaces: Vec<IfaceGpu>,
}

impl GpuReport {
    /// [`crate::gpu::STANDIN_LABEL`] when the driver is zcnet's CUDA stand-in (one of its
    /// devices says so): the driver line carries it.
    pub fn standin_label(&self) -> Option<&'static str> {
        self.devices.iter().find_map(|d| d.info.standin_label())
    }

    /// The label of `cuda:ordinal` when it is the stand-in (for lines that name a device).
    pub fn device_label(&self, ordinal: Option<u32>) -> Option<&'static str> {
        let n = ordinal?;
        self.devices
            .iter()
            .find(|d| d.info.ordinal == n)
            .and_then(|d| d.info.standin_label())
    }

    /// Why no GPU path exists: (cause, fix), or `None` when a driver and a GPU answered.
    pub fn none_usable(&self) -> Option<(crate::text::Text, crate::text::Text)> {
        let facts: Vec<GpuFacts> = self.devices.iter().map(|d| d.facts.clone()).collect();
        none_usable(&self.driver, &facts)
    }
}

/// Reads the driver and the GPUs; with `active`, tries a dma-buf export on each.
pub(super) fn gather(active: bool) -> GpuReport {
    let nvrm = std::fs::read_to_string("/proc/driver/nvidia/version").ok();
    let line = nvrm.as_deref().and_then(|s| s.lines().next());
    let open_modules = line.map(|l| l.contains("Open Kernel Module"));
    let module = line.and_then(module_version);
    let infos = match crate::gpu::devices() {
        Ok(v) => v,
        Err(e) => {
            let error = e.text();
            let (cause, fix) = match e {
                Error::Gpu { cause, remedy, .. } => (cause, remedy.text()),
                other => (
                    other.text(),
                    Remedy::UseMemory(crate::region::MemoryKind::Anonymous).text(),
                ),
            };
            return GpuReport {
                driver: GpuDriver::Missing { cause, fix },
                module,
                error: Some(error),
                devices: Vec::new(),
                interfaces: Vec::new(),
            };
        }
    };
    let driver = GpuDriver::Present {
        version: crate::gpu::driver_version().ok(),
        open_modules,
    };
    let devices: Vec<GpuDevice> = infos
        .into_iter()
        .map(|info| {
            let facts = GpuFacts {
                ordinal: info.ordinal,
                name: info.name.clone(),
                pci_bus_id: info.pci_bus_id.clone(),
                dma_buf: info.dma_buf,
                gpudirect_rdma: info.gpudirect_rdma,
                export: if active {
                    export_trial(info.ordinal)
                } else {
                    ExportTrial::NotTried
                },
                pci_path: sysfs_pci_path(&info.pci_bus_id),
            };
            GpuDevice { info, facts }
        })
        .collect();
    let mut r = GpuReport {
        driver,
        module,
        error: None,
        devices,
        interfaces: Vec::new(),
    };
    r.error = r.none_usable().map(|(cause, fix)| cause + ": " + fix);
    r
}

/// The version in the first line of `/proc/driver/nvidia/version` ("NVRM version: NVIDIA UNIX
/// Open Kernel Module for x86_64  550.54.14  Release Build ...").
fn module_version(line: &str) -> Option<String> {
    line.split_whitespace()
        .find(|t| t.contains('.') && t.chars().all(|c| c.is_ascii_digit() || c == '.'))
        .map(str::to_string)
}

/// Exports 2 MiB of `cuda:ordinal` as a dma-buf; both are released before returning.
fn export_trial(ordinal: u32) -> ExportTrial {
    match Region::cuda(ordinal, TRIAL_LEN) {
        Err(e) => ExportTrial::Inconclusive(e.to_string()),
        Ok(mut region) => match region.dmabuf() {
            Ok(_) => ExportTrial::Confirmed,
            Err(e) => ExportTrial::Refused(e.to_string()),
        },
    }
}

/// The resolved sysfs device path of PCI function `address` (any case), if it exists.
fn sysfs_pci_path(address: &str) -> Option<String> {
    let a = address.to_ascii_lowercase();
    if !is_pci_address(&a) {
        return None;
    }
    std::fs::canonicalize(Path::new("/sys/bus/pci/devices").join(a))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// The PCI path of a hardware interface: its bus-info (ETHTOOL_GDRVINFO, asked in the calling
/// thread's namespace), looked up in sysfs. `None` for software devices and non-PCI buses.
fn nic_pci_path(r: &IfaceReport) -> Option<String> {
    if r.facts.kind != IfaceKind::Physical {
        return None;
    }
    let info = zcnet_netlink::ntuple::driver_info(&r.name).ok()?;
    sysfs_pci_path(&info.bus_info)
}

/// Judges the GPU paths of interface `r` (whose own verdicts are already in) and adds them.
pub(super) fn add_iface(g: &mut GpuReport, k: &KernelFacts, r: &IfaceReport) {
    let pci_path = nic_pci_path(r);
    let facts: Vec<GpuFacts> = g.devices.iter().map(|d| d.facts.clone()).collect();
    let paths = judge_gpu(
        k,
        &g.driver,
        &facts,
        &NicFacts {
            iface: &r.facts,
            mechanisms: &r.mechanisms,
            pci_path: pci_path.as_deref(),
        },
    );
    g.interfaces.push(IfaceGpu {
        name: r.name.clone(),
        pci_path,
        paths,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[zcnet_testkit::test]
    fn this_machine_without_a_gpu_driver_says_why() {
        let g = gather(true);
        if !matches!(g.driver, GpuDriver::Missing { .. }) {
            zcnet_testkit::skip(
                zcnet_testkit::Need::Hardware,
                "a CUDA driver is present here (this test is about its absence)",
            );
        }
        let e = g
            .error
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default();
        assert!(e.contains("no CUDA driver library"), "{e}");
        assert!(
            e.contains("MemoryKind::Anonymous") && !e.contains("--"),
            "{e}"
        );
        assert!(g.devices.is_empty());
        let (cause, fix) = g.none_usable().unwrap_or_default();
        assert!(cause.starts_with("no CUDA driver library"), "{cause}");
        assert!(fix.starts_with("install the NVIDIA driver"), "{fix}");
    }

    #[zcnet_testkit::test]
    fn module_versions_are_read_from_the_nvrm_line() {
        let open = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.14  Release Build  (dvs-builder@U16)  Thu Feb 22 01:25:25 UTC 2024";
        assert_eq!(module_version(open).as_deref(), Some("550.54.14"));
        assert_eq!(module_version("NVRM version: none"), None);
    }

    #[zcnet_testkit::test]
    fn pci_paths_resolve_only_for_pci_addresses() {
        assert_eq!(sysfs_pci_path(""), None);
        assert_eq!(sysfs_pci_path("virtio0"), None);
        assert_eq!(sysfs_pci_path("ffff:ff:1f.7"), None, "no such function");
        // Any PCI function this machine has resolves under /sys/devices/pci*.
        let Some(first) = std::fs::read_dir("/sys/bus/pci/devices")
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
        else {
            zcnet_testkit::skip(zcnet_testkit::Need::Hardware, "no PCI devices here");
        };
        let name = first.file_name().to_string_lossy().to_uppercase();
        let p = sysfs_pci_path(&name).unwrap_or_default();
        assert!(p.starts_with("/sys/devices/"), "{name}: {p}");
        assert!(p.ends_with(&name.to_lowercase()), "{name}: {p}");
    }
}
