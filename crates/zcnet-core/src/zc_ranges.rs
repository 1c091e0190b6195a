//! MSG_ZEROCOPY completion ranges.
//!
//! Documentation/networking/msg_zerocopy.rst: every successful `send` with `MSG_ZEROCOPY` on a
//! socket gets the next value of a per-socket 32-bit counter (starting at 0, wrapping). The kernel
//! reports completions on the socket error queue as `sock_extended_err` with
//! `ee_origin == SO_EE_ORIGIN_ZEROCOPY`; the completed ids are the inclusive range
//! `[ee_info, ee_data]`, and consecutive completions may be coalesced into one range.
//! `ee_code & SO_EE_CODE_ZEROCOPY_COPIED` says the kernel fell back to copying.
//!
//! [`ZcRanges`] maps ids back to caller tokens (buffer ids) and byte counts. It tolerates ranges
//! that arrive out of order, that leave gaps (filled later), and duplicates; it counts ids the
//! kernel reports that were never sent ("unknown"), which would mean the id sequence drifted.

use std::collections::VecDeque;

#[derive(Debug, Clone)]
struct Entry<T> {
    bytes: u64,
    token: T,
}

/// One send whose completion the kernel reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completed<T> {
    /// The token given to [`ZcRanges::push`].
    pub token: T,
    /// Bytes that send call moved.
    pub bytes: u64,
    /// The kernel copied (SO_EE_CODE_ZEROCOPY_COPIED) instead of sending from user pages.
    pub copied: bool,
}

/// What one reported range did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RangeOutcome {
    /// Ids completed for the first time.
    pub fresh: u64,
    /// Ids that had already been completed.
    pub duplicate: u64,
    /// Ids never handed out by [`ZcRanges::push`].
    pub unknown: u64,
}

/// Tracks MSG_ZEROCOPY send ids from `push` to their completion.
#[derive(Debug, Clone)]
pub struct ZcRanges<T> {
    /// Id the next send will get.
    next_id: u32,
    /// Id of `pending[0]`.
    base: u32,
    /// `pending[i]` is id `base + i`; `None` once completed.
    pending: VecDeque<Option<Entry<T>>>,
    outstanding: usize,
    /// A send call failed since the last [`ZcRanges::push`], and may have taken `next_id`
    /// ([`ZcRanges::failed_send`]).
    maybe_taken: bool,
}

impl<T> Default for ZcRanges<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> ZcRanges<T> {
    /// A tracker for a fresh socket (ids start at 0).
    pub fn new() -> Self {
        Self::starting_at(0)
    }

    /// A tracker whose first id is `first` (tests use this to exercise wrap-around).
    pub fn starting_at(first: u32) -> Self {
        ZcRanges {
            next_id: first,
            base: first,
            pending: VecDeque::new(),
            outstanding: 0,
            maybe_taken: false,
        }
    }

    /// Records a send call that returned `bytes > 0` and so consumed an id; returns that id.
    pub fn push(&mut self, bytes: u64, token: T) -> u32 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.pending.push_back(Some(Entry { bytes, token }));
        self.outstanding += 1;
        self.maybe_taken = false;
        id
    }

    /// Records a send call that failed and may still have taken an id: a UDP datagram the IP
    /// layer refuses once it is built (`EPERM` from a netfilter or cgroup drop, `EINVAL` from
    /// a GSO check, `ENOBUFS` from a full queue where `IP_RECVERR` is on) has taken the
    /// socket's next id and is freed in the call, which queues that id's notification
    /// before the call returns; a refusal before the datagram is built gives the id back
    /// (net/core/skbuff.c `msg_zerocopy_put_abort`). So read the error queue to its end
    /// before the next [`ZcRanges::push`]: a report naming [`ZcRanges::next_id`] till then
    /// says the failed send took it, and the next send gets the id after it. Without this,
    /// the next send would be given the failed one's id, its buffer handed back by that
    /// notification while the kernel still sends from it, and every later id one off.
    pub fn failed_send(&mut self) {
        self.maybe_taken = true;
    }

    /// Sends whose completion has not been reported yet.
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// The id the next send will get.
    pub fn next_id(&self) -> u32 {
        self.next_id
    }

    /// Applies the reported range `[lo, hi]` (inclusive, wrapping), appending each newly
    /// completed send to `out`, in id order from `lo`.
    ///
    /// Takes time in proportion to the sends the range can name (at most those still
    /// tracked), not to its length: a range is up to 2^32 ids (`hi = lo - 1`), and the ids
    /// outside the tracked window are only counted, by arithmetic. Each id of the range is
    /// counted once: fresh, duplicate (tracked and already completed, or behind the window:
    /// completed and retired) or unknown (at or past [`ZcRanges::next_id`], within 2^31 of it:
    /// never sent), except the id a failed send took ([`ZcRanges::failed_send`]), which is
    /// none of them: it is skipped.
    pub fn complete(
        &mut self,
        lo: u32,
        hi: u32,
        copied: bool,
        out: &mut Vec<Completed<T>>,
    ) -> RangeOutcome {
        const LAP: u64 = 1 << 32;
        let mut outcome = RangeOutcome::default();
        let count = u64::from(hi.wrapping_sub(lo)) + 1;
        // The range as offsets from `base`: [start, end), which may run into a second lap of
        // the 32-bit id space (offset o of the second lap is id base + o - 2^32).
        let start = u64::from(lo.wrapping_sub(self.base));
        let end = start + count;
        // next_id == base + window (mod 2^32): offsets [0, window) are tracked, the 2^31
        // after them are ahead of next_id (never sent), the rest are behind base.
        let window = (self.pending.len() as u64).min(LAP);
        let ahead_end = (window + (1 << 31)).min(LAP);
        let mut in_window = 0;
        for lap in [0, LAP] {
            let (a, b) = (start.max(lap), end.min(lap + window));
            for offset in a..b {
                match self.pending[(offset - lap) as usize].take() {
                    Some(e) => {
                        self.outstanding -= 1;
                        outcome.fresh += 1;
                        out.push(Completed {
                            token: e.token,
                            bytes: e.bytes,
                            copied,
                        });
                    }
                    None => outcome.duplicate += 1,
                }
            }
            in_window += b.saturating_sub(a);
            outcome.unknown += end
                .min(lap + ahead_end)
                .saturating_sub(start.max(lap + window));
        }
        // The rest is behind base: completed and retired long ago.
        outcome.duplicate += count - in_window - outcome.unknown;
        if self.maybe_taken && self.next_id.wrapping_sub(lo) <= hi.wrapping_sub(lo) {
            // The failed send took next_id (counted unknown above): it is done, and skipped.
            self.maybe_taken = false;
            outcome.unknown -= 1;
            self.next_id = self.next_id.wrapping_add(1);
            self.pending.push_back(None);
        }
        while let Some(None) = self.pending.front() {
            self.pending.pop_front();
            self.base = self.base.wrapping_add(1);
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn simple_range_and_gap() {
        let mut r = ZcRanges::new();
        for i in 0..5u32 {
            assert_eq!(r.push(100 + u64::from(i), i), i);
        }
        let mut out = Vec::new();
        // gap: 2..=3 first, then 0..=1, then 4
        assert_eq!(r.complete(2, 3, false, &mut out).fresh, 2);
        assert_eq!(r.outstanding(), 3);
        assert_eq!(r.complete(0, 1, true, &mut out).fresh, 2);
        let o = r.complete(0, 4, false, &mut out);
        assert_eq!(
            o,
            RangeOutcome {
                fresh: 1,
                duplicate: 4,
                unknown: 0
            }
        );
        assert_eq!(r.outstanding(), 0);
        let tokens: Vec<u32> = out.iter().map(|c| c.token).collect();
        assert_eq!(tokens, vec![2, 3, 0, 1, 4]);
        assert!(out[2].copied && out[3].copied && !out[0].copied);
        // id 5 never sent
        assert_eq!(r.complete(5, 5, false, &mut out).unknown, 1);
    }

    /// A send that failed after taking an id (a UDP datagram the IP layer refused once
    /// built) is reported at once; the next send gets the id after it, and nothing is
    /// unknown. A failed send that took none leaves the ids as they were.
    #[test]
    fn an_id_taken_by_a_failed_send_is_skipped() {
        let mut r = ZcRanges::starting_at(u32::MAX - 1);
        assert_eq!(r.push(10, 'a'), u32::MAX - 1);
        r.failed_send();
        let mut out = Vec::new();
        // The failed send's notification, merged with the one before it.
        let o = r.complete(u32::MAX - 1, u32::MAX, false, &mut out);
        assert_eq!((o.fresh, o.duplicate, o.unknown), (1, 0, 0));
        assert_eq!(r.next_id(), 0, "u32::MAX was the failed send's");
        assert_eq!(r.push(20, 'b'), 0);
        r.failed_send();
        // Nothing reported before the next send: the failed one took no id.
        assert_eq!(r.push(30, 'c'), 1);
        let o = r.complete(0, 1, true, &mut out);
        assert_eq!((o.fresh, o.unknown), (2, 0));
        assert_eq!(r.outstanding(), 0);
        let tokens: Vec<char> = out.iter().map(|c| c.token).collect();
        assert_eq!(tokens, ['a', 'b', 'c']);
        // Only while it may have: after a push, an id past the window is unknown again.
        assert_eq!(r.complete(2, 2, false, &mut out).unknown, 1);
    }

    #[test]
    fn wraps_around_u32() {
        let mut r = ZcRanges::starting_at(u32::MAX - 1);
        let ids: Vec<u32> = (0..4).map(|i| r.push(1, i)).collect();
        assert_eq!(ids, vec![u32::MAX - 1, u32::MAX, 0, 1]);
        let mut out = Vec::new();
        let o = r.complete(u32::MAX - 1, 1, false, &mut out);
        assert_eq!(o.fresh, 4);
        assert_eq!(r.outstanding(), 0);
        assert_eq!(r.complete(u32::MAX, u32::MAX, false, &mut out).duplicate, 1);
    }

    /// The id-by-id loop `complete` was before it counted the ids outside the window by
    /// arithmetic: the reference for the differential test below.
    fn complete_by_id<T>(
        r: &mut ZcRanges<T>,
        lo: u32,
        hi: u32,
        copied: bool,
        out: &mut Vec<Completed<T>>,
    ) -> RangeOutcome {
        let mut outcome = RangeOutcome::default();
        let count = u64::from(hi.wrapping_sub(lo)) + 1;
        let window = r.pending.len() as u64;
        for k in 0..count {
            let id = lo.wrapping_add(k as u32);
            let offset = u64::from(id.wrapping_sub(r.base));
            if offset < window {
                match r.pending[offset as usize].take() {
                    Some(e) => {
                        r.outstanding -= 1;
                        outcome.fresh += 1;
                        out.push(Completed {
                            token: e.token,
                            bytes: e.bytes,
                            copied,
                        });
                    }
                    None => outcome.duplicate += 1,
                }
            } else if id.wrapping_sub(r.next_id) < (1 << 31) {
                outcome.unknown += 1;
            } else {
                outcome.duplicate += 1;
            }
        }
        while let Some(None) = r.pending.front() {
            r.pending.pop_front();
            r.base = r.base.wrapping_add(1);
        }
        outcome
    }

    /// Found by fuzz/ (target zc_ranges, then errqueue): a report of `[lo, lo - 1]` names all
    /// 2^32 ids, and `complete` walked every one of them (seconds per call). It now costs the
    /// tracked window, with the same counts.
    #[test]
    fn a_range_of_every_id_is_counted_not_walked() {
        let mut r = ZcRanges::starting_at(10);
        for i in 0..3u32 {
            r.push(1, i);
        }
        let mut out = Vec::new();
        let t = std::time::Instant::now();
        let o = r.complete(11, 10, false, &mut out);
        assert!(
            t.elapsed() < std::time::Duration::from_secs(1),
            "{:?}",
            t.elapsed()
        );
        // Ids 11, 12 and (after the wrap) 10 are fresh; the 2^31 from 13 on were never sent;
        // the rest are behind the window.
        assert_eq!(o.fresh, 3);
        assert_eq!(o.unknown, 1 << 31);
        assert_eq!(o.duplicate, (1 << 32) - 3 - (1 << 31));
        let tokens: Vec<u32> = out.iter().map(|c| c.token).collect();
        assert_eq!(tokens, [1, 2, 0], "in id order from lo, wrapping");
        assert_eq!(r.outstanding(), 0);
        let o = r.complete(0, u32::MAX, true, &mut out);
        assert_eq!((o.fresh, o.unknown, o.duplicate), (0, 1 << 31, 1 << 31));
    }

    proptest! {
        #[test]
        fn counting_is_the_id_by_id_loop(
            first in prop_oneof![Just(0u32), Just(u32::MAX - 3), Just(1 << 31), any::<u32>()],
            sends in 0usize..40,
            ops in prop::collection::vec((any::<u8>(), any::<u32>(), 0u32..48, any::<bool>()), 1..30),
        ) {
            let mut a: ZcRanges<usize> = ZcRanges::starting_at(first);
            let mut b: ZcRanges<usize> = ZcRanges::starting_at(first);
            for i in 0..sends {
                a.push(i as u64, i);
                b.push(i as u64, i);
            }
            for (kind, x, len, copied) in ops {
                // Near the window (where the counts change), or anywhere; short ranges only,
                // so that the reference loop stays quick.
                let lo = match kind % 3 {
                    0 => first.wrapping_add(x % 64).wrapping_sub(8),
                    1 => a.next_id().wrapping_add(x % 16).wrapping_sub(4),
                    _ => x,
                };
                let hi = lo.wrapping_add(len);
                if kind % 7 == 0 {
                    a.push(1, 1000 + usize::from(kind));
                    b.push(1, 1000 + usize::from(kind));
                }
                let (mut oa, mut ob) = (Vec::new(), Vec::new());
                prop_assert_eq!(
                    a.complete(lo, hi, copied, &mut oa),
                    complete_by_id(&mut b, lo, hi, copied, &mut ob)
                );
                prop_assert_eq!(oa, ob);
                prop_assert_eq!(a.outstanding(), b.outstanding());
            }
        }
    }

    /// (first id, send sizes, range cuts, duplicated ranges, shuffle seed).
    type Scenario = (u32, Vec<u64>, Vec<(usize, bool)>, Vec<usize>, u64);

    /// A simulated kernel: cut the id sequence into ranges, shuffle them, add duplicates.
    fn ranges_strategy() -> impl Strategy<Value = Scenario> {
        (any::<u32>(), prop::collection::vec(1u64..100_000, 1..200)).prop_flat_map(
            |(first, sizes)| {
                let n = sizes.len();
                (
                    Just(first),
                    Just(sizes),
                    prop::collection::vec((1usize..8, any::<bool>()), n..=n),
                    prop::collection::vec(0..n, 0..20),
                    any::<u64>(),
                )
            },
        )
    }

    proptest! {
        #[test]
        fn every_id_released_exactly_once((first, sizes, cuts, dups, seed) in ranges_strategy()) {
            let mut r = ZcRanges::starting_at(first);
            for (i, &b) in sizes.iter().enumerate() {
                r.push(b, i);
            }
            let n = sizes.len();
            let mut ranges = partition(&cuts, n);
            let fresh_ranges = ranges.len();
            for &d in &dups {
                // a duplicate report of some range
                let k = d % fresh_ranges;
                ranges.push(ranges[k]);
            }
            // deterministic shuffle
            let mut s = seed | 1;
            for i in (1..ranges.len()).rev() {
                s ^= s << 13; s ^= s >> 7; s ^= s << 17;
                ranges.swap(i, (s % (i as u64 + 1)) as usize);
            }
            let mut out = Vec::new();
            let mut dup_seen = 0;
            for &(lo, hi, copied) in &ranges {
                let o = r.complete(first.wrapping_add(lo as u32), first.wrapping_add(hi as u32), copied, &mut out);
                prop_assert_eq!(o.unknown, 0);
                dup_seen += o.duplicate;
            }
            prop_assert_eq!(r.outstanding(), 0);
            prop_assert_eq!(out.len(), n);
            let parts = partition(&cuts, n);
            let mut expect_copied = vec![false; n];
            for &(lo, hi, c) in &parts {
                for flag in &mut expect_copied[lo..=hi] { *flag = c; }
            }
            let mut seen = vec![false; n];
            for c in &out {
                prop_assert!(!seen[c.token], "token {} released twice", c.token);
                seen[c.token] = true;
                prop_assert_eq!(c.bytes, sizes[c.token]);
                prop_assert_eq!(c.copied, expect_copied[c.token]);
            }
            // copied flag follows the range the id belonged to
            let total: u64 = sizes.iter().sum();
            let copied: u64 = out.iter().filter(|c| c.copied).map(|c| c.bytes).sum();
            let zc: u64 = out.iter().filter(|c| !c.copied).map(|c| c.bytes).sum();
            prop_assert_eq!(copied + zc, total);
            let dup_ids: u64 = dups.iter().map(|&d| { let (lo, hi, _) = parts[d % parts.len()]; (hi - lo + 1) as u64 }).sum();
            prop_assert_eq!(dup_seen, dup_ids);
        }
    }

    /// Cuts ids `0..n` into consecutive inclusive ranges, lengths and copied flags from `cuts`.
    fn partition(cuts: &[(usize, bool)], n: usize) -> Vec<(usize, usize, bool)> {
        let mut ranges = Vec::new();
        let mut at = 0usize;
        let mut ci = 0;
        while at < n {
            let (len, copied) = cuts[ci % cuts.len()];
            ci += 1;
            let end = (at + len).min(n);
            ranges.push((at, end - 1, copied));
            at = end;
        }
        ranges
    }
}
