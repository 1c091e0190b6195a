//! io_uring zero-copy receive (zcrx): which area buffers the application holds, which wait to go
//! back through the refill ring, and what each RECV_ZC completion means.
//!
//! What Linux 6.18 does (io_uring/zcrx.c, io_uring/net.c `io_recvzc`, iou-zcrx.rst):
//! - The area is cut into `net_iov`s ("niovs", here *buffers*) of `PAGE_SIZE`:
//!   `nr_iovs = area->mem.size >> PAGE_SHIFT` (`io_zcrx_create_area`). Later kernels make the
//!   size configurable; so does [`ZcrxRx::with_buf_size`].
//! - A data completion is one fragment inside one buffer: `io_zcrx_queue_cqe` writes
//!   `res = len`, `flags = IORING_CQE_F_MORE` and, in the second half of the 32-byte CQE,
//!   `off = off_in_page + (niov_idx << PAGE_SHIFT) + (area_id << IORING_ZCRX_AREA_SHIFT)`
//!   (6.18 has one area per ifq, `area_id = 0`, so the area token is 0). The fragment is an skb
//!   frag of an order-0 page, or at most `PAGE_SIZE` copied: it never crosses a buffer.
//! - Every data CQE takes one *user reference* on its buffer (`io_zcrx_get_niov_uref`). A buffer
//!   can carry several fragments at once (frags of one page, or a frag read in pieces), one
//!   reference each.
//! - Refill (`io_zcrx_ring_refill`): the kernel reads only `rqe->off`: the area index
//!   `off >> IORING_ZCRX_AREA_SHIFT` (must be 0) and the buffer index
//!   `(off & ~IORING_ZCRX_AREA_MASK) >> PAGE_SHIFT`. `len` is not read. An entry with
//!   `__pad != 0`, a bad index, or a buffer without user references is skipped silently;
//!   otherwise it drops *one* user reference, and the buffer is recycled once no reference is
//!   left. So: exactly one entry per fragment. An extra entry for a buffer that still has
//!   another fragment out steals that fragment's reference, and the NIC may overwrite bytes
//!   the application is reading — hence [`ZcrxRx::release`] accepts a held fragment once only.
//!   Like iou-zcrx.rst and the selftest, entries carry `len = res` anyway.
//! - The kernel consumes entries lazily (when its page pool needs buffers, at most
//!   `PP_ALLOC_CACHE_REFILL` per call): a pushed entry belongs to the kernel.
//! - The request ends (no `F_MORE`) with `res == 0` — end of stream, or, for a single-shot
//!   request with `sqe->len`, that many bytes delivered (`io_recvzc`: `if (len && zc->len == 0)`)
//!   — or `res < 0`: `-ENOSPC` when the CQ had no room for a data CQE (`io_zcrx_queue_cqe`
//!   failed), `-ENOMEM` when the copy fallback found no free buffer (`io_zcrx_copy_chunk`),
//!   `-EINTR`, or a socket error. Data CQEs always carry `F_MORE` in 6.18.
//! - Copy fallback: bytes not in a zcrx buffer (e.g. the skb linear part when the NIC did not
//!   split the header) are copied into a free area buffer by `io_zcrx_copy_chunk`, which posts
//!   the same kind of CQE. 6.18 does not flag it, so it is invisible here and counted as
//!   delivered like the rest; whether delivered bytes were copied is [`ZcrxCopyAccount`]'s
//!   business (copied, zero-copy, or unknown: never zero-copy by default).

use crate::sendzc::IORING_CQE_F_MORE;
use std::collections::{BTreeMap, VecDeque};

mod accounting;
mod socket_share;
mod types;
pub use accounting::{CopySplit, ZcrxCopyAccount, ZcrxCopyKnowledge};
pub use socket_share::zcrx_socket_limit;
pub use types::{RecvZcCqe, RefillEntry, RxError, RxEvent, RxStats};

#[cfg(test)]
mod tests;

/// `IORING_ZCRX_AREA_SHIFT`: offsets carry the area id from this bit up.
pub const IORING_ZCRX_AREA_SHIFT: u32 = 48;
/// `IORING_ZCRX_AREA_MASK`: the area-id bits of an offset.
pub(crate) const IORING_ZCRX_AREA_MASK: u64 = !((1u64 << IORING_ZCRX_AREA_SHIFT) - 1);
/// Buffer (niov) size of Linux 6.18: `PAGE_SIZE` on x86-64.
#[cfg(test)]
pub(crate) const ZCRX_BUF_SIZE: u32 = 4096;
/// Bytes of a 32-byte CQE: `io_uring_cqe` (16) followed by `io_uring_zcrx_cqe` (16).
pub const CQE32_LEN: usize = 32;
/// Bytes of `struct io_uring_zcrx_rqe` (`off: u64, len: u32, __pad: u32`).
#[cfg(test)]
pub(crate) const ZCRX_RQE_LEN: usize = 16;

const EINTR: i32 = 4;
const ENOMEM: i32 = 12;
const ENOSPC: i32 = 28;

/// Bytes of the area the application owns after a data completion, until [`ZcrxRx::release`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Frag {
    /// Offset in the area (area-id bits removed).
    pub off: u64,
    /// Length in bytes (the CQE's `res`).
    pub len: u32,
}

/// Where one user reference (one delivered fragment) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ref {
    Held,
    Queued,
    /// Pushed while another fragment of the buffer is still out: kept to detect overlaps.
    Returned,
}

#[derive(Debug, Clone, Copy)]
struct Live {
    start: u32,
    len: u32,
    state: Ref,
}

/// Bookkeeping of one zcrx area: buffers, fragments, refill queue and armed requests.
///
/// Each delivered fragment is one user reference on its buffer, and is exactly one of: held by
/// the application, queued for the refill ring, or returned (pushed). A buffer belongs to the
/// kernel when none of its fragments is held or queued.
#[derive(Debug, Clone)]
pub struct ZcrxRx {
    area_len: u64,
    shift: u32,
    token: u64,
    /// Per buffer, its fragments since it was last wholly given back; empty when the kernel's.
    bufs: Vec<Vec<Live>>,
    queue: VecDeque<RefillEntry>,
    /// Armed requests: connection -> (length limit, 0 for none; bytes so far).
    conns: BTreeMap<u64, (u32, u64)>,
    stats: RxStats,
}

impl ZcrxRx {
    /// An area of `area_len` bytes in `ZCRX_BUF_SIZE` buffers, with the `rq_area_token` the
    /// registration returned (`ZcrxIfq::area_token`; 0 on 6.18).
    #[cfg(test)]
    pub(crate) fn new(area_len: u64, area_token: u64) -> Result<ZcrxRx, RxError> {
        Self::with_buf_size(area_len, ZCRX_BUF_SIZE, area_token)
    }

    /// An area of `area_len` bytes in buffers of `buf_size` bytes (a power of two), with the
    /// `rq_area_token` the registration returned (`ZcrxIfq::area_token`; 0 on 6.18).
    pub fn with_buf_size(area_len: u64, buf_size: u32, area_token: u64) -> Result<ZcrxRx, RxError> {
        if !buf_size.is_power_of_two() {
            return Err(RxError::BadConfig("buffer size is not a power of two"));
        }
        if area_len == 0 || !area_len.is_multiple_of(u64::from(buf_size)) {
            return Err(RxError::BadConfig(
                "area length is not a positive multiple of the buffer size",
            ));
        }
        if area_len > !IORING_ZCRX_AREA_MASK + 1 {
            return Err(RxError::BadConfig("area longer than the offset bits"));
        }
        if area_token & !IORING_ZCRX_AREA_MASK != 0 {
            return Err(RxError::BadConfig("area token has offset bits set"));
        }
        let shift = buf_size.trailing_zeros();
        let n = usize::try_from(area_len >> shift)
            .map_err(|_| RxError::BadConfig("too many buffers for this machine"))?;
        Ok(ZcrxRx {
            area_len,
            shift,
            token: area_token,
            bufs: vec![Vec::new(); n],
            queue: VecDeque::new(),
            conns: BTreeMap::new(),
            stats: RxStats {
                bufs_in_kernel: n as u64,
                ..RxStats::default()
            },
        })
    }

    /// The counters.
    pub fn stats(&self) -> &RxStats {
        &self.stats
    }

    /// Buffer size in bytes.
    pub(crate) fn buf_size(&self) -> u32 {
        1 << self.shift
    }

    /// Number of buffers in the area.
    #[cfg(test)]
    pub(crate) fn buffers(&self) -> usize {
        self.bufs.len()
    }

    /// Refill entries waiting for ring space.
    pub fn queued_refills(&self) -> usize {
        self.queue.len()
    }

    /// Whether the application holds exactly `frag` (delivered by a data completion and not
    /// released since). Only such bytes may be read: the kernel does not write a buffer while
    /// one of its fragments is held, and a released fragment may already be back in its hands.
    pub fn is_held(&self, frag: Frag) -> bool {
        self.locate(frag).is_ok_and(|(b, start)| {
            self.bufs[b]
                .iter()
                .any(|l| l.state == Ref::Held && l.start == start && l.len == frag.len)
        })
    }

    /// Whether `conn` has a RECV_ZC request running.
    pub fn is_armed(&self, conn: u64) -> bool {
        self.conns.contains_key(&conn)
    }

    /// Records a RECV_ZC submission for `conn` (its `user_data`): `len` 0 for multishot, else
    /// a single-shot request for `len` bytes (6.18 refuses `len` with `IORING_RECV_MULTISHOT`).
    pub fn arm(&mut self, conn: u64, len: u32) -> Result<(), RxError> {
        if self.conns.contains_key(&conn) {
            return self.reject(RxError::AlreadyArmed(conn));
        }
        self.conns.insert(conn, (len, 0));
        Ok(())
    }

    /// Interprets a parsed 32-byte CQE ([`RecvZcCqe::parse`]).
    pub fn on_cqe32(&mut self, cqe: &RecvZcCqe) -> Result<RxEvent, RxError> {
        self.on_cqe(cqe.user_data, cqe.res, cqe.flags, cqe.off)
    }

    /// Interprets a RECV_ZC completion for `conn`: `res`, `flags`, and `zcqe_off`, the
    /// `io_uring_zcrx_cqe.off` (ignored unless `res > 0`).
    pub fn on_cqe(
        &mut self,
        conn: u64,
        res: i32,
        flags: u32,
        zcqe_off: u64,
    ) -> Result<RxEvent, RxError> {
        let Some(&(limit, got)) = self.conns.get(&conn) else {
            return self.reject(RxError::UnknownConn(conn));
        };
        let more = flags & IORING_CQE_F_MORE != 0;
        if res <= 0 {
            if more {
                return self.reject(RxError::Malformed { res, flags });
            }
            self.conns.remove(&conn);
            let errno = res.saturating_neg();
            return Ok(match errno {
                0 if limit != 0 && got == u64::from(limit) => {
                    self.stats.dones += 1;
                    RxEvent::Done { conn }
                }
                0 => {
                    self.stats.eofs += 1;
                    RxEvent::Eof { conn }
                }
                ENOSPC | ENOMEM | EINTR => {
                    self.stats.rearms += 1;
                    self.stats.enospc += u64::from(errno == ENOSPC);
                    RxEvent::Rearm { conn, errno }
                }
                _ => {
                    self.stats.errors += 1;
                    RxEvent::Error { conn, errno }
                }
            });
        }
        // res > 0: a fragment. Validate everything before changing anything.
        let frag = Frag {
            off: zcqe_off & !IORING_ZCRX_AREA_MASK,
            len: res as u32,
        };
        if zcqe_off & IORING_ZCRX_AREA_MASK != self.token {
            return self.reject(RxError::WrongArea(zcqe_off));
        }
        let (b, start) = match self.locate(frag) {
            Ok(at) => at,
            Err(e) => return self.reject(e),
        };
        let end = start + frag.len;
        if self.bufs[b]
            .iter()
            .any(|l| start < l.start + l.len && l.start < end)
        {
            return self.reject(RxError::Duplicate(frag));
        }
        if limit != 0 && got + u64::from(frag.len) > u64::from(limit) {
            return self.reject(RxError::OverLimit(conn));
        }
        if self.bufs[b].is_empty() {
            self.stats.bufs_in_kernel -= 1;
        }
        self.bufs[b].push(Live {
            start,
            len: frag.len,
            state: Ref::Held,
        });
        if more {
            self.conns.insert(conn, (limit, got + u64::from(frag.len)));
        } else {
            self.conns.remove(&conn);
        }
        let s = &mut self.stats;
        s.bytes += u64::from(frag.len);
        s.fragments += 1;
        s.held_fragments += 1;
        s.held_bytes += u64::from(frag.len);
        Ok(RxEvent::Data { conn, frag, more })
    }

    /// The application is done with `frag` (as delivered): its refill entry is queued.
    pub fn release(&mut self, frag: Frag) -> Result<(), RxError> {
        let (b, start) = match self.locate(frag) {
            Ok(at) => at,
            Err(_) => return self.reject(RxError::NotHeld(frag)),
        };
        let found = self.bufs[b]
            .iter_mut()
            .find(|l| l.start == start && l.len == frag.len);
        match found {
            Some(l) if l.state == Ref::Held => l.state = Ref::Queued,
            Some(_) => return self.reject(RxError::AlreadyReleased(frag)),
            None => return self.reject(RxError::NotHeld(frag)),
        }
        self.queue.push_back(RefillEntry {
            off: self.token | frag.off,
            len: frag.len,
        });
        let s = &mut self.stats;
        s.releases += 1;
        s.released_bytes += u64::from(frag.len);
        s.held_fragments -= 1;
        s.held_bytes -= u64::from(frag.len);
        s.queued_refills += 1;
        Ok(())
    }

    /// Hands queued refill entries, oldest first, to `push` (e.g. `ZcrxIfq::refill_push`)
    /// until it returns false (ring full): that entry and the rest stay queued. Returns how
    /// many were pushed; commit them to the kernel afterwards.
    pub fn flush_refills(&mut self, mut push: impl FnMut(RefillEntry) -> bool) -> usize {
        let mut n = 0;
        while let Some(&e) = self.queue.front() {
            if !push(e) {
                self.stats.refill_starved += 1;
                break;
            }
            self.queue.pop_front();
            self.retire(e);
            n += 1;
        }
        n
    }

    /// Up to `max` queued refill entries (pass the ring's free space); every one returned must
    /// be pushed. Entries beyond `max` stay queued.
    pub fn take_refills(&mut self, max: usize) -> Vec<RefillEntry> {
        if max == 0 {
            // No room asked for is no refill starved of room.
            return Vec::new();
        }
        let mut out = Vec::with_capacity(max.min(self.queue.len()));
        self.flush_refills(|e| {
            let room = out.len() < max;
            if room {
                out.push(e);
            }
            room
        });
        out
    }

    /// Buffer index and offset in it of `frag`, if it lies inside one buffer of the area.
    fn locate(&self, frag: Frag) -> Result<(usize, u32), RxError> {
        let end = frag
            .off
            .checked_add(u64::from(frag.len))
            .filter(|&e| e <= self.area_len);
        let Some(end) = end.filter(|_| frag.len > 0) else {
            return Err(RxError::OutOfArea(frag));
        };
        let b = frag.off >> self.shift;
        if (end - 1) >> self.shift != b {
            return Err(RxError::CrossesBuffer(frag));
        }
        // b < area_len >> shift == bufs.len(), which fits usize (checked at construction).
        Ok((
            b as usize,
            (frag.off & (u64::from(self.buf_size()) - 1)) as u32,
        ))
    }

    /// A queued entry went into the ring: its fragment is returned; the buffer is the kernel's
    /// again once no fragment of it is held or queued.
    fn retire(&mut self, e: RefillEntry) {
        let f = Frag {
            off: e.area_offset(),
            len: e.len,
        };
        // Queued entries were built by `release` from fragments `locate` accepted.
        let Ok((b, start)) = self.locate(f) else {
            return;
        };
        let lives = &mut self.bufs[b];
        if let Some(l) = lives
            .iter_mut()
            .find(|l| l.state == Ref::Queued && l.start == start && l.len == f.len)
        {
            l.state = Ref::Returned;
        }
        if lives.iter().all(|l| l.state == Ref::Returned) {
            lives.clear();
            self.stats.bufs_in_kernel += 1;
        }
        self.stats.queued_refills -= 1;
        self.stats.refills_pushed += 1;
    }

    fn reject<T>(&mut self, e: RxError) -> Result<T, RxError> {
        self.stats.rejected += 1;
        Err(e)
    }
}

#[cfg(test)]
mod is_held_tests {
    use super::*;
    use crate::sendzc::IORING_CQE_F_MORE as MORE;

    #[test]
    fn only_delivered_unreleased_fragments_are_held() {
        let mut rx = ZcrxRx::new(4 * 4096, 0).unwrap();
        rx.arm(1, 0).unwrap();
        let a = Frag { off: 100, len: 50 };
        let b = Frag { off: 200, len: 10 };
        assert!(!rx.is_held(a), "never delivered");
        assert!(matches!(
            rx.on_cqe(1, 50, MORE, 100),
            Ok(RxEvent::Data { .. })
        ));
        assert!(matches!(
            rx.on_cqe(1, 10, MORE, 200),
            Ok(RxEvent::Data { .. })
        ));
        assert!(rx.is_held(a) && rx.is_held(b));
        // Exactly the fragment: no sub-range, no other length, nothing outside the area.
        assert!(!rx.is_held(Frag { off: 100, len: 49 }));
        assert!(!rx.is_held(Frag { off: 101, len: 49 }));
        assert!(!rx.is_held(Frag {
            off: 1 << 20,
            len: 1
        }));
        rx.release(a).unwrap();
        assert!(!rx.is_held(a), "released (queued)");
        assert!(rx.is_held(b));
        assert_eq!(rx.flush_refills(|_| true), 1);
        assert!(!rx.is_held(a), "returned");
        rx.release(b).unwrap();
        assert!(!rx.is_held(b));
        rx.check().unwrap();
    }
}
