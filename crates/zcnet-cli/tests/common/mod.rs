//! Helpers shared by the CLI integration tests (each test file is its own crate and uses a
//! part of them).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};

/// Whether the tests run as root (uid 0).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}

/// What a command printed on stderr.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Whether `zcnet` can be run as an unprivileged user here: root, and `setpriv` installed.
/// Prints why not when it cannot.
pub fn can_run_as_nobody() -> bool {
    let have_setpriv = Command::new("setpriv").arg("--help").output().is_ok();
    if !is_root() || !have_setpriv {
        eprintln!("skipped: needs root and setpriv to run zcnet as an unprivileged user");
        return false;
    }
    true
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
