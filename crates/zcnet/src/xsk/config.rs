//! How an [`Xsk`](super::Xsk) binds and what it takes of the UMEM: the bind mode, the XDP
//! attach mode and [`XskConfig`].

use super::*;

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

    pub(super) fn bind(self) -> XskBindMode {
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

    pub(super) fn check(&self) -> Result<()> {
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
        if self.rx_frames.checked_add(self.tx_frames).is_none() {
            return Err(Error::invalid_input(format!(
                "{} rx_frames and {} tx_frames are more frames than a UMEM can count: use fewer",
                self.rx_frames, self.tx_frames
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
