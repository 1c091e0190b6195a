//! The client driven by a scripted server: raw bytes in, actions out, faults included.

use std::time::Duration;

use super::super::{
    server_error_message, stream_plan, ClientAction, ClientConfig, ClientControl, Cookie,
    ErrorCode, ProtoError, State, TestParams, TestResults,
};
use super::harness::results_for;

const T0: Duration = Duration::ZERO;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn client(p: TestParams) -> ClientControl {
    let mut c =
        ClientControl::new(ClientConfig::default(), Cookie::from_random(&[9; 36]), p).unwrap();
    let cookie = c.cookie().as_bytes().to_vec();
    assert_eq!(c.connected(T0), vec![ClientAction::Send(cookie)]);
    c
}

fn states(s: &[State]) -> Vec<u8> {
    s.iter().map(|s| s.to_byte()).collect()
}

fn failed(actions: &[ClientAction]) -> &ProtoError {
    match actions.last() {
        Some(ClientAction::Failed(e)) => e,
        other => panic!("not failed: {other:?}"),
    }
}

/// A client whose test runs.
fn running(p: TestParams) -> ClientControl {
    let mut c = client(p.clone());
    let a = c.on_bytes(
        T0,
        &states(&[
            State::ParamExchange,
            State::CreateStreams,
            State::TestStart,
            State::TestRunning,
        ]),
    );
    assert_eq!(
        a,
        vec![
            ClientAction::Send(p.to_frame().unwrap()),
            ClientAction::CreateStreams(stream_plan(&p)),
            ClientAction::PrepareTest,
            ClientAction::StartTest,
        ]
    );
    assert_eq!(c.poll_timeout(), None, "no deadline while the test runs");
    c
}

#[zcnet_testkit::test]
fn access_denied() {
    let mut c = client(TestParams::default());
    let a = c.on_bytes(T0, &[0xff]);
    assert_eq!(a, vec![ClientAction::Failed(ProtoError::AccessDenied)]);
    assert_eq!(
        ProtoError::AccessDenied.to_string(),
        "the server is busy running a test. try again later"
    );
}

#[zcnet_testkit::test]
fn server_error_in_pieces() {
    let mut c = client(TestParams::default());
    let msg = server_error_message(ErrorCode::IEUNIMP, 0);
    for b in &msg[..8] {
        assert!(c.on_bytes(T0, std::slice::from_ref(b)).is_empty());
    }
    let a = c.on_bytes(T0, &msg[8..]);
    let e = failed(&a);
    assert_eq!(
        e,
        &ProtoError::ServerError {
            code: ErrorCode::IEUNIMP,
            errno: 0
        }
    );
    assert_eq!(
        e.to_string(),
        "server error - an option you are trying to set is not implemented yet"
    );
}

#[zcnet_testkit::test]
fn server_error_with_errno_mid_test() {
    let mut c = running(TestParams::default());
    let a = c.on_bytes(secs(3), &server_error_message(ErrorCode(160), 0));
    assert_eq!(
        failed(&a),
        &ProtoError::ServerError {
            code: ErrorCode::IESERVERTESTDURATIONEXPIRED,
            errno: 0
        }
    );
    let e = ProtoError::ServerError {
        code: ErrorCode(999),
        errno: 98,
    };
    assert_eq!(
        e.to_string(),
        "server error - int_errno=999 (server errno 98)"
    );
}

#[zcnet_testkit::test]
fn server_error_number_without_errno_then_close() {
    let mut c = client(TestParams::default());
    let msg = server_error_message(ErrorCode(142), 0);
    c.on_bytes(T0, &msg[..5]);
    let a = c.on_peer_closed(T0);
    assert_eq!(
        failed(&a),
        &ProtoError::ServerError {
            code: ErrorCode(142),
            errno: 0
        }
    );
}

#[zcnet_testkit::test]
fn server_terminate() {
    let mut c = running(TestParams::default());
    let a = c.on_bytes(secs(1), &[State::ServerTerminate.to_byte()]);
    assert_eq!(failed(&a), &ProtoError::ServerTerminated);
}

#[zcnet_testkit::test]
fn a_service_that_is_not_iperf3() {
    let mut c = client(TestParams::default());
    let a = c.on_bytes(T0, b"SSH-2.0-OpenSSH_9.6\r\n");
    assert_eq!(failed(&a), &ProtoError::UnknownState(b'S'));
    assert!(c.is_over());
}

#[zcnet_testkit::test]
fn a_silent_service_times_out_in_seconds() {
    let mut c = client(TestParams::default());
    assert_eq!(c.poll_timeout(), Some(secs(5)));
    assert!(c.handle_timeout(secs(4)).is_empty());
    let a = c.handle_timeout(secs(5));
    assert_eq!(
        failed(&a),
        &ProtoError::Timeout {
            waiting_for: "PARAM_EXCHANGE"
        }
    );
}

#[zcnet_testkit::test]
fn server_closes_at_once() {
    let mut c = client(TestParams::default());
    let a = c.on_peer_closed(T0);
    assert_eq!(
        failed(&a),
        &ProtoError::PeerClosed {
            waiting_for: "PARAM_EXCHANGE",
            partial: false
        }
    );
}

#[zcnet_testkit::test]
fn states_out_of_order() {
    let mut c = client(TestParams::default());
    c.on_bytes(T0, &[State::ParamExchange.to_byte()]);
    let a = c.on_bytes(T0, &[State::TestRunning.to_byte()]);
    assert!(matches!(
        failed(&a),
        ProtoError::UnexpectedState {
            state: State::TestRunning,
            waiting_for: "CREATE_STREAMS"
        }
    ));
}

#[zcnet_testkit::test]
fn iperf_done_from_the_server_is_ignored() {
    let mut c = client(TestParams::default());
    assert!(c.on_bytes(T0, &[State::IperfDone.to_byte()]).is_empty());
    assert!(!c.is_over());
}

#[zcnet_testkit::test]
fn each_wait_refreshes_the_deadline() {
    let mut c = client(TestParams::default());
    c.on_bytes(secs(4), &[State::ParamExchange.to_byte()]);
    assert_eq!(c.poll_timeout(), Some(secs(9)));
}

#[zcnet_testkit::test]
fn parameters_are_checked_before_connecting() {
    let cookie = Cookie::from_random(&[0; 36]);
    let bad = TestParams {
        reverse: true,
        bidirectional: true,
        ..Default::default()
    };
    let e = ClientControl::new(ClientConfig::default(), cookie, bad).unwrap_err();
    assert!(matches!(
        e,
        ProtoError::ParamRejected {
            code: ErrorCode::IEREVERSEBIDIR,
            ..
        }
    ));
    let long = TestParams {
        extra_data: Some("x".repeat(9000)),
        ..Default::default()
    };
    let e = ClientControl::new(ClientConfig::default(), cookie, long).unwrap_err();
    assert!(matches!(e, ProtoError::FrameTooLong { .. }));
}

#[zcnet_testkit::test]
fn end_of_test_and_results() {
    let p = TestParams {
        parallel: 2,
        reverse: true,
        ..Default::default()
    };
    let mut c = running(p);
    let a = c.test_finished(secs(10));
    assert_eq!(
        a,
        vec![
            ClientAction::StopSending,
            ClientAction::Send(vec![State::TestEnd.to_byte()])
        ]
    );
    assert_eq!(
        c.on_bytes(secs(10), &[State::ExchangeResults.to_byte()]),
        vec![ClientAction::ResultsRequested]
    );
    assert_eq!(c.poll_timeout(), None, "the caller's turn");
    let ours = results_for(c.streams(), 1.0);
    let a = c.local_results(secs(10), ours.clone());
    assert_eq!(a, vec![ClientAction::Send(ours.to_frame().unwrap())]);
    let theirs = results_for(c.streams(), 2.0);
    let mut reply = theirs.to_frame().unwrap();
    reply.push(State::DisplayResults.to_byte());
    let a = c.on_bytes(secs(10), &reply);
    assert_eq!(
        a,
        vec![
            ClientAction::PeerResults(theirs),
            ClientAction::Send(vec![State::IperfDone.to_byte()]),
            ClientAction::Done
        ]
    );
    assert!(c.is_over());
}

#[zcnet_testkit::test]
fn bytes_that_arrive_before_local_results_wait_for_them() {
    let mut c = running(TestParams::default());
    c.test_finished(secs(10));
    let theirs = results_for(c.streams(), 2.0);
    let mut burst = vec![State::ExchangeResults.to_byte()];
    burst.extend(theirs.to_frame().unwrap());
    burst.push(State::DisplayResults.to_byte());
    assert_eq!(
        c.on_bytes(secs(10), &burst),
        vec![ClientAction::ResultsRequested]
    );
    let a = c.local_results(secs(10), results_for(c.streams(), 1.0));
    assert_eq!(a.len(), 4, "{a:?}");
    assert_eq!(a[1], ClientAction::PeerResults(theirs));
    assert_eq!(a[3], ClientAction::Done);
}

#[zcnet_testkit::test]
fn server_results_naming_an_unknown_stream() {
    let mut c = running(TestParams::default());
    c.test_finished(secs(10));
    c.on_bytes(secs(10), &[State::ExchangeResults.to_byte()]);
    c.local_results(secs(10), TestResults::default());
    let mut bad = results_for(c.streams(), 2.0);
    bad.streams[0].id = 7;
    let a = c.on_bytes(secs(10), &bad.to_frame().unwrap());
    assert_eq!(failed(&a), &ProtoError::UnknownStreamId(7));
}

#[zcnet_testkit::test]
fn server_closes_during_its_results() {
    let mut c = running(TestParams::default());
    c.test_finished(secs(10));
    c.on_bytes(secs(10), &[State::ExchangeResults.to_byte()]);
    c.local_results(secs(10), TestResults::default());
    let f = results_for(c.streams(), 2.0).to_frame().unwrap();
    c.on_bytes(secs(10), &f[..10]);
    let a = c.on_peer_closed(secs(10));
    assert_eq!(
        failed(&a),
        &ProtoError::PeerClosed {
            waiting_for: "the server's results",
            partial: true
        }
    );
}

#[zcnet_testkit::test]
fn results_that_are_not_json() {
    let mut c = running(TestParams::default());
    c.test_finished(secs(10));
    c.on_bytes(secs(10), &[State::ExchangeResults.to_byte()]);
    c.local_results(secs(10), TestResults::default());
    let a = c.on_bytes(secs(10), &[0, 0, 0, 3, b'a', b'b', b'c']);
    assert!(matches!(failed(&a), ProtoError::InvalidJson(_)));
}

#[zcnet_testkit::test]
fn terminate() {
    let mut c = running(TestParams::default());
    let a = c.terminate(secs(2));
    assert_eq!(
        a,
        vec![
            ClientAction::Send(vec![12]),
            ClientAction::Failed(ProtoError::ClientTerminated)
        ]
    );
    assert!(c.terminate(secs(2)).is_empty());
}

#[zcnet_testkit::test]
fn misuse_is_reported() {
    let mut c = client(TestParams::default());
    assert!(matches!(
        failed(&c.test_finished(T0)),
        ProtoError::Misuse(_)
    ));
    let mut c = client(TestParams::default());
    assert!(matches!(failed(&c.connected(T0)), ProtoError::Misuse(_)));
}
