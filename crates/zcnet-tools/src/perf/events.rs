//! What wakes the controlling thread of a client or server: bytes on the control connection,
//! a stream thread's notice, a new connection, a data stream's cookie. Each source is a
//! thread that blocks on its socket and sends [`Event`]s into one channel, so the controlling
//! thread waits in one place, with a timeout for its timers.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use super::proto::{Cookie, COOKIE_SIZE};
use super::streams::Notice;

/// Something for the controlling thread. `test` numbers tell a late event of an earlier test
/// apart.
#[derive(Debug)]
pub enum Event {
    /// Bytes from the control connection of test `test`; empty when the peer closed it.
    Control(u64, std::io::Result<Vec<u8>>),
    /// A stream thread of test `test` has news.
    Stream(u64, Notice),
    /// A connection to the server's port.
    Accepted(TcpStream, SocketAddr),
    /// The first bytes of data connection `seq` of test `test`: the 37-byte cookie, or
    /// `None` when it closed or stayed silent first.
    Cookie(u64, u64, Option<Vec<u8>>),
    /// A UDP stream of test `test` completed its handshake (or the wait for it failed).
    Udp(u64, std::io::Result<std::net::UdpSocket>),
}

/// Wraps a stream thread's notice (for [`super::streams::Notifier`]).
pub fn stream_event(test: u64, n: Notice) -> Event {
    Event::Stream(test, n)
}

/// Reads the control connection until it closes, forwarding what arrives. The thread ends
/// when the socket is shut down (the test is over) or the peer closes it.
pub fn spawn_control_reader(
    mut ctrl: TcpStream,
    test: u64,
    tx: mpsc::Sender<Event>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("perf-control".into())
        .spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let r = ctrl.read(&mut buf);
                let end = !matches!(r, Ok(n) if n > 0);
                if tx
                    .send(Event::Control(test, r.map(|n| buf[..n].to_vec())))
                    .is_err()
                    || end
                {
                    return;
                }
            }
        })
        .map(drop)
}

/// Accepts connections on the server's port until `stop` is set (the server wakes this
/// thread by connecting to itself once more).
pub fn spawn_acceptor(
    listener: TcpListener,
    stop: Arc<AtomicBool>,
    tx: mpsc::Sender<Event>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("perf-accept".into())
        .spawn(move || loop {
            let r = listener.accept();
            if stop.load(Ordering::Relaxed) {
                return;
            }
            match r {
                Ok((s, peer)) => {
                    if tx.send(Event::Accepted(s, peer)).is_err() {
                        return;
                    }
                }
                // A connection reset before it was accepted, or out of descriptors: wait a
                // little and go on (iperf3 would exit; a server should not).
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        })
        .map(drop)
}

/// Reads the cookie a data connection opens with, waiting at most `timeout`; the result
/// arrives as [`Event::Cookie`]. Exactly 37 bytes are read: the data behind them is the
/// stream's.
pub fn spawn_cookie_reader(
    mut s: TcpStream,
    test: u64,
    seq: u64,
    timeout: Duration,
    tx: mpsc::Sender<Event>,
) -> std::io::Result<()> {
    s.set_read_timeout(Some(timeout))?;
    std::thread::Builder::new()
        .name("perf-cookie".into())
        .spawn(move || {
            let mut cookie = vec![0u8; COOKIE_SIZE];
            let got = s.read_exact(&mut cookie).ok().map(|()| cookie);
            let _ = s.set_read_timeout(None);
            let _ = tx.send(Event::Cookie(test, seq, got));
        })
        .map(drop)
}

/// A fresh cookie from the kernel's random bytes (`make_cookie` uses `random()`; any source
/// that does not repeat will do).
pub fn new_cookie() -> std::io::Result<Cookie> {
    let mut random = [0u8; COOKIE_SIZE - 1];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut random)?;
    Ok(Cookie::from_random(&random))
}

/// Server: completes the UDP handshakes of a test's `count` streams on `first` (bound to the
/// control port) one after another, each answered only once the socket for the next is
/// bound; each arrives as [`Event::Udp`].
pub fn spawn_udp_acceptor(
    first: std::net::UdpSocket,
    listen: SocketAddr,
    count: usize,
    timeout: Duration,
    test: u64,
    tx: mpsc::Sender<Event>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("perf-udp-accept".into())
        .spawn(move || {
            let mut sock = first;
            for k in 0..count {
                let next = (k + 1 < count).then_some(listen);
                match super::udp::server_accept(&sock, timeout, next) {
                    Ok(n) => {
                        let _ = tx.send(Event::Udp(test, Ok(sock)));
                        match n {
                            Some(n) => sock = n,
                            None => return,
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Event::Udp(test, Err(e)));
                        return;
                    }
                }
            }
        })
        .map(drop)
}
