//! `struct tcp_info` (getsockopt `TCP_INFO`), read from the bytes the kernel wrote.
//!
//! The layout is the kernel's include/uapi/linux/tcp.h: eight `u8` fields, then `u32`s and
//! `u64`s in declaration order, native endian. The struct only ever grows at its end
//! (tcpi_snd_wnd arrived in 5.4, tcpi_rcv_wnd and tcpi_rehash later), and the kernel copies
//! `min(its size, the caller's length)` bytes, so a field past the returned length is absent
//! (`None`), never read from stale memory.
//!
//! What iperf3 reports per sending stream comes from here (src/tcp_info.c, Linux branch):
//! retransmits are deltas of `tcpi_total_retrans`, the congestion window in bytes is
//! `tcpi_snd_cwnd * tcpi_snd_mss`, `rtt`/`rttvar` are `tcpi_rtt`/`tcpi_rttvar` in
//! microseconds, `pmtu` is `tcpi_pmtu`, the send window is `tcpi_snd_wnd` and reordering
//! events are `tcpi_reord_seen`.

/// The fields zcnet reads. Offsets are the uapi struct's (x86-64 and aarch64 agree: no field
/// needs more than natural alignment and the `u64`s start 8-aligned).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpInfo {
    /// `tcpi_state` (1 = ESTABLISHED).
    pub state: u8,
    /// `tcpi_snd_mss`: bytes per segment.
    pub snd_mss: u32,
    /// `tcpi_pmtu`: the path MTU.
    pub pmtu: u32,
    /// `tcpi_rtt`: smoothed round-trip time, microseconds.
    pub rtt_us: u32,
    /// `tcpi_rttvar`: its variance, microseconds.
    pub rttvar_us: u32,
    /// `tcpi_snd_cwnd`: the congestion window in segments.
    pub snd_cwnd: u32,
    /// `tcpi_total_retrans`: segments retransmitted over the connection's life.
    pub total_retrans: u32,
    /// `tcpi_bytes_acked` (4.1+).
    pub bytes_acked: Option<u64>,
    /// `tcpi_reord_seen`: reordering events (4.19+).
    pub reord_seen: Option<u32>,
    /// `tcpi_snd_wnd`: the peer's advertised receive window, bytes (5.4+).
    pub snd_wnd: Option<u32>,
}

const STATE: usize = 0;
const SND_MSS: usize = 16;
const PMTU: usize = 60;
const RTT: usize = 68;
const RTTVAR: usize = 72;
const SND_CWND: usize = 80;
const TOTAL_RETRANS: usize = 100;
const BYTES_ACKED: usize = 120;
const REORD_SEEN: usize = 220;
const SND_WND: usize = 228;

/// The length up to and including `tcpi_total_retrans`: what every kernel zcnet runs on
/// (6.2+) returns, and the least [`TcpInfo::parse`] accepts.
pub const MIN_LEN: usize = TOTAL_RETRANS + 4;

/// A buffer long enough for every field read here (and the few after them).
pub const BUF_LEN: usize = 256;

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    let bytes = b.get(off..off + 4)?;
    Some(u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    let bytes = b.get(off..off + 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(bytes);
    Some(u64::from_ne_bytes(a))
}

impl TcpInfo {
    /// Reads the fields from the first `len` bytes the kernel wrote (`b` is cut to them by the
    /// caller); `None` when they end before `tcpi_total_retrans`.
    pub fn parse(b: &[u8]) -> Option<TcpInfo> {
        if b.len() < MIN_LEN {
            return None;
        }
        Some(TcpInfo {
            state: b[STATE],
            snd_mss: u32_at(b, SND_MSS)?,
            pmtu: u32_at(b, PMTU)?,
            rtt_us: u32_at(b, RTT)?,
            rttvar_us: u32_at(b, RTTVAR)?,
            snd_cwnd: u32_at(b, SND_CWND)?,
            total_retrans: u32_at(b, TOTAL_RETRANS)?,
            bytes_acked: u64_at(b, BYTES_ACKED),
            reord_seen: u32_at(b, REORD_SEEN),
            snd_wnd: u32_at(b, SND_WND),
        })
    }

    /// Whether the connection is established (`TCP_ESTABLISHED`, 1, include/net/tcp_states.h):
    /// not reset, closed or closing.
    pub fn is_established(&self) -> bool {
        self.state == 1
    }

    /// The congestion window in bytes, as iperf3 reports it (`snd_cwnd` × `snd_mss`).
    pub fn snd_cwnd_bytes(&self) -> u64 {
        u64::from(self.snd_cwnd) * u64::from(self.snd_mss)
    }
}

/// What one sending stream's TCP_INFO said over a test: the first reading (retransmits count
/// from it), the latest, and iperf3's per-stream extremes (`max_snd_cwnd`, `max_snd_wnd`,
/// `max_rtt`, `min_rtt`, `mean_rtt`), fed one reading per interval and one at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpInfoSeries {
    first_retrans: Option<u32>,
    /// Retransmits counted when the last interval ended.
    interval_base: u32,
    /// The latest reading.
    pub last: Option<TcpInfo>,
    /// Largest congestion window seen, bytes.
    pub max_snd_cwnd: u64,
    /// Largest send window seen, bytes.
    pub max_snd_wnd: u32,
    /// Largest smoothed RTT seen, µs.
    pub max_rtt: u32,
    /// Smallest non-zero smoothed RTT seen, µs (0 when none).
    pub min_rtt: u32,
    rtt_sum: u64,
    rtt_count: u64,
}

impl TcpInfoSeries {
    /// Takes a reading; returns the retransmits since the previous call (the interval's).
    pub fn observe(&mut self, info: TcpInfo) -> u32 {
        let first = *self.first_retrans.get_or_insert(info.total_retrans);
        let total = info.total_retrans.saturating_sub(first);
        let interval = total.saturating_sub(self.interval_base);
        self.interval_base = total;
        self.max_snd_cwnd = self.max_snd_cwnd.max(info.snd_cwnd_bytes());
        self.max_snd_wnd = self.max_snd_wnd.max(info.snd_wnd.unwrap_or(0));
        self.max_rtt = self.max_rtt.max(info.rtt_us);
        if info.rtt_us > 0 && (self.min_rtt == 0 || info.rtt_us < self.min_rtt) {
            self.min_rtt = info.rtt_us;
        }
        self.rtt_sum += u64::from(info.rtt_us);
        self.rtt_count += 1;
        self.last = Some(info);
        interval
    }

    /// Retransmits since the first reading.
    pub fn retransmits(&self) -> u32 {
        self.interval_base
    }

    /// Mean of the smoothed RTTs read, µs (0 before any reading).
    pub fn mean_rtt(&self) -> u64 {
        self.rtt_sum.checked_div(self.rtt_count).unwrap_or(0)
    }

    /// Whether any reading was taken.
    pub fn seen(&self) -> bool {
        self.last.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put32(b: &mut [u8], off: usize, v: u32) {
        b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    }

    fn sample(len: usize) -> Vec<u8> {
        let mut b = vec![0u8; BUF_LEN];
        b[STATE] = 1;
        put32(&mut b, SND_MSS, 1448);
        put32(&mut b, PMTU, 1500);
        put32(&mut b, RTT, 250);
        put32(&mut b, RTTVAR, 40);
        put32(&mut b, SND_CWND, 10);
        put32(&mut b, TOTAL_RETRANS, 7);
        b[BYTES_ACKED..BYTES_ACKED + 8].copy_from_slice(&123_456u64.to_ne_bytes());
        put32(&mut b, REORD_SEEN, 3);
        put32(&mut b, SND_WND, 65_535);
        b.truncate(len);
        b
    }

    #[test]
    fn reads_each_field_at_its_uapi_offset() {
        let i = TcpInfo::parse(&sample(232)).expect("parse");
        assert_eq!(
            i,
            TcpInfo {
                state: 1,
                snd_mss: 1448,
                pmtu: 1500,
                rtt_us: 250,
                rttvar_us: 40,
                snd_cwnd: 10,
                total_retrans: 7,
                bytes_acked: Some(123_456),
                reord_seen: Some(3),
                snd_wnd: Some(65_535),
            }
        );
        assert_eq!(i.snd_cwnd_bytes(), 14_480);
        assert!(i.is_established());
        assert!(!TcpInfo { state: 7, ..i }.is_established(), "TCP_CLOSE");
    }

    #[test]
    fn fields_past_the_kernels_length_are_absent() {
        // A 4.19 kernel returns up to tcpi_reord_seen (224 B): no send window.
        let i = TcpInfo::parse(&sample(224)).expect("parse");
        assert_eq!((i.reord_seen, i.snd_wnd), (Some(3), None));
        let i = TcpInfo::parse(&sample(MIN_LEN)).expect("parse");
        assert_eq!(
            (i.bytes_acked, i.reord_seen, i.total_retrans),
            (None, None, 7)
        );
        assert_eq!(TcpInfo::parse(&sample(MIN_LEN - 1)), None);
    }

    #[test]
    fn a_series_counts_retransmits_per_interval_from_its_first_reading() {
        let mut s = TcpInfoSeries::default();
        let at = |retrans: u32, rtt: u32, cwnd: u32| TcpInfo {
            snd_mss: 1000,
            total_retrans: retrans,
            rtt_us: rtt,
            snd_cwnd: cwnd,
            snd_wnd: Some(cwnd * 10),
            ..TcpInfo::default()
        };
        // The connection had 5 retransmits before the test: they are not the test's.
        assert_eq!(s.observe(at(5, 100, 10)), 0);
        assert_eq!(s.observe(at(9, 300, 40)), 4);
        assert_eq!(s.observe(at(9, 200, 20)), 0);
        assert_eq!(s.observe(at(12, 0, 20)), 3);
        assert_eq!(s.retransmits(), 7);
        assert_eq!((s.max_snd_cwnd, s.max_snd_wnd), (40_000, 400));
        assert_eq!((s.max_rtt, s.min_rtt, s.mean_rtt()), (300, 100, 150));
        assert!(s.seen());
        assert_eq!(TcpInfoSeries::default().mean_rtt(), 0);
    }
}
