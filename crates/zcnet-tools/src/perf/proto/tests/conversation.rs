//! Whole tests: the client machine against the server machine.

use super::super::{stream_plan, Direction, Protocol, TestParams};
use super::harness::{full_transcript, results_for, Pair, ServerResultsAt};

fn run(params: TestParams, chunk: usize) -> Pair {
    let mut pair = Pair::new(params);
    pair.chunk = chunk;
    pair.run();
    pair
}

fn assert_complete(pair: &Pair) {
    assert_eq!(pair.client_end, Some(Ok(())), "client");
    assert_eq!(pair.server_end, Some(Ok(())), "server");
    assert_eq!(pair.wire, full_transcript());
    assert!(pair.client.is_over() && pair.server.is_over());
    assert_eq!(pair.client.poll_timeout(), None);
    assert_eq!(pair.server.poll_timeout(), None);
}

#[zcnet_testkit::test]
fn tcp_forward() {
    let pair = run(
        TestParams {
            time: 10,
            ..Default::default()
        },
        usize::MAX,
    );
    assert_complete(&pair);
    assert_eq!(pair.accepted, stream_plan(pair.client.params()));
    assert_eq!(pair.server.params(), Some(pair.client.params()));
    assert_eq!(pair.server.cookie(), Some(&pair.cookie));
    // Each side got exactly what the other measured.
    assert_eq!(
        pair.server_got,
        Some(results_for(pair.client.streams(), 1.5))
    );
    assert_eq!(
        pair.client_got,
        Some(results_for(pair.server.streams(), 2.5))
    );
    assert_eq!(
        pair.client_log,
        [
            "Send",
            "Send",
            "CreateStreams",
            "PrepareTest",
            "StartTest",
            "StopSending",
            "Send",
            "ResultsRequested",
            "Send",
            "PeerResults",
            "Send",
            "Done"
        ]
    );
    assert_eq!(
        pair.server_log,
        [
            "Send",
            "Params",
            "Send",
            "AcceptStream",
            "Send",
            "StartTest",
            "StopTest",
            "Send",
            "PeerResults",
            "Send",
            "Done"
        ]
    );
}

#[zcnet_testkit::test]
fn reverse_with_four_streams() {
    let p = TestParams {
        parallel: 4,
        reverse: true,
        ..Default::default()
    };
    let pair = run(p, usize::MAX);
    assert_complete(&pair);
    let ids: Vec<i64> = pair.accepted.iter().map(|s| s.id).collect();
    assert_eq!(ids, vec![1, 3, 4, 5]);
    assert!(pair
        .accepted
        .iter()
        .all(|s| s.direction == Direction::ServerToClient));
}

#[zcnet_testkit::test]
fn bidirectional() {
    let p = TestParams {
        parallel: 2,
        bidirectional: true,
        num: 1 << 30,
        time: 0,
        ..Default::default()
    };
    let pair = run(p, usize::MAX);
    assert_complete(&pair);
    let dirs: Vec<Direction> = pair.accepted.iter().map(|s| s.direction).collect();
    use Direction::{ClientToServer as C2S, ServerToClient as S2C};
    assert_eq!(dirs, vec![C2S, C2S, S2C, S2C]);
    assert_eq!(pair.server_got.map(|r| r.streams.len()), Some(4));
}

#[zcnet_testkit::test]
fn udp_streams_carry_no_cookie() {
    let p = TestParams {
        protocol: Protocol::Udp,
        len: 1400,
        parallel: 3,
        udp_counters_64bit: true,
        ..Default::default()
    };
    let pair = run(p, usize::MAX);
    assert_complete(&pair);
    assert_eq!(pair.accepted.len(), 3);
    assert!(pair.server.params().is_some_and(|p| p.udp_counters_64bit));
}

#[zcnet_testkit::test]
fn any_delivery_chunking_gives_the_same_test() {
    let p = TestParams {
        parallel: 2,
        bidirectional: true,
        ..Default::default()
    };
    let reference = run(p.clone(), usize::MAX);
    for chunk in [1, 2, 3, 5, 7, 13, 64] {
        let pair = run(p.clone(), chunk);
        assert_complete(&pair);
        assert_eq!(pair.client_got, reference.client_got, "chunk {chunk}");
        assert_eq!(pair.server_got, reference.server_got, "chunk {chunk}");
        assert_eq!(pair.accepted, reference.accepted, "chunk {chunk}");
    }
}

#[zcnet_testkit::test]
fn server_results_may_come_after_the_clients() {
    let mut pair = Pair::new(TestParams::default());
    pair.server_results_at = ServerResultsAt::PeerResults;
    pair.run();
    assert_complete(&pair);
    assert_eq!(
        pair.client_got,
        Some(results_for(pair.server.streams(), 2.5))
    );
}

#[zcnet_testkit::test]
fn server_is_ready_for_the_next_client_after_each_test() {
    // One machine per test: a second full test after the first behaves the same.
    for _ in 0..2 {
        assert_complete(&run(TestParams::default(), usize::MAX));
    }
}
