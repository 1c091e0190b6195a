//! The parts of `bench xsk` that need no lab: frames, the receiver's check, medians, ratios,
//! configuration errors.

use super::*;
use std::net::Ipv4Addr;
use zcnet_core::udp_frame::parse_udp;

fn flow() -> UdpFlow {
    UdpFlow {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        src: Ipv4Addr::new(10, 10, 0, 1),
        dst: Ipv4Addr::new(10, 10, 0, 2),
        src_port: 40_000,
        dst_port: PORT,
        udp_checksum: false,
    }
}

fn frame(tmpl: &[u8], seq: u64) -> Vec<u8> {
    let mut b = vec![0u8; tmpl.len()];
    write_frame(&mut b, tmpl, seq);
    b
}

#[zcnet_testkit::test]
fn frames_are_valid_udp_of_the_size_asked() {
    for size in [MIN_SIZE, 64, 512, 1500, MAX_SIZE] {
        let t = template(&flow(), size).unwrap();
        assert_eq!(t.len(), size);
        let f = frame(&t, 0xdead_beef);
        let p = parse_udp(&f).unwrap();
        assert_eq!(p.dst_port, PORT);
        assert_eq!(p.payload.len(), size - HEADERS_LEN);
        assert_eq!(p.payload[..8], 0xdead_beefu64.to_le_bytes());
        assert!(SeqCheck::is_flow(&f));
    }
}

#[zcnet_testkit::test]
fn the_check_counts_gaps_and_refuses_duplicates_and_damage() {
    let t = template(&flow(), 64).unwrap();
    let mut c = SeqCheck::new(&t);
    for seq in [0, 1, 2, 5, 6, 10] {
        c.frame(&frame(&t, seq));
    }
    assert_eq!((c.received(), c.gaps(), c.next()), (6, 5, 11));
    assert_eq!(c.failures().0, 0);
    // Another flow is skipped, not counted.
    let mut other = frame(&t, 11);
    other[36..38].copy_from_slice(&(PORT + 1).to_be_bytes());
    c.frame(&other);
    c.frame(&[0u8; 20]);
    assert_eq!(c.received(), 6);
    // A duplicate, a reordered one, a damaged one, a short one: failures.
    c.frame(&frame(&t, 10));
    c.frame(&frame(&t, 3));
    let mut bad = frame(&t, 12);
    bad[63] ^= 1;
    c.frame(&bad);
    c.frame(&frame(&t, 13)[..60]);
    let (n, first) = c.failures();
    assert_eq!(n, 4);
    assert!(
        first.unwrap().contains("duplicated or reordered"),
        "{first:?}"
    );
    assert_eq!(c.received(), 6);
}

#[zcnet_testkit::test]
fn medians() {
    assert_eq!(median([]), None);
    assert_eq!(median([3.0]), Some(3.0));
    assert_eq!(median([9.0, 1.0, 5.0]), Some(5.0));
    assert_eq!(median([4.0, 1.0, 3.0, 2.0]), Some(2.5));
    assert_eq!(median([f64::NAN, 1.0]), Some(1.0));
}

fn row(case: Case, size: usize, runs: &[(u64, u64)]) -> Row {
    Row {
        path: "veth",
        case,
        size,
        runs: runs
            .iter()
            .map(|&(sent, received)| Run {
                sent,
                received,
                tx_seconds: 1.0,
                rx_seconds: 1.0,
                tx_cpu: 1.0,
                rx_cpu: 0.5,
                kernel_drops: 0,
                gaps: 0,
            })
            .collect(),
        error: None,
        refused: false,
    }
}

#[zcnet_testkit::test]
fn rows_and_ratios_use_medians_and_the_best_af_packet_variant() {
    let cases = default_cases();
    let rows = vec![
        row(
            cases[0],
            64,
            &[
                (3_000_000, 2_900_000),
                (1_000_000, 1_000_000),
                (3_200_000, 3_000_000),
            ],
        ),
        Row {
            error: Some("refused".into()),
            refused: true,
            ..row(cases[1], 64, &[])
        },
        row(cases[2], 64, &[(1_000_000, 900_000)]),
        row(cases[3], 64, &[(2_000_000, 1_000_000)]),
        row(cases[6], 64, &[(1_000_000, 1_500_000)]),
    ];
    let x = &rows[0];
    assert_eq!(x.tx_pps(), Some(3_000_000.0));
    assert_eq!(x.rx_pps(), Some(2_900_000.0));
    assert_eq!(x.drops(), Some(300_000));
    assert_eq!(x.cpu_s_per_mpkt(), Some(1.5 / 2.9));
    let r = &ratios(&rows, &[64, 512])[..];
    assert_eq!(
        r[0].best_af_packet_tx,
        Some(("sendmmsg+qdisc-bypass", 2_000_000.0))
    );
    assert_eq!(r[0].tx_ratio, Some(1.5));
    let (name, pps) = r[0].best_af_packet_rx.clone().unwrap();
    assert_eq!(
        (name.as_str(), pps),
        ("recvmmsg (from sendmmsg)", 1_500_000.0)
    );
    assert!((r[0].rx_ratio.unwrap() - 2.9 / 1.5).abs() < 1e-9);
    assert_eq!(r.len(), 1, "no rows at 512: no ratio");
    assert_eq!(r[0].path, "veth");
    let report = XskReport {
        rows,
        sender_cpu: 0,
        receiver_cpu: 1,
        placement: String::new(),
        ratios: Vec::new(),
        repeat: 3,
        duration: Duration::from_secs(1),
    };
    assert_eq!(report.failed(), 0, "a refusal is not a failure");
}

#[zcnet_testkit::test]
fn sink_rows_have_no_receiver() {
    let case = Case {
        rx: RxVariant::None,
        ..default_cases()[2]
    };
    let mut r = row(case, 64, &[(2_000_000, 0)]);
    r.path = "sink";
    assert!(!r.has_receiver());
    assert_eq!(r.tx_pps(), Some(2_000_000.0));
    assert_eq!(
        (r.rx_pps(), r.drops(), r.rx_cpu_s_per_mpkt()),
        (None, None, None)
    );
    assert_eq!(
        r.cpu_s_per_mpkt(),
        Some(0.5),
        "the sender's alone, per million sent"
    );
    let x = Row {
        case: Case {
            rx: RxVariant::None,
            ..default_cases()[0]
        },
        ..r.clone()
    };
    let q = ratios(&[x, r], &[64]);
    assert_eq!(q[0].path, "sink");
    assert_eq!(q[0].tx_ratio, Some(1.0));
    assert_eq!(q[0].rx_ratio, None);
}

#[zcnet_testkit::test]
fn bad_configurations_are_refused_in_one_line() {
    let ok = XskBenchConfig::default();
    assert!(ok.check().is_ok());
    for (cfg, flag) in [
        (
            XskBenchConfig {
                sizes: vec![40],
                ..ok.clone()
            },
            "--size 40",
        ),
        (
            XskBenchConfig {
                sizes: vec![9000],
                ..ok.clone()
            },
            "--size 9000",
        ),
        (
            XskBenchConfig {
                sizes: vec![],
                ..ok.clone()
            },
            "--size",
        ),
        (
            XskBenchConfig {
                repeat: 0,
                ..ok.clone()
            },
            "--repeat",
        ),
        (
            XskBenchConfig {
                duration: Duration::ZERO,
                ..ok.clone()
            },
            "--duration",
        ),
        (
            XskBenchConfig {
                cases: vec![],
                ..ok.clone()
            },
            "--mode",
        ),
        (
            XskBenchConfig {
                paths: vec![],
                ..ok.clone()
            },
            "--path",
        ),
    ] {
        let e = cfg.check().unwrap_err().to_string();
        assert!(e.contains(flag) && !e.contains('\n'), "{e}");
    }
    assert!(pick_cpus(Some((100_000, 0))).is_err());
    let (a, b) = pick_cpus(None).unwrap();
    assert!(zcnet::os::thread_affinity().unwrap().contains(&a));
    assert!(zcnet::os::thread_affinity().unwrap().contains(&b));
}
