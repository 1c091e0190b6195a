//! Parsers against replies captured from Linux 6.18 (veth `va`, ifindex 3, in a namespace),
//! and builders against the requests the kernel accepted there.

use super::*;
use crate::genl::{Family, GETFAMILY};
use crate::testutil::Capture;

fn va() -> Dev<'static> {
    Dev::Name("va")
}

#[zcnet_testkit::test]
fn family_has_the_message_ids_used_here() {
    let r = Capture::load("ctrl_getfamily_ethtool")
        .replay(GETFAMILY, "ethtool")
        .unwrap();
    let f = Family::parse(&r[0].attrs).unwrap();
    assert_eq!(f.name, "ethtool");
    for cmd in [
        MSG_STRSET_GET,
        MSG_FEATURES_GET,
        MSG_FEATURES_SET,
        MSG_RINGS_GET,
        MSG_RINGS_SET,
        MSG_CHANNELS_GET,
        MSG_CHANNELS_SET,
        MSG_RSS_GET,
    ] {
        assert!(f.has_op(cmd), "ethtool op {cmd}");
    }
    // Ops 1..=50: up to RSS_DELETE_ACT (Linux 6.17), nothing newer.
    assert_eq!(f.ops.len(), 50);
    assert!(f.op(MSG_RSS_GET).unwrap().can_dump());
}

#[zcnet_testkit::test]
fn rings_on_veth_are_not_supported() {
    let e = Capture::load("ethtool_rings_get_veth")
        .replay(OP_RINGS_GET, "dev va")
        .unwrap_err();
    assert_eq!(e.errno(), Some(libc::EOPNOTSUPP));
    assert_eq!(e.extack(), None);
}

#[zcnet_testkit::test]
fn rings_set_errors_carry_text_and_attribute() {
    let e = Capture::load("ethtool_rings_set_tds_veth")
        .replay(OP_RINGS_SET, "dev va")
        .unwrap_err();
    assert_eq!(e.errno(), Some(libc::EOPNOTSUPP));
    assert_eq!(e.extack(), Some("setting TCP data split is not supported"));
    assert_eq!(
        e.kernel().unwrap().bad_attr.as_deref(),
        Some("tcp-data-split")
    );
    assert_eq!(
        e.to_string(),
        "rings-set dev va: Operation not supported (EOPNOTSUPP) (kernel: setting TCP data \
         split is not supported; bad attribute: tcp-data-split)"
    );
    let e = Capture::load("ethtool_rings_set_hds_veth")
        .replay(OP_RINGS_SET, "dev va")
        .unwrap_err();
    assert_eq!(e.extack(), Some("setting hds-thresh is not supported"));
    assert_eq!(e.kernel().unwrap().bad_attr.as_deref(), Some("hds-thresh"));
}

#[zcnet_testkit::test]
fn channels_of_veth() {
    let r = Capture::load("ethtool_channels_get_veth")
        .replay(OP_CHANNELS_GET, "dev va")
        .unwrap();
    assert_eq!(r[0].cmd, 18, "ETHTOOL_MSG_CHANNELS_GET_REPLY");
    let c = Channels::parse(&r[0].attrs).unwrap();
    assert_eq!(c.header.ifindex, Some(3));
    assert_eq!(c.header.name.as_deref(), Some("va"));
    assert_eq!((c.rx_count, c.tx_count), (Some(1), Some(1)));
    // veth allows up to one queue per possible CPU (2 here).
    assert_eq!((c.rx_max, c.tx_max), (Some(2), Some(2)));
    assert_eq!(c.combined_count, None);
}

#[zcnet_testkit::test]
fn features_compact_with_strset_names() {
    let s = Capture::load("ethtool_strset_features")
        .replay(OP_STRSET_GET, "dev va")
        .unwrap();
    let names = parse_strset(&s[0].attrs, ETH_SS_FEATURES).unwrap();
    assert_eq!(names.len(), 64);
    assert_eq!(names[0], "tx-scatter-gather");
    assert_eq!(names[2], "", "bit 2 has no name");
    let r = Capture::load("ethtool_features_get_compact")
        .replay(OP_FEATURES_GET, "dev va")
        .unwrap();
    let f = Features::parse(&r[0].attrs, &names).unwrap();
    assert_eq!(f.header.ifindex, Some(3));
    let gro = f.feature("rx-gro").unwrap();
    assert!(gro.changeable && !gro.active, "veth starts with GRO off");
    assert_eq!(f.is_active("tx-scatter-gather"), Some(true));
    let nt = f.feature("ntuple-filters").unwrap();
    assert_eq!(nt.name, "rx-ntuple-filter");
    assert!(!nt.changeable && !nt.active);
    assert_eq!(f.feature("no-such-feature"), None);
    assert!(f.feature("rx-gro-hw").is_some());
    assert!(f.list().iter().any(|x| x.name == "loopback" && !x.active));
}

#[zcnet_testkit::test]
fn features_verbose_agrees_with_compact() {
    let names = parse_strset(
        &Capture::load("ethtool_strset_features")
            .replay(OP_STRSET_GET, "")
            .unwrap()[0]
            .attrs,
        ETH_SS_FEATURES,
    )
    .unwrap();
    let compact = Features::parse(
        &Capture::load("ethtool_features_get_compact")
            .replay(OP_FEATURES_GET, "")
            .unwrap()[0]
            .attrs,
        &names,
    )
    .unwrap();
    let verbose = Features::parse(
        &Capture::load("ethtool_features_get_verbose")
            .replay(OP_FEATURES_GET, "")
            .unwrap()[0]
            .attrs,
        &[],
    )
    .unwrap();
    assert_eq!(verbose.list(), compact.list());
}

#[zcnet_testkit::test]
fn features_set_replies() {
    let r = Capture::load("ethtool_features_set_gro_on_veth")
        .replay(OP_FEATURES_SET, "dev va")
        .unwrap();
    let rep = FeaturesSetReply::parse(&r[0].attrs).unwrap();
    assert!(!rep.not_applied("rx-gro"));
    let on = rep.active_diff.index_of("rx-gro").unwrap();
    assert!(rep.active_diff.get(on), "rx-gro became active");
    let off = Capture::load("ethtool_features_set_gro_off_veth")
        .replay(OP_FEATURES_SET, "dev va")
        .unwrap();
    let rep = FeaturesSetReply::parse(&off[0].attrs).unwrap();
    let i = rep.active_diff.index_of("rx-gro").unwrap();
    assert!(
        rep.active_diff.in_mask(i) && !rep.active_diff.get(i),
        "rx-gro went off"
    );
    // A feature veth cannot change: accepted, but reported as wanted-not-active.
    let fixed = Capture::load("ethtool_features_set_fixed_veth")
        .replay(OP_FEATURES_SET, "dev va")
        .unwrap();
    let rep = FeaturesSetReply::parse(&fixed[0].attrs).unwrap();
    assert!(rep.not_applied("ntuple-filters"));
    assert!(rep.active_diff.set_bits().is_empty());
    let e = Capture::load("ethtool_features_set_unknown_veth")
        .replay(OP_FEATURES_SET, "dev va")
        .unwrap_err();
    assert_eq!(e.errno(), Some(libc::EOPNOTSUPP));
    assert_eq!(e.extack(), Some("bit name not found"));
    assert_eq!(
        e.kernel().unwrap().bad_attr.as_deref(),
        Some("wanted.bits.bit.name")
    );
}

#[zcnet_testkit::test]
fn rss_on_veth() {
    let e = Capture::load("ethtool_rss_get_veth")
        .replay(OP_RSS_GET, "dev va")
        .unwrap_err();
    assert_eq!(e.errno(), Some(libc::EOPNOTSUPP));
    let d = Capture::load("ethtool_rss_dump")
        .replay(OP_RSS_GET, "")
        .unwrap();
    assert!(d.is_empty(), "no device here has RSS");
}

#[zcnet_testkit::test]
fn rss_parses_a_context() {
    let mut b = MsgBuilder::new(0, 0, 0);
    b.nest_begin(1).put_u32(1, 4).nest_end();
    b.put_u32(2, 1)
        .put_u32(3, 1)
        .put_bytes(4, &[0, 0, 0, 0, 1, 0, 0, 0])
        .put_bytes(5, &[0xaa; 40])
        .put_u32(6, 0)
        .nest_begin(8)
        .put_u32(4, 0xf0)
        .nest_end();
    let m = b.finish().unwrap();
    let r = Rss::parse(&m[16..]).unwrap();
    assert_eq!(r.header.ifindex, Some(4));
    assert_eq!(r.context, 1);
    assert_eq!(r.hfunc_names(), ["toeplitz"]);
    assert_eq!(r.indir, [0, 1]);
    assert_eq!(r.hkey.len(), 40);
    assert_eq!(r.flow_hash, [(4, 0xf0)]);
}

#[zcnet_testkit::test]
fn rings_parse_all_fields() {
    let mut b = MsgBuilder::new(0, 0, 0);
    b.put_u32(2, 4096)
        .put_u32(5, 4096)
        .put_u32(6, 1024)
        .put_u32(9, 512)
        .put_u32(10, 4096)
        .put_u8(11, 2)
        .put_u8(13, 1)
        .put_u32(17, 256)
        .put_u32(18, 1024);
    let m = b.finish().unwrap();
    let r = Rings::parse(&m[16..]).unwrap();
    assert_eq!(
        (r.rx_max, r.tx_max, r.rx, r.tx),
        (Some(4096), Some(4096), Some(1024), Some(512))
    );
    assert_eq!(r.tcp_data_split, Some(TcpDataSplit::Enabled));
    assert_eq!(r.tx_push, Some(true));
    assert_eq!((r.hds_thresh, r.hds_thresh_max), (Some(256), Some(1024)));
    assert_eq!(r.rx_buf_len, Some(4096));
}

/// A capture name, the command, and the library's attribute writer for it.
type Case<'a> = (&'a str, u8, &'a dyn Fn(&mut MsgBuilder));

/// The library's requests are byte-for-byte those the kernel answered in the captures.
#[zcnet_testkit::test]
fn builders_match_captured_requests() {
    let tds = RingsSet {
        tcp_data_split: Some(TcpDataSplit::Enabled),
        ..RingsSet::default()
    };
    let hds = RingsSet {
        hds_thresh: Some(256),
        ..RingsSet::default()
    };
    let cases: [Case<'_>; 10] = [
        ("ethtool_rings_get_veth", MSG_RINGS_GET, &|b| {
            fill_header(b, va(), 0)
        }),
        ("ethtool_rings_set_tds_veth", MSG_RINGS_SET, &|b| {
            fill_rings_set(b, va(), &tds)
        }),
        ("ethtool_rings_set_hds_veth", MSG_RINGS_SET, &|b| {
            fill_rings_set(b, va(), &hds)
        }),
        ("ethtool_channels_get_veth", MSG_CHANNELS_GET, &|b| {
            fill_header(b, va(), 0)
        }),
        ("ethtool_strset_features", MSG_STRSET_GET, &|b| {
            fill_strset(b, va(), ETH_SS_FEATURES)
        }),
        ("ethtool_features_get_compact", MSG_FEATURES_GET, &|b| {
            fill_header(b, va(), FLAG_COMPACT_BITSETS)
        }),
        ("ethtool_features_set_gro_on_veth", MSG_FEATURES_SET, &|b| {
            fill_feature_set(b, va(), "rx-gro", true)
        }),
        ("ethtool_rss_get_veth", MSG_RSS_GET, &|b| {
            fill_rss_get(b, va(), 0)
        }),
        ("ethtool_features_set_fixed_veth", MSG_FEATURES_SET, &|b| {
            fill_feature_set(b, va(), canonical_name("ntuple-filters"), true)
        }),
        (
            "ethtool_features_set_gro_off_veth",
            MSG_FEATURES_SET,
            &|b| fill_feature_set(b, va(), "rx-gro", false),
        ),
    ];
    for (name, cmd, f) in cases {
        let c = Capture::load(name);
        let h = c.header();
        let mut b = MsgBuilder::genl(h.kind, h.flags, h.seq, cmd, 1);
        f(&mut b);
        assert_eq!(b.finish().unwrap(), c.request, "{name}");
    }
}
