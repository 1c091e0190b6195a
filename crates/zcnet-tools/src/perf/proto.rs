//! iperf3's control and data protocol, sans-IO: no sockets, no syscalls, no clock.
//!
//! Written from iperf3's sources (3.9 to 3.21; each file here cites the functions it follows)
//! so that `zcnet perf` and an unmodified `iperf3` can test against each other:
//!
//! | piece | iperf3 | here |
//! | --- | --- | --- |
//! | state bytes | src/iperf_api.h | [`State`] |
//! | the 37-byte cookie | `make_cookie`, src/iperf_util.c | [`Cookie`] |
//! | length-prefixed JSON | `JSON_write` / `JSON_read`, src/iperf_api.c | [`encode_frame`], [`FrameDecoder`] |
//! | parameter block | `send_parameters` / `get_parameters` | [`TestParams`] |
//! | results | `send_results` / `get_results` | [`TestResults`] |
//! | stream ids and order | `iperf_add_stream`, `iperf_create_streams` | [`stream_plan`] |
//! | UDP handshake, header, jitter and loss | src/iperf_udp.c | [`udp`] |
//! | the server's sequence | src/iperf_server_api.c | [`ServerControl`] |
//! | the client's sequence | src/iperf_client_api.c | [`ClientControl`] |
//!
//! The two machines take what arrived on the control connection (any split of the bytes),
//! events from their caller (the listener is open, a stream connected, the test time is up,
//! the peer closed) and the current time as a [`std::time::Duration`] since any fixed point;
//! they answer with actions: bytes to write, streams to create or accept, when to start and
//! stop, the peer's results, done or failed with a reason. The caller owns every socket and
//! timer. Tests drive a client machine against a server machine directly.
//!
//! ```text
//!   control socket ──bytes──► ServerControl::on_bytes ──► ServerAction::{Send, Params, …}
//!   data listener  ──cookie─► ServerControl::on_stream ─► AcceptStream(StreamSpec) | DenyStream
//!   caller         ─────────► listening / local_results / fail / handle_timeout
//!
//!   control socket ──bytes──► ClientControl::on_bytes ──► ClientAction::{Send, CreateStreams, …}
//!   caller         ─────────► connected / test_finished / local_results / terminate
//!
//!   UDP datagram   ──────────► UdpHeader::read ──► UdpRecvStats::on_datagram ──► jitter, loss
//! ```

mod client;
mod cookie;
mod error;
mod frame;
mod json;
mod params;
mod results;
mod server;
mod state;
mod stream;
pub mod udp;

#[cfg(test)]
mod tests;

pub use client::{ClientAction, ClientConfig, ClientControl};
pub use cookie::{Cookie, COOKIE_ALPHABET, COOKIE_SIZE};
pub use error::{ErrorCode, ProtoError};
pub use frame::{encode_frame, FrameDecoder, FRAME_HEADER_LEN, MAX_PARAMS_LEN, MAX_RESULTS_LEN};
pub use params::{
    Protocol, TestParams, DEFAULT_PACING_TIMER, DEFAULT_TCP_LEN, DEFAULT_TIME, DEFAULT_UDP_LEN,
    KNOWN_KEYS, MAX_BURST, MAX_MSS, MAX_OMIT, MAX_STREAMS, MAX_TCP_LEN, MAX_TIME, MAX_UDP_LEN,
    MAX_WINDOW, MIN_UDP_LEN,
};
pub use results::{StreamResults, TestResults, ZEROCOPY_KEY};
pub use server::{
    server_error_message, ServerAction, ServerConfig, ServerControl, ACCESS_DENIED_REPLY,
};
pub use state::State;
pub use stream::{stream_id, stream_plan, Direction, StreamSpec};
pub use udp::{Timestamp, UdpHeader, UdpRecvStats};
