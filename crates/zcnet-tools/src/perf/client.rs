//! The client: connects to an iperf3 (or zcnet perf) server, runs one test, prints it.
//!
//! The control connection's bytes go to [`ClientControl`]; its actions are carried out here
//! (iperf3 src/iperf_client_api.c, `iperf_run_client`): connect the data streams with the
//! cookie, start them on `TEST_RUNNING`, end the test when the time, `-n` bytes or `-k`
//! blocks are reached (stop and flush the senders first, so every byte counted was handed to
//! the kernel), drain the receivers, exchange results, print.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::args::Settings;
use super::error::PerfError;
use super::events::{self, Event};
use super::jsonout::{self, StartInfo};
use super::net::{self, CONNECT_TIMEOUT};
use super::proto::{
    ClientAction, ClientConfig, ClientControl, Protocol, StreamSpec, TestParams, TestResults,
};
use super::report;
use super::run::{ReportStyle, TestRun};
use super::streams::{Conn, DataStream, Notice, Notifier, PathConfig};
use super::sysinfo;
use super::tuning::StreamTuning;
use super::udp::{self, UdpConfig};

/// The longest the controlling thread sleeps between looks at its timers and the interrupt.
const TICK: Duration = Duration::from_millis(100);
/// How long senders may take to hand over their last sends once the test time is up.
const SENDER_GRACE: Duration = Duration::from_secs(5);
/// A stream that fails is often the echo of a message on the control connection (the server
/// was stopped and reset its streams): that message, if it comes this soon, is the reason.
pub const FAILURE_SETTLE: Duration = Duration::from_millis(200);

/// Runs one test against the server at `host` (`-c HOST`).
pub fn run(s: &Settings, host: &str) -> Result<(), PerfError> {
    if s.params.protocol == Protocol::Sctp {
        return Err(PerfError::Usage(
            "SCTP: zcnet perf runs TCP and UDP tests only".into(),
        ));
    }
    let addr = net::resolve(host, s.port, s.family)?;
    if receives(&s.params) {
        check_receive_path(s)?;
    }
    let mut c = Client::connect(s, host, addr)?;
    let result = c.run();
    c.close(result)
}

/// Whether the client receives in this test (`-R`, `--bidir`).
fn receives(p: &TestParams) -> bool {
    p.reverse || p.bidirectional
}

/// Makes a receiver once before connecting, so that a receive mechanism the kernel refuses
/// fails at once with the library's reason (and `auto` says what it skipped).
pub fn check_receive_path(s: &Settings) -> Result<(), PerfError> {
    let rx = zcnet::Receiver::new(&s.data.rx)?;
    if s.verbose && !s.json {
        for f in rx.fallbacks() {
            crate::outln!("zcnet rx {}: {}", s.data.rx.mode, f.render(s.voice));
        }
        crate::outln!("zcnet rx {}: using {}", s.data.rx.mode, rx.mode());
    }
    Ok(())
}

/// A client's state through one test.
struct Client<'a> {
    s: &'a Settings,
    host: String,
    addr: SocketAddr,
    ctrl: TcpStream,
    machine: ClientControl,
    origin: Instant,
    events: mpsc::Receiver<Event>,
    tx: mpsc::Sender<Event>,
    connected: Vec<DataStream>,
    run: Option<TestRun>,
    end_at: Option<Instant>,
    budget_spent: usize,
    finishing: bool,
    peer: Option<TestResults>,
    done: Option<Result<(), PerfError>>,
    /// A stream failure, reported at the deadline unless the control connection explains it.
    stream_failure: Option<(Instant, String)>,
    /// With `-J`, the totals of a test ended by Ctrl-C (the document's `end`).
    interrupted_end: Option<Value>,
    start_json: Value,
    timesecs: u64,
}

impl<'a> Client<'a> {
    /// Connects the control connection and starts reading it.
    fn connect(s: &'a Settings, host: &str, addr: SocketAddr) -> Result<Client<'a>, PerfError> {
        let timesecs = sysinfo::unix_now();
        if !s.json {
            if s.verbose {
                crate::outln!("Time: {}", sysinfo::http_date(timesecs));
            }
            crate::outln!("Connecting to host {host}, port {}", s.port);
            if s.params.reverse {
                crate::outln!("Reverse mode, remote host {host} is sending");
            }
        }
        let ctrl = net::connect(addr, s.bind, None, CONNECT_TIMEOUT)
            .map_err(|e| net::connect_error(addr, "the control connection", &e))?;
        let _ = ctrl.set_nodelay(true);
        let (tx, events) = mpsc::channel();
        let reader = ctrl.try_clone().map_err(io_failed)?;
        events::spawn_control_reader(reader, 0, tx.clone()).map_err(io_failed)?;
        let cookie = events::new_cookie().map_err(io_failed)?;
        if s.verbose && !s.json {
            crate::outln!("      Cookie: {cookie}");
        }
        // What `-J` prints as `start` if the test fails before its streams exist (iperf3
        // always fills it: scripts read `start.connecting_to`); replaced once they do.
        let start_json = jsonout::start(
            None,
            &StartInfo {
                cookie: cookie.to_string(),
                params: s.params.clone(),
                connecting_to: Some((host.to_string(), s.port)),
                accepted: None,
                timesecs,
            },
        );
        let machine = ClientControl::new(ClientConfig::default(), cookie, s.params.clone())?;
        Ok(Client {
            s,
            host: host.to_string(),
            addr,
            ctrl,
            machine,
            origin: Instant::now(),
            events,
            tx,
            connected: Vec::new(),
            run: None,
            end_at: None,
            budget_spent: 0,
            finishing: false,
            peer: None,
            done: None,
            stream_failure: None,
            interrupted_end: None,
            start_json,
            timesecs,
        })
    }

    /// Time for the protocol machine.
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    fn run(&mut self) -> Result<(), PerfError> {
        let acts = self.machine.connected(self.now());
        self.apply(acts);
        while self.done.is_none() {
            if crate::interrupt::interrupted() {
                self.interrupted_summary();
                self.abort_with(PerfError::Interrupted);
                break;
            }
            self.on_timers();
            if self.done.is_some() {
                break;
            }
            match self.events.recv_timeout(self.wait_time()) {
                Ok(ev) => self.on_event(ev),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    self.abort_with(PerfError::failed("internal: the event channel closed"))
                }
            }
        }
        self.done.take().unwrap_or(Ok(()))
    }

    /// How long to wait for events before a timer is due.
    fn wait_time(&self) -> Duration {
        let now = Instant::now();
        let machine = self
            .machine
            .poll_timeout()
            .map(|d| d.saturating_sub(self.now()));
        let run = self.run.as_ref().and_then(TestRun::next_deadline);
        let failure = self.stream_failure.as_ref().map(|f| f.0);
        let timers = [run, self.end_at.filter(|_| !self.finishing), failure];
        timers
            .into_iter()
            .flatten()
            .map(|t| t.saturating_duration_since(now))
            .chain(machine)
            .fold(TICK, Duration::min)
    }

    fn on_timers(&mut self) {
        if self.machine.poll_timeout().is_some_and(|d| self.now() >= d) {
            let acts = self.machine.handle_timeout(self.now());
            self.apply(acts);
        }
        if let Some(run) = &mut self.run {
            run.on_timer(Instant::now());
        }
        if self
            .stream_failure
            .as_ref()
            .is_some_and(|f| Instant::now() >= f.0)
        {
            if let Some((_, msg)) = self.stream_failure.take() {
                return self.abort_with(PerfError::failed(msg));
            }
        }
        if self.test_over() {
            self.finishing = true;
            let acts = self.machine.test_finished(self.now());
            self.apply(acts);
        }
    }

    /// Whether the test reached its end: `-t` elapsed, or `-n`/`-k` sent or received.
    fn test_over(&self) -> bool {
        let Some(run) = self.run.as_ref().filter(|_| !self.finishing) else {
            return false;
        };
        if self.end_at.is_some_and(|t| Instant::now() >= t) {
            return true;
        }
        let p = &self.s.params;
        let limit = match (p.num, p.blockcount) {
            (0, 0) => return false,
            (0, k) => k.saturating_mul(u64::from(p.block_len())),
            (n, _) => n,
        };
        let senders = run.layout().streams.iter().filter(|m| m.sends).count();
        (senders > 0 && self.budget_spent >= senders)
            || (run.has_receivers() && run.moved(false) >= limit)
    }

    fn on_event(&mut self, ev: Event) {
        let now = self.now();
        match ev {
            Event::Control(_, Ok(bytes)) if !bytes.is_empty() => {
                let acts = self.machine.on_bytes(now, &bytes);
                self.apply(acts);
            }
            Event::Control(_, _) => {
                let acts = self.machine.on_peer_closed(now);
                self.apply(acts);
            }
            Event::Stream(_, Notice::BudgetSpent(_)) => self.budget_spent += 1,
            Event::Stream(_, Notice::Failed(i, msg)) if !self.finishing => {
                let id = self.run.as_ref().map_or(0, |r| r.layout().streams[i].id);
                let when = Instant::now() + FAILURE_SETTLE;
                self.stream_failure
                    .get_or_insert((when, format!("stream {id}: {msg}")));
            }
            _ => {}
        }
    }

    /// Carries out the protocol machine's actions in order.
    fn apply(&mut self, actions: Vec<ClientAction>) {
        for a in actions {
            if self.done.is_some() {
                return;
            }
            match a {
                ClientAction::Send(bytes) => self.send(&bytes),
                ClientAction::CreateStreams(plan) => self.create_streams(&plan),
                ClientAction::PrepareTest => self.prepare(),
                ClientAction::StartTest => self.start_test(),
                ClientAction::StopSending => self.stop_sending(),
                ClientAction::ResultsRequested => self.results(),
                ClientAction::PeerResults(r) => self.peer = Some(r),
                ClientAction::Done => self.report(),
                ClientAction::Failed(e) => self.done = Some(Err(e.into())),
            }
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        if let Err(e) = (&self.ctrl).write_all(bytes) {
            self.done = Some(Err(PerfError::failed(format!(
                "the control connection to {} failed: {e} (did the server stop?)",
                self.addr
            ))));
        }
    }

    /// Connects the data streams (`--cport`: stream k from port + k), each opening with the
    /// cookie.
    fn create_streams(&mut self, plan: &[StreamSpec]) {
        for (k, spec) in plan.iter().enumerate() {
            let port = self.s.cport.map(|p| p.wrapping_add(k as u16));
            match self.connect_stream(*spec, port) {
                Ok(d) => {
                    if !self.s.json {
                        let meta = d.meta(d.spec.client_sends());
                        crate::outln!("{}", report::connected_line(&meta));
                    }
                    self.connected.push(d);
                }
                Err(e) => return self.abort_with(e),
            }
        }
    }

    fn connect_stream(&self, spec: StreamSpec, port: Option<u16>) -> Result<DataStream, PerfError> {
        let what = format!("data stream {}", spec.id);
        let p = &self.s.params;
        if p.protocol == Protocol::Udp {
            let reverse = spec.server_sends();
            let s = udp::client_connect(
                self.addr,
                self.s.bind,
                port,
                reverse,
                p.block_len(),
                CONNECT_TIMEOUT,
            )
            .map_err(|e| PerfError::failed(format!("{what} (UDP) to {}: {e}", self.addr)))?;
            return DataStream::new(spec, Conn::Udp(s)).map_err(io_failed);
        }
        let mut s = net::connect(self.addr, self.s.bind, port, CONNECT_TIMEOUT)
            .map_err(|e| net::connect_error(self.addr, &what, &e))?;
        s.write_all(self.machine.cookie().as_bytes())
            .map_err(|e| PerfError::failed(format!("{what}: sending the cookie: {e}")))?;
        DataStream::new(spec, Conn::Tcp(s)).map_err(io_failed)
    }

    fn prepare(&self) {
        if self.s.verbose && !self.s.json {
            crate::outln!("{}", report::starting_line(&self.s.params));
        }
    }

    fn start_test(&mut self) {
        let p = &self.s.params;
        let path = PathConfig {
            tx: self.s.data.tx,
            memory: self.s.data.memory,
            rx: self.s.data.rx.clone(),
            len: p.block_len() as usize,
            rate: p.bandwidth,
            verify: self.s.verify,
            udp: udp_config(p, self.s.gso),
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
            test: 0,
        };
        let streams = std::mem::take(&mut self.connected);
        match TestRun::start(false, p, streams, &path, style, &notify) {
            Ok(run) => {
                if p.time > 0 {
                    let secs = u64::from(p.time) + u64::from(p.omit);
                    // From the test's own start, not from now: starting many streams takes
                    // time, and `-t` is the length of the test.
                    // (the senders stop there by themselves: TestRun::start)
                    self.end_at = Some(run.started() + Duration::from_secs(secs));
                }
                let info = StartInfo {
                    cookie: self.machine.cookie().to_string(),
                    params: p.clone(),
                    connecting_to: Some((self.host.clone(), self.s.port)),
                    accepted: None,
                    timesecs: self.timesecs,
                };
                self.start_json = jsonout::start(Some(run.layout()), &info);
                self.run = Some(run);
            }
            Err(e) => self.abort_with(io_failed(e)),
        }
    }

    /// The test is over: senders hand over their last sends before `TEST_END` goes out.
    fn stop_sending(&mut self) {
        let Some(run) = &mut self.run else { return };
        run.stop_senders(SENDER_GRACE);
        if let Some(e) = run.failure() {
            self.abort_with(PerfError::failed(e));
        }
    }

    /// `EXCHANGE_RESULTS`: receive what is still coming, then send this side's results.
    fn results(&mut self) {
        let Some(run) = &mut self.run else {
            return self.abort_with(PerfError::failed("internal: results before the test"));
        };
        run.drain_receivers();
        run.finish();
        if let Some(e) = run.failure() {
            return self.abort_with(PerfError::failed(e));
        }
        let local = run.local_results();
        let acts = self.machine.local_results(self.now(), local);
        self.apply(acts);
    }

    /// `DISPLAY_RESULTS`: the summary, the data path's account, and iperf3's last line.
    fn report(&mut self) {
        let (Some(run), Some(peer)) = (&mut self.run, &self.peer) else {
            self.done = Some(Err(PerfError::failed("internal: no results to print")));
            return;
        };
        let totals = run.totals(peer);
        let paths = run.path_summary();
        let verified = self
            .s
            .verify
            .map(|seed| verify_outcome(seed, &totals, peer.zerocopy.is_some()));
        if self.s.json {
            let mut end = jsonout::end(
                run.layout(),
                &totals,
                paths.to_json_with_peer(peer.zerocopy.as_ref()),
            );
            if let Some(v) = &verified {
                end["verify"] = v.to_json();
                if let Some(note) = v.note() {
                    crate::eoutln!("zcnet perf: {note}");
                }
            }
            let doc = jsonout::document(
                std::mem::take(&mut self.start_json),
                run.take_intervals(),
                end,
                None,
            );
            print_json(&doc);
        } else {
            crate::out!(
                "{}",
                report::summary_text(run.layout(), &totals, self.s.verbose)
            );
            for line in paths.lines() {
                crate::outln!("{line}");
            }
            if let Some(v) = &verified {
                crate::outln!("{}", v.line());
            }
            crate::outln!("\niperf Done.");
        }
        self.done = Some(Ok(()));
    }

    /// Ctrl-C during the test: stops the streams and prints the summary of what moved until
    /// now, this side's counts only (the server's never come), as iperf3 does before "interrupt
    /// - the client has terminated". With `-J` the totals go into the document's `end`.
    fn interrupted_summary(&mut self) {
        let Some(run) = &mut self.run else { return };
        run.interrupt();
        let totals = run.totals(&TestResults::default());
        if self.s.json {
            self.interrupted_end = Some(jsonout::end(
                run.layout(),
                &totals,
                run.path_summary().to_json_with_peer(None),
            ));
        } else {
            crate::out!(
                "{}",
                report::summary_text(run.layout(), &totals, self.s.verbose)
            );
        }
    }

    /// Ends the test with `err`: tells the server (`CLIENT_TERMINATE`), stops the streams.
    fn abort_with(&mut self, err: PerfError) {
        if self.done.is_some() {
            return;
        }
        let acts = self.machine.terminate(self.now());
        for a in acts {
            if let ClientAction::Send(bytes) = a {
                let _ = (&self.ctrl).write_all(&bytes);
            }
        }
        if let Some(run) = &mut self.run {
            run.abort();
        }
        self.done = Some(Err(err));
    }

    /// Closes everything; with `-J`, a failed test still prints a document, with `"error"`.
    fn close(mut self, result: Result<(), PerfError>) -> Result<(), PerfError> {
        let _ = self.ctrl.shutdown(std::net::Shutdown::Both);
        if let (Err(e), true) = (&result, self.s.json) {
            let intervals = self.run.as_mut().map(TestRun::take_intervals);
            let start = std::mem::take(&mut self.start_json);
            let end = self
                .interrupted_end
                .take()
                .unwrap_or_else(|| serde_json::json!({}));
            let doc = jsonout::document(
                start,
                intervals.unwrap_or_default(),
                end,
                Some(&e.render(self.s.voice)),
            );
            print_json(&doc);
        }
        drop(self.run.take());
        result
    }
}

/// What `--verify` checked, told at the end of a test that passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verified {
    /// Both ends are zcnet: every byte received, on either side, was checked against the
    /// pattern of `seed` (a mismatch fails the test), `bytes` in all.
    Bytes {
        /// The pattern's seed.
        seed: u64,
        /// Bytes checked.
        bytes: u64,
    },
    /// The server is not zcnet (its results carry no zcnet section): it ignored the pattern's
    /// seed and checked nothing it received.
    PeerNotZcnet {
        /// The pattern's seed.
        seed: u64,
    },
}

/// `--verify`'s outcome: the bytes both ends received when the peer is zcnet (each receiving
/// stream checks the pattern), else nothing.
pub fn verify_outcome(seed: u64, totals: &report::Totals, peer_is_zcnet: bool) -> Verified {
    if peer_is_zcnet {
        let bytes = totals.streams.iter().map(|s| s.received).sum();
        Verified::Bytes { seed, bytes }
    } else {
        Verified::PeerNotZcnet { seed }
    }
}

impl Verified {
    /// The line printed after the summary.
    pub fn line(&self) -> String {
        match self {
            Verified::Bytes { seed, bytes } => format!(
                "zcnet verify: {bytes} bytes verified against the pattern (seed {seed}), none wrong"
            ),
            Verified::PeerNotZcnet { .. } => format!("zcnet verify: {}", NOT_ZCNET),
        }
    }

    /// The one-line note for a peer that checked nothing (on stderr with `-J`).
    pub fn note(&self) -> Option<String> {
        matches!(self, Verified::PeerNotZcnet { .. }).then(|| format!("--verify: {NOT_ZCNET}"))
    }

    /// `end.verify` of `-J`.
    pub fn to_json(&self) -> Value {
        match self {
            Verified::Bytes { seed, bytes } => {
                serde_json::json!({"seed": seed, "verified_bytes": bytes, "peer_checks": true})
            }
            Verified::PeerNotZcnet { seed } => serde_json::json!({
                "seed": seed,
                "verified_bytes": 0,
                "peer_checks": false,
                "note": NOT_ZCNET,
            }),
        }
    }
}

const NOT_ZCNET: &str = "nothing verified: the server is not zcnet perf (iperf3?), so it did not check the pattern it received; run `zcnet perf -s` there to verify";

/// How a UDP test's datagrams are made (`None` for TCP).
pub fn udp_config(p: &TestParams, gso: bool) -> Option<UdpConfig> {
    (p.protocol == Protocol::Udp).then_some(UdpConfig {
        counters_64bit: p.udp_counters_64bit,
        gso,
    })
}

/// Prints a `-J` document.
pub fn print_json(doc: &Value) {
    match serde_json::to_string_pretty(doc) {
        Ok(text) => crate::outln!("{text}"),
        Err(e) => crate::eoutln!("zcnet perf: cannot write the JSON document: {e}"),
    }
}

fn io_failed(e: std::io::Error) -> PerfError {
    PerfError::failed(format!("{e}"))
}
