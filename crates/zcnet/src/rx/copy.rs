//! `copy`: epoll + `recv()` into a pool of user buffers. The pool and the epoll set of
//! connections are shared with `devmem`, whose linear data lands in the same kind of pool.

use super::{ConnId, Ctx, Location, RxBackend, RxConfig, RxMode};
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;
use zcnet_sys::epoll::{self, Epoll, EventFd};

/// Reads per ready connection per poll at most, so one busy peer cannot starve the others.
pub(super) const READS_PER_CONN: usize = 16;

/// Fixed-size host buffers lent to the application by index.
#[derive(Debug)]
pub(super) struct Pool {
    mem: Vec<u8>,
    buf_size: usize,
    free: Vec<u32>,
    held: Vec<bool>,
}

impl Pool {
    /// `count` buffers of `buf_size` bytes.
    pub fn new(count: usize, buf_size: usize) -> Result<Pool> {
        let count = count.max(1);
        if buf_size == 0 || count > u32::MAX as usize {
            return Err(Error::io(
                "receive buffers",
                io::Error::from_raw_os_error(libc::EINVAL),
            ));
        }
        let total = count.checked_mul(buf_size).ok_or_else(|| {
            Error::io(
                "receive buffers",
                io::Error::from_raw_os_error(libc::EOVERFLOW),
            )
        })?;
        Ok(Pool {
            mem: vec![0; total],
            buf_size,
            free: (0..count as u32).rev().collect(),
            held: vec![false; count],
        })
    }

    /// A free buffer's index, if any.
    pub fn take(&mut self) -> Option<u32> {
        self.free.pop()
    }

    /// Up to `max` free buffers, into `out` (cleared first) in ascending index order, the order
    /// [`Pool::bufs_mut`] wants.
    pub fn take_many(&mut self, max: usize, out: &mut Vec<u32>) {
        out.clear();
        let n = max.min(self.free.len());
        out.extend(self.free.drain(self.free.len() - n..));
        out.sort_unstable();
    }

    /// Puts back a buffer that was taken and not lent (nothing was read into it).
    pub fn untake(&mut self, idx: u32) {
        self.free.push(idx);
    }

    /// Whether any buffer is free.
    pub fn has_free(&self) -> bool {
        !self.free.is_empty()
    }

    /// The writable bytes of a taken buffer.
    pub fn buf_mut(&mut self, idx: u32) -> &mut [u8] {
        let s = idx as usize * self.buf_size;
        &mut self.mem[s..s + self.buf_size]
    }

    /// The writable bytes of several taken buffers at once, disjoint, in the order of `idxs`,
    /// which must be strictly ascending (as [`Pool::take_many`] gives them): each is split off
    /// the rest of the memory after the one before. Ends early at an index that is out of
    /// range or not above the previous one.
    pub fn bufs_mut<'a>(&'a mut self, idxs: &'a [u32]) -> impl Iterator<Item = &'a mut [u8]> {
        let bs = self.buf_size;
        // `rest` starts at buffer `next`.
        let mut rest: &'a mut [u8] = &mut self.mem;
        let mut next = 0usize;
        let mut idxs = idxs.iter();
        std::iter::from_fn(move || {
            let i = *idxs.next()? as usize;
            let skip = i.checked_sub(next)?.checked_mul(bs)?;
            if rest.len() < skip.checked_add(bs)? {
                return None;
            }
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(skip);
            let (buf, tail) = tail.split_at_mut(bs);
            rest = tail;
            next = i + 1;
            Some(buf)
        })
    }

    /// Marks a taken buffer as lent to the application.
    pub fn lend(&mut self, idx: u32) {
        self.held[idx as usize] = true;
    }

    /// Gives back a lent buffer; ignores one that is not lent.
    pub fn give_back(&mut self, idx: u64) {
        if let Some(h) = self.held.get_mut(idx as usize).filter(|h| **h) {
            *h = false;
            self.free.push(idx as u32);
        }
    }

    /// The first `len` bytes of a lent buffer.
    pub fn bytes(&self, idx: u64, len: usize) -> Option<&[u8]> {
        if !*self.held.get(idx as usize)? || len > self.buf_size {
            return None;
        }
        let s = idx as usize * self.buf_size;
        Some(&self.mem[s..s + len])
    }

    /// Lent buffers.
    pub fn held(&self) -> usize {
        self.held.len() - self.free.len()
    }
}

/// The connections an epoll-driven backend reads from.
#[derive(Debug)]
pub(super) struct ConnSet {
    ep: Epoll,
    fds: HashMap<ConnId, RawFd>,
    ready: Vec<(u64, u32)>,
    /// In the set under [`WAKE_TOKEN`]: signalled by a buffer handed back while the backend
    /// starves ([`RxBackend::waker`]), so a loop asleep on the set's fd wakes (data already in
    /// the sockets makes no new event).
    wake: EventFd,
}

/// The token of [`ConnSet`]'s wake eventfd (connection ids count up from 0).
const WAKE_TOKEN: u64 = u64::MAX;

impl ConnSet {
    pub fn new() -> Result<ConnSet> {
        let ep = Epoll::new(256).map_err(|e| Error::io("epoll_create1", e))?;
        let wake = EventFd::new().map_err(|e| Error::io("eventfd", e))?;
        ep.add(wake.as_raw_fd(), WAKE_TOKEN, epoll::IN)
            .map_err(|e| Error::io("epoll_ctl(ADD) of the wake eventfd", e))?;
        Ok(ConnSet {
            ep,
            fds: HashMap::new(),
            ready: Vec::new(),
            wake,
        })
    }

    /// A duplicate of the wake eventfd (see [`RxBackend::waker`]).
    pub fn waker(&self) -> Option<EventFd> {
        self.wake.try_clone().ok()
    }

    pub fn add(&mut self, conn: ConnId, fd: RawFd) -> Result<()> {
        self.ep
            .add(fd, conn.0, epoll::IN | epoll::RDHUP)
            .map_err(|e| Error::io("epoll_ctl(ADD) of the connection", e))?;
        self.fds.insert(conn, fd);
        Ok(())
    }

    /// Stops watching `conn` (after end of stream, failure, or removal).
    pub fn remove(&mut self, conn: ConnId) {
        if let Some(fd) = self.fds.remove(&conn) {
            // The fd is still open (the receiver closes it after this), so DEL cannot fail
            // with EBADF; ENOENT cannot happen either: added once, removed once.
            let _ = self.ep.delete(fd);
        }
    }

    /// The epoll set's own fd: readable while a connection is ready to read.
    pub fn ready_fd(&self) -> BorrowedFd<'_> {
        self.ep.as_fd()
    }

    /// The connections ready to read, waiting up to `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> Result<Vec<(ConnId, RawFd)>> {
        self.ready.clear();
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        self.ep
            .wait(&mut self.ready, ms)
            .map_err(|e| Error::io("epoll_wait", e))?;
        if self.ready.iter().any(|&(t, _)| t == WAKE_TOKEN) {
            // Level-triggered: read it back, or the set stays readable. The poll that follows
            // takes back what was handed back.
            let _ = self.wake.drain();
        }
        Ok(self
            .ready
            .iter()
            .filter_map(|&(t, _)| self.fds.get(&ConnId(t)).map(|&fd| (ConnId(t), fd)))
            .collect())
    }
}

/// The error a failed receive on a connection reports.
pub(super) fn recv_error(conn: ConnId, e: io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::ECONNRESET) => Error::io(format!("connection {conn}: reset by the peer"), e),
        _ => Error::io(format!("recv on connection {conn}"), e),
    }
}

/// The `copy` backend.
#[derive(Debug)]
pub(super) struct CopyRx {
    pool: Pool,
    conns: ConnSet,
    /// Receiving is paused for want of a buffer (counted once per pause).
    starving: bool,
}

impl CopyRx {
    pub fn new(cfg: &RxConfig) -> Result<CopyRx> {
        Ok(CopyRx {
            pool: Pool::new(cfg.buffers, cfg.buf_size)?,
            conns: ConnSet::new()?,
            starving: false,
        })
    }

    /// Reads from one ready connection until it has nothing more, the pool is empty, or its
    /// share of reads is used.
    fn read_conn(&mut self, ctx: &mut Ctx<'_>, conn: ConnId, fd: RawFd) {
        for _ in 0..READS_PER_CONN {
            let Some(idx) = self.pool.take() else {
                ctx.stats.starved += u64::from(!self.starving);
                self.starving = true;
                return;
            };
            self.starving = false;
            match zcnet_sys::sock::recv(fd, self.pool.buf_mut(idx), libc::MSG_DONTWAIT) {
                Ok(0) => {
                    self.pool.untake(idx);
                    self.conns.remove(conn);
                    ctx.eof(conn);
                    return;
                }
                Ok(n) => {
                    self.pool.lend(idx);
                    ctx.deliver(conn, u64::from(idx), n, Location::Host, true);
                    if n < self.pool.buf_size {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.pool.untake(idx);
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => self.pool.untake(idx),
                Err(e) => {
                    self.pool.untake(idx);
                    self.conns.remove(conn);
                    ctx.failed(conn, recv_error(conn, e));
                    return;
                }
            }
        }
    }
}

impl RxBackend for CopyRx {
    fn mode(&self) -> RxMode {
        RxMode::Copy
    }

    fn add(&mut self, conn: ConnId, fd: RawFd) -> Result<()> {
        self.conns.add(conn, fd)
    }

    fn remove(&mut self, conn: ConnId) -> bool {
        self.conns.remove(conn);
        true
    }

    fn release(&mut self, key: u64, _len: usize) {
        self.pool.give_back(key);
    }

    fn poll(&mut self, ctx: &mut Ctx<'_>, timeout: Duration) -> Result<()> {
        // With every buffer lent, only look (no wait): data stays in the sockets until the
        // application gives buffers back, and each connection that had some counts as starved.
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
        self.pool.bytes(key, len)
    }

    fn held(&self) -> usize {
        self.pool.held()
    }

    fn ready_fd(&mut self) -> Result<BorrowedFd<'_>> {
        Ok(self.conns.ready_fd())
    }

    fn waker(&self) -> Option<EventFd> {
        self.conns.waker()
    }

    fn starving(&self) -> bool {
        !self.pool.has_free()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::Pool;

    #[zcnet_testkit::test]
    fn several_buffers_at_once_are_disjoint_and_in_order() {
        let mut p = Pool::new(6, 4).unwrap();
        let mut idxs = Vec::new();
        p.take_many(3, &mut idxs);
        assert_eq!(idxs, [0, 1, 2]);
        for (n, b) in p.bufs_mut(&idxs).enumerate() {
            b.fill(n as u8 + 1);
        }
        for &i in &idxs {
            p.lend(i);
        }
        assert_eq!(p.bytes(1, 4), Some(&[2u8; 4][..]));
        p.give_back(1);
        // Whatever the free list's order, they come sorted; never more than are free.
        p.take_many(10, &mut idxs);
        assert_eq!(idxs, [1, 3, 4, 5]);
        let lens: Vec<usize> = p.bufs_mut(&idxs).map(|b| b.len()).collect();
        assert_eq!(lens, [4; 4]);
        p.bufs_mut(&[5]).next().unwrap().fill(9);
        p.lend(5);
        assert_eq!(p.bytes(5, 4), Some(&[9u8; 4][..]));
        assert_eq!(p.bytes(0, 4), Some(&[1u8; 4][..]), "others untouched");
        // Out of order, repeated or out of range: the iterator ends there.
        assert_eq!(p.bufs_mut(&[3, 1]).count(), 1);
        assert_eq!(p.bufs_mut(&[2, 2]).count(), 1);
        assert_eq!(p.bufs_mut(&[4, 6]).count(), 1);
        assert_eq!(p.bufs_mut(&[u32::MAX]).count(), 0);
        p.take_many(0, &mut idxs);
        assert!(idxs.is_empty());
    }
}
