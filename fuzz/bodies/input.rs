//! A cursor over the fuzzer's bytes that never fails: once the bytes run out, every read
//! returns zeros (so a body always terminates, and every input is a valid program).
//!
//! Shared by the cargo-fuzz targets (fuzz/fuzz_targets/*.rs) and the fuzz smoke test of the
//! main workspace (crates/zcnet-tools/tests/fuzz_smoke.rs), which both include this file and the
//! target bodies next to it with `#[path]`.
#![allow(dead_code)]

/// The bytes still to read.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    /// A cursor at the start of `data`.
    pub fn new(data: &'a [u8]) -> Input<'a> {
        Input { data }
    }

    /// Whether everything was read.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Bytes left.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// The next byte (0 at the end).
    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    /// The next `N` bytes, zero-padded at the end.
    pub fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0u8; N];
        let n = N.min(self.data.len());
        a[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        a
    }

    /// A little-endian `u16`.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }

    /// A little-endian `u32`.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }

    /// A little-endian `u64`.
    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.array())
    }

    /// A little-endian `i32`.
    pub fn i32(&mut self) -> i32 {
        i32::from_le_bytes(self.array())
    }

    /// Whether a byte is a multiple of `n` (one chance in `n`, for `n` dividing 256).
    pub fn one_in(&mut self, n: u8) -> bool {
        self.u8().is_multiple_of(n)
    }

    /// One bit of a byte.
    pub fn bool(&mut self) -> bool {
        self.u8() & 1 != 0
    }

    /// A number below `n` (`n > 0`), from one byte when `n <= 256`, else four.
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0);
        if n <= 256 {
            u64::from(self.u8()) % n
        } else {
            u64::from(self.u32()) % n
        }
    }

    /// `below` as a `usize` index.
    pub fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    /// One of `choices`, picked by a byte.
    pub fn pick<T: Copy>(&mut self, choices: &[T]) -> T {
        choices[self.index(choices.len())]
    }

    /// Up to `n` bytes.
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.data.len());
        let (now, rest) = self.data.split_at(n);
        self.data = rest;
        now
    }

    /// A length byte (below `max + 1`), then up to that many bytes.
    pub fn small_bytes(&mut self, max: usize) -> &'a [u8] {
        let n = self.index(max + 1);
        self.bytes(n)
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }
}

/// A small xorshift generator for bodies that need more numbers than the input gives.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    pub fn next(&mut self) -> u64 {
        let mut s = self.0 | 1;
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        self.0 = s;
        s
    }
}
