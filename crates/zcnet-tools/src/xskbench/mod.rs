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
use crate::reason::Reason;
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
mod frames;
mod measure;
mod results;
pub use engines::*;
pub use frames::*;
pub use measure::*;
pub use results::*;
// The engines' frames (the tests' too).
use frames::write_frame;

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

/// `s` on one line: its runs of whitespace (line breaks included) made one space.
pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
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
