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
    /// In words (one line).
    pub reason: String,
    /// Bytes received on it.
    pub bytes_in: u64,
    /// Bytes echoed on it.
    pub bytes_out: u64,
}

impl std::fmt::Display for ConnFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "connection {}", self.conn)?;
        if let Some(p) = self.peer {
            write!(f, " from {p}")?;
        }
        write!(
            f,
            " ({}): {} after {} B in, {} B echoed",
            self.kind.name(),
            self.reason,
            self.bytes_in,
            self.bytes_out
        )
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

fn serve(
    cfg: EchoConfig,
    stop: Arc<AtomicBool>,
    live: Arc<Live>,
    ready: mpsc::Sender<Result<Ready, StartError>>,
) -> EchoReport {
    let mut report = EchoReport {
        requested: cfg.rx.mode,
        mode: cfg.rx.mode,
        fallbacks: Vec::new(),
        cpu: cfg.cpu,
        accepted: 0,
        bytes_received: 0,
        bytes_echoed: 0,
        send_calls: 0,
        partial_sends: 0,
        outbox_bytes: 0,
        outbox_peak: 0,
        polls: 0,
        clean_closes: 0,
        closed_at_stop: 0,
        failures: Vec::new(),
        connections: Vec::new(),
        accept_errors: 0,
        rx: RxStats::default(),
        cpu_seconds: 0.0,
        seconds: 0.0,
        held_at_stop: 0,
        open_at_stop: 0,
        error: None,
    };
    let (rx, addr, acceptor, accepted) = match setup(&cfg, &stop, &live) {
        Ok(x) => x,
        Err(e) => {
            let _ = ready.send(Err(e));
            return report;
        }
    };
    report.mode = rx.mode();
    report.fallbacks = rx.fallbacks().to_vec();
    let _ = ready.send(Ok(Ready {
        addr,
        mode: rx.mode(),
        fallbacks: rx.fallbacks().to_vec(),
    }));
    let mut server = Server {
        rx,
        conns: HashMap::new(),
        pending: Vec::new(),
        doomed: Vec::new(),
        finished: Vec::new(),
        cfg: &cfg,
        report,
    };
    let cpu0 = zcnet::os::thread_cpu_seconds();
    let t0 = Instant::now();
    server.run(&stop, &live, &accepted);
    server.report.cpu_seconds = zcnet::os::thread_cpu_seconds() - cpu0;
    server.report.seconds = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    let _ = acceptor.join();
    // Streams accepted but never handed over are closed here.
    while let Ok((s, _)) = accepted.try_recv() {
        server.report.accepted += 1;
        server.report.closed_at_stop += 1;
        drop(s);
    }
    server.teardown();
    live.open.store(0, Ordering::Relaxed);
    server.report.accept_errors = live.accept_errors.load(Ordering::Relaxed);
    server.report
}

/// One connection's echo state.
#[derive(Debug)]
struct Conn {
    fd: RawFd,
    peer: Option<SocketAddr>,
    out: Vec<u8>,
    out_off: usize,
    bytes_in: u64,
    bytes_out: u64,
    outbox_peak: usize,
    eof: bool,
    /// Last write progress (or when the outbox last became non-empty).
    since: Instant,
}

impl Conn {
    fn pending(&self) -> usize {
        self.out.len() - self.out_off
    }
}

type Fail = (FailKind, String);

fn send_failure(e: io::Error) -> Fail {
    let why = match e.raw_os_error() {
        Some(libc::ECONNRESET) | Some(libc::EPIPE) => {
            format!("reset by the peer while echoing ({e})")
        }
        _ => format!("send: {e}"),
    };
    (FailKind::Send, why)
}

struct Server<'a> {
    rx: Receiver,
    conns: HashMap<ConnId, Conn>,
    /// Connections with a non-empty outbox.
    pending: Vec<ConnId>,
    /// Connections to close as failed.
    doomed: Vec<(ConnId, Fail)>,
    /// Connections to close cleanly (EOF seen, echo flushed).
    finished: Vec<ConnId>,
    cfg: &'a EchoConfig,
    report: EchoReport,
}

impl Server<'_> {
    fn run(
        &mut self,
        stop: &AtomicBool,
        live: &Live,
        accepted: &mpsc::Receiver<(TcpStream, SocketAddr)>,
    ) {
        let mut events = Vec::new();
        loop {
            if stop.load(Ordering::Relaxed) || crate::interrupt::interrupted() {
                break;
            }
            while let Ok((s, peer)) = accepted.try_recv() {
                self.add(s, peer);
            }
            let timeout = if self.pending.is_empty() {
                self.cfg.idle_poll
            } else {
                self.cfg.flush_poll
            };
            if let Err(e) = self.rx.poll(&mut events, timeout) {
                self.report.error = Some(e.to_string());
                break;
            }
            self.report.polls += 1;
            self.handle(&events);
            // Dropping the events gives the buffers back (recycled at the next poll).
            events.clear();
            self.flush_pending();
            self.apply_closes();
            live.accepted.store(self.report.accepted, Ordering::Relaxed);
            live.open.store(self.conns.len() as u64, Ordering::Relaxed);
            live.failed
                .store(self.report.failures.len() as u64, Ordering::Relaxed);
            live.clean
                .store(self.report.clean_closes, Ordering::Relaxed);
            live.echoed
                .store(self.report.bytes_echoed, Ordering::Relaxed);
            live.polls.store(self.report.polls, Ordering::Relaxed);
        }
    }

    fn add(&mut self, s: TcpStream, peer: SocketAddr) {
        self.report.accepted += 1;
        // Echo segments go out at once (no Nagle wait for the ACK of the previous one).
        let _ = s.set_nodelay(true);
        let fd = s.as_raw_fd();
        if let Some(idle) = self.cfg.keepalive {
            let _ = zcnet::os::set_tcp_keepalive(fd, idle, Duration::from_secs(1), 2);
        }
        if let Some(t) = self.cfg.user_timeout {
            let _ = zcnet::os::set_tcp_user_timeout(fd, t);
        }
        if let Some(b) = self.cfg.send_buffer {
            let _ = zcnet::os::sock::set_send_buffer(fd, b);
        }
        match self.rx.add(s) {
            Ok(id) => {
                self.conns.insert(
                    id,
                    Conn {
                        fd,
                        peer: Some(peer),
                        out: Vec::new(),
                        out_off: 0,
                        bytes_in: 0,
                        bytes_out: 0,
                        outbox_peak: 0,
                        eof: false,
                        since: Instant::now(),
                    },
                );
            }
            Err(e) => self.report.failures.push(ConnFailure {
                conn: ConnId(0),
                peer: Some(peer),
                kind: FailKind::Add,
                reason: crate::cli_text::error_text(&e),
                bytes_in: 0,
                bytes_out: 0,
            }),
        }
    }

    fn handle(&mut self, events: &[RxEvent]) {
        let mut i = 0;
        while i < events.len() {
            match &events[i] {
                RxEvent::Data(b) => {
                    let c = b.conn();
                    let mut j = i + 1;
                    while j < events.len()
                        && matches!(&events[j], RxEvent::Data(b2) if b2.conn() == c)
                    {
                        j += 1;
                    }
                    let doomed = self.doomed.iter().any(|(d, _)| *d == c);
                    if let (Some(conn), false) = (self.conns.get_mut(&c), doomed) {
                        let was_pending = conn.pending() > 0;
                        let reader = self.cfg.device_reader.as_ref();
                        match echo(&self.rx, reader, conn, &events[i..j], &mut self.report) {
                            Ok(()) => {
                                let p = conn.pending();
                                conn.outbox_peak = conn.outbox_peak.max(p);
                                self.report.outbox_peak = self.report.outbox_peak.max(p);
                                if p > self.cfg.outbox_cap {
                                    let why = format!(
                                        "the peer is not reading: {p} B waiting to be echoed exceed the outbox cap of {} B",
                                        self.cfg.outbox_cap
                                    );
                                    self.doomed.push((c, (FailKind::OutboxFull, why)));
                                } else if p > 0 && !was_pending {
                                    self.pending.push(c);
                                }
                            }
                            Err(f) => self.doomed.push((c, f)),
                        }
                    }
                    i = j;
                }
                RxEvent::Eof(c) => {
                    if let Some(conn) = self.conns.get_mut(c) {
                        conn.eof = true;
                        if conn.pending() == 0 {
                            self.finished.push(*c);
                        }
                    }
                    i += 1;
                }
                RxEvent::Failed(c, e) => {
                    self.doomed.push((*c, (FailKind::Receive, e.to_string())));
                    i += 1;
                }
            }
        }
    }

    fn flush_pending(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut k = 0;
        while k < self.pending.len() {
            let c = self.pending[k];
            let Some(conn) = self.conns.get_mut(&c) else {
                self.pending.swap_remove(k);
                continue;
            };
            if let Err(f) = flush(conn, &mut self.report) {
                self.doomed.push((c, f));
                self.pending.swap_remove(k);
                continue;
            }
            if conn.pending() == 0 {
                if conn.eof {
                    self.finished.push(c);
                }
                self.pending.swap_remove(k);
                continue;
            }
            if now.duration_since(conn.since) > self.cfg.stall_timeout {
                let why = format!(
                    "no write progress for {:.1} s with {} B waiting to be echoed",
                    now.duration_since(conn.since).as_secs_f64(),
                    conn.pending()
                );
                self.doomed.push((c, (FailKind::Stalled, why)));
                self.pending.swap_remove(k);
                continue;
            }
            k += 1;
        }
    }

    fn apply_closes(&mut self) {
        for c in std::mem::take(&mut self.finished) {
            if self.doomed.iter().any(|(d, _)| *d == c) {
                continue;
            }
            if let Some(conn) = self.conns.remove(&c) {
                self.rx.close(c);
                self.report.clean_closes += 1;
                self.report
                    .connections
                    .push(summary(c, &conn, ConnEnd::Clean));
            }
        }
        for (c, (kind, reason)) in std::mem::take(&mut self.doomed) {
            let Some(conn) = self.conns.remove(&c) else {
                continue;
            };
            self.pending.retain(|&p| p != c);
            self.rx.close(c);
            self.report
                .connections
                .push(summary(c, &conn, ConnEnd::Failed(kind)));
            self.report.failures.push(ConnFailure {
                conn: c,
                peer: conn.peer,
                kind,
                reason,
                bytes_in: conn.bytes_in,
                bytes_out: conn.bytes_out,
            });
        }
    }

    /// Closes everything and waits (up to 2 s) until the receiver has let go of every socket
    /// and buffer.
    fn teardown(&mut self) {
        let ids: Vec<ConnId> = self.conns.keys().copied().collect();
        for c in ids {
            if let Some(conn) = self.conns.remove(&c) {
                self.report
                    .connections
                    .push(summary(c, &conn, ConnEnd::Stopped));
            }
            self.rx.close(c);
            self.report.closed_at_stop += 1;
        }
        self.pending.clear();
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut events = Vec::new();
        loop {
            let r = self.rx.poll(&mut events, Duration::from_millis(5));
            events.clear();
            if r.is_err() || Instant::now() >= deadline {
                break;
            }
            if self.rx.closing() == 0 {
                // Buffers dropped just now go back with one more poll.
                let _ = self.rx.poll(&mut events, Duration::ZERO);
                events.clear();
                if self.rx.held() == 0 {
                    break;
                }
            }
        }
        self.report.rx = self.rx.stats();
        self.report.held_at_stop = self.rx.held();
        self.report.open_at_stop = self.rx.connections() + self.rx.closing();
    }
}

fn summary(c: ConnId, conn: &Conn, end: ConnEnd) -> ConnSummary {
    ConnSummary {
        conn: c,
        peer: conn.peer,
        bytes_in: conn.bytes_in,
        bytes_out: conn.bytes_out,
        outbox_peak: conn.outbox_peak,
        end,
    }
}

/// Echoes one connection's consecutive buffers: one `sendmsg` from the lent buffers when its
/// outbox is empty; whatever the socket does not take is copied to the outbox.
fn echo(
    rx: &Receiver,
    reader: Option<&DeviceReader>,
    conn: &mut Conn,
    group: &[RxEvent],
    st: &mut EchoReport,
) -> Result<(), Fail> {
    if let Some(reader) = reader {
        let device = |ev: &RxEvent| matches!(ev, RxEvent::Data(b) if b.device().is_some());
        if group.iter().any(device) {
            return echo_staged(rx, reader, conn, group, st);
        }
    }
    if conn.pending() > 0 {
        flush(conn, st)?;
    }
    let mut slices: [&[u8]; SEND_IOVECS] = [&[]; SEND_IOVECS];
    for chunk in group.chunks(SEND_IOVECS) {
        let mut n = 0;
        let mut total = 0usize;
        for ev in chunk {
            if let RxEvent::Data(b) = ev {
                let Some(bytes) = rx.bytes(b) else {
                    return Err((
                        FailKind::DeviceMemory,
                        "data landed in device memory, which the CPU cannot echo: use a host-memory mode".into(),
                    ));
                };
                slices[n] = bytes;
                n += 1;
                total += bytes.len();
            }
        }
        conn.bytes_in += total as u64;
        st.bytes_received += total as u64;
        let mut sent = 0usize;
        if conn.pending() == 0 {
            sent = loop {
                match send_vectored(conn.fd, &slices[..n], libc::MSG_DONTWAIT) {
                    Ok(k) => break k,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break 0,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(send_failure(e)),
                }
            };
            st.send_calls += 1;
            conn.bytes_out += sent as u64;
            st.bytes_echoed += sent as u64;
            if sent < total {
                st.partial_sends += 1;
                conn.since = Instant::now();
            }
        }
        if sent < total {
            queue_unsent(&slices[..n], sent, &mut conn.out);
            st.outbox_bytes += (total - sent) as u64;
        }
    }
    Ok(())
}

/// Echoes a group that has data in device memory: every buffer, in order, goes to the outbox
/// (device data read back through `reader`), then the outbox is flushed.
fn echo_staged(
    rx: &Receiver,
    reader: &DeviceReader,
    conn: &mut Conn,
    group: &[RxEvent],
    st: &mut EchoReport,
) -> Result<(), Fail> {
    let mut total = 0usize;
    for ev in group {
        let RxEvent::Data(b) = ev else { continue };
        if let Some(bytes) = rx.bytes(b) {
            conn.out.extend_from_slice(bytes);
            total += bytes.len();
        } else if let Some(d) = b.device() {
            let start = conn.out.len();
            conn.out.resize(start + d.len, 0);
            (reader.0)(d.offset, &mut conn.out[start..]).map_err(|e| {
                conn.out.truncate(start);
                (
                    FailKind::DeviceMemory,
                    format!(
                        "reading {} B of device memory back at offset {} to echo them: {e}",
                        d.len, d.offset
                    ),
                )
            })?;
            total += d.len;
        }
    }
    conn.bytes_in += total as u64;
    st.bytes_received += total as u64;
    st.outbox_bytes += total as u64;
    flush(conn, st)
}

/// Appends to `out` what a vectored send of `slices` left unsent when the socket took `sent`
/// bytes (the tail from byte `sent` on), and returns how many bytes it appended: the total
/// minus `sent`, or 0 if `sent` covers everything.
///
/// `sent` is what the kernel answered; this and [`check_response`] are the echo protocol's only
/// handling of what the kernel or the peer says, kept pure so that fuzz/ (target `echo`) and
/// the fuzz smoke test drive them with arbitrary values.
pub fn queue_unsent(slices: &[&[u8]], sent: usize, out: &mut Vec<u8>) -> usize {
    let before = out.len();
    let mut skip = sent;
    for s in slices {
        if skip >= s.len() {
            skip -= s.len();
            continue;
        }
        out.extend_from_slice(&s[skip..]);
        skip = 0;
    }
    out.len() - before
}

/// Writes as much of the outbox as the socket takes now.
fn flush(conn: &mut Conn, st: &mut EchoReport) -> Result<(), Fail> {
    while conn.pending() > 0 {
        match zcnet::os::sock::send(conn.fd, &conn.out[conn.out_off..], libc::MSG_DONTWAIT) {
            Ok(k) => {
                st.send_calls += 1;
                conn.out_off += k;
                conn.bytes_out += k as u64;
                st.bytes_echoed += k as u64;
                conn.since = Instant::now();
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(send_failure(e)),
        }
    }
    if conn.pending() == 0 {
        conn.out.clear();
        conn.out_off = 0;
        if conn.out.capacity() > (1 << 20) {
            conn.out.shrink_to(64 << 10);
        }
    } else if conn.out_off >= (1 << 20) && conn.out_off * 2 >= conn.out.len() {
        conn.out.drain(..conn.out_off);
        conn.out_off = 0;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
