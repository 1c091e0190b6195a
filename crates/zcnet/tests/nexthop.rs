//! `zcnet::nexthop` in the lab (root): the kernel resolves a neighbour it has no entry for and
//! the entry is then read from its table; a destination behind a gateway is addressed to the
//! gateway's Ethernet address; the link's MTU and XDP programs are the kernel's; a local
//! address, a route through another interface and an address nobody answers for are refused
//! in one line.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;
use common::{in_ns, ip, veth_lab};

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};
use zcnet::nexthop::{self, Resolution};
use zcnet::Cancel;

#[zcnet_testkit::test]
fn neighbours_are_resolved_by_the_kernel_and_gateways_used() {
    let (_lab, p) = veth_lab();
    let vb_mac = in_ns(&p.b, || zcnet::xsk::interface_mac("vB").unwrap());
    let va_mac = in_ns(&p.a, || zcnet::xsk::interface_mac("vA").unwrap());
    let dst = Ipv4Addr::new(10, 10, 0, 2);
    let wait = Duration::from_secs(3);
    // A fresh namespace has no entry: the kernel resolves it after resolve's datagram.
    let first = in_ns(&p.a, || {
        nexthop::resolve("vA", dst, wait, &Cancel::new()).unwrap()
    });
    assert!(
        matches!(first.resolution, Resolution::Resolved(_)),
        "{first:?}"
    );
    assert_eq!(
        (first.src, first.dst, first.gateway),
        (Ipv4Addr::new(10, 10, 0, 1), dst, None)
    );
    assert_eq!((first.src_mac, first.dst_mac), (va_mac, vb_mac));
    assert_eq!(first.mtu, 1500);
    // Now the table has it.
    let again = in_ns(&p.a, || {
        nexthop::resolve("vA", dst, wait, &Cancel::new()).unwrap()
    });
    assert!(
        matches!(again.resolution, Resolution::Cached(_)),
        "{again:?}"
    );
    assert_eq!(again.dst_mac, vb_mac);

    // Behind a gateway (vB's address), the frames go to the gateway's Ethernet address.
    ip(&[
        "-n",
        &p.a,
        "route",
        "add",
        "10.99.0.0/16",
        "via",
        "10.10.0.2",
        "dev",
        "vA",
    ]);
    let far = Ipv4Addr::new(10, 99, 1, 1);
    let g = in_ns(&p.a, || {
        nexthop::resolve("vA", far, wait, &Cancel::new()).unwrap()
    });
    assert_eq!((g.dst, g.gateway, g.next_hop()), (far, Some(dst), dst));
    assert_eq!(g.dst_mac, vb_mac);

    // The link: MTU as set, no XDP program.
    ip(&["-n", &p.a, "link", "set", "vA", "mtu", "1400"]);
    let l = in_ns(&p.a, || nexthop::link("vA").unwrap());
    assert_eq!((l.mtu, l.xdp_prog_ids.len()), (1400, 0));
}

#[zcnet_testkit::test]
fn what_cannot_be_addressed_is_refused_in_one_line() {
    let (_lab, p) = veth_lab();
    let wait = Duration::from_millis(1500);
    let err = |iface: &'static str, dst: [u8; 4]| {
        in_ns(&p.a, || {
            nexthop::resolve(iface, Ipv4Addr::from(dst), wait, &Cancel::new())
                .unwrap_err()
                .to_string()
        })
    };
    let local = err("vA", [10, 10, 0, 1]);
    assert!(local.contains("is an address of this host"), "{local}");
    let other = err("lo", [10, 10, 0, 2]);
    assert!(other.contains("routed via vA, not lo"), "{other}");
    let t = Instant::now();
    let silent = err("vA", [10, 10, 0, 77]);
    assert!(
        silent.contains("no Ethernet address for 10.10.0.77 on vA") && silent.contains("ARP"),
        "{silent}"
    );
    // It waits as long as it was told, not for ever.
    assert!(
        t.elapsed() >= wait && t.elapsed() < wait * 3,
        "{:?}",
        t.elapsed()
    );
    let missing = err("nosuch0", [10, 10, 0, 2]);
    assert!(missing.contains("nosuch0"), "{missing}");
    for m in [local, other, silent, missing] {
        assert!(!m.contains('\n'), "{m}");
    }
}

zcnet_testkit::main!();
