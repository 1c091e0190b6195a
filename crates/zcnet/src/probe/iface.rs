//! Reading an interface: sysfs for the list and flags, the netdev family for XDP features,
//! queues, NAPI and bindings, ethtool netlink for rings, channels, features and RSS, the
//! ethtool ioctl for the driver name. Each read that fails becomes a note, not an error.

use zcnet_core::probe::{HeaderSplit, IfaceFacts, IfaceKind, Trials};
use zcnet_netlink::ethtool::{Dev, Ethtool, TcpDataSplit};
use zcnet_netlink::netdev::{Netdev, QueueKind};
use zcnet_netlink::ntuple;

use super::IfaceReport;
use crate::{Error, Result};

/// `IFF_UP` and `IFF_LOOPBACK` (include/uapi/linux/if.h).
const IFF_UP: u32 = 0x1;
const IFF_LOOPBACK: u32 = 0x8;

fn sys(name: &str, file: &str) -> Option<String> {
    std::fs::read_to_string(format!("/sys/class/net/{name}/{file}"))
        .ok()
        .map(|s| s.trim().to_string())
}

fn flags(name: &str) -> u32 {
    sys(name, "flags")
        .and_then(|f| u32::from_str_radix(f.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0)
}

/// Interfaces of this network namespace as (name, ifindex), in ifindex order.
pub(super) fn list() -> Result<Vec<(String, u32)>> {
    let dir =
        std::fs::read_dir("/sys/class/net").map_err(|e| Error::io("listing /sys/class/net", e))?;
    let mut v: Vec<(String, u32)> = dir
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let idx = sys(&name, "ifindex")?.parse().ok()?;
            Some((name, idx))
        })
        .collect();
    v.sort_by_key(|(_, i)| *i);
    Ok(v)
}

/// Number of RX queues the kernel set up (`real_num_rx_queues`, as sysfs lists them).
pub(crate) fn sysfs_rx_queues(name: &str) -> u32 {
    std::fs::read_dir(format!("/sys/class/net/{name}/queues"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count() as u32
        })
        .unwrap_or(0)
}

/// The two netlink families, opened once per probe and shared by every interface (each open
/// resolves the family through nlctrl); `Err` holds why one is unusable.
pub(super) struct Families {
    pub(super) netdev: std::result::Result<Netdev, String>,
    pub(super) ethtool: std::result::Result<Ethtool, String>,
}

impl Families {
    pub(super) fn open() -> Families {
        Families {
            netdev: Netdev::open().map_err(|e| e.to_string()),
            ethtool: Ethtool::open().map_err(|e| e.to_string()),
        }
    }

    /// The netdev family's operations by name.
    pub(super) fn netdev_ops(&self) -> std::result::Result<Vec<String>, String> {
        self.netdev
            .as_ref()
            .map(Netdev::op_names)
            .map_err(Clone::clone)
    }

    /// The ethtool netlink family's version.
    pub(super) fn ethtool_version(&self) -> std::result::Result<u32, String> {
        self.ethtool
            .as_ref()
            .map(|e| e.family().version)
            .map_err(Clone::clone)
    }
}

fn kind(name: &str, flags: u32, driver: Option<&str>) -> IfaceKind {
    if flags & IFF_LOOPBACK != 0 {
        return IfaceKind::Loopback;
    }
    match driver {
        Some("veth") => IfaceKind::Veth,
        Some("ifb") => IfaceKind::Ifb,
        // A device with hardware (or a hypervisor's virtual NIC) behind it has a bus device.
        _ if std::path::Path::new(&format!("/sys/class/net/{name}/device")).exists() => {
            IfaceKind::Physical
        }
        _ => IfaceKind::Virtual,
    }
}

/// Reads everything the probe reports about one interface.
pub(super) fn gather(name: &str, ifindex: u32, fam: &mut Families) -> IfaceReport {
    let mut notes = Vec::new();
    let flags = flags(name);
    let driver = ntuple::driver_info(name)
        .ok()
        .map(|d| d.driver)
        .filter(|d| !d.is_empty());
    let kind = kind(name, flags, driver.as_deref());
    let mut r = IfaceReport {
        name: name.to_string(),
        ifindex,
        up: flags & IFF_UP != 0,
        queues: Vec::new(),
        napi_ids: Vec::new(),
        xdp_features: Vec::new(),
        xsk_features: Vec::new(),
        hds_thresh_max: None,
        channels: Vec::new(),
        rss_contexts: None,
        bindings: Vec::new(),
        notes: Vec::new(),
        facts: IfaceFacts {
            name: name.to_string(),
            kind,
            driver,
            xdp_features: None,
            rx_queues: sysfs_rx_queues(name),
            header_split: HeaderSplit::NotReported("not read".into()),
            hds_thresh: None,
            ntuple: None,
            scatter_gather: None,
        },
        trials: Trials::default(),
        mechanisms: Vec::new(),
    };
    if let Ok(nd) = &mut fam.netdev {
        netdev_facts(nd, &mut r, &mut notes);
    }
    match &mut fam.ethtool {
        Ok(et) => ethtool_facts(et, &mut r, &mut notes),
        Err(e) => {
            r.facts.header_split = HeaderSplit::NotReported(format!("no ethtool netlink: {e}"));
            notes.push(format!("ethtool netlink: {e}"));
        }
    }
    r.notes = notes;
    r
}

fn netdev_facts(nd: &mut Netdev, r: &mut IfaceReport, notes: &mut Vec<String>) {
    match nd.dev_get(r.ifindex) {
        Ok(d) => {
            r.facts.xdp_features = Some(d.xdp_features);
            r.xdp_features = d.names();
            r.xsk_features = d.xsk_names();
        }
        Err(e) => notes.push(format!("dev-get: {e}")),
    }
    match nd.queue_dump(r.ifindex) {
        Ok(qs) => {
            let mut rx = 0;
            for q in &qs {
                let t = match q.kind {
                    QueueKind::Rx => {
                        rx += 1;
                        "rx"
                    }
                    QueueKind::Tx => "tx",
                };
                r.queues.push((t, q.id, q.napi_id));
                if let Some(fd) = q.dmabuf {
                    r.bindings
                        .push(format!("{t} queue {}: dma-buf binding {fd}", q.id));
                }
                if q.io_uring {
                    r.bindings
                        .push(format!("{t} queue {}: io_uring zcrx", q.id));
                }
                if q.xsk {
                    r.bindings
                        .push(format!("{t} queue {}: AF_XDP socket", q.id));
                }
            }
            if rx > 0 {
                r.facts.rx_queues = rx;
            }
        }
        Err(e) => notes.push(format!("queue-get: {e}")),
    }
    if !r.up {
        notes.push("down: the kernel lists no queues or NAPI instances of a down device".into());
    }
    match nd.napi_dump(r.ifindex) {
        Ok(ns) => r.napi_ids = ns.iter().map(|n| n.id).collect(),
        Err(e) => notes.push(format!("napi-get: {e}")),
    }
    if let Ok(pools) = nd.page_pool_dump() {
        for p in pools.iter().filter(|p| p.ifindex == Some(r.ifindex)) {
            if let Some(b) = p.dmabuf {
                r.bindings
                    .push(format!("page pool {}: dma-buf binding {b}", p.id));
            }
            if p.io_uring {
                r.bindings
                    .push(format!("page pool {}: io_uring zcrx", p.id));
            }
        }
    }
}

fn ethtool_facts(et: &mut Ethtool, r: &mut IfaceReport, notes: &mut Vec<String>) {
    let dev = Dev::Index(r.ifindex);
    r.facts.header_split = match et.rings_get(dev) {
        Ok(rings) => {
            r.facts.hds_thresh = rings.hds_thresh;
            r.hds_thresh_max = rings.hds_thresh_max;
            match rings.tcp_data_split {
                None => HeaderSplit::NotReported("the driver reports no tcp-data-split".into()),
                Some(TcpDataSplit::Enabled) => HeaderSplit::Enabled,
                Some(TcpDataSplit::Disabled) => HeaderSplit::Disabled,
                Some(_) => HeaderSplit::Unknown,
            }
        }
        Err(e) => HeaderSplit::NotReported(format!("rings-get: {e}")),
    };
    match et.channels_get(dev) {
        Ok(c) => {
            for (n, cur, max) in [
                ("rx", c.rx_count, c.rx_max),
                ("tx", c.tx_count, c.tx_max),
                ("other", c.other_count, c.other_max),
                ("combined", c.combined_count, c.combined_max),
            ] {
                if cur.unwrap_or(0) > 0 || max.unwrap_or(0) > 0 {
                    r.channels.push((n, cur.unwrap_or(0), max.unwrap_or(0)));
                }
            }
        }
        Err(e) => note(notes, "channels", &e),
    }
    match et.features_get(dev) {
        Ok(f) => {
            r.facts.ntuple = f
                .feature("ntuple-filters")
                .filter(|x| x.changeable || x.active)
                .map(|x| x.active);
            r.facts.scatter_gather = f.is_active("tx-scatter-gather");
        }
        Err(e) => note(notes, "features", &e),
    }
    if r.facts.ntuple.is_some() || r.facts.kind == IfaceKind::Physical {
        match et.rss_dump(Some(dev)) {
            Ok(ctxs) => r.rss_contexts = Some(ctxs.iter().filter(|c| c.context != 0).count()),
            Err(e) => note(notes, "rss", &e),
        }
    }
}

/// Notes a failed read, unless it only says the device has no such thing (EOPNOTSUPP).
fn note(notes: &mut Vec<String>, what: &str, e: &zcnet_netlink::Error) {
    if e.errno() != Some(libc::EOPNOTSUPP) {
        notes.push(format!("{what}: {e}"));
    }
}
