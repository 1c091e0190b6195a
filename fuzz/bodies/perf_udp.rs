//! `zcnet perf`'s small wire pieces: the 37-byte cookie, the one-byte states, the UDP
//! handshake and datagram header, and the receiver's loss/jitter statistics fed arbitrary
//! datagram sequences (counts out of order, duplicated, wrapping clocks).

use crate::input::Input;
use zcnet_tools::perf::proto::udp::{connect_reply_budget, is_connect_reply};
use zcnet_tools::perf::proto::{
    Cookie, State, Timestamp, UdpHeader, UdpRecvStats, COOKIE_ALPHABET, COOKIE_SIZE,
};

pub fn run(data: &[u8]) {
    cookie(data);
    for &b in data.iter().take(64) {
        match State::from_byte(b) {
            Ok(s) => assert_eq!(s.to_byte(), b),
            Err(_) => assert!(State::ALL.iter().all(|s| s.to_byte() != b)),
        }
    }
    let _ = is_connect_reply(data);
    header(data);
    let mut inp = Input::new(data);
    let _ = connect_reply_budget(inp.bool(), inp.u32());
    stats(&mut inp);
}

fn cookie(data: &[u8]) {
    let valid = data.len() == COOKIE_SIZE
        && data[COOKIE_SIZE - 1] == 0
        && data[..COOKIE_SIZE - 1]
            .iter()
            .all(|b| COOKIE_ALPHABET.contains(b));
    match Cookie::parse(data) {
        Ok(c) => {
            assert!(valid);
            assert_eq!(c.as_bytes().as_slice(), data);
            assert_eq!(c.as_str().len(), COOKIE_SIZE - 1);
            assert_eq!(c.to_string(), c.as_str());
            assert!(c.matches(data));
        }
        Err(_) => assert!(!valid, "a valid cookie refused"),
    }
    // Whatever random bytes make a cookie, it parses.
    let mut random = [0u8; COOKIE_SIZE - 1];
    for (r, d) in random.iter_mut().zip(data) {
        *r = *d;
    }
    let c = Cookie::from_random(&random);
    assert_eq!(Cookie::parse(c.as_bytes()).ok(), Some(c));
    assert_eq!(c.matches(data), data == c.as_bytes().as_slice());
}

fn header(data: &[u8]) {
    for wide in [false, true] {
        match UdpHeader::read(data, wide) {
            Ok(h) => {
                let n = UdpHeader::len(wide);
                assert!(data.len() >= n);
                let mut buf = vec![0u8; n];
                assert_eq!(h.write(wide, &mut buf).ok(), Some(n));
                assert_eq!(buf, data[..n], "header does not write back as read");
            }
            Err(_) => assert!(data.len() < UdpHeader::len(wide)),
        }
    }
}

fn stats(inp: &mut Input<'_>) {
    let mut s = UdpRecvStats::new();
    let (mut max, mut out_of_order, mut gaps) = (0u64, 0u64, 0u128);
    let mut max_transit_change = 0f64;
    let mut transits: Vec<f64> = Vec::new();
    while !inp.is_empty() {
        let op = inp.u8();
        if op == 0xff {
            s.end_omit();
            assert_eq!(s.omitted_packets(), s.packets());
            assert_eq!(s.omitted_errors(), s.errors());
            assert_eq!(s.omitted_out_of_order(), s.out_of_order());
            assert_eq!(s.jitter(), 0.0);
            transits.clear();
            max_transit_change = 0.0;
            continue;
        }
        // Mostly counts near the highest seen (the interesting part), sometimes anything.
        let count = match op % 4 {
            0 => inp.u64(),
            1 => max.wrapping_add(1),
            2 => max.wrapping_add(u64::from(inp.u8())),
            _ => max.saturating_sub(u64::from(inp.u8())),
        };
        let sent = Timestamp {
            secs: inp.u32(),
            usecs: inp.u32(),
        };
        let arrival = if op & 0x80 != 0 {
            Timestamp::from_micros(inp.u64())
        } else {
            Timestamp {
                secs: sent.secs.wrapping_add(u32::from(inp.u8() % 3)),
                usecs: inp.u32() % 1_000_000,
            }
        };
        // The header carries the count; a count read back is the count written.
        let mut buf = [0u8; 16];
        let h = UdpHeader {
            sent,
            packet_count: count,
        };
        h.write(true, &mut buf).expect("16 bytes");
        assert_eq!(UdpHeader::read(&buf, true).ok(), Some(h));
        s.on_datagram(count, sent, arrival);
        if count > max {
            gaps += u128::from(count - max - 1);
            max = count;
        } else {
            out_of_order += 1;
        }
        let transit = arrival.abs_diff_secs(sent);
        assert!(transit.is_finite() && transit >= 0.0);
        if let Some(prev) = transits.last() {
            max_transit_change = max_transit_change.max((transit - prev).abs());
        }
        transits.push(transit);
        assert_eq!(s.packets(), max, "packets is the highest count seen");
        assert_eq!(s.out_of_order(), out_of_order);
        assert!(s.errors() >= 0, "negative loss");
        assert!(s.errors() as u128 <= gaps, "more lost than the gaps");
        let j = s.jitter();
        assert!(j.is_finite() && j >= 0.0 && j <= max_transit_change * (1.0 + 1e-9) + 1e-12);
    }
}
