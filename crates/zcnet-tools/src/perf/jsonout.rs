//! `-J`: the document iperf3 writes (src/iperf_api.c: `iperf_json_start`, the `start`
//! section of `iperf_on_connect` / `iperf_on_test_start`, `iperf_print_intermediate`,
//! `iperf_print_results`, `iperf_json_finish`), with the same keys, so that tools that read
//! iperf3's JSON read this unchanged, plus `end.zerocopy`: what zcnet's data path did.

use std::net::SocketAddr;

use serde_json::{json, Map, Value};

use super::proto::{Protocol, TestParams};
use super::report::{rate, Interval, Layout, StreamMeta, TcpSample, Totals, UdpCounts};
use super::sysinfo;

/// What the `start` section says besides the streams.
#[derive(Debug, Clone)]
pub struct StartInfo {
    /// The test's cookie.
    pub cookie: String,
    /// The test's parameters.
    pub params: TestParams,
    /// Client: the server it connected to.
    pub connecting_to: Option<(String, u16)>,
    /// Server: the client's control connection.
    pub accepted: Option<SocketAddr>,
    /// When the test started, seconds since the epoch.
    pub timesecs: u64,
}

/// The `start` section (`layout`: the test's streams; `None` before they were made, as when a
/// test fails early: `connected` is then empty, the rest as always).
pub fn start(layout: Option<&Layout>, info: &StartInfo) -> Value {
    let connected: Vec<Value> = layout
        .map(|l| l.streams.iter().map(connected).collect())
        .unwrap_or_default();
    let p = &info.params;
    let mut o = Map::new();
    o.insert("connected".into(), connected.into());
    o.insert(
        "version".into(),
        format!("zcnet perf {} (iperf3 protocol)", env!("CARGO_PKG_VERSION")).into(),
    );
    o.insert("system_info".into(), sysinfo::system_info().into());
    o.insert(
        "timestamp".into(),
        json!({"time": sysinfo::http_date(info.timesecs), "timesecs": info.timesecs}),
    );
    if let Some((host, port)) = &info.connecting_to {
        o.insert("connecting_to".into(), json!({"host": host, "port": port}));
    }
    if let Some(a) = info.accepted {
        o.insert(
            "accepted_connection".into(),
            json!({"host": a.ip().to_string(), "port": a.port()}),
        );
    }
    o.insert("cookie".into(), info.cookie.clone().into());
    o.insert("target_bitrate".into(), p.bandwidth.into());
    o.insert("test_start".into(), test_start(p));
    Value::Object(o)
}

fn connected(s: &StreamMeta) -> Value {
    json!({
        "socket": s.socket,
        "local_host": s.local.ip().to_string(),
        "local_port": s.local.port(),
        "remote_host": s.remote.ip().to_string(),
        "remote_port": s.remote.port(),
    })
}

fn test_start(p: &TestParams) -> Value {
    let proto = match p.protocol {
        Protocol::Udp => "UDP",
        Protocol::Sctp => "SCTP",
        Protocol::Tcp => "TCP",
    };
    json!({
        "protocol": proto,
        "num_streams": p.parallel,
        "blksize": p.block_len(),
        "omit": p.omit,
        "duration": p.time,
        "bytes": p.num,
        "blocks": p.blockcount,
        "reverse": i32::from(p.reverse),
        "tos": p.tos,
        "target_bitrate": p.bandwidth,
        "bidir": i32::from(p.bidirectional),
    })
}

/// One element of `intervals`: per stream, then `sum` (and `sum_bidir_reverse`).
pub fn interval(layout: &Layout, iv: &Interval) -> Value {
    let mut streams = Vec::new();
    let mut o = Map::new();
    for sends in layout.groups() {
        let idx = layout.group(sends);
        let mut udp_sum = UdpCounts::default();
        let mut retransmits: Option<u64> = None;
        for &i in &idx {
            let mut v = period(iv.start, iv.end, iv.bytes[i], sends);
            v["socket"] = layout.streams[i].socket.into();
            if let Some(t) = iv.tcp.get(i).copied().flatten() {
                add_tcp(&mut v, &t);
                *retransmits.get_or_insert(0) += u64::from(t.retransmits);
            }
            v["omitted"] = iv.omitted.into();
            if let Some(u) = iv.udp.get(i) {
                add_udp(&mut v, u, sends);
                udp_sum.packets += u.packets;
                udp_sum.lost += u.lost;
                udp_sum.jitter += u.jitter / idx.len() as f64;
            }
            streams.push(v);
        }
        let total = idx.iter().map(|&i| iv.bytes[i]).sum();
        let mut sum = period(iv.start, iv.end, total, sends);
        if let Some(r) = retransmits {
            sum["retransmits"] = r.into();
        }
        sum["omitted"] = iv.omitted.into();
        if layout.udp {
            add_udp(&mut sum, &udp_sum, sends);
        }
        o.insert(sum_name("sum", layout.reverse_channel(sends)), sum);
    }
    o.insert("streams".into(), streams.into());
    Value::Object(o)
}

/// A sending TCP stream's interval keys, as iperf3 writes them from TCP_INFO: `retransmits`,
/// `snd_cwnd` and `snd_wnd` in bytes, `rtt` and `rttvar` in µs, `pmtu`, `reorder`.
fn add_tcp(v: &mut Value, t: &TcpSample) {
    v["retransmits"] = t.retransmits.into();
    v["snd_cwnd"] = t.info.snd_cwnd_bytes().into();
    v["snd_wnd"] = t.info.snd_wnd.unwrap_or(0).into();
    v["rtt"] = t.info.rtt_us.into();
    v["rttvar"] = t.info.rttvar_us.into();
    v["pmtu"] = t.info.pmtu.into();
    v["reorder"] = t.info.reord_seen.unwrap_or(0).into();
}

/// UDP keys: a sender's datagram count; a receiver's jitter, loss and count.
fn add_udp(v: &mut Value, u: &UdpCounts, sender: bool) {
    v["packets"] = u.packets.into();
    if !sender {
        v["jitter_ms"] = (u.jitter * 1000.0).into();
        v["lost_packets"] = u.lost.into();
        v["lost_percent"] = u.lost_percent().into();
    }
}

fn sum_name(base: &str, reverse: bool) -> String {
    if reverse {
        format!("{base}_bidir_reverse")
    } else {
        base.to_string()
    }
}

/// `start`, `end`, `seconds`, `bytes`, `bits_per_second`, `sender` of a period.
fn period(start: f64, end: f64, bytes: u64, sender: bool) -> Value {
    json!({
        "start": start,
        "end": end,
        "seconds": end - start,
        "bytes": bytes,
        "bits_per_second": rate(bytes, end - start) * 8.0,
        "sender": sender,
    })
}

/// The `end` section: per stream its sender and receiver view, `sum_sent`, `sum_received`
/// (and their `_bidir_reverse` twins), `cpu_utilization_percent`, and zcnet's `zerocopy`.
pub fn end(layout: &Layout, t: &Totals, zerocopy: Value) -> Value {
    let mut streams = Vec::new();
    let mut o = Map::new();
    if layout.udp {
        udp_end(layout, t, &mut streams, &mut o);
    }
    for sends in layout.groups().into_iter().filter(|_| !layout.udp) {
        let idx = layout.group(sends);
        let retr = t.has_retransmits(&idx);
        for &i in &idx {
            let s = &t.streams[i];
            let socket = layout.streams[i].socket;
            let mut snd = period(0.0, s.sender_secs, s.sent, sends);
            let mut rcv = period(0.0, s.receiver_secs, s.received, sends);
            snd["socket"] = socket.into();
            rcv["socket"] = socket.into();
            if retr {
                snd["retransmits"] = s.retransmits.unwrap_or(0).into();
            }
            if let Some(t) = &s.tcp {
                // iperf3's per-stream extremes from its TCP_INFO readings (µs, bytes).
                snd["max_snd_cwnd"] = t.max_snd_cwnd.into();
                snd["max_snd_wnd"] = t.max_snd_wnd.into();
                snd["max_rtt"] = t.max_rtt.into();
                snd["min_rtt"] = t.min_rtt.into();
                snd["mean_rtt"] = t.mean_rtt().into();
                snd["reorder"] = t.last.and_then(|i| i.reord_seen).unwrap_or(0).into();
            }
            streams.push(json!({"sender": snd, "receiver": rcv}));
        }
        let sum = t.sum(&idx);
        let mut snd = period(0.0, sum.sender_secs, sum.sent, sends);
        if retr {
            snd["retransmits"] = sum.retransmits.unwrap_or(0).into();
        }
        let rcv = period(0.0, sum.receiver_secs, sum.received, sends);
        let reverse = layout.reverse_channel(sends);
        o.insert(sum_name("sum_sent", reverse), snd);
        o.insert(sum_name("sum_received", reverse), rcv);
    }
    o.insert("streams".into(), streams.into());
    o.insert(
        "cpu_utilization_percent".into(),
        json!({
            "host_total": t.cpu.total,
            "host_user": t.cpu.user,
            "host_system": t.cpu.system,
            "remote_total": t.remote_cpu.total,
            "remote_user": t.remote_cpu.user,
            "remote_system": t.remote_cpu.system,
        }),
    );
    o.insert("zerocopy".into(), zerocopy);
    Value::Object(o)
}

/// UDP's `end`: one `udp` object per stream (iperf3 gives sender and receiver numbers in
/// one), `sum`, `sum_sent` and `sum_received` with datagram counts, loss and jitter.
fn udp_end(layout: &Layout, t: &Totals, streams: &mut Vec<Value>, o: &mut Map<String, Value>) {
    for sends in layout.groups() {
        let idx = layout.group(sends);
        for &i in &idx {
            let s = &t.streams[i];
            let mut v = period(0.0, s.sender_secs, s.sent, sends);
            v["socket"] = layout.streams[i].socket.into();
            let mut u = s.received_udp;
            u.packets = if s.packets_sent > 0 {
                s.packets_sent
            } else {
                u.packets
            };
            add_udp(&mut v, &u, false);
            v["out_of_order"] = 0.into();
            streams.push(json!({ "udp": v }));
        }
        let sum = t.sum(&idx);
        let reverse = layout.reverse_channel(sends);
        let mut all = period(0.0, sum.receiver_secs, sum.sent, sends);
        add_udp(&mut all, &sum.received_udp, false);
        o.insert(sum_name("sum", reverse), all);
        let mut snd = period(0.0, sum.sender_secs, sum.sent, true);
        add_udp(
            &mut snd,
            &UdpCounts {
                packets: sum.packets_sent,
                ..UdpCounts::default()
            },
            false,
        );
        let mut rcv = period(0.0, sum.receiver_secs, sum.received, false);
        add_udp(&mut rcv, &sum.received_udp, false);
        o.insert(sum_name("sum_sent", reverse), snd);
        o.insert(sum_name("sum_received", reverse), rcv);
    }
}

/// The whole document; `error` as iperf3 writes it (`"error": "..."` at the top level).
pub fn document(start: Value, intervals: Vec<Value>, end: Value, error: Option<&str>) -> Value {
    let mut o = Map::new();
    o.insert("start".into(), start);
    o.insert("intervals".into(), intervals.into());
    o.insert("end".into(), end);
    if let Some(e) = error {
        o.insert("error".into(), e.into());
    }
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::super::report::StreamTotals;
    use super::*;

    fn layout(bidir: bool) -> Layout {
        let a: SocketAddr = "127.0.0.1:5201".parse().unwrap();
        let meta = |socket, sends| StreamMeta {
            id: 1,
            socket,
            sends,
            local: a,
            remote: a,
        };
        let mut streams = vec![meta(5, true)];
        if bidir {
            streams.push(meta(6, false));
        }
        Layout {
            server: false,
            bidir,
            parallel: 1,
            udp: false,
            streams,
        }
    }

    #[zcnet_testkit::test]
    fn end_has_iperf3s_keys() {
        let l = layout(false);
        let t = Totals {
            streams: vec![StreamTotals {
                sent: 100,
                received: 100,
                sender_secs: 1.0,
                receiver_secs: 1.0,
                retransmits: None,
                ..StreamTotals::default()
            }],
            ..Totals::default()
        };
        let e = end(&l, &t, json!({}));
        assert_eq!(e["sum_sent"]["bytes"], 100);
        assert_eq!(e["sum_received"]["bits_per_second"], 800.0);
        assert_eq!(e["streams"][0]["sender"]["socket"], 5);
        assert_eq!(e["cpu_utilization_percent"]["host_total"], 0.0);
        assert!(e["sum_sent"].get("retransmits").is_none());
    }

    #[zcnet_testkit::test]
    fn bidir_names_the_reverse_channel() {
        let l = layout(true);
        let t = Totals {
            streams: vec![StreamTotals::default(), StreamTotals::default()],
            ..Totals::default()
        };
        let e = end(&l, &t, json!({}));
        for k in [
            "sum_sent",
            "sum_received",
            "sum_sent_bidir_reverse",
            "sum_received_bidir_reverse",
        ] {
            assert!(e.get(k).is_some(), "{k}");
        }
        let iv = Interval {
            start: 0.0,
            end: 1.0,
            bytes: vec![1, 2],
            udp: vec![],
            tcp: Vec::new(),
            omitted: false,
        };
        let v = interval(&l, &iv);
        assert_eq!(v["sum"]["bytes"], 1);
        assert_eq!(v["sum_bidir_reverse"]["bytes"], 2);
        assert_eq!(v["streams"].as_array().unwrap().len(), 2);
    }
}
