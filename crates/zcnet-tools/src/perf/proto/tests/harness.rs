//! Drives a [`ClientControl`] against a [`ServerControl`], playing the caller of both, and
//! writes down every message on the control connection.

use std::time::Duration;

use super::super::{
    ClientAction, ClientConfig, ClientControl, Cookie, ProtoError, Protocol, ServerAction,
    ServerConfig, ServerControl, State, StreamResults, StreamSpec, TestParams, TestResults,
    COOKIE_SIZE,
};

/// Which side wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    C2S,
    S2C,
}

/// When the server's caller hands over its results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerResultsAt {
    /// As soon as `StopTest` arrives (before the client's results).
    Stop,
    /// After the client's results (`PeerResults`).
    PeerResults,
}

pub struct Pair {
    pub client: ClientControl,
    pub server: ServerControl,
    pub cookie: Cookie,
    pub now: Duration,
    /// Bytes handed over per delivery (1 = byte by byte).
    pub chunk: usize,
    pub server_results_at: ServerResultsAt,
    /// Every message on the control connection: who and what ("TEST_END", "cookie", "json").
    pub wire: Vec<(Dir, String)>,
    /// What each caller was told to do, in order.
    pub client_log: Vec<String>,
    pub server_log: Vec<String>,
    pub accepted: Vec<StreamSpec>,
    pub client_got: Option<TestResults>,
    pub server_got: Option<TestResults>,
    pub client_end: Option<Result<(), ProtoError>>,
    pub server_end: Option<Result<(), ProtoError>>,
    to_server: Vec<u8>,
    to_client: Vec<u8>,
}

/// Results naming the given streams, distinguishable by `tag`.
pub fn results_for(streams: &[StreamSpec], tag: f64) -> TestResults {
    TestResults {
        cpu_util_total: tag,
        cpu_util_user: tag / 2.0,
        cpu_util_system: tag / 2.0,
        sender_has_retransmits: 1,
        congestion_used: Some("cubic".into()),
        streams: streams
            .iter()
            .map(|s| StreamResults {
                id: s.id,
                bytes: 1000 * s.id as u64,
                retransmits: 0,
                jitter: 0.0,
                errors: 0,
                omitted_errors: Some(0),
                packets: 0,
                omitted_packets: Some(0),
                start_time: Some(0.0),
                end_time: Some(tag),
            })
            .collect(),
        server_output_text: None,
        server_output_json: None,
        zerocopy: None,
    }
}

impl Pair {
    pub fn new(params: TestParams) -> Pair {
        let cookie = Cookie::from_random(&[17; 36]);
        let client = ClientControl::new(ClientConfig::default(), cookie, params).unwrap();
        Pair {
            client,
            server: ServerControl::new(ServerConfig::default(), Duration::ZERO),
            cookie,
            now: Duration::ZERO,
            chunk: usize::MAX,
            server_results_at: ServerResultsAt::Stop,
            wire: Vec::new(),
            client_log: Vec::new(),
            server_log: Vec::new(),
            accepted: Vec::new(),
            client_got: None,
            server_got: None,
            client_end: None,
            server_end: None,
            to_server: Vec::new(),
            to_client: Vec::new(),
        }
    }

    /// Runs the test to its end (or until neither side has anything more to say).
    pub fn run(&mut self) {
        let actions = self.client.connected(self.now);
        self.client_actions(actions);
        while !self.to_server.is_empty() || !self.to_client.is_empty() {
            let bytes = std::mem::take(&mut self.to_server);
            for piece in bytes.chunks(self.chunk.max(1)) {
                let actions = self.server.on_bytes(self.now, piece);
                self.server_actions(actions);
            }
            let bytes = std::mem::take(&mut self.to_client);
            for piece in bytes.chunks(self.chunk.max(1)) {
                let actions = self.client.on_bytes(self.now, piece);
                self.client_actions(actions);
            }
        }
    }

    pub fn client_actions(&mut self, actions: Vec<ClientAction>) {
        for a in actions {
            self.client_log.push(client_name(&a));
            match a {
                ClientAction::Send(b) => {
                    self.wire.extend(describe(Dir::C2S, &b));
                    self.to_server.extend(b);
                }
                ClientAction::CreateStreams(streams) => self.connect_streams(&streams),
                ClientAction::StartTest => {
                    self.now += Duration::from_secs(u64::from(self.client.params().time));
                    let next = self.client.test_finished(self.now);
                    self.client_actions(next);
                }
                ClientAction::ResultsRequested => {
                    let r = results_for(self.client.streams(), 1.5);
                    let next = self.client.local_results(self.now, r);
                    self.client_actions(next);
                }
                ClientAction::PeerResults(r) => self.client_got = Some(r),
                ClientAction::Done => self.client_end = Some(Ok(())),
                ClientAction::Failed(e) => self.client_end = Some(Err(e)),
                _ => {}
            }
        }
    }

    fn connect_streams(&mut self, streams: &[StreamSpec]) {
        let udp = self.client.params().protocol == Protocol::Udp;
        let cookie = self.cookie;
        for _ in streams {
            let opening = (!udp).then_some(cookie.as_bytes().as_slice());
            let actions = self.server.on_stream(self.now, opening);
            self.server_actions(actions);
        }
    }

    pub fn server_actions(&mut self, actions: Vec<ServerAction>) {
        for a in actions {
            self.server_log.push(server_name(&a));
            match a {
                ServerAction::Send(b) => {
                    self.wire.extend(describe(Dir::S2C, &b));
                    self.to_client.extend(b);
                }
                ServerAction::Params(_) => {
                    let next = self.server.listening(self.now);
                    self.server_actions(next);
                }
                ServerAction::AcceptStream(s) => self.accepted.push(s),
                ServerAction::StopTest if self.server_results_at == ServerResultsAt::Stop => {
                    self.give_server_results();
                }
                ServerAction::PeerResults(r) => {
                    self.server_got = Some(r);
                    if self.server_results_at == ServerResultsAt::PeerResults {
                        self.give_server_results();
                    }
                }
                ServerAction::Done => self.server_end = Some(Ok(())),
                ServerAction::Failed(e) => self.server_end = Some(Err(e)),
                _ => {}
            }
        }
    }

    fn give_server_results(&mut self) {
        let r = results_for(self.server.streams(), 2.5);
        let next = self.server.local_results(self.now, r);
        self.server_actions(next);
    }
}

/// Splits written bytes into messages: a state byte, a JSON frame (its length's first byte is
/// 0, which is no state), or the cookie (37 bytes from the client with nothing else).
pub fn describe(dir: Dir, bytes: &[u8]) -> Vec<(Dir, String)> {
    if dir == Dir::C2S && bytes.len() == COOKIE_SIZE && bytes[36] == 0 {
        return vec![(dir, "cookie".into())];
    }
    let mut out = Vec::new();
    let mut rest = bytes;
    while let Some(&first) = rest.first() {
        if first == 0 && rest.len() >= 4 {
            let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            out.push((dir, "json".to_string()));
            rest = &rest[(4 + len).min(rest.len())..];
        } else {
            let name = State::from_byte(first)
                .map_or_else(|_| format!("byte {first}"), |s| s.name().to_string());
            out.push((dir, name));
            rest = &rest[1..];
        }
    }
    out
}

pub fn client_name(a: &ClientAction) -> String {
    let name = format!("{a:?}");
    name.split(['(', ' '])
        .next()
        .unwrap_or_default()
        .to_string()
}

pub fn server_name(a: &ServerAction) -> String {
    let name = format!("{a:?}");
    name.split(['(', ' '])
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The control-connection transcript every successful test has, whatever its direction.
pub fn full_transcript() -> Vec<(Dir, String)> {
    use Dir::{C2S, S2C};
    [
        (C2S, "cookie"),
        (S2C, "PARAM_EXCHANGE"),
        (C2S, "json"),
        (S2C, "CREATE_STREAMS"),
        (S2C, "TEST_START"),
        (S2C, "TEST_RUNNING"),
        (C2S, "TEST_END"),
        (S2C, "EXCHANGE_RESULTS"),
        (C2S, "json"),
        (S2C, "json"),
        (S2C, "DISPLAY_RESULTS"),
        (C2S, "IPERF_DONE"),
    ]
    .into_iter()
    .map(|(d, s)| (d, s.to_string()))
    .collect()
}
