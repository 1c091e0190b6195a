//! An AF_XDP socket on queue 0 of one interface through zcnet-sys's `XdpSocket` — the layer
//! under `zcnet::xsk::Xsk` — and, for a receiver, the XDP program that redirects one UDP port
//! to it: the AF_XDP side of `zcnet bench xsk`, raw as its AF_PACKET side ([`crate::af_packet`])
//! is. Errors say which step failed ([`Step`]); the bench words them.

use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use zcnet_sys::bpf::{BpfProg, XdpAttachMode, XdpLink, XskMap};
use zcnet_sys::mem::Mapping;
pub use zcnet_sys::xsk::{XdpStatistics, XskBindMode};
use zcnet_sys::xsk_socket::{UmemFrame, XdpSocket, XdpSocketConfig};

/// The step of a setup or of the data path that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Mapping the UMEM (its length).
    Umem(usize),
    /// Binding the socket to queue 0.
    Bind,
    /// `BPF_MAP_CREATE` of the XSKMAP.
    MapCreate,
    /// Putting the socket in the XSKMAP.
    MapSet,
    /// Loading the XDP program.
    ProgLoad,
    /// Attaching it (native, else generic).
    Attach,
    /// The fill, RX, TX or completion rings.
    Rings,
    /// `sendto`, the transmit kick.
    Kick,
    /// `poll` for received frames.
    Poll,
    /// Frames (this many) still with the kernel 2 s after the last was queued.
    Unsent(usize),
}

/// A failed [`Step`] and the kernel's error.
#[derive(Debug)]
pub struct XdpError {
    /// What failed.
    pub step: Step,
    /// Why.
    pub source: io::Error,
}

fn at(step: Step) -> impl Fn(io::Error) -> XdpError {
    move |source| XdpError { step, source }
}

/// The receiver: 16384 frames of 2048 B (32 MiB of UMEM) and 8192-entry fill and RX rings, so
/// that it rides out a few milliseconds off the CPU as a 32 MiB TPACKET_V3 ring does. The
/// sender: 4096 frames and 2048-entry TX and completion rings.
fn socket_config(mode: XskBindMode, rx: bool) -> XdpSocketConfig {
    let (frames, big, small) = if rx {
        (16384, 8192, 64)
    } else {
        (4096, 64, 2048)
    };
    XdpSocketConfig {
        frame_size: 2048,
        frame_count: frames,
        headroom: 0,
        fill_size: big,
        rx_size: big,
        comp_size: small,
        tx_size: small,
        need_wakeup: true,
        mode,
    }
}

/// One side of the bench. Field order is drop order: the program is detached before the
/// socket closes.
pub struct XdpSide {
    xdp: Option<(XdpLink, BpfProg, XskMap)>,
    sock: XdpSocket,
    /// Sender: free frames. Receiver: frames to give back on the fill ring.
    free: Vec<UmemFrame>,
    /// Sender: frames written, not yet on the TX ring. Receiver: frames just received.
    work: Vec<UmemFrame>,
}

impl std::fmt::Debug for XdpSide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpSide")
            .field("program", &self.xdp.is_some())
            .field("free", &self.free.len())
            .field("work", &self.work.len())
            .finish_non_exhaustive()
    }
}

impl XdpSide {
    /// A socket bound in `mode` to queue 0 of `ifindex`; a receiver (`rx_port`) also gets the
    /// XDP program that redirects UDP to that port to it (native XDP where the driver has it,
    /// else generic, as `zcnet::xsk::Xsk` does).
    pub fn open(
        mode: XskBindMode,
        ifindex: u32,
        rx_port: Option<u16>,
    ) -> Result<XdpSide, XdpError> {
        let cfg = socket_config(mode, rx_port.is_some());
        let umem = Mapping::anonymous(cfg.umem_len()).map_err(at(Step::Umem(cfg.umem_len())))?;
        let (sock, free) = XdpSocket::new(umem, ifindex, 0, &cfg).map_err(at(Step::Bind))?;
        let mut side = XdpSide {
            xdp: None,
            sock,
            free,
            work: Vec::with_capacity(256),
        };
        if let Some(port) = rx_port {
            let map = XskMap::create(1, "zcnet_xskbench").map_err(at(Step::MapCreate))?;
            map.set(0, side.sock.fd()).map_err(at(Step::MapSet))?;
            let insns = zcnet_core::xdp_prog::udp_port_redirect(map.fd().as_raw_fd(), port);
            let prog = BpfProg::load_xdp(&insns, "zcnet_xskbench")
                .map_err(|e| io::Error::other(e.to_string()))
                .map_err(at(Step::ProgLoad))?;
            let link = match XdpLink::attach(&prog, ifindex, XdpAttachMode::Native) {
                Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                    XdpLink::attach(&prog, ifindex, XdpAttachMode::Generic)
                }
                r => r,
            }
            .map_err(at(Step::Attach))?;
            side.xdp = Some((link, prog, map));
        }
        Ok(side)
    }

    /// Sender: takes back completed frames, writes up to `batch` more (`write` fills a frame
    /// for a sequence number and returns its length) from `*seq` on, queues them and kicks.
    pub fn send(
        &mut self,
        batch: usize,
        seq: &mut u64,
        mut write: impl FnMut(&mut [u8], u64) -> usize,
    ) -> Result<(), XdpError> {
        self.sock
            .complete(&mut self.free, u32::MAX)
            .map_err(at(Step::Rings))?;
        // `work` keeps frames the TX ring had no room for: they go first, in order.
        while self.work.len() < batch {
            let Some(mut f) = self.free.pop() else { break };
            let n = write(f.bytes_mut(), *seq + self.work.len() as u64);
            f.set_data(0, n as u32).map_err(at(Step::Rings))?;
            self.work.push(f);
        }
        let n = self
            .sock
            .transmit(&mut self.work)
            .map_err(at(Step::Rings))?;
        *seq += n as u64;
        self.sock.kick_tx().map_err(at(Step::Kick))?;
        Ok(())
    }

    /// Sender: kicks and completes until every frame queued is sent (at most 2 s); frames
    /// still with the kernel then are an error ([`Step::Unsent`]), not frames sent.
    pub fn flush(&mut self) -> Result<(), XdpError> {
        self.work.clear();
        let end = Instant::now() + Duration::from_secs(2);
        while self.sock.frames_in_tx() > 0 && Instant::now() < end {
            self.sock.kick_tx().map_err(at(Step::Kick))?;
            self.sock
                .complete(&mut self.free, u32::MAX)
                .map_err(at(Step::Rings))?;
            std::thread::yield_now();
        }
        match self.sock.frames_in_tx() {
            0 => Ok(()),
            n => Err(XdpError {
                step: Step::Unsent(n),
                source: io::Error::from_raw_os_error(libc::ETIMEDOUT),
            }),
        }
    }

    /// The kernel's counters for the socket (`XDP_STATISTICS`).
    pub fn statistics(&self) -> io::Result<XdpStatistics> {
        self.sock.statistics()
    }

    /// Receiver: refills, hands each frame that arrived to `frame`; waits up to `wait` if
    /// none had.
    pub fn receive(
        &mut self,
        wait: Duration,
        mut frame: impl FnMut(&[u8]),
    ) -> Result<(), XdpError> {
        self.sock.fill(&mut self.free).map_err(at(Step::Rings))?;
        let n = self
            .sock
            .receive(&mut self.work, 256)
            .map_err(at(Step::Rings))?;
        for f in self.work.drain(..) {
            frame(f.data());
            self.free.push(f);
        }
        if n == 0 && !wait.is_zero() {
            self.sock.wait_rx(wait).map_err(at(Step::Poll))?;
        }
        Ok(())
    }
}
