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
//! one writer (waits on a channel for posted requests) and one reader (`read()`: READ data and
//! acknowledgements).
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
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod device;

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

const MAGIC: u32 = 0x5a43_4e58; // "ZCNX"
const VERSION: u64 = 1;
const HDR_LEN: usize = 48;
const K_HELLO: u32 = 1;
const K_HELLO_OK: u32 = 2;
const K_WRITE: u32 = 3;
const K_READ_REQ: u32 = 4;
const K_READ_DATA: u32 = 5;
const K_END: u32 = 6;
const K_ACK: u32 = 7;
const K_NOTIF: u32 = 8;
const END_NOTIF: u64 = 1;
const END_ABORTED: u64 = 2;
/// Longest agent name or notification accepted from a peer.
const MAX_MSG: u64 = 16 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const IO_BUF: usize = 256 << 10;
/// A request of at least this many bytes is cut across the engine's streams (the backend
/// parameter `streams`); a smaller one goes whole on the first.
const STRIPE_MIN: u64 = 4 << 20;
/// Parts are cut at multiples of this within a descriptor.
const STRIPE_ALIGN: u64 = 64 << 10;
/// Most streams per peer.
pub const MAX_STREAMS: usize = 16;

/// One frame header: kind, request id and four operands whose meaning depends on the kind.
#[derive(Debug, Clone, Copy, Default)]
struct Hdr {
    kind: u32,
    post: u64,
    a: u64,
    b: u64,
    c: u64,
    d: u64,
}

impl Hdr {
    fn new(kind: u32, post: u64) -> Hdr {
        Hdr {
            kind,
            post,
            ..Hdr::default()
        }
    }

    fn encode(&self) -> [u8; HDR_LEN] {
        let mut b = [0u8; HDR_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&self.kind.to_le_bytes());
        for (i, v) in [self.post, self.a, self.b, self.c, self.d]
            .iter()
            .enumerate()
        {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    fn write_to(&self, w: &mut impl Write) -> io::Result<()> {
        w.write_all(&self.encode())
    }

    fn read_from(r: &mut impl Read) -> io::Result<Hdr> {
        let mut b = [0u8; HDR_LEN];
        r.read_exact(&mut b)?;
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(x)
        };
        if u32_at(0) != MAGIC {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "bad frame magic",
            ));
        }
        Ok(Hdr {
            kind: u32_at(4),
            post: u64_at(8),
            a: u64_at(16),
            b: u64_at(24),
            c: u64_at(32),
            d: u64_at(40),
        })
    }
}

fn status_to_wire(s: i32) -> u64 {
    s as i64 as u64
}

fn status_from_wire(v: u64) -> i32 {
    v as i64 as i32
}

fn read_msg(r: &mut impl Read, len: u64) -> io::Result<Vec<u8>> {
    if len > MAX_MSG {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "message too long",
        ));
    }
    let mut v = vec![0u8; len as usize];
    r.read_exact(&mut v)?;
    Ok(v)
}

fn discard(r: &mut impl Read, mut len: u64) -> io::Result<()> {
    let mut scratch = [0u8; 16 << 10];
    while len > 0 {
        let n = len.min(scratch.len() as u64) as usize;
        r.read_exact(&mut scratch[..n])?;
        len -= n as u64;
    }
    Ok(())
}

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

enum Job {
    Post(Part),
    Notif(Vec<u8>),
}

/// An outgoing connection to one target engine, with its writer and reader threads.
#[derive(Debug)]
pub struct Conn {
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    stream: TcpStream,
    /// Parts posted on this stream and not yet acknowledged, by post id, with their
    /// descriptors (READ data names one by its index).
    pending: Mutex<HashMap<u64, Posted>>,
    dead: AtomicBool,
    next_post: AtomicU64,
    threads: Mutex<Vec<JoinHandle<()>>>,
    stats: Arc<Stats>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Job::Post(p) => write!(f, "Post({}/{} of group {})", p.post, p.parts, p.group),
            Job::Notif(m) => write!(f, "Notif({} bytes)", m.len()),
        }
    }
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
        self.jobs.lock().unwrap_or_else(|e| e.into_inner()).take();
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
            let sent = match &*conn.jobs.lock().unwrap_or_else(|e| e.into_inner()) {
                Some(tx) => tx.send(Job::Post(part)).is_ok(),
                None => false,
            };
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
        let jobs = conn.jobs.lock().unwrap_or_else(|e| e.into_inner());
        let sent = jobs
            .as_ref()
            .is_some_and(|tx| tx.send(Job::Notif(msg)).is_ok());
        if sent {
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

pub fn status(x: &Xfer) -> i32 {
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

/// One stream to the target engine `instance` at `addr`. Its HELLO names this agent and this
/// engine's instance (the session the target groups a striped request's parts by).
fn connect(sh: &Shared, addr: SocketAddr, instance: u64) -> Result<Arc<Conn>, (i32, String)> {
    let (me, stats, tx) = (&sh.agent, sh.stats.clone(), sh.tx);
    let disc = |e: io::Error| (ERR_REMOTE_DISCONNECT, e.to_string());
    let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(disc)?;
    let _ = stream.set_nodelay(true);
    let mut s = &stream;
    let mut h = Hdr::new(K_HELLO, 0);
    h.a = VERSION;
    h.b = me.len() as u64;
    h.c = instance;
    h.d = sh.instance;
    h.write_to(&mut s).map_err(disc)?;
    s.write_all(me.as_bytes()).map_err(disc)?;
    stream
        .set_read_timeout(Some(CONNECT_TIMEOUT))
        .map_err(disc)?;
    let ok = Hdr::read_from(&mut s).map_err(disc)?;
    stream.set_read_timeout(None).map_err(disc)?;
    if ok.kind != K_HELLO_OK {
        return Err((
            ERR_BACKEND,
            "the peer does not speak ZCNET's protocol".into(),
        ));
    }
    let st = status_from_wire(ok.c);
    if st != SUCCESS {
        return Err((
            st,
            "the target refused: its engine is not the one the loaded connection info names \
             (stale metadata: the peer restarted; load its metadata again)"
                .into(),
        ));
    }
    let (jobs, rx) = mpsc::channel();
    let conn = Arc::new(Conn {
        jobs: Mutex::new(Some(jobs)),
        stream: stream.try_clone().map_err(disc)?,
        pending: Mutex::new(HashMap::new()),
        dead: AtomicBool::new(false),
        next_post: AtomicU64::new(1),
        threads: Mutex::new(Vec::new()),
        stats,
    });
    let w = stream.try_clone().map_err(disc)?;
    let c1 = Arc::downgrade(&conn);
    let writer = std::thread::Builder::new()
        .name("zcnet-nixl-tx".into())
        .spawn(move || writer_loop(w, tx, rx, c1))
        .map_err(|e| (ERR_BACKEND, e.to_string()))?;
    let c2 = Arc::downgrade(&conn);
    let reader = std::thread::Builder::new()
        .name("zcnet-nixl-rx".into())
        .spawn(move || reader_loop(stream, c2))
        .map_err(|e| (ERR_BACKEND, e.to_string()))?;
    conn.threads
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .extend([writer, reader]);
    Ok(conn)
}

/// A slice over registered memory the C++ half checked lies inside a live registration.
///
/// # Safety
/// `addr..addr+len` is memory NIXL registered with this engine and keeps mapped while the
/// caller holds the lock that guards it (the request's `released` flag, or the region map).
unsafe fn mem<'a>(addr: u64, len: u64) -> &'a [u8] {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(addr as usize as *const u8, len as usize) }
}

/// As [`mem`], writable.
///
/// # Safety
/// As [`mem`]; nothing else writes the range meanwhile (NIXL's contract for a transfer's
/// buffers).
unsafe fn mem_mut<'a>(addr: u64, len: u64) -> &'a mut [u8] {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(addr as usize as *mut u8, len as usize) }
}

/// Where the writer's frames go: a zcnet sender (`auto`: zero copy from NIXL's memory until
/// the kernel says it copies, then copying sends) owning the connection's sending side, or, if
/// zcnet cannot make one here, plain buffered writes.
enum Out<'a> {
    Zc(Box<zcnet::Sender>),
    Plain(BufWriter<&'a TcpStream>),
}

/// Payloads up to this size travel in the sender's buffer with their header (one send, one
/// copy); larger ones are sent from NIXL's memory as they are (zcnet's `auto` threshold).
const INLINE_MAX: u64 = zcnet::tx::AUTO_MIN_ZERO_COPY as u64;

fn zc_err(e: zcnet::Error) -> io::Error {
    io::Error::other(e.to_string())
}

impl<'a> Out<'a> {
    /// A zcnet sender in `mode` on `stream`. `auto` falls back to plain writes where zcnet
    /// cannot make a sender; an explicit mode the kernel refuses is an error with the reason.
    fn new(stream: &'a TcpStream, mode: zcnet::TxMode) -> io::Result<Out<'a>> {
        let cfg = zcnet::TxConfig::new(mode);
        let made = stream.try_clone().map_err(|e| e.to_string()).and_then(|s| {
            let region =
                zcnet::Region::new(zcnet::MemoryKind::Anonymous, zcnet::tx::region_len(&cfg))
                    .map_err(|e| e.to_string())?;
            zcnet::Sender::new(zcnet::Socket::from(s), region, &cfg).map_err(|e| e.to_string())
        });
        match made {
            Ok(s) => Ok(Out::Zc(Box::new(s))),
            Err(e) if mode == zcnet::TxMode::Auto => {
                log(&format!("no zcnet sender here ({e}): plain socket writes"));
                Ok(Out::Plain(BufWriter::with_capacity(IO_BUF, stream)))
            }
            Err(e) => Err(io::Error::other(format!("tx={mode}: {e}"))),
        }
    }

    /// A header and a payload small enough to go with it.
    fn frame(&mut self, h: &Hdr, payload: &[u8]) -> io::Result<()> {
        match self {
            Out::Plain(w) => {
                h.write_to(w)?;
                w.write_all(payload)
            }
            Out::Zc(s) => {
                let mut b = s.buffer().map_err(zc_err)?;
                let n = HDR_LEN + payload.len();
                let Some(m) = b.bytes_mut().filter(|m| m.len() >= n) else {
                    return Err(io::Error::other("a frame does not fit the sender's buffer"));
                };
                m[..HDR_LEN].copy_from_slice(&h.encode());
                m[HDR_LEN..n].copy_from_slice(payload);
                s.send(b, n).map_err(zc_err)
            }
        }
    }

    /// Bytes sent from where they lie: NIXL's memory or an owned message.
    fn lent(&mut self, buf: zcnet::engine::ForeignBuf) -> io::Result<()> {
        match self {
            Out::Plain(w) => w.write_all(buf.slice(0, buf.len()).unwrap_or(&[])),
            Out::Zc(s) => {
                let len = buf.len();
                s.send_lent(Arc::new(buf), 0, len).map_err(zc_err)
            }
        }
    }

    /// Everything queued is on the wire and, for zcnet, the kernel is done with every byte
    /// (each zero-copy notification arrived): lent memory is NIXL's again.
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Out::Plain(w) => w.flush(),
            Out::Zc(s) => s.flush().map_err(zc_err),
        }
    }
}

fn writer_loop(
    stream: TcpStream,
    mode: zcnet::TxMode,
    rx: mpsc::Receiver<Job>,
    conn: std::sync::Weak<Conn>,
) {
    let mut out = match Out::new(&stream, mode) {
        Ok(o) => o,
        Err(e) => {
            log(&format!("cannot send: {e}"));
            if let Some(c) = conn.upgrade() {
                c.fail_all(ERR_BACKEND);
            }
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
    };
    let mut failed = None;
    for job in rx {
        let r = match job {
            Job::Post(part) => send_post(&mut out, part),
            Job::Notif(msg) => {
                send_msg(&mut out, Hdr::new(K_NOTIF, 0), msg).and_then(|_| out.flush())
            }
        };
        if let Err(e) = r {
            failed = Some(e);
            break;
        }
    }
    if let Some(c) = conn.upgrade() {
        if let Out::Zc(s) = &out {
            c.stats.add(&s.stats());
        }
        if let Some(e) = failed {
            log(&format!("send failed: {e}"));
            c.fail_all(ERR_REMOTE_DISCONNECT);
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
}

/// A header whose `b` is the length of `msg`, followed by `msg`.
fn send_msg(out: &mut Out<'_>, mut h: Hdr, msg: Vec<u8>) -> io::Result<()> {
    h.b = msg.len() as u64;
    if msg.len() as u64 <= INLINE_MAX {
        return out.frame(&h, &msg);
    }
    out.frame(&h, &[])?;
    out.lent(zcnet::engine::ForeignBuf::owned(msg.into_boxed_slice()))
}

fn send_post(out: &mut Out<'_>, part: Part) -> io::Result<()> {
    let Part {
        post,
        x,
        descs,
        group,
        parts,
        notif,
    } = part;
    // A WRITE holds `released` until the kernel is done with every byte of the request (the
    // one flush at the end, after END), so that once NIXL released it nothing reads its memory
    // any more. One flush per request: a zero-copy send's notification comes when the peer
    // acknowledged the data, and waiting for it twice (after the payload, after END) doubled
    // the round trips of a small request.
    let released = (x.op == OP_WRITE).then(|| x.released.lock().unwrap_or_else(|e| e.into_inner()));
    let aborted = released.as_deref().copied().unwrap_or(false);
    if x.op == OP_WRITE {
        if !aborted {
            for d in descs.iter() {
                let mut h = Hdr::new(K_WRITE, post);
                (h.a, h.b, h.c) = (d.remote_addr, d.len, d.remote_key);
                if let Some(dev) = x.devices.get(&d.local_key) {
                    out.device(&h, dev, d.local_addr, d.len)?;
                } else if d.len <= INLINE_MAX {
                    // SAFETY: the C++ half checked the range lies in this engine's registration
                    // of the descriptor; `released` is false and held: NIXL has not released
                    // the request, so the memory is registered and not written meanwhile.
                    out.frame(&h, unsafe { mem(d.local_addr, d.len) })?;
                } else {
                    out.frame(&h, &[])?;
                    // SAFETY: as above; the buffer is dropped by the sender once the kernel is
                    // done with it, at the latest in the flush below, still under `released`.
                    let buf = unsafe {
                        zcnet::engine::ForeignBuf::new(
                            d.local_addr as usize as *mut u8,
                            d.len as usize,
                        )
                    }
                    .ok_or_else(|| io::Error::other("a NULL descriptor"))?;
                    out.lent(buf)?;
                }
            }
        }
    } else {
        for (i, d) in descs.iter().enumerate() {
            let mut h = Hdr::new(K_READ_REQ, post);
            (h.a, h.b, h.c, h.d) = (d.remote_addr, d.len, d.remote_key, i as u64);
            out.frame(&h, &[])?;
        }
    }
    let mut h = Hdr::new(K_END, post);
    h.a = if aborted { END_ABORTED } else { 0 } | if notif.is_some() { END_NOTIF } else { 0 };
    // c, d: the request's group and its number of parts (1: not striped).
    (h.c, h.d) = (group, parts);
    send_msg(out, h, notif.unwrap_or_default())?;
    let r = out.flush();
    drop(released);
    r
}

fn reader_loop(stream: TcpStream, conn: std::sync::Weak<Conn>) {
    let mut r = BufReader::with_capacity(IO_BUF, &stream);
    let end = |why: String| {
        if let Some(c) = conn.upgrade() {
            // A peer that goes away with nothing outstanding is a close, not an error.
            let busy = !c
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_empty();
            if busy && !c.dead.load(Ordering::SeqCst) {
                log(&format!("connection lost with requests outstanding: {why}"));
            }
            c.fail_all(ERR_REMOTE_DISCONNECT);
        }
    };
    loop {
        let h = match Hdr::read_from(&mut r) {
            Ok(h) => h,
            Err(e) => return end(e.to_string()),
        };
        let Some(c) = conn.upgrade() else { return };
        let x = c
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&h.post)
            .cloned();
        let res = match h.kind {
            K_READ_DATA => recv_read_data(&mut r, &h, x.as_ref().map(|(x, d)| (&**x, &**d))),
            K_ACK => {
                c.pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&h.post);
                if let Some((x, _)) = x {
                    x.finish(status_from_wire(h.c));
                }
                Ok(())
            }
            k => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unexpected frame kind {k} from the target"),
            )),
        };
        if let Err(e) = res {
            let _ = stream.shutdown(Shutdown::Both);
            return end(e.to_string());
        }
    }
}

/// READ data for descriptor `h.d` of a part (`x` and the part's descriptors; `None`: a part
/// no longer pending, whose data is read and dropped).
fn recv_read_data(r: &mut impl Read, h: &Hdr, x: Option<(&Xfer, &[Desc])>) -> io::Result<()> {
    let Some((x, descs)) = x else {
        return discard(r, h.b);
    };
    let st = status_from_wire(h.c);
    let released = x.released.lock().unwrap_or_else(|e| e.into_inner());
    let desc = descs.get(h.d as usize).filter(|d| d.len == h.b);
    match desc {
        Some(d) if !*released && st == SUCCESS => match x.devices.get(&d.local_key) {
            Some(dev) => dev.recv(r, d.local_addr, d.len),
            // SAFETY: the C++ half checked the range lies in this engine's registration;
            // `released` is false and held, so NIXL has not released the request.
            None => r.read_exact(unsafe { mem_mut(d.local_addr, d.len) }),
        },
        _ => {
            if !*released {
                let mut err = x.err.lock().unwrap_or_else(|e| e.into_inner());
                if *err == SUCCESS {
                    *err = if st != SUCCESS { st } else { ERR_MISMATCH };
                }
            }
            discard(r, h.b)
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>, incoming: Arc<Incoming>) {
    loop {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) => {
                if shared.closing.load(Ordering::SeqCst) {
                    return;
                }
                log(&format!("accept: {e}"));
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if shared.closing.load(Ordering::SeqCst) {
            return;
        }
        let _ = stream.set_nodelay(true);
        let Ok(keep) = stream.try_clone() else {
            continue;
        };
        let sh = shared.clone();
        let t = std::thread::Builder::new()
            .name("zcnet-nixl-srv".into())
            .spawn(move || {
                if let Err(e) = serve(stream, &sh) {
                    if !sh.closing.load(Ordering::SeqCst)
                        && e.kind() != io::ErrorKind::UnexpectedEof
                    {
                        log(&format!("serving a peer: {e}"));
                    }
                }
            });
        if let Ok(t) = t {
            let mut inc = incoming.lock().unwrap_or_else(|e| e.into_inner());
            // Forget the connections that ended.
            let (done, live): (Vec<_>, Vec<_>) = inc.drain(..).partition(|(_, t)| t.is_finished());
            *inc = live;
            inc.push((keep, t));
            drop(inc);
            for (_, t) in done {
                let _ = t.join();
            }
        }
    }
}

/// The target's side of one connection.
fn serve(stream: TcpStream, sh: &Shared) -> io::Result<()> {
    let mut r = BufReader::with_capacity(IO_BUF, &stream);
    let mut w = Out::new(&stream, sh.tx)?;
    let mut peer = None;
    let r = serve_on(&mut r, &mut w, sh, &mut peer);
    if let Out::Zc(s) = &w {
        sh.stats.add(&s.stats());
    }
    if let Some((name, session)) = peer {
        sh.forget_groups(&name, session);
    }
    r
}

/// Serves one connection; `who` is set to the peer's agent name and engine instance once its
/// HELLO was read.
fn serve_on(
    r: &mut impl Read,
    w: &mut Out<'_>,
    sh: &Shared,
    who: &mut Option<(String, u64)>,
) -> io::Result<()> {
    let hello = Hdr::read_from(r)?;
    if hello.kind != K_HELLO || hello.a != VERSION {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a ZCNET hello",
        ));
    }
    let peer = String::from_utf8_lossy(&read_msg(r, hello.b)?).into_owned();
    let session = hello.d;
    *who = Some((peer.clone(), session));
    let mut ok = Hdr::new(K_HELLO_OK, 0);
    ok.a = sh.instance;
    let stale = hello.c != sh.instance;
    ok.c = status_to_wire(if stale { ERR_NOT_FOUND } else { SUCCESS });
    w.frame(&ok, &[])?;
    w.flush()?;
    if stale {
        log(&format!(
            "refused agent {peer:?}: it loaded the connection info of an earlier engine"
        ));
        return Ok(());
    }
    // The first error of each request, reported in its acknowledgement.
    let mut errs: HashMap<u64, i32> = HashMap::new();
    loop {
        let h = Hdr::read_from(r)?;
        match h.kind {
            K_WRITE => {
                let map = sh.regions.read().unwrap_or_else(|e| e.into_inner());
                if region_ok_locked(&map, h.c, h.a, h.b) {
                    match sh.devices.get(h.c) {
                        Some(dev) => dev.recv(r, h.a, h.b)?,
                        // SAFETY: the range lies in a live registration of this engine, which
                        // cannot be deregistered while the map's read lock is held.
                        None => r.read_exact(unsafe { mem_mut(h.a, h.b) })?,
                    }
                } else {
                    drop(map);
                    errs.entry(h.post).or_insert(ERR_INVALID_PARAM);
                    log(&format!(
                        "agent {peer:?} wrote {} bytes at {:#x} outside registration {}",
                        h.b, h.a, h.c
                    ));
                    discard(r, h.b)?;
                }
            }
            K_READ_REQ => {
                let mut d = Hdr::new(K_READ_DATA, h.post);
                d.d = h.d;
                let map = sh.regions.read().unwrap_or_else(|e| e.into_inner());
                if region_ok_locked(&map, h.c, h.a, h.b) {
                    d.b = h.b;
                    if let Some(dev) = sh.devices.get(h.c) {
                        w.device(&d, &dev, h.a, h.b)?;
                    } else if h.b <= INLINE_MAX {
                        // SAFETY: as for WRITE: a live registration, held by the read lock.
                        w.frame(&d, unsafe { mem(h.a, h.b) })?;
                    } else {
                        w.frame(&d, &[])?;
                        // SAFETY: as above; the sender drops the buffer once the kernel is done
                        // with it, at the latest in the flush below, under the read lock.
                        let buf = unsafe {
                            zcnet::engine::ForeignBuf::new(h.a as usize as *mut u8, h.b as usize)
                        }
                        .ok_or_else(|| io::Error::other("a NULL range"))?;
                        w.lent(buf)?;
                        w.flush()?;
                    }
                } else {
                    drop(map);
                    errs.entry(h.post).or_insert(ERR_INVALID_PARAM);
                    log(&format!(
                        "agent {peer:?} read {} bytes at {:#x} outside registration {}",
                        h.b, h.a, h.c
                    ));
                    d.c = status_to_wire(ERR_INVALID_PARAM);
                    w.frame(&d, &[])?;
                }
            }
            K_END => {
                let msg = read_msg(r, h.b)?;
                let st = errs.remove(&h.post).unwrap_or(SUCCESS);
                let aborted = h.a & END_ABORTED != 0;
                let ok = st == SUCCESS && !aborted;
                let notif = (h.a & END_NOTIF != 0).then_some(msg);
                if h.d > 1 {
                    // One part of a request cut across streams: the notification waits for
                    // the others.
                    sh.part_ended((peer.clone(), session, h.c), h.d, ok, notif);
                } else if let (true, Some(msg)) = (ok, notif) {
                    sh.notifs
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((peer.clone(), msg));
                }
                let mut ack = Hdr::new(K_ACK, h.post);
                ack.c = status_to_wire(if aborted { ERR_CANCELED } else { st });
                w.frame(&ack, &[])?;
                w.flush()?;
            }
            K_NOTIF => {
                let msg = read_msg(r, h.b)?;
                sh.notifs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((peer.clone(), msg));
            }
            k => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("unexpected frame kind {k} from agent {peer:?}"),
                ))
            }
        }
    }
}

/// Cuts `descs` into at most `n` parts of about equal bytes, in order, each a list of
/// descriptors (a descriptor cut in two at a multiple of [`STRIPE_ALIGN`] from its start).
fn stripe(descs: &[Desc], n: usize) -> Vec<Vec<Desc>> {
    let total: u64 = descs.iter().map(|d| d.len).sum();
    let n = n.max(1) as u64;
    let share = total.div_ceil(n).div_ceil(STRIPE_ALIGN) * STRIPE_ALIGN;
    let mut parts = vec![Vec::new()];
    let mut room = share;
    for d in descs {
        let mut d = *d;
        while d.len > 0 {
            if room == 0 {
                parts.push(Vec::new());
                room = share;
            }
            let take = d.len.min(room);
            if let Some(p) = parts.last_mut() {
                p.push(Desc { len: take, ..d });
            }
            d.local_addr += take;
            d.remote_addr += take;
            d.len -= take;
            room -= take;
        }
    }
    parts.retain(|p| !p.is_empty());
    if parts.is_empty() {
        parts.push(Vec::new());
    }
    parts
}

fn region_ok_locked(map: &HashMap<u64, (u64, u64)>, key: u64, addr: u64, len: u64) -> bool {
    match map.get(&key) {
        Some(&(base, size)) => {
            addr >= base && addr.checked_add(len).is_some_and(|end| end <= base + size)
        }
        None => false,
    }
}
