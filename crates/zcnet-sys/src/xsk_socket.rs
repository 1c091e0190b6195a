//! An AF_XDP socket with its UMEM and four mapped rings, moving frames between the application
//! and the kernel (Documentation/networking/af_xdp.rst).
//!
//! ```text
//!   XdpSocket::new(umem: Mapping) ─► (socket, every frame as a UmemFrame)
//!   XdpSocket::new_shared(&first)  ─► a socket on first's UMEM, another queue or device
//!   fill(frames)      UmemFrame ─► fill ring      (kernel writes packets into it)
//!   receive(out)      RX ring   ─► UmemFrame with data span
//!   transmit(frames)  UmemFrame ─► TX ring        (kernel reads it) ; kick_tx() when asked
//!     (or tx_queue(n), TxQueue::push per frame, TxQueue::submit)
//!   complete(out)     completion ring ─► UmemFrame
//! ```
//!
//! Sockets sharing a UMEM (`XDP_SHARED_UMEM`) each have their own four rings and their own
//! frame table ([`zcnet_core::xsk::Frames`], every frame `User` at first): a frame can be
//! given to any of them, since a `UmemFrame` is in one place at a time, and comes back on the
//! rings of the socket it was given to, which is what each table checks.
//!
//! A [`UmemFrame`] is a unique, non-`Clone` piece of the UMEM (a [`Slot`]): the only way to read
//! or write frame bytes. Handing a frame to the kernel moves it into the socket, which keeps it
//! until the kernel gives its address back on the RX or completion ring — so no frame the
//! kernel may write or read is reachable from safe code. Addresses the kernel returns are
//! checked by [`zcnet_core::xsk::Frames`]: one that names a frame the kernel was not given is an
//! `InvalidData` error, never a second owner.
//!
//! Errors seen on Linux 6.18 (net/xdp/xsk.c, xdp_umem.c): `XDP_UMEM_REG` fails with `EINVAL`
//! for an address not page-aligned, a chunk size not a power of two in 2048..=PAGE_SIZE, or a
//! headroom that leaves no room; `ENOBUFS` when pinning would pass RLIMIT_MEMLOCK without
//! CAP_IPC_LOCK; ring sizes not a power of two: `EINVAL`; bind: see [`crate::xsk`].

use crate::mem::{Mapping, Slot};
use crate::xsk::XdpDesc;
use crate::xsk_ring::MappedRing;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use zcnet_core::xsk::{Consumer, Frames, Producer};

mod config;
mod frame;
mod rx;
mod setup;
mod stats;
mod tx;

pub use config::XdpSocketConfig;
pub use frame::UmemFrame;
pub use tx::TxQueue;

/// An AF_XDP socket bound to a queue, with its UMEM and rings. Dropping it closes the socket
/// (the kernel unbinds it and removes it from any XSKMAP), unmaps the rings, and releases the
/// UMEM once no frame is left with the application.
#[derive(Debug)]
pub struct XdpSocket {
    // Field order is drop order: the socket closes before the rings and the UMEM go.
    fd: OwnedFd,
    fill: MappedRing<u64>,
    comp: MappedRing<u64>,
    rx: MappedRing<XdpDesc>,
    tx: MappedRing<XdpDesc>,
    fill_idx: Producer,
    comp_idx: Consumer,
    rx_idx: Consumer,
    tx_idx: Producer,
    frames: Frames,
    /// Frames the kernel holds (fill or TX ring), by index.
    held: Vec<Option<Slot>>,
    /// The UMEM: a frame belongs to this socket only if its slot is of this mapping.
    umem: Arc<Mapping>,
    config: XdpSocketConfig,
    kicks: u64,
    /// Frames the device dropped in copy mode (a kick answered `EBUSY`, see [`Self::kick_tx`]).
    tx_dropped: u64,
    /// Receive-path wakeups the fill ring asked for ([`Self::fill`]).
    rx_wakeups: u64,
    /// Descriptors written into the current TX reservation ([`TxQueue`]), not yet published.
    tx_pushed: u32,
}

impl XdpSocket {
    /// Whether `other` is on the same UMEM (this socket's, or shared with it).
    pub fn shares_umem_with(&self, other: &XdpSocket) -> bool {
        Arc::ptr_eq(&self.umem, &other.umem)
    }

    /// The socket (for an XSKMAP entry, poll).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The configuration.
    pub fn config(&self) -> &XdpSocketConfig {
        &self.config
    }

    /// `InvalidInput` when a frame is of another socket's UMEM (its index would name one of
    /// ours, which the application may hold).
    fn check_own(&self, frames: &[UmemFrame]) -> io::Result<()> {
        match frames
            .iter()
            .find(|f| !Arc::ptr_eq(f.slot.mapping(), &self.umem))
        {
            Some(f) => Err(invalid(format!(
                "UMEM frame {} belongs to another AF_XDP socket",
                f.index()
            ))),
            None => Ok(()),
        }
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

fn protocol(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("AF_XDP: {e}"))
}

/// Ends a batch of `len` entries peeked from a consumer ring of which the first `taken` were
/// read: those are released (the consumer index to store is returned), the rest are put back
/// for the next peek, so that a reader stopped part-way leaves no entry peeked for good.
fn end_batch(idx: &mut Consumer, len: u32, taken: u32) -> io::Result<u32> {
    idx.unpeek(len - taken).map_err(protocol)?;
    idx.release(taken).map_err(protocol)
}

#[cfg(test)]
mod tests;
