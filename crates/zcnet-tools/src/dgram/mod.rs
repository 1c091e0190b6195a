//! UDP datagrams for `zcnet send --udp` and `zcnet recv --udp`: sent as AF_XDP frames
//! ([`XskUdpSender`]), received from an AF_XDP socket fed by an XDP program or from an ordinary
//! UDP socket ([`UdpReceiver`]), each verified against the seeded pattern
//! ([`zcnet_core::dgram::DatagramCheck`]) and counted with the kernel's own account.
//!
//! ```text
//!   send --tx af-xdp:  route + neighbour (zcnet::nexthop) ─► UdpFlow headers + payload in a
//!                      UMEM frame ─► TX ring (64 a batch) ─► kick ─► completion ring
//!   recv --rx af-xdp:  XDP program (UDP port P → XSKMAP) ─► RX ring ─► parse ─► check ─► fill
//!   recv --rx copy:    UDP socket ─► recv() ─► check
//! ```
//!
//! Honest accounting: AF_XDP in copy mode (the only mode veth, lo and most drivers allow) is
//! not zero copy — the kernel copies each transmitted frame into an skb, and each received
//! packet from its skb into the UMEM. Only a zero-copy bind (`XDP_ZEROCOPY`, which is tried
//! first and whose refusal is reported) hands the UMEM pages to the driver. The reports say
//! which one ran and count bytes as zero-copied only for the latter.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use zcnet::nexthop::{self, NextHop, Resolution};
use zcnet::os::Wake;
use zcnet::xsk::{RxFrame, TxFrame, Xsk, XskConfig, XskMode, XskStats};
use zcnet::{Error, MemoryKind, Pattern, Region, Result};
use zcnet_core::dgram::DatagramCheck;
use zcnet_core::udp_frame::{self, UdpFlow, HEADERS_LEN, IPV4_HLEN, UDP_HLEN};
use zcnet_core::xsk::XDP_PACKET_HEADROOM;

use crate::xskbench::one_line;

mod recv;
mod send;
pub use recv::*;
pub use send::*;

/// Frames handed to the TX ring at a time (and datagrams between two reads of the clock).
pub const BATCH: usize = 64;
/// How long the sender waits for the kernel to resolve the next hop's Ethernet address (ARP
/// sends 3 requests a second apart before it gives up).
pub const RESOLVE_WAIT: Duration = Duration::from_secs(3);
/// UMEM frames (and ring entries) of the sender.
pub const TX_FRAMES: u32 = 2048;
/// UMEM frames (and ring entries) of the receiver: a burst this long is taken whole even while
/// the receiver is off the CPU.
pub const RX_FRAMES: u32 = 4096;
/// The receive buffer a UDP socket receiver asks for (granted past `net.core.rmem_max` with
/// CAP_NET_ADMIN).
pub const SOCKET_RCVBUF: usize = 32 << 20;
/// How long the sender waits for the kernel to take or complete frames before it gives up.
const STALL: Duration = Duration::from_secs(5);

/// What one AF_XDP frame can carry on an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XskLimits {
    /// The UMEM frame size used (2048, or 4096 where the MTU needs it).
    pub frame_size: u32,
    /// The interface's MTU.
    pub mtu: u32,
    /// The largest UDP payload: the frame less the receive headroom (`XDP_PACKET_HEADROOM`,
    /// which a receiving frame keeps in front of the packet) and the Ethernet/IPv4/UDP headers,
    /// and no more than the MTU less the IPv4/UDP headers (a longer frame is dropped by the
    /// device).
    pub max_payload: usize,
}

impl XskLimits {
    /// The limits for an interface with this MTU.
    pub fn for_mtu(mtu: u32) -> XskLimits {
        // The receiver's frame also keeps XDP_PACKET_HEADROOM (256 B) in front of the packet.
        let frame_size = if (mtu as usize + udp_frame::ETH_HLEN) <= 2048 - 256 {
            2048
        } else {
            4096
        };
        let by_frame = frame_payload(frame_size);
        let by_mtu = (mtu as usize).saturating_sub(IPV4_HLEN + UDP_HLEN);
        XskLimits {
            frame_size,
            mtu,
            max_payload: by_frame.min(by_mtu),
        }
    }

    /// The limits of `iface` (its MTU read over rtnetlink, calling thread's namespace).
    pub fn of(iface: &str) -> Result<XskLimits> {
        Ok(XskLimits::for_mtu(nexthop::link(iface)?.mtu))
    }

    /// Refuses a datagram of `size` bytes that does not fit one frame (exit code 2), naming the
    /// flag as given (`flag` `given`) and the limit.
    pub fn check(&self, flag: &str, given: &str, size: usize, iface: &str) -> Result<()> {
        if size <= self.max_payload {
            return Ok(());
        }
        let by_frame = frame_payload(self.frame_size);
        let why = if self.max_payload < by_frame {
            format!(
                "MTU {} less {} B of IPv4 and UDP headers; an AF_XDP frame of {} B would hold {by_frame} B",
                self.mtu,
                IPV4_HLEN + UDP_HLEN,
                self.frame_size
            )
        } else {
            format!(
                "an AF_XDP frame of {} B less the {XDP_PACKET_HEADROOM} B a receiving frame keeps in front of the packet and {HEADERS_LEN} B of Ethernet, IPv4 and UDP headers",
                self.frame_size
            )
        };
        Err(Error::invalid_input(format!(
            "{flag} {given} ({size} B) does not fit one AF_XDP frame on {iface}: a datagram carries at most {} B there ({why}): use {flag} {} or less",
            self.max_payload, self.max_payload
        )))
    }
}

/// The UDP payload one AF_XDP frame of `frame_size` carries to a receiver: the frame less
/// `XDP_PACKET_HEADROOM` (the kernel's room in front of a received packet) and the headers.
fn frame_payload(frame_size: u32) -> usize {
    frame_size as usize - XDP_PACKET_HEADROOM as usize - HEADERS_LEN
}

/// Binds `cfg` on `iface` in zero-copy mode, and in copy mode when the driver refuses that.
/// Returns the socket and, after a refusal, why zero copy was not had.
fn open_xsk(iface: &str, memory: MemoryKind, cfg: &XskConfig) -> Result<(Xsk, Option<String>)> {
    let zc = XskConfig {
        mode: XskMode::ZeroCopy,
        ..*cfg
    };
    match Xsk::open(iface, Region::new(memory, zc.umem_len())?, &zc) {
        Ok(mut x) => {
            x.set_cancel(crate::interrupt::token());
            Ok((x, None))
        }
        Err(Error::Unsupported { what, source, .. }) => {
            let why = format!("{what}: {source}");
            let copy = XskConfig {
                mode: XskMode::Copy,
                ..*cfg
            };
            // A refused bind leaves nothing bound; the copy-mode bind follows at once.
            let mut x = Xsk::open(iface, Region::new(memory, copy.umem_len())?, &copy)?;
            x.set_cancel(crate::interrupt::token());
            Ok((x, Some(one_line(&why))))
        }
        Err(e) => Err(e),
    }
}

fn kernel_json(k: &zcnet::xsk::XdpStatistics) -> Value {
    json!({
        "rx_dropped": k.rx_dropped,
        "rx_invalid_descs": k.rx_invalid_descs,
        "tx_invalid_descs": k.tx_invalid_descs,
        "rx_ring_full": k.rx_ring_full,
        "rx_fill_ring_empty_descs": k.rx_fill_ring_empty_descs,
        "tx_ring_empty_descs": k.tx_ring_empty_descs,
    })
}

fn mb_per_s(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 / seconds / 1e6
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests;
