//! devmem TCP receive: the frag tokens the application holds and their return with
//! `SO_DEVMEM_DONTNEED` (Documentation/networking/devmem.rst).
//!
//! What Linux 6.18 does:
//! - `recvmsg(.., MSG_SOCK_DEVMEM)` describes the bytes it returns with cmsgs at `SOL_SOCKET`
//!   (net/ipv4/tcp.c `tcp_recvmsg_dmabuf`): `SCM_DEVMEM_LINEAR` for bytes copied from the skb
//!   linear part into the user's iovec (a `struct dmabuf_cmsg` zeroed but for `frag_size`: a
//!   copy, typically because the NIC did not split the header), and one `SCM_DEVMEM_DMABUF` per
//!   device frag: `frag_offset` in the dma-buf, `frag_size`, `dmabuf_id` of the binding, and a
//!   `frag_token`. Several tokens may point into one dma-buf page (one per frag).
//! - Tokens are indices of the socket's `sk_user_frags` xarray, allocated with
//!   `xa_alloc(.., xa_limit_31b, ..)`: the lowest free index, at most 2^31 - 1, **reused** as
//!   soon as the kernel has freed it.
//! - `setsockopt(SOL_SOCKET, SO_DEVMEM_DONTNEED, struct dmabuf_token[], len)`
//!   (net/core/sock.c `sock_devmem_dontneed`): `EBADF` for a non-TCP socket; `EINVAL` when
//!   `optlen` is not a multiple of 8 or exceeds `MAX_DONTNEED_TOKENS` (128) entries; `ENOMEM`,
//!   `EFAULT` — all before touching any token. Then it walks the entries in array order and
//!   each entry's tokens upward; after `MAX_DONTNEED_FRAGS` (1024) tokens looked at it stops
//!   early (`goto frag_limit_reached`); a token not in the xarray is skipped. It returns the
//!   number freed. devmem.rst: fewer are freed than asked when more than 1024 were passed, or
//!   on a kernel leak bug.
//!
//! [`DevmemRx`] therefore sends at most [`MAX_DONTNEED_TOKENS`] entries and
//! [`MAX_DONTNEED_FRAGS`] tokens per call, coalescing consecutive tokens into one entry, keeps
//! one call in flight, and reads a short count as "the first `freed` tokens in array order
//! were freed" (exact for the in-order walk with its frag limit): those are done, the rest go
//! back to the queue and are sent again. A call that frees nothing frees nothing on a retry
//! either unless the kernel's state changed: callers should back off, not spin.

use std::collections::{BTreeMap, BTreeSet};

mod types;
#[cfg(test)]
use types::dontneed_optval;
pub use types::{
    DevmemCmsg, DevmemError, DevmemStats, DmabufCmsg, DmabufToken, DMABUF_CMSG_LEN,
    DMABUF_TOKEN_LEN,
};

#[cfg(test)]
mod tests;

/// `SOL_SOCKET` (asm-generic, x86-64).
pub const SOL_SOCKET: i32 = 1;
/// `SO_DEVMEM_LINEAR` / `SCM_DEVMEM_LINEAR` (asm-generic/socket.h).
pub const SCM_DEVMEM_LINEAR: i32 = 78;
/// `SO_DEVMEM_DMABUF` / `SCM_DEVMEM_DMABUF`.
pub const SCM_DEVMEM_DMABUF: i32 = 79;
/// `SO_DEVMEM_DONTNEED`.
pub const SO_DEVMEM_DONTNEED: i32 = 80;
/// `MSG_SOCK_DEVMEM` (include/linux/socket.h): recvmsg flag accepting device memory.
pub const MSG_SOCK_DEVMEM: u32 = 0x0200_0000;
/// Most `struct dmabuf_token` entries one SO_DEVMEM_DONTNEED takes (more: `EINVAL`).
pub const MAX_DONTNEED_TOKENS: usize = 128;
/// Most tokens one SO_DEVMEM_DONTNEED looks at; it stops early past that.
pub const MAX_DONTNEED_FRAGS: u32 = 1024;
/// Largest token (`xa_limit_31b`).
pub(crate) const MAX_TOKEN: u32 = 0x7fff_ffff;

/// A frag of received payload in device memory, held until its token is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceFrag {
    /// The binding's dma-buf id.
    pub dmabuf_id: u32,
    /// Offset in the dma-buf.
    pub offset: u64,
    /// Bytes.
    pub len: u32,
    /// Token to give back.
    pub token: u32,
}

/// What one SO_DEVMEM_DONTNEED result did to the batch in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DontneedOutcome {
    /// Tokens returned for good.
    pub freed: u32,
    /// Tokens queued again for the next batch.
    pub retry: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TokState {
    Held,
    Pending,
    InFlight,
}

/// Per-socket devmem receive bookkeeping: tokens held by the application, waiting to be
/// returned, or in the SO_DEVMEM_DONTNEED call in flight; each token in exactly one state.
#[derive(Debug, Clone)]
pub struct DevmemRx {
    max_entries: usize,
    max_frags: u32,
    /// Bound dma-bufs to validate against (id -> length); empty: no validation.
    dmabufs: BTreeMap<u32, u64>,
    tokens: BTreeMap<u32, (DeviceFrag, TokState)>,
    pending: BTreeSet<u32>,
    in_flight: Option<Vec<DmabufToken>>,
    stats: DevmemStats,
}

impl Default for DevmemRx {
    fn default() -> Self {
        Self::new()
    }
}

impl DevmemRx {
    /// Bookkeeping with the 6.18 limits per call ([`MAX_DONTNEED_TOKENS`], [`MAX_DONTNEED_FRAGS`]).
    pub fn new() -> DevmemRx {
        DevmemRx {
            max_entries: MAX_DONTNEED_TOKENS,
            max_frags: MAX_DONTNEED_FRAGS,
            dmabufs: BTreeMap::new(),
            tokens: BTreeMap::new(),
            pending: BTreeSet::new(),
            in_flight: None,
            stats: DevmemStats::default(),
        }
    }

    /// Lower limits per call (both at least 1, at most the kernel's).
    pub fn with_limits(max_entries: usize, max_frags: u32) -> Result<DevmemRx, DevmemError> {
        if !(1..=MAX_DONTNEED_TOKENS).contains(&max_entries)
            || !(1..=MAX_DONTNEED_FRAGS).contains(&max_frags)
        {
            return Err(DevmemError::BadLimits);
        }
        Ok(DevmemRx {
            max_entries,
            max_frags,
            ..Self::new()
        })
    }

    /// Validate frags against dma-buf `dmabuf_id` of `len` bytes; once any is bound, frags of
    /// other dma-bufs are refused.
    pub fn bind_dmabuf(&mut self, dmabuf_id: u32, len: u64) {
        self.dmabufs.insert(dmabuf_id, len);
    }

    /// The counters.
    pub fn stats(&self) -> &DevmemStats {
        &self.stats
    }

    /// Tokens the application holds.
    pub fn held(&self) -> usize {
        self.tokens.len() - self.pending.len() - self.in_flight_tokens()
    }

    /// Released tokens waiting for a batch.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Tokens in the SO_DEVMEM_DONTNEED call in flight.
    pub fn in_flight_tokens(&self) -> usize {
        self.in_flight
            .as_ref()
            .map_or(0, |b| b.iter().map(|t| t.token_count as usize).sum())
    }

    /// Parses and records one control message (any level/type: others give `Ok(None)`).
    pub fn on_cmsg_bytes(
        &mut self,
        level: i32,
        ty: i32,
        data: &[u8],
    ) -> Result<Option<DeviceFrag>, DevmemError> {
        match DevmemCmsg::parse(level, ty, data) {
            Ok(Some(c)) => self.on_cmsg(c),
            Ok(None) => Ok(None),
            Err(e) => self.reject(e),
        }
    }

    /// Records one devmem cmsg: a device frag the application now holds, or (`None`) linear
    /// bytes that were copied into its buffer. Refuses a token it already knows (the kernel
    /// reuses a token only after freeing it, which this bookkeeping would have seen).
    pub fn on_cmsg(&mut self, cmsg: DevmemCmsg) -> Result<Option<DeviceFrag>, DevmemError> {
        let c = match cmsg {
            DevmemCmsg::Linear { len } => {
                self.stats.linear_bytes += u64::from(len);
                self.stats.linear_cmsgs += 1;
                return Ok(None);
            }
            DevmemCmsg::Dmabuf(c) => c,
        };
        if c.frag_size == 0 {
            return self.reject(DevmemError::EmptyFrag(c.frag_token));
        }
        if c.frag_token > MAX_TOKEN {
            return self.reject(DevmemError::BadToken(c.frag_token));
        }
        if self.tokens.contains_key(&c.frag_token) {
            return self.reject(DevmemError::DuplicateToken(c.frag_token));
        }
        if !self.dmabufs.is_empty() {
            let Some(&len) = self.dmabufs.get(&c.dmabuf_id) else {
                return self.reject(DevmemError::UnknownDmabuf(c.dmabuf_id));
            };
            let end = c.frag_offset.checked_add(u64::from(c.frag_size));
            if end.is_none_or(|e| e > len) {
                return self.reject(DevmemError::OutOfBounds(c.frag_token));
            }
        }
        let frag = DeviceFrag {
            dmabuf_id: c.dmabuf_id,
            offset: c.frag_offset,
            len: c.frag_size,
            token: c.frag_token,
        };
        self.tokens.insert(frag.token, (frag, TokState::Held));
        let s = &mut self.stats;
        s.device_bytes += u64::from(frag.len);
        s.tokens_received += 1;
        s.tokens_outstanding += 1;
        s.outstanding_bytes += u64::from(frag.len);
        Ok(Some(frag))
    }

    /// The application is done with the frag of `token`: it will go in a DONTNEED batch.
    pub fn release(&mut self, token: u32) -> Result<(), DevmemError> {
        match self.tokens.get_mut(&token) {
            Some((_, st @ TokState::Held)) => *st = TokState::Pending,
            Some(_) => return self.reject(DevmemError::AlreadyReleased(token)),
            None => return self.reject(DevmemError::NotHeld(token)),
        }
        self.pending.insert(token);
        self.stats.releases += 1;
        Ok(())
    }

    /// The next SO_DEVMEM_DONTNEED argument: released tokens, lowest first, consecutive ones
    /// in one entry, at most `max_entries` (and the limit per call) entries and the frag
    /// limit of tokens. Empty when nothing is pending. The batch is in flight until
    /// [`Self::on_dontneed_result`] or [`Self::on_dontneed_error`]; meanwhile no other.
    pub fn take_dontneed_batch(
        &mut self,
        max_entries: usize,
    ) -> Result<Vec<DmabufToken>, DevmemError> {
        if self.in_flight.is_some() {
            return self.reject(DevmemError::BatchInFlight);
        }
        let limit = max_entries.min(self.max_entries);
        let mut batch: Vec<DmabufToken> = Vec::new();
        let mut taken = Vec::new();
        for &t in self.pending.iter().take(self.max_frags as usize) {
            let extends = batch.last().is_some_and(|r| {
                u64::from(r.token_start) + u64::from(r.token_count) == u64::from(t)
            });
            if extends {
                if let Some(r) = batch.last_mut() {
                    r.token_count += 1;
                }
            } else if batch.len() < limit {
                batch.push(DmabufToken {
                    token_start: t,
                    token_count: 1,
                });
            } else {
                break;
            }
            taken.push(t);
        }
        for t in &taken {
            self.pending.remove(t);
            if let Some((_, st)) = self.tokens.get_mut(t) {
                *st = TokState::InFlight;
            }
        }
        if !batch.is_empty() {
            self.stats.batches += 1;
            self.in_flight = Some(batch.clone());
        }
        Ok(batch)
    }

    /// SO_DEVMEM_DONTNEED returned `freed`: the first `freed` tokens of the batch (array
    /// order) are returned, the others queued again.
    pub fn on_dontneed_result(&mut self, freed: u32) -> Result<DontneedOutcome, DevmemError> {
        let Some(batch) = self.in_flight.take() else {
            return self.reject(DevmemError::NoBatchInFlight);
        };
        let total: u32 = batch.iter().map(|t| t.token_count).sum();
        if freed > total {
            self.in_flight = Some(batch);
            return self.reject(DevmemError::FreedTooMany {
                asked: total,
                freed,
            });
        }
        let mut left = freed;
        // Batches are built by take_dontneed_batch: every entry has token_count >= 1.
        for r in &batch {
            for t in r.token_start..=r.token_start + (r.token_count - 1) {
                if left > 0 {
                    left -= 1;
                    if let Some((f, _)) = self.tokens.remove(&t) {
                        self.stats.tokens_returned += 1;
                        self.stats.tokens_outstanding -= 1;
                        self.stats.outstanding_bytes -= u64::from(f.len);
                    }
                } else {
                    self.requeue(t);
                }
            }
        }
        self.stats.partial_frees += u64::from(freed < total);
        Ok(DontneedOutcome {
            freed,
            retry: total - freed,
        })
    }

    /// SO_DEVMEM_DONTNEED failed with `errno` (before freeing anything, in 6.18): the whole
    /// batch is queued again. Returns how many tokens.
    pub fn on_dontneed_error(&mut self, errno: i32) -> Result<u32, DevmemError> {
        let Some(batch) = self.in_flight.take() else {
            return self.reject(DevmemError::NoBatchInFlight);
        };
        let mut n = 0;
        for r in &batch {
            for t in r.token_start..=r.token_start + (r.token_count - 1) {
                self.requeue(t);
                n += 1;
            }
        }
        self.stats.failed_batches += 1;
        self.stats.last_errno = errno;
        Ok(n)
    }

    fn requeue(&mut self, t: u32) {
        if let Some((_, st)) = self.tokens.get_mut(&t) {
            *st = TokState::Pending;
            self.pending.insert(t);
        }
    }

    fn reject<T>(&mut self, e: DevmemError) -> Result<T, DevmemError> {
        self.stats.rejected += 1;
        Err(e)
    }
}
