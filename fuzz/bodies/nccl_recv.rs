//! The NCCL plugin's receive side (zcnet-nccl's sans-IO `proto`; the crate's library name is
//! `nccl_net_zcnet`): chunk headers off the wire (`ChunkHeader::decode`, any 40 bytes, any
//! limits) and the matching of chunks to posted receives (`RecvMatch`) under arbitrary
//! headers, posts, landings and takes. After every step `RecvMatch::check()` holds;
//! a decoded header re-encodes to the same bytes and is within its limits; a chunk goes `Into`
//! a posted receive at its own offset; a receive completes once and its sizes are taken once.

use crate::input::Input;
use nccl_net_zcnet::proto::{ChunkHeader, Placement, RecvMatch, HEADER_LEN};
use std::collections::BTreeSet;

fn header(inp: &mut Input<'_>, next: u64) -> ChunkHeader {
    let total = match inp.u8() % 4 {
        0 => 0,
        1 => inp.u64(),
        _ => u64::from(inp.u16() % 300),
    };
    let offset = match inp.u8() % 3 {
        0 => inp.u64(),
        _ => inp.below(total.saturating_add(1).max(1)),
    };
    ChunkHeader {
        tag: i32::from(inp.u8() % 3),
        seq: match inp.u8() % 4 {
            0 => inp.u64(),
            _ => next + u64::from(inp.u8() % 4),
        },
        total,
        offset,
        len: match inp.u8() % 3 {
            0 => inp.u32(),
            _ => total.saturating_sub(offset).min(u64::from(inp.u8())) as u32,
        },
    }
}

pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let raw: [u8; HEADER_LEN] = inp.array();
    let (max_chunk, max_message) = (inp.u32(), inp.u64());
    if let Ok(h) = ChunkHeader::decode(&raw, max_chunk, max_message) {
        assert_eq!(h.encode(), raw, "a decoded header re-encodes differently");
        assert!(h.check(max_chunk, max_message).is_ok());
        assert!(h.len <= max_chunk && h.total <= max_message && h.end() <= h.total);
    }
    let mut m = RecvMatch::new(1 + inp.index(8), 1 + inp.index(8));
    let mut placed: Vec<ChunkHeader> = Vec::new();
    let mut ids = BTreeSet::new();
    let mut complete = BTreeSet::new();
    while !inp.is_empty() {
        match inp.u8() % 5 {
            0 => {
                let id = u64::from(inp.u8() % 8);
                let slots: Vec<(i32, u64)> = (0..inp.index(5))
                    .map(|_| (i32::from(inp.u8() % 3), u64::from(inp.u16() % 400)))
                    .collect();
                if m.post(id, &slots).is_ok() {
                    assert!(ids.insert(id), "receive id {id} posted twice");
                }
            }
            1 | 2 => {
                let h = header(&mut inp, m.next_unassigned());
                let enc = h.encode();
                let back = ChunkHeader::decode(&enc, u32::MAX, u64::MAX);
                assert_eq!(back.is_ok(), h.check(u32::MAX, u64::MAX).is_ok());
                if let Ok(Placement::Into { recv, offset, .. }) = m.place(&h) {
                    assert!(
                        ids.contains(&recv),
                        "a chunk placed into receive {recv}, not posted"
                    );
                    assert_eq!(offset, h.offset);
                    placed.push(h);
                }
            }
            3 => {
                let h = if !placed.is_empty() && !inp.one_in(4) {
                    placed.swap_remove(inp.index(placed.len()))
                } else {
                    header(&mut inp, m.next_unassigned())
                };
                if let Ok(done) = m.payload_done(&h) {
                    for id in done {
                        assert!(ids.contains(&id));
                        assert!(complete.insert(id), "receive {id} completed twice");
                    }
                }
            }
            _ => {
                let id = u64::from(inp.u8() % 8);
                let sizes = m.take_sizes(id);
                assert_eq!(
                    sizes.is_some(),
                    complete.remove(&id),
                    "sizes of receive {id}"
                );
                if sizes.is_some() {
                    ids.remove(&id);
                }
            }
        }
        if let Err(e) = m.check() {
            panic!("state broken: {e}");
        }
        assert_eq!(m.pending(), ids.len());
    }
}
