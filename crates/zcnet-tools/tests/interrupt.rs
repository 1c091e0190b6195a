//! The commands' Ctrl-C: once `interrupt::install_handler` ran, SIGINT/SIGTERM cancel the
//! commands' token, so a library call holding it ends with `Error::Interrupted` (an accept
//! nobody connects to), and the commands' own waits end too (a child process, which is sent
//! SIGTERM and reaped first; a hold). One test: the signal is process-wide, so the steps run
//! in order in this process of their own.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::net::TcpListener;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::time::Duration;
use zcnet::{net, Error};
use zcnet_tools::interrupt;

/// A wait in a thread, ended by `sig` sent to this process (within 10 s); the interrupt flag is
/// cleared first.
fn signal_while<T: Send + 'static>(
    sig: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> (T, Duration) {
    zcnet::os::set_interrupted(false);
    assert!(!interrupt::interrupted());
    zcnet_testkit::signals::signal_while(sig, Duration::from_secs(10), f)
}

#[zcnet_testkit::test]
fn signals_cancel_the_commands_token_and_end_their_waits() {
    interrupt::install_handler().unwrap();

    // A library call given the token: accept with nobody connecting.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (r, after) = signal_while("TERM", move || {
        net::accept(&l, &interrupt::token()).map(|_| ())
    });
    assert!(matches!(r, Err(Error::Interrupted)), "{r:?}");
    assert!(after < Duration::from_secs(1), "{after:?}");
    assert!(interrupt::interrupted() && interrupt::token().is_cancelled());
    // The token stays cancelled: connect returns at once too.
    assert!(matches!(
        net::connect_tcp(addr, &interrupt::token()),
        Err(Error::Interrupted)
    ));

    // A child that would run for a minute: sent SIGTERM and reaped, then Interrupted.
    let mut child = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = child.id();
    let (r, after) = signal_while("TERM", move || {
        let r = interrupt::wait_child(&mut child).map(|_| ());
        (r, child.try_wait().unwrap())
    });
    assert!(matches!(r.0, Err(Error::Interrupted)), "{:?}", r.0);
    let st = r.1.unwrap_or_else(|| panic!("child {pid} still running"));
    assert_eq!(st.signal(), Some(15), "{st:?}");
    assert!(after < Duration::from_secs(2), "{after:?}");

    // A hold (sleep) ends on SIGINT and says so.
    let (slept, after) = signal_while("INT", || interrupt::sleep(Duration::from_secs(3600)));
    assert!(slept);
    assert!(after < Duration::from_secs(1), "{after:?}");
}

zcnet_testkit::main!();
