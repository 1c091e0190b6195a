//! AF_XDP, sans-IO: the arithmetic of the four rings and the ownership of UMEM frames.
//!
//! ```text
//!   user space                                  kernel
//!   Frames::give_fill ─► Producer (fill) ──────► driver / xsk_rcv writes a frame
//!   Frames::on_rx     ◄─ Consumer (rx)   ◄────── RX descriptor {addr, len}
//!   Frames::give_tx   ─► Producer (tx)   ──────► xsk_generic_xmit / driver reads the frame
//!        tx_kick_needed? ── sendto() ──►
//!   Frames::on_complete ◄─ Consumer (comp) ◄──── frame address, transmitted
//! ```
//!
//! `ring` does the index math of one ring (wrap-around, batching, checking the kernel's
//! index); `frames` says who holds each frame and checks what the kernel hands back;
//! [`tx_kick_needed`] and [`fill_wakeup_needed`] say when a syscall is due. zcnet-sys maps the
//! rings and does the atomic loads and stores these decide; the tests drive them against a
//! simulated kernel that consumes and produces descriptors.

mod frames;
mod ring;

#[cfg(test)]
mod tests;

pub use frames::{
    rx_capacity, FrameCounts, FrameError, FrameState, Frames, RxSpan, XDP_PACKET_HEADROOM,
};
#[cfg(test)]
use ring::XDP_RING_NEED_WAKEUP;
pub use ring::{fill_wakeup_needed, tx_kick_needed, Batch, Consumer, Producer, RingError};
