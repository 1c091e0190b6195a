use super::*;

#[zcnet_testkit::test]
fn percentiles_are_nearest_rank_and_rates_use_one_direction() {
    let r = ClientReport {
        size: 65536,
        requests: 200,
        seconds: 2.0,
        latencies_ns: (1..=100).map(|i| i * 1000).collect(),
        ..ClientReport::default()
    };
    assert_eq!(r.percentile_us(50.0), Some(50.0));
    assert_eq!(r.percentile_us(99.0), Some(99.0));
    assert_eq!(r.percentile_us(100.0), Some(100.0));
    assert_eq!(r.percentile_us(0.0), Some(1.0));
    assert_eq!(r.qps(), 100.0);
    assert!((r.gbps() - 100.0 * 65536.0 * 8.0 / 1e9).abs() < 1e-12);
    assert_eq!(ClientReport::default().percentile_us(50.0), None);
    assert_eq!(ClientReport::default().qps(), 0.0);
}

#[zcnet_testkit::test]
fn unsent_tails_are_queued_from_the_first_untaken_byte() {
    let (a, b, c): (&[u8], &[u8], &[u8]) = (b"abcd", b"", b"efg");
    let mut out = b"old".to_vec();
    assert_eq!(queue_unsent(&[a, b, c], 2, &mut out), 5);
    assert_eq!(out, b"oldcdefg");
    let mut out = Vec::new();
    assert_eq!(queue_unsent(&[a, b, c], 4, &mut out), 3);
    assert_eq!(out, b"efg");
    assert_eq!(queue_unsent(&[a, b, c], 7, &mut out), 0);
    assert_eq!(queue_unsent(&[a, c], usize::MAX, &mut out), 0);
    assert_eq!(out, b"efg");
}

#[zcnet_testkit::test]
fn responses_are_checked_where_the_check_looks() {
    let req: Vec<u8> = (0..64u8).collect();
    let full = Check::Full;
    let cheap = Check::Cheap;
    assert_eq!(
        check_response(&req, 64, 0, &req[..64], full),
        ResponseCheck::Match { checked: 64 }
    );
    // Cheap compares only the first and last 16 bytes of the request.
    assert_eq!(
        check_response(&req, 64, 10, &req[10..50], cheap),
        ResponseCheck::Match { checked: 6 + 2 }
    );
    let mut bad = req[10..50].to_vec();
    bad[20] ^= 1; // request byte 30: not looked at by Cheap
    assert_eq!(
        check_response(&req, 64, 10, &bad, cheap),
        ResponseCheck::Match { checked: 8 }
    );
    assert_eq!(
        check_response(&req, 64, 10, &bad, full),
        ResponseCheck::Differs {
            checked: 40,
            at: 30
        }
    );
    bad[0] ^= 1; // request byte 10: looked at by both; the first difference is reported
    assert_eq!(
        check_response(&req, 64, 10, &bad, cheap),
        ResponseCheck::Differs { checked: 8, at: 10 }
    );
    // Past what was sent, or past the request: runs ahead.
    assert_eq!(
        check_response(&req, 20, 10, &req[10..21], full),
        ResponseCheck::RunsAhead
    );
    assert_eq!(
        check_response(&req, 100, 60, &[0; 5], full),
        ResponseCheck::RunsAhead
    );
    assert_eq!(
        check_response(&req, 64, usize::MAX, &[0], cheap),
        ResponseCheck::RunsAhead
    );
    // Requests shorter than the edges.
    let tiny = [7u8; 5];
    assert_eq!(
        check_response(&tiny, 5, 1, &[7, 7], cheap),
        ResponseCheck::Match { checked: 4 }
    );
}
