//! The initiator's side of a stream: connecting (HELLO), the writer thread that sends posted
//! parts and notifications, the reader thread that takes READ data and acknowledgements, and
//! how a large request is cut into parts across streams.

use std::io::{self, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};

use super::out::{mem, mem_mut, Out, INLINE_MAX};
use super::wire::*;
use super::*;

/// One stream to the target engine `instance` at `addr`. Its HELLO names this agent and this
/// engine's instance (the session the target groups a striped request's parts by).
pub(super) fn connect(
    sh: &Shared,
    addr: SocketAddr,
    instance: u64,
) -> Result<Arc<Conn>, (i32, String)> {
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

pub(super) fn writer_loop(
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
pub(super) fn send_msg(out: &mut Out<'_>, mut h: Hdr, msg: Vec<u8>) -> io::Result<()> {
    h.b = msg.len() as u64;
    if msg.len() as u64 <= INLINE_MAX {
        return out.frame(&h, &msg);
    }
    out.frame(&h, &[])?;
    out.lent(zcnet::engine::ForeignBuf::owned(msg.into_boxed_slice()))
}

pub(super) fn send_post(out: &mut Out<'_>, part: Part) -> io::Result<()> {
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

pub(super) fn reader_loop(stream: TcpStream, conn: std::sync::Weak<Conn>) {
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
pub(super) fn recv_read_data(
    r: &mut impl Read,
    h: &Hdr,
    x: Option<(&Xfer, &[Desc])>,
) -> io::Result<()> {
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

/// Cuts `descs` into at most `n` parts of about equal bytes, in order, each a list of
/// descriptors (a descriptor cut in two at a multiple of [`STRIPE_ALIGN`] from its start).
pub(super) fn stripe(descs: &[Desc], n: usize) -> Vec<Vec<Desc>> {
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
