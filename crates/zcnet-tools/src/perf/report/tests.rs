use super::*;

fn layout(server: bool, bidir: bool, parallel: u32) -> Layout {
    let addr: SocketAddr = "127.0.0.1:5201".parse().unwrap();
    let n = parallel as usize * if bidir { 2 } else { 1 };
    let streams = (0..n)
        .map(|i| StreamMeta {
            id: super::super::proto::stream_id(i),
            socket: 5 + i as i32,
            sends: (i < parallel as usize) != server,
            local: addr,
            remote: addr,
        })
        .collect();
    Layout {
        server,
        bidir,
        parallel,
        udp: false,
        streams,
    }
}

#[zcnet_testkit::test]
fn interval_lines_match_iperf3() {
    let l = layout(false, false, 2);
    let iv = Interval {
        start: 0.0,
        end: 1.0,
        bytes: vec![1_490_000_000, 1_490_000_000],
        udp: vec![],
        tcp: Vec::new(),
        omitted: false,
    };
    let text = interval_text(&l, &iv, true);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "[ ID] Interval           Transfer     Bitrate");
    assert_eq!(
        lines[1],
        "[  5]   0.00-1.00   sec  1.39 GBytes  11.9 Gbits/sec                  "
    );
    assert!(lines[3].starts_with("[SUM]   0.00-1.00   sec  2.78 GBytes  23.8 Gbits/sec"));
    let again = interval_text(
        &l,
        &Interval {
            start: 1.0,
            end: 2.0,
            ..iv
        },
        false,
    );
    assert!(again.starts_with(SEPARATOR));
}

#[zcnet_testkit::test]
fn a_sender_with_tcp_info_prints_retr_and_cwnd_as_iperf3() {
    let l = layout(false, false, 2);
    let info = TcpInfo {
        snd_mss: 65_483,
        snd_cwnd: 22,
        ..TcpInfo::default()
    };
    let iv = Interval {
        start: 0.0,
        end: 1.0,
        bytes: vec![1_490_000_000, 1_490_000_000],
        udp: vec![],
        tcp: vec![
            Some(TcpSample {
                retransmits: 3,
                info,
            }),
            Some(TcpSample {
                retransmits: 4,
                info,
            }),
        ],
        omitted: false,
    };
    let text = interval_text(&l, &iv, true);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "[ ID] Interval           Transfer     Bitrate         Retr  Cwnd"
    );
    assert_eq!(
        lines[1],
        "[  5]   0.00-1.00   sec  1.39 GBytes  11.9 Gbits/sec    3   1.37 MBytes       "
    );
    assert_eq!(
        lines[3],
        "[SUM]   0.00-1.00   sec  2.78 GBytes  23.8 Gbits/sec    7             "
    );
}

#[zcnet_testkit::test]
fn bidir_groups_senders_first_on_the_client_and_receivers_on_the_server() {
    let c = layout(false, true, 1);
    assert_eq!(c.groups(), vec![true, false]);
    let iv = Interval {
        start: 0.0,
        end: 1.0,
        bytes: vec![1, 2],
        udp: vec![],
        tcp: Vec::new(),
        omitted: false,
    };
    let text = interval_text(&c, &iv, true);
    assert!(text.contains("[  5][TX-C]   0.00-1.00"), "{text}");
    assert!(text.contains("[  6][RX-C]"), "{text}");
    let s = layout(true, true, 1);
    let text = interval_text(&s, &iv, true);
    let rx = text.find("[RX-S]").unwrap();
    assert!(rx < text.find("[TX-S]").unwrap(), "{text}");
    assert!(s.reverse_channel(true) && !s.reverse_channel(false));
    assert!(c.reverse_channel(false) && !c.reverse_channel(true));
}

#[zcnet_testkit::test]
fn summary_shows_sender_and_receiver_with_retransmits_when_reported() {
    let l = layout(false, false, 1);
    let t = Totals {
        streams: vec![StreamTotals {
            sent: 2_670_000_000,
            received: 2_660_000_000,
            sender_secs: 2.0,
            receiver_secs: 2.0,
            retransmits: Some(6),
            ..StreamTotals::default()
        }],
        ..Totals::default()
    };
    let text = summary_text(&l, &t, false);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], SEPARATOR);
    assert_eq!(
        lines[1],
        "[ ID] Interval           Transfer     Bitrate         Retr"
    );
    assert_eq!(
        lines[2],
        "[  5]   0.00-2.00   sec  2.49 GBytes  10.7 Gbits/sec    6             sender"
    );
    assert_eq!(
        lines[3],
        "[  5]   0.00-2.00   sec  2.48 GBytes  10.6 Gbits/sec                  receiver"
    );
}

#[zcnet_testkit::test]
fn percentages_print_as_c_g2() {
    for (x, want) in [
        (0.0, "0"),
        (0.5, "0.5"),
        (12.34, "12"),
        (1.0, "1"),
        (99.6, "1e+02"),
        (100.0, "1e+02"),
        (0.012_34, "0.012"),
        (0.000_012, "1.2e-05"),
    ] {
        assert_eq!(g2(x), want, "{x}");
    }
}

#[zcnet_testkit::test]
fn udp_lines_match_iperf3() {
    let mut l = layout(false, false, 1);
    l.udp = true;
    let iv = Interval {
        start: 0.0,
        end: 1.0,
        bytes: vec![131_400],
        udp: vec![UdpCounts {
            packets: 90,
            lost: 0,
            jitter: 0.0,
        }],
        tcp: Vec::new(),
        omitted: false,
    };
    let text = interval_text(&l, &iv, true);
    assert_eq!(
        text,
        "[ ID] Interval           Transfer     Bitrate         Total Datagrams\n\
         [  5]   0.00-1.00   sec   128 KBytes  1.05 Mbits/sec  90  \n"
    );
    let t = Totals {
        streams: vec![StreamTotals {
            sent: 131_400,
            received: 129_940,
            sender_secs: 1.0,
            receiver_secs: 1.0,
            packets_sent: 90,
            received_udp: UdpCounts {
                packets: 90,
                lost: 1,
                jitter: 0.000_012,
            },
            ..StreamTotals::default()
        }],
        ..Totals::default()
    };
    let text = summary_text(&l, &t, false);
    assert!(text.contains("sec  0.000 ms  0/90 (0%)  sender"), "{text}");
    assert!(
        text.contains("sec  0.012 ms  1/90 (1.1%)  receiver"),
        "{text}"
    );
}

#[zcnet_testkit::test]
fn cpu_line_is_report_cpu() {
    let l = layout(true, false, 1);
    let t = Totals {
        cpu: CpuUtil {
            total: 49.25,
            user: 0.7,
            system: 48.55,
        },
        ..Totals::default()
    };
    assert_eq!(
        cpu_lines(&l, &t),
        ["CPU Utilization: local/receiver 49.2% (0.7%u/48.5%s), remote/sender 0.0% (0.0%u/0.0%s)"]
    );
}
