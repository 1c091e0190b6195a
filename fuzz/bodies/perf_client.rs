//! `zcnet perf`'s client machine (`ClientControl`) against arbitrary server bytes, split
//! anywhere, and arbitrary caller events: it never panics, refuses parameters iperf3 would,
//! never acts after its end (except refusing the misuse it is told about), ends with exactly
//! one `Done` or `Failed`, and walks the test's steps in order: cookie, parameters, streams
//! (exactly its plan), prepare, start, stop, results (only for its streams), done.

use crate::input::Input;
use crate::perf_gen;
use std::time::Duration;
use zcnet_tools::perf::proto::{
    ClientAction, ClientConfig, ClientControl, Cookie, ProtoError, State, MAX_RESULTS_LEN,
};

#[derive(Debug, Default)]
struct Track {
    over: bool,
    step: u8,
}

/// The client's steps, in the order they must come.
const COOKIE: u8 = 1;
const PARAMS: u8 = 2;
const STREAMS: u8 = 3;
const PREPARED: u8 = 4;
const STARTED: u8 = 5;
const STOPPED: u8 = 6;
const REQUESTED: u8 = 7;
const RESULTS_SENT: u8 = 8;
const PEER_RESULTS: u8 = 9;
const DONE_SENT: u8 = 10;

impl Track {
    fn advance(&mut self, to: u8, what: &str) {
        assert_eq!(
            self.step + 1,
            to,
            "{what} out of order (at step {})",
            self.step
        );
        self.step = to;
    }

    fn check(&mut self, cl: &ClientControl, acts: &[ClientAction]) {
        let was_over = self.over;
        for (i, a) in acts.iter().enumerate() {
            let last = i + 1 == acts.len();
            if was_over {
                assert!(
                    matches!(a, ClientAction::Failed(ProtoError::Misuse(_))),
                    "{a:?} after the end"
                );
            } else {
                assert!(!self.over, "{a:?} after the final action");
            }
            match a {
                ClientAction::Send(b) => self.check_send(cl, b),
                ClientAction::CreateStreams(plan) => {
                    assert_eq!(plan.as_slice(), cl.streams());
                    assert_eq!(plan.len(), cl.params().stream_count());
                    self.advance(STREAMS, "CreateStreams");
                }
                ClientAction::PrepareTest => self.advance(PREPARED, "PrepareTest"),
                ClientAction::StartTest => self.advance(STARTED, "StartTest"),
                ClientAction::StopSending => self.advance(STOPPED, "StopSending"),
                ClientAction::ResultsRequested => self.advance(REQUESTED, "ResultsRequested"),
                ClientAction::PeerResults(r) => {
                    assert!(r
                        .streams
                        .iter()
                        .all(|s| cl.streams().iter().any(|p| p.id == s.id)));
                    self.advance(PEER_RESULTS, "PeerResults");
                }
                ClientAction::Done => {
                    assert!(last);
                    assert_eq!(self.step, DONE_SENT, "done before IPERF_DONE");
                    self.over = true;
                }
                ClientAction::Failed(_) => {
                    assert!(last, "actions after Failed");
                    self.over = true;
                }
                other => panic!("unknown action {other:?}"),
            }
        }
        assert_eq!(cl.is_over(), self.over);
        if self.over {
            assert_eq!(cl.poll_timeout(), None);
        }
    }

    fn check_send(&mut self, cl: &ClientControl, b: &[u8]) {
        let byte = |s: State| s.to_byte();
        match b {
            [x] if *x == byte(State::TestEnd) => assert_eq!(self.step, STOPPED),
            [x] if *x == byte(State::IperfDone) => self.advance(DONE_SENT, "IPERF_DONE"),
            [x] if *x == byte(State::ClientTerminate) => assert!(self.step >= COOKIE),
            _ if b == cl.cookie().as_bytes() && self.step == 0 => self.advance(COOKIE, "cookie"),
            _ if self.step == COOKIE => {
                assert_eq!(Ok(b.to_vec()), cl.params().to_frame(), "parameters");
                self.advance(PARAMS, "parameters");
            }
            _ => {
                self.advance(RESULTS_SENT, "results");
                let len = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
                assert_eq!(len + 4, b.len());
                let v: serde_json::Value =
                    serde_json::from_slice(&b[4..]).expect("results are JSON");
                assert!(v.is_object());
            }
        }
    }
}

pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let cfg = ClientConfig {
        reply_timeout: Duration::from_millis(1 + u64::from(inp.u16())),
        max_results_len: inp.pick(&[MAX_RESULTS_LEN, 64, 4096, MAX_RESULTS_LEN]),
    };
    let params = perf_gen::params(&mut inp);
    let cookie = Cookie::from_random(&inp.array());
    let mut cl = match ClientControl::new(cfg, cookie, params.clone()) {
        Ok(c) => c,
        Err(_) => {
            assert!(params.validate().is_err() || params.to_frame().is_err());
            return;
        }
    };
    assert!(params.validate().is_ok());
    let mut now = Duration::from_millis(u64::from(inp.u32()));
    let mut t = Track::default();
    let mut after_end = 0;
    // Most steps are what a server and the client's caller would do next (so that tests run
    // to their end); the rest are anything at any time.
    while !inp.is_empty() {
        let op = inp.u8();
        now += Duration::from_micros(u64::from(inp.u16()));
        let ids: Vec<i64> = cl.streams().iter().map(|s| s.id).collect();
        let acts = match op % 16 {
            0..=5 => {
                // The server's next message.
                let msg: Vec<u8> = match t.step {
                    COOKIE => vec![State::ParamExchange.to_byte()],
                    PARAMS => vec![State::CreateStreams.to_byte()],
                    STREAMS => vec![State::TestStart.to_byte()],
                    PREPARED => vec![State::TestRunning.to_byte()],
                    STOPPED => vec![State::ExchangeResults.to_byte()],
                    RESULTS_SENT => {
                        let r = perf_gen::results(&mut inp, &ids);
                        let mut f = perf_gen::frame(&mut inp, r.to_json().to_string().as_bytes());
                        f.push(State::DisplayResults.to_byte());
                        f
                    }
                    _ => vec![inp.pick(&State::ALL).to_byte()],
                };
                let (a, b) = msg.split_at(inp.index(msg.len() + 1));
                let acts = cl.on_bytes(now, a);
                t.check(&cl, &acts);
                cl.on_bytes(now, b)
            }
            6..=8 => match t.step {
                // The caller's next event.
                0 => cl.connected(now),
                STARTED => cl.test_finished(now),
                REQUESTED => cl.local_results(now, perf_gen::results(&mut inp, &ids)),
                _ => cl.handle_timeout(now),
            },
            9 => cl.on_bytes(now, &[inp.pick(&State::ALL).to_byte()]),
            10 => cl.on_bytes(now, inp.small_bytes(16)),
            11 => {
                let mut m = vec![State::ServerError.to_byte()];
                m.extend_from_slice(inp.small_bytes(9));
                cl.on_bytes(now, &m)
            }
            12 => {
                let r = perf_gen::results(&mut inp, &ids);
                let f = perf_gen::frame(&mut inp, r.to_json().to_string().as_bytes());
                cl.on_bytes(now, &f)
            }
            13 => match inp.u8() % 4 {
                0 => cl.connected(now),
                1 => cl.test_finished(now),
                2 => cl.local_results(now, perf_gen::results(&mut inp, &ids)),
                _ => cl.terminate(now),
            },
            14 => cl.on_peer_closed(now),
            _ => {
                if inp.bool() {
                    now = now.max(cl.poll_timeout().unwrap_or(now));
                }
                cl.handle_timeout(now)
            }
        };
        t.check(&cl, &acts);
        // A few steps after the end (which must do nothing), then stop: the rest of the input
        // would only repeat that.
        after_end += usize::from(t.over);
        if after_end > 4 {
            break;
        }
    }
}
