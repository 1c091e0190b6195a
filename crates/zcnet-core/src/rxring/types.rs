//! Wire layouts, events, errors and counters of [`super::ZcrxRx`], and its self-check.

#[cfg(test)]
use super::ZCRX_RQE_LEN;
use super::{Frag, Ref, ZcrxRx, CQE32_LEN, IORING_ZCRX_AREA_MASK};

/// One refill-ring entry (`struct io_uring_zcrx_rqe`), ready for `ZcrxIfq::refill_push`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefillEntry {
    /// Area token ORed with the fragment's area offset (`rqe->off`).
    pub off: u64,
    /// The fragment's length (`rqe->len`; 6.18 does not read it).
    pub len: u32,
}

impl RefillEntry {
    /// The area offset, without the area-token bits.
    pub(crate) fn area_offset(&self) -> u64 {
        self.off & !IORING_ZCRX_AREA_MASK
    }

    /// The entry as the kernel reads it: `off`, `len`, `__pad = 0`, native byte order.
    #[cfg(test)]
    #[allow(clippy::wrong_self_convention)] // by reference, as when it was public
    pub(crate) fn to_bytes(&self) -> [u8; ZCRX_RQE_LEN] {
        let mut b = [0u8; ZCRX_RQE_LEN];
        b[..8].copy_from_slice(&self.off.to_ne_bytes());
        b[8..12].copy_from_slice(&self.len.to_ne_bytes());
        b
    }
}

/// A RECV_ZC completion read from a 32-byte CQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvZcCqe {
    /// `user_data` of the request (the connection token).
    pub user_data: u64,
    /// `res`: bytes, 0 at the end, or `-errno`.
    pub res: i32,
    /// `flags` (`IORING_CQE_F_MORE`...).
    pub flags: u32,
    /// `io_uring_zcrx_cqe.off`: area id in the top bits, area offset below.
    pub off: u64,
}

impl RecvZcCqe {
    /// Parses `struct io_uring_cqe` + `struct io_uring_zcrx_cqe` (native byte order): exactly
    /// [`CQE32_LEN`] bytes, and the `__pad` the kernel zeroes must be zero.
    pub fn parse(b: &[u8]) -> Result<RecvZcCqe, RxError> {
        let b: &[u8; CQE32_LEN] = b.try_into().map_err(|_| RxError::BadLength {
            expected: CQE32_LEN,
            got: b.len(),
        })?;
        let u64_at = |i: usize| {
            u64::from_ne_bytes([
                b[i],
                b[i + 1],
                b[i + 2],
                b[i + 3],
                b[i + 4],
                b[i + 5],
                b[i + 6],
                b[i + 7],
            ])
        };
        let u32_at = |i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        if u64_at(24) != 0 {
            return Err(RxError::NonzeroPad);
        }
        Ok(RecvZcCqe {
            user_data: u64_at(0),
            res: u32_at(8) as i32,
            flags: u32_at(12),
            off: u64_at(16),
        })
    }
}

/// Input that contradicts the protocol: a bug here, in the caller or in the kernel. Nothing
/// changes when one is returned (only [`RxStats::rejected`] counts it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RxError {
    /// Unusable area length, buffer size or area token.
    BadConfig(&'static str),
    /// A completion for a connection with no request armed.
    UnknownConn(u64),
    /// [`ZcrxRx::arm`] for a connection whose request is still running.
    AlreadyArmed(u64),
    /// The CQE's area bits are not this area's token.
    WrongArea(u64),
    /// The fragment does not lie inside the area.
    OutOfArea(Frag),
    /// The fragment spans two buffers (6.18 never delivers that).
    CrossesBuffer(Frag),
    /// The fragment overlaps bytes the application has not given back yet.
    Duplicate(Frag),
    /// More bytes than the single-shot request asked for.
    OverLimit(u64),
    /// `res` and `flags` do not go together (no data with `F_MORE`).
    Malformed {
        /// `res`.
        res: i32,
        /// `flags`.
        flags: u32,
    },
    /// Release of a fragment the application does not hold.
    NotHeld(Frag),
    /// Second release of a fragment.
    AlreadyReleased(Frag),
    /// A CQE of the wrong size.
    BadLength {
        /// Bytes expected.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// `io_uring_zcrx_cqe.__pad` is not zero.
    NonzeroPad,
}

impl std::fmt::Display for RxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RxError::BadConfig(why) => write!(f, "zcrx area: {why}"),
            RxError::UnknownConn(c) => {
                write!(f, "completion for connection {c} with no RECV_ZC armed")
            }
            RxError::AlreadyArmed(c) => write!(f, "connection {c} already has a RECV_ZC running"),
            RxError::WrongArea(o) => write!(f, "completion offset {o:#x} names another area"),
            RxError::OutOfArea(fr) => write!(f, "fragment {fr:?} lies outside the area"),
            RxError::CrossesBuffer(fr) => write!(f, "fragment {fr:?} crosses a buffer boundary"),
            RxError::Duplicate(fr) => write!(f, "fragment {fr:?} overlaps bytes still held"),
            RxError::OverLimit(c) => write!(f, "connection {c} got more than it asked for"),
            RxError::Malformed { res, flags } => {
                write!(f, "impossible completion res {res} flags {flags:#x}")
            }
            RxError::NotHeld(fr) => write!(f, "release of fragment {fr:?}, which is not held"),
            RxError::AlreadyReleased(fr) => write!(f, "second release of fragment {fr:?}"),
            RxError::BadLength { expected, got } => {
                write!(f, "{got}-byte CQE, expected {expected}")
            }
            RxError::NonzeroPad => write!(f, "io_uring_zcrx_cqe padding is not zero"),
        }
    }
}

impl std::error::Error for RxError {}

/// Counters and gauges of one zcrx area.
///
/// Balances at every step ([`ZcrxRx::check`]): `bytes == released_bytes + held_bytes`,
/// `fragments == releases + held_fragments`, `releases == refills_pushed + queued_refills`.
/// Copied fallback bytes are not distinguishable on 6.18: they are in `bytes`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RxStats {
    /// Bytes delivered (sum of data `res`).
    pub bytes: u64,
    /// Data completions (fragments delivered).
    pub fragments: u64,
    /// Fragments the application released.
    pub(crate) releases: u64,
    /// Bytes of those.
    pub(crate) released_bytes: u64,
    /// Refill entries handed to the kernel-facing code (pushed into the ring).
    pub(crate) refills_pushed: u64,
    /// Flushes that left entries queued because the ring had no room (backpressure).
    pub(crate) refill_starved: u64,
    /// Requests ended by `-ENOSPC`, `-ENOMEM` or `-EINTR` ([`RxEvent::Rearm`]).
    pub(crate) rearms: u64,
    /// Of those, `-ENOSPC`.
    pub(crate) enospc: u64,
    /// Requests ended by end of stream.
    pub(crate) eofs: u64,
    /// Single-shot requests that received all their bytes.
    pub(crate) dones: u64,
    /// Requests ended by another error.
    pub(crate) errors: u64,
    /// Inputs refused with an [`RxError`].
    pub rejected: u64,
    /// Gauge: fragments the application holds.
    pub held_fragments: u64,
    /// Gauge: bytes the application holds.
    pub(crate) held_bytes: u64,
    /// Gauge: released fragments whose refill entry waits for ring space.
    pub queued_refills: u64,
    /// Gauge: buffers no fragment of which is held or queued (the kernel's).
    pub bufs_in_kernel: u64,
}

/// What one RECV_ZC completion meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxEvent {
    /// The application now owns `frag` and must [`ZcrxRx::release`] it. `more` is false only
    /// if the request ended with this CQE (6.18 never does that): re-arm it.
    Data {
        /// The connection (request `user_data`).
        conn: u64,
        /// The received bytes.
        frag: Frag,
        /// `IORING_CQE_F_MORE` was set: the request goes on.
        more: bool,
    },
    /// `res == 0` ended the request before any length limit: the peer closed the stream.
    Eof {
        /// The connection.
        conn: u64,
    },
    /// `res == 0` ended a single-shot request whose `len` bytes all arrived.
    Done {
        /// The connection.
        conn: u64,
    },
    /// The request ended with `-ENOSPC` (CQ full), `-ENOMEM` (no free buffer for the copy
    /// fallback) or `-EINTR`: reap CQEs / push refills, then submit RECV_ZC again.
    Rearm {
        /// The connection.
        conn: u64,
        /// The errno (positive).
        errno: i32,
    },
    /// The request ended with another error (`-ECONNRESET`, `-ENOTCONN`, `-ECANCELED`...).
    Error {
        /// The connection.
        conn: u64,
        /// The errno (positive).
        errno: i32,
    },
}

impl ZcrxRx {
    /// Recomputes every gauge and balance from the per-buffer state; `Err` says which broke.
    /// For tests and debug assertions: O(buffers + queued).
    pub fn check(&self) -> Result<(), String> {
        let (mut held, mut held_bytes, mut queued, mut in_kernel) = (0u64, 0u64, 0u64, 0u64);
        for (b, lives) in self.bufs.iter().enumerate() {
            if lives.is_empty() {
                in_kernel += 1;
            } else if lives.iter().all(|l| l.state == Ref::Returned) {
                return Err(format!("buffer {b} kept although wholly returned"));
            }
            for (i, l) in lives.iter().enumerate() {
                if lives[..i]
                    .iter()
                    .any(|m| l.start < m.start + m.len && m.start < l.start + l.len)
                {
                    return Err(format!("buffer {b}: overlapping fragments"));
                }
                match l.state {
                    Ref::Held => (held, held_bytes) = (held + 1, held_bytes + u64::from(l.len)),
                    Ref::Queued => queued += 1,
                    Ref::Returned => {}
                }
            }
        }
        for e in &self.queue {
            let f = Frag {
                off: e.area_offset(),
                len: e.len,
            };
            let (b, start) = self.locate(f).map_err(|e| format!("queued entry: {e}"))?;
            let n = self.bufs[b]
                .iter()
                .filter(|l| l.state == Ref::Queued && l.start == start && l.len == f.len)
                .count();
            if n != 1 || e.off & IORING_ZCRX_AREA_MASK != self.token {
                return Err(format!("queued entry {e:?} matches {n} released fragments"));
            }
        }
        let s = &self.stats;
        let checks = [
            ("held_fragments", s.held_fragments, held),
            ("held_bytes", s.held_bytes, held_bytes),
            ("queued_refills", s.queued_refills, queued),
            ("queue length", self.queue.len() as u64, queued),
            ("bufs_in_kernel", s.bufs_in_kernel, in_kernel),
            (
                "bytes - released",
                s.bytes.saturating_sub(s.released_bytes),
                held_bytes,
            ),
            (
                "fragments - releases",
                s.fragments.saturating_sub(s.releases),
                held,
            ),
            (
                "releases - pushed",
                s.releases.saturating_sub(s.refills_pushed),
                queued,
            ),
        ];
        for (what, counted, actual) in checks {
            if counted != actual {
                return Err(format!("{what} is {counted}, state says {actual}"));
            }
        }
        if s.released_bytes > s.bytes || s.releases > s.fragments || s.refills_pushed > s.releases {
            return Err("more released or pushed than delivered".into());
        }
        Ok(())
    }
}
