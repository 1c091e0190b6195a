//! The transport under the ZCNET backend: TCP connections the plugin owns, one per (initiating
//! engine, target engine) pair, with a small framed protocol.
//!
//! **Sending is zcnet's** (`Out`): each connection's sending side (the initiator's writer, the
//! target's server) is a `zcnet::Sender` in `auto` mode, the engine the `zcnet` command and the
//! NCCL plugin use: payloads above 16 KiB go from NIXL's registered memory itself
//! (`Sender::send_lent`, `SEND_ZC` while the kernel's notifications say zero copy happens, then
//! copying sends), smaller ones with their header in one of the sender's buffers, and the
//! kernel's verdict on every byte is counted (`Stats`, written to `ZCNET_NIXL_STATS`). Where
//! zcnet cannot make a sender (no io_uring), plain `write()`s, said on stderr. **Receiving
//! is still plain `read()`** straight into the target's (WRITE) or initiator's (READ) registered
//! memory, with no staging copy in the plugin; zcnet's receivers lend their own buffers, which
//! would add a copy on TCP paths (where the kernel copies anyway), so the receive side waits
//! for zcrx/devmem paths that place payload in registered memory.
//!
//! Threads, all blocked in a system call when idle (none polls or spins): per engine one
//! acceptor (`accept()`); per incoming connection one server (`read()`: it applies WRITEs,
//! answers READs, queues notifications, acknowledges each request); per outgoing connection
//! one writer (sends queued work in steps of at most 4 MiB, `transport/send.rs`) and one reader
//! (`poll()`: READ data and acknowledgements). The threads NIXL's caller brings do work too,
//! where a hand-off to a thread would cost more than the work: a request of at most
//! `DIRECT_MAX` (1 MiB) posted while its stream is idle is sent by the posting thread itself
//! (its sends done when `postXfer` returns); `checkXfer` first handles the frames already
//! received on the request's streams (`transport/rx.rs`), so a completion is seen without
//! waiting for the reader thread to wake, and while the stream still has bytes to send it
//! sleeps until the writer finished a step (at most 2 ms) rather than spin beside it. Long
//! payloads are read straight into registered memory with the socket's receive mark raised
//! (`wire::recv_marked`), which wakes the reading thread once per 256 KiB.
//!
//! Every frame starts with a 48-byte header (`Hdr`). The initiator opens a connection with
//! HELLO (its agent name and the target engine's instance id from the connection info it
//! loaded: a target that restarted since refuses with [`ERR_NOT_FOUND`]), then sends, per
//! posted request: one WRITE (header + payload) or READ_REQ per descriptor, then END (with
//! the notification, if any). The target answers each READ_REQ with READ_DATA and each END
//! with ACK carrying the request's status; the notification is queued only once all of the
//! request's data was applied (WRITE) or sent (READ), so it arrives in order with its
//! transfer. A descriptor the target cannot apply (unknown region, out of range) fails the
//! request with its status and leaves the connection usable.

use std::collections::HashMap;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod device;
mod initiator;
mod out;
mod rx;
mod send;
mod target;
mod wire;

use initiator::{connect, stripe};
use out::{Out, INLINE_MAX};
use target::accept_loop;
use wire::*;

// NIXL's status values (nixl_types.h:53-68; cxx/nixl_abi.hpp).
pub const SUCCESS: i32 = 0;
pub const IN_PROG: i32 = 1;
pub const ERR_NOT_POSTED: i32 = -1;
pub const ERR_INVALID_PARAM: i32 = -2;
pub const ERR_BACKEND: i32 = -3;
pub const ERR_NOT_FOUND: i32 = -4;
pub const ERR_MISMATCH: i32 = -5;
pub const ERR_REMOTE_DISCONNECT: i32 = -10;
pub const ERR_CANCELED: i32 = -11;

/// NIXL's `NIXL_READ` and `NIXL_WRITE` (nixl_types.h:47).
pub const OP_READ: u32 = 0;
pub const OP_WRITE: u32 = 1;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const IO_BUF: usize = 256 << 10;
/// A request of at least this many bytes is cut across the engine's streams (the backend
/// parameter `streams`); a smaller one goes whole on the first.
const STRIPE_MIN: u64 = 4 << 20;
/// Parts are cut at multiples of this within a descriptor.
const STRIPE_ALIGN: u64 = 64 << 10;
/// A request of at most this many bytes is sent by the thread that posts it when its stream
/// is idle (`Conn::submit`); a larger one by the stream's writer thread, so that posting it
/// does not wait for its bytes to leave.
const DIRECT_MAX: u64 = 1 << 20;
/// Most streams per peer.
pub const MAX_STREAMS: usize = 16;

pub(crate) fn log(msg: &str) {
    eprintln!("zcnet-nixl: {msg}");
}

/// One descriptor pair of a request, as the C++ half validated it against the local and the
/// remote registration (`zcnet_nixl_desc` in cxx/engine.cpp).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Desc {
    pub local_addr: u64,
    pub len: u64,
    pub remote_addr: u64,
    pub remote_key: u64,
    /// The local registration's key (a VRAM one is reached through `transport/device.rs`).
    pub local_key: u64,
}

/// Registered memory, by key: what a peer may write into or read from.
type Regions = RwLock<HashMap<u64, (u64, u64)>>;

/// The connections peers opened to this engine, with their server threads.
type Incoming = Mutex<Vec<(TcpStream, JoinHandle<()>)>>;

/// What the engine's senders did, summed over its connections as they close: the kernel's
/// verdict on every byte zcnet sent (headers included), for `ZCNET_NIXL_STATS`.
#[derive(Debug, Default)]
pub struct Stats {
    bytes: AtomicU64,
    sends: AtomicU64,
    zerocopy_bytes: AtomicU64,
    copied_bytes: AtomicU64,
    notifications: AtomicU64,
    switches: AtomicU64,
    connections: AtomicU64,
}

impl Stats {
    fn add(&self, t: &zcnet::TxStats) {
        let r = Ordering::Relaxed;
        self.bytes.fetch_add(t.bytes, r);
        self.sends.fetch_add(t.sends, r);
        self.zerocopy_bytes.fetch_add(t.zerocopy_bytes, r);
        self.copied_bytes.fetch_add(t.copied_bytes, r);
        self.notifications.fetch_add(t.notifications, r);
        self.switches.fetch_add(t.switches.len() as u64, r);
        self.connections.fetch_add(1, r);
    }

    /// One JSON object.
    pub fn json(&self) -> String {
        let r = Ordering::Relaxed;
        format!(
            "{{\"bytes_sent\": {}, \"sends\": {}, \"zerocopy_bytes\": {}, \"copied_bytes\": {}, \"notifications\": {}, \"auto_switches\": {}, \"connections\": {}}}\n",
            self.bytes.load(r),
            self.sends.load(r),
            self.zerocopy_bytes.load(r),
            self.copied_bytes.load(r),
            self.notifications.load(r),
            self.switches.load(r),
            self.connections.load(r)
        )
    }
}

/// What the engine's threads share.
#[derive(Debug)]
struct Shared {
    agent: String,
    instance: u64,
    regions: Regions,
    notifs: Mutex<Vec<(String, Vec<u8>)>>,
    closing: AtomicBool,
    stats: Arc<Stats>,
    /// How this engine's connections send (the backend parameter `tx`).
    tx: zcnet::TxMode,
    /// Requests cut across streams whose parts have not all ended, by (initiator agent, its
    /// engine's instance, request group): the target queues the notification once all did.
    groups: Mutex<HashMap<(String, u64, u64), Group>>,
    /// The VRAM registrations among `regions`.
    devices: device::Devices,
}

/// The parts of one striped request seen so far at the target.
#[derive(Debug)]
struct Group {
    remaining: u64,
    ok: bool,
    notif: Option<Vec<u8>>,
}

impl Shared {
    /// One part of a striped request ended (`ok`: applied without error and not aborted; the
    /// part that carries the notification gives it). Once the last part ended, the
    /// notification is queued if every part was ok.
    fn part_ended(&self, key: (String, u64, u64), parts: u64, ok: bool, notif: Option<Vec<u8>>) {
        let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        let peer = key.0.clone();
        let g = groups.entry(key.clone()).or_insert(Group {
            remaining: parts,
            ok: true,
            notif: None,
        });
        g.remaining = g.remaining.saturating_sub(1);
        g.ok &= ok;
        if notif.is_some() {
            g.notif = notif;
        }
        if g.remaining == 0 {
            if let Some(g) = groups.remove(&key) {
                drop(groups);
                if let (true, Some(msg)) = (g.ok, g.notif) {
                    self.notifs
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((peer, msg));
                }
            }
        }
    }

    /// A connection of `peer`'s engine `session` ended: its unfinished groups never will.
    fn forget_groups(&self, peer: &str, session: u64) {
        self.groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(p, s, _), _| !(p == peer && *s == session));
    }
}

/// A request: its descriptors, its state and the lock that keeps its local memory from being
/// touched once NIXL released it.
#[derive(Debug)]
pub struct Xfer {
    op: u32,
    agent: String,
    descs: Arc<[Desc]>,
    /// IN_PROG while posted; then SUCCESS or the first error.
    status: Mutex<i32>,
    /// An error seen before the acknowledgement (READ data refused or mismatched).
    err: Mutex<i32>,
    /// The first acknowledgement of a part that was not SUCCESS.
    ack: Mutex<i32>,
    /// Parts posted and not yet acknowledged.
    remaining: AtomicUsize,
    /// True once released: the writer and the reader take this lock around every access to
    /// the request's local memory and touch it only while it is false.
    released: Mutex<bool>,
    /// The parts as posted: the stream and the post id of each.
    posted: Mutex<Vec<(Arc<Conn>, u64)>>,
    /// The VRAM registrations of its local descriptors, by key.
    devices: HashMap<u64, Arc<device::DeviceReg>>,
}

impl Xfer {
    /// One part's acknowledgement; the request ends with the last one.
    fn finish(&self, ack: i32) {
        if ack != SUCCESS {
            let mut a = self.ack.lock().unwrap_or_else(|e| e.into_inner());
            if *a == SUCCESS {
                *a = ack;
            }
        }
        if self.remaining.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let err = *self.err.lock().unwrap_or_else(|e| e.into_inner());
        let ack = *self.ack.lock().unwrap_or_else(|e| e.into_inner());
        let mut st = self.status.lock().unwrap_or_else(|e| e.into_inner());
        if *st == IN_PROG {
            *st = if err != SUCCESS { err } else { ack };
        }
    }

    fn fail(&self, status: i32) {
        let mut st = self.status.lock().unwrap_or_else(|e| e.into_inner());
        if *st == IN_PROG {
            *st = status;
        }
    }
}

/// A part waiting for its acknowledgement: the request and the part's descriptors.
type Posted = (Arc<Xfer>, Arc<[Desc]>);

/// One part of a posted request, for one stream's writer: its post id on that stream, its
/// descriptors, its group (the request) and how many parts the group has, and the
/// notification (carried by the first part only).
struct Part {
    post: u64,
    x: Arc<Xfer>,
    descs: Arc<[Desc]>,
    group: u64,
    parts: u64,
    notif: Option<Vec<u8>>,
}

/// An outgoing connection to one target engine, with its writer and reader threads.
#[derive(Debug)]
pub struct Conn {
    /// The sending side: work queued in order, sent by whichever thread holds it
    /// (`transport/send.rs`).
    tx: send::Tx,
    /// The receiving side, used by the reader thread and by threads checking a request.
    rx: Mutex<rx::Rx>,
    stream: TcpStream,
    /// Parts posted on this stream and not yet acknowledged, by post id, with their
    /// descriptors (READ data names one by its index).
    pending: Mutex<HashMap<u64, Posted>>,
    dead: AtomicBool,
    next_post: AtomicU64,
    threads: Mutex<Vec<JoinHandle<()>>>,
    stats: Arc<Stats>,
}

impl Conn {
    fn fail_all(&self, status: i32) {
        self.dead.store(true, Ordering::SeqCst);
        let drained: Vec<_> = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .collect();
        for (_, (x, _)) in drained {
            x.fail(status);
        }
    }

    fn close(&self) {
        self.tx.close();
        let _ = self.stream.shutdown(Shutdown::Both);
        let threads: Vec<_> = self
            .threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect();
        for t in threads {
            let _ = t.join();
        }
        self.fail_all(ERR_REMOTE_DISCONNECT);
    }
}

/// One ZCNET backend engine.
#[derive(Debug)]
pub struct Engine {
    shared: Arc<Shared>,
    listen_addr: SocketAddr,
    listen_fd: i32,
    acceptor: Mutex<Option<JoinHandle<()>>>,
    incoming: Arc<Incoming>,
    remotes: Mutex<HashMap<String, (SocketAddr, u64)>>,
    /// The streams to each target agent (`streams` connections, made at its first request).
    conns: Mutex<HashMap<String, Vec<Arc<Conn>>>>,
    streams: usize,
    next_key: AtomicU64,
    next_group: AtomicU64,
    /// Keeps the listener (and its fd) open as long as the engine.
    _listener: TcpListener,
}

impl Engine {
    /// Listens on `ip:port` (port 0: any free one) and starts the acceptor; `streams` is the
    /// number of connections to each peer (1 to [`MAX_STREAMS`]).
    pub fn new(
        agent: &str,
        ip: &str,
        port: u16,
        tx: &str,
        streams: &str,
    ) -> Result<Engine, String> {
        let streams = match streams.parse::<usize>() {
            Ok(n @ 1..=MAX_STREAMS) => n,
            _ => {
                return Err(format!(
                "backend parameter streams={streams} is not a whole number from 1 to {MAX_STREAMS}"
            ))
            }
        };
        let tx = match zcnet::TxMode::parse(tx) {
            Ok(
                m @ (zcnet::TxMode::Auto
                | zcnet::TxMode::Copy
                | zcnet::TxMode::Uring
                | zcnet::TxMode::UringZc),
            ) => m,
            _ => {
                return Err(format!(
                    "backend parameter tx={tx} is not one of auto, copy, uring, uring-zc"
                ))
            }
        };
        let addr: SocketAddr = format!("{ip}:{port}")
            .parse()
            .or_else(|_| format!("[{ip}]:{port}").parse())
            .map_err(|_| format!("ip_addr {ip:?} is not a numeric IP address"))?;
        let listener = TcpListener::bind(addr).map_err(|e| format!("listen on {addr}: {e}"))?;
        let listen_addr = listener.local_addr().map_err(|e| e.to_string())?;
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let shared = Arc::new(Shared {
            agent: agent.to_string(),
            instance: nanos ^ ((std::process::id() as u64) << 32) ^ u64::from(listen_addr.port()),
            regions: RwLock::new(HashMap::new()),
            notifs: Mutex::new(Vec::new()),
            closing: AtomicBool::new(false),
            stats: Arc::default(),
            tx,
            groups: Mutex::new(HashMap::new()),
            devices: device::Devices::default(),
        });
        let incoming: Arc<Incoming> = Arc::default();
        let acc_listener = listener.try_clone().map_err(|e| e.to_string())?;
        let (sh, inc) = (shared.clone(), incoming.clone());
        let acceptor = std::thread::Builder::new()
            .name("zcnet-nixl-acc".into())
            .spawn(move || accept_loop(acc_listener, sh, inc))
            .map_err(|e| e.to_string())?;
        Ok(Engine {
            shared,
            listen_addr,
            listen_fd: listener.as_raw_fd(),
            acceptor: Mutex::new(Some(acceptor)),
            incoming,
            remotes: Mutex::new(HashMap::new()),
            conns: Mutex::new(HashMap::new()),
            streams,
            next_key: AtomicU64::new(1),
            next_group: AtomicU64::new(1),
            _listener: listener,
        })
    }

    /// What the peer needs to reach this engine: "zcnet1 IP:PORT INSTANCE".
    pub fn conn_info(&self) -> String {
        format!("zcnet1 {} {:x}", self.listen_addr, self.shared.instance)
    }

    pub fn load_remote(&self, agent: &str, info: &str) -> i32 {
        let mut it = info.split_whitespace();
        let parsed = match (it.next(), it.next(), it.next()) {
            (Some("zcnet1"), Some(a), Some(i)) => a
                .parse::<SocketAddr>()
                .ok()
                .zip(u64::from_str_radix(i, 16).ok()),
            _ => None,
        };
        match parsed {
            Some(v) => {
                self.remotes
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(agent.to_string(), v);
                SUCCESS
            }
            None => {
                log(&format!(
                    "connection info of agent {agent:?} is not ZCNET's: {info:?}"
                ));
                ERR_INVALID_PARAM
            }
        }
    }

    pub fn register(&self, addr: u64, len: u64) -> u64 {
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        self.shared
            .regions
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, (addr, len));
        key
    }

    pub fn deregister(&self, key: u64) -> i32 {
        // The write lock waits for a server thread applying a WRITE to (or sending READ data
        // from) this memory.
        match self
            .shared
            .regions
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key)
        {
            Some(_) => {
                self.shared.devices.forget(key);
                SUCCESS
            }
            None => ERR_NOT_FOUND,
        }
    }

    /// The streams to `agent`, made now if there are none (or one of them failed: all are
    /// made again).
    pub fn conn(&self, agent: &str) -> Result<Vec<Arc<Conn>>, i32> {
        let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(lanes) = conns.get(agent) {
            if !lanes.iter().any(|c| c.dead.load(Ordering::SeqCst)) {
                return Ok(lanes.clone());
            }
            for old in conns.remove(agent).unwrap_or_default() {
                old.close();
            }
        }
        let Some(&(addr, instance)) = self
            .remotes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(agent)
        else {
            log(&format!("no connection info for agent {agent:?}"));
            return Err(ERR_NOT_FOUND);
        };
        let mut lanes: Vec<Arc<Conn>> = Vec::with_capacity(self.streams);
        for _ in 0..self.streams {
            let c = connect(&self.shared, addr, instance).map_err(|(st, msg)| {
                log(&format!("connect to agent {agent:?} at {addr}: {msg}"));
                for c in &lanes {
                    c.close();
                }
                st
            })?;
            lanes.push(c);
        }
        conns.insert(agent.to_string(), lanes.clone());
        Ok(lanes)
    }

    pub fn disconnect(&self, agent: &str) -> i32 {
        let c = self
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(agent);
        for c in c.unwrap_or_default() {
            c.close();
        }
        SUCCESS
    }

    pub fn new_xfer(&self, op: u32, agent: &str, descs: Vec<Desc>) -> Xfer {
        Xfer {
            devices: self.local_devices(&descs),
            op,
            agent: agent.to_string(),
            descs: descs.into(),
            status: Mutex::new(ERR_NOT_POSTED),
            err: Mutex::new(SUCCESS),
            ack: Mutex::new(SUCCESS),
            remaining: AtomicUsize::new(0),
            released: Mutex::new(false),
            posted: Mutex::new(Vec::new()),
        }
    }

    /// Posts `x`: whole on the first stream, or cut across the streams when it is large
    /// (`STRIPE_MIN`, 4 MiB); the notification travels with the first part and the target queues it
    /// once every part arrived.
    pub fn post(&self, x: &Arc<Xfer>, notif: Option<Vec<u8>>) -> i32 {
        let lanes = match self.conn(&x.agent) {
            Ok(c) => c,
            Err(st) => return st,
        };
        let total: u64 = x.descs.iter().map(|d| d.len).sum();
        let parts: Vec<Arc<[Desc]>> = if lanes.len() > 1 && total >= STRIPE_MIN {
            stripe(&x.descs, lanes.len())
                .into_iter()
                .map(Arc::from)
                .collect()
        } else {
            vec![x.descs.clone()]
        };
        let group = self.next_group.fetch_add(1, Ordering::Relaxed);
        let n = parts.len();
        *x.status.lock().unwrap_or_else(|e| e.into_inner()) = IN_PROG;
        *x.err.lock().unwrap_or_else(|e| e.into_inner()) = SUCCESS;
        *x.ack.lock().unwrap_or_else(|e| e.into_inner()) = SUCCESS;
        x.remaining.store(n, Ordering::Release);
        let mut posted = x.posted.lock().unwrap_or_else(|e| e.into_inner());
        posted.clear();
        let mut notif = notif;
        let mut ok = true;
        for (conn, descs) in lanes.iter().zip(parts) {
            let post = conn.next_post.fetch_add(1, Ordering::Relaxed);
            conn.pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(post, (x.clone(), descs.clone()));
            posted.push((conn.clone(), post));
            let part = Part {
                post,
                x: x.clone(),
                descs,
                group,
                parts: n as u64,
                notif: notif.take(),
            };
            // A request small enough (or a READ, whose requests are headers) that sending it
            // here costs less than handing it to the writer thread.
            let direct = n == 1 && (x.op == OP_READ || total <= DIRECT_MAX);
            let sent = conn.post_work(send::Work::Post(send::Cursor::new(part)), direct);
            if !sent || conn.dead.load(Ordering::SeqCst) {
                ok = false;
                break;
            }
        }
        if !ok {
            for (conn, post) in posted.drain(..) {
                conn.pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&post);
            }
            x.fail(ERR_REMOTE_DISCONNECT);
            return ERR_REMOTE_DISCONNECT;
        }
        IN_PROG
    }

    pub fn gen_notif(&self, agent: &str, msg: Vec<u8>) -> i32 {
        // A notification alone goes on the first stream, the one that carries requests'
        // notifications too.
        let conn = match self.conn(agent) {
            Ok(c) => c[0].clone(),
            Err(st) => return st,
        };
        if conn.post_work(send::Work::Notif(msg), true) {
            SUCCESS
        } else {
            ERR_REMOTE_DISCONNECT
        }
    }

    pub fn take_notifs(&self) -> Vec<(String, Vec<u8>)> {
        std::mem::take(&mut *self.shared.notifs.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// NIXL released the request: from now on its local memory is not touched (the writer skips
/// the descriptors it has not sent, the reader discards READ data that still arrives).
pub fn release(x: &Xfer) {
    *x.released.lock().unwrap_or_else(|e| e.into_inner()) = true;
    for (conn, post) in x.posted.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
        conn.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&post);
    }
}

/// The request's status, after handling the acknowledgements (and READ data) already
/// received on its streams: a completion is seen without waiting for the reader thread.
pub fn status(x: &Xfer) -> i32 {
    let st = *x.status.lock().unwrap_or_else(|e| e.into_inner());
    if st != IN_PROG {
        return st;
    }
    let conns: Vec<Arc<Conn>> = x
        .posted
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|(c, _)| c.clone())
        .collect();
    for c in conns {
        // Bytes still to send on the stream: sleep while the writer sends a step rather than
        // spin beside it.
        c.wait_for_writer();
        c.receive(rx::Wait::Never);
    }
    *x.status.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shared.closing.store(true, Ordering::SeqCst);
        // SAFETY: listen_fd is the listener's, open until `_listener` drops after this; shutting
        // a listening socket down wakes the acceptor's accept() with an error.
        unsafe { libc::shutdown(self.listen_fd, libc::SHUT_RDWR) };
        if let Some(t) = self
            .acceptor
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            let _ = t.join();
        }
        let conns: Vec<_> = self
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .collect();
        for c in conns.into_iter().flat_map(|(_, c)| c) {
            c.close();
        }
        let incoming: Vec<_> = self
            .incoming
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect();
        for (s, t) in incoming {
            let _ = s.shutdown(Shutdown::Both);
            let _ = t.join();
        }
        if let Ok(path) = std::env::var("ZCNET_NIXL_STATS") {
            // "{pid}" in the name: one file per process (agents in several processes).
            let path =
                std::path::PathBuf::from(path.replace("{pid}", &std::process::id().to_string()));
            let tmp = path.with_extension("tmp");
            let r = std::fs::write(&tmp, self.shared.stats.json())
                .and_then(|_| std::fs::rename(&tmp, &path));
            if let Err(e) = r {
                log(&format!(
                    "ZCNET_NIXL_STATS: cannot write {}: {e}",
                    path.display()
                ));
            }
        }
    }
}
