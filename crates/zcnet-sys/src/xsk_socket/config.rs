//! The sizes and options of an [`XdpSocket`]: frames, rings, need-wakeup and the bind mode.
//!
//! [`XdpSocket`]: super::XdpSocket

use crate::xsk::XskBindMode;

/// Sizes and options of an [`XdpSocket`].
///
/// [`XdpSocket`]: super::XdpSocket
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XdpSocketConfig {
    /// Bytes per frame: 2048 or 4096 (a power of two up to the page size).
    pub frame_size: u32,
    /// Frames in the UMEM (`frame_count * frame_size` bytes of the mapping are registered).
    pub frame_count: u32,
    /// Bytes the kernel leaves free in front of received data (beyond its own 256).
    pub headroom: u32,
    /// Fill ring entries (a power of two).
    pub fill_size: u32,
    /// Completion ring entries (a power of two).
    pub comp_size: u32,
    /// RX ring entries (a power of two).
    pub rx_size: u32,
    /// TX ring entries (a power of two).
    pub tx_size: u32,
    /// Bind with `XDP_USE_NEED_WAKEUP`.
    pub need_wakeup: bool,
    /// Copy or zero-copy.
    pub mode: XskBindMode,
}

impl Default for XdpSocketConfig {
    /// 4096 frames of 2048 bytes (8 MiB), 2048-entry rings, need-wakeup, copy mode.
    fn default() -> Self {
        XdpSocketConfig {
            frame_size: 2048,
            frame_count: 4096,
            headroom: 0,
            fill_size: 2048,
            comp_size: 2048,
            rx_size: 2048,
            tx_size: 2048,
            need_wakeup: true,
            mode: XskBindMode::Copy,
        }
    }
}

impl XdpSocketConfig {
    /// Bytes of UMEM this configuration registers.
    pub fn umem_len(&self) -> usize {
        self.frame_count as usize * self.frame_size as usize
    }
}
