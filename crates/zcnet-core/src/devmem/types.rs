//! Wire layouts (`struct dmabuf_cmsg`, `struct dmabuf_token`), errors and counters of
//! [`super::DevmemRx`], and its self-check.

use super::{DevmemRx, TokState, SCM_DEVMEM_DMABUF, SCM_DEVMEM_LINEAR, SOL_SOCKET};

/// Bytes of `struct dmabuf_cmsg` (include/uapi/linux/uio.h: u64 + 4 x u32, no padding).
pub const DMABUF_CMSG_LEN: usize = 24;
/// Bytes of `struct dmabuf_token` (two u32).
pub const DMABUF_TOKEN_LEN: usize = 8;

/// `struct dmabuf_cmsg`, the payload of both devmem cmsgs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DmabufCmsg {
    /// Offset of the frag in the dma-buf.
    pub frag_offset: u64,
    /// Bytes of the frag (for `SCM_DEVMEM_LINEAR`: bytes copied into the iovec).
    pub frag_size: u32,
    /// Token for SO_DEVMEM_DONTNEED.
    pub frag_token: u32,
    /// Id of the dma-buf binding.
    pub dmabuf_id: u32,
    /// Unused in 6.18 (always 0).
    pub flags: u32,
}

impl DmabufCmsg {
    /// Parses exactly [`DMABUF_CMSG_LEN`] bytes in native byte order.
    pub fn parse(b: &[u8]) -> Result<DmabufCmsg, DevmemError> {
        let b: &[u8; DMABUF_CMSG_LEN] = b.try_into().map_err(|_| DevmemError::BadLength {
            expected: DMABUF_CMSG_LEN,
            got: b.len(),
        })?;
        let u32_at = |i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let frag_offset = u64::from_ne_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
        Ok(DmabufCmsg {
            frag_offset,
            frag_size: u32_at(8),
            frag_token: u32_at(12),
            dmabuf_id: u32_at(16),
            flags: u32_at(20),
        })
    }

    /// The struct's bytes (native byte order), as the kernel writes them.
    pub fn to_bytes(&self) -> [u8; DMABUF_CMSG_LEN] {
        let mut b = [0u8; DMABUF_CMSG_LEN];
        b[..8].copy_from_slice(&self.frag_offset.to_ne_bytes());
        for (i, v) in [self.frag_size, self.frag_token, self.dmabuf_id, self.flags]
            .into_iter()
            .enumerate()
        {
            b[8 + 4 * i..12 + 4 * i].copy_from_slice(&v.to_ne_bytes());
        }
        b
    }
}

/// A devmem control message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DevmemCmsg {
    /// `SCM_DEVMEM_DMABUF`: payload in device memory, with its token.
    Dmabuf(DmabufCmsg),
    /// `SCM_DEVMEM_LINEAR`: `len` bytes were copied into the user buffer instead.
    Linear {
        /// Bytes copied (`frag_size`).
        len: u32,
    },
}

impl DevmemCmsg {
    /// Classifies a cmsg by `cmsg_level`/`cmsg_type` and parses its data: `Ok(None)` for one
    /// that is not a devmem cmsg, an error for a devmem cmsg of the wrong size.
    pub fn parse(level: i32, ty: i32, data: &[u8]) -> Result<Option<DevmemCmsg>, DevmemError> {
        if level != SOL_SOCKET || (ty != SCM_DEVMEM_DMABUF && ty != SCM_DEVMEM_LINEAR) {
            return Ok(None);
        }
        let c = DmabufCmsg::parse(data)?;
        Ok(Some(if ty == SCM_DEVMEM_LINEAR {
            DevmemCmsg::Linear { len: c.frag_size }
        } else {
            DevmemCmsg::Dmabuf(c)
        }))
    }
}

/// `struct dmabuf_token`: tokens `token_start .. token_start + token_count`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DmabufToken {
    /// First token.
    pub token_start: u32,
    /// Number of consecutive tokens.
    pub token_count: u32,
}

impl DmabufToken {
    /// The struct's bytes (native byte order).
    #[cfg(test)]
    #[allow(clippy::wrong_self_convention)] // by reference, as when it was public
    pub(crate) fn to_bytes(&self) -> [u8; DMABUF_TOKEN_LEN] {
        let mut b = [0u8; DMABUF_TOKEN_LEN];
        b[..4].copy_from_slice(&self.token_start.to_ne_bytes());
        b[4..].copy_from_slice(&self.token_count.to_ne_bytes());
        b
    }

    /// Parses exactly [`DMABUF_TOKEN_LEN`] bytes.
    #[cfg(test)]
    pub(crate) fn parse(b: &[u8]) -> Result<DmabufToken, DevmemError> {
        let b: &[u8; DMABUF_TOKEN_LEN] = b.try_into().map_err(|_| DevmemError::BadLength {
            expected: DMABUF_TOKEN_LEN,
            got: b.len(),
        })?;
        Ok(DmabufToken {
            token_start: u32::from_ne_bytes([b[0], b[1], b[2], b[3]]),
            token_count: u32::from_ne_bytes([b[4], b[5], b[6], b[7]]),
        })
    }
}

/// The `optval` bytes of SO_DEVMEM_DONTNEED for `tokens` (`optlen` is their length).
#[cfg(test)]
pub(crate) fn dontneed_optval(tokens: &[DmabufToken]) -> Vec<u8> {
    tokens.iter().flat_map(|t| t.to_bytes()).collect()
}

/// Input that contradicts the protocol; nothing changes when one is returned (only
/// `DevmemStats::rejected` counts it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DevmemError {
    /// A struct of the wrong size.
    BadLength {
        /// Bytes expected.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// A device frag of 0 bytes (6.18 never sends one).
    EmptyFrag(u32),
    /// A token above `super::MAX_TOKEN`.
    BadToken(u32),
    /// A token already held, pending or in flight.
    DuplicateToken(u32),
    /// A frag of a dma-buf not bound with [`DevmemRx::bind_dmabuf`].
    UnknownDmabuf(u32),
    /// A frag (by token) past the end of its dma-buf.
    OutOfBounds(u32),
    /// Release of a token the application does not hold.
    NotHeld(u32),
    /// Second release of a token.
    AlreadyReleased(u32),
    /// A new batch while one is in flight.
    BatchInFlight,
    /// A result with no batch in flight.
    NoBatchInFlight,
    /// The kernel said it freed more tokens than the batch had.
    FreedTooMany {
        /// Tokens in the batch.
        asked: u32,
        /// Tokens reported freed.
        freed: u32,
    },
    /// Limits per call of 0 or above the kernel's.
    BadLimits,
}

impl std::fmt::Display for DevmemError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DevmemError::BadLength { expected, got } => {
                write!(f, "{got} bytes, expected {expected}")
            }
            DevmemError::EmptyFrag(t) => write!(f, "empty device frag (token {t})"),
            DevmemError::BadToken(t) => write!(f, "token {t} out of the kernel's range"),
            DevmemError::DuplicateToken(t) => {
                write!(f, "token {t} handed out while still outstanding")
            }
            DevmemError::UnknownDmabuf(id) => write!(f, "frag of unbound dma-buf {id}"),
            DevmemError::OutOfBounds(t) => write!(f, "frag of token {t} beyond its dma-buf"),
            DevmemError::NotHeld(t) => write!(f, "release of token {t}, which is not held"),
            DevmemError::AlreadyReleased(t) => write!(f, "second release of token {t}"),
            DevmemError::BatchInFlight => {
                write!(f, "a SO_DEVMEM_DONTNEED batch is already in flight")
            }
            DevmemError::NoBatchInFlight => write!(f, "no SO_DEVMEM_DONTNEED batch in flight"),
            DevmemError::FreedTooMany { asked, freed } => {
                write!(f, "kernel freed {freed} of {asked} tokens")
            }
            DevmemError::BadLimits => write!(
                f,
                "limits per call must be 1..=128 entries, 1..=1024 tokens"
            ),
        }
    }
}

impl std::error::Error for DevmemError {}

/// Counters and gauges of one devmem socket. Balances ([`DevmemRx::check`]):
/// `tokens_outstanding == tokens_received - tokens_returned`, and `outstanding_bytes` is
/// `device_bytes` less the bytes of returned tokens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DevmemStats {
    /// Bytes received into device memory (`SCM_DEVMEM_DMABUF` frags).
    pub(crate) device_bytes: u64,
    /// Bytes copied into the user buffer (`SCM_DEVMEM_LINEAR`): the copy fallback.
    pub(crate) linear_bytes: u64,
    /// `SCM_DEVMEM_LINEAR` cmsgs.
    pub(crate) linear_cmsgs: u64,
    /// Tokens received (device frags).
    pub(crate) tokens_received: u64,
    /// Tokens the kernel confirmed freed.
    pub(crate) tokens_returned: u64,
    /// Gauge: tokens received and not returned (held, pending or in flight).
    pub tokens_outstanding: u64,
    /// Gauge: bytes of those.
    pub outstanding_bytes: u64,
    /// Releases by the application.
    pub(crate) releases: u64,
    /// SO_DEVMEM_DONTNEED batches taken.
    pub batches: u64,
    /// Results freeing fewer tokens than the batch had.
    pub(crate) partial_frees: u64,
    /// Batches whose call failed.
    pub(crate) failed_batches: u64,
    /// errno of the last failed call.
    pub(crate) last_errno: i32,
    /// Inputs refused with a [`DevmemError`].
    pub(crate) rejected: u64,
}

impl DevmemRx {
    /// Recomputes every gauge and balance from the token table; `Err` says which broke.
    pub fn check(&self) -> Result<(), String> {
        let mut count = [0usize; 3];
        let mut bytes = 0u64;
        for (t, (f, st)) in &self.tokens {
            count[*st as usize] += 1;
            bytes += u64::from(f.len);
            if f.token != *t || (*st == TokState::Pending) != self.pending.contains(t) {
                return Err(format!("token {t}: table and pending queue disagree"));
            }
        }
        let flight: Vec<u32> = self
            .in_flight
            .iter()
            .flatten()
            .flat_map(|r| r.token_start..r.token_start.saturating_add(r.token_count))
            .collect();
        if flight.len() != count[TokState::InFlight as usize]
            || flight
                .iter()
                .any(|t| self.tokens.get(t).map(|e| e.1) != Some(TokState::InFlight))
        {
            return Err("batch in flight and token table disagree".into());
        }
        let s = &self.stats;
        if s.tokens_outstanding != self.tokens.len() as u64
            || s.tokens_received.checked_sub(s.tokens_returned) != Some(s.tokens_outstanding)
            || s.outstanding_bytes != bytes
            || self.pending.len() != count[TokState::Pending as usize]
        {
            return Err(format!(
                "counters {s:?} vs {} tokens, {bytes} bytes",
                self.tokens.len()
            ));
        }
        Ok(())
    }
}
