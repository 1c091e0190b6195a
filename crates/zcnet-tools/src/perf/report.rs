//! What a test reports, and the text iperf3 prints for it.
//!
//! Formats from iperf3 src/iperf_locale.c (`report_bw_format`, `report_sum_bw_format`,
//! `report_bw_retrans_format`, `report_cpu`, the headers), in the order of src/iperf_api.c
//! `iperf_print_intermediate` and `iperf_print_results`: streams grouped by direction — a
//! client prints its sending streams first, a server its receiving ones — each group followed
//! by a `[SUM]` line when there are several streams per direction. `--bidir` tags each line
//! with the stream's role (`[TX-C]`, `[RX-S]`, …).
//!
//! One difference: iperf3's server prints its summary before it has the client's results, so
//! it says "(sender statistics not available)"; zcnet's server prints it after the exchange
//! and shows both sides.

use std::fmt::Write as _;
use std::net::SocketAddr;

use super::sysinfo::CpuUtil;
use super::units;
use zcnet_core::tcp_info::{TcpInfo, TcpInfoSeries};

/// `report_bw_separator`.
pub const SEPARATOR: &str = "- - - - - - - - - - - - - - - - - - - - - - - - -";

/// One data stream as reports name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamMeta {
    /// iperf3's stream id.
    pub id: i64,
    /// The socket's descriptor (iperf3 prints it as the stream's number).
    pub socket: i32,
    /// Whether this side sends on it.
    pub sends: bool,
    /// Local address.
    pub local: SocketAddr,
    /// Peer address.
    pub remote: SocketAddr,
}

/// The shape of a test, as reports need it.
#[derive(Debug, Clone)]
pub struct Layout {
    /// This side is the server.
    pub server: bool,
    /// `--bidir`.
    pub bidir: bool,
    /// Streams per direction (`-P`).
    pub parallel: u32,
    /// A UDP test (datagram counts, loss and jitter in the reports).
    pub udp: bool,
    /// The streams, in connection order.
    pub streams: Vec<StreamMeta>,
}

impl Layout {
    /// The directions in print order (iperf3's `current_mode` loop): `true` for the streams
    /// this side sends on.
    pub fn groups(&self) -> Vec<bool> {
        match (self.bidir, self.server) {
            (true, false) => vec![true, false],
            (true, true) => vec![false, true],
            (false, _) => vec![self.streams.first().is_none_or(|s| s.sends)],
        }
    }

    /// Indices of the streams of one direction, in connection order.
    pub fn group(&self, sends: bool) -> Vec<usize> {
        (0..self.streams.len())
            .filter(|&i| self.streams[i].sends == sends)
            .collect()
    }

    /// The role tag of a line: `[TX-C]` etc. with `--bidir`, else empty.
    pub fn tag(&self, sends: bool) -> String {
        if !self.bidir {
            return String::new();
        }
        let dir = if sends { "TX" } else { "RX" };
        let side = if self.server { "S" } else { "C" };
        format!("[{dir}-{side}]")
    }

    /// The JSON name suffix of a direction: `--bidir` names the server-to-client sums
    /// `*_bidir_reverse` on both sides.
    pub fn reverse_channel(&self, sends: bool) -> bool {
        self.bidir && (self.server == sends)
    }

    /// Whether iperf3 prints `[SUM]` lines (more than one stream per direction).
    pub fn sums(&self) -> bool {
        self.parallel > 1
    }

    fn header(&self, retransmits: bool) -> &'static str {
        if self.udp {
            return self.udp_header(None);
        }
        match (retransmits, self.bidir) {
            (false, false) => "[ ID] Interval           Transfer     Bitrate",
            (false, true) => "[ ID][Role] Interval           Transfer     Bitrate",
            (true, false) => "[ ID] Interval           Transfer     Bitrate         Retr",
            (true, true) => "[ ID][Role] Interval           Transfer     Bitrate         Retr",
        }
    }
}

impl Layout {
    /// The interval header of a side that reads its sending streams' TCP_INFO
    /// (`report_bw_retrans_cwnd_header`), else [`Layout::header`] without retransmits.
    fn interval_header(&self, tcp_info: bool) -> &'static str {
        match (tcp_info && !self.udp, self.bidir) {
            (true, false) => "[ ID] Interval           Transfer     Bitrate         Retr  Cwnd",
            (true, true) => {
                "[ ID][Role] Interval           Transfer     Bitrate         Retr  Cwnd"
            }
            _ => self.header(false),
        }
    }

    /// UDP headers: a sender-only side prints "Total Datagrams" (`sends` = `Some(true)`), a
    /// receiver or a summary "Jitter    Lost/Total Datagrams".
    fn udp_header(&self, sends: Option<bool>) -> &'static str {
        match (self.bidir, sends) {
            (true, _) => "[ ID][Role] Interval           Transfer     Bitrate         Jitter    Lost/Total Datagrams",
            (false, Some(true)) => "[ ID] Interval           Transfer     Bitrate         Total Datagrams",
            (false, _) => "[ ID] Interval           Transfer     Bitrate         Jitter    Lost/Total Datagrams",
        }
    }

    /// `zbuf` of iperf3's UDP sender lines: ten spaces with `--bidir`.
    fn zbuf(&self) -> &'static str {
        if self.bidir {
            "          "
        } else {
            ""
        }
    }
}

/// One UDP stream's numbers in an interval or a test.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct UdpCounts {
    /// Datagrams (sent, or received by sequence number).
    pub packets: u64,
    /// Datagrams lost.
    pub lost: i64,
    /// Jitter, seconds.
    pub jitter: f64,
}

impl UdpCounts {
    /// Lost as a percentage of all (0 when none).
    pub fn lost_percent(&self) -> f64 {
        if self.packets > 0 {
            100.0 * self.lost as f64 / self.packets as f64
        } else {
            0.0
        }
    }
}

/// C's `%.2g`, which iperf3 uses for loss percentages.
pub fn g2(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return if x.is_finite() {
            "0".into()
        } else {
            format!("{x}")
        };
    }
    let exp = x.abs().log10().floor() as i32;
    // Rounding to two significant digits may carry into the next power of ten.
    let rounded = format!("{:.1e}", x);
    let (mant, e) = rounded.split_once('e').unwrap_or((&rounded, "0"));
    let e: i32 = e.parse().unwrap_or(exp);
    if !(-4..2).contains(&e) {
        let mant = mant.trim_end_matches('0').trim_end_matches('.');
        return format!("{mant}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    }
    let decimals = (1 - e).max(0) as usize;
    let fixed = format!("{x:.decimals$}");
    if fixed.contains('.') {
        fixed
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    } else {
        fixed
    }
}

/// `report_bw_udp_sender_format` / `report_sum_bw_udp_sender_format`.
fn udp_sender_line(
    l: &Layout,
    sock: Option<i32>,
    tag: &str,
    (start, end): (f64, f64),
    bytes: u64,
    packets: u64,
    tail: &str,
) -> String {
    format!(
        "{}{tag} {start:6.2}-{end:<6.2} sec  {}s  {}s/sec {} {packets}  {tail}",
        id_col(sock),
        units::bytes(bytes as f64),
        units::bits(rate(bytes, end - start)),
        l.zbuf()
    )
}

/// `report_bw_udp_format` / `report_sum_bw_udp_format`.
fn udp_line(
    sock: Option<i32>,
    tag: &str,
    start: f64,
    end: f64,
    bytes: u64,
    u: &UdpCounts,
    tail: &str,
) -> String {
    format!(
        "{}{tag} {start:6.2}-{end:<6.2} sec  {}s  {}s/sec  {:5.3} ms  {}/{} ({}%)  {tail}",
        id_col(sock),
        units::bytes(bytes as f64),
        units::bits(rate(bytes, end - start)),
        u.jitter * 1000.0,
        u.lost,
        u.packets,
        g2(u.lost_percent())
    )
}

/// Bytes each stream moved in one interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Interval {
    /// Seconds since the start (of the test, or of the measured part after `-O`).
    pub start: f64,
    /// Seconds since the start.
    pub end: f64,
    /// Bytes per stream, in [`Layout::streams`] order.
    pub bytes: Vec<u64>,
    /// UDP: datagrams, loss and jitter per stream (empty for TCP).
    pub udp: Vec<UdpCounts>,
    /// TCP: each sending stream's TCP_INFO at the interval's end (empty, or `None` for a
    /// stream, when not read: receivers, UDP, a socket that refused).
    pub tcp: Vec<Option<TcpSample>>,
    /// Inside the `-O` period.
    pub omitted: bool,
}

/// A sending TCP stream's TCP_INFO at the end of an interval, as iperf3 reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpSample {
    /// Segments retransmitted during the interval.
    pub retransmits: u32,
    /// The reading.
    pub info: TcpInfo,
}

impl Interval {
    /// Its length in seconds.
    pub fn seconds(&self) -> f64 {
        self.end - self.start
    }

    /// Bytes per second of `bytes` over the interval.
    pub fn rate(&self, bytes: u64) -> f64 {
        rate(bytes, self.seconds())
    }
}

/// Bytes per second; 0 for an empty period.
pub fn rate(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 / seconds
    } else {
        0.0
    }
}

/// A stream's final numbers, both sides'.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamTotals {
    /// Bytes the sending side sent.
    pub sent: u64,
    /// Bytes the receiving side received.
    pub received: u64,
    /// Seconds the sending side ran.
    pub sender_secs: f64,
    /// Seconds the receiving side ran.
    pub receiver_secs: f64,
    /// TCP retransmits, when the sending side reported them.
    pub retransmits: Option<i64>,
    /// TCP: this side's TCP_INFO readings of a stream it sent on (`None` otherwise).
    pub tcp: Option<TcpInfoSeries>,
    /// UDP: datagrams the sender sent.
    pub packets_sent: u64,
    /// UDP: the receiver's count, loss and jitter.
    pub received_udp: UdpCounts,
}

/// The test's final numbers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    /// Per stream, in [`Layout::streams`] order.
    pub streams: Vec<StreamTotals>,
    /// This side's CPU use.
    pub cpu: CpuUtil,
    /// The peer's CPU use (from its results).
    pub remote_cpu: CpuUtil,
}

impl Totals {
    /// Sums over a group of streams: (sent, received, sender secs, receiver secs, retransmits).
    pub fn sum(&self, idx: &[usize]) -> StreamTotals {
        let mut t = StreamTotals::default();
        for s in idx.iter().filter_map(|&i| self.streams.get(i)) {
            t.sent += s.sent;
            t.received += s.received;
            t.sender_secs = t.sender_secs.max(s.sender_secs);
            t.receiver_secs = t.receiver_secs.max(s.receiver_secs);
            if let Some(r) = s.retransmits {
                t.retransmits = Some(t.retransmits.unwrap_or(0) + r);
            }
            t.packets_sent += s.packets_sent;
            t.received_udp.packets += s.received_udp.packets;
            t.received_udp.lost += s.received_udp.lost;
            t.received_udp.jitter += s.received_udp.jitter / idx.len() as f64;
        }
        t
    }

    /// Whether the sending side of a group reported retransmits.
    pub fn has_retransmits(&self, idx: &[usize]) -> bool {
        idx.iter()
            .filter_map(|&i| self.streams.get(i))
            .any(|s| s.retransmits.is_some())
    }
}

/// `[  5]` or `[SUM]`.
fn id_col(socket: Option<i32>) -> String {
    socket.map_or("[SUM]".to_string(), |s| format!("[{s:3}]"))
}

/// `report_bw_format` / `report_sum_bw_format`.
fn bw_line(socket: Option<i32>, tag: &str, start: f64, end: f64, bytes: u64, tail: &str) -> String {
    format!(
        "{}{tag} {start:6.2}-{end:<6.2} sec  {}s  {}s/sec                  {tail}",
        id_col(socket),
        units::bytes(bytes as f64),
        units::bits(rate(bytes, end - start)),
    )
}

/// `report_bw_retrans_cwnd_format`: an interval line of a sending stream with its TCP_INFO.
fn cwnd_line(
    socket: i32,
    tag: &str,
    (start, end): (f64, f64),
    bytes: u64,
    t: TcpSample,
    tail: &str,
) -> String {
    format!(
        "{}{tag} {start:6.2}-{end:<6.2} sec  {}s  {}s/sec  {:3}   {}s       {tail}",
        id_col(Some(socket)),
        units::bytes(bytes as f64),
        units::bits(rate(bytes, end - start)),
        t.retransmits,
        units::bytes(t.info.snd_cwnd_bytes() as f64),
    )
}

/// `report_sum_bw_retrans_format` over an interval.
fn sum_retrans_line(
    tag: &str,
    (start, end): (f64, f64),
    bytes: u64,
    retr: u32,
    tail: &str,
) -> String {
    format!(
        "{}{tag} {start:6.2}-{end:<6.2} sec  {}s  {}s/sec  {retr:3}             {tail}",
        id_col(None),
        units::bytes(bytes as f64),
        units::bits(rate(bytes, end - start)),
    )
}

/// `report_bw_retrans_format` / `report_sum_bw_retrans_format` (as iperf 3.12 prints them:
/// 13 spaces before the role; 3.21 has 12 on stream lines). The period starts at 0.
fn retrans_line(
    socket: Option<i32>,
    tag: &str,
    end: f64,
    bytes: u64,
    retr: i64,
    tail: &str,
) -> String {
    format!(
        "{}{tag} {:6.2}-{end:<6.2} sec  {}s  {}s/sec  {retr:3}             {tail}",
        id_col(socket),
        0.0,
        units::bytes(bytes as f64),
        units::bits(rate(bytes, end)),
    )
}

/// The lines of one interval report.
pub fn interval_text(layout: &Layout, iv: &Interval, first: bool) -> String {
    if layout.udp {
        return udp_interval_text(layout, iv, first);
    }
    let mut out = String::new();
    let omitted = if iv.omitted { "(omitted)" } else { "" };
    let sample = |i: usize| iv.tcp.get(i).copied().flatten();
    let tcp_info = (0..layout.streams.len()).any(|i| sample(i).is_some());
    for sends in layout.groups() {
        let tag = layout.tag(sends);
        let idx = layout.group(sends);
        for &i in &idx {
            if i == 0 {
                if first {
                    let _ = writeln!(out, "{}", layout.interval_header(tcp_info));
                } else if layout.sums() {
                    let _ = writeln!(out, "{SEPARATOR}");
                }
            }
            let s = &layout.streams[i];
            let (start, end, bytes) = (iv.start, iv.end, iv.bytes[i]);
            let line = match sample(i) {
                Some(t) => cwnd_line(s.socket, &tag, (start, end), bytes, t, omitted),
                None => bw_line(Some(s.socket), &tag, start, end, bytes, omitted),
            };
            let _ = writeln!(out, "{line}");
        }
        if layout.sums() {
            let total = idx.iter().map(|&i| iv.bytes[i]).sum();
            let line = if idx.iter().any(|&i| sample(i).is_some()) {
                let retr: u32 = idx
                    .iter()
                    .filter_map(|&i| sample(i))
                    .map(|t| t.retransmits)
                    .sum();
                sum_retrans_line(&tag, (iv.start, iv.end), total, retr, omitted)
            } else {
                bw_line(None, &tag, iv.start, iv.end, total, omitted)
            };
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

fn udp_interval_text(layout: &Layout, iv: &Interval, first: bool) -> String {
    let mut out = String::new();
    let omitted = if iv.omitted { "(omitted)" } else { "" };
    let groups = layout.groups();
    let only = (!layout.bidir).then(|| groups[0]);
    for sends in groups {
        let tag = layout.tag(sends);
        let idx = layout.group(sends);
        for &i in &idx {
            if i == 0 {
                if first {
                    let _ = writeln!(out, "{}", layout.udp_header(only));
                } else if layout.sums() {
                    let _ = writeln!(out, "{SEPARATOR}");
                }
            }
            let sock = Some(layout.streams[i].socket);
            let u = iv.udp.get(i).copied().unwrap_or_default();
            let line = if sends {
                udp_sender_line(
                    layout,
                    sock,
                    &tag,
                    (iv.start, iv.end),
                    iv.bytes[i],
                    u.packets,
                    omitted,
                )
            } else {
                udp_line(sock, &tag, iv.start, iv.end, iv.bytes[i], &u, omitted)
            };
            let _ = writeln!(out, "{line}");
        }
        if layout.sums() {
            let bytes = idx.iter().map(|&i| iv.bytes[i]).sum();
            let mut sum = UdpCounts::default();
            for &i in &idx {
                let u = iv.udp.get(i).copied().unwrap_or_default();
                sum.packets += u.packets;
                sum.lost += u.lost;
                sum.jitter += u.jitter / idx.len() as f64;
            }
            let line = if sends {
                udp_sender_line(
                    layout,
                    None,
                    &tag,
                    (iv.start, iv.end),
                    bytes,
                    sum.packets,
                    omitted,
                )
            } else {
                udp_line(None, &tag, iv.start, iv.end, bytes, &sum, omitted)
            };
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

/// The summary: per stream a sender and a receiver line, `[SUM]` lines, and with `verbose` the
/// CPU line.
pub fn summary_text(layout: &Layout, t: &Totals, verbose: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{SEPARATOR}");
    if verbose {
        let _ = writeln!(out, "Test Complete. Summary Results:");
    }
    let all: Vec<usize> = (0..layout.streams.len()).collect();
    let _ = writeln!(out, "{}", layout.header(t.has_retransmits(&all)));
    for sends in layout.groups() {
        let tag = layout.tag(sends);
        let idx = layout.group(sends);
        let retr = t.has_retransmits(&idx);
        for &i in &idx {
            let s = &t.streams[i];
            let sock = Some(layout.streams[i].socket);
            summary_pair(&mut out, sock, &tag, s, retr, layout.udp);
        }
        if layout.sums() {
            summary_pair(&mut out, None, &tag, &t.sum(&idx), retr, layout.udp);
        }
    }
    if verbose {
        for line in cpu_lines(layout, t) {
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

fn summary_pair(
    out: &mut String,
    sock: Option<i32>,
    tag: &str,
    s: &StreamTotals,
    retr: bool,
    udp: bool,
) {
    if udp {
        let sent = UdpCounts {
            packets: s.packets_sent,
            ..UdpCounts::default()
        };
        let sender = udp_line(sock, tag, 0.0, s.sender_secs, s.sent, &sent, "sender");
        let receiver = udp_line(
            sock,
            tag,
            0.0,
            s.receiver_secs,
            s.received,
            &s.received_udp,
            "receiver",
        );
        let _ = writeln!(out, "{sender}\n{receiver}");
        return;
    }
    let sender = match (retr, s.retransmits) {
        (true, r) => retrans_line(sock, tag, s.sender_secs, s.sent, r.unwrap_or(0), "sender"),
        (false, _) => bw_line(sock, tag, 0.0, s.sender_secs, s.sent, "sender"),
    };
    let receiver = bw_line(sock, tag, 0.0, s.receiver_secs, s.received, "receiver");
    let _ = writeln!(out, "{sender}\n{receiver}");
}

/// `report_cpu`: "CPU Utilization: local/sender 49.2% (0.7%u/48.6%s), remote/receiver …";
/// two lines with `--bidir`, one per direction.
pub fn cpu_lines(layout: &Layout, t: &Totals) -> Vec<String> {
    let role = |sends: bool| if sends { "sender" } else { "receiver" };
    let line = |sends: bool| {
        format!(
            "CPU Utilization: local/{} {:.1}% ({:.1}%u/{:.1}%s), remote/{} {:.1}% ({:.1}%u/{:.1}%s)",
            role(sends),
            t.cpu.total,
            t.cpu.user,
            t.cpu.system,
            role(!sends),
            t.remote_cpu.total,
            t.remote_cpu.user,
            t.remote_cpu.system
        )
    };
    if layout.bidir {
        vec![line(true), line(false)]
    } else {
        vec![line(layout.groups()[0])]
    }
}

/// `report_connected`: `[  5] local 127.0.0.1 port 47970 connected to 127.0.0.1 port 5201`.
pub fn connected_line(s: &StreamMeta) -> String {
    format!(
        "[{:3}] local {} port {} connected to {} port {}",
        s.socket,
        s.local.ip(),
        s.local.port(),
        s.remote.ip(),
        s.remote.port()
    )
}

/// `test_start_time` / `test_start_bytes` / `test_start_blocks`: the verbose "Starting Test"
/// line.
pub fn starting_line(p: &super::proto::TestParams) -> String {
    let proto = match p.protocol {
        super::proto::Protocol::Udp => "UDP",
        super::proto::Protocol::Sctp => "SCTP",
        super::proto::Protocol::Tcp => "TCP",
    };
    let head = format!(
        "Starting Test: protocol: {proto}, {} streams, {} byte blocks, omitting {} seconds",
        p.parallel,
        p.block_len(),
        p.omit
    );
    let what = if p.num != 0 {
        format!("{} bytes to send", p.num)
    } else if p.blockcount != 0 {
        format!("{} blocks to send", p.blockcount)
    } else {
        format!("{} second test", p.time)
    };
    format!("{head}, {what}, tos {}", p.tos)
}

#[cfg(test)]
mod tests;
