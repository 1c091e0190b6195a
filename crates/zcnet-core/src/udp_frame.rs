//! Ethernet II / IPv4 / UDP frames: a builder that writes them in place (into a UMEM frame) and
//! a parser that checks them, both over plain bytes.
//!
//! Formats: Ethernet II (destination, source, EtherType 0x0800); IPv4 as RFC 791 (version 4,
//! IHL 5 when built, total length, identification, DF, TTL 64, protocol 17, header checksum
//! per RFC 1071); UDP as RFC 768 (length, checksum over the IPv4 pseudo-header, where 0 means
//! "none" and a computed 0 is sent as 0xffff).

use std::net::Ipv4Addr;

/// Ethernet II header bytes.
pub const ETH_HLEN: usize = 14;
/// IPv4 header bytes without options.
pub const IPV4_HLEN: usize = 20;
/// UDP header bytes.
pub const UDP_HLEN: usize = 8;
/// All three headers, as built here.
pub const HEADERS_LEN: usize = ETH_HLEN + IPV4_HLEN + UDP_HLEN;
/// `ETH_P_IP`.
pub(crate) const ETHERTYPE_IPV4: u16 = 0x0800;
/// `IPPROTO_UDP`.
pub(crate) const IPPROTO_UDP: u8 = 17;

/// One UDP flow between two Ethernet hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpFlow {
    /// Source MAC address.
    pub src_mac: [u8; 6],
    /// Destination MAC address (the next hop's; on a veth pair, the peer's).
    pub dst_mac: [u8; 6],
    /// Source IPv4 address.
    pub src: Ipv4Addr,
    /// Destination IPv4 address.
    pub dst: Ipv4Addr,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Compute the UDP checksum (otherwise 0: "no checksum", allowed over IPv4).
    pub udp_checksum: bool,
}

/// Why a frame could not be built or parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameFault {
    /// The buffer is smaller than the frame.
    TooShort {
        /// Bytes needed.
        need: usize,
        /// Bytes there.
        have: usize,
    },
    /// The payload does not fit a UDP datagram (65,507 B at most).
    PayloadTooLong {
        /// Payload bytes.
        len: usize,
    },
    /// Not IPv4 (the EtherType).
    NotIpv4 {
        /// The EtherType found.
        ethertype: u16,
    },
    /// An IPv4 header that is not version 4 or shorter than 20 bytes, or whose total length
    /// does not fit the frame.
    BadIpv4Header,
    /// The IPv4 header checksum does not verify.
    BadIpv4Checksum,
    /// Not UDP (the IPv4 protocol).
    NotUdp {
        /// The protocol found.
        protocol: u8,
    },
    /// A fragment (more-fragments set or a fragment offset): no UDP header to read.
    Fragment,
    /// A UDP length shorter than its header or longer than the IPv4 payload.
    BadUdpLength,
    /// The UDP checksum does not verify.
    BadUdpChecksum,
}

impl std::fmt::Display for FrameFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameFault::TooShort { need, have } => {
                write!(f, "frame needs {need} B, buffer has {have} B")
            }
            FrameFault::PayloadTooLong { len } => {
                write!(f, "UDP payload of {len} B is longer than 65,507 B")
            }
            FrameFault::NotIpv4 { ethertype } => {
                write!(f, "EtherType {ethertype:#06x} is not IPv4")
            }
            FrameFault::BadIpv4Header => f.write_str("malformed IPv4 header"),
            FrameFault::BadIpv4Checksum => f.write_str("IPv4 header checksum does not verify"),
            FrameFault::NotUdp { protocol } => write!(f, "IP protocol {protocol} is not UDP"),
            FrameFault::Fragment => f.write_str("IPv4 fragment"),
            FrameFault::BadUdpLength => f.write_str("UDP length does not fit the packet"),
            FrameFault::BadUdpChecksum => f.write_str("UDP checksum does not verify"),
        }
    }
}

impl std::error::Error for FrameFault {}

/// A parsed UDP/IPv4 frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpPacket<'a> {
    /// Source MAC address.
    pub src_mac: [u8; 6],
    /// Destination MAC address.
    pub dst_mac: [u8; 6],
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// IPv4 identification.
    pub ip_id: u16,
    /// The UDP payload.
    pub payload: &'a [u8],
}

/// Adds `bytes` (big-endian 16-bit words, a trailing odd byte padded with zero) to `sum`.
fn sum_words(mut sum: u32, bytes: &[u8]) -> u32 {
    let mut chunks = bytes.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    sum
}

/// Folds a 32-bit sum into the one's-complement 16-bit checksum (RFC 1071).
fn fold(mut sum: u32) -> u16 {
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The Internet checksum of `bytes` (RFC 1071): write it into a zeroed checksum field; over
/// bytes that include a correct checksum it is 0.
pub fn internet_checksum(bytes: &[u8]) -> u16 {
    fold(sum_words(0, bytes))
}

fn udp_checksum(src: Ipv4Addr, dst: Ipv4Addr, udp: &[u8]) -> u16 {
    let mut sum = sum_words(0, &src.octets());
    sum = sum_words(sum, &dst.octets());
    sum += u32::from(IPPROTO_UDP);
    sum += udp.len() as u32;
    fold(sum_words(sum, udp))
}

impl UdpFlow {
    /// Frame bytes for `payload_len` bytes of payload.
    pub fn frame_len(payload_len: usize) -> usize {
        HEADERS_LEN + payload_len
    }

    /// Writes the frame into `buf`: headers, then `fill` writes the payload (`payload_len`
    /// bytes, in place), then the checksums. Returns the frame length.
    pub fn write_with(
        &self,
        buf: &mut [u8],
        ip_id: u16,
        payload_len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<usize, FrameFault> {
        if payload_len > 65_507 {
            return Err(FrameFault::PayloadTooLong { len: payload_len });
        }
        let total = Self::frame_len(payload_len);
        if buf.len() < total {
            return Err(FrameFault::TooShort {
                need: total,
                have: buf.len(),
            });
        }
        let buf = &mut buf[..total];
        let (eth, rest) = buf.split_at_mut(ETH_HLEN);
        eth[0..6].copy_from_slice(&self.dst_mac);
        eth[6..12].copy_from_slice(&self.src_mac);
        eth[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        let (ip, udp) = rest.split_at_mut(IPV4_HLEN);
        let ip_len = (IPV4_HLEN + UDP_HLEN + payload_len) as u16;
        ip[0] = 0x45; // version 4, IHL 5
        ip[1] = 0; // DSCP/ECN
        ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
        ip[4..6].copy_from_slice(&ip_id.to_be_bytes());
        ip[6..8].copy_from_slice(&0x4000u16.to_be_bytes()); // DF, offset 0
        ip[8] = 64; // TTL
        ip[9] = IPPROTO_UDP;
        ip[10..12].fill(0);
        ip[12..16].copy_from_slice(&self.src.octets());
        ip[16..20].copy_from_slice(&self.dst.octets());
        let c = internet_checksum(ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        let udp_len = (UDP_HLEN + payload_len) as u16;
        udp[0..2].copy_from_slice(&self.src_port.to_be_bytes());
        udp[2..4].copy_from_slice(&self.dst_port.to_be_bytes());
        udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
        udp[6..8].fill(0);
        fill(&mut udp[UDP_HLEN..]);
        if self.udp_checksum {
            let c = match udp_checksum(self.src, self.dst, udp) {
                0 => 0xffff,
                c => c,
            };
            udp[6..8].copy_from_slice(&c.to_be_bytes());
        }
        Ok(total)
    }

    /// Writes the frame with `payload` copied in.
    pub fn write(&self, buf: &mut [u8], ip_id: u16, payload: &[u8]) -> Result<usize, FrameFault> {
        self.write_with(buf, ip_id, payload.len(), |p| p.copy_from_slice(payload))
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn mac(b: &[u8]) -> [u8; 6] {
    [b[0], b[1], b[2], b[3], b[4], b[5]]
}

/// Parses and checks an Ethernet/IPv4/UDP frame: IPv4 header checksum, lengths, no fragment,
/// and the UDP checksum when it is not 0.
pub fn parse_udp(frame: &[u8]) -> Result<UdpPacket<'_>, FrameFault> {
    parse(frame, true)
}

/// As [`parse_udp`] without checking the UDP checksum: for frames taken before a NIC would
/// have finished it. A datagram the local stack sends over a device with TX checksum offload
/// (veth has it) carries only the pseudo-header sum (`CHECKSUM_PARTIAL`), and an XDP program
/// or AF_XDP socket on the peer sees it that way.
pub fn parse_udp_partial_csum(frame: &[u8]) -> Result<UdpPacket<'_>, FrameFault> {
    parse(frame, false)
}

fn parse(frame: &[u8], udp_csum: bool) -> Result<UdpPacket<'_>, FrameFault> {
    let short = |need: usize| FrameFault::TooShort {
        need,
        have: frame.len(),
    };
    if frame.len() < ETH_HLEN + IPV4_HLEN {
        return Err(short(ETH_HLEN + IPV4_HLEN));
    }
    let ethertype = be16(frame, 12);
    if ethertype != ETHERTYPE_IPV4 {
        return Err(FrameFault::NotIpv4 { ethertype });
    }
    let ip = &frame[ETH_HLEN..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let total = usize::from(be16(ip, 2));
    if ip[0] >> 4 != 4 || ihl < IPV4_HLEN || total < ihl || total > ip.len() {
        return Err(FrameFault::BadIpv4Header);
    }
    if internet_checksum(&ip[..ihl]) != 0 {
        return Err(FrameFault::BadIpv4Checksum);
    }
    if ip[9] != IPPROTO_UDP {
        return Err(FrameFault::NotUdp { protocol: ip[9] });
    }
    if be16(ip, 6) & 0x3fff != 0 {
        return Err(FrameFault::Fragment);
    }
    let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    let l4 = &ip[ihl..total];
    if l4.len() < UDP_HLEN {
        return Err(FrameFault::BadUdpLength);
    }
    let udp_len = usize::from(be16(l4, 4));
    if udp_len < UDP_HLEN || udp_len > l4.len() {
        return Err(FrameFault::BadUdpLength);
    }
    let udp = &l4[..udp_len];
    if udp_csum && be16(udp, 6) != 0 && udp_checksum(src, dst, udp) != 0 {
        return Err(FrameFault::BadUdpChecksum);
    }
    Ok(UdpPacket {
        dst_mac: mac(&frame[0..6]),
        src_mac: mac(&frame[6..12]),
        src,
        dst,
        src_port: be16(udp, 0),
        dst_port: be16(udp, 2),
        ip_id: be16(ip, 4),
        payload: &udp[UDP_HLEN..],
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test
    use super::*;
    use proptest::prelude::*;

    fn flow() -> UdpFlow {
        UdpFlow {
            src_mac: [0x02, 0, 0, 0, 0, 1],
            dst_mac: [0x02, 0, 0, 0, 0, 2],
            src: Ipv4Addr::new(10, 10, 0, 1),
            dst: Ipv4Addr::new(10, 10, 0, 2),
            src_port: 40000,
            dst_port: 5201,
            udp_checksum: true,
        }
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3: the words 0001 f203 f4f5 f6f7 sum to 0xddf2 (checksum 0x220d).
        assert_eq!(
            internet_checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0x220d
        );
    }

    #[test]
    fn known_ipv4_header_checksum() {
        // A textbook header (Wikipedia "IPv4 header checksum"): checksum 0xb861.
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(internet_checksum(&h), 0xb861);
        h[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
        assert_eq!(internet_checksum(&h), 0);
    }

    #[test]
    fn built_frame_has_the_expected_bytes() {
        let mut b = [0u8; 64];
        let n = flow().write(&mut b, 7, b"hi").unwrap();
        assert_eq!(n, 44);
        assert_eq!(&b[12..14], &[0x08, 0x00]);
        assert_eq!(&b[14..24], &[0x45, 0, 0, 30, 0, 7, 0x40, 0, 64, 17]);
        assert_eq!(&b[34..40], &[0x9c, 0x40, 0x14, 0x51, 0, 10]);
        let p = parse_udp(&b[..n]).unwrap();
        assert_eq!(
            (p.src_port, p.dst_port, p.ip_id, p.payload),
            (40000, 5201, 7, &b"hi"[..])
        );
        assert_eq!(p.dst_mac, flow().dst_mac);
    }

    #[test]
    fn corruption_is_caught() {
        let mut b = [0u8; 100];
        let n = flow().write(&mut b, 1, &[9; 50]).unwrap();
        let mut bad = b;
        bad[30] ^= 1; // source address
        assert_eq!(parse_udp(&bad[..n]), Err(FrameFault::BadIpv4Checksum));
        let mut bad = b;
        bad[60] ^= 0x80; // payload
        assert_eq!(parse_udp(&bad[..n]), Err(FrameFault::BadUdpChecksum));
        let mut no_sum = flow();
        no_sum.udp_checksum = false;
        let n2 = no_sum.write(&mut bad, 1, &[9; 50]).unwrap();
        bad[60] ^= 0x80;
        assert!(parse_udp(&bad[..n2]).is_ok(), "checksum 0: not verified");
        let n3 = flow().write(&mut bad, 1, &[9; 50]).unwrap();
        bad[60] ^= 0x80;
        assert!(parse_udp(&bad[..n3]).is_err());
        assert!(
            parse_udp_partial_csum(&bad[..n3]).is_ok(),
            "UDP checksum not checked"
        );
        assert!(matches!(
            flow().write(&mut [0u8; 43], 0, b"xy"),
            Err(FrameFault::TooShort { need: 44, .. })
        ));
        assert!(matches!(
            parse_udp(&b[..40]),
            Err(FrameFault::BadIpv4Header)
        ));
        let mut frag = b;
        frag[20] = 0x20; // more fragments
        frag[24..26].fill(0);
        let c = internet_checksum(&frag[14..34]);
        frag[24..26].copy_from_slice(&c.to_be_bytes());
        assert_eq!(parse_udp(&frag[..n]), Err(FrameFault::Fragment));
    }

    proptest! {
        #[test]
        fn round_trip(payload in prop::collection::vec(any::<u8>(), 0..1500), id in any::<u16>(),
                      sport in any::<u16>(), dport in any::<u16>(), csum in any::<bool>()) {
            let f = UdpFlow { src_port: sport, dst_port: dport, udp_checksum: csum, ..flow() };
            let mut b = vec![0u8; 1600];
            let n = f.write(&mut b, id, &payload).unwrap();
            prop_assert_eq!(n, HEADERS_LEN + payload.len());
            prop_assert_eq!(internet_checksum(&b[14..34]), 0);
            let p = parse_udp(&b[..n]).unwrap();
            prop_assert_eq!(p.payload, &payload[..]);
            prop_assert_eq!((p.src_port, p.dst_port, p.ip_id), (sport, dport, id));
            prop_assert_eq!((p.src, p.dst), (f.src, f.dst));
            prop_assert_eq!(be16(&b, 40) == 0, !csum);
        }

        /// One's-complement checksums catch every single-bit error they cover: a flipped bit in
        /// the IPv4 header or the UDP datagram is refused (except one that turns the UDP
        /// checksum into 0, "no checksum"; the UDP length is left alone: it cuts the datagram).
        #[test]
        fn any_single_bit_flip_is_caught(payload in prop::collection::vec(any::<u8>(), 1..200),
                                         bit in 0usize..8, at in any::<usize>()) {
            let mut b = vec![0u8; 300];
            let n = flow().write(&mut b, 3, &payload).unwrap();
            let at = ETH_HLEN + at % (n - ETH_HLEN);
            prop_assume!(at != 38 && at != 39);
            b[at] ^= 1 << bit;
            prop_assert!(parse_udp(&b[..n]).is_err() || be16(&b, 40) == 0, "flip at {} not caught", at);
        }
    }
}
