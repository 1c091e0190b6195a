//! Helpers shared by the CLI integration tests (each test file is its own crate and uses a
//! part of them).
#![allow(dead_code)]

pub mod cli;
pub mod lab_guest;
pub mod probe;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};

/// Whether the tests run as root (uid 0).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}

/// Runs `zcnet` with `args` to its end.
pub fn zcnet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zcnet"))
        .args(args)
        .output()
        .unwrap()
}

/// What a command printed on stderr.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Skips the calling test unless `zcnet` can be run as an unprivileged user here: root, and
/// `setpriv` installed.
pub fn need_nobody() {
    zcnet_testkit::require_root("to run zcnet as an unprivileged user");
    zcnet_testkit::require_tool("setpriv", "util-linux: runs zcnet as an unprivileged user");
}

/// Skips the calling test unless root (`what` says what needs it).
pub fn need_root(what: &str) {
    zcnet_testkit::require_root(what);
}

/// Runs `zcnet ARGS` as user and group 65534 (nobody), no supplementary groups.
pub fn zcnet_as_nobody(args: &[&str]) -> Output {
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            env!("CARGO_BIN_EXE_zcnet"),
        ])
        .args(args)
        .output()
        .unwrap()
}

/// Starts `zcnet recv --listen 127.0.0.1:0 EXTRA` with `stdout` (stderr piped); returns the child
/// and the port it printed.
pub fn start_recv(extra: &[&str], stdout: Stdio) -> (Child, u16) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_zcnet"))
        .args(["recv", "--listen", "127.0.0.1:0"])
        .args(extra)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    (child, port)
}

/// A child's stderr, read line by line in a thread of its own, and all of it read so far.
pub struct StderrLines {
    lines: std::sync::mpsc::Receiver<String>,
    /// Every line read so far, each with its newline.
    pub seen: String,
}

impl StderrLines {
    /// Takes `child`'s stderr (which must be piped) and starts reading it.
    pub fn follow(child: &mut Child) -> StderrLines {
        let err = child.stderr.take().expect("stderr piped");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        StderrLines {
            lines,
            seen: String::new(),
        }
    }

    /// Waits up to `limit` for a line containing `needle` and returns it; `None` when the
    /// time is up or stderr ends first.
    pub fn wait_for(&mut self, needle: &str, limit: std::time::Duration) -> Option<String> {
        let until = std::time::Instant::now() + limit;
        while let Some(left) = until.checked_duration_since(std::time::Instant::now()) {
            let l = self.lines.recv_timeout(left).ok()?;
            self.seen.push_str(&l);
            self.seen.push('\n');
            if l.contains(needle) {
                return Some(l);
            }
        }
        None
    }

    /// Reads what still comes, until nothing has for `quiet`.
    pub fn drain(&mut self, quiet: std::time::Duration) {
        while let Ok(l) = self.lines.recv_timeout(quiet) {
            self.seen.push_str(&l);
            self.seen.push('\n');
        }
    }
}
