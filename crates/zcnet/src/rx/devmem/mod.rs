//! `devmem`: devmem TCP receive (Documentation/networking/devmem.rst, Linux 6.12+). A dma-buf
//! (`cfg.dmabuf`, e.g. GPU memory, or else a udmabuf of host memory) is bound to RX queue
//! `cfg.queue` of `cfg.iface` with the netdev family's `bind-rx`; the NIC writes payload into
//! it and `recvmsg(MSG_SOCK_DEVMEM)` describes each piece with a cmsg. Device pieces are lent
//! as [`Location::Device`] ranges (key = connection slot and frag token, `copied` false) and
//! returned with `SO_DEVMEM_DONTNEED` batches at the next poll; bytes the kernel copied into the
//! host buffer (`SCM_DEVMEM_LINEAR`: the skb's linear part, typically a packet the NIC did not
//! split) are lent as [`Location::Host`] pieces of a pool buffer (`copied` true, counted in
//! [`super::RxStats::linear_fallbacks`]).
//!
//! Which sockets: only traffic that the NIC steers to the bound queue lands in the dma-buf.
//! Add TCP connections whose flow an ntuple rule sends to `cfg.queue` (`zcnet nic setup --iface
//! IFACE --queue Q --port P`), accepted in the network namespace of the interface. Traffic of
//! an added connection that arrives on another queue is host memory: the kernel copies it as a
//! plain `recvmsg` would (no cmsg), and zcnet delivers it as copied host bytes counted in
//! [`super::RxStats::unsteered`] (not in `linear_fallbacks`), so a flow that is not steered
//! shows up there.
//!
//! One `recvmsg` gets as many free pool buffers as make 256 KiB as its iovec (at least one,
//! at most 16): the kernel counts every byte against the iovec, device bytes included, even
//! though only linear bytes are written into it, so the iovec's length bounds how much one
//! call moves. Linear bytes are packed from the first buffer on; a piece that crosses into the
//! next buffer is delivered as one handle per buffer, in stream order, and buffers the read did
//! not write into go straight back to the pool.
//!
//! Tokens belong to their socket: the kernel frees a socket's frags when it is closed. So a
//! removed connection whose frags the application still holds stays open (reported closable
//! once every token has come back), and its device data stays valid until the handles drop.

use super::copy::{recv_error, ConnSet, Pool, READS_PER_CONN};
use super::zcrx::{not_permitted, target, Target};
use super::{ConnId, Ctx, DeviceSlice, Location, RxBackend, RxConfig, RxMode};
use crate::error::{Error, Result};
use crate::remedy::Remedy;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;
use zcnet_core::devmem::{DevmemCmsg, DevmemError, DevmemRx, DMABUF_CMSG_LEN, MAX_DONTNEED_TOKENS};
use zcnet_core::DeviceFrag;
use zcnet_netlink::netdev::RxBinding;
use zcnet_sys::devmem::{self as sys, MSG_SOCK_DEVMEM_FLAG};

mod refusal;
use refusal::{bind_refusal, device_refusal, no_dmabuf};

/// Host keys have this bit; device keys (slot << 32 | token, tokens below 2^31) never do.
const HOST_KEY: u64 = 1 << 63;
/// Connection slots and host offsets must fit the 31 bits above a key's low word.
const MAX_SLOT: u32 = (1 << 31) - 1;
/// SO_DEVMEM_DONTNEED calls per connection per poll at most.
const DONTNEED_CALLS: usize = 8;
/// Bytes one `recvmsg` may take at most: its iovec is this many bytes of pool buffers.
const READ_BYTES: usize = 256 << 10;
/// Pool buffers in one `recvmsg`'s iovec at most.
const READ_BUFS: usize = 16;
/// Control messages the control buffer has room for at most (40 B each).
const MAX_CMSGS: usize = 4096;
const _: () = assert!(READ_BUFS <= sys::MAX_IOVECS);

fn host_key(idx: u32, off: u32) -> u64 {
    HOST_KEY | (u64::from(off) << 32) | u64::from(idx)
}

fn device_key(slot: u32, token: u32) -> u64 {
    (u64::from(slot) << 32) | u64::from(token)
}

/// One added connection.
#[derive(Debug)]
struct Sock {
    conn: ConnId,
    fd: RawFd,
    /// Its tokens: held, waiting for DONTNEED, in flight.
    toks: DevmemRx,
    /// Removed by the application: closable once no token is outstanding.
    removed: bool,
}

/// What one read delivers, in stream order.
enum Piece {
    Linear(u32),
    Device(DeviceFrag),
}

/// The `devmem` backend: the binding, and the connections receiving through it.
#[derive(Debug)]
pub(super) struct DevmemBackend {
    // Field order: the binding is released first (the kernel keeps the memory until every frag
    // is back), then the dma-buf fd is closed.
    _binding: RxBinding,
    _dmabuf: Arc<OwnedFd>,
    st: Socks,
}

/// Everything but the binding: the connections, their tokens, the host buffers.
#[derive(Debug)]
struct Socks {
    /// The binding's dma-buf id and length, to validate frags against (length 0: unknown).
    dmabuf_id: u32,
    dmabuf_len: u64,
    target: Target,
    pool: Pool,
    buf_size: usize,
    /// Pool buffers in one read's iovec.
    read_bufs: usize,
    /// The buffers of the read in progress (kept to reuse the allocation).
    taken: Vec<u32>,
    conns: ConnSet,
    socks: HashMap<u32, Sock>,
    slots: HashMap<ConnId, u32>,
    next_slot: u32,
    /// Pool buffers lent in pieces: buffer -> offsets of the pieces still out.
    pieces: HashMap<u32, Vec<u32>>,
    ctrl: Vec<u8>,
    starving: bool,
}

impl DevmemBackend {
    pub fn new(cfg: &RxConfig) -> Result<DevmemBackend> {
        let target = target(cfg, RxMode::Devmem)?;
        if cfg.buf_size == 0 || cfg.buf_size > MAX_SLOT as usize {
            return Err(Error::io(
                "devmem receive buffers must be 1 B to 2 GiB",
                io::Error::from_raw_os_error(libc::EINVAL),
            ));
        }
        let dmabuf = match &cfg.dmabuf {
            Some(fd) => Ok(Arc::clone(fd)),
            None => sys::udmabuf_create(cfg.area_len).map(Arc::new),
        };
        let dmabuf = match dmabuf {
            Ok(d) => d,
            // Report the device's refusal first: with it, a dma-buf would not help.
            Err(e) => return Err(device_refusal(&target).unwrap_or_else(|| no_dmabuf(&target, e))),
        };
        // For validating frags; 0 (unknown) turns validation off.
        let dmabuf_len = sys::dmabuf_size(dmabuf.as_fd()).unwrap_or(0);
        let binding = RxBinding::bind(target.ifindex, dmabuf.as_raw_fd(), &[target.queue])
            .map_err(|e| bind_refusal(&target, &e))?;
        let st = Socks::new(cfg, target, binding.id(), dmabuf_len)?;
        Ok(DevmemBackend {
            _binding: binding,
            _dmabuf: dmabuf,
            st,
        })
    }
}

impl Socks {
    fn new(cfg: &RxConfig, target: Target, dmabuf_id: u32, dmabuf_len: u64) -> Result<Socks> {
        let read_bufs = (READ_BYTES / cfg.buf_size).clamp(1, READ_BUFS);
        // Room for the cmsgs of one full read: one per device frag (a packet's payload with
        // header split, usually), plus linear ones; a short buffer only makes reads shorter.
        let cmsgs = (read_bufs * cfg.buf_size / 512 + 64).min(MAX_CMSGS);
        let ctrl_len = sys::cmsg_space(DMABUF_CMSG_LEN) * cmsgs;
        Ok(Socks {
            dmabuf_id,
            dmabuf_len,
            target,
            pool: Pool::new(cfg.buffers, cfg.buf_size)?,
            buf_size: cfg.buf_size,
            read_bufs,
            taken: Vec::with_capacity(read_bufs),
            conns: ConnSet::new()?,
            socks: HashMap::new(),
            slots: HashMap::new(),
            next_slot: 0,
            pieces: HashMap::new(),
            ctrl: vec![0; ctrl_len],
            starving: false,
        })
    }

    /// Stops reading `slot`'s socket and reports `e`.
    fn fail(&mut self, ctx: &mut Ctx<'_>, slot: u32, e: Error) {
        if let Some(s) = self.socks.get(&slot) {
            self.conns.remove(s.conn);
            ctx.failed(s.conn, e);
        }
    }

    /// Puts back pool buffers taken for a read and not lent.
    fn untake_all(&mut self, idxs: &[u32]) {
        for &i in idxs {
            self.pool.untake(i);
        }
    }

    /// Reads one ready connection until it has nothing more, the pool is empty, or its share
    /// of reads is used.
    fn read_conn(&mut self, ctx: &mut Ctx<'_>, conn: ConnId, fd: RawFd) {
        let Some(&slot) = self.slots.get(&conn) else {
            return;
        };
        let mut idxs = std::mem::take(&mut self.taken);
        for _ in 0..READS_PER_CONN {
            self.pool.take_many(self.read_bufs, &mut idxs);
            if idxs.is_empty() {
                ctx.stats.starved += u64::from(!self.starving);
                self.starving = true;
                break;
            }
            self.starving = false;
            let read_len = idxs.len() * self.buf_size;
            let flags = MSG_SOCK_DEVMEM_FLAG | libc::MSG_DONTWAIT;
            let bufs = self.pool.bufs_mut(&idxs);
            match sys::recvmsg_ctrl_vectored(fd, bufs, &mut self.ctrl, flags) {
                Ok(r) if r.bytes == 0 => {
                    self.untake_all(&idxs);
                    self.conns.remove(conn);
                    ctx.eof(conn);
                    break;
                }
                Ok(r) => {
                    if !self.deliver(ctx, slot, &idxs, r) || r.bytes < read_len {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.untake_all(&idxs);
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => self.untake_all(&idxs),
                Err(e) => {
                    self.untake_all(&idxs);
                    self.fail(ctx, slot, recv_error(conn, e));
                    break;
                }
            }
        }
        idxs.clear();
        self.taken = idxs;
    }

    /// Turns one `recvmsg` into handles, in stream order. `idxs` are the pool buffers of its
    /// iovec, in iovec order: linear bytes fill them from the first on, and each buffer they
    /// reach is lent (a piece that crosses into the next buffer is one handle per buffer);
    /// the others go back to the pool. False when the connection failed.
    fn deliver(&mut self, ctx: &mut Ctx<'_>, slot: u32, idxs: &[u32], r: sys::Received) -> bool {
        let Some(sock) = self.socks.get_mut(&slot) else {
            self.untake_all(idxs);
            return false;
        };
        let conn = sock.conn;
        let mut pieces = Vec::new();
        // Whether any devmem cmsg came: without one, the read was plain host memory.
        let mut devmem = false;
        let mut problem = r
            .ctrl_truncated
            .then(|| "control messages were cut (MSG_CTRUNC)".to_string());
        // Every cmsg is read, past a bad one too: the tokens of the good ones after it must be
        // recorded to be given back (below), or the kernel keeps their frags pinned until the
        // socket closes. The first problem is the one reported.
        for c in sys::cmsgs(&self.ctrl[..r.ctrl_len]) {
            let parsed = c
                .map_err(|e| e.to_string())
                .and_then(|c| DevmemCmsg::parse(c.level, c.ty, c.data).map_err(|e| e.to_string()));
            match parsed {
                Ok(None) => {}
                Ok(Some(DevmemCmsg::Linear { len })) => {
                    devmem = true;
                    pieces.push(Piece::Linear(len));
                }
                Ok(Some(d)) => {
                    devmem = true;
                    match sock.toks.on_cmsg(d) {
                        Ok(Some(f)) => pieces.push(Piece::Device(f)),
                        Ok(None) => {}
                        Err(e) => {
                            problem.get_or_insert(e.to_string());
                        }
                    }
                }
                Err(e) => {
                    problem.get_or_insert(e);
                }
            }
        }
        let (mut linear, mut described) = (0u64, 0u64);
        for p in &pieces {
            match p {
                Piece::Linear(n) => linear += u64::from(*n),
                Piece::Device(f) => described += u64::from(f.len),
            }
        }
        described += linear;
        if !devmem {
            // A plain read: all of it was copied into the buffers.
            linear = r.bytes as u64;
        }
        let room = (idxs.len() * self.buf_size) as u64;
        if problem.is_none() && devmem && described != r.bytes as u64 {
            problem = Some(format!(
                "cmsgs describe {described} B of a {} B read",
                r.bytes
            ));
        }
        if problem.is_none() && linear > room {
            problem = Some(format!(
                "cmsgs place {linear} B of linear data in {room} B of buffers"
            ));
        }
        if let Some(p) = problem {
            // Frags recorded from this read are not lent: give their tokens back.
            for piece in &pieces {
                if let Piece::Device(f) = piece {
                    let _ = sock.toks.release(f.token);
                }
            }
            self.untake_all(idxs);
            let e = Error::io(
                format!(
                    "devmem receive on connection {conn} ({} queue {}): {p} (please report this)",
                    self.target.iface, self.target.queue
                ),
                io::Error::from_raw_os_error(libc::EPROTO),
            );
            self.fail(ctx, slot, e);
            return false;
        }
        if !devmem {
            // Host memory: a flow (or part of it) that did not arrive on the bound queue.
            ctx.stats.unsteered += linear;
            pieces.push(Piece::Linear(linear as u32));
        }
        // Where the next linear byte goes: buffer `k` of `idxs`, at `off`.
        let (mut k, mut off) = (0usize, 0u32);
        let mut offs: Vec<Vec<u32>> = vec![Vec::new(); idxs.len()];
        for p in pieces {
            match p {
                Piece::Linear(mut n) => {
                    ctx.stats.linear_fallbacks += u64::from(devmem);
                    while n > 0 {
                        let take = n.min(self.buf_size as u32 - off);
                        let idx = idxs[k];
                        ctx.deliver(
                            conn,
                            host_key(idx, off),
                            take as usize,
                            Location::Host,
                            true,
                        );
                        offs[k].push(off);
                        (off, n) = (off + take, n - take);
                        if off as usize == self.buf_size {
                            (k, off) = (k + 1, 0);
                        }
                    }
                }
                Piece::Device(f) => {
                    let slice = DeviceSlice {
                        dmabuf_id: f.dmabuf_id,
                        offset: f.offset,
                        len: f.len as usize,
                    };
                    let key = device_key(slot, f.token);
                    ctx.deliver(conn, key, f.len as usize, Location::Device(slice), false);
                }
            }
        }
        for (&idx, o) in idxs.iter().zip(offs) {
            if o.is_empty() {
                self.pool.untake(idx);
            } else {
                self.pool.lend(idx);
                self.pieces.insert(idx, o);
            }
        }
        true
    }

    /// Sends the released tokens of every connection back with SO_DEVMEM_DONTNEED, and
    /// reports removed connections whose tokens are all back.
    fn return_tokens(&mut self, ctx: &mut Ctx<'_>) {
        let mut gone = Vec::new();
        for (&slot, s) in self.socks.iter_mut() {
            for _ in 0..DONTNEED_CALLS {
                let batch = match s.toks.take_dontneed_batch(MAX_DONTNEED_TOKENS) {
                    Ok(b) if !b.is_empty() => b,
                    _ => break,
                };
                match sys::devmem_dontneed(s.fd, &batch) {
                    Ok(n) => match s.toks.on_dontneed_result(n) {
                        // Nothing freed: the kernel's state has to change first; try next poll.
                        Ok(o) if o.freed == 0 => break,
                        Ok(_) => {}
                        // More freed than asked: every token asked for is gone.
                        Err(DevmemError::FreedTooMany { asked, .. }) => {
                            let _ = s.toks.on_dontneed_result(asked);
                        }
                        Err(_) => break,
                    },
                    Err(e) => {
                        let _ = s
                            .toks
                            .on_dontneed_error(e.raw_os_error().unwrap_or(libc::EIO));
                        break;
                    }
                }
            }
            if s.removed && s.toks.stats().tokens_outstanding == 0 {
                gone.push(slot);
            }
        }
        for slot in gone {
            if let Some(s) = self.socks.remove(&slot) {
                self.slots.remove(&s.conn);
                ctx.closable.push(s.conn);
            }
        }
    }
}

impl Socks {
    fn add(&mut self, conn: ConnId, fd: RawFd) -> Result<()> {
        if self.next_slot > MAX_SLOT {
            return Err(Error::io(
                "devmem receive: 2^31 connections added to one receiver; make a new one",
                io::Error::from_raw_os_error(libc::EMFILE),
            ));
        }
        let slot = self.next_slot;
        self.conns.add(conn, fd)?;
        self.next_slot += 1;
        let mut toks = DevmemRx::new();
        if self.dmabuf_len > 0 {
            toks.bind_dmabuf(self.dmabuf_id, self.dmabuf_len);
        }
        self.socks.insert(
            slot,
            Sock {
                conn,
                fd,
                toks,
                removed: false,
            },
        );
        self.slots.insert(conn, slot);
        Ok(())
    }

    fn remove(&mut self, conn: ConnId) -> bool {
        self.conns.remove(conn);
        let Some(&slot) = self.slots.get(&conn) else {
            return true;
        };
        let Some(s) = self.socks.get_mut(&slot) else {
            return true;
        };
        if s.toks.stats().tokens_outstanding == 0 {
            self.socks.remove(&slot);
            self.slots.remove(&conn);
            return true;
        }
        // Closing the socket would free frags the application still reads.
        s.removed = true;
        false
    }

    fn release(&mut self, key: u64, _len: usize) {
        if key & HOST_KEY != 0 {
            let (idx, off) = (key as u32, ((key & !HOST_KEY) >> 32) as u32);
            if let Some(offs) = self.pieces.get_mut(&idx) {
                if let Some(i) = offs.iter().position(|&o| o == off) {
                    offs.swap_remove(i);
                }
                if offs.is_empty() {
                    self.pieces.remove(&idx);
                    self.pool.give_back(u64::from(idx));
                }
            }
        } else if let Some(s) = self.socks.get_mut(&((key >> 32) as u32)) {
            // A token not held cannot come from a live RxBuf; the bookkeeping refuses it.
            let _ = s.toks.release(key as u32);
        }
    }

    fn poll(&mut self, ctx: &mut Ctx<'_>, timeout: Duration) -> Result<()> {
        self.return_tokens(ctx);
        // With every host buffer lent, only look (no wait), like `copy`: even device data
        // needs an iovec to be received into.
        let timeout = if self.pool.has_free() {
            timeout
        } else {
            Duration::ZERO
        };
        for (conn, fd) in self.conns.wait(timeout)? {
            self.read_conn(ctx, conn, fd);
        }
        Ok(())
    }

    fn bytes(&self, key: u64, len: usize) -> Option<&[u8]> {
        if key & HOST_KEY == 0 {
            return None;
        }
        let (idx, off) = (key as u32, ((key & !HOST_KEY) >> 32) as u32);
        if !self.pieces.get(&idx)?.contains(&off) {
            return None;
        }
        let off = off as usize;
        self.pool
            .bytes(u64::from(idx), off.checked_add(len)?)?
            .get(off..)
    }

    fn held(&self) -> usize {
        let host: usize = self.pieces.values().map(Vec::len).sum();
        let device: usize = self.socks.values().map(|s| s.toks.held()).sum();
        host + device
    }
}

impl RxBackend for DevmemBackend {
    fn mode(&self) -> RxMode {
        RxMode::Devmem
    }

    fn add(&mut self, conn: ConnId, fd: RawFd) -> Result<()> {
        self.st.add(conn, fd)
    }

    fn remove(&mut self, conn: ConnId) -> bool {
        self.st.remove(conn)
    }

    fn release(&mut self, key: u64, len: usize) {
        self.st.release(key, len)
    }

    fn poll(&mut self, ctx: &mut Ctx<'_>, timeout: Duration) -> Result<()> {
        self.st.poll(ctx, timeout)
    }

    fn bytes(&self, key: u64, len: usize) -> Option<&[u8]> {
        self.st.bytes(key, len)
    }

    fn held(&self) -> usize {
        self.st.held()
    }

    fn ready_fd(&mut self) -> Result<BorrowedFd<'_>> {
        Ok(self.st.conns.ready_fd())
    }

    fn waker(&self) -> Option<zcnet_sys::epoll::EventFd> {
        self.st.conns.waker()
    }

    fn starving(&self) -> bool {
        self.st.starving
    }
}

#[cfg(test)]
mod tests;
