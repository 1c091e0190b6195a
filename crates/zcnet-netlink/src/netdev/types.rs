//! The netdev family's reply types and their pure parsers (attribute numbers from
//! include/uapi/linux/netdev.h of Linux 6.18; types from Documentation/netlink/specs/netdev.yaml).
//! Unknown attributes are ignored, so newer kernels parse too.

use crate::error::Result;
use crate::wire::{malformed, Attrs};

// enum netdev_xdp_act (include/uapi/linux/netdev.h).
/// `NETDEV_XDP_ACT_BASIC`: XDP_ABORTED, XDP_DROP, XDP_PASS, XDP_TX.
pub const XDP_ACT_BASIC: u64 = 1;
/// `NETDEV_XDP_ACT_REDIRECT`: XDP_REDIRECT.
pub const XDP_ACT_REDIRECT: u64 = 2;
/// `NETDEV_XDP_ACT_NDO_XMIT`: the driver implements `ndo_xdp_xmit`.
pub const XDP_ACT_NDO_XMIT: u64 = 4;
/// `NETDEV_XDP_ACT_XSK_ZEROCOPY`: AF_XDP zero-copy.
pub const XDP_ACT_XSK_ZEROCOPY: u64 = 8;
/// `NETDEV_XDP_ACT_HW_OFFLOAD`: XDP offloaded to the NIC.
pub const XDP_ACT_HW_OFFLOAD: u64 = 16;
/// `NETDEV_XDP_ACT_RX_SG`: multi-buffer XDP on receive.
pub const XDP_ACT_RX_SG: u64 = 32;
/// `NETDEV_XDP_ACT_NDO_XMIT_SG`: multi-buffer `ndo_xdp_xmit`.
pub const XDP_ACT_NDO_XMIT_SG: u64 = 64;

/// Names of the `xdp-act` flags, bit by bit (Documentation/netlink/specs/netdev.yaml).
pub const XDP_ACT_NAMES: [(u64, &str); 7] = [
    (XDP_ACT_BASIC, "basic"),
    (XDP_ACT_REDIRECT, "redirect"),
    (XDP_ACT_NDO_XMIT, "ndo-xmit"),
    (XDP_ACT_XSK_ZEROCOPY, "xsk-zerocopy"),
    (XDP_ACT_HW_OFFLOAD, "hw-offload"),
    (XDP_ACT_RX_SG, "rx-sg"),
    (XDP_ACT_NDO_XMIT_SG, "ndo-xmit-sg"),
];
/// Names of the `xdp-rx-metadata` flags (`NETDEV_XDP_RX_METADATA_*`).
pub const XDP_RX_METADATA_NAMES: [(u64, &str); 3] =
    [(1, "timestamp"), (2, "hash"), (4, "vlan-tag")];
/// Names of the `xsk-flags` (`NETDEV_XSK_FLAGS_*`).
pub const XSK_FLAG_NAMES: [(u64, &str); 3] = [
    (1, "tx-timestamp"),
    (2, "tx-checksum"),
    (4, "tx-launch-time-fifo"),
];

/// The names of the bits set in `bits`, from `table`; unknown bits as `bit-N`.
pub fn flag_names(bits: u64, table: &[(u64, &'static str)]) -> Vec<String> {
    (0..64)
        .map(|i| 1u64 << i)
        .filter(|b| bits & b != 0)
        .map(|b| match table.iter().find(|(v, _)| *v == b) {
            Some((_, n)) => (*n).to_string(),
            None => format!("bit-{}", b.trailing_zeros()),
        })
        .collect()
}

/// `NETDEV_A_DEV_*`.
pub(crate) mod dev_attr {
    pub const IFINDEX: u16 = 1;
    pub const XDP_FEATURES: u16 = 3;
    pub const XDP_ZC_MAX_SEGS: u16 = 4;
    pub const XDP_RX_METADATA_FEATURES: u16 = 5;
    pub const XSK_FEATURES: u16 = 6;
}

/// A device as dev-get describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DevInfo {
    /// The interface index.
    pub ifindex: u32,
    /// `xdp-features`: `NETDEV_XDP_ACT_*` bits.
    pub xdp_features: u64,
    /// `xdp-zc-max-segs`: fragments per zero-copy XDP buffer (present for ZC drivers).
    pub xdp_zc_max_segs: Option<u32>,
    /// `xdp-rx-metadata-features`: `NETDEV_XDP_RX_METADATA_*` bits.
    pub xdp_rx_metadata_features: u64,
    /// `xsk-features`: `NETDEV_XSK_FLAGS_*` bits.
    pub xsk_features: u64,
}

impl DevInfo {
    /// Parses a dev-get reply (attributes after the genl header).
    pub fn parse(attrs: &[u8]) -> Result<DevInfo> {
        let mut d = DevInfo::default();
        let mut have_index = false;
        for a in Attrs::new(attrs) {
            let a = a?;
            match a.kind() {
                dev_attr::IFINDEX => {
                    d.ifindex = a.u32()?;
                    have_index = true;
                }
                dev_attr::XDP_FEATURES => d.xdp_features = a.u64()?,
                dev_attr::XDP_ZC_MAX_SEGS => d.xdp_zc_max_segs = Some(a.u32()?),
                dev_attr::XDP_RX_METADATA_FEATURES => d.xdp_rx_metadata_features = a.u64()?,
                dev_attr::XSK_FEATURES => d.xsk_features = a.u64()?,
                _ => {}
            }
        }
        if !have_index {
            return Err(malformed("dev-get reply without ifindex"));
        }
        Ok(d)
    }

    /// Whether every bit of `flag` (an `XDP_ACT_*` constant) is set in `xdp_features`.
    pub fn has_xdp(&self, flag: u64) -> bool {
        self.xdp_features & flag == flag
    }

    /// AF_XDP zero-copy support (`xsk-zerocopy`).
    pub fn xsk_zerocopy(&self) -> bool {
        self.has_xdp(XDP_ACT_XSK_ZEROCOPY)
    }

    /// The names of the XDP features, e.g. `["basic", "redirect", "rx-sg"]`.
    pub fn names(&self) -> Vec<String> {
        flag_names(self.xdp_features, &XDP_ACT_NAMES)
    }

    /// The names of the XDP receive-metadata features.
    pub fn rx_metadata_names(&self) -> Vec<String> {
        flag_names(self.xdp_rx_metadata_features, &XDP_RX_METADATA_NAMES)
    }

    /// The names of the AF_XDP features.
    pub fn xsk_names(&self) -> Vec<String> {
        flag_names(self.xsk_features, &XSK_FLAG_NAMES)
    }
}

/// `enum netdev_queue_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueueKind {
    /// `NETDEV_QUEUE_TYPE_RX` (0).
    Rx,
    /// `NETDEV_QUEUE_TYPE_TX` (1).
    Tx,
}

impl QueueKind {
    /// The wire value.
    pub fn value(self) -> u32 {
        match self {
            QueueKind::Rx => 0,
            QueueKind::Tx => 1,
        }
    }

    /// From the wire value.
    pub fn from_value(v: u32) -> Option<QueueKind> {
        match v {
            0 => Some(QueueKind::Rx),
            1 => Some(QueueKind::Tx),
            _ => None,
        }
    }
}

/// `NETDEV_A_QUEUE_*`.
pub(crate) mod queue_attr {
    pub const ID: u16 = 1;
    pub const IFINDEX: u16 = 2;
    pub const TYPE: u16 = 3;
    pub const NAPI_ID: u16 = 4;
    pub const DMABUF: u16 = 5;
    pub const IO_URING: u16 = 6;
    pub const XSK: u16 = 7;
}

/// A queue as queue-get describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueInfo {
    /// Queue index within its kind.
    pub id: u32,
    /// RX or TX.
    pub kind: QueueKind,
    /// The device.
    pub ifindex: u32,
    /// The NAPI instance serving it, if the driver links them.
    pub napi_id: Option<u32>,
    /// The id of the dma-buf binding on it (devmem TCP), if any.
    pub dmabuf: Option<u32>,
    /// An io_uring zero-copy receive queue is attached (`io-uring` nest present).
    pub io_uring: bool,
    /// An AF_XDP socket is bound (`xsk` nest present).
    pub xsk: bool,
}

impl QueueInfo {
    /// Parses a queue-get reply.
    pub fn parse(attrs: &[u8]) -> Result<QueueInfo> {
        let (mut id, mut kind, mut ifindex) = (None, None, None);
        let mut q = QueueInfo {
            id: 0,
            kind: QueueKind::Rx,
            ifindex: 0,
            napi_id: None,
            dmabuf: None,
            io_uring: false,
            xsk: false,
        };
        for a in Attrs::new(attrs) {
            let a = a?;
            match a.kind() {
                queue_attr::ID => id = Some(a.u32()?),
                queue_attr::IFINDEX => ifindex = Some(a.u32()?),
                queue_attr::TYPE => {
                    let v = a.u32()?;
                    kind = Some(
                        QueueKind::from_value(v)
                            .ok_or_else(|| malformed(format!("queue type {v}")))?,
                    );
                }
                queue_attr::NAPI_ID => q.napi_id = Some(a.u32()?),
                queue_attr::DMABUF => q.dmabuf = Some(a.u32()?),
                queue_attr::IO_URING => q.io_uring = true,
                queue_attr::XSK => q.xsk = true,
                _ => {}
            }
        }
        match (id, kind, ifindex) {
            (Some(i), Some(k), Some(x)) => {
                q.id = i;
                q.kind = k;
                q.ifindex = x;
                Ok(q)
            }
            _ => Err(malformed("queue-get reply without id, type or ifindex")),
        }
    }
}

/// `enum netdev_napi_threaded` (Linux 6.17).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NapiThreaded {
    /// Softirq polling.
    Disabled,
    /// A kernel thread polls.
    Enabled,
    /// A kernel thread busy-polls (Linux 6.19).
    BusyPoll,
    /// A value this crate does not know.
    Other(u32),
}

/// `NETDEV_A_NAPI_*`.
pub(crate) mod napi_attr {
    pub const IFINDEX: u16 = 1;
    pub const ID: u16 = 2;
    pub const IRQ: u16 = 3;
    pub const PID: u16 = 4;
    pub const DEFER_HARD_IRQS: u16 = 5;
    pub const GRO_FLUSH_TIMEOUT: u16 = 6;
    pub const IRQ_SUSPEND_TIMEOUT: u16 = 7;
    pub const THREADED: u16 = 8;
}

/// A NAPI instance as napi-get describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NapiInfo {
    /// NAPI id (what `SO_INCOMING_NAPI_ID` reports).
    pub id: u32,
    /// The device.
    pub ifindex: u32,
    /// The interrupt vector, if the driver set one.
    pub irq: Option<u32>,
    /// The polling thread's pid, in threaded mode.
    pub pid: Option<u32>,
    /// Empty polls before hard IRQs are re-enabled.
    pub defer_hard_irqs: Option<u32>,
    /// GRO flush timeout in ns.
    pub gro_flush_timeout: Option<u64>,
    /// IRQ suspend timeout in ns.
    pub irq_suspend_timeout: Option<u64>,
    /// Threaded mode.
    pub threaded: Option<NapiThreaded>,
}

impl NapiInfo {
    /// Parses a napi-get reply.
    pub fn parse(attrs: &[u8]) -> Result<NapiInfo> {
        let (mut id, mut ifindex) = (None, None);
        let mut n = NapiInfo {
            id: 0,
            ifindex: 0,
            irq: None,
            pid: None,
            defer_hard_irqs: None,
            gro_flush_timeout: None,
            irq_suspend_timeout: None,
            threaded: None,
        };
        for a in Attrs::new(attrs) {
            let a = a?;
            match a.kind() {
                napi_attr::IFINDEX => ifindex = Some(a.u32()?),
                napi_attr::ID => id = Some(a.u32()?),
                napi_attr::IRQ => n.irq = Some(a.u32()?),
                napi_attr::PID => n.pid = Some(a.u32()?),
                napi_attr::DEFER_HARD_IRQS => n.defer_hard_irqs = Some(a.u32()?),
                napi_attr::GRO_FLUSH_TIMEOUT => n.gro_flush_timeout = Some(a.uint()?),
                napi_attr::IRQ_SUSPEND_TIMEOUT => n.irq_suspend_timeout = Some(a.uint()?),
                napi_attr::THREADED => {
                    n.threaded = Some(match a.u32()? {
                        0 => NapiThreaded::Disabled,
                        1 => NapiThreaded::Enabled,
                        2 => NapiThreaded::BusyPoll,
                        v => NapiThreaded::Other(v),
                    })
                }
                _ => {}
            }
        }
        match (id, ifindex) {
            (Some(i), Some(x)) => {
                n.id = i;
                n.ifindex = x;
                Ok(n)
            }
            _ => Err(malformed("napi-get reply without id or ifindex")),
        }
    }
}

/// `NETDEV_A_PAGE_POOL_*`.
pub(crate) mod pp_attr {
    pub const ID: u16 = 1;
    pub const IFINDEX: u16 = 2;
    pub const NAPI_ID: u16 = 3;
    pub const INFLIGHT: u16 = 4;
    pub const INFLIGHT_MEM: u16 = 5;
    pub const DETACH_TIME: u16 = 6;
    pub const DMABUF: u16 = 7;
    pub const IO_URING: u16 = 8;
}

/// A page pool as page-pool-get describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PagePoolInfo {
    /// Pool id.
    pub id: u64,
    /// The device; absent (or 0) once the device is gone.
    pub ifindex: Option<u32>,
    /// The NAPI instance using it.
    pub napi_id: Option<u64>,
    /// Pages allocated and not yet returned.
    pub inflight: Option<u64>,
    /// Bytes held by those pages.
    pub inflight_mem: Option<u64>,
    /// CLOCK_BOOTTIME seconds when the driver detached it; absent while in use.
    pub detach_time: Option<u64>,
    /// The dma-buf binding providing its memory (devmem TCP).
    pub dmabuf: Option<u32>,
    /// Memory comes from io_uring zero-copy receive.
    pub io_uring: bool,
}

impl PagePoolInfo {
    /// Parses a page-pool-get reply.
    pub fn parse(attrs: &[u8]) -> Result<PagePoolInfo> {
        let mut id = None;
        let mut p = PagePoolInfo {
            id: 0,
            ifindex: None,
            napi_id: None,
            inflight: None,
            inflight_mem: None,
            detach_time: None,
            dmabuf: None,
            io_uring: false,
        };
        for a in Attrs::new(attrs) {
            let a = a?;
            match a.kind() {
                pp_attr::ID => id = Some(a.uint()?),
                pp_attr::IFINDEX => p.ifindex = Some(a.u32()?),
                pp_attr::NAPI_ID => p.napi_id = Some(a.uint()?),
                pp_attr::INFLIGHT => p.inflight = Some(a.uint()?),
                pp_attr::INFLIGHT_MEM => p.inflight_mem = Some(a.uint()?),
                pp_attr::DETACH_TIME => p.detach_time = Some(a.uint()?),
                pp_attr::DMABUF => p.dmabuf = Some(a.u32()?),
                pp_attr::IO_URING => p.io_uring = true,
                _ => {}
            }
        }
        p.id = id.ok_or_else(|| malformed("page-pool-get reply without id"))?;
        Ok(p)
    }
}
