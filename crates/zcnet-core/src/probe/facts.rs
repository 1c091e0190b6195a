//! What the probe weighs: the facts read off the kernel, the process and an interface, and what
//! the `--active` trials found.

/// `NETDEV_XDP_ACT_XSK_ZEROCOPY` (include/uapi/linux/netdev.h, enum netdev_xdp_act: basic 1,
/// redirect 2, ndo-xmit 4, xsk-zerocopy 8, hw-offload 16, rx-sg 32, ndo-xmit-sg 64).
pub const XDP_ACT_XSK_ZEROCOPY: u64 = 1 << 3;

/// What io_uring offers (IORING_REGISTER_PROBE and trial ring setups).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UringFacts {
    /// Why io_uring cannot be used at all (disabled by sysctl, setup refused), if so.
    pub unusable: Option<String>,
    /// IORING_OP_SEND_ZC is supported.
    pub send_zc: bool,
    /// IORING_OP_RECV_ZC is supported.
    pub recv_zc: bool,
    /// A ring with SINGLE_ISSUER | DEFER_TASKRUN | CQE32 (what zcrx needs) can be set up.
    pub zcrx_ring: bool,
}

/// Facts about the kernel and the process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelFacts {
    /// (major, minor) of the running kernel.
    pub version: (u32, u32),
    /// io_uring.
    pub uring: UringFacts,
    /// The process may administer the network (root / CAP_NET_ADMIN).
    pub net_admin: bool,
    /// RLIMIT_MEMLOCK soft limit in bytes (`None`: unlimited).
    pub memlock: Option<u64>,
    /// CAP_IPC_LOCK: pinned memory is not charged to RLIMIT_MEMLOCK.
    pub ipc_lock: bool,
    /// The netdev generic netlink family's operations (`None`: the family is missing).
    pub netdev_ops: Option<Vec<String>>,
    /// AF_XDP sockets can be created.
    pub af_xdp: bool,
    /// The `ethtool` command is installed (found on `PATH`): remedies name it only then.
    pub ethtool_cli: bool,
}

impl KernelFacts {
    /// Whether the netdev family offers operation `op` (e.g. "bind-rx").
    pub fn netdev_has(&self, op: &str) -> bool {
        self.netdev_ops
            .as_ref()
            .is_some_and(|ops| ops.iter().any(|o| o == op))
    }

    pub(super) fn at_least(&self, major: u32, minor: u32) -> bool {
        self.version >= (major, minor)
    }
}

/// What kind of device an interface is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfaceKind {
    /// `lo`.
    Loopback,
    /// One end of a veth pair.
    Veth,
    /// An ifb (intermediate functional block).
    Ifb,
    /// Another software device (tun, bridge, macvlan, ...).
    Virtual,
    /// A device with hardware behind it.
    Physical,
}

impl IfaceKind {
    /// The name used in output and JSON.
    pub fn name(self) -> &'static str {
        match self {
            IfaceKind::Loopback => "loopback",
            IfaceKind::Veth => "veth",
            IfaceKind::Ifb => "ifb",
            IfaceKind::Virtual => "virtual",
            IfaceKind::Physical => "physical",
        }
    }
}

/// Header/data split as ethtool reports it (ETHTOOL_A_RINGS_TCP_DATA_SPLIT).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderSplit {
    /// The driver reports no tcp-data-split (or rings cannot be read): the text says why.
    NotReported(String),
    /// Reported as "unknown" (the driver may split, but does not say).
    Unknown,
    /// Supported, currently off.
    Disabled,
    /// On.
    Enabled,
}

impl HeaderSplit {
    /// The name used in output and JSON.
    pub fn name(&self) -> &'static str {
        match self {
            HeaderSplit::NotReported(_) => "not-reported",
            HeaderSplit::Unknown => "unknown",
            HeaderSplit::Disabled => "off",
            HeaderSplit::Enabled => "on",
        }
    }
}

/// Facts about one interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfaceFacts {
    /// Name.
    pub name: String,
    /// What kind of device.
    pub kind: IfaceKind,
    /// Driver name (ETHTOOL_GDRVINFO), if the device has one.
    pub driver: Option<String>,
    /// xdp-features (netdev family), if it could be read.
    pub xdp_features: Option<u64>,
    /// Number of RX queues.
    pub rx_queues: u32,
    /// Header split.
    pub header_split: HeaderSplit,
    /// HDS threshold (bytes), if reported.
    pub hds_thresh: Option<u32>,
    /// ntuple-filters: `None` not offered by the device, `Some(on)` offered.
    pub ntuple: Option<bool>,
    /// tx-scatter-gather active, if reported.
    pub scatter_gather: Option<bool>,
    /// RX channels as the driver reports them (ethtool channels-get); `None` when it reports
    /// none (lo, ifb: no channel control).
    pub channels: Option<RxChannels>,
}

/// The RX channel counts a driver reports (ETHTOOL_MSG_CHANNELS_GET): what is in use and the
/// most it allows, for RX-only and combined channels. A device's RX queues are `rx + combined`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RxChannels {
    /// RX-only channels in use.
    pub rx: u32,
    /// The most RX-only channels the driver allows.
    pub rx_max: u32,
    /// Combined (RX and TX) channels in use.
    pub combined: u32,
    /// The most combined channels the driver allows.
    pub combined_max: u32,
}

impl IfaceFacts {
    pub(super) fn driver_name(&self) -> &str {
        match (&self.driver, self.kind) {
            (Some(d), _) => d,
            (None, IfaceKind::Loopback) => "loopback",
            (None, _) => "this device",
        }
    }

    pub(super) fn is_software(&self) -> bool {
        self.kind != IfaceKind::Physical
    }

    /// The queue zcnet would use for a trial or a setup: the last RX queue.
    pub fn trial_queue(&self) -> u32 {
        self.rx_queues.saturating_sub(1)
    }
}

/// A refusal from the kernel during an `--active` trial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The errno.
    pub errno: i32,
    /// The error as one line (with the kernel's extack message, if any).
    pub message: String,
}

/// What `--active` trials found (a `None` field was not tried).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trials {
    /// MSG_ZEROCOPY over TCP loopback: fraction of bytes the kernel reported zero-copy.
    pub msg_zerocopy_loopback: Option<Result<f64, Refusal>>,
    /// SEND_ZC over TCP loopback: fraction of bytes the kernel reported zero-copy.
    pub send_zc_loopback: Option<Result<f64, Refusal>>,
    /// Registering a zcrx interface queue on this interface (then releasing it).
    pub zcrx: Option<Result<(), Refusal>>,
    /// netdev bind-rx on this interface (with a probe fd, not a real dma-buf).
    pub devmem_rx: Option<Result<(), Refusal>>,
    /// netdev bind-tx on this interface (with a probe fd).
    pub devmem_tx: Option<Result<(), Refusal>>,
    /// Binding an AF_XDP socket with XDP_COPY on the trial queue.
    pub xsk_copy: Option<Result<(), Refusal>>,
    /// Binding an AF_XDP socket with XDP_ZEROCOPY on the trial queue.
    pub xsk_zerocopy: Option<Result<(), Refusal>>,
}
