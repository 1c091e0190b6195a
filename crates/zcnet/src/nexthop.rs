//! Where an IPv4 packet for a destination goes, as the kernel would send it: the device, the
//! source address, the next hop and its Ethernet address — what a program that builds its own
//! frames ([`crate::xsk`]) needs to address them as the stack would.
//!
//! Everything comes from the kernel of the calling thread's network namespace, over rtnetlink
//! ([`zcnet_netlink::rtnl`]): the route (`ip route get`), the neighbour entry (`ip neigh get`)
//! and the link (MTU, XDP programs attached). When the neighbour table has no usable entry,
//! [`resolve`] has the kernel resolve it the ordinary way — a zero-length UDP datagram to the
//! destination's discard port (9) from the source address, which makes the kernel send its
//! ARP request — and waits for the answer. Nothing is written into the neighbour table.
//!
//! ```no_run
//! use std::time::Duration;
//! # fn main() -> zcnet::Result<()> {
//! let stop = zcnet::Cancel::new(); // another thread may cancel the wait for the answer
//! let dst = "10.10.0.2".parse().unwrap();
//! let hop = zcnet::nexthop::resolve("vA", dst, Duration::from_secs(3), &stop)?;
//! println!("{} → {} via {:02x?} (MTU {})", hop.src, hop.dst, hop.dst_mac, hop.mtu);
//! # Ok(()) }
//! ```

use crate::cancel::Cancel;
use crate::error::{Error, Result};
use crate::nic::live::kernel_err;
use std::net::{Ipv4Addr, UdpSocket};
use std::time::{Duration, Instant};
use zcnet_netlink::rtnl::{Neighbour, Rtnl, RTN_LOCAL, RTN_UNICAST};

/// The discard port (RFC 863): where [`resolve`] sends its empty datagram.
pub const DISCARD_PORT: u16 = 9;

/// How often [`resolve`] looks at the neighbour entry while the kernel resolves it.
const POLL: Duration = Duration::from_millis(10);

/// How the next hop's Ethernet address was had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// The neighbour table had it, in this state (`REACHABLE`, `STALE`, `PERMANENT`, …).
    Cached(&'static str),
    /// The kernel resolved it after a datagram from [`resolve`], in this long.
    Resolved(Duration),
}

/// Where frames for one IPv4 destination go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextHop {
    /// The interface.
    pub iface: String,
    /// Its index.
    pub ifindex: u32,
    /// The source address the kernel would use.
    pub src: Ipv4Addr,
    /// The destination.
    pub dst: Ipv4Addr,
    /// The gateway, when the destination is not on the link.
    pub gateway: Option<Ipv4Addr>,
    /// The interface's Ethernet address.
    pub src_mac: [u8; 6],
    /// The next hop's Ethernet address (the destination's, or the gateway's).
    pub dst_mac: [u8; 6],
    /// The interface's MTU (bytes of IP packet per frame).
    pub mtu: u32,
    /// How `dst_mac` was had.
    pub resolution: Resolution,
}

impl NextHop {
    /// The address whose Ethernet address the frames carry: the gateway or the destination.
    pub fn next_hop(&self) -> Ipv4Addr {
        self.gateway.unwrap_or(self.dst)
    }
}

/// A link's state, as far as AF_XDP cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkState {
    /// The interface index.
    pub ifindex: u32,
    /// The MTU.
    pub mtu: u32,
    /// The ids of the XDP programs attached to it (native, generic or offloaded; by bpf_link or
    /// otherwise); empty when none is.
    pub xdp_prog_ids: Vec<u32>,
}

fn ifindex(iface: &str) -> Result<u32> {
    zcnet_sys::zcrx::if_index(iface).ok_or_else(|| Error::UnknownInterface {
        given: iface.to_string(),
    })
}

fn link_of(nl: &mut Rtnl, iface: &str, ifindex: u32) -> Result<LinkState> {
    let l = nl.link_get(ifindex).map_err(kernel_err)?;
    let mtu = l.mtu.ok_or_else(|| Error::Kernel {
        what: format!("reading the MTU of {iface}").into(),
        errno: None,
        message: "the kernel's RTM_NEWLINK has no IFLA_MTU".into(),
    })?;
    Ok(LinkState {
        ifindex,
        mtu,
        xdp_prog_ids: l.xdp.prog_ids(),
    })
}

/// The MTU and XDP programs of `iface` (calling thread's namespace).
pub fn link(iface: &str) -> Result<LinkState> {
    let i = ifindex(iface)?;
    let mut nl = Rtnl::open().map_err(kernel_err)?;
    link_of(&mut nl, iface, i)
}

fn mac6(v: &[u8]) -> Option<[u8; 6]> {
    v.try_into().ok()
}

fn usable(n: &Option<Neighbour>) -> Option<[u8; 6]> {
    n.as_ref()
        .filter(|n| n.is_valid())
        .and_then(|n| n.lladdr.as_deref().and_then(mac6))
}

/// Where frames for `dst` go when sent from `iface`: the kernel's route must leave through
/// `iface` (otherwise the frames would take a path the stack does not), the source address is
/// the one the kernel would choose, and the next hop's Ethernet address comes from the
/// neighbour table — resolved by the kernel, waiting up to `wait`, when the table has no usable
/// entry. One-line errors name what is missing and the fix. Cancelling `cancel` ends the wait
/// ([`Error::Interrupted`]).
pub fn resolve(iface: &str, dst: Ipv4Addr, wait: Duration, cancel: &Cancel) -> Result<NextHop> {
    let ifindex = ifindex(iface)?;
    let mut nl = Rtnl::open().map_err(kernel_err)?;
    let route = nl.route_get(dst, None).map_err(kernel_err)?;
    if route.kind == RTN_LOCAL {
        return Err(Error::invalid_input(format!(
            "{dst} is an address of this host: frames sent from {iface} do not come back to it; send to an address of another host (or namespace)"
        )));
    }
    if route.kind != RTN_UNICAST {
        return Err(Error::invalid_input(format!(
            "the kernel's route to {dst} is {} (not unicast): there is no next hop to address Ethernet frames to; send to a unicast address",
            route.kind_name()
        )));
    }
    if route.oif != Some(ifindex) {
        let oif = route.oif.unwrap_or(0);
        let via = nl
            .link_get(oif)
            .ok()
            .and_then(|l| l.name)
            .unwrap_or_else(|| format!("ifindex {oif}"));
        return Err(Error::invalid_input(format!(
            "{dst} is routed via {via}, not {iface}: send from {via}, or add a route to {dst} via {iface}"
        )));
    }
    let src = route.prefsrc.ok_or_else(|| {
        Error::invalid_input(format!(
            "{iface} has no IPv4 address to send from: add one ('ip addr add ADDR/LEN dev {iface}')"
        ))
    })?;
    let link = link_of(&mut nl, iface, ifindex)?;
    let src_mac = crate::xsk::interface_mac(iface)?;
    let next = route.gateway.unwrap_or(dst);
    let hop = |dst_mac, resolution| NextHop {
        iface: iface.to_string(),
        ifindex,
        src,
        dst,
        gateway: route.gateway,
        src_mac,
        dst_mac,
        mtu: link.mtu,
        resolution,
    };
    let n = nl.neigh_get(ifindex, next).map_err(kernel_err)?;
    if let Some(mac) = usable(&n) {
        let state = n.as_ref().map_or("NONE", Neighbour::state_name);
        return Ok(hop(mac, Resolution::Cached(state)));
    }
    // No usable entry: have the kernel resolve it by sending an ordinary datagram there.
    let start = Instant::now();
    let probe = UdpSocket::bind((src, 0))
        .and_then(|s| s.send_to(&[], (dst, DISCARD_PORT)).map(|_| s))
        .map_err(|e| Error::io(format!("sending a datagram to {dst} to resolve {next}"), e))?;
    let last = loop {
        if cancel.sleep(POLL) {
            return Err(Error::Interrupted);
        }
        let last = nl.neigh_get(ifindex, next).map_err(kernel_err)?;
        if let Some(mac) = usable(&last) {
            drop(probe);
            return Ok(hop(mac, Resolution::Resolved(start.elapsed())));
        }
        let failed = last
            .as_ref()
            .is_some_and(|n| n.state & zcnet_netlink::rtnl::NUD_FAILED != 0);
        if failed || start.elapsed() >= wait {
            break last;
        }
    };
    let state = last.as_ref().map_or("no entry", Neighbour::state_name);
    let what = match route.gateway {
        Some(g) => format!("the gateway {g}"),
        None => dst.to_string(),
    };
    Err(Error::io(
        format!("no Ethernet address for {what} on {iface}"),
        std::io::Error::new(
            std::io::ErrorKind::HostUnreachable,
            format!(
                "the kernel's ARP got no answer in {:.1} s (neighbour state {state}): check that {next} is up and on {iface}'s link, or add it ('ip neigh add {next} lladdr MAC dev {iface}')",
                start.elapsed().as_secs_f64()
            ),
        ),
    ))
}
