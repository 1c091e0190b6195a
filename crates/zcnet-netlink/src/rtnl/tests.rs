#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use super::*;
use crate::wire::{NlMsgHdr, NLMSG_HDRLEN};

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_ne_bytes([b[i], b[i + 1]])
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

#[zcnet_testkit::test]
fn requests_have_the_kernels_layout() {
    let r = route_get_request(9, Ipv4Addr::new(10, 10, 0, 2), Some(7)).unwrap();
    let h = NlMsgHdr::parse(&r).unwrap();
    assert_eq!((h.len as usize, h.kind, h.seq), (r.len(), RTM_GETROUTE, 9));
    assert_eq!(h.flags, NLM_F_REQUEST | NLM_F_ACK);
    let m = &r[NLMSG_HDRLEN..];
    assert_eq!(&m[..RTMSG_LEN], &[2, 32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    // RTA_DST (len 8, type 1, 10.10.0.2), then RTA_OIF (len 8, type 4, 7).
    assert_eq!((u16_at(m, 12), u16_at(m, 14)), (8, RTA_DST));
    assert_eq!(&m[16..20], &[10, 10, 0, 2]);
    assert_eq!(
        (u16_at(m, 20), u16_at(m, 22), u32_at(m, 24)),
        (8, RTA_OIF, 7)
    );
    assert_eq!(r.len(), NLMSG_HDRLEN + 28);
    assert_eq!(
        route_get_request(1, Ipv4Addr::LOCALHOST, None)
            .unwrap()
            .len(),
        NLMSG_HDRLEN + 20
    );

    let n = neigh_get_request(3, 5, Ipv4Addr::new(192, 168, 1, 1)).unwrap();
    let h = NlMsgHdr::parse(&n).unwrap();
    assert_eq!((h.kind, h.len as usize), (RTM_GETNEIGH, n.len()));
    let m = &n[NLMSG_HDRLEN..];
    assert_eq!(m[0], 2, "AF_INET");
    assert_eq!(u32_at(m, 4), 5, "ndm_ifindex");
    assert_eq!(u16_at(m, 8), 0, "ndm_state must be 0 in a get");
    assert_eq!((u16_at(m, 12), u16_at(m, 14)), (8, NDA_DST));
    assert_eq!(&m[16..20], &[192, 168, 1, 1]);

    let l = link_get_request(4, 12).unwrap();
    let m = &l[NLMSG_HDRLEN..];
    assert_eq!(NlMsgHdr::parse(&l).unwrap().kind, RTM_GETLINK);
    assert_eq!((m[0], u32_at(m, 4), l.len()), (0, 12, NLMSG_HDRLEN + 16));
}

/// A reply as the kernel would build it: `kind`, the fixed header, then attributes.
fn reply(kind: u16, seq: u32, header: &[u8], attrs: impl FnOnce(&mut MsgBuilder)) -> Vec<u8> {
    let mut b = MsgBuilder::new(kind, 0, seq);
    b.put_header(header);
    attrs(&mut b);
    b.finish().unwrap()
}

fn ack(seq: u32, errno: i32) -> Vec<u8> {
    let mut b = MsgBuilder::new(NLMSG_ERROR, 0, seq);
    let mut p = (-errno).to_ne_bytes().to_vec();
    // The echoed request header (16 bytes, a capped ACK).
    let mut echoed = [0u8; 16];
    echoed[0..4].copy_from_slice(&16u32.to_ne_bytes());
    p.extend_from_slice(&echoed);
    b.put_header(&p);
    let mut v = b.finish().unwrap();
    // NLM_F_CAPPED: only the header is echoed.
    v[6..8].copy_from_slice(&crate::wire::NLM_F_CAPPED.to_ne_bytes());
    v
}

#[zcnet_testkit::test]
fn route_neigh_and_link_replies_parse() {
    let mut rtm = [0u8; RTMSG_LEN];
    rtm[0] = 2;
    rtm[4] = 254; // main
    rtm[7] = RTN_UNICAST;
    let r = reply(RTM_NEWROUTE, 1, &rtm, |b| {
        b.put_u32(RTA_TABLE, 254);
        b.put_bytes(RTA_DST, &[10, 1, 2, 3]);
        b.put_u32(RTA_OIF, 4);
        b.put_bytes(RTA_PREFSRC, &[10, 1, 2, 1]);
        b.put_bytes(RTA_GATEWAY, &[10, 1, 2, 254]);
    });
    let route = parse_route(&r[NLMSG_HDRLEN..]).unwrap();
    assert_eq!(
        route,
        Route {
            kind: RTN_UNICAST,
            oif: Some(4),
            gateway: Some(Ipv4Addr::new(10, 1, 2, 254)),
            prefsrc: Some(Ipv4Addr::new(10, 1, 2, 1)),
            table: Some(254),
        }
    );
    assert_eq!(route.kind_name(), "unicast");

    let mut nd = [0u8; NDMSG_LEN];
    nd[0] = 2;
    nd[4..8].copy_from_slice(&4u32.to_ne_bytes());
    nd[8..10].copy_from_slice(&NUD_STALE.to_ne_bytes());
    let n = reply(RTM_NEWNEIGH, 1, &nd, |b| {
        b.put_bytes(NDA_DST, &[10, 1, 2, 254]);
        b.put_bytes(NDA_LLADDR, &[2, 0, 0, 0, 0, 9]);
    });
    let neigh = parse_neigh(&n[NLMSG_HDRLEN..]).unwrap();
    assert_eq!(neigh.lladdr.as_deref(), Some(&[2u8, 0, 0, 0, 0, 9][..]));
    assert_eq!((neigh.ifindex, neigh.state_name()), (4, "STALE"));
    assert!(neigh.is_valid(), "STALE entries are sent to");
    let incomplete = Neighbour {
        state: NUD_INCOMPLETE,
        lladdr: None,
        ..neigh.clone()
    };
    assert!(!incomplete.is_valid());
    assert!(!Neighbour {
        state: NUD_FAILED,
        ..neigh.clone()
    }
    .is_valid());
    assert_eq!(state_name(0), "NONE");

    let mut ifi = [0u8; IFINFOMSG_LEN];
    ifi[4..8].copy_from_slice(&4u32.to_ne_bytes());
    let l = reply(RTM_NEWLINK, 1, &ifi, |b| {
        b.put_str(IFLA_IFNAME, "vA");
        b.put_u32(IFLA_MTU, 1500);
        b.put_bytes(IFLA_ADDRESS, &[2, 0, 0, 0, 0, 1]);
        b.nest_begin(IFLA_XDP);
        b.put_u8(IFLA_XDP_ATTACHED, 1);
        b.put_u32(IFLA_XDP_PROG_ID, 77);
        b.put_u32(IFLA_XDP_DRV_PROG_ID, 77);
        b.nest_end();
    });
    let link = parse_link(&l[NLMSG_HDRLEN..]).unwrap();
    assert_eq!(
        (link.ifindex, link.name.as_deref(), link.mtu),
        (4, Some("vA"), Some(1500))
    );
    assert_eq!(link.xdp.attached, 1);
    assert_eq!(link.xdp.prog_ids(), vec![77]);

    // Short or malformed payloads are errors, never panics.
    assert!(parse_route(&[2, 32]).is_err());
    assert!(parse_neigh(&nd[..4]).is_err());
    let mut bad = l[NLMSG_HDRLEN..].to_vec();
    bad.truncate(IFINFOMSG_LEN + 6);
    assert!(parse_link(&bad).is_err());
}

#[zcnet_testkit::test]
fn collector_takes_the_reply_then_the_ack_and_names_errors() {
    let mut rtm = [0u8; RTMSG_LEN];
    rtm[7] = RTN_UNICAST;
    let stale = reply(RTM_NEWROUTE, 4, &rtm, |_| {});
    let r = reply(RTM_NEWROUTE, 5, &rtm, |b| {
        b.put_u32(RTA_OIF, 2);
    });
    let mut c = RtnlCollector::new("RTM_GETROUTE", "10.0.0.1", 5, RTM_NEWROUTE);
    assert!(
        !c.feed(&stale).unwrap(),
        "another sequence number is skipped"
    );
    let mut both = r.clone();
    both.extend_from_slice(&ack(5, 0));
    assert!(c.feed(&both).unwrap());
    let replies = c.into_replies();
    assert_eq!(replies.len(), 1);
    assert_eq!(parse_route(&replies[0]).unwrap().oif, Some(2));

    let mut c = RtnlCollector::new("RTM_GETNEIGH", "10.0.0.9 dev 2", 6, RTM_NEWNEIGH);
    let e = c.feed(&ack(6, libc::ENOENT)).unwrap_err();
    assert_eq!(e.errno(), Some(libc::ENOENT));
    let text = e.to_string();
    assert!(text.contains("RTM_GETNEIGH 10.0.0.9 dev 2"), "{text}");
    assert!(!text.contains('\n'), "{text}");

    let mut c = RtnlCollector::new("RTM_GETLINK", "ifindex 1", 7, RTM_NEWLINK);
    let wrong = reply(RTM_NEWROUTE, 7, &rtm, |_| {});
    assert!(c.feed(&wrong).is_err(), "a reply of another type");
}

/// Runs `f` in a thread of its own in a fresh network namespace, which goes away with the
/// thread (nothing is named, nothing is left behind). Skips the test when not root.
fn in_private_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    zcnet_testkit::require_root("a private network namespace");
    zcnet_testkit::propagate(
        std::thread::spawn(move || {
            zcnet_sys::os::unshare_netns().unwrap();
            f()
        })
        .join(),
    )
}

// A child process starts in the namespace of the thread that spawns it.
use zcnet_testkit::ip;

#[zcnet_testkit::test]
fn live_route_neighbour_and_link_in_a_private_namespace() {
    zcnet_testkit::require_tool("ip", "iproute2 builds the namespace's devices");
    in_private_netns(|| {
        ip(&["link", "add", "rta", "type", "veth", "peer", "name", "rtb"]);
        ip(&["addr", "add", "10.77.0.1/24", "dev", "rta"]);
        ip(&["link", "set", "rta", "mtu", "1400", "up"]);
        ip(&["link", "set", "rtb", "up"]);
        ip(&[
            "neigh",
            "add",
            "10.77.0.2",
            "lladdr",
            "02:7a:00:00:00:02",
            "dev",
            "rta",
            "nud",
            "permanent",
        ]);
        ip(&[
            "route",
            "add",
            "10.88.0.0/16",
            "via",
            "10.77.0.254",
            "dev",
            "rta",
        ]);
        let ifindex = zcnet_sys::zcrx::if_index("rta").unwrap();
        let mut nl = Rtnl::open().unwrap();

        let r = nl.route_get(Ipv4Addr::new(10, 77, 0, 2), None).unwrap();
        assert_eq!(r.kind, RTN_UNICAST, "{r:?}");
        assert_eq!(r.oif, Some(ifindex), "{r:?}");
        assert_eq!(r.gateway, None, "on-link: {r:?}");
        assert_eq!(r.prefsrc, Some(Ipv4Addr::new(10, 77, 0, 1)), "{r:?}");
        let g = nl
            .route_get(Ipv4Addr::new(10, 88, 1, 1), Some(ifindex))
            .unwrap();
        assert_eq!(g.gateway, Some(Ipv4Addr::new(10, 77, 0, 254)), "{g:?}");
        let local = nl.route_get(Ipv4Addr::new(10, 77, 0, 1), None).unwrap();
        assert_eq!(local.kind_name(), "local", "{local:?}");

        let n = nl
            .neigh_get(ifindex, Ipv4Addr::new(10, 77, 0, 2))
            .unwrap()
            .unwrap();
        assert_eq!(n.state_name(), "PERMANENT");
        assert_eq!(n.lladdr.as_deref(), Some(&[2u8, 0x7a, 0, 0, 0, 2][..]));
        assert!(n.is_valid());
        assert_eq!(
            nl.neigh_get(ifindex, Ipv4Addr::new(10, 77, 0, 3)).unwrap(),
            None,
            "no entry: None, not an error"
        );

        let l = nl.link_get(ifindex).unwrap();
        assert_eq!((l.name.as_deref(), l.mtu), (Some("rta"), Some(1400)));
        assert_eq!(l.address.as_ref().map(Vec::len), Some(6));
        assert_eq!(l.xdp.attached, 0);
        assert!(l.xdp.prog_ids().is_empty());
        let e = nl.link_get(999_999).unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENODEV), "{e}");
    });
}
