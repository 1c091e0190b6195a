//! Which data streams a test has, in which order, with which ids and directions.
//!
//! iperf3 src/iperf_client_api.c, `iperf_handle_message_client` (`CREATE_STREAMS`): the client
//! connects `parallel` streams in its sending direction, or for `--bidir` first `parallel`
//! sending streams and then `parallel` receiving ones (`iperf_create_streams(test, 1)`, then
//! `(test, 0)`). src/iperf_server_api.c, `iperf_run_server`: the server counts accepted
//! streams the same way, receiving ones first. src/iperf_api.c, `iperf_add_stream`: the first
//! stream has id 1, the k-th (0-based, k ≥ 1) has id k + 2 — iperf3 skips id 2 and keeps doing
//! so for compatibility between versions. Both sides number streams in connection order, so
//! ids match across the connection.

use super::error::ProtoError;
use super::params::TestParams;
use super::results::TestResults;

/// Which way a stream's data flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// The client sends, the server receives (iperf3's default).
    ClientToServer,
    /// The server sends, the client receives (`-R`, and the second half of `--bidir`).
    ServerToClient,
}

/// One data stream of a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamSpec {
    /// iperf3's stream id, as the results name it.
    pub id: i64,
    /// Which way its data flows.
    pub direction: Direction,
}

impl StreamSpec {
    /// Whether the client sends on it.
    pub fn client_sends(&self) -> bool {
        self.direction == Direction::ClientToServer
    }

    /// Whether the server sends on it.
    pub fn server_sends(&self) -> bool {
        self.direction == Direction::ServerToClient
    }
}

/// The id iperf3 gives the stream created `index`-th (0-based): 1, 3, 4, 5, …
pub fn stream_id(index: usize) -> i64 {
    let index = i64::try_from(index).unwrap_or(i64::MAX - 2);
    if index == 0 {
        1
    } else {
        index + 2
    }
}

/// The test's streams in the order the client connects them and the server accepts them.
pub fn stream_plan(params: &TestParams) -> Vec<StreamSpec> {
    let n = params.parallel as usize;
    let directions: Vec<Direction> = if params.bidirectional {
        [Direction::ClientToServer, Direction::ServerToClient]
            .into_iter()
            .flat_map(|d| std::iter::repeat_n(d, n))
            .collect()
    } else if params.reverse {
        vec![Direction::ServerToClient; n]
    } else {
        vec![Direction::ClientToServer; n]
    };
    directions
        .into_iter()
        .enumerate()
        .map(|(i, direction)| StreamSpec {
            id: stream_id(i),
            direction,
        })
        .collect()
}

/// `results` if every stream it names is in `plan`; else [`ProtoError::UnknownStreamId`]
/// (iperf3's `get_results`: `IESTREAMID`).
pub(crate) fn check_result_ids(
    plan: &[StreamSpec],
    results: TestResults,
) -> Result<TestResults, ProtoError> {
    match results
        .streams
        .iter()
        .find(|s| !plan.iter().any(|p| p.id == s.id))
    {
        Some(s) => Err(ProtoError::UnknownStreamId(s.id)),
        None => Ok(results),
    }
}
