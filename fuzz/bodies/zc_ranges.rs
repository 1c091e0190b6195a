//! MSG_ZEROCOPY completion ranges (`ZcRanges`): arbitrary sends and arbitrary reported ranges
//! (in order, out of order, overlapping, duplicated, never sent, wrapping the 32-bit counter),
//! checked against a model: every send is completed at most once, with its own token and byte
//! count and the range's copied flag, in id order within a range; the fresh, duplicate and
//! unknown counts add up to the range's size and match the model; `outstanding` is exact.

use crate::input::Input;
use std::collections::BTreeMap;
use zcnet_core::zc_ranges::{Completed, ZcRanges};

/// How many of the ids `lo..lo + count` (wrapping) fall in `[from, from + 2^31)` (wrapping):
/// the ones at or past `next_id` as the kernel's counter goes, i.e. never sent.
fn ahead_of(lo: u32, count: u64, from: u32) -> u64 {
    let s = u64::from(lo.wrapping_sub(from));
    let e = s + count;
    let half = 1u64 << 31;
    let lap = 1u64 << 32;
    [0, lap]
        .iter()
        .map(|&l| e.min(l + half).saturating_sub(s.max(l)))
        .sum()
}

pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let first = match inp.u8() % 4 {
        0 => 0,
        1 => u32::MAX - u32::from(inp.u8()),
        2 => (1 << 31) - u32::from(inp.u8()),
        _ => inp.u32(),
    };
    let mut r: ZcRanges<u64> = ZcRanges::starting_at(first);
    // The model: outstanding ids (as offsets from `first`, which never wrap here) and bytes.
    let mut sent: BTreeMap<u64, u64> = BTreeMap::new();
    let mut pushed = 0u64;
    let mut done = vec![false; 0];
    let mut out: Vec<Completed<u64>> = Vec::new();
    while !inp.is_empty() {
        let op = inp.u8();
        if op.is_multiple_of(3) && pushed < 1024 {
            for _ in 0..=inp.index(8) {
                let bytes = u64::from(inp.u16()) + 1;
                let id = r.push(bytes, pushed);
                assert_eq!(id, first.wrapping_add(pushed as u32));
                sent.insert(pushed, bytes);
                done.push(false);
                pushed += 1;
            }
            assert_eq!(r.next_id(), first.wrapping_add(pushed as u32));
            continue;
        }
        // A range: near what was sent (the kernel's case), or anything.
        let (lo, hi) = if op % 3 == 1 {
            let lo = first.wrapping_add(inp.below(pushed + 4) as u32);
            (lo, lo.wrapping_add(u32::from(inp.u8() % 16)))
        } else {
            match inp.u8() % 4 {
                0 => (inp.u32(), inp.u32()),
                1 => {
                    let lo = first.wrapping_add(inp.u32());
                    (lo, lo.wrapping_sub(1 + u32::from(inp.u8()))) // nearly all 2^32 ids
                }
                2 => (
                    first.wrapping_sub(inp.u16().into()),
                    first.wrapping_add(inp.u16().into()),
                ),
                _ => (r.next_id(), r.next_id().wrapping_add(inp.u32())),
            }
        };
        let copied = op & 0x80 != 0;
        let count = u64::from(hi.wrapping_sub(lo)) + 1;
        // Expected: the outstanding sends whose id is in the range, in id order from lo (as
        // offsets from `first`: those in [start, start + count), wrapping at 2^32).
        let expect: Vec<u64> = {
            let start = u64::from(lo.wrapping_sub(first));
            let end = start + count;
            let lap = 1u64 << 32;
            let mut v: Vec<u64> = sent.range(start..end.min(lap)).map(|(k, _)| *k).collect();
            if end > lap {
                v.extend(sent.range(..end - lap).map(|(k, _)| *k));
            }
            v
        };
        out.clear();
        let o = r.complete(lo, hi, copied, &mut out);
        assert_eq!(
            o.fresh + o.duplicate + o.unknown,
            count,
            "ids lost or counted twice"
        );
        assert_eq!(o.fresh, expect.len() as u64);
        assert_eq!(out.len(), expect.len());
        let unknown = ahead_of(lo, count, r.next_id());
        assert_eq!(o.unknown, unknown, "never-sent ids miscounted");
        for (c, k) in out.iter().zip(&expect) {
            assert_eq!(c.token, *k, "wrong send completed, or out of order");
            assert!(!done[*k as usize], "send {k} completed twice");
            done[*k as usize] = true;
            assert_eq!(Some(c.bytes), sent.remove(k), "byte count not the send's");
            assert_eq!(c.copied, copied);
        }
        assert_eq!(r.outstanding(), sent.len());
    }
}
