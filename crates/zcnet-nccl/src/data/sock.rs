//! The `copy` backend: `send()`/`recv()` on non-blocking sockets, as far as each goes without
//! blocking, every time NCCL calls in.

use super::{would_block, Backend, RecvBackend, Requests, SendBackend, MAX_MESSAGE, MAX_RECVS};
use crate::error::{PluginError, Result};
use crate::proto::{ChunkHeader, Placement, RecvMatch, SendChunk, SendSched, HEADER_LEN};
use crate::stats::Counters;
use std::io::Read;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use zcnet::engine::ForeignBuf;

/// A socket's send in progress: a chunk and how much of header + payload is written.
#[derive(Debug)]
struct Writing {
    chunk: SendChunk,
    header: [u8; HEADER_LEN],
    done: usize,
}

/// The sending side of a connection.
#[derive(Debug)]
pub struct SockSend {
    socks: Vec<TcpStream>,
    writing: Vec<Option<Writing>>,
    sched: SendSched,
    reqs: Requests<ForeignBuf, u64>,
    /// What it moved (all of it copied).
    pub(crate) stats: Counters,
}

impl SockSend {
    /// Over `socks`, cutting messages into `chunk`-byte pieces.
    pub fn new(socks: Vec<TcpStream>, chunk: u32) -> SockSend {
        let n = socks.len();
        SockSend {
            socks,
            writing: (0..n).map(|_| None).collect(),
            sched: SendSched::new(chunk, crate::abi::NET_MAX_REQUESTS * MAX_RECVS),
            reqs: Requests::default(),
            stats: Counters::default(),
        }
    }

    /// Moves what the sockets take or give now.
    fn move_now(&mut self) -> Result<()> {
        loop {
            let mut moved = false;
            for i in 0..self.socks.len() {
                if self.writing[i].is_none() {
                    if let Some(chunk) = self.sched.next_chunk() {
                        self.writing[i] = Some(Writing {
                            header: chunk.header.encode(),
                            chunk,
                            done: 0,
                        });
                    }
                }
                let Some(w) = self.writing[i].as_mut() else {
                    continue;
                };
                let h = w.chunk.header;
                let buf = self.reqs.bufs.get(&w.chunk.id).ok_or_else(|| {
                    PluginError::Internal(format!("send {}: buffer gone", w.chunk.id))
                })?;
                let payload = buf
                    .slice(h.offset as usize, h.len as usize)
                    .ok_or_else(|| PluginError::Internal("chunk outside its buffer".into()))?;
                let total = HEADER_LEN + payload.len();
                while w.done < total {
                    let parts: [&[u8]; 2] = if w.done < HEADER_LEN {
                        [&w.header[w.done..], payload]
                    } else {
                        [&payload[w.done - HEADER_LEN..], &[]]
                    };
                    match zcnet::os::send_vectored(
                        self.socks[i].as_raw_fd(),
                        &parts,
                        libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                    ) {
                        Ok(n) => {
                            w.done += n;
                            moved = true;
                        }
                        Err(e) if would_block(&e) => break,
                        Err(e) => {
                            return Err(PluginError::Remote(format!(
                                "send on socket {i}: {e} (the peer closed or died)"
                            )))
                        }
                    }
                }
                if w.done == total {
                    let chunk = w.chunk;
                    self.writing[i] = None;
                    self.stats.sent_copied(u64::from(chunk.header.len));
                    let finished = self
                        .sched
                        .chunk_done(&chunk)
                        .map_err(|e| PluginError::Internal(format!("send: {e}")))?;
                    if let Some(id) = finished {
                        let len = self.reqs.bufs.get(&id).map_or(0, |b| b.len() as u64);
                        self.reqs.finish(id, len);
                    }
                    moved = true;
                }
            }
            if !moved {
                return Ok(());
            }
        }
    }
}

/// A socket's receive in progress.
#[derive(Debug)]
enum Reading {
    /// Reading a chunk header.
    Header([u8; HEADER_LEN], usize),
    /// Reading a payload into receive `recv`'s buffer `slot` at `at` (absolute in the buffer).
    Payload {
        h: ChunkHeader,
        recv: u64,
        slot: usize,
        at: u64,
        left: u64,
    },
    /// The header names a message no receive is posted for yet.
    Parked(ChunkHeader),
}

/// The receiving side of a connection.
#[derive(Debug)]
pub struct SockRecv {
    socks: Vec<TcpStream>,
    reading: Vec<Reading>,
    matcher: RecvMatch,
    chunk: u32,
    /// Sockets the peer closed at a chunk boundary.
    closed: Vec<bool>,
    reqs: Requests<Vec<ForeignBuf>, Vec<u64>>,
    /// What it moved.
    pub(crate) stats: Counters,
}

impl SockRecv {
    /// Over `socks`; chunks larger than `max_chunk` are garbage.
    pub fn new(socks: Vec<TcpStream>, max_chunk: u32) -> SockRecv {
        let n = socks.len();
        SockRecv {
            socks,
            reading: (0..n)
                .map(|_| Reading::Header([0; HEADER_LEN], 0))
                .collect(),
            matcher: RecvMatch::new(crate::abi::NET_MAX_REQUESTS, MAX_RECVS),
            chunk: max_chunk,
            closed: vec![false; n],
            reqs: Requests::default(),
            stats: Counters::default(),
        }
    }

    /// Moves what the sockets take or give now.
    fn move_now(&mut self) -> Result<()> {
        loop {
            let mut moved = false;
            for i in 0..self.socks.len() {
                if !self.closed[i] {
                    moved |= self.step(i)?;
                }
            }
            if !moved {
                // A socket's end is not the connection's: the others may still carry data.
                super::check_closed(&self.closed, self.reqs.bufs.len())?;
                return Ok(());
            }
        }
    }

    /// Advances socket `i` as far as it goes without blocking; whether anything moved.
    fn step(&mut self, i: usize) -> Result<bool> {
        let mut moved = false;
        loop {
            match &mut self.reading[i] {
                Reading::Header(buf, got) => {
                    match self.socks[i].read(&mut buf[*got..]) {
                        Ok(0) if *got == 0 => {
                            // An orderly close between chunks.
                            self.closed[i] = true;
                            return Ok(true);
                        }
                        Ok(0) => {
                            return Err(PluginError::Remote(format!(
                                "socket {i} closed by the peer in the middle of a chunk header"
                            )))
                        }
                        Ok(n) => {
                            *got += n;
                            moved = true;
                        }
                        Err(e) if would_block(&e) => return Ok(moved),
                        Err(e) => {
                            return Err(PluginError::Remote(format!("receive on socket {i}: {e}")))
                        }
                    }
                    if *got == HEADER_LEN {
                        let h = ChunkHeader::decode(buf, self.chunk, MAX_MESSAGE).map_err(|e| {
                            PluginError::Remote(format!("garbage on data socket {i}: {e}"))
                        })?;
                        self.reading[i] = Reading::Parked(h);
                    }
                }
                Reading::Parked(h) => {
                    let h = *h;
                    match self
                        .matcher
                        .place(&h)
                        .map_err(|e| PluginError::Remote(format!("data socket {i}: {e}")))?
                    {
                        Placement::Wait => return Ok(moved),
                        Placement::Into { recv, slot, offset } => {
                            self.reading[i] = Reading::Payload {
                                h,
                                recv,
                                slot,
                                at: offset,
                                left: u64::from(h.len),
                            };
                            moved = true;
                        }
                    }
                }
                Reading::Payload {
                    h,
                    recv,
                    slot,
                    at,
                    left,
                } => {
                    if *left > 0 {
                        let dst = self
                            .reqs
                            .bufs
                            .get_mut(recv)
                            .and_then(|b| b.get_mut(*slot))
                            .and_then(|b| b.slice_mut(*at as usize, *left as usize))
                            .ok_or_else(|| {
                                PluginError::Internal("placement outside its buffer".into())
                            })?;
                        match self.socks[i].read(dst) {
                            Ok(0) => {
                                return Err(PluginError::Remote(format!(
                                    "socket {i} closed by the peer in the middle of a message"
                                )))
                            }
                            Ok(n) => {
                                *at += n as u64;
                                *left -= n as u64;
                                moved = true;
                            }
                            Err(e) if would_block(&e) => return Ok(moved),
                            Err(e) => {
                                return Err(PluginError::Remote(format!(
                                    "receive on socket {i}: {e}"
                                )))
                            }
                        }
                    }
                    if *left == 0 {
                        let h = *h;
                        self.reading[i] = Reading::Header([0; HEADER_LEN], 0);
                        self.stats.received(u64::from(h.len));
                        let completed = self
                            .matcher
                            .payload_done(&h)
                            .map_err(|e| PluginError::Remote(format!("data socket {i}: {e}")))?;
                        for id in completed {
                            let sizes = self.matcher.take_sizes(id).unwrap_or_default();
                            self.reqs.finish(id, sizes);
                        }
                        moved = true;
                    }
                }
            }
        }
    }
}

impl Backend for SockSend {
    type Buf = ForeignBuf;
    type Out = u64;
    fn reqs(&mut self) -> &mut Requests<ForeignBuf, u64> {
        &mut self.reqs
    }
    fn pump(&mut self) -> Result<()> {
        self.move_now()
    }
}

impl SendBackend for SockSend {
    fn sched(&mut self) -> &mut SendSched {
        &mut self.sched
    }
    fn lend(buf: ForeignBuf) -> ForeignBuf {
        buf
    }
}

impl Backend for SockRecv {
    type Buf = Vec<ForeignBuf>;
    type Out = Vec<u64>;
    fn reqs(&mut self) -> &mut Requests<Vec<ForeignBuf>, Vec<u64>> {
        &mut self.reqs
    }
    fn pump(&mut self) -> Result<()> {
        self.move_now()
    }
}

impl RecvBackend for SockRecv {
    fn matcher(&mut self) -> &mut RecvMatch {
        &mut self.matcher
    }
    fn lend(bufs: Vec<ForeignBuf>) -> Vec<ForeignBuf> {
        bufs
    }
}
