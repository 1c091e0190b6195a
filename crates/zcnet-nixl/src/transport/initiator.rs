//! The initiator's side of a stream: connecting (HELLO), the reader thread that takes READ
//! data and acknowledgements, and how a large request is cut into parts across streams (the
//! sending side is `send.rs`).

use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::out::{mem_mut, Out};
use super::rx::{wait_readable, Rx, Wait};
use super::send::{writer_loop, Tx};
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
    let out = Out::new(&stream, tx).map_err(|e| (ERR_BACKEND, format!("cannot send: {e}")))?;
    let conn = Arc::new(Conn {
        tx: Tx::new(out),
        rx: Mutex::new(Rx::new(stream.try_clone().map_err(disc)?)),
        stream: stream.try_clone().map_err(disc)?,
        pending: Mutex::new(HashMap::new()),
        dead: AtomicBool::new(false),
        next_post: AtomicU64::new(1),
        threads: Mutex::new(Vec::new()),
        stats,
    });
    let c1 = Arc::downgrade(&conn);
    let writer = std::thread::Builder::new()
        .name("zcnet-nixl-tx".into())
        .spawn(move || writer_loop(c1))
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

/// The reader thread: whenever the stream is readable, handles what arrived, until the stream
/// ends or fails.
pub(super) fn reader_loop(stream: TcpStream, conn: std::sync::Weak<Conn>) {
    loop {
        let r = wait_readable(&stream);
        let Some(c) = conn.upgrade() else { return };
        if let Err(e) = r {
            return c.receive_failed(&e);
        }
        if c.receive(Wait::Block) {
            return;
        }
    }
}

impl Conn {
    /// Handles the frames that arrived (those wholly here, for [`Wait::Never`], which also
    /// leaves at once if another thread is receiving). True once the stream ended or failed
    /// (its requests failed with it).
    pub(super) fn receive(&self, wait: Wait) -> bool {
        let mut rx = match self.rx.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) if wait == Wait::Never => return false,
            Err(std::sync::TryLockError::WouldBlock) => {
                self.rx.lock().unwrap_or_else(|e| e.into_inner())
            }
        };
        let r = (|| {
            while let Some(h) = rx.next(wait)? {
                self.handle(&mut *rx, &h)?;
            }
            Ok::<_, io::Error>(())
        })();
        drop(rx);
        match r {
            Ok(()) => false,
            Err(e) => {
                self.receive_failed(&e);
                true
            }
        }
    }

    /// One frame from the target whose header was read (its payload follows in `r`).
    fn handle(&self, r: &mut impl PayloadRead, h: &Hdr) -> io::Result<()> {
        let x = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&h.post)
            .cloned();
        match h.kind {
            K_READ_DATA => recv_read_data(r, h, x.as_ref().map(|(x, d)| (&**x, &**d))),
            K_ACK => {
                self.pending
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
        }
    }

    /// Receiving failed or the stream ended: it is shut down and its requests fail (a peer
    /// that goes away with nothing outstanding is a close, not an error worth a line).
    fn receive_failed(&self, e: &io::Error) {
        let _ = self.stream.shutdown(Shutdown::Both);
        let busy = !self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty();
        if busy && !self.dead.load(Ordering::SeqCst) {
            log(&format!("connection lost with requests outstanding: {e}"));
        }
        self.fail_all(ERR_REMOTE_DISCONNECT);
    }
}

/// READ data for descriptor `h.d` of a part (`x` and the part's descriptors; `None`: a part
/// no longer pending, whose data is read and dropped).
pub(super) fn recv_read_data(
    r: &mut impl PayloadRead,
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
            None => r.payload(unsafe { mem_mut(d.local_addr, d.len) }),
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
