//! AF_PACKET TPACKET_V3: the walk of a receive block's packets (`walk_block`) over arbitrary or
//! lightly damaged kernel blocks, and ring requests (`RingRequest`) from arbitrary numbers. A
//! walk yields packets in order, inside `blk_len`, at 8-byte aligned offsets past the block
//! descriptor, at most `num_pkts` of them and at most one error (then nothing); a request
//! that checks out puts every frame and block inside the ring.

use crate::input::Input;
use zcnet_core::tpacket::{
    walk_block, RingRequest, BLOCK_DESC_LEN, TPACKET3_HDR_LEN, TPACKET_V3, V3_ALIGNMENT,
};

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

/// A block as the kernel fills one (prb_fill_curr_block), with sizes from the input.
fn build(inp: &mut Input<'_>) -> Vec<u8> {
    let n = inp.index(9);
    let first = BLOCK_DESC_LEN + 8 * inp.index(3);
    let mut b = vec![0u8; first];
    let mut off = first;
    let mut starts = Vec::new();
    for _ in 0..n {
        let mac = TPACKET3_HDR_LEN + 2 + 8 * inp.index(4);
        let snap = inp.index(200);
        let next = (mac + snap).div_ceil(V3_ALIGNMENT) * V3_ALIGNMENT;
        b.resize(off + next, 0);
        put32(&mut b, off + 12, snap as u32);
        put32(&mut b, off + 16, (snap + inp.index(3)) as u32);
        b[off + 24..off + 26].copy_from_slice(&(mac as u16).to_ne_bytes());
        for x in &mut b[off + mac..off + mac + snap] {
            *x = 0xa5;
        }
        starts.push((off, next));
        off += next;
    }
    for (i, &(at, next)) in starts.iter().enumerate() {
        let last = i + 1 == starts.len();
        put32(&mut b, at, if last { 0 } else { next as u32 });
    }
    put32(&mut b, 0, TPACKET_V3);
    put32(&mut b, 8, 1); // TP_STATUS_USER
    put32(&mut b, 12, n as u32);
    put32(&mut b, 16, first as u32);
    put32(&mut b, 20, off as u32);
    // Slack after blk_len, then damage.
    b.resize(off + inp.index(64), 0x5a);
    for _ in 0..inp.index(4) {
        let at = inp.index(b.len().max(1));
        if let Some(x) = b.get_mut(at) {
            *x = inp.u8();
        }
    }
    b
}

fn walk(block: &[u8]) {
    let Ok(w) = walk_block(block) else {
        return;
    };
    let h = *w.header();
    assert_eq!(h.version, TPACKET_V3);
    let blk_len = h.blk_len as usize;
    assert!(blk_len <= block.len());
    let base = block.as_ptr() as usize;
    let (mut count, mut errors, mut prev) = (0u32, 0u32, None::<usize>);
    for p in w {
        assert_eq!(errors, 0, "a packet after an error");
        match p {
            Ok(p) => {
                count += 1;
                assert!(p.offset >= BLOCK_DESC_LEN && p.offset % V3_ALIGNMENT == 0);
                assert!(prev.is_none_or(|q| p.offset > q), "packets out of order");
                prev = Some(p.offset);
                let start = p.data.as_ptr() as usize - base;
                assert_eq!(start, p.offset + usize::from(p.header.mac));
                assert!(start + p.data.len() <= blk_len, "packet past blk_len");
                assert_eq!(p.data.len(), p.header.snaplen as usize);
                assert!(p.header.snaplen <= p.header.len);
            }
            Err(_) => errors += 1,
        }
    }
    assert!(count + errors <= h.num_pkts);
    assert!(
        errors == 1 || count == h.num_pkts,
        "stopped early without an error"
    );
}

fn request(inp: &mut Input<'_>) {
    let page = inp.pick(&[4096usize, 65536, 1, 0, 16384]);
    let small = |inp: &mut Input<'_>| -> u32 {
        match inp.u8() % 4 {
            0 => inp.u32(),
            1 => 1 << inp.index(24),
            2 => 16 * u32::from(inp.u16()),
            _ => u32::from(inp.u8()),
        }
    };
    let words: Vec<u32> = (0..7).map(|_| small(inp)).collect();
    let tx = inp.bool();
    let r = RingRequest {
        block_size: words[0],
        block_nr: words[1],
        frame_size: words[2],
        frame_nr: words[3],
        retire_blk_tov: if inp.bool() { 0 } else { words[4] },
        sizeof_priv: if inp.bool() { 0 } else { words[5] },
        feature_req_word: if inp.bool() { 0 } else { words[6] },
    };
    if r.check(page, tx).is_ok() {
        let len = r.ring_len().expect("a checked ring has a size");
        let per = r.frames_per_block();
        assert_eq!(
            u64::from(per) * u64::from(r.block_nr),
            u64::from(r.frame_nr)
        );
        for i in [0, r.frame_nr / 2, r.frame_nr - 1] {
            assert!(
                r.frame_offset(i) + r.frame_size as usize <= len,
                "frame past the ring"
            );
        }
        for b in [0, r.block_nr - 1] {
            assert!(r.block_offset(b) + r.block_size as usize <= len);
        }
        assert!(r.tx_capacity() < r.frame_size as usize);
        assert_eq!(
            r.to_words()[..4],
            [r.block_size, r.block_nr, r.frame_size, r.frame_nr]
        );
    }
    if let Ok(r) = RingRequest::rx_v3(words[0], words[1], words[4], page) {
        assert!(r.check(page, false).is_ok());
    }
    if let Ok(r) = RingRequest::tx_v3(words[0], words[2], words[3], page) {
        assert!(r.check(page, true).is_ok());
        assert!(r.frame_nr <= words[3]);
    }
}

pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let mode = inp.u8();
    if mode & 1 == 0 {
        walk(inp.rest());
        walk(data);
    } else {
        request(&mut inp);
        let b = build(&mut inp);
        walk(&b);
    }
}
