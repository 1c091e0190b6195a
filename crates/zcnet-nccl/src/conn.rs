//! Connection set-up without blocking the caller: `listen` binds and returns at once, `connect`
//! hands the dialling to a short-lived thread and answers "not yet" until it is done, `accept`
//! takes what has arrived and answers "not yet" until every socket of one connection is there.

use crate::error::{PluginError, Result};
use crate::handle::{Handle, Hello, HELLO_LEN};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Duration;

/// How long one socket's connect may take before `connect` fails.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// A listening endpoint.
#[derive(Debug)]
pub struct Listen {
    listener: TcpListener,
    handle: Handle,
    /// Accepted sockets still reading their hello.
    greeting: Vec<(TcpStream, [u8; HELLO_LEN], usize)>,
    /// Sockets per connection nonce, by index.
    groups: HashMap<u64, Vec<Option<TcpStream>>>,
}

impl Listen {
    /// Binds to `ip` (port chosen by the kernel).
    pub fn new(ip: std::net::IpAddr, nsocks: u16) -> Result<Listen> {
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
            greeting: Vec::new(),
            groups: HashMap::new(),
        })
    }

    /// The handle to give the connecting side.
    pub fn handle(&self) -> Handle {
        self.handle
    }

    /// Makes progress; returns a connection's sockets (in index order) once all arrived.
    pub fn accept(&mut self) -> Result<Option<Vec<TcpStream>>> {
        loop {
            match self.listener.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(true)
                        .map_err(|e| PluginError::io("accept: O_NONBLOCK", &e))?;
                    self.greeting.push((s, [0u8; HELLO_LEN], 0));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(PluginError::io("accept", &e)),
            }
        }
        let mut i = 0;
        while i < self.greeting.len() {
            let (s, buf, got) = &mut self.greeting[i];
            match s.read(&mut buf[*got..]) {
                Ok(0) => {
                    // Closed before saying hello: not ours, or a peer that died; forget it.
                    self.greeting.swap_remove(i);
                    continue;
                }
                Ok(n) => *got += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.greeting.swap_remove(i);
                    continue;
                }
            }
            if *got < HELLO_LEN {
                i += 1;
                continue;
            }
            let (s, buf, _) = self.greeting.swap_remove(i);
            let h = match Hello::decode(&buf) {
                Ok(h) if h.nonce == self.handle.nonce && h.nsocks == self.handle.nsocks => h,
                // A stranger on our port: drop it and keep listening for the real peer.
                Ok(_) | Err(_) => {
                    crate::log::warn(&format!(
                        "dropped a connection to {} that is not a zcnet data socket of this listener",
                        self.handle.addr
                    ));
                    continue;
                }
            };
            let g = self
                .groups
                .entry(h.nonce)
                .or_insert_with(|| (0..h.nsocks).map(|_| None).collect());
            g[usize::from(h.index)] = Some(s);
            if g.iter().all(Option::is_some) {
                let g = self.groups.remove(&h.nonce).unwrap_or_default();
                return Ok(Some(g.into_iter().flatten().collect()));
            }
        }
        Ok(None)
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
    /// Starts connecting every socket of `h` and sending its hello.
    pub fn start(h: Handle) -> Result<Dialing> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("zcnet-nccl-connect".into())
            .spawn(move || {
                let _ = tx.send(dial(h));
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

fn dial(h: Handle) -> Result<Vec<TcpStream>> {
    (0..h.nsocks)
        .map(|index| {
            let mut s = TcpStream::connect_timeout(&h.addr, CONNECT_TIMEOUT)
                .map_err(|e| PluginError::io(format!("connect to {}", h.addr), &e))?;
            let hello = Hello {
                nonce: h.nonce,
                index,
                nsocks: h.nsocks,
            };
            s.write_all(&hello.encode())
                .map_err(|e| PluginError::io(format!("hello to {}", h.addr), &e))?;
            s.set_nonblocking(true)
                .map_err(|e| PluginError::io("connect: O_NONBLOCK", &e))?;
            let _ = s.set_nodelay(true);
            Ok(s)
        })
        .collect()
}
