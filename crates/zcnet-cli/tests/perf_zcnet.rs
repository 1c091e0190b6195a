//! zcnet perf against itself over loopback: every byte sent is received and both sides report
//! the same counts, in every direction, with -t, -n, -k, -P, and the seeded pattern checked.

mod perf_common;

use std::time::Duration;

use perf_common::{assert_clean, run_pair, sum_bytes, zcnet_perf, End, Net};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(30);

/// A zcnet client against a zcnet server (-1 -J); returns (client doc, server doc).
fn pair(client_args: &[&str], server_args: &[&str]) -> (Value, Value) {
    let (c, s) = run_pair(
        Net::Loopback,
        End::Zcnet,
        End::Zcnet,
        client_args,
        server_args,
    );
    assert_clean(&c, "client");
    assert_clean(&s, "server");
    (c, s)
}

/// Both directions' sums agree, are exact, and match the data paths' own counts.
fn exact(c: &Value, s: &Value, keys: &[&str]) -> u64 {
    let mut total = 0;
    for key in keys {
        let sent = sum_bytes(c, &format!("sum_sent{key}"));
        assert!(sent > 0, "nothing moved ({key})");
        for doc in [c, s] {
            assert_eq!(sum_bytes(doc, &format!("sum_sent{key}")), sent);
            assert_eq!(sum_bytes(doc, &format!("sum_received{key}")), sent);
        }
        total += sent;
    }
    let moved = |doc: &Value, dir: &str| doc["end"]["zerocopy"][dir]["bytes"].as_u64().unwrap_or(0);
    assert_eq!(moved(c, "tx") + moved(c, "rx"), total, "client data path");
    assert_eq!(moved(s, "tx") + moved(s, "rx"), total, "server data path");
    // Each side shows the other's account, as the other printed it.
    let (cz, sz) = (&c["end"]["zerocopy"], &s["end"]["zerocopy"]);
    for dir in ["tx", "rx"] {
        assert_eq!(
            cz["remote"][dir], sz[dir],
            "client's view of the server's {dir}"
        );
        assert_eq!(
            sz["remote"][dir], cz[dir],
            "server's view of the client's {dir}"
        );
    }
    total
}

#[zcnet_testkit::test]
fn parallel_timed() {
    let (c, s) = pair(&["-t", "1", "-P", "2"], &[]);
    exact(&c, &s, &[""]);
    assert_eq!(c["end"]["streams"].as_array().map(Vec::len), Some(2));
    assert!(!c["intervals"].as_array().is_none_or(Vec::is_empty));
}

/// A paced stream's time runs to the end of the test, as iperf3 counts it, not to its last
/// block: at -b 1M with 128 KiB blocks over 2 s the last block leaves about 1 s in, and a rate
/// over that second would be twice the real one.
#[zcnet_testkit::test]
fn a_paced_streams_time_runs_to_the_end_of_the_test() {
    let (c, s) = pair(&["-t", "2", "-b", "1M", "-l", "128K"], &[]);
    for (doc, side) in [(&c, "client"), (&s, "server")] {
        for sum in ["sum_sent", "sum_received"] {
            let secs = doc["end"][sum]["seconds"].as_f64().expect("seconds");
            assert!(
                (1.9..2.6).contains(&secs),
                "{side} {sum}: {secs} s for a 2 s test"
            );
        }
    }
    let bits = c["end"]["sum_sent"]["bits_per_second"]
        .as_f64()
        .expect("bits_per_second");
    assert!(bits < 1.6e6, "{bits} bit/s for -b 1M");
}

#[zcnet_testkit::test]
fn reverse_bytes_exactly() {
    let (c, s) = pair(&["-n", "20000001", "-R", "-P", "3"], &[]);
    assert_eq!(exact(&c, &s, &[""]), 20_000_001);
}

#[zcnet_testkit::test]
fn bidir_blocks_verified() {
    let (c, s) = pair(&["-k", "200", "-l", "10000", "--bidir", "--verify"], &[]);
    exact(&c, &s, &["", "_bidir_reverse"]);
    // Each side sends at most 200 blocks; the test ends (as iperf3's) when either direction
    // has moved them all.
    let up = sum_bytes(&c, "sum_sent");
    let down = sum_bytes(&c, "sum_sent_bidir_reverse");
    assert!(
        up.max(down) == 200 * 10_000 && up.min(down) <= 200 * 10_000,
        "{up} {down}"
    );
}

#[zcnet_testkit::test]
fn low_water_marks_are_set_reported_and_do_not_hold_back_the_tail() {
    // 3,000,001 bytes is no multiple of either mark: the tail of each stream sits below the
    // receive mark until draining lowers it, so an exact count shows it was not held back.
    let (c, s) = pair(
        &[
            "-n",
            "3000001",
            "-P",
            "2",
            "--notsent-lowat",
            "64K",
            "--rcvlowat",
            "off",
        ],
        &["--rcvlowat", "200K", "--notsent-lowat", "off"],
    );
    assert_eq!(exact(&c, &s, &[""]), 3_000_001);
    // What the kernel holds, read back from each socket.
    let (ctx, srx) = (&c["end"]["zerocopy"]["tx"], &s["end"]["zerocopy"]["rx"]);
    assert_eq!(ctx["notsent_lowat"], 65536, "{ctx}");
    assert_eq!(srx["rcvlowat"], 200 * 1024, "{srx}");
    // The reverse direction: each side's own flags, `off` leaves the option alone.
    let (c, s) = pair(
        &["-n", "1000001", "-R", "--rcvlowat", "off"],
        &["--notsent-lowat", "off"],
    );
    assert_eq!(exact(&c, &s, &[""]), 1_000_001);
    assert_eq!(c["end"]["zerocopy"]["rx"]["rcvlowat"], Value::Null);
    assert_eq!(s["end"]["zerocopy"]["tx"]["notsent_lowat"], Value::Null);
}

#[zcnet_testkit::test]
fn copy_and_msg_zerocopy_modes_count_the_same() {
    let (c, s) = pair(
        &["-n", "8M", "--tx", "msg-zerocopy", "--rx", "copy"],
        &["--tx", "copy"],
    );
    exact(&c, &s, &[""]);
    let tx = &c["end"]["zerocopy"]["tx"];
    assert_eq!(tx["requested"], "msg-zerocopy");
    // Every byte is accounted for by the kernel: zero-copy or copied, none left unconfirmed.
    let confirmed =
        tx["zerocopy_bytes"].as_u64().unwrap_or(0) + tx["copied_bytes"].as_u64().unwrap_or(0);
    assert_eq!(confirmed, 8 << 20, "{tx}");
    assert!(tx["notifications"].as_u64().unwrap_or(0) > 0, "{tx}");
    assert_eq!(s["end"]["zerocopy"]["rx"]["mechanism"], "uring");
}

#[zcnet_testkit::test]
fn verify_catches_a_sender_without_the_pattern() {
    // The server sends its own payload (it is told to use the pattern only by a zcnet client
    // with --verify); a client that checks a stream it did not ask the pattern for fails.
    let (mut server, port) = perf_common::zcnet_server(&["-1"]);
    let port = port.to_string();
    let args = [
        "-c",
        "127.0.0.1",
        "-p",
        &port,
        "-n",
        "1M",
        "-R",
        "--verify",
        "--seed",
        "3",
    ];
    let (client, st) = perf_common::run(&zcnet_perf(), &args, LIMIT);
    assert!(
        st.success(),
        "with the pattern on both ends: {}",
        client.stderr()
    );
    assert!(server.wait(LIMIT).success(), "{}", server.stderr());
    // Against iperf3's payload (any non-zcnet sender), the check fails with the reason.
    let iperf3 = need_iperf3!();
    let (mut server, port) = perf_common::iperf3_server(&iperf3, &["-1"]);
    let port = port.to_string();
    let args = ["-c", "127.0.0.1", "-p", &port, "-n", "1M", "-R", "--verify"];
    let (client, st) = perf_common::run(&zcnet_perf(), &args, LIMIT);
    assert_eq!(st.code(), Some(1), "{}", client.stdout());
    assert!(
        client.stderr().contains("payload mismatch"),
        "{}",
        client.stderr()
    );
    // The client ended the test (CLIENT_TERMINATE): how iperf3 exits is its business.
    let _ = server.wait(LIMIT);
}

#[zcnet_testkit::test]
fn unsupported_receive_mode_is_refused_with_the_reason() {
    let (client, st) = perf_common::run(
        &zcnet_perf(),
        &[
            "-c",
            "127.0.0.1",
            "-p",
            "9",
            "-R",
            "--rx",
            "zcrx",
            "--iface",
            "lo",
        ],
        LIMIT,
    );
    assert_eq!(st.code(), Some(1), "{}", client.stdout());
    let err = client.stderr();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("zcrx"), "{err}");
}

zcnet_testkit::main!();
