//! Layout of the structs shared with the kernel, encode/decode round trips, and ioctl replies
//! captured on Linux 6.18.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::*;

/// Offsets as `offsetof()` reports them for include/uapi/linux/ethtool.h on x86_64 (compiled
/// with gcc against the uapi header): struct ethtool_rxnfc is 192 bytes, 8-aligned; fs at 16;
/// rule_cnt at 184; rule_locs at 188 (inside the tail padding); ethtool_rx_flow_spec is 168
/// bytes with h_u 4, h_ext 56, m_u 76, m_ext 128, ring_cookie 152, location 160;
/// ethtool_drvinfo is 196 bytes; ethtool_rxfh_indir.ring_index at 8.
#[zcnet_testkit::test]
fn layouts_match_the_uapi_header() {
    assert_eq!(zcnet_sys::ethtool::RXNFC_LEN, 192);
    assert_eq!((OFF_CMD, OFF_FLOW_TYPE, OFF_DATA, OFF_FS), (0, 4, 8, 16));
    assert_eq!(OFF_RULE_CNT, 184);
    assert_eq!(OFF_RULE_LOCS, 188);
    assert_eq!(OFF_FS_H_U - OFF_FS, 4);
    assert_eq!(OFF_FS_H_EXT - OFF_FS, 56);
    assert_eq!(OFF_FS_M_U - OFF_FS, 76);
    assert_eq!(OFF_FS_M_EXT - OFF_FS, 128);
    assert_eq!(OFF_FS_RING_COOKIE - OFF_FS, 152);
    assert_eq!(OFF_FS_LOCATION - OFF_FS, 160);
    // union ethtool_flow_union is 52 bytes, struct ethtool_flow_ext 20.
    assert_eq!(OFF_FS_H_EXT - OFF_FS_H_U, 52);
    assert_eq!(OFF_FS_M_U - OFF_FS_H_EXT, 20);
    assert_eq!(zcnet_sys::ethtool::DRVINFO_LEN, 196);
    assert_eq!(zcnet_sys::ethtool::RXFH_INDIR_HEADER_LEN, 8);
    assert_eq!(rxnfc_buf(0x32, 0).len(), 192);
}

/// A rule that also matches a VLAN (FLOW_EXT), steers into an RSS context (FLOW_RSS) or to a
/// VF's queue decodes as `Other`: nobody may take it for the plain port rule it contains.
#[zcnet_testkit::test]
fn rules_with_more_than_a_plain_match_decode_as_other() {
    let r = FlowRule {
        flow: FlowType::TcpV4,
        dst_ip: None,
        dst_port: Some(5201),
        src_ip: None,
        src_port: None,
        queue: 3,
        location: Some(9),
    };
    let plain = encode_rule(0x32, &r).unwrap();
    assert_eq!(decode_rule(&plain).unwrap().flow, FlowType::TcpV4);
    for flag in [0x8000_0000u32, 0x4000_0000, 0x2000_0000] {
        let mut b = plain.clone();
        put(&mut b, OFF_FS_FLOW_TYPE, &(1 | flag).to_ne_bytes());
        assert!(
            matches!(decode_rule(&b).unwrap().flow, FlowType::Other(_)),
            "{flag:#x}"
        );
    }
    let mut b = plain.clone();
    put(
        &mut b,
        OFF_FS_RING_COOKIE,
        &((2u64 << 32) | 3).to_ne_bytes(),
    );
    assert!(
        matches!(decode_rule(&b).unwrap().flow, FlowType::Other(_)),
        "a VF's queue"
    );
}

#[zcnet_testkit::test]
fn tcp4_rule_bytes() {
    let r = FlowRule {
        flow: FlowType::TcpV4,
        dst_ip: Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))),
        dst_port: Some(5201),
        src_ip: None,
        src_port: None,
        queue: 3,
        location: None,
    };
    let b = encode_rule(0x32, &r).unwrap();
    assert_eq!(&b[0..4], &0x32u32.to_ne_bytes());
    assert_eq!(&b[16..20], &1u32.to_ne_bytes(), "fs.flow_type TCP_V4_FLOW");
    // h_u.tcp_ip4_spec: ip4src 0, ip4dst 10.0.0.2, psrc 0, pdst 5201 (network order).
    assert_eq!(
        &b[20..36],
        &[0, 0, 0, 0, 10, 0, 0, 2, 0, 0, 0x14, 0x51, 0, 0, 0, 0]
    );
    // m_u: ones where matched.
    assert_eq!(
        &b[92..104],
        &[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0xff, 0xff]
    );
    assert_eq!(&b[168..176], &3u64.to_ne_bytes());
    assert_eq!(&b[176..180], &RX_CLS_LOC_ANY.to_ne_bytes());
    let back = decode_rule(&b).unwrap();
    assert_eq!(back.location, Some(RX_CLS_LOC_ANY));
    assert_eq!(
        FlowRule {
            location: None,
            ..back
        },
        r
    );
}

#[zcnet_testkit::test]
fn udp6_rule_round_trip_and_version_checks() {
    let r = FlowRule {
        flow: FlowType::UdpV6,
        dst_ip: Some(IpAddr::V6(Ipv6Addr::LOCALHOST)),
        dst_port: None,
        src_ip: Some(IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1))),
        src_port: Some(9),
        queue: 0,
        location: Some(7),
    };
    let b = encode_rule(0x32, &r).unwrap();
    assert_eq!(decode_rule(&b).unwrap(), r);
    let bad = FlowRule {
        flow: FlowType::TcpV4,
        ..r
    };
    assert!(matches!(
        encode_rule(0x32, &bad),
        Err(Error::InvalidInput { .. })
    ));
    let other = FlowRule {
        flow: FlowType::Other(0x12),
        ..r
    };
    assert!(encode_rule(0x32, &other).is_err());
}

#[zcnet_testkit::test]
fn rule_locs_and_indir_decoding() {
    let mut b = rxnfc_buf(0x30, 12);
    put(&mut b, OFF_RULE_CNT, &3u32.to_ne_bytes());
    for (i, l) in [5u32, 9, 1023].iter().enumerate() {
        put(&mut b, OFF_RULE_LOCS + 4 * i, &l.to_ne_bytes());
    }
    assert_eq!(decode_rule_locs(&b, 3).unwrap(), [5, 9, 1023]);
    assert!(
        decode_rule_locs(&b, 2).is_err(),
        "more rules than asked for"
    );
    let ind = indir_buf(0x38, &[0, 1, 0, 1], 4);
    assert_eq!(ind.len(), 24);
    assert_eq!(decode_indir(&ind).unwrap(), [0, 1, 0, 1]);
    assert!(decode_indir(&ind[..20]).is_err());
}

#[zcnet_testkit::test]
fn words_round_trip() {
    let b: Vec<u8> = (0..13).collect();
    let w = to_words(&b);
    assert_eq!(w.len(), 2);
    assert_eq!(&to_bytes(&w)[..13], &b[..]);
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// `ETHTOOL_GDRVINFO` on veth, as the kernel wrote it back (tests/captured/ioctl_drvinfo_veth.hex).
#[zcnet_testkit::test]
fn drvinfo_of_veth() {
    let text = include_str!("../../tests/captured/ioctl_drvinfo_veth.hex");
    let reply = text
        .lines()
        .find_map(|l| l.strip_prefix("< "))
        .map(unhex)
        .unwrap();
    let d = decode_drvinfo(&reply).unwrap();
    assert_eq!(d.driver, "veth");
    assert_eq!(d.version, "1.0");
    assert_eq!(d.bus_info, "");
    assert!(decode_drvinfo(&reply[..100]).is_err());
}

/// The errnos the kernel gave veth for the ntuple and indirection ioctls
/// (tests/captured/ioctl_*_veth.hex), as the crate reports them.
#[zcnet_testkit::test]
fn ioctl_errors_on_veth() {
    for (file, op) in [
        (
            include_str!("../../tests/captured/ioctl_grxrings_veth.hex"),
            "ETHTOOL_GRXRINGS",
        ),
        (
            include_str!("../../tests/captured/ioctl_srxclsrlins_veth.hex"),
            "ETHTOOL_SRXCLSRLINS",
        ),
        (
            include_str!("../../tests/captured/ioctl_grxfhindir_veth.hex"),
            "ETHTOOL_GRXFHINDIR",
        ),
    ] {
        let errno: i32 = file
            .lines()
            .find_map(|l| l.strip_prefix("! errno "))
            .unwrap()
            .parse()
            .unwrap();
        let e = ioctl_error(op, "va", std::io::Error::from_raw_os_error(errno));
        assert_eq!(e.errno(), Some(libc::EOPNOTSUPP), "{op}");
        assert_eq!(
            e.to_string(),
            format!(
                "{op} dev va: Operation not supported (EOPNOTSUPP): \
                 the driver or kernel does not support this"
            )
        );
    }
    let e = ioctl_error(
        "ETHTOOL_GDRVINFO",
        "x",
        std::io::Error::from_raw_os_error(libc::EPERM),
    );
    assert!(matches!(e, Error::Permission(_)));
}
