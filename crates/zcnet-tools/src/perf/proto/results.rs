//! The results each side sends at `EXCHANGE_RESULTS`.
//!
//! iperf3 src/iperf_api.c, `send_results` / `get_results`. Top level: `cpu_util_total`,
//! `cpu_util_user`, `cpu_util_system` (percent, doubles), `sender_has_retransmits` (1, 0, or -1
//! when this side only received), `congestion_used` (when known), `server_output_json` or
//! `server_output_text` (server only, when the client asked with `--get-server-output`), and
//! `streams`. Per stream: `id`, `bytes` (sent minus omitted, or received), `retransmits` (-1
//! when unknown or receiving), `jitter` (seconds), `errors` (lost datagrams), `packets`,
//! `start_time`, `end_time` (seconds since the stream's start; 3.2+), and since 3.14
//! `omitted_errors` and `omitted_packets`.
//!
//! `get_results` (3.21) requires the three CPU numbers, `sender_has_retransmits`, `streams`,
//! and per stream `id`, `bytes`, `retransmits`, `jitter`, `errors`, `packets`; the two
//! `omitted_*` keys must come together or not at all. [`TestResults::from_json`] requires the
//! same, so what it accepts an iperf3 peer would have accepted.

use serde_json::{Map, Value};

use super::error::ProtoError;
use super::frame::{encode_frame, MAX_RESULTS_LEN};
use super::json::{self, Object};

/// One side's results.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TestResults {
    /// `"cpu_util_total"`: percent of one CPU used by the process, user + system.
    pub cpu_util_total: f64,
    /// `"cpu_util_user"`.
    pub cpu_util_user: f64,
    /// `"cpu_util_system"`.
    pub cpu_util_system: f64,
    /// `"sender_has_retransmits"`: 1 if the retransmit counts are real, 0 if not available,
    /// -1 if this side only received.
    pub sender_has_retransmits: i64,
    /// `"congestion_used"`: the TCP congestion control algorithm this side's streams used.
    pub congestion_used: Option<String>,
    /// `"streams"`.
    pub streams: Vec<StreamResults>,
    /// `"server_output_text"`: the server's human-readable output.
    pub server_output_text: Option<String>,
    /// `"server_output_json"`: the server's `-J` output.
    pub server_output_json: Option<Value>,
    /// `"zcnet_zerocopy"`: a zcnet peer's data-path account (its `-J` `end.zerocopy`), so each
    /// side can show the other's. iperf3's `get_results` ignores keys it does not know, and
    /// iperf3 never sends it.
    pub zerocopy: Option<Value>,
}

/// The results key of [`TestResults::zerocopy`].
pub const ZEROCOPY_KEY: &str = "zcnet_zerocopy";

/// One stream's results.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StreamResults {
    /// `"id"`: the stream id (1, 3, 4, …; see [`super::stream_id`]).
    pub id: i64,
    /// `"bytes"`: bytes sent (after the omitted period) or received.
    pub bytes: u64,
    /// `"retransmits"`: TCP retransmits of a sending stream; -1 when unknown.
    pub retransmits: i64,
    /// `"jitter"`: UDP jitter in seconds (receiver); 0 otherwise.
    pub jitter: f64,
    /// `"errors"`: UDP datagrams lost (receiver).
    pub errors: i64,
    /// `"omitted_errors"` (3.14+): of `errors`, those during the omitted period.
    pub omitted_errors: Option<i64>,
    /// `"packets"`: UDP datagrams sent, or the highest sequence number received.
    pub packets: i64,
    /// `"omitted_packets"` (3.14+): of `packets`, those during the omitted period.
    pub omitted_packets: Option<i64>,
    /// `"start_time"` (3.2+): seconds; iperf3 always sends 0.
    pub start_time: Option<f64>,
    /// `"end_time"` (3.2+): seconds the stream ran.
    pub end_time: Option<f64>,
}

impl TestResults {
    /// Reads a results message, requiring what iperf3's `get_results` requires.
    pub fn from_json(value: &Value) -> Result<TestResults, ProtoError> {
        let obj = json::object(value)?;
        let streams = obj
            .get("streams")
            .and_then(Value::as_array)
            .ok_or(ProtoError::MissingField("streams"))?;
        Ok(TestResults {
            cpu_util_total: json::req_f64(obj, "cpu_util_total")?,
            cpu_util_user: json::req_f64(obj, "cpu_util_user")?,
            cpu_util_system: json::req_f64(obj, "cpu_util_system")?,
            sender_has_retransmits: json::req_int(obj, "sender_has_retransmits")?,
            congestion_used: json::string(obj, "congestion_used"),
            streams: streams
                .iter()
                .map(StreamResults::from_json)
                .collect::<Result<_, _>>()?,
            server_output_text: json::string(obj, "server_output_text"),
            server_output_json: obj.get("server_output_json").cloned(),
            zerocopy: obj.get(ZEROCOPY_KEY).filter(|v| v.is_object()).cloned(),
        })
    }

    /// The message as iperf3 3.21's `send_results` writes it.
    pub fn to_json(&self) -> Value {
        let mut o = Map::new();
        o.insert("cpu_util_total".into(), f64_value(self.cpu_util_total));
        o.insert("cpu_util_user".into(), f64_value(self.cpu_util_user));
        o.insert("cpu_util_system".into(), f64_value(self.cpu_util_system));
        o.insert(
            "sender_has_retransmits".into(),
            self.sender_has_retransmits.into(),
        );
        if let Some(c) = &self.congestion_used {
            o.insert("congestion_used".into(), c.clone().into());
        }
        if let Some(j) = &self.server_output_json {
            o.insert("server_output_json".into(), j.clone());
        } else if let Some(t) = &self.server_output_text {
            o.insert("server_output_text".into(), t.clone().into());
        }
        if let Some(z) = &self.zerocopy {
            o.insert(ZEROCOPY_KEY.into(), z.clone());
        }
        let streams = self.streams.iter().map(StreamResults::to_json).collect();
        o.insert("streams".into(), Value::Array(streams));
        Value::Object(o)
    }

    /// The message as a frame for the control connection.
    pub fn to_frame(&self) -> Result<Vec<u8>, ProtoError> {
        encode_frame(&self.to_json(), MAX_RESULTS_LEN)
    }

    /// The stream with this id.
    pub fn stream(&self, id: i64) -> Option<&StreamResults> {
        self.streams.iter().find(|s| s.id == id)
    }
}

impl StreamResults {
    /// Reads one element of `"streams"`.
    pub fn from_json(value: &Value) -> Result<StreamResults, ProtoError> {
        let obj = json::object(value)?;
        let (omitted_errors, omitted_packets) = omitted_pair(obj)?;
        Ok(StreamResults {
            id: json::req_int(obj, "id")?,
            bytes: read_bytes(obj)?,
            retransmits: json::req_int(obj, "retransmits")?,
            jitter: json::req_f64(obj, "jitter")?,
            errors: json::req_int(obj, "errors")?,
            omitted_errors,
            packets: json::req_int(obj, "packets")?,
            omitted_packets,
            start_time: json::opt_f64(obj, "start_time")?,
            end_time: json::opt_f64(obj, "end_time")?,
        })
    }

    /// One element of `"streams"`, keys in iperf3's order.
    pub fn to_json(&self) -> Value {
        let mut o = Map::new();
        o.insert("id".into(), self.id.into());
        o.insert("bytes".into(), self.bytes.into());
        o.insert("retransmits".into(), self.retransmits.into());
        o.insert("jitter".into(), f64_value(self.jitter));
        o.insert("errors".into(), self.errors.into());
        if let Some(e) = self.omitted_errors {
            o.insert("omitted_errors".into(), e.into());
        }
        o.insert("packets".into(), self.packets.into());
        if let Some(p) = self.omitted_packets {
            o.insert("omitted_packets".into(), p.into());
        }
        if let Some(t) = self.start_time {
            o.insert("start_time".into(), f64_value(t));
        }
        if let Some(t) = self.end_time {
            o.insert("end_time".into(), f64_value(t));
        }
        Value::Object(o)
    }
}

/// `"bytes"`: a non-negative number, possibly beyond `i64`.
fn read_bytes(obj: &Object) -> Result<u64, ProtoError> {
    let v = obj.get("bytes").ok_or(ProtoError::MissingField("bytes"))?;
    if !v.is_number() {
        return Err(ProtoError::MissingField("bytes"));
    }
    json::uint(v).ok_or(ProtoError::InvalidField {
        key: "bytes",
        reason: "negative",
    })
}

/// `"omitted_errors"` and `"omitted_packets"`: both or neither, as `get_results` insists.
fn omitted_pair(obj: &Object) -> Result<(Option<i64>, Option<i64>), ProtoError> {
    let errors = json::opt_int(obj, "omitted_errors")?;
    let packets = json::opt_int(obj, "omitted_packets")?;
    if errors.is_some() != packets.is_some() {
        return Err(ProtoError::InvalidField {
            key: "omitted_errors",
            reason: "omitted_errors and omitted_packets must come together",
        });
    }
    Ok((errors, packets))
}

/// A double as cJSON prints it (`print_number`): an integral value as an integer, NaN and
/// infinities as `null`.
fn f64_value(f: f64) -> Value {
    if f.fract() == 0.0 && f.abs() < 1e15 {
        return Value::from(f as i64);
    }
    serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
}
