//! UDP streams: the connect handshake, the datagram header, and the receiver's statistics.
//!
//! Handshake (iperf3 src/iperf_udp.c, `iperf_udp_connect` / `iperf_udp_accept`; constants in
//! src/iperf.h): the client sends one 4-byte datagram, `UDP_CONNECT_MSG`, from the stream's
//! socket to the server's port; the server learns the client's address from it (any content
//! is accepted), connects a socket to that address, opens a fresh listening socket for the next
//! stream, and answers `UDP_CONNECT_REPLY`. The values are written as a host-order `unsigned
//! int` whose bytes are the same on either byte order: `"9876"` and `"6789"`. Before 3.10 they
//! were the numbers 123456789 and 987654321, which a little-endian host writes as below; 3.10+
//! clients still accept the legacy reply. In reverse mode a client also skips up to
//! `MAX_REVERSE_OUT_OF_ORDER_PACKETS` data datagrams that overtake the reply.
//!
//! Datagram header (`iperf_udp_send` / `iperf_udp_recv`): big-endian `u32` seconds, `u32`
//! microseconds of the sender's clock, then the packet count (1 for the first datagram) as a
//! big-endian `u32`, or `u64` with `--udp-counters-64bit`.
//!
//! Statistics (`iperf_udp_recv`): a count above the highest seen so far counts the gap as lost;
//! a count at or below it is out of order and takes one back from the lost count. Jitter
//! follows RFC 1889 (6.3.1, A.8): transit = |arrival − sent| in seconds, `J += (|D| − J) / 16`
//! with `D` the change in transit from the previous datagram.

use super::error::ProtoError;

/// The client's connect datagram (3.10+).
pub const UDP_CONNECT_MSG: [u8; 4] = *b"9876";
/// The connect datagram of 3.9 and earlier (123456789 from a little-endian host).
pub const LEGACY_UDP_CONNECT_MSG: [u8; 4] = 123_456_789u32.to_le_bytes();
/// The server's reply (3.10+).
pub const UDP_CONNECT_REPLY: [u8; 4] = *b"6789";
/// The reply of 3.9 and earlier (987654321 from a little-endian host).
pub const LEGACY_UDP_CONNECT_REPLY: [u8; 4] = 987_654_321u32.to_le_bytes();
/// Data datagrams a reverse-mode client lets pass before the reply (iperf.h).
pub const MAX_REVERSE_OUT_OF_ORDER_PACKETS: usize = 2;

/// Whether a datagram received while waiting for the server's reply is the reply: its first
/// four bytes are [`UDP_CONNECT_REPLY`] or the legacy value in either byte order (a
/// big-endian 3.9 server wrote it big-endian).
pub fn is_connect_reply(datagram: &[u8]) -> bool {
    let Some(head) = datagram.get(..4) else {
        return false;
    };
    head == UDP_CONNECT_REPLY
        || head == LEGACY_UDP_CONNECT_REPLY
        || head == 987_654_321u32.to_be_bytes()
}

/// How many bytes a client may receive while waiting for the reply before it gives up, as
/// `iperf_udp_connect` counts them: the reply, plus in reverse mode two data datagrams.
pub fn connect_reply_budget(reverse: bool, len: u32) -> usize {
    let extra = if reverse {
        MAX_REVERSE_OUT_OF_ORDER_PACKETS * len as usize
    } else {
        0
    };
    UDP_CONNECT_REPLY.len() + extra
}

/// A time as iperf3 carries it: seconds and microseconds (`struct iperf_time`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp {
    /// Seconds (iperf3 truncates the clock's seconds to 32 bits).
    pub secs: u32,
    /// Microseconds, below 1,000,000.
    pub usecs: u32,
}

impl Timestamp {
    /// A time from microseconds of some clock (seconds wrap at 2^32, as in iperf3).
    pub fn from_micros(micros: u64) -> Timestamp {
        Timestamp {
            secs: (micros / 1_000_000) as u32,
            usecs: (micros % 1_000_000) as u32,
        }
    }

    fn micros(self) -> i64 {
        i64::from(self.secs) * 1_000_000 + i64::from(self.usecs)
    }

    /// |self − other| in seconds, computed as `iperf_time_diff` then `iperf_time_in_secs`.
    pub fn abs_diff_secs(self, other: Timestamp) -> f64 {
        let d = (self.micros() - other.micros()).unsigned_abs();
        (d / 1_000_000) as f64 + (d % 1_000_000) as f64 / 1_000_000.0
    }
}

/// The header at the start of every UDP data datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpHeader {
    /// When the sender wrote the datagram, by its clock.
    pub sent: Timestamp,
    /// The datagram's sequence number, from 1.
    pub packet_count: u64,
}

impl UdpHeader {
    /// Header bytes: 12 with 32-bit counters, 16 with 64-bit ones.
    pub const fn len(counters_64bit: bool) -> usize {
        if counters_64bit {
            16
        } else {
            12
        }
    }

    /// Writes the header at the start of `buf`; returns its length. With 32-bit counters the
    /// count is truncated to 32 bits, as iperf3's `htonl` does.
    pub fn write(&self, counters_64bit: bool, buf: &mut [u8]) -> Result<usize, ProtoError> {
        let need = Self::len(counters_64bit);
        let got = buf.len();
        let head = buf
            .get_mut(..need)
            .ok_or(ProtoError::ShortDatagram { need, got })?;
        head[0..4].copy_from_slice(&self.sent.secs.to_be_bytes());
        head[4..8].copy_from_slice(&self.sent.usecs.to_be_bytes());
        if counters_64bit {
            head[8..16].copy_from_slice(&self.packet_count.to_be_bytes());
        } else {
            head[8..12].copy_from_slice(&(self.packet_count as u32).to_be_bytes());
        }
        Ok(need)
    }

    /// Reads the header at the start of a datagram.
    pub fn read(buf: &[u8], counters_64bit: bool) -> Result<UdpHeader, ProtoError> {
        let need = Self::len(counters_64bit);
        let head = buf.get(..need).ok_or(ProtoError::ShortDatagram {
            need,
            got: buf.len(),
        })?;
        let word = |i: usize| u32::from_be_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
        let packet_count = if counters_64bit {
            u64::from(word(8)) << 32 | u64::from(word(12))
        } else {
            u64::from(word(8))
        };
        Ok(UdpHeader {
            sent: Timestamp {
                secs: word(0),
                usecs: word(4),
            },
            packet_count,
        })
    }
}

/// A receiving UDP stream's loss, reordering and jitter, computed as `iperf_udp_recv` does.
///
/// ```
/// use zcnet_tools::perf::proto::{Timestamp, UdpRecvStats};
/// let mut s = UdpRecvStats::new();
/// let t = |us| Timestamp::from_micros(us);
/// s.on_datagram(1, t(0), t(100));
/// s.on_datagram(3, t(2000), t(2100)); // 2 lost
/// s.on_datagram(2, t(1000), t(2200)); // late: out of order, no longer lost
/// assert_eq!((s.packets(), s.errors(), s.out_of_order()), (3, 0, 1));
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct UdpRecvStats {
    packet_count: u64,
    errors: i64,
    out_of_order: u64,
    jitter: f64,
    prev_transit: f64,
    started: bool,
    omitted_packets: u64,
    omitted_errors: i64,
    omitted_out_of_order: u64,
}

impl UdpRecvStats {
    /// Statistics of a stream that has received nothing.
    pub fn new() -> UdpRecvStats {
        UdpRecvStats::default()
    }

    /// One datagram: its header's count and send time, and when it arrived by this side's
    /// clock (only differences between transits matter, so the clocks need not agree).
    pub fn on_datagram(&mut self, packet_count: u64, sent: Timestamp, arrival: Timestamp) {
        self.count(packet_count);
        let transit = arrival.abs_diff_secs(sent);
        if !self.started {
            self.prev_transit = transit;
            self.started = true;
        }
        let d = (transit - self.prev_transit).abs();
        self.prev_transit = transit;
        self.jitter += (d - self.jitter) / 16.0;
    }

    fn count(&mut self, pcount: u64) {
        if pcount > self.packet_count {
            let gap = pcount - self.packet_count - 1;
            self.errors = self
                .errors
                .saturating_add(i64::try_from(gap).unwrap_or(i64::MAX));
            self.packet_count = pcount;
        } else {
            self.out_of_order += 1;
            if self.errors > 0 {
                self.errors -= 1;
            }
        }
    }

    /// The end of the omitted period (`iperf_reset_stats`): the counts so far are remembered
    /// as omitted, jitter starts again from the next datagram.
    pub fn end_omit(&mut self) {
        self.omitted_packets = self.packet_count;
        self.omitted_errors = self.errors;
        self.omitted_out_of_order = self.out_of_order;
        self.jitter = 0.0;
        self.started = false;
    }

    /// The highest sequence number received (iperf3's receiver `packet_count`, the results'
    /// `"packets"`).
    pub fn packets(&self) -> u64 {
        self.packet_count
    }

    /// Datagrams lost (`"errors"`).
    pub fn errors(&self) -> i64 {
        self.errors
    }

    /// Datagrams that arrived after a higher sequence number.
    pub fn out_of_order(&self) -> u64 {
        self.out_of_order
    }

    /// The jitter estimate, seconds (`"jitter"`).
    pub fn jitter(&self) -> f64 {
        self.jitter
    }

    /// `packets()` at the end of the omitted period (`"omitted_packets"`).
    pub fn omitted_packets(&self) -> u64 {
        self.omitted_packets
    }

    /// `errors()` at the end of the omitted period (`"omitted_errors"`).
    pub fn omitted_errors(&self) -> i64 {
        self.omitted_errors
    }

    /// `out_of_order()` at the end of the omitted period.
    pub fn omitted_out_of_order(&self) -> u64 {
        self.omitted_out_of_order
    }
}
