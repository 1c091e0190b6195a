//! [`RecvError`]: why [`super::RecvMatch`] refused a call.

use super::super::wire::WireError;
use super::MAX_SEQ_AHEAD;
use std::fmt;

/// Why [`super::RecvMatch`] refused a call. The `post` errors are the caller's; the others say
/// the peer sent something no correct sender sends (the connection is then beyond repair).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvError {
    /// `max` receives are pending already.
    TooMany {
        /// The limit.
        max: usize,
    },
    /// A grouped receive of no buffer, or of more than `max`.
    BadGroup {
        /// Buffers asked for.
        n: usize,
        /// The most a receive may have.
        max: usize,
    },
    /// A receive posted with this id is still pending.
    IdInUse(u64),
    /// A header whose fields contradict each other.
    Chunk(WireError),
    /// A chunk of a message already received in full.
    StaleSeq {
        /// The message.
        seq: u64,
    },
    /// A chunk of a message more than `MAX_SEQ_AHEAD` past the next unassigned one.
    SeqTooFar {
        /// The message.
        seq: u64,
        /// The next unassigned message.
        next: u64,
    },
    /// Two chunks of one message with different tags.
    TagChanged {
        /// The message.
        seq: u64,
        /// The tag of the earlier chunk.
        was: i32,
        /// The tag of this chunk.
        now: i32,
    },
    /// Two chunks of one message with different totals.
    TotalChanged {
        /// The message.
        seq: u64,
        /// The total of the earlier chunk.
        was: u64,
        /// The total of this chunk.
        now: u64,
    },
    /// A chunk overlapping bytes of its message already placed or received.
    Overlap {
        /// The message.
        seq: u64,
        /// The chunk's offset.
        offset: u64,
        /// Its length.
        len: u32,
    },
    /// A message larger than the buffer it was matched to.
    TooLarge {
        /// The message.
        seq: u64,
        /// Its bytes.
        total: u64,
        /// The receive.
        recv: u64,
        /// The buffer in it.
        slot: usize,
        /// The buffer's bytes.
        cap: u64,
    },
    /// A message whose tag matches no unassigned buffer of the first receive with one.
    NoSlot {
        /// The message.
        seq: u64,
        /// Its tag.
        tag: i32,
        /// The receive it had to go to.
        recv: u64,
    },
    /// More than `max` messages announced and not yet matched to a receive.
    TooManyWaiting {
        /// The limit.
        max: usize,
    },
    /// Payload completion of a chunk that is not placed into a buffer.
    NotPlaced {
        /// The message.
        seq: u64,
        /// The chunk's offset.
        offset: u64,
    },
}

impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RecvError::TooMany { max } => {
                write!(f, "{max} receives pending already: receive refused")
            }
            RecvError::BadGroup { n, max } => {
                write!(f, "grouped receive of {n} buffers (1 to {max} allowed)")
            }
            RecvError::IdInUse(id) => write!(f, "receive request id {id} is still pending"),
            RecvError::Chunk(e) => write!(f, "{e}"),
            RecvError::StaleSeq { seq } => write!(
                f,
                "chunk of message {seq}, which was already received in full"
            ),
            RecvError::SeqTooFar { seq, next } => write!(
                f,
                "chunk of message {seq}, more than {MAX_SEQ_AHEAD} past the next unmatched message {next}"
            ),
            RecvError::TagChanged { seq, was, now } => write!(
                f,
                "message {seq}: a chunk says tag {now}, an earlier one said {was}"
            ),
            RecvError::TotalChanged { seq, was, now } => write!(
                f,
                "message {seq}: a chunk says {now} bytes, an earlier one said {was}"
            ),
            RecvError::Overlap { seq, offset, len } => write!(
                f,
                "message {seq}: chunk of {len} bytes at offset {offset} overlaps bytes already placed or received"
            ),
            RecvError::TooLarge {
                seq,
                total,
                recv,
                slot,
                cap,
            } => write!(
                f,
                "message {seq} of {total} bytes does not fit buffer {slot} ({cap} bytes) of receive {recv}"
            ),
            RecvError::NoSlot { seq, tag, recv } => write!(
                f,
                "message {seq} has tag {tag}, which matches no unassigned buffer of receive {recv}"
            ),
            RecvError::TooManyWaiting { max } => write!(
                f,
                "more than {max} messages announced and not yet matched to a receive"
            ),
            RecvError::NotPlaced { seq, offset } => write!(
                f,
                "payload of message {seq} at offset {offset} landed, but that chunk is not placed"
            ),
        }
    }
}

impl std::error::Error for RecvError {}
