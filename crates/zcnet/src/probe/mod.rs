//! `zcnet probe`: what this machine and its NICs can do for zero copy, why not, and the fix.
//!
//! Facts are read through io_uring's probe, trial ring setups, `/proc` and `/sys`, the netdev
//! and ethtool netlink families and the ethtool ioctl; the verdicts come from the pure rules in
//! [`zcnet_core::probe`]. With `active`, each mechanism is also tried and undone: a zcrx queue
//! registered and released, AF_XDP sockets bound and closed, netdev bindings made with a
//! probe fd (refused, since it is no dma-buf) and MSG_ZEROCOPY / SEND_ZC sends over TCP
//! loopback whose notifications say whether the kernel copied. Nothing outlives the call:
//! every trial's resource is an owned value dropped before the next one.
//!
//! Reading a fact never fails the probe: what cannot be read becomes a note on the report.
//! The GPU part ([`gpu`]) works the same way: no CUDA driver is a reason on the report.
//!
//! The newer zcrx features (no device, copy statistics, events, large receive buffers) are
//! decided by asking the kernel (`IORING_REGISTER_QUERY`, [`zcrx_query`]), never by its version.
//!
//! AF_XDP beyond the two verdicts: every interface gets a "generic zero-copy xmit" answer
//! (whether AF_XDP copy-mode TX builds skbs from the UMEM pages: inferred from the driver,
//! since `IFF_TX_SKB_NO_LINEAR` is invisible from user space; rules in
//! [`zcnet_core::probe::xsk`]). With `active` and one interface named (`iface`), each of its
//! RX queues (the first [`MAX_BIND_QUEUES`], or the one [`probe_queue`] is given) is bound in
//! copy and then in zero-copy mode and closed at once, so the report says which mode each
//! queue accepts and why not. On a NIC with AF_XDP zero-copy, a zero-copy bind makes the driver
//! set the queue up for the UMEM (`ndo_bpf` `XDP_SETUP_XSK_POOL`), which briefly reconfigures
//! (on many drivers restarts) that queue, and closing undoes it: this is why it runs only for
//! an interface the caller named.

pub mod gpu;
pub mod json;
mod trials;
pub mod zcrx_query;

use crate::iface;
pub use crate::iface::{ethtool_installed, iface_facts, IfaceReport};

use zcnet_core::probe::judge;
pub use zcnet_core::probe::xsk::{
    BindMode, GenericZcXmit, QueueBind, QueuePlan, QueueTrials, ZcXmit, MAX_BIND_QUEUES,
};
pub use zcnet_core::probe::{
    HeaderSplit, IfaceFacts, IfaceKind, KernelFacts, Mechanism, Refusal, RxChannels, Trials,
    UringFacts, Verdict,
};
use zcnet_sys::uring_probe as up;
/// What the kernel's io_uring says of zcrx (`IORING_REGISTER_QUERY`): the features and limits
/// the probe reports.
pub use zcnet_sys::uring_query::ZcrxCaps;

use crate::{Error, Result};

/// What to probe.
#[derive(Debug, Clone, Default)]
pub struct ProbeOptions {
    /// One interface (default: every interface of the calling thread's network namespace).
    pub iface: Option<String>,
    /// Confirm verdicts by trying each mechanism (and undoing it). The trials on an interface
    /// (a zcrx queue registered, AF_XDP sockets bound, netdev bindings) run only on the one
    /// named in `iface`, or on every interface with `all_ifaces`: on a real NIC they briefly
    /// reconfigure a queue, and the uplink is among "every interface". Without either, only
    /// the sends over TCP loopback run, and [`ProbeReport::iface_trials`] is false.
    pub active: bool,
    /// With `active` and no `iface`: run the interface trials on every interface.
    pub all_ifaces: bool,
}

/// The probe's whole answer.
#[derive(Debug, Clone)]
pub struct ProbeReport {
    /// The kernel and the process.
    pub kernel: KernelReport,
    /// Interfaces, in ifindex order.
    pub interfaces: Vec<IfaceReport>,
    /// Whether trials ran.
    pub active: bool,
    /// Whether the trials on interfaces ran (`active` with an interface named, or with
    /// `all_ifaces`); `active` alone runs only the sends over TCP loopback.
    pub iface_trials: bool,
    /// The GPUs, and per interface the best path between the NIC and GPU memory.
    pub gpu: gpu::GpuReport,
}

/// Kernel-wide facts.
#[derive(Debug, Clone)]
pub struct KernelReport {
    /// `uname -r`.
    pub release: String,
    /// `kernel.io_uring_disabled` (0 allowed, 1 privileged only, 2 off).
    pub io_uring_disabled: Option<u32>,
    /// io_uring opcodes zcnet uses, and whether the kernel supports each.
    pub uring_ops: Vec<(&'static str, bool)>,
    /// io_uring features (params.features) zcnet looks at.
    pub uring_features: Vec<(&'static str, bool)>,
    /// Ring setup flags tried, with the kernel's answer (`Err`: the errno text).
    pub setup_flags: Vec<(&'static str, std::result::Result<(), String>)>,
    /// RLIMIT_MEMLOCK (soft, hard); `None` is unlimited.
    pub memlock: (Option<u64>, Option<u64>),
    /// Huge pages: (reserved, free, size in KiB).
    pub hugepages: (u64, u64, u64),
    /// `net.core.optmem_max` (bounds MSG_ZEROCOPY notifications in flight).
    pub optmem_max: Option<u64>,
    /// The netdev family: its operations, or why it is unusable.
    pub netdev_family: std::result::Result<Vec<String>, String>,
    /// The ethtool netlink family: its version, or why it is unusable.
    pub ethtool_family: std::result::Result<u32, String>,
    /// What the judgement uses.
    pub facts: KernelFacts,
    /// Kernel-level trials (`--active`): MSG_ZEROCOPY / SEND_ZC over loopback.
    pub loopback_trials: Trials,
    /// The newer zcrx features, as the kernel answers `IORING_REGISTER_QUERY`, with a verdict
    /// per feature.
    pub zcrx_query: zcrx_query::ZcrxQuery,
}

/// Probes the kernel and the interfaces.
pub fn probe(opts: &ProbeOptions) -> Result<ProbeReport> {
    probe_queue(opts, None)
}

/// Like [`probe`], with the per-queue AF_XDP bind trial limited to RX queue `queue` when one
/// is given. That trial runs only with `active` and one interface named; a `queue` without
/// both, or one the interface does not have, is a bad argument, refused before anything is
/// tried.
pub fn probe_queue(opts: &ProbeOptions, queue: Option<u32>) -> Result<ProbeReport> {
    let per_queue = opts.active && opts.iface.is_some();
    if queue.is_some() && !per_queue {
        use crate::text::Field;
        return Err(Error::invalid_input(crate::text!(
            Field::ProbeQueue,
            " picks the RX queue of the per-queue AF_XDP bind trial, which runs only with ",
            Field::ProbeActive,
            " and ",
            Field::ProbeIface,
            ": set both",
        )));
    }
    let all = iface::list()?;
    let chosen: Vec<iface::Link> = match &opts.iface {
        Some(name) => vec![all.into_iter().find(|l| &l.name == name).ok_or_else(|| {
            Error::UnknownInterface {
                given: name.clone(),
            }
        })?],
        None => all,
    };
    let mut fam = iface::Families::open();
    let gathered: Vec<IfaceReport> = chosen.iter().map(|l| iface::gather(l, &mut fam)).collect();
    // The queue plan is checked before any trial runs: a bad --queue leaves nothing tried.
    let plan = match (per_queue, gathered.first()) {
        (true, Some(r)) => Some(
            zcnet_core::probe::xsk::plan_queues(&r.name, r.facts.rx_queues, queue).map_err(
                |e| {
                    Error::invalid_input(crate::text!(
                        crate::text::Field::ProbeQueue,
                        format!(": {e}"),
                    ))
                },
            )?,
        ),
        _ => None,
    };
    // Trials that touch an interface's queues only where the caller named it, or asked for all.
    let iface_trials = opts.active && (opts.iface.is_some() || opts.all_ifaces);
    let mut kernel = kernel(&fam);
    if opts.active {
        kernel.loopback_trials = trials::loopback();
    }
    let mut gpu = gpu::gather(opts.active);
    let mut interfaces = Vec::new();
    for mut r in gathered {
        r.generic_zc_xmit = zcnet_core::probe::xsk::generic_zc_xmit(&kernel.facts, &r.facts);
        if let (Some(plan), true) = (&plan, kernel.facts.af_xdp) {
            r.xsk_queues = Some(trials::xsk_queues(r.ifindex, plan));
        }
        if iface_trials {
            r.trials = trials::on_iface(&r.facts, r.ifindex, &kernel.facts, r.xsk_queues.as_ref());
        }
        let mut t = r.trials.clone();
        t.msg_zerocopy_loopback = kernel.loopback_trials.msg_zerocopy_loopback.clone();
        t.send_zc_loopback = kernel.loopback_trials.send_zc_loopback.clone();
        r.mechanisms = judge(&kernel.facts, &r.facts, &t);
        gpu::add_iface(&mut gpu, &kernel.facts, &r);
        interfaces.push(r);
    }
    Ok(ProbeReport {
        kernel,
        interfaces,
        active: opts.active,
        iface_trials,
        gpu,
    })
}

fn meminfo(key: &str) -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix(key)?
                    .trim_start_matches(':')
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
        })
        .unwrap_or(0)
}

fn kernel(fam: &iface::Families) -> KernelReport {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let (maj, min, _) = zcnet_sys::os::kernel_version().unwrap_or((0, 0, 0));
    let io_uring_disabled = up::io_uring_disabled();
    let mut uring = UringFacts::default();
    let (mut uring_ops, mut uring_features) = (Vec::new(), Vec::new());
    match up::probe() {
        Ok(p) => {
            uring.send_zc = p.supports(up::IORING_OP_SEND_ZC);
            uring.recv_zc = p.supports(up::IORING_OP_RECV_ZC);
            uring_ops = p.probed_ops();
            // Multishot receive is a flag of RECV (Linux 6.0), not an opcode.
            uring_ops.push((
                "recv-multishot",
                p.supports(up::IORING_OP_RECV) && (maj, min) >= (6, 0),
            ));
            uring_features = p.probed_features();
        }
        Err(e) => {
            uring.unusable = Some(match io_uring_disabled {
                Some(d) if d > 0 => format!("kernel.io_uring_disabled is {d} ({e})"),
                _ => format!("io_uring_setup failed: {e}"),
            })
        }
    }
    let flags: [(&str, u32); 4] = [
        ("single-issuer", up::IORING_SETUP_SINGLE_ISSUER),
        (
            "defer-taskrun",
            up::IORING_SETUP_SINGLE_ISSUER | up::IORING_SETUP_DEFER_TASKRUN,
        ),
        ("cqe32", up::IORING_SETUP_CQE32),
        ("zcrx-ring", up::ZCRX_SETUP_FLAGS),
    ];
    let setup_flags: Vec<_> = flags
        .iter()
        .map(|&(n, f)| (n, up::try_setup(f).map_err(|e| e.to_string())))
        .collect();
    uring.zcrx_ring = uring.unusable.is_none() && setup_flags[3].1.is_ok();
    let unlimited = |v: u64| (v != u64::MAX).then_some(v);
    let memlock = zcnet_sys::os::memlock_limit()
        .map(|(s, h)| (unlimited(s), unlimited(h)))
        .unwrap_or((None, None));
    let netdev_family = fam.netdev_ops();
    let ethtool_family = fam.ethtool_version();
    let facts = KernelFacts {
        version: (maj, min),
        uring,
        net_admin: zcnet_sys::os::is_root(),
        memlock: memlock.0,
        ipc_lock: zcnet_sys::os::has_cap_ipc_lock(),
        netdev_ops: netdev_family.as_ref().ok().cloned(),
        af_xdp: trials::af_xdp_available(),
        ethtool_cli: ethtool_installed(),
    };
    KernelReport {
        release,
        io_uring_disabled,
        uring_ops,
        uring_features,
        setup_flags,
        memlock,
        hugepages: (
            meminfo("HugePages_Total"),
            meminfo("HugePages_Free"),
            meminfo("Hugepagesize"),
        ),
        optmem_max: crate::sysctl_u64("net/core/optmem_max"),
        netdev_family,
        ethtool_family,
        facts,
        loopback_trials: Trials::default(),
        zcrx_query: zcrx_query::gather(),
    }
}
