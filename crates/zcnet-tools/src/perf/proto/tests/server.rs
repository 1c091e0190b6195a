//! The server driven by a scripted client: raw bytes in, actions out, faults included.

use std::time::Duration;

use serde_json::json;

use super::super::{
    encode_frame, server_error_message, Cookie, ErrorCode, ProtoError, ServerAction, ServerConfig,
    ServerControl, State, TestParams, ACCESS_DENIED_REPLY, MAX_PARAMS_LEN,
};
use super::harness::results_for;

const T0: Duration = Duration::ZERO;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn cookie() -> Cookie {
    Cookie::from_random(&[3; 36])
}

fn send(states: &[State]) -> ServerAction {
    ServerAction::Send(states.iter().map(|s| s.to_byte()).collect())
}

fn server_error(code: ErrorCode) -> ServerAction {
    ServerAction::Send(server_error_message(code, 0))
}

fn params_frame(p: &TestParams) -> Vec<u8> {
    p.to_frame().unwrap()
}

/// A server that has the cookie and the parameters, and has opened its listener.
fn listening(p: &TestParams) -> ServerControl {
    let mut s = ServerControl::new(ServerConfig::default(), T0);
    assert_eq!(
        s.on_bytes(T0, cookie().as_bytes()),
        vec![send(&[State::ParamExchange])]
    );
    assert_eq!(
        s.on_bytes(T0, &params_frame(p)),
        vec![ServerAction::Params(p.clone())]
    );
    assert!(!s.accepting_streams());
    assert_eq!(s.listening(T0), vec![send(&[State::CreateStreams])]);
    assert!(s.accepting_streams());
    s
}

/// A server whose test is running.
fn running(p: &TestParams) -> ServerControl {
    let mut s = listening(p);
    for _ in 0..p.stream_count() {
        let actions = s.on_stream(T0, Some(cookie().as_bytes()));
        assert!(
            matches!(actions[0], ServerAction::AcceptStream(_)),
            "{actions:?}"
        );
    }
    assert!(!s.accepting_streams());
    s
}

fn failed(actions: &[ServerAction]) -> &ProtoError {
    match actions.last() {
        Some(ServerAction::Failed(e)) => e,
        other => panic!("not failed: {other:?}"),
    }
}

#[zcnet_testkit::test]
fn server_error_bytes() {
    assert_eq!(
        server_error_message(ErrorCode(114), 0),
        vec![0xfe, 0, 0, 0, 114, 0, 0, 0, 0]
    );
    assert_eq!(
        server_error_message(ErrorCode::IESTREAMLISTEN, 98),
        vec![0xfe, 0, 0, 0, 202, 0, 0, 0, 98]
    );
    assert_eq!(ACCESS_DENIED_REPLY, [0xff]);
}

#[zcnet_testkit::test]
fn starts_once_every_stream_is_in() {
    let p = TestParams {
        parallel: 2,
        ..Default::default()
    };
    let mut s = listening(&p);
    let first = s.on_stream(T0, Some(cookie().as_bytes()));
    assert_eq!(first.len(), 1);
    let last = s.on_stream(T0, Some(cookie().as_bytes()));
    assert_eq!(
        last[1..],
        [
            send(&[State::TestStart, State::TestRunning]),
            ServerAction::StartTest
        ]
    );
}

#[zcnet_testkit::test]
fn garbage_instead_of_a_cookie() {
    let mut s = ServerControl::new(ServerConfig::default(), T0);
    let actions = s.on_bytes(
        T0,
        b"GET / HTTP/1.1\r\nHost: zcnet.example\r\nAccept: */*\r\n\r\n",
    );
    assert_eq!(actions[0], server_error(ErrorCode::IERECVCOOKIE));
    assert!(matches!(failed(&actions), ProtoError::BadCookie(_)));
    assert!(s.is_over());
    assert!(s.on_bytes(T0, b"more").is_empty(), "nothing after the end");
}

#[zcnet_testkit::test]
fn cookie_in_pieces() {
    let mut s = ServerControl::new(ServerConfig::default(), T0);
    let c = cookie();
    assert!(s.on_bytes(T0, &c.as_bytes()[..10]).is_empty());
    assert!(s.on_bytes(T0, &c.as_bytes()[10..36]).is_empty());
    assert_eq!(
        s.on_bytes(T0, &c.as_bytes()[36..]),
        vec![send(&[State::ParamExchange])]
    );
}

#[zcnet_testkit::test]
fn params_too_long() {
    let mut s = ServerControl::new(ServerConfig::default(), T0);
    s.on_bytes(T0, cookie().as_bytes());
    let header = (MAX_PARAMS_LEN as u32 + 1).to_be_bytes();
    let actions = s.on_bytes(T0, &header);
    assert_eq!(actions[0], server_error(ErrorCode::IERECVPARAMS));
    assert!(matches!(failed(&actions), ProtoError::FrameTooLong { .. }));
}

#[zcnet_testkit::test]
fn params_not_json() {
    let mut s = ServerControl::new(ServerConfig::default(), T0);
    s.on_bytes(T0, cookie().as_bytes());
    let mut f = 5u32.to_be_bytes().to_vec();
    f.extend(b"hello");
    let actions = s.on_bytes(T0, &f);
    assert_eq!(actions[0], server_error(ErrorCode::IERECVPARAMS));
    assert!(matches!(failed(&actions), ProtoError::InvalidJson(_)));
}

#[zcnet_testkit::test]
fn params_not_an_object() {
    let mut s = ServerControl::new(ServerConfig::default(), T0);
    s.on_bytes(T0, cookie().as_bytes());
    let actions = s.on_bytes(T0, &encode_frame(&json!([1, 2]), 100).unwrap());
    assert_eq!(failed(&actions), &ProtoError::NotAnObject);
}

#[zcnet_testkit::test]
fn params_out_of_limits() {
    let mut s = ServerControl::new(ServerConfig::default(), T0);
    s.on_bytes(T0, cookie().as_bytes());
    let actions = s.on_bytes(
        T0,
        &encode_frame(&json!({"tcp": true, "parallel": 1000}), 100).unwrap(),
    );
    assert_eq!(actions[0], server_error(ErrorCode::IENUMSTREAMS));
}

#[zcnet_testkit::test]
fn unsupported_option_is_refused_by_name() {
    let p = TestParams {
        mptcp: true,
        ..Default::default()
    };
    let mut s = ServerControl::new(ServerConfig::default(), T0);
    s.on_bytes(T0, cookie().as_bytes());
    let actions = s.on_bytes(T0, &params_frame(&p));
    let ServerAction::Params(got) = &actions[0] else {
        panic!("{actions:?}")
    };
    let refusal = got.reject_unsupported(&[]).unwrap();
    let actions = s.fail(T0, refusal);
    assert_eq!(actions[0], server_error(ErrorCode::IEUNIMP));
    match failed(&actions) {
        ProtoError::ParamRejected { detail, .. } => assert!(detail.contains("mptcp"), "{detail}"),
        e => panic!("{e:?}"),
    }
}

#[zcnet_testkit::test]
fn listener_failure_carries_errno() {
    let mut s = ServerControl::new(ServerConfig::default(), T0);
    s.on_bytes(T0, cookie().as_bytes());
    s.on_bytes(T0, &params_frame(&TestParams::default()));
    let actions = s.fail(
        T0,
        ProtoError::Aborted {
            code: ErrorCode::IESTREAMLISTEN,
            errno: 98,
        },
    );
    assert_eq!(
        actions[0],
        ServerAction::Send(server_error_message(ErrorCode::IESTREAMLISTEN, 98))
    );
    assert!(
        s.fail(T0, ProtoError::Misuse("again")).is_empty(),
        "one failure only"
    );
}

#[zcnet_testkit::test]
fn stream_with_a_wrong_or_no_cookie_is_denied_and_the_test_goes_on() {
    let mut s = listening(&TestParams::default());
    let other = Cookie::from_random(&[4; 36]);
    let a = s.on_stream(T0, Some(other.as_bytes()));
    assert!(matches!(
        a.as_slice(),
        [ServerAction::DenyStream(ProtoError::BadCookie(_))]
    ));
    let a = s.on_stream(T0, None);
    assert!(matches!(
        a.as_slice(),
        [ServerAction::DenyStream(ProtoError::BadCookie(_))]
    ));
    let a = s.on_stream(T0, Some(&cookie().as_bytes()[..20]));
    assert!(matches!(a.as_slice(), [ServerAction::DenyStream(_)]));
    assert!(s.accepting_streams());
    let a = s.on_stream(T0, Some(cookie().as_bytes()));
    assert!(matches!(a[0], ServerAction::AcceptStream(_)));
    assert_eq!(a.last(), Some(&ServerAction::StartTest));
}

#[zcnet_testkit::test]
fn udp_streams_need_no_cookie() {
    let p = TestParams {
        protocol: super::super::Protocol::Udp,
        len: 1400,
        ..Default::default()
    };
    let mut s = listening(&p);
    let a = s.on_stream(T0, None);
    assert!(matches!(a[0], ServerAction::AcceptStream(_)));
}

#[zcnet_testkit::test]
fn a_stream_too_many_is_denied() {
    let mut s = running(&TestParams::default());
    let a = s.on_stream(T0, Some(cookie().as_bytes()));
    assert!(matches!(
        a.as_slice(),
        [ServerAction::DenyStream(ProtoError::Misuse(_))]
    ));
    assert!(!s.is_over());
}

#[zcnet_testkit::test]
fn garbage_state_byte_mid_test() {
    let mut s = running(&TestParams::default());
    let actions = s.on_bytes(secs(1), &[0x42]);
    assert_eq!(actions[0], server_error(ErrorCode::IEMESSAGE));
    assert_eq!(failed(&actions), &ProtoError::UnknownState(0x42));
}

#[zcnet_testkit::test]
fn wrong_state_mid_test() {
    let mut s = running(&TestParams::default());
    let actions = s.on_bytes(secs(1), &[State::ExchangeResults.to_byte()]);
    assert_eq!(actions[0], server_error(ErrorCode::IEMESSAGE));
    assert!(matches!(
        failed(&actions),
        ProtoError::UnexpectedState {
            state: State::ExchangeResults,
            ..
        }
    ));
}

#[zcnet_testkit::test]
fn test_start_from_the_client_is_ignored_like_iperf3() {
    let mut s = running(&TestParams::default());
    assert!(s
        .on_bytes(secs(1), &[State::TestStart.to_byte()])
        .is_empty());
    assert!(!s.is_over());
}

#[zcnet_testkit::test]
fn client_vanishes_mid_test() {
    let mut s = running(&TestParams::default());
    let actions = s.on_peer_closed(secs(3));
    assert_eq!(
        actions,
        vec![ServerAction::Failed(ProtoError::PeerClosed {
            waiting_for: "TEST_END",
            partial: false
        })]
    );
    assert!(s.is_over());
}

#[zcnet_testkit::test]
fn client_closes_with_half_sent_params() {
    let mut s = ServerControl::new(ServerConfig::default(), T0);
    s.on_bytes(T0, cookie().as_bytes());
    let f = params_frame(&TestParams::default());
    assert!(s.on_bytes(T0, &f[..f.len() / 2]).is_empty());
    let actions = s.on_peer_closed(T0);
    assert_eq!(
        actions,
        vec![ServerAction::Failed(ProtoError::PeerClosed {
            waiting_for: "the parameters",
            partial: true
        })]
    );
}

#[zcnet_testkit::test]
fn client_closes_with_half_sent_cookie() {
    let mut s = ServerControl::new(ServerConfig::default(), T0);
    s.on_bytes(T0, &cookie().as_bytes()[..5]);
    assert!(matches!(
        s.on_peer_closed(T0)[0],
        ServerAction::Failed(ProtoError::PeerClosed { partial: true, .. })
    ));
}

#[zcnet_testkit::test]
fn client_terminate() {
    let mut s = running(&TestParams::default());
    let actions = s.on_bytes(secs(2), &[State::ClientTerminate.to_byte()]);
    assert_eq!(
        actions,
        vec![ServerAction::Failed(ProtoError::ClientTerminated)]
    );
}

#[zcnet_testkit::test]
fn half_sent_params_time_out() {
    let mut s = ServerControl::new(ServerConfig::default(), T0);
    s.on_bytes(secs(1), cookie().as_bytes());
    assert_eq!(s.poll_timeout(), Some(secs(11)));
    s.on_bytes(secs(2), &[0, 0]);
    assert!(s.handle_timeout(secs(10)).is_empty(), "early: nothing");
    let actions = s.handle_timeout(secs(11));
    assert_eq!(actions[0], server_error(ErrorCode::IERECVPARAMS));
    assert_eq!(
        failed(&actions),
        &ProtoError::Timeout {
            waiting_for: "the parameters"
        }
    );
}

#[zcnet_testkit::test]
fn no_cookie_times_out() {
    let mut s = ServerControl::new(
        ServerConfig {
            step_timeout: secs(3),
            ..Default::default()
        },
        secs(100),
    );
    assert_eq!(s.poll_timeout(), Some(secs(103)));
    let actions = s.handle_timeout(secs(103));
    assert_eq!(actions[0], server_error(ErrorCode::IERECVCOOKIE));
}

#[zcnet_testkit::test]
fn streams_that_never_come_time_out() {
    let mut s = listening(&TestParams {
        parallel: 2,
        ..Default::default()
    });
    s.on_stream(T0, Some(cookie().as_bytes()));
    let actions = s.handle_timeout(secs(10));
    assert_eq!(actions[0], server_error(ErrorCode::IESTREAMACCEPT));
}

#[zcnet_testkit::test]
fn timed_test_deadline_is_time_plus_omit_plus_grace() {
    let p = TestParams {
        time: 10,
        omit: 2,
        ..Default::default()
    };
    let s = running(&p);
    assert_eq!(s.poll_timeout(), Some(secs(52)));
    let mut s = s;
    assert!(s.handle_timeout(secs(51)).is_empty());
    let actions = s.handle_timeout(secs(52));
    assert_eq!(
        actions[0],
        server_error(ErrorCode::IESERVERTESTDURATIONEXPIRED)
    );
}

#[zcnet_testkit::test]
fn byte_count_test_has_no_deadline() {
    let s = running(&TestParams {
        time: 0,
        num: 1 << 20,
        ..Default::default()
    });
    assert_eq!(s.poll_timeout(), None);
}

/// A server that got TEST_END and is in the results step.
fn ending(p: &TestParams) -> ServerControl {
    let mut s = running(p);
    let actions = s.on_bytes(secs(10), &[State::TestEnd.to_byte()]);
    assert_eq!(
        actions,
        vec![ServerAction::StopTest, send(&[State::ExchangeResults])]
    );
    s
}

#[zcnet_testkit::test]
fn results_exchange_then_display_then_done() {
    let p = TestParams::default();
    let mut s = ending(&p);
    let theirs = results_for(s.streams(), 1.0);
    let actions = s.on_bytes(secs(10), &theirs.to_frame().unwrap());
    assert_eq!(actions, vec![ServerAction::PeerResults(theirs)]);
    let ours = results_for(s.streams(), 2.0);
    let mut expect = ours.to_frame().unwrap();
    expect.push(State::DisplayResults.to_byte());
    assert_eq!(
        s.local_results(secs(10), ours),
        vec![ServerAction::Send(expect)]
    );
    assert_eq!(
        s.on_bytes(secs(10), &[State::IperfDone.to_byte()]),
        vec![ServerAction::Done]
    );
}

#[zcnet_testkit::test]
fn a_client_that_closes_instead_of_iperf_done_is_done() {
    let mut s = ending(&TestParams::default());
    s.local_results(secs(10), results_for(s.streams(), 2.0));
    s.on_bytes(secs(10), &results_for(s.streams(), 1.0).to_frame().unwrap());
    assert_eq!(s.on_peer_closed(secs(10)), vec![ServerAction::Done]);
}

#[zcnet_testkit::test]
fn a_client_silent_after_display_is_done_at_the_deadline() {
    let mut s = ending(&TestParams::default());
    s.local_results(secs(10), results_for(s.streams(), 2.0));
    s.on_bytes(secs(10), &results_for(s.streams(), 1.0).to_frame().unwrap());
    assert_eq!(s.handle_timeout(secs(20)), vec![ServerAction::Done]);
}

#[zcnet_testkit::test]
fn client_results_naming_an_unknown_stream() {
    let mut s = ending(&TestParams::default());
    let mut bad = results_for(s.streams(), 1.0);
    bad.streams[0].id = 2;
    let actions = s.on_bytes(secs(10), &bad.to_frame().unwrap());
    assert_eq!(actions[0], server_error(ErrorCode::IESTREAMID));
    assert_eq!(failed(&actions), &ProtoError::UnknownStreamId(2));
}

#[zcnet_testkit::test]
fn client_results_not_results() {
    let mut s = ending(&TestParams::default());
    let actions = s.on_bytes(
        secs(10),
        &encode_frame(&json!({"streams": []}), 100).unwrap(),
    );
    assert_eq!(actions[0], server_error(ErrorCode::IERECVRESULTS));
}

#[zcnet_testkit::test]
fn misuse_is_reported() {
    let mut s = ServerControl::new(ServerConfig::default(), T0);
    assert!(matches!(failed(&s.listening(T0)), ProtoError::Misuse(_)));
    let mut s = running(&TestParams::default());
    let r = results_for(s.streams(), 1.0);
    assert!(matches!(
        failed(&s.local_results(T0, r)),
        ProtoError::Misuse(_)
    ));
}
