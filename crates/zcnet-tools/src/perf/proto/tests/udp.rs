use super::super::udp::{
    connect_reply_budget, is_connect_reply, LEGACY_UDP_CONNECT_MSG, LEGACY_UDP_CONNECT_REPLY,
    UDP_CONNECT_MSG, UDP_CONNECT_REPLY,
};
use super::super::{ProtoError, Timestamp, UdpHeader, UdpRecvStats};

#[zcnet_testkit::test]
fn connect_constants_match_iperf_h_on_both_byte_orders() {
    // iperf.h: little-endian hosts write 0x36373839 / 0x39383736 / 987654321 in host order,
    // big-endian hosts 0x39383736 / 0x36373839 / 0xb168de3a; the wire bytes agree.
    assert_eq!(UDP_CONNECT_MSG, 0x3637_3839u32.to_le_bytes());
    assert_eq!(UDP_CONNECT_MSG, 0x3938_3736u32.to_be_bytes());
    assert_eq!(UDP_CONNECT_REPLY, 0x3938_3736u32.to_le_bytes());
    assert_eq!(UDP_CONNECT_REPLY, 0x3637_3839u32.to_be_bytes());
    assert_eq!(LEGACY_UDP_CONNECT_REPLY, 987_654_321u32.to_le_bytes());
    assert_eq!(LEGACY_UDP_CONNECT_REPLY, 0xb168_de3au32.to_be_bytes());
    assert_eq!(LEGACY_UDP_CONNECT_REPLY, [0xb1, 0x68, 0xde, 0x3a]);
    assert_eq!(LEGACY_UDP_CONNECT_MSG, [0x15, 0xcd, 0x5b, 0x07]);
    assert_eq!(&UDP_CONNECT_MSG, b"9876");
    assert_eq!(&UDP_CONNECT_REPLY, b"6789");
}

#[zcnet_testkit::test]
fn recognises_replies() {
    assert!(is_connect_reply(&UDP_CONNECT_REPLY));
    assert!(is_connect_reply(&LEGACY_UDP_CONNECT_REPLY));
    assert!(is_connect_reply(&[0x3a, 0xde, 0x68, 0xb1]));
    assert!(is_connect_reply(b"6789 and more"));
    assert!(!is_connect_reply(&UDP_CONNECT_MSG));
    assert!(!is_connect_reply(b"678"));
    assert!(!is_connect_reply(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1]));
}

#[zcnet_testkit::test]
fn reply_budget_as_iperf_udp_connect() {
    assert_eq!(connect_reply_budget(false, 1400), 4);
    assert_eq!(connect_reply_budget(true, 1400), 4 + 2 * 1400);
}

#[zcnet_testkit::test]
fn header_bytes_32_bit() {
    let h = UdpHeader {
        sent: Timestamp {
            secs: 0x0102_0304,
            usecs: 999_999,
        },
        packet_count: (1 << 32) + 5,
    };
    let mut buf = [0xaau8; 20];
    assert_eq!(h.write(false, &mut buf), Ok(12));
    assert_eq!(
        &buf[..12],
        &[1, 2, 3, 4, 0x00, 0x0f, 0x42, 0x3f, 0, 0, 0, 5]
    );
    assert_eq!(buf[12], 0xaa, "payload untouched");
    let back = UdpHeader::read(&buf, false).unwrap();
    assert_eq!(back.packet_count, 5, "32-bit counters truncate like htonl");
    assert_eq!(back.sent, h.sent);
}

#[zcnet_testkit::test]
fn header_bytes_64_bit() {
    let h = UdpHeader {
        sent: Timestamp { secs: 7, usecs: 8 },
        packet_count: 0x0102_0304_0506_0708,
    };
    let mut buf = [0u8; 16];
    assert_eq!(h.write(true, &mut buf), Ok(16));
    assert_eq!(buf, [0, 0, 0, 7, 0, 0, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(UdpHeader::read(&buf, true), Ok(h));
}

#[zcnet_testkit::test]
fn short_datagrams_are_errors() {
    let mut small = [0u8; 15];
    let h = UdpHeader {
        sent: Timestamp::default(),
        packet_count: 1,
    };
    assert_eq!(
        h.write(true, &mut small),
        Err(ProtoError::ShortDatagram { need: 16, got: 15 })
    );
    assert_eq!(
        UdpHeader::read(&small, true),
        Err(ProtoError::ShortDatagram { need: 16, got: 15 })
    );
    assert_eq!(
        UdpHeader::read(&small[..11], false),
        Err(ProtoError::ShortDatagram { need: 12, got: 11 })
    );
    assert!(UdpHeader::read(&small[..12], false).is_ok());
}

#[zcnet_testkit::test]
fn timestamps() {
    let t = Timestamp::from_micros(3_000_000_250);
    assert_eq!((t.secs, t.usecs), (3000, 250));
    let u = Timestamp {
        secs: 2999,
        usecs: 999_999,
    };
    assert!((t.abs_diff_secs(u) - 0.000251).abs() < 1e-12);
    assert_eq!(t.abs_diff_secs(u), u.abs_diff_secs(t));
}

#[zcnet_testkit::test]
fn loss_and_reordering_on_a_crafted_sequence() {
    let mut s = UdpRecvStats::new();
    let t = Timestamp::from_micros;
    let expect = [
        // (count, packets, errors, out of order) after each datagram, as iperf_udp_recv counts.
        (1, 1, 0, 0),
        (2, 2, 0, 0),
        (3, 3, 0, 0),
        (5, 5, 1, 0), // 4 missing
        (4, 5, 0, 1), // 4 late: out of order, no longer lost
        (6, 6, 0, 1),
        (10, 10, 3, 1), // 7, 8, 9 missing
        (7, 10, 2, 2),  // 7 late
        (7, 10, 1, 3),  // a duplicate counts as out of order too
    ];
    for (i, (count, packets, errors, ooo)) in expect.into_iter().enumerate() {
        s.on_datagram(count, t(count * 1000), t(count * 1000 + 50));
        assert_eq!(
            (s.packets(), s.errors(), s.out_of_order()),
            (packets, errors, ooo),
            "step {i}"
        );
    }
    assert_eq!(s.jitter(), 0.0, "constant transit, no jitter");
}

#[zcnet_testkit::test]
fn errors_never_go_negative() {
    let mut s = UdpRecvStats::new();
    let t = Timestamp::default();
    s.on_datagram(2, t, t);
    s.on_datagram(1, t, t);
    s.on_datagram(1, t, t);
    assert_eq!((s.errors(), s.out_of_order()), (0, 2));
}

#[zcnet_testkit::test]
fn jitter_follows_rfc_1889() {
    let mut s = UdpRecvStats::new();
    let t = Timestamp::from_micros;
    // Sent every 1 ms; transits 100, 100, 300, 200 µs.
    for (i, transit) in [100u64, 100, 300, 200].into_iter().enumerate() {
        let sent = i as u64 * 1000;
        s.on_datagram(i as u64 + 1, t(sent), t(sent + transit));
    }
    // D = 0, 0, 200, 100 µs; J += (|D| - J) / 16.
    let j3 = 200e-6 / 16.0;
    let j4 = j3 + (100e-6 - j3) / 16.0;
    assert!((s.jitter() - j4).abs() < 1e-12, "{} vs {j4}", s.jitter());
}

#[zcnet_testkit::test]
fn jitter_ignores_a_clock_offset_either_way() {
    for offset in [5_000_000i64, -5_000_000] {
        let mut s = UdpRecvStats::new();
        for i in 1..=20u64 {
            let sent = 10_000_000 + i * 1000;
            let arrival = (sent as i64 + offset) as u64;
            s.on_datagram(
                i,
                Timestamp::from_micros(sent),
                Timestamp::from_micros(arrival),
            );
        }
        assert!(s.jitter().abs() < 1e-12, "offset {offset}: {}", s.jitter());
    }
}

#[zcnet_testkit::test]
fn end_omit_snapshots_and_restarts_jitter() {
    let mut s = UdpRecvStats::new();
    let t = Timestamp::from_micros;
    s.on_datagram(1, t(0), t(100));
    s.on_datagram(3, t(2000), t(2500)); // one lost, transit jumps
    assert!(s.jitter() > 0.0);
    s.end_omit();
    assert_eq!(
        (
            s.omitted_packets(),
            s.omitted_errors(),
            s.omitted_out_of_order()
        ),
        (3, 1, 0)
    );
    assert_eq!(s.jitter(), 0.0);
    // The first datagram after the omit period starts the transit afresh: no jump counted.
    s.on_datagram(4, t(3000), t(3100));
    assert_eq!(s.jitter(), 0.0);
    assert_eq!((s.packets(), s.errors()), (4, 1));
}
