//! What this side's data path did, summed over its streams: the mechanism, bytes the kernel
//! confirmed as zero-copy and as copied, notifications, and every fallback with its reason.
//! Nothing here is assumed: the numbers are the library's ([`zcnet::TxStats`],
//! [`zcnet::RxStats`]), which are the kernel's own reports.

use serde_json::{json, Value};
use zcnet::Voice;

use super::streams::{PathReport, RxReport, TxReport, UdpRxReport};

/// The sending streams' account.
#[derive(Debug, Clone, Default)]
pub struct TxSide {
    /// `--tx`.
    pub requested: String,
    /// Streams.
    pub streams: usize,
    /// Bytes the kernel accepted.
    pub bytes: u64,
    /// Bytes the kernel confirmed it sent without copying.
    pub zerocopy_bytes: u64,
    /// Bytes the kernel copied.
    pub copied_bytes: u64,
    /// Bytes accepted whose notification had not come when the stream ended.
    pub unconfirmed_bytes: u64,
    /// Zero-copy notifications.
    pub notifications: u64,
    /// Of those, notifications that said COPIED.
    pub copied_notifications: u64,
    /// `auto`'s switches and memory fallbacks, one line each.
    pub fallbacks: Vec<String>,
    /// The `TCP_NOTSENT_LOWAT` zcnet set on the streams (`None`: left alone).
    pub notsent_lowat: Option<u32>,
}

/// The receiving streams' account.
#[derive(Debug, Clone, Default)]
pub struct RxSide {
    /// `--rx`.
    pub requested: String,
    /// The mechanism used (`auto`'s choice).
    pub mechanism: String,
    /// Streams.
    pub streams: usize,
    /// Bytes delivered.
    pub bytes: u64,
    /// Bytes the NIC wrote into registered memory.
    pub zerocopy_bytes: u64,
    /// Bytes the kernel copied.
    pub copied_bytes: u64,
    /// Times receiving paused for want of a buffer.
    pub starved: u64,
    /// Mechanisms refused, with the kernel's reason.
    pub fallbacks: Vec<String>,
    /// The `SO_RCVLOWAT` zcnet set on the streams until they drained (`None`: left alone).
    pub rcvlowat: Option<u32>,
}

/// Both directions of this side.
#[derive(Debug, Clone, Default)]
pub struct PathSummary {
    /// Sending streams, if any.
    pub tx: Option<TxSide>,
    /// Receiving streams, if any.
    pub rx: Option<RxSide>,
}

impl PathSummary {
    /// Sums the reports of this side's streams (`(stream id, report)`), their fallbacks in
    /// `voice`'s words.
    pub fn from_reports<'a>(
        reports: impl IntoIterator<Item = (i64, &'a PathReport)>,
        voice: &dyn Voice,
    ) -> Self {
        let mut s = PathSummary::default();
        for (id, r) in reports {
            match r {
                PathReport::Tx(t) => add_tx(s.tx.get_or_insert_with(TxSide::default), id, t, voice),
                PathReport::Rx(r) => add_rx(s.rx.get_or_insert_with(RxSide::default), r, voice),
                PathReport::UdpRx(u) => add_udp_rx(s.rx.get_or_insert_with(RxSide::default), u),
            }
        }
        s
    }

    /// `end.zerocopy` of `-J`.
    pub fn to_json(&self) -> Value {
        let tx = self.tx.as_ref().map(|t| {
            json!({
                "requested": t.requested,
                "streams": t.streams,
                "bytes": t.bytes,
                "zerocopy_bytes": t.zerocopy_bytes,
                "copied_bytes": t.copied_bytes,
                "unconfirmed_bytes": t.unconfirmed_bytes,
                "notifications": t.notifications,
                "copied_notifications": t.copied_notifications,
                "fallbacks": t.fallbacks,
                "notsent_lowat": t.notsent_lowat,
            })
        });
        let rx = self.rx.as_ref().map(|r| {
            json!({
                "requested": r.requested,
                "mechanism": r.mechanism,
                "streams": r.streams,
                "bytes": r.bytes,
                "zerocopy_bytes": r.zerocopy_bytes,
                "copied_bytes": r.copied_bytes,
                "starved": r.starved,
                "fallbacks": r.fallbacks,
                "rcvlowat": r.rcvlowat,
            })
        });
        json!({"tx": tx, "rx": rx})
    }

    /// `end.zerocopy` with the peer's own account under `remote`, when the peer is zcnet
    /// (it sends it with its results; iperf3 does not).
    pub fn to_json_with_peer(&self, peer: Option<&Value>) -> Value {
        let mut v = self.to_json();
        if let Some(p) = peer {
            v["remote"] = p.clone();
        }
        v
    }

    /// The text lines printed after the summary (fallbacks are never silent).
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(t) = &self.tx {
            out.push(format!(
                "zcnet tx {}: {} B sent on {} stream(s): {} B zero-copy, {} B copied, {} B unconfirmed ({} notifications, {} said COPIED)",
                t.requested,
                t.bytes,
                t.streams,
                t.zerocopy_bytes,
                t.copied_bytes,
                t.unconfirmed_bytes,
                t.notifications,
                t.copied_notifications
            ) + &lowat_note("TCP_NOTSENT_LOWAT", t.notsent_lowat));
            out.extend(
                t.fallbacks
                    .iter()
                    .map(|f| format!("zcnet tx {}: {f}", t.requested)),
            );
        }
        if let Some(r) = &self.rx {
            out.push(format!(
                "zcnet rx {} (using {}): {} B received on {} stream(s): {} B zero-copy, {} B copied, starved {}x",
                r.requested, r.mechanism, r.bytes, r.streams, r.zerocopy_bytes, r.copied_bytes, r.starved
            ) + &lowat_note("SO_RCVLOWAT", r.rcvlowat));
            out.extend(
                r.fallbacks
                    .iter()
                    .map(|f| format!("zcnet rx {}: {f}", r.requested)),
            );
        }
        out
    }
}

/// `", OPTION N B"` when zcnet set the option, else nothing.
fn lowat_note(option: &str, v: Option<u32>) -> String {
    v.map(|n| format!(", {option} {n} B")).unwrap_or_default()
}

fn add_tx(t: &mut TxSide, id: i64, r: &TxReport, voice: &dyn Voice) {
    let s = &r.stats;
    t.requested = r.mode.name().to_string();
    t.streams += 1;
    t.bytes += s.bytes;
    t.zerocopy_bytes += s.zerocopy_bytes;
    t.copied_bytes += s.copied_bytes;
    t.unconfirmed_bytes += s.unconfirmed_bytes();
    t.notifications += s.notifications;
    t.copied_notifications += s.copied_notifications;
    t.fallbacks.extend(
        s.switches
            .iter()
            .map(|sw| format!("stream {id}: {}", sw.render(voice))),
    );
    if let Some(n) = &r.note {
        t.fallbacks.push(format!("stream {id}: memory: {n}"));
    }
    t.notsent_lowat = t.notsent_lowat.or(r.notsent_lowat);
}

fn add_rx(t: &mut RxSide, r: &RxReport, voice: &dyn Voice) {
    let s = &r.stats;
    t.requested = r.requested.name().to_string();
    t.mechanism = r.mode.name().to_string();
    t.streams += 1;
    t.bytes += s.bytes;
    t.zerocopy_bytes += s.zerocopy_bytes;
    t.copied_bytes += s.copied_bytes;
    t.starved += s.starved;
    t.rcvlowat = t.rcvlowat.or(r.rcvlowat);
    for f in &r.fallbacks {
        let line = f.render(voice);
        if !t.fallbacks.contains(&line) {
            t.fallbacks.push(line);
        }
    }
}

fn add_udp_rx(t: &mut RxSide, u: &UdpRxReport) {
    t.requested = u.requested.name().to_string();
    t.mechanism = "recv".to_string();
    t.streams += 1;
    t.bytes += u.bytes;
    t.copied_bytes += u.bytes;
    let why = "UDP streams are received with recv(): zcnet's receivers (uring, zcrx, devmem) take TCP streams".to_string();
    if !t.fallbacks.contains(&why) {
        t.fallbacks.push(why);
    }
}
