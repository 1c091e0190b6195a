//! Length-prefixed JSON messages: the parameter block and the results.
//!
//! iperf3 src/iperf_api.c, `JSON_write`: a 4-byte big-endian length (`htonl(strlen(str))`),
//! then the JSON text of `cJSON_PrintUnformatted`, no terminating NUL. `JSON_read`: reads the
//! length, refuses 0 and (3.18+) anything over the caller's limit — `MAX_PARAMS_JSON_STRING`
//! (8 KiB, src/iperf.h) for parameters, no limit for results — then reads exactly that many
//! bytes and parses them with cJSON.

use serde_json::Value;

use super::error::ProtoError;

/// Bytes of the length prefix.
pub const FRAME_HEADER_LEN: usize = 4;

/// The largest parameter block iperf3 3.18+ servers accept (`MAX_PARAMS_JSON_STRING`).
pub const MAX_PARAMS_LEN: usize = 8 * 1024;

/// The largest results message this side accepts. iperf3 sets no limit; results carry the
/// server's whole output when the client asked for it (`--get-server-output`), so the limit is
/// generous, but finite so that a broken peer cannot make us allocate gigabytes.
pub const MAX_RESULTS_LEN: usize = 16 * 1024 * 1024;

/// A frame: the length prefix, then `value` as compact JSON.
///
/// Fails with [`ProtoError::FrameTooLong`] if the JSON is longer than `max` bytes (the peer
/// would refuse it).
pub fn encode_frame(value: &Value, max: usize) -> Result<Vec<u8>, ProtoError> {
    let body = value.to_string();
    let len = u32::try_from(body.len())
        .ok()
        .filter(|&l| l as usize <= max)
        .ok_or(ProtoError::FrameTooLong {
            len: body.len(),
            max,
        })?;
    let mut frame = Vec::with_capacity(FRAME_HEADER_LEN + body.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(body.as_bytes());
    Ok(frame)
}

/// An incremental frame decoder: feed it bytes as they arrive, in pieces of any size.
///
/// ```
/// use zcnet_tools::perf::proto::{encode_frame, FrameDecoder, MAX_PARAMS_LEN};
/// let frame = encode_frame(&serde_json::json!({"tcp": true}), MAX_PARAMS_LEN).unwrap();
/// let mut dec = FrameDecoder::new(MAX_PARAMS_LEN);
/// let (first, rest) = frame.split_at(3);
/// assert_eq!(dec.decode(&mut &first[..]).unwrap(), None); // not yet
/// let mut rest = rest;
/// assert_eq!(dec.decode(&mut rest).unwrap(), Some(serde_json::json!({"tcp": true})));
/// ```
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    max: usize,
    header: [u8; FRAME_HEADER_LEN],
    header_len: usize,
    body: Vec<u8>,
    body_len: Option<usize>,
}

impl FrameDecoder {
    /// A decoder that refuses frames longer than `max` bytes of JSON.
    pub fn new(max: usize) -> FrameDecoder {
        FrameDecoder {
            max,
            header: [0; FRAME_HEADER_LEN],
            header_len: 0,
            body: Vec::new(),
            body_len: None,
        }
    }

    /// Takes bytes from the front of `input` (advancing it) up to the end of one frame, and
    /// returns the frame's JSON once it is complete. Bytes after the frame stay in `input`.
    ///
    /// After an error the decoder starts over; the connection is to be dropped anyway.
    pub fn decode(&mut self, input: &mut &[u8]) -> Result<Option<Value>, ProtoError> {
        let result = self.decode_inner(input);
        if !matches!(result, Ok(None)) {
            *self = FrameDecoder::new(self.max);
        }
        result
    }

    /// Whether part of a frame has arrived (a connection that closes now closed mid-message).
    pub fn is_partial(&self) -> bool {
        self.header_len > 0
    }

    fn decode_inner(&mut self, input: &mut &[u8]) -> Result<Option<Value>, ProtoError> {
        let Some(len) = self.take_header(input)? else {
            return Ok(None);
        };
        let want = len - self.body.len();
        let (now, rest) = input.split_at(want.min(input.len()));
        self.body.extend_from_slice(now);
        *input = rest;
        if self.body.len() < len {
            return Ok(None);
        }
        parse_body(&self.body).map(Some)
    }

    /// The body length once the 4 header bytes are in; checks it against the limit.
    fn take_header(&mut self, input: &mut &[u8]) -> Result<Option<usize>, ProtoError> {
        if let Some(len) = self.body_len {
            return Ok(Some(len));
        }
        let want = FRAME_HEADER_LEN - self.header_len;
        let (now, rest) = input.split_at(want.min(input.len()));
        self.header[self.header_len..self.header_len + now.len()].copy_from_slice(now);
        self.header_len += now.len();
        *input = rest;
        if self.header_len < FRAME_HEADER_LEN {
            return Ok(None);
        }
        let len = u32::from_be_bytes(self.header) as usize;
        if len == 0 {
            return Err(ProtoError::EmptyFrame);
        }
        if len > self.max {
            return Err(ProtoError::FrameTooLong { len, max: self.max });
        }
        self.body = Vec::with_capacity(len);
        self.body_len = Some(len);
        Ok(Some(len))
    }
}

/// Parses a body. Trailing NULs are dropped: cJSON stops at the first NUL, so a peer that
/// counts a C string's terminator in the length still interoperates with iperf3.
fn parse_body(body: &[u8]) -> Result<Value, ProtoError> {
    let end = body.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    serde_json::from_slice(&body[..end]).map_err(|e| ProtoError::InvalidJson(e.to_string()))
}
