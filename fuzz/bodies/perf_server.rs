//! `zcnet perf`'s server machine (`ServerControl`) driven by arbitrary bytes, split anywhere,
//! and arbitrary events in any order: it never panics, never acts after its end (except
//! refusing the misuse it is told about), ends with exactly one `Done` or `Failed`, accepts
//! exactly its planned streams in order, starts only when all are in, reports the peer's
//! results only for its streams, and sends only well-formed control messages.

use crate::input::Input;
use crate::perf_gen;
use std::time::Duration;
use zcnet_tools::perf::proto::{
    Cookie, ErrorCode, ProtoError, ServerAction, ServerConfig, ServerControl, State, TestParams,
    MAX_PARAMS_LEN, MAX_RESULTS_LEN,
};

#[derive(Debug, Default)]
struct Track {
    over: bool,
    params: Option<TestParams>,
    listening: bool,
    accepted: usize,
    started: bool,
    stopped: bool,
    peer_results: bool,
    results_sent: bool,
    param_exchange: bool,
    exchange_results: bool,
    local_given: bool,
}

impl Track {
    fn check(&mut self, srv: &ServerControl, acts: &[ServerAction]) {
        let was_over = self.over;
        let mut error_sent = false;
        for (i, a) in acts.iter().enumerate() {
            let last = i + 1 == acts.len();
            if was_over {
                assert!(
                    matches!(
                        a,
                        ServerAction::DenyStream(_) | ServerAction::Failed(ProtoError::Misuse(_))
                    ),
                    "{a:?} after the end"
                );
            } else {
                assert!(!self.over, "{a:?} after the final action");
            }
            assert!(
                !error_sent || matches!(a, ServerAction::Failed(_)),
                "{a:?} after SERVER_ERROR"
            );
            match a {
                ServerAction::Send(b) => {
                    error_sent = self.check_send(b);
                }
                ServerAction::Params(p) => {
                    assert!(self.params.is_none(), "parameters twice");
                    assert!(p.validate().is_ok(), "invalid parameters accepted");
                    assert_eq!(srv.params(), Some(p));
                    self.params = Some(p.clone());
                }
                ServerAction::AcceptStream(spec) => {
                    assert!(self.listening && self.accepted < srv.streams().len());
                    assert_eq!(*spec, srv.streams()[self.accepted], "streams out of plan");
                    self.accepted += 1;
                }
                ServerAction::DenyStream(_) => {}
                ServerAction::StartTest => {
                    assert!(!self.started);
                    assert!(self.accepted >= 1 && self.accepted == srv.streams().len());
                    self.started = true;
                }
                ServerAction::StopTest => {
                    assert!(self.started && !self.stopped);
                    self.stopped = true;
                }
                ServerAction::PeerResults(r) => {
                    assert!(self.stopped && !self.peer_results);
                    assert!(r
                        .streams
                        .iter()
                        .all(|s| srv.streams().iter().any(|p| p.id == s.id)));
                    self.peer_results = true;
                }
                ServerAction::Done => {
                    assert!(last);
                    assert!(self.results_sent, "done before the results went out");
                    self.over = true;
                }
                ServerAction::Failed(_) => {
                    assert!(last, "actions after Failed");
                    error_sent = false;
                    self.over = true;
                }
                other => panic!("unknown action {other:?}"),
            }
        }
        assert!(!error_sent, "SERVER_ERROR sent without failing");
        assert_eq!(srv.is_over(), self.over);
        if self.over {
            assert_eq!(srv.poll_timeout(), None);
            assert!(!srv.accepting_streams());
        } else {
            let accepting = self.listening && self.accepted < srv.streams().len();
            assert_eq!(srv.accepting_streams(), accepting);
        }
    }

    /// Checks one message the server writes; returns whether it was a SERVER_ERROR.
    fn check_send(&mut self, b: &[u8]) -> bool {
        let byte = |s: State| s.to_byte();
        match b {
            [x] if *x == byte(State::ParamExchange) => self.param_exchange = true,
            [x] if *x == byte(State::CreateStreams) => {
                assert!(self.params.is_some() && !self.listening);
                self.listening = true;
            }
            [x, y] if *x == byte(State::TestStart) && *y == byte(State::TestRunning) => {}
            [x] if *x == byte(State::ExchangeResults) => {
                assert!(self.stopped);
                self.exchange_results = true;
            }
            [x, ..] if *x == byte(State::ServerError) => {
                assert_eq!(b.len(), 9, "SERVER_ERROR is a byte and two int32s");
                return true;
            }
            _ => {
                // The server's results, then DISPLAY_RESULTS.
                assert!(self.peer_results && !self.results_sent, "{b:?}");
                assert_eq!(b.last(), Some(&byte(State::DisplayResults)));
                let len = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
                assert_eq!(len + 5, b.len());
                let v: serde_json::Value =
                    serde_json::from_slice(&b[4..4 + len]).expect("results are JSON");
                assert!(v.is_object());
                self.results_sent = true;
            }
        }
        false
    }
}

pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let cfg = ServerConfig {
        step_timeout: Duration::from_millis(1 + u64::from(inp.u16())),
        grace: Duration::from_millis(u64::from(inp.u16())),
        max_params_len: inp.pick(&[MAX_PARAMS_LEN, 16, 256, MAX_PARAMS_LEN]),
        max_results_len: inp.pick(&[MAX_RESULTS_LEN, 64, 4096, MAX_RESULTS_LEN]),
    };
    let mut now = Duration::from_millis(u64::from(inp.u32()));
    let mut srv = ServerControl::new(cfg, now);
    let cookie = Cookie::from_random(&inp.array());
    let mut t = Track::default();
    let mut after_end = 0;
    let mut cookie_sent = false;
    // Most steps are what a client and the server's caller would do next (so that tests run
    // to their end); the rest are anything at any time.
    while !inp.is_empty() {
        let op = inp.u8();
        now += Duration::from_micros(u64::from(inp.u16()));
        let ids: Vec<i64> = srv.streams().iter().map(|s| s.id).collect();
        let acts = match op % 16 {
            0..=5 => {
                // The client's next message.
                let msg: Vec<u8> = if !cookie_sent {
                    cookie_sent = true;
                    cookie.as_bytes().to_vec()
                } else if t.param_exchange && t.params.is_none() {
                    let body = perf_gen::params_json(&mut inp);
                    perf_gen::frame(&mut inp, &body)
                } else if t.started && !t.stopped {
                    vec![State::TestEnd.to_byte()]
                } else if t.exchange_results && !t.peer_results {
                    let r = perf_gen::results(&mut inp, &ids);
                    perf_gen::frame(&mut inp, r.to_json().to_string().as_bytes())
                } else if t.results_sent {
                    vec![State::IperfDone.to_byte()]
                } else {
                    vec![inp.pick(&State::ALL).to_byte()]
                };
                let (a, b) = msg.split_at(inp.index(msg.len() + 1));
                let acts = srv.on_bytes(now, a);
                t.check(&srv, &acts);
                srv.on_bytes(now, b)
            }
            6..=8 => {
                // The caller's next event.
                if t.params.is_some() && !t.listening {
                    srv.listening(now)
                } else if srv.accepting_streams() {
                    srv.on_stream(now, Some(cookie.as_bytes()))
                } else if t.stopped && !t.local_given {
                    t.local_given = true;
                    srv.local_results(now, perf_gen::results(&mut inp, &ids))
                } else {
                    srv.handle_timeout(now)
                }
            }
            9 => srv.on_bytes(now, &[inp.pick(&State::ALL).to_byte()]),
            10 => srv.on_bytes(now, inp.small_bytes(48)),
            11 => {
                let c = match inp.u8() % 3 {
                    0 => None,
                    1 => Some(inp.small_bytes(40).to_vec()),
                    _ => Some(Cookie::from_random(&inp.array()).as_bytes().to_vec()),
                };
                srv.on_stream(now, c.as_deref())
            }
            12 => {
                let body = if inp.bool() {
                    perf_gen::params_json(&mut inp)
                } else {
                    perf_gen::results(&mut inp, &ids)
                        .to_json()
                        .to_string()
                        .into_bytes()
                };
                srv.on_bytes(now, &perf_gen::frame(&mut inp, &body))
            }
            13 => match inp.u8() % 4 {
                0 => srv.listening(now),
                1 => srv.local_results(now, perf_gen::results(&mut inp, &ids)),
                2 => srv.on_stream(now, Some(cookie.as_bytes())),
                _ => {
                    let e = match inp.u8() % 3 {
                        0 => ProtoError::Aborted {
                            code: ErrorCode(inp.i32()),
                            errno: inp.i32(),
                        },
                        1 => ProtoError::ParamRejected {
                            code: ErrorCode::IEUNIMP,
                            detail: String::new(),
                        },
                        _ => ProtoError::Misuse("fuzz"),
                    };
                    srv.fail(now, e)
                }
            },
            14 => srv.on_peer_closed(now),
            _ => {
                if inp.bool() {
                    now = now.max(srv.poll_timeout().unwrap_or(now));
                }
                srv.handle_timeout(now)
            }
        };
        t.check(&srv, &acts);
        // A few steps after the end (which must do nothing), then stop: the rest of the input
        // would only repeat that.
        after_end += usize::from(t.over);
        if after_end > 4 {
            break;
        }
    }
}
