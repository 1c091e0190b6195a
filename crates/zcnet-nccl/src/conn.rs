//! Connection set-up without blocking the caller: `listen` binds and returns at once, `connect`
//! hands the dialling to a short-lived thread and answers "not yet" until it is done, `accept`
//! takes what has arrived and answers "not yet" until every socket of one connection is there.
//!
//! The greeting is bounded in time and in number: each data socket starts with a hello and the
//! listener answers it with [`WELCOME`], so the connecting side knows its peer took the socket.
//! `connect` fails (ncclRemoteError) when the whole connection, connects and answers included,
//! takes longer than `ZCNET_NCCL_CONNECT_TIMEOUT_MS`, or the peer refuses, closes or never
//! answers. `accept` fails (ncclRemoteError) for an accepted socket whose hello is not complete
//! within that time (a silent peer, a partial hello, one closed mid-hello) and for a connection
//! whose sockets do not all arrive within it, closing their sockets; at most
//! [`MAX_GREETING`] accepted sockets wait for their hello (the rest wait in the kernel's
//! accept queue). Garbage instead of a hello is a stranger: closed, and the listener waits on.

use crate::error::{PluginError, Result};
use crate::handle::{Handle, Hello, HELLO_LEN, WELCOME};
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

/// Accepted sockets that may wait for their hello at once; more stay in the kernel's accept
/// queue until these said hello or ran out of time.
pub const MAX_GREETING: usize = 64;

/// An accepted socket reading its hello.
#[derive(Debug)]
struct Greeting {
    sock: TcpStream,
    peer: SocketAddr,
    buf: [u8; HELLO_LEN],
    got: usize,
    since: Instant,
}

/// The sockets of one connection that said hello, by index.
#[derive(Debug)]
struct Group {
    socks: Vec<Option<TcpStream>>,
    since: Instant,
}

impl Group {
    fn complete(&self) -> bool {
        self.socks.iter().all(Option::is_some)
    }
}

/// A listening endpoint.
#[derive(Debug)]
pub struct Listen {
    listener: TcpListener,
    handle: Handle,
    /// How long a socket may take to say hello, and a connection to bring all its sockets.
    timeout: Duration,
    /// Accepted sockets still reading their hello (at most [`MAX_GREETING`]).
    greeting: Vec<Greeting>,
    /// Sockets per connection nonce.
    groups: HashMap<u64, Group>,
}

impl Listen {
    /// Binds to `ip` (port chosen by the kernel); connections get `timeout` to greet.
    pub fn new(ip: std::net::IpAddr, nsocks: u16, timeout: Duration) -> Result<Listen> {
        let listener = TcpListener::bind(SocketAddr::new(ip, 0))
            .map_err(|e| PluginError::io(format!("listen on {ip}"), &e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| PluginError::io("listen: O_NONBLOCK", &e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| PluginError::io("listen: local address", &e))?;
        Ok(Listen {
            listener,
            handle: Handle {
                addr,
                nsocks,
                nonce: fresh_nonce(),
            },
            timeout,
            greeting: Vec::new(),
            groups: HashMap::new(),
        })
    }

    /// The handle to give the connecting side.
    pub fn handle(&self) -> Handle {
        self.handle
    }

    /// Makes progress; returns a connection's sockets (in index order) once all arrived. A
    /// greeting or a connection past its time fails it (its sockets closed); the listener
    /// stays usable.
    pub fn accept(&mut self) -> Result<Option<Vec<TcpStream>>> {
        // The sockets one call takes from the kernel's queue share one start of their time: a
        // batch of silent peers then runs out of time together, however long taking them took
        // (under load, a batch of 64 timed out over two calls, 8 of them a call late).
        let now = Instant::now();
        while self.greeting.len() < MAX_GREETING {
            match self.listener.accept() {
                Ok((sock, peer)) => {
                    sock.set_nonblocking(true)
                        .map_err(|e| PluginError::io("accept: O_NONBLOCK", &e))?;
                    self.greeting.push(Greeting {
                        sock,
                        peer,
                        buf: [0u8; HELLO_LEN],
                        got: 0,
                        since: now,
                    });
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(PluginError::io("accept", &e)),
            }
        }
        let mut failed: Option<PluginError> = None;
        let mut i = 0;
        while i < self.greeting.len() {
            let g = &mut self.greeting[i];
            match g.sock.read(&mut g.buf[g.got..]) {
                Ok(0) => {
                    // Closed before saying hello: a port probe (nothing said) is forgotten; a
                    // peer that died in the middle of its hello fails the accept.
                    let g = self.greeting.swap_remove(i);
                    if g.got > 0 {
                        failed.get_or_insert(PluginError::Remote(format!(
                            "a connection from {} closed after {} of the {HELLO_LEN} bytes of its hello",
                            g.peer, g.got
                        )));
                    }
                    continue;
                }
                Ok(n) => g.got += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    let g = self.greeting.swap_remove(i);
                    if g.got > 0 {
                        failed.get_or_insert(PluginError::Remote(format!(
                            "a connection from {} failed after {} of the {HELLO_LEN} bytes of its hello: {e}",
                            g.peer, g.got
                        )));
                    }
                    continue;
                }
            }
            let g = &self.greeting[i];
            if g.got < HELLO_LEN {
                if g.since.elapsed() >= self.timeout {
                    let g = self.greeting.swap_remove(i);
                    let said = match g.got {
                        0 => "no hello".to_string(),
                        n => format!("{n} of the {HELLO_LEN} bytes of its hello"),
                    };
                    failed.get_or_insert(PluginError::Remote(format!(
                        "a connection from {} sent {said} within {} ms: closed",
                        g.peer,
                        self.timeout.as_millis()
                    )));
                    continue;
                }
                i += 1;
                continue;
            }
            let g = self.greeting.swap_remove(i);
            let h = match Hello::decode(&g.buf) {
                Ok(h) if h.nonce == self.handle.nonce && h.nsocks == self.handle.nsocks => h,
                // A stranger on our port: drop it and keep listening for the real peer.
                Ok(_) | Err(_) => {
                    crate::log::warn(&format!(
                        "dropped a connection from {} to {} that is not a zcnet data socket of this listener",
                        g.peer, self.handle.addr
                    ));
                    continue;
                }
            };
            // The answer fits any empty socket buffer: a failure means the peer is gone.
            if let Err(e) = (&g.sock).write_all(&WELCOME) {
                failed.get_or_insert(PluginError::Remote(format!(
                    "answering the hello of socket {} from {}: {e}",
                    h.index, g.peer
                )));
                continue;
            }
            let group = self.groups.entry(h.nonce).or_insert_with(|| Group {
                socks: (0..h.nsocks).map(|_| None).collect(),
                since: g.since,
            });
            group.socks[usize::from(h.index)] = Some(g.sock);
        }
        let timeout = self.timeout;
        let late: Vec<u64> = self
            .groups
            .iter()
            .filter(|(_, g)| !g.complete() && g.since.elapsed() >= timeout)
            .map(|(k, _)| *k)
            .collect();
        for k in late {
            if let Some(g) = self.groups.remove(&k) {
                failed.get_or_insert(PluginError::Remote(format!(
                    "{} of the {} sockets of a connection arrived within {} ms: closed",
                    g.socks.iter().flatten().count(),
                    g.socks.len(),
                    timeout.as_millis()
                )));
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        let done = self
            .groups
            .iter()
            .find(|(_, g)| g.complete())
            .map(|(k, _)| *k);
        Ok(done
            .and_then(|k| self.groups.remove(&k))
            .map(|g| g.socks.into_iter().flatten().collect()))
    }
}

fn fresh_nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish() | 1
}

/// A connect in progress (on its own thread).
#[derive(Debug)]
pub struct Dialing {
    rx: Receiver<Result<Vec<TcpStream>>>,
}

impl Dialing {
    /// Starts connecting every socket of `h` and greeting on each, all within `timeout`.
    pub fn start(h: Handle, timeout: Duration) -> Result<Dialing> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("zcnet-nccl-connect".into())
            .spawn(move || {
                let _ = tx.send(dial(h, timeout));
            })
            .map_err(|e| PluginError::io("connect: spawning a thread", &e))?;
        Ok(Dialing { rx })
    }

    /// The sockets, once connected.
    pub fn poll(&self) -> Result<Option<Vec<TcpStream>>> {
        match self.rx.try_recv() {
            Ok(r) => r.map(Some),
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Disconnected) => Err(PluginError::Internal(
                "connect thread ended without an answer".into(),
            )),
        }
    }
}

/// Connects every socket of `h`, says hello on each and waits for the answer, all before
/// `timeout` runs out. Every socket made is closed on failure.
fn dial(h: Handle, timeout: Duration) -> Result<Vec<TcpStream>> {
    let deadline = Instant::now() + timeout;
    let left = || {
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    };
    let ms = timeout.as_millis();
    let addr = h.addr;
    (0..h.nsocks)
        .map(|index| {
            let mut s = TcpStream::connect_timeout(&addr, left()).map_err(|e| match e.kind() {
                ErrorKind::ConnectionRefused
                | ErrorKind::ConnectionReset
                | ErrorKind::TimedOut
                | ErrorKind::WouldBlock => PluginError::Remote(format!(
                    "connect to {addr} (socket {index}, {ms} ms allowed): {e}"
                )),
                _ => PluginError::io(format!("connect to {addr}"), &e),
            })?;
            let hello = Hello {
                nonce: h.nonce,
                index,
                nsocks: h.nsocks,
            };
            let gone = |what: &str, e: std::io::Error| {
                PluginError::Remote(match e.kind() {
                    ErrorKind::WouldBlock | ErrorKind::TimedOut => format!(
                        "{addr} did not {what} of socket {index} within {ms} ms: not a zcnet listener, or one that stopped"
                    ),
                    ErrorKind::UnexpectedEof => format!(
                        "{addr} closed socket {index} before it answered its hello: the peer went away"
                    ),
                    _ => format!("{addr}, socket {index}: {e} (the peer went away)"),
                })
            };
            s.set_write_timeout(Some(left()))
                .and_then(|()| s.write_all(&hello.encode()))
                .map_err(|e| gone("take the hello", e))?;
            let mut answer = [0u8; WELCOME.len()];
            s.set_read_timeout(Some(left()))
                .and_then(|()| s.read_exact(&mut answer))
                .map_err(|e| gone("answer the hello", e))?;
            if answer != WELCOME {
                return Err(PluginError::Remote(format!(
                    "{addr} answered the hello of socket {index} with {answer:02x?}: not a zcnet listener"
                )));
            }
            s.set_read_timeout(None)
                .and_then(|()| s.set_write_timeout(None))
                .and_then(|()| s.set_nonblocking(true))
                .map_err(|e| PluginError::io("connect: socket options", &e))?;
            let _ = s.set_nodelay(true);
            Ok(s)
        })
        .collect()
}
