//! `zcnet bench xsk`: AF_XDP against AF_PACKET, packets per second and CPU per million
//! packets, in the namespace lab.
//!
//! ```text
//!   veth: ns …-a (sender thread, pinned)            ns …-b (receiver thread, pinned)
//!   vA ── AF_XDP TX ring (copy) ──────── veth ────► vB ── XDP program → XSKMAP → AF_XDP RX ring
//!      ── AF_PACKET sendmmsg [+QDISC_BYPASS] ─────►    ── AF_PACKET TPACKET_V3 ring / recvmmsg
//!      ── AF_PACKET TX ring  [+QDISC_BYPASS] ─────►
//!   sink: ns …-s, the same senders into an ifb device that drops every frame (TX alone)
//! ```
//!
//! Both mechanisms are driven at the same depth — [`zcnet_rawbench::af_xdp`] (zcnet-sys's AF_XDP
//! socket, the layer under `zcnet::xsk::Xsk`) and [`zcnet_rawbench::af_packet`] — so that the
//! rows compare the kernel's
//! paths, not two facades. Every frame is an Ethernet/IPv4/UDP frame built from one template
//! with zcnet-core's [`UdpFlow`] builder (UDP checksum 0, so only the sequence number changes),
//! written whole into the send buffer for every packet, with a 64-bit sequence number at the
//! start of the payload. The receiver checks every frame of the flow against the template, and
//! its sequence numbers: never one twice or out of order; what is missing is `drops = sent −
//! received`, and the kernel's own counters (`XDP_STATISTICS`, `PACKET_STATISTICS`, the veth's
//! transmit drops) are reported beside it.
//!
//! Each (case, size) runs `repeat` times, interleaved (every case of every size once, then
//! again), with fresh sockets each time, and the row reports medians: runs in this VM flip
//! between a fast and a slow state when sender and receiver sit on different vCPUs. The
//! sender and receiver threads are pinned ([`XskBenchConfig::cpus`]), and receivers that find
//! nothing sleep instead of waiting on their socket ([`RxWait`]). CPU per million packets is
//! the sender's and receiver's thread CPU time (user + system, which on this kernel includes
//! the softirq work run in the thread's context: veth runs the receive path on the sending
//! CPU) per million packets received.

use crate::lab::{self, Lab, SinkPath, VethPath};
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};
use zcnet::xsk::interface_mac;
use zcnet::{Error, Result};
use zcnet_core::tpacket::RingRequest;
use zcnet_core::udp_frame::{UdpFlow, HEADERS_LEN};
use zcnet_rawbench::af_packet::{PacketSocket, Protocol, RxRingV3, TxRing, MAX_BATCH};
use zcnet_rawbench::af_xdp::{Step, XdpError, XdpSide, XskBindMode};

mod engines;
pub use engines::*;

/// UDP port of the benchmark flow.
pub const PORT: u16 = 47_200;
/// Where the sequence number sits in a frame (start of the UDP payload).
pub const SEQ_OFFSET: usize = HEADERS_LEN;
/// The smallest frame: headers and the sequence number.
pub const MIN_SIZE: usize = HEADERS_LEN + 8;
/// The largest frame: a 1500-byte IPv4 packet (the veth MTU) with its Ethernet header.
pub const MAX_SIZE: usize = 1514;
/// Frames sizes measured by default (Ethernet frame bytes, no FCS).
pub const DEFAULT_SIZES: [usize; 3] = [64, 512, 1500];
/// Packets per send call (AF_PACKET sendmmsg, TX ring kick, AF_XDP TX batch).
pub const BATCH: usize = MAX_BATCH;

/// The three kinds of row (`mode` in the JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// AF_XDP bound with `XDP_COPY`.
    AfXdpCopy,
    /// AF_XDP bound with `XDP_ZEROCOPY` (refused by drivers without support, veth included).
    AfXdpZeroCopy,
    /// AF_PACKET, the baseline.
    AfPacket,
}

impl Mode {
    /// Every mode.
    pub const ALL: [Mode; 3] = [Mode::AfXdpCopy, Mode::AfXdpZeroCopy, Mode::AfPacket];

    /// The mode named `s` (see [`Mode::name`]).
    pub fn parse(s: &str) -> Result<Mode> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                Error::invalid_input(format!(
                    "--mode '{s}': use af-xdp-copy, af-xdp-zerocopy or af-packet"
                ))
            })
    }

    /// `af-xdp-copy`, `af-xdp-zerocopy`, `af-packet`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::AfXdpCopy => "af-xdp-copy",
            Mode::AfXdpZeroCopy => "af-xdp-zerocopy",
            Mode::AfPacket => "af-packet",
        }
    }
}

/// How the sender sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxVariant {
    /// The AF_XDP TX ring (kicked with `sendto` while descriptors are pending).
    Xsk,
    /// AF_PACKET `sendmmsg`, [`BATCH`] frames a call, through the qdisc layer.
    Sendmmsg,
    /// AF_PACKET `sendmmsg` with `PACKET_QDISC_BYPASS`.
    SendmmsgBypass,
    /// An AF_PACKET TPACKET_V3 TX ring, one `send()` per [`BATCH`] frames.
    TxRing,
    /// The TX ring with `PACKET_QDISC_BYPASS`.
    TxRingBypass,
}

impl TxVariant {
    /// A short name for tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            TxVariant::Xsk => "af-xdp",
            TxVariant::Sendmmsg => "sendmmsg",
            TxVariant::SendmmsgBypass => "sendmmsg+qdisc-bypass",
            TxVariant::TxRing => "tx-ring",
            TxVariant::TxRingBypass => "tx-ring+qdisc-bypass",
        }
    }
}

/// How the receiver receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxVariant {
    /// The AF_XDP RX ring, fed by an XDP program on the receiving interface.
    Xsk,
    /// An AF_PACKET TPACKET_V3 RX ring.
    TpacketV3,
    /// AF_PACKET `recvmmsg`, [`BATCH`] packets a call.
    Recvmmsg,
    /// No receiver (the sink path: the device drops every frame).
    None,
}

impl RxVariant {
    /// A short name for tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            RxVariant::Xsk => "af-xdp",
            RxVariant::TpacketV3 => "tpacket-v3",
            RxVariant::Recvmmsg => "recvmmsg",
            RxVariant::None => "-",
        }
    }
}

/// Where the frames go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    /// The lab's veth pair: a sender on vA, a receiver on vB.
    Veth,
    /// The lab's sink: an ifb device that drops every frame; TX only, the sender's cost alone
    /// (on veth the receiver's kernel path runs on the sending CPU too).
    Sink,
}

impl PathKind {
    /// `veth`, `sink`.
    pub fn name(self) -> &'static str {
        match self {
            PathKind::Veth => "veth",
            PathKind::Sink => "sink",
        }
    }

    /// The path named `s`.
    pub fn parse(s: &str) -> Result<PathKind> {
        match s {
            "veth" => Ok(PathKind::Veth),
            "sink" => Ok(PathKind::Sink),
            _ => Err(Error::invalid_input(format!(
                "--path '{s}': use veth or sink"
            ))),
        }
    }
}

/// The sink's device (an ifb in its namespace, [`crate::lab::Lab::sink`]).
pub const SINK_DEV: &str = "sinkA";

/// One sender/receiver pairing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Case {
    /// The row's mode.
    pub mode: Mode,
    /// The sender.
    pub tx: TxVariant,
    /// The receiver.
    pub rx: RxVariant,
}

/// The cases run by default: AF_XDP copy and zero-copy; AF_PACKET with each TX variant into a
/// TPACKET_V3 ring, and plain `sendmmsg` into `recvmmsg` (so that the two AF_PACKET receivers
/// are compared behind the same sender).
pub fn default_cases() -> Vec<Case> {
    let xsk = |mode| Case {
        mode,
        tx: TxVariant::Xsk,
        rx: RxVariant::Xsk,
    };
    let pkt = |tx, rx| Case {
        mode: Mode::AfPacket,
        tx,
        rx,
    };
    vec![
        xsk(Mode::AfXdpCopy),
        xsk(Mode::AfXdpZeroCopy),
        pkt(TxVariant::Sendmmsg, RxVariant::TpacketV3),
        pkt(TxVariant::SendmmsgBypass, RxVariant::TpacketV3),
        pkt(TxVariant::TxRing, RxVariant::TpacketV3),
        pkt(TxVariant::TxRingBypass, RxVariant::TpacketV3),
        pkt(TxVariant::Sendmmsg, RxVariant::Recvmmsg),
    ]
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct XskBenchConfig {
    /// The lab paths.
    pub paths: Vec<PathKind>,
    /// Frame sizes (Ethernet frame bytes without FCS, [`MIN_SIZE`]..=[`MAX_SIZE`]).
    pub sizes: Vec<usize>,
    /// How long the sender sends, per run.
    pub duration: Duration,
    /// Runs per (case, size); the row reports their medians.
    pub repeat: usize,
    /// CPUs for the sender and the receiver thread; `None`: the first two this process may
    /// use (both the same when there is only one).
    pub cpus: Option<(usize, usize)>,
    /// The pairings ([`default_cases`]).
    pub cases: Vec<Case>,
    /// Address the frames to [`OTHER_HOST_MAC`], another host's MAC address, which the
    /// receiving stack drops right after the AF_PACKET tap (`PACKET_OTHERHOST`): the cheapest
    /// the rest of the stack can be for AF_PACKET, as for a capture of someone else's traffic.
    /// Off (the default): to vB's own address, as traffic for the receiving host is, and its
    /// stack also processes every packet AF_PACKET sees (a UDP socket lookup and an attempt at
    /// an ICMP port unreachable). AF_XDP is the same either way: the XDP program takes the
    /// frames before the stack.
    pub other_host: bool,
    /// How receivers wait when there is nothing to take ([`RxWait::Sleep`]).
    pub rx_wait: RxWait,
}

/// The destination MAC address of the frames with [`XskBenchConfig::other_host`] (and on the
/// sink): locally administered, unicast, and not vB's (whose address the kernel draws at
/// random).
pub const OTHER_HOST_MAC: [u8; 6] = [0x02, 0x7a, 0x63, 0x6e, 0x65, 0x74];

impl Default for XskBenchConfig {
    fn default() -> Self {
        XskBenchConfig {
            paths: vec![PathKind::Veth, PathKind::Sink],
            sizes: DEFAULT_SIZES.to_vec(),
            duration: Duration::from_secs(1),
            repeat: 5,
            cpus: None,
            cases: default_cases(),
            other_host: false,
            rx_wait: RxWait::Sleep,
        }
    }
}

impl XskBenchConfig {
    /// One-line errors (exit code 2) for a configuration that cannot run.
    pub fn check(&self) -> Result<()> {
        if let Some(&s) = self
            .sizes
            .iter()
            .find(|&&s| !(MIN_SIZE..=MAX_SIZE).contains(&s))
        {
            return Err(Error::invalid_input(format!(
                "--size {s}: frames must be {MIN_SIZE} to {MAX_SIZE} B (Ethernet/IPv4/UDP headers, an 8-byte sequence number, MTU 1500)"
            )));
        }
        if self.sizes.is_empty() {
            return Err(Error::invalid_input("--size: give at least one frame size"));
        }
        if self.paths.is_empty() {
            return Err(Error::invalid_input("--path: give at least one path"));
        }
        if self.cases.is_empty() {
            return Err(Error::invalid_input("--mode: give at least one mode"));
        }
        if self.repeat == 0 || self.repeat > 1000 {
            return Err(Error::invalid_input(format!(
                "--repeat {}: use 1 to 1000",
                self.repeat
            )));
        }
        if self.duration.is_zero() {
            return Err(Error::invalid_input("--duration must be more than 0"));
        }
        Ok(())
    }
}

/// One run of one case.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Run {
    /// Frames the kernel took from the sender.
    pub sent: u64,
    /// Frames of the flow the receiver got, each checked.
    pub received: u64,
    /// Seconds the sender sent (its final flush included).
    pub tx_seconds: f64,
    /// Seconds from the sender's start to the last frame received.
    pub rx_seconds: f64,
    /// Sender thread CPU seconds.
    pub tx_cpu: f64,
    /// Receiver thread CPU seconds.
    pub rx_cpu: f64,
    /// What the kernel said it dropped (`XDP_STATISTICS` rx_dropped + rx_ring_full;
    /// `PACKET_STATISTICS` tp_drops; `ENOBUFS` from the device).
    pub kernel_drops: u64,
    /// Frames missing between received sequence numbers (the rest of the drops are at the end).
    pub gaps: u64,
}

impl Run {
    /// Sent per second.
    pub fn tx_pps(&self) -> f64 {
        per_second(self.sent, self.tx_seconds)
    }

    /// Received per second.
    pub fn rx_pps(&self) -> f64 {
        per_second(self.received, self.rx_seconds)
    }

    /// `sent − received`.
    pub fn drops(&self) -> u64 {
        self.sent.saturating_sub(self.received)
    }

    /// Sender + receiver CPU seconds per million packets received.
    pub fn cpu_s_per_mpkt(&self) -> Option<f64> {
        per_mpkt(self.tx_cpu + self.rx_cpu, self.received)
    }

    /// Sender CPU seconds per million packets sent.
    pub fn tx_cpu_s_per_mpkt(&self) -> Option<f64> {
        per_mpkt(self.tx_cpu, self.sent)
    }

    /// Receiver CPU seconds per million packets received.
    pub fn rx_cpu_s_per_mpkt(&self) -> Option<f64> {
        per_mpkt(self.rx_cpu, self.received)
    }
}

fn per_second(n: u64, s: f64) -> f64 {
    if s > 0.0 {
        n as f64 / s
    } else {
        0.0
    }
}

fn per_mpkt(cpu: f64, n: u64) -> Option<f64> {
    (n > 0).then(|| cpu / (n as f64 / 1e6))
}

/// The median of `v` (the mean of the two middle values for an even count); `None` if empty.
pub fn median(v: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = v.into_iter().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

/// One row: a case at one size, its runs, or why it could not run.
#[derive(Debug, Clone)]
pub struct Row {
    /// The lab path ("veth").
    pub path: &'static str,
    /// The case.
    pub case: Case,
    /// Frame bytes.
    pub size: usize,
    /// The runs that completed.
    pub runs: Vec<Run>,
    /// Why the case could not run (one line), if it could not.
    pub error: Option<String>,
    /// Whether that error is the kernel or driver refusing the mode (expected, e.g. zero-copy on
    /// veth), rather than a failure.
    pub refused: bool,
}

impl Row {
    fn med(&self, f: impl Fn(&Run) -> f64) -> Option<f64> {
        median(self.runs.iter().map(f))
    }

    /// Median TX packets per second.
    pub fn tx_pps(&self) -> Option<f64> {
        self.med(Run::tx_pps)
    }

    /// Whether the row has a receiver (the sink's rows do not).
    pub fn has_receiver(&self) -> bool {
        self.case.rx != RxVariant::None
    }

    /// Median RX packets per second (`None` without a receiver).
    pub fn rx_pps(&self) -> Option<f64> {
        self.has_receiver().then(|| self.med(Run::rx_pps)).flatten()
    }

    /// Median CPU seconds (sender + receiver) per million packets received; without a
    /// receiver, the sender's per million sent.
    pub fn cpu_s_per_mpkt(&self) -> Option<f64> {
        if !self.has_receiver() {
            return self.tx_cpu_s_per_mpkt();
        }
        median(self.runs.iter().filter_map(Run::cpu_s_per_mpkt))
    }

    /// Median sender CPU seconds per million sent.
    pub fn tx_cpu_s_per_mpkt(&self) -> Option<f64> {
        median(self.runs.iter().filter_map(Run::tx_cpu_s_per_mpkt))
    }

    /// Median receiver CPU seconds per million received.
    pub fn rx_cpu_s_per_mpkt(&self) -> Option<f64> {
        self.has_receiver()
            .then(|| median(self.runs.iter().filter_map(Run::rx_cpu_s_per_mpkt)))
            .flatten()
    }

    /// Frames sent over all runs.
    pub fn sent(&self) -> u64 {
        self.runs.iter().map(|r| r.sent).sum()
    }

    /// Frames received over all runs.
    pub fn received(&self) -> u64 {
        self.runs.iter().map(|r| r.received).sum()
    }

    /// `sent − received` over all runs (`None` without a receiver, or before any run).
    pub fn drops(&self) -> Option<u64> {
        (self.has_receiver() && self.error.is_none() && !self.runs.is_empty())
            .then(|| self.sent().saturating_sub(self.received()))
    }

    /// The kernel's drop counters over all runs.
    pub fn kernel_drops(&self) -> u64 {
        self.runs.iter().map(|r| r.kernel_drops).sum()
    }
}

/// AF_XDP copy mode against the best AF_PACKET variant at one frame size.
#[derive(Debug, Clone, PartialEq)]
pub struct Ratio {
    /// The lab path.
    pub path: &'static str,
    /// Frame bytes.
    pub size: usize,
    /// The AF_PACKET TX variant with the highest median TX rate, and that rate.
    pub best_af_packet_tx: Option<(&'static str, f64)>,
    /// AF_XDP copy TX rate ÷ that.
    pub tx_ratio: Option<f64>,
    /// The AF_PACKET receiver (and its sender) with the highest median RX rate, and that rate.
    pub best_af_packet_rx: Option<(String, f64)>,
    /// AF_XDP copy RX rate ÷ that (`None` on the sink).
    pub rx_ratio: Option<f64>,
}

/// Everything `zcnet bench xsk` measured.
#[derive(Debug, Clone)]
pub struct XskReport {
    /// One row per (case, size), in the order of the configuration.
    pub rows: Vec<Row>,
    /// The sender thread's CPU.
    pub sender_cpu: usize,
    /// The receiver thread's CPU.
    pub receiver_cpu: usize,
    /// Where each side ran, in words.
    pub placement: String,
    /// The ratios, per size.
    pub ratios: Vec<Ratio>,
    /// Runs per row.
    pub repeat: usize,
    /// Seconds per run.
    pub duration: Duration,
}

impl XskReport {
    /// Rows that failed (errors that are not an expected refusal).
    pub fn failed(&self) -> usize {
        self.rows
            .iter()
            .filter(|r| r.error.is_some() && !r.refused)
            .count()
    }
}

/// Progress, for a caller that shows it.
#[derive(Debug, Clone, Copy)]
pub enum Progress {
    /// A run starts.
    Run {
        /// Runs done so far.
        index: usize,
        /// Runs in all.
        total: usize,
        /// The lab path.
        path: &'static str,
        /// The case.
        case: Case,
        /// Frame bytes.
        size: usize,
        /// Which repetition (from 1).
        rep: usize,
    },
}

/// AF_XDP copy against the best AF_PACKET rows, for each path and size that has rows.
pub fn ratios(rows: &[Row], sizes: &[usize]) -> Vec<Ratio> {
    let mut paths: Vec<&'static str> = Vec::new();
    for r in rows {
        if !paths.contains(&r.path) {
            paths.push(r.path);
        }
    }
    let mut out = Vec::new();
    for &path in &paths {
        for &size in sizes {
            let at = |m: Mode| {
                rows.iter().filter(move |r| {
                    r.path == path && r.size == size && r.case.mode == m && r.error.is_none()
                })
            };
            if at(Mode::AfXdpCopy).next().is_none() && at(Mode::AfPacket).next().is_none() {
                continue;
            }
            let xdp = at(Mode::AfXdpCopy).next();
            let best_tx = at(Mode::AfPacket)
                .filter_map(|r| Some((r.case.tx.name(), r.tx_pps()?)))
                .max_by(|a, b| a.1.total_cmp(&b.1));
            let best_rx = at(Mode::AfPacket)
                .filter_map(|r| {
                    Some((
                        format!("{} (from {})", r.case.rx.name(), r.case.tx.name()),
                        r.rx_pps()?,
                    ))
                })
                .max_by(|a, b| a.1.total_cmp(&b.1));
            let ratio = |x: Option<f64>, best: Option<f64>| match (x, best) {
                (Some(x), Some(b)) if b > 0.0 => Some(x / b),
                _ => None,
            };
            out.push(Ratio {
                path,
                size,
                tx_ratio: ratio(xdp.and_then(Row::tx_pps), best_tx.map(|b| b.1)),
                rx_ratio: ratio(xdp.and_then(Row::rx_pps), best_rx.as_ref().map(|b| b.1)),
                best_af_packet_tx: best_tx,
                best_af_packet_rx: best_rx,
            });
        }
    }
    out
}

/// The sender and receiver CPUs: `wanted`, or the first two CPUs this thread may run on.
pub fn pick_cpus(wanted: Option<(usize, usize)>) -> Result<(usize, usize)> {
    let allowed = zcnet::os::thread_affinity()
        .map_err(|e| Error::io("sched_getaffinity (which CPUs this process may use)", e))?;
    if let Some((t, r)) = wanted {
        for c in [t, r] {
            if !allowed.contains(&c) {
                return Err(Error::invalid_input(format!(
                    "--cpus: CPU {c} is not one this process may run on ({allowed:?})"
                )));
            }
        }
        return Ok((t, r));
    }
    match allowed.as_slice() {
        [] => Err(Error::invalid_input("no CPU to run on")),
        [only] => Ok((*only, *only)),
        [a, b, ..] => Ok((*a, *b)),
    }
}

/// Runs every case of `cfg` at every size, `repeat` times interleaved, in a fresh lab (deleted
/// when this returns, on every path). Needs root. Ctrl-C (with
/// [`crate::interrupt::install_handler`]) stops it within milliseconds with
/// [`Error::Interrupted`].
pub fn run(cfg: &XskBenchConfig, progress: &mut dyn FnMut(Progress)) -> Result<XskReport> {
    cfg.check()?;
    let (tx_cpu, rx_cpu) = pick_cpus(cfg.cpus)?;
    let mut lab = Lab::new()?;
    let mut links = Vec::new();
    for &path in &cfg.paths {
        links.push(match path {
            PathKind::Veth => {
                let v = lab.veth()?;
                let flow = veth_flow(&v, !cfg.other_host)?;
                Link {
                    path,
                    tx_ns: v.a,
                    tx_dev: "vA",
                    rx: Some((v.b, "vB")),
                    flow,
                }
            }
            PathKind::Sink => {
                let k = lab.sink()?;
                let flow = sink_flow(&k)?;
                Link {
                    path,
                    tx_ns: k.ns,
                    tx_dev: SINK_DEV,
                    rx: None,
                    flow,
                }
            }
        });
    }
    let mut rows: Vec<(usize, Row)> = Vec::new();
    for &size in &cfg.sizes {
        for (li, link) in links.iter().enumerate() {
            let mut seen = Vec::new();
            for &case in &cfg.cases {
                // The sink has no receiver: one row per sender.
                let case = match link.path {
                    PathKind::Veth => case,
                    PathKind::Sink => Case {
                        rx: RxVariant::None,
                        ..case
                    },
                };
                if seen.contains(&case) {
                    continue;
                }
                seen.push(case);
                rows.push((
                    li,
                    Row {
                        path: link.path.name(),
                        case,
                        size,
                        runs: Vec::new(),
                        error: None,
                        refused: false,
                    },
                ));
            }
        }
    }
    let total = rows.len() * cfg.repeat;
    let mut index = 0;
    for rep in 1..=cfg.repeat {
        for (li, row) in rows.iter_mut() {
            index += 1;
            if row.error.is_some() {
                continue;
            }
            progress(Progress::Run {
                index,
                total,
                path: row.path,
                case: row.case,
                size: row.size,
                rep,
            });
            let link = &links[*li];
            let tmpl = template(&link.flow, row.size)?;
            match run_once(
                link,
                &tmpl,
                row.case,
                cfg.duration,
                (tx_cpu, rx_cpu),
                cfg.rx_wait,
            ) {
                Ok(r) => row.runs.push(r),
                Err(Error::Interrupted) => return Err(Error::Interrupted),
                Err(e) => {
                    row.refused = matches!(e, Error::Unsupported { .. });
                    row.error = Some(one_line(&crate::cli_text::error_text(&e)));
                }
            }
            if crate::interrupt::interrupted() {
                return Err(Error::Interrupted);
            }
        }
    }
    let rows: Vec<Row> = rows.into_iter().map(|(_, r)| r).collect();
    let mut placement = format!(
        "sender pinned to CPU {tx_cpu}, receiver pinned to CPU {rx_cpu}, receivers wait by {}",
        match cfg.rx_wait {
            RxWait::Sleep => "sleeping 50 µs",
            RxWait::Poll => "poll()",
            RxWait::Spin => "spinning",
        }
    );
    for l in &links {
        placement += &match &l.rx {
            Some((rx_ns, rx_dev)) => format!(
                "; {}: {} ({}) → {} ({}), frames to {}",
                l.path.name(),
                l.tx_dev,
                l.tx_ns,
                rx_dev,
                rx_ns,
                if cfg.other_host {
                    "another host's MAC address (the stack drops each one after the AF_PACKET tap)"
                } else {
                    "vB's own MAC address (the stack also processes each one)"
                }
            ),
            None => format!(
                "; {}: {} ({}), an ifb device that drops every frame (TX only)",
                l.path.name(),
                l.tx_dev,
                l.tx_ns
            ),
        };
    }
    drop(lab);
    Ok(XskReport {
        ratios: ratios(&rows, &cfg.sizes),
        rows,
        sender_cpu: tx_cpu,
        receiver_cpu: rx_cpu,
        placement,
        repeat: cfg.repeat,
        duration: cfg.duration,
    })
}

pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The flow vA → vB:[`PORT`], MAC addresses read inside each namespace; to vB's MAC address
/// with `to_host`, else to [`OTHER_HOST_MAC`] (another one if vB happens to have it).
pub fn veth_flow(p: &VethPath, to_host: bool) -> Result<UdpFlow> {
    let mac = |ns: &str, dev: &str| -> Result<[u8; 6]> {
        std::thread::scope(|s| {
            s.spawn(|| {
                lab::enter(ns)?;
                interface_mac(dev)
            })
            .join()
            .unwrap_or_else(|_| Err(Error::invalid_input("reading a MAC address panicked")))
        })
    };
    let vb = mac(&p.b, "vB")?;
    let dst_mac = match (to_host, vb == OTHER_HOST_MAC) {
        (true, _) => vb,
        (false, false) => OTHER_HOST_MAC,
        (false, true) => [0x02, 0, 0, 0, 0, 1],
    };
    Ok(UdpFlow {
        src_mac: mac(&p.a, "vA")?,
        dst_mac,
        src: std::net::Ipv4Addr::new(10, 10, 0, 1),
        dst: std::net::Ipv4Addr::new(10, 10, 0, 2),
        src_port: 40_000,
        dst_port: PORT,
        udp_checksum: false,
    })
}

/// The flow from the sink's device to 10.30.0.2:[`PORT`] (routed into the ifb, which drops it).
pub fn sink_flow(k: &SinkPath) -> Result<UdpFlow> {
    let src_mac = std::thread::scope(|s| {
        s.spawn(|| {
            lab::enter(&k.ns)?;
            interface_mac(SINK_DEV)
        })
        .join()
        .unwrap_or_else(|_| Err(Error::invalid_input("reading a MAC address panicked")))
    })?;
    Ok(UdpFlow {
        src_mac,
        dst_mac: OTHER_HOST_MAC,
        src: std::net::Ipv4Addr::new(10, 20, 0, 1),
        dst: std::net::Ipv4Addr::new(10, 30, 0, 2),
        src_port: 40_000,
        dst_port: PORT,
        udp_checksum: false,
    })
}

/// Where one path's sender and receiver run, and the flow between them.
#[derive(Debug, Clone)]
pub struct Link {
    /// The path.
    pub path: PathKind,
    /// The sender's namespace.
    pub tx_ns: String,
    /// The sender's device.
    pub tx_dev: &'static str,
    /// The receiver's namespace and device, if there is one.
    pub rx: Option<(String, &'static str)>,
    /// The frames' addresses.
    pub flow: UdpFlow,
}

/// The frame every packet of a `size`-byte run is copied from: headers, sequence number 0,
/// then a fixed byte pattern.
pub fn template(flow: &UdpFlow, size: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; size];
    let n = flow
        .write_with(&mut buf, 0, size - HEADERS_LEN, |p| {
            for (i, b) in p.iter_mut().enumerate() {
                *b = (i as u8).wrapping_mul(7).wrapping_add(3);
            }
            p[..8].fill(0);
        })
        .map_err(|e| Error::invalid_input(format!("building a {size} B frame: {e}")))?;
    debug_assert_eq!(n, size);
    Ok(buf)
}

/// Writes frame `seq` into `buf` (at least the template's length); returns its length.
fn write_frame(buf: &mut [u8], tmpl: &[u8], seq: u64) -> usize {
    buf[..tmpl.len()].copy_from_slice(tmpl);
    buf[SEQ_OFFSET..SEQ_OFFSET + 8].copy_from_slice(&seq.to_le_bytes());
    tmpl.len()
}

/// The receiver's check of every frame: frames of other flows (ARP, IPv6 neighbour discovery)
/// are skipped; a frame of the flow must equal the template but for its sequence number, and
/// sequence numbers must rise.
#[derive(Debug)]
pub struct SeqCheck<'a> {
    tmpl: &'a [u8],
    next: u64,
    received: u64,
    gaps: u64,
    bad: u64,
    first_bad: Option<String>,
}

impl<'a> SeqCheck<'a> {
    /// A check against `tmpl`.
    pub fn new(tmpl: &'a [u8]) -> SeqCheck<'a> {
        SeqCheck {
            tmpl,
            next: 0,
            received: 0,
            gaps: 0,
            bad: 0,
            first_bad: None,
        }
    }

    fn is_flow(frame: &[u8]) -> bool {
        frame.len() >= HEADERS_LEN
            && frame[12..14] == [0x08, 0x00]
            && frame[23] == 17
            && frame[36..38] == PORT.to_be_bytes()
    }

    fn fail(&mut self, why: String) {
        self.bad += 1;
        if self.first_bad.is_none() {
            self.first_bad = Some(why);
        }
    }

    /// Checks one received frame.
    pub fn frame(&mut self, frame: &[u8]) {
        if !Self::is_flow(frame) {
            return;
        }
        let t = self.tmpl;
        if frame.len() != t.len() {
            return self.fail(format!("a {} B frame, {} B sent", frame.len(), t.len()));
        }
        let end = SEQ_OFFSET + 8;
        if frame[..SEQ_OFFSET] != t[..SEQ_OFFSET] || frame[end..] != t[end..] {
            return self.fail("a frame's bytes differ from those sent".into());
        }
        let mut s = [0u8; 8];
        s.copy_from_slice(&frame[SEQ_OFFSET..end]);
        let seq = u64::from_le_bytes(s);
        if seq < self.next {
            return self.fail(format!(
                "frame {seq} after frame {}: duplicated or reordered",
                self.next - 1
            ));
        }
        self.gaps += seq - self.next;
        self.next = seq + 1;
        self.received += 1;
    }

    /// Frames of the flow received and verified.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Frames missing between those received.
    pub fn gaps(&self) -> u64 {
        self.gaps
    }

    /// The highest sequence number seen + 1.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// Frames of the flow that failed the check, and the first reason.
    pub fn failures(&self) -> (u64, Option<&str>) {
        (self.bad, self.first_bad.as_deref())
    }
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({} → {})",
            self.mode.name(),
            self.tx.name(),
            self.rx.name()
        )
    }
}

#[cfg(test)]
mod tests;
