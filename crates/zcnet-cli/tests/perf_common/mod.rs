//! Helpers for the perf tests: spawned processes that are always killed, servers on free
//! ports, reading `-J` documents.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The `zcnet-perf` binary under test.
pub fn zcnet_perf() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_zcnet-perf"))
}

/// iperf3, if installed (the tests that need it skip, saying so, when it is not).
pub fn iperf3() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("iperf3"))
        .find(|p| p.is_file())
}

/// iperf3's path; skips the calling test (reported as ignored, with the reason) when it is
/// missing.
#[macro_export]
macro_rules! need_iperf3 {
    () => {
        perf_common::iperf3().unwrap_or_else(|| {
            zcnet_testkit::skip(
                zcnet_testkit::Need::Tool,
                "iperf3 is not installed (apt-get install iperf3)",
            )
        })
    };
}

/// A spawned process whose output is collected, killed and reaped on drop whatever happens.
pub struct Proc {
    child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Proc {
    /// Spawns `program args`, collecting stdout and stderr.
    pub fn spawn(program: &std::path::Path, args: &[&str]) -> Proc {
        Proc::spawn_in(None, program, args)
    }

    /// Spawns `program args` inside network namespace `ns` (`ip netns exec`, which execs the
    /// program: the process id is the program's), or here when `ns` is `None`.
    pub fn spawn_in(ns: Option<&str>, program: &std::path::Path, args: &[&str]) -> Proc {
        let mut cmd = match ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(program);
                c
            }
            None => Command::new(program),
        };
        let mut child = cmd
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {}: {e}", program.display()));
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let readers = vec![
            collect(
                child.stdout.take().expect("piped stdout"),
                Arc::clone(&stdout),
            ),
            collect(
                child.stderr.take().expect("piped stderr"),
                Arc::clone(&stderr),
            ),
        ];
        Proc {
            child,
            stdout,
            stderr,
            readers,
        }
    }

    /// What it printed on stdout so far.
    pub fn stdout(&self) -> String {
        self.stdout.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// What it printed on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Waits for the process to exit (killing it after `limit`), then for its output.
    pub fn wait(&mut self, limit: Duration) -> ExitStatus {
        let until = Instant::now() + limit;
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                for r in self.readers.drain(..) {
                    let _ = r.join();
                }
                return st;
            }
            if Instant::now() >= until {
                let _ = self.child.kill();
                panic!(
                    "process still running after {limit:?}\nstdout:\n{}\nstderr:\n{}",
                    self.stdout(),
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits until stdout or stderr contains `text`; panics after `limit`.
    pub fn wait_for(&self, text: &str, limit: Duration) -> String {
        let until = Instant::now() + limit;
        loop {
            let all = format!("{}{}", self.stdout(), self.stderr());
            if all.contains(text) {
                return all;
            }
            assert!(
                Instant::now() < until,
                "no {text:?} after {limit:?}:\n{all}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends SIGKILL now.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn collect(
    mut from: impl Read + Send + 'static,
    into: Arc<Mutex<String>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = BufReader::new(&mut from);
        let mut line = String::new();
        while r.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
            if let Ok(mut s) = into.lock() {
                s.push_str(&line);
            }
            line.clear();
        }
    })
}

/// Where a test runs its two ends: both on loopback, or the client in the lab's namespace `a`
/// and the server in `b`, over the veth pair.
#[derive(Clone, Copy)]
pub enum Net<'a> {
    /// 127.0.0.1, in the test's own namespace.
    Loopback,
    /// The lab's veth pair.
    Veth(&'a zcnet_tools::lab::VethPath),
}

impl Net<'_> {
    /// The address the client connects to.
    pub fn server_addr(&self) -> String {
        match self {
            Net::Loopback => "127.0.0.1".into(),
            Net::Veth(p) => p.b_addr.to_string(),
        }
    }

    /// The server's namespace (`None`: the test's own).
    pub fn server_ns(&self) -> Option<&str> {
        match self {
            Net::Loopback => None,
            Net::Veth(p) => Some(&p.b),
        }
    }

    /// The client's namespace (`None`: the test's own).
    pub fn client_ns(&self) -> Option<&str> {
        match self {
            Net::Loopback => None,
            Net::Veth(p) => Some(&p.a),
        }
    }
}

/// A lab with a veth pair, or `None` when not root (for the measurement binaries, which have
/// no test harness).
pub fn try_veth_lab() -> Option<(zcnet_tools::lab::Lab, zcnet_tools::lab::VethPath)> {
    match zcnet_tools::lab::Lab::new() {
        Ok(mut lab) => {
            let p = lab.veth().expect("veth pair");
            Some((lab, p))
        }
        Err(zcnet::Error::NotRoot { .. }) => None,
        Err(e) => panic!("lab: {e}"),
    }
}

/// A lab with a veth pair; skips the calling test when not root.
pub fn veth_lab() -> (zcnet_tools::lab::Lab, zcnet_tools::lab::VethPath) {
    try_veth_lab().unwrap_or_else(|| {
        zcnet_testkit::skip(zcnet_testkit::Need::Root, "network namespaces for the lab")
    })
}

/// A zcnet perf server on a free port (`-p 0`), with `args` (e.g. `-J`, `-1`): the process
/// and its port, read from its listening line.
pub fn zcnet_server(args: &[&str]) -> (Proc, u16) {
    zcnet_server_in(None, args)
}

/// [`zcnet_server`] inside namespace `ns`.
pub fn zcnet_server_in(ns: Option<&str>, args: &[&str]) -> (Proc, u16) {
    let mut all = vec!["-s", "-p", "0"];
    all.extend_from_slice(args);
    let p = Proc::spawn_in(ns, &zcnet_perf(), &all);
    let text = p.wait_for("istening on ", Duration::from_secs(10));
    let port = text
        .split("istening on ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no port in {text:?}"));
    (p, port)
}

/// An iperf3 server on a random high port, retried on another port if that one is taken.
pub fn iperf3_server(iperf3: &std::path::Path, args: &[&str]) -> (Proc, u16) {
    iperf3_server_in(None, iperf3, args)
}

/// [`iperf3_server`] inside namespace `ns`.
pub fn iperf3_server_in(ns: Option<&str>, iperf3: &std::path::Path, args: &[&str]) -> (Proc, u16) {
    for attempt in 0..20u32 {
        let port = random_port(attempt);
        let port_s = port.to_string();
        let mut all = vec!["-s", "-p", &port_s];
        all.extend_from_slice(args);
        let mut p = Proc::spawn_in(ns, iperf3, &all);
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            if zcnet_testkit::tcp_listening(Some(p.id()), port) {
                return (p, port);
            }
            if p.child.try_wait().ok().flatten().is_some() {
                break; // the port was taken: try another
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        p.kill();
    }
    panic!("could not start iperf3 -s on any of 20 ports");
}

fn random_port(salt: u32) -> u16 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mix = nanos ^ std::process::id().wrapping_mul(2_654_435_761) ^ salt.wrapping_mul(40_503);
    20_000 + (mix % 30_000) as u16
}

/// Parses a `-J` document; panics with the text when it is not JSON.
pub fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

/// `end.<key>.bytes` of a document.
pub fn sum_bytes(doc: &Value, key: &str) -> u64 {
    doc["end"][key]["bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("no end.{key}.bytes in {doc}"))
}

/// [`assert_clean`] for a UDP document of an iperf3 peer: iperf3 before 3.10 writes one
/// `end.sum` instead of `end.sum_sent` and `end.sum_received` for UDP.
pub fn assert_clean_udp_peer(doc: &Value) {
    if doc["end"].get("sum_sent").is_none() && doc["end"].get("sum").is_some() {
        let mut d = doc.clone();
        d["end"]["sum_sent"] = d["end"]["sum"].clone();
        d["end"]["sum_received"] = d["end"]["sum"].clone();
        return assert_clean(&d, "iperf3");
    }
    assert_clean(doc, "iperf3");
}

/// Asserts that a document has no `error` key and has iperf3's sections.
pub fn assert_clean(doc: &Value, who: &str) {
    assert!(
        doc.get("error").is_none(),
        "{who} reported an error: {}",
        doc["error"]
    );
    for k in ["start", "intervals", "end"] {
        assert!(doc.get(k).is_some(), "{who}: no {k:?}");
    }
    for k in [
        "streams",
        "sum_sent",
        "sum_received",
        "cpu_utilization_percent",
    ] {
        assert!(doc["end"].get(k).is_some(), "{who}: no end.{k:?}");
    }
}

/// Runs `program args` to its end (at most `limit`), returning the process.
pub fn run(program: &std::path::Path, args: &[&str], limit: Duration) -> (Proc, ExitStatus) {
    run_in(None, program, args, limit)
}

/// [`run`] inside namespace `ns`.
pub fn run_in(
    ns: Option<&str>,
    program: &std::path::Path,
    args: &[&str],
    limit: Duration,
) -> (Proc, ExitStatus) {
    let mut p = Proc::spawn_in(ns, program, args);
    let st = p.wait(limit);
    (p, st)
}

/// The program at one end of a pair.
#[derive(Clone, Copy)]
pub enum End<'a> {
    /// `zcnet-perf`.
    Zcnet,
    /// An unmodified iperf3 at this path.
    Iperf3(&'a std::path::Path),
}

impl End<'_> {
    fn name(&self) -> &'static str {
        match self {
            End::Zcnet => "zcnet",
            End::Iperf3(_) => "iperf3",
        }
    }
}

/// How long either end of a [`run_pair`] may take.
pub const PAIR_LIMIT: Duration = Duration::from_secs(30);

/// One test between a `-s -1 -J` server (`server`, with `server_args`) and a `-c ADDR -p PORT
/// -J` client (`client`, with `client_args`) over `net`; both must exit 0. Returns (client
/// doc, server doc).
pub fn run_pair(
    net: Net<'_>,
    client: End<'_>,
    server: End<'_>,
    client_args: &[&str],
    server_args: &[&str],
) -> (Value, Value) {
    let mut sargs = vec!["-1", "-J"];
    sargs.extend_from_slice(server_args);
    let (mut srv, port) = match server {
        End::Zcnet => zcnet_server_in(net.server_ns(), &sargs),
        End::Iperf3(p) => iperf3_server_in(net.server_ns(), p, &sargs),
    };
    let (port, addr) = (port.to_string(), net.server_addr());
    let mut all = vec!["-c", &addr, "-p", &port, "-J"];
    all.extend_from_slice(client_args);
    let program = match client {
        End::Zcnet => zcnet_perf(),
        End::Iperf3(p) => p.to_path_buf(),
    };
    let (cl, st) = run_in(net.client_ns(), &program, &all, PAIR_LIMIT);
    assert!(
        st.success(),
        "{} client failed: {}\n{}",
        client.name(),
        cl.stderr(),
        cl.stdout()
    );
    assert!(
        srv.wait(PAIR_LIMIT).success(),
        "{} server failed: {}\n{}",
        server.name(),
        srv.stderr(),
        srv.stdout()
    );
    (json(&cl.stdout()), json(&srv.stdout()))
}

/// What an iperf3 peer's version means for the checks (from its `-J` document), read from
/// iperf3's sources and confirmed against builds of 3.9, 3.12 and 3.21 (docs/reliability.md).
#[derive(Debug, Clone, Copy)]
pub struct Iperf3Peer {
    /// (major, minor) of `start.version` ("iperf 3.12").
    pub version: (u32, u32),
    /// Bytes per block (`start.test_start.blksize`).
    pub blksize: u64,
    /// Streams per direction (`start.test_start.num_streams`).
    pub streams: u64,
}

impl Iperf3Peer {
    /// Reads the version and test shape from iperf3's `-J` output.
    pub fn from_doc(doc: &Value) -> Iperf3Peer {
        let version = parse_version(doc["start"]["version"].as_str().unwrap_or(""));
        let ts = &doc["start"]["test_start"];
        Iperf3Peer {
            version,
            blksize: ts["blksize"].as_u64().unwrap_or(128 << 10),
            streams: ts["num_streams"].as_u64().unwrap_or(1),
        }
    }

    /// How many datagrams iperf3's own counts may be off by ([`Self::count_slack`] in blocks).
    pub fn datagram_slack(&self) -> u64 {
        self.count_slack() / self.blksize.max(1)
    }

    /// 3.14+ sends `omitted_packets` with its UDP results.
    pub fn says_what_it_omitted(&self) -> bool {
        self.version >= (3, 14)
    }

    /// 3.11+ writes `sum_sent_bidir_reverse` / `sum_received_bidir_reverse`; before, a
    /// `--bidir` test's `-J` lumps both directions into `sum_sent`/`sum_received`.
    pub fn has_bidir_sums(&self) -> bool {
        self.version >= (3, 11)
    }

    /// 3.10+ clients end a `-R -n`/`-k` test on the bytes received (iperf3 commit b818ef51);
    /// 3.9's count only what they send and never end it, against iperf3 servers too.
    pub fn ends_reverse_counts(&self) -> bool {
        self.version >= (3, 10)
    }

    /// Blocks past `-n` an iperf3 sender may write: 3.10+ checks before each write (at most
    /// one block per stream between checks), 3.9 after, within a burst of up to 10 writes per
    /// stream (`multisend`).
    pub fn overshoot(&self) -> u64 {
        let blocks = if self.version >= (3, 10) { 1 } else { 10 };
        blocks * self.streams * self.blksize
    }

    /// How far iperf3's own byte counts may be from the bytes its streams moved: 3.16+ runs a
    /// thread per stream and takes its counts while those threads still send (it disagrees with
    /// itself by a block: 3.21's client and server, -P 4, differ by 131,072 B in 2 of 3 runs),
    /// so up to a block per stream in each direction; none before.
    pub fn count_slack(&self) -> u64 {
        if self.version >= (3, 16) {
            2 * self.streams * self.blksize
        } else {
            0
        }
    }
}

/// Asserts `a` and `b` differ by at most `slack`.
#[track_caller]
pub fn assert_close(a: u64, b: u64, slack: u64, what: &str) {
    assert!(
        a.abs_diff(b) <= slack,
        "{what}: {a} and {b} differ by {} (allowed {slack})",
        a.abs_diff(b)
    );
}

/// (major, minor) of `iperf3 --version` ("iperf 3.9 (cJSON 1.7.13)"), for checks that must
/// know the version before a run; (0, 0) if it cannot be read.
pub fn iperf3_version(iperf3: &std::path::Path) -> (u32, u32) {
    let out = Command::new(iperf3)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    parse_version(&out)
}

/// (major, minor) of an iperf3 version line ("iperf 3.12" in `-J`, "iperf 3.9 (cJSON ...)"
/// from `--version`); (0, 0) when there is none.
fn parse_version(text: &str) -> (u32, u32) {
    let v = text.trim_start_matches("iperf ");
    let mut it = v.split_whitespace().next().unwrap_or("").split('.');
    let mut part = || -> u32 {
        it.next()
            .map(|x| x.trim_end_matches(|c: char| !c.is_ascii_digit()))
            .and_then(|x| x.parse().ok())
            .unwrap_or(0)
    };
    (part(), part())
}
