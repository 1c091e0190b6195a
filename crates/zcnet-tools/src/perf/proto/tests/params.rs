use serde_json::json;

use super::super::{ErrorCode, ProtoError, Protocol, TestParams, MAX_PARAMS_LEN};
use super::fixtures::{self, value};

fn parse(text: &str) -> TestParams {
    TestParams::from_json(&value(text)).unwrap()
}

#[zcnet_testkit::test]
fn reads_3_9_tcp_with_defaults_for_missing_keys() {
    let p = parse(fixtures::PARAMS_3_9_TCP);
    assert_eq!(
        p,
        TestParams {
            client_version: Some("3.9".into()),
            ..TestParams::default()
        }
    );
    assert_eq!((p.num, p.blockcount), (0, 0));
}

#[zcnet_testkit::test]
fn reads_3_9_udp() {
    let p = parse(fixtures::PARAMS_3_9_UDP);
    assert_eq!(p.protocol, Protocol::Udp);
    assert_eq!(
        (p.parallel, p.reverse, p.len, p.bandwidth),
        (4, true, 1400, 10_000_000)
    );
    assert!(p.get_server_output && p.udp_counters_64bit);
    assert_eq!(p.stream_count(), 4);
}

#[zcnet_testkit::test]
fn reads_3_21_bidir() {
    let p = parse(fixtures::PARAMS_3_21_BIDIR);
    assert_eq!((p.omit, p.time, p.num, p.parallel), (1, 0, 1 << 30, 2));
    assert!(p.bidirectional && p.nodelay && !p.reverse);
    assert_eq!(
        (p.window, p.congestion.as_deref(), p.zerocopy),
        (4 << 20, Some("bbr"), 1)
    );
    assert_eq!(p.stream_count(), 4);
}

#[zcnet_testkit::test]
fn writes_what_3_21_writes() {
    let tcp = TestParams {
        client_version: Some("3.21".into()),
        ..TestParams::default()
    };
    assert_eq!(tcp.to_json(), value(fixtures::PARAMS_3_21_TCP));
    let udp = TestParams {
        protocol: Protocol::Udp,
        len: 1448,
        bandwidth: 1 << 20,
        client_version: Some("3.21".into()),
        ..TestParams::default()
    };
    assert_eq!(udp.to_json(), value(fixtures::PARAMS_3_21_UDP));
    assert_eq!(
        parse(fixtures::PARAMS_3_21_BIDIR).to_json(),
        value(fixtures::PARAMS_3_21_BIDIR)
    );
}

#[zcnet_testkit::test]
fn round_trips_every_fixture() {
    for f in [
        fixtures::PARAMS_3_9_TCP,
        fixtures::PARAMS_3_9_UDP,
        fixtures::PARAMS_3_21_TCP,
        fixtures::PARAMS_3_21_BIDIR,
        fixtures::PARAMS_3_21_UDP,
    ] {
        let p = parse(f);
        assert_eq!(TestParams::from_json(&p.to_json()).unwrap(), p, "{f}");
    }
}

#[zcnet_testkit::test]
fn round_trips_every_field() {
    let p = TestParams {
        protocol: Protocol::Udp,
        omit: 3,
        server_affinity: Some(2),
        time: 30,
        num: 5_000_000_000,
        blockcount: 7,
        mss: 1400,
        nodelay: true,
        parallel: 8,
        reverse: true,
        bidirectional: false,
        mptcp: true,
        window: 1 << 22,
        len: 1200,
        bandwidth: 10_000_000_000,
        fqrate: 99,
        pacing_timer: 500,
        burst: 10,
        gso: 1,
        gso_dg_size: 1200,
        gso_bf_size: 64800,
        gro: 1,
        gro_bf_size: 65507,
        tos: 0x10,
        flowlabel: 12345,
        title: Some("t".into()),
        extra_data: Some("x".into()),
        congestion: Some("reno".into()),
        congestion_used: Some("cubic".into()),
        get_server_output: true,
        udp_counters_64bit: true,
        repeating_payload: true,
        zerocopy: 1,
        dont_fragment: true,
        authtoken: Some("tok".into()),
        skip_rx_copy: true,
        client_version: Some("zcnet 0.1".into()),
        unknown: [("future".to_string(), json!({"x": 1}))]
            .into_iter()
            .collect(),
    };
    assert_eq!(TestParams::from_json(&p.to_json()).unwrap(), p);
}

#[zcnet_testkit::test]
fn empty_block_is_iperf3_defaults() {
    let p = TestParams::from_json(&json!({})).unwrap();
    assert_eq!(p, TestParams::default());
    assert_eq!(
        (p.protocol, p.time, p.parallel, p.len, p.pacing_timer),
        (Protocol::Tcp, 10, 1, 131072, 1000)
    );
}

#[zcnet_testkit::test]
fn unknown_keys_are_ignored_but_kept() {
    let p =
        TestParams::from_json(&json!({"udp": true, "len": 1400, "new_in_3_99": [1, 2]})).unwrap();
    assert_eq!(p.protocol, Protocol::Udp);
    assert_eq!(p.unknown.get("new_in_3_99"), Some(&json!([1, 2])));
    assert!(p.options_in_use().is_empty());
    assert!(p.validate().is_ok());
}

#[zcnet_testkit::test]
fn numbers_as_cjson_reads_them() {
    let p = TestParams::from_json(&json!({"time": 10.9, "parallel": 2.0, "num": 1e9})).unwrap();
    assert_eq!((p.time, p.parallel, p.num), (10, 2, 1_000_000_000));
    // A key of the wrong type keeps its default, as iperf3 3.18+ does.
    let p = TestParams::from_json(&json!({"time": "20", "reverse": "yes"})).unwrap();
    assert_eq!((p.time, p.reverse), (10, false));
}

#[zcnet_testkit::test]
fn out_of_range_numbers_are_errors() {
    for (k, v) in [
        ("parallel", json!(-1)),
        ("len", json!(1u64 << 40)),
        ("num", json!(-5)),
    ] {
        let r = TestParams::from_json(&json!({ k: v }));
        assert!(matches!(r, Err(ProtoError::InvalidField { .. })), "{k}");
    }
    assert_eq!(
        TestParams::from_json(&json!([1])),
        Err(ProtoError::NotAnObject)
    );
}

#[zcnet_testkit::test]
fn flags_true_or_nonzero() {
    let p = TestParams::from_json(
        &json!({"reverse": 1, "nodelay": false, "get_server_output": 1, "skip_rx_copy": 0}),
    )
    .unwrap();
    assert!(p.reverse && !p.nodelay && p.get_server_output && !p.skip_rx_copy);
}

#[zcnet_testkit::test]
fn last_protocol_key_wins_as_in_get_parameters() {
    let p = TestParams::from_json(&json!({"tcp": true, "udp": true})).unwrap();
    assert_eq!(p.protocol, Protocol::Udp);
    let p = TestParams::from_json(&json!({"sctp": true, "tcp": true})).unwrap();
    assert_eq!(p.protocol, Protocol::Sctp);
}

#[zcnet_testkit::test]
fn validate_enforces_iperf3_limits() {
    let cases: [(TestParams, ErrorCode); 11] = [
        (
            TestParams {
                reverse: true,
                bidirectional: true,
                ..Default::default()
            },
            ErrorCode::IEREVERSEBIDIR,
        ),
        (
            TestParams {
                parallel: 0,
                ..Default::default()
            },
            ErrorCode::IENUMSTREAMS,
        ),
        (
            TestParams {
                parallel: 129,
                ..Default::default()
            },
            ErrorCode::IENUMSTREAMS,
        ),
        (
            TestParams {
                time: 86401,
                ..Default::default()
            },
            ErrorCode::IEDURATION,
        ),
        (
            TestParams {
                omit: 601,
                ..Default::default()
            },
            ErrorCode::IEOMIT,
        ),
        (
            TestParams {
                window: (512 << 20) + 1,
                ..Default::default()
            },
            ErrorCode::IEBUFSIZE,
        ),
        (
            TestParams {
                mss: 32768,
                ..Default::default()
            },
            ErrorCode::IEMSS,
        ),
        (
            TestParams {
                burst: 1001,
                ..Default::default()
            },
            ErrorCode::IEBURST,
        ),
        (
            TestParams {
                tos: 256,
                ..Default::default()
            },
            ErrorCode::IEBADTOS,
        ),
        (
            TestParams {
                len: (1 << 20) + 1,
                ..Default::default()
            },
            ErrorCode::IEBLOCKSIZE,
        ),
        (
            TestParams {
                protocol: Protocol::Udp,
                len: 15,
                ..Default::default()
            },
            ErrorCode::IEUDPBLOCKSIZE,
        ),
    ];
    for (p, code) in cases {
        match p.validate() {
            Err(ProtoError::ParamRejected { code: c, .. }) => assert_eq!(c, code),
            other => panic!("{code:?}: {other:?}"),
        }
    }
    let edge = TestParams {
        parallel: 128,
        time: 86400,
        omit: 600,
        len: 1 << 20,
        ..Default::default()
    };
    assert!(edge.validate().is_ok());
    let udp = TestParams {
        protocol: Protocol::Udp,
        len: 65507,
        ..Default::default()
    };
    assert!(udp.validate().is_ok());
    let udp = TestParams {
        protocol: Protocol::Udp,
        len: 65508,
        ..Default::default()
    };
    assert!(udp.validate().is_err());
}

#[zcnet_testkit::test]
fn options_in_use_and_unsupported() {
    let p = parse(fixtures::PARAMS_3_21_BIDIR);
    assert_eq!(
        p.options_in_use(),
        vec!["nodelay", "window", "congestion", "zerocopy"]
    );
    assert_eq!(
        p.unsupported(&["nodelay", "window"]),
        vec!["congestion", "zerocopy"]
    );
    assert!(p
        .unsupported(&["nodelay", "window", "congestion", "zerocopy"])
        .is_empty());
    assert!(parse(fixtures::PARAMS_3_21_TCP).options_in_use().is_empty());
    let udp = parse(fixtures::PARAMS_3_9_UDP);
    assert_eq!(
        udp.options_in_use(),
        vec!["get_server_output", "udp_counters_64bit"]
    );
    let sctp = TestParams {
        protocol: Protocol::Sctp,
        pacing_timer: 10,
        ..Default::default()
    };
    assert_eq!(sctp.options_in_use(), vec!["sctp", "pacing_timer"]);
}

#[zcnet_testkit::test]
fn reject_unsupported_says_which() {
    let p = parse(fixtures::PARAMS_3_21_BIDIR);
    assert_eq!(
        p.reject_unsupported(&["nodelay", "window", "congestion", "zerocopy"]),
        None
    );
    match p.reject_unsupported(&["nodelay", "window"]) {
        Some(ProtoError::ParamRejected { code, detail }) => {
            assert_eq!(code, ErrorCode::IEUNIMP);
            assert!(detail.ends_with("congestion, zerocopy"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
}

#[zcnet_testkit::test]
fn to_frame_refuses_a_block_over_8k() {
    let ok = TestParams::default().to_frame().unwrap();
    assert_eq!(&ok[..4], &(ok.len() as u32 - 4).to_be_bytes());
    let long = TestParams {
        title: Some("x".repeat(MAX_PARAMS_LEN)),
        ..Default::default()
    };
    assert!(matches!(
        long.to_frame(),
        Err(ProtoError::FrameTooLong { .. })
    ));
}

#[zcnet_testkit::test]
fn block_len_defaults_per_protocol() {
    assert_eq!(
        TestParams {
            len: 0,
            ..Default::default()
        }
        .block_len(),
        131072
    );
    assert_eq!(
        TestParams {
            len: 0,
            protocol: Protocol::Udp,
            ..Default::default()
        }
        .block_len(),
        1460
    );
    assert_eq!(
        TestParams {
            len: 999,
            ..Default::default()
        }
        .block_len(),
        999
    );
}
