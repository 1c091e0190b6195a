//! Blocks laid out the way the kernel lays them out (af_packet.c `tpacket_rcv` for a SOCK_RAW
//! socket, `prb_fill_curr_block`, `prb_close_block`), then walked; and blocks it could never
//! write — truncated, with offsets past the end, random bytes — which must be errors, never
//! panics or reads out of range.

use super::*;
use proptest::prelude::*;

const PAGE: usize = 4096;

/// A closed V3 block holding `packets`, as the kernel fills one for a SOCK_RAW socket on an
/// Ethernet device (link header 14 bytes): each packet at `macoff` after its header, the
/// network header on a 16-byte boundary, entries 8-aligned, the last `tp_next_offset` 0.
fn kernel_block(block_size: usize, packets: &[&[u8]], seq: u64, status: u32) -> Vec<u8> {
    let mut b = vec![0u8; block_size];
    let maclen = 14usize;
    let netoff = tpacket_align(TPACKET3_HDRLEN + maclen.max(16));
    let macoff = netoff - maclen;
    let first = align8(BLOCK_DESC_LEN);
    let mut off = first;
    let mut prev = off;
    for p in packets {
        let total = align8(macoff + p.len());
        assert!(off + total < block_size, "test block too small");
        let h = &mut b[off..off + TPACKET3_HDR_LEN];
        h[0..4].copy_from_slice(&(total as u32).to_ne_bytes()); // tp_next_offset
        h[4..8].copy_from_slice(&7u32.to_ne_bytes()); // tp_sec
        h[8..12].copy_from_slice(&9u32.to_ne_bytes()); // tp_nsec
        h[12..16].copy_from_slice(&(p.len() as u32).to_ne_bytes()); // tp_snaplen
        h[16..20].copy_from_slice(&(p.len() as u32).to_ne_bytes()); // tp_len
        h[20..24].copy_from_slice(&TP_STATUS_CSUM_VALID.to_ne_bytes()); // tp_status
        h[24..26].copy_from_slice(&(macoff as u16).to_ne_bytes()); // tp_mac
        h[26..28].copy_from_slice(&(netoff as u16).to_ne_bytes()); // tp_net
        b[off + macoff..off + macoff + p.len()].copy_from_slice(p);
        prev = off;
        off += total;
    }
    if !packets.is_empty() {
        b[prev..prev + 4].fill(0); // prb_close_block: last_pkt->tp_next_offset = 0
    }
    b[0..4].copy_from_slice(&TPACKET_V3.to_ne_bytes());
    b[4..8].copy_from_slice(&(BLOCK_DESC_LEN as u32).to_ne_bytes()); // offset_to_priv
    b[8..12].copy_from_slice(&status.to_ne_bytes());
    b[12..16].copy_from_slice(&(packets.len() as u32).to_ne_bytes());
    b[16..20].copy_from_slice(&(first as u32).to_ne_bytes());
    b[20..24].copy_from_slice(&(off as u32).to_ne_bytes()); // blk_len
    b[24..32].copy_from_slice(&seq.to_ne_bytes());
    b
}

fn frame(n: usize, fill: u8) -> Vec<u8> {
    (0..n).map(|i| fill.wrapping_add(i as u8)).collect()
}

#[test]
fn constants_are_the_uapi_ones() {
    assert_eq!(TPACKET3_HDRLEN, 68);
    assert_eq!(TX_DATA_OFFSET, 48);
    assert_eq!(tpacket_align(TPACKET3_HDR_LEN), 48);
    assert_eq!(tpacket_align(1), 16);
    assert_eq!(tpacket_align(32), 32);
    assert_eq!(BLOCK_STATUS_OFFSET, 8);
    assert_eq!(TX_STATUS_OFFSET, 20);
}

#[test]
fn walks_every_packet_of_a_kernel_block() {
    let frames: Vec<Vec<u8>> = [60usize, 64, 512, 1500, 61, 1514]
        .iter()
        .enumerate()
        .map(|(i, &n)| frame(n, i as u8))
        .collect();
    let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    let block = kernel_block(1 << 16, &refs, 5, TP_STATUS_USER | TP_STATUS_BLK_TMO);
    let walk = walk_block(&block).unwrap();
    let h = *walk.header();
    assert!(h.is_user() && h.timed_out() && !h.is_losing());
    assert_eq!((h.num_pkts, h.seq_num), (6, 5));
    let got: Vec<Packet<'_>> = walk.map(Result::unwrap).collect();
    assert_eq!(got.len(), 6);
    for (p, f) in got.iter().zip(&frames) {
        assert_eq!(p.data, f.as_slice());
        assert_eq!(p.header.len as usize, f.len());
        assert!(!p.header.truncated());
        assert_eq!(p.offset % V3_ALIGNMENT, 0);
        assert_eq!(usize::from(p.header.net) % TPACKET_ALIGNMENT, 0);
        assert_eq!(p.header.status, TP_STATUS_CSUM_VALID);
    }
    assert_eq!(got[5].header.next_offset, 0);
}

#[test]
fn an_empty_block_has_no_packets() {
    let block = kernel_block(PAGE, &[], 1, TP_STATUS_USER | TP_STATUS_BLK_TMO);
    assert_eq!(walk_block(&block).unwrap().count(), 0);
}

#[test]
fn a_full_block_of_minimum_frames() {
    // As many 60-byte frames as a 4 KiB block takes.
    let f = frame(60, 1);
    let per = (PAGE - 48) / align8(82 + 60);
    let refs: Vec<&[u8]> = (0..per - 1).map(|_| f.as_slice()).collect();
    let block = kernel_block(PAGE, &refs, 2, TP_STATUS_USER);
    assert_eq!(
        walk_block(&block).unwrap().map(Result::unwrap).count(),
        per - 1
    );
}

#[test]
fn bad_descriptors_are_errors() {
    let f = frame(100, 3);
    let good = kernel_block(PAGE, &[&f, &f], 1, TP_STATUS_USER);
    assert!(matches!(
        walk_block(&good[..20]),
        Err(TpacketError::ShortBlock { need: 48, have: 20 })
    ));
    let mut b = good.clone();
    b[0..4].copy_from_slice(&1u32.to_ne_bytes());
    assert_eq!(walk_block(&b).unwrap_err(), TpacketError::BadVersion(1));
    let mut b = good.clone();
    b[20..24].copy_from_slice(&(PAGE as u32 + 8).to_ne_bytes());
    assert!(matches!(
        walk_block(&b),
        Err(TpacketError::ShortBlock { .. })
    ));
    let mut b = good.clone();
    b[16..20].copy_from_slice(&8u32.to_ne_bytes());
    assert!(matches!(walk_block(&b), Err(TpacketError::BadBlock(_))));
    let mut b = good.clone();
    b[16..20].copy_from_slice(&52u32.to_ne_bytes());
    assert!(matches!(walk_block(&b), Err(TpacketError::BadBlock(_))));
    // A truncated mapping: blk_len says more than there is.
    assert!(matches!(
        walk_block(&good[..200]),
        Err(TpacketError::ShortBlock { .. })
    ));
}

#[test]
fn bad_packets_are_errors_and_end_the_walk() {
    let f = frame(100, 3);
    let good = kernel_block(PAGE, &[&f, &f, &f], 1, TP_STATUS_USER);
    let first = 48;
    // num_pkts larger than what is there: the walk runs into the end of blk_len.
    let mut b = good.clone();
    b[12..16].copy_from_slice(&4u32.to_ne_bytes());
    let r: Vec<_> = walk_block(&b).unwrap().collect();
    assert_eq!(r.len(), 3, "{r:?}");
    assert!(r[2].is_err());
    // A next offset that is not aligned, inside the packet, or past the end.
    for (bad, what) in [(5u32, "aligned"), (8, "inside"), (PAGE as u32, "past")] {
        let mut b = good.clone();
        b[first..first + 4].copy_from_slice(&bad.to_ne_bytes());
        let r: Vec<_> = walk_block(&b).unwrap().collect();
        assert_eq!(r.len(), 1, "{what}");
        let Err(TpacketError::BadPacket { index: 0, what: w }) = &r[0] else {
            panic!("{what}: {r:?}")
        };
        assert!(w.contains(what), "{w}");
    }
    // Snaplen past the block, mac inside the header, snaplen > len.
    let mut b = good.clone();
    b[first + 12..first + 16].copy_from_slice(&5000u32.to_ne_bytes());
    b[first + 16..first + 20].copy_from_slice(&5000u32.to_ne_bytes());
    assert!(walk_block(&b).unwrap().next().unwrap().is_err());
    let mut b = good.clone();
    b[first + 24..first + 26].copy_from_slice(&10u16.to_ne_bytes());
    assert!(walk_block(&b).unwrap().next().unwrap().is_err());
    let mut b = good.clone();
    b[first + 16..first + 20].copy_from_slice(&99u32.to_ne_bytes());
    assert!(walk_block(&b).unwrap().next().unwrap().is_err());
    // Truncated capture (snaplen < len) is fine and reported.
    let mut b = good;
    b[first + 16..first + 20].copy_from_slice(&200u32.to_ne_bytes());
    let p = walk_block(&b).unwrap().next().unwrap().unwrap();
    assert!(p.header.truncated());
    assert_eq!(p.data.len(), 100);
}

#[test]
fn ring_requests_follow_packet_set_ring() {
    let r = RingRequest::rx_v3(1 << 18, 32, 2, PAGE).unwrap();
    assert_eq!((r.frame_size, r.frame_nr), (2048, 128 * 32));
    assert_eq!(r.ring_len(), Some(8 << 20));
    assert_eq!(r.block_offset(3), 3 << 18);
    assert_eq!(r.to_words(), [1 << 18, 32, 2048, 4096, 2, 0, 0]);
    assert!(
        RingRequest::rx_v3(1000, 4, 0, PAGE).is_err(),
        "not page multiple"
    );
    assert!(
        RingRequest::rx_v3(PAGE as u32, 0, 0, PAGE).is_err(),
        "no blocks"
    );
    assert!(RingRequest::rx_v3(0, 4, 0, PAGE).is_err());

    let t = RingRequest::tx_v3(1 << 16, 2048, 1000, PAGE).unwrap();
    assert_eq!(
        (t.block_nr, t.frame_nr),
        (31, 992),
        "rounded down to whole blocks"
    );
    assert_eq!(t.tx_capacity(), 2000);
    assert_eq!(t.frame_offset(0), 0);
    assert_eq!(t.frame_offset(31), 31 * 2048);
    assert_eq!(t.frame_offset(32), 1 << 16);
    // Frames that do not divide the block leave a gap at its end.
    let t = RingRequest::tx_v3(PAGE as u32, 1600, 10, PAGE).unwrap();
    assert_eq!((t.frames_per_block(), t.frame_nr), (2, 10));
    assert_eq!(t.frame_offset(2), PAGE);
    assert!(
        RingRequest::tx_v3(PAGE as u32, 64, 8, PAGE).is_err(),
        "< TPACKET3_HDRLEN"
    );
    assert!(
        RingRequest::tx_v3(PAGE as u32, 2050, 8, PAGE).is_err(),
        "not 16-aligned"
    );
    assert!(
        RingRequest::tx_v3(PAGE as u32, 8192, 8, PAGE).is_err(),
        "frame > block"
    );
    let mut bad = t;
    bad.retire_blk_tov = 1;
    assert!(bad.check(PAGE, true).is_err());
    bad.frame_nr += 1;
    assert!(bad.check(PAGE, false).is_err());
}

proptest! {
    /// Whatever bytes a block holds, walking it ends (at most num_pkts steps), never panics,
    /// and every packet it yields lies inside blk_len.
    #[test]
    fn random_blocks_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        version_ok in any::<bool>(),
        first in 0u32..700,
        blk_len in 0u32..700,
        n in 0u32..50,
    ) {
        let mut b = bytes;
        if b.len() >= 24 {
            if version_ok {
                b[0..4].copy_from_slice(&TPACKET_V3.to_ne_bytes());
            }
            b[12..16].copy_from_slice(&n.to_ne_bytes());
            b[16..20].copy_from_slice(&first.to_ne_bytes());
            b[20..24].copy_from_slice(&blk_len.to_ne_bytes());
        }
        if let Ok(w) = walk_block(&b) {
            let len = w.header().blk_len as usize;
            let mut count = 0;
            for p in w {
                count += 1;
                prop_assert!(count <= n);
                if let Ok(p) = p {
                    prop_assert!(p.offset + TPACKET3_HDR_LEN <= len);
                }
            }
        }
    }

    /// Any list of frames laid out by the kernel's rules walks back to the same frames.
    #[test]
    fn kernel_blocks_round_trip(sizes in proptest::collection::vec(14usize..1600, 0..20)) {
        let frames: Vec<Vec<u8>> =
            sizes.iter().enumerate().map(|(i, &n)| frame(n, i as u8)).collect();
        let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        let block = kernel_block(1 << 16, &refs, 1, TP_STATUS_USER);
        let got: Vec<Vec<u8>> =
            walk_block(&block).unwrap().map(|p| p.unwrap().data.to_vec()).collect();
        prop_assert_eq!(got, frames);
    }
}
