//! Fixed scenarios: the edge cases by name, and every refusal with its message.

use super::*;

#[zcnet_testkit::test]
fn zero_byte_messages_are_one_empty_chunk() {
    let mut tx = SendSched::new(4, 8);
    assert_eq!(
        (tx.post(10, 1, 0), tx.post(11, 2, 5), tx.post(12, 3, 0)),
        (Ok(0), Ok(1), Ok(2))
    );
    let c: Vec<SendChunk> = std::iter::from_fn(|| tx.next_chunk()).take(10).collect();
    let got: Vec<_> = c
        .iter()
        .map(|c| (c.id, c.header.seq, c.header.offset, c.header.len))
        .collect();
    assert_eq!(
        got,
        [(10, 0, 0, 0), (11, 1, 0, 4), (11, 1, 4, 1), (12, 2, 0, 0)]
    );
    assert_eq!(
        tx.chunk_done(&c[3]),
        Ok(Some(12)),
        "the empty chunk completes its message"
    );
    assert_eq!(tx.chunk_done(&c[1]), Ok(None));
    assert_eq!(
        (tx.outstanding(), tx.is_complete(12), tx.is_complete(11)),
        (2, true, false)
    );
    let mut rx = RecvMatch::new(32, 8);
    rx.post(7, &[(1, 0)]).unwrap();
    rx.post(8, &[(2, 8), (3, 16)]).unwrap();
    assert_eq!(land(&mut rx, c[0].header), [7]);
    assert_eq!(rx.take_sizes(7), Some(vec![0]));
    // Message 2 is not assigned before message 1 is announced.
    assert_eq!(rx.place(&c[3].header), Ok(Placement::Wait));
    assert_eq!(land(&mut rx, c[2].header), [] as [u64; 0]);
    assert_eq!(
        land(&mut rx, c[3].header),
        [] as [u64; 0],
        "message 1 is not in yet"
    );
    assert_eq!(land(&mut rx, c[1].header), [8]);
    assert_eq!(rx.take_sizes(8), Some(vec![5, 0]));
    assert_eq!((rx.pending(), rx.tracked()), (0, 0));
}

/// The buffer may be larger than the message; the chunks of one message land in any order.
#[zcnet_testkit::test]
fn receive_larger_than_send_reports_the_message_size() {
    let mut rx = RecvMatch::new(32, 8);
    rx.post(3, &[(0, 100)]).unwrap();
    let c = |off, len| hdr(0, 0, 10, off, len);
    assert_eq!(rx.place(&c(8, 2)), into(3, 0, 8));
    assert_eq!(rx.place(&c(0, 4)), into(3, 0, 0));
    assert_eq!(rx.take_sizes(3), None, "not complete");
    assert_eq!(rx.payload_done(&c(8, 2)), Ok(vec![]));
    assert_eq!(land(&mut rx, c(4, 4)), [] as [u64; 0]);
    assert_eq!(rx.payload_done(&c(0, 4)), Ok(vec![3]));
    assert_eq!(rx.take_sizes(3), Some(vec![10]));
    assert_eq!(rx.take_sizes(3), None, "forgotten");
}

/// Tags choose the buffer within the first receive: the first unassigned one with the tag.
/// A receive completes only when every buffer has its whole message; the next receive takes
/// messages as soon as the first is wholly assigned.
#[zcnet_testkit::test]
fn grouped_receive_matches_by_tag_whatever_the_order() {
    let mut rx = RecvMatch::new(32, 8);
    rx.post(7, &[(1, 10), (2, 10), (3, 10), (2, 20)]).unwrap();
    rx.post(9, &[(2, 4)]).unwrap();
    let m = |seq, tag, total| hdr(tag, seq, total, 0, total as u32);
    assert_eq!(rx.place(&m(0, 3, 5)), into(7, 2, 0));
    assert_eq!(rx.place(&m(1, 2, 6)), into(7, 1, 0));
    assert_eq!(
        rx.place(&m(2, 2, 15)),
        into(7, 3, 0),
        "the second buffer with tag 2"
    );
    assert_eq!(
        rx.place(&m(4, 2, 4)),
        Ok(Placement::Wait),
        "message 3 not announced"
    );
    assert_eq!(rx.place(&m(3, 1, 1)), into(7, 0, 0));
    assert_eq!(rx.next_unassigned(), 5);
    assert_eq!(rx.place(&m(4, 2, 4)), into(9, 0, 0));
    assert_eq!(
        land(&mut rx, m(4, 2, 4)),
        [9],
        "receive 9 completes before 7"
    );
    for seq in [0, 1, 3] {
        let h = [m(0, 3, 5), m(1, 2, 6), m(2, 2, 15), m(3, 1, 1)][seq as usize];
        assert_eq!(
            rx.payload_done(&h),
            Ok(vec![]),
            "{seq}: one buffer still empty"
        );
        assert_eq!(rx.take_sizes(7), None);
    }
    assert_eq!(rx.payload_done(&m(2, 2, 15)), Ok(vec![7]));
    assert_eq!(rx.take_sizes(7), Some(vec![1, 6, 5, 15]));
    assert_eq!(rx.take_sizes(9), Some(vec![4]));
    rx.check().unwrap();
}

#[zcnet_testkit::test]
fn message_larger_than_its_buffer_is_refused() {
    let mut rx = RecvMatch::new(32, 8);
    rx.post(1, &[(5, 9)]).unwrap();
    let r = rx.place(&hdr(5, 0, 10, 0, 4));
    let e = RecvError::TooLarge {
        seq: 0,
        total: 10,
        recv: 1,
        slot: 0,
        cap: 9,
    };
    assert_eq!(r, Err(e));
    assert_eq!(
        text(r),
        "message 0 of 10 bytes does not fit buffer 0 (9 bytes) of receive 1"
    );
    // Announced before the receive: the post is fine, the next place() reports it.
    let mut rx = RecvMatch::new(32, 8);
    assert_eq!(rx.place(&hdr(5, 0, 10, 4, 4)), Ok(Placement::Wait));
    assert_eq!(rx.post(1, &[(5, 9)]), Ok(()));
    assert_eq!(rx.place(&hdr(5, 0, 10, 4, 4)), Err(e));
    assert_eq!(rx.next_unassigned(), 0);
}

/// No out-of-order matching across receives: a tag that only a later receive has is an error.
#[zcnet_testkit::test]
fn tag_matching_no_buffer_of_the_first_receive_is_refused() {
    let mut rx = RecvMatch::new(32, 8);
    rx.post(1, &[(1, 8), (1, 8)]).unwrap();
    rx.post(2, &[(2, 8)]).unwrap();
    assert_eq!(rx.place(&hdr(1, 0, 8, 0, 8)), into(1, 0, 0));
    let r = rx.place(&hdr(2, 1, 8, 0, 8));
    assert_eq!(
        r,
        Err(RecvError::NoSlot {
            seq: 1,
            tag: 2,
            recv: 1
        })
    );
    assert_eq!(
        text(r),
        "message 1 has tag 2, which matches no unassigned buffer of receive 1"
    );
    assert_eq!(rx.place(&hdr(2, 1, 8, 0, 8)), r, "and again");
    assert_eq!(rx.place(&hdr(1, 0, 8, 0, 8)), r, "stops every place()");
}

#[zcnet_testkit::test]
fn inconsistent_chunks_of_one_message_are_refused() {
    let mut rx = RecvMatch::new(32, 8);
    assert_eq!(rx.place(&hdr(4, 0, 100, 0, 10)), Ok(Placement::Wait));
    let r = rx.place(&hdr(4, 0, 90, 10, 10));
    assert_eq!(
        r,
        Err(RecvError::TotalChanged {
            seq: 0,
            was: 100,
            now: 90
        })
    );
    assert_eq!(
        text(r),
        "message 0: a chunk says 90 bytes, an earlier one said 100"
    );
    let r = rx.place(&hdr(-4, 0, 100, 10, 10));
    assert_eq!(
        r,
        Err(RecvError::TagChanged {
            seq: 0,
            was: 4,
            now: -4
        })
    );
    assert_eq!(
        text(r),
        "message 0: a chunk says tag -4, an earlier one said 4"
    );
    rx.post(1, &[(4, 100)]).unwrap();
    assert_eq!(rx.place(&hdr(4, 0, 100, 10, 10)), into(1, 0, 10));
    assert!(matches!(
        rx.place(&hdr(4, 0, 101, 20, 10)),
        Err(RecvError::TotalChanged { .. })
    ));
    let r = rx.place(&hdr(4, 0, 100, 95, 10));
    assert_eq!(
        r,
        Err(RecvError::Chunk(WireError::PastEnd {
            offset: 95,
            len: 10,
            total: 100
        }))
    );
    assert_eq!(
        text(r),
        "chunk header: offset 95 + len 10 runs past the message's total 100"
    );
    rx.check().unwrap();
}

/// Placing the same chunk again is the same placement; any other chunk overlapping a placed
/// or landed range is refused, and so is any chunk of a message received in full.
#[zcnet_testkit::test]
fn overlapping_chunks_are_refused() {
    let mut rx = RecvMatch::new(32, 8);
    rx.post(1, &[(0, 16)]).unwrap();
    let c = |off, len| hdr(0, 0, 16, off, len);
    assert_eq!(rx.place(&c(4, 4)), into(1, 0, 4));
    assert_eq!(
        rx.place(&c(4, 4)),
        into(1, 0, 4),
        "same chunk, same placement"
    );
    let r = rx.place(&c(6, 4));
    assert_eq!(
        r,
        Err(RecvError::Overlap {
            seq: 0,
            offset: 6,
            len: 4
        })
    );
    assert_eq!(
        text(r),
        "message 0: chunk of 4 bytes at offset 6 overlaps bytes already placed or received"
    );
    assert!(
        matches!(rx.place(&c(4, 2)), Err(RecvError::Overlap { .. })),
        "same start"
    );
    assert!(matches!(rx.place(&c(0, 5)), Err(RecvError::Overlap { .. })));
    assert_eq!(rx.payload_done(&c(4, 4)), Ok(vec![]));
    for (off, len) in [(4, 4), (7, 1), (0, 16), (3, 2)] {
        let r = rx.place(&c(off, len));
        assert!(
            matches!(r, Err(RecvError::Overlap { .. })),
            "landed {off}+{len}: {r:?}"
        );
    }
    assert_eq!(land(&mut rx, c(0, 4)), [] as [u64; 0], "touching is fine");
    assert_eq!(land(&mut rx, c(8, 8)), [1]);
    let r = rx.place(&c(0, 4));
    assert_eq!(r, Err(RecvError::StaleSeq { seq: 0 }));
    assert_eq!(
        text(r),
        "chunk of message 0, which was already received in full"
    );
}
