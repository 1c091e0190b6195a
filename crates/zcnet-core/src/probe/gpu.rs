//! The probe's GPU judgement: for each interface and each GPU, the best way data moves between
//! the NIC and GPU memory, in each direction, with the reason the better ways were refused and
//! the remedy.
//!
//! The paths, best first:
//! - `devmem`: devmem TCP receives into (or sends from) a dma-buf of GPU memory. Needs the
//!   interface's devmem-rx / devmem-tx verdict usable (judged by [`super::judge`], not here)
//!   and the GPU's memory exportable as a dma-buf (`CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`, or
//!   an export tried with `--active`).
//! - `zcrx-dmabuf` (receive only): io_uring zcrx with a dma-buf area (`IORING_ZCRX_AREA_DMABUF`,
//!   Linux 6.16). Needs the interface's zcrx verdict usable and the dma-buf export.
//! - `staging`: pinned host memory and a copy to or from the GPU. Works wherever a GPU and its
//!   driver do.
//! - `unavailable`: no CUDA driver, or no GPU.
//!
//! Peer-to-peer DMA between a NIC and a GPU is fastest when one PCIe switch joins them; through
//! the root complex it crosses the CPU, and between root complexes (sockets) many platforms slow
//! it down or refuse it. [`pci_relation`] classifies that from the two sysfs device paths (the
//! classes of `nvidia-smi topo -m`: PIX/PXB, PHB, NODE/SYS). Pure, like the rest of the probe.

use super::{Finding, IfaceFacts, IfaceKind, KernelFacts, Mechanism, Verdict};
use crate::text::{Memory, Text};

/// The path data takes between a NIC and GPU memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuVerdict {
    /// devmem TCP into or out of a dma-buf of GPU memory: the NIC DMAs to the GPU.
    Devmem,
    /// io_uring zcrx with a dma-buf area (receive only).
    ZcrxDmabuf,
    /// Pinned host memory and a copy to or from the GPU.
    Staging,
    /// No GPU, or no driver for one.
    Unavailable,
}

impl GpuVerdict {
    /// The name used in output and JSON.
    pub fn name(self) -> &'static str {
        match self {
            GpuVerdict::Devmem => "devmem",
            GpuVerdict::ZcrxDmabuf => "zcrx-dmabuf",
            GpuVerdict::Staging => "staging",
            GpuVerdict::Unavailable => "unavailable",
        }
    }
}

/// Which way the data goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the network into GPU memory.
    Rx,
    /// From GPU memory to the network.
    Tx,
}

impl Direction {
    /// The name used in output and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Rx => "gpu-rx",
            Direction::Tx => "gpu-tx",
        }
    }
}

/// The CUDA driver, as the facade found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuDriver {
    /// No usable driver: what is missing (the driver's or the loader's words) and the fix.
    Missing {
        /// What is missing.
        cause: Text,
        /// How to get a driver, or the alternative.
        fix: Text,
    },
    /// A driver answered.
    Present {
        /// CUDA driver API version (major, minor), if it could be read.
        version: Option<(u32, u32)>,
        /// Whether the kernel module is NVIDIA's open one (`None`: unknown).
        open_modules: Option<bool>,
    },
}

/// An `--active` export of a little GPU memory as a dma-buf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExportTrial {
    /// Not tried (the probe was not `--active`).
    NotTried,
    /// The driver exported it (and it was closed at once).
    Confirmed,
    /// The driver refused the export: its error as one line.
    Refused(String),
    /// The trial could not get as far as the export (e.g. the allocation failed): says nothing.
    Inconclusive(String),
}

/// Facts about one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuFacts {
    /// CUDA ordinal.
    pub ordinal: u32,
    /// Name, e.g. "NVIDIA H100 80GB HBM3".
    pub name: String,
    /// PCI address, e.g. "0000:1B:00.0".
    pub pci_bus_id: String,
    /// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`.
    pub dma_buf: bool,
    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED`.
    pub gpudirect_rdma: bool,
    /// The `--active` export trial.
    pub export: ExportTrial,
    /// Resolved sysfs device path (`/sys/devices/pci0000:00/...`), if it could be read.
    pub pci_path: Option<String>,
}

/// What the GPU rules need about one interface: its facts, its verdicts (devmem-rx, devmem-tx,
/// zcrx are reused, not recomputed) and its resolved sysfs PCI device path (`None` for virtual
/// devices).
#[derive(Debug, Clone, Copy)]
pub struct NicFacts<'a> {
    /// The interface's facts.
    pub iface: &'a IfaceFacts,
    /// The interface's verdicts from [`super::judge`].
    pub mechanisms: &'a [(Mechanism, Finding)],
    /// Resolved sysfs device path of its PCI function.
    pub pci_path: Option<&'a str>,
}

/// One direction's verdict between one interface and one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuFinding {
    /// The best path that works.
    pub verdict: GpuVerdict,
    /// Why this path, and why the better ones were refused, its terms typed.
    pub reason: Text,
    /// What would make a better path work, if anything would.
    pub remedy: Option<Text>,
    /// What makes the chosen path slower than it could be (PCIe topology, missing attributes).
    pub warning: Option<String>,
    /// The dma-buf export and the interface's verdict were both confirmed by trying them.
    pub confirmed: bool,
}

/// Both directions between one interface and one GPU (`gpu: None` when there is no GPU).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuPaths {
    /// The GPU's ordinal.
    pub gpu: Option<u32>,
    /// How the NIC and the GPU meet on PCIe (`None` when there is no GPU).
    pub relation: Option<PciRelation>,
    /// Network to GPU.
    pub rx: GpuFinding,
    /// GPU to network.
    pub tx: GpuFinding,
}

/// Why no GPU path exists at all: (cause, fix), or `None` when there is a driver and a GPU.
pub fn none_usable(driver: &GpuDriver, gpus: &[GpuFacts]) -> Option<(Text, Text)> {
    match driver {
        GpuDriver::Missing { cause, fix } => Some((cause.clone(), fix.clone())),
        GpuDriver::Present { .. } if gpus.is_empty() => Some((
            "the CUDA driver sees no GPU".into(),
            crate::text!(
                "check that nvidia-smi lists one (a container needs the GPU's device nodes), or use host memory (",
                Memory::Host,
                ")",
            ),
        )),
        GpuDriver::Present { .. } => None,
    }
}

/// Judges both directions between interface `nic` and every GPU.
pub fn judge_gpu(
    k: &KernelFacts,
    driver: &GpuDriver,
    gpus: &[GpuFacts],
    nic: &NicFacts<'_>,
) -> Vec<GpuPaths> {
    if let Some((cause, fix)) = none_usable(driver, gpus) {
        let f = GpuFinding {
            verdict: GpuVerdict::Unavailable,
            reason: cause,
            remedy: Some(fix),
            warning: None,
            confirmed: false,
        };
        return vec![GpuPaths {
            gpu: None,
            relation: None,
            rx: f.clone(),
            tx: f,
        }];
    }
    gpus.iter()
        .map(|g| {
            let relation = match (g.pci_path.as_deref(), nic.pci_path) {
                (_, None) => {
                    PciRelation::NoPciDevice(format!("{} has no PCI device", nic_word(nic.iface)))
                }
                (None, _) => {
                    PciRelation::NoPciDevice(format!("GPU {}'s sysfs path is unknown", g.ordinal))
                }
                (Some(gp), Some(np)) => pci_relation(gp, np),
            };
            GpuPaths {
                gpu: Some(g.ordinal),
                rx: judge_path(k, driver, g, nic, &relation, Direction::Rx),
                tx: judge_path(k, driver, g, nic, &relation, Direction::Tx),
                relation: Some(relation),
            }
        })
        .collect()
}

/// How a software device is named in reasons (not the interface's name, so that the report can
/// say a reason once for every interface it applies to).
fn nic_word(i: &IfaceFacts) -> String {
    match (i.kind, &i.driver) {
        (IfaceKind::Physical, _) => i.name.clone(),
        (IfaceKind::Loopback, _) => "loopback".into(),
        (IfaceKind::Veth, _) => "veth".into(),
        (IfaceKind::Ifb, _) => "ifb".into(),
        (IfaceKind::Virtual, Some(d)) => d.clone(),
        (IfaceKind::Virtual, None) => "this software device".into(),
    }
}

/// Whether GPU memory can be handed to the NIC as a dma-buf: `Ok(confirmed)` or the refusal
/// with its remedy.
fn dmabuf(driver: &GpuDriver, g: &GpuFacts) -> Result<bool, (String, String)> {
    let n = g.ordinal;
    let fix = match driver {
        GpuDriver::Present {
            open_modules: Some(false),
            ..
        } => "the proprietary nvidia kernel module does not export dma-bufs: install the open kernel modules (r515+)".to_string(),
        GpuDriver::Present {
            version: Some(v), ..
        } if *v < (11, 7) => format!(
            "the CUDA driver is {}.{}: dma-buf export needs r515+ (CUDA 11.7) with the open kernel modules",
            v.0, v.1
        ),
        _ => "nvidia driver without dma-buf export: use the open kernel modules r515+".to_string(),
    };
    match &g.export {
        ExportTrial::Confirmed => Ok(true),
        ExportTrial::Refused(why) => Err((
            format!("exporting GPU {n}'s memory as a dma-buf failed: {why}"),
            fix,
        )),
        ExportTrial::NotTried | ExportTrial::Inconclusive(_) if g.dma_buf => Ok(false),
        ExportTrial::NotTried | ExportTrial::Inconclusive(_) => Err((
            format!("GPU {n} cannot export its memory as a dma-buf (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0)"),
            fix,
        )),
    }
}

/// The interface's own verdict for a candidate path: `Ok(finding)` when usable, else the
/// refusal (reason, remedy).
fn iface_side<'a>(
    k: &KernelFacts,
    nic: &NicFacts<'a>,
    path: GpuVerdict,
    dir: Direction,
) -> Result<&'a Finding, (Text, Option<Text>)> {
    let m = match (path, dir) {
        (GpuVerdict::ZcrxDmabuf, _) => Mechanism::Zcrx,
        (_, Direction::Rx) => Mechanism::DevmemRx,
        (_, Direction::Tx) => Mechanism::DevmemTx,
    };
    let Some((_, f)) = nic.mechanisms.iter().find(|(mm, _)| *mm == m) else {
        return Err((
            format!("no {} verdict for {}", m.name(), nic.iface.name).into(),
            None,
        ));
    };
    if nic.iface.kind != IfaceKind::Physical {
        let word = nic_word(nic.iface);
        return Err(match m {
            Mechanism::DevmemTx => (format!("{word} does not support netmem TX").into(), None),
            _ => (format!("{word} has no queue-management ops").into(), None),
        });
    }
    if path == GpuVerdict::ZcrxDmabuf && k.version < (6, 16) {
        return Err((
            "zcrx with a dma-buf area needs Linux 6.16 (IORING_ZCRX_AREA_DMABUF)".into(),
            Some("upgrade the kernel".into()),
        ));
    }
    match f.verdict {
        Verdict::ZeroCopy => Ok(f),
        _ => Err((f.reason.clone(), f.remedy.clone())),
    }
}

fn judge_path(
    k: &KernelFacts,
    driver: &GpuDriver,
    g: &GpuFacts,
    nic: &NicFacts<'_>,
    relation: &PciRelation,
    dir: Direction,
) -> GpuFinding {
    let n = g.ordinal;
    let ifname = &nic.iface.name;
    let candidates: &[GpuVerdict] = match dir {
        Direction::Rx => &[GpuVerdict::Devmem, GpuVerdict::ZcrxDmabuf],
        Direction::Tx => &[GpuVerdict::Devmem],
    };
    let buf = dmabuf(driver, g);
    // (paths, reason, remedy) refused by the interface; identical reasons are said once.
    let mut refused: Vec<(Vec<&str>, Text, Option<Text>)> = Vec::new();
    for &path in candidates {
        match (iface_side(k, nic, path, dir), &buf) {
            (Ok(f), Ok(export_confirmed)) => {
                let how = match (path, dir) {
                    (GpuVerdict::ZcrxDmabuf, _) => format!("io_uring zcrx with a dma-buf area of GPU {n}'s memory on {ifname}"),
                    (_, Direction::Rx) => format!("devmem TCP: {ifname} writes payloads straight into a dma-buf of GPU {n}'s memory"),
                    (_, Direction::Tx) => format!("devmem TCP: {ifname} sends payloads straight from a dma-buf of GPU {n}'s memory"),
                };
                let mut reason = crate::text!(how, " (", f.reason.clone(), ")");
                for (paths, why, _) in &refused {
                    reason.push(format!("; {} refused: ", paths.join(", ")));
                    reason.push(why.clone());
                }
                let mut warnings: Vec<String> =
                    topology_warning(ifname, n, relation).into_iter().collect();
                if !g.gpudirect_rdma {
                    warnings.push(format!("GPU {n} reports no GPUDirect RDMA support: the NIC's peer DMA into it may be refused"));
                }
                return GpuFinding {
                    verdict: path,
                    reason,
                    remedy: f.remedy.clone(),
                    warning: (!warnings.is_empty()).then(|| warnings.join("; ")),
                    confirmed: *export_confirmed && f.confirmed,
                };
            }
            (Err((why, fix)), _) => match refused.iter_mut().find(|r| r.1 == why) {
                Some(r) => r.0.push(path.name()),
                None => refused.push((vec![path.name()], why, fix)),
            },
            (Ok(_), Err(_)) => {}
        }
    }
    let mut parts: Vec<Text> = Vec::new();
    let mut remedies: Vec<Text> = Vec::new();
    if let Err((why, fix)) = &buf {
        parts.push(why.clone().into());
        remedies.push(fix.clone().into());
    }
    for (paths, why, fix) in refused {
        parts.push(crate::text!(format!("{}: ", paths.join(", ")), why));
        if let Some(fix) = fix.filter(|f| !remedies.contains(f)) {
            remedies.push(fix);
        }
    }
    let copy = match dir {
        Direction::Rx => "received into pinned host memory, then copied to the GPU",
        Direction::Tx => "copied from the GPU into pinned host memory, then sent",
    };
    GpuFinding {
        verdict: GpuVerdict::Staging,
        reason: Text::join(parts, "; ") + format!("; data is {copy}"),
        remedy: (!remedies.is_empty()).then(|| Text::join(remedies, "; ")),
        warning: None,
        confirmed: false,
    }
}

/// Why peer-to-peer DMA between `nic` and GPU `n` is slower than it could be, if it is.
fn topology_warning(nic: &str, n: u32, relation: &PciRelation) -> Option<String> {
    match relation {
        PciRelation::SameSwitch { .. } => None,
        PciRelation::SameRootPort { port } => Some(format!(
            "{nic} shares no PCIe switch with GPU {n} (they meet at root port {port}): peer-to-peer DMA goes through the root complex; a NIC under the same switch is faster"
        )),
        PciRelation::SameRootComplex { root } => Some(format!(
            "{nic} shares no PCIe switch with GPU {n} (they meet at the root complex {root}): peer-to-peer DMA crosses the CPU; a NIC under the same switch is faster"
        )),
        PciRelation::DifferentRootComplexes { gpu_root, nic_root } => Some(format!(
            "{nic} and GPU {n} are under different root complexes ({nic_root} and {gpu_root}, e.g. different sockets): peer-to-peer DMA crosses the CPU interconnect, which many platforms slow down or refuse; a NIC under the GPU's PCIe switch is faster"
        )),
        PciRelation::NoPciDevice(why) => Some(format!(
            "the PCIe path between {nic} and GPU {n} is unknown ({why})"
        )),
    }
}

/// How two PCI devices meet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PciRelation {
    /// One of them has no PCI device (veth, lo, a virtio-mmio NIC) or an unreadable path.
    NoPciDevice(String),
    /// They share a PCIe switch (a bridge below the root port): `bridge` is the deepest one.
    SameSwitch {
        /// The deepest bridge both are below, e.g. "0000:01:00.0".
        bridge: String,
    },
    /// Both sit directly on one root port (functions of one device): peer traffic turns round
    /// in the root complex.
    SameRootPort {
        /// The root port, e.g. "0000:00:01.0".
        port: String,
    },
    /// They share only the root complex (host bridge), e.g. "0000:00".
    SameRootComplex {
        /// Domain and root bus of the host bridge.
        root: String,
    },
    /// Different root complexes: another socket, or another host bridge of one.
    DifferentRootComplexes {
        /// The GPU's root complex.
        gpu_root: String,
        /// The NIC's root complex.
        nic_root: String,
    },
}

impl PciRelation {
    /// The name used in output and JSON.
    pub fn name(&self) -> &'static str {
        match self {
            PciRelation::NoPciDevice(_) => "no-pci-device",
            PciRelation::SameSwitch { .. } => "same-switch",
            PciRelation::SameRootPort { .. } => "same-root-port",
            PciRelation::SameRootComplex { .. } => "same-root-complex",
            PciRelation::DifferentRootComplexes { .. } => "different-root-complexes",
        }
    }

    /// The common ancestor (a bridge or a root complex), if they have one.
    pub fn common(&self) -> Option<&str> {
        match self {
            PciRelation::SameSwitch { bridge: c }
            | PciRelation::SameRootPort { port: c }
            | PciRelation::SameRootComplex { root: c } => Some(c),
            _ => None,
        }
    }

    /// One line for people.
    pub fn describe(&self) -> String {
        match self {
            PciRelation::NoPciDevice(why) => why.clone(),
            PciRelation::SameSwitch { bridge } => format!("same PCIe switch (below {bridge})"),
            PciRelation::SameRootPort { port } => format!("same root port {port}"),
            PciRelation::SameRootComplex { root } => {
                format!("same root complex {root}, no shared switch")
            }
            PciRelation::DifferentRootComplexes { gpu_root, nic_root } => {
                format!("different root complexes (NIC {nic_root}, GPU {gpu_root})")
            }
        }
    }
}

/// Whether `s` has the shape of `pattern`, where `x` stands for a hex digit.
fn shaped(s: &str, pattern: &str) -> bool {
    s.len() == pattern.len()
        && s.bytes().zip(pattern.bytes()).all(|(c, p)| match p {
            b'x' => c.is_ascii_hexdigit(),
            _ => c == p,
        })
}

/// Whether `s` is a PCI address: `DDDD:BB:DD.F` in hex.
pub fn is_pci_address(s: &str) -> bool {
    shaped(s, "xxxx:xx:xx.x")
}

/// A sysfs PCI device path as (root complex "DDDD:BB", the PCI functions from the root port
/// down to the device).
fn parse_pci_path(path: &str) -> Option<(String, Vec<String>)> {
    let mut parts = path.split('/').filter(|p| !p.is_empty());
    let root = parts.find_map(|p| {
        let r = p.strip_prefix("pci")?;
        shaped(r, "xxxx:xx").then(|| r.to_ascii_lowercase())
    })?;
    let chain: Vec<String> = parts
        .take_while(|p| is_pci_address(p))
        .map(|p| p.to_ascii_lowercase())
        .collect();
    (!chain.is_empty()).then_some((root, chain))
}

/// How the GPU at sysfs path `gpu` and the NIC at `nic` meet on PCIe (paths as
/// `realpath /sys/bus/pci/devices/<address>` gives them, e.g.
/// "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0").
pub fn pci_relation(gpu: &str, nic: &str) -> PciRelation {
    let Some((groot, gchain)) = parse_pci_path(gpu) else {
        return PciRelation::NoPciDevice(format!("not a PCI device path: {gpu}"));
    };
    let Some((nroot, nchain)) = parse_pci_path(nic) else {
        return PciRelation::NoPciDevice(format!("not a PCI device path: {nic}"));
    };
    if groot != nroot {
        return PciRelation::DifferentRootComplexes {
            gpu_root: groot,
            nic_root: nroot,
        };
    }
    // The bridges above each device (its own function excluded), shared from the top.
    let above = |c: &[String]| c[..c.len() - 1].to_vec();
    let shared: Vec<String> = above(&gchain)
        .into_iter()
        .zip(above(&nchain))
        .take_while(|(a, b)| a == b)
        .map(|(a, _)| a)
        .collect();
    match shared.len() {
        0 => PciRelation::SameRootComplex { root: groot },
        1 => PciRelation::SameRootPort {
            port: shared[0].clone(),
        },
        _ => PciRelation::SameSwitch {
            bridge: shared[shared.len() - 1].clone(),
        },
    }
}

#[cfg(test)]
mod tests;
