//! `zcnet perf`'s parameter block and results (`TestParams::from_json`,
//! `TestResults::from_json`) on arbitrary JSON: no panic; what parses prints back to JSON that
//! parses to the same thing after one normalisation; validated parameters give a stream plan
//! of `stream_count` distinct ids; results keep their streams through a round trip.

use crate::input::Input;
use serde_json::Value;
use zcnet_tools::perf::proto::{
    stream_plan, StreamResults, TestParams, TestResults, KNOWN_KEYS, MAX_STREAMS,
};

/// Real messages (iperf3 3.9 and 3.21, see crates/zcnet-tools/src/perf/proto/tests/fixtures.rs)
/// that the fuzzer's bytes may patch instead of writing JSON from scratch.
const TEMPLATES: &[&str] = &[
    r#"{"tcp":true,"omit":0,"time":10,"parallel":1,"len":131072,"pacing_timer":1000,"client_version":"3.9"}"#,
    r#"{"udp":true,"omit":0,"time":10,"parallel":4,"reverse":true,"len":1400,"bandwidth":10000000,"pacing_timer":1000,"get_server_output":1,"udp_counters_64bit":1,"client_version":"3.9"}"#,
    r#"{"tcp":true,"omit":1,"time":0,"num":1073741824,"blockcount":0,"nodelay":true,"parallel":2,"bidirectional":true,"window":4194304,"len":131072,"pacing_timer":1000,"congestion":"bbr","zerocopy":1,"client_version":"3.21"}"#,
    r#"{"udp":true,"omit":0,"time":10,"num":0,"blockcount":0,"parallel":1,"len":1448,"bandwidth":1048576,"pacing_timer":1000,"gso":0,"gso_dg_size":0,"gso_bf_size":65507,"gro":0,"gro_bf_size":65507,"client_version":"3.21"}"#,
    r#"{"cpu_util_total":1.3574739670954209,"cpu_util_user":0.10952939617399398,"cpu_util_system":1.2479445709214269,"sender_has_retransmits":-1,"congestion_used":"cubic","streams":[{"id":1,"bytes":12346695680,"retransmits":-1,"jitter":0,"errors":0,"packets":0,"start_time":0,"end_time":10.000182}]}"#,
    r#"{"cpu_util_total":0.87654321012345,"cpu_util_user":0.1,"cpu_util_system":0.77654321012345,"sender_has_retransmits":-1,"server_output_text":"Accepted\n","streams":[{"id":1,"bytes":1309952,"retransmits":-1,"jitter":1.2345e-05,"errors":3,"omitted_errors":0,"packets":937,"omitted_packets":0,"start_time":0,"end_time":10.000345}]}"#,
    r#"{"cpu_util_total":12.5,"cpu_util_user":1.25,"cpu_util_system":11.25,"sender_has_retransmits":1,"congestion_used":"bbr","server_output_json":{"start":{"version":"iperf 3.21"}},"zcnet_zerocopy":{"sent":1},"streams":[{"id":1,"bytes":536870912,"retransmits":-1,"jitter":0,"errors":0,"packets":0},{"id":3,"bytes":1e3,"retransmits":17,"jitter":0,"errors":0,"packets":0}]}"#,
];

pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let mode = inp.u8();
    let text: Vec<u8> = if mode & 1 == 0 {
        inp.rest().to_vec()
    } else {
        // A template with a piece replaced: (position, cut length, new bytes).
        let mut t = TEMPLATES[usize::from(mode >> 1) % TEMPLATES.len()]
            .as_bytes()
            .to_vec();
        while !inp.is_empty() {
            let at = inp.index(t.len() + 1);
            let cut = inp.index(8).min(t.len() - at);
            let new = inp.small_bytes(12);
            t.splice(at..at + cut, new.iter().copied());
        }
        t
    };
    let Ok(v) = serde_json::from_slice::<Value>(&text) else {
        return;
    };
    params(&v);
    results(&v);
    let _ = StreamResults::from_json(&v);
}

fn params(v: &Value) {
    let Ok(p) = TestParams::from_json(v) else {
        return;
    };
    assert!(p.unknown.keys().all(|k| !KNOWN_KEYS.contains(&k.as_str())));
    let p2 = TestParams::from_json(&p.to_json()).expect("own parameters parse");
    let p3 = TestParams::from_json(&p2.to_json()).expect("own parameters parse");
    assert_eq!(p2, p3, "parameters change on a second round trip");
    let _ = (
        p.options_in_use(),
        p.reject_unsupported(&["nodelay", "window"]),
    );
    let _ = p.block_len();
    if p.validate().is_ok() {
        assert!(p.parallel >= 1 && p.parallel <= MAX_STREAMS);
        let plan = stream_plan(&p);
        assert_eq!(plan.len(), p.stream_count());
        for (i, s) in plan.iter().enumerate() {
            assert!(plan[..i].iter().all(|t| t.id != s.id), "stream id twice");
            assert!(s.client_sends() != s.server_sends());
        }
        assert!(
            p2.validate().is_ok(),
            "valid parameters turn invalid in a round trip"
        );
        // Over MAX_PARAMS_LEN (a long title, say) is refused, not truncated; what is sent
        // parses to the same parameters (unknown keys aside: their floats may come back one
        // ulp off without serde_json's float_roundtrip).
        if let Ok(f) = p.to_frame() {
            let back: Value = serde_json::from_slice(&f[4..]).expect("own frame is JSON");
            let mut back = TestParams::from_json(&back).expect("own frame parses");
            let mut want = p2.clone();
            back.unknown.clear();
            want.unknown.clear();
            assert_eq!(back, want);
        }
    }
}

fn results(v: &Value) {
    let Ok(r) = TestResults::from_json(v) else {
        return;
    };
    let r2 = TestResults::from_json(&r.to_json()).expect("own results parse");
    assert_eq!(r2.streams, r.streams, "streams change in a round trip");
    let r3 = TestResults::from_json(&r2.to_json()).expect("own results parse");
    assert_eq!(r2, r3, "results change on a second round trip");
    for s in &r.streams {
        assert_eq!(r.stream(s.id).map(|t| t.id), Some(s.id));
    }
    let _ = r.to_frame();
}
