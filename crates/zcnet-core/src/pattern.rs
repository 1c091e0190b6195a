//! A seeded, position-dependent byte pattern for payload verification.
//!
//! Like the kernel selftests (msg_zerocopy.c, ncdevmem.c), data is validated against a pattern
//! both ends can compute: byte `i` of the stream is byte `i % 8` (little-endian) of
//! `splitmix64(seed ^ (i / 8))`. Any reordering, loss, duplication or corruption of a stream
//! shows up at the first wrong offset, wherever the reads are cut.

/// The pattern for one seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pattern {
    seed: u64,
}

/// The first byte that did not match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mismatch {
    /// Offset in the stream.
    pub offset: u64,
    /// What the pattern says.
    pub expected: u8,
    /// What was received.
    pub got: u8,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "payload mismatch at byte {}: expected {:#04x}, got {:#04x}",
            self.offset, self.expected, self.got
        )
    }
}

const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;
const MIX1: u64 = 0xBF58_476D_1CE4_E5B9;
const MIX2: u64 = 0x94D0_49BB_1331_11EB;

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(GAMMA);
    z = (z ^ (z >> 30)).wrapping_mul(MIX1);
    z = (z ^ (z >> 27)).wrapping_mul(MIX2);
    z ^ (z >> 31)
}

/// The inverse of an odd `m` modulo 2^64, by Newton's iteration `x ← x(2 − mx)`: an odd `m`
/// is its own inverse modulo 8 (3 correct bits), and each step doubles the correct bits
/// (3 → 6 → 12 → 24 → 48 → 96).
const fn inverse_mod_2_64(m: u64) -> u64 {
    let mut x = m;
    let mut i = 0;
    while i < 5 {
        x = x.wrapping_mul(2u64.wrapping_sub(m.wrapping_mul(x)));
        i += 1;
    }
    x
}

/// Undoes `y = x ^ (x >> s)`: `x = y ^ (y >> s) ^ (y >> 2s) ^ …`.
fn unxorshift(y: u64, s: u32) -> u64 {
    let mut x = y;
    let mut k = s;
    while k < 64 {
        x ^= y >> k;
        k += s;
    }
    x
}

/// The inverse of [`splitmix64`]: every step of it is a bijection of u64 (an addition, a
/// multiplication by an odd constant, a right xorshift), undone in reverse order.
fn unsplitmix64(mut z: u64) -> u64 {
    const INV1: u64 = inverse_mod_2_64(MIX1);
    const INV2: u64 = inverse_mod_2_64(MIX2);
    z = unxorshift(z, 31).wrapping_mul(INV2);
    z = unxorshift(z, 27).wrapping_mul(INV1);
    unxorshift(z, 30).wrapping_sub(GAMMA)
}

impl Pattern {
    /// The pattern for `seed`.
    pub fn new(seed: u64) -> Self {
        Pattern { seed }
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    fn word(&self, w: u64) -> [u8; 8] {
        splitmix64(self.seed ^ w).to_le_bytes()
    }

    /// Byte at stream offset `offset`.
    pub fn byte_at(&self, offset: u64) -> u8 {
        self.word(offset / 8)[(offset % 8) as usize]
    }

    /// Fills `buf` with the pattern starting at stream offset `offset`.
    pub fn fill(&self, offset: u64, buf: &mut [u8]) {
        let mut pos = offset;
        let mut rest = buf;
        while !rest.is_empty() {
            let w = self.word(pos / 8);
            let start = (pos % 8) as usize;
            let n = (8 - start).min(rest.len());
            let (head, tail) = rest.split_at_mut(n);
            head.copy_from_slice(&w[start..start + n]);
            rest = tail;
            // Offsets are taken modulo 2^64 (a stream never gets there; a peer's datagram
            // located near the end of the range may run past it).
            pos = pos.wrapping_add(n as u64);
        }
    }

    /// Bytes a buffer needs for [`Pattern::locate`] to find it anywhere: a whole 8-byte word
    /// of the pattern starts within its first 8 bytes.
    pub(crate) const LOCATE_MIN: usize = 15;

    /// The stream offset at which `buf` is the pattern, found from its content: a datagram
    /// that carries the pattern at its own offset can be checked wherever it lands, after a
    /// lost or reordered one. Each 8-byte word is `splitmix64(seed ^ index)` and splitmix64
    /// is invertible, so the word that starts at `buf[a..]` names its index; the offset this
    /// gives for each of the 8 possible alignments is tried, and one is returned only if
    /// the whole of `buf` verifies there. `None` for a buffer shorter than
    /// `Pattern::LOCATE_MIN` or one that is the pattern nowhere (corrupted, or not the
    /// pattern at all).
    pub fn locate(&self, buf: &[u8]) -> Option<u64> {
        if buf.len() < Self::LOCATE_MIN {
            return None;
        }
        (0..8usize).find_map(|a| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&buf[a..a + 8]);
            let index = unsplitmix64(u64::from_le_bytes(w)) ^ self.seed;
            let offset = index.checked_mul(8)?.checked_sub(a as u64)?;
            self.verify(offset, buf).is_ok().then_some(offset)
        })
    }

    /// Checks that `buf` is the pattern at stream offset `offset`.
    pub fn verify(&self, offset: u64, buf: &[u8]) -> Result<(), Mismatch> {
        let mut pos = offset;
        let mut rest = buf;
        while !rest.is_empty() {
            let w = self.word(pos / 8);
            let start = (pos % 8) as usize;
            let n = (8 - start).min(rest.len());
            if rest[..n] != w[start..start + n] {
                let i = (0..n).find(|&i| rest[i] != w[start + i]).unwrap_or(0);
                return Err(Mismatch {
                    offset: pos.wrapping_add(i as u64),
                    expected: w[start + i],
                    got: rest[i],
                });
            }
            rest = &rest[n..];
            // Offsets are taken modulo 2^64 (a stream never gets there; a peer's datagram
            // located near the end of the range may run past it).
            pos = pos.wrapping_add(n as u64);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn fill_then_verify_any_cut(seed in any::<u64>(), start in 0u64..1_000_000, len in 0usize..3000, cut in 0usize..3000) {
            let p = Pattern::new(seed);
            let mut buf = vec![0u8; len];
            p.fill(start, &mut buf);
            let cut = cut.min(len);
            prop_assert!(p.verify(start, &buf[..cut]).is_ok());
            prop_assert!(p.verify(start + cut as u64, &buf[cut..]).is_ok());
            for (i, b) in buf.iter().enumerate().take(16) {
                prop_assert_eq!(*b, p.byte_at(start + i as u64));
            }
        }

        #[test]
        fn corruption_is_found_at_its_offset(seed in any::<u64>(), len in 1usize..2000, at in 0usize..2000, flip in 1u8..=255) {
            let p = Pattern::new(seed);
            let mut buf = vec![0u8; len];
            p.fill(17, &mut buf);
            let at = at % len;
            buf[at] ^= flip;
            let m = p.verify(17, &buf).unwrap_err();
            prop_assert_eq!(m.offset, 17 + at as u64);
            prop_assert_eq!(m.got, buf[at]);
        }
    }

    #[test]
    fn unsplitmix_inverts_splitmix() {
        for z in [0u64, 1, 7, u64::MAX, GAMMA, 0x0123_4567_89ab_cdef] {
            assert_eq!(unsplitmix64(splitmix64(z)), z, "{z:#x}");
        }
        assert_eq!(MIX1.wrapping_mul(inverse_mod_2_64(MIX1)), 1);
        assert_eq!(MIX2.wrapping_mul(inverse_mod_2_64(MIX2)), 1);
    }

    proptest! {
        #[test]
        fn locate_finds_any_offset(seed in any::<u64>(), offset in 0u64..(1 << 50), len in Pattern::LOCATE_MIN..3000) {
            let p = Pattern::new(seed);
            let mut buf = vec![0u8; len];
            p.fill(offset, &mut buf);
            prop_assert_eq!(p.locate(&buf), Some(offset));
            prop_assert_eq!(Pattern::new(seed ^ 1).locate(&buf), None);
        }

        #[test]
        fn locate_refuses_a_corrupted_buffer(seed in any::<u64>(), offset in 0u64..(1 << 40),
                                             len in Pattern::LOCATE_MIN..600, at in any::<usize>(), flip in 1u8..=255) {
            let p = Pattern::new(seed);
            let mut buf = vec![0u8; len];
            p.fill(offset, &mut buf);
            buf[at % len] ^= flip;
            prop_assert_eq!(p.locate(&buf), None);
        }

        #[test]
        fn short_or_foreign_buffers_are_not_located(seed in any::<u64>(), buf in prop::collection::vec(any::<u8>(), 0..64)) {
            let p = Pattern::new(seed);
            if buf.len() < Pattern::LOCATE_MIN {
                prop_assert_eq!(p.locate(&buf), None);
            } else if let Some(o) = p.locate(&buf) {
                // Random bytes are the pattern somewhere only if they verify there.
                prop_assert!(p.verify(o, &buf).is_ok());
            }
        }
    }

    #[test]
    fn zeros_are_the_pattern_nowhere() {
        assert_eq!(Pattern::new(1).locate(&[0u8; 1472]), None);
    }

    #[test]
    fn seeds_differ() {
        let mut a = [0u8; 64];
        let mut b = [0u8; 64];
        Pattern::new(1).fill(0, &mut a);
        Pattern::new(2).fill(0, &mut b);
        assert_ne!(a, b);
        assert!(Pattern::new(2).verify(0, &a).is_err());
    }
}
