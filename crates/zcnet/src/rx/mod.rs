//! Receiving into registered memory, with every mechanism Linux offers behind one interface.
//!
//! ```text
//!   add(stream) ─► backend arms the socket ─► kernel fills a buffer ─► poll() ─► RxEvent::Data(RxBuf)
//!                     ▲                                                              │ app reads
//!                     └─── poll() recycles ◄── return queue ◄── drop(RxBuf) ◄────────┘
//! ```
//! Backends (`--rx`): `copy` (epoll + `recv()` into a pool of user buffers, the baseline),
//! `uring` (io_uring multishot receive into a provided buffer ring, with bundles),
//! `zcrx` (io_uring zero-copy receive into an area registered with a NIC queue),
//! `devmem` (devmem TCP: payload in a dma-buf bound to NIC queues, tokens returned with
//! `SO_DEVMEM_DONTNEED`), and `auto` (the best that works, with the reasons for what did not).
//!
//! # Buffers
//! Every backend delivers data as [`RxBuf`] handles. Each is one buffer (or fragment, or
//! token) lent by the receiver; the application reads host bytes with [`Receiver::bytes`]
//! (the slice borrows the receiver, so it cannot outlive it) and device data through
//! [`RxBuf::device`]'s descriptor. Dropping the handle gives the buffer back: it goes on a return
//! queue that the next [`Receiver::poll`] hands to the kernel (recycle into the buffer ring,
//! zcrx refill entry, devmem token). Handles can be kept across polls, moved to other threads
//! (the return queue is shared), and outlive the receiver (their return is then a no-op).
//!
//! # Slow consumers
//! A receiver has a fixed number of buffers. When the application holds all of them, the
//! backend cannot receive: the kernel leaves the data in the socket and TCP flow control slows
//! the peer. This is never silent: [`RxStats::starved`] counts every time receiving paused for
//! want of a buffer, and receiving resumes (re-arms) by itself once buffers come back.

mod config;
mod conns;
mod copy;
#[cfg(test)]
mod device_verify_tests;
mod devmem;
mod socket_limit;
mod stream;
mod uring;
mod zcrx;

use crate::cancel::Cancel;
use crate::error::{Error, Result};
pub use config::*;
use std::collections::HashMap;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};
pub use stream::{
    receive_stream, receive_stream_reading_device, receive_stream_until_failure, DeviceReader,
    StreamReport,
};
use zcnet_sys::epoll::ReturnQueue;

/// A connection added to a [`Receiver`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

impl std::fmt::Display for ConnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Where a received buffer's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// Host memory: read it with [`Receiver::bytes`].
    Host,
    /// Device memory: `len` bytes at `offset` in the dma-buf the kernel calls `dmabuf_id`.
    Device(DeviceSlice),
}

/// A range of device memory that holds received payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceSlice {
    /// The binding's dma-buf id (as returned by the netdev `bind-rx`).
    pub dmabuf_id: u32,
    /// Offset in the dma-buf.
    pub offset: u64,
    /// Bytes.
    pub len: usize,
}

/// Handles returned by the application, waiting for the next poll.
/// Where a dropped [`RxBuf`] goes (its key and length), from any thread; taken by the next
/// poll, and waking a starving receiver's event loop ([`ReturnQueue`]).
type Returns = ReturnQueue<(u64, usize)>;

/// One received buffer, lent to the application until dropped.
#[derive(Debug)]
pub struct RxBuf {
    conn: ConnId,
    key: u64,
    len: usize,
    loc: Location,
    copied: bool,
    ret: Arc<Returns>,
    /// Given back through `ret` when dropped (not once lent on: [`Receiver::lend`]).
    armed: bool,
}

impl RxBuf {
    /// The connection it came from.
    pub fn conn(&self) -> ConnId {
        self.conn
    }

    /// Bytes received into it.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: the kernel never delivers an empty buffer (end of stream is
    /// [`RxEvent::Eof`]).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where the bytes are.
    pub fn location(&self) -> Location {
        self.loc
    }

    /// The device range, for device memory.
    pub fn device(&self) -> Option<DeviceSlice> {
        match self.loc {
            Location::Device(d) => Some(d),
            Location::Host => None,
        }
    }

    /// Whether the kernel copied these bytes (true for `copy`/`uring`, for zcrx without a device,
    /// and for devmem's linear data). zcrx with a device cannot tell per buffer (false): its
    /// counts are in [`RxStats`].
    pub fn copied(&self) -> bool {
        self.copied
    }
}

impl Drop for RxBuf {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.ret.push((self.key, self.len));
    }
}

/// What [`Receiver::poll`] reports.
#[derive(Debug)]
pub enum RxEvent {
    /// Data, in order per connection.
    Data(RxBuf),
    /// The peer closed its sending half: no more data on this connection. It stays added (to
    /// write replies) until [`Receiver::close`].
    Eof(ConnId),
    /// Receiving on the connection failed (e.g. reset by the peer) and has stopped; what was
    /// delivered before stays valid. Close it with [`Receiver::close`].
    Failed(ConnId, Error),
}

/// Counters since the receiver was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RxStats {
    /// Payload bytes delivered.
    pub bytes: u64,
    /// Buffers (handles) delivered.
    pub buffers: u64,
    /// Of `bytes`, those the kernel copied (all of them for copy/uring and for zcrx without a
    /// device; for zcrx with one, what Linux 7.2's zcrx statistics count as copied).
    pub copied_bytes: u64,
    /// Of `bytes`, those the NIC wrote directly into registered memory (devmem frags; zcrx
    /// into a dma-buf, which the kernel cannot copy into; zcrx into host memory where the
    /// kernel's statistics say it did not copy them).
    pub zerocopy_bytes: u64,
    /// Of `bytes`, those whose way in nothing reports: zcrx into host memory on a kernel
    /// without zcrx statistics (before Linux 7.2), where a copy fallback looks the same as
    /// the NIC's write. Never counted as zero-copy. `bytes = copied + zerocopy + unknown`.
    pub unknown_copy_bytes: u64,
    /// Times receiving paused because the application held every buffer (refill starvation);
    /// it resumes by itself once buffers come back.
    pub starved: u64,
    /// Multishot requests re-armed after the kernel ended them (buffer ring empty, ENOSPC).
    pub rearms: u64,
    /// Connections that reached end of stream.
    pub eofs: u64,
    /// Connections whose receive failed.
    pub failures: u64,
    /// devmem: data that arrived as `SCM_DEVMEM_LINEAR` (copied into host memory) instead of
    /// device memory.
    pub linear_fallbacks: u64,
    /// devmem/zcrx: bytes that arrived as plain host data because the flow was not steered to
    /// the bound queue.
    pub unsteered: u64,
    /// Buffers returned by the application.
    pub returned: u64,
}

/// What the backends share with the receiver while polling.
pub(crate) struct Ctx<'a> {
    /// Events for the caller.
    pub out: &'a mut Vec<RxEvent>,
    /// Counters.
    pub stats: &'a mut RxStats,
    /// The return queue new handles point to.
    ret: &'a Arc<Returns>,
    /// Connections whose fd the backend no longer uses (after [`RxBackend::remove`]).
    pub closable: &'a mut Vec<ConnId>,
}

impl Ctx<'_> {
    /// Delivers one buffer, counted as copied or zero-copy.
    pub fn deliver(&mut self, conn: ConnId, key: u64, len: usize, loc: Location, copied: bool) {
        if copied {
            self.stats.copied_bytes += len as u64;
        } else {
            self.stats.zerocopy_bytes += len as u64;
        }
        self.deliver_unsplit(conn, key, len, loc, copied);
    }

    /// Delivers one buffer without counting it as copied or zero-copy: the backend accounts
    /// its bytes with [`Self::account_split`] (zcrx, where the split comes from the kernel's
    /// statistics after draining). `copied` is the handle's [`RxBuf::copied`].
    pub fn deliver_unsplit(
        &mut self,
        conn: ConnId,
        key: u64,
        len: usize,
        loc: Location,
        copied: bool,
    ) {
        self.stats.bytes += len as u64;
        self.stats.buffers += 1;
        self.out.push(RxEvent::Data(RxBuf {
            conn,
            key,
            len,
            loc,
            copied,
            ret: Arc::clone(self.ret),
            armed: true,
        }));
    }

    /// Counts delivered bytes (of [`Self::deliver_unsplit`]) as copied, zero-copy or unknown.
    pub fn account_split(&mut self, split: zcnet_core::rxring::CopySplit) {
        self.stats.copied_bytes += split.copied;
        self.stats.zerocopy_bytes += split.zerocopy;
        self.stats.unknown_copy_bytes += split.unknown;
    }

    /// Reports end of stream.
    pub fn eof(&mut self, conn: ConnId) {
        self.stats.eofs += 1;
        self.out.push(RxEvent::Eof(conn));
    }

    /// Reports a failed connection.
    pub fn failed(&mut self, conn: ConnId, e: Error) {
        self.stats.failures += 1;
        self.out.push(RxEvent::Failed(conn, e));
    }
}

/// One receive mechanism. Every backend runs the same conformance tests (tests/rx.rs).
pub(crate) trait RxBackend: std::fmt::Debug {
    /// The mechanism.
    fn mode(&self) -> RxMode;
    /// Starts receiving on `fd` for `conn`.
    fn add(&mut self, conn: ConnId, fd: RawFd) -> Result<()>;
    /// Stops receiving on `conn`. Returns true when the fd is no longer used; otherwise the
    /// backend lists the connection in [`Ctx::closable`] from a later poll.
    fn remove(&mut self, conn: ConnId) -> bool;
    /// Gives back the buffer `key` of `len` bytes (a dropped [`RxBuf`]).
    fn release(&mut self, key: u64, len: usize);
    /// Receives what is ready, waiting up to `timeout` for something to happen.
    fn poll(&mut self, ctx: &mut Ctx<'_>, timeout: Duration) -> Result<()>;
    /// The host bytes of held buffer `key`; `None` for device memory or a key not held.
    fn bytes(&self, key: u64, len: usize) -> Option<&[u8]>;
    /// Buffers the application holds.
    fn held(&self) -> usize;
    /// Lends the first `len` bytes of held buffer `key` on, read-only: it goes back to the
    /// kernel once the returned lease (every clone of it) is dropped. `None` where the backend
    /// cannot (its buffers are not its own to lend: a copy pool, device memory).
    fn lend(&mut self, _key: u64, _len: usize) -> Option<Result<crate::engine::ForeignBuf>> {
        None
    }
    /// Takes held buffer `key` out of the ring, whole, for an asynchronous reader (a copy to
    /// the GPU): it goes back to the kernel once the handle is dropped. `None` where the
    /// backend's buffers are not a ring it can take from (a copy pool, zcrx, device memory).
    fn take(&mut self, _key: u64) -> Option<Result<zcnet_sys::bufring::HeldBuf>> {
        None
    }
    /// The mapping that holds every buffer [`Self::take`] can hand out (what a CUDA host
    /// registration pins); `None` where `take` is not supported.
    fn host_mapping(&self) -> Option<Arc<zcnet_sys::mem::Mapping>> {
        None
    }
    /// The fd an event loop waits on for readability before a [`Self::poll`] with a zero
    /// timeout ([`Receiver::readiness_fd`]); made (and registered with the kernel) at the
    /// first call where it is not the backend's own epoll set.
    fn ready_fd(&mut self) -> Result<BorrowedFd<'_>>;
    /// A duplicate of the readiness fd, once made, where it is an eventfd a buffer handed back
    /// may signal ([`ReturnQueue::set_wake`]); `None` where the readiness fd is an epoll set.
    fn waker(&self) -> Option<zcnet_sys::epoll::EventFd> {
        None
    }
    /// Whether receiving waits for buffers the application holds (nothing the kernel does can
    /// end the wait, only a buffer handed back).
    fn starving(&self) -> bool {
        false
    }
}

/// Receives on many connections with one mechanism, lending buffers to the application.
///
/// Not `Send` (its backend is not: the zcrx and uring rings accept submissions only from the
/// thread that made them). Make the receiver on the thread that polls it.
#[derive(Debug)]
pub struct Receiver {
    // Field order: the backend (which may hold kernel requests on the sockets) drops first.
    backend: Box<dyn RxBackend>,
    conns: HashMap<ConnId, TcpStream>,
    closing: Vec<(ConnId, TcpStream)>,
    next_conn: u64,
    ret: Arc<Returns>,
    stats: RxStats,
    fallbacks: Vec<Fallback>,
    scratch: Vec<(u64, usize)>,
    closable: Vec<ConnId>,
    low_water: Option<u32>,
    cancel: Cancel,
}

impl Receiver {
    /// A receiver with `cfg.mode`. `auto` takes the first of zcrx (when `cfg.iface` is set),
    /// uring and copy that the kernel accepts; [`Receiver::fallbacks`] says why the others were
    /// not taken. An explicit mode the kernel refuses is an error naming the cause and fix.
    pub fn new(cfg: &RxConfig) -> Result<Receiver> {
        let mut fallbacks = Vec::new();
        let backend: Box<dyn RxBackend> = match cfg.mode {
            RxMode::Copy => Box::new(copy::CopyRx::new(cfg)?),
            RxMode::Uring => Box::new(uring::UringRx::new(cfg)?),
            RxMode::Zcrx => Box::new(zcrx::ZcrxBackend::new(cfg)?),
            RxMode::Devmem => Box::new(devmem::DevmemBackend::new(cfg)?),
            RxMode::Auto => auto(cfg, &mut fallbacks)?,
        };
        let mut rx = Receiver::with_backend(backend);
        rx.fallbacks = fallbacks;
        rx.low_water = cfg.low_water;
        rx.cancel = cfg.cancel.clone();
        Ok(rx)
    }

    /// A receiver over `backend` (also the tests' simulated devices).
    pub(crate) fn with_backend(backend: Box<dyn RxBackend>) -> Receiver {
        Receiver {
            backend,
            conns: HashMap::new(),
            closing: Vec::new(),
            next_conn: 1,
            ret: Arc::default(),
            stats: RxStats::default(),
            fallbacks: Vec::new(),
            scratch: Vec::new(),
            closable: Vec::new(),
            cancel: Cancel::new(),
            low_water: None,
        }
    }

    /// The mechanism in use (for `auto`, the one it chose).
    pub fn mode(&self) -> RxMode {
        self.backend.mode()
    }

    /// Mechanisms `auto` tried and the kernel refused, in the order tried.
    pub fn fallbacks(&self) -> &[Fallback] {
        &self.fallbacks
    }

    /// Starts receiving on a connected TCP socket: a [`crate::Socket`] or anything that becomes
    /// one (a `TcpStream`), as [`crate::Sender::new`] takes it. The receiver owns it from now
    /// on: reply through [`Receiver::stream`], end it with [`Receiver::close`]. A datagram
    /// socket is refused (`Unsupported`): a `Receiver` reassembles streams.
    pub fn add(&mut self, conn: impl Into<crate::Socket>) -> Result<ConnId> {
        let stream = conn.into().into_tcp().map_err(|_| Error::Unsupported {
            what: "receiving datagrams with a Receiver (it reads byte streams)".into(),
            source: std::io::Error::from_raw_os_error(libc::EOPNOTSUPP),
            remedy: crate::Remedy::Other("receive datagrams with recv(2) or AF_XDP (zcnet::xsk)"),
        })?;
        if let Some(n) = self.applied_low_water() {
            set_low_water(&stream, n)?;
        }
        let id = ConnId(self.next_conn);
        self.next_conn += 1;
        if let Err(e) = self.backend.add(id, stream.as_raw_fd()) {
            // A request the backend queued before it failed (a submit refused after the push)
            // still names the fd: the socket stays open until the kernel is done with it, as
            // for a close, so that the number cannot be reused under that request.
            if !self.backend.remove(id) {
                self.closing.push((id, stream));
            }
            return Err(e);
        }
        self.conns.insert(id, stream);
        Ok(id)
    }

    /// Whether the backend reads the sockets' queues (`copy`, `uring`): the receive low-water
    /// mark applies.
    fn socket_reads(&self) -> bool {
        matches!(self.mode(), RxMode::Copy | RxMode::Uring)
    }

    /// The receive low-water mark each connection [`add`](Self::add)ed gets:
    /// [`RxConfig::low_water`] with `copy` and `uring` (for `auto`, the one chosen), `None`
    /// otherwise.
    pub fn applied_low_water(&self) -> Option<u32> {
        self.low_water.filter(|_| self.socket_reads())
    }

    /// Sets `conn`'s receive low-water mark ([`RxConfig::low_water`]) to `bytes` (1: wake for
    /// any data, the kernel's default) and returns what the kernel holds now (it caps the mark
    /// at half of `net.ipv4.tcp_rmem`'s maximum). Lowering it wakes a waiting receive at once
    /// if enough is queued (the kernel's `tcp_set_rcvlowat`), so a bulk receiver can take a
    /// stream's tail this way. `Ok(None)` for an unknown id and for `zcrx`/`devmem`, which are
    /// left alone.
    pub fn set_low_water(&mut self, conn: ConnId, bytes: u32) -> Result<Option<u32>> {
        match self.conns.get(&conn) {
            Some(s) if self.socket_reads() => set_low_water(s, bytes).map(Some),
            _ => Ok(None),
        }
    }

    /// `conn`'s receive low-water mark as the kernel holds it; `None` when it is the kernel's
    /// default (1), for an unknown id, and for `zcrx`/`devmem`.
    pub fn low_water(&self, conn: ConnId) -> Option<u32> {
        let s = self.conns.get(&conn).filter(|_| self.socket_reads())?;
        zcnet_sys::sock::recv_lowat(s.as_raw_fd())
            .ok()
            .filter(|&n| n > 1)
    }

    /// The stream of a connection (e.g. to write a reply; `&TcpStream` implements `Write`).
    pub fn stream(&self, conn: ConnId) -> Option<&TcpStream> {
        self.conns.get(&conn)
    }

    /// Connections added and not closed.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Stops receiving on `conn` and closes its socket as soon as the kernel no longer uses it
    /// (at once, or during a later poll for io_uring backends). Buffers already delivered stay
    /// valid. Unknown ids are ignored.
    pub fn close(&mut self, conn: ConnId) {
        let Some(stream) = self.conns.remove(&conn) else {
            return;
        };
        if !self.backend.remove(conn) {
            self.closing.push((conn, stream));
        }
    }

    /// Hands returned buffers back to the kernel, then receives what is ready (waiting up to
    /// `timeout` when nothing is), appending events to `out`. [`Error::Interrupted`] once the
    /// token of [`RxConfig::cancel`] is cancelled: a long wait is made of waits of at most
    /// [`zcnet_sys::os::STOP_CHECK`], with a look at the token between them.
    pub fn poll(&mut self, out: &mut Vec<RxEvent>, timeout: Duration) -> Result<()> {
        self.cancel.check()?;
        self.recycle();
        let before = out.len();
        let start = Instant::now();
        let r = loop {
            let left = timeout.saturating_sub(start.elapsed());
            let slice = left.min(zcnet_sys::os::STOP_CHECK);
            let mut ctx = Ctx {
                out: &mut *out,
                stats: &mut self.stats,
                ret: &self.ret,
                closable: &mut self.closable,
            };
            let r = self.backend.poll(&mut ctx, slice);
            if r.is_err() || out.len() > before || left <= slice {
                break r;
            }
            if let Err(e) = self.cancel.check() {
                break Err(e);
            }
        };
        if !self.closable.is_empty() {
            let done = std::mem::take(&mut self.closable);
            self.closing.retain(|(c, _)| !done.contains(c));
        }
        // A loop that sleeps on the readiness fd next is woken by the first buffer dropped.
        self.ret.set_starving(self.backend.starving());
        r
    }

    fn recycle(&mut self) {
        self.ret.take_into(&mut self.scratch);
        for (key, len) in self.scratch.drain(..) {
            self.backend.release(key, len);
            self.stats.returned += 1;
        }
    }

    /// Lends `buf`'s bytes on without a copy, to send them ([`crate::Sender::send_lent`]:
    /// an echo, a proxy): read-only, and out of the kernel's reach until the lease — every
    /// clone of the `Arc` — is dropped, when the buffer goes back to the receive ring (at the
    /// next poll). Until then it counts as held ([`Receiver::held`]): lending many at once can
    /// starve the ring as holding them would. `uring` (and `auto` where it chose `uring`);
    /// other modes, device memory and another receiver's buffer are refused with the buffer
    /// handed back.
    #[allow(clippy::result_large_err)] // the buffer comes back with the error
    pub fn lend(
        &mut self,
        buf: RxBuf,
    ) -> std::result::Result<Arc<crate::engine::ForeignBuf>, (RxBuf, Error)> {
        self.out_of_ring(
            buf,
            "lending {} receive buffers on (host buffers of the uring mode can be)",
            |b, key, len| b.lend(key, len),
        )
        .map(Arc::new)
    }

    /// `buf` out of the backend's hands by `how` (lend, take), disarmed so that dropping it
    /// does not give it back twice; refused (`what`, with `{}` for the mode) for another
    /// receiver's buffer, device memory, or a backend that cannot.
    #[allow(clippy::result_large_err)] // the buffer comes back with the error
    fn out_of_ring<T>(
        &mut self,
        mut buf: RxBuf,
        what: &str,
        how: impl FnOnce(&mut dyn RxBackend, u64, usize) -> Option<Result<T>>,
    ) -> std::result::Result<T, (RxBuf, Error)> {
        let mine = Arc::ptr_eq(&buf.ret, &self.ret) && buf.loc == Location::Host;
        let out = if mine {
            how(self.backend.as_mut(), buf.key, buf.len)
        } else {
            None
        };
        match out {
            Some(Ok(v)) => {
                buf.armed = false;
                Ok(v)
            }
            Some(Err(e)) => Err((buf, e)),
            None => {
                let e = self.uring_only(what);
                Err((buf, e))
            }
        }
    }

    /// The refusal of what only a uring receiver's buffers allow: `what`, with `{}` for this
    /// receiver's mode, is `EOPNOTSUPP` with the uring mode as the remedy.
    pub(crate) fn uring_only(&self, what: &str) -> Error {
        Error::Unsupported {
            what: what.replacen("{}", self.mode().name(), 1).into(),
            source: std::io::Error::from_raw_os_error(libc::EOPNOTSUPP),
            remedy: crate::Remedy::UseRxMode(RxMode::Uring),
        }
    }

    /// Takes `buf` out of the receive ring for an asynchronous reader ([`crate::gpu::DeviceFill`]):
    /// the handle holds the whole ring buffer (`buf`'s bytes at its start), and the buffer goes
    /// back to the kernel at the first poll after the handle is dropped. Until then it counts as
    /// held. `uring` only (where `auto` chose it); otherwise, or for another receiver's buffer,
    /// `buf` comes back with the error.
    #[allow(clippy::result_large_err)] // the buffer comes back with the error
    pub(crate) fn take(
        &mut self,
        buf: RxBuf,
    ) -> std::result::Result<zcnet_sys::bufring::HeldBuf, (RxBuf, Error)> {
        self.out_of_ring(
            buf,
            "taking {} receive buffers out of their ring (uring buffers can be)",
            |b, key, _| b.take(key),
        )
    }

    /// The mapping that holds every buffer [`Self::take`] hands out; `None` where it hands out
    /// none.
    pub(crate) fn host_mapping(&self) -> Option<Arc<zcnet_sys::mem::Mapping>> {
        self.backend.host_mapping()
    }

    /// The host bytes of `buf`. `None` for device memory, or a buffer of another receiver.
    pub fn bytes<'a>(&'a self, buf: &'a RxBuf) -> Option<&'a [u8]> {
        if !Arc::ptr_eq(&buf.ret, &self.ret) || buf.loc != Location::Host {
            return None;
        }
        self.backend.bytes(buf.key, buf.len)
    }

    /// The token of [`RxConfig::cancel`].
    pub(crate) fn cancel(&self) -> &Cancel {
        &self.cancel
    }

    /// Counters so far.
    pub fn stats(&self) -> RxStats {
        self.stats
    }

    /// Buffers the application holds now (delivered, not yet dropped or not yet recycled).
    pub fn held(&self) -> usize {
        self.backend.held()
    }

    /// Connections closed by the application whose sockets wait for the kernel to let go.
    pub fn closing(&self) -> usize {
        self.closing.len()
    }

    /// The fd an event loop (epoll, mio, tokio's `AsyncFd`) waits on for readability; when it
    /// is readable, call [`Receiver::poll`] with a zero timeout, which never blocks (and makes
    /// no system call when the kernel has nothing for it). Made at the first call: for the
    /// io_uring backends (`uring`, `zcrx`) an eventfd registered with the ring
    /// (`IORING_REGISTER_EVENTFD`; a DEFER_TASKRUN ring's own fd would not wake a poller when
    /// receive work is queued for it), for `copy` and `devmem` their epoll set.
    ///
    /// Wait on it edge-triggered (`EPOLLET`; tokio and mio always do): the eventfd is signalled
    /// for every completion and never read back (that would cost a system call per poll), so a
    /// level-triggered wait would find it readable for good. Drive it as "wait, then poll until
    /// a poll returns no event". A poll also does the work that no
    /// fd signals: giving back buffers the application dropped and re-arming connections that
    /// ran out of them. A receiver that starves (every buffer held by the application or lent
    /// to senders) has its fd signalled by the first buffer that comes back, wherever it is
    /// dropped, so a loop sleeping on the fd wakes. The receiver stays
    /// `!Send` (the io_uring rings take submissions only from the thread that made them): use
    /// it on one thread (tokio: a current-thread runtime or a `LocalSet`).
    pub fn readiness_fd(&mut self) -> Result<BorrowedFd<'_>> {
        self.backend.ready_fd()?;
        if let Some(w) = self.backend.waker() {
            self.ret.set_wake(w);
        }
        self.backend.ready_fd()
    }
}

/// `SO_RCVLOWAT` of `stream`, read back.
fn set_low_water(stream: &TcpStream, bytes: u32) -> Result<u32> {
    let fd = stream.as_raw_fd();
    zcnet_sys::sock::set_recv_lowat(fd, bytes.max(1))
        .and_then(|()| zcnet_sys::sock::recv_lowat(fd))
        .map_err(|e| Error::io(format!("setsockopt(SO_RCVLOWAT, {bytes})"), e))
}

fn auto(cfg: &RxConfig, fallbacks: &mut Vec<Fallback>) -> Result<Box<dyn RxBackend>> {
    let mut note =
        |tried: RxMode, reason: crate::text::Text| fallbacks.push(Fallback { tried, reason });
    if cfg.iface.is_some() {
        match zcrx::ZcrxBackend::new(cfg) {
            Ok(b) => return Ok(Box::new(b)),
            Err(e) => note(RxMode::Zcrx, e.text()),
        }
    } else {
        note(
            RxMode::Zcrx,
            crate::text!(
                "no interface given: zero-copy receive needs the NIC queue the flows arrive on (",
                crate::text::Field::RxIface,
                ")",
            ),
        );
    }
    match uring::UringRx::new(cfg) {
        Ok(b) => return Ok(Box::new(b)),
        Err(e) => note(RxMode::Uring, e.text()),
    }
    Ok(Box::new(copy::CopyRx::new(cfg)?))
}

#[cfg(test)]
mod add_guard_tests;
