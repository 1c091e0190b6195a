//! `struct ethtool_rxnfc` and `struct ethtool_rx_flow_spec` as bytes
//! (include/uapi/linux/ethtool.h). Offsets below are those of the 64-bit Linux ABI, checked by
//! the layout tests against `offsetof` values from the uapi header; integers are native-endian,
//! addresses and ports (`__be32`, `__be16`) network order.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use zcnet_sys::ethtool::{RXNFC_LEN, RXNFC_RULE_CNT_OFFSET, RXNFC_RULE_LOCS_OFFSET};

use crate::error::{Error, Result};
use crate::wire::malformed;

/// `offsetof(struct ethtool_rxnfc, cmd)`.
pub const OFF_CMD: usize = 0;
/// `offsetof(struct ethtool_rxnfc, flow_type)`.
pub const OFF_FLOW_TYPE: usize = 4;
/// `offsetof(struct ethtool_rxnfc, data)` (u64).
pub const OFF_DATA: usize = 8;
/// `offsetof(struct ethtool_rxnfc, fs)`; `struct ethtool_rx_flow_spec` is 168 bytes.
pub const OFF_FS: usize = 16;
/// `fs.flow_type`.
pub const OFF_FS_FLOW_TYPE: usize = OFF_FS;
/// `fs.h_u` (`union ethtool_flow_union`, 52 bytes).
pub const OFF_FS_H_U: usize = OFF_FS + 4;
/// `fs.h_ext` (`struct ethtool_flow_ext`, 20 bytes).
pub const OFF_FS_H_EXT: usize = OFF_FS + 56;
/// `fs.m_u`: the mask of `h_u` (set bits are matched).
pub const OFF_FS_M_U: usize = OFF_FS + 76;
/// `fs.m_ext`.
pub const OFF_FS_M_EXT: usize = OFF_FS + 128;
/// `fs.ring_cookie` (u64).
pub const OFF_FS_RING_COOKIE: usize = OFF_FS + 152;
/// `fs.location` (u32).
pub const OFF_FS_LOCATION: usize = OFF_FS + 160;
/// `rule_cnt` (union with `rss_context`).
pub const OFF_RULE_CNT: usize = RXNFC_RULE_CNT_OFFSET;
/// `rule_locs[]`.
pub const OFF_RULE_LOCS: usize = RXNFC_RULE_LOCS_OFFSET;

// Within union ethtool_flow_union: struct ethtool_tcpip4_spec / ethtool_tcpip6_spec.
const V4_SRC: usize = 0;
const V4_DST: usize = 4;
const V4_PSRC: usize = 8;
const V4_PDST: usize = 10;
const V6_SRC: usize = 0;
const V6_DST: usize = 16;
const V6_PSRC: usize = 32;
const V6_PDST: usize = 34;

/// `FLOW_EXT`, `FLOW_MAC_EXT`, `FLOW_RSS`: flag bits of `flow_type`.
pub const FLOW_FLAGS: u32 = 0x8000_0000 | 0x4000_0000 | 0x2000_0000;
/// `RX_CLS_LOC_ANY`: let the driver choose the location.
pub const RX_CLS_LOC_ANY: u32 = 0xffff_ffff;
/// `RX_CLS_LOC_SPECIAL`: flag in the `GRXCLSRLCNT` table size: special locations work.
pub const RX_CLS_LOC_SPECIAL: u32 = 0x8000_0000;
/// `RX_CLS_FLOW_DISC`: drop matching packets.
pub const RX_CLS_FLOW_DISC: u64 = u64::MAX;

/// Flow types (`TCP_V4_FLOW` ...). Other values decode as `Other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlowType {
    /// `TCP_V4_FLOW` (0x01).
    TcpV4,
    /// `UDP_V4_FLOW` (0x02).
    UdpV4,
    /// `TCP_V6_FLOW` (0x05).
    TcpV6,
    /// `UDP_V6_FLOW` (0x06).
    UdpV6,
    /// Any other flow type (not encodable here).
    Other(u32),
}

impl FlowType {
    /// The wire value.
    pub fn value(self) -> u32 {
        match self {
            FlowType::TcpV4 => 0x01,
            FlowType::UdpV4 => 0x02,
            FlowType::TcpV6 => 0x05,
            FlowType::UdpV6 => 0x06,
            FlowType::Other(v) => v,
        }
    }

    /// From the wire value (flag bits removed).
    pub fn from_value(v: u32) -> FlowType {
        match v & !FLOW_FLAGS {
            0x01 => FlowType::TcpV4,
            0x02 => FlowType::UdpV4,
            0x05 => FlowType::TcpV6,
            0x06 => FlowType::UdpV6,
            o => FlowType::Other(o),
        }
    }

    fn is_v6(self) -> bool {
        matches!(self, FlowType::TcpV6 | FlowType::UdpV6)
    }
}

/// An ntuple flow-steering rule: packets matching the fields that are `Some` go to `queue`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowRule {
    /// Protocol and IP version.
    pub flow: FlowType,
    /// Destination address to match.
    pub dst_ip: Option<IpAddr>,
    /// Destination port to match.
    pub dst_port: Option<u16>,
    /// Source address to match.
    pub src_ip: Option<IpAddr>,
    /// Source port to match.
    pub src_port: Option<u16>,
    /// RX queue (the low 32 bits of `ring_cookie`; a drop rule decodes as `u32::MAX`).
    pub queue: u32,
    /// Rule location; `None` on insert lets the driver choose (`RX_CLS_LOC_ANY`).
    pub location: Option<u32>,
}

/// Reads the native-endian u32 at `off` (callers check the length first).
pub(crate) fn get_u32(b: &[u8], off: usize) -> Option<u32> {
    b.get(off..off + 4)
        .map(|s| u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

pub(crate) fn get_u64(b: &[u8], off: usize) -> Option<u64> {
    let s = b.get(off..off + 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Some(u64::from_ne_bytes(a))
}

pub(crate) fn put(b: &mut [u8], off: usize, v: &[u8]) {
    if let Some(dst) = b.get_mut(off..off + v.len()) {
        dst.copy_from_slice(v);
    }
}

/// A zeroed `struct ethtool_rxnfc` (192 bytes) plus `extra` bytes, with `cmd` set.
pub fn rxnfc_buf(cmd: u32, extra: usize) -> Vec<u8> {
    let mut b = vec![0u8; RXNFC_LEN + extra];
    put(&mut b, OFF_CMD, &cmd.to_ne_bytes());
    b
}

fn check_ip(flow: FlowType, ip: Option<IpAddr>, what: &str) -> Result<()> {
    match ip {
        Some(IpAddr::V4(_)) if flow.is_v6() => Err(Error::InvalidInput {
            what: format!("{what} is IPv4 but the flow type {flow:?} is IPv6"),
        }),
        Some(IpAddr::V6(_)) if !flow.is_v6() => Err(Error::InvalidInput {
            what: format!("{what} is IPv6 but the flow type {flow:?} is IPv4"),
        }),
        _ => Ok(()),
    }
}

fn ip_bytes(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// Encodes `rule` as the `fs` member of a `cmd` request (`ETHTOOL_SRXCLSRLINS`), with the mask
/// (`m_u`) all ones for every field that is `Some`.
pub fn encode_rule(cmd: u32, rule: &FlowRule) -> Result<Vec<u8>> {
    if let FlowType::Other(v) = rule.flow {
        return Err(Error::InvalidInput {
            what: format!("flow type {v:#x} cannot be encoded (use tcp4/udp4/tcp6/udp6)"),
        });
    }
    check_ip(rule.flow, rule.src_ip, "source address")?;
    check_ip(rule.flow, rule.dst_ip, "destination address")?;
    let mut b = rxnfc_buf(cmd, 0);
    put(&mut b, OFF_FS_FLOW_TYPE, &rule.flow.value().to_ne_bytes());
    let (src, dst, psrc, pdst) = if rule.flow.is_v6() {
        (V6_SRC, V6_DST, V6_PSRC, V6_PDST)
    } else {
        (V4_SRC, V4_DST, V4_PSRC, V4_PDST)
    };
    for (ip, off) in [(rule.src_ip, src), (rule.dst_ip, dst)] {
        if let Some(ip) = ip {
            let v = ip_bytes(ip);
            put(&mut b, OFF_FS_H_U + off, &v);
            put(&mut b, OFF_FS_M_U + off, &vec![0xff; v.len()]);
        }
    }
    for (port, off) in [(rule.src_port, psrc), (rule.dst_port, pdst)] {
        if let Some(p) = port {
            put(&mut b, OFF_FS_H_U + off, &p.to_be_bytes());
            put(&mut b, OFF_FS_M_U + off, &[0xff, 0xff]);
        }
    }
    put(
        &mut b,
        OFF_FS_RING_COOKIE,
        &u64::from(rule.queue).to_ne_bytes(),
    );
    let loc = rule.location.unwrap_or(RX_CLS_LOC_ANY);
    put(&mut b, OFF_FS_LOCATION, &loc.to_ne_bytes());
    Ok(b)
}

fn masked_ip(h: &[u8], m: &[u8], v6: bool) -> Option<IpAddr> {
    if m.iter().all(|&x| x == 0) {
        return None;
    }
    if v6 {
        let mut a = [0u8; 16];
        a.copy_from_slice(h);
        Some(IpAddr::V6(Ipv6Addr::from(a)))
    } else {
        Some(IpAddr::V4(Ipv4Addr::new(h[0], h[1], h[2], h[3])))
    }
}

fn masked_port(h: &[u8], m: &[u8]) -> Option<u16> {
    (m != [0, 0]).then(|| u16::from_be_bytes([h[0], h[1]]))
}

/// Decodes the `fs` member of an rxnfc reply (`ETHTOOL_GRXCLSRULE`) into a rule. Fields whose
/// mask is zero are `None`; partial masks are reported as the full value. Flow types other
/// than TCP/UDP over IPv4/IPv6 keep only queue and location.
pub fn decode_rule(b: &[u8]) -> Result<FlowRule> {
    if b.len() < RXNFC_LEN {
        return Err(malformed(format!(
            "ethtool_rxnfc of {} bytes, expected {RXNFC_LEN}",
            b.len()
        )));
    }
    let at = |o: usize, n: usize| &b[o..o + n];
    let raw = get_u32(b, OFF_FS_FLOW_TYPE).unwrap_or(0);
    let cookie = get_u64(b, OFF_FS_RING_COOKIE).unwrap_or(0);
    // A rule that also matches extension fields (FLOW_EXT: VLAN, user data; FLOW_MAC_EXT: the
    // destination MAC), steers into an RSS context (FLOW_RSS) or to a VF's queue (the cookie's
    // bits 32-39, ETHTOOL_RX_FLOW_SPEC_RING_VF) is not the plain rule these fields describe:
    // it stays `Other`, which no caller takes for a rule of its own.
    let vf = cookie != RX_CLS_FLOW_DISC && (cookie >> 32) & 0xff != 0;
    let flow = if raw & FLOW_FLAGS != 0 || vf {
        FlowType::Other(raw)
    } else {
        FlowType::from_value(raw)
    };
    let mut r = FlowRule {
        flow,
        dst_ip: None,
        dst_port: None,
        src_ip: None,
        src_port: None,
        queue: if cookie == RX_CLS_FLOW_DISC {
            u32::MAX
        } else {
            (cookie & 0xffff_ffff) as u32
        },
        location: get_u32(b, OFF_FS_LOCATION),
    };
    if !matches!(flow, FlowType::Other(_)) {
        let v6 = flow.is_v6();
        let (src, dst, psrc, pdst, n) = if v6 {
            (V6_SRC, V6_DST, V6_PSRC, V6_PDST, 16)
        } else {
            (V4_SRC, V4_DST, V4_PSRC, V4_PDST, 4)
        };
        let (h, m) = (OFF_FS_H_U, OFF_FS_M_U);
        r.src_ip = masked_ip(at(h + src, n), at(m + src, n), v6);
        r.dst_ip = masked_ip(at(h + dst, n), at(m + dst, n), v6);
        r.src_port = masked_port(at(h + psrc, 2), at(m + psrc, 2));
        r.dst_port = masked_port(at(h + pdst, 2), at(m + pdst, 2));
    }
    Ok(r)
}

/// Decodes the rule locations of an `ETHTOOL_GRXCLSRLALL` reply: `rule_cnt` u32s from byte
/// 188 (at most `capacity`, the count the request was sized for).
pub fn decode_rule_locs(b: &[u8], capacity: u32) -> Result<Vec<u32>> {
    let cnt = get_u32(b, OFF_RULE_CNT).ok_or_else(|| malformed("rxnfc reply too short"))?;
    if cnt > capacity {
        return Err(malformed(format!(
            "{cnt} rule locations reported, {capacity} asked for"
        )));
    }
    (0..cnt as usize)
        .map(|i| {
            get_u32(b, OFF_RULE_LOCS + 4 * i)
                .ok_or_else(|| malformed(format!("rule location {i} past the reply")))
        })
        .collect()
}
