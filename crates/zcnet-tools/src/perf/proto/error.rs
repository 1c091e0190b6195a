//! Errors: iperf3's error numbers (what a `SERVER_ERROR` carries) and this module's own.

use super::state::State;

/// An iperf3 error number (`i_errno`, the `IE*` enum in src/iperf_api.h), as a `SERVER_ERROR`
/// message carries it. Only the numbers this module sends or names are constants here; any
/// other number is still a valid `ErrorCode` (a newer server may send one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub i32);

impl ErrorCode {
    /// `IEDURATION`: test duration out of range.
    pub const IEDURATION: Self = Self(5);
    /// `IENUMSTREAMS`: too many parallel streams.
    pub const IENUMSTREAMS: Self = Self(6);
    /// `IEBLOCKSIZE`: block size too large.
    pub const IEBLOCKSIZE: Self = Self(7);
    /// `IEBUFSIZE`: socket buffer size too large.
    pub const IEBUFSIZE: Self = Self(8);
    /// `IEMSS`: MSS too large.
    pub const IEMSS: Self = Self(10);
    /// `IEOMIT`: bogus `--omit`.
    pub const IEOMIT: Self = Self(12);
    /// `IEUNIMP`: an option is not implemented (what zcnet answers to an option it lacks).
    pub const IEUNIMP: Self = Self(13);
    /// `IEBURST`: burst count too large.
    pub const IEBURST: Self = Self(15);
    /// `IEUDPBLOCKSIZE`: UDP block size out of range.
    pub const IEUDPBLOCKSIZE: Self = Self(20);
    /// `IEBADTOS`: TOS out of range.
    pub const IEBADTOS: Self = Self(21);
    /// `IEREVERSEBIDIR`: both reverse and bidirectional.
    pub const IEREVERSEBIDIR: Self = Self(25);
    /// `IEINITTEST`: test initialization failed.
    pub const IEINITTEST: Self = Self(101);
    /// `IELISTEN`: unable to listen.
    pub const IELISTEN: Self = Self(102);
    /// `IERECVCOOKIE`: unable to receive the cookie.
    pub const IERECVCOOKIE: Self = Self(106);
    /// `IECTRLCLOSE`: the control connection closed unexpectedly.
    pub const IECTRLCLOSE: Self = Self(109);
    /// `IEMESSAGE`: an unknown control message.
    pub const IEMESSAGE: Self = Self(110);
    /// `IERECVPARAMS`: unable to receive the parameters.
    pub const IERECVPARAMS: Self = Self(114);
    /// `IERECVRESULTS`: unable to receive the results.
    pub const IERECVRESULTS: Self = Self(117);
    /// `IECLIENTTERM`: the client has terminated.
    pub const IECLIENTTERM: Self = Self(119);
    /// `IESERVERTERM`: the server has terminated.
    pub const IESERVERTERM: Self = Self(120);
    /// `IEACCESSDENIED`: the server is busy.
    pub const IEACCESSDENIED: Self = Self(121);
    /// `IEPROTOCOL`: protocol does not exist.
    pub const IEPROTOCOL: Self = Self(131);
    /// `IENOMSG`: no data received for too long.
    pub const IENOMSG: Self = Self(144);
    /// `IESERVERTESTDURATIONEXPIRED`: the server's deadline for the test passed.
    pub const IESERVERTESTDURATIONEXPIRED: Self = Self(160);
    /// `IECREATESTREAM`: unable to create a stream.
    pub const IECREATESTREAM: Self = Self(200);
    /// `IESTREAMLISTEN`: unable to start the stream listener.
    pub const IESTREAMLISTEN: Self = Self(202);
    /// `IESTREAMACCEPT`: unable to accept a stream.
    pub const IESTREAMACCEPT: Self = Self(204);
    /// `IESTREAMID`: results name a stream that does not exist.
    pub const IESTREAMID: Self = Self(208);

    /// iperf3's text for the number (`iperf_strerror` in src/iperf_error.c, 3.21), for the
    /// numbers defined here.
    pub fn message(self) -> Option<&'static str> {
        let text = match self.0 {
            5 => "test duration valid values are 0 to 86400 seconds",
            6 => "number of parallel streams too large (maximum = 128)",
            7 => "block size too large (maximum = 1048576 bytes)",
            8 => "socket buffer size too large (maximum = 536870912 bytes)",
            10 => "TCP MSS too large (maximum = 32767 bytes)",
            12 => "bogus value for --omit (maximum = 600 seconds)",
            13 => "an option you are trying to set is not implemented yet",
            15 => "invalid burst count (maximum = 1000)",
            20 => "block size invalid (minimum = 16 bytes, maximum = 65507 bytes)",
            21 => "bad TOS value (must be between 0 and 255 inclusive)",
            25 => "cannot be both reverse and bidirectional",
            101 => "test initialization failed",
            102 => "unable to start listener for connections",
            106 => "unable to receive cookie at server",
            109 => "control socket has closed unexpectedly",
            110 => {
                "received an unknown control message (ensure other side is iperf3 and not iperf)"
            }
            114 => "unable to receive parameters from client",
            117 => "unable to receive results",
            119 => "the client has terminated",
            120 => "the server has terminated",
            121 => "the server is busy running a test. try again later",
            131 => "protocol does not exist",
            144 => "idle timeout for receiving data",
            160 => "server test duration expired",
            200 => "unable to create a new stream",
            202 => "unable to start stream listener",
            204 => "unable to accept stream connection",
            208 => "stream has an invalid id",
            _ => return None,
        };
        Some(text)
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.message() {
            Some(text) => f.write_str(text),
            None => write!(f, "int_errno={}", self.0),
        }
    }
}

/// Everything that can go wrong in the protocol: the peer's fault, the caller's, or a report
/// from the peer.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ProtoError {
    /// A control byte that is no iperf3 state (the peer is not iperf3, or the stream is
    /// garbled). iperf3: `IEMESSAGE`.
    UnknownState(u8),
    /// A valid state at a point of the sequence where it has no meaning. iperf3: `IEMESSAGE`.
    UnexpectedState {
        /// What arrived.
        state: State,
        /// What the machine was waiting for.
        waiting_for: &'static str,
    },
    /// The 37 cookie bytes are not an iperf3 cookie: the reason says which rule failed.
    BadCookie(&'static str),
    /// A JSON frame whose length prefix is over the limit (checked before reading the body).
    FrameTooLong {
        /// The announced length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A JSON frame of length zero (iperf3 rejects these too).
    EmptyFrame,
    /// A JSON frame whose body is not JSON; the parser's message.
    InvalidJson(String),
    /// A JSON frame that is JSON but not an object.
    NotAnObject,
    /// A key iperf3 requires is missing or has the wrong type.
    MissingField(&'static str),
    /// A key has a value of the right type that cannot be used (negative, too large).
    InvalidField {
        /// The JSON key.
        key: &'static str,
        /// Why.
        reason: &'static str,
    },
    /// The parameters are well-formed but out of iperf3's limits, or ask for something this
    /// side refuses; `code` is what the server reports.
    ParamRejected {
        /// The iperf3 error number to report.
        code: ErrorCode,
        /// A line for the log: which key and why.
        detail: String,
    },
    /// The results name a stream id that this test does not have. iperf3: `IESTREAMID`.
    UnknownStreamId(i64),
    /// A UDP datagram too short for its header.
    ShortDatagram {
        /// Bytes the header needs.
        need: usize,
        /// Bytes there were.
        got: usize,
    },
    /// The control connection closed while the machine waited for the peer.
    PeerClosed {
        /// What it waited for.
        waiting_for: &'static str,
        /// Part of a message had arrived (a half-sent cookie, frame or error).
        partial: bool,
    },
    /// The peer did not answer in time.
    Timeout {
        /// What the machine waited for.
        waiting_for: &'static str,
    },
    /// The server answered `ACCESS_DENIED`: it is running another test.
    AccessDenied,
    /// The server answered `SERVER_ERROR`.
    ServerError {
        /// iperf3's error number.
        code: ErrorCode,
        /// The server's `errno` (0 when none).
        errno: i32,
    },
    /// The server sent `SERVER_TERMINATE`.
    ServerTerminated,
    /// The client sent `CLIENT_TERMINATE`.
    ClientTerminated,
    /// This side gave up (the caller asked for it with `fail`/`terminate`).
    Aborted {
        /// The error number reported to the peer.
        code: ErrorCode,
        /// The `errno` reported to the peer.
        errno: i32,
    },
    /// A method was called at a point of the sequence where it has no meaning (a bug in the
    /// caller); nothing was sent.
    Misuse(&'static str),
}

impl std::fmt::Display for ProtoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::UnknownState(b) => write!(
                f,
                "received byte {b:#04x}, which is no iperf3 control message (is the peer iperf3?)"
            ),
            Self::UnexpectedState { state, waiting_for } => {
                write!(f, "received {state} while waiting for {waiting_for}")
            }
            Self::BadCookie(why) => write!(f, "bad cookie: {why}"),
            Self::FrameTooLong { len, max } => {
                write!(f, "JSON message of {len} bytes is over the limit of {max}")
            }
            Self::EmptyFrame => f.write_str("JSON message of length 0"),
            Self::InvalidJson(e) => write!(f, "JSON message is not JSON: {e}"),
            Self::NotAnObject => f.write_str("JSON message is not an object"),
            Self::MissingField(k) => write!(f, "JSON key \"{k}\" missing or of the wrong type"),
            Self::InvalidField { key, reason } => write!(f, "JSON key \"{key}\": {reason}"),
            Self::ParamRejected { code, detail } => write!(f, "{code}: {detail}"),
            Self::UnknownStreamId(id) => write!(
                f,
                "results name stream id {id}, which is no stream of this test"
            ),
            Self::ShortDatagram { need, got } => {
                write!(f, "UDP datagram of {got} bytes, its header needs {need}")
            }
            Self::PeerClosed {
                waiting_for,
                partial,
            } => {
                let half = if *partial {
                    " after a partial message"
                } else {
                    ""
                };
                write!(
                    f,
                    "peer closed the control connection{half} while waiting for {waiting_for}"
                )
            }
            Self::Timeout { waiting_for } => write!(f, "timed out waiting for {waiting_for}"),
            Self::AccessDenied => f.write_str("the server is busy running a test. try again later"),
            Self::ServerError { code, errno } if *errno > 0 => {
                write!(f, "server error - {code} (server errno {errno})")
            }
            Self::ServerError { code, .. } => write!(f, "server error - {code}"),
            Self::ServerTerminated => f.write_str("the server has terminated"),
            Self::ClientTerminated => f.write_str("the client has terminated"),
            Self::Aborted { code, .. } => write!(f, "aborted: {code}"),
            Self::Misuse(what) => write!(f, "protocol machine misused: {what}"),
        }
    }
}

impl std::error::Error for ProtoError {}
