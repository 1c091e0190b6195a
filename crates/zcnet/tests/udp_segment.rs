//! `net::connect_udp_for`: a send that does not fit one packet of the route's MTU is cut by the
//! kernel into datagrams as large as the route carries (UDP_SEGMENT from `IP_MTU`), a send that
//! fits goes out whole; loopback needs nothing, the MTU-9000 route a veth lab (root).

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;
use common::{in_ns, ip, veth_lab};

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use zcnet::net::{connect_udp_for, udp_payload_for_mtu};

fn segment(s: &UdpSocket) -> u16 {
    zcnet_sys::sock::udp_segment(s.as_raw_fd()).unwrap()
}

#[zcnet_testkit::test]
fn payload_per_mtu() {
    assert_eq!(udp_payload_for_mtu(1500, false), 1472);
    assert_eq!(udp_payload_for_mtu(1500, true), 1452);
    assert_eq!(udp_payload_for_mtu(9000, false), 8972);
    assert_eq!(udp_payload_for_mtu(65536, false), 65_507);
    assert_eq!(udp_payload_for_mtu(20, false), 0);
}

#[zcnet_testkit::test]
fn loopback_sends_whole_datagrams_and_they_arrive_whole() {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let dest: SocketAddr = rx.local_addr().unwrap();
    let tx = connect_udp_for(dest, 64_000).unwrap();
    assert_eq!(segment(&tx), 0, "lo's MTU (65536) carries 64,000 B whole");
    tx.send(&vec![7u8; 64_000]).unwrap();
    let mut buf = vec![0u8; 65_536];
    rx.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    assert_eq!(rx.recv(&mut buf).unwrap(), 64_000);
}

#[zcnet_testkit::test]
fn ipv6_loopback_reads_its_mtu_too() {
    let Ok(rx) = UdpSocket::bind("[::1]:0") else {
        zcnet_testkit::skip(zcnet_testkit::Need::Kernel, "no IPv6 loopback (::1) here");
    };
    let dest = rx.local_addr().unwrap();
    let mtu = zcnet_sys::sock::path_mtu(connect_udp_for(dest, 100).unwrap().as_raw_fd(), true);
    assert_eq!(mtu.unwrap(), 65536, "lo's MTU through IPV6_MTU");
    assert_eq!(segment(&connect_udp_for(dest, 64_000).unwrap()), 0);
}

#[zcnet_testkit::test]
fn segments_follow_the_route_mtu() {
    let (_lab, p) = veth_lab();
    let dest: SocketAddr = "10.10.0.2:9".parse().unwrap();
    in_ns(&p.a, || {
        assert_eq!(segment(&connect_udp_for(dest, 64_000).unwrap()), 1472);
        assert_eq!(segment(&connect_udp_for(dest, 1472).unwrap()), 0);
        assert_eq!(segment(&connect_udp_for(dest, 1473).unwrap()), 1472);
    });
    for (ns, dev) in [(&p.a, "vA"), (&p.b, "vB")] {
        ip(&["-n", ns, "link", "set", dev, "mtu", "9000"]);
    }
    in_ns(&p.a, || {
        assert_eq!(segment(&connect_udp_for(dest, 64_000).unwrap()), 8972);
        assert_eq!(segment(&connect_udp_for(dest, 8972).unwrap()), 0);
    });
}

zcnet_testkit::main!();
