//! The target's side: the acceptor thread and, per incoming connection, the server thread
//! that applies WRITEs, answers READs, queues notifications and acknowledges each part.

use std::collections::HashMap;
use std::io::{self, BufReader};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::out::{mem, mem_mut, Out, INLINE_MAX};
use super::wire::*;
use super::*;

pub(super) fn accept_loop(listener: TcpListener, shared: Arc<Shared>, incoming: Arc<Incoming>) {
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
pub(super) fn serve(stream: TcpStream, sh: &Shared) -> io::Result<()> {
    let mut r = BufReader::with_capacity(IO_BUF, &stream);
    let mut w = Out::new(&stream, sh.tx)?;
    let mut peer = None;
    let r = serve_on(&mut r, &mut w, sh, &mut peer);
    if let Some(t) = w.stats() {
        sh.stats.add(&t);
    }
    if let Some((name, session)) = peer {
        sh.forget_groups(&name, session);
    }
    r
}

/// Serves one connection; `who` is set to the peer's agent name and engine instance once its
/// HELLO was read.
pub(super) fn serve_on(
    r: &mut BufReader<&TcpStream>,
    w: &mut Out,
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
                        None => r.payload(unsafe { mem_mut(h.a, h.b) })?,
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

pub(super) fn region_ok_locked(
    map: &HashMap<u64, (u64, u64)>,
    key: u64,
    addr: u64,
    len: u64,
) -> bool {
    match map.get(&key) {
        Some(&(base, size)) => {
            addr >= base && addr.checked_add(len).is_some_and(|end| end <= base + size)
        }
        None => false,
    }
}
