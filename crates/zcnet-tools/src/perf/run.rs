//! One running test, seen from one side: its stream threads, its clock, the interval reports,
//! and the results it sends and prints. The client and the server each drive one through the
//! protocol's actions.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::jsonout;
use super::proto::Protocol;
use super::proto::{StreamResults, TestParams, TestResults};
use super::report::{self, Interval, Layout, StreamTotals, TcpSample, Totals, UdpCounts};
use super::streams::{
    drain_receivers, stop_senders, Budget, DataStream, Notifier, PathConfig, Running, StreamEnd,
    TestShared,
};
use super::sysinfo::{CpuClock, CpuUtil};
use super::zerocopy::PathSummary;
use zcnet_core::tcp_info::TcpInfoSeries;

/// How reports are written.
#[derive(Debug, Clone, Copy)]
pub struct ReportStyle {
    /// `-J`: collect a document instead of printing lines.
    pub json: bool,
    /// `-V`.
    pub verbose: bool,
    /// `-i`.
    pub interval: Option<Duration>,
}

/// A test that is running or has run.
#[derive(Debug)]
pub struct TestRun {
    layout: Layout,
    style: ReportStyle,
    shared: Arc<TestShared>,
    running: Vec<Running>,
    sends: Vec<bool>,
    started: Instant,
    /// `-O` ends here; results count from here.
    measure_from: Instant,
    omitting: bool,
    has_omit: bool,
    omit_base: Vec<u64>,
    /// When the test ended on this side (its senders stopped or its receivers drained first):
    /// every stream's time ends here.
    ended_at: Option<Instant>,
    /// UDP datagrams and losses per stream at the end of `-O` (iperf3's `omitted_packet_count`
    /// and `omitted_cnt_error`): left out of the results, sent to the peer beside the totals.
    omit_udp: Vec<UdpCounts>,
    tick_from: Instant,
    tick_bytes: Vec<u64>,
    tick_udp: Vec<UdpCounts>,
    next_tick: Option<Instant>,
    first_interval: bool,
    intervals: Vec<Value>,
    ends: Vec<Option<StreamEnd>>,
    cpu: CpuClock,
    cpu_used: Option<CpuUtil>,
    /// Per stream: the TCP_INFO readings of a TCP stream this side sends on (read at the start,
    /// at each interval's end and at the test's end; empty series for the others).
    tcp: Vec<TcpInfoSeries>,
    /// The front end's voice, for the data path's fallbacks ([`PathConfig::voice`]).
    voice: &'static (dyn zcnet::Voice + Sync),
}

impl TestRun {
    /// Starts the stream threads of a test whose streams are `streams` (in connection order);
    /// `server` says which side this is.
    pub fn start<E: Send + 'static>(
        server: bool,
        params: &TestParams,
        streams: Vec<DataStream>,
        path: &PathConfig,
        style: ReportStyle,
        notify: &Notifier<E>,
    ) -> std::io::Result<TestRun> {
        let sends: Vec<bool> = streams
            .iter()
            .map(|d| d.spec.client_sends() != server)
            .collect();
        let layout = Layout {
            server,
            bidir: params.bidirectional,
            parallel: params.parallel,
            udp: params.protocol == Protocol::Udp,
            streams: streams
                .iter()
                .zip(&sends)
                .map(|(d, &s)| d.meta(s))
                .collect(),
        };
        let mut path = path.clone();
        if params.protocol == Protocol::Tcp {
            let sending = sends.iter().filter(|&&s| s).count();
            let counts_received = !server && (params.num != 0 || params.blockcount != 0);
            path.tcp = path.tuning.resolve(
                sending,
                super::tuning::cpus(),
                params.bandwidth,
                counts_received,
            );
        }
        let path = &path;
        let shared = TestShared::new(Budget::new(params.num, params.blockcount));
        let mut running = Vec::with_capacity(streams.len());
        for (i, (d, &s)) in streams.into_iter().zip(&sends).enumerate() {
            match Running::start(i, s, d, path, &shared, notify) {
                Ok(r) => running.push(r),
                Err(e) => {
                    shared.abort();
                    running
                        .iter_mut()
                        .for_each(|r: &mut Running| drop(r.join()));
                    return Err(e);
                }
            }
        }
        // Every stream's thread exists and waits at the gate: the test's clock starts now,
        // before the first stream moves a byte (its bytes count, so must its time).
        let cpu = CpuClock::start();
        let now = Instant::now();
        // A client's senders end a `-t` test by themselves, set before they are let go: with
        // many streams this thread may not run again for a while once they are.
        if !server && params.time > 0 {
            let secs = u64::from(params.time) + u64::from(params.omit);
            shared.set_deadline(now + Duration::from_secs(secs));
        }
        shared.open_gate();
        let omit = Duration::from_secs(u64::from(params.omit));
        let n = running.len();
        let mut run = TestRun {
            layout,
            style,
            shared,
            running,
            sends,
            started: now,
            measure_from: now + omit,
            omitting: params.omit > 0,
            has_omit: params.omit > 0,
            omit_base: vec![0; n],
            omit_udp: vec![UdpCounts::default(); n],
            tick_from: now,
            tick_bytes: vec![0; n],
            tick_udp: vec![UdpCounts::default(); n],
            next_tick: style.interval.map(|i| now + i),
            first_interval: true,
            intervals: Vec::new(),
            ends: (0..n).map(|_| None).collect(),
            ended_at: None,
            cpu,
            cpu_used: None,
            tcp: vec![TcpInfoSeries::default(); n],
            voice: path.voice,
        };
        // The first reading: retransmits count from here, as iperf3's from its stream start.
        run.tcp_samples();
        Ok(run)
    }

    /// Reads TCP_INFO of every TCP stream this side sends on, into its series: each one's
    /// retransmits since the previous reading and the reading (`None` for the others).
    fn tcp_samples(&mut self) -> Vec<Option<TcpSample>> {
        if self.layout.udp {
            return Vec::new();
        }
        let streams = self
            .running
            .iter()
            .zip(&self.sends)
            .zip(self.tcp.iter_mut());
        streams
            .map(|((r, &sends), series)| {
                let info = r.tcp_info().filter(|_| sends)?;
                let retransmits = series.observe(info);
                Some(TcpSample { retransmits, info })
            })
            .collect()
    }

    /// The streams as reports name them.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// When [`TestRun::on_timer`] has something to do next.
    pub fn next_deadline(&self) -> Option<Instant> {
        let omit_end = self.omitting.then_some(self.measure_from);
        [self.next_tick, omit_end].into_iter().flatten().min()
    }

    /// Reports intervals that are due, and ends the `-O` period when it is over.
    pub fn on_timer(&mut self, now: Instant) {
        if let (Some(t), Some(i)) = (self.next_tick.filter(|&t| t <= now), self.style.interval) {
            // The counters are read now, so the interval ends now when the timer fired late
            // (a loaded machine starves this thread): one longer interval with its true end,
            // as iperf3 labels them, not a run of intervals whose first holds every byte.
            let end = interval_end(t, now, i);
            let bytes = self.counters();
            self.interval(end, &bytes);
            self.next_tick = Some(end + i);
        }
        if self.omitting && now >= self.measure_from {
            // iperf3's iperf_reset_stats: the omitted bytes are left out from here, and the
            // clock starts again.
            self.omitting = false;
            self.omit_base = self.counters();
            // Retransmits and window extremes count from here too (iperf_reset_stats).
            self.tcp
                .iter_mut()
                .for_each(|t| *t = TcpInfoSeries::default());
            self.tcp_samples();
            self.tick_bytes = self.omit_base.clone();
            // UDP: iperf_reset_stats records the datagrams and losses so far, for the end
            // and for the peer (`omitted_packets`, `omitted_errors`).
            let udp = self.udp_counters();
            if !udp.is_empty() {
                self.omit_udp = udp.clone();
                self.tick_udp = udp;
            }
            self.tick_from = self.measure_from;
            self.first_interval = true;
            self.next_tick = self.style.interval.map(|i| self.measure_from + i);
        }
    }

    /// UDP datagram counters per stream (empty for TCP).
    fn udp_counters(&self) -> Vec<UdpCounts> {
        if !self.layout.udp {
            return Vec::new();
        }
        self.running
            .iter()
            .map(|r| {
                let (packets, lost, jitter) = r.counters.udp();
                UdpCounts {
                    packets,
                    lost: lost as i64,
                    jitter,
                }
            })
            .collect()
    }

    fn counters(&self) -> Vec<u64> {
        self.running.iter().map(|r| r.counters.moved()).collect()
    }

    /// Bytes moved so far in one direction (`true`: this side's sending streams).
    pub fn moved(&self, sends: bool) -> u64 {
        self.running
            .iter()
            .zip(&self.sends)
            .filter(|(_, &s)| s == sends)
            .map(|(r, _)| r.counters.moved())
            .sum()
    }

    /// Whether this side sends on any stream.
    pub fn has_senders(&self) -> bool {
        self.sends.iter().any(|&s| s)
    }

    /// When the test's clock started (the streams were let go then).
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Whether this side receives on any stream.
    pub fn has_receivers(&self) -> bool {
        self.sends.iter().any(|&s| !s)
    }

    /// One interval report, from `tick_from` to `end`, with the counters at `end`. Times
    /// count from the start of the test during `-O`, from its end afterwards (as iperf3's).
    fn interval(&mut self, end: Instant, bytes: &[u64]) {
        let origin = if self.omitting {
            self.started
        } else {
            self.measure_from
        };
        let secs = |t: Instant| t.saturating_duration_since(origin).as_secs_f64();
        let udp_now = self.udp_counters();
        let udp = udp_now
            .iter()
            .zip(&self.tick_udp)
            .map(|(n, p)| UdpCounts {
                packets: n.packets.saturating_sub(p.packets),
                lost: n.lost - p.lost,
                jitter: n.jitter,
            })
            .collect();
        let tcp = self.tcp_samples();
        let iv = Interval {
            start: secs(self.tick_from),
            end: secs(end),
            bytes: bytes
                .iter()
                .zip(&self.tick_bytes)
                .map(|(b, p)| b.saturating_sub(*p))
                .collect(),
            udp,
            tcp,
            omitted: self.omitting,
        };
        self.tick_udp = udp_now;
        self.tick_from = end;
        self.tick_bytes = bytes.to_vec();
        if self.style.json {
            self.intervals.push(jsonout::interval(&self.layout, &iv));
        } else {
            crate::out!(
                "{}",
                report::interval_text(&self.layout, &iv, self.first_interval)
            );
        }
        self.first_interval = false;
    }

    /// Stops this side's sending streams (see [`stop_senders`]); a stream whose peer reads
    /// nothing for `grace` is reset.
    pub fn stop_senders(&mut self, grace: Duration) {
        self.ended_at.get_or_insert_with(Instant::now);
        let ends = stop_senders(&self.shared, &mut self.running, &self.sends, grace);
        self.keep(ends);
    }

    /// Closes the sending half of this side's sending streams, so that a peer reading them
    /// sees their end.
    pub fn shutdown_senders(&self) {
        for (r, _) in self.running.iter().zip(&self.sends).filter(|(_, s)| **s) {
            r.shutdown_write();
        }
    }

    /// Gives this side's receiving streams the byte counts the peer reports for them, so
    /// that draining stops exactly there. Not with `-O`: the peer's counts then leave out
    /// the omitted part, and draining waits for the stream to go quiet instead.
    pub fn set_targets(&self, peer: &TestResults) {
        if self.has_omit {
            return;
        }
        for ((r, _), m) in self
            .running
            .iter()
            .zip(&self.sends)
            .zip(&self.layout.streams)
            .filter(|((_, s), _)| !**s)
        {
            if let Some(p) = peer.stream(m.id) {
                r.counters.set_target(p.bytes);
            }
        }
    }

    /// Receives what is still coming on this side's receiving streams and stops them.
    pub fn drain_receivers(&mut self) {
        self.ended_at.get_or_insert_with(Instant::now);
        let ends = drain_receivers(&self.shared, &mut self.running, &self.sends);
        self.keep(ends);
    }

    fn keep(&mut self, ends: Vec<Option<StreamEnd>>) {
        for (slot, e) in self.ends.iter_mut().zip(ends) {
            if e.is_some() {
                *slot = e;
            }
        }
    }

    /// The first stream failure, if any stream failed.
    pub fn failure(&self) -> Option<String> {
        self.ends.iter().flatten().find_map(|e| e.error.clone())
    }

    /// Ends the test (after both `stop_senders` and `drain_receivers`): the last, partial
    /// interval from the exact counts, and the CPU use.
    pub fn finish(&mut self) {
        let now = Instant::now();
        self.cpu_used = Some(self.cpu.utilization());
        let exact: Vec<u64> = self
            .ends
            .iter()
            .map(|e| e.as_ref().map_or(0, |e| e.bytes))
            .collect();
        let mut read = false;
        if let Some(i) = self.style.interval {
            let moved = exact.iter().zip(&self.tick_bytes).any(|(e, p)| e > p);
            if moved || now.saturating_duration_since(self.tick_from) >= i.mul_f64(0.1) {
                self.interval(now, &exact);
                read = true;
            }
        }
        if !read {
            // The last TCP_INFO reading, for the totals.
            self.tcp_samples();
        }
        self.next_tick = None;
    }

    /// Ends the test now (Ctrl-C): every stream stops and is joined, and the test's time ends
    /// here, so [`Self::totals`] gives what moved until now, as iperf3 prints on SIGINT.
    pub fn interrupt(&mut self) {
        self.ended_at.get_or_insert_with(Instant::now);
        self.abort();
    }

    /// Stops everything at once (the test failed): resets the connections and joins the
    /// threads.
    pub fn abort(&mut self) {
        self.shared.abort();
        for (i, r) in self.running.iter_mut().enumerate() {
            if self.ends[i].is_none() {
                if self.sends[i] {
                    r.abort_connection();
                }
                self.ends[i] = Some(r.join());
            }
        }
    }

    /// Seconds a stream ran: from the start of the measured part to the end of the test (as
    /// iperf3 counts every stream's time: a paced stream's last block may leave long before
    /// the end, a stalled one's never), or to its last byte when the test has not ended.
    fn secs(&self, i: usize) -> f64 {
        let last = self.ends[i].as_ref().and_then(|e| e.last);
        self.ended_at
            .or(last)
            .unwrap_or(self.measure_from)
            .saturating_duration_since(self.measure_from)
            .as_secs_f64()
    }

    fn bytes(&self, i: usize) -> u64 {
        let b = self.ends[i].as_ref().map_or(0, |e| e.bytes);
        b.saturating_sub(self.omit_base[i])
    }

    fn udp_end(&self, i: usize) -> super::udp::UdpEnd {
        self.ends[i]
            .as_ref()
            .and_then(|e| e.udp)
            .unwrap_or_default()
    }

    /// Retransmits of stream `i` when this side sent on it and read its TCP_INFO.
    fn retransmits(&self, i: usize) -> Option<i64> {
        let t = self.tcp.get(i).filter(|t| self.sends[i] && t.seen())?;
        Some(i64::from(t.retransmits()))
    }

    /// Whether every TCP stream this side sends on had its TCP_INFO read.
    fn tcp_info_read(&self) -> bool {
        !self.layout.udp && (0..self.sends.len()).all(|i| !self.sends[i] || self.tcp[i].seen())
    }

    /// This side's results for the peer (iperf3's `send_results`).
    pub fn local_results(&self) -> TestResults {
        let cpu = self.cpu_used.unwrap_or_default();
        let streams = self
            .layout
            .streams
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let u = self.udp_end(i);
                let omitted = &self.omit_udp[i];
                // As iperf3's send_results: the totals, and beside them what `-O` left out.
                StreamResults {
                    id: m.id,
                    bytes: self.bytes(i),
                    retransmits: self.retransmits(i).unwrap_or(-1),
                    jitter: u.jitter,
                    errors: u.errors,
                    omitted_errors: Some(omitted.lost),
                    packets: i64::try_from(u.packets).unwrap_or(i64::MAX),
                    omitted_packets: Some(i64::try_from(omitted.packets).unwrap_or(i64::MAX)),
                    start_time: Some(0.0),
                    end_time: Some(self.secs(i)),
                }
            })
            .collect();
        TestResults {
            cpu_util_total: cpu.total,
            cpu_util_user: cpu.user,
            cpu_util_system: cpu.system,
            // iperf3: -1 when this side only received, 1 when it sent TCP and read TCP_INFO,
            // 0 when it sent without (UDP, or a socket that refused TCP_INFO).
            sender_has_retransmits: if !self.has_senders() {
                -1
            } else if self.tcp_info_read() {
                1
            } else {
                0
            },
            streams,
            zerocopy: Some(self.path_summary().to_json()),
            ..TestResults::default()
        }
    }

    /// Both sides' numbers per stream, for the summary.
    pub fn totals(&self, peer: &TestResults) -> Totals {
        let streams = self
            .layout
            .streams
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let theirs = peer.stream(m.id);
                let their_bytes = theirs.map_or(0, |p| p.bytes);
                let their_secs = theirs
                    .and_then(|p| Some(p.end_time? - p.start_time.unwrap_or(0.0)))
                    .unwrap_or_else(|| self.secs(i));
                let (mine, my_secs) = (self.bytes(i), self.secs(i));
                let u = self.udp_end(i);
                let omitted = &self.omit_udp[i];
                let (my_packets, my_lost) = (
                    u.packets.saturating_sub(omitted.packets),
                    u.errors - omitted.lost,
                );
                // The peer's totals less what its `-O` left out. A peer older than iperf3
                // 3.14 does not say: then, as iperf3 does, this side's own omitted count
                // stands in for the peer's (both omit the same first seconds).
                let their_packets = theirs.map_or(0, |p| {
                    let omitted = p.omitted_packets.unwrap_or(omitted.packets as i64);
                    (p.packets - omitted.clamp(0, p.packets.max(0))).max(0) as u64
                });
                let their_lost = theirs.map_or(0, |p| {
                    p.errors - p.omitted_errors.unwrap_or(0).clamp(0, p.errors.max(0))
                });
                if m.sends {
                    StreamTotals {
                        sent: mine,
                        received: their_bytes,
                        sender_secs: my_secs,
                        receiver_secs: their_secs,
                        retransmits: self.retransmits(i),
                        tcp: self.retransmits(i).map(|_| self.tcp[i]),
                        packets_sent: my_packets,
                        received_udp: UdpCounts {
                            packets: their_packets,
                            lost: their_lost,
                            jitter: theirs.map_or(0.0, |p| p.jitter),
                        },
                    }
                } else {
                    StreamTotals {
                        sent: their_bytes,
                        received: mine,
                        sender_secs: their_secs,
                        receiver_secs: my_secs,
                        retransmits: (peer.sender_has_retransmits == 1)
                            .then(|| theirs.map_or(0, |p| p.retransmits)),
                        tcp: None,
                        packets_sent: their_packets,
                        received_udp: UdpCounts {
                            packets: my_packets,
                            lost: my_lost,
                            jitter: u.jitter,
                        },
                    }
                }
            })
            .collect();
        Totals {
            streams,
            cpu: self.cpu_used.unwrap_or_default(),
            remote_cpu: super::sysinfo::CpuUtil {
                total: peer.cpu_util_total,
                user: peer.cpu_util_user,
                system: peer.cpu_util_system,
            },
        }
    }

    /// What this side's data path did.
    pub fn path_summary(&self) -> PathSummary {
        PathSummary::from_reports(
            self.layout
                .streams
                .iter()
                .zip(&self.ends)
                .filter_map(|(m, e)| Some((m.id, e.as_ref()?.path.as_ref()?))),
            self.voice,
        )
    }

    /// The `intervals` collected for `-J`.
    pub fn take_intervals(&mut self) -> Vec<Value> {
        std::mem::take(&mut self.intervals)
    }
}

impl Drop for TestRun {
    /// A test dropped before its end (an error on the way) stops its threads.
    fn drop(&mut self) {
        if self.ends.iter().any(Option::is_none) {
            self.abort();
        }
    }
}

/// Where an interval due at `due` ends when its timer runs at `now` (the counters are read
/// then): on the schedule when the timer is on time (within 5 % of `every`), else at `now`.
fn interval_end(due: Instant, now: Instant, every: Duration) -> Instant {
    if now.saturating_duration_since(due) > every / 20 {
        now
    } else {
        due
    }
}

#[cfg(test)]
mod interval_tests {
    use super::*;

    #[zcnet_testkit::test]
    fn a_late_timer_ends_its_interval_when_it_reads_the_counters() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        // On time, or nearly: the schedule's label.
        assert_eq!(interval_end(t0 + s, t0 + s, s), t0 + s);
        assert_eq!(interval_end(t0 + s, t0 + s + s / 50, s), t0 + s);
        // Late (a starved control thread, 1.9 s after the interval was due): its true end,
        // not "0.00-1.00" holding 2.9 s of bytes.
        let late = t0 + s + Duration::from_millis(1900);
        assert_eq!(interval_end(t0 + s, late, s), late);
    }
}
