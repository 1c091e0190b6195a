//! The message layer of an NCCL net plugin that carries each connection over several TCP
//! sockets, with dynamic chunking: a message is cut into chunks and each chunk goes to
//! whichever socket is free, rather than an equal share to each.
//!
//! NCCL's semantics (plugins/net/README.md): a connection is one-way. The sender posts
//! `isend(data, size, tag)`, the receiver `irecv(n, data[], sizes[], tags[])`, one request for
//! `n <= maxRecvs` buffers. Sends and receives match in the order posted: a message goes to the
//! first posted receive that still has an unassigned buffer, into a buffer with its tag (tags
//! choose the buffer within that receive, never another receive). A buffer may be larger than
//! its message; a larger message is an error. Zero-byte messages exist. `test()` reports done
//! and the sizes.
//!
//! ```text
//!   sender                                                          receiver
//!   isend ─► SendSched::post ─► seq                         irecv ─► RecvMatch::post
//!            SendSched::next_chunk ─► free socket ─┬─ sock 0 ─┬─► header ─► RecvMatch::place
//!              (seq, offset) order                 ├─ sock 1 ─┤      Into ─► payload into buffer
//!            SendSched::chunk_done ◄─ written ─────┴─ sock k ─┘      Wait ─► socket not read on
//!              ─► Some(id): send done                                 ─► RecvMatch::payload_done
//!                                                                        ─► receive done
//!                                                                 test ─► RecvMatch::take_sizes
//! ```
//!
//! `wire` is the chunk header (every chunk carries the message's seq, tag and total),
//! `send` the sender's chunking, `recv` the receiver's matching. All three only keep
//! books: the I/O layer ([`crate::data`]) moves the bytes. This module is sans-IO: no
//! syscalls, no clocks, no `unsafe`, so its tests (and the `nccl_recv` fuzz target) drive it
//! with simulated sockets.
//!
//! # Why waiting cannot deadlock
//!
//! The receiver assigns messages to buffers strictly in seq order, and a chunk whose message
//! is not assigned gets [`Placement::Wait`]: its payload stays in the socket, which is not read
//! further until the chunk can be placed. That is safe given what the I/O layer guarantees:
//! (1) the sender hands out chunks in `(seq, offset)` order ([`SendSched::next_chunk`]), a
//! socket taking one only once it is free, i.e. its previous chunk is written into the kernel;
//! (2) each socket is FIFO; (3) the receiver reads every socket whose head chunk is not
//! waiting, and places a waiting chunk again once [`RecvMatch::next_unassigned`] passed it.
//!
//! Take `c`, the first chunk in hand-out order that has not landed, of message `s`. Every
//! chunk before it landed, so every message before `s` is assigned (a chunk lands only into
//! an assigned buffer), i.e. `next_unassigned() >= s`.
//! - `c` is handed out: otherwise every chunk handed out landed, so was written, so every
//!   socket is free and the next one takes `c`.
//! - `c` is at the head of its socket: the chunks before it on that socket were handed out
//!   before it (1), so landed. Nothing of the socket's byte stream before `c` is unread, so
//!   flow control lets `c` through, and the receiver reads its header (3).
//! - Placing `c` records `s`'s tag and total. If `s` is assigned, `c` goes `Into` its buffer
//!   and lands. If not, `next_unassigned() == s`: `s` is next, its information is known, so
//!   it is assigned at the first [`RecvMatch::post`] that gives a buffer, and `c` is placed
//!   again (3) and lands.
//!
//! So the only wait is for a post. NCCL makes it: if no pending receive has a free buffer,
//! every pending one is wholly assigned to messages before `s`, which landed, so all are
//! complete; NCCL's `test()` sees them done and it posts the next receives, the one for `s`
//! among them (the limit of 32 pending receives is never what blocks). Chunks of later
//! messages that wait meanwhile hold only their own sockets, which carry nothing `c` needs. A
//! tag or size mismatch is not a wait but an error ([`RecvError`]).
#![forbid(unsafe_code)]

mod recv;
mod send;
mod wire;

pub use recv::{Placement, RecvError, RecvMatch};
#[cfg(test)]
use recv::{MAX_SEQ_AHEAD, MAX_WAITING};
pub use send::{SendChunk, SendError, SendSched};
pub use wire::{ChunkHeader, WireError, HEADER_LEN};
#[cfg(test)]
use wire::{KIND_DATA, VERSION};

#[cfg(test)]
mod tests;
