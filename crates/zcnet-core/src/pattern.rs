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

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
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
            pos += n as u64;
        }
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
                    offset: pos + i as u64,
                    expected: w[start + i],
                    got: rest[i],
                });
            }
            rest = &rest[n..];
            pos += n as u64;
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
    fn seeds_differ() {
        let mut a = [0u8; 64];
        let mut b = [0u8; 64];
        Pattern::new(1).fill(0, &mut a);
        Pattern::new(2).fill(0, &mut b);
        assert_ne!(a, b);
        assert!(Pattern::new(2).verify(0, &a).is_err());
    }
}
