//! The data streams: one thread per stream, sending with a zcnet [`Sender`](zcnet::Sender) or
//! receiving with a zcnet [`Receiver`](zcnet::Receiver), counting every byte.
//!
//! ```text
//!  control thread ── stop_sending / drain / abort (TestShared) ──► stream threads
//!        ▲                 moved bytes (StreamCounters, for intervals)  │
//!        └───── Notice (done, failed) ◄── mpsc ───── StreamEnd on join ◄┘
//! ```
//!
//! Counting: a sending stream's bytes are the bytes the kernel accepted ([`zcnet::TxStats`]
//! `bytes`: the sum of send results, so a send cut short by a reset counts what it moved); a
//! receiving stream's are the bytes the receiver delivered. The moved counters the intervals
//! read are updated as sends are handed over, so an interval can run ahead of the exact
//! total by the sends in flight; the last interval is cut from the exact totals.
//!
//! Ending: the controlling thread sets `stop_sending`, then joins the senders, aborting a
//! connection whose peer stopped reading (the send would never complete) — iperf3 closes its
//! streams at `TEST_END` the same way. Receivers go on until they have the bytes the peer says
//! it sent (`drain` with a target), the end of the stream, or a time limit.

use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use zcnet::rx::Fallback;
use zcnet::{MemoryKind, RxConfig, RxMode, RxStats, TxMode, TxStats};

use super::proto::StreamSpec;
use super::tuning::{SocketTuning, StreamTuning};
use crate::sendloop::Pace;

/// No byte target known yet (or ever: with `-O` the peer's count leaves out the omitted part).
pub(super) const NO_TARGET: u64 = u64::MAX;

/// What a test's stream threads share with the thread that controls the test.
#[derive(Debug)]
pub struct TestShared {
    stop_sending: AtomicBool,
    pub(crate) drain: AtomicBool,
    pub(crate) abort: AtomicBool,
    pub(crate) budget: Budget,
    /// Opened once every stream's thread exists: no stream moves a byte before the test's
    /// clock starts. (Spawning stream k while streams 0..k already send is slow on a loaded
    /// machine: with 128 streams the last started seconds after the first, and the first
    /// interval, labelled one second, held all of those seconds' bytes.)
    gate: Mutex<bool>,
    gate_open: Condvar,
    /// The end of a timed test (`-t`): senders stop there by themselves, also when the thread
    /// that controls the test is late to say so (a loaded machine with many streams).
    deadline: OnceLock<Instant>,
}

impl TestShared {
    /// Shared state for a test with this budget.
    pub fn new(budget: Budget) -> Arc<TestShared> {
        Arc::new(TestShared {
            stop_sending: AtomicBool::new(false),
            drain: AtomicBool::new(false),
            abort: AtomicBool::new(false),
            budget,
            gate: Mutex::new(false),
            gate_open: Condvar::new(),
            deadline: OnceLock::new(),
        })
    }

    /// Senders stop sending at `t` (once set, it stays).
    pub fn set_deadline(&self, t: Instant) {
        let _ = self.deadline.set(t);
    }

    /// Lets the stream threads start moving bytes.
    pub fn open_gate(&self) {
        *self.gate.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.gate_open.notify_all();
    }

    /// Waits (on a stream's thread) until [`Self::open_gate`] or [`Self::abort`]; whether the
    /// stream may run.
    pub(crate) fn wait_gate(&self) -> bool {
        let mut open = self.gate.lock().unwrap_or_else(PoisonError::into_inner);
        while !*open && !self.abort.load(Ordering::Relaxed) {
            open = self
                .gate_open
                .wait_timeout(open, Duration::from_millis(50))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        !self.abort.load(Ordering::Relaxed)
    }

    /// Senders finish what they handed over and stop.
    pub fn stop_sending(&self) {
        self.stop_sending.store(true, Ordering::Relaxed);
    }

    /// Receivers take what is still coming (up to their targets) and stop.
    pub fn drain(&self) {
        self.drain.store(true, Ordering::Relaxed);
    }

    /// Everything stops now (the test failed).
    pub fn abort(&self) {
        self.abort.store(true, Ordering::Relaxed);
        self.stop_sending();
        self.drain();
        self.gate_open.notify_all();
    }

    pub(crate) fn sending(&self) -> bool {
        !self.stop_sending.load(Ordering::Relaxed)
            && self.deadline.get().is_none_or(|&d| Instant::now() < d)
    }
}

/// What the senders of a test may send in all: `-n` bytes or `-k` blocks, shared by every
/// sending stream of this side (as iperf3 counts them over the test), or unlimited.
#[derive(Debug)]
pub struct Budget {
    bytes: AtomicU64,
    blocks: AtomicU64,
}

impl Budget {
    /// `num` bytes (0: unlimited) and `blocks` blocks (0: unlimited).
    pub fn new(num: u64, blocks: u64) -> Budget {
        let limit = |n: u64| if n == 0 { u64::MAX } else { n };
        Budget {
            bytes: AtomicU64::new(limit(num)),
            blocks: AtomicU64::new(limit(blocks)),
        }
    }

    /// Takes up to `len` bytes for one send: `len`, less at the end of `-n`, 0 when spent.
    pub(crate) fn take(&self, len: usize) -> usize {
        if self.blocks.load(Ordering::Relaxed) != u64::MAX && take_up_to(&self.blocks, 1) == 0 {
            return 0;
        }
        if self.bytes.load(Ordering::Relaxed) == u64::MAX {
            return len;
        }
        take_up_to(&self.bytes, len as u64) as usize
    }
}

/// Subtracts up to `want` from `left`; returns how much it took.
fn take_up_to(left: &AtomicU64, want: u64) -> u64 {
    let mut took = 0;
    let _ = left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| {
        took = l.min(want);
        (took > 0).then_some(l - took)
    });
    took
}

/// Live counters of one stream, read by the controlling thread for interval reports.
#[derive(Debug, Default)]
pub struct StreamCounters {
    pub(super) moved: AtomicU64,
    pub(super) target: AtomicU64,
    /// UDP: datagrams sent, or the highest sequence number received.
    pub(crate) packets: AtomicU64,
    /// UDP receiver: datagrams lost so far.
    pub(crate) lost: AtomicU64,
    /// UDP receiver: the jitter estimate, seconds, as `f64` bits.
    pub(crate) jitter: AtomicU64,
}

impl StreamCounters {
    /// Counters at zero, no drain target.
    pub fn new() -> Arc<StreamCounters> {
        Arc::new(StreamCounters {
            target: AtomicU64::new(NO_TARGET),
            ..StreamCounters::default()
        })
    }

    /// Bytes handed to the kernel (sending) or received, so far.
    pub fn moved(&self) -> u64 {
        self.moved.load(Ordering::Relaxed)
    }

    /// UDP: (datagrams sent or highest sequence received, datagrams lost, jitter in seconds).
    pub fn udp(&self) -> (u64, u64, f64) {
        (
            self.packets.load(Ordering::Relaxed),
            self.lost.load(Ordering::Relaxed),
            f64::from_bits(self.jitter.load(Ordering::Relaxed)),
        )
    }

    pub(crate) fn add_moved(&self, n: u64) {
        self.moved.fetch_add(n, Ordering::Relaxed);
    }

    /// A receiving stream: the bytes the peer says it sent; draining stops there.
    pub fn set_target(&self, bytes: u64) {
        self.target.store(bytes, Ordering::Relaxed);
    }
}

/// Something a stream thread tells the controlling thread at once.
#[derive(Debug)]
pub enum Notice {
    /// The stream's sender spent the test's budget (`-n`, `-k`).
    BudgetSpent(usize),
    /// The stream failed; the test cannot give a true count.
    Failed(usize, String),
}

/// How a stream thread reaches the controlling thread: its channel, and a function that wraps
/// a [`Notice`] into the channel's event type.
pub struct Notifier<E> {
    /// The channel.
    pub tx: mpsc::Sender<E>,
    /// Makes the event.
    pub wrap: fn(u64, Notice) -> E,
    /// The test the stream belongs to (so late notices of an old test are told apart).
    pub test: u64,
}

impl<E> Notifier<E> {
    pub(crate) fn send(&self, n: Notice) {
        let _ = self.tx.send((self.wrap)(self.test, n));
    }
}

impl<E> Clone for Notifier<E> {
    fn clone(&self) -> Self {
        Notifier {
            tx: self.tx.clone(),
            wrap: self.wrap,
            test: self.test,
        }
    }
}

impl<E> std::fmt::Debug for Notifier<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Notifier(test {})", self.test)
    }
}

/// A data stream's socket: a TCP stream, or a connected UDP socket.
#[derive(Debug)]
pub enum Conn {
    /// TCP (after the cookie).
    Tcp(TcpStream),
    /// UDP (after the connect handshake).
    Udp(UdpSocket),
}

impl Conn {
    fn try_clone(&self) -> std::io::Result<Conn> {
        Ok(match self {
            Conn::Tcp(s) => Conn::Tcp(s.try_clone()?),
            Conn::Udp(s) => Conn::Udp(s.try_clone()?),
        })
    }

    fn endpoints(&self) -> std::io::Result<(SocketAddr, SocketAddr)> {
        let canon = super::net::canonical;
        Ok(match self {
            Conn::Tcp(s) => (canon(s.local_addr()?), canon(s.peer_addr()?)),
            Conn::Udp(s) => (canon(s.local_addr()?), canon(s.peer_addr()?)),
        })
    }

    fn raw_fd(&self) -> i32 {
        match self {
            Conn::Tcp(s) => s.as_raw_fd(),
            Conn::Udp(s) => s.as_raw_fd(),
        }
    }
}

/// A connected data stream, ready to run.
#[derive(Debug)]
pub struct DataStream {
    /// iperf3's id and direction.
    pub spec: StreamSpec,
    /// The socket (after the cookie or the UDP handshake).
    pub stream: Conn,
    /// Its descriptor, which iperf3 prints as the stream's number.
    pub socket: i32,
    /// Local address.
    pub local: SocketAddr,
    /// Peer address.
    pub remote: SocketAddr,
}

impl DataStream {
    /// Wraps a connected socket.
    pub fn new(spec: StreamSpec, stream: Conn) -> std::io::Result<DataStream> {
        let (local, remote) = stream.endpoints()?;
        Ok(DataStream {
            spec,
            socket: stream.raw_fd(),
            stream,
            local,
            remote,
        })
    }

    /// What reports need of the stream, for the side that `sends` on it or not.
    pub fn meta(&self, sends: bool) -> super::report::StreamMeta {
        super::report::StreamMeta {
            id: self.spec.id,
            socket: self.socket,
            sends,
            local: self.local,
            remote: self.remote,
        }
    }
}

/// How this side moves data.
#[derive(Debug, Clone)]
pub struct PathConfig {
    /// Send mechanism.
    pub tx: TxMode,
    /// Where send buffers live.
    pub memory: MemoryKind,
    /// Receive mechanism and its interface.
    pub rx: RxConfig,
    /// Bytes per send.
    pub len: usize,
    /// Bits per second per stream; 0 for unlimited.
    pub rate: u64,
    /// `--verify`: the seed of the pattern sent and checked.
    pub verify: Option<u64>,
    /// UDP tests: how datagrams are made.
    pub udp: Option<super::udp::UdpConfig>,
    /// `--notsent-lowat`, `--rcvlowat` as given.
    pub tuning: SocketTuning,
    /// What this test's TCP streams get (set by [`super::run::TestRun::start`]).
    pub tcp: StreamTuning,
    /// The front end's voice ([`super::Settings::voice`]): the senders' memory notes and the
    /// data path's fallbacks are said in its words.
    pub voice: &'static (dyn zcnet::Voice + Sync),
}

/// What the sending side's data path did.
#[derive(Debug, Clone)]
pub struct TxReport {
    /// The mechanism asked for.
    pub mode: TxMode,
    /// The kernel's accounting.
    pub stats: TxStats,
    /// A fallback the buffer memory took (e.g. THP instead of huge pages).
    pub note: Option<String>,
    /// The `TCP_NOTSENT_LOWAT` the stream ran with, if zcnet set one.
    pub notsent_lowat: Option<u32>,
}

/// What the receiving side's data path did.
#[derive(Debug, Clone)]
pub struct RxReport {
    /// The mechanism asked for.
    pub requested: RxMode,
    /// The mechanism used (for `auto`, its choice).
    pub mode: RxMode,
    /// The receiver's counters.
    pub stats: RxStats,
    /// What `auto` tried and why it was refused.
    pub fallbacks: Vec<Fallback>,
    /// The `SO_RCVLOWAT` the stream ran with (until it drained), if zcnet set one.
    pub rcvlowat: Option<u32>,
    /// The peer closed the stream (or it was drained to the peer's count).
    pub complete: bool,
}

/// What a receiving UDP stream's data path did: `recv()` (zcnet's receivers take TCP
/// streams), so the kernel copied every byte.
#[derive(Debug, Clone)]
pub struct UdpRxReport {
    /// The mechanism asked for (`--rx`), which UDP streams do not use.
    pub requested: RxMode,
    /// Bytes received.
    pub bytes: u64,
}

/// The data path's report of one stream.
#[derive(Debug, Clone)]
pub enum PathReport {
    /// A sending stream.
    Tx(TxReport),
    /// A receiving TCP stream.
    Rx(RxReport),
    /// A receiving UDP stream.
    UdpRx(UdpRxReport),
}

/// How a stream ended.
#[derive(Debug, Clone)]
pub struct StreamEnd {
    /// Exact bytes: accepted by the kernel (sending) or received.
    pub bytes: u64,
    /// When the last byte was sent or received (the stream's end for the results).
    pub last: Option<Instant>,
    /// The data path's own account; `None` when it could not be set up.
    pub path: Option<PathReport>,
    /// UDP: datagram counts, loss and jitter.
    pub udp: Option<super::udp::UdpEnd>,
    /// Why the stream failed, if it did.
    pub error: Option<String>,
}

/// A running stream: its thread, its counters, and a second handle on its socket with which
/// the controlling thread can end it.
#[derive(Debug)]
pub struct Running {
    /// The stream.
    pub spec: StreamSpec,
    /// Live counters.
    pub counters: Arc<StreamCounters>,
    handle: Option<JoinHandle<StreamEnd>>,
    socket: Conn,
}

impl Running {
    /// Starts the stream's thread.
    pub fn start<E: Send + 'static>(
        index: usize,
        sends: bool,
        data: DataStream,
        path: &PathConfig,
        shared: &Arc<TestShared>,
        notify: &Notifier<E>,
    ) -> std::io::Result<Running> {
        let socket = data.stream.try_clone()?;
        let counters = StreamCounters::new();
        let mut job = Job {
            index,
            stream: Some(data.stream),
            path: path.clone(),
            shared: Arc::clone(shared),
            counters: Arc::clone(&counters),
            notify: notify.clone(),
        };
        let name = format!("perf-stream-{}", data.spec.id);
        let handle = std::thread::Builder::new().name(name).spawn(move || {
            if !job.shared.wait_gate() {
                return StreamEnd {
                    bytes: 0,
                    last: None,
                    path: None,
                    udp: None,
                    error: Some("the test was aborted before it started".to_string()),
                };
            }
            match (sends, job.stream.take()) {
                (true, Some(Conn::Tcp(s))) => super::tcp::run_sender(job, s),
                (false, Some(Conn::Tcp(s))) => super::tcp::run_receiver(job, s),
                (true, Some(Conn::Udp(s))) => super::udp::run_sender(job, s),
                (false, Some(Conn::Udp(s))) => super::udp::run_receiver(job, s),
                (_, None) => failed_setup(&job.notify, job.index, no_socket()),
            }
        })?;
        Ok(Running {
            spec: data.spec,
            counters,
            handle: Some(handle),
            socket,
        })
    }

    /// The TCP stream's TCP_INFO now (`None` for UDP, or when the kernel refused).
    pub fn tcp_info(&self) -> Option<zcnet_core::tcp_info::TcpInfo> {
        let Conn::Tcp(s) = &self.socket else {
            return None;
        };
        zcnet::net::tcp_info(s.as_raw_fd())
    }

    /// Whether the thread has ended.
    pub fn is_finished(&self) -> bool {
        self.handle.as_ref().is_none_or(|h| h.is_finished())
    }

    /// Resets the connection (the peer stopped reading: a send would never complete). Sends
    /// in flight fail, and the buffers they hold come back.
    pub fn abort_connection(&self) {
        if let Conn::Tcp(s) = &self.socket {
            let _ = zcnet::os::sock::disconnect(s.as_raw_fd());
        }
    }

    /// Closes the sending half (the peer reads to the end of the stream).
    pub fn shutdown_write(&self) {
        if let Conn::Tcp(s) = &self.socket {
            let _ = s.shutdown(std::net::Shutdown::Write);
        }
    }

    /// Waits for the thread (call once `is_finished`, or after a stop or abort).
    pub fn join(&mut self) -> StreamEnd {
        let failed = |why: &str| StreamEnd {
            bytes: 0,
            last: None,
            path: None,
            udp: None,
            error: Some(why.to_string()),
        };
        match self.handle.take() {
            Some(h) => h
                .join()
                .unwrap_or_else(|_| failed("the stream's thread panicked")),
            None => failed("the stream was already joined"),
        }
    }
}

/// Everything a stream thread needs.
pub(crate) struct Job<E> {
    pub(crate) index: usize,
    /// The socket, until the thread's sender or receiver takes it.
    stream: Option<Conn>,
    pub(crate) path: PathConfig,
    pub(crate) shared: Arc<TestShared>,
    pub(crate) counters: Arc<StreamCounters>,
    pub(crate) notify: Notifier<E>,
}

pub(crate) fn no_socket() -> zcnet::Error {
    zcnet::Error::invalid_input("internal: the stream's socket was taken twice")
}

pub(crate) fn failed_setup<E>(notify: &Notifier<E>, index: usize, e: zcnet::Error) -> StreamEnd {
    let msg = e.to_string();
    notify.send(Notice::Failed(index, msg.clone()));
    StreamEnd {
        bytes: 0,
        last: None,
        path: None,
        udp: None,
        error: Some(msg),
    }
}

/// How a sending stream ended, once its send loop returned `result`: every send handed over
/// completes (or fails, if the connection was aborted), and an error while the test still
/// sends is reported. `note` is said in the report where the sender has none of its own;
/// `notsent_lowat` and `udp` are the TCP and UDP parts of the report.
pub(crate) fn sender_end<E>(
    job: &Job<E>,
    mut tx: zcnet::Sender,
    result: zcnet::Result<()>,
    last: Option<Instant>,
    note: Option<String>,
    notsent_lowat: Option<u32>,
    udp: Option<super::udp::UdpEnd>,
) -> StreamEnd {
    let flushed = tx.flush();
    let stats = tx.stats();
    let error = match (result, flushed) {
        (Err(e), _) | (Ok(()), Err(e)) if job.shared.sending() => Some(e.to_string()),
        _ => None,
    };
    if let Some(e) = &error {
        job.notify.send(Notice::Failed(job.index, e.clone()));
    }
    StreamEnd {
        bytes: stats.bytes,
        last,
        path: Some(PathReport::Tx(TxReport {
            mode: job.path.tx,
            note: note.or_else(|| tx.note().map(|n| n.render(job.path.voice))),
            stats,
            notsent_lowat,
        })),
        udp,
        error,
    }
}

/// A stream's send rate (`-b`, since `started`), none when unlimited.
pub(crate) fn pace<E>(job: &Job<E>, started: Instant) -> Option<Pace> {
    (job.path.rate != 0).then_some(Pace {
        bits_per_second: job.path.rate,
        started,
    })
}

/// Stops the sending streams among `running`: each finishes what it handed over; a stream
/// still running after `grace` has a peer that stopped reading and its connection is reset.
/// Returns their ends, in `running`'s order (`None` for receiving streams).
pub fn stop_senders(
    shared: &TestShared,
    running: &mut [Running],
    sends: &[bool],
    grace: Duration,
) -> Vec<Option<StreamEnd>> {
    shared.stop_sending();
    let until = Instant::now() + grace;
    let senders = || running.iter().zip(sends).filter(|(_, s)| **s);
    while Instant::now() < until && !senders().all(|(r, _)| r.is_finished()) {
        std::thread::sleep(Duration::from_millis(1));
    }
    for (r, _) in senders().filter(|(r, _)| !r.is_finished()) {
        r.abort_connection();
    }
    running
        .iter_mut()
        .zip(sends)
        .map(|(r, s)| s.then(|| r.join()))
        .collect()
}

/// Drains the receiving streams among `running` (to their targets, if set) and returns their
/// ends, in `running`'s order (`None` for sending streams).
pub fn drain_receivers(
    shared: &TestShared,
    running: &mut [Running],
    sends: &[bool],
) -> Vec<Option<StreamEnd>> {
    shared.drain();
    running
        .iter_mut()
        .zip(sends)
        .map(|(r, s)| (!s).then(|| r.join()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[zcnet_testkit::test]
    fn budget_in_bytes_cuts_the_last_send() {
        let b = Budget::new(300, 0);
        assert_eq!(
            (b.take(128), b.take(128), b.take(128), b.take(128)),
            (128, 128, 44, 0)
        );
    }

    #[zcnet_testkit::test]
    fn budget_in_blocks_counts_sends() {
        let b = Budget::new(0, 2);
        assert_eq!((b.take(100), b.take(100), b.take(100)), (100, 100, 0));
    }

    #[zcnet_testkit::test]
    fn no_budget_is_unlimited() {
        let b = Budget::new(0, 0);
        assert!((0..1000).all(|_| b.take(7) == 7));
    }

    #[zcnet_testkit::test]
    fn budget_is_shared_exactly_between_threads() {
        let b = Arc::new(Budget::new(1_000_003, 0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let b = Arc::clone(&b);
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    loop {
                        match b.take(1000) {
                            0 => return n,
                            k => n += k as u64,
                        }
                    }
                })
            })
            .collect();
        let total: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(total, 1_000_003);
    }

    #[zcnet_testkit::test]
    fn streams_wait_at_the_gate_until_it_opens_or_the_test_aborts() {
        for abort in [false, true] {
            let shared = TestShared::new(Budget::new(0, 0));
            let waiting = {
                let s = Arc::clone(&shared);
                std::thread::spawn(move || (s.wait_gate(), Instant::now()))
            };
            std::thread::sleep(Duration::from_millis(150));
            assert!(!waiting.is_finished(), "passed the gate before it opened");
            let at = Instant::now();
            if abort {
                shared.abort();
            } else {
                shared.open_gate();
            }
            let (may_run, when) = waiting.join().unwrap();
            assert_eq!(may_run, !abort);
            assert!(when >= at);
        }
    }

    #[zcnet_testkit::test]
    fn senders_stop_at_the_deadline_by_themselves() {
        let shared = TestShared::new(Budget::new(0, 0));
        assert!(shared.sending());
        shared.set_deadline(Instant::now() + Duration::from_millis(100));
        assert!(shared.sending());
        std::thread::sleep(Duration::from_millis(120));
        assert!(!shared.sending(), "still sending past the deadline");
    }
}
