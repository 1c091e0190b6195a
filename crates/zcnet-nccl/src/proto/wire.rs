//! The chunk header: [`HEADER_LEN`] bytes, little endian, in front of every chunk's payload on
//! every socket of a connection.
//!
//! ```text
//!  0       2    3    4         8                16               24               32     36     40
//!  ┌───────┬────┬────┬─────────┬────────────────┬────────────────┬────────────────┬──────┬──────┐
//!  │ magic │ ver│kind│   tag   │      seq       │     total      │     offset     │ len  │ rsvd │
//!  │  u16  │ u8 │ u8 │   i32   │      u64       │      u64       │      u64       │ u32  │ u32  │
//!  └───────┴────┴────┴─────────┴────────────────┴────────────────┴────────────────┴──────┴──────┘
//!  then `len` payload bytes: bytes [offset, offset + len) of message `seq` (`total` bytes long)
//! ```
//!
//! Every chunk repeats the message's `tag` and `total`, so the receiver learns a message from
//! whichever of its chunks arrives first. The header is the only thing that says where a
//! stream's next payload ends, so [`ChunkHeader::decode`] trusts nothing: a peer that sends
//! garbage (or a stream that lost sync) is caught here, with the field and the values.

use std::fmt;

/// Bytes of an encoded [`ChunkHeader`].
pub const HEADER_LEN: usize = 40;
/// First two bytes of every header: "ZN".
pub(crate) const MAGIC: u16 = 0x5a4e;
/// The header layout version this module speaks.
pub(crate) const VERSION: u8 = 1;
/// `kind` of a data chunk, the only kind there is.
pub(crate) const KIND_DATA: u8 = 0;

/// One chunk header: bytes `[offset, offset + len)` of message `seq` of the connection, which
/// has `total` bytes and NCCL tag `tag`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    /// The NCCL tag of the message.
    pub tag: i32,
    /// The message's number on the connection: 0, 1, 2 ... in `isend` order.
    pub seq: u64,
    /// Bytes of the whole message.
    pub total: u64,
    /// Where this chunk's payload starts in the message.
    pub offset: u64,
    /// Payload bytes following the header (0 only for a zero-byte message).
    pub len: u32,
}

/// Why a header was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// The first two bytes are not `MAGIC`.
    BadMagic(u16),
    /// A version other than `VERSION`.
    BadVersion(u8),
    /// A kind other than `KIND_DATA`.
    BadKind(u8),
    /// The reserved word is not 0.
    Reserved(u32),
    /// A payload longer than the receiver's chunk limit.
    ChunkTooLong {
        /// Bytes claimed.
        len: u32,
        /// The limit.
        max: u32,
    },
    /// A message larger than the receiver's message limit.
    MessageTooLarge {
        /// Bytes claimed.
        total: u64,
        /// The limit.
        max: u64,
    },
    /// A chunk that runs past the end of its message.
    PastEnd {
        /// Offset of the chunk.
        offset: u64,
        /// Its length.
        len: u32,
        /// The message's length.
        total: u64,
    },
    /// An empty chunk in a message that is not empty.
    EmptyChunk {
        /// The message's length.
        total: u64,
    },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            WireError::BadMagic(m) => write!(
                f,
                "chunk header: magic {m:#06x}, expected {MAGIC:#06x} (not a zcnet peer, or the stream lost sync)"
            ),
            WireError::BadVersion(v) => {
                write!(f, "chunk header: version {v}, expected {VERSION}")
            }
            WireError::BadKind(k) => {
                write!(f, "chunk header: kind {k}, expected {KIND_DATA} (data)")
            }
            WireError::Reserved(r) => {
                write!(f, "chunk header: reserved field {r:#x}, expected 0")
            }
            WireError::ChunkTooLong { len, max } => {
                write!(f, "chunk header: len {len} exceeds the chunk limit {max}")
            }
            WireError::MessageTooLarge { total, max } => {
                write!(
                    f,
                    "chunk header: total {total} exceeds the message limit {max}"
                )
            }
            WireError::PastEnd { offset, len, total } => write!(
                f,
                "chunk header: offset {offset} + len {len} runs past the message's total {total}"
            ),
            WireError::EmptyChunk { total } => write!(
                f,
                "chunk header: len 0 in a message of {total} bytes (only a zero-byte message has an empty chunk)"
            ),
        }
    }
}

impl std::error::Error for WireError {}

fn field<const N: usize>(b: &[u8; HEADER_LEN], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[at..at + N]);
    a
}

impl ChunkHeader {
    /// The header as it goes on the wire.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..2].copy_from_slice(&MAGIC.to_le_bytes());
        b[2] = VERSION;
        b[3] = KIND_DATA;
        b[4..8].copy_from_slice(&self.tag.to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.total.to_le_bytes());
        b[24..32].copy_from_slice(&self.offset.to_le_bytes());
        b[32..36].copy_from_slice(&self.len.to_le_bytes());
        // 36..40: reserved, 0.
        b
    }

    /// Reads a header off the wire. Checks magic, version, kind, reserved == 0, then
    /// [`Self::check`]`(max_chunk, max_message)`.
    pub fn decode(
        b: &[u8; HEADER_LEN],
        max_chunk: u32,
        max_message: u64,
    ) -> Result<ChunkHeader, WireError> {
        let magic = u16::from_le_bytes(field(b, 0));
        if magic != MAGIC {
            return Err(WireError::BadMagic(magic));
        }
        if b[2] != VERSION {
            return Err(WireError::BadVersion(b[2]));
        }
        if b[3] != KIND_DATA {
            return Err(WireError::BadKind(b[3]));
        }
        let reserved = u32::from_le_bytes(field(b, 36));
        if reserved != 0 {
            return Err(WireError::Reserved(reserved));
        }
        let h = ChunkHeader {
            tag: i32::from_le_bytes(field(b, 4)),
            seq: u64::from_le_bytes(field(b, 8)),
            total: u64::from_le_bytes(field(b, 16)),
            offset: u64::from_le_bytes(field(b, 24)),
            len: u32::from_le_bytes(field(b, 32)),
        };
        h.check(max_chunk, max_message)?;
        Ok(h)
    }

    /// The checks of the fields' values: `len <= max_chunk`, `total <= max_message`,
    /// `offset + len <= total` (without overflow), and `len == 0` only when `total == 0`.
    pub fn check(&self, max_chunk: u32, max_message: u64) -> Result<(), WireError> {
        if self.len > max_chunk {
            return Err(WireError::ChunkTooLong {
                len: self.len,
                max: max_chunk,
            });
        }
        if self.total > max_message {
            return Err(WireError::MessageTooLarge {
                total: self.total,
                max: max_message,
            });
        }
        let end = self.offset.checked_add(u64::from(self.len));
        if end.is_none_or(|end| end > self.total) {
            return Err(WireError::PastEnd {
                offset: self.offset,
                len: self.len,
                total: self.total,
            });
        }
        if self.len == 0 && self.total > 0 {
            return Err(WireError::EmptyChunk { total: self.total });
        }
        Ok(())
    }

    /// `offset + len`, the end of the payload in the message (saturating: a header that passed
    /// [`Self::check`] never saturates).
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(u64::from(self.len))
    }
}
