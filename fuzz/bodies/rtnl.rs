//! rtnetlink replies (zcnet-netlink's `rtnl`, used by `send --tx af-xdp` to address its frames):
//! `RTM_NEWROUTE`, `RTM_NEWNEIGH` and `RTM_NEWLINK` payloads, and whole datagrams fed to the
//! reply collector. Arbitrary bytes must never make them panic, and what they accept must be
//! consistent with the bytes: the fixed header's fields are read from their uapi offsets, and a
//! neighbour is valid only with a link-layer address.
//! Shared by fuzz/fuzz_targets/rtnl.rs and crates/zcnet-tools/tests/fuzz_smoke.rs.

use zcnet_netlink::rtnl::{parse_link, parse_neigh, parse_route, state_name, RtnlCollector};

pub fn run(data: &[u8]) {
    if let Ok(r) = parse_route(data) {
        // struct rtmsg: rtm_table at 4, rtm_type at 7.
        assert_eq!(r.kind, data[7]);
        let _ = r.kind_name();
    }
    if let Ok(n) = parse_neigh(data) {
        // struct ndmsg: ndm_ifindex at 4, ndm_state at 8.
        assert_eq!(
            n.ifindex,
            u32::from_ne_bytes([data[4], data[5], data[6], data[7]])
        );
        assert_eq!(n.state, u16::from_ne_bytes([data[8], data[9]]));
        assert!(!n.is_valid() || n.lladdr.is_some());
        assert_eq!(n.state_name(), state_name(n.state));
    }
    if let Ok(l) = parse_link(data) {
        // struct ifinfomsg: ifi_index at 4.
        assert_eq!(
            l.ifindex,
            u32::from_ne_bytes([data[4], data[5], data[6], data[7]])
        );
        let _ = l.xdp.prog_ids();
    }
    // Whole datagrams (netlink headers and all), split anywhere, into one collector.
    let seq = data.first().copied().map_or(1, u32::from);
    let mut c = RtnlCollector::new("fuzz", "x0", seq, 24);
    let cut = data.len() / 3;
    for part in [&data[..cut], &data[cut..]] {
        if !matches!(c.feed(part), Ok(false)) {
            break;
        }
    }
    for reply in c.into_replies() {
        let _ = (parse_route(&reply), parse_neigh(&reply), parse_link(&reply));
    }
}
