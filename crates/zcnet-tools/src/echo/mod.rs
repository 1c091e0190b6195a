//! An RPC echo server on one pinned thread over any receive backend, and the closed-loop client
//! that measures it (shaped after the Thrift echo benchmark in David Wei and Pavel Begunkov's
//! talk "Zero Copy Rx with io_uring": 64 KB echo, one server worker thread, 24 client
//! connections).
//!
//! ```text
//!  client threads (T)                          server thread (pinned to one CPU)
//!  N connections, each a closed loop:          Receiver (copy | uring | zcrx | devmem | auto)
//!   send size B ─────────────────────────────►  poll() → Data(RxBuf) ─┐
//!   read size B back, check, record latency ◄──  sendmsg(lent buffers) ◄┘ (no copy; what the
//!                                                socket does not take goes to an outbox)
//! ```
//! The server is content-agnostic: it writes back exactly the bytes it received, in order, per
//! connection. Consecutive buffers of one connection in one poll go out in one `sendmsg` straight
//! from the buffers the receiver lent (no extra copy); only the part the socket does not take
//! is copied into that connection's outbox, flushed when the socket takes more. Every backend
//! uses this same write path, so modes differ only in how bytes come in.
//!
//! A peer that stops reading cannot block the server: sends never wait (`MSG_DONTWAIT`), and a
//! connection whose outbox grows past [`EchoConfig::outbox_cap`] (or makes no progress for
//! [`EchoConfig::stall_timeout`]) is closed and reported in [`EchoReport::failures`].
//!
//! Connections are accepted by a small acceptor thread and handed over a channel; the
//! [`Receiver`] lives on the server thread only (it is not `Send`).

use crate::lab;
use crate::reason::Reason;
use std::collections::HashMap;
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use zcnet::net;
use zcnet::os::{send_vectored, SEND_IOVECS};
use zcnet::rx::{ConnId, Fallback, Receiver, RxConfig, RxEvent, RxMode, RxStats};
use zcnet::{Error, Result};
use zcnet_core::Pattern;

mod serve;
pub use serve::queue_unsent;
use serve::serve;
mod client;
pub use client::*;

/// Default outbox cap per connection: 4 MiB.
pub const DEFAULT_OUTBOX_CAP: usize = 4 << 20;

/// How to run an echo server.
#[derive(Debug, Clone)]
pub struct EchoConfig {
    /// The receive mechanism and its buffers.
    pub rx: RxConfig,
    /// Where to listen (port 0: the kernel picks one; [`EchoServer::addr`] says which).
    pub bind: SocketAddr,
    /// Network namespace (lab) the server thread enters before anything else.
    pub netns: Option<String>,
    /// The CPU the server thread is pinned to (`None`: not pinned).
    pub cpu: Option<usize>,
    /// Bytes waiting to be echoed on one connection above which it is closed as not reading.
    pub outbox_cap: usize,
    /// A connection whose outbox makes no progress this long is closed as stalled.
    pub stall_timeout: Duration,
    /// How long one poll waits when nothing waits to be written (also how quickly a stop or a
    /// new connection is noticed when idle).
    pub idle_poll: Duration,
    /// How long one poll waits while some outbox waits for socket space (how often writability
    /// is retried: the receiver cannot wait for it).
    pub flush_poll: Duration,
    /// TCP keepalive on accepted connections: first probe after this idle time, then every
    /// second, failing after 2 unanswered probes. `None`: off.
    pub keepalive: Option<Duration>,
    /// `TCP_USER_TIMEOUT` on accepted connections: fail one whose sent data stays
    /// unacknowledged this long (e.g. its interface disappeared). `None`: the kernel default.
    pub user_timeout: Option<Duration>,
    /// `SO_SNDBUF` of accepted connections (`None`: autotuned; over loopback the kernel starts
    /// at about 2.6 MiB).
    pub send_buffer: Option<usize>,
    /// Reads back data that landed in device memory (devmem into a udmabuf the caller bound as
    /// `rx.dmabuf`), so that it can be echoed: the CPU cannot send from the device's buffers,
    /// so such data goes through the connection's outbox (a copy for the echo; the receive was
    /// still the device's). `None`: such data fails the connection ([`FailKind::DeviceMemory`]).
    pub device_reader: Option<DeviceReader>,
}

/// Copies `out.len()` bytes at a dma-buf offset into `out`.
pub type ReadDevice = dyn Fn(u64, &mut [u8]) -> Result<()> + Send + Sync;

/// A [`ReadDevice`] for the echo server (see [`EchoConfig::device_reader`]).
#[derive(Clone)]
pub struct DeviceReader(pub Arc<ReadDevice>);

impl std::fmt::Debug for DeviceReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeviceReader")
    }
}

impl EchoConfig {
    /// Defaults: `mode` with 16 KiB × 64 buffers, 4 MiB outbox cap, 10 s stall timeout,
    /// 10 ms idle poll, 1 ms flush poll, not pinned, no keepalive.
    pub fn new(mode: RxMode, bind: SocketAddr) -> EchoConfig {
        EchoConfig {
            rx: RxConfig {
                cancel: crate::interrupt::token(),
                ..RxConfig::new(mode)
            },
            bind,
            netns: None,
            cpu: None,
            outbox_cap: DEFAULT_OUTBOX_CAP,
            stall_timeout: Duration::from_secs(10),
            idle_poll: Duration::from_millis(10),
            flush_poll: Duration::from_millis(1),
            keepalive: None,
            user_timeout: None,
            send_buffer: None,
            device_reader: None,
        }
    }
}

/// Why the server gave up on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailKind {
    /// Receiving failed (reset by the peer, timed out, interface gone...).
    Receive,
    /// Writing the echo failed (reset, broken pipe...).
    Send,
    /// The peer does not read: more than the outbox cap waited to be echoed.
    OutboxFull,
    /// The outbox made no progress for the stall timeout.
    Stalled,
    /// The data arrived in device memory, which the CPU cannot echo.
    DeviceMemory,
    /// The receiver refused the connection.
    Add,
}

impl FailKind {
    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            FailKind::Receive => "receive",
            FailKind::Send => "send",
            FailKind::OutboxFull => "outbox-full",
            FailKind::Stalled => "stalled",
            FailKind::DeviceMemory => "device-memory",
            FailKind::Add => "add",
        }
    }
}

/// A connection the server closed because of a failure.
#[derive(Debug, Clone)]
pub struct ConnFailure {
    /// The receiver's id.
    pub conn: ConnId,
    /// The peer's address.
    pub peer: Option<SocketAddr>,
    /// What went wrong.
    pub kind: FailKind,
    /// Why (one line): words, or the library's error.
    pub reason: Reason,
    /// Bytes received on it.
    pub bytes_in: u64,
    /// Bytes echoed on it.
    pub bytes_out: u64,
}

impl From<&ConnFailure> for Reason {
    /// The connection, what went wrong and why, and its bytes.
    fn from(c: &ConnFailure) -> Reason {
        let peer = c.peer.map(|p| format!(" from {p}")).unwrap_or_default();
        Reason::from(format!("connection {}{peer} ({}): ", c.conn, c.kind.name()))
            + c.reason.clone()
            + format!(" after {} B in, {} B echoed", c.bytes_in, c.bytes_out)
    }
}

impl ConnFailure {
    /// The failure in `voice`'s words (`Display` is the library's).
    pub fn render(&self, voice: &dyn zcnet::Voice) -> String {
        Reason::from(self).render(voice)
    }
}

impl std::fmt::Display for ConnFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Reason::from(self).fmt(f)
    }
}

/// How a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnEnd {
    /// The peer half-closed, the echo was flushed, the server closed.
    Clean,
    /// The server gave up on it (see [`EchoReport::failures`]).
    Failed(FailKind),
    /// Still open at stop; the server closed it then.
    Stopped,
}

/// One connection's counters.
#[derive(Debug, Clone)]
pub struct ConnSummary {
    /// The receiver's id.
    pub conn: ConnId,
    /// The peer's address.
    pub peer: Option<SocketAddr>,
    /// Bytes received on it.
    pub bytes_in: u64,
    /// Bytes echoed on it.
    pub bytes_out: u64,
    /// The largest outbox it had.
    pub outbox_peak: usize,
    /// How it ended.
    pub end: ConnEnd,
}

/// What an echo server did, from start to stop.
#[derive(Debug, Clone)]
pub struct EchoReport {
    /// The mode asked for.
    pub requested: RxMode,
    /// The mode used (for `auto`, the one chosen).
    pub mode: RxMode,
    /// What `auto` tried and why it was refused.
    pub fallbacks: Vec<Fallback>,
    /// The CPU the server thread was pinned to.
    pub cpu: Option<usize>,
    /// Connections accepted.
    pub accepted: u64,
    /// Payload bytes received.
    pub bytes_received: u64,
    /// Bytes written back.
    pub bytes_echoed: u64,
    /// `sendmsg`/`send` calls.
    pub send_calls: u64,
    /// Echoes the socket did not take whole (the rest went to the outbox).
    pub partial_sends: u64,
    /// Bytes copied into outboxes (the only copy the server makes).
    pub outbox_bytes: u64,
    /// The largest outbox seen.
    pub outbox_peak: usize,
    /// Receiver polls.
    pub polls: u64,
    /// Connections that ended cleanly (peer half-closed, echo flushed, closed).
    pub clean_closes: u64,
    /// Connections still open at stop (closed by the server then).
    pub closed_at_stop: u64,
    /// Connections the server gave up on, and why.
    pub failures: Vec<ConnFailure>,
    /// Every connection the receiver served, in the order they ended.
    pub connections: Vec<ConnSummary>,
    /// Accept errors (e.g. out of file descriptors), counted by the acceptor.
    pub accept_errors: u64,
    /// The receiver's counters.
    pub rx: RxStats,
    /// CPU seconds (user + system) of the server thread while serving.
    pub cpu_seconds: f64,
    /// Wall seconds serving.
    pub seconds: f64,
    /// Buffers still lent by the receiver after stop (0 unless something leaked).
    pub held_at_stop: usize,
    /// Connections the receiver still had open (or closing) after stop (0 unless leaked).
    pub open_at_stop: usize,
    /// A receiver error that ended serving early.
    pub error: Option<String>,
}

impl EchoReport {
    /// Requests of `size` bytes echoed (the server does not frame; this is bytes / size).
    pub fn requests(&self, size: usize) -> u64 {
        self.bytes_echoed / size.max(1) as u64
    }
}

/// Counters the server publishes while it runs (once per poll).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveStats {
    /// Connections accepted.
    pub accepted: u64,
    /// Connections open now.
    pub open: u64,
    /// Connections given up on.
    pub failed: u64,
    /// Connections closed cleanly.
    pub clean_closes: u64,
    /// Bytes echoed.
    pub bytes_echoed: u64,
    /// Polls.
    pub polls: u64,
}

#[derive(Debug, Default)]
struct Live {
    accepted: AtomicU64,
    open: AtomicU64,
    failed: AtomicU64,
    clean: AtomicU64,
    echoed: AtomicU64,
    polls: AtomicU64,
    accept_errors: AtomicU64,
}

/// A running echo server. Stop it with [`EchoServer::stop`] (dropping it stops it too, without
/// the report).
#[derive(Debug)]
pub struct EchoServer {
    addr: SocketAddr,
    mode: RxMode,
    fallbacks: Vec<Fallback>,
    stop: Arc<AtomicBool>,
    live: Arc<Live>,
    thread: Option<JoinHandle<EchoReport>>,
}

/// Why a server did not start.
#[derive(Debug)]
pub(crate) enum StartError {
    /// The receive mode was refused by the kernel or the machine.
    Refused(Error),
    /// Anything else (namespace, bind, pinning).
    Other(Error),
}

impl From<StartError> for Error {
    fn from(e: StartError) -> Error {
        match e {
            StartError::Refused(e) | StartError::Other(e) => e,
        }
    }
}

struct Ready {
    addr: SocketAddr,
    mode: RxMode,
    fallbacks: Vec<Fallback>,
}

impl EchoServer {
    /// Starts the server thread: it enters `cfg.netns`, makes the receiver, binds, pins itself to
    /// `cfg.cpu`, and serves until stopped. Errors (a refused receive mode, a bind failure) come
    /// back here.
    pub fn start(cfg: EchoConfig) -> Result<EchoServer> {
        Ok(Self::start_classified(cfg)?)
    }

    pub(crate) fn start_classified(cfg: EchoConfig) -> Result<EchoServer, StartError> {
        let stop = Arc::new(AtomicBool::new(false));
        let live = Arc::new(Live::default());
        let (ready_tx, ready_rx) = mpsc::channel::<Result<Ready, StartError>>();
        let (s2, l2) = (Arc::clone(&stop), Arc::clone(&live));
        let thread = std::thread::Builder::new()
            .name("zcnet-echo".into())
            .spawn(move || serve(cfg, s2, l2, ready_tx))
            .map_err(|e| StartError::Other(Error::io("spawning the echo server thread", e)))?;
        match ready_rx.recv() {
            Ok(Ok(r)) => Ok(EchoServer {
                addr: r.addr,
                mode: r.mode,
                fallbacks: r.fallbacks,
                stop,
                live,
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(StartError::Other(Error::io(
                    "echo server thread",
                    io::Error::other("exited before it was ready"),
                )))
            }
        }
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The receive mode in use (for `auto`, the one chosen).
    pub fn mode(&self) -> RxMode {
        self.mode
    }

    /// What `auto` tried and why it was refused.
    pub fn fallbacks(&self) -> &[Fallback] {
        &self.fallbacks
    }

    /// Counters so far.
    pub fn live(&self) -> LiveStats {
        let l = &self.live;
        LiveStats {
            accepted: l.accepted.load(Ordering::Relaxed),
            open: l.open.load(Ordering::Relaxed),
            failed: l.failed.load(Ordering::Relaxed),
            clean_closes: l.clean.load(Ordering::Relaxed),
            bytes_echoed: l.echoed.load(Ordering::Relaxed),
            polls: l.polls.load(Ordering::Relaxed),
        }
    }

    /// Stops serving: closes every connection, waits for the receiver to let go of its sockets
    /// and buffers (up to 2 s), and returns the report.
    pub fn stop(mut self) -> Result<EchoReport> {
        self.stop.store(true, Ordering::SeqCst);
        let t = self
            .thread
            .take()
            .ok_or_else(|| Error::io("echo server", io::Error::other("already stopped")))?;
        t.join()
            .map_err(|_| Error::io("echo server thread", io::Error::other("panicked")))
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Accepts on a non-blocking listener until `stop`, handing streams to the server thread.
fn accept_loop(
    listener: TcpListener,
    stop: Arc<AtomicBool>,
    live: Arc<Live>,
    tx: mpsc::Sender<(TcpStream, SocketAddr)>,
) {
    let fd = listener.as_raw_fd();
    while !stop.load(Ordering::Relaxed) {
        match zcnet::os::sock::poll_one(fd, libc::POLLIN, 20) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(_) => {
                live.accept_errors.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        }
        loop {
            match listener.accept() {
                Ok((s, peer)) => {
                    if tx.send((s, peer)).is_err() {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // ECONNABORTED and friends: that one connection is gone. EMFILE: back off.
                Err(_) => {
                    live.accept_errors.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(5));
                    break;
                }
            }
        }
    }
}

/// What the server thread sets up before serving: its receiver, the address, the acceptor and
/// the channel it hands connections over.
type Setup = (
    Receiver,
    SocketAddr,
    JoinHandle<()>,
    mpsc::Receiver<(TcpStream, SocketAddr)>,
);

fn setup(cfg: &EchoConfig, stop: &Arc<AtomicBool>, live: &Arc<Live>) -> Result<Setup, StartError> {
    if let Some(ns) = &cfg.netns {
        lab::enter(ns).map_err(StartError::Other)?;
    }
    let rx = Receiver::new(&cfg.rx).map_err(StartError::Refused)?;
    let listener = net::listen_tcp(cfg.bind).map_err(StartError::Other)?;
    let other = |what: &str, e: io::Error| StartError::Other(Error::io(what.to_string(), e));
    listener
        .set_nonblocking(true)
        .map_err(|e| other("listener O_NONBLOCK", e))?;
    let addr = listener.local_addr().map_err(|e| other("local_addr", e))?;
    let (tx, accepted) = mpsc::channel();
    // Spawned before pinning: the acceptor does not inherit the server's CPU.
    let (s2, l2) = (Arc::clone(stop), Arc::clone(live));
    let acceptor = std::thread::Builder::new()
        .name("zcnet-echo-accept".into())
        .spawn(move || accept_loop(listener, s2, l2, tx))
        .map_err(|e| other("spawning the acceptor thread", e))?;
    if let Some(cpu) = cfg.cpu {
        if let Err(e) = zcnet::os::set_thread_affinity(&[cpu]) {
            stop.store(true, Ordering::SeqCst);
            let _ = acceptor.join();
            return Err(StartError::Other(Error::io(
                format!("pinning the echo server to CPU {cpu} (see the allowed CPUs with 'taskset -p $$')"),
                e,
            )));
        }
    }
    Ok((rx, addr, acceptor, accepted))
}

#[cfg(test)]
mod tests;
