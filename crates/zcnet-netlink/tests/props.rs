//! Property tests: every parser survives arbitrary bytes (an `Err`, never a panic), and what
//! the builders write parses back to what went in.
// A failed unwrap is a failed test (clippy's allow-unwrap-in-tests sees only libtest's #[test]).
#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use zcnet_netlink::conn::ReplyCollector;
use zcnet_netlink::ethtool::{
    fill_named_bits, parse_strset, Bitset, Channels, Features, FeaturesSetReply, Rings, RingsSet,
    Rss, TcpDataSplit,
};
use zcnet_netlink::genl::Family;
use zcnet_netlink::netdev::{self, DevInfo, NapiInfo, PagePoolInfo, QStats, QueueInfo};
use zcnet_netlink::ntuple::{
    decode_drvinfo, decode_indir, decode_rule, decode_rule_locs, encode_rule, FlowRule, FlowType,
};
use zcnet_netlink::wire::{
    attr_path_at, messages, parse_done, parse_error, Attrs, Extack, MsgBuilder, NLMSG_HDRLEN,
};

/// Runs every parser over `b`, ignoring the results: only panics matter.
fn all_parsers(b: &[u8]) {
    let _ = Attrs::new(b).collect::<Vec<_>>();
    for a in Attrs::new(b).flatten() {
        let _ = a.nested().collect::<Vec<_>>();
        let _ = (
            a.u8(),
            a.u16(),
            a.u32(),
            a.u64(),
            a.uint(),
            a.str(),
            a.u32_array(),
        );
    }
    let _ = messages(b).collect::<Vec<_>>();
    let _ = parse_error(0x300, b);
    let _ = parse_error(0x200, b);
    let _ = parse_done(0x200, b);
    let _ = Extack::parse(b);
    let _ = Family::parse(b);
    let _ = DevInfo::parse(b);
    let _ = QueueInfo::parse(b);
    let _ = NapiInfo::parse(b);
    let _ = PagePoolInfo::parse(b);
    let _ = QStats::parse(b);
    let _ = Rings::parse(b);
    let _ = Channels::parse(b);
    let _ = Features::parse(b, &[]);
    let _ = Features::parse(b, &["a".to_string(), String::new()]);
    let _ = FeaturesSetReply::parse(b);
    let _ = Rss::parse(b);
    let _ = Bitset::parse(b);
    let _ = parse_strset(b, 4);
    let _ = decode_rule(b);
    let _ = decode_rule_locs(b, 64);
    let _ = decode_indir(b);
    let _ = decode_drvinfo(b);
    let _ = attr_path_at(b, 0, 8);
    let mut c = ReplyCollector::new(netdev::OP_DEV_GET, "x", b, 1, 20, b.len().is_multiple_of(2));
    let _ = c.feed(b);
}

/// Attribute soup: random attributes, some nested, so parsers get past the first check.
fn attr_soup() -> impl Strategy<Value = Vec<u8>> {
    let leaf = (0u16..20, prop::collection::vec(any::<u8>(), 0..24));
    prop::collection::vec(
        (
            leaf,
            any::<bool>(),
            prop::collection::vec((0u16..8, prop::collection::vec(any::<u8>(), 0..12)), 0..4),
        ),
        0..12,
    )
    .prop_map(|attrs| {
        let mut b = MsgBuilder::new(0, 0, 0);
        for ((t, p), nest, inner) in attrs {
            if nest {
                b.nest_begin(t);
                for (it, ip) in inner {
                    b.put_bytes(it, &ip);
                }
                b.nest_end();
            } else {
                b.put_bytes(t, &p);
            }
        }
        b.finish()
            .map(|m| m[NLMSG_HDRLEN..].to_vec())
            .unwrap_or_default()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[zcnet_testkit::test]
    fn parsers_never_panic_on_bytes(b in prop::collection::vec(any::<u8>(), 0..512)) {
        all_parsers(&b);
    }

    #[zcnet_testkit::test]
    fn parsers_never_panic_on_attr_soup(b in attr_soup()) {
        all_parsers(&b);
    }

    #[zcnet_testkit::test]
    fn builder_round_trips(attrs in prop::collection::vec((1u16..0x3fff, prop::collection::vec(any::<u8>(), 0..40)), 0..16)) {
        let mut b = MsgBuilder::genl(30, 1, 7, 2, 1);
        b.nest_begin(1);
        for (t, p) in &attrs {
            b.put_bytes(*t, p);
        }
        b.nest_end();
        let m = b.finish().unwrap();
        let msgs: Vec<_> = messages(&m).collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(msgs.len(), 1);
        prop_assert_eq!(msgs[0].header.len as usize, m.len());
        let top: Vec<_> = Attrs::with_base(&msgs[0].payload[4..], 20).collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(top.len(), 1);
        let inner: Vec<_> = top[0].nested().collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(inner.len(), attrs.len());
        for (a, (t, p)) in inner.iter().zip(&attrs) {
            prop_assert_eq!(a.kind(), *t);
            prop_assert_eq!(a.payload(), &p[..]);
            // The extended-ACK resolver finds each attribute by its offset.
            prop_assert_eq!(attr_path_at(&m[20..], 20, a.offset()), Some(vec![1, *t]));
        }
    }

    #[zcnet_testkit::test]
    fn dev_info_round_trips(ifindex in 1u32.., xdp in any::<u64>(), meta in any::<u64>(), xsk in any::<u64>(), zc in proptest::option::of(1u32..)) {
        let mut b = MsgBuilder::new(0, 0, 0);
        b.put_u32(1, ifindex).put_u64(3, xdp).put_u64(5, meta).put_u64(6, xsk);
        if let Some(z) = zc {
            b.put_u32(4, z);
        }
        let m = b.finish().unwrap();
        let d = DevInfo::parse(&m[NLMSG_HDRLEN..]).unwrap();
        prop_assert_eq!(d, DevInfo { ifindex, xdp_features: xdp, xdp_zc_max_segs: zc, xdp_rx_metadata_features: meta, xsk_features: xsk });
        prop_assert_eq!(d.names().len() as u32, xdp.count_ones());
    }

    #[zcnet_testkit::test]
    fn rings_set_round_trips(rx in proptest::option::of(any::<u32>()), hds in proptest::option::of(any::<u32>()), tds in proptest::option::of(0u8..3), push in proptest::option::of(any::<bool>())) {
        let set = RingsSet { rx, hds_thresh: hds, tcp_data_split: tds.map(TcpDataSplit::from_value), tx_push: push, ..RingsSet::default() };
        let mut b = MsgBuilder::new(0, 0, 0);
        set.fill(&mut b);
        let m = b.finish().unwrap();
        let r = Rings::parse(&m[NLMSG_HDRLEN..]).unwrap();
        prop_assert_eq!((r.rx, r.hds_thresh, r.tcp_data_split, r.tx_push), (rx, hds, set.tcp_data_split, push));
    }

    #[zcnet_testkit::test]
    fn named_bits_round_trip(bits in prop::collection::btree_map("[a-z-]{1,20}", any::<bool>(), 0..10)) {
        let list: Vec<(&str, bool)> = bits.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let mut b = MsgBuilder::new(0, 0, 0);
        fill_named_bits(&mut b, 3, &list);
        let m = b.finish().unwrap();
        let top: Vec<_> = Attrs::new(&m[NLMSG_HDRLEN..]).collect::<Result<_, _>>().unwrap();
        // Named bits without indices are a request form: the parser wants indices.
        prop_assert_eq!(Bitset::parse(top[0].payload()).is_err(), !list.is_empty());
    }

    #[zcnet_testkit::test]
    fn compact_bitsets_round_trip(words in prop::collection::vec(any::<u32>(), 1..8), mask in prop::collection::vec(any::<u32>(), 1..8), nomask in any::<bool>()) {
        let size = 32 * words.len() as u32;
        let bytes = |w: &[u32]| w.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>();
        let mut b = MsgBuilder::new(0, 0, 0);
        if nomask {
            b.put_flag(1);
        }
        // ETHTOOL_A_BITSET_SIZE 2, _VALUE 4, _MASK 5.
        b.put_u32(2, size).put_bytes(4, &bytes(&words)).put_bytes(5, &bytes(&mask));
        let m = b.finish().unwrap();
        let s = Bitset::parse(&m[NLMSG_HDRLEN..]).unwrap();
        for i in 0..size {
            prop_assert_eq!(s.get(i), words[(i / 32) as usize] & (1 << (i % 32)) != 0);
            let in_mask = nomask || mask.get((i / 32) as usize).is_some_and(|w| w & (1 << (i % 32)) != 0);
            prop_assert_eq!(s.in_mask(i), in_mask);
        }
    }

    #[zcnet_testkit::test]
    fn flow_rules_round_trip(v6 in any::<bool>(), tcp in any::<bool>(), src in proptest::option::of(any::<u128>()), dst in proptest::option::of(any::<u128>()), sp in proptest::option::of(any::<u16>()), dp in proptest::option::of(any::<u16>()), queue in 0u32..u32::MAX, loc in proptest::option::of(0u32..0x8000_0000)) {
        let ip = |x: u128| if v6 { IpAddr::V6(Ipv6Addr::from(x)) } else { IpAddr::V4(Ipv4Addr::from(x as u32)) };
        let flow = match (v6, tcp) { (false, true) => FlowType::TcpV4, (false, false) => FlowType::UdpV4, (true, true) => FlowType::TcpV6, (true, false) => FlowType::UdpV6 };
        let r = FlowRule { flow, src_ip: src.map(ip), dst_ip: dst.map(ip), src_port: sp, dst_port: dp, queue, location: loc };
        let b = encode_rule(0x32, &r).unwrap();
        let mut back = decode_rule(&b).unwrap();
        // An all-zero IPv6 address (or 0.0.0.0) is still matched: its mask is all ones.
        prop_assert_eq!(back.location, Some(loc.unwrap_or(0xffff_ffff)));
        back.location = loc;
        prop_assert_eq!(back, r);
    }
}

zcnet_testkit::main!();
