//! The server's side of one test's control connection.
//!
//! iperf3 src/iperf_server_api.c (`iperf_accept`, `iperf_handle_message_server`,
//! `iperf_run_server`, `cleanup_server`, `server_timer_proc`) and src/iperf_api.c
//! (`iperf_exchange_parameters`, `iperf_exchange_results`). The sequence, server's view:
//!
//! ```text
//!  client                                   server
//!  cookie (37 bytes)          ─────────►
//!                             ◄─────────    PARAM_EXCHANGE
//!  parameter block (JSON)     ─────────►    (opens the data listener)
//!                             ◄─────────    CREATE_STREAMS
//!  data streams connect       ═════════►    (TCP: each sends the cookie; UDP: connect message)
//!                             ◄─────────    TEST_START, TEST_RUNNING   (once all are in)
//!  ……… data flows, one way or both ………
//!  TEST_END                   ─────────►    (stops and closes the streams)
//!                             ◄─────────    EXCHANGE_RESULTS
//!  client results (JSON)      ─────────►
//!                             ◄─────────    server results (JSON), DISPLAY_RESULTS
//!  IPERF_DONE (or close)      ─────────►    test over; serve the next client
//! ```
//!
//! The same for `-R` and `--bidir`: only the streams' directions differ; the client always
//! ends the test. At any point the client may send `CLIENT_TERMINATE`. When the server fails,
//! it sends `SERVER_ERROR` and two big-endian `int32`s: iperf3's error number and `errno`
//! (`cleanup_server`). While a test runs, every further connection to the port that is not one
//! of this test's data streams gets one byte, `ACCESS_DENIED`, and is closed (`iperf_accept`);
//! [`ServerControl::accepting_streams`] says which a TCP connection is.

use std::time::Duration;

use super::cookie::{Cookie, COOKIE_SIZE};
use super::error::{ErrorCode, ProtoError};
use super::frame::{FrameDecoder, MAX_PARAMS_LEN, MAX_RESULTS_LEN};
use super::params::{Protocol, TestParams};
use super::results::TestResults;
use super::state::State;
use super::stream::{check_result_ids, stream_plan, StreamSpec};

/// The one byte for a control connection refused while a test runs, or a data stream with a
/// wrong cookie.
pub const ACCESS_DENIED_REPLY: [u8; 1] = [State::AccessDenied.to_byte()];

/// The bytes of a `SERVER_ERROR` message.
pub fn server_error_message(code: ErrorCode, errno: i32) -> Vec<u8> {
    let mut m = vec![State::ServerError.to_byte()];
    m.extend_from_slice(&code.0.to_be_bytes());
    m.extend_from_slice(&errno.to_be_bytes());
    m
}

/// Limits of a [`ServerControl`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// How long the client may take for each step outside the running test: the cookie, the
    /// parameters, connecting the streams, its results. iperf3 waits without limit; zcnet does
    /// not, so that a half-sent message cannot hold the server.
    pub step_timeout: Duration,
    /// How long past `time + omit` a timed test may run before the server ends it with
    /// `IESERVERTESTDURATIONEXPIRED` (iperf3: 4 s × 10 transitions = 40 s,
    /// `create_server_timers`; 3.9–3.20 then close the connection without a word, 3.21 sends
    /// that error first, as this machine does).
    pub grace: Duration,
    /// The largest parameter block accepted (iperf3: 8 KiB).
    pub max_params_len: usize,
    /// The largest results message accepted.
    pub max_results_len: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            step_timeout: Duration::from_secs(10),
            grace: Duration::from_secs(40),
            max_params_len: MAX_PARAMS_LEN,
            max_results_len: MAX_RESULTS_LEN,
        }
    }
}

/// What the server's caller does next, in order.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ServerAction {
    /// Write these bytes on the control connection.
    Send(Vec<u8>),
    /// The client's parameters arrived (already checked with [`TestParams::validate`]). Check
    /// the options ([`TestParams::reject_unsupported`]), open the data listener, then call
    /// [`ServerControl::listening`] — or [`ServerControl::fail`].
    Params(TestParams),
    /// Keep the data stream just reported to [`ServerControl::on_stream`]: it is this one.
    AcceptStream(StreamSpec),
    /// Write [`ACCESS_DENIED_REPLY`] on the data stream just reported and close it; log why.
    /// The test goes on.
    DenyStream(ProtoError),
    /// All streams are in and `TEST_START`, `TEST_RUNNING` are sent: start moving data.
    StartTest,
    /// The client ended the test: stop and close the data streams, measure, and call
    /// [`ServerControl::local_results`].
    StopTest,
    /// The client's results.
    PeerResults(TestResults),
    /// The test is complete: close the control connection; serve the next client.
    Done,
    /// The test failed (after any `Send` before it): close everything; serve the next client.
    Failed(ProtoError),
}

#[derive(Debug)]
enum Phase {
    Cookie,
    Params(FrameDecoder),
    Listen,
    Streams { next: usize },
    Running,
    Results(FrameDecoder),
    AwaitLocal,
    AwaitDone,
    Over,
}

impl Phase {
    fn waiting_for(&self) -> &'static str {
        match self {
            Phase::Cookie => "the cookie",
            Phase::Params(_) => "the parameters",
            Phase::Listen => "the data listener",
            Phase::Streams { .. } => "the data streams",
            Phase::Running => "TEST_END",
            Phase::Results(_) => "the client's results",
            Phase::AwaitLocal => "the server's results",
            Phase::AwaitDone => "IPERF_DONE",
            Phase::Over => "nothing",
        }
    }

    /// The error number reported when the client fails this step.
    fn failure_code(&self) -> ErrorCode {
        match self {
            Phase::Cookie => ErrorCode::IERECVCOOKIE,
            Phase::Params(_) => ErrorCode::IERECVPARAMS,
            Phase::Streams { .. } => ErrorCode::IESTREAMACCEPT,
            Phase::Running => ErrorCode::IESERVERTESTDURATIONEXPIRED,
            Phase::Results(_) => ErrorCode::IERECVRESULTS,
            _ => ErrorCode::IEMESSAGE,
        }
    }
}

/// The server's control-connection state machine for one test. Sans-IO: it is handed what
/// arrived and the time, and answers with [`ServerAction`]s.
///
/// ```
/// use std::time::Duration;
/// use zcnet_tools::perf::proto::{Cookie, ServerAction, ServerConfig, ServerControl, State};
/// let t0 = Duration::ZERO;
/// let mut server = ServerControl::new(ServerConfig::default(), t0);
/// let cookie = Cookie::from_random(&[7; 36]);
/// let actions = server.on_bytes(t0, cookie.as_bytes());
/// assert_eq!(actions, vec![ServerAction::Send(vec![State::ParamExchange.to_byte()])]);
/// ```
#[derive(Debug)]
pub struct ServerControl {
    config: ServerConfig,
    phase: Phase,
    pending: Vec<u8>,
    cookie: Option<Cookie>,
    params: Option<TestParams>,
    plan: Vec<StreamSpec>,
    local: Option<TestResults>,
    deadline: Option<Duration>,
}

impl ServerControl {
    /// A machine for a control connection accepted at `now`, while no other test runs.
    pub fn new(config: ServerConfig, now: Duration) -> ServerControl {
        let deadline = Some(now + config.step_timeout);
        ServerControl {
            config,
            phase: Phase::Cookie,
            pending: Vec::new(),
            cookie: None,
            params: None,
            plan: Vec::new(),
            local: None,
            deadline,
        }
    }

    /// The test's cookie, once received.
    pub fn cookie(&self) -> Option<&Cookie> {
        self.cookie.as_ref()
    }

    /// The test's parameters, once received.
    pub fn params(&self) -> Option<&TestParams> {
        self.params.as_ref()
    }

    /// The test's streams in accept order, once the parameters are in.
    pub fn streams(&self) -> &[StreamSpec] {
        &self.plan
    }

    /// Whether a TCP connection to the port now is one of this test's data streams (iperf3
    /// accepts streams on the control port only while in `CREATE_STREAMS`); any other new
    /// connection gets [`ACCESS_DENIED_REPLY`].
    pub fn accepting_streams(&self) -> bool {
        matches!(self.phase, Phase::Streams { .. })
    }

    /// Whether the test is over (after `Done` or `Failed`).
    pub fn is_over(&self) -> bool {
        matches!(self.phase, Phase::Over)
    }

    /// When to call [`ServerControl::handle_timeout`] next, if ever.
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.deadline
    }

    /// Bytes that arrived on the control connection.
    pub fn on_bytes(&mut self, now: Duration, data: &[u8]) -> Vec<ServerAction> {
        if self.is_over() {
            return Vec::new();
        }
        self.pending.extend_from_slice(data);
        let mut out = Vec::new();
        while !self.is_over() && self.step(now, &mut out) {}
        out
    }

    /// The caller opened the data listener after `Params`: tell the client to connect.
    pub fn listening(&mut self, now: Duration) -> Vec<ServerAction> {
        if !matches!(self.phase, Phase::Listen) {
            return self.misuse("listening() outside of the parameter step");
        }
        self.enter(
            Phase::Streams { next: 0 },
            Some(now + self.config.step_timeout),
        );
        let mut out = vec![ServerAction::Send(vec![State::CreateStreams.to_byte()])];
        out.extend(self.on_bytes(now, &[]));
        out
    }

    /// A data stream connected: for TCP, `cookie` is the 37 bytes it opened with (`None` if it
    /// closed before sending them); for UDP, `None` (the connect datagram carries no cookie).
    pub fn on_stream(&mut self, now: Duration, cookie: Option<&[u8]>) -> Vec<ServerAction> {
        let Phase::Streams { next } = self.phase else {
            return vec![ServerAction::DenyStream(ProtoError::Misuse(
                "a data stream while the test expects none",
            ))];
        };
        if let Err(e) = self.check_stream_cookie(cookie) {
            return vec![ServerAction::DenyStream(e)];
        }
        // `Streams { next }` exists only with `next < plan.len()` (validate: parallel >= 1).
        let mut out = vec![ServerAction::AcceptStream(self.plan[next])];
        if next + 1 < self.plan.len() {
            self.phase = Phase::Streams { next: next + 1 };
            return out;
        }
        let deadline = self.test_deadline(now);
        self.enter(Phase::Running, deadline);
        out.push(ServerAction::Send(vec![
            State::TestStart.to_byte(),
            State::TestRunning.to_byte(),
        ]));
        out.push(ServerAction::StartTest);
        out.extend(self.on_bytes(now, &[]));
        out
    }

    /// The server's own results, after `StopTest`; sent once the client's have arrived.
    pub fn local_results(&mut self, now: Duration, results: TestResults) -> Vec<ServerAction> {
        if !matches!(self.phase, Phase::Results(_) | Phase::AwaitLocal) || self.local.is_some() {
            return self.misuse("local_results() outside of the results step");
        }
        self.local = Some(results);
        let mut out = Vec::new();
        if matches!(self.phase, Phase::AwaitLocal) {
            self.send_results(now, &mut out);
        }
        out.extend(self.on_bytes(now, &[]));
        out
    }

    /// The control connection closed (read returned 0).
    pub fn on_peer_closed(&mut self, _now: Duration) -> Vec<ServerAction> {
        let partial = !self.pending.is_empty()
            || matches!(&self.phase, Phase::Params(d) | Phase::Results(d) if d.is_partial());
        match self.phase {
            Phase::Over => Vec::new(),
            Phase::AwaitDone => self.finish(ServerAction::Done),
            _ => {
                let waiting_for = self.phase.waiting_for();
                self.finish(ServerAction::Failed(ProtoError::PeerClosed {
                    waiting_for,
                    partial,
                }))
            }
        }
    }

    /// The deadline from [`ServerControl::poll_timeout`] passed (call with the current time;
    /// early calls do nothing).
    pub fn handle_timeout(&mut self, now: Duration) -> Vec<ServerAction> {
        match self.deadline {
            Some(d) if now >= d => {}
            _ => return Vec::new(),
        }
        let waiting_for = self.phase.waiting_for();
        match self.phase {
            Phase::AwaitDone => self.finish(ServerAction::Done),
            _ => {
                let code = self.phase.failure_code();
                self.abort(code, 0, ProtoError::Timeout { waiting_for })
            }
        }
    }

    /// Ends the test with `SERVER_ERROR`: `error` is a [`ProtoError::ParamRejected`] (e.g. from
    /// [`TestParams::reject_unsupported`]) or [`ProtoError::Aborted`] (e.g. the listener
    /// failed: `IESTREAMLISTEN` and its errno), whose number is sent; other errors send
    /// `IEINITTEST`.
    pub fn fail(&mut self, _now: Duration, error: ProtoError) -> Vec<ServerAction> {
        if self.is_over() {
            return Vec::new();
        }
        let (code, errno) = match &error {
            ProtoError::ParamRejected { code, .. } => (*code, 0),
            ProtoError::Aborted { code, errno } => (*code, *errno),
            _ => (ErrorCode::IEINITTEST, 0),
        };
        self.abort(code, errno, error)
    }

    /// Processes what `pending` allows in the current phase; false when it needs more.
    fn step(&mut self, now: Duration, out: &mut Vec<ServerAction>) -> bool {
        match self.phase {
            Phase::Cookie => self.step_cookie(now, out),
            Phase::Params(_) => self.step_params(now, out),
            Phase::Results(_) => self.step_results(now, out),
            Phase::AwaitLocal => false,
            _ => self.step_state(now, out),
        }
    }

    fn step_cookie(&mut self, now: Duration, out: &mut Vec<ServerAction>) -> bool {
        if self.pending.len() < COOKIE_SIZE {
            return false;
        }
        let bytes: Vec<u8> = self.pending.drain(..COOKIE_SIZE).collect();
        match Cookie::parse(&bytes) {
            Ok(c) => {
                self.cookie = Some(c);
                let decoder = FrameDecoder::new(self.config.max_params_len);
                self.enter(Phase::Params(decoder), Some(now + self.config.step_timeout));
                out.push(ServerAction::Send(vec![State::ParamExchange.to_byte()]));
            }
            Err(e) => out.extend(self.abort(ErrorCode::IERECVCOOKIE, 0, e)),
        }
        true
    }

    fn step_params(&mut self, _now: Duration, out: &mut Vec<ServerAction>) -> bool {
        let Some(value) = self.decode_pending(out) else {
            return false;
        };
        let parsed = TestParams::from_json(&value).and_then(|p| p.validate().map(|()| p));
        match parsed {
            Ok(p) => {
                self.plan = stream_plan(&p);
                self.params = Some(p.clone());
                self.enter(Phase::Listen, None);
                out.push(ServerAction::Params(p));
            }
            Err(e) => {
                let code = match &e {
                    ProtoError::ParamRejected { code, .. } => *code,
                    _ => ErrorCode::IERECVPARAMS,
                };
                out.extend(self.abort(code, 0, e));
            }
        }
        true
    }

    fn step_results(&mut self, now: Duration, out: &mut Vec<ServerAction>) -> bool {
        let Some(value) = self.decode_pending(out) else {
            return false;
        };
        let parsed = TestResults::from_json(&value).and_then(|r| check_result_ids(&self.plan, r));
        match parsed {
            Ok(r) => {
                out.push(ServerAction::PeerResults(r));
                self.enter(Phase::AwaitLocal, None);
                if self.local.is_some() {
                    self.send_results(now, out);
                }
            }
            Err(e) => {
                let code = match e {
                    ProtoError::UnknownStreamId(_) => ErrorCode::IESTREAMID,
                    _ => ErrorCode::IERECVRESULTS,
                };
                out.extend(self.abort(code, 0, e));
            }
        }
        true
    }

    /// Feeds `pending` to the phase's frame decoder; `None` when the frame is incomplete or
    /// failed (the failure is in `out`).
    fn decode_pending(&mut self, out: &mut Vec<ServerAction>) -> Option<serde_json::Value> {
        let (Phase::Params(decoder) | Phase::Results(decoder)) = &mut self.phase else {
            return None;
        };
        let mut input = self.pending.as_slice();
        let result = decoder.decode(&mut input);
        let used = self.pending.len() - input.len();
        self.pending.drain(..used);
        match result {
            Ok(v) => v,
            Err(e) => {
                let code = self.phase.failure_code();
                out.extend(self.abort(code, 0, e));
                None
            }
        }
    }

    /// A state byte from the client, in the phases where only those arrive.
    fn step_state(&mut self, now: Duration, out: &mut Vec<ServerAction>) -> bool {
        if self.pending.is_empty() {
            return false;
        }
        let byte = self.pending.remove(0);
        let state = match State::from_byte(byte) {
            Ok(s) => s,
            Err(e) => {
                out.extend(self.abort(ErrorCode::IEMESSAGE, 0, e));
                return true;
            }
        };
        match (state, &self.phase) {
            (State::TestEnd, Phase::Running) => {
                let decoder = FrameDecoder::new(self.config.max_results_len);
                self.enter(
                    Phase::Results(decoder),
                    Some(now + self.config.step_timeout),
                );
                out.push(ServerAction::StopTest);
                out.push(ServerAction::Send(vec![State::ExchangeResults.to_byte()]));
            }
            (State::IperfDone, Phase::AwaitDone) => out.extend(self.finish(ServerAction::Done)),
            (State::ClientTerminate, _) => {
                out.extend(self.finish(ServerAction::Failed(ProtoError::ClientTerminated)));
            }
            // iperf_handle_message_server ignores TEST_START.
            (State::TestStart, _) => {}
            (state, phase) => {
                let waiting_for = phase.waiting_for();
                let e = ProtoError::UnexpectedState { state, waiting_for };
                out.extend(self.abort(ErrorCode::IEMESSAGE, 0, e));
            }
        }
        true
    }

    fn send_results(&mut self, now: Duration, out: &mut Vec<ServerAction>) {
        let Some(local) = self.local.take() else {
            return;
        };
        match local.to_frame() {
            Ok(mut frame) => {
                frame.push(State::DisplayResults.to_byte());
                out.push(ServerAction::Send(frame));
                self.enter(Phase::AwaitDone, Some(now + self.config.step_timeout));
            }
            Err(e) => out.extend(self.abort(ErrorCode::IEINITTEST, 0, e)),
        }
    }

    fn check_stream_cookie(&self, cookie: Option<&[u8]>) -> Result<(), ProtoError> {
        let udp = self.params.as_ref().map(|p| p.protocol) == Some(Protocol::Udp);
        match (udp, cookie, &self.cookie) {
            (true, _, _) => Ok(()),
            (false, None, _) => Err(ProtoError::BadCookie("the stream sent no cookie")),
            (false, Some(got), Some(want)) if want.matches(got) => Ok(()),
            (false, Some(_), _) => Err(ProtoError::BadCookie(
                "the stream's cookie is not this test's",
            )),
        }
    }

    /// iperf3's server timer: `time + omit + grace` after the start, for timed tests only.
    fn test_deadline(&self, now: Duration) -> Option<Duration> {
        let p = self.params.as_ref()?;
        (p.time != 0).then(|| {
            now + Duration::from_secs(u64::from(p.time) + u64::from(p.omit)) + self.config.grace
        })
    }

    fn enter(&mut self, phase: Phase, deadline: Option<Duration>) {
        self.phase = phase;
        self.deadline = deadline;
    }

    fn abort(&mut self, code: ErrorCode, errno: i32, error: ProtoError) -> Vec<ServerAction> {
        let mut out = vec![ServerAction::Send(server_error_message(code, errno))];
        out.extend(self.finish(ServerAction::Failed(error)));
        out
    }

    fn misuse(&mut self, what: &'static str) -> Vec<ServerAction> {
        self.finish(ServerAction::Failed(ProtoError::Misuse(what)))
    }

    fn finish(&mut self, last: ServerAction) -> Vec<ServerAction> {
        self.enter(Phase::Over, None);
        self.pending.clear();
        vec![last]
    }
}
