//! `TCP_INFO` as the kernel writes it (`TcpInfo::parse`), at any length, and a series of
//! readings (`TcpInfoSeries`): fields are present exactly when the kernel's length covers them,
//! read from their uapi offsets, and the series' retransmits, extremes and mean are those of the
//! readings.

use crate::input::Input;
use zcnet_core::tcp_info::{TcpInfo, TcpInfoSeries, MIN_LEN};

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    b.get(off..off + 4)
        .map(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]))
}

fn check(b: &[u8]) -> Option<TcpInfo> {
    let i = TcpInfo::parse(b);
    let Some(i) = i else {
        assert!(b.len() < MIN_LEN, "a full-length reading refused");
        return None;
    };
    assert!(b.len() >= MIN_LEN);
    assert_eq!(i.state, b[0]);
    assert_eq!(Some(i.snd_mss), u32_at(b, 16));
    assert_eq!(Some(i.total_retrans), u32_at(b, 100));
    assert_eq!(i.bytes_acked.is_some(), b.len() >= 128);
    assert_eq!(i.reord_seen, u32_at(b, 220));
    assert_eq!(i.snd_wnd, u32_at(b, 228));
    assert_eq!(
        i.snd_cwnd_bytes(),
        u64::from(i.snd_cwnd) * u64::from(i.snd_mss)
    );
    Some(i)
}

pub fn run(data: &[u8]) {
    check(data);
    let mut inp = Input::new(data);
    let mut s = TcpInfoSeries::default();
    let mut first = None::<u32>;
    let (mut sum_intervals, mut n, mut rtt_sum) = (0u64, 0u64, 0u128);
    let (mut max_rtt, mut min_rtt, mut max_cwnd, mut max_wnd) = (0u32, 0u32, 0u64, 0u32);
    let mut buf = [0u8; 256];
    while !inp.is_empty() {
        // A reading: its length, then patches of its bytes over the previous reading (so that
        // the counters move as a connection's would, or jump).
        let len = inp.pick(&[MIN_LEN, 128, 224, 232, 256, 0]);
        let len = if len == 0 { inp.index(257) } else { len };
        for _ in 0..inp.index(4) {
            let at = inp.pick(&[0usize, 16, 68, 80, 100, 100, 228, 228]) + inp.index(4);
            buf[at] = buf[at].wrapping_add(inp.u8());
        }
        let Some(i) = check(&buf[..len]) else {
            continue;
        };
        sum_intervals += u64::from(s.observe(i));
        n += 1;
        let f = *first.get_or_insert(i.total_retrans);
        let last = i.total_retrans;
        rtt_sum += u128::from(i.rtt_us);
        max_rtt = max_rtt.max(i.rtt_us);
        if i.rtt_us > 0 && (min_rtt == 0 || i.rtt_us < min_rtt) {
            min_rtt = i.rtt_us;
        }
        max_cwnd = max_cwnd.max(i.snd_cwnd_bytes());
        max_wnd = max_wnd.max(i.snd_wnd.unwrap_or(0));
        assert_eq!(s.retransmits(), last.saturating_sub(f));
        assert!(sum_intervals >= u64::from(s.retransmits()));
        assert_eq!((s.max_rtt, s.min_rtt), (max_rtt, min_rtt));
        assert_eq!((s.max_snd_cwnd, s.max_snd_wnd), (max_cwnd, max_wnd));
        assert_eq!(u128::from(s.mean_rtt()), rtt_sum / u128::from(n));
        assert!(min_rtt <= max_rtt && s.mean_rtt() <= u64::from(max_rtt));
        assert_eq!(s.last, Some(i));
        assert!(s.seen());
    }
}
