//! rtnetlink (`NETLINK_ROUTE`): the kernel's answer to "how would you send to this IPv4
//! address" (`RTM_GETROUTE`), its neighbour table (`RTM_GETNEIGH`), and a link's MTU, address
//! and XDP attachment (`RTM_GETLINK`) — what a program that builds its own Ethernet frames
//! (AF_XDP) needs to address them as the stack would.
//!
//! Requests and replies are pure functions over bytes; [`Rtnl`] adds the socket. Layouts are
//! from include/uapi/linux/rtnetlink.h (`struct rtmsg`, `RTA_*`, `RTN_*`),
//! include/uapi/linux/neighbour.h (`struct ndmsg`, `NDA_*`, `NUD_*`) and
//! include/uapi/linux/if_link.h (`struct ifinfomsg`, `IFLA_*`, `IFLA_XDP_*`). The kernel side:
//! net/ipv4/route.c `inet_rtm_getroute` (an output route lookup, as a socket's `connect` makes;
//! the reply names the device, the gateway when the next hop is one, and the source address it
//! would choose), net/core/neighbour.c `neigh_get` (one entry, by device and address:
//! `ENOENT` when there is none), net/core/rtnetlink.c `rtnl_getlink` and `rtnl_xdp_fill` (the
//! ids of the XDP programs attached, by bpf_link or otherwise).
//!
//! ```
//! use std::net::Ipv4Addr;
//! use zcnet_netlink::rtnl;
//! // The bytes of `ip route get 10.0.0.2 oif 3`, as sent.
//! let req = rtnl::route_get_request(1, Ipv4Addr::new(10, 0, 0, 2), Some(3)).unwrap();
//! assert_eq!(req.len(), 16 + 12 + 8 + 8);
//! ```

use std::net::Ipv4Addr;

use zcnet_sys::netlink::{NlSocket, NETLINK_ROUTE};

use crate::error::{Error, KernelError, Result};
use crate::wire::{
    malformed, messages, parse_error, Attrs, MsgBuilder, NLMSG_DONE, NLMSG_ERROR, NLMSG_NOOP,
    NLMSG_OVERRUN, NLM_F_ACK, NLM_F_REQUEST,
};

/// `RTM_NEWLINK`: the type of a link reply.
pub const RTM_NEWLINK: u16 = 16;
/// `RTM_GETLINK`.
pub const RTM_GETLINK: u16 = 18;
/// `RTM_NEWROUTE`: the type of a route reply.
pub const RTM_NEWROUTE: u16 = 24;
/// `RTM_GETROUTE`.
pub const RTM_GETROUTE: u16 = 26;
/// `RTM_NEWNEIGH`: the type of a neighbour reply.
pub const RTM_NEWNEIGH: u16 = 28;
/// `RTM_GETNEIGH`.
pub const RTM_GETNEIGH: u16 = 30;

/// `sizeof(struct rtmsg)`.
pub const RTMSG_LEN: usize = 12;
/// `sizeof(struct ndmsg)`.
pub const NDMSG_LEN: usize = 12;
/// `sizeof(struct ifinfomsg)`.
pub const IFINFOMSG_LEN: usize = 16;

/// `RTA_DST`.
pub const RTA_DST: u16 = 1;
/// `RTA_OIF`.
pub const RTA_OIF: u16 = 4;
/// `RTA_GATEWAY`.
pub const RTA_GATEWAY: u16 = 5;
/// `RTA_PREFSRC`.
pub const RTA_PREFSRC: u16 = 7;
/// `RTA_TABLE`.
pub const RTA_TABLE: u16 = 15;

/// `RTN_UNICAST`: a gateway or direct route.
pub const RTN_UNICAST: u8 = 1;
/// `RTN_LOCAL`: an address of this host.
pub const RTN_LOCAL: u8 = 2;

/// `NDA_DST`.
pub const NDA_DST: u16 = 1;
/// `NDA_LLADDR`.
pub const NDA_LLADDR: u16 = 2;

/// `NUD_INCOMPLETE`: resolution under way.
pub const NUD_INCOMPLETE: u16 = 0x01;
/// `NUD_REACHABLE`.
pub const NUD_REACHABLE: u16 = 0x02;
/// `NUD_STALE`.
pub const NUD_STALE: u16 = 0x04;
/// `NUD_DELAY`.
pub const NUD_DELAY: u16 = 0x08;
/// `NUD_PROBE`.
pub const NUD_PROBE: u16 = 0x10;
/// `NUD_FAILED`: resolution failed.
pub const NUD_FAILED: u16 = 0x20;
/// `NUD_NOARP`: no resolution needed (the address is fixed).
pub const NUD_NOARP: u16 = 0x40;
/// `NUD_PERMANENT`: set by hand.
pub const NUD_PERMANENT: u16 = 0x80;
/// `NUD_VALID` (include/net/neighbour.h): the states in which the link-layer address can be
/// used to send (`STALE`, `DELAY` and `PROBE` included: the kernel itself sends with them while
/// it re-confirms the entry).
pub const NUD_VALID: u16 =
    NUD_PERMANENT | NUD_NOARP | NUD_REACHABLE | NUD_PROBE | NUD_STALE | NUD_DELAY;

/// `IFLA_ADDRESS`.
pub const IFLA_ADDRESS: u16 = 1;
/// `IFLA_IFNAME`.
pub const IFLA_IFNAME: u16 = 3;
/// `IFLA_MTU`.
pub const IFLA_MTU: u16 = 4;
/// `IFLA_XDP` (nested).
pub const IFLA_XDP: u16 = 43;
/// `IFLA_XDP_ATTACHED` (in `IFLA_XDP`): `XDP_ATTACHED_*`.
pub const IFLA_XDP_ATTACHED: u16 = 2;
/// `IFLA_XDP_PROG_ID` (in `IFLA_XDP`): the program, when exactly one mode has one.
pub const IFLA_XDP_PROG_ID: u16 = 4;
/// `IFLA_XDP_DRV_PROG_ID`: the native (driver) program.
pub const IFLA_XDP_DRV_PROG_ID: u16 = 5;
/// `IFLA_XDP_SKB_PROG_ID`: the generic (skb) program.
pub const IFLA_XDP_SKB_PROG_ID: u16 = 6;
/// `IFLA_XDP_HW_PROG_ID`: the offloaded program.
pub const IFLA_XDP_HW_PROG_ID: u16 = 7;

const AF_UNSPEC: u8 = 0;
const AF_INET: u8 = 2;

/// The kernel's route to one address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// `rtm_type` (`RTN_*`).
    pub kind: u8,
    /// The output device.
    pub oif: Option<u32>,
    /// The next hop, when it is a gateway (absent: the address is on the link).
    pub gateway: Option<Ipv4Addr>,
    /// The source address the kernel would use.
    pub prefsrc: Option<Ipv4Addr>,
    /// The routing table it came from.
    pub table: Option<u32>,
}

impl Route {
    /// `unicast`, `local`, `broadcast`, … (`RTN_*`, as `ip route` names them).
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            0 => "unspec",
            RTN_UNICAST => "unicast",
            RTN_LOCAL => "local",
            3 => "broadcast",
            4 => "anycast",
            5 => "multicast",
            6 => "blackhole",
            7 => "unreachable",
            8 => "prohibit",
            9 => "throw",
            10 => "nat",
            _ => "unknown",
        }
    }
}

/// One entry of the neighbour table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbour {
    /// The device.
    pub ifindex: u32,
    /// The address (`NDA_DST`).
    pub dst: Option<Ipv4Addr>,
    /// The link-layer address (`NDA_LLADDR`), once resolved.
    pub lladdr: Option<Vec<u8>>,
    /// `ndm_state` (`NUD_*`).
    pub state: u16,
}

impl Neighbour {
    /// Whether its link-layer address can be sent to ([`NUD_VALID`] and an address present).
    pub fn is_valid(&self) -> bool {
        self.state & NUD_VALID != 0 && self.lladdr.is_some()
    }

    /// The state as `ip neigh` names it.
    pub fn state_name(&self) -> &'static str {
        state_name(self.state)
    }
}

/// `ndm_state` as `ip neigh` names it (the highest bit set).
pub fn state_name(state: u16) -> &'static str {
    [
        (NUD_PERMANENT, "PERMANENT"),
        (NUD_NOARP, "NOARP"),
        (NUD_FAILED, "FAILED"),
        (NUD_PROBE, "PROBE"),
        (NUD_DELAY, "DELAY"),
        (NUD_STALE, "STALE"),
        (NUD_REACHABLE, "REACHABLE"),
        (NUD_INCOMPLETE, "INCOMPLETE"),
    ]
    .into_iter()
    .find(|(bit, _)| state & bit != 0)
    .map_or("NONE", |(_, n)| n)
}

/// The XDP programs attached to a link (`IFLA_XDP`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XdpState {
    /// `IFLA_XDP_ATTACHED`: 0 none, 1 native, 2 generic, 3 offloaded, 4 several.
    pub attached: u8,
    /// `IFLA_XDP_PROG_ID`.
    pub prog_id: Option<u32>,
    /// `IFLA_XDP_DRV_PROG_ID`.
    pub drv_prog_id: Option<u32>,
    /// `IFLA_XDP_SKB_PROG_ID`.
    pub skb_prog_id: Option<u32>,
    /// `IFLA_XDP_HW_PROG_ID`.
    pub hw_prog_id: Option<u32>,
}

impl XdpState {
    /// The ids of every program attached, in any mode.
    pub fn prog_ids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = [
            self.prog_id,
            self.drv_prog_id,
            self.skb_prog_id,
            self.hw_prog_id,
        ]
        .into_iter()
        .flatten()
        .collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// A link as `RTM_GETLINK` describes it (the parts used here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// The interface index.
    pub ifindex: u32,
    /// `IFLA_IFNAME`.
    pub name: Option<String>,
    /// `IFLA_MTU`.
    pub mtu: Option<u32>,
    /// `IFLA_ADDRESS`: the link-layer address.
    pub address: Option<Vec<u8>>,
    /// `IFLA_XDP`.
    pub xdp: XdpState,
}

fn ipv4(b: &[u8]) -> Result<Ipv4Addr> {
    let o: [u8; 4] = b
        .try_into()
        .map_err(|_| malformed(format!("a {}-byte IPv4 address", b.len())))?;
    Ok(Ipv4Addr::from(o))
}

/// `RTM_GETROUTE` for `dst` (as `ip route get DST [oif IFINDEX]`), asking for an ACK.
pub fn route_get_request(seq: u32, dst: Ipv4Addr, oif: Option<u32>) -> Result<Vec<u8>> {
    let mut b = MsgBuilder::new(RTM_GETROUTE, NLM_F_REQUEST | NLM_F_ACK, seq);
    // struct rtmsg: family, dst_len 32, src_len, tos, table, protocol, scope, type, flags.
    let mut h = [0u8; RTMSG_LEN];
    h[0] = AF_INET;
    h[1] = 32;
    b.put_header(&h);
    b.put_bytes(RTA_DST, &dst.octets());
    if let Some(i) = oif {
        b.put_u32(RTA_OIF, i);
    }
    b.finish()
}

/// `RTM_GETNEIGH` for the entry of `dst` on `ifindex` (as `ip neigh get DST dev IF`).
pub fn neigh_get_request(seq: u32, ifindex: u32, dst: Ipv4Addr) -> Result<Vec<u8>> {
    let mut b = MsgBuilder::new(RTM_GETNEIGH, NLM_F_REQUEST | NLM_F_ACK, seq);
    // struct ndmsg: family, pad1, pad2 (u16), ifindex (i32), state (u16), flags, type; the
    // kernel refuses a get with any of pad, state or type set (neigh_valid_get_req).
    let mut h = [0u8; NDMSG_LEN];
    h[0] = AF_INET;
    h[4..8].copy_from_slice(&ifindex.to_ne_bytes());
    b.put_header(&h);
    b.put_bytes(NDA_DST, &dst.octets());
    b.finish()
}

/// `RTM_GETLINK` for `ifindex` (as `ip link show dev IF`).
pub fn link_get_request(seq: u32, ifindex: u32) -> Result<Vec<u8>> {
    let mut b = MsgBuilder::new(RTM_GETLINK, NLM_F_REQUEST | NLM_F_ACK, seq);
    // struct ifinfomsg: family, pad, type (u16), index (i32), flags, change.
    let mut h = [0u8; IFINFOMSG_LEN];
    h[0] = AF_UNSPEC;
    h[4..8].copy_from_slice(&ifindex.to_ne_bytes());
    b.put_header(&h);
    b.finish()
}

fn fixed<'a>(payload: &'a [u8], len: usize, what: &str) -> Result<(&'a [u8], &'a [u8])> {
    if payload.len() < len {
        return Err(malformed(format!(
            "{what} of {} bytes, shorter than its {len}-byte header",
            payload.len()
        )));
    }
    Ok(payload.split_at(len))
}

/// Parses an `RTM_NEWROUTE` payload (after the netlink header).
pub fn parse_route(payload: &[u8]) -> Result<Route> {
    let (h, attrs) = fixed(payload, RTMSG_LEN, "RTM_NEWROUTE")?;
    let mut r = Route {
        kind: h[7],
        oif: None,
        gateway: None,
        prefsrc: None,
        table: Some(u32::from(h[4])),
    };
    for a in Attrs::new(attrs) {
        let a = a?;
        match a.kind() {
            RTA_OIF => r.oif = Some(a.u32()?),
            RTA_GATEWAY => r.gateway = Some(ipv4(a.payload())?),
            RTA_PREFSRC => r.prefsrc = Some(ipv4(a.payload())?),
            RTA_TABLE => r.table = Some(a.u32()?),
            _ => {}
        }
    }
    Ok(r)
}

/// Parses an `RTM_NEWNEIGH` payload.
pub fn parse_neigh(payload: &[u8]) -> Result<Neighbour> {
    let (h, attrs) = fixed(payload, NDMSG_LEN, "RTM_NEWNEIGH")?;
    let mut n = Neighbour {
        ifindex: u32::from_ne_bytes([h[4], h[5], h[6], h[7]]),
        dst: None,
        lladdr: None,
        state: u16::from_ne_bytes([h[8], h[9]]),
    };
    for a in Attrs::new(attrs) {
        let a = a?;
        match a.kind() {
            NDA_DST => n.dst = Some(ipv4(a.payload())?),
            NDA_LLADDR => n.lladdr = Some(a.payload().to_vec()),
            _ => {}
        }
    }
    Ok(n)
}

/// Parses an `RTM_NEWLINK` payload.
pub fn parse_link(payload: &[u8]) -> Result<Link> {
    let (h, attrs) = fixed(payload, IFINFOMSG_LEN, "RTM_NEWLINK")?;
    let mut l = Link {
        ifindex: u32::from_ne_bytes([h[4], h[5], h[6], h[7]]),
        name: None,
        mtu: None,
        address: None,
        xdp: XdpState::default(),
    };
    for a in Attrs::new(attrs) {
        let a = a?;
        match a.kind() {
            IFLA_IFNAME => l.name = Some(a.str()),
            IFLA_MTU => l.mtu = Some(a.u32()?),
            IFLA_ADDRESS => l.address = Some(a.payload().to_vec()),
            IFLA_XDP => {
                for x in a.nested() {
                    let x = x?;
                    match x.kind() {
                        IFLA_XDP_ATTACHED => l.xdp.attached = x.u8()?,
                        IFLA_XDP_PROG_ID => l.xdp.prog_id = Some(x.u32()?),
                        IFLA_XDP_DRV_PROG_ID => l.xdp.drv_prog_id = Some(x.u32()?),
                        IFLA_XDP_SKB_PROG_ID => l.xdp.skb_prog_id = Some(x.u32()?),
                        IFLA_XDP_HW_PROG_ID => l.xdp.hw_prog_id = Some(x.u32()?),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(l)
}

/// Collects the answer to one rtnetlink `do` request sent with `NLM_F_ACK` (pure: no I/O): the
/// reply messages of type `reply` with the request's sequence number, until the ACK.
#[derive(Debug)]
pub struct RtnlCollector<'r> {
    op: &'static str,
    target: &'r str,
    seq: u32,
    reply: u16,
    replies: Vec<Vec<u8>>,
}

impl<'r> RtnlCollector<'r> {
    /// Starts collecting replies of type `reply` to the request `op` (for errors: e.g.
    /// `"RTM_GETROUTE"`) with sequence number `seq`, aimed at `target`.
    pub fn new(op: &'static str, target: &'r str, seq: u32, reply: u16) -> RtnlCollector<'r> {
        RtnlCollector {
            op,
            target,
            seq,
            reply,
            replies: Vec::new(),
        }
    }

    /// Feeds one datagram. `Ok(true)` once the ACK (or `NLMSG_DONE`) came; a kernel error is
    /// an [`Error::Kernel`] or [`Error::Permission`] naming the request. Messages with another
    /// sequence number are skipped.
    pub fn feed(&mut self, datagram: &[u8]) -> Result<bool> {
        for m in messages(datagram) {
            let m = m.map_err(|e| e.in_context(self.op))?;
            if m.header.seq != self.seq {
                continue;
            }
            match m.header.kind {
                NLMSG_NOOP => {}
                NLMSG_ERROR => {
                    let e = parse_error(m.header.flags, m.payload)
                        .map_err(|e| e.in_context(self.op))?;
                    if e.errno != 0 {
                        return Err(Error::from_kernel(KernelError {
                            op: self.op,
                            target: self.target.to_string(),
                            errno: e.errno,
                            extack: e.extack,
                            bad_attr: None,
                            missing_attr: None,
                        }));
                    }
                    return Ok(true);
                }
                NLMSG_DONE => return Ok(true),
                NLMSG_OVERRUN => {
                    return Err(Error::Malformed {
                        context: self.op.into(),
                        what: "NLMSG_OVERRUN: the kernel lost data".into(),
                    })
                }
                k if k == self.reply => self.replies.push(m.payload.to_vec()),
                k => {
                    return Err(Error::Malformed {
                        context: self.op.into(),
                        what: format!("message type {k}, expected {}", self.reply),
                    })
                }
            }
        }
        Ok(false)
    }

    /// The reply payloads gathered.
    pub fn into_replies(self) -> Vec<Vec<u8>> {
        self.replies
    }
}

/// An rtnetlink socket in the calling thread's network namespace (the namespace is fixed when
/// it is opened).
#[derive(Debug)]
pub struct Rtnl {
    sock: NlSocket,
    seq: u32,
    buf: Vec<u8>,
}

impl Rtnl {
    /// Opens the socket.
    pub fn open() -> Result<Rtnl> {
        let sock = NlSocket::open(NETLINK_ROUTE)
            .map_err(|e| Error::io("opening an rtnetlink socket", e))?;
        Ok(Rtnl {
            sock,
            seq: 0,
            buf: vec![0; 64 * 1024],
        })
    }

    fn exchange(
        &mut self,
        op: &'static str,
        target: &str,
        reply: u16,
        build: impl FnOnce(u32) -> Result<Vec<u8>>,
    ) -> Result<Vec<u8>> {
        self.seq = self.seq.wrapping_add(1);
        let req = build(self.seq)?;
        let ctx = || format!("{op} {target}");
        let mut col = RtnlCollector::new(op, target, self.seq, reply);
        crate::conn::send_and_collect(&self.sock, &mut self.buf, &req, &ctx, |d| col.feed(d))?;
        col.into_replies()
            .into_iter()
            .next()
            .ok_or_else(|| Error::Malformed {
                context: op.into(),
                what: "the kernel acknowledged the request without an answer".into(),
            })
    }

    /// The route the kernel would send `dst` by (`ip route get DST [oif IFINDEX]`).
    pub fn route_get(&mut self, dst: Ipv4Addr, oif: Option<u32>) -> Result<Route> {
        let target = match oif {
            Some(i) => format!("{dst} oif {i}"),
            None => dst.to_string(),
        };
        let p = self.exchange("RTM_GETROUTE", &target, RTM_NEWROUTE, |seq| {
            route_get_request(seq, dst, oif)
        })?;
        parse_route(&p)
    }

    /// The neighbour entry of `dst` on `ifindex`, `None` when there is none.
    pub fn neigh_get(&mut self, ifindex: u32, dst: Ipv4Addr) -> Result<Option<Neighbour>> {
        let target = format!("{dst} dev {ifindex}");
        match self.exchange("RTM_GETNEIGH", &target, RTM_NEWNEIGH, |seq| {
            neigh_get_request(seq, ifindex, dst)
        }) {
            Ok(p) => parse_neigh(&p).map(Some),
            Err(e) if e.errno() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The link `ifindex`.
    pub fn link_get(&mut self, ifindex: u32) -> Result<Link> {
        let target = format!("ifindex {ifindex}");
        let p = self.exchange("RTM_GETLINK", &target, RTM_NEWLINK, |seq| {
            link_get_request(seq, ifindex)
        })?;
        parse_link(&p)
    }
}

#[cfg(test)]
mod tests;
