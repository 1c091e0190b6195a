//! The interrupt pipe: SIGINT/SIGTERM wake every wait made with `os::wait_fd` and `os::sleep`,
//! in whichever thread it runs — the kernel delivers a process-directed signal to any one
//! thread — and set the flag of `os::set_on_interrupt`, which cuts a connect waiting on it
//! short. One test: the interrupt flag is process-wide, so the steps run in order in this
//! process of their own.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::net::TcpListener;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use zcnet_sys::os::{self, Wake};
use zcnet_sys::sock;
use zcnet_testkit::signals::signal_while;

/// A wait in a thread, ended by `sig` sent to this process (within 5 s).
fn wait_in_thread_then_signal<T: Send + 'static>(
    sig: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> (T, Duration) {
    signal_while(sig, Duration::from_secs(5), f)
}

#[zcnet_testkit::test]
fn sigint_and_sigterm_wake_waits_in_every_thread() {
    // SIGHUP as a terminal leaves it (a runner started under nohup ignores it, and the handler
    // then leaves it ignored, which is not what this checks).
    // SAFETY: restores the default action of one signal in this test's own process.
    unsafe { libc::signal(libc::SIGHUP, libc::SIG_DFL) };
    os::install_interrupt_handler().unwrap();
    os::install_interrupt_handler().unwrap(); // a second call changes nothing
    let stop = Arc::new(AtomicBool::new(false));
    os::set_on_interrupt(stop.clone());

    // Before any signal: waits time out or see readiness, and connect works as connect does.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    assert_eq!(
        os::wait_fd(l.as_fd(), libc::POLLIN, Some(Duration::from_millis(50))).unwrap(),
        Wake::TimedOut
    );
    assert!(!os::sleep(Duration::from_millis(20)));
    let c = sock::connect_tcp(&addr, None, &stop).unwrap();
    assert!(matches!(
        os::wait_fd(l.as_fd(), libc::POLLIN, None).unwrap(),
        Wake::Ready(r) if r & libc::POLLIN != 0
    ));
    let (server, _) = l.accept().unwrap();
    // The stream handed back is blocking again, as TcpStream::connect's is.
    std::io::Write::write_all(&mut &c, b"hi").unwrap();
    let mut got = [0u8; 2];
    std::io::Read::read_exact(&mut &server, &mut got).unwrap();
    assert_eq!(&got, b"hi");
    let gone = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let e = sock::connect_tcp(&gone, None, &stop).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");

    // SIGTERM ends a wait for a connection that never comes, in another thread.
    let l2 = l.try_clone().unwrap();
    let (r, after) = wait_in_thread_then_signal("TERM", move || {
        os::wait_fd(l2.as_fd(), libc::POLLIN, None).unwrap()
    });
    assert_eq!(r, Wake::Interrupted);
    assert!(after < Duration::from_secs(1), "{after:?}");
    assert!(os::interrupted());
    assert!(
        stop.load(Ordering::SeqCst),
        "the signal sets the flag of set_on_interrupt"
    );
    // The flag stays up: every later wait returns at once, connect included.
    assert_eq!(
        os::wait_fd(l.as_fd(), libc::POLLIN, None).unwrap(),
        Wake::Interrupted
    );
    assert!(os::sleep(Duration::from_secs(60)));
    let e = sock::connect_tcp(&addr, None, &stop).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::Interrupted, "{e}");

    // Cleared, the waits wait again (the pipe was drained) ...
    os::set_interrupted(false);
    assert!(!os::interrupted());
    assert!(!stop.load(Ordering::SeqCst));
    // (`l` has the connection that was cut short above in its queue: a fresh listener.)
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    assert_eq!(
        os::wait_fd(l.as_fd(), libc::POLLIN, Some(Duration::from_millis(50))).unwrap(),
        Wake::TimedOut
    );
    // ... until SIGINT, which ends a long sleep in another thread.
    let (slept, after) = wait_in_thread_then_signal("INT", || os::sleep(Duration::from_secs(60)));
    assert!(slept);
    assert!(after < Duration::from_secs(1), "{after:?}");

    // SIGHUP (a terminal gone) ends a sleep the same way.
    os::set_interrupted(false);
    let (slept, after) = wait_in_thread_then_signal("HUP", || os::sleep(Duration::from_secs(60)));
    assert!(slept);
    assert!(after < Duration::from_secs(1), "{after:?}");

    // set_interrupted(true) wakes a waiter as a signal does.
    os::set_interrupted(false);
    let l3 = l.try_clone().unwrap();
    let h = std::thread::spawn(move || os::wait_fd(l3.as_fd(), libc::POLLIN, None).unwrap());
    std::thread::sleep(Duration::from_millis(100));
    os::set_interrupted(true);
    assert_eq!(h.join().unwrap(), Wake::Interrupted);
}

/// `wait_fd_until` and `sleep_until` know no signal: the caller's flag, set from another
/// thread, ends them within a few of their polls.
#[zcnet_testkit::test]
fn a_stop_flag_ends_waits_made_with_it() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    assert_eq!(
        os::wait_fd_until(
            l.as_fd(),
            libc::POLLIN,
            Some(Duration::from_millis(30)),
            &stop
        )
        .unwrap(),
        Wake::TimedOut
    );
    assert!(!os::sleep_until(Duration::from_millis(10), &stop));
    let (l2, s2) = (l.try_clone().unwrap(), stop.clone());
    let waiter =
        std::thread::spawn(move || os::wait_fd_until(l2.as_fd(), libc::POLLIN, None, &s2).unwrap());
    let s3 = stop.clone();
    let sleeper = std::thread::spawn(move || os::sleep_until(Duration::from_secs(60), &s3));
    std::thread::sleep(Duration::from_millis(100));
    assert!(!waiter.is_finished() && !sleeper.is_finished());
    let t0 = Instant::now();
    stop.store(true, Ordering::SeqCst);
    assert_eq!(waiter.join().unwrap(), Wake::Interrupted);
    assert!(sleeper.join().unwrap());
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
}

zcnet_testkit::main!();
