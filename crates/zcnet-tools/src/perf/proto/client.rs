//! The client's side of one test's control connection.
//!
//! iperf3 src/iperf_client_api.c: `iperf_connect` (send the cookie), `iperf_handle_message_client`
//! (one state byte at a time), `iperf_run_client` (the client decides the end: time elapsed, or
//! `-n` bytes / `-k` blocks sent or received, then `TEST_END`), `iperf_client_end` (after
//! `DISPLAY_RESULTS`: close the streams, send `IPERF_DONE`). At `EXCHANGE_RESULTS` the client
//! sends its results first, then reads the server's (`iperf_exchange_results`). A
//! `SERVER_ERROR` is followed by two big-endian `int32`s, the error number and `errno`.
//! See [`super::server`] for the whole sequence.

use std::time::Duration;

use super::cookie::Cookie;
use super::error::{ErrorCode, ProtoError};
use super::frame::{FrameDecoder, MAX_RESULTS_LEN};
use super::params::TestParams;
use super::results::TestResults;
use super::state::State;
use super::stream::{check_result_ids, stream_plan, StreamSpec};

/// Limits of a [`ClientControl`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// How long the server may take to answer outside the running test. An iperf3 server
    /// answers the cookie at once, so a service that is not iperf3 is found out in this time.
    pub reply_timeout: Duration,
    /// The largest results message accepted.
    pub max_results_len: usize,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            reply_timeout: Duration::from_secs(5),
            max_results_len: MAX_RESULTS_LEN,
        }
    }
}

/// What the client's caller does next, in order.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ClientAction {
    /// Write these bytes on the control connection.
    Send(Vec<u8>),
    /// Connect these data streams, in this order, to the server's port: TCP streams first
    /// write the cookie, UDP streams do the connect handshake (see [`super::udp`]).
    CreateStreams(Vec<StreamSpec>),
    /// `TEST_START`: prepare the test (timers, the omit period); no data yet.
    PrepareTest,
    /// `TEST_RUNNING`: start moving data and the clock; call
    /// [`ClientControl::test_finished`] when the time, bytes or blocks are reached.
    StartTest,
    /// Stop the sending streams (receiving ones go on until `Done`).
    StopSending,
    /// `EXCHANGE_RESULTS`: measure the streams and call [`ClientControl::local_results`].
    ResultsRequested,
    /// The server's results.
    PeerResults(TestResults),
    /// `DISPLAY_RESULTS` arrived and `IPERF_DONE` is sent: close the streams and the control
    /// connection, print the summary.
    Done,
    /// The test failed (after any `Send` before it): close everything, exit non-zero.
    Failed(ProtoError),
}

#[derive(Debug)]
enum Phase {
    Idle,
    Await(State),
    Running,
    LocalResults,
    PeerResults(FrameDecoder),
    ServerError,
    Over,
}

impl Phase {
    fn waiting_for(&self) -> &'static str {
        match self {
            Phase::Idle => "the connection",
            Phase::Await(s) => s.name(),
            Phase::Running => "the end of the test",
            Phase::LocalResults => "the client's results",
            Phase::PeerResults(_) => "the server's results",
            Phase::ServerError => "the server's error number",
            Phase::Over => "nothing",
        }
    }
}

/// The client's control-connection state machine for one test. Sans-IO: it is handed what
/// arrived and the time, and answers with [`ClientAction`]s.
///
/// ```
/// use std::time::Duration;
/// use zcnet_tools::perf::proto::{ClientAction, ClientConfig, ClientControl, Cookie, TestParams};
/// let cookie = Cookie::from_random(&[1; 36]);
/// let mut client =
///     ClientControl::new(ClientConfig::default(), cookie, TestParams::default()).unwrap();
/// let actions = client.connected(Duration::ZERO);
/// assert_eq!(actions, vec![ClientAction::Send(cookie.as_bytes().to_vec())]);
/// ```
#[derive(Debug)]
pub struct ClientControl {
    config: ClientConfig,
    cookie: Cookie,
    params: TestParams,
    params_frame: Vec<u8>,
    plan: Vec<StreamSpec>,
    phase: Phase,
    pending: Vec<u8>,
    deadline: Option<Duration>,
}

impl ClientControl {
    /// A machine for a test with these parameters. Fails if the parameters are out of iperf3's
    /// limits or their block is over the 8 KiB a server accepts.
    pub fn new(
        config: ClientConfig,
        cookie: Cookie,
        params: TestParams,
    ) -> Result<ClientControl, ProtoError> {
        params.validate()?;
        let params_frame = params.to_frame()?;
        Ok(ClientControl {
            config,
            cookie,
            plan: stream_plan(&params),
            params,
            params_frame,
            phase: Phase::Idle,
            pending: Vec::new(),
            deadline: None,
        })
    }

    /// The test's cookie.
    pub fn cookie(&self) -> &Cookie {
        &self.cookie
    }

    /// The test's parameters.
    pub fn params(&self) -> &TestParams {
        &self.params
    }

    /// The test's streams in connection order.
    pub fn streams(&self) -> &[StreamSpec] {
        &self.plan
    }

    /// Whether the test is over (after `Done` or `Failed`).
    pub fn is_over(&self) -> bool {
        matches!(self.phase, Phase::Over)
    }

    /// When to call [`ClientControl::handle_timeout`] next, if ever.
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.deadline
    }

    /// The control connection is established: send the cookie.
    pub fn connected(&mut self, now: Duration) -> Vec<ClientAction> {
        if !matches!(self.phase, Phase::Idle) {
            return self.misuse("connected() twice");
        }
        self.await_state(State::ParamExchange, now);
        vec![ClientAction::Send(self.cookie.as_bytes().to_vec())]
    }

    /// Bytes that arrived on the control connection.
    pub fn on_bytes(&mut self, now: Duration, data: &[u8]) -> Vec<ClientAction> {
        if self.is_over() {
            return Vec::new();
        }
        self.pending.extend_from_slice(data);
        let mut out = Vec::new();
        while !self.is_over() && self.step(now, &mut out) {}
        out
    }

    /// The test reached its end (time elapsed, `-n` bytes or `-k` blocks sent or received):
    /// stop sending and tell the server.
    pub fn test_finished(&mut self, now: Duration) -> Vec<ClientAction> {
        if !matches!(self.phase, Phase::Running) {
            return self.misuse("test_finished() while no test runs");
        }
        self.await_state(State::ExchangeResults, now);
        let mut out = vec![
            ClientAction::StopSending,
            ClientAction::Send(vec![State::TestEnd.to_byte()]),
        ];
        out.extend(self.on_bytes(now, &[]));
        out
    }

    /// The client's own results, after `ResultsRequested`.
    pub fn local_results(&mut self, now: Duration, results: TestResults) -> Vec<ClientAction> {
        if !matches!(self.phase, Phase::LocalResults) {
            return self.misuse("local_results() outside of the results step");
        }
        let frame = match results.to_frame() {
            Ok(f) => f,
            Err(e) => return self.finish(ClientAction::Failed(e)),
        };
        let decoder = FrameDecoder::new(self.config.max_results_len);
        self.enter(
            Phase::PeerResults(decoder),
            Some(now + self.config.reply_timeout),
        );
        let mut out = vec![ClientAction::Send(frame)];
        out.extend(self.on_bytes(now, &[]));
        out
    }

    /// Give up (e.g. on a signal): tell the server with `CLIENT_TERMINATE`, as iperf3 does.
    pub fn terminate(&mut self, _now: Duration) -> Vec<ClientAction> {
        if self.is_over() {
            return Vec::new();
        }
        let mut out = Vec::new();
        if !matches!(self.phase, Phase::Idle) {
            out.push(ClientAction::Send(vec![State::ClientTerminate.to_byte()]));
        }
        out.extend(self.finish(ClientAction::Failed(ProtoError::ClientTerminated)));
        out
    }

    /// The control connection closed (read returned 0).
    pub fn on_peer_closed(&mut self, _now: Duration) -> Vec<ClientAction> {
        match self.phase {
            Phase::Over => Vec::new(),
            // A 3.9 server reporting IEAUTHTEST sends only the error number.
            Phase::ServerError if self.pending.len() >= 4 => self.server_error(),
            _ => {
                let partial = !self.pending.is_empty()
                    || matches!(&self.phase, Phase::PeerResults(d) if d.is_partial())
                    || matches!(self.phase, Phase::ServerError);
                let waiting_for = self.phase.waiting_for();
                self.finish(ClientAction::Failed(ProtoError::PeerClosed {
                    waiting_for,
                    partial,
                }))
            }
        }
    }

    /// The deadline from [`ClientControl::poll_timeout`] passed (early calls do nothing).
    pub fn handle_timeout(&mut self, now: Duration) -> Vec<ClientAction> {
        match self.deadline {
            Some(d) if now >= d => {
                let waiting_for = self.phase.waiting_for();
                self.finish(ClientAction::Failed(ProtoError::Timeout { waiting_for }))
            }
            _ => Vec::new(),
        }
    }

    fn step(&mut self, now: Duration, out: &mut Vec<ClientAction>) -> bool {
        match self.phase {
            Phase::PeerResults(_) => self.step_results(now, out),
            Phase::ServerError if self.pending.len() >= 8 => {
                out.extend(self.server_error());
                true
            }
            Phase::Await(_) | Phase::Running if !self.pending.is_empty() => {
                let byte = self.pending.remove(0);
                self.on_state(byte, now, out);
                true
            }
            _ => false,
        }
    }

    fn on_state(&mut self, byte: u8, now: Duration, out: &mut Vec<ClientAction>) {
        let state = match State::from_byte(byte) {
            Ok(s) => s,
            Err(e) => return out.extend(self.finish(ClientAction::Failed(e))),
        };
        match state {
            State::AccessDenied => {
                out.extend(self.finish(ClientAction::Failed(ProtoError::AccessDenied)));
            }
            State::ServerError => {
                self.enter(Phase::ServerError, Some(now + self.config.reply_timeout))
            }
            State::ServerTerminate => {
                out.extend(self.finish(ClientAction::Failed(ProtoError::ServerTerminated)));
            }
            // iperf_handle_message_client ignores IPERF_DONE.
            State::IperfDone => {}
            _ if matches!(self.phase, Phase::Await(s) if s == state) => {
                self.advance(state, now, out)
            }
            _ => {
                let waiting_for = self.phase.waiting_for();
                let e = ProtoError::UnexpectedState { state, waiting_for };
                out.extend(self.finish(ClientAction::Failed(e)));
            }
        }
    }

    /// The expected state arrived: act on it and wait for the next.
    fn advance(&mut self, state: State, now: Duration, out: &mut Vec<ClientAction>) {
        match state {
            State::ParamExchange => {
                out.push(ClientAction::Send(self.params_frame.clone()));
                self.await_state(State::CreateStreams, now);
            }
            State::CreateStreams => {
                out.push(ClientAction::CreateStreams(self.plan.clone()));
                self.await_state(State::TestStart, now);
            }
            State::TestStart => {
                out.push(ClientAction::PrepareTest);
                self.await_state(State::TestRunning, now);
            }
            State::TestRunning => {
                out.push(ClientAction::StartTest);
                self.enter(Phase::Running, None);
            }
            State::ExchangeResults => {
                out.push(ClientAction::ResultsRequested);
                self.enter(Phase::LocalResults, None);
            }
            State::DisplayResults => {
                out.push(ClientAction::Send(vec![State::IperfDone.to_byte()]));
                out.extend(self.finish(ClientAction::Done));
            }
            _ => {}
        }
    }

    fn step_results(&mut self, now: Duration, out: &mut Vec<ClientAction>) -> bool {
        let Phase::PeerResults(decoder) = &mut self.phase else {
            return false;
        };
        let mut input = self.pending.as_slice();
        let result = decoder.decode(&mut input);
        let used = self.pending.len() - input.len();
        self.pending.drain(..used);
        let value = match result {
            Ok(Some(v)) => v,
            Ok(None) => return false,
            Err(e) => {
                out.extend(self.finish(ClientAction::Failed(e)));
                return true;
            }
        };
        match TestResults::from_json(&value).and_then(|r| check_result_ids(&self.plan, r)) {
            Ok(r) => {
                out.push(ClientAction::PeerResults(r));
                self.await_state(State::DisplayResults, now);
            }
            Err(e) => out.extend(self.finish(ClientAction::Failed(e))),
        }
        true
    }

    fn server_error(&mut self) -> Vec<ClientAction> {
        let word = |b: &[u8]| {
            b.get(..4)
                .and_then(|w| w.try_into().ok())
                .map(i32::from_be_bytes)
        };
        let code = word(&self.pending).unwrap_or(0);
        let errno = self.pending.get(4..).and_then(word).unwrap_or(0);
        self.finish(ClientAction::Failed(ProtoError::ServerError {
            code: ErrorCode(code),
            errno,
        }))
    }

    fn await_state(&mut self, state: State, now: Duration) {
        self.enter(Phase::Await(state), Some(now + self.config.reply_timeout));
    }

    fn enter(&mut self, phase: Phase, deadline: Option<Duration>) {
        self.phase = phase;
        self.deadline = deadline;
    }

    fn misuse(&mut self, what: &'static str) -> Vec<ClientAction> {
        self.finish(ClientAction::Failed(ProtoError::Misuse(what)))
    }

    fn finish(&mut self, last: ClientAction) -> Vec<ClientAction> {
        self.enter(Phase::Over, None);
        self.pending.clear();
        vec![last]
    }
}
