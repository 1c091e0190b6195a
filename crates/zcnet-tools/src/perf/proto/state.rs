//! The one-byte state messages of the control connection.
//!
//! iperf3 src/iperf_api.h, "states": each side writes its new state as one `signed char`
//! (`iperf_set_send_state` in src/iperf_api.c) and the peer reads it into its own state
//! (`iperf_handle_message_client` in src/iperf_client_api.c, `iperf_handle_message_server` in
//! src/iperf_server_api.c). The values below are iperf3's, unchanged from 3.0 to 3.21.

use super::error::ProtoError;

/// An iperf3 test state, as sent on the control connection (one byte, two's complement).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i8)]
pub enum State {
    /// `TEST_START` (1): server to client, all streams are connected; prepare the test.
    TestStart = 1,
    /// `TEST_RUNNING` (2): server to client, start moving data.
    TestRunning = 2,
    /// `RESULT_REQUEST` (3): defined, never sent by iperf3.
    ResultRequest = 3,
    /// `TEST_END` (4): client to server, the test is over (time, bytes or blocks reached).
    TestEnd = 4,
    /// `STREAM_BEGIN` (5): defined, never sent by iperf3.
    StreamBegin = 5,
    /// `STREAM_RUNNING` (6): defined, never sent by iperf3.
    StreamRunning = 6,
    /// `STREAM_END` (7): defined, never sent by iperf3.
    StreamEnd = 7,
    /// `ALL_STREAMS_END` (8): defined, never sent by iperf3.
    AllStreamsEnd = 8,
    /// `PARAM_EXCHANGE` (9): server to client, send the parameter block.
    ParamExchange = 9,
    /// `CREATE_STREAMS` (10): server to client, connect the data streams.
    CreateStreams = 10,
    /// `SERVER_TERMINATE` (11): the server was interrupted (signal).
    ServerTerminate = 11,
    /// `CLIENT_TERMINATE` (12): the client was interrupted (signal).
    ClientTerminate = 12,
    /// `EXCHANGE_RESULTS` (13): server to client, both send their results, client first.
    ExchangeResults = 13,
    /// `DISPLAY_RESULTS` (14): server to client, print the summary and finish.
    DisplayResults = 14,
    /// `IPERF_START` (15): the server's idle state; never sent.
    IperfStart = 15,
    /// `IPERF_DONE` (16): client to server, the test is complete.
    IperfDone = 16,
    /// `ACCESS_DENIED` (-1): the server is busy with another test, or a stream's cookie is
    /// wrong.
    AccessDenied = -1,
    /// `SERVER_ERROR` (-2): followed by two big-endian `int32`s, iperf3's error number and the
    /// server's `errno`.
    ServerError = -2,
}

impl State {
    /// Every state, in iperf_api.h's order.
    pub const ALL: [State; 18] = [
        State::TestStart,
        State::TestRunning,
        State::ResultRequest,
        State::TestEnd,
        State::StreamBegin,
        State::StreamRunning,
        State::StreamEnd,
        State::AllStreamsEnd,
        State::ParamExchange,
        State::CreateStreams,
        State::ServerTerminate,
        State::ClientTerminate,
        State::ExchangeResults,
        State::DisplayResults,
        State::IperfStart,
        State::IperfDone,
        State::AccessDenied,
        State::ServerError,
    ];

    /// The value as iperf3's `signed char`.
    pub const fn as_i8(self) -> i8 {
        self as i8
    }

    /// The byte on the wire.
    pub const fn to_byte(self) -> u8 {
        self.as_i8().to_ne_bytes()[0]
    }

    /// The state a received byte names; [`ProtoError::UnknownState`] for any other byte.
    pub fn from_byte(byte: u8) -> Result<State, ProtoError> {
        Self::ALL
            .into_iter()
            .find(|s| s.to_byte() == byte)
            .ok_or(ProtoError::UnknownState(byte))
    }

    /// iperf3's name for the state (`"TEST_START"`).
    pub const fn name(self) -> &'static str {
        match self {
            State::TestStart => "TEST_START",
            State::TestRunning => "TEST_RUNNING",
            State::ResultRequest => "RESULT_REQUEST",
            State::TestEnd => "TEST_END",
            State::StreamBegin => "STREAM_BEGIN",
            State::StreamRunning => "STREAM_RUNNING",
            State::StreamEnd => "STREAM_END",
            State::AllStreamsEnd => "ALL_STREAMS_END",
            State::ParamExchange => "PARAM_EXCHANGE",
            State::CreateStreams => "CREATE_STREAMS",
            State::ServerTerminate => "SERVER_TERMINATE",
            State::ClientTerminate => "CLIENT_TERMINATE",
            State::ExchangeResults => "EXCHANGE_RESULTS",
            State::DisplayResults => "DISPLAY_RESULTS",
            State::IperfStart => "IPERF_START",
            State::IperfDone => "IPERF_DONE",
            State::AccessDenied => "ACCESS_DENIED",
            State::ServerError => "SERVER_ERROR",
        }
    }
}

impl From<State> for u8 {
    fn from(state: State) -> u8 {
        state.to_byte()
    }
}

impl TryFrom<u8> for State {
    type Error = ProtoError;

    fn try_from(byte: u8) -> Result<State, ProtoError> {
        State::from_byte(byte)
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({})", self.name(), self.as_i8())
    }
}
