//! The probe's judgement: from what was read off the machine (and, with an active probe, what
//! the kernel answered when each mechanism was tried), a verdict per mechanism with the reason
//! and the remedy as a [`Text`]: an OS command (`sysctl`, `ethtool -K`) as it is, zcnet's own
//! NIC changes as typed calls ([`Call::SetChannels`], [`Call::NicSetup`]) and its settings as
//! fields, which each front end says in its own words (the `zcnet` command as its commands).
//!
//! Pure: the facts are gathered by the facade (`zcnet::probe`) through netlink, ioctls and
//! trial registrations; here they are only weighed, so every rule is tested with made-up
//! machines (a veth, an mlx5 with header split off, an old kernel, ...).
//!
//! Sources for the rules: Documentation/networking/iou-zcrx.rst and devmem.rst (header split
//! on, hds-thresh 0, a queue with queue-management ops, flow steering), msg_zerocopy.rst
//! (loopback and local delivery copy: `skb_orphan_frags_rx`), af_xdp.rst (XDP_COPY works on
//! every device through generic XDP; XDP_ZEROCOPY needs driver support, advertised as
//! NETDEV_XDP_ACT_XSK_ZEROCOPY in the netdev family's xdp-features).

use crate::text::{Call, Field, IfName, Text};
use std::fmt;

pub mod gpu;
pub mod xsk;

/// Linux errno values the rules look at (asm-generic/errno-base.h, errno.h; the same on x86,
/// arm64, riscv).
pub mod errno {
    /// Operation not permitted.
    pub const EPERM: i32 = 1;
    /// Bad file descriptor.
    pub const EBADF: i32 = 9;
    /// Out of memory (also: RLIMIT_MEMLOCK exceeded when pinning).
    pub const ENOMEM: i32 = 12;
    /// Device or resource busy.
    pub const EBUSY: i32 = 16;
    /// File exists (a queue that already has a memory provider or socket bound).
    pub const EEXIST: i32 = 17;
    /// No such device.
    pub const ENODEV: i32 = 19;
    /// Invalid argument.
    pub const EINVAL: i32 = 22;
    /// Operation not supported.
    pub const EOPNOTSUPP: i32 = 95;
    /// Address family not supported by protocol (no AF_XDP in the kernel).
    pub const EAFNOSUPPORT: i32 = 97;
    /// No buffer space available.
    pub const ENOBUFS: i32 = 105;
}

/// `NETDEV_XDP_ACT_XSK_ZEROCOPY` (include/uapi/linux/netdev.h, enum netdev_xdp_act: basic 1,
/// redirect 2, ndo-xmit 4, xsk-zerocopy 8, hw-offload 16, rx-sg 32, ndo-xmit-sg 64).
pub const XDP_ACT_XSK_ZEROCOPY: u64 = 1 << 3;

/// Drivers that set `netdev->netmem_tx` (devmem TX) as of Linux 6.18: mlx5, bnxt, gve (DQO
/// queue format only). Used only when the probe is not `--active`; `--active` asks the kernel.
const NETMEM_TX_DRIVERS: &[&str] = &["mlx5_core", "bnxt_en", "gve"];

/// A zero-copy (or copying) mechanism the probe judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mechanism {
    /// send()/recv(): the baseline; always copies.
    Copy,
    /// `MSG_ZEROCOPY` sends with error-queue notifications.
    MsgZerocopy,
    /// io_uring `SEND_ZC`.
    UringZc,
    /// io_uring zero-copy receive into a registered area.
    Zcrx,
    /// devmem TCP receive into a dma-buf bound to RX queues.
    DevmemRx,
    /// devmem TCP transmit from a dma-buf.
    DevmemTx,
    /// AF_XDP in copy mode.
    AfXdpCopy,
    /// AF_XDP zero-copy mode.
    AfXdpZerocopy,
}

impl Mechanism {
    /// Every mechanism, in report order.
    pub const ALL: [Mechanism; 8] = [
        Mechanism::Copy,
        Mechanism::MsgZerocopy,
        Mechanism::UringZc,
        Mechanism::Zcrx,
        Mechanism::DevmemRx,
        Mechanism::DevmemTx,
        Mechanism::AfXdpCopy,
        Mechanism::AfXdpZerocopy,
    ];

    /// The name used in output and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Copy => "copy",
            Mechanism::MsgZerocopy => "msg-zerocopy",
            Mechanism::UringZc => "uring-zc",
            Mechanism::Zcrx => "zcrx",
            Mechanism::DevmemRx => "devmem-rx",
            Mechanism::DevmemTx => "devmem-tx",
            Mechanism::AfXdpCopy => "af-xdp-copy",
            Mechanism::AfXdpZerocopy => "af-xdp-zerocopy",
        }
    }
}

/// What the probe concludes about one mechanism on one interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Works, and the kernel moves the payload without copying it.
    ZeroCopy,
    /// Works, but the kernel copies (loopback, veth, copy mode).
    Copies,
    /// Does not work here.
    Unsupported,
}

impl Verdict {
    /// The name used in output and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::ZeroCopy => "zero-copy",
            Verdict::Copies => "copies",
            Verdict::Unsupported => "unsupported",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A verdict with its reason and, where one exists, the remedy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The verdict.
    pub verdict: Verdict,
    /// Why, in plain words, its terms typed ([`crate::text`](mod@crate::text)).
    pub reason: Text,
    /// What to run to get zero copy, if anything would, its calls and settings typed.
    pub remedy: Option<Text>,
    /// Whether the verdict was confirmed by trying the mechanism (`--active`).
    pub confirmed: bool,
}

impl Finding {
    fn new(verdict: Verdict, reason: impl Into<Text>) -> Finding {
        Finding {
            verdict,
            reason: reason.into(),
            remedy: None,
            confirmed: false,
        }
    }

    fn remedy(mut self, r: impl Into<Text>) -> Finding {
        self.remedy = Some(r.into());
        self
    }
}

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

    fn at_least(&self, major: u32, minor: u32) -> bool {
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

/// How interface `name` can get at least `need` RX queues, as the channel change that works on
/// this machine ([`Call::SetChannels`], which a front end says as its own command; `Ok`), or
/// why there is none (`Err`).
/// Only a driver that reports channels it can change (max above current) can get more: lo and
/// ifb report none, so nothing can add a queue to them. The change is made over ethtool netlink,
/// so it needs no other tool; `ethtool -L` is named beside it only when `ethtool_cli` says it is
/// installed.
pub fn add_rx_queues(
    name: &str,
    need: u32,
    ch: Option<&RxChannels>,
    ethtool_cli: bool,
) -> Result<Text, String> {
    let (kind, want) = rx_queue_plan(name, need, ch)?;
    let ethtool = if ethtool_cli {
        format!(" (or: ethtool -L {name} {kind} {want})")
    } else {
        " (ethtool is not installed; this uses the same ethtool netlink request)".to_string()
    };
    Ok(crate::text!(
        Call::SetChannels {
            iface: Some(IfName::new(name)),
            change: Some((kind, want)),
        },
        ethtool
    ))
}

/// The set-up that turns header split on for zero-copy receive on `i` and steers a flow to its
/// trial queue ([`Call::NicSetup`], which a front end says as its own command): the remedy
/// [`rx_device_rules`] gives for header split that is off or not at 0.
pub fn setup_command(i: &IfaceFacts) -> Text {
    Text::from(Call::NicSetup {
        iface: Some(IfName::new(&i.name)),
        queue: Some(i.trial_queue()),
    })
}

/// The channel change that gives `name` `need` RX queues: the kind of channel to set
/// ("combined" where the driver has them, else "rx") and its count, or why no change can.
pub fn rx_queue_plan(
    name: &str,
    need: u32,
    ch: Option<&RxChannels>,
) -> Result<(&'static str, u32), String> {
    let Some(c) = ch.filter(|c| c.rx_max > 0 || c.combined_max > 0) else {
        return Err(format!(
            "{name} reports no channels that could be changed (its driver has no channel \
             control), so no command can give it more RX queues"
        ));
    };
    // Combined channels where the driver has them (most NICs), else RX-only ones (veth).
    let (kind, other, cur, max) = if c.combined_max > 0 {
        ("combined", c.rx, c.combined, c.combined_max)
    } else {
        ("rx", c.combined, c.rx, c.rx_max)
    };
    let want = need.saturating_sub(other);
    if want > max || max <= cur {
        return Err(format!(
            "{name} allows at most {} RX queue(s) ({kind} channels: {cur} in use, at most \
             {max}), so no command can give it {need}",
            other + max
        ));
    }
    Ok((kind, want))
}

impl IfaceFacts {
    fn driver_name(&self) -> &str {
        match (&self.driver, self.kind) {
            (Some(d), _) => d,
            (None, IfaceKind::Loopback) => "loopback",
            (None, _) => "this device",
        }
    }

    fn is_software(&self) -> bool {
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

/// Judges every mechanism on one interface.
pub fn judge(k: &KernelFacts, i: &IfaceFacts, t: &Trials) -> Vec<(Mechanism, Finding)> {
    Mechanism::ALL
        .iter()
        .map(|&m| (m, judge_one(m, k, i, t)))
        .collect()
}

/// Judges one mechanism on one interface.
pub fn judge_one(m: Mechanism, k: &KernelFacts, i: &IfaceFacts, t: &Trials) -> Finding {
    match m {
        Mechanism::Copy => Finding::new(
            Verdict::Copies,
            "send()/recv() copy every byte between user memory and the kernel",
        ),
        Mechanism::MsgZerocopy => send_path(m, k, i, t.msg_zerocopy_loopback.as_ref()),
        Mechanism::UringZc => send_path(m, k, i, t.send_zc_loopback.as_ref()),
        Mechanism::Zcrx => zcrx(k, i, t.zcrx.as_ref()),
        Mechanism::DevmemRx => devmem_rx(k, i, t.devmem_rx.as_ref()),
        Mechanism::DevmemTx => devmem_tx(k, i, t.devmem_tx.as_ref()),
        Mechanism::AfXdpCopy => xsk_copy(k, i, t.xsk_copy.as_ref()),
        Mechanism::AfXdpZerocopy => xsk_zerocopy(k, i, t.xsk_zerocopy.as_ref()),
    }
}

const UPGRADE: &str = "upgrade the kernel";

/// Why the path through this interface copies, if it does (software devices deliver locally).
/// The words do not name the device, so that the report can say them once for all of them.
/// They say the protocol: the verdict is TCP's (a stream always ends in a socket), while UDP
/// that no socket on this host receives is not copied (the ifb sink of `bench tx`).
/// A dummy device leaves none: it delivers nothing (see [`is_dummy`]).
fn local_delivery(i: &IfaceFacts) -> Option<String> {
    match i.kind {
        IfaceKind::Physical => None,
        _ if is_dummy(i) => None,
        _ => Some(
            "TCP: a stream through lo, veth or another software device ends in a socket on this \
             host: the kernel copies the pages (skb_orphan_frags_rx) and reports COPIED (so does \
             UDP delivered to a socket here)"
                .to_string(),
        ),
    }
}

/// A dummy device (driver `dummy`, drivers/net/dummy.c): a software device (no queue-management
/// ops, no netmem TX: no zcrx or devmem) whose transmit, `dummy_xmit`, counts each skb and frees
/// it (`dev_kfree_skb`) without reading or copying its pages. So a zero-copy send routed through
/// it completes without a COPIED report (`zcnet bench tx --path dummy` measures 100 % zero copy
/// on Linux 7.2), and nothing comes back: no socket receives it and TCP reaches no peer.
fn is_dummy(i: &IfaceFacts) -> bool {
    i.kind == IfaceKind::Virtual && i.driver.as_deref() == Some("dummy")
}

/// The send verdict's words for a dummy device (see [`is_dummy`]).
fn dummy_send(what: &str) -> String {
    format!(
        "UDP: {what} sends routed through a dummy device are zero copy: the dummy driver frees \
         each skb without copying its pages (dummy_xmit), so the kernel reports no COPIED; \
         TCP through it reaches no peer (it drops every packet)"
    )
}

/// The remedy of [`local_delivery`]: what is zero copy, for which protocol.
const LOCAL_DELIVERY_FIX: &str = "TCP zero copy needs a path that leaves through a NIC; UDP that \
     no socket on this host receives is not copied: UDP sent into an ifb device that drops it \
     is 100 % zero-copy";

fn send_path(
    m: Mechanism,
    k: &KernelFacts,
    i: &IfaceFacts,
    trial: Option<&Result<f64, Refusal>>,
) -> Finding {
    let (what, min) = match m {
        Mechanism::MsgZerocopy => ("MSG_ZEROCOPY", (4, 14)),
        _ => ("io_uring SEND_ZC", (6, 0)),
    };
    if m == Mechanism::UringZc {
        if let Some(why) = &k.uring.unusable {
            return Finding::new(
                Verdict::Unsupported,
                format!("TCP and UDP: io_uring is unusable: {why}"),
            )
            .remedy("sysctl -w kernel.io_uring_disabled=0");
        }
        if !k.uring.send_zc {
            return Finding::new(
                Verdict::Unsupported,
                "TCP and UDP: the kernel has no IORING_OP_SEND_ZC (Linux 6.0 or newer)",
            )
            .remedy(UPGRADE);
        }
    } else if !k.at_least(min.0, min.1) {
        return Finding::new(
            Verdict::Unsupported,
            "TCP and UDP: the kernel has no MSG_ZEROCOPY (Linux 4.14 or newer)",
        )
        .remedy(UPGRADE);
    }
    // The trial runs over TCP loopback only: it confirms a verdict for `lo` alone. For any other
    // interface it is evidence about the mechanism, never a confirmation of that path.
    let over_this = i.kind == IfaceKind::Loopback;
    // A failed loopback trial is the verdict for `lo`; for another device it says nothing
    // about the path through it (lo may be down in this namespace, memlock may be short): the
    // inferred verdict stands, unconfirmed, with the failure beside it.
    let mut loopback_failed = None;
    if let Some(Err(r)) = trial.filter(|r| !matches!(r, Err(r) if r.errno == errno::EPERM)) {
        if over_this {
            let mut f = Finding::new(
                Verdict::Unsupported,
                format!("TCP: {what} over loopback failed: {}", r.message),
            );
            f.confirmed = true;
            return f;
        }
        loopback_failed = Some(format!(
            " (not confirmed: {what} over loopback failed: {}; the trial runs over TCP loopback, not over this device)",
            r.message
        ));
    }
    let mut f = match local_delivery(i) {
        Some(why) => Finding::new(Verdict::Copies, why).remedy(LOCAL_DELIVERY_FIX),
        None if i.scatter_gather == Some(false) => Finding::new(
            Verdict::Copies,
            format!("TCP and UDP: scatter-gather is off on {}: the stack linearizes (copies) each payload", i.name),
        )
        .remedy(if k.ethtool_cli {
            format!("ethtool -K {} sg on", i.name)
        } else {
            format!("install ethtool (it is not installed here), then: ethtool -K {} sg on", i.name)
        }),
        None if is_dummy(i) => Finding::new(Verdict::ZeroCopy, dummy_send(what)),
        None => Finding::new(
            Verdict::ZeroCopy,
            format!(
                "TCP and UDP: {what} sends from pinned user pages through {} (scatter-gather on); the kernel's COPIED reports say per flow what was copied",
                i.driver_name()
            ),
        ),
    };
    if let Some(Ok(frac)) = trial {
        let pct = (frac * 100.0).round();
        if over_this {
            // The trial ran over exactly this path: its answer is the verdict.
            f.verdict = if *frac >= 0.5 {
                Verdict::ZeroCopy
            } else {
                Verdict::Copies
            };
            f.reason = format!(
                "tried {what} over TCP loopback: the kernel reported {pct}% of bytes zero-copy"
            )
            .into();
            f.confirmed = true;
        } else {
            // Evidence that the mechanism works in this kernel, not a trial over this device.
            f.reason.push_str(&format!(
                " ({what} works over TCP loopback, where the trial ran; not tried over this device)"
            ));
        }
    }
    if let Some(note) = loopback_failed {
        f.reason.push_str(&note);
        f.confirmed = false;
    }
    f
}

/// The header-split rules shared by zcrx and devmem RX (iou-zcrx.rst, devmem.rst): the driver
/// must split headers, hds-thresh must be 0, and the queue's flow must be steered to it.
///
/// These are the device's own requirements, whoever asks: a refusal here is one root gets too.
/// `Unsupported` without a remedy means no change to this device would do (a software device,
/// no header split reported, no way to add the second queue); with one, a configuration
/// change (which needs root) would. `what` names the mechanism ("zcrx", "devmem TCP").
/// `ethtool_cli`: the `ethtool` command is installed ([`KernelFacts::ethtool_cli`]).
pub fn rx_device_rules(i: &IfaceFacts, what: &str, ethtool_cli: bool) -> Finding {
    let name = &i.name;
    if i.is_software() {
        return Finding::new(
            Verdict::Unsupported,
            format!(
                "software devices have no queue-management ops and no header split; {what} \
                 needs a NIC driver with both (bnxt, mlx5, gve, fbnic)"
            ),
        );
    }
    let setup = setup_command(i);
    match &i.header_split {
        HeaderSplit::NotReported(why) => Finding::new(
            Verdict::Unsupported,
            format!("{} does not report header split ({why}); {what} needs it", i.driver_name()),
        ),
        HeaderSplit::Unknown | HeaderSplit::Disabled => Finding::new(
            Verdict::Unsupported,
            format!("header split is off on {name}; {what} needs tcp-data-split on and hds-thresh 0"),
        )
        // zcnet's own command rather than `ethtool -G`: it needs no other tool, and ethtool
        // before 6.3 (Debian bookworm's 6.1) does not know tcp-data-split or hds-thresh.
        .remedy(setup.clone()),
        HeaderSplit::Enabled if i.hds_thresh.unwrap_or(0) != 0 => Finding::new(
            Verdict::Unsupported,
            format!(
                "hds-thresh is {} on {name}: payloads under it land in header buffers; {what} needs 0",
                i.hds_thresh.unwrap_or(0)
            ),
        )
        .remedy(setup.clone()),
        HeaderSplit::Enabled if i.rx_queues < 2 => {
            let reason = format!(
                "{name} has one RX queue; {what} takes a queue out of RSS, so it needs two or more"
            );
            match add_rx_queues(name, 2, i.channels.as_ref(), ethtool_cli) {
                Ok(cmd) => Finding::new(Verdict::Unsupported, reason).remedy(cmd),
                Err(none) => Finding::new(Verdict::Unsupported, format!("{reason}: {none}")),
            }
        }
        HeaderSplit::Enabled => {
            let mut f = Finding::new(
                Verdict::ZeroCopy,
                format!("header split is on, hds-thresh 0: {what} can own RX queue {}", i.trial_queue()),
            );
            if i.ntuple != Some(true) {
                f.reason.push_str("; flows must still be steered to that queue");
                f.remedy = Some(match i.ntuple {
                    None => format!(
                        "{name} has no ntuple filters: steer with RSS (ethtool -X {name} ...) or pick the queue the flow hashes to"
                    ).into(),
                    // `nic setup --port` turns ntuple-filters on itself.
                    Some(_) => setup,
                });
            }
            f
        }
    }
}

/// Applies an `--active` trial result: success confirms zero copy, a refusal is the verdict
/// with the kernel's words, other errors mean "the device would, the probe fd would not".
fn apply_trial(mut f: Finding, trial: Option<&Result<(), Refusal>>, tried: &str) -> Finding {
    match trial {
        None => f,
        Some(Err(r)) if r.errno == errno::EPERM => not_permitted(f, tried, r),
        Some(Err(r)) if r.errno == errno::EBUSY || r.errno == errno::EEXIST => {
            queue_busy(f, tried, r)
        }
        Some(Ok(())) => {
            f.verdict = Verdict::ZeroCopy;
            f.reason = format!("{tried} worked (and was undone)").into();
            f.remedy = None;
            f.confirmed = true;
            f
        }
        // Refused as the inferred finding said it would be, for a reason a change to the
        // device's configuration removes (header split off, hds-thresh, one queue): the trial
        // confirms "not as configured now", and the reason and the remedy stay. (Seen on the
        // software NIC with header split off: zcrx registration EINVAL had replaced "header
        // split is off" and read as "unsupported, confirmed" on a device that can.)
        Some(Err(r))
            if f.verdict == Verdict::Unsupported
                && f.remedy.is_some()
                && r.errno != errno::ENOMEM =>
        {
            f.reason
                .push_str(&format!("; {tried} refused as expected: {}", r.message));
            f.confirmed = true;
            f
        }
        Some(Err(r)) => {
            f.verdict = Verdict::Unsupported;
            f.reason = format!("{tried} refused: {}", r.message).into();
            if r.errno == errno::ENOMEM {
                f.remedy = Some("ulimit -l unlimited (RLIMIT_MEMLOCK)".into());
            }
            f.confirmed = true;
            f
        }
    }
}

/// A trial this process was not allowed to make says nothing about the machine: the inferred
/// verdict stays, unconfirmed. Where that verdict is "unsupported" for the device's own reasons
/// root would be refused too, so no privilege is offered as a remedy; otherwise the report says
/// how to confirm it.
/// A trial that found its queue in use (another socket, a running application, a binding the
/// kernel is still releasing) says nothing about the device: the inferred verdict stays,
/// unconfirmed, with what was in the way.
fn queue_busy(mut f: Finding, tried: &str, r: &Refusal) -> Finding {
    f.reason.push_str(&format!(
        "; not confirmed: {tried} found the queue in use ({})",
        r.message
    ));
    f.remedy
        .get_or_insert_with(|| "probe again while nothing uses the queue, to confirm".into());
    f.confirmed = false;
    f
}

fn not_permitted(mut f: Finding, tried: &str, r: &Refusal) -> Finding {
    f.reason.push_str(&format!(
        "; not confirmed: {tried} needs root or CAP_NET_ADMIN ({})",
        r.message
    ));
    if f.verdict != Verdict::Unsupported {
        f.remedy.get_or_insert_with(|| {
            crate::text!(
                "probe again with ",
                Field::ProbeActive,
                ", as root, to confirm"
            )
        });
    }
    f.confirmed = false;
    f
}

fn zcrx(k: &KernelFacts, i: &IfaceFacts, trial: Option<&Result<(), Refusal>>) -> Finding {
    if let Some(why) = &k.uring.unusable {
        return Finding::new(Verdict::Unsupported, format!("io_uring is unusable: {why}"))
            .remedy("sysctl -w kernel.io_uring_disabled=0");
    }
    if !k.uring.recv_zc {
        return Finding::new(
            Verdict::Unsupported,
            "the kernel has no IORING_OP_RECV_ZC (Linux 6.15 or newer, CONFIG_IO_URING_ZCRX)",
        )
        .remedy(UPGRADE);
    }
    if !k.uring.zcrx_ring {
        return Finding::new(
            Verdict::Unsupported,
            "io_uring refuses a ring with SINGLE_ISSUER|DEFER_TASKRUN|CQE32, which zcrx needs",
        )
        .remedy(UPGRADE);
    }
    let f = rx_device_rules(i, "zcrx", k.ethtool_cli);
    let f = apply_trial(
        f,
        trial,
        &format!(
            "zcrx registration on {} rx queue {}",
            i.name,
            i.trial_queue()
        ),
    );
    memlock_note(k, f)
}

/// Pinning an area is charged to RLIMIT_MEMLOCK without CAP_IPC_LOCK: say so when it is small.
fn memlock_note(k: &KernelFacts, mut f: Finding) -> Finding {
    const SMALL: u64 = 64 << 20;
    if let (Some(limit), false) = (k.memlock, k.ipc_lock) {
        if limit < SMALL && f.verdict == Verdict::ZeroCopy {
            f.reason.push_str(&format!(
                "; RLIMIT_MEMLOCK is {} KiB, which caps the area",
                limit / 1024
            ));
            f.remedy.get_or_insert_with(|| "ulimit -l unlimited".into());
        }
    }
    f
}

fn netdev_op_missing(k: &KernelFacts, op: &str, since: &str) -> Option<Finding> {
    if k.netdev_ops.is_none() {
        return Some(
            Finding::new(
                Verdict::Unsupported,
                "the kernel has no netdev generic netlink family (Linux 6.3 or newer)",
            )
            .remedy(UPGRADE),
        );
    }
    if !k.netdev_has(op) {
        return Some(
            Finding::new(
                Verdict::Unsupported,
                format!("the netdev family has no {op} operation ({since})"),
            )
            .remedy(UPGRADE),
        );
    }
    None
}

fn devmem_rx(k: &KernelFacts, i: &IfaceFacts, trial: Option<&Result<(), Refusal>>) -> Finding {
    if let Some(f) = netdev_op_missing(k, "bind-rx", "devmem TCP RX needs Linux 6.12") {
        return f;
    }
    let mut f = rx_device_rules(i, "devmem TCP", k.ethtool_cli);
    if f.verdict == Verdict::ZeroCopy {
        f.reason
            .push_str("; the payload memory must be a dma-buf (GPU memory, or udmabuf)");
    }
    let tried = format!(
        "bind-rx of a probe fd to {} rx queue {}",
        i.name,
        i.trial_queue()
    );
    devmem_trial(f, trial, &tried, false)
}

/// bind-rx / bind-tx trials use a probe fd that is not a dma-buf, so the kernel can only
/// refuse. EOPNOTSUPP means the device cannot. EBADF/EINVAL about the fd means the device got
/// past its own checks (net/core/netdev-genl.c checks the device before `dma_buf_get`): for
/// bind-tx that is the whole device check (`netdev->netmem_tx`), so it confirms zero copy; for
/// bind-rx the header-split check comes later, at queue binding, so the inferred verdict stays.
fn devmem_trial(
    f: Finding,
    trial: Option<&Result<(), Refusal>>,
    tried: &str,
    device_check_is_complete: bool,
) -> Finding {
    match trial {
        Some(Err(r)) if r.errno == errno::EBADF || r.errno == errno::EINVAL => {
            let mut f = f;
            f.reason.push_str(&format!("; {tried}: the device passed its checks and only the probe fd (not a dma-buf) was refused ({})", r.message));
            if device_check_is_complete {
                f.verdict = Verdict::ZeroCopy;
                f.remedy = None;
            }
            // bind-rx: what the kernel checks before the fd differs between releases (6.12-6.14
            // nothing at all, later the queue-management ops, later still the queue ids), and
            // the header-split check comes only at queue binding: the inferred verdict stands,
            // not confirmed by this.
            f.confirmed = device_check_is_complete;
            f
        }
        other => apply_trial(f, other, tried),
    }
}

fn devmem_tx(k: &KernelFacts, i: &IfaceFacts, trial: Option<&Result<(), Refusal>>) -> Finding {
    if let Some(f) = netdev_op_missing(k, "bind-tx", "devmem TCP TX needs Linux 6.16") {
        return f;
    }
    let drv = i.driver_name();
    let f = if i.is_software() {
        Finding::new(
            Verdict::Unsupported,
            "software devices do not support netmem TX (devmem TCP transmit)",
        )
    } else if NETMEM_TX_DRIVERS.contains(&drv) {
        Finding::new(
            Verdict::ZeroCopy,
            crate::text!(
                format!("{drv} supports netmem TX (inferred from the driver; "),
                Field::ProbeActive,
                " asks the kernel)",
            ),
        )
    } else {
        Finding::new(
            Verdict::Unsupported,
            crate::text!(
                format!("{drv} is not known to support netmem TX ("),
                Field::ProbeActive,
                " asks the kernel)",
            ),
        )
    };
    devmem_trial(f, trial, &format!("bind-tx on {}", i.name), true)
}

fn xsk_copy(k: &KernelFacts, i: &IfaceFacts, trial: Option<&Result<(), Refusal>>) -> Finding {
    if !k.af_xdp {
        return Finding::new(
            Verdict::Unsupported,
            "the kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS)",
        )
        .remedy("use a kernel built with CONFIG_XDP_SOCKETS=y");
    }
    let mut f = Finding::new(
        Verdict::Copies,
        "AF_XDP copy mode works on any device (generic XDP) and copies each frame into the UMEM",
    );
    match trial {
        Some(Ok(())) => {
            f.reason = format!(
                "bound an AF_XDP socket (XDP_COPY) to {} queue {}: works, copying each frame",
                i.name,
                i.trial_queue()
            )
            .into();
            f.confirmed = true;
        }
        Some(Err(r)) if r.errno == errno::EPERM => {
            f = not_permitted(f, &format!("AF_XDP bind (XDP_COPY) on {}", i.name), r);
        }
        Some(Err(r)) => {
            f = Finding::new(
                Verdict::Unsupported,
                format!("AF_XDP bind (XDP_COPY) on {} failed: {}", i.name, r.message),
            );
            f.confirmed = true;
        }
        None => {}
    }
    f
}

fn xsk_zerocopy(k: &KernelFacts, i: &IfaceFacts, trial: Option<&Result<(), Refusal>>) -> Finding {
    if !k.af_xdp {
        return Finding::new(
            Verdict::Unsupported,
            "the kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS)",
        );
    }
    let f = match i.xdp_features {
        Some(x) if x & XDP_ACT_XSK_ZEROCOPY != 0 => Finding::new(
            Verdict::ZeroCopy,
            format!(
                "{} advertises xsk-zerocopy in its xdp-features",
                i.driver_name()
            ),
        ),
        Some(_) => Finding::new(
            Verdict::Unsupported,
            "the driver does not advertise xsk-zerocopy in its xdp-features",
        ),
        None => Finding::new(
            Verdict::Unsupported,
            "xdp-features could not be read (no netdev netlink family)",
        ),
    };
    apply_trial(
        f,
        trial,
        &format!(
            "AF_XDP bind (XDP_ZEROCOPY) to {} queue {}",
            i.name,
            i.trial_queue()
        ),
    )
}

#[cfg(test)]
mod tests;
