//! The probe's AF_XDP rules beyond the two verdicts: whether AF_XDP copy mode transmits without
//! copying on this interface ("generic zero-copy xmit"), and what a per-queue bind trial means.
//!
//! **Generic zero-copy xmit.** Since Linux 5.13 (bpf-next commit 9c8f21e6f885 "xsk: Build skb
//! by page (aka generic zerocopy xmit)", in the net-next pull for 5.13), AF_XDP's copy-mode
//! transmit builds each skb from the UMEM's own pages (net/xdp/xsk.c `xsk_build_skb` calls
//! `xsk_build_skb_zerocopy`, which adds the pages as frags with `skb_fill_page_desc`) instead of
//! copying the frame into a new linear skb — but only when the device's driver sets
//! `IFF_TX_SKB_NO_LINEAR` in `netdev->priv_flags` ("capable of xmitting frames with
//! skb_headlen(skb) == 0", include/linux/netdevice.h). That flag is not visible from user space:
//! no `IFLA_*` attribute carries `priv_flags` (net/core/rtnetlink.c only tests
//! `IFF_CHANGE_PROTO_DOWN`), sysfs shows `dev->flags` only (net/core/net-sysfs.c), and ethtool's
//! "private flags" are a driver's own, unrelated bits. So the answer here is inferred from the
//! driver's name and the table below, and always says so.
//!
//! **Per-queue bind trials.** An AF_XDP socket bound to a queue with `XDP_COPY` and then with
//! `XDP_ZEROCOPY` says which mode that queue accepts; the errno says why not
//! (net/xdp/xsk_buff_pool.c `xp_assign_dev`: `EBUSY` when a buffer pool is already attached to
//! the queue, `EINVAL` from `xsk_reg_pool_at_qid` for a queue at or past the device's real RX
//! and TX queue counts, `EOPNOTSUPP` for zero-copy on a driver without `ndo_bpf` and
//! `ndo_xsk_wakeup`; net/xdp/xsk.c `xsk_bind`: `ENODEV` for an unknown ifindex).

use super::{errno, IfaceFacts, IfaceKind, KernelFacts, Refusal};

/// The first kernel with generic zero-copy xmit (and with `IFF_TX_SKB_NO_LINEAR` at all).
pub const GENERIC_ZC_XMIT_SINCE: (u32, u32) = (5, 13);

/// The most RX queues a per-queue bind trial tries (the first ones): each zero-copy bind on a
/// NIC that supports it reconfigures the queue, so a 64-queue NIC is not walked whole.
pub const MAX_BIND_QUEUES: u32 = 16;

/// What the kernel source says about a driver and `IFF_TX_SKB_NO_LINEAR`: its ethtool driver
/// name (ETHTOOL_GDRVINFO), whether it sets the flag, and where that was read.
///
/// Sources: `grep -rn IFF_TX_SKB_NO_LINEAR` over the whole Linux 6.1.192 tree (Debian's
/// linux-source-6.1) finds exactly one driver that sets it, virtio_net. Later: the test in
/// `xsk_build_skb` is unchanged in the xsk.c of 6.8+ and in xsk patches of the 6.17/6.18 era,
/// virtio_net's assignment is still in the `virtnet_probe` context of patches from the 6.12 era,
/// and no patch in the netdev/bpf list archives adds the flag to another driver (the full 6.18
/// tree was too large to fetch and grep here). The running 6.18 kernel's BTF
/// (/sys/kernel/btf/vmlinux) has the enum constant. "Does not set it" entries name the
/// function that sets up the driver's netdev (and its other `priv_flags`), where the flag would
/// be set; every one of them was read in the 6.1 tree.
const NO_LINEAR_TABLE: &[(&str, bool, &str)] = &[
    // drivers/net/virtio_net.c:virtnet_probe: `dev->priv_flags |= IFF_UNICAST_FLT |
    // IFF_LIVE_ADDR_CHANGE | IFF_TX_SKB_NO_LINEAR` (commit ab5bd583b928, Linux 5.13).
    ("virtio_net", true, "drivers/net/virtio_net.c:virtnet_probe"),
    ("veth", false, "drivers/net/veth.c:veth_setup"),
    ("loopback", false, "drivers/net/loopback.c:loopback_setup"),
    ("ifb", false, "drivers/net/ifb.c:ifb_setup"),
    ("tun", false, "drivers/net/tun.c:tun_net_initialize"),
    // dummy_setup's priv_flags: IFF_LIVE_ADDR_CHANGE | IFF_NO_QUEUE (| IFF_LLTX since 6.9) and
    // IFF_TX_SKB_SHARING; read in dummy.c and its patches up to the 6.15 era (request_ops_lock).
    ("dummy", false, "drivers/net/dummy.c:dummy_setup"),
    ("macvlan", false, "drivers/net/macvlan.c:macvlan_setup"),
    ("bridge", false, "net/bridge/br_device.c:br_dev_setup"),
    (
        "mlx5_core",
        false,
        "drivers/net/ethernet/mellanox/mlx5/core/en_main.c:mlx5e_build_nic_netdev",
    ),
    (
        "ice",
        false,
        "drivers/net/ethernet/intel/ice/ice_main.c:ice_cfg_netdev",
    ),
    (
        "i40e",
        false,
        "drivers/net/ethernet/intel/i40e/i40e_main.c:i40e_config_netdev",
    ),
    (
        "ixgbe",
        false,
        "drivers/net/ethernet/intel/ixgbe/ixgbe_main.c:ixgbe_probe",
    ),
    (
        "igc",
        false,
        "drivers/net/ethernet/intel/igc/igc_main.c:igc_probe",
    ),
    (
        "bnxt_en",
        false,
        "drivers/net/ethernet/broadcom/bnxt/bnxt.c:bnxt_init_one",
    ),
    (
        "gve",
        false,
        "drivers/net/ethernet/google/gve/gve_main.c:gve_probe",
    ),
    (
        "ena",
        false,
        "drivers/net/ethernet/amazon/ena/ena_netdev.c:ena_probe",
    ),
    (
        "hv_netvsc",
        false,
        "drivers/net/hyperv/netvsc_drv.c:netvsc_probe",
    ),
    (
        "vmxnet3",
        false,
        "drivers/net/vmxnet3/vmxnet3_drv.c:vmxnet3_probe_device",
    ),
];

/// Whether a driver sets `IFF_TX_SKB_NO_LINEAR`, per the driver table in this module: `None` when the
/// driver is not in the table.
pub fn driver_sets_no_linear(driver: &str) -> Option<bool> {
    NO_LINEAR_TABLE
        .iter()
        .find(|(d, _, _)| *d == driver)
        .map(|&(_, sets, _)| sets)
}

/// Where the table's answer for `driver` was read (file:function), if it is in the table.
pub fn no_linear_source(driver: &str) -> Option<&'static str> {
    NO_LINEAR_TABLE
        .iter()
        .find(|(d, _, _)| *d == driver)
        .map(|&(_, _, src)| src)
}

/// The answer to "does AF_XDP copy-mode transmit avoid the copy here?".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZcXmit {
    /// The driver sets `IFF_TX_SKB_NO_LINEAR` and the kernel has generic zero-copy xmit.
    Yes,
    /// The kernel lacks the feature, or the driver does not set the flag.
    No,
    /// The driver is not in the table (or reports no name): the flag cannot be read.
    Unknown,
}

impl ZcXmit {
    /// The name used in output and JSON.
    pub fn name(self) -> &'static str {
        match self {
            ZcXmit::Yes => "yes",
            ZcXmit::No => "no",
            ZcXmit::Unknown => "unknown",
        }
    }
}

/// Whether generic zero-copy xmit applies on one interface, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenericZcXmit {
    /// The answer.
    pub answer: ZcXmit,
    /// Why, in plain words; says "inferred" whenever the answer rests on the driver table.
    pub reason: String,
    /// The answer rests on the driver table (a yes or no about the driver), not on a fact read
    /// from the kernel (its version, AF_XDP missing).
    pub inferred: bool,
}

impl GenericZcXmit {
    /// The one-line report: "generic zero-copy xmit: yes (...)".
    pub fn line(&self) -> String {
        format!(
            "generic zero-copy xmit: {} ({})",
            self.answer.name(),
            self.reason
        )
    }
}

/// Judges generic zero-copy xmit for one interface: the kernel must be 5.13 or newer and have
/// AF_XDP, and the driver must be one the table says sets `IFF_TX_SKB_NO_LINEAR`.
pub fn generic_zc_xmit(k: &KernelFacts, i: &IfaceFacts) -> GenericZcXmit {
    let no = |reason: String| GenericZcXmit {
        answer: ZcXmit::No,
        reason,
        inferred: false,
    };
    if !k.af_xdp {
        return no("the kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS)".into());
    }
    if k.version < GENERIC_ZC_XMIT_SINCE {
        return no(format!(
            "Linux {}.{} predates generic zero-copy xmit (Linux {}.{}): AF_XDP copy-mode TX \
             copies every frame into a new skb",
            k.version.0, k.version.1, GENERIC_ZC_XMIT_SINCE.0, GENERIC_ZC_XMIT_SINCE.1
        ));
    }
    let driver = match (&i.driver, i.kind) {
        (Some(d), _) => d.as_str(),
        (None, IfaceKind::Loopback) => "loopback",
        (None, _) => {
            return GenericZcXmit {
                answer: ZcXmit::Unknown,
                reason: format!(
                    "{} reports no driver name, and IFF_TX_SKB_NO_LINEAR is not visible from \
                     user space",
                    i.name
                ),
                inferred: false,
            }
        }
    };
    match (driver_sets_no_linear(driver), no_linear_source(driver)) {
        (Some(true), Some(src)) => GenericZcXmit {
            answer: ZcXmit::Yes,
            reason: format!(
                "inferred from the driver: {driver} sets IFF_TX_SKB_NO_LINEAR ({src}), so AF_XDP \
                 copy-mode TX builds each skb from the UMEM pages instead of copying; the flag \
                 itself is not visible from user space"
            ),
            inferred: true,
        },
        (Some(false), Some(src)) => GenericZcXmit {
            inferred: true,
            ..no(format!(
                "inferred from the driver: {driver} does not set IFF_TX_SKB_NO_LINEAR ({src}), \
                 so AF_XDP copy-mode TX copies every frame into a new skb"
            ))
        },
        _ => GenericZcXmit {
            answer: ZcXmit::Unknown,
            reason: format!(
                "driver {driver} is not in zcnet's table of drivers read in the kernel source, \
                 and IFF_TX_SKB_NO_LINEAR is not visible from user space"
            ),
            inferred: false,
        },
    }
}

/// Which RX queues a per-queue bind trial tries: the first [`MAX_BIND_QUEUES`] of `total`, or
/// the one asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuePlan {
    /// The queues, in order.
    pub queues: Vec<u32>,
    /// RX queues the device has (0: the count could not be read).
    pub total: u32,
    /// Whether the cap left queues out.
    pub capped: bool,
}

/// Plans a per-queue bind trial over a device with `total` RX queues, or over queue `only`.
/// A queue the device does not have is an `Err` naming the ones it has (when `total` is
/// known); with the count unknown, queue 0 (or `only`) is tried and the kernel answers.
pub fn plan_queues(name: &str, total: u32, only: Option<u32>) -> Result<QueuePlan, String> {
    if let Some(q) = only {
        if total > 0 && q >= total {
            return Err(format!(
                "{name} has {total} RX queue{} (0-{}), so there is no queue {q}; pick one of \
                 those",
                if total == 1 { "" } else { "s" },
                total - 1
            ));
        }
        return Ok(QueuePlan {
            queues: vec![q],
            total,
            capped: false,
        });
    }
    let n = total.clamp(1, MAX_BIND_QUEUES);
    Ok(QueuePlan {
        queues: (0..n).collect(),
        total,
        capped: total > MAX_BIND_QUEUES,
    })
}

/// The bind modes the trial tries, in order: copy first (it never reconfigures the queue).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindMode {
    /// `XDP_COPY`.
    Copy,
    /// `XDP_ZEROCOPY`.
    ZeroCopy,
}

impl BindMode {
    /// The name used in output and JSON.
    pub fn name(self) -> &'static str {
        match self {
            BindMode::Copy => "copy",
            BindMode::ZeroCopy => "zero-copy",
        }
    }
}

/// What binding one queue in each mode gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueBind {
    /// The RX queue.
    pub queue: u32,
    /// `XDP_COPY`: bound (and closed at once), or the kernel's refusal.
    pub copy: Result<(), Refusal>,
    /// `XDP_ZEROCOPY`: bound (and closed at once), or the kernel's refusal.
    pub zerocopy: Result<(), Refusal>,
}

impl QueueBind {
    /// The result of one mode.
    pub fn get(&self, mode: BindMode) -> &Result<(), Refusal> {
        match mode {
            BindMode::Copy => &self.copy,
            BindMode::ZeroCopy => &self.zerocopy,
        }
    }

    /// The meaning of `mode`'s refusal (`None` when it was accepted).
    pub fn meaning(&self, mode: BindMode) -> Option<&'static str> {
        let other_ok = match mode {
            BindMode::Copy => self.zerocopy.is_ok(),
            BindMode::ZeroCopy => self.copy.is_ok(),
        };
        match self.get(mode) {
            Ok(()) => None,
            Err(r) => Some(bind_meaning(mode, r.errno, other_ok)),
        }
    }
}

/// The symbolic name of an errno a bind can return ("EOPNOTSUPP"), or "errno" when unknown.
pub fn errno_name(e: i32) -> &'static str {
    match e {
        errno::EPERM => "EPERM",
        errno::EBADF => "EBADF",
        errno::ENOMEM => "ENOMEM",
        errno::EBUSY => "EBUSY",
        errno::ENODEV => "ENODEV",
        errno::EINVAL => "EINVAL",
        errno::EOPNOTSUPP => "EOPNOTSUPP",
        errno::EAFNOSUPPORT => "EAFNOSUPPORT",
        errno::ENOBUFS => "ENOBUFS",
        _ => "errno",
    }
}

/// What an AF_XDP bind refusal means, in plain words. `other_mode_ok`: the same queue accepted
/// the other mode, so the queue exists and is free (an `EINVAL` in zero-copy mode then comes
/// from the driver's own checks, not from a missing queue).
pub fn bind_meaning(mode: BindMode, e: i32, other_mode_ok: bool) -> &'static str {
    match (e, mode) {
        (errno::EOPNOTSUPP, BindMode::ZeroCopy) => "the driver lacks AF_XDP zero-copy support",
        (errno::EOPNOTSUPP, BindMode::Copy) => "the device refuses AF_XDP in copy mode",
        (errno::EBUSY, _) => {
            "the queue is in use (another AF_XDP socket, or one closed a moment ago and not yet \
             released)"
        }
        (errno::EINVAL, BindMode::ZeroCopy) if other_mode_ok => {
            "the driver refused the zero-copy setup (its checks on the UMEM or the queue)"
        }
        (errno::EINVAL, _) => "no such queue on this device",
        (errno::ENODEV, _) => "no such interface",
        (errno::EPERM, _) => "not permitted: AF_XDP sockets need CAP_NET_RAW",
        (errno::ENOMEM | errno::ENOBUFS, _) => {
            "no memory to pin the UMEM (RLIMIT_MEMLOCK too small?)"
        }
        (errno::EAFNOSUPPORT, _) => "the kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS)",
        _ => "an unexpected refusal: see the kernel's message",
    }
}

/// One mode's result in words: "accepted", or "refused: EOPNOTSUPP, the driver lacks ...".
pub fn describe(b: &QueueBind, mode: BindMode) -> String {
    match (b.get(mode), b.meaning(mode)) {
        (Err(r), Some(m)) => format!("refused: {}, {m}", errno_name(r.errno)),
        _ => "accepted".to_string(),
    }
}

/// A per-queue bind trial: the plan and what each queue gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueTrials {
    /// Which queues, of how many.
    pub plan: QueuePlan,
    /// One entry per queue of the plan, in its order.
    pub binds: Vec<QueueBind>,
}

impl QueueTrials {
    /// The result for `queue`, if it was tried.
    pub fn get(&self, queue: u32) -> Option<&QueueBind> {
        self.binds.iter().find(|b| b.queue == queue)
    }

    /// The report lines ([`summarize`]).
    pub fn summary(&self) -> Vec<String> {
        summarize(&self.plan, &self.binds)
    }
}

/// "0", "0-3", "0-3,7": queue numbers, consecutive runs joined.
fn ranges(qs: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < qs.len() {
        let mut j = i;
        while j + 1 < qs.len() && qs[j + 1] == qs[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            qs[i].to_string()
        } else {
            format!("{}-{}", qs[i], qs[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// The per-queue results as a few lines: queues with the same outcome in both modes share a
/// line ("queues 0-1: copy accepted; zero-copy refused: EOPNOTSUPP, ..."), after a head line
/// that says how many queues were tried and whether the cap left some out.
pub fn summarize(plan: &QueuePlan, binds: &[QueueBind]) -> Vec<String> {
    let mut lines = vec![match (plan.capped, plan.total) {
        (true, total) => format!(
            "AF_XDP bind modes per RX queue: the first {} of {total} queues tried (the cap)",
            binds.len()
        ),
        (false, 0) => format!(
            "AF_XDP bind modes per RX queue: the queue count could not be read; tried queue {}",
            ranges(&plan.queues)
        ),
        (false, total) if binds.len() as u32 == total => format!(
            "AF_XDP bind modes per RX queue: all {total} queue{} tried",
            if total == 1 { "" } else { "s" }
        ),
        (false, total) => format!(
            "AF_XDP bind modes per RX queue: queue {} of {total} tried",
            ranges(&plan.queues)
        ),
    }];
    let mut groups: Vec<(String, Vec<u32>)> = Vec::new();
    for b in binds {
        let text = format!(
            "copy {}; zero-copy {}",
            describe(b, BindMode::Copy),
            describe(b, BindMode::ZeroCopy)
        );
        match groups.iter_mut().find(|(t, _)| *t == text) {
            Some(g) => g.1.push(b.queue),
            None => groups.push((text, vec![b.queue])),
        }
    }
    for (text, qs) in groups {
        let word = if qs.len() == 1 { "queue" } else { "queues" };
        lines.push(format!("{word} {}: {text}", ranges(&qs)));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::{HeaderSplit, UringFacts};

    fn kernel(version: (u32, u32), af_xdp: bool) -> KernelFacts {
        KernelFacts {
            version,
            uring: UringFacts::default(),
            net_admin: true,
            memlock: None,
            ipc_lock: true,
            netdev_ops: None,
            af_xdp,
            ethtool_cli: false,
        }
    }

    fn iface(name: &str, kind: IfaceKind, driver: Option<&str>) -> IfaceFacts {
        IfaceFacts {
            name: name.into(),
            kind,
            driver: driver.map(Into::into),
            xdp_features: Some(0),
            rx_queues: 1,
            header_split: HeaderSplit::Unknown,
            hds_thresh: None,
            ntuple: None,
            scatter_gather: None,
            channels: None,
        }
    }

    fn refused(e: i32) -> Result<(), Refusal> {
        Err(Refusal {
            errno: e,
            message: format!("os error {e}"),
        })
    }

    #[test]
    fn virtio_net_is_yes_and_says_it_is_inferred() {
        let g = generic_zc_xmit(
            &kernel((6, 18), true),
            &iface("eth0", IfaceKind::Physical, Some("virtio_net")),
        );
        assert_eq!(g.answer, ZcXmit::Yes);
        assert!(g.reason.to_string().starts_with("inferred"), "{}", g.reason);
        assert!(g.reason.contains("virtio_net sets IFF_TX_SKB_NO_LINEAR"));
        assert!(
            g.reason.contains("virtio_net.c:virtnet_probe"),
            "{}",
            g.reason
        );
        assert!(g.line().starts_with("generic zero-copy xmit: yes ("));
        assert!(g.inferred);
    }

    #[test]
    fn every_yes_in_the_table_cites_a_function_and_every_no_names_the_driver() {
        for &(driver, sets, src) in NO_LINEAR_TABLE {
            let (file, func) = src.split_once(':').unwrap_or_else(|| panic!("{src}"));
            assert!(file.ends_with(".c") && !func.is_empty(), "{src}");
            let g = generic_zc_xmit(
                &kernel((6, 18), true),
                &iface("x", IfaceKind::Physical, Some(driver)),
            );
            assert_eq!(g.answer == ZcXmit::Yes, sets, "{driver}");
            assert!(g.reason.contains(driver) && g.reason.contains(src), "{g:?}");
            assert!(g.reason.contains("inferred") && g.inferred, "{g:?}");
        }
        // Only virtio_net sets it in the source read.
        let yes: Vec<&str> = NO_LINEAR_TABLE
            .iter()
            .filter(|e| e.1)
            .map(|e| e.0)
            .collect();
        assert_eq!(yes, ["virtio_net"]);
    }

    #[test]
    fn veth_lo_ifb_and_dummy_are_no() {
        let k = kernel((6, 18), true);
        for (f, drv) in [
            (iface("vA", IfaceKind::Veth, Some("veth")), "veth"),
            (iface("lo", IfaceKind::Loopback, None), "loopback"),
            (iface("sinkA", IfaceKind::Ifb, Some("ifb")), "ifb"),
            (iface("dm0", IfaceKind::Virtual, Some("dummy")), "dummy"),
        ] {
            let g = generic_zc_xmit(&k, &f);
            assert_eq!(g.answer, ZcXmit::No, "{g:?}");
            assert!(
                g.reason
                    .contains(&format!("{drv} does not set IFF_TX_SKB_NO_LINEAR")),
                "{g:?}"
            );
        }
    }

    #[test]
    fn unknown_drivers_and_nameless_devices_are_unknown() {
        let k = kernel((6, 18), true);
        let g = generic_zc_xmit(&k, &iface("eth3", IfaceKind::Physical, Some("fbnic")));
        assert_eq!(g.answer, ZcXmit::Unknown);
        assert!(g.reason.contains("driver fbnic is not in"), "{}", g.reason);
        assert!(g.line().starts_with("generic zero-copy xmit: unknown ("));
        let g = generic_zc_xmit(&k, &iface("wg0", IfaceKind::Virtual, None));
        assert_eq!(g.answer, ZcXmit::Unknown);
        assert!(
            g.reason.contains("wg0 reports no driver name"),
            "{}",
            g.reason
        );
        assert!(!g.inferred && !g.reason.contains("inferred"));
    }

    #[test]
    fn an_old_kernel_or_no_af_xdp_is_no_even_for_virtio_net() {
        let f = iface("eth0", IfaceKind::Physical, Some("virtio_net"));
        let g = generic_zc_xmit(&kernel((5, 12), true), &f);
        assert_eq!(g.answer, ZcXmit::No);
        assert!(
            g.reason.contains("Linux 5.12 predates") && g.reason.contains("5.13"),
            "{}",
            g.reason
        );
        assert!(!g.inferred, "a fact of the kernel, not of the driver table");
        assert_eq!(
            generic_zc_xmit(&kernel((5, 13), true), &f).answer,
            ZcXmit::Yes
        );
        let g = generic_zc_xmit(&kernel((6, 18), false), &f);
        assert_eq!(g.answer, ZcXmit::No);
        assert!(g.reason.contains("CONFIG_XDP_SOCKETS"), "{}", g.reason);
    }

    #[test]
    fn queue_plans_cap_at_sixteen_and_reject_a_queue_the_device_lacks() {
        let p = plan_queues("vq0", 2, None).unwrap();
        assert_eq!((p.queues.clone(), p.capped), (vec![0, 1], false));
        let p = plan_queues("eth1", 64, None).unwrap();
        assert_eq!(p.queues.len(), MAX_BIND_QUEUES as usize);
        assert_eq!((p.queues[15], p.capped, p.total), (15, true, 64));
        let p = plan_queues("eth1", 16, None).unwrap();
        assert!(!p.capped && p.queues.len() == 16);
        // Count unknown: queue 0, and the kernel answers.
        let p = plan_queues("x", 0, None).unwrap();
        assert_eq!(p.queues, [0]);
        assert_eq!(plan_queues("x", 0, Some(9)).unwrap().queues, [9]);
        assert_eq!(plan_queues("vq0", 2, Some(1)).unwrap().queues, [1]);
        let e = plan_queues("vq0", 2, Some(2)).unwrap_err();
        assert!(
            e.contains("vq0 has 2 RX queues (0-1), so there is no queue 2"),
            "{e}"
        );
        let e = plan_queues("lo", 1, Some(5)).unwrap_err();
        assert!(e.contains("lo has 1 RX queue (0-0)"), "{e}");
    }

    #[test]
    fn errnos_mean_what_the_kernel_means() {
        use BindMode::*;
        assert!(bind_meaning(ZeroCopy, errno::EOPNOTSUPP, true).contains("lacks AF_XDP zero-copy"));
        assert!(bind_meaning(Copy, errno::EBUSY, false).contains("in use"));
        assert!(bind_meaning(ZeroCopy, errno::EBUSY, false).contains("in use"));
        assert_eq!(
            bind_meaning(Copy, errno::EINVAL, false),
            "no such queue on this device"
        );
        assert_eq!(
            bind_meaning(ZeroCopy, errno::EINVAL, false),
            "no such queue on this device"
        );
        // Copy worked on that queue, so the queue exists: the driver refused.
        assert!(bind_meaning(ZeroCopy, errno::EINVAL, true).contains("driver refused"));
        assert_eq!(
            bind_meaning(Copy, errno::ENODEV, false),
            "no such interface"
        );
        assert!(bind_meaning(Copy, errno::EPERM, false).contains("CAP_NET_RAW"));
        assert!(bind_meaning(Copy, errno::ENOMEM, false).contains("RLIMIT_MEMLOCK"));
        assert!(bind_meaning(Copy, errno::EAFNOSUPPORT, false).contains("CONFIG_XDP_SOCKETS"));
        assert!(bind_meaning(Copy, 123, false).contains("unexpected"));
        assert_eq!(errno_name(errno::EOPNOTSUPP), "EOPNOTSUPP");
        assert_eq!(errno_name(errno::EBUSY), "EBUSY");
        assert_eq!(errno_name(errno::EINVAL), "EINVAL");
        assert_eq!(errno_name(4242), "errno");
    }

    #[test]
    fn summaries_group_equal_queues_and_say_what_was_tried() {
        let veth = |q| QueueBind {
            queue: q,
            copy: Ok(()),
            zerocopy: refused(errno::EOPNOTSUPP),
        };
        let plan = plan_queues("vq0", 2, None).unwrap();
        let s = summarize(&plan, &[veth(0), veth(1)]);
        assert_eq!(
            s,
            [
                "AF_XDP bind modes per RX queue: all 2 queues tried".to_string(),
                "queues 0-1: copy accepted; zero-copy refused: EOPNOTSUPP, the driver lacks \
                 AF_XDP zero-copy support"
                    .to_string(),
            ]
        );
        // A busy queue in the middle splits the run; a capped plan says so.
        let plan = plan_queues("eth1", 40, None).unwrap();
        let mut binds: Vec<QueueBind> = plan.queues.iter().map(|&q| veth(q)).collect();
        binds[5] = QueueBind {
            queue: 5,
            copy: refused(errno::EBUSY),
            zerocopy: refused(errno::EBUSY),
        };
        let s = summarize(&plan, &binds);
        assert!(
            s[0].contains("the first 16 of 40 queues tried (the cap)"),
            "{s:?}"
        );
        assert!(s[1].starts_with("queues 0-4,6-15: copy accepted"), "{s:?}");
        assert!(s[2].starts_with("queue 5: copy refused: EBUSY"), "{s:?}");
        assert_eq!(s.len(), 3);
        let one = plan_queues("vq0", 2, Some(1)).unwrap();
        let s = summarize(&one, &[veth(1)]);
        assert!(s[0].ends_with("queue 1 of 2 tried"), "{s:?}");
        let t = QueueTrials {
            plan: plan_queues("vq0", 2, None).unwrap(),
            binds: vec![veth(0), veth(1)],
        };
        assert_eq!(t.get(1), Some(&veth(1)));
        assert_eq!(t.get(2), None);
        assert_eq!(t.summary().len(), 2);
        let b = veth(0);
        assert_eq!(b.meaning(BindMode::Copy), None);
        assert_eq!(describe(&b, BindMode::Copy), "accepted");
    }
}
