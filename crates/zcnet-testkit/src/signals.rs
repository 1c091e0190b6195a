//! Ending a wait from outside, as the interrupt and cancel tests do: a signal a test sends to
//! its own process (the Ctrl-C of the interrupt tests), or any other call (a cancel token).

use std::process::Command;
use std::time::{Duration, Instant};

/// Sends `sig` ("INT", "TERM") to this process with `kill -s`.
pub fn signal_self(sig: &str) {
    let ok = Command::new("kill")
        .args(["-s", sig, &std::process::id().to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -s {sig}");
}

/// Runs `f` in a thread, sends `sig` to this process 200 ms later (asserting that `f` has not
/// returned by then), and returns what `f` returned and how long after the signal it did. Fails
/// if `f` has not returned `within` after the signal.
pub fn signal_while<T: Send + 'static>(
    sig: &str,
    within: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> (T, Duration) {
    end_while(&format!("SIG{sig}"), || signal_self(sig), within, f)
}

/// Runs `f` in a thread, calls `end` 200 ms later (asserting that `f` has not returned by then:
/// "returned before {what}"), and returns what `f` returned and how long after `end` it did.
/// Fails ("{what} did not end the wait") if `f` has not returned `within` after `end`.
pub fn end_while<T: Send + 'static>(
    what: &str,
    end: impl FnOnce(),
    within: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> (T, Duration) {
    let h = std::thread::spawn(f);
    std::thread::sleep(Duration::from_millis(200));
    assert!(!h.is_finished(), "returned before {what}");
    let t0 = Instant::now();
    end();
    let until = t0 + within;
    while !h.is_finished() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(h.is_finished(), "{what} did not end the wait");
    match h.join() {
        Ok(v) => (v, t0.elapsed()),
        Err(p) => std::panic::resume_unwind(p),
    }
}
