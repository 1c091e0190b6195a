//! Helpers of the `cli` tests: `zcnet` run as a user runs it, its JSON document, and a
//! `zcnet recv` on an ephemeral port.

use std::process::{Child, Command, Output, Stdio};

use super::stderr;

/// The `zcnet` command, to be given its arguments.
pub fn zcnet() -> Command {
    Command::new(env!("CARGO_BIN_EXE_zcnet"))
}

/// Runs `zcnet ARGS` to its end.
pub fn run(args: &[&str]) -> Output {
    zcnet().args(args).output().unwrap()
}

/// Runs `zcnet ARGS` (which must print one JSON document), asserts success, returns the document.
pub fn run_json(args: &[&str]) -> serde_json::Value {
    let o = run(args);
    assert!(o.status.success(), "zcnet {args:?}: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Starts `zcnet recv` on an ephemeral port, stdout piped; returns the child and the port.
pub fn start_recv(extra: &[&str]) -> (Child, u16) {
    super::start_recv(extra, Stdio::piped())
}
