//! UDP tests over loopback: iperf3's handshake and datagram header both ways, datagram counts
//! that agree between the two ends, and zcnet's sender with UDP GSO.

mod common;

use std::time::Duration;

use common::{assert_clean, json, zcnet_perf, Net};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(30);

fn num(doc: &Value, path: &[&str]) -> u64 {
    let mut v = doc;
    for k in path {
        v = &v[*k];
    }
    v.as_u64().unwrap_or_else(|| panic!("no {path:?} in {doc}"))
}

/// The receiving end's view is consistent: every datagram it counts is either received (its
/// bytes) or lost, and it never counts more than were sent.
fn consistent(doc: &Value, len: u64, sent_packets: u64) {
    let r = &doc["end"]["sum_received"];
    let (packets, lost, bytes) = (
        num(r, &["packets"]),
        num(r, &["lost_packets"]),
        num(r, &["bytes"]),
    );
    assert!(
        packets > 0 && packets <= sent_packets,
        "{packets} of {sent_packets}"
    );
    assert_eq!(bytes, (packets - lost) * len, "{r}");
}

#[test]
fn zcnet_pair_counts_every_datagram() {
    let (mut server, port) = common::zcnet_server(&["-1", "-J"]);
    let port = port.to_string();
    let args = [
        "-c",
        "127.0.0.1",
        "-p",
        &port,
        "-J",
        "-u",
        "-b",
        "20M",
        "-t",
        "1",
        "-l",
        "1000",
        "-P",
        "2",
    ];
    let (client, st) = common::run(&zcnet_perf(), &args, LIMIT);
    assert!(st.success(), "{}", client.stderr());
    assert!(server.wait(LIMIT).success(), "{}", server.stderr());
    let (c, s) = (json(&client.stdout()), json(&server.stdout()));
    assert_clean(&c, "client");
    assert_clean(&s, "server");
    let sent = num(&c["end"]["sum_sent"], &["packets"]);
    assert_eq!(num(&c["end"]["sum_sent"], &["bytes"]), sent * 1000);
    assert_eq!(num(&c["end"]["zerocopy"]["tx"], &["bytes"]), sent * 1000);
    consistent(&c, 1000, sent);
    for k in ["bytes", "packets", "lost_packets"] {
        assert_eq!(
            c["end"]["sum_received"][k], s["end"]["sum_received"][k],
            "the client relays the server's {k}"
        );
    }
    // 20 Mbit/s per stream for a second: about 2 x 2500 datagrams.
    assert!((4000..=6000).contains(&sent), "{sent}");
}

#[test]
fn zcnet_sender_with_gso_reverse() {
    let (mut server, port) = common::zcnet_server(&["-1", "-J", "--gso", "--tx", "msg-zerocopy"]);
    let port = port.to_string();
    let args = [
        "-c",
        "127.0.0.1",
        "-p",
        &port,
        "-J",
        "-u",
        "-R",
        "-b",
        "50M",
        "-t",
        "1",
        "-l",
        "1400",
    ];
    let (client, st) = common::run(&zcnet_perf(), &args, LIMIT);
    assert!(st.success(), "{}", client.stderr());
    assert!(server.wait(LIMIT).success(), "{}", server.stderr());
    let (c, s) = (json(&client.stdout()), json(&server.stdout()));
    assert_clean(&c, "client");
    let tx = &s["end"]["zerocopy"]["tx"];
    assert_eq!(tx["requested"], "msg-zerocopy");
    assert!(
        tx["fallbacks"].as_array().is_some_and(Vec::is_empty),
        "GSO refused: {tx}"
    );
    let sent = num(&s["end"]["sum_sent"], &["packets"]);
    // Whole datagrams only, each with its header: bytes are a multiple of -l.
    assert_eq!(num(tx, &["bytes"]), sent * 1400);
    consistent(&c, 1400, sent);
}

#[test]
fn zcnet_client_to_iperf3_server_udp() {
    zcnet_client_to_iperf3_server_udp_on(Net::Loopback);
}

#[test]
fn veth_zcnet_client_to_iperf3_server_udp() {
    if let Some((_lab, veth)) = common::veth_lab("veth_zcnet_client_to_iperf3_server_udp") {
        zcnet_client_to_iperf3_server_udp_on(Net::Veth(&veth));
    }
}

fn zcnet_client_to_iperf3_server_udp_on(net: Net<'_>) {
    let Some(iperf3) = common::iperf3() else {
        return eprintln!("SKIP: iperf3 is not installed (apt-get install iperf3)");
    };
    let (mut server, port) = common::iperf3_server_in(net.server_ns(), &iperf3, &["-1", "-J"]);
    let (port, addr) = (port.to_string(), net.server_addr());
    let args = [
        "-c", &addr, "-p", &port, "-J", "-u", "-b", "10M", "-t", "1", "-P", "2",
    ];
    let (client, st) = common::run_in(net.client_ns(), &zcnet_perf(), &args, LIMIT);
    assert!(st.success(), "{}", client.stderr());
    assert!(server.wait(LIMIT).success(), "{}", server.stdout());
    let (z, i) = (json(&client.stdout()), json(&server.stdout()));
    assert_clean(&z, "zcnet");
    assert_clean(&i, "iperf3");
    let sent = num(&z["end"]["sum_sent"], &["packets"]);
    consistent(&z, 1460, sent);
    // iperf3 read our headers: its datagram count is the one zcnet reports for it.
    assert_eq!(
        num(&i["end"]["sum_received"], &["packets"]),
        num(&z["end"]["sum_received"], &["packets"])
    );
}

#[test]
fn iperf3_client_to_zcnet_server_udp() {
    iperf3_client_to_zcnet_server_udp_on(Net::Loopback);
}

#[test]
fn veth_iperf3_client_to_zcnet_server_udp() {
    if let Some((_lab, veth)) = common::veth_lab("veth_iperf3_client_to_zcnet_server_udp") {
        iperf3_client_to_zcnet_server_udp_on(Net::Veth(&veth));
    }
}

fn iperf3_client_to_zcnet_server_udp_on(net: Net<'_>) {
    let Some(iperf3) = common::iperf3() else {
        return eprintln!("SKIP: iperf3 is not installed (apt-get install iperf3)");
    };
    let (mut server, port) = common::zcnet_server_in(net.server_ns(), &["-1", "-J"]);
    let (port, addr) = (port.to_string(), net.server_addr());
    let args = [
        "-c", &addr, "-p", &port, "-J", "-u", "-b", "10M", "-t", "1", "-l", "1200",
    ];
    let (client, st) = common::run_in(net.client_ns(), &iperf3, &args, LIMIT);
    assert!(st.success(), "{}", client.stdout());
    assert!(server.wait(LIMIT).success(), "{}", server.stderr());
    let (i, z) = (json(&client.stdout()), json(&server.stdout()));
    assert_clean(&i, "iperf3");
    assert_clean(&z, "zcnet");
    // zcnet read iperf3's headers; iperf3 prints zcnet's counts as its receiver's.
    let sent = num(&i["end"]["sum_sent"], &["packets"]);
    consistent(&z, 1200, sent);
    assert_eq!(
        num(&i["end"]["sum_received"], &["packets"]),
        num(&z["end"]["sum_received"], &["packets"])
    );
    assert_eq!(
        num(&i["end"]["sum_received"], &["bytes"]),
        num(&z["end"]["sum_received"], &["bytes"])
    );
}
