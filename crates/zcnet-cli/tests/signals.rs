//! SIGINT and SIGTERM stop every command promptly, in every state it can wait in — accept,
//! connect, a read of stdin that never comes, a write to stdout nobody reads, mid-transfer,
//! waiting for completions, a benchmark case (the raw SEND_ZC loop included) — with exit code
//! 130, "interrupted" on stderr, and nothing left behind (no lab namespace).

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;
use common::{is_root, need_root, StderrLines};

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long a command may take to exit after the signal.
const PROMPT: Duration = Duration::from_secs(2);
const SIGNALS: [&str; 2] = ["INT", "TERM"];

/// A running `zcnet` whose stderr is read line by line in a thread.
struct Running {
    child: Child,
    err: StderrLines,
}

impl Running {
    fn start(cmd: &mut Command) -> Running {
        let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
        let err = StderrLines::follow(&mut child);
        Running { child, err }
    }

    /// Waits (up to 60 s) for a stderr line containing `needle`; returns that line.
    fn wait_for(&mut self, needle: &str) -> String {
        if let Some(l) = self.err.wait_for(needle, Duration::from_secs(60)) {
            return l;
        }
        let _ = self.child.kill();
        panic!("no '{needle}' on stderr; got:\n{}", self.err.seen);
    }

    /// Sends `sig` and asserts the command exits 130 within [`PROMPT`], saying "interrupted"
    /// and nothing about a failed system call.
    fn interrupt(mut self, sig: &str, what: &str) -> String {
        signal(self.child.id(), sig);
        let sent = Instant::now();
        let status = wait_exit(&mut self.child, PROMPT);
        self.err.drain(Duration::from_millis(500));
        let Some(status) = status else {
            // It was killed: delete the namespaces it could not (those of dead processes).
            if is_root() {
                let _ = Command::new(env!("CARGO_BIN_EXE_zcnet"))
                    .args(["lab", "cleanup"])
                    .output();
            }
            panic!(
                "{what}: still running {:.1} s after SIG{sig}; stderr:\n{}",
                sent.elapsed().as_secs_f64(),
                self.err.seen
            );
        };
        assert_eq!(
            status.code(),
            Some(130),
            "{what} SIG{sig}: {}",
            self.err.seen
        );
        let last = self.err.seen.lines().last().unwrap_or("");
        assert!(
            last.starts_with("zcnet: interrupted"),
            "{what} SIG{sig}: {}",
            self.err.seen
        );
        assert!(
            !self.err.seen.contains("Interrupted system call")
                && !self.err.seen.contains("os error 4"),
            "{what} SIG{sig}: {}",
            self.err.seen
        );
        std::mem::take(&mut self.err.seen)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn zcnet() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_zcnet"));
    c.stdin(Stdio::null()).stdout(Stdio::null());
    c
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args(["-s", sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -s {sig} {pid}");
}

/// Waits up to `limit` for `child` to exit; `None` (and the child killed) if it did not.
fn wait_exit(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let until = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st);
        }
        if Instant::now() >= until {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The port `zcnet recv` announced ("zcnet recv: listening on 127.0.0.1:PORT").
fn port_of(line: &str) -> u16 {
    line.trim().rsplit(':').next().unwrap().parse().unwrap()
}

/// Accepts one connection within 10 s (the listener is left non-blocking).
fn accept_within(l: &TcpListener) -> TcpStream {
    l.set_nonblocking(true).unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match l.accept() {
            Ok((s, _)) => return s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => panic!("zcnet did not connect: {e}"),
        }
    }
}

fn netns_list() -> String {
    let o = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Lets the command get into the state under test (the call it blocks in).
fn settle() {
    std::thread::sleep(Duration::from_millis(300));
}

#[zcnet_testkit::test]
fn recv_waiting_in_accept_stops() {
    for sig in SIGNALS {
        for rx in ["copy", "uring", "auto"] {
            let mut r = Running::start(zcnet().args([
                "recv",
                "--listen",
                "127.0.0.1:0",
                "--rx",
                rx,
                "--discard",
            ]));
            r.wait_for("listening on");
            settle();
            r.interrupt(sig, &format!("recv --rx {rx} in accept"));
        }
    }
}

#[zcnet_testkit::test]
fn recv_mid_transfer_stops() {
    for sig in SIGNALS {
        let mut r = Running::start(zcnet().args(["recv", "--listen", "127.0.0.1:0", "--discard"]));
        let port = port_of(&r.wait_for("listening on"));
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(&vec![7u8; 1 << 20]).unwrap();
        // The peer stays connected and silent: recv waits for more.
        settle();
        r.interrupt(sig, "recv mid-transfer");
        drop(s);
    }
}

/// Ctrl-C mid-run still prints the totals so far (and `--json` says `"interrupted": true`),
/// then exits 130: a long send or receive stopped by hand reports what it did, as iperf3 does.
#[zcnet_testkit::test]
fn interrupted_send_and_recv_still_print_their_totals() {
    let mut cmd = zcnet();
    cmd.args(["recv", "--listen", "127.0.0.1:0", "--discard", "--json"])
        .stdout(Stdio::piped());
    let mut r = Running::start(&mut cmd);
    let port = port_of(&r.wait_for("listening on"));
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(&vec![7u8; 1 << 20]).unwrap();
    settle();
    let mut out = r.child.stdout.take().unwrap();
    r.interrupt("INT", "recv --json mid-transfer");
    let mut doc = String::new();
    std::io::Read::read_to_string(&mut out, &mut doc).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&doc).unwrap();
    assert_eq!(doc["interrupted"], true, "{doc}");
    assert_eq!(doc["bytes"], 1 << 20, "{doc}");
    drop(s);

    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let mut cmd = zcnet();
    cmd.args(["send", &addr, "--duration", "60", "--json"])
        .stdout(Stdio::piped());
    let mut r = Running::start(&mut cmd);
    let mut peer = accept_within(&l);
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 20];
        while matches!(std::io::Read::read(&mut peer, &mut buf), Ok(n) if n > 0) {}
    });
    std::thread::sleep(Duration::from_millis(500));
    let mut out = r.child.stdout.take().unwrap();
    r.interrupt("INT", "send --json mid-run");
    let mut doc = String::new();
    std::io::Read::read_to_string(&mut out, &mut doc).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&doc).unwrap();
    assert_eq!(doc["interrupted"], true, "{doc}");
    assert!(doc["bytes"].as_u64().unwrap_or(0) > 0, "{doc}");
    reader.join().unwrap();
}

#[zcnet_testkit::test]
fn recv_blocked_writing_to_a_full_stdout_stops() {
    for sig in SIGNALS {
        // stdout is a pipe nobody reads: once it is full, recv blocks writing to it.
        let mut cmd = zcnet();
        cmd.args(["recv", "--listen", "127.0.0.1:0", "--rx", "copy"])
            .stdout(Stdio::piped());
        let mut r = Running::start(&mut cmd);
        let port = port_of(&r.wait_for("listening on"));
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let writer = std::thread::spawn(move || {
            let chunk = vec![1u8; 1 << 20];
            // Fails (reset or broken pipe) once zcnet is gone.
            for _ in 0..64 {
                if s.write_all(&chunk).is_err() {
                    break;
                }
            }
        });
        std::thread::sleep(Duration::from_millis(500));
        let _stdout = r.child.stdout.take();
        r.interrupt(sig, "recv blocked on stdout");
        writer.join().unwrap();
    }
}

#[zcnet_testkit::test]
fn send_waiting_for_stdin_stops() {
    for sig in SIGNALS {
        for tx in ["copy", "uring-zc"] {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap().to_string();
            let mut cmd = zcnet();
            // stdin: a pipe that is never written to (and never closed while zcnet runs).
            cmd.args(["send", &addr, "--tx", tx]).stdin(Stdio::piped());
            let mut r = Running::start(&mut cmd);
            let _peer = accept_within(&l);
            let _stdin = r.child.stdin.take();
            settle();
            r.interrupt(sig, &format!("send --tx {tx} reading stdin"));
        }
    }
}

#[zcnet_testkit::test]
fn send_to_a_peer_that_never_reads_stops() {
    for sig in SIGNALS {
        for tx in ["copy", "msg-zerocopy", "uring", "uring-zc", "auto"] {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap().to_string();
            let r = Running::start(
                zcnet().args(["send", &addr, "--tx", tx, "--verify", "--bytes", "4G"]),
            );
            // Accepted, never read: the socket buffers fill and the sender waits (in send(),
            // or for completions that cannot come).
            let _peer = accept_within(&l);
            std::thread::sleep(Duration::from_millis(500));
            r.interrupt(sig, &format!("send --tx {tx} to a stalled peer"));
        }
    }
}

#[zcnet_testkit::test]
fn send_waiting_in_connect_stops() {
    need_root("a private network namespace whose peer never answers");
    zcnet_testkit::require_tool("unshare", "util-linux: a private network namespace");
    for sig in SIGNALS {
        // A private namespace (gone with the process) where 10.9.9.2 has a neighbour entry but
        // nobody answers its SYNs: connect() would wait out the SYN retries (minutes).
        let script = format!(
            "ip link add v0 type veth peer name v1 && ip addr add 10.9.9.1/24 dev v0 && \
             ip link set v0 up && ip link set v1 up && \
             ip neigh add 10.9.9.2 lladdr 02:00:00:00:00:02 dev v0 nud permanent && \
             exec {} send 10.9.9.2:5201 --verify --bytes 1M",
            env!("CARGO_BIN_EXE_zcnet")
        );
        let mut cmd = Command::new("unshare");
        cmd.args(["-n", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        let r = Running::start(&mut cmd);
        let pid = r.child.id();
        // unshare and sh exec in place: the pid becomes zcnet's, with a socket in SYN_SENT.
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let tcp = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
            let syn_sent = tcp
                .lines()
                .skip(1)
                .any(|l| l.split_whitespace().nth(3) == Some("02"));
            if comm.trim() == "zcnet" && syn_sent {
                break;
            }
            assert!(
                Instant::now() < until,
                "zcnet never reached connect: {comm:?} {tcp}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        settle();
        r.interrupt(sig, "send in connect");
    }
}

#[zcnet_testkit::test]
fn bench_tx_loopback_mid_case_stops() {
    for sig in SIGNALS {
        let mut r = Running::start(zcnet().args([
            "bench",
            "tx",
            "--path",
            "loopback",
            "--tx",
            "copy",
            "--size",
            "64K",
            "--duration",
            "30",
        ]));
        r.wait_for("[1/1] loopback copy");
        settle();
        r.interrupt(sig, "bench tx loopback");
    }
}

/// Ctrl-C in `bench tx` keeps the cases measured before it: they are printed (table or
/// JSON), then the exit is 130.
#[zcnet_testkit::test]
fn bench_tx_interrupted_prints_the_cases_already_measured() {
    for json in [false, true] {
        // Two cases of 16K measured, then the signal during the first 64K one.
        let mut args = vec![
            "bench",
            "tx",
            "--path",
            "loopback",
            "--tx",
            "copy,uring",
            "--size",
            "16K,64K",
            "--duration",
            "0.5",
        ];
        if json {
            args.push("--json");
        }
        let mut r = Running::start(zcnet().args(&args).stdout(Stdio::piped()));
        r.wait_for("[3/4] loopback copy 65536");
        let out = r.child.stdout.take().unwrap();
        r.interrupt("INT", "bench tx with rows measured");
        let mut text = String::new();
        std::io::Read::read_to_string(&mut { out }, &mut text).unwrap();
        if json {
            let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(doc["interrupted"], true, "{doc}");
            let rows = doc["results"].as_array().unwrap();
            assert_eq!(rows.len(), 2, "{doc}");
            assert!(rows.iter().all(|r| r["size"] == 16384), "{doc}");
        } else {
            assert!(
                text.contains("loopback  copy               16384")
                    && text.contains("loopback  uring              16384")
                    && !text.contains("65536"),
                "{text}"
            );
        }
    }
}

#[zcnet_testkit::test]
fn bench_rx_loopback_mid_case_stops() {
    for sig in SIGNALS {
        let mut r = Running::start(zcnet().args([
            "bench",
            "rx",
            "--path",
            "loopback",
            "--rx",
            "copy",
            "--duration",
            "30",
            "--connections",
            "2",
            "--threads",
            "1",
        ]));
        r.wait_for("[1/1] loopback copy");
        settle();
        r.interrupt(sig, "bench rx loopback");
    }
}

#[zcnet_testkit::test]
fn bench_tx_lab_cases_stop_and_leave_no_namespace() {
    need_root("the namespace lab");
    // veth (a TCP case between two namespaces), and the sink's raw SEND_ZC and MSG_ZEROCOPY
    // baselines, the cases that are loops of their own: a mode and its raw loop alternate in
    // three runs of a third of --duration each, so the raw loop's first run is case 2 of 6,
    // signalled 0.3 s into its own 1.3 s.
    let cases: [(&[&str], &str); 3] = [
        (
            &[
                "--path",
                "veth",
                "--tx",
                "copy",
                "--size",
                "64K",
                "--duration",
                "30",
            ],
            "[1/1] veth copy",
        ),
        (
            &[
                "--path",
                "sink",
                "--tx",
                "uring-zc",
                "--size",
                "16K",
                "--duration",
                "4",
            ],
            "[2/6] sink raw-uring-zc",
        ),
        (
            &[
                "--path",
                "sink",
                "--tx",
                "msg-zerocopy",
                "--size",
                "16K",
                "--duration",
                "4",
            ],
            "[2/6] sink raw-msg-zerocopy",
        ),
    ];
    for sig in SIGNALS {
        for (args, progress) in cases {
            let mut r = Running::start(zcnet().args(["bench", "tx"]).args(args));
            let pid = r.child.id();
            r.wait_for(progress);
            let prefix = format!("zcnet-{pid}-");
            assert!(
                netns_list().contains(&prefix),
                "lab not up: {}",
                netns_list()
            );
            settle();
            r.interrupt(sig, progress);
            let after = netns_list();
            assert!(
                !after.contains(&prefix),
                "{progress} SIG{sig}: namespaces left: {after}"
            );
        }
    }
}

zcnet_testkit::main!();
