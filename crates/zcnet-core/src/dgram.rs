//! Checking a sequence of UDP datagrams against the seeded [`Pattern`].
//!
//! `zcnet send --udp --verify` writes the pattern into every datagram at its own stream offset
//! (the bytes sent before it), whichever mechanism sends it (a socket or AF_XDP frames). A TCP
//! stream is checked byte after byte; datagrams may be lost or reordered on the way, so each
//! one is checked where it belongs instead: first at the offset that follows the previous
//! datagram (the usual case, one comparison), else at the offset its content names
//! ([`Pattern::locate`]; one too short for that, at a whole number of its own lengths from
//! there). A datagram that is the pattern at no offset is corrupted (or was not
//! sent with `--verify`): that is a [`Mismatch`], reported at the offset it was expected at.
//! What was lost is what lies below the highest offset reached and never arrived.
//!
//! ```
//! use zcnet_core::{dgram::DatagramCheck, Pattern};
//! let p = Pattern::new(7);
//! let mut d = [[0u8; 100]; 3];
//! for (i, b) in d.iter_mut().enumerate() {
//!     p.fill(i as u64 * 100, b);
//! }
//! let mut check = DatagramCheck::new(p);
//! check.datagram(&d[0]).unwrap();
//! check.datagram(&d[2]).unwrap(); // the second was lost …
//! assert_eq!((check.bytes(), check.missing_bytes(), check.late()), (200, 100, 0));
//! check.datagram(&d[1]).unwrap(); // … no: it came late
//! assert_eq!((check.bytes(), check.missing_bytes(), check.late()), (300, 0, 1));
//! assert!(check.datagram(&[0u8; 100]).is_err()); // not the pattern anywhere
//! ```

use crate::pattern::{Mismatch, Pattern};

/// How many datagrams ahead or behind a short one is looked for ([`DatagramCheck::datagram`]).
const STEP_SEARCH: u64 = 1 << 14;

/// The running check of received datagrams.
#[derive(Debug, Clone)]
pub struct DatagramCheck {
    pattern: Pattern,
    /// Where the next datagram is expected: the end of the previous one.
    next: u64,
    /// The highest end offset seen.
    end: u64,
    bytes: u64,
    datagrams: u64,
    late: u64,
    located: u64,
    /// The length of the last datagram that carried bytes.
    last_len: u64,
}

impl DatagramCheck {
    /// A check against `pattern`, expecting the first datagram at offset 0.
    pub fn new(pattern: Pattern) -> DatagramCheck {
        DatagramCheck {
            pattern,
            next: 0,
            end: 0,
            bytes: 0,
            datagrams: 0,
            late: 0,
            located: 0,
            last_len: 0,
        }
    }

    /// Checks one datagram's payload; returns the stream offset it was found at. An empty
    /// datagram carries nothing to check and is only counted.
    pub fn datagram(&mut self, payload: &[u8]) -> Result<u64, Mismatch> {
        let offset = if self.pattern.verify(self.next, payload).is_ok() {
            self.next
        } else if let Some(o) = self
            .pattern
            .locate(payload)
            .or_else(|| self.step_to(payload))
        {
            self.located += 1;
            o
        } else {
            // Neither where it was expected nor anywhere else: report the first byte that
            // differs at the expected offset.
            return Err(self
                .pattern
                .verify(self.next, payload)
                .err()
                .unwrap_or(Mismatch {
                    offset: self.next,
                    expected: self.pattern.byte_at(self.next),
                    got: payload.first().copied().unwrap_or(0),
                }));
        };
        let len = payload.len() as u64;
        if offset < self.end && len > 0 {
            self.late += 1;
        }
        // Saturating: a datagram located at the very end of the u64 range (only a peer's
        // garbage can be) must not wrap the counters (found by fuzzing).
        if len > 0 {
            self.last_len = len;
        }
        self.next = offset.saturating_add(len);
        self.end = self.end.max(self.next);
        self.bytes += len;
        self.datagrams += 1;
        Ok(offset)
    }

    /// Where a datagram too short to locate by its content ([`Pattern::locate`]: under
    /// `Pattern::LOCATE_MIN` bytes) lies after a loss or a reordering: at a whole number of
    /// datagrams ahead of or behind where it was expected, as a sender of datagrams of one size
    /// puts them (`zcnet send --udp --size N`, its last one shorter): steps of its own length,
    /// else of the previous datagram's. The nearest such offset within [`STEP_SEARCH`]
    /// datagrams either way where it verifies; `None` if there is none (it is corrupted, or the
    /// loss was longer). The fewer its bytes, the likelier a corrupted one verifies somewhere
    /// (a 1-byte datagram matches 1 offset in 256): below 4 bytes a datagram after a loss is
    /// checked only weakly.
    fn step_to(&self, payload: &[u8]) -> Option<u64> {
        let len = payload.len() as u64;
        if len == 0 || payload.len() >= Pattern::LOCATE_MIN {
            return None;
        }
        let steps = [
            Some(len),
            Some(self.last_len).filter(|&l| l != 0 && l != len),
        ];
        steps.into_iter().flatten().find_map(|step| {
            (1..=STEP_SEARCH).find_map(|k| {
                let ahead = self.next.checked_add(k * step);
                let behind = self.next.checked_sub(k * step);
                [ahead, behind]
                    .into_iter()
                    .flatten()
                    .find(|&o| self.pattern.verify(o, payload).is_ok())
            })
        })
    }

    /// Payload bytes received and verified.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Datagrams received and verified.
    pub fn datagrams(&self) -> u64 {
        self.datagrams
    }

    /// The highest stream offset reached (the end of the furthest datagram).
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Bytes below [`DatagramCheck::end`] that never arrived (lost, or still on their way);
    /// duplicates make it an underestimate, never below 0.
    pub fn missing_bytes(&self) -> u64 {
        self.end.saturating_sub(self.bytes)
    }

    /// Datagrams that arrived below the highest offset already reached: reordered or
    /// duplicated.
    pub fn late(&self) -> u64 {
        self.late
    }

    /// Datagrams that were not where the previous one ended and were found by their content.
    pub fn located(&self) -> u64 {
        self.located
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn datagrams(p: Pattern, sizes: &[usize]) -> Vec<Vec<u8>> {
        let mut off = 0u64;
        sizes
            .iter()
            .map(|&n| {
                let mut b = vec![0u8; n];
                p.fill(off, &mut b);
                off += n as u64;
                b
            })
            .collect()
    }

    #[test]
    fn a_datagram_at_the_end_of_the_offset_range_does_not_overflow() {
        // Found by fuzzing (corpus/dgram/regress-overflow-at-u64-end): a datagram located just
        // below 2^64, then one expected where it ended and checked past 2^64, overflowed.
        let p = Pattern::new(3);
        let mut d = DatagramCheck::new(p);
        let at = u64::MAX - 20;
        let mut a = [0u8; 16];
        p.fill(at, &mut a);
        assert_eq!(d.datagram(&a).unwrap(), at);
        assert_eq!(d.end(), at + 16);
        // Expected at u64::MAX - 4, running past the end of the range: checked, refused.
        assert!(d.datagram(&[0u8; 40]).is_err());
        let mut b = [0u8; 40];
        p.fill(at + 16, &mut b); // wraps past 2^64: offsets are modulo 2^64
        assert_eq!(d.datagram(&b).unwrap(), at + 16);
        assert_eq!(d.end(), u64::MAX, "saturates");
    }

    #[test]
    fn in_order_datagrams_are_checked_where_they_follow() {
        let p = Pattern::new(3);
        // Small datagrams (under LOCATE_MIN) are fine as long as they come in order.
        let d = datagrams(p, &[1, 7, 1472, 1472, 500, 3]);
        let mut c = DatagramCheck::new(p);
        let mut want = 0;
        for x in &d {
            assert_eq!(c.datagram(x), Ok(want));
            want += x.len() as u64;
        }
        assert_eq!(
            (
                c.bytes(),
                c.datagrams(),
                c.missing_bytes(),
                c.late(),
                c.located()
            ),
            (want, 6, 0, 0, 0)
        );
    }

    #[test]
    fn a_corrupted_datagram_is_a_mismatch_at_its_expected_offset() {
        let p = Pattern::new(3);
        let mut d = datagrams(p, &[100, 100]);
        d[1][40] ^= 0x10;
        let mut c = DatagramCheck::new(p);
        c.datagram(&d[0]).unwrap();
        let m = c.datagram(&d[1]).unwrap_err();
        assert_eq!(m.offset, 140);
        assert_eq!(m.got, d[1][40]);
        // Nothing of the bad datagram was counted.
        assert_eq!((c.bytes(), c.datagrams()), (100, 1));
        // Zeros (a sender without --verify) are refused at once.
        let m = DatagramCheck::new(p).datagram(&[0u8; 64]).unwrap_err();
        assert_eq!(m.offset, 0);
    }

    #[test]
    fn empty_datagrams_count_but_carry_nothing() {
        let mut c = DatagramCheck::new(Pattern::new(1));
        assert_eq!(c.datagram(&[]), Ok(0));
        assert_eq!((c.bytes(), c.datagrams(), c.late()), (0, 1, 0));
    }

    proptest! {
        /// Datagrams of one size too short to be located by their content (under
        /// LOCATE_MIN bytes, `zcnet send --udp --size 8 --verify`) are placed after a loss or
        /// a reordering too, not read as corrupted; from 4 bytes, at their own offset (a
        /// nearer false match is a chance of 2^-32 per offset tried). A corrupted one is
        /// still a mismatch.
        #[test]
        fn short_datagrams_after_a_loss_are_placed_not_corrupted(
            seed in any::<u64>(),
            size in 1..Pattern::LOCATE_MIN,
            count in 2..80usize,
            keep in prop::collection::vec(any::<bool>(), 80),
            swaps in prop::collection::vec((0usize..80, 0usize..80), 0..4),
        ) {
            let p = Pattern::new(seed);
            let d = datagrams(p, &vec![size; count]);
            let mut order: Vec<usize> = (0..count).filter(|&i| keep[i] || i == 0).collect();
            for (a, b) in swaps {
                let n = order.len();
                order.swap(a % n, b % n);
            }
            let mut c = DatagramCheck::new(p);
            for &i in &order {
                let got = c.datagram(&d[i]);
                prop_assert!(got.is_ok(), "datagram {} of {} B: {:?}", i, size, got);
                if size >= 4 {
                    prop_assert_eq!(got, Ok((i * size) as u64));
                }
            }
            prop_assert_eq!(c.bytes(), (order.len() * size) as u64);
            if size >= 4 {
                let end = order.iter().map(|&i| (i + 1) * size).max().unwrap_or(0);
                prop_assert_eq!(c.missing_bytes(), (end - order.len() * size) as u64);
                // Corrupted after a loss: no offset near holds it.
                let mut bad = d[count - 1].clone();
                bad[size / 2] ^= 0x40;
                prop_assert!(DatagramCheck::new(p).datagram(&bad).is_err());
            }
            // A last datagram of another length after a loss, as `--bytes` leaves one: placed
            // too, a whole number of the others' lengths on.
            let mut tail = vec![0u8; size / 2 + 4];
            let tail_at = ((count + 3) * size) as u64;
            p.fill(tail_at, &mut tail);
            let got = c.datagram(&tail);
            prop_assert!(got.is_ok(), "a {} B tail: {:?}", tail.len(), got);
            if size >= 4 {
                prop_assert_eq!(got, Ok(tail_at));
            }
        }

        /// Any loss and any reordering of datagrams of at least LOCATE_MIN bytes is accepted
        /// with exact counts: what arrived, what is missing below the end, what came late.
        #[test]
        fn loss_and_reordering_are_counted_exactly(
            seed in any::<u64>(),
            sizes in prop::collection::vec(Pattern::LOCATE_MIN..1500usize, 1..60),
            keep in prop::collection::vec(any::<bool>(), 60),
            swaps in prop::collection::vec((0usize..60, 0usize..60), 0..10),
        ) {
            let p = Pattern::new(seed);
            let d = datagrams(p, &sizes);
            let mut order: Vec<usize> = (0..d.len()).filter(|&i| keep[i]).collect();
            for (a, b) in swaps {
                if !order.is_empty() {
                    let n = order.len();
                    order.swap(a % n, b % n);
                }
            }
            let mut c = DatagramCheck::new(p);
            let mut end = 0u64;
            let mut late = 0u64;
            for &i in &order {
                let off: u64 = sizes[..i].iter().map(|&s| s as u64).sum();
                prop_assert_eq!(c.datagram(&d[i]), Ok(off));
                if off < end {
                    late += 1;
                }
                end = end.max(off + sizes[i] as u64);
            }
            let bytes: u64 = order.iter().map(|&i| sizes[i] as u64).sum();
            prop_assert_eq!(c.bytes(), bytes);
            prop_assert_eq!(c.datagrams(), order.len() as u64);
            prop_assert_eq!(c.end(), end);
            prop_assert_eq!(c.missing_bytes(), end - bytes);
            prop_assert_eq!(c.late(), late);
        }
    }
}
