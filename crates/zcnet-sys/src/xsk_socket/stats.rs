//! What a socket tells about itself: who holds its frames, its kicks, drops and wakeups, the
//! kernel's counters, and whether it is bound in zero-copy mode.

use super::XdpSocket;
use crate::xsk::{getsockopt, XdpStatistics, XDP_OPTIONS, XDP_OPTIONS_ZEROCOPY, XDP_STATISTICS};
use std::io;
use std::os::fd::AsFd;
use zcnet_core::xsk::{FrameState, Frames};

impl XdpSocket {
    /// Who holds the frames, and how many moved each way.
    pub fn frames(&self) -> &Frames {
        &self.frames
    }

    /// Kicks made by [`Self::kick_tx`] (syscalls).
    pub fn kicks(&self) -> u64 {
        self.kicks
    }

    /// Frames the device dropped instead of sending (copy mode: each kick answered `EBUSY`
    /// is one, whose address still comes back on the completion ring).
    pub fn tx_dropped(&self) -> u64 {
        self.tx_dropped
    }

    /// Frames on the TX ring or not yet completed.
    pub fn frames_in_tx(&self) -> usize {
        self.frames.in_state(FrameState::Tx)
    }

    /// Receive-path wakeups made because the fill ring asked for them.
    pub fn rx_wakeups(&self) -> u64 {
        self.rx_wakeups
    }

    /// The kernel's drop counters (`XDP_STATISTICS`).
    pub fn statistics(&self) -> io::Result<XdpStatistics> {
        getsockopt(self.fd.as_fd(), XDP_STATISTICS)
    }

    /// Whether the kernel bound the socket in zero-copy mode (`XDP_OPTIONS`).
    pub fn is_zerocopy(&self) -> io::Result<bool> {
        let flags: u32 = getsockopt(self.fd.as_fd(), XDP_OPTIONS)?;
        Ok(flags & XDP_OPTIONS_ZEROCOPY != 0)
    }
}
