//! Sending from registered memory, with every mechanism Linux offers behind one interface.
//!
//! ```text
//!   app ── Sender::buffer() ──► TxBuf (writable) ── Sender::send(buf, len) ──► backend
//!    ▲                                                                          │ kernel
//!    └──────────── free list ◄── final completion / notification ◄──────────────┘
//! ```
//! Backends (`--tx`): `copy` (send), `msg-zerocopy` (SO_ZEROCOPY + MSG_ZEROCOPY, error-queue
//! ranges), `uring` (IORING_OP_SEND), `uring-zc` (IORING_OP_SEND_ZC from fixed buffers with
//! usage reports), `auto` (zero-copy until the kernel says it copies, then `copy`, re-checking),
//! `devmem` (devmem TCP transmit: `MSG_ZEROCOPY` from a dma-buf bound to the egress NIC; not in
//! [`TxMode::ALL`], the benchmark's set, because it needs a dma-buf and a NIC with netmem TX).
//! Every backend keeps [`TxStats`] honest: bytes are "zero-copy" only when the kernel said so.

mod auto;
mod config;
mod copy;
mod devmem;
pub(crate) mod memlock;
mod msgzc;
mod uring;

use crate::cancel::Cancel;
use crate::error::{Error, Result};
use crate::region::{MemoryKind, Region, TxBuf};
use crate::remedy::Remedy;
use crate::text::Text;
pub use config::*;
pub use memlock::{memlock_refusal, memlock_refusal_for};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zcnet_core::StallClock;
pub use zcnet_core::TxStats;
use zcnet_sys::mem::Backing;

/// A socket to send on: a connected TCP stream or a connected UDP socket.
#[derive(Debug)]
pub struct Socket {
    fd: OwnedFd,
    stream: bool,
}

impl Socket {
    /// Whether it is a byte stream (ordering of sends matters).
    pub fn is_stream(&self) -> bool {
        self.stream
    }

    /// The TCP stream it is, if it is one.
    pub(crate) fn into_tcp(self) -> std::result::Result<std::net::TcpStream, Socket> {
        if self.stream {
            Ok(std::net::TcpStream::from(self.fd))
        } else {
            Err(self)
        }
    }
}

impl From<std::net::TcpStream> for Socket {
    fn from(s: std::net::TcpStream) -> Self {
        Socket {
            fd: s.into(),
            stream: true,
        }
    }
}

impl From<std::net::UdpSocket> for Socket {
    fn from(s: std::net::UdpSocket) -> Self {
        Socket {
            fd: s.into(),
            stream: false,
        }
    }
}

impl Socket {
    /// A second handle on the same socket (`dup`): for trying a mechanism that may refuse it
    /// without giving the socket up.
    pub fn try_clone(&self) -> Result<Socket> {
        Ok(Socket {
            fd: self
                .fd
                .try_clone()
                .map_err(|e| Error::io("duplicating the socket", e))?,
            stream: self.stream,
        })
    }
}

impl AsRawFd for Socket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Appends `why` to a sender's note ("; " between two).
fn add_note(note: &mut Option<Text>, why: impl Into<Text>) {
    *note = Some(match note.take() {
        Some(n) => n + "; " + why,
        None => why.into(),
    });
}

/// The longest a backend's wait for completions blocks at once ([`TxBackend::reap`]): waits
/// longer than this are made of such slices, with the cancel token and the stall clock looked
/// at between them.
pub(crate) const WAIT_SLICE: Duration = Duration::from_millis(100);

/// What the backends share: the socket, the free buffers, the statistics, the clock.
#[derive(Debug)]
pub(crate) struct Shared {
    pub fd: RawFd,
    pub free: Vec<TxBuf>,
    pub stats: TxStats,
    pub start: Instant,
    pub stall_timeout: Duration,
    /// The stall timeout's clock (zcnet-core's, over every wait of the sender, across calls).
    pub stall: StallClock,
    /// The sender's token ([`TxConfig::cancel`]).
    pub cancel: Cancel,
    /// Bytes of the current (or last) `send`/`send_lent` call's payload the kernel accepted
    /// inside the call (`copy` and `msg-zerocopy`, which send in it; see
    /// [`Sender::last_call_accepted`]).
    pub call_accepted: u64,
}

impl Shared {
    /// Whether the sender's token was cancelled: a wait stops, an `EINTR` is not retried.
    pub fn cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// A blocking `send()` found no room in the socket for [`SEND_SLICE`] (the send timeout
    /// [`Sender::new`] sets on the sockets of the modes that send in the call), or a
    /// non-blocking socket none at all (`EAGAIN`): waits for room up to another slice, and says
    /// whether to try again. `since` is when the send last made progress (`None`: until now);
    /// [`Error::Stalled`] once it made none for the stall timeout, [`Error::Interrupted`] when
    /// the token ends the wait. A token that ends at signals ends it after the slice too: a
    /// signal that came while the thread was between system calls, or that a send which had
    /// already copied some bytes swallowed (it then returns the count, not `EINTR`), is seen
    /// by its runtime no later than that.
    pub fn no_room(&mut self) -> Result<()> {
        self.stall_clock(false, 0)?;
        self.cancel.wait_writable_for(self.fd, SEND_SLICE)?;
        if self.cancel.ends_at_signals() {
            return Err(Error::Interrupted);
        }
        Ok(())
    }

    /// The stall timeout's clock over a sender's waits ([`StallClock`]): a wait that `moved`
    /// something (a completion, a buffer back, bytes sent) stops it; one that did not starts
    /// it, and [`Error::Stalled`] (naming the `outstanding` buffers) once it has run for the
    /// stall timeout, over as many calls as it takes (waits with a deadline, calls a signal
    /// ended). The error stops it: a caller that waits again after one is given the whole
    /// timeout again. It reads the clock only once nothing moved, so a hot path reads none.
    #[inline]
    pub fn stall_clock(&mut self, moved: bool, outstanding: usize) -> Result<()> {
        if moved {
            self.stall.moved();
            return Ok(());
        }
        let timeout = u64::try_from(self.stall_timeout.as_nanos()).unwrap_or(u64::MAX);
        let now = self.now_ns();
        self.stall.still(now, timeout).map_err(|_| {
            self.stall.moved();
            Error::Stalled {
                seconds: self.stall_timeout.as_secs(),
                outstanding,
            }
        })
    }

    /// Nanoseconds since the sender's clock started.
    pub fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Maps a send errno to the error the user should see.
    pub fn send_error(&self, e: io::Error) -> Error {
        match e.raw_os_error() {
            Some(libc::ECONNRESET) | Some(libc::EPIPE) => Error::PeerReset {
                accepted: self.stats.bytes,
                confirmed: self.stats.zerocopy_bytes + self.stats.copied_bytes,
            },
            Some(libc::ECONNREFUSED) => {
                Error::io("send: the destination refused (ICMP port unreachable)", e)
            }
            Some(libc::EINTR) => Error::Interrupted,
            _ => Error::io("send", e),
        }
    }
}

/// What a send reads: a buffer of the sender's region, or memory the caller lent
/// ([`Sender::send_lent`]).
#[derive(Debug)]
pub(crate) enum Payload {
    /// A region buffer: back to `Shared::free` when the kernel is done.
    Buf(TxBuf),
    /// `buf[off..]`: the sender's reference is dropped when the kernel is done.
    Lent {
        buf: Arc<crate::engine::ForeignBuf>,
        off: usize,
    },
}

impl Payload {
    /// Its first `len` bytes.
    pub(crate) fn bytes(&self, len: usize) -> Result<&[u8]> {
        match self {
            Payload::Buf(b) => Ok(&b.bytes().ok_or(Error::NotCpuAccessible)?[..len]),
            Payload::Lent { buf, off } => buf
                .slice(*off, len)
                .ok_or_else(|| Error::io("send", io::Error::from_raw_os_error(libc::EINVAL))),
        }
    }

    /// The kernel is done with it (or never got it): a buffer goes back to the free list.
    pub(crate) fn release(self, sh: &mut Shared) {
        if let Payload::Buf(b) = self {
            sh.free.push(b);
        }
    }

    /// The memory as the engine holds it, and the offset of the bytes in it.
    pub(crate) fn into_lease(self) -> (crate::engine::Lease, usize) {
        match self {
            Payload::Buf(b) => (crate::engine::Lease::Slot(b.slot), 0),
            Payload::Lent { buf, off } => (crate::engine::Lease::Borrowed(buf), off),
        }
    }

    /// A region buffer, or the refusal of lent memory by `mode` (which sends only from its
    /// registered region); the lent memory is dropped with the error.
    pub(crate) fn region_only(self, mode: TxMode) -> Result<TxBuf> {
        match self {
            Payload::Buf(b) => Ok(b),
            Payload::Lent { .. } => Err(Error::Unsupported {
                what: crate::text!(
                    format!("{mode} sends from lent memory ("),
                    crate::text::Call::SendLent,
                    ")",
                ),
                source: io::Error::from_raw_os_error(libc::EOPNOTSUPP),
                remedy: Remedy::Any(&[
                    Remedy::UseTxMode(TxMode::UringZc),
                    Remedy::UseTxMode(TxMode::Auto),
                    Remedy::UseTxMode(TxMode::Copy),
                ]),
            }),
        }
    }
}

/// One send mechanism. Every backend runs the same conformance tests (tests/conformance.rs).
pub(crate) trait TxBackend: Send + std::fmt::Debug {
    /// Hands `p`'s first `len` bytes to the kernel. A region buffer goes back to `sh.free`
    /// when the kernel is done with it (at once for copying backends), lent memory is let go
    /// then. On error the buffer is not lost: it is in `sh.free` or still held for a pending
    /// completion.
    fn send(&mut self, sh: &mut Shared, p: Payload, len: usize) -> Result<()>;
    /// Processes completions; with a `wait` above zero, first blocks up to that long (at most
    /// [`WAIT_SLICE`]) for at least one.
    fn reap(&mut self, sh: &mut Shared, wait: Duration) -> Result<()>;
    /// Buffers the kernel still holds.
    fn outstanding(&self) -> usize;
    /// The fd an event loop waits on before a non-blocking [`Self::reap`]: for the io_uring
    /// backends an eventfd registered with the ring at the first call. `None` for those that
    /// send (and get their buffers back) inside `send` and blocking waits only.
    fn ready_fd(&mut self) -> Result<Option<std::os::fd::BorrowedFd<'_>>> {
        Ok(None)
    }
}

/// Sends from a region with one mechanism, keeping the accounting.
#[derive(Debug)]
pub struct Sender {
    // Field order matters: the backend (which may own an io_uring holding buffers) drops before
    // the socket it sends on.
    backend: Box<dyn TxBackend>,
    sh: Shared,
    sock: Socket,
    total: usize,
    mode: TxMode,
    started: bool,
    cpu0: f64,
    note: Option<Text>,
    fallbacks: Vec<Fallback>,
}

impl Drop for Sender {
    /// Runs before the fields drop (the backend first, which cancels what it can and waits a
    /// bounded time for the kernel to give back the buffers it holds). Dropping a sender
    /// abandons the sends not yet complete ([`Sender::finish`] and [`Sender::flush`] deliver
    /// them): a stream whose queues still hold its buffers after a last look at the completions
    /// is reset (`connect(AF_UNSPEC)`), which releases them at once. Without the reset, a peer
    /// that stopped reading keeps zero-copy buffers in the socket for good: the drop would wait
    /// its bound on the caller's thread (an event loop's, for zcnet-tokio) and then leak them,
    /// memory lent by a receiver included, which never went back to its ring.
    fn drop(&mut self) {
        if self.sock.stream && self.backend.outstanding() > 0 {
            let _ = self.backend.reap(&mut self.sh, Duration::ZERO);
            if self.backend.outstanding() > 0 {
                let _ = zcnet_sys::sock::disconnect(self.sh.fd);
            }
        }
    }
}

impl Sender {
    /// A sender on `sock` using `region`, cut into [`TxConfig::buffers`] buffers of
    /// `cfg.buf_size`.
    pub fn new(sock: Socket, mut region: Region, cfg: &TxConfig) -> Result<Sender> {
        // A send's length is a u32 to the kernel (and to the engine's requests).
        if cfg.buf_size > u32::MAX as usize {
            return Err(Error::io(
                "buffer size",
                io::Error::from_raw_os_error(libc::EINVAL),
            ));
        }
        let stride = buffer_stride(cfg.buf_size);
        // `inflight` buffers are a must; the window's extra ones are taken as far as the region
        // holds them (a region sized for `inflight` alone, as before the window, still works).
        let need = min_region_len(cfg);
        if need > region.len() || cfg.buf_size == 0 {
            return Err(Error::RegionTooSmall {
                need,
                have: region.len(),
            });
        }
        let count = cfg.buffers().min(region.len() / stride);
        // devmem sends from the region's dma-buf: found (or exported) before the region is cut.
        let dmabuf = match cfg.mode {
            TxMode::Devmem => Some(devmem::dmabuf_for(&mut region, sock.stream, cfg)?),
            _ => None,
        };
        let mut note = region.note().map(|n| Text::from(n.to_string()));
        let auto_copies = cfg.mode == TxMode::Auto && cfg.buf_size < AUTO_MIN_ZERO_COPY;
        if auto_copies {
            let why = format!(
                "auto: copying: sends of {} B are below {} KiB, where a zero-copy notification per send costs more than the copy it saves",
                cfg.buf_size,
                AUTO_MIN_ZERO_COPY >> 10
            );
            add_note(&mut note, why);
        }
        let huge = matches!(
            region.backing(),
            Backing::HugeTlb | Backing::TransparentHuge
        );
        if huge && matches!(cfg.mode, TxMode::UringZc | TxMode::Auto) && !auto_copies {
            add_note(
                &mut note,
                crate::text!(
                    "SEND_ZC from huge pages: the kernel charges each send to the socket buffers as if it ran from the start of its huge page (io_sg_from_iter, Linux 6.18), so sends wait for buffer space sooner and a receiver on this host may drop datagrams; host memory (",
                    MemoryKind::Anonymous.term(),
                    ") avoids it",
                ),
            );
        }
        let (map, slots) = region
            .into_mapping()
            .into_slots_strided(cfg.buf_size, stride, count)
            .map_err(|e| Error::io("cutting the region into buffers", e))?;
        let fd = sock.as_raw_fd();
        if sock.stream {
            let segment = path_segment(fd);
            // `auto` below AUTO_MIN_ZERO_COPY copies: then it is a copying sender.
            let mode = if auto_copies { TxMode::Copy } else { cfg.mode };
            if zero_copy_wants_nodelay(mode, cfg.buf_size, count * cfg.buf_size, segment) {
                zcnet_sys::sock::set_nodelay(fd)
                    .map_err(|e| Error::io("setting TCP_NODELAY", e))?;
            }
            if let Some(why) = ack_paced(mode, count, cfg.buf_size, segment) {
                add_note(&mut note, why);
            }
        }
        if matches!(
            cfg.mode,
            TxMode::Copy | TxMode::MsgZerocopy | TxMode::Auto | TxMode::Devmem
        ) {
            // Their blocking send() returns after SEND_SLICE without room (partly sent, or
            // EAGAIN), so that a peer that stopped reading meets the stall timeout and the
            // token. io_uring's sends poll for room instead and never sleep on it.
            zcnet_sys::sock::set_send_timeout(fd, SEND_SLICE)
                .map_err(|e| Error::io("setting SO_SNDTIMEO", e))?;
        }
        let mut fallbacks = Vec::new();
        let mut stats = TxStats::default();
        let backend: Box<dyn TxBackend> = match cfg.mode {
            TxMode::Copy => Box::new(copy::CopyTx),
            TxMode::MsgZerocopy => Box::new(msgzc::MsgZcTx::new(fd, slots.len())?),
            TxMode::Uring => Box::new(uring::UringTx::new(
                fd,
                &map,
                slots.len(),
                false,
                sock.stream,
            )?),
            TxMode::UringZc => Box::new(uring::UringTx::new(
                fd,
                &map,
                slots.len(),
                true,
                sock.stream,
            )?),
            TxMode::Auto => {
                let auto = auto::AutoTx::new(fd, &map, slots.len(), sock.stream, !auto_copies)?;
                fallbacks = auto.fallbacks().to_vec();
                if !fallbacks.is_empty() {
                    // Said twice: in the note (printed when the sender is made) and as a switch
                    // at 0 s in the statistics (printed with them, and in --json).
                    let mut why = Text::new();
                    for (i, f) in fallbacks.iter().enumerate() {
                        if i > 0 {
                            why.push("; ");
                        }
                        why.push(format!("{} refused: ", f.tried));
                        why.push(f.reason.clone());
                    }
                    why.push(format!("; sending with {}", auto.fixed_engine()));
                    stats
                        .switches
                        .push(zcnet_core::Switch::fallback(0, why.clone()));
                    add_note(&mut note, Text::from("auto: ") + why);
                }
                Box::new(auto)
            }
            TxMode::Devmem => Box::new(devmem::new(fd, dmabuf, &map, slots.len(), cfg)?),
        };
        let mut free: Vec<TxBuf> = slots.into_iter().map(|slot| TxBuf { slot }).collect();
        free.reverse(); // hand out buffer 0 first
        Ok(Sender {
            backend,
            total: free.len(),
            sh: Shared {
                fd,
                free,
                stats,
                start: Instant::now(),
                stall_timeout: cfg.stall_timeout,
                stall: StallClock::default(),
                cancel: cfg.cancel.clone(),
                call_accepted: 0,
            },
            sock,
            mode: cfg.mode,
            started: false,
            cpu0: 0.0,
            note,
            fallbacks,
        })
    }

    /// The mechanism.
    pub fn mode(&self) -> TxMode {
        self.mode
    }

    /// A fallback taken when the region was allocated (e.g. THP instead of huge pages), or by
    /// `auto` when the sender was made (small sends copied; zero copy refused, see
    /// [`Sender::fallbacks`]).
    pub fn note(&self) -> Option<&Text> {
        self.note.as_ref()
    }

    /// `auto`: the mechanisms refused when the sender was made, best first, each with the
    /// reason (e.g. `uring-zc` when RLIMIT_MEMLOCK cannot hold its ring and registered region,
    /// then `uring` when it cannot hold the ring). Empty when zero copy was set up, and for
    /// the other modes, which fail instead.
    pub fn fallbacks(&self) -> &[Fallback] {
        &self.fallbacks
    }

    /// The socket.
    pub fn socket(&self) -> &Socket {
        &self.sock
    }

    /// Buffers the kernel still holds.
    pub fn outstanding(&self) -> usize {
        self.backend.outstanding()
    }

    /// Number of buffers.
    pub fn buffers(&self) -> usize {
        self.total
    }

    #[inline]
    fn start_clock(&mut self) {
        if !self.started {
            self.started = true;
            self.sh.start = Instant::now();
            self.cpu0 = zcnet_sys::os::thread_cpu_seconds();
        }
    }

    /// A free buffer, waiting for the kernel to release one if all are in flight.
    #[inline]
    pub fn buffer(&mut self) -> Result<TxBuf> {
        self.start_clock();
        if let Some(b) = self.sh.free.pop() {
            return Ok(b);
        }
        self.wait_for_buffer()
    }

    /// [`Sender::buffer`] with no buffer free: waits for the kernel to release one.
    #[inline(never)]
    fn wait_for_buffer(&mut self) -> Result<TxBuf> {
        if self.backend.outstanding() == 0 {
            return Err(every_buffer_held());
        }
        self.wait_until(None, |s| !s.sh.free.is_empty())?;
        self.sh.free.pop().ok_or(Error::Stalled {
            seconds: 0,
            outstanding: self.backend.outstanding(),
        })
    }

    /// [`Sender::buffer`] that waits no later than `deadline`: `None` when no buffer came back
    /// by then. For a caller that waits in bounded slices (to look at signals, to run an event
    /// loop's other work): the stall timeout runs over the slices as over one blocking wait
    /// ([`Error::Stalled`] once nothing came back for that long), and the cancel token applies.
    pub fn buffer_until(&mut self, deadline: Instant) -> Result<Option<TxBuf>> {
        self.start_clock();
        if self.sh.free.is_empty() {
            if self.backend.outstanding() == 0 {
                return Err(every_buffer_held());
            }
            self.wait_until(Some(deadline), |s| !s.sh.free.is_empty())?;
        }
        Ok(self.sh.free.pop())
    }

    /// A free buffer if one is ready now (completions are processed, nothing blocks).
    pub fn try_buffer(&mut self) -> Result<Option<TxBuf>> {
        self.start_clock();
        if self.sh.free.is_empty() {
            self.backend.reap(&mut self.sh, Duration::ZERO)?;
        }
        Ok(self.sh.free.pop())
    }

    /// Sends `buf[..len]`. The buffer comes back from [`Sender::buffer`] once the kernel is done.
    /// io_uring backends queue the request and submit it with the next wait (or
    /// [`Sender::submit`], [`Sender::flush`]).
    pub fn send(&mut self, buf: TxBuf, len: usize) -> Result<()> {
        self.start_clock();
        if len > buf.capacity() {
            self.sh.free.push(buf);
            return Err(Error::io(
                "send",
                io::Error::from_raw_os_error(libc::EINVAL),
            ));
        }
        if len == 0 {
            self.sh.free.push(buf);
            return Ok(());
        }
        self.sh.call_accepted = 0;
        self.backend.send(&mut self.sh, Payload::Buf(buf), len)
    }

    /// Sends `buf[off..off + len]`, memory the caller lends instead of a region buffer: bytes
    /// received into a buffer of one's own and sent on, a C caller's memory
    /// ([`crate::engine::ForeignBuf::new`]), any `Box<[u8]>` ([`crate::engine::ForeignBuf::owned`]).
    /// The sender keeps its reference until the kernel is done with the bytes (for zero
    /// copy: the notification), so the memory is the caller's again once the `Arc` is unique
    /// (`Arc::get_mut` succeeds) — writing it earlier does not compile. Through the one engine
    /// in `uring`, `uring-zc` and `auto` (`SEND_ZC` from lent memory pins its pages per send,
    /// charged to RLIMIT_MEMLOCK without CAP_IPC_LOCK; the region's fixed buffer is used where
    /// the bytes lie in it), sent at once by `copy`; `msg-zerocopy` and `devmem` send only from
    /// their region (`Unsupported`).
    pub fn send_lent(
        &mut self,
        buf: Arc<crate::engine::ForeignBuf>,
        off: usize,
        len: usize,
    ) -> Result<()> {
        self.start_clock();
        let inside = off.checked_add(len).is_some_and(|end| end <= buf.len());
        if !inside || len > u32::MAX as usize {
            return Err(Error::io(
                "send_lent: the bytes lie outside the lent memory",
                io::Error::from_raw_os_error(libc::EINVAL),
            ));
        }
        if len == 0 {
            return Ok(());
        }
        self.sh.call_accepted = 0;
        self.backend
            .send(&mut self.sh, Payload::Lent { buf, off }, len)
    }

    /// Hands every queued send to the kernel now, without waiting, and takes back the buffers
    /// it is done with. The io_uring backends queue sends and submit them with the next wait,
    /// which comes when every buffer is in flight: a sender that sleeps between sends (a paced
    /// one) calls this before it sleeps, or its sends leave in bursts of all its buffers (for
    /// 1,460-byte datagrams, 360 at once). Copy and `msg-zerocopy` send at once; for them it
    /// only takes back finished buffers.
    pub fn submit(&mut self) -> Result<()> {
        self.backend.reap(&mut self.sh, Duration::ZERO)
    }

    /// The fd an event loop (epoll, mio, tokio's `AsyncFd`) waits on for readability while
    /// every buffer is in flight: when it is readable, [`Sender::submit`] (or
    /// [`Sender::try_buffer`]) takes back what the kernel finished without blocking. Made at
    /// the first call: an eventfd registered with the io_uring ring of `uring`, `uring-zc` and
    /// `auto` (`IORING_REGISTER_EVENTFD`: signalled for each completion and zero-copy
    /// notification). A completion that finishes while the thread sleeps in the loop's wait
    /// wakes it: the kernel interrupts the wait (`EINTR`, which event loops retry) to post it,
    /// and the fd is signalled. Wait on it edge-triggered (`EPOLLET`; tokio and mio always do):
    /// it is never read back, so a level-triggered wait would find it readable for good.
    /// [`Sender::send`] never blocks on these modes: it queues, and submits when the queue is
    /// full. `copy`, `msg-zerocopy` and `devmem` have none (an `Unsupported` error): they send
    /// inside `send` and get buffers back in blocking waits, so drive them from a thread of
    /// their own. From the first call on, `auto` copies (when the kernel's verdicts say zero
    /// copy does not pay) through its io_uring ring as IORING_OP_SEND instead of blocking
    /// `send()` calls. The
    /// sender is `Send`: it may move between threads, but an io_uring request belongs to the
    /// thread that submitted it, and the kernel cancels a thread's requests when it exits: a
    /// thread that sent must live until its sends complete ([`Sender::flush`]), or the next
    /// wait reports them cancelled (`ECANCELED`). Runtime worker threads live as long as the
    /// runtime; a blocking-pool thread may exit once idle.
    pub fn readiness_fd(&mut self) -> Result<std::os::fd::BorrowedFd<'_>> {
        let mode = self.mode;
        self.backend.ready_fd()?.ok_or_else(|| Error::Unsupported {
            what: format!(
                "a readiness fd for {mode} sends (they complete inside send() and blocking waits)"
            )
            .into(),
            source: io::Error::from_raw_os_error(libc::EOPNOTSUPP),
            remedy: Remedy::Other(
                "use the uring, uring-zc or auto mode with an event loop, or a thread of its own",
            ),
        })
    }

    /// The token of [`TxConfig::cancel`] (or of the last [`Sender::set_cancel`]).
    pub(crate) fn cancel(&self) -> &Cancel {
        &self.sh.cancel
    }

    /// Replaces the sender's cancel token ([`TxConfig::cancel`]) for the calls from now on:
    /// e.g. one that ends at signals ([`Cancel::ending_at_signals`]) for calls whose progress
    /// the caller can pick up again, and a plain one around calls it cannot.
    pub fn set_cancel(&mut self, cancel: Cancel) {
        self.sh.cancel = cancel;
    }

    /// Of the last [`Sender::send`] or [`Sender::send_lent`] call that failed, the bytes of its
    /// own payload that went into the socket first, in order (the rest did not): a call ended
    /// part-way by [`Error::Interrupted`] (a token that ends at signals) or a stall goes on
    /// from there. The modes that send in the call (`copy`, `msg-zerocopy`, `auto` while it
    /// copies, `devmem`) count every byte the kernel accepted; the io_uring modes queue a
    /// payload whole or not at all, and a call of theirs that failed queued none of it (0).
    /// After a call that succeeded, every byte of its payload went or is queued.
    pub fn last_call_accepted(&self) -> u64 {
        self.sh.call_accepted
    }

    /// Waits until every buffer is back: every send completed and every notification arrived.
    pub fn flush(&mut self) -> Result<()> {
        self.wait_until(None, |s| s.backend.outstanding() == 0)
            .map(drop)
    }

    /// [`Sender::flush`] that waits no later than `deadline`: whether every buffer is back.
    /// The stall timeout and the cancel token apply as for [`Sender::buffer_until`].
    pub fn flush_until(&mut self, deadline: Instant) -> Result<bool> {
        self.wait_until(Some(deadline), |s| s.backend.outstanding() == 0)
    }

    /// Waits until `done` or `deadline` (`None`: no deadline); whether `done`. The stall clock
    /// is the sender's ([`Shared::stall_clock`]): it starts only when a wait brings nothing
    /// back, so the hot path (a completion on every wait) reads no clock, and without a
    /// deadline none is read either.
    fn wait_until(
        &mut self,
        deadline: Option<Instant>,
        done: impl Fn(&Self) -> bool,
    ) -> Result<bool> {
        while !done(self) {
            if self.sh.cancelled() {
                return Err(Error::Interrupted);
            }
            let wait = match deadline {
                None => WAIT_SLICE,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left.min(WAIT_SLICE),
                    _ => return Ok(false),
                },
            };
            let before = (self.sh.free.len(), self.backend.outstanding());
            self.backend.reap(&mut self.sh, wait)?;
            let now = (self.sh.free.len(), self.backend.outstanding());
            self.sh.stall_clock(now != before, now.1)?;
        }
        Ok(true)
    }

    /// The statistics so far (wall and CPU time measured from the first buffer or send).
    pub fn stats(&self) -> TxStats {
        let mut s = self.sh.stats.clone();
        if self.started {
            s.seconds = self.sh.start.elapsed().as_secs_f64();
            s.cpu_seconds = zcnet_sys::os::thread_cpu_seconds() - self.cpu0;
        }
        s
    }

    /// Flushes and returns the final statistics. CPU time is that of the calling thread: call it
    /// on the thread that sent.
    pub fn finish(mut self) -> Result<TxStats> {
        self.flush()?;
        Ok(self.stats())
    }
}

#[cfg(test)]
mod wait_tests;
