//! The server: serves one test after another until stopped (`-1`: one test), as iperf3 does.
//!
//! iperf3 src/iperf_server_api.c: a connection while no test runs is a control connection;
//! while the test waits for its streams, a connection is a data stream (its cookie must be
//! the test's); any other connection gets `ACCESS_DENIED` and is closed. A client that sends
//! garbage, the wrong cookie, a parameter block that is too long, or vanishes, ends its own
//! test with one line on stderr; the server cleans up (streams, threads, buffers) and serves
//! the next client.

use std::collections::VecDeque;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::args::{Settings, VERIFY_KEY};
use super::client::{check_receive_path, print_json, udp_config, FAILURE_SETTLE};
use super::error::PerfError;
use super::events::{self, Event};
use super::jsonout::{self, StartInfo};
use super::net;
use super::proto::{
    ErrorCode, ProtoError, Protocol, ServerAction, ServerConfig, ServerControl, State, StreamSpec,
    TestParams, TestResults, ACCESS_DENIED_REPLY,
};
use super::report;
use super::run::{ReportStyle, TestRun};
use super::streams::{Conn, DataStream, Notice, Notifier, PathConfig};
use super::sysinfo;
use super::tuning::StreamTuning;

/// The longest the server sleeps between looks at its timers and the interrupt.
const TICK: Duration = Duration::from_millis(100);
/// How long a zcnet client (which reads to the end) may take to take the last sends.
const ZCNET_PEER_GRACE: Duration = Duration::from_secs(5);
/// iperf3 clients stop reading at `TEST_END`: sends still queued then never complete, and the
/// connection is reset after this (iperf3's own server closes it at once).
const IPERF3_PEER_GRACE: Duration = Duration::from_millis(100);
/// How long a data connection may take to send its cookie.
const COOKIE_TIMEOUT: Duration = Duration::from_secs(5);

/// The options, beyond a plain test, that the server carries out. `nodelay` is set on the
/// streams; the payload's content (`repeating_payload`), how iperf3 would send (`zerocopy`,
/// sendfile) and receive (`skip_rx_copy`) are zcnet's own choice (`--tx`, `--rx`).
const SUPPORTED: &[&str] = &[
    "nodelay",
    "repeating_payload",
    "zerocopy",
    "skip_rx_copy",
    "udp_counters_64bit",
];

/// Serves tests until interrupted, or after one with `-1`.
pub fn run(s: &Settings) -> Result<(), PerfError> {
    check_receive_path(s)?;
    let listener = net::listen(s.port, s.bind, s.family)?;
    let listen = listener.local_addr().map_err(io_failed)?;
    let port = listen.port();
    let (tx, events) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let accepting = listener.try_clone().map_err(io_failed)?;
    events::spawn_acceptor(accepting, Arc::clone(&stop), tx.clone()).map_err(io_failed)?;
    let mut server = Server {
        s,
        port,
        listen,
        events,
        tx,
        tests: 0,
        test: None,
    };
    let result = server.serve();
    stop_acceptor(&listener, &stop);
    result
}

/// Wakes the acceptor thread (blocked in `accept`) so that it sees `stop` and ends.
fn stop_acceptor(listener: &TcpListener, stop: &AtomicBool) {
    stop.store(true, Ordering::Relaxed);
    if let Ok(mut a) = listener.local_addr() {
        if a.ip().is_unspecified() {
            a.set_ip(if a.is_ipv4() {
                std::net::Ipv4Addr::LOCALHOST.into()
            } else {
                std::net::Ipv6Addr::LOCALHOST.into()
            });
        }
        let _ = TcpStream::connect_timeout(&a, Duration::from_millis(200));
    }
}

struct Server<'a> {
    s: &'a Settings,
    port: u16,
    /// The listener's address: UDP streams are accepted on the same one.
    listen: SocketAddr,
    events: mpsc::Receiver<Event>,
    tx: mpsc::Sender<Event>,
    tests: u64,
    test: Option<Test>,
}

/// One client's test.
struct Test {
    id: u64,
    ctrl: TcpStream,
    peer: SocketAddr,
    machine: ServerControl,
    origin: Instant,
    /// Data connections waiting for their cookie, in accept order.
    pending: VecDeque<Pending>,
    next_seq: u64,
    accepted: Vec<DataStream>,
    params: Option<TestParams>,
    run: Option<TestRun>,
    peer_results: Option<TestResults>,
    outcome: Option<Result<(), String>>,
    /// A stream failure, acted on at the deadline unless the control connection explains it
    /// first (a client that terminates resets its streams right after saying so).
    stream_failure: Option<(Instant, usize, String)>,
    start_json: Value,
    timesecs: u64,
}

struct Pending {
    seq: u64,
    stream: TcpStream,
    cookie: Option<Option<Vec<u8>>>,
}

impl Test {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// Whether the client is zcnet perf (it reads its streams to their end).
    fn zcnet_peer(&self) -> bool {
        self.params
            .as_ref()
            .and_then(|p| p.client_version.as_deref())
            .is_some_and(|v| v.starts_with("zcnet-perf"))
    }
}

impl Server<'_> {
    fn serve(&mut self) -> Result<(), PerfError> {
        self.banner();
        loop {
            if crate::interrupt::interrupted() {
                self.interrupt();
                return Err(PerfError::Interrupted);
            }
            self.on_timers();
            if let Some(result) = self.end_test_if_over() {
                if self.s.one_off {
                    return result;
                }
                self.banner();
            }
            match self.events.recv_timeout(self.wait_time()) {
                Ok(ev) => self.on_event(ev),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(PerfError::failed("internal: the event channel closed"))
                }
            }
        }
    }

    /// iperf3's "Server listening on 5201 (test #1)" (on stderr with `-J`, so that the
    /// port is known even when 0 was asked for).
    fn banner(&self) {
        let n = self.tests + 1;
        if self.s.json {
            crate::eoutln!("zcnet perf: server listening on {} (test #{n})", self.port);
            return;
        }
        let rule = "-----------------------------------------------------------";
        crate::outln!(
            "{rule}\nServer listening on {} (test #{n})\n{rule}",
            self.port
        );
        let _ = std::io::stdout().flush();
    }

    fn wait_time(&self) -> Duration {
        let Some(t) = &self.test else { return TICK };
        let machine = t.machine.poll_timeout().map(|d| d.saturating_sub(t.now()));
        let run = t
            .run
            .as_ref()
            .and_then(TestRun::next_deadline)
            .map(|d| d.saturating_duration_since(Instant::now()));
        [machine, run]
            .into_iter()
            .flatten()
            .fold(TICK, Duration::min)
    }

    fn on_timers(&mut self) {
        let Some(t) = &mut self.test else { return };
        if let Some(run) = &mut t.run {
            run.on_timer(Instant::now());
        }
        if t.stream_failure
            .as_ref()
            .is_some_and(|f| Instant::now() >= f.0)
        {
            if let Some((_, i, msg)) = t.stream_failure.take() {
                return self.stream_failed(i, &msg);
            }
        }
        if t.machine.poll_timeout().is_some_and(|d| t.now() >= d) {
            let acts = t.machine.handle_timeout(t.now());
            self.apply(acts);
        }
    }

    /// SIGINT/SIGTERM: tells a running test's client (`SERVER_TERMINATE`) and stops.
    fn interrupt(&mut self) {
        if let Some(mut t) = self.test.take() {
            let _ = (&t.ctrl).write_all(&[State::ServerTerminate.to_byte()]);
            if let Some(run) = &mut t.run {
                run.abort();
            }
            let _ = t.ctrl.shutdown(std::net::Shutdown::Both);
        }
    }

    fn on_event(&mut self, ev: Event) {
        let current = self.test.as_ref().map(|t| t.id);
        match ev {
            Event::Accepted(s, peer) => self.on_connection(s, peer),
            Event::Control(id, r) if Some(id) == current => self.on_control(r),
            Event::Cookie(id, seq, c) if Some(id) == current => self.on_cookie(seq, c),
            Event::Udp(id, r) if Some(id) == current => self.on_udp_stream(r),
            Event::Stream(id, Notice::Failed(i, msg)) if Some(id) == current => {
                if let Some(t) = &mut self.test {
                    let when = Instant::now() + FAILURE_SETTLE;
                    t.stream_failure.get_or_insert((when, i, msg));
                }
            }
            _ => {}
        }
    }

    /// A connection: a new test's control connection, a data stream of the test waiting for
    /// its streams, or a second client while a test runs (`ACCESS_DENIED`).
    fn on_connection(&mut self, s: TcpStream, peer: SocketAddr) {
        let peer = net::canonical(peer);
        let Some(t) = &mut self.test else {
            return self.new_test(s, peer);
        };
        let udp = t
            .params
            .as_ref()
            .is_some_and(|p| p.protocol == Protocol::Udp);
        if !t.machine.accepting_streams() || udp {
            let _ = (&s).write_all(&ACCESS_DENIED_REPLY);
            crate::eoutln!(
                "zcnet perf: refused {} port {}: test #{} is running (ACCESS_DENIED)",
                peer.ip(),
                peer.port(),
                t.id
            );
            return;
        }
        let seq = t.next_seq;
        t.next_seq += 1;
        let reader = s.try_clone();
        match reader.and_then(|r| {
            events::spawn_cookie_reader(r, t.id, seq, COOKIE_TIMEOUT, self.tx.clone())
        }) {
            Ok(()) => t.pending.push_back(Pending {
                seq,
                stream: s,
                cookie: None,
            }),
            Err(e) => crate::eoutln!("zcnet perf: dropped a data connection from {peer}: {e}"),
        }
    }

    fn new_test(&mut self, s: TcpStream, peer: SocketAddr) {
        self.tests += 1;
        let id = self.tests;
        if !self.s.json {
            crate::outln!(
                "Accepted connection from {}, port {}",
                peer.ip(),
                peer.port()
            );
        }
        let _ = s.set_nodelay(true);
        let reader = match s.try_clone() {
            Ok(r) => r,
            Err(e) => return crate::eoutln!("zcnet perf: test #{id} from {peer}: {e}"),
        };
        if let Err(e) = events::spawn_control_reader(reader, id, self.tx.clone()) {
            return crate::eoutln!("zcnet perf: test #{id} from {peer}: {e}");
        }
        let config = ServerConfig {
            step_timeout: self.s.step_timeout,
            ..ServerConfig::default()
        };
        self.test = Some(Test {
            id,
            ctrl: s,
            peer,
            machine: ServerControl::new(config, Duration::ZERO),
            origin: Instant::now(),
            pending: VecDeque::new(),
            next_seq: 0,
            accepted: Vec::new(),
            params: None,
            run: None,
            peer_results: None,
            outcome: None,
            stream_failure: None,
            start_json: Value::Null,
            timesecs: sysinfo::unix_now(),
        });
    }

    fn on_control(&mut self, r: std::io::Result<Vec<u8>>) {
        let Some(t) = &mut self.test else { return };
        let acts = match r {
            Ok(bytes) if !bytes.is_empty() => t.machine.on_bytes(t.now(), &bytes),
            _ => t.machine.on_peer_closed(t.now()),
        };
        self.apply(acts);
    }

    /// A data connection's cookie arrived: connections are handed to the protocol machine in
    /// the order they were accepted, which is the order the client made them.
    fn on_cookie(&mut self, seq: u64, cookie: Option<Vec<u8>>) {
        let waiting = self
            .test
            .as_mut()
            .and_then(|t| t.pending.iter_mut().find(|p| p.seq == seq));
        if let Some(p) = waiting {
            p.cookie = Some(cookie);
        }
        while let Some((stream, cookie)) = self.next_ready_stream() {
            self.hand_stream(Conn::Tcp(stream), cookie);
        }
    }

    /// The oldest data connection, once its cookie (or its silence) is known.
    fn next_ready_stream(&mut self) -> Option<(TcpStream, Option<Vec<u8>>)> {
        let t = self.test.as_mut().filter(|t| t.outcome.is_none())?;
        t.pending.front()?.cookie.as_ref()?;
        let p = t.pending.pop_front()?;
        Some((p.stream, p.cookie.flatten()))
    }

    fn hand_stream(&mut self, stream: Conn, cookie: Option<Vec<u8>>) {
        let Some(t) = &mut self.test else { return };
        let acts = t.machine.on_stream(t.now(), cookie.as_deref());
        let mut rest = Vec::new();
        let mut stream = Some(stream);
        for a in acts {
            match (a, stream.take()) {
                (ServerAction::AcceptStream(spec), Some(s)) => self.accept_stream(spec, s),
                (ServerAction::DenyStream(e), Some(Conn::Tcp(s))) => deny_stream(&s, &e),
                (other, s) => {
                    stream = s;
                    rest.push(other);
                }
            }
        }
        self.apply(rest);
    }

    /// A UDP stream finished its handshake (or the wait for it failed).
    fn on_udp_stream(&mut self, r: std::io::Result<std::net::UdpSocket>) {
        match r {
            Ok(s) => self.hand_stream(Conn::Udp(s), None),
            Err(e) => {
                if let Some(t) = &mut self.test {
                    t.outcome
                        .get_or_insert(Err(format!("waiting for a UDP stream: {e}")));
                }
                self.fail(ProtoError::Aborted {
                    code: ErrorCode::IESTREAMACCEPT,
                    errno: e.raw_os_error().unwrap_or(0),
                });
            }
        }
    }

    fn accept_stream(&mut self, spec: StreamSpec, stream: Conn) {
        let Some(t) = &mut self.test else { return };
        let nodelay = t.params.as_ref().is_some_and(|p| p.nodelay);
        if let Conn::Tcp(s) = &stream {
            let _ = s.set_nodelay(nodelay);
        }
        let made = DataStream::new(spec, stream);
        match made {
            Ok(d) => {
                if !self.s.json {
                    let meta = d.meta(d.spec.server_sends());
                    crate::outln!("{}", report::connected_line(&meta));
                }
                t.accepted.push(d);
            }
            Err(e) => self.fail(ProtoError::Aborted {
                code: ErrorCode::IESTREAMACCEPT,
                errno: e.raw_os_error().unwrap_or(0),
            }),
        }
    }

    fn stream_failed(&mut self, index: usize, msg: &str) {
        let Some(t) = &mut self.test else { return };
        let Some(run) = &t.run else { return };
        let m = &run.layout().streams[index];
        // IESTREAMWRITE (205) or IESTREAMREAD (206).
        let code = ErrorCode(if m.sends { 205 } else { 206 });
        let line = format!("stream {}: {msg}", m.id);
        t.outcome.get_or_insert(Err(line));
        self.fail(ProtoError::Aborted { code, errno: 0 });
    }

    /// Ends the test with `SERVER_ERROR` (the outcome, if not yet set, is `e`).
    fn fail(&mut self, e: ProtoError) {
        let Some(t) = &mut self.test else { return };
        let acts = t.machine.fail(t.now(), e);
        self.apply(acts);
    }

    /// Carries out the protocol machine's actions in order.
    fn apply(&mut self, actions: Vec<ServerAction>) {
        for a in actions {
            let Some(t) = &mut self.test else { return };
            match a {
                ServerAction::Send(bytes) => {
                    if let Err(e) = (&t.ctrl).write_all(&bytes) {
                        t.outcome
                            .get_or_insert(Err(format!("writing the control connection: {e}")));
                    }
                }
                ServerAction::Params(p) => self.on_params(p),
                ServerAction::StartTest => self.start_test(),
                ServerAction::StopTest => self.stop_test(),
                ServerAction::PeerResults(r) => self.on_peer_results(r),
                ServerAction::Done => {
                    t.outcome.get_or_insert(Ok(()));
                }
                ServerAction::Failed(e) => {
                    t.outcome.get_or_insert(Err(e.to_string()));
                }
                // Streams are accepted or denied where their connection is at hand.
                _ => {}
            }
        }
    }

    /// The client's parameters: refuse what zcnet does not do (naming it), else tell the
    /// client to connect its streams (the listener is the one the control connection came to).
    fn on_params(&mut self, p: TestParams) {
        let Some(t) = &mut self.test else { return };
        let refusal = if p.protocol == Protocol::Sctp {
            Some(ProtoError::ParamRejected {
                code: ErrorCode::IEUNIMP,
                detail: "client asked for an SCTP test; zcnet perf serves TCP and UDP tests".into(),
            })
        } else {
            p.reject_unsupported(SUPPORTED)
        };
        if let Some(e) = refusal {
            return self.fail(e);
        }
        if p.protocol == Protocol::Udp {
            let id = t.id;
            if let Err(e) = self.listen_udp(id, p.stream_count()) {
                let errno = e.raw_os_error().unwrap_or(0);
                if let Some(t) = &mut self.test {
                    t.outcome
                        .get_or_insert(Err(format!("UDP port {}: {e}", self.port)));
                }
                return self.fail(ProtoError::Aborted {
                    code: ErrorCode::IESTREAMLISTEN,
                    errno,
                });
            }
        }
        let Some(t) = &mut self.test else { return };
        if self.s.verbose && !self.s.json {
            crate::outln!("{}", report::starting_line(&p));
        }
        t.params = Some(p);
        let acts = t.machine.listening(t.now());
        self.apply(acts);
    }

    /// Binds the UDP socket for the first stream before `CREATE_STREAMS` goes out (the
    /// client's connect datagram must find it), and completes the handshakes in a thread.
    fn listen_udp(&self, test: u64, count: usize) -> std::io::Result<()> {
        let first = super::udp::server_bind(self.listen)?;
        events::spawn_udp_acceptor(
            first,
            self.listen,
            count,
            self.s.step_timeout,
            test,
            self.tx.clone(),
        )
    }

    fn start_test(&mut self) {
        let Some(t) = &mut self.test else { return };
        let Some(p) = t.params.clone() else { return };
        let verify = p.unknown.get(VERIFY_KEY).and_then(Value::as_u64);
        let path = PathConfig {
            tx: self.s.data.tx,
            memory: self.s.data.memory,
            rx: self.s.data.rx.clone(),
            len: p.block_len() as usize,
            rate: p.bandwidth,
            verify,
            udp: udp_config(&p, self.s.gso),
            tuning: self.s.tuning,
            tcp: StreamTuning::default(),
            voice: self.s.voice,
        };
        let style = ReportStyle {
            json: self.s.json,
            verbose: self.s.verbose,
            interval: self.s.interval,
        };
        let notify = Notifier {
            tx: self.tx.clone(),
            wrap: events::stream_event,
            test: t.id,
        };
        let streams = std::mem::take(&mut t.accepted);
        match TestRun::start(true, &p, streams, &path, style, &notify) {
            Ok(run) => {
                let info = StartInfo {
                    cookie: t
                        .machine
                        .cookie()
                        .map(|c| c.to_string())
                        .unwrap_or_default(),
                    params: p,
                    connecting_to: None,
                    accepted: Some(t.peer),
                    timesecs: t.timesecs,
                };
                t.start_json = jsonout::start(Some(run.layout()), &info);
                t.run = Some(run);
            }
            Err(e) => self.fail(ProtoError::Aborted {
                code: ErrorCode::IECREATESTREAM,
                errno: e.raw_os_error().unwrap_or(0),
            }),
        }
    }

    /// `TEST_END`: the senders stop (a zcnet client reads to the end, so they flush and close
    /// their half; an iperf3 client has stopped reading, so they are cut short).
    fn stop_test(&mut self) {
        let Some(t) = &mut self.test else { return };
        let grace = if t.zcnet_peer() {
            ZCNET_PEER_GRACE
        } else {
            IPERF3_PEER_GRACE
        };
        let Some(run) = &mut t.run else { return };
        run.stop_senders(grace);
        run.shutdown_senders();
    }

    /// The client's results: drain the receivers to the counts it reports, then answer with
    /// this side's.
    fn on_peer_results(&mut self, r: TestResults) {
        let Some(t) = &mut self.test else { return };
        let Some(run) = &mut t.run else { return };
        run.set_targets(&r);
        run.drain_receivers();
        run.finish();
        if let Some(e) = run.failure() {
            t.outcome.get_or_insert(Err(e));
            return self.fail(ProtoError::Aborted {
                code: ErrorCode(206),
                errno: 0,
            });
        }
        let local = run.local_results();
        t.peer_results = Some(r);
        let acts = t.machine.local_results(t.now(), local);
        self.apply(acts);
    }

    /// Ends the current test if it is over: prints its report or its one line, cleans up.
    fn end_test_if_over(&mut self) -> Option<Result<(), PerfError>> {
        let over = self
            .test
            .as_ref()
            .is_some_and(|t| t.outcome.is_some() || t.machine.is_over());
        if !over {
            return None;
        }
        let mut t = self.test.take()?;
        let outcome = t
            .outcome
            .take()
            .unwrap_or_else(|| Err("the test ended early".into()));
        let _ = t.ctrl.shutdown(std::net::Shutdown::Both);
        let result = match outcome {
            Ok(()) => {
                self.report(&mut t);
                Ok(())
            }
            Err(e) => {
                crate::eoutln!(
                    "zcnet perf: test #{} from {} port {}: {e}",
                    t.id,
                    t.peer.ip(),
                    t.peer.port()
                );
                let intervals = t.run.as_mut().map(TestRun::take_intervals);
                if let Some(run) = &mut t.run {
                    run.abort();
                }
                if self.s.json {
                    // As iperf3 -s -J: one document per test, a failed one with "error".
                    let start = std::mem::take(&mut t.start_json);
                    print_json(&jsonout::document(
                        start,
                        intervals.unwrap_or_default(),
                        serde_json::json!({}),
                        Some(&e),
                    ));
                    let _ = std::io::stdout().flush();
                }
                Err(PerfError::Failed(e))
            }
        };
        drop(t);
        Some(result)
    }

    fn report(&self, t: &mut Test) {
        let (Some(run), Some(peer)) = (&mut t.run, &t.peer_results) else {
            return;
        };
        let totals = run.totals(peer);
        let paths = run.path_summary();
        if self.s.json {
            let end = jsonout::end(
                run.layout(),
                &totals,
                paths.to_json_with_peer(peer.zerocopy.as_ref()),
            );
            let start = std::mem::take(&mut t.start_json);
            print_json(&jsonout::document(start, run.take_intervals(), end, None));
        } else {
            crate::out!(
                "{}",
                report::summary_text(run.layout(), &totals, self.s.verbose)
            );
            for line in paths.lines() {
                crate::outln!("{line}");
            }
        }
        let _ = std::io::stdout().flush();
    }
}

/// A data connection that is not one of the test's: `ACCESS_DENIED`, closed, one line.
fn deny_stream(s: &TcpStream, e: &ProtoError) {
    let _ = (&*s).write_all(&ACCESS_DENIED_REPLY);
    let peer = s.peer_addr().map(net::canonical);
    match peer {
        Ok(p) => crate::eoutln!(
            "zcnet perf: refused a data stream from {} port {}: {e}",
            p.ip(),
            p.port()
        ),
        Err(_) => crate::eoutln!("zcnet perf: refused a data stream: {e}"),
    }
}

fn io_failed(e: std::io::Error) -> PerfError {
    PerfError::failed(format!("{e}"))
}
