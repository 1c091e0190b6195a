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
use zcnet::rx::{ConnId, Fallback, Receiver, RxConfig, RxEvent, RxMode, RxStats};
use zcnet::{Error, Result};
use zcnet_core::Pattern;
use zcnet_sys::os::{send_vectored, SEND_IOVECS};

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
}

impl EchoConfig {
    /// Defaults: `mode` with 16 KiB × 64 buffers, 4 MiB outbox cap, 10 s stall timeout,
    /// 10 ms idle poll, 1 ms flush poll, not pinned, no keepalive.
    pub fn new(mode: RxMode, bind: SocketAddr) -> EchoConfig {
        EchoConfig {
            rx: RxConfig::new(mode),
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
        match zcnet_sys::sock::poll_one(fd, libc::POLLIN, 20) {
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
        if let Err(e) = zcnet_sys::os::set_thread_affinity(&[cpu]) {
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
    let cpu0 = zcnet_sys::os::thread_cpu_seconds();
    let t0 = Instant::now();
    server.run(&stop, &live, &accepted);
    server.report.cpu_seconds = zcnet_sys::os::thread_cpu_seconds() - cpu0;
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
            if stop.load(Ordering::Relaxed) || zcnet::interrupted() {
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
            let _ = zcnet_sys::os::set_tcp_keepalive(fd, idle, Duration::from_secs(1), 2);
        }
        if let Some(t) = self.cfg.user_timeout {
            let _ = zcnet_sys::os::set_tcp_user_timeout(fd, t);
        }
        if let Some(b) = self.cfg.send_buffer {
            let _ = zcnet_sys::sock::set_send_buffer(fd, b);
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
                reason: e.to_string(),
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
                        match echo(&self.rx, conn, &events[i..j], &mut self.report) {
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
    conn: &mut Conn,
    group: &[RxEvent],
    st: &mut EchoReport,
) -> Result<(), Fail> {
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
        match zcnet_sys::sock::send(conn.fd, &conn.out[conn.out_off..], libc::MSG_DONTWAIT) {
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

// ------------------------------------------------------------------------------------------
// The client.

/// How much of each response the client checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// The length, and the first and last 16 bytes (which carry the request's connection and
    /// sequence number, so a stale or misplaced response is caught).
    Cheap,
    /// Every byte against the request.
    Full,
}

/// How to run the closed-loop clients.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The server.
    pub addr: SocketAddr,
    /// Network namespace (lab) every client thread enters first.
    pub netns: Option<String>,
    /// Bytes per request (and response).
    pub size: usize,
    /// Connections in all.
    pub connections: usize,
    /// Threads the connections are spread over (each polls its own).
    pub threads: usize,
    /// How long to measure.
    pub duration: Duration,
    /// What to check in each response.
    pub check: Check,
    /// Seed of the request bytes.
    pub seed: u64,
    /// CPUs the client threads may run on (`None`: any).
    pub cpus: Option<Vec<usize>>,
    /// A round trip that takes longer fails its connection (and the drain at the end waits at
    /// most this long).
    pub timeout: Duration,
}

impl ClientConfig {
    /// Defaults: 24 connections over 4 threads, 64 KiB requests, 3 s, cheap check, 5 s timeout.
    pub fn new(addr: SocketAddr) -> ClientConfig {
        ClientConfig {
            addr,
            netns: None,
            size: 64 << 10,
            connections: 24,
            threads: 4,
            duration: Duration::from_secs(3),
            check: Check::Cheap,
            seed: 0x2c6e_6574_6563_686f,
            cpus: None,
            timeout: Duration::from_secs(5),
        }
    }
}

/// What the clients measured.
#[derive(Debug, Clone, Default)]
pub struct ClientReport {
    /// Bytes per request.
    pub size: usize,
    /// Connections that were opened.
    pub connections: usize,
    /// Round trips completed (and checked) inside the measured window.
    pub requests: u64,
    /// Round trips completed after the window (draining), not counted in `requests`.
    pub late: u64,
    /// The measured window, seconds.
    pub seconds: f64,
    /// Every counted round trip's latency, nanoseconds, ascending.
    pub latencies_ns: Vec<u64>,
    /// Bytes checked against the request.
    pub checked_bytes: u64,
    /// Responses that differed from their request.
    pub mismatches: u64,
    /// Connections that failed, and why (one line each).
    pub errors: Vec<String>,
    /// CPU seconds of all client threads.
    pub cpu_seconds: f64,
}

impl ClientReport {
    /// Round trips per second.
    pub fn qps(&self) -> f64 {
        if self.seconds > 0.0 {
            self.requests as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// Gbit/s of request payload (one direction; the responses carry as much back), the
    /// convention of that talk's table (20.6 Kqps × 64 KB ≈ 10 Gbps).
    pub fn gbps(&self) -> f64 {
        self.qps() * self.size as f64 * 8.0 / 1e9
    }

    /// The `p`-th percentile (0..=100) latency in microseconds; `None` without samples.
    pub fn percentile_us(&self, p: f64) -> Option<f64> {
        let n = self.latencies_ns.len();
        if n == 0 {
            return None;
        }
        let rank = ((p / 100.0) * n as f64).ceil() as usize;
        let i = rank.clamp(1, n) - 1;
        Some(self.latencies_ns[i] as f64 / 1e3)
    }
}

/// One client connection.
#[derive(Debug)]
struct ClientConn {
    stream: TcpStream,
    fd: RawFd,
    index: u64,
    req: Vec<u8>,
    seq: u64,
    sent: usize,
    got: usize,
    started: Instant,
    active: bool,
    want_out: bool,
    alive: bool,
}

#[derive(Debug, Default)]
struct ThreadResult {
    requests: u64,
    late: u64,
    lat: Vec<u64>,
    checked: u64,
    mismatches: u64,
    errors: Vec<String>,
    cpu: f64,
    connections: usize,
    seconds: f64,
}

/// Runs `cfg.connections` closed-loop connections over `cfg.threads` threads for
/// `cfg.duration`: each sends a request, reads the whole echo back, checks it, and sends the
/// next. When the window ends, requests in flight finish (not counted), then every connection
/// half-closes and waits for the server's end of stream. A connection that fails is reported in
/// [`ClientReport::errors`]; the others go on. Connecting failures are errors.
pub fn run_clients(cfg: &ClientConfig) -> Result<ClientReport> {
    if cfg.size == 0 || cfg.connections == 0 || cfg.threads == 0 {
        return Err(Error::invalid_input(
            "echo clients: size, connections and threads must be positive",
        ));
    }
    let threads = cfg.threads.min(cfg.connections);
    let barrier = Barrier::new(threads);
    let results: Vec<Result<ThreadResult>> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                // Connections t, t + threads, ...: spread evenly.
                let idx: Vec<u64> = (t..cfg.connections)
                    .step_by(threads)
                    .map(|i| i as u64)
                    .collect();
                let barrier = &barrier;
                sc.spawn(move || client_thread(cfg, idx, barrier))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(Error::io("client thread", io::Error::other("panicked")))
                })
            })
            .collect()
    });
    let mut rep = ClientReport {
        size: cfg.size,
        ..ClientReport::default()
    };
    for r in results {
        let r = r?;
        rep.requests += r.requests;
        rep.late += r.late;
        rep.latencies_ns.extend(r.lat);
        rep.checked_bytes += r.checked;
        rep.mismatches += r.mismatches;
        rep.errors.extend(r.errors);
        rep.cpu_seconds += r.cpu;
        rep.connections += r.connections;
        rep.seconds = rep.seconds.max(r.seconds);
    }
    rep.latencies_ns.sort_unstable();
    Ok(rep)
}

fn client_thread(cfg: &ClientConfig, idx: Vec<u64>, barrier: &Barrier) -> Result<ThreadResult> {
    // Every exit path must reach the barrier once, or the other threads wait forever.
    let setup = (|| -> Result<Vec<ClientConn>> {
        if let Some(ns) = &cfg.netns {
            lab::enter(ns)?;
        }
        if let Some(cpus) = &cfg.cpus {
            zcnet_sys::os::set_thread_affinity(cpus)
                .map_err(|e| Error::io(format!("pinning a client thread to CPUs {cpus:?}"), e))?;
        }
        let pattern = Pattern::new(cfg.seed);
        idx.iter()
            .map(|&i| {
                let stream = net::connect_tcp(cfg.addr)?;
                let _ = stream.set_nodelay(true);
                let mut req = vec![0u8; cfg.size];
                pattern.fill(i * cfg.size as u64, &mut req);
                Ok(ClientConn {
                    fd: stream.as_raw_fd(),
                    stream,
                    index: i,
                    req,
                    seq: 0,
                    sent: 0,
                    got: 0,
                    started: Instant::now(),
                    active: false,
                    want_out: false,
                    alive: true,
                })
            })
            .collect()
    })();
    barrier.wait();
    let mut conns = setup?;
    let cpu0 = zcnet_sys::os::thread_cpu_seconds();
    let mut res = ThreadResult {
        connections: conns.len(),
        ..ThreadResult::default()
    };
    let mut ep = zcnet_sys::epoll::Epoll::new(64).map_err(|e| Error::io("epoll_create1", e))?;
    for (k, c) in conns.iter().enumerate() {
        ep.add(
            c.fd,
            k as u64,
            zcnet_sys::epoll::IN | zcnet_sys::epoll::RDHUP,
        )
        .map_err(|e| Error::io("epoll_ctl(ADD)", e))?;
    }
    let mut scratch = vec![0u8; cfg.size.min(1 << 20)];
    let t0 = Instant::now();
    let deadline = t0 + cfg.duration;
    for (k, c) in conns.iter_mut().enumerate() {
        start_request(c, &ep, k, t0, &mut res);
    }
    let mut ready = Vec::new();
    let mut stopping = false;
    let mut last_timeout_check = t0;
    loop {
        let now = Instant::now();
        if !stopping && now >= deadline {
            stopping = true;
        }
        if stopping && !conns.iter().any(|c| c.alive && c.active) {
            break;
        }
        if now.duration_since(last_timeout_check) >= Duration::from_millis(50) {
            last_timeout_check = now;
            for c in conns.iter_mut().filter(|c| c.alive && c.active) {
                if now.duration_since(c.started) > cfg.timeout {
                    fail(
                        c,
                        &ep,
                        &mut res,
                        format!(
                            "no complete response {} within {:.1} s ({} of {} B back)",
                            c.seq,
                            cfg.timeout.as_secs_f64(),
                            c.got,
                            cfg.size
                        ),
                    );
                }
            }
        }
        if zcnet::interrupted() {
            return Err(Error::Interrupted);
        }
        ready.clear();
        let wait_ms = if stopping {
            10
        } else {
            10.min(deadline.saturating_duration_since(now).as_millis() as i32 + 1)
        };
        ep.wait(&mut ready, wait_ms)
            .map_err(|e| Error::io("epoll_wait", e))?;
        for &(tok, ev) in &ready {
            let k = tok as usize;
            let c = &mut conns[k];
            if !c.alive || !c.active {
                if c.alive
                    && ev
                        & (zcnet_sys::epoll::IN
                            | zcnet_sys::epoll::RDHUP
                            | zcnet_sys::epoll::HUP
                            | zcnet_sys::epoll::ERR)
                        != 0
                {
                    // Data or a close while no request is in flight: the server broke the loop.
                    let why =
                        match zcnet_sys::sock::recv(c.fd, &mut scratch[..1], libc::MSG_DONTWAIT) {
                            Ok(0) => {
                                "the server closed the connection between requests".to_string()
                            }
                            Ok(_) => "the server sent bytes that were not asked for".to_string(),
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                            Err(e) => format!("between requests: {e}"),
                        };
                    fail(c, &ep, &mut res, why);
                }
                continue;
            }
            if ev & zcnet_sys::epoll::OUT != 0 && c.sent < cfg.size {
                if let Err(why) = send_more(c) {
                    fail(c, &ep, &mut res, why);
                    continue;
                }
                update_out(c, &ep, k);
            }
            if let Err(why) = read_more(c, cfg, &mut scratch, &mut res) {
                fail(c, &ep, &mut res, why);
                continue;
            }
            if c.got == cfg.size && c.sent == cfg.size {
                let done = Instant::now();
                if done <= deadline {
                    res.requests += 1;
                    res.lat
                        .push(done.duration_since(c.started).as_nanos() as u64);
                } else {
                    res.late += 1;
                }
                c.active = false;
                c.seq += 1;
                if !stopping && done < deadline {
                    start_request(c, &ep, k, done, &mut res);
                }
            }
        }
    }
    res.seconds = cfg.duration.as_secs_f64();
    res.cpu = zcnet_sys::os::thread_cpu_seconds() - cpu0;
    // Half-close and wait for the server's end of stream: the server then closes cleanly.
    for c in conns.iter_mut().filter(|c| c.alive) {
        let _ = ep.delete(c.fd);
        let _ = c.stream.shutdown(Shutdown::Write);
    }
    let end = Instant::now() + cfg.timeout.min(Duration::from_secs(2));
    for c in conns.iter_mut().filter(|c| c.alive) {
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let _ = c.stream.set_read_timeout(Some(left));
            match io::Read::read(&mut c.stream, &mut scratch) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    }
    Ok(res)
}

fn fail(c: &mut ClientConn, ep: &zcnet_sys::epoll::Epoll, res: &mut ThreadResult, why: String) {
    c.alive = false;
    c.active = false;
    let _ = ep.delete(c.fd);
    res.errors
        .push(format!("client connection {}: {why}", c.index));
}

fn start_request(
    c: &mut ClientConn,
    ep: &zcnet_sys::epoll::Epoll,
    k: usize,
    now: Instant,
    res: &mut ThreadResult,
) {
    // The connection and sequence number at both ends: a stale or misplaced response differs.
    let stamp = ((c.index << 40) | (c.seq & ((1 << 40) - 1))).to_le_bytes();
    let n = c.req.len();
    let h = n.min(8);
    c.req[..h].copy_from_slice(&stamp[..h]);
    c.req[n - h..].copy_from_slice(&stamp[8 - h..]);
    c.sent = 0;
    c.got = 0;
    c.active = true;
    c.started = now;
    if let Err(why) = send_more(c) {
        fail(c, ep, res, why);
        return;
    }
    update_out(c, ep, k);
}

fn send_more(c: &mut ClientConn) -> Result<(), String> {
    while c.sent < c.req.len() {
        match zcnet_sys::sock::send(c.fd, &c.req[c.sent..], libc::MSG_DONTWAIT) {
            Ok(k) => c.sent += k,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("sending request {}: {e}", c.seq)),
        }
    }
    Ok(())
}

fn update_out(c: &mut ClientConn, ep: &zcnet_sys::epoll::Epoll, k: usize) {
    let want = c.sent < c.req.len();
    if want != c.want_out {
        let mut ev = zcnet_sys::epoll::IN | zcnet_sys::epoll::RDHUP;
        if want {
            ev |= zcnet_sys::epoll::OUT;
        }
        if ep.modify(c.fd, k as u64, ev).is_ok() {
            c.want_out = want;
        }
    }
}

fn read_more(
    c: &mut ClientConn,
    cfg: &ClientConfig,
    scratch: &mut [u8],
    res: &mut ThreadResult,
) -> Result<(), String> {
    let size = cfg.size;
    while c.got < size {
        // Never read past this response: the next one is not asked for yet anyway.
        let want = (size - c.got).min(scratch.len());
        match zcnet_sys::sock::recv(c.fd, &mut scratch[..want], libc::MSG_DONTWAIT) {
            Ok(0) => {
                return Err(format!(
                    "the server closed the connection after {} of {size} B of response {}",
                    c.got, c.seq
                ))
            }
            Ok(n) => {
                let off = c.got;
                match check_response(&c.req, c.sent, off, &scratch[..n], cfg.check) {
                    ResponseCheck::RunsAhead => {
                        return Err(format!(
                            "response {} runs ahead of its request ({} B back, {} B sent)",
                            c.seq,
                            off + n,
                            c.sent
                        ))
                    }
                    ResponseCheck::Differs { checked, at } => {
                        res.checked += checked;
                        res.mismatches += 1;
                        return Err(format!(
                            "response {} differs from its request at byte {at}",
                            c.seq
                        ));
                    }
                    ResponseCheck::Match { checked } => res.checked += checked,
                }
                c.got += n;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(format!(
                    "reading response {} ({} of {size} B back): {e}",
                    c.seq, c.got
                ))
            }
        }
    }
    Ok(())
}

/// What [`check_response`] found in one piece of a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseCheck {
    /// The bytes [`Check`] looks at are the request's; `checked` of them were compared.
    Match {
        /// Bytes compared.
        checked: u64,
    },
    /// The piece ends past what was sent of the request (or past the request).
    RunsAhead,
    /// A compared byte differs.
    Differs {
        /// Bytes compared.
        checked: u64,
        /// Request offset of the piece's first byte that differs from the request (with
        /// [`Check::Cheap`], possibly one the check itself skipped).
        at: usize,
    },
}

/// Checks `piece`, the response bytes that arrived for request offsets `off..off + piece.len()`,
/// against `req` of which `sent` bytes went out: every byte with [`Check::Full`], the first and
/// last 16 bytes of the request (where the connection and sequence stamp are) with
/// [`Check::Cheap`]. Pure: any piece, offset and count give an answer, never a panic.
pub fn check_response(
    req: &[u8],
    sent: usize,
    off: usize,
    piece: &[u8],
    check: Check,
) -> ResponseCheck {
    let size = req.len();
    let n = piece.len();
    let Some(end) = off.checked_add(n).filter(|&e| e <= sent && e <= size) else {
        return ResponseCheck::RunsAhead;
    };
    let mut checked = 0u64;
    let ok = match check {
        Check::Full => {
            checked += n as u64;
            *piece == req[off..end]
        }
        Check::Cheap => {
            let edge = 16.min(size);
            let mut ok = true;
            for (lo, hi) in [(0, edge), (size - edge, size)] {
                let (a, b) = (lo.max(off), hi.min(end));
                if a < b {
                    checked += (b - a) as u64;
                    ok &= piece[a - off..b - off] == req[a..b];
                }
            }
            ok
        }
    };
    if ok {
        return ResponseCheck::Match { checked };
    }
    let at = (0..n)
        .find(|&i| piece[i] != req[off + i])
        .map_or(off, |i| off + i);
    ResponseCheck::Differs { checked, at }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[zcnet_testkit::test]
    fn percentiles_are_nearest_rank_and_rates_use_one_direction() {
        let r = ClientReport {
            size: 65536,
            requests: 200,
            seconds: 2.0,
            latencies_ns: (1..=100).map(|i| i * 1000).collect(),
            ..ClientReport::default()
        };
        assert_eq!(r.percentile_us(50.0), Some(50.0));
        assert_eq!(r.percentile_us(99.0), Some(99.0));
        assert_eq!(r.percentile_us(100.0), Some(100.0));
        assert_eq!(r.percentile_us(0.0), Some(1.0));
        assert_eq!(r.qps(), 100.0);
        assert!((r.gbps() - 100.0 * 65536.0 * 8.0 / 1e9).abs() < 1e-12);
        assert_eq!(ClientReport::default().percentile_us(50.0), None);
        assert_eq!(ClientReport::default().qps(), 0.0);
    }

    #[zcnet_testkit::test]
    fn unsent_tails_are_queued_from_the_first_untaken_byte() {
        let (a, b, c): (&[u8], &[u8], &[u8]) = (b"abcd", b"", b"efg");
        let mut out = b"old".to_vec();
        assert_eq!(queue_unsent(&[a, b, c], 2, &mut out), 5);
        assert_eq!(out, b"oldcdefg");
        let mut out = Vec::new();
        assert_eq!(queue_unsent(&[a, b, c], 4, &mut out), 3);
        assert_eq!(out, b"efg");
        assert_eq!(queue_unsent(&[a, b, c], 7, &mut out), 0);
        assert_eq!(queue_unsent(&[a, c], usize::MAX, &mut out), 0);
        assert_eq!(out, b"efg");
    }

    #[zcnet_testkit::test]
    fn responses_are_checked_where_the_check_looks() {
        let req: Vec<u8> = (0..64u8).collect();
        let full = Check::Full;
        let cheap = Check::Cheap;
        assert_eq!(
            check_response(&req, 64, 0, &req[..64], full),
            ResponseCheck::Match { checked: 64 }
        );
        // Cheap compares only the first and last 16 bytes of the request.
        assert_eq!(
            check_response(&req, 64, 10, &req[10..50], cheap),
            ResponseCheck::Match { checked: 6 + 2 }
        );
        let mut bad = req[10..50].to_vec();
        bad[20] ^= 1; // request byte 30: not looked at by Cheap
        assert_eq!(
            check_response(&req, 64, 10, &bad, cheap),
            ResponseCheck::Match { checked: 8 }
        );
        assert_eq!(
            check_response(&req, 64, 10, &bad, full),
            ResponseCheck::Differs {
                checked: 40,
                at: 30
            }
        );
        bad[0] ^= 1; // request byte 10: looked at by both; the first difference is reported
        assert_eq!(
            check_response(&req, 64, 10, &bad, cheap),
            ResponseCheck::Differs { checked: 8, at: 10 }
        );
        // Past what was sent, or past the request: runs ahead.
        assert_eq!(
            check_response(&req, 20, 10, &req[10..21], full),
            ResponseCheck::RunsAhead
        );
        assert_eq!(
            check_response(&req, 100, 60, &[0; 5], full),
            ResponseCheck::RunsAhead
        );
        assert_eq!(
            check_response(&req, 64, usize::MAX, &[0], cheap),
            ResponseCheck::RunsAhead
        );
        // Requests shorter than the edges.
        let tiny = [7u8; 5];
        assert_eq!(
            check_response(&tiny, 5, 1, &[7, 7], cheap),
            ResponseCheck::Match { checked: 4 }
        );
    }
}
