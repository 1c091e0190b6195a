use super::super::{ProtoError, State};

#[zcnet_testkit::test]
fn values_are_iperf3s() {
    // src/iperf_api.h, "states".
    let expected: [(State, i8); 18] = [
        (State::TestStart, 1),
        (State::TestRunning, 2),
        (State::ResultRequest, 3),
        (State::TestEnd, 4),
        (State::StreamBegin, 5),
        (State::StreamRunning, 6),
        (State::StreamEnd, 7),
        (State::AllStreamsEnd, 8),
        (State::ParamExchange, 9),
        (State::CreateStreams, 10),
        (State::ServerTerminate, 11),
        (State::ClientTerminate, 12),
        (State::ExchangeResults, 13),
        (State::DisplayResults, 14),
        (State::IperfStart, 15),
        (State::IperfDone, 16),
        (State::AccessDenied, -1),
        (State::ServerError, -2),
    ];
    for (state, value) in expected {
        assert_eq!(state.as_i8(), value, "{state:?}");
        assert_eq!(state.to_byte(), value as u8, "{state:?}");
    }
    assert_eq!(State::AccessDenied.to_byte(), 0xff);
    assert_eq!(State::ServerError.to_byte(), 0xfe);
}

#[zcnet_testkit::test]
fn every_state_round_trips() {
    for s in State::ALL {
        assert_eq!(State::from_byte(s.to_byte()), Ok(s));
        assert_eq!(State::try_from(u8::from(s)), Ok(s));
    }
}

#[zcnet_testkit::test]
fn unknown_bytes_are_errors() {
    let known: Vec<u8> = State::ALL.iter().map(|s| s.to_byte()).collect();
    for b in 0..=255u8 {
        let r = State::from_byte(b);
        if known.contains(&b) {
            assert!(r.is_ok(), "{b}");
        } else {
            assert_eq!(r, Err(ProtoError::UnknownState(b)));
        }
    }
    for b in [0u8, 17, 0x80, 0xfd, b'S', b'{'] {
        assert!(State::from_byte(b).is_err(), "{b}");
    }
}

#[zcnet_testkit::test]
fn names_and_display() {
    assert_eq!(State::TestStart.name(), "TEST_START");
    assert_eq!(State::ServerError.to_string(), "SERVER_ERROR(-2)");
    assert_eq!(State::IperfDone.to_string(), "IPERF_DONE(16)");
}
