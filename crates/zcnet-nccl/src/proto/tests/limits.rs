//! Limits, the sequence window, and the send side's completion checks.

use super::*;

#[zcnet_testkit::test]
fn thirty_two_outstanding_and_the_thirty_third_refused() {
    let mut tx = SendSched::new(1 << 19, 32);
    for id in 0..32 {
        assert_eq!(tx.post(100 + id, 0, 1), Ok(id));
    }
    let r = tx.post(200, 0, 1);
    assert_eq!(r, Err(SendError::TooMany { max: 32 }));
    assert_eq!(
        r.unwrap_err().to_string(),
        "32 sends outstanding already: send refused"
    );
    let c = tx.next_chunk().unwrap();
    assert_eq!(tx.chunk_done(&c), Ok(Some(100)));
    assert_eq!(
        tx.post(100, 0, 1),
        Ok(32),
        "an id is free again once complete"
    );
    assert_eq!(tx.post(101, 0, 1), Err(SendError::TooMany { max: 32 }));

    let mut rx = RecvMatch::new(32, 8);
    for id in 0..32 {
        rx.post(id, &[(0, 1)]).unwrap();
    }
    let r = rx.post(32, &[(0, 1)]);
    assert_eq!(r, Err(RecvError::TooMany { max: 32 }));
    assert_eq!(text(r), "32 receives pending already: receive refused");
    assert_eq!(land(&mut rx, hdr(0, 0, 1, 0, 1)), [0]);
    assert_eq!(
        rx.post(32, &[(0, 1)]),
        Err(RecvError::TooMany { max: 32 }),
        "done, not taken"
    );
    assert_eq!(rx.take_sizes(0), Some(vec![1]));
    assert_eq!(rx.post(32, &[(0, 1)]), Ok(()));
    let r = rx.post(5, &[(0, 1)]);
    assert!(r.is_err(), "full again");
    let mut rx = RecvMatch::new(32, 8);
    let r = rx.post(1, &[]);
    assert_eq!(r, Err(RecvError::BadGroup { n: 0, max: 8 }));
    assert_eq!(text(r), "grouped receive of 0 buffers (1 to 8 allowed)");
    assert_eq!(
        rx.post(1, &[(0, 1); 9]),
        Err(RecvError::BadGroup { n: 9, max: 8 })
    );
    assert_eq!(rx.post(1, &[(0, 1); 8]), Ok(()));
    assert_eq!(rx.post(1, &[(0, 1)]), Err(RecvError::IdInUse(1)));
    assert_eq!(tx.post(101, 0, 0), Err(SendError::TooMany { max: 32 }));
}

#[zcnet_testkit::test]
fn chunks_far_ahead_or_never_placed_are_refused() {
    let mut rx = RecvMatch::new(32, 8);
    assert_eq!(
        rx.place(&hdr(0, MAX_SEQ_AHEAD, 1, 0, 1)),
        Ok(Placement::Wait)
    );
    let r = rx.place(&hdr(0, MAX_SEQ_AHEAD + 1, 1, 0, 1));
    assert_eq!(
        r,
        Err(RecvError::SeqTooFar {
            seq: MAX_SEQ_AHEAD + 1,
            next: 0
        })
    );
    assert_eq!(
        text(r),
        "chunk of message 1048577, more than 1048576 past the next unmatched message 0"
    );
    let r = rx.payload_done(&hdr(0, MAX_SEQ_AHEAD, 1, 0, 1));
    assert_eq!(
        r,
        Err(RecvError::NotPlaced {
            seq: MAX_SEQ_AHEAD,
            offset: 0
        }),
        "it waits"
    );
    assert_eq!(
        text(r),
        "payload of message 1048576 at offset 0 landed, but that chunk is not placed"
    );
    rx.post(1, &[(0, 4)]).unwrap();
    assert_eq!(rx.place(&hdr(0, 0, 4, 0, 2)), into(1, 0, 0));
    assert!(
        rx.payload_done(&hdr(0, 0, 4, 2, 2)).is_err(),
        "never placed"
    );
    assert!(
        rx.payload_done(&hdr(0, 0, 4, 0, 1)).is_err(),
        "other length"
    );
    assert!(rx.payload_done(&hdr(1, 0, 4, 0, 2)).is_err(), "other tag");
    assert_eq!(rx.payload_done(&hdr(0, 0, 4, 0, 2)), Ok(vec![]));
    for seq in 1..MAX_WAITING as u64 {
        assert_eq!(rx.place(&hdr(0, seq + 1, 1, 0, 1)), Ok(Placement::Wait));
    }
    let r = rx.place(&hdr(0, 5000, 1, 0, 1));
    assert_eq!(r, Err(RecvError::TooManyWaiting { max: MAX_WAITING }));
    assert_eq!(
        text(r),
        "more than 4096 messages announced and not yet matched to a receive"
    );
    rx.check().unwrap();
}

#[zcnet_testkit::test]
fn send_completions_are_checked() {
    let mut tx = SendSched::new(4, 8);
    tx.post(1, 7, 6).unwrap();
    assert_eq!(tx.post(1, 7, 6), Err(SendError::IdInUse(1)));
    let (a, b) = (tx.next_chunk().unwrap(), tx.next_chunk().unwrap());
    assert_eq!((a.header.len, b.header.offset, b.header.len), (4, 4, 2));
    assert_eq!(tx.next_chunk(), None);
    let unknown = SendChunk {
        id: 1,
        header: hdr(7, 1, 6, 0, 4),
    };
    let r = tx.chunk_done(&unknown);
    assert_eq!(r, Err(SendError::UnknownChunk { seq: 1, offset: 0 }));
    assert_eq!(
        r.unwrap_err().to_string(),
        "completion of chunk 0 of message 1, which was never handed out"
    );
    let odd = SendChunk {
        header: hdr(7, 0, 6, 2, 4),
        ..a
    };
    assert_eq!(
        tx.chunk_done(&odd),
        Err(SendError::UnknownChunk { seq: 0, offset: 2 })
    );
    for bad in [
        SendChunk { id: 2, ..a },
        SendChunk {
            header: ChunkHeader { len: 3, ..a.header },
            ..a
        },
    ] {
        assert_eq!(
            tx.chunk_done(&bad),
            Err(SendError::ChunkMismatch { seq: 0, offset: 0 })
        );
    }
    assert_eq!(tx.chunk_done(&b), Ok(None));
    let r = tx.chunk_done(&b);
    assert_eq!(r, Err(SendError::ChunkAlreadyDone { seq: 0, offset: 4 }));
    assert_eq!(
        r.unwrap_err().to_string(),
        "second completion of chunk 4 of message 0"
    );
    assert_eq!(tx.chunk_done(&a), Ok(Some(1)));
    assert_eq!(
        tx.chunk_done(&a),
        Err(SendError::ChunkAlreadyDone { seq: 0, offset: 0 })
    );
    assert_eq!(
        (tx.outstanding(), tx.chunks_in_flight(), tx.has_chunk()),
        (0, 0, false)
    );
}
