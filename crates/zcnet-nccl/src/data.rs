//! The data path: a send comm and a receive comm over several TCP sockets. The chunking and
//! matching are [`crate::proto`] (sans-IO); the backends move bytes between NCCL's buffers and
//! the sockets and are driven from `isend`/`irecv`/`test` (no thread of their own, so nothing
//! spins when NCCL is idle):
//!
//! - [`sock`]: `send()`/`recv()` on non-blocking sockets (`ZCNET_NCCL_TX=copy`, `ZCNET_NCCL_RX=copy`);
//! - [`uring`]: io_uring requests on NCCL's buffers, zero-copy sends with `uring-zc`/`auto`.

pub mod sock;
pub mod uring;

use crate::devices::{RxMode, TxMode};
use crate::error::{PluginError, Result};
use crate::proto::{RecvMatch, SendSched};
use crate::stats::Counters;
use std::collections::HashMap;
use std::net::TcpStream;
use zcnet::engine::ForeignBuf;

/// Largest message (what `maxP2pBytes` announces).
pub const MAX_MESSAGE: u64 = crate::abi::MAX_NET_SIZE as u64;
/// Grouped receives per `irecv` (`maxRecvs`).
pub const MAX_RECVS: usize = 8;

/// The requests of one comm: the buffers of those in flight, the results of those done, and the
/// first error (after which every call fails with it).
#[derive(Debug)]
pub struct Requests<B, R> {
    /// Buffers of the requests in flight, by id.
    pub bufs: HashMap<u64, B>,
    done: HashMap<u64, R>,
    next_id: u64,
    /// The comm's first error.
    pub error: Option<PluginError>,
}

impl<B, R> Default for Requests<B, R> {
    fn default() -> Self {
        Requests {
            bufs: HashMap::new(),
            done: HashMap::new(),
            next_id: 1,
            error: None,
        }
    }
}

impl<B, R> Requests<B, R> {
    /// The comm's error, if it failed.
    pub fn check(&self) -> Result<()> {
        match &self.error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// The id the next request gets.
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// Records a request with id [`Self::next_id`].
    pub fn add(&mut self, b: B) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.bufs.insert(id, b);
        id
    }

    /// Request `id` finished with `r`: its buffers are given back.
    pub fn finish(&mut self, id: u64, r: R) {
        self.bufs.remove(&id);
        self.done.insert(id, r);
    }

    /// Records a failure (the first one sticks).
    pub fn fail(&mut self, e: PluginError) {
        self.error.get_or_insert(e);
    }

    /// `test` of request `id` (after progress was made): its result once, `None` while in
    /// flight, the comm's error if it failed.
    pub fn test(&mut self, id: u64, what: &str) -> Result<Option<R>> {
        if let Some(r) = self.done.remove(&id) {
            return Ok(Some(r));
        }
        self.check()?;
        if self.bufs.contains_key(&id) {
            Ok(None)
        } else {
            Err(PluginError::Usage(format!("test: no {what} request {id}")))
        }
    }
}

/// Posts send `id` to the scheduler: `false` when too many are outstanding (NCCL retries).
pub(crate) fn post_send(sched: &mut SendSched, id: u64, tag: i32, len: usize) -> Result<bool> {
    match sched.post(id, tag, len as u64) {
        Ok(_) => Ok(true),
        Err(crate::proto::SendError::TooMany { .. }) => Ok(false),
        Err(e) => Err(PluginError::Internal(format!("isend: {e}"))),
    }
}

/// Posts receive `id` (buffers of `lens` bytes, tagged `tags`) to the matcher: `false` when
/// 32 are already posted.
pub(crate) fn post_recv(m: &mut RecvMatch, id: u64, tags: &[i32], lens: &[usize]) -> Result<bool> {
    if m.pending() >= crate::abi::NET_MAX_REQUESTS {
        return Ok(false);
    }
    let slots: Vec<(i32, u64)> = tags
        .iter()
        .zip(lens)
        .map(|(t, l)| (*t, *l as u64))
        .collect();
    m.post(id, &slots)
        .map_err(|e| PluginError::Invalid(format!("irecv: {e}")))?;
    Ok(true)
}

/// A socket's end is not the connection's: the others may still carry data. Once every socket
/// ended, receives still pending can never complete.
pub(crate) fn check_closed(closed: &[bool], pending: usize) -> Result<()> {
    if pending > 0 && closed.iter().all(|c| *c) {
        return Err(PluginError::Remote(format!(
            "the peer closed the connection with {pending} receive(s) pending"
        )));
    }
    Ok(())
}

/// What the four backends (send and receive, over sockets or io_uring) share: the requests, and
/// a pump that moves whatever can move without blocking. The calls NCCL makes are written once,
/// below, in terms of these.
pub(crate) trait Backend {
    /// What a request lends (a buffer, or the buffers of a grouped receive).
    type Buf;
    /// What `test` reports when a request is done.
    type Out;
    /// The requests.
    fn reqs(&mut self) -> &mut Requests<Self::Buf, Self::Out>;
    /// Moves what can move now; an error fails the comm.
    fn pump(&mut self) -> Result<()>;

    /// Pumps unless the comm already failed, recording the first failure.
    fn progress(&mut self) {
        if self.reqs().error.is_none() {
            if let Err(e) = self.pump() {
                self.reqs().fail(e);
            }
        }
    }

    /// Records a request the scheduler accepted, and makes progress; its id.
    fn start(&mut self, b: Self::Buf) -> u64 {
        let id = self.reqs().add(b);
        self.progress();
        id
    }

    /// `test` of request `id` (`what`: "send" or "receive").
    fn test_request(&mut self, id: u64, what: &str) -> Result<Option<Self::Out>> {
        self.progress();
        self.reqs().test(id, what)
    }
}

/// A sending backend.
pub(crate) trait SendBackend: Backend<Out = u64> {
    /// Its chunk scheduler.
    fn sched(&mut self) -> &mut SendSched;
    /// The request's buffer as this backend keeps it.
    fn lend(buf: ForeignBuf) -> Self::Buf;
}

/// A receiving backend.
pub(crate) trait RecvBackend: Backend<Out = Vec<u64>> {
    /// Its matcher.
    fn matcher(&mut self) -> &mut RecvMatch;
    /// The request's buffers as this backend keeps them.
    fn lend(bufs: Vec<ForeignBuf>) -> Self::Buf;
}

fn isend_on<B: SendBackend>(b: &mut B, buf: ForeignBuf, tag: i32) -> Result<Option<u64>> {
    b.reqs().check()?;
    let id = b.reqs().next_id();
    if !post_send(b.sched(), id, tag, buf.len())? {
        return Ok(None);
    }
    Ok(Some(b.start(B::lend(buf))))
}

fn irecv_on<B: RecvBackend>(b: &mut B, bufs: Vec<ForeignBuf>, tags: &[i32]) -> Result<Option<u64>> {
    b.reqs().check()?;
    let id = b.reqs().next_id();
    let lens: Vec<usize> = bufs.iter().map(ForeignBuf::len).collect();
    if !post_recv(b.matcher(), id, tags, &lens)? {
        return Ok(None);
    }
    Ok(Some(b.start(B::lend(bufs))))
}

pub(crate) fn would_block(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
    )
}

/// The sending side of a connection.
#[derive(Debug)]
pub enum SendComm {
    /// `send()` on non-blocking sockets.
    Sock(Box<sock::SockSend>),
    /// io_uring.
    Uring(Box<uring::UringSend>),
}

impl SendComm {
    /// Over `socks`, cutting messages into `chunk`-byte pieces, sending with `mode`. When
    /// io_uring is unavailable the io_uring modes fall back to `copy`, with a log line.
    pub fn new(socks: Vec<TcpStream>, chunk: u32, mode: TxMode) -> Result<SendComm> {
        if mode == TxMode::Copy {
            return Ok(SendComm::Sock(Box::new(sock::SockSend::new(socks, chunk))));
        }
        match uring::new_ring(socks.len()) {
            Ok(ring) => Ok(SendComm::Uring(Box::new(uring::UringSend::new(
                ring, socks, chunk, mode,
            )?))),
            Err(e) => {
                crate::log::warn(&format!(
                    "ZCNET_NCCL_TX={}: io_uring unavailable ({e}); sending with send()",
                    mode.name()
                ));
                let mut s = sock::SockSend::new(socks, chunk);
                s.stats.fallback(fallback_reason(&e));
                Ok(SendComm::Sock(Box::new(s)))
            }
        }
    }

    /// Queues `buf` (tagged `tag`); `None` when too many sends are outstanding (NCCL retries).
    pub fn isend(&mut self, buf: ForeignBuf, tag: i32) -> Result<Option<u64>> {
        match self {
            SendComm::Sock(s) => isend_on(&mut **s, buf, tag),
            SendComm::Uring(u) => isend_on(&mut **u, buf, tag),
        }
    }

    /// Whether send `id` is complete (and its size); forgets it when it is.
    pub fn test(&mut self, id: u64) -> Result<Option<u64>> {
        match self {
            SendComm::Sock(s) => s.test_request(id, "send"),
            SendComm::Uring(u) => u.test_request(id, "send"),
        }
    }

    /// Offers `addr..addr + len` (NCCL's `regMr`) as a fixed buffer; its index when it became
    /// one.
    pub fn register(&mut self, addr: usize, len: usize) -> Option<u16> {
        match self {
            SendComm::Sock(_) => None,
            SendComm::Uring(u) => u.register(addr, len),
        }
    }

    /// Drops fixed buffer `idx`.
    pub fn unregister(&mut self, idx: u16) {
        if let SendComm::Uring(u) = self {
            u.unregister(idx);
        }
    }

    /// What it moved so far.
    pub fn stats(&self) -> &Counters {
        match self {
            SendComm::Sock(s) => &s.stats,
            SendComm::Uring(u) => &u.stats,
        }
    }

    /// Ends what is still in flight, counting its last completions (before a close reports
    /// the totals).
    pub fn shutdown(&mut self) {
        if let SendComm::Uring(u) = self {
            u.shutdown();
        }
    }
}

/// The receiving side of a connection.
#[derive(Debug)]
pub enum RecvComm {
    /// `recv()` on non-blocking sockets.
    Sock(Box<sock::SockRecv>),
    /// io_uring.
    Uring(Box<uring::UringRecv>),
}

impl RecvComm {
    /// Over `socks`; chunks larger than `max_chunk` are garbage. When io_uring is unavailable
    /// `uring` falls back to `copy`, with a log line.
    pub fn new(socks: Vec<TcpStream>, max_chunk: u32, mode: RxMode) -> Result<RecvComm> {
        if mode == RxMode::Copy {
            return Ok(RecvComm::Sock(Box::new(sock::SockRecv::new(
                socks, max_chunk,
            ))));
        }
        match uring::new_ring(socks.len()) {
            Ok(ring) => Ok(RecvComm::Uring(Box::new(uring::UringRecv::new(
                ring, socks, max_chunk,
            )?))),
            Err(e) => {
                crate::log::warn(&format!(
                    "ZCNET_NCCL_RX=uring: io_uring unavailable ({e}); receiving with recv()"
                ));
                let mut s = sock::SockRecv::new(socks, max_chunk);
                s.stats.fallback(fallback_reason(&e));
                Ok(RecvComm::Sock(Box::new(s)))
            }
        }
    }

    /// Posts a grouped receive of `bufs` with `tags`; `None` when 32 are already posted.
    pub fn irecv(&mut self, bufs: Vec<ForeignBuf>, tags: &[i32]) -> Result<Option<u64>> {
        match self {
            RecvComm::Sock(s) => irecv_on(&mut **s, bufs, tags),
            RecvComm::Uring(u) => irecv_on(&mut **u, bufs, tags),
        }
    }

    /// The sizes received by `id` once complete (and forgets it).
    pub fn test(&mut self, id: u64) -> Result<Option<Vec<u64>>> {
        match self {
            RecvComm::Sock(s) => s.test_request(id, "receive"),
            RecvComm::Uring(u) => u.test_request(id, "receive"),
        }
    }

    /// What it moved so far.
    pub fn stats(&self) -> &Counters {
        match self {
            RecvComm::Sock(s) => &s.stats,
            RecvComm::Uring(u) => &u.stats,
        }
    }
}

/// The reason a fallback to a copying path is counted under when io_uring refused with `e`:
/// `memlock` when the kernel ran out of locked memory (RLIMIT_MEMLOCK) for the ring.
pub(crate) fn fallback_reason(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::ENOMEM) => "memlock",
        _ => "io_uring unavailable",
    }
}
