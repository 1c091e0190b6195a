//! ethtool bitsets (Documentation/networking/ethtool-netlink.rst, "Bit sets"): the compact
//! form (`ETHTOOL_A_BITSET_VALUE`/`_MASK`: arrays of u32 words) and the verbose form (a list
//! of bits with index, name and a value flag), with or without a mask (`_NOMASK`).

use crate::error::Result;
use crate::wire::{malformed, Attrs, MsgBuilder};

// ETHTOOL_A_BITSET_* (include/uapi/linux/ethtool_netlink_generated.h).
const NOMASK: u16 = 1;
const SIZE: u16 = 2;
const BITS: u16 = 3;
const VALUE: u16 = 4;
const MASK: u16 = 5;
// ETHTOOL_A_BITSET_BITS_BIT, ETHTOOL_A_BITSET_BIT_*.
const BITS_BIT: u16 = 1;
const BIT_INDEX: u16 = 1;
const BIT_NAME: u16 = 2;
const BIT_VALUE: u16 = 3;

/// Bitsets larger than this are refused as malformed (the largest the kernel sends, link
/// modes, has about 120 bits).
pub const MAX_BITS: u32 = 1 << 16;

/// A decoded bitset: values, an optional mask, and the bit names a verbose bitset carried.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Bitset {
    /// Number of bits.
    pub size: u32,
    /// Value words (bit `i` is bit `i % 32` of word `i / 32`).
    pub value: Vec<u32>,
    /// Mask words; `None` for a list (`NOMASK`) bitset.
    pub mask: Option<Vec<u32>>,
    /// `(index, name)` of the bits a verbose bitset named.
    pub names: Vec<(u32, String)>,
}

fn bit(words: &[u32], i: u32) -> bool {
    words
        .get((i / 32) as usize)
        .is_some_and(|w| w & (1 << (i % 32)) != 0)
}

fn set_bit(words: &mut [u32], i: u32) {
    if let Some(w) = words.get_mut((i / 32) as usize) {
        *w |= 1 << (i % 32);
    }
}

fn words_of(payload: &[u8], what: &str) -> Result<Vec<u32>> {
    if !payload.len().is_multiple_of(4) {
        return Err(malformed(format!(
            "bitset {what} of {} bytes is not whole u32 words",
            payload.len()
        )));
    }
    Ok(payload
        .chunks_exact(4)
        .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

struct VerboseBit {
    index: u32,
    name: Option<String>,
    value: bool,
}

fn parse_bits(payload: &[u8]) -> Result<Vec<VerboseBit>> {
    let mut out = Vec::new();
    for b in Attrs::new(payload) {
        let b = b?;
        if b.kind() != BITS_BIT {
            continue;
        }
        let (mut index, mut name, mut value) = (None, None, false);
        for x in b.nested() {
            let x = x?;
            match x.kind() {
                BIT_INDEX => index = Some(x.u32()?),
                BIT_NAME => name = Some(x.str()),
                BIT_VALUE => value = true,
                _ => {}
            }
        }
        let index = index.ok_or_else(|| malformed("bitset bit without an index"))?;
        out.push(VerboseBit { index, name, value });
    }
    Ok(out)
}

impl Bitset {
    /// Parses the payload of a bitset nest, compact or verbose.
    pub fn parse(payload: &[u8]) -> Result<Bitset> {
        let (mut nomask, mut size, mut bits, mut value, mut mask) = (false, None, None, None, None);
        for a in Attrs::new(payload) {
            let a = a?;
            match a.kind() {
                NOMASK => nomask = true,
                SIZE => size = Some(a.u32()?),
                BITS => bits = Some(parse_bits(a.payload())?),
                VALUE => value = Some(words_of(a.payload(), "value")?),
                MASK => mask = Some(words_of(a.payload(), "mask")?),
                _ => {}
            }
        }
        let max_index = bits
            .as_ref()
            .and_then(|b| b.iter().map(|b| b.index).max())
            .map(|m| m.saturating_add(1))
            .unwrap_or(0);
        let size = size.unwrap_or(max_index);
        if size > MAX_BITS {
            return Err(malformed(format!("bitset of {size} bits")));
        }
        if max_index > size {
            return Err(malformed(format!(
                "bitset bit {} outside its size {size}",
                max_index - 1
            )));
        }
        let nwords = size.div_ceil(32) as usize;
        if let Some(bits) = bits {
            let mut v = vec![0u32; nwords];
            let mut m = (!nomask).then(|| vec![0u32; nwords]);
            let mut names = Vec::new();
            for b in bits {
                if nomask || b.value {
                    set_bit(&mut v, b.index);
                }
                if let Some(m) = m.as_mut() {
                    set_bit(m, b.index);
                }
                if let Some(n) = b.name {
                    names.push((b.index, n));
                }
            }
            return Ok(Bitset {
                size,
                value: v,
                mask: m,
                names,
            });
        }
        let mut v = value.unwrap_or_default();
        v.resize(nwords, 0);
        let m = if nomask {
            None
        } else {
            let mut m = mask.unwrap_or_default();
            m.resize(nwords, 0);
            Some(m)
        };
        Ok(Bitset {
            size,
            value: v,
            mask: m,
            names: Vec::new(),
        })
    }

    /// Whether bit `i` is set.
    pub fn get(&self, i: u32) -> bool {
        bit(&self.value, i)
    }

    /// Whether bit `i` is in the mask (always true for a list bitset within its size).
    pub fn in_mask(&self, i: u32) -> bool {
        match &self.mask {
            Some(m) => bit(m, i),
            None => i < self.size,
        }
    }

    /// The indices of the set bits.
    pub fn set_bits(&self) -> Vec<u32> {
        (0..self.size).filter(|&i| self.get(i)).collect()
    }

    /// The name a verbose bitset gave bit `i`.
    pub fn name(&self, i: u32) -> Option<&str> {
        self.names
            .iter()
            .find(|(j, _)| *j == i)
            .map(|(_, n)| n.as_str())
    }

    /// The index of the bit named `name`, from a verbose bitset.
    pub fn index_of(&self, name: &str) -> Option<u32> {
        self.names.iter().find(|(_, n)| n == name).map(|(i, _)| *i)
    }
}

/// Writes a verbose bitset nest of type `kind` that changes only the named bits: each bit is
/// listed with its name, and the value flag when it should be on (bits not listed keep their
/// state: no `NOMASK`).
pub fn fill_named_bits(b: &mut MsgBuilder, kind: u16, bits: &[(&str, bool)]) {
    b.nest_begin(kind).nest_begin(BITS);
    for (name, on) in bits {
        b.nest_begin(BITS_BIT).put_str(BIT_NAME, name);
        if *on {
            b.put_flag(BIT_VALUE);
        }
        b.nest_end();
    }
    b.nest_end().nest_end();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nest_payload(f: impl Fn(&mut MsgBuilder)) -> Vec<u8> {
        let mut b = MsgBuilder::new(0, 0, 0);
        f(&mut b);
        b.finish().unwrap()[16..].to_vec()
    }

    #[zcnet_testkit::test]
    fn compact_with_and_without_mask() {
        let p = nest_payload(|b| {
            b.put_u32(SIZE, 40)
                .put_bytes(VALUE, &[0x05, 0, 0, 0, 0x80, 0, 0, 0])
                .put_bytes(MASK, &[0x07, 0, 0, 0, 0, 0, 0, 0]);
        });
        let s = Bitset::parse(&p).unwrap();
        assert_eq!(s.set_bits(), [0, 2, 39]);
        assert!(s.in_mask(1) && !s.in_mask(39));
        let p = nest_payload(|b| {
            b.put_flag(NOMASK)
                .put_u32(SIZE, 8)
                .put_bytes(VALUE, &[2, 0, 0, 0]);
        });
        let s = Bitset::parse(&p).unwrap();
        assert_eq!(s.mask, None);
        assert_eq!(s.set_bits(), [1]);
    }

    #[zcnet_testkit::test]
    fn verbose_list_and_masked() {
        let p = nest_payload(|b| {
            b.put_u32(SIZE, 64).nest_begin(BITS);
            for (i, n, v) in [(3, "a", true), (40, "b", false)] {
                b.nest_begin(BITS_BIT)
                    .put_u32(BIT_INDEX, i)
                    .put_str(BIT_NAME, n);
                if v {
                    b.put_flag(BIT_VALUE);
                }
                b.nest_end();
            }
            b.nest_end();
        });
        let s = Bitset::parse(&p).unwrap();
        assert_eq!(s.set_bits(), [3]);
        assert!(s.in_mask(40) && !s.in_mask(4));
        assert_eq!(s.index_of("b"), Some(40));
        assert_eq!(s.name(3), Some("a"));
    }

    #[zcnet_testkit::test]
    fn absurd_sizes_and_indices_are_malformed() {
        let p = nest_payload(|b| {
            b.put_u32(SIZE, u32::MAX);
        });
        assert!(Bitset::parse(&p).is_err());
        let p = nest_payload(|b| {
            b.put_u32(SIZE, 4)
                .nest_begin(BITS)
                .nest_begin(BITS_BIT)
                .put_u32(BIT_INDEX, 9)
                .nest_end()
                .nest_end();
        });
        assert!(Bitset::parse(&p).is_err());
    }
}
