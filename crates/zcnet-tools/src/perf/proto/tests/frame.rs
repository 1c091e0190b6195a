use proptest::prelude::*;
use serde_json::{json, Value};

use super::super::{encode_frame, FrameDecoder, ProtoError, MAX_PARAMS_LEN};

fn frame(len: u32, body: &[u8]) -> Vec<u8> {
    let mut f = len.to_be_bytes().to_vec();
    f.extend_from_slice(body);
    f
}

#[zcnet_testkit::test]
fn encodes_length_then_compact_json() {
    let f = encode_frame(&json!({"tcp": true}), MAX_PARAMS_LEN).unwrap();
    assert_eq!(f, frame(12, br#"{"tcp":true}"#));
}

#[zcnet_testkit::test]
fn encode_refuses_over_the_limit() {
    let v = json!({"title": "x".repeat(100)});
    assert!(matches!(
        encode_frame(&v, 50),
        Err(ProtoError::FrameTooLong { max: 50, .. })
    ));
}

#[zcnet_testkit::test]
fn decodes_and_leaves_what_follows() {
    let mut bytes = frame(12, br#"{"tcp":true}"#);
    bytes.push(14); // DISPLAY_RESULTS right behind the results
    let mut input = bytes.as_slice();
    let mut d = FrameDecoder::new(MAX_PARAMS_LEN);
    assert_eq!(d.decode(&mut input), Ok(Some(json!({"tcp": true}))));
    assert_eq!(input, &[14]);
    assert!(!d.is_partial());
}

#[zcnet_testkit::test]
fn decodes_byte_by_byte() {
    let bytes = encode_frame(&json!({"a": [1, 2, 3]}), 100).unwrap();
    let mut d = FrameDecoder::new(100);
    for (i, b) in bytes.iter().enumerate() {
        let mut one = std::slice::from_ref(b);
        let r = d.decode(&mut one).unwrap();
        assert!(one.is_empty());
        if i + 1 < bytes.len() {
            assert_eq!(r, None, "byte {i}");
            assert!(d.is_partial());
        } else {
            assert_eq!(r, Some(json!({"a": [1, 2, 3]})));
        }
    }
}

#[zcnet_testkit::test]
fn decodes_two_frames_in_a_row() {
    let mut bytes = encode_frame(&json!(1), 10).unwrap();
    bytes.extend(encode_frame(&json!("two"), 10).unwrap());
    let mut input = bytes.as_slice();
    let mut d = FrameDecoder::new(10);
    assert_eq!(d.decode(&mut input), Ok(Some(json!(1))));
    assert_eq!(d.decode(&mut input), Ok(Some(json!("two"))));
    assert!(input.is_empty());
}

#[zcnet_testkit::test]
fn zero_length_is_an_error() {
    let mut d = FrameDecoder::new(10);
    assert_eq!(
        d.decode(&mut &[0u8, 0, 0, 0][..]),
        Err(ProtoError::EmptyFrame)
    );
}

#[zcnet_testkit::test]
fn too_long_fails_on_the_header_alone() {
    let mut d = FrameDecoder::new(MAX_PARAMS_LEN);
    let header = (MAX_PARAMS_LEN as u32 + 1).to_be_bytes();
    let err = d.decode(&mut &header[..]);
    assert_eq!(
        err,
        Err(ProtoError::FrameTooLong {
            len: MAX_PARAMS_LEN + 1,
            max: MAX_PARAMS_LEN
        })
    );
    // Exactly the limit is fine.
    let body = format!("\"{}\"", "x".repeat(MAX_PARAMS_LEN - 2));
    let ok = frame(MAX_PARAMS_LEN as u32, body.as_bytes());
    assert!(matches!(
        d.decode(&mut ok.as_slice()),
        Ok(Some(Value::String(_)))
    ));
}

#[zcnet_testkit::test]
fn not_json_is_an_error() {
    let mut d = FrameDecoder::new(100);
    for body in [&b"{\"tcp\": tru"[..], b"hello world", b"{}{}", b"\xff\xfe"] {
        let f = frame(body.len() as u32, body);
        assert!(
            matches!(d.decode(&mut f.as_slice()), Err(ProtoError::InvalidJson(_))),
            "{body:?}"
        );
        assert!(!d.is_partial(), "decoder starts over after an error");
    }
}

#[zcnet_testkit::test]
fn trailing_nul_is_tolerated() {
    let mut d = FrameDecoder::new(100);
    let f = frame(3, b"{}\0");
    assert_eq!(d.decode(&mut f.as_slice()), Ok(Some(json!({}))));
}

/// Feeds `input` in the pieces `cuts` makes; returns the first decision and the bytes used.
fn decode_in_pieces(input: &[u8], cuts: &[usize]) -> (Result<Option<Value>, ProtoError>, usize) {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    points.push(0);
    points.push(input.len());
    points.sort_unstable();
    points.dedup();
    let mut d = FrameDecoder::new(64);
    let mut used = 0;
    for w in points.windows(2) {
        let mut piece = &input[w[0]..w[1]];
        let before = piece.len();
        let r = d.decode(&mut piece);
        used += before - piece.len();
        if !matches!(r, Ok(None)) {
            return (r, used);
        }
        if !piece.is_empty() {
            return (
                Err(ProtoError::Misuse("bytes left without a decision")),
                used,
            );
        }
    }
    (Ok(None), used)
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[a-z0-9 ]{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-z_]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[zcnet_testkit::test]
    fn any_split_of_a_valid_frame_decodes_the_same(
        v in json_value(),
        tail in prop::collection::vec(any::<u8>(), 0..8),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        let mut input = encode_frame(&v, usize::MAX).unwrap();
        let frame_len = input.len();
        input.extend(&tail);
        let whole = decode_in_pieces(&input, &[]);
        let split = decode_in_pieces(&input, &cuts);
        prop_assert_eq!(&whole, &split);
        if frame_len - 4 <= 64 {
            prop_assert_eq!(whole, (Ok(Some(v)), frame_len));
        } else {
            let too_long = matches!(whole.0, Err(ProtoError::FrameTooLong { .. }));
            prop_assert!(too_long);
        }
    }

    #[zcnet_testkit::test]
    fn any_split_of_any_bytes_decides_the_same(
        input in prop::collection::vec(any::<u8>(), 0..80),
        small_len in 0u32..70,
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        // Half the cases get a plausible length prefix so that bodies get parsed.
        let mut bytes = input.clone();
        if small_len % 2 == 0 && bytes.len() >= 4 {
            bytes[..4].copy_from_slice(&(small_len / 2).to_be_bytes());
        }
        prop_assert_eq!(decode_in_pieces(&bytes, &[]), decode_in_pieces(&bytes, &cuts));
    }
}
