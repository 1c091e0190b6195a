use super::*;
use proptest::prelude::*;

mod limits;
mod scenarios;
mod sim;

/// xorshift64: the simulation's only source of choices, seeded by proptest.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
    fn pick(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }
}

fn hdr(tag: i32, seq: u64, total: u64, offset: u64, len: u32) -> ChunkHeader {
    ChunkHeader {
        tag,
        seq,
        total,
        offset,
        len,
    }
}

fn into(recv: u64, slot: usize, offset: u64) -> Result<Placement, RecvError> {
    Ok(Placement::Into { recv, slot, offset })
}

/// Places a chunk (it must go `Into` a buffer) and lands it: the receives completed.
fn land(r: &mut RecvMatch, h: ChunkHeader) -> Vec<u64> {
    let placed = r.place(&h);
    assert!(
        matches!(placed, Ok(Placement::Into { .. })),
        "{h:?}: {placed:?}"
    );
    let done = r.payload_done(&h).unwrap();
    r.check().unwrap();
    done
}

fn text<T: std::fmt::Debug>(r: Result<T, RecvError>) -> String {
    r.unwrap_err().to_string()
}

fn header() -> impl Strategy<Value = ChunkHeader> {
    (
        any::<i32>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<u32>(),
    )
        .prop_map(|(tag, seq, total, off, len)| {
            // Consistent fields: a non-empty chunk inside a non-empty message, or the one
            // empty chunk of an empty message.
            let total = total >> 1;
            let len = if total == 0 {
                0
            } else {
                len.max(1).min(u32::try_from(total).unwrap_or(u32::MAX))
            };
            let offset = off % (total - u64::from(len) + 1);
            hdr(tag, seq, total, offset, len)
        })
}

proptest! {
    #[zcnet_testkit::test]
    fn wire_round_trip(h in header()) {
        let b = h.encode();
        prop_assert_eq!(b.len(), HEADER_LEN);
        prop_assert_eq!(&b[0..4], &[0x4e, 0x5a, VERSION, KIND_DATA]);
        prop_assert_eq!(&b[36..40], &[0, 0, 0, 0]);
        prop_assert_eq!(ChunkHeader::decode(&b, u32::MAX, u64::MAX), Ok(h));
        prop_assert_eq!(ChunkHeader::decode(&b, h.len, h.total), Ok(h), "limits are inclusive");
    }
}

#[zcnet_testkit::test]
fn wire_layout_is_little_endian() {
    let b = hdr(-2, 0x0102, 0x0304, 0x0206, 0xfe).encode();
    let want: [u8; HEADER_LEN] = [
        0x4e, 0x5a, 1, 0, 0xfe, 0xff, 0xff, 0xff, 2, 1, 0, 0, 0, 0, 0, 0, 4, 3, 0, 0, 0, 0, 0, 0,
        6, 2, 0, 0, 0, 0, 0, 0, 0xfe, 0, 0, 0, 0, 0, 0, 0,
    ];
    assert_eq!(b, want);
}

/// Each rejection, with its message.
#[zcnet_testkit::test]
fn wire_rejects_garbage() {
    let good = hdr(7, 3, 100, 40, 60);
    let dec = |b: &[u8; HEADER_LEN]| ChunkHeader::decode(b, 64, 1000);
    assert_eq!(dec(&good.encode()), Ok(good));
    let with = |at: usize, bytes: &[u8]| {
        let mut b = good.encode();
        b[at..at + bytes.len()].copy_from_slice(bytes);
        dec(&b)
    };
    let msg = |r: Result<ChunkHeader, WireError>| r.map_err(|e| e.to_string());
    let cases: Vec<(Result<ChunkHeader, WireError>, WireError, &str)> = vec![
        (
            with(0, &[0x4e, 0x5b]),
            WireError::BadMagic(0x5b4e),
            "chunk header: magic 0x5b4e, expected 0x5a4e (not a zcnet peer, or the stream lost sync)",
        ),
        (
            with(2, &[2]),
            WireError::BadVersion(2),
            "chunk header: version 2, expected 1",
        ),
        (
            with(3, &[1]),
            WireError::BadKind(1),
            "chunk header: kind 1, expected 0 (data)",
        ),
        (
            with(39, &[0x80]),
            WireError::Reserved(0x8000_0000),
            "chunk header: reserved field 0x80000000, expected 0",
        ),
        (
            with(32, &[65]),
            WireError::ChunkTooLong { len: 65, max: 64 },
            "chunk header: len 65 exceeds the chunk limit 64",
        ),
        (
            with(16, &1001u64.to_le_bytes()),
            WireError::MessageTooLarge {
                total: 1001,
                max: 1000,
            },
            "chunk header: total 1001 exceeds the message limit 1000",
        ),
        (
            with(24, &41u64.to_le_bytes()),
            WireError::PastEnd {
                offset: 41,
                len: 60,
                total: 100,
            },
            "chunk header: offset 41 + len 60 runs past the message's total 100",
        ),
        (
            with(24, &u64::MAX.to_le_bytes()),
            WireError::PastEnd {
                offset: u64::MAX,
                len: 60,
                total: 100,
            },
            "chunk header: offset 18446744073709551615 + len 60 runs past the message's total 100",
        ),
        (
            with(32, &[0]),
            WireError::EmptyChunk { total: 100 },
            "chunk header: len 0 in a message of 100 bytes (only a zero-byte message has an empty chunk)",
        ),
    ];
    for (got, want, text) in cases {
        assert_eq!(got, Err(want));
        assert_eq!(msg(got), Err(text.to_string()));
    }
    // Limits are inclusive; the one empty chunk of an empty message is fine.
    assert!(ChunkHeader::decode(&hdr(0, 0, 1000, 936, 64).encode(), 64, 1000).is_ok());
    let empty = hdr(0, 9, 0, 0, 0);
    assert_eq!(ChunkHeader::decode(&empty.encode(), 64, 1000), Ok(empty));
    let one = hdr(0, 9, 1, 0, 0).encode();
    assert_eq!(dec(&one), Err(WireError::EmptyChunk { total: 1 }));
    let past = hdr(0, 9, 0, 1, 0).encode();
    assert!(matches!(dec(&past), Err(WireError::PastEnd { .. })));
}
