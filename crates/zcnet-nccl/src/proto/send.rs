//! Send side: [`SendSched`] numbers posted messages and cuts them into chunks for whichever
//! socket is free.
//!
//! ```text
//!  isend ──► post(id, tag, len) ──► seq
//!  socket free ──► next_chunk() ──► SendChunk (header + payload range) ──► write on that socket
//!  write done  ──► chunk_done(chunk) ──► Some(id) when the message's last chunk is written
//! ```
//!
//! Chunks come out in `(seq, offset)` order, whatever socket takes them; that order, with each
//! socket being FIFO, is what lets the receiver match messages without deadlock (see
//! [`super`]). A message is complete when every chunk of it is in the kernel, the same point
//! at which NCCL's socket transport reports a send done.

use super::wire::ChunkHeader;
use std::collections::BTreeMap;
use std::fmt;

/// One chunk for a socket: write `header.encode()`, then bytes
/// `[header.offset, header.offset + header.len)` of the message of request `id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendChunk {
    /// The caller's request id of the message.
    pub id: u64,
    /// The header to write before the payload.
    pub header: ChunkHeader,
}

/// Why [`SendSched`] refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// `max` messages are outstanding already.
    TooMany {
        /// The limit.
        max: usize,
    },
    /// A message posted with this request id is still outstanding.
    IdInUse(u64),
    /// Completion of a chunk that was never handed out.
    UnknownChunk {
        /// Its message.
        seq: u64,
        /// Its offset.
        offset: u64,
    },
    /// Second completion of a chunk.
    ChunkAlreadyDone {
        /// Its message.
        seq: u64,
        /// Its offset.
        offset: u64,
    },
    /// Completion of a chunk whose fields differ from the one handed out.
    ChunkMismatch {
        /// Its message.
        seq: u64,
        /// Its offset.
        offset: u64,
    },
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SendError::TooMany { max } => {
                write!(f, "{max} sends outstanding already: send refused")
            }
            SendError::IdInUse(id) => write!(f, "send request id {id} is still outstanding"),
            SendError::UnknownChunk { seq, offset } => write!(
                f,
                "completion of chunk {offset} of message {seq}, which was never handed out"
            ),
            SendError::ChunkAlreadyDone { seq, offset } => {
                write!(f, "second completion of chunk {offset} of message {seq}")
            }
            SendError::ChunkMismatch { seq, offset } => write!(
                f,
                "completion of chunk {offset} of message {seq} with fields that differ from the chunk handed out"
            ),
        }
    }
}

impl std::error::Error for SendError {}

/// An outstanding message.
#[derive(Debug, Clone)]
struct Msg {
    id: u64,
    tag: i32,
    len: u64,
    /// Bytes handed out as chunks.
    cut: u64,
    /// Chunks handed out, not yet written: offset → len.
    in_flight: BTreeMap<u64, u32>,
}

/// Cuts posted messages into chunks of at most `chunk` bytes, in message order (seq 0, 1, 2 ...
/// per connection); a zero-byte message is one chunk of length 0.
///
/// Memory: one entry per outstanding message (at most `max_outstanding`), each with its chunks
/// handed out and not yet written (at most one per socket when sockets take a chunk only once
/// free). A message is forgotten the moment it completes.
#[derive(Debug, Clone)]
pub struct SendSched {
    chunk: u32,
    max: usize,
    /// Outstanding messages by seq.
    msgs: BTreeMap<u64, Msg>,
    next_seq: u64,
    /// The message being cut; `== next_seq` when everything posted is cut.
    next_cut: u64,
}

impl SendSched {
    /// A scheduler cutting chunks of at most `chunk` bytes (0 is taken as 1), with at most
    /// `max_outstanding` messages posted and not complete.
    pub fn new(chunk: u32, max_outstanding: usize) -> SendSched {
        SendSched {
            chunk: chunk.max(1),
            max: max_outstanding,
            msgs: BTreeMap::new(),
            next_seq: 0,
            next_cut: 0,
        }
    }

    /// Queues a message; `id` is the caller's request id. Err(SendError::TooMany) when
    /// max_outstanding messages are not yet complete; [`SendError::IdInUse`] when a message
    /// with this id is. Returns the message's seq.
    pub fn post(&mut self, id: u64, tag: i32, len: u64) -> Result<u64, SendError> {
        if self.msgs.len() >= self.max {
            return Err(SendError::TooMany { max: self.max });
        }
        if self.msgs.values().any(|m| m.id == id) {
            return Err(SendError::IdInUse(id));
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let in_flight = BTreeMap::new();
        let m = Msg {
            id,
            tag,
            len,
            cut: 0,
            in_flight,
        };
        self.msgs.insert(seq, m);
        Ok(seq)
    }

    /// Whether [`Self::next_chunk`] has a chunk to give.
    #[cfg(test)]
    pub(crate) fn has_chunk(&self) -> bool {
        self.next_cut < self.next_seq
    }

    /// The next chunk to put on a free socket (None: nothing left to cut). Chunks come out in
    /// (seq, offset) order.
    pub fn next_chunk(&mut self) -> Option<SendChunk> {
        let seq = self.next_cut;
        // A message not wholly cut is not complete, so it is still here.
        let m = self.msgs.get_mut(&seq)?;
        // At most `chunk`: fits u32.
        let len = (m.len - m.cut).min(u64::from(self.chunk)) as u32;
        let header = ChunkHeader {
            tag: m.tag,
            seq,
            total: m.len,
            offset: m.cut,
            len,
        };
        m.in_flight.insert(m.cut, len);
        m.cut += u64::from(len);
        if m.cut == m.len {
            self.next_cut += 1;
        }
        Some(SendChunk { id: m.id, header })
    }

    /// The socket finished writing that chunk (header and payload) into the kernel. Returns
    /// Some(id) when this completed its message (every chunk of it written). Errors for an
    /// unknown/duplicate chunk, or one whose fields differ from what was handed out.
    pub fn chunk_done(&mut self, c: &SendChunk) -> Result<Option<u64>, SendError> {
        let h = &c.header;
        let (seq, offset) = (h.seq, h.offset);
        if seq >= self.next_seq {
            return Err(SendError::UnknownChunk { seq, offset });
        }
        let Some(m) = self.msgs.get_mut(&seq) else {
            // Posted, no longer outstanding: complete, so every chunk was done already.
            return Err(SendError::ChunkAlreadyDone { seq, offset });
        };
        if m.id != c.id || m.tag != h.tag || m.len != h.total {
            return Err(SendError::ChunkMismatch { seq, offset });
        }
        match m.in_flight.get(&offset) {
            Some(&len) if len == h.len => {}
            Some(_) => return Err(SendError::ChunkMismatch { seq, offset }),
            // Chunk offsets are multiples of `chunk`; those below `cut` were handed out.
            None if offset < m.cut && offset % u64::from(self.chunk) == 0 => {
                return Err(SendError::ChunkAlreadyDone { seq, offset })
            }
            None => return Err(SendError::UnknownChunk { seq, offset }),
        }
        m.in_flight.remove(&offset);
        if seq < self.next_cut && m.in_flight.is_empty() {
            let id = m.id;
            self.msgs.remove(&seq);
            return Ok(Some(id));
        }
        Ok(None)
    }

    /// Messages posted, not yet complete.
    #[cfg(test)]
    pub(crate) fn outstanding(&self) -> usize {
        self.msgs.len()
    }

    /// Chunks handed out and not yet written.
    #[cfg(test)]
    pub(crate) fn chunks_in_flight(&self) -> usize {
        self.msgs.values().map(|m| m.in_flight.len()).sum()
    }

    /// False while a message posted with request id `id` is outstanding; true otherwise
    /// (completed, or never posted: completed messages are forgotten).
    #[cfg(test)]
    pub(crate) fn is_complete(&self, id: u64) -> bool {
        !self.msgs.values().any(|m| m.id == id)
    }
}
