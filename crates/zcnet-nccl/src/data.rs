//! The data path: a send comm and a receive comm over several non-blocking TCP sockets. The
//! chunking and matching are `zcnet_core::nccl` (sans-IO); this module moves bytes between
//! NCCL's buffers and the sockets, and is driven from `isend`/`irecv`/`test` (no thread of its
//! own, so nothing spins when NCCL is idle).

use crate::error::{PluginError, Result};
use std::collections::HashMap;
use std::io::Read;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use zcnet_core::nccl::{ChunkHeader, Placement, RecvMatch, SendChunk, SendSched, HEADER_LEN};
use zcnet_sys::foreign::ForeignBuf;

/// Largest message (what `maxP2pBytes` announces).
pub const MAX_MESSAGE: u64 = crate::abi::MAX_NET_SIZE as u64;
/// Grouped receives per `irecv` (`maxRecvs`).
pub const MAX_RECVS: usize = 8;

fn would_block(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
    )
}

/// A socket's send in progress: a chunk and how much of header + payload is written.
#[derive(Debug)]
struct Writing {
    chunk: SendChunk,
    header: [u8; HEADER_LEN],
    done: usize,
}

/// The sending side of a connection.
#[derive(Debug)]
pub struct SendComm {
    socks: Vec<TcpStream>,
    writing: Vec<Option<Writing>>,
    sched: SendSched,
    bufs: HashMap<u64, ForeignBuf>,
    done: HashMap<u64, u64>,
    next_id: u64,
    error: Option<PluginError>,
}

impl SendComm {
    /// Over `socks`, cutting messages into `chunk`-byte pieces.
    pub fn new(socks: Vec<TcpStream>, chunk: u32) -> SendComm {
        let n = socks.len();
        SendComm {
            socks,
            writing: (0..n).map(|_| None).collect(),
            sched: SendSched::new(chunk, crate::abi::NET_MAX_REQUESTS * MAX_RECVS),
            bufs: HashMap::new(),
            done: HashMap::new(),
            next_id: 1,
            error: None,
        }
    }

    /// Queues `buf` (tagged `tag`); `None` when too many sends are outstanding (NCCL retries).
    pub fn isend(&mut self, buf: ForeignBuf, tag: i32) -> Result<Option<u64>> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let id = self.next_id;
        match self.sched.post(id, tag, buf.len() as u64) {
            Ok(_) => {}
            Err(zcnet_core::nccl::SendError::TooMany { .. }) => return Ok(None),
            Err(e) => return Err(PluginError::Internal(format!("isend: {e}"))),
        }
        self.next_id += 1;
        self.bufs.insert(id, buf);
        self.progress();
        Ok(Some(id))
    }

    /// Whether send `id` is complete (and its size); forgets it when it is.
    pub fn test(&mut self, id: u64) -> Result<Option<u64>> {
        self.progress();
        if let Some(n) = self.done.remove(&id) {
            return Ok(Some(n));
        }
        match &self.error {
            Some(e) => Err(e.clone()),
            None if self.bufs.contains_key(&id) => Ok(None),
            None => Err(PluginError::Usage(format!("test: no send request {id}"))),
        }
    }

    /// Writes what the sockets take now.
    fn progress(&mut self) {
        if self.error.is_some() {
            return;
        }
        if let Err(e) = self.pump() {
            self.error = Some(e);
        }
    }

    fn pump(&mut self) -> Result<()> {
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
                let buf = self.bufs.get(&w.chunk.id).ok_or_else(|| {
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
                    match zcnet_sys::os::send_vectored(
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
                    let finished = self
                        .sched
                        .chunk_done(&chunk)
                        .map_err(|e| PluginError::Internal(format!("send: {e}")))?;
                    if let Some(id) = finished {
                        let len = self.bufs.remove(&id).map_or(0, |b| b.len() as u64);
                        self.done.insert(id, len);
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
pub struct RecvComm {
    socks: Vec<TcpStream>,
    reading: Vec<Reading>,
    matcher: RecvMatch,
    chunk: u32,
    /// Sockets the peer closed at a chunk boundary.
    closed: Vec<bool>,
    bufs: HashMap<u64, Vec<ForeignBuf>>,
    done: HashMap<u64, Vec<u64>>,
    next_id: u64,
    error: Option<PluginError>,
}

impl RecvComm {
    /// Over `socks`; chunks larger than `max_chunk` are garbage.
    pub fn new(socks: Vec<TcpStream>, max_chunk: u32) -> RecvComm {
        let n = socks.len();
        RecvComm {
            socks,
            reading: (0..n)
                .map(|_| Reading::Header([0; HEADER_LEN], 0))
                .collect(),
            matcher: RecvMatch::new(crate::abi::NET_MAX_REQUESTS, MAX_RECVS),
            chunk: max_chunk,
            closed: vec![false; n],
            bufs: HashMap::new(),
            done: HashMap::new(),
            next_id: 1,
            error: None,
        }
    }

    /// Posts a grouped receive of `bufs` with `tags`; `None` when 32 are already posted.
    pub fn irecv(&mut self, bufs: Vec<ForeignBuf>, tags: &[i32]) -> Result<Option<u64>> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        if self.matcher.pending() >= crate::abi::NET_MAX_REQUESTS {
            return Ok(None);
        }
        let slots: Vec<(i32, u64)> = tags
            .iter()
            .zip(&bufs)
            .map(|(t, b)| (*t, b.len() as u64))
            .collect();
        let id = self.next_id;
        self.matcher
            .post(id, &slots)
            .map_err(|e| PluginError::Invalid(format!("irecv: {e}")))?;
        self.next_id += 1;
        self.bufs.insert(id, bufs);
        self.progress();
        Ok(Some(id))
    }

    /// The sizes received by `id` once complete (and forgets it).
    pub fn test(&mut self, id: u64) -> Result<Option<Vec<u64>>> {
        self.progress();
        if let Some(s) = self.done.remove(&id) {
            return Ok(Some(s));
        }
        match &self.error {
            Some(e) => Err(e.clone()),
            None if self.bufs.contains_key(&id) => Ok(None),
            None => Err(PluginError::Usage(format!("test: no receive request {id}"))),
        }
    }

    fn progress(&mut self) {
        if self.error.is_some() {
            return;
        }
        if let Err(e) = self.pump() {
            self.error = Some(e);
        }
    }

    fn pump(&mut self) -> Result<()> {
        loop {
            let mut moved = false;
            for i in 0..self.socks.len() {
                if !self.closed[i] {
                    moved |= self.step(i)?;
                }
            }
            if !moved {
                // A socket's end is not the connection's: the others may still carry data.
                if !self.bufs.is_empty() && self.closed.iter().all(|c| *c) {
                    return Err(PluginError::Remote(format!(
                        "the peer closed the connection with {} receive(s) pending",
                        self.bufs.len()
                    )));
                }
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
                        let completed = self
                            .matcher
                            .payload_done(&h)
                            .map_err(|e| PluginError::Remote(format!("data socket {i}: {e}")))?;
                        for id in completed {
                            let sizes = self.matcher.take_sizes(id).unwrap_or_default();
                            self.bufs.remove(&id);
                            self.done.insert(id, sizes);
                        }
                        moved = true;
                    }
                }
            }
        }
    }
}
