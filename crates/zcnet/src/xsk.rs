//! AF_XDP: packets sent and received through a UMEM in a zcnet [`Region`], one queue of one
//! interface, with an XDP program that hands the socket the UDP packets of one port.
//!
//! ```no_run
//! use std::time::Duration;
//! use zcnet::xsk::{Xsk, XskConfig};
//! use zcnet::Region;
//! # fn main() -> zcnet::Result<()> {
//! let mut cfg = XskConfig::new(0); // queue 0
//! cfg.rx_port = Some(5201);        // UDP to port 5201 comes here; everything else to the stack
//! let mut xsk = Xsk::open("eth0", Region::anonymous(cfg.umem_len())?, &cfg)?;
//! let mut frames = Vec::new();
//! xsk.recv(&mut frames, 64, Duration::from_millis(100))?;
//! for f in frames.drain(..) {
//!     println!("{} B", f.data().len()); // dropping the frame gives it back to the kernel
//! }
//! # Ok(()) }
//! ```
//!
//! Ownership is that of [`crate::TxBuf`]/[`crate::RxBuf`]: a [`TxFrame`] handed to
//! [`Xsk::send`] is the kernel's until its completion, and comes back from [`Xsk::tx_frame`]
//! only after that; an [`RxFrame`] is the application's until it is dropped, which puts the
//! frame back on the fill ring. Frames `0..rx_frames` of the UMEM receive, the rest send.
//!
//! The XDP program is attached with a bpf_link: it goes away when the [`Xsk`] is dropped or the
//! process dies (SIGKILL included). Nothing is pinned. What this kernel and veth allow is in
//! ../../../shared/KERNEL-FACTS.md: copy mode only (zero-copy `EOPNOTSUPP`), native XDP on veth.

use crate::error::{Error, Result};
use crate::region::Region;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use zcnet_sys::bpf::{BpfProg, XdpAttachMode, XdpLink, XskMap};
use zcnet_sys::xsk::{XdpStatistics, XskBindMode};
use zcnet_sys::xsk_socket::{UmemFrame, XdpSocket, XdpSocketConfig};

/// How the socket binds to the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XskMode {
    /// `XDP_COPY`: works everywhere; the kernel copies packets between skbs and the UMEM.
    Copy,
    /// `XDP_ZEROCOPY`: the driver uses the UMEM directly; refused where it cannot (veth, lo).
    ZeroCopy,
}

impl XskMode {
    /// "copy" or "zero-copy".
    pub fn name(self) -> &'static str {
        self.bind().name()
    }

    fn bind(self) -> XskBindMode {
        match self {
            XskMode::Copy => XskBindMode::Copy,
            XskMode::ZeroCopy => XskBindMode::ZeroCopy,
        }
    }
}

/// Where the XDP program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    /// Native where the driver has it, else generic.
    Auto,
    /// Native (driver) XDP only.
    Native,
    /// Generic (skb) XDP.
    Generic,
}

/// What [`Xsk::open`] sets up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XskConfig {
    /// The queue to bind to.
    pub queue: u32,
    /// Copy or zero-copy.
    pub mode: XskMode,
    /// Bytes per UMEM frame: 2048 or 4096.
    pub frame_size: u32,
    /// Bytes left free in front of each received packet (beyond the kernel's 256).
    pub headroom: u32,
    /// Frames for receiving (kept on the fill ring); 0 for a send-only socket.
    pub rx_frames: u32,
    /// Frames for sending; 0 for a receive-only socket.
    pub tx_frames: u32,
    /// Entries of each ring (a power of two).
    pub ring_size: u32,
    /// Bind with `XDP_USE_NEED_WAKEUP` (syscalls only when the kernel asks).
    pub need_wakeup: bool,
    /// Attach an XDP program that redirects IPv4/UDP packets to this port on `queue` to the
    /// socket (all others pass to the stack). `None`: no program (send-only, or a program
    /// attached by someone else).
    pub rx_port: Option<u16>,
    /// Where that program runs.
    pub xdp_mode: XdpMode,
}

impl XskConfig {
    /// Queue `queue`, copy mode, 2048-byte frames, 1024 frames each way, 1024-entry rings,
    /// need-wakeup, no XDP program.
    pub fn new(queue: u32) -> XskConfig {
        XskConfig {
            queue,
            mode: XskMode::Copy,
            frame_size: 2048,
            headroom: 0,
            rx_frames: 1024,
            tx_frames: 1024,
            ring_size: 1024,
            need_wakeup: true,
            rx_port: None,
            xdp_mode: XdpMode::Auto,
        }
    }

    /// Bytes of UMEM (the region must be at least this long).
    pub fn umem_len(&self) -> usize {
        (self.rx_frames as usize + self.tx_frames as usize) * self.frame_size as usize
    }

    /// The largest packet one frame receives.
    pub fn rx_capacity(&self) -> u32 {
        zcnet_core::xsk::rx_capacity(self.frame_size, self.headroom)
    }

    fn check(&self) -> Result<()> {
        if self.frame_size != 2048 && self.frame_size != 4096 {
            return Err(Error::invalid_input(format!(
                "AF_XDP frame size {} is not supported: use 2048 or 4096",
                self.frame_size
            )));
        }
        if self.rx_capacity() < 64 {
            return Err(Error::invalid_input(format!(
                "headroom {} leaves no room in a {} B frame: use a smaller headroom",
                self.headroom, self.frame_size
            )));
        }
        if self.rx_frames + self.tx_frames == 0 {
            return Err(Error::invalid_input(
                "an AF_XDP socket needs frames: set rx_frames or tx_frames",
            ));
        }
        if !self.ring_size.is_power_of_two() || self.ring_size < 2 {
            return Err(Error::invalid_input(format!(
                "AF_XDP ring size {} is not a power of two: use e.g. 1024",
                self.ring_size
            )));
        }
        if self.rx_port.is_some() && self.rx_frames == 0 {
            return Err(Error::invalid_input(
                "rx_port needs rx_frames: a socket with no receive frames drops every packet",
            ));
        }
        Ok(())
    }
}

/// The XDP program and what keeps it attached. Field order is drop order: the link goes first.
#[derive(Debug)]
struct Attachment {
    link: XdpLink,
    prog: BpfProg,
    _map: XskMap,
}

/// A frame to send: write the packet, then hand it to [`Xsk::send`].
#[derive(Debug)]
pub struct TxFrame {
    frame: Option<UmemFrame>,
    back: mpsc::Sender<UmemFrame>,
}

impl TxFrame {
    fn frame(&self) -> &UmemFrame {
        // Some until into_inner or drop, which consume the frame.
        self.frame.as_ref().unwrap_or_else(|| unreachable!())
    }

    fn frame_mut(&mut self) -> &mut UmemFrame {
        self.frame.as_mut().unwrap_or_else(|| unreachable!())
    }

    /// Bytes one frame holds.
    pub fn capacity(&self) -> usize {
        self.frame().capacity()
    }

    /// The whole frame, to build a packet in place; then [`TxFrame::set_len`].
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.frame_mut().bytes_mut()
    }

    /// Sends the first `len` bytes of the frame.
    pub fn set_len(&mut self, len: usize) -> Result<()> {
        let cap = self.capacity();
        if len == 0 || len > cap {
            return Err(Error::invalid_input(format!(
                "a {len} B packet does not fit the {cap} B AF_XDP frame: use frame_size 4096 or a smaller packet"
            )));
        }
        self.frame_mut()
            .set_data(0, len as u32)
            .map_err(|e| Error::io("AF_XDP frame", e))
    }

    /// Copies `packet` into the frame and sends all of it.
    pub fn write(&mut self, packet: &[u8]) -> Result<()> {
        let cap = self.capacity();
        if packet.len() > cap {
            return self.set_len(packet.len());
        }
        self.bytes_mut()[..packet.len()].copy_from_slice(packet);
        self.set_len(packet.len())
    }

    /// The packet length set so far.
    pub fn len(&self) -> usize {
        self.frame().len() as usize
    }

    /// Whether no packet is set.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn into_inner(mut self) -> UmemFrame {
        self.frame.take().unwrap_or_else(|| unreachable!())
    }
}

impl Drop for TxFrame {
    fn drop(&mut self) {
        if let Some(f) = self.frame.take() {
            // The Xsk may be gone already; then the frame just goes with the UMEM.
            let _ = self.back.send(f);
        }
    }
}

/// A received packet. Dropping it puts the frame back on the fill ring (at the next
/// [`Xsk::recv`]).
#[derive(Debug)]
pub struct RxFrame {
    frame: Option<UmemFrame>,
    back: mpsc::Sender<UmemFrame>,
}

impl RxFrame {
    /// The packet (Ethernet frame).
    pub fn data(&self) -> &[u8] {
        self.frame.as_ref().map(UmemFrame::data).unwrap_or_default()
    }

    /// The UMEM frame it is in.
    pub fn frame_index(&self) -> u32 {
        self.frame.as_ref().map_or(0, UmemFrame::index)
    }
}

impl Drop for RxFrame {
    fn drop(&mut self) {
        if let Some(f) = self.frame.take() {
            let _ = self.back.send(f);
        }
    }
}

/// What the socket did, and what the kernel counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct XskStats {
    /// Frames handed to the kernel to send.
    pub tx_frames: u64,
    /// Of those, completed (sent).
    pub tx_completed: u64,
    /// Frames received.
    pub rx_frames: u64,
    /// `sendto` kicks made (only when the TX ring asked for one).
    pub kicks: u64,
    /// The kernel's counters (`XDP_STATISTICS`): drops, invalid descriptors, full rings.
    pub kernel: XdpStatistics,
}

/// An AF_XDP socket bound to one queue, its UMEM, and optionally the XDP program that feeds it.
#[derive(Debug)]
pub struct Xsk {
    // Field order is drop order: the program is detached before the socket closes.
    xdp: Option<Attachment>,
    sock: XdpSocket,
    /// TX frames with the application's Xsk (not handed out, not in the kernel).
    tx_free: Vec<UmemFrame>,
    /// RX frames waiting to go back on the fill ring.
    rx_spare: Vec<UmemFrame>,
    returned: mpsc::Receiver<UmemFrame>,
    back: mpsc::Sender<UmemFrame>,
    iface: String,
    config: XskConfig,
    xdp_mode: Option<XdpAttachMode>,
}

fn bind_error(e: io::Error, iface: &str, cfg: &XskConfig) -> Error {
    let what = format!(
        "AF_XDP {} bind to queue {} of {iface}",
        cfg.mode.name(),
        cfg.queue
    );
    match e.raw_os_error() {
        // net/xdp/xdp_umem.c `xdp_umem_account_pages`: the UMEM's pages are charged to the
        // user's locked memory unless the process has CAP_IPC_LOCK; over the limit: ENOBUFS.
        Some(libc::ENOBUFS) => {
            let page = zcnet_sys::mem::page_size() as u64;
            let need = (cfg.umem_len() as u64).div_ceil(page) * page;
            let umem = format!(
                "the AF_XDP UMEM ({})",
                crate::tx::memlock::size_words(need)
            );
            crate::tx::memlock::too_small(umem, need, need).unwrap_or_else(|| Error::io(what, e))
        }
        Some(libc::EPERM) => Error::NotRoot { what: "AF_XDP" },
        Some(libc::EAFNOSUPPORT) => Error::Unsupported {
            what,
            source: e,
            fix: "the kernel has no AF_XDP: build it with CONFIG_XDP_SOCKETS=y",
        },
        Some(libc::EOPNOTSUPP) if cfg.mode == XskMode::ZeroCopy => Error::Unsupported {
            what,
            source: e,
            fix: "the driver has no AF_XDP zero-copy support: use copy mode (XskMode::Copy)",
        },
        Some(libc::EINVAL) => Error::Unsupported {
            what,
            source: e,
            fix: "the interface has no such queue (see 'ethtool -l IFACE'), or the frame/ring sizes are invalid",
        },
        Some(libc::EBUSY) => Error::Unsupported {
            what,
            source: e,
            fix: "another AF_XDP socket is bound to that queue: close it or use another queue",
        },
        _ => Error::io(what, e),
    }
}

impl Xsk {
    /// Opens an AF_XDP socket on queue `cfg.queue` of `iface` (in the calling thread's network
    /// namespace) with its UMEM in `region`, gives the receive frames to the kernel, and — with
    /// `cfg.rx_port` — attaches the XDP program that redirects that UDP port to it. On error
    /// nothing stays attached, bound or mapped.
    pub fn open(iface: &str, region: Region, cfg: &XskConfig) -> Result<Xsk> {
        cfg.check()?;
        if region.len() < cfg.umem_len() {
            return Err(Error::RegionTooSmall {
                need: cfg.umem_len(),
                have: region.len(),
            });
        }
        if region.backing() == zcnet_sys::mem::Backing::Device {
            return Err(Error::NotCpuAccessible);
        }
        let ifindex = zcnet_sys::zcrx::if_index(iface).ok_or_else(|| Error::UnknownInterface {
            given: iface.to_string(),
        })?;
        let scfg = XdpSocketConfig {
            frame_size: cfg.frame_size,
            frame_count: cfg.rx_frames + cfg.tx_frames,
            headroom: cfg.headroom,
            fill_size: cfg.ring_size,
            comp_size: cfg.ring_size,
            rx_size: cfg.ring_size,
            tx_size: cfg.ring_size,
            need_wakeup: cfg.need_wakeup,
            mode: cfg.mode.bind(),
        };
        let (sock, mut frames) = XdpSocket::new(region.into_mapping(), ifindex, cfg.queue, &scfg)
            .map_err(|e| bind_error(e, iface, cfg))?;
        let tx_free = frames.split_off(cfg.rx_frames as usize);
        let (back, returned) = mpsc::channel();
        let mut xsk = Xsk {
            xdp: None,
            sock,
            tx_free,
            rx_spare: frames,
            returned,
            back,
            iface: iface.to_string(),
            config: *cfg,
            xdp_mode: None,
        };
        xsk.refill()?;
        if let Some(port) = cfg.rx_port {
            xsk.attach(ifindex, port)?;
        }
        Ok(xsk)
    }

    fn attach(&mut self, ifindex: u32, port: u16) -> Result<()> {
        let iface = self.iface.clone();
        let q = self.config.queue;
        let map = XskMap::create(q + 1, "zcnet_xsk").map_err(|e| match e.raw_os_error() {
            Some(libc::EPERM) => Error::NotRoot {
                what: "loading an XDP program",
            },
            _ => Error::io("creating the XSKMAP (bpf BPF_MAP_CREATE)", e),
        })?;
        map.set(q, self.sock.fd())
            .map_err(|e| Error::io("putting the AF_XDP socket in the XSKMAP", e))?;
        let insns = zcnet_core::xdp_prog::udp_port_redirect(map.fd().as_raw_fd(), port);
        let prog = BpfProg::load_xdp(&insns, "zcnet_xsk").map_err(|e| Error::Kernel {
            what: "the kernel refused the XDP program".into(),
            errno: e.source.raw_os_error(),
            message: format!("{} (a bug in zcnet: please report it with this log)", e),
        })?;
        let modes: &[XdpAttachMode] = match self.config.xdp_mode {
            XdpMode::Auto => &[XdpAttachMode::Native, XdpAttachMode::Generic],
            XdpMode::Native => &[XdpAttachMode::Native],
            XdpMode::Generic => &[XdpAttachMode::Generic],
        };
        let mut last = None;
        for (i, &mode) in modes.iter().enumerate() {
            match XdpLink::attach(&prog, ifindex, mode) {
                Ok(link) => {
                    self.xdp_mode = Some(mode);
                    self.xdp = Some(Attachment {
                        link,
                        prog,
                        _map: map,
                    });
                    return Ok(());
                }
                // Native unsupported by the driver: try generic.
                Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) && i + 1 < modes.len() => {}
                Err(e) => {
                    last = Some((mode, e));
                    break;
                }
            }
        }
        let (mode, e) = last.unwrap_or_else(|| unreachable!("the loop ends with an error"));
        let what = format!("attaching the {} XDP program to {iface}", mode.name());
        Err(match e.raw_os_error() {
            Some(libc::EBUSY) | Some(libc::EEXIST) => Error::Unsupported {
                what,
                source: e,
                fix: "another XDP program is attached to the interface: detach it ('ip link set dev IFACE xdp off', or end the process holding its bpf link) or use another interface",
            },
            Some(libc::EOPNOTSUPP) => Error::Unsupported {
                what,
                source: e,
                fix: "the driver has no native XDP: use XdpMode::Generic or Auto",
            },
            Some(libc::EPERM) => Error::NotRoot {
                what: "attaching an XDP program",
            },
            _ => Error::io(what, e),
        })
    }

    /// The interface.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// The configuration.
    pub fn config(&self) -> &XskConfig {
        &self.config
    }

    /// Whether the kernel bound the socket in zero-copy mode.
    pub fn is_zerocopy(&self) -> Result<bool> {
        self.sock
            .is_zerocopy()
            .map_err(|e| Error::io("getsockopt(XDP_OPTIONS)", e))
    }

    /// Where the XDP program runs, when there is one ("native" or "generic").
    pub fn xdp_mode(&self) -> Option<&'static str> {
        self.xdp_mode.map(XdpAttachMode::name)
    }

    /// The bpf_link id of the XDP attachment (for `bpftool link` or
    /// [`zcnet_sys::bpf::link_info`]).
    pub fn xdp_link_id(&self) -> Option<u32> {
        self.xdp
            .as_ref()
            .and_then(|a| a.link.info().ok())
            .map(|i| i.id)
    }

    /// The XDP program's id.
    pub fn xdp_prog_id(&self) -> Option<u32> {
        self.xdp.as_ref().and_then(|a| a.prog.id().ok())
    }

    fn take_returns(&mut self) {
        let rx = self.config.rx_frames;
        while let Ok(f) = self.returned.try_recv() {
            if f.index() < rx {
                self.rx_spare.push(f);
            } else {
                self.tx_free.push(f);
            }
        }
    }

    fn refill(&mut self) -> Result<()> {
        self.take_returns();
        self.sock
            .fill(&mut self.rx_spare)
            .map(drop)
            .map_err(|e| Error::io("AF_XDP fill ring", e))
    }

    /// Kicks the kernel when it asks and descriptors are pending, then takes back the frames
    /// it has sent. Returns how many came back.
    pub fn complete(&mut self) -> Result<usize> {
        self.sock
            .kick_tx()
            .map_err(|e| Error::io(format!("AF_XDP transmit on {}", self.iface), e))?;
        self.sock
            .complete(&mut self.tx_free, u32::MAX)
            .map_err(|e| Error::io("AF_XDP completion ring", e))
    }

    /// A frame to send, if one is free (after taking back completed ones).
    pub fn tx_frame(&mut self) -> Result<Option<TxFrame>> {
        self.take_returns();
        if self.tx_free.is_empty() {
            self.complete()?;
        }
        Ok(self.tx_free.pop().map(|f| TxFrame {
            frame: Some(f),
            back: self.back.clone(),
        }))
    }

    /// Hands frames from the front of `frames` to the kernel, as many as the TX ring has room
    /// for, and kicks it if it asks. The frames sent are removed from `frames`; they come back
    /// from [`Xsk::tx_frame`] once the kernel has completed them. Returns how many went.
    pub fn send(&mut self, frames: &mut Vec<TxFrame>) -> Result<usize> {
        if let Some(f) = frames.iter().find(|f| f.is_empty()) {
            return Err(Error::invalid_input(format!(
                "AF_XDP frame with no packet ({} B capacity): write it or set_len first",
                f.capacity()
            )));
        }
        let mut raw = Vec::with_capacity(frames.len());
        raw.extend(frames.drain(..).map(TxFrame::into_inner));
        let n = self
            .sock
            .transmit(&mut raw)
            .map_err(|e| Error::io("AF_XDP TX ring", e))?;
        // Those the ring had no room for go back to the caller, in order.
        let back = self.back.clone();
        frames.extend(raw.into_iter().map(|f| TxFrame {
            frame: Some(f),
            back: back.clone(),
        }));
        self.complete()?;
        Ok(n)
    }

    /// Frames handed to the kernel and not yet completed.
    pub fn tx_in_flight(&self) -> usize {
        self.sock.frames_in_tx()
    }

    /// Kicks and completes until every frame sent has come back, or `timeout` passes.
    /// Returns whether all came back.
    pub fn flush(&mut self, timeout: Duration) -> Result<bool> {
        let end = Instant::now() + timeout;
        loop {
            self.complete()?;
            if self.tx_in_flight() == 0 {
                return Ok(true);
            }
            if Instant::now() >= end {
                return Ok(false);
            }
            std::thread::yield_now();
        }
    }

    /// Appends up to `max` received packets to `out`, waiting up to `timeout` for the first.
    /// Frames dropped since the last call go back on the fill ring first. Returns how many.
    pub fn recv(&mut self, out: &mut Vec<RxFrame>, max: usize, timeout: Duration) -> Result<usize> {
        self.refill()?;
        let max = u32::try_from(max).unwrap_or(u32::MAX);
        let mut got = Vec::new();
        let mut n = self.receive_into(&mut got, max)?;
        if n == 0 && !timeout.is_zero() {
            let end = Instant::now() + timeout;
            while n == 0 {
                let left = end.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                self.sock
                    .wait_rx(left)
                    .map_err(|e| Error::io("poll on the AF_XDP socket", e))?;
                if crate::interrupted() {
                    return Err(Error::Interrupted);
                }
                self.refill()?;
                n = self.receive_into(&mut got, max)?;
            }
        }
        let back = self.back.clone();
        out.extend(got.into_iter().map(|f| RxFrame {
            frame: Some(f),
            back: back.clone(),
        }));
        Ok(n)
    }

    fn receive_into(&mut self, got: &mut Vec<UmemFrame>, max: u32) -> Result<usize> {
        self.sock
            .receive(got, max)
            .map_err(|e| Error::io("AF_XDP RX ring", e))
    }

    /// What the socket did and what the kernel counted.
    pub fn stats(&self) -> Result<XskStats> {
        let c = self.sock.frames().counts();
        Ok(XskStats {
            tx_frames: c.sent,
            tx_completed: c.completed,
            rx_frames: c.received,
            kicks: self.sock.kicks(),
            kernel: self
                .sock
                .statistics()
                .map_err(|e| Error::io("getsockopt(XDP_STATISTICS)", e))?,
        })
    }
}

/// The MAC address of `iface` in the calling thread's network namespace.
pub fn interface_mac(iface: &str) -> Result<[u8; 6]> {
    zcnet_sys::ifaddr::if_hwaddr(iface).map_err(|e| match e.raw_os_error() {
        Some(libc::ENODEV) => Error::UnknownInterface {
            given: iface.to_string(),
        },
        _ => Error::io(format!("reading the MAC address of {iface}"), e),
    })
}
