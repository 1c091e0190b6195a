use super::*;
use proptest::prelude::*;

/// The kernel of the development and CI machines: 6.18, io_uring with SEND_ZC/RECV_ZC, the
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
        ethtool_cli: true,
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
        channels: None,
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
        // mlx5: combined channels, as many as the CPUs allow (here 16).
        channels: Some(RxChannels {
            combined: queues,
            combined_max: 16,
            ..RxChannels::default()
        }),
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

/// A dummy device (the 7.2 lab loads the driver; `bench tx --path dummy`): a software device, so
/// no zcrx or devmem, but UDP sent through it is zero copy (the driver frees each skb without
/// copying), and AF_XDP copy-mode TX copies (dummy does not set IFF_TX_SKB_NO_LINEAR).
#[test]
fn dummy_is_software_with_zero_copy_udp_sends() {
    let k = kernel_618();
    let dm = soft("dm0", IfaceKind::Virtual, Some("dummy"), 0);
    assert_eq!(
        verdicts(&k, &dm, &Trials::default()),
        [
            ("copy", "copies"),
            ("msg-zerocopy", "zero-copy"),
            ("uring-zc", "zero-copy"),
            ("zcrx", "unsupported"),
            ("devmem-rx", "unsupported"),
            ("devmem-tx", "unsupported"),
            ("af-xdp-copy", "copies"),
            ("af-xdp-zerocopy", "unsupported"),
        ]
    );
    for m in [Mechanism::MsgZerocopy, Mechanism::UringZc] {
        let f = judge_one(m, &k, &dm, &Trials::default());
        assert!(f.reason.to_string().starts_with("UDP: "), "{}", f.reason);
        for word in ["dummy_xmit", "no COPIED", "TCP through it reaches no peer"] {
            assert!(f.reason.contains(word), "{word}: {}", f.reason);
        }
        assert_eq!((f.remedy, f.confirmed), (None, false));
    }
    // A loopback trial is evidence about the mechanism, not about the dummy device.
    let t = Trials {
        msg_zerocopy_loopback: Some(Ok(0.0)),
        ..Trials::default()
    };
    let f = judge_one(Mechanism::MsgZerocopy, &k, &dm, &t);
    assert_eq!((f.verdict, f.confirmed), (Verdict::ZeroCopy, false));
    // Scatter-gather off still linearizes (copies) each payload.
    let mut no_sg = dm.clone();
    no_sg.scatter_gather = Some(false);
    let f = judge_one(Mechanism::UringZc, &k, &no_sg, &Trials::default());
    assert_eq!(f.verdict, Verdict::Copies, "{}", f.reason);
    // Another software device (tun), and a device that only calls itself dummy without being
    // a software one, keep their verdicts.
    let tun = soft("tun0", IfaceKind::Virtual, Some("tun"), 0);
    assert_eq!(verdicts(&k, &tun, &Trials::default()), SOFTWARE_VERDICTS);
    let mut phys = nic(HeaderSplit::Enabled, 0, 8, Some(true));
    phys.driver = Some("dummy".into());
    let f = judge_one(Mechanism::MsgZerocopy, &k, &phys, &Trials::default());
    assert!(
        f.reason.to_string().starts_with("TCP and UDP"),
        "{}",
        f.reason
    );
    let g = xsk::generic_zc_xmit(&k, &dm);
    assert_eq!((g.answer, g.inferred), (xsk::ZcXmit::No, true), "{g:?}");
    assert!(g.reason.contains("dummy.c:dummy_setup"), "{}", g.reason);
}

/// A send verdict says which protocol it is about: an ifb "copies" TCP (a stream ends in a
/// socket on this host) while UDP into an ifb that drops it (`bench tx --path sink`) is zero
/// copy; a verdict that named neither, next to a remedy pointing at the sink, contradicted it.
#[test]
fn send_verdicts_name_their_protocol() {
    let k = kernel_618();
    let mut eth = nic(HeaderSplit::Enabled, 0, 8, Some(true));
    let mut no_sg = eth.clone();
    no_sg.scatter_gather = Some(false);
    eth.name = "eth9".into();
    let trials = [
        Trials::default(),
        Trials {
            msg_zerocopy_loopback: Some(Ok(0.0)),
            send_zc_loopback: Some(Ok(1.0)),
            ..Trials::default()
        },
    ];
    for i in [
        soft("v0", IfaceKind::Veth, Some("veth"), 0x23),
        soft("lo", IfaceKind::Loopback, None, 0),
        soft("sink0", IfaceKind::Ifb, Some("ifb"), 0),
        soft("tun0", IfaceKind::Virtual, Some("tun"), 0),
        eth.clone(),
        no_sg.clone(),
    ] {
        for t in &trials {
            for m in [Mechanism::MsgZerocopy, Mechanism::UringZc] {
                let f = judge_one(m, &k, &i, t);
                let says = |p: &str| f.reason.contains(p);
                assert!(says("TCP") || says("UDP"), "{} {m:?}: {}", i.name, f.reason);
                if let Some(fix) = f
                    .remedy
                    .as_ref()
                    .map(ToString::to_string)
                    .as_deref()
                    .filter(|r| r.contains("ifb device"))
                {
                    // The sink is UDP: a remedy pointing at it says so, and the verdict it
                    // follows is about TCP.
                    assert!(
                        fix.contains("UDP") && says("TCP"),
                        "{}: {} / {fix}",
                        i.name,
                        f.reason
                    );
                }
            }
        }
    }
    let ifb = soft("sink0", IfaceKind::Ifb, Some("ifb"), 0);
    let f = judge_one(Mechanism::MsgZerocopy, &k, &ifb, &Trials::default());
    assert!(f.reason.to_string().starts_with("TCP"), "{}", f.reason);
    assert!(
        f.remedy
            .as_ref()
            .map(ToString::to_string)
            .as_deref()
            .is_some_and(|r| r.contains("UDP")),
        "{:?}",
        f.remedy
    );
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
        // The send trials ran over TCP loopback, not over v0: they confirm nothing about v0.
        let tried_here = !matches!(m, Mechanism::MsgZerocopy | Mechanism::UringZc);
        assert_eq!(f.confirmed, tried_here, "{m:?}: {}", f.reason);
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
    assert!(judge_one(Mechanism::UringZc, &k, &lo, &t).confirmed);
    // The same trial does not make veth zero-copy: it ran over another path.
    let veth = soft("v0", IfaceKind::Veth, Some("veth"), 0x23);
    t.send_zc_loopback = Some(Ok(1.0));
    let f = judge_one(Mechanism::UringZc, &k, &veth, &t);
    assert_eq!(f.verdict, Verdict::Copies);
    assert!(
        f.reason.contains("not tried over this device"),
        "{}",
        f.reason
    );
}

#[test]
fn a_loopback_trial_confirms_nothing_about_another_interface() {
    // An ifb's (or veth's, or a NIC's) send verdict was once marked confirmed
    // because MSG_ZEROCOPY / SEND_ZC had worked over TCP loopback.
    let k = kernel_618();
    let ok = Trials {
        msg_zerocopy_loopback: Some(Ok(0.0)),
        send_zc_loopback: Some(Ok(0.0)),
        ..Trials::default()
    };
    let failed = Trials {
        msg_zerocopy_loopback: Some(Err(Refusal {
            errno: 101,
            message: "Network is unreachable".into(),
        })),
        send_zc_loopback: Some(Err(Refusal {
            errno: 101,
            message: "Network is unreachable".into(),
        })),
        ..Trials::default()
    };
    for i in [
        soft("sink0", IfaceKind::Ifb, Some("ifb"), 0),
        soft("v0", IfaceKind::Veth, Some("veth"), 0x23),
        nic(HeaderSplit::Enabled, 0, 8, Some(true)),
    ] {
        for t in [&ok, &failed] {
            for m in [Mechanism::MsgZerocopy, Mechanism::UringZc] {
                let f = judge_one(m, &k, &i, t);
                // A failed loopback trial leaves this device's inferred verdict as it was.
                let inferred = judge_one(m, &k, &i, &Trials::default());
                assert_eq!(
                    f.verdict, inferred.verdict,
                    "{} {m:?}: {}",
                    i.name, f.reason
                );
                assert!(!f.confirmed, "{} {m:?}: {}", i.name, f.reason);
                assert!(
                    f.reason.contains("loopback") && f.reason.contains("this device"),
                    "{} {m:?}: {}",
                    i.name,
                    f.reason
                );
            }
        }
    }
    // Over lo itself the same trials are the verdict, success or failure.
    let lo = soft("lo", IfaceKind::Loopback, None, 0);
    for t in [&ok, &failed] {
        for m in [Mechanism::MsgZerocopy, Mechanism::UringZc] {
            assert!(judge_one(m, &k, &lo, t).confirmed, "lo {m:?}");
        }
    }
}

#[test]
fn queue_remedies_are_commands_that_work_or_say_there_is_none() {
    // `ethtool -L lo combined 2` was once suggested for lo, which has no
    // channels to change (and ethtool may not be installed).
    assert_eq!(
        add_rx_queues("lo", 2, None, true).unwrap_err(),
        "lo reports no channels that could be changed (its driver has no channel control), so no command can give it more RX queues"
    );
    // Reported but all zero (nothing to change) is the same.
    assert!(add_rx_queues("x0", 2, Some(&RxChannels::default()), true).is_err());
    let mlx = RxChannels {
        combined: 1,
        combined_max: 8,
        ..RxChannels::default()
    };
    assert_eq!(
        add_rx_queues("eth0", 2, Some(&mlx), true).unwrap(),
        "nic::LiveNic::set_channels (eth0, combined 2) (or: ethtool -L eth0 combined 2)"
    );
    let bare = add_rx_queues("eth0", 4, Some(&mlx), false).unwrap();
    assert!(
        bare.starts_with("nic::LiveNic::set_channels (eth0, combined 4) (ethtool is not installed"),
        "{bare}"
    );
    assert!(!bare.contains("ethtool -L"), "{bare}");
    // More than the driver allows: no command, and the limit.
    let e = add_rx_queues("eth0", 9, Some(&mlx), true).unwrap_err();
    assert!(e.contains("at most 8 RX queue(s)"), "{e}");
    // Already at the maximum.
    let full = RxChannels {
        combined: 8,
        combined_max: 8,
        ..RxChannels::default()
    };
    assert!(add_rx_queues("eth0", 9, Some(&full), true).is_err());
    // A veth reports RX-only channels (rx 1, max 2 with two CPUs): `rx`, not `combined`.
    let veth = RxChannels {
        rx: 1,
        rx_max: 2,
        ..RxChannels::default()
    };
    assert_eq!(
        add_rx_queues("v0", 2, Some(&veth), false).unwrap(),
        "nic::LiveNic::set_channels (v0, rx 2) (ethtool is not installed; this uses the same ethtool netlink request)"
    );
    // RX-only channels add to combined ones: 2 rx + 6 combined, need 8 → combined 6 is enough
    // only when it is allowed.
    let mixed = RxChannels {
        rx: 2,
        rx_max: 2,
        combined: 4,
        combined_max: 6,
    };
    assert_eq!(
        add_rx_queues("eth1", 8, Some(&mixed), true).unwrap(),
        "nic::LiveNic::set_channels (eth1, combined 6) (or: ethtool -L eth1 combined 6)"
    );
    assert!(add_rx_queues("eth1", 9, Some(&mixed), true).is_err());
}

#[test]
fn a_refused_permission_offers_no_root_where_root_is_refused_too() {
    // An unprivileged probe of a device that cannot do zcrx was once told to
    // run as root, where the kernel refuses it for the device's own reasons.
    let k = kernel_618();
    let eperm = Some(Err(Refusal {
        errno: errno::EPERM,
        message: "Operation not permitted".into(),
    }));
    let t = Trials {
        zcrx: eperm.clone(),
        devmem_rx: eperm.clone(),
        xsk_zerocopy: eperm.clone(),
        xsk_copy: eperm,
        ..Trials::default()
    };
    let lo = soft("lo", IfaceKind::Loopback, None, 0);
    for m in [
        Mechanism::Zcrx,
        Mechanism::DevmemRx,
        Mechanism::AfXdpZerocopy,
    ] {
        let f = judge_one(m, &k, &lo, &t);
        assert_eq!(f.verdict, Verdict::Unsupported, "{m:?}");
        assert_eq!(f.remedy, None, "{m:?}: root is refused too");
    }
    // Where the device could, confirming as root is a way forward.
    let f = judge_one(Mechanism::AfXdpCopy, &k, &lo, &t);
    assert!(f.remedy.unwrap().contains("as root"));
}

#[test]
fn a_trial_that_finds_its_queue_busy_confirms_nothing() {
    // zcrx registered on a queue whose AF_XDP pool the kernel was still releasing (or that a
    // running application holds) is EBUSY/EEXIST: the device is not the cause, so the
    // inferred verdict stands, unconfirmed, never "unsupported, confirmed".
    let k = kernel_618();
    let on = nic(HeaderSplit::Enabled, 0, 8, Some(true));
    let inferred = judge_one(Mechanism::Zcrx, &k, &on, &Trials::default());
    for e in [errno::EBUSY, errno::EEXIST] {
        let t = Trials {
            zcrx: Some(Err(Refusal {
                errno: e,
                message: "Device or resource busy".into(),
            })),
            ..Trials::default()
        };
        let f = judge_one(Mechanism::Zcrx, &k, &on, &t);
        assert_eq!(f.verdict, inferred.verdict, "errno {e}");
        assert!(!f.confirmed, "errno {e}");
        assert!(f.reason.contains("found the queue in use"), "{}", f.reason);
    }
}

#[test]
fn a_trial_refused_for_the_configuration_keeps_its_reason_and_remedy() {
    // Header split off: the zcrx registration is refused (EINVAL) because of it. The report says
    // so and how to change it, not "unsupported" as if the device could not.
    let k = kernel_618();
    let off = nic(HeaderSplit::Disabled, 0, 8, Some(true));
    let t = Trials {
        zcrx: Some(Err(Refusal {
            errno: errno::EINVAL,
            message: "Invalid argument (os error 22)".into(),
        })),
        ..Trials::default()
    };
    let f = judge_one(Mechanism::Zcrx, &k, &off, &t);
    assert_eq!(f.verdict, Verdict::Unsupported);
    assert!(
        f.reason
            .to_string()
            .starts_with("header split is off on eth9"),
        "{}",
        f.reason
    );
    assert!(
        f.reason.contains("refused as expected: Invalid argument"),
        "{}",
        f.reason
    );
    assert_eq!(
        f.remedy.as_ref().map(ToString::to_string).as_deref(),
        Some("nic::NicGuard::apply (eth9, queue 7, the flow's port)")
    );
    assert!(f.confirmed);
    // Where the device itself says no (header split on, the registration still refused), the
    // refusal is the reason, confirmed.
    let on = nic(HeaderSplit::Enabled, 0, 8, Some(true));
    let f = judge_one(Mechanism::Zcrx, &k, &on, &t);
    assert_eq!(f.verdict, Verdict::Unsupported);
    assert!(
        f.reason
            .to_string()
            .starts_with("zcrx registration on eth9"),
        "{}",
        f.reason
    );
    assert!(f.confirmed);
}

#[test]
fn header_split_rules_on_a_nic() {
    let k = kernel_618();
    let t = Trials::default();
    let off = nic(HeaderSplit::Disabled, 0, 8, Some(true));
    for m in [Mechanism::Zcrx, Mechanism::DevmemRx] {
        let f = judge_one(m, &k, &off, &t);
        assert_eq!(f.verdict, Verdict::Unsupported);
        // zcnet's own command: Debian's ethtool 6.1 does not know tcp-data-split.
        assert_eq!(
            f.remedy.as_ref().map(ToString::to_string).as_deref(),
            Some("nic::NicGuard::apply (eth9, queue 7, the flow's port)")
        );
    }
    let thresh = nic(HeaderSplit::Enabled, 256, 8, Some(true));
    let f = judge_one(Mechanism::Zcrx, &k, &thresh, &t);
    assert_eq!(f.verdict, Verdict::Unsupported);
    assert_eq!(
        f.remedy.as_ref().map(ToString::to_string).as_deref(),
        Some("nic::NicGuard::apply (eth9, queue 7, the flow's port)")
    );
    let one_q = nic(HeaderSplit::Enabled, 0, 1, Some(true));
    assert_eq!(
        judge_one(Mechanism::Zcrx, &k, &one_q, &t)
            .remedy
            .as_ref()
            .map(ToString::to_string)
            .as_deref(),
        Some("nic::LiveNic::set_channels (eth9, combined 2) (or: ethtool -L eth9 combined 2)")
    );
    // A driver that cannot have a second queue gets the reason and no command.
    let mut stuck = one_q.clone();
    stuck.channels = Some(RxChannels {
        combined: 1,
        combined_max: 1,
        ..RxChannels::default()
    });
    let f = judge_one(Mechanism::Zcrx, &k, &stuck, &t);
    assert_eq!(
        (
            f.verdict,
            f.remedy.as_ref().map(ToString::to_string).as_deref()
        ),
        (Verdict::Unsupported, None)
    );
    assert!(f.reason.contains("at most 1 RX queue"), "{}", f.reason);
    let ready = nic(HeaderSplit::Enabled, 0, 8, Some(true));
    let f = judge_one(Mechanism::Zcrx, &k, &ready, &t);
    assert_eq!((f.verdict, f.remedy), (Verdict::ZeroCopy, None));
    let ntuple_off = nic(HeaderSplit::Enabled, 0, 8, Some(false));
    let f = judge_one(Mechanism::Zcrx, &k, &ntuple_off, &t);
    assert_eq!(f.verdict, Verdict::ZeroCopy);
    // `nic setup --port` turns ntuple-filters on itself.
    assert_eq!(
        f.remedy.as_ref().map(ToString::to_string).as_deref(),
        Some("nic::NicGuard::apply (eth9, queue 7, the flow's port)")
    );
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
    assert_eq!(
        f.remedy.as_ref().map(ToString::to_string).as_deref(),
        Some("ethtool -K eth9 sg on")
    );
    // Without ethtool installed the remedy says so instead of naming a missing command.
    let mut k_bare = k.clone();
    k_bare.ethtool_cli = false;
    let r = judge_one(Mechanism::MsgZerocopy, &k_bare, &i, &t)
        .remedy
        .unwrap();
    assert!(
        r.starts_with("install ethtool (it is not installed here)"),
        "{r}"
    );
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
    // bind-rx got past its early checks, which say nothing of header split (checked only at
    // queue binding) and differ between releases: the inferred verdict, not confirmed.
    let rx = judge_one(Mechanism::DevmemRx, &k, &i, &t);
    assert_eq!((rx.verdict, rx.confirmed), (Verdict::Unsupported, false));
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
            f.remedy.as_ref().map(ToString::to_string).as_deref(),
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
    assert_eq!(
        f.remedy.as_ref().map(ToString::to_string).as_deref(),
        Some("ulimit -l unlimited")
    );
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
            channels: None,
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
