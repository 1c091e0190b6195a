use serde_json::{json, Value};

use super::super::{ProtoError, StreamResults, TestResults, ZEROCOPY_KEY};
use super::fixtures::{self, value};

fn parse(text: &str) -> TestResults {
    TestResults::from_json(&value(text)).unwrap()
}

fn sample_stream(id: i64) -> StreamResults {
    StreamResults {
        id,
        bytes: 1 << 33,
        retransmits: 4,
        jitter: 0.000125,
        errors: 2,
        omitted_errors: Some(1),
        packets: 1000,
        omitted_packets: Some(10),
        start_time: Some(0.0),
        end_time: Some(10.25),
    }
}

#[zcnet_testkit::test]
fn reads_3_9_tcp_server_results() {
    let r = parse(fixtures::RESULTS_3_9_TCP_SERVER);
    assert_eq!(r.sender_has_retransmits, -1);
    assert_eq!(r.congestion_used.as_deref(), Some("cubic"));
    assert!((r.cpu_util_total - 1.357_473_967_095_421).abs() < 1e-15);
    let s = &r.streams[0];
    assert_eq!(
        (s.id, s.bytes, s.retransmits, s.errors, s.packets),
        (1, 12_346_695_680, -1, 0, 0)
    );
    assert_eq!((s.omitted_errors, s.omitted_packets), (None, None));
    assert_eq!((s.start_time, s.end_time), (Some(0.0), Some(10.000182)));
}

#[zcnet_testkit::test]
fn reads_3_9_udp_client_results() {
    let r = parse(fixtures::RESULTS_3_9_UDP_CLIENT);
    let ids: Vec<i64> = r.streams.iter().map(|s| s.id).collect();
    assert_eq!(ids, vec![1, 3, 4, 5]);
    assert_eq!(r.stream(4).map(|s| s.packets), Some(936));
    assert_eq!(r.stream(2), None);
    assert_eq!(r.cpu_util_system, 2.0);
}

#[zcnet_testkit::test]
fn reads_3_21_udp_server_results_with_text_output() {
    let r = parse(fixtures::RESULTS_3_21_UDP_SERVER);
    let s = &r.streams[0];
    assert_eq!(
        (s.errors, s.omitted_errors, s.packets, s.omitted_packets),
        (3, Some(0), 937, Some(0))
    );
    assert!((s.jitter - 1.2345e-05).abs() < 1e-18);
    assert!(r
        .server_output_text
        .unwrap()
        .starts_with("Accepted connection"));
    assert_eq!(r.server_output_json, None);
}

#[zcnet_testkit::test]
fn reads_3_21_bidir_with_json_output() {
    let r = parse(fixtures::RESULTS_3_21_BIDIR_SERVER_JSON);
    assert_eq!(r.streams.len(), 4);
    assert_eq!(r.stream(4).map(|s| s.retransmits), Some(17));
    assert_eq!(
        r.server_output_json
            .as_ref()
            .and_then(|j| j.pointer("/start/version")),
        Some(&json!("iperf 3.21"))
    );
}

#[zcnet_testkit::test]
fn reads_pre_3_2_without_times() {
    let r = parse(fixtures::RESULTS_PRE_3_2);
    assert_eq!(
        (r.streams[0].start_time, r.streams[0].end_time),
        (None, None)
    );
}

#[zcnet_testkit::test]
fn every_fixture_round_trips_to_the_same_json() {
    for f in [
        fixtures::RESULTS_3_9_TCP_SERVER,
        fixtures::RESULTS_3_9_UDP_CLIENT,
        fixtures::RESULTS_3_21_UDP_SERVER,
        fixtures::RESULTS_3_21_BIDIR_SERVER_JSON,
        fixtures::RESULTS_PRE_3_2,
    ] {
        assert_eq!(parse(f).to_json(), value(f), "{f}");
    }
}

#[zcnet_testkit::test]
fn a_zcnet_peers_zerocopy_account_rides_along_and_nothing_else_does() {
    let mut r = parse(fixtures::RESULTS_PRE_3_2);
    assert_eq!(r.zerocopy, None, "iperf3 sends no account");
    r.zerocopy = Some(serde_json::json!({"tx": {"bytes": 7}, "rx": null}));
    let back = TestResults::from_json(&r.to_json()).expect("parse");
    assert_eq!(back, r);
    // A key of that name that is not an object is ignored, not trusted.
    let mut v = r.to_json();
    v[ZEROCOPY_KEY] = serde_json::json!("garbage");
    assert_eq!(TestResults::from_json(&v).expect("parse").zerocopy, None);
}

#[zcnet_testkit::test]
fn writes_the_keys_3_21_writes() {
    let r = TestResults {
        cpu_util_total: 3.5,
        cpu_util_user: 1.25,
        cpu_util_system: 2.25,
        sender_has_retransmits: 1,
        congestion_used: Some("cubic".into()),
        streams: vec![sample_stream(1), sample_stream(3)],
        server_output_text: None,
        server_output_json: None,
        zerocopy: None,
    };
    let v = r.to_json();
    let top: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    let mut want = vec![
        "cpu_util_total",
        "cpu_util_user",
        "cpu_util_system",
        "sender_has_retransmits",
        "congestion_used",
        "streams",
    ];
    let mut top_sorted = top.clone();
    top_sorted.sort_unstable();
    want.sort_unstable();
    assert_eq!(top_sorted, want);
    let stream = v["streams"][0].as_object().unwrap();
    let mut keys: Vec<&str> = stream.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "bytes",
            "end_time",
            "errors",
            "id",
            "jitter",
            "omitted_errors",
            "omitted_packets",
            "packets",
            "retransmits",
            "start_time"
        ]
    );
    assert_eq!(v["streams"][0]["bytes"], json!(1u64 << 33));
    assert_eq!(TestResults::from_json(&v).unwrap(), r);
}

#[zcnet_testkit::test]
fn numbers_print_as_cjson_does() {
    let r = TestResults {
        streams: vec![StreamResults {
            jitter: 0.0,
            end_time: Some(10.0),
            ..sample_stream(1)
        }],
        ..TestResults::default()
    };
    let text = r.to_json().to_string();
    assert!(text.contains(r#""jitter":0,"#), "{text}");
    assert!(text.contains(r#""end_time":10"#), "{text}");
    assert!(text.contains(r#""cpu_util_total":0"#), "{text}");
    let nan = TestResults {
        cpu_util_total: f64::NAN,
        ..TestResults::default()
    };
    assert_eq!(nan.to_json()["cpu_util_total"], Value::Null);
}

#[zcnet_testkit::test]
fn server_output_json_wins_over_text() {
    let r = TestResults {
        server_output_text: Some("text".into()),
        server_output_json: Some(json!({"a": 1})),
        ..TestResults::default()
    };
    let v = r.to_json();
    assert_eq!(v.get("server_output_text"), None);
    assert_eq!(v["server_output_json"], json!({"a": 1}));
}

#[zcnet_testkit::test]
fn missing_required_keys_are_errors() {
    for key in [
        "cpu_util_total",
        "cpu_util_user",
        "cpu_util_system",
        "sender_has_retransmits",
        "streams",
    ] {
        let mut v = value(fixtures::RESULTS_3_9_TCP_SERVER);
        v.as_object_mut().unwrap().remove(key);
        assert_eq!(
            TestResults::from_json(&v),
            Err(ProtoError::MissingField(key)),
            "{key}"
        );
    }
    for key in ["id", "bytes", "retransmits", "jitter", "errors", "packets"] {
        let mut v = value(fixtures::RESULTS_3_9_TCP_SERVER);
        v["streams"][0].as_object_mut().unwrap().remove(key);
        assert_eq!(
            TestResults::from_json(&v),
            Err(ProtoError::MissingField(key)),
            "{key}"
        );
    }
}

#[zcnet_testkit::test]
fn wrong_types_and_values_are_errors() {
    let mut v = value(fixtures::RESULTS_3_9_TCP_SERVER);
    v["cpu_util_total"] = json!("1.0");
    assert_eq!(
        TestResults::from_json(&v),
        Err(ProtoError::MissingField("cpu_util_total"))
    );
    let mut v = value(fixtures::RESULTS_3_9_TCP_SERVER);
    v["streams"][0]["bytes"] = json!(-5);
    assert!(matches!(
        TestResults::from_json(&v),
        Err(ProtoError::InvalidField { key: "bytes", .. })
    ));
    let mut v = value(fixtures::RESULTS_3_9_TCP_SERVER);
    v["streams"] = json!({"id": 1});
    assert_eq!(
        TestResults::from_json(&v),
        Err(ProtoError::MissingField("streams"))
    );
    assert_eq!(
        TestResults::from_json(&json!("x")),
        Err(ProtoError::NotAnObject)
    );
}

#[zcnet_testkit::test]
fn omitted_keys_come_in_pairs() {
    let mut v = value(fixtures::RESULTS_3_21_UDP_SERVER);
    v["streams"][0]
        .as_object_mut()
        .unwrap()
        .remove("omitted_packets");
    assert!(matches!(
        TestResults::from_json(&v),
        Err(ProtoError::InvalidField {
            key: "omitted_errors",
            ..
        })
    ));
}

#[zcnet_testkit::test]
fn unknown_keys_are_ignored() {
    let mut v = value(fixtures::RESULTS_3_21_UDP_SERVER);
    v["future"] = json!(true);
    v["streams"][0]["future"] = json!([1]);
    assert_eq!(
        TestResults::from_json(&v).unwrap(),
        parse(fixtures::RESULTS_3_21_UDP_SERVER)
    );
}
