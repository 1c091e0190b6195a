//! The io_uring backend: requests on NCCL's own buffers, driven from `isend`/`irecv`/`test`.
//!
//! Sends: each socket carries one chunk at a time as two linked requests, the 40-byte header
//! (`MSG_MORE`) then the payload straight from NCCL's buffer, both `MSG_WAITALL` so a short
//! result means the connection failed. The payload is `IORING_OP_SEND` (`uring`), or `SEND_ZC`
//! (`uring-zc`, from a fixed buffer when `regMr` registered the memory), or whichever
//! zcnet-core's send driver picks from the kernel's notifications (`auto`). The next chunk goes
//! onto a socket once the payload's result arrives (its bytes are in the socket); a send request
//! completes only when every chunk is in a socket *and* every zero-copy notification for it has
//! arrived, since until then the kernel may still read NCCL's buffer.
//!
//! Receives: each socket has one request posted ahead at all times when it can: a header read
//! into a 40-byte buffer of our own, then, once `RecvMatch` placed the chunk, the payload read
//! straight into NCCL's buffer. Data lands while NCCL does other work; `test` only reaps
//! completions. (A multishot receive would need a provided-buffer ring and a copy out of it;
//! reading into the destination directly is the copy-free choice for TCP.)
//!
//! The sockets are blocking (io_uring returns `EAGAIN` to us on `O_NONBLOCK` files instead of
//! waiting): io_uring waits for them, the calling thread never does.

use super::{check_closed, Backend, RecvBackend, Requests, SendBackend, MAX_MESSAGE, MAX_RECVS};
use crate::devices::TxMode;
use crate::error::{PluginError, Result};
use crate::proto::{ChunkHeader, Placement, RecvMatch, SendChunk, SendSched, HEADER_LEN};
use crate::stats::Counters;
use std::collections::{HashMap, HashSet};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};
use zcnet::engine::{Engine, Event, ForeignBuf, ForeignMr, Lease, Op, Outcome, Request};
use zcnet_core::{Asked, Refusal, SendDriver};

/// Fixed-buffer slots per send comm (NCCL registers a few buffers per connection).
const FIXED_SLOTS: u32 = 64;

/// The engine of a comm of `nsocks` sockets (two requests per socket at most, plus room).
pub fn new_ring(nsocks: usize) -> std::io::Result<Engine> {
    Engine::new((4 * nsocks as u32).next_power_of_two().max(16), FIXED_SLOTS)
}

/// Submits what is queued and takes what completed (without waiting).
fn submit_and_reap(ring: &mut Engine) -> Result<Vec<Event>> {
    ring.submit()
        .map_err(|e| PluginError::io("io_uring submit", &e))?;
    let mut events = Vec::new();
    ring.reap(|e| events.push(e));
    Ok(events)
}

/// Queues `req` on `buf`; its tag.
fn push(ring: &mut Engine, buf: Arc<ForeignBuf>, req: &Request, what: &str) -> Result<u32> {
    ring.push(Lease::Borrowed(buf), req)
        .map_err(|(_, e)| PluginError::io(what, &e))
}

/// A receive's result as the kernel gave it (bytes, or `-errno`).
fn received(o: &Outcome) -> Result<i32> {
    match *o {
        Outcome::Received(Ok(n)) => Ok(n as i32),
        Outcome::Received(Err(e)) => Ok(-e),
        other => Err(PluginError::Internal(format!(
            "a receive completed as {other:?}"
        ))),
    }
}

fn blocking(socks: &[TcpStream]) -> Result<()> {
    for s in socks {
        s.set_nonblocking(false)
            .map_err(|e| PluginError::io("making a data socket blocking for io_uring", &e))?;
    }
    Ok(())
}

fn header_buf(bytes: [u8; HEADER_LEN]) -> Arc<ForeignBuf> {
    Arc::new(ForeignBuf::owned(Box::new(bytes)))
}

fn errno_text(res: i32) -> String {
    std::io::Error::from_raw_os_error(-res).to_string()
}

/// What a send request in flight was.
#[derive(Debug, Clone, Copy)]
enum SendOp {
    /// The header of a chunk whose payload follows (linked).
    Header { sock: usize },
    /// The request that completes a chunk (the payload, or the header of an empty chunk).
    Chunk {
        sock: usize,
        chunk: SendChunk,
        len: u32,
        /// A `SEND_ZC` payload.
        zc: bool,
    },
    /// A `SEND_ZC` payload the kernel refused whose notification is still to come (the
    /// failed result had `IORING_CQE_F_MORE`).
    Refused { chunk_id: u64 },
}

/// What became of the chunk header last queued on a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Head {
    /// Not known yet (or no chunk).
    Pending,
    /// In the socket.
    Sent,
    /// Cancelled with its payload: nothing of the chunk went out.
    Cancelled,
}

/// The sending side over io_uring.
pub struct UringSend {
    /// First: dropped (cancel, wait) while the sockets are still open.
    ring: Engine,
    socks: Vec<TcpStream>,
    /// Whether socket `i` has a chunk whose payload result is pending.
    busy: Vec<bool>,
    /// What became of socket `i`'s last chunk header.
    head: Vec<Head>,
    /// A chunk of socket `i` to queue again once its header's fate is known: its zero-copy
    /// payload was refused for want of locked memory.
    retry: Vec<Option<SendChunk>>,
    /// What each request in flight is, by the engine's tag.
    ops: HashMap<u32, SendOp>,
    sched: SendSched,
    reqs: Requests<Arc<ForeignBuf>, u64>,
    /// Requests whose chunks are all in sockets, waiting for notifications.
    finished: HashSet<u64>,
    /// Requests in flight per send request id (until their final CQE).
    refs: HashMap<u64, usize>,
    /// Zero copy or copy for each payload, and what a refusal means: zcnet-core's send
    /// driver, the library's sender's too.
    driver: SendDriver,
    start: Instant,
    /// What it moved, and how.
    pub(crate) stats: Counters,
}

impl std::fmt::Debug for UringSend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringSend")
            .field("ring", &self.ring)
            .field("driver", &self.driver)
            .finish()
    }
}

impl UringSend {
    /// Over `socks` with `ring`, payloads sent as `mode` says (`uring`, `uring-zc` or `auto`).
    pub fn new(ring: Engine, socks: Vec<TcpStream>, chunk: u32, mode: TxMode) -> Result<UringSend> {
        blocking(&socks)?;
        let zc = ring.supports_send_zc();
        let mut stats = Counters::default();
        let asked = match mode {
            TxMode::Uring | TxMode::Copy => Asked::Copy,
            TxMode::UringZc => Asked::ZeroCopy,
            TxMode::Auto => Asked::Auto,
        };
        let driver = SendDriver::new(asked, zc);
        if driver.refusals().contains(&Refusal::NoSendZc) {
            crate::log::warn(&format!(
                "ZCNET_NCCL_TX={}: this kernel has no IORING_OP_SEND_ZC (Linux 6.0); sending with IORING_OP_SEND",
                mode.name()
            ));
            stats.fallback(Refusal::NoSendZc.label());
        }
        let n = socks.len();
        Ok(UringSend {
            ring,
            socks,
            busy: vec![false; n],
            head: vec![Head::Pending; n],
            retry: vec![None; n],
            ops: HashMap::new(),
            sched: SendSched::new(chunk, crate::abi::NET_MAX_REQUESTS * MAX_RECVS),
            reqs: Requests::default(),
            finished: HashSet::new(),
            refs: HashMap::new(),
            driver,
            start: Instant::now(),
            stats,
        })
    }

    /// Makes `addr..addr + len` a fixed buffer (`regMr`); its index, or `None` (logged) when
    /// the kernel refused (RLIMIT_MEMLOCK, table full): sends from it then pin per request.
    pub fn register(&mut self, addr: usize, len: usize) -> Option<u16> {
        // SAFETY: NCCL keeps a registered range mapped until deregMr, which unregisters it
        // (api::dereg_mr) before the range may go away.
        let mr = unsafe { ForeignMr::new(addr, len) };
        match self.ring.register_foreign(mr) {
            Ok(i) => Some(i),
            Err(e) => {
                crate::log::info(&format!(
                    "regMr {addr:#x}+{len}: not an io_uring fixed buffer ({e}); zero-copy sends from it pin pages per request"
                ));
                None
            }
        }
    }

    /// Drops fixed buffer `idx` (`deregMr`).
    pub fn unregister(&mut self, idx: u16) {
        if let Err(e) = self.ring.unregister(idx) {
            crate::log::warn(&format!("deregMr: fixed buffer {idx}: {e}"));
        }
    }

    /// Queues what can go, submits, and reaps what completed.
    fn move_now(&mut self) -> Result<()> {
        loop {
            let mut moved = false;
            for i in 0..self.socks.len() {
                if !self.busy[i] {
                    if let Some(chunk) = self.sched.next_chunk() {
                        self.push_chunk(i, chunk)?;
                        moved = true;
                    }
                }
            }
            for ev in submit_and_reap(&mut self.ring)? {
                self.complete(ev)?;
                moved = true;
            }
            if !moved {
                return Ok(());
            }
        }
    }

    fn zero_copy_now(&mut self) -> bool {
        let now = self.start.elapsed().as_nanos() as u64;
        self.driver.zero_copy(now)
    }

    /// Queues chunk `chunk` on socket `i`: header, then payload (linked).
    fn push_chunk(&mut self, i: usize, chunk: SendChunk) -> Result<()> {
        let h = chunk.header;
        let fd = self.socks[i].as_raw_fd();
        let empty = h.len == 0;
        let header = Request {
            fd,
            off: 0,
            len: HEADER_LEN as u32,
            op: Op::Send,
            flags: libc::MSG_WAITALL | if empty { 0 } else { libc::MSG_MORE },
            link: !empty,
        };
        let head_op = if empty {
            SendOp::Chunk {
                sock: i,
                chunk,
                len: HEADER_LEN as u32,
                zc: false,
            }
        } else {
            SendOp::Header { sock: i }
        };
        let t = push(
            &mut self.ring,
            header_buf(h.encode()),
            &header,
            "io_uring: queueing a chunk header",
        )?;
        self.ops.insert(t, head_op);
        *self.refs.entry(chunk.id).or_default() += usize::from(empty);
        self.head[i] = Head::Pending;
        if !empty {
            self.push_payload(i, chunk)?;
        }
        self.busy[i] = true;
        Ok(())
    }

    /// Queues the payload of chunk `chunk` on socket `i` (after its header).
    fn push_payload(&mut self, i: usize, chunk: SendChunk) -> Result<()> {
        let h = chunk.header;
        let buf = self
            .reqs
            .bufs
            .get(&chunk.id)
            .cloned()
            .ok_or_else(|| PluginError::Internal(format!("send {}: buffer gone", chunk.id)))?;
        let fd = self.socks[i].as_raw_fd();
        let zero_copy = self.zero_copy_now();
        {
            let off = h.offset as usize;
            let op = if zero_copy {
                Op::SendZc {
                    fixed: self.ring.fixed_index(buf.addr() + off, h.len as usize),
                }
            } else {
                Op::Send
            };
            let payload = Request {
                fd,
                off,
                len: h.len,
                op,
                flags: libc::MSG_WAITALL,
                link: false,
            };
            let t = push(
                &mut self.ring,
                buf,
                &payload,
                "io_uring: queueing a payload",
            )?;
            self.ops.insert(
                t,
                SendOp::Chunk {
                    sock: i,
                    chunk,
                    len: h.len,
                    zc: zero_copy,
                },
            );
            *self.refs.entry(chunk.id).or_default() += 1;
        }
        Ok(())
    }

    /// Socket `i`'s chunk whose zero-copy payload was refused goes again, copied, once its
    /// header's fate is known: the payload alone when the header is in the socket, else both.
    fn requeue(&mut self, i: usize) -> Result<()> {
        let chunk = match (self.head[i], self.retry[i]) {
            (Head::Pending, _) | (_, None) => return Ok(()),
            (_, Some(chunk)) => chunk,
        };
        self.retry[i] = None;
        if self.head[i] == Head::Sent {
            self.push_payload(i, chunk)
        } else {
            self.push_chunk(i, chunk)
        }
    }

    /// A zero-copy payload refused with ENOMEM: the locked memory that `SEND_ZC` charges for
    /// pages it pins per request (RLIMIT_MEMLOCK, shared by every process of the user) is spent.
    /// It will not come back soon: this comm sends copied from now on.
    fn memlock_fallback(&mut self) {
        if self.driver.refused(Refusal::Memlock) {
            crate::log::warn(
                "SEND_ZC refused for want of locked memory (RLIMIT_MEMLOCK); sending with IORING_OP_SEND on this connection",
            );
            self.stats.fallback(Refusal::Memlock.label());
        }
    }

    fn complete(&mut self, ev: Event) -> Result<()> {
        let op = *self.ops.get(&ev.tag).ok_or_else(|| {
            PluginError::Internal(format!("completion for unknown tag {}", ev.tag))
        })?;
        let last = ev.lease.is_some();
        if last {
            self.ops.remove(&ev.tag);
        }
        if let Outcome::Protocol(e) = ev.outcome {
            return Err(PluginError::Internal(format!("io_uring: {e}")));
        }
        match op {
            SendOp::Header { sock } => {
                match ev.outcome {
                    Outcome::Sent { res: Ok(n), .. } if n == HEADER_LEN as u32 => {
                        self.head[sock] = Head::Sent;
                    }
                    // Its payload failed before it ran: the payload's result says why.
                    Outcome::Sent {
                        res: Err(libc::ECANCELED),
                        ..
                    } => self.head[sock] = Head::Cancelled,
                    other => return Err(send_failed(sock, &other, "a chunk header")),
                }
                self.requeue(sock)?;
            }
            SendOp::Refused { chunk_id } => {
                self.stats.payload(&ev.outcome);
                if last {
                    self.release(chunk_id);
                }
            }
            SendOp::Chunk {
                sock,
                chunk,
                len,
                zc,
            } => {
                if zc
                    && matches!(
                        ev.outcome,
                        Outcome::Sent {
                            res: Err(libc::ENOMEM),
                            ..
                        }
                    )
                {
                    self.memlock_fallback();
                    if last {
                        self.release(chunk.id);
                    } else {
                        self.ops
                            .insert(ev.tag, SendOp::Refused { chunk_id: chunk.id });
                    }
                    self.retry[sock] = Some(chunk);
                    return self.requeue(sock);
                }
                if chunk.header.len > 0 {
                    // A payload (an empty chunk is its header alone).
                    self.stats.payload(&ev.outcome);
                }
                match ev.outcome {
                    Outcome::Notified { copied, .. } => self.notified(copied),
                    Outcome::Sent { res: Ok(n), .. } if n == len => {
                        self.busy[sock] = false;
                        let finished = self
                            .sched
                            .chunk_done(&chunk)
                            .map_err(|e| PluginError::Internal(format!("send: {e}")))?;
                        if let Some(id) = finished {
                            self.finished.insert(id);
                        }
                    }
                    other => return Err(send_failed(sock, &other, "a payload")),
                }
                if last {
                    self.release(chunk.id);
                }
            }
        }
        Ok(())
    }

    /// A zero-copy notification: `auto` learns whether the kernel copied.
    fn notified(&mut self, copied: bool) {
        let now = self.start.elapsed().as_nanos() as u64;
        if let Some(s) = self
            .driver
            .on_notifications(u64::from(!copied), u64::from(copied), now)
        {
            crate::log::info(&format!("ZCNET_NCCL_TX=auto: {s}"));
            if s.to != zcnet_core::auto::Mode::ZeroCopy {
                self.stats.fallback("auto: the kernel copied");
            }
        }
    }

    /// A request on send `id`'s buffer ended; the send completes when it was the last one and
    /// all its chunks are in sockets.
    fn release(&mut self, id: u64) {
        let left = self.refs.get_mut(&id).map(|r| {
            *r -= 1;
            *r
        });
        if left == Some(0) && self.finished.contains(&id) {
            self.refs.remove(&id);
            self.finished.remove(&id);
            let len = self.reqs.bufs.get(&id).map_or(0, |b| b.len() as u64);
            self.reqs.finish(id, len);
        }
    }
}

fn send_failed(sock: usize, outcome: &Outcome, what: &str) -> PluginError {
    let why = match *outcome {
        Outcome::Sent { res: Err(e), .. } => errno_text(-e),
        Outcome::Sent { res: Ok(n), .. } => format!("{n} B accepted"),
        other => format!("{other:?}"),
    };
    PluginError::Remote(format!(
        "sending {what} on socket {sock}: {why} (the peer closed or died)"
    ))
}

impl UringSend {
    /// Ends what is still running when NCCL closes (a transfer abandoned mid-way): the
    /// connections are reset (`connect(AF_UNSPEC)`: the kernel drops the data it holds and
    /// sends the last zero-copy notifications) with their fds still open, so nothing queued can
    /// reach a socket number reused meanwhile; then every request is cancelled and its final
    /// CQE counted in the stats, which the close reports after this.
    pub fn shutdown(&mut self) {
        if self.ring.in_flight() == 0 {
            return;
        }
        for s in &self.socks {
            let _ = zcnet::os::sock::disconnect(s.as_raw_fd());
        }
        // Payloads only, as `complete` counts them (a header's bytes are not the message's).
        let (ops, stats) = (&self.ops, &mut self.stats);
        self.ring.cancel_all(Duration::from_millis(2000), |ev| {
            let payload = match ops.get(&ev.tag) {
                Some(SendOp::Chunk { chunk, .. }) => chunk.header.len > 0,
                Some(SendOp::Refused { .. }) => true,
                _ => false,
            };
            if payload {
                stats.payload(&ev.outcome);
            }
        });
    }
}

impl Drop for UringSend {
    fn drop(&mut self) {
        // Done by the close already; here for a comm dropped any other way. The ring, first
        // among the fields, drops (and waits for what is left) before the sockets close.
        self.shutdown();
    }
}

/// A socket's receive state.
#[derive(Debug)]
enum Reading {
    /// Nothing posted (a new socket, or one the peer closed).
    Idle,
    /// A header read is posted (the ring holds its buffer: the completion gives it back).
    Header,
    /// The header names a message no receive is posted for yet.
    Parked(ChunkHeader),
    /// A payload read into receive `recv`'s buffer is posted.
    Payload(ChunkHeader),
}

/// The receiving side over io_uring.
pub struct UringRecv {
    /// First: dropped (cancel, wait) while the sockets are still open.
    ring: Engine,
    socks: Vec<TcpStream>,
    reading: Vec<Reading>,
    /// The socket of each read in flight, by the engine's tag.
    tags: HashMap<u32, usize>,
    matcher: RecvMatch,
    chunk: u32,
    closed: Vec<bool>,
    reqs: Requests<Vec<Arc<ForeignBuf>>, Vec<u64>>,
    /// What it moved.
    pub(crate) stats: Counters,
}

impl std::fmt::Debug for UringRecv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringRecv")
            .field("ring", &self.ring)
            .field("reading", &self.reading)
            .finish()
    }
}

impl UringRecv {
    /// Over `socks` with `ring`; chunks larger than `max_chunk` are garbage.
    pub fn new(ring: Engine, socks: Vec<TcpStream>, max_chunk: u32) -> Result<UringRecv> {
        blocking(&socks)?;
        let n = socks.len();
        let mut r = UringRecv {
            ring,
            socks,
            reading: (0..n).map(|_| Reading::Idle).collect(),
            tags: HashMap::new(),
            matcher: RecvMatch::new(crate::abi::NET_MAX_REQUESTS, MAX_RECVS),
            chunk: max_chunk,
            closed: vec![false; n],
            reqs: Requests::default(),
            stats: Counters::default(),
        };
        r.progress();
        r.reqs.check()?;
        Ok(r)
    }

    /// Queues what can go, submits, and reaps what completed.
    fn move_now(&mut self) -> Result<()> {
        loop {
            let mut moved = false;
            for i in 0..self.socks.len() {
                moved |= self.post(i)?;
            }
            for ev in submit_and_reap(&mut self.ring)? {
                self.complete(ev)?;
                moved = true;
            }
            if !moved {
                return check_closed(&self.closed, self.reqs.bufs.len());
            }
        }
    }

    /// Posts the next read on socket `i` if it has none; whether anything changed.
    fn post(&mut self, i: usize) -> Result<bool> {
        let fd = self.socks[i].as_raw_fd();
        match &self.reading[i] {
            Reading::Idle if !self.closed[i] => {
                let buf = header_buf([0; HEADER_LEN]);
                let req = Request {
                    fd,
                    off: 0,
                    len: HEADER_LEN as u32,
                    op: Op::Recv,
                    flags: libc::MSG_WAITALL,
                    link: false,
                };
                let t = push(&mut self.ring, buf, &req, "io_uring: posting a header read")?;
                self.tags.insert(t, i);
                self.reading[i] = Reading::Header;
                Ok(true)
            }
            Reading::Parked(h) => {
                let h = *h;
                let placed = self
                    .matcher
                    .place(&h)
                    .map_err(|e| PluginError::Remote(format!("data socket {i}: {e}")))?;
                let Placement::Into { recv, slot, offset } = placed else {
                    return Ok(false);
                };
                if h.len == 0 {
                    self.reading[i] = Reading::Idle;
                    self.payload_done(i, &h)?;
                    return Ok(true);
                }
                let buf = self
                    .reqs
                    .bufs
                    .get(&recv)
                    .and_then(|b| b.get(slot))
                    .cloned()
                    .ok_or_else(|| PluginError::Internal("placement outside its buffer".into()))?;
                let req = Request {
                    fd,
                    off: offset as usize,
                    len: h.len,
                    op: Op::Recv,
                    flags: libc::MSG_WAITALL,
                    link: false,
                };
                let t = push(
                    &mut self.ring,
                    buf,
                    &req,
                    "io_uring: posting a payload read",
                )?;
                self.tags.insert(t, i);
                self.reading[i] = Reading::Payload(h);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn complete(&mut self, ev: Event) -> Result<()> {
        let i = self.tags.remove(&ev.tag).ok_or_else(|| {
            PluginError::Internal(format!("completion for unknown tag {}", ev.tag))
        })?;
        let res = received(&ev.outcome)?;
        let state = std::mem::replace(&mut self.reading[i], Reading::Idle);
        match state {
            Reading::Header => match res {
                0 => self.closed[i] = true,
                n if n == HEADER_LEN as i32 => {
                    // The header's bytes come back with the receive's final CQE.
                    let Some(Lease::Borrowed(buf)) = ev.lease else {
                        return Err(PluginError::Internal(format!(
                            "a header read on socket {i} completed without its buffer"
                        )));
                    };
                    let mut bytes = [0u8; HEADER_LEN];
                    bytes.copy_from_slice(buf.slice(0, HEADER_LEN).unwrap_or(&[0; HEADER_LEN]));
                    let h = ChunkHeader::decode(&bytes, self.chunk, MAX_MESSAGE).map_err(|e| {
                        PluginError::Remote(format!("garbage on data socket {i}: {e}"))
                    })?;
                    self.reading[i] = Reading::Parked(h);
                }
                n if n > 0 => {
                    return Err(PluginError::Remote(format!(
                        "socket {i} closed by the peer in the middle of a chunk header"
                    )))
                }
                n => {
                    return Err(PluginError::Remote(format!(
                        "receive on socket {i}: {}",
                        errno_text(n)
                    )))
                }
            },
            Reading::Payload(h) => {
                if res != h.len as i32 {
                    let why = if res < 0 {
                        errno_text(res)
                    } else {
                        "closed by the peer in the middle of a message".to_string()
                    };
                    return Err(PluginError::Remote(format!("receive on socket {i}: {why}")));
                }
                self.payload_done(i, &h)?;
            }
            other => {
                return Err(PluginError::Internal(format!(
                    "a completion on socket {i} in state {other:?}"
                )))
            }
        }
        Ok(())
    }

    fn payload_done(&mut self, i: usize, h: &ChunkHeader) -> Result<()> {
        self.stats.received(u64::from(h.len));
        let completed = self
            .matcher
            .payload_done(h)
            .map_err(|e| PluginError::Remote(format!("data socket {i}: {e}")))?;
        for id in completed {
            let sizes = self.matcher.take_sizes(id).unwrap_or_default();
            self.reqs.finish(id, sizes);
        }
        Ok(())
    }
}

impl Backend for UringSend {
    type Buf = Arc<ForeignBuf>;
    type Out = u64;
    fn reqs(&mut self) -> &mut Requests<Arc<ForeignBuf>, u64> {
        &mut self.reqs
    }
    fn pump(&mut self) -> Result<()> {
        self.move_now()
    }
}

impl SendBackend for UringSend {
    fn sched(&mut self) -> &mut SendSched {
        &mut self.sched
    }
    fn lend(buf: ForeignBuf) -> Arc<ForeignBuf> {
        Arc::new(buf)
    }
}

impl Backend for UringRecv {
    type Buf = Vec<Arc<ForeignBuf>>;
    type Out = Vec<u64>;
    fn reqs(&mut self) -> &mut Requests<Vec<Arc<ForeignBuf>>, Vec<u64>> {
        &mut self.reqs
    }
    fn pump(&mut self) -> Result<()> {
        self.move_now()
    }
}

impl RecvBackend for UringRecv {
    fn matcher(&mut self) -> &mut RecvMatch {
        &mut self.matcher
    }
    fn lend(bufs: Vec<ForeignBuf>) -> Vec<Arc<ForeignBuf>> {
        bufs.into_iter().map(Arc::new).collect()
    }
}
