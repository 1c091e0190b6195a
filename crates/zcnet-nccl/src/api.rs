//! The plugin's calls, version-independent and safe: every handle NCCL holds (listen, send and
//! receive comms, memory registrations, requests) is a key into one table, never a pointer we
//! dereference, so a handle from another plugin, a stale one or garbage is an error, not a
//! crash. `exports.rs` adapts each table version to these.

use crate::conn::{Dialing, Listen};
use crate::data::{RecvComm, SendComm, MAX_MESSAGE};
use crate::devices::{Device, Knobs};
use crate::error::{PluginError, Result};
use crate::handle::{self, Handle};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use zcnet::engine::ForeignBuf;

/// What `init` found.
#[derive(Debug)]
pub struct Engine {
    /// The devices.
    pub devices: Vec<Device>,
    /// The knobs.
    pub knobs: Knobs,
}

#[derive(Debug)]
enum Obj {
    Listen(Listen),
    Send(SendComm),
    Recv(RecvComm),
    /// A registration; `fixed` is its io_uring fixed buffer in `comm`'s ring, if it became one.
    Mr {
        addr: usize,
        len: usize,
        comm: u64,
        fixed: Option<u16>,
    },
    SendReq {
        comm: u64,
        id: u64,
    },
    RecvReq {
        comm: u64,
        id: u64,
    },
    Done,
}

#[derive(Debug, Default)]
struct Table {
    objs: HashMap<u64, Arc<Mutex<Obj>>>,
    dialing: HashMap<u64, Dialing>,
    next: u64,
    salt: u64,
    refs: usize,
}

static ENGINE: OnceLock<std::result::Result<Engine, PluginError>> = OnceLock::new();
static TABLE: Mutex<Option<Table>> = Mutex::new(None);

fn table() -> Result<MutexGuard<'static, Option<Table>>> {
    TABLE
        .lock()
        .map_err(|_| PluginError::Internal("plugin state poisoned by an earlier panic".into()))
}

fn insert(o: Obj) -> Result<u64> {
    let mut g = table()?;
    let t = g.get_or_insert_with(Table::default);
    if t.salt == 0 {
        t.salt = (u64::from(std::process::id()) << 40) | 0x5a00_0000_0000;
    }
    t.next += 1;
    let key = t.salt ^ (t.next << 4);
    t.objs.insert(key, Arc::new(Mutex::new(o)));
    Ok(key)
}

fn get(key: u64, what: &str) -> Result<Arc<Mutex<Obj>>> {
    table()?
        .as_ref()
        .and_then(|t| t.objs.get(&key).cloned())
        .ok_or_else(|| {
            PluginError::Usage(format!(
                "{what} {key:#x} is not a live handle of this plugin (closed already, or from another plugin)"
            ))
        })
}

fn remove(key: u64, what: &str) -> Result<Arc<Mutex<Obj>>> {
    table()?
        .as_mut()
        .and_then(|t| t.objs.remove(&key))
        .ok_or_else(|| PluginError::Usage(format!("{what} {key:#x} is not a live handle")))
}

fn lock(o: &Arc<Mutex<Obj>>) -> Result<MutexGuard<'_, Obj>> {
    o.lock()
        .map_err(|_| PluginError::Internal("a comm poisoned by an earlier panic".into()))
}

/// Discovers devices once (later calls share the first answer) and counts a user (v11+
/// contexts: `finalize` drops the count).
pub fn init() -> Result<&'static Engine> {
    let e = ENGINE.get_or_init(|| {
        let get = |k: &str| std::env::var(k).ok();
        let knobs = Knobs::from(get)?;
        let devices = crate::devices::discover(get)?;
        for (i, d) in devices.iter().enumerate() {
            crate::log::info(&format!(
                "device {i}: {} {} ({} Mbit/s), {} sockets per connection, {} B chunks",
                d.name.to_string_lossy(),
                d.addr,
                d.speed_mbps,
                knobs.nsocks,
                knobs.chunk
            ));
        }
        Ok(Engine { devices, knobs })
    });
    let e = e.as_ref().map_err(Clone::clone)?;
    table()?.get_or_insert_with(Table::default).refs += 1;
    Ok(e)
}

/// Drops one user of the engine.
pub fn finalize() -> Result<()> {
    if let Some(t) = table()?.as_mut() {
        t.refs = t.refs.saturating_sub(1);
    }
    Ok(())
}

/// Users of the engine (v11+ contexts not yet finalized, plus pre-v11 inits).
pub fn users() -> usize {
    table()
        .ok()
        .and_then(|t| t.as_ref().map(|t| t.refs))
        .unwrap_or(0)
}

/// The engine, once `init` succeeded.
pub fn engine() -> Result<&'static Engine> {
    match ENGINE.get() {
        Some(Ok(e)) => Ok(e),
        Some(Err(e)) => Err(e.clone()),
        None => Err(PluginError::Usage("called before init".into())),
    }
}

/// Device `dev`, checked.
pub fn device(dev: i32) -> Result<&'static Device> {
    let e = engine()?;
    usize::try_from(dev)
        .ok()
        .and_then(|d| e.devices.get(d))
        .ok_or_else(|| {
            PluginError::Invalid(format!(
                "device {dev} out of range (this plugin has {} devices)",
                e.devices.len()
            ))
        })
}

/// Listens on device `dev`: fills `handle` and returns the listen comm.
pub fn listen(dev: i32, handle_out: &mut [u8]) -> Result<u64> {
    let d = device(dev)?;
    let k = &engine()?.knobs;
    let l = Listen::new(d.addr, k.nsocks, k.connect_timeout)?;
    handle_out.fill(0);
    handle_out[..handle::HANDLE_LEN].copy_from_slice(&l.handle().encode());
    insert(Obj::Listen(l))
}

/// Connects to `handle` (NCCL's buffer, where progress is kept between calls): a send comm,
/// or `None` until connected.
pub fn connect(dev: i32, handle_buf: &mut [u8]) -> Result<Option<u64>> {
    device(dev)?;
    let h = Handle::decode(handle_buf)?;
    let stage = handle::stage(handle_buf);
    let mut g = table()?;
    let t = g.get_or_insert_with(Table::default);
    if stage == 0 {
        t.next += 1;
        let key = t.next;
        t.dialing
            .insert(key, Dialing::start(h, engine()?.knobs.connect_timeout)?);
        handle::set_stage(handle_buf, key);
        return Ok(None);
    }
    let socks = match t.dialing.get(&stage) {
        Some(d) => d.poll(),
        None => {
            return Err(PluginError::Usage(
                "connect: a handle whose connect already finished or failed".into(),
            ))
        }
    };
    match socks {
        Ok(None) => Ok(None),
        Ok(Some(s)) => {
            t.dialing.remove(&stage);
            drop(g);
            let k = &engine()?.knobs;
            let key = insert(Obj::Send(SendComm::new(s, k.chunk, k.tx)?))?;
            crate::stats::comm_opened();
            Ok(Some(key))
        }
        Err(e) => {
            t.dialing.remove(&stage);
            Err(e)
        }
    }
}

/// Accepts on `listen_comm`: a receive comm, or `None` until every socket arrived.
pub fn accept(listen_comm: u64) -> Result<Option<u64>> {
    let o = get(listen_comm, "listen comm")?;
    let socks = match &mut *lock(&o)? {
        Obj::Listen(l) => l.accept()?,
        _ => return Err(PluginError::Usage("accept: not a listen comm".into())),
    };
    match socks {
        Some(s) => {
            let k = &engine()?.knobs;
            // The receiver accepts any chunk size up to the largest knob value, so both sides
            // need not agree on ZCNET_NCCL_CHUNK.
            let key = insert(Obj::Recv(RecvComm::new(s, k.chunk.max(16 << 20), k.rx)?))?;
            crate::stats::comm_opened();
            Ok(Some(key))
        }
        None => Ok(None),
    }
}

/// Registers memory: host memory only (ptrSupport says so). On a send comm sending with
/// io_uring the range also becomes a fixed buffer of its ring where the kernel allows.
pub fn reg_mr(comm: u64, addr: usize, len: usize, ptr_type: i32) -> Result<u64> {
    let c = get(comm, "comm")?;
    if ptr_type != crate::abi::PTR_HOST {
        return Err(PluginError::Invalid(format!(
            "regMr of pointer type {ptr_type}: this plugin announced host memory only (ptrSupport NCCL_PTR_HOST); CUDA buffers need a NIC with devmem TCP"
        )));
    }
    let fixed = match &mut *lock(&c)? {
        Obj::Send(s) if len > 0 => s.register(addr, len),
        Obj::Send(_) | Obj::Recv(_) => None,
        _ => {
            return Err(PluginError::Usage(
                "regMr: not a send or receive comm".into(),
            ))
        }
    };
    insert(Obj::Mr {
        addr,
        len,
        comm,
        fixed,
    })
}

/// Drops a registration (and its fixed buffer, if its comm is still open).
pub fn dereg_mr(mr: u64) -> Result<()> {
    let (comm, fixed) = match &*lock(&remove(mr, "memory handle")?)? {
        Obj::Mr { comm, fixed, .. } => (*comm, *fixed),
        _ => return Err(PluginError::Usage("deregMr: not a memory handle".into())),
    };
    if let (Some(idx), Ok(c)) = (fixed, get(comm, "comm")) {
        if let Obj::Send(s) = &mut *lock(&c)? {
            s.unregister(idx);
        }
    }
    Ok(())
}

fn check_mr(mr: u64, buf: &ForeignBuf) -> Result<()> {
    if mr == 0 {
        return Ok(());
    }
    match &*lock(&get(mr, "memory handle")?)? {
        Obj::Mr { addr, len, .. } => {
            let inside = buf.is_empty()
                || (buf.addr() >= *addr && buf.addr() + buf.len() <= addr.saturating_add(*len));
            if inside {
                Ok(())
            } else {
                Err(PluginError::Invalid(format!(
                    "buffer {:#x}+{} outside its registration {addr:#x}+{len}",
                    buf.addr(),
                    buf.len()
                )))
            }
        }
        _ => Err(PluginError::Usage("not a memory handle".into())),
    }
}

/// Queues a send; `None` when NCCL must retry later.
pub fn isend(comm: u64, buf: ForeignBuf, tag: i32, mr: u64) -> Result<Option<u64>> {
    if buf.len() as u64 > MAX_MESSAGE {
        return Err(PluginError::Invalid(format!(
            "isend of {} B: over maxP2pBytes ({MAX_MESSAGE} B)",
            buf.len()
        )));
    }
    check_mr(mr, &buf)?;
    let o = get(comm, "send comm")?;
    let id = match &mut *lock(&o)? {
        Obj::Send(s) => s.isend(buf, tag)?,
        _ => return Err(PluginError::Usage("isend: not a send comm".into())),
    };
    id.map(|id| insert(Obj::SendReq { comm, id })).transpose()
}

/// Posts a grouped receive; `None` when NCCL must retry later.
pub fn irecv(comm: u64, bufs: Vec<ForeignBuf>, tags: &[i32], mrs: &[u64]) -> Result<Option<u64>> {
    for (b, m) in bufs.iter().zip(mrs) {
        check_mr(*m, b)?;
    }
    let o = get(comm, "receive comm")?;
    let id = match &mut *lock(&o)? {
        Obj::Recv(r) => r.irecv(bufs, tags)?,
        _ => return Err(PluginError::Usage("irecv: not a receive comm".into())),
    };
    id.map(|id| insert(Obj::RecvReq { comm, id })).transpose()
}

/// A request that is already complete (a flush of host memory).
pub fn done_request() -> Result<u64> {
    insert(Obj::Done)
}

/// Tests a request: the sizes when done (one per buffer), `None` while in flight. A done or
/// failed request is forgotten.
pub fn test(req: u64) -> Result<Option<Vec<u64>>> {
    let r = get(req, "request")?;
    let (is_send, comm, id) = match &*lock(&r)? {
        Obj::SendReq { comm, id } => (true, *comm, *id),
        Obj::RecvReq { comm, id } => (false, *comm, *id),
        Obj::Done => {
            remove(req, "request")?;
            return Ok(Some(Vec::new()));
        }
        _ => return Err(PluginError::Usage("test: not a request".into())),
    };
    let out = match get(comm, "comm") {
        Ok(c) => match &mut *lock(&c)? {
            Obj::Send(s) if is_send => s.test(id).map(|o| o.map(|n| vec![n])),
            Obj::Recv(rc) if !is_send => rc.test(id),
            _ => Err(PluginError::Internal("request of the wrong comm".into())),
        },
        Err(_) => Err(PluginError::Usage(
            "test: the request's comm was closed".into(),
        )),
    };
    if !matches!(out, Ok(None)) {
        let _ = remove(req, "request");
    }
    out
}

/// Closes a comm of any kind; its sockets close, its buffers are never touched again.
pub fn close(comm: u64, what: &str) -> Result<()> {
    let o = remove(comm, what)?;
    let mut g = lock(&o)?;
    let stats = match (&mut *g, what) {
        (Obj::Listen(_), "listen comm") => return Ok(()),
        (Obj::Send(s), "send comm") => {
            // What is still in flight ends first, its notifications counted.
            s.shutdown();
            s.stats().clone()
        }
        (Obj::Recv(r), "receive comm") => r.stats().clone(),
        _ => return Err(PluginError::Usage(format!("close: not a {what}"))),
    };
    // The comm goes (its requests cancelled, sockets closed) before the totals are reported.
    *g = Obj::Done;
    drop(g);
    drop(o);
    crate::stats::comm_closed(&stats);
    Ok(())
}

/// Live handles (comms, registrations, requests): for leak checks.
pub fn live_handles() -> usize {
    table()
        .ok()
        .and_then(|t| t.as_ref().map(|t| t.objs.len() + t.dialing.len()))
        .unwrap_or(0)
}
