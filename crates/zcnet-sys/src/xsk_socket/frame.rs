//! A frame of the UMEM held by the application: its bytes and its packet span.

use crate::mem::Slot;
use std::io;

/// A frame of the UMEM, held by the application: its bytes, and the span that holds a packet
/// (set by [`XdpSocket::receive`], or by the application before [`XdpSocket::transmit`]).
///
/// [`XdpSocket::receive`]: super::XdpSocket::receive
/// [`XdpSocket::transmit`]: super::XdpSocket::transmit
#[derive(Debug)]
pub struct UmemFrame {
    pub(super) slot: Slot,
    pub(super) off: u32,
    pub(super) len: u32,
}

impl UmemFrame {
    /// The frame's index in the UMEM.
    pub fn index(&self) -> u32 {
        self.slot.id()
    }

    /// Bytes in the frame.
    pub fn capacity(&self) -> usize {
        self.slot.len()
    }

    /// The whole frame, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // A UMEM mapping is host memory (checked in XdpSocket::new): bytes are always there.
        self.slot.bytes_mut().unwrap_or_default()
    }

    /// The packet: `len` bytes from `offset`.
    pub fn data(&self) -> &[u8] {
        let b = self.slot.bytes().unwrap_or_default();
        &b[self.off as usize..(self.off + self.len) as usize]
    }

    /// The packet length.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether the packet is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sets the packet span (for transmit). `InvalidInput` when it does not fit the frame.
    pub fn set_data(&mut self, offset: u32, len: u32) -> io::Result<()> {
        if u64::from(offset) + u64::from(len) > self.slot.len() as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a {len} B packet at offset {offset} does not fit a {} B UMEM frame",
                    self.slot.len()
                ),
            ));
        }
        self.off = offset;
        self.len = len;
        Ok(())
    }
}
