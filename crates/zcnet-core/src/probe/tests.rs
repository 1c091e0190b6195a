use super::*;
use proptest::prelude::*;

/// The kernel of these machines (KERNEL-FACTS.md): 6.18, io_uring with SEND_ZC/RECV_ZC, the
/// netdev family with bind-rx/bind-tx, AF_XDP, root.
fn kernel_618() -> KernelFacts {
    KernelFacts {
        version: (6, 18),
        uring: UringFacts {
            unusable: None,
            send_zc: true,
            recv_zc: true,
            zcrx_ring: true,
        },
        net_admin: true,
        memlock: Some(8 << 20),
        ipc_lock: true,
        netdev_ops: Some(
            [
                "dev-get",
                "queue-get",
                "napi-get",
                "qstats-get",
                "page-pool-get",
                "bind-rx",
                "bind-tx",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        ),
        af_xdp: true,
    }
}

fn soft(name: &str, kind: IfaceKind, driver: Option<&str>, xdp: u64) -> IfaceFacts {
    IfaceFacts {
        name: name.into(),
        kind,
        driver: driver.map(Into::into),
        xdp_features: Some(xdp),
        rx_queues: 1,
        header_split: HeaderSplit::NotReported("rings: Operation not supported".into()),
        hds_thresh: None,
        ntuple: None,
        scatter_gather: Some(true),
    }
}

fn nic(split: HeaderSplit, hds: u32, queues: u32, ntuple: Option<bool>) -> IfaceFacts {
    IfaceFacts {
        name: "eth9".into(),
        kind: IfaceKind::Physical,
        driver: Some("mlx5_core".into()),
        xdp_features: Some(0x7f),
        rx_queues: queues,
        header_split: split,
        hds_thresh: Some(hds),
        ntuple,
        scatter_gather: Some(true),
    }
}

fn verdicts(k: &KernelFacts, i: &IfaceFacts, t: &Trials) -> Vec<(&'static str, &'static str)> {
    judge(k, i, t)
        .into_iter()
        .map(|(m, f)| (m.name(), f.verdict.name()))
        .collect()
}

const SOFTWARE_VERDICTS: [(&str, &str); 8] = [
    ("copy", "copies"),
    ("msg-zerocopy", "copies"),
    ("uring-zc", "copies"),
    ("zcrx", "unsupported"),
    ("devmem-rx", "unsupported"),
    ("devmem-tx", "unsupported"),
    ("af-xdp-copy", "copies"),
    ("af-xdp-zerocopy", "unsupported"),
];

#[test]
fn veth_lo_ifb_get_the_verdicts_this_kernel_gives() {
    let k = kernel_618();
    for i in [
        soft("v0", IfaceKind::Veth, Some("veth"), 0x23),
        soft("lo", IfaceKind::Loopback, None, 0),
        soft("sink0", IfaceKind::Ifb, Some("ifb"), 0),
    ] {
        assert_eq!(
            verdicts(&k, &i, &Trials::default()),
            SOFTWARE_VERDICTS,
            "{}",
            i.name
        );
        for (m, f) in judge(&k, &i, &Trials::default()) {
            assert!(!f.reason.is_empty(), "{m:?}");
            assert!(!f.confirmed, "nothing was tried");
        }
    }
}

#[test]
fn veth_reasons_name_the_cause() {
    let k = kernel_618();
    let i = soft("v0", IfaceKind::Veth, Some("veth"), 0x23);
    let t = Trials::default();
    assert!(judge_one(Mechanism::UringZc, &k, &i, &t)
        .reason
        .contains("ends in a socket on this host"));
    let z = judge_one(Mechanism::Zcrx, &k, &i, &t);
    assert!(z.reason.contains("no queue-management ops"), "{}", z.reason);
    let x = judge_one(Mechanism::AfXdpZerocopy, &k, &i, &t);
    assert!(x.reason.contains("xsk-zerocopy"), "{}", x.reason);
}

#[test]
fn active_refusals_are_confirmed_with_the_kernel_message() {
    let k = kernel_618();
    let i = soft("v0", IfaceKind::Veth, Some("veth"), 0x23);
    let no = |errno, msg: &str| {
        Some(Err(Refusal {
            errno,
            message: msg.into(),
        }))
    };
    let t = Trials {
        msg_zerocopy_loopback: Some(Ok(0.0)),
        send_zc_loopback: Some(Ok(0.0)),
        zcrx: no(errno::EOPNOTSUPP, "Operation not supported (os error 95)"),
        devmem_rx: no(errno::EOPNOTSUPP, "Operation not supported"),
        devmem_tx: no(
            errno::EOPNOTSUPP,
            "kernel: Driver does not support netmem TX",
        ),
        xsk_copy: Some(Ok(())),
        xsk_zerocopy: no(errno::EOPNOTSUPP, "Operation not supported"),
    };
    assert_eq!(verdicts(&k, &i, &t), SOFTWARE_VERDICTS);
    let all = judge(&k, &i, &t);
    for (m, f) in &all[1..] {
        assert!(f.confirmed, "{m:?} was tried");
    }
    let tx = &all[5].1;
    assert!(
        tx.reason.contains("Driver does not support netmem TX"),
        "{}",
        tx.reason
    );
    assert!(all[3]
        .1
        .reason
        .contains("zcrx registration on v0 rx queue 0 refused"));
}

#[test]
fn loopback_trial_decides_the_loopback_verdict() {
    let k = kernel_618();
    let lo = soft("lo", IfaceKind::Loopback, None, 0);
    let mut t = Trials {
        send_zc_loopback: Some(Ok(1.0)),
        ..Trials::default()
    };
    let f = judge_one(Mechanism::UringZc, &k, &lo, &t);
    assert_eq!(
        f.verdict,
        Verdict::ZeroCopy,
        "a kernel that stops copying is believed"
    );
    assert!(f.reason.contains("100%"), "{}", f.reason);
    t.send_zc_loopback = Some(Ok(0.0));
    assert_eq!(
        judge_one(Mechanism::UringZc, &k, &lo, &t).verdict,
        Verdict::Copies
    );
    // The same trial does not make veth zero-copy: it ran over another path.
    let veth = soft("v0", IfaceKind::Veth, Some("veth"), 0x23);
    t.send_zc_loopback = Some(Ok(1.0));
    let f = judge_one(Mechanism::UringZc, &k, &veth, &t);
    assert_eq!(f.verdict, Verdict::Copies);
    assert!(f.reason.contains("tried over loopback"), "{}", f.reason);
}

#[test]
fn header_split_rules_on_a_nic() {
    let k = kernel_618();
    let t = Trials::default();
    let off = nic(HeaderSplit::Disabled, 0, 8, Some(true));
    for m in [Mechanism::Zcrx, Mechanism::DevmemRx] {
        let f = judge_one(m, &k, &off, &t);
        assert_eq!(f.verdict, Verdict::Unsupported);
        let r = f.remedy.unwrap();
        assert!(
            r.starts_with("ethtool -G eth9 tcp-data-split on hds-thresh 0"),
            "{r}"
        );
        assert!(r.contains("zcnet nic setup --iface eth9 --queue 7"), "{r}");
    }
    let thresh = nic(HeaderSplit::Enabled, 256, 8, Some(true));
    let f = judge_one(Mechanism::Zcrx, &k, &thresh, &t);
    assert_eq!(f.verdict, Verdict::Unsupported);
    assert_eq!(f.remedy.as_deref(), Some("ethtool -G eth9 hds-thresh 0"));
    let one_q = nic(HeaderSplit::Enabled, 0, 1, Some(true));
    assert_eq!(
        judge_one(Mechanism::Zcrx, &k, &one_q, &t).remedy.as_deref(),
        Some("ethtool -L eth9 combined 2")
    );
    let ready = nic(HeaderSplit::Enabled, 0, 8, Some(true));
    let f = judge_one(Mechanism::Zcrx, &k, &ready, &t);
    assert_eq!((f.verdict, f.remedy), (Verdict::ZeroCopy, None));
    let ntuple_off = nic(HeaderSplit::Enabled, 0, 8, Some(false));
    let f = judge_one(Mechanism::Zcrx, &k, &ntuple_off, &t);
    assert_eq!(f.verdict, Verdict::ZeroCopy);
    assert!(f.remedy.unwrap().starts_with("ethtool -K eth9 ntuple on"));
    let not_reported = nic(HeaderSplit::NotReported("no".into()), 0, 8, Some(true));
    assert_eq!(
        judge_one(Mechanism::DevmemRx, &k, &not_reported, &t).verdict,
        Verdict::Unsupported
    );
}

#[test]
fn nic_send_paths_and_xsk() {
    let k = kernel_618();
    let t = Trials::default();
    let mut i = nic(HeaderSplit::Enabled, 0, 8, Some(true));
    assert_eq!(
        judge_one(Mechanism::UringZc, &k, &i, &t).verdict,
        Verdict::ZeroCopy
    );
    assert_eq!(
        judge_one(Mechanism::AfXdpZerocopy, &k, &i, &t).verdict,
        Verdict::ZeroCopy
    );
    assert_eq!(
        judge_one(Mechanism::DevmemTx, &k, &i, &t).verdict,
        Verdict::ZeroCopy
    );
    i.scatter_gather = Some(false);
    let f = judge_one(Mechanism::MsgZerocopy, &k, &i, &t);
    assert_eq!(f.verdict, Verdict::Copies);
    assert_eq!(f.remedy.as_deref(), Some("ethtool -K eth9 sg on"));
    // The kernel's answer beats the advertised feature bit.
    let t = Trials {
        xsk_zerocopy: Some(Err(Refusal {
            errno: errno::EOPNOTSUPP,
            message: "no".into(),
        })),
        ..Trials::default()
    };
    let f = judge_one(Mechanism::AfXdpZerocopy, &k, &i, &t);
    assert_eq!((f.verdict, f.confirmed), (Verdict::Unsupported, true));
}

#[test]
fn devmem_probe_fd_refusals() {
    let k = kernel_618();
    let mut i = nic(HeaderSplit::NotReported("n/a".into()), 0, 8, Some(true));
    i.driver = Some("newdrv".into());
    let einval = Some(Err(Refusal {
        errno: errno::EINVAL,
        message: "Invalid argument".into(),
    }));
    let t = Trials {
        devmem_rx: einval.clone(),
        devmem_tx: einval,
        ..Trials::default()
    };
    // bind-tx got past netmem_tx: the driver can transmit netmem.
    let tx = judge_one(Mechanism::DevmemTx, &k, &i, &t);
    assert_eq!((tx.verdict, tx.confirmed), (Verdict::ZeroCopy, true));
    // bind-rx got past the ops check, but header split is still missing.
    let rx = judge_one(Mechanism::DevmemRx, &k, &i, &t);
    assert_eq!((rx.verdict, rx.confirmed), (Verdict::Unsupported, true));
    assert!(rx.reason.contains("only the probe fd"), "{}", rx.reason);
}

#[test]
fn old_or_restricted_kernels() {
    let i = soft("v0", IfaceKind::Veth, Some("veth"), 0x23);
    let t = Trials::default();
    let mut k = kernel_618();
    k.uring.unusable = Some("kernel.io_uring_disabled is 2".into());
    for m in [Mechanism::UringZc, Mechanism::Zcrx] {
        let f = judge_one(m, &k, &i, &t);
        assert_eq!(f.verdict, Verdict::Unsupported);
        assert_eq!(
            f.remedy.as_deref(),
            Some("sysctl -w kernel.io_uring_disabled=0")
        );
    }
    let mut k = kernel_618();
    k.version = (5, 15);
    k.uring.send_zc = false;
    k.uring.recv_zc = false;
    k.netdev_ops = None;
    k.af_xdp = false;
    for m in [
        Mechanism::UringZc,
        Mechanism::Zcrx,
        Mechanism::DevmemRx,
        Mechanism::DevmemTx,
        Mechanism::AfXdpCopy,
        Mechanism::AfXdpZerocopy,
    ] {
        let f = judge_one(m, &k, &i, &t);
        assert_eq!(f.verdict, Verdict::Unsupported, "{m:?}");
    }
    assert_eq!(
        judge_one(Mechanism::MsgZerocopy, &k, &i, &t).verdict,
        Verdict::Copies
    );
    let mut k = kernel_618();
    k.netdev_ops.as_mut().unwrap().retain(|o| o != "bind-tx");
    let f = judge_one(Mechanism::DevmemTx, &k, &i, &t);
    assert!(f.reason.contains("no bind-tx operation"), "{}", f.reason);
}

#[test]
fn small_memlock_is_mentioned_for_zcrx() {
    let mut k = kernel_618();
    k.ipc_lock = false;
    let f = judge_one(
        Mechanism::Zcrx,
        &k,
        &nic(HeaderSplit::Enabled, 0, 8, Some(true)),
        &Trials::default(),
    );
    assert!(
        f.reason.contains("RLIMIT_MEMLOCK is 8192 KiB"),
        "{}",
        f.reason
    );
    assert_eq!(f.remedy.as_deref(), Some("ulimit -l unlimited"));
}

fn any_kind() -> impl Strategy<Value = IfaceKind> {
    prop_oneof![
        Just(IfaceKind::Loopback),
        Just(IfaceKind::Veth),
        Just(IfaceKind::Ifb),
        Just(IfaceKind::Virtual),
        Just(IfaceKind::Physical),
    ]
}

fn any_split() -> impl Strategy<Value = HeaderSplit> {
    prop_oneof![
        Just(HeaderSplit::NotReported("x".into())),
        Just(HeaderSplit::Unknown),
        Just(HeaderSplit::Disabled),
        Just(HeaderSplit::Enabled),
    ]
}

proptest! {
    /// Without trials, a software device never gets a zero-copy receive verdict, and every
    /// finding explains itself; "unsupported" never comes with an empty reason.
    #[test]
    fn software_devices_never_claim_zero_copy_receive(
        kind in any_kind(), split in any_split(), hds in 0u32..512, queues in 0u32..16,
        xdp in any::<u64>(), sg in any::<Option<bool>>(), ntuple in any::<Option<bool>>(),
        send_zc in any::<bool>(), recv_zc in any::<bool>(), ring in any::<bool>(),
    ) {
        let mut k = kernel_618();
        k.uring.send_zc = send_zc;
        k.uring.recv_zc = recv_zc;
        k.uring.zcrx_ring = ring;
        let i = IfaceFacts {
            name: "x".into(), kind, driver: None, xdp_features: Some(xdp), rx_queues: queues,
            header_split: split.clone(), hds_thresh: Some(hds), ntuple, scatter_gather: sg,
        };
        for (m, f) in judge(&k, &i, &Trials::default()) {
            prop_assert!(!f.reason.is_empty());
            if kind != IfaceKind::Physical && matches!(m, Mechanism::Zcrx | Mechanism::DevmemRx | Mechanism::DevmemTx) {
                prop_assert_eq!(f.verdict, Verdict::Unsupported);
            }
            if m == Mechanism::Zcrx && f.verdict == Verdict::ZeroCopy {
                prop_assert!(recv_zc && ring && split == HeaderSplit::Enabled && hds == 0 && queues >= 2);
            }
        }
    }
}

#[test]
fn trials_this_process_may_not_make_leave_the_inferred_verdict() {
    let k = kernel_618();
    let i = soft("v0", IfaceKind::Veth, Some("veth"), 0x23);
    let eperm = || {
        Some(Err(Refusal {
            errno: errno::EPERM,
            message: "Operation not permitted".into(),
        }))
    };
    let t = Trials {
        zcrx: eperm(),
        xsk_copy: eperm(),
        xsk_zerocopy: eperm(),
        devmem_rx: eperm(),
        ..Trials::default()
    };
    assert_eq!(verdicts(&k, &i, &t), SOFTWARE_VERDICTS);
    for m in [
        Mechanism::Zcrx,
        Mechanism::AfXdpCopy,
        Mechanism::AfXdpZerocopy,
        Mechanism::DevmemRx,
    ] {
        let f = judge_one(m, &k, &i, &t);
        assert!(!f.confirmed, "{m:?}: a refused permission confirms nothing");
        assert!(f.reason.contains("not confirmed"), "{m:?}: {}", f.reason);
    }
    // On a NIC whose driver advertises AF_XDP zero copy, EPERM must not turn it unsupported.
    let nic = nic(HeaderSplit::Enabled, 0, 8, Some(true));
    let f = judge_one(Mechanism::AfXdpZerocopy, &k, &nic, &t);
    assert_eq!((f.verdict, f.confirmed), (Verdict::ZeroCopy, false));
}
