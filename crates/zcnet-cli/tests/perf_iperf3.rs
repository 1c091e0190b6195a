//! zcnet perf against an unmodified iperf3, both ways, over loopback: the protocol works with
//! -P, -R, --bidir, -n and -t, iperf3's own -J parses with no "error", and the byte counts
//! agree. A receiving zcnet reads every byte the peer sent (it drains to the peer's count or
//! to the end of the stream), so its count equals the sender's exactly; iperf3 as receiver
//! stops reading at TEST_END and leaves what is still in its socket unread, so its count is
//! at most the sender's — and each side's report of the other's count is that side's own.
//! The `veth_` tests run the same checks between lab namespaces (root), the client in one, the
//! server in the other.

mod perf_common;

use std::time::Duration;

use perf_common::{assert_clean, assert_close, run_pair, sum_bytes, End, Iperf3Peer, Net};

const LIMIT: Duration = Duration::from_secs(30);

/// zcnet perf client against `iperf3 -s -1 -J`; returns (client doc, server doc).
fn zcnet_to_iperf3(args: &[&str]) -> (serde_json::Value, serde_json::Value) {
    zcnet_to_iperf3_on(Net::Loopback, args)
}

/// [`zcnet_to_iperf3`] over `net`.
fn zcnet_to_iperf3_on(net: Net<'_>, args: &[&str]) -> (serde_json::Value, serde_json::Value) {
    let iperf3 = need_iperf3!();
    run_pair(net, End::Zcnet, End::Iperf3(&iperf3), args, &[])
}

/// `iperf3 -c` against a zcnet perf server (-1 -J); returns (client doc, server doc).
fn iperf3_to_zcnet(args: &[&str]) -> (serde_json::Value, serde_json::Value) {
    iperf3_to_zcnet_on(Net::Loopback, args)
}

/// [`iperf3_to_zcnet`] over `net`.
fn iperf3_to_zcnet_on(net: Net<'_>, args: &[&str]) -> (serde_json::Value, serde_json::Value) {
    let iperf3 = need_iperf3!();
    run_pair(net, End::Iperf3(&iperf3), End::Zcnet, args, &[])
}

/// The sums of one direction: (sum_sent, sum_received) under `key` ("" or "_bidir_reverse").
fn sums(doc: &serde_json::Value, key: &str) -> (u64, u64) {
    (
        sum_bytes(doc, &format!("sum_sent{key}")),
        sum_bytes(doc, &format!("sum_received{key}")),
    )
}

/// Checks one direction where zcnet receives: zcnet's count is exact against what the sender
/// said it sent (within the peer's counting slack: iperf3 3.16+ counts while its threads still
/// send), and both documents agree. Before iperf3 3.11 a `--bidir` document has no per-
/// direction sums: then only zcnet's own document is checked.
fn zcnet_received(zcnet: &serde_json::Value, iperf3: &serde_json::Value, key: &str, server: bool) {
    let peer = Iperf3Peer::from_doc(iperf3);
    let slack = peer.count_slack();
    let (sent, received) = sums(zcnet, key);
    assert!(sent > 0, "nothing moved");
    assert_close(
        received,
        sent,
        slack,
        "zcnet received / iperf3 says it sent",
    );
    assert_eq!(
        zcnet["end"]["zerocopy"]["rx"]["bytes"].as_u64(),
        Some(received)
    );
    if !cross_checks(&peer, zcnet) {
        return;
    }
    let (i_sent, i_received) = sums(iperf3, key);
    assert_close(
        i_sent,
        sent,
        slack,
        "iperf3's sent count / the one it gave zcnet",
    );
    // An iperf3 server summarizes before the exchange: it does not know the client's count.
    if !server {
        assert_eq!(i_received, received, "iperf3 relays zcnet's count");
    }
}

/// Checks one direction where iperf3 receives: zcnet's count is what it handed to the
/// kernel, iperf3's is at most that, and zcnet reports iperf3's own count.
fn iperf3_received(zcnet: &serde_json::Value, iperf3: &serde_json::Value, key: &str, server: bool) {
    let peer = Iperf3Peer::from_doc(iperf3);
    let (sent, received) = sums(zcnet, key);
    assert!(sent > 0 && received > 0, "nothing moved: {sent} {received}");
    assert!(received <= sent, "iperf3 received {received} of {sent}");
    assert_eq!(zcnet["end"]["zerocopy"]["tx"]["bytes"].as_u64(), Some(sent));
    if !cross_checks(&peer, zcnet) {
        return;
    }
    let (i_sent, i_received) = sums(iperf3, key);
    let slack = peer.count_slack();
    assert_close(
        i_received,
        received,
        slack,
        "iperf3's received count / the one it gave zcnet",
    );
    // An iperf3 server summarizes before the exchange: it does not know the client's count.
    if !server {
        assert_eq!(i_sent, sent, "iperf3 relays zcnet's count");
    }
}

/// Whether iperf3's document can be compared with zcnet's: not for a `--bidir` test with
/// iperf3 before 3.11 (no per-direction sums; said once per check).
fn cross_checks(peer: &Iperf3Peer, zcnet: &serde_json::Value) -> bool {
    let bidir = zcnet["end"].get("sum_sent_bidir_reverse").is_some();
    if bidir && !peer.has_bidir_sums() {
        eprintln!(
            "NOTE: iperf3 {:?} has no per-direction --bidir sums: its document is not compared",
            peer.version
        );
        return false;
    }
    true
}

#[zcnet_testkit::test]
fn zcnet_client_to_iperf3_server_parallel() {
    let (z, i) = zcnet_to_iperf3(&["-t", "1", "-P", "4"]);
    assert_clean(&z, "zcnet");
    assert_clean(&i, "iperf3");
    assert_eq!(z["end"]["streams"].as_array().map(Vec::len), Some(4));
    iperf3_received(&z, &i, "", true);
    tcp_info_reported(&z);
}

/// A zcnet sender reads TCP_INFO as iperf3 does: each interval's sending streams carry the
/// congestion window, RTT and path MTU, the end has retransmits and the extremes.
fn tcp_info_reported(z: &serde_json::Value) {
    let iv = &z["intervals"][0]["streams"][0];
    for k in ["snd_cwnd", "rtt", "pmtu"] {
        assert!(iv[k].as_u64().is_some_and(|v| v > 0), "no {k} in {iv}");
    }
    assert!(iv["retransmits"].as_u64().is_some(), "{iv}");
    assert!(z["intervals"][0]["sum"]["retransmits"].as_u64().is_some());
    let snd = &z["end"]["streams"][0]["sender"];
    assert!(snd["retransmits"].as_u64().is_some(), "{snd}");
    assert!(snd["max_snd_cwnd"].as_u64().is_some_and(|v| v > 0), "{snd}");
    assert!(snd["max_rtt"].as_u64() >= snd["min_rtt"].as_u64(), "{snd}");
    assert!(z["end"]["sum_sent"]["retransmits"].as_u64().is_some());
}

#[zcnet_testkit::test]
fn zcnet_client_to_iperf3_server_reverse() {
    let (z, i) = zcnet_to_iperf3(&["-t", "1", "-R"]);
    assert_clean(&z, "zcnet");
    assert_clean(&i, "iperf3");
    zcnet_received(&z, &i, "", true);
}

#[zcnet_testkit::test]
fn zcnet_client_to_iperf3_server_bidir() {
    let (z, i) = zcnet_to_iperf3(&["-t", "1", "--bidir", "-P", "2"]);
    assert_clean(&z, "zcnet");
    assert_clean(&i, "iperf3");
    iperf3_received(&z, &i, "", true);
    zcnet_received(&z, &i, "_bidir_reverse", true);
}

#[zcnet_testkit::test]
fn zcnet_client_to_iperf3_server_bytes() {
    let (z, i) = zcnet_to_iperf3(&["-n", "10M", "-P", "2"]);
    assert_clean(&z, "zcnet");
    assert_clean(&i, "iperf3");
    assert_eq!(sums(&z, "").0, 10 << 20, "-n 10M sends exactly 10 MiB");
    iperf3_received(&z, &i, "", true);
}

#[zcnet_testkit::test]
fn iperf3_client_to_zcnet_server_parallel() {
    let (i, z) = iperf3_to_zcnet(&["-t", "1", "-P", "4"]);
    assert_clean(&i, "iperf3");
    assert_clean(&z, "zcnet");
    zcnet_received(&z, &i, "", false);
}

#[zcnet_testkit::test]
fn iperf3_client_to_zcnet_server_reverse() {
    let (i, z) = iperf3_to_zcnet(&["-t", "1", "-R"]);
    assert_clean(&i, "iperf3");
    assert_clean(&z, "zcnet");
    iperf3_received(&z, &i, "", false);
    tcp_info_reported(&z);
    // The zcnet server told iperf3 it has retransmit counts (sender_has_retransmits 1), and
    // iperf3 shows them.
    assert_eq!(
        i["end"]["sum_sent"]["retransmits"].as_u64(),
        z["end"]["sum_sent"]["retransmits"].as_u64()
    );
}

#[zcnet_testkit::test]
fn iperf3_client_to_zcnet_server_bidir() {
    let (i, z) = iperf3_to_zcnet(&["-t", "1", "--bidir"]);
    assert_clean(&i, "iperf3");
    assert_clean(&z, "zcnet");
    zcnet_received(&z, &i, "", false);
    iperf3_received(&z, &i, "_bidir_reverse", false);
}

#[zcnet_testkit::test]
fn iperf3_client_to_zcnet_server_bytes_reverse() {
    if let Some(v) = perf_common::iperf3().map(|p| perf_common::iperf3_version(&p)) {
        if v < (3, 10) {
            // Against an iperf3 server as well: the client counts only what it sends.
            zcnet_testkit::skip(
                zcnet_testkit::Need::Tool,
                format!("iperf3 {v:?} clients never end a -R -n test (fixed in 3.10)"),
            );
        }
    }
    let (i, z) = iperf3_to_zcnet(&["-n", "10M", "-R"]);
    assert_clean(&i, "iperf3");
    assert_clean(&z, "zcnet");
    // The server sends exactly -n bytes and the client stops once it has them all.
    assert_eq!(sums(&z, ""), (10 << 20, 10 << 20));
    assert_eq!(sums(&i, ""), (10 << 20, 10 << 20));
}

#[zcnet_testkit::test]
fn veth_zcnet_client_to_iperf3_server_parallel_and_reverse() {
    let (_lab, veth) = perf_common::veth_lab();
    let (z, i) = zcnet_to_iperf3_on(Net::Veth(&veth), &["-t", "1", "-P", "4"]);
    assert_clean(&z, "zcnet");
    assert_clean(&i, "iperf3");
    assert_eq!(z["end"]["streams"].as_array().map(Vec::len), Some(4));
    iperf3_received(&z, &i, "", true);
    let (z, i) = zcnet_to_iperf3_on(Net::Veth(&veth), &["-n", "20M", "-R"]);
    assert_clean(&z, "zcnet");
    assert_clean(&i, "iperf3");
    // The iperf3 server sends: 3.10+ checks -n before each 128 KiB write, so it may send a
    // block more; 3.9 does not stop at -n (the zcnet client ends the test once it has the
    // bytes). zcnet receives exactly what it sent.
    let peer = Iperf3Peer::from_doc(&i);
    let over = if peer.ends_reverse_counts() {
        peer.overshoot()
    } else {
        u64::MAX - (20 << 20)
    };
    let sent = sums(&z, "").0;
    assert!(((20 << 20)..=(20 << 20) + over).contains(&sent), "{sent}");
    zcnet_received(&z, &i, "", true);
}

#[zcnet_testkit::test]
fn veth_iperf3_client_to_zcnet_server_bidir_and_bytes() {
    let (_lab, veth) = perf_common::veth_lab();
    let (i, z) = iperf3_to_zcnet_on(Net::Veth(&veth), &["-t", "1", "--bidir", "-P", "2"]);
    assert_clean(&i, "iperf3");
    assert_clean(&z, "zcnet");
    zcnet_received(&z, &i, "", false);
    iperf3_received(&z, &i, "_bidir_reverse", false);
    let (i, z) = iperf3_to_zcnet_on(Net::Veth(&veth), &["-n", "20M", "-P", "4"]);
    assert_clean(&i, "iperf3");
    assert_clean(&z, "zcnet");
    // iperf3 checks -n between 128 KiB writes of each of its 4 streams, so it may send a few
    // blocks more (Iperf3Peer::overshoot); zcnet receives exactly what it sent.
    let over = Iperf3Peer::from_doc(&i).overshoot();
    let sent = sums(&z, "").0;
    assert!(((20 << 20)..=(20 << 20) + over).contains(&sent), "{sent}");
    zcnet_received(&z, &i, "", false);
}

#[zcnet_testkit::test]
fn iperf3_text_output_is_what_iperf3_prints() {
    let iperf3 = need_iperf3!();
    let (mut server, port) = perf_common::zcnet_server(&["-1"]);
    let port = port.to_string();
    let (client, st) = perf_common::run(
        &iperf3,
        &["-c", "127.0.0.1", "-p", &port, "-n", "4M"],
        LIMIT,
    );
    assert!(st.success(), "{}", client.stdout());
    assert!(server.wait(LIMIT).success(), "{}", server.stderr());
    let out = server.stdout();
    // What iperf3 says it sent, as it prints it ("4.00 MBytes"; iperf3 before 3.10 sends a
    // few blocks past -n), must be in zcnet's summary the same way.
    let theirs = client.stdout();
    let sent = theirs
        .lines()
        .find(|l| l.trim_end().ends_with("sender"))
        .and_then(|l| l.split("sec").nth(1))
        .and_then(|r| r.split("Bytes").next())
        .map(|t| format!(" sec  {}Bytes ", t.trim_start()))
        .unwrap_or_else(|| panic!("no sender line in iperf3's output:\n{theirs}"));
    if perf_common::iperf3_version(&iperf3) >= (3, 10) {
        assert_eq!(sent, " sec  4.00 MBytes ", "-n 4M sends exactly 4 MiB");
    }
    for want in [
        "Server listening on ",
        "Accepted connection from 127.0.0.1, port ",
        "[ ID] Interval           Transfer     Bitrate\n",
        "- - - - - - - - - - - - - - - - - - - - - - - - -\n",
        sent.as_str(),
        "receiver\n",
    ] {
        assert!(out.contains(want), "no {want:?} in:\n{out}");
    }
}

zcnet_testkit::main!();
