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

/// Why the device (or the kernel) refused a binding, and the way out; the kernel's own
/// message (extack) goes in the line too.
fn bind_refusal(t: &Target, e: &zcnet_netlink::Error) -> Error {
    let errno = e.errno();
    let (reason, fix) = match errno {
        Some(libc::EOPNOTSUPP) => (
            "the device cannot take a dma-buf binding: its driver has no queue-management ops or header split; virtual devices such as veth, lo, ifb and tun never have them".to_string(),
            Remedy::Any(&[
                Remedy::Other("use a NIC with devmem support and header split (mlx5, bnxt, gve, fbnic)"),
                Remedy::SetupNic,
                Remedy::UseRxMode(RxMode::Uring),
            ]),
        ),
        Some(libc::EINVAL) => (
            "the kernel refused the binding: header split (tcp-data-split) is off, hds-thresh is not 0, or the fd is not a dma-buf the device can map".to_string(),
            Remedy::Any(&[
                Remedy::All(&[
                    Remedy::SetupNic,
                    Remedy::Other("pass a dma-buf the NIC can reach"),
                ]),
                Remedy::UseRxMode(RxMode::Uring),
            ]),
        ),
        Some(libc::EEXIST) | Some(libc::EBUSY) => (
            "the queue already has a memory provider (a zcrx area or another binding) or an XDP program".to_string(),
            Remedy::OtherQueue,
        ),
        Some(libc::ERANGE) => (
            "the queue index is past the device's RX queues".to_string(),
            Remedy::ChooseQueue,
        ),
        Some(libc::ENODEV) => (
            "the interface is not in this network namespace (any more)".to_string(),
            Remedy::Any(&[
                Remedy::Other("check 'ip link' and retry"),
                Remedy::UseRxMode(RxMode::Uring),
            ]),
        ),
        Some(libc::EPERM) | Some(libc::EACCES) => {
            let (reason, fix) = not_permitted(
                t,
                "devmem TCP",
                "binding a dma-buf needs CAP_NET_ADMIN",
            );
            (reason.into_owned(), fix)
        }
        Some(libc::ENOMEM) => (
            "mapping the dma-buf for the device failed (out of memory or IOMMU space)".to_string(),
            Remedy::Any(&[Remedy::SmallerDmabuf, Remedy::UseRxMode(RxMode::Uring)]),
        ),
        _ => (
            e.to_string(),
            Remedy::Any(&[
                Remedy::NeedKernel("Linux 6.12+ (netdev bind-rx) and a NIC with header split"),
                Remedy::UseRxMode(RxMode::Uring),
            ]),
        ),
    };
    let kernel = e
        .extack()
        .filter(|m| !m.is_empty())
        .map(|m| format!("; kernel: {}", m.replace(['\n', '\r'], " ")))
        .unwrap_or_default();
    Error::Unsupported {
        what: format!(
            "devmem TCP receive on {} queue {} ({reason}{kernel})",
            t.iface, t.queue
        ),
        source: io::Error::from_raw_os_error(errno.unwrap_or(libc::EOPNOTSUPP)),
        remedy: fix,
    }
}

/// Asks whether the device would take a binding, without a dma-buf: bind-rx with `/dev/null`
/// (as `zcnet probe --active` does). The kernel checks the device (present, queue-management
/// ops) before it looks at the fd (net/core/netdev-genl.c), so `EINVAL`/`EBADF` mean "the
/// device got past that; the fd is no dma-buf" and nothing is bound; other errors are the
/// device's (or the caller's) refusal.
fn device_refusal(t: &Target) -> Option<Error> {
    let null = std::fs::File::open("/dev/null").ok()?;
    match RxBinding::bind(t.ifindex, null.as_raw_fd(), &[t.queue]) {
        // Bound to /dev/null: impossible, but nothing to complain about; dropping unbinds.
        Ok(_) => None,
        Err(e) if matches!(e.errno(), Some(libc::EINVAL | libc::EBADF)) => None,
        Err(e) => Some(bind_refusal(t, &e)),
    }
}

/// The dma-buf could not be made (and the device would take one).
fn no_dmabuf(t: &Target, e: io::Error) -> Error {
    let reason = sys::explain_udmabuf_errno(e.raw_os_error().unwrap_or(0));
    Error::Unsupported {
        what: format!(
            "devmem TCP receive on {} queue {}: no dma-buf to bind (a udmabuf of host memory could not be made: {reason})",
            t.iface, t.queue
        ),
        source: e,
        remedy: Remedy::Any(&[
            Remedy::Other("pass a dma-buf of device memory (RxConfig::dmabuf, e.g. exported by a GPU driver)"),
            Remedy::Other("load udmabuf (CONFIG_UDMABUF) for host memory"),
            Remedy::UseRxMode(RxMode::Uring),
        ]),
    }
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
        for c in sys::cmsgs(&self.ctrl[..r.ctrl_len]) {
            if problem.is_some() {
                break;
            }
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
                        Err(e) => problem = Some(e.to_string()),
                    }
                }
                Err(e) => problem = Some(e),
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
}

#[cfg(test)]
mod tests {
    //! The backend without a binding (no device here takes one): cmsgs as the kernel writes
    //! them, fed to the read path, and a real TCP socket over loopback, whose host-memory data
    //! `recvmsg(MSG_SOCK_DEVMEM)` returns as a plain receive.
    #![allow(clippy::unwrap_used)]

    use super::super::{Returns, RxBuf, RxEvent, RxStats};
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::sync::Mutex;
    use zcnet_core::devmem::{DmabufCmsg, SCM_DEVMEM_DMABUF, SCM_DEVMEM_LINEAR, SOL_SOCKET};
    use zcnet_sys::devmem::{cmsg_space, CMSG_HDR_LEN};

    const DMABUF_ID: u32 = 9;

    /// A control message to write: type and payload.
    type Msg = (i32, DmabufCmsg);

    struct Harness {
        out: Vec<RxEvent>,
        stats: RxStats,
        ret: Arc<Returns>,
        closable: Vec<ConnId>,
    }

    impl Harness {
        fn new() -> Harness {
            Harness {
                out: Vec::new(),
                stats: RxStats::default(),
                ret: Arc::new(Mutex::new(Vec::new())),
                closable: Vec::new(),
            }
        }

        fn ctx(&mut self) -> Ctx<'_> {
            Ctx {
                out: &mut self.out,
                stats: &mut self.stats,
                ret: &self.ret,
                closable: &mut self.closable,
            }
        }

        /// What the receiver does at the start of a poll: dropped handles go back.
        fn recycle(&mut self, st: &mut Socks) {
            for (k, l) in std::mem::take(&mut *self.ret.lock().unwrap()) {
                st.release(k, l);
            }
        }

        fn bufs(&mut self) -> Vec<RxBuf> {
            self.out
                .drain(..)
                .map(|e| match e {
                    RxEvent::Data(b) => b,
                    other => panic!("expected data, got {other:?}"),
                })
                .collect()
        }
    }

    fn socks(buffers: usize, buf_size: usize) -> Socks {
        let mut cfg = RxConfig::new(RxMode::Devmem);
        cfg.buffers = buffers;
        cfg.buf_size = buf_size;
        let t = Target {
            iface: "test0".into(),
            ifindex: 0,
            queue: 3,
        };
        Socks::new(&cfg, t, DMABUF_ID, 1 << 20).unwrap()
    }

    fn tcp_pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    /// Writes one control message as the kernel does (`put_cmsg`).
    fn put(ctrl: &mut Vec<u8>, ty: i32, c: DmabufCmsg) {
        let start = ctrl.len();
        ctrl.extend_from_slice(&(CMSG_HDR_LEN + DMABUF_CMSG_LEN).to_ne_bytes());
        ctrl.extend_from_slice(&SOL_SOCKET.to_ne_bytes());
        ctrl.extend_from_slice(&ty.to_ne_bytes());
        ctrl.resize(start + CMSG_HDR_LEN, 0);
        ctrl.extend_from_slice(&c.to_bytes());
        ctrl.resize(start + cmsg_space(DMABUF_CMSG_LEN), 0);
    }

    fn linear(n: u32) -> DmabufCmsg {
        DmabufCmsg {
            frag_size: n,
            ..Default::default()
        }
    }

    fn frag(off: u64, n: u32, token: u32, id: u32) -> DmabufCmsg {
        DmabufCmsg {
            frag_offset: off,
            frag_size: n,
            frag_token: token,
            dmabuf_id: id,
            flags: 0,
        }
    }

    /// One read as the kernel would return it: `lin` copied to the start of a pool buffer, the
    /// cmsgs in the control buffer.
    fn feed(st: &mut Socks, h: &mut Harness, lin: &[u8], cmsgs: &[u8], bytes: usize) -> bool {
        feed_bufs(st, h, 1, lin, cmsgs, bytes)
    }

    /// The same with `nbufs` pool buffers as the iovec: `lin` fills them in order, as the
    /// kernel's copies advance the iovec.
    fn feed_bufs(
        st: &mut Socks,
        h: &mut Harness,
        nbufs: usize,
        lin: &[u8],
        cmsgs: &[u8],
        bytes: usize,
    ) -> bool {
        let mut idxs = Vec::new();
        st.pool.take_many(nbufs, &mut idxs);
        assert_eq!(idxs.len(), nbufs);
        let mut rest = lin;
        for b in st.pool.bufs_mut(&idxs) {
            let n = rest.len().min(b.len());
            b[..n].copy_from_slice(&rest[..n]);
            rest = &rest[n..];
        }
        assert!(rest.is_empty(), "more linear bytes than buffers");
        st.ctrl[..cmsgs.len()].copy_from_slice(cmsgs);
        let r = sys::Received {
            bytes,
            ctrl_len: cmsgs.len(),
            ctrl_truncated: false,
        };
        st.deliver(&mut h.ctx(), 0, &idxs, r)
    }

    #[zcnet_testkit::test]
    fn linear_and_device_pieces_keep_stream_order() {
        let (_a, b) = tcp_pair();
        let mut st = socks(4, 4096);
        let mut h = Harness::new();
        st.add(ConnId(1), b.as_raw_fd()).unwrap();
        let mut ctrl = Vec::new();
        put(&mut ctrl, SCM_DEVMEM_LINEAR, linear(4));
        put(
            &mut ctrl,
            SCM_DEVMEM_DMABUF,
            frag(0x1000, 1448, 0, DMABUF_ID),
        );
        put(&mut ctrl, SCM_DEVMEM_LINEAR, linear(5));
        put(
            &mut ctrl,
            SCM_DEVMEM_DMABUF,
            frag(0x2000, 100, 1, DMABUF_ID),
        );
        assert!(feed(
            &mut st,
            &mut h,
            b"HDR1HDR22",
            &ctrl,
            4 + 1448 + 5 + 100
        ));
        let bufs = h.bufs();
        let locs: Vec<_> = bufs
            .iter()
            .map(|b| (b.location(), b.len(), b.copied()))
            .collect();
        let dev = |offset, len| {
            Location::Device(DeviceSlice {
                dmabuf_id: DMABUF_ID,
                offset,
                len,
            })
        };
        assert_eq!(
            locs,
            [
                (Location::Host, 4, true),
                (dev(0x1000, 1448), 1448, false),
                (Location::Host, 5, true),
                (dev(0x2000, 100), 100, false),
            ]
        );
        assert_eq!(st.bytes(bufs[0].key, 4), Some(&b"HDR1"[..]));
        assert_eq!(st.bytes(bufs[2].key, 5), Some(&b"HDR22"[..]));
        assert_eq!(st.bytes(bufs[1].key, 1448), None, "device memory");
        assert_eq!(
            st.bytes(bufs[0].key, 5),
            Some(&b"HDR1H"[..]),
            "same buffer, longer"
        );
        let s = h.stats;
        assert_eq!(
            (s.linear_fallbacks, s.copied_bytes, s.zerocopy_bytes),
            (2, 9, 1548)
        );
        assert_eq!(st.held(), 4);
        assert_eq!(
            st.pool.held(),
            1,
            "both linear pieces share one pool buffer"
        );

        // Host pieces: the buffer comes back with the last of them.
        let mut bufs = bufs.into_iter();
        let (h1, d1, h2, d2) = (
            bufs.next().unwrap(),
            bufs.next().unwrap(),
            bufs.next().unwrap(),
            bufs.next().unwrap(),
        );
        let k2 = h2.key;
        drop(h1);
        h.recycle(&mut st);
        assert_eq!((st.held(), st.pool.held()), (3, 1));
        assert_eq!(
            st.bytes(k2, 5),
            Some(&b"HDR22"[..]),
            "the other piece stays readable"
        );
        drop(h2);
        h.recycle(&mut st);
        assert_eq!((st.held(), st.pool.held()), (2, 0));
        assert_eq!(st.bytes(k2, 5), None);

        // Device pieces: their tokens go to SO_DEVMEM_DONTNEED. This socket's kernel side never
        // handed them out, so it frees none: they stay outstanding, and a removed connection
        // stays open (its frags would be freed by the close) until they are back.
        drop((d1, d2));
        h.recycle(&mut st);
        assert_eq!(st.held(), 0);
        st.return_tokens(&mut h.ctx());
        let toks = &st.socks[&0].toks;
        assert_eq!(toks.stats().batches, 1);
        assert_eq!(toks.stats().tokens_outstanding, 2);
        assert_eq!(toks.pending(), 2, "queued again for the next poll");
        assert!(
            !st.remove(ConnId(1)),
            "tokens outstanding: the socket must stay open"
        );
        st.return_tokens(&mut h.ctx());
        assert!(h.closable.is_empty());
    }

    #[zcnet_testkit::test]
    fn cmsgs_that_do_not_add_up_fail_the_connection_and_lend_nothing() {
        let (_a, b) = tcp_pair();
        let mut st = socks(4, 4096);
        let mut h = Harness::new();
        st.add(ConnId(7), b.as_raw_fd()).unwrap();
        let cases: [(Vec<Msg>, usize, &str); 3] = [
            // Describes 1448 + 2 bytes of a 2000-byte read.
            (
                vec![
                    (SCM_DEVMEM_DMABUF, frag(0, 1448, 0, DMABUF_ID)),
                    (SCM_DEVMEM_LINEAR, linear(2)),
                ],
                2000,
                "describe 1450 B of a 2000 B read",
            ),
            // A frag of a dma-buf that is not bound.
            (
                vec![(SCM_DEVMEM_DMABUF, frag(0, 10, 1, DMABUF_ID + 1))],
                10,
                "unbound dma-buf",
            ),
            // A frag past the end of the dma-buf.
            (
                vec![(SCM_DEVMEM_DMABUF, frag(1 << 20, 10, 2, DMABUF_ID))],
                10,
                "beyond its dma-buf",
            ),
        ];
        for (cmsgs, bytes, want) in cases {
            let mut ctrl = Vec::new();
            for (ty, c) in cmsgs {
                put(&mut ctrl, ty, c);
            }
            assert!(!feed(&mut st, &mut h, b"ab", &ctrl, bytes));
            match h.out.pop() {
                Some(RxEvent::Failed(c, e)) => {
                    assert_eq!(c, ConnId(7));
                    let msg = e.to_string();
                    assert!(msg.contains(want) && msg.contains("test0 queue 3"), "{msg}");
                }
                other => panic!("{want}: {other:?}"),
            }
            assert!(h.out.is_empty());
            assert_eq!((st.held(), st.pool.held()), (0, 0), "{want}");
        }
        // The tokens recorded before the mismatch go back to the kernel, none is lent.
        let toks = &st.socks[&0].toks;
        assert_eq!((toks.held(), toks.pending()), (0, 1));
        assert_eq!(h.stats.failures, 3);
    }

    #[zcnet_testkit::test]
    fn a_read_spans_several_buffers_one_handle_per_buffer() {
        // Three 8-byte buffers' worth of linear data, with device frags between the pieces:
        // the kernel packs the linear copies from the first buffer on, so the second and third
        // pieces cross buffer boundaries.
        let (_a, b) = tcp_pair();
        let mut st = socks(5, 8);
        let mut h = Harness::new();
        st.add(ConnId(1), b.as_raw_fd()).unwrap();
        let mut ctrl = Vec::new();
        put(&mut ctrl, SCM_DEVMEM_LINEAR, linear(5));
        put(
            &mut ctrl,
            SCM_DEVMEM_DMABUF,
            frag(0x1000, 1448, 0, DMABUF_ID),
        );
        put(&mut ctrl, SCM_DEVMEM_LINEAR, linear(6));
        put(
            &mut ctrl,
            SCM_DEVMEM_DMABUF,
            frag(0x2000, 100, 1, DMABUF_ID),
        );
        put(&mut ctrl, SCM_DEVMEM_LINEAR, linear(9));
        let lin = b"AAAAABBBBBBCCCCCCCCC";
        let bytes = 20 + 1448 + 100;
        // Four buffers in the iovec; the fourth gets nothing and goes back at once.
        assert!(feed_bufs(&mut st, &mut h, 4, lin, &ctrl, bytes));
        let bufs = h.bufs();
        let dev = |offset, len| {
            Location::Device(DeviceSlice {
                dmabuf_id: DMABUF_ID,
                offset,
                len,
            })
        };
        let got: Vec<_> = bufs
            .iter()
            .map(|b| {
                let host = st.bytes(b.key, b.len()).map(<[u8]>::to_vec);
                (b.location(), b.len(), b.copied(), host)
            })
            .collect();
        let h_ = |s: &[u8]| (Location::Host, s.len(), true, Some(s.to_vec()));
        assert_eq!(
            got,
            [
                h_(b"AAAAA"),
                (dev(0x1000, 1448), 1448, false, None),
                h_(b"BBB"),
                h_(b"BBB"),
                (dev(0x2000, 100), 100, false, None),
                h_(b"CCCCC"),
                h_(b"CCCC"),
            ]
        );
        // Each host handle is one buffer: never longer than what is left of it.
        assert_eq!(st.bytes(bufs[2].key, 4), None, "past the end of buffer 0");
        let s = h.stats;
        assert_eq!(
            (
                s.linear_fallbacks,
                s.unsteered,
                s.copied_bytes,
                s.zerocopy_bytes
            ),
            (3, 0, 20, 1548)
        );
        assert_eq!(s.bytes, bytes as u64);
        assert_eq!((st.held(), st.pool.held()), (7, 3), "three buffers lent");
        // A buffer comes back with the last of its pieces, in any order.
        let mut v: Vec<Option<RxBuf>> = bufs.into_iter().map(Some).collect();
        for (i, pool_held) in [(3, 3), (0, 3), (2, 2), (6, 1), (5, 0)] {
            drop(v[i].take());
            h.recycle(&mut st);
            assert_eq!(st.pool.held(), pool_held, "after dropping handle {i}");
        }
        drop(v);
        h.recycle(&mut st);
        assert_eq!(st.held(), 0);
        assert!(st.pool.has_free());
    }

    #[zcnet_testkit::test]
    fn a_read_without_devmem_cmsgs_is_unsteered_host_data() {
        // No cmsg at all: a plain receive of host memory (the flow was not steered to the
        // bound queue). It spans buffers like linear data, and counts as unsteered bytes,
        // not as an SCM_DEVMEM_LINEAR fallback.
        let (_a, b) = tcp_pair();
        let mut st = socks(4, 8);
        let mut h = Harness::new();
        st.add(ConnId(1), b.as_raw_fd()).unwrap();
        assert!(feed_bufs(&mut st, &mut h, 3, b"0123456789", &[], 10));
        let bufs = h.bufs();
        let got: Vec<_> = bufs
            .iter()
            .map(|b| (b.copied(), st.bytes(b.key, b.len()).unwrap().to_vec()))
            .collect();
        assert_eq!(got, [(true, b"01234567".to_vec()), (true, b"89".to_vec())]);
        let s = h.stats;
        assert_eq!(
            (s.unsteered, s.linear_fallbacks, s.copied_bytes),
            (10, 0, 10)
        );
        assert_eq!(st.pool.held(), 2, "the third buffer went back unused");
        // A devmem read after it: linear fallbacks count, unsteered does not move.
        let mut ctrl = Vec::new();
        put(&mut ctrl, SCM_DEVMEM_LINEAR, linear(2));
        put(&mut ctrl, SCM_DEVMEM_DMABUF, frag(0, 64, 5, DMABUF_ID));
        assert!(feed(&mut st, &mut h, b"hi", &ctrl, 66));
        assert_eq!((h.stats.unsteered, h.stats.linear_fallbacks), (10, 1));
        drop(bufs);
        drop(h.bufs());
        h.recycle(&mut st);
        assert_eq!((st.held(), st.pool.held()), (0, 0));
    }

    #[zcnet_testkit::test]
    fn linear_bytes_beyond_the_buffers_fail_the_connection() {
        let (_a, b) = tcp_pair();
        let mut st = socks(4, 8);
        let mut h = Harness::new();
        st.add(ConnId(2), b.as_raw_fd()).unwrap();
        let mut ctrl = Vec::new();
        put(&mut ctrl, SCM_DEVMEM_LINEAR, linear(17));
        assert!(!feed_bufs(&mut st, &mut h, 2, b"", &ctrl, 17));
        match h.out.pop() {
            Some(RxEvent::Failed(_, e)) => {
                assert!(e.to_string().contains("17 B of linear data in 16 B"), "{e}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!((st.held(), st.pool.held()), (0, 0));
    }

    #[zcnet_testkit::test]
    fn host_memory_arrives_as_copied_pieces_in_order() {
        // Loopback traffic is host memory: MSG_SOCK_DEVMEM reads it like recv() (a flow that is
        // not steered to the bound queue looks like this), counted as unsteered bytes. Small
        // pool buffers and few of them, held for a while: starvation is counted, not fatal;
        // one read takes every free buffer as its iovec.
        let (mut a, b) = tcp_pair();
        let mut st = socks(4, 1000);
        let mut h = Harness::new();
        st.add(ConnId(3), b.as_raw_fd()).unwrap();
        const N: usize = 200_000;
        let p = zcnet_core::Pattern::new(42);
        let writer = std::thread::spawn(move || {
            let mut data = vec![0u8; N];
            p.fill(0, &mut data);
            a.write_all(&data).unwrap();
            // `a` drops here: end of stream.
        });
        let (mut got, mut eof, mut reads) = (0u64, false, 0u64);
        let mut kept = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !eof {
            assert!(std::time::Instant::now() < deadline, "stuck at {got}");
            h.recycle(&mut st);
            st.poll(&mut h.ctx(), Duration::from_millis(50)).unwrap();
            for ev in std::mem::take(&mut h.out) {
                match ev {
                    RxEvent::Data(buf) => {
                        assert!(buf.copied() && buf.location() == Location::Host);
                        let bytes = st.bytes(buf.key, buf.len()).unwrap();
                        p.verify(got, bytes).unwrap();
                        got += bytes.len() as u64;
                        reads += 1;
                        kept.push(buf);
                    }
                    RxEvent::Eof(c) => {
                        assert_eq!(c, ConnId(3));
                        eof = true;
                    }
                    RxEvent::Failed(_, e) => panic!("{e}"),
                }
            }
            // A slow consumer: hold every buffer until all four are out, then give them back.
            if kept.len() >= 4 || eof {
                kept.clear();
            }
        }
        writer.join().unwrap();
        assert_eq!(got, N as u64);
        assert!(reads >= (N / 1000) as u64, "one handle per buffer at least");
        assert_eq!(h.stats.linear_fallbacks, 0, "no SCM_DEVMEM_LINEAR came");
        assert_eq!(h.stats.unsteered, N as u64);
        assert_eq!(h.stats.copied_bytes, N as u64);
        assert!(h.stats.starved > 0, "four buffers held: reading paused");
        h.recycle(&mut st);
        assert_eq!((st.held(), st.pool.held()), (0, 0));
        assert!(st.remove(ConnId(3)), "no token outstanding: close at once");
    }
}
