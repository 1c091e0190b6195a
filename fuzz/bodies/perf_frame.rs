//! `zcnet perf`'s length-prefixed JSON frames (iperf3's `JSON_read`): a stream of bytes cut
//! into arbitrary pieces gives the same frames, and the same first error, as the stream fed
//! in one piece; `Ok(None)` means every byte was taken; a non-empty piece always makes
//! progress; and `is_partial` says whether part of a frame is in.

use crate::input::Input;
use zcnet_tools::perf::proto::{encode_frame, FrameDecoder, FRAME_HEADER_LEN, MAX_PARAMS_LEN};

/// Frames (as JSON text) until the first error, then the error (as text) if one came, and
/// whether part of a frame was left over.
type Outcome = (Vec<String>, Option<String>, bool);

fn decode_all(max: usize, stream: &[u8], cuts: &[u8]) -> Outcome {
    let mut dec = FrameDecoder::new(max);
    let mut frames = Vec::new();
    let mut rest = stream;
    let mut i = 0;
    while !rest.is_empty() {
        let n = match cuts.get(i) {
            Some(&c) => usize::from(c) + 1,
            None => rest.len(),
        };
        i += 1;
        let (mut piece, tail) = rest.split_at(n.min(rest.len()));
        rest = tail;
        while !piece.is_empty() {
            let before = piece.len();
            match dec.decode(&mut piece) {
                Ok(Some(v)) => {
                    assert!(piece.len() < before, "a frame without taking a byte");
                    assert!(!dec.is_partial(), "a finished frame leaves nothing partial");
                    frames.push(v.to_string());
                }
                Ok(None) => assert!(piece.is_empty(), "Ok(None) with bytes left"),
                Err(e) => {
                    assert!(!dec.is_partial(), "an error starts the decoder over");
                    return (frames, Some(format!("{e:?}")), false);
                }
            }
        }
    }
    (frames, None, dec.is_partial())
}

pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let max = inp.pick(&[1usize, 8, 64, 1024, MAX_PARAMS_LEN]);
    let ncuts = inp.index(17);
    let cuts = inp.bytes(ncuts);
    let mode = inp.u8();
    let body = inp.rest();
    // Mode 0: the bytes are the stream. Otherwise: the bytes are JSON bodies separated by
    // 0xff, each framed with its true length (so that the fuzzer reaches the JSON quickly),
    // one of them possibly with a wrong length.
    let stream: Vec<u8> = if mode.is_multiple_of(4) {
        body.to_vec()
    } else {
        let mut s = Vec::new();
        for (k, part) in body.split(|&b| b == 0xff).enumerate() {
            let mut len = part.len() as u32;
            if k == usize::from(mode >> 4) && mode & 8 != 0 {
                len = len.wrapping_add(u32::from(mode & 7)).wrapping_sub(3);
            }
            s.extend_from_slice(&len.to_be_bytes());
            s.extend_from_slice(part);
        }
        s
    };
    let whole = decode_all(max, &stream, &[]);
    let pieces = decode_all(max, &stream, cuts);
    assert_eq!(whole, pieces, "the split changed what was decoded");
    // Byte by byte, too (the decoder's smallest steps).
    if stream.len() <= 256 {
        let ones = vec![0u8; stream.len()];
        assert_eq!(whole, decode_all(max, &stream, &ones));
    }
    // What was decoded frames again (refused exactly when longer than the limit) and decodes
    // again. (Not to the same text: without serde_json's float_roundtrip a float may come
    // back one ulp off.)
    for text in &whole.0 {
        let v: serde_json::Value = serde_json::from_str(text).expect("decoded JSON prints as JSON");
        let printed = v.to_string();
        let f = encode_frame(&v, usize::MAX).expect("no limit");
        assert_eq!(f.len(), FRAME_HEADER_LEN + printed.len());
        let mut dec = FrameDecoder::new(printed.len().max(1));
        let mut s = f.as_slice();
        let again = dec.decode(&mut s).expect("own frame").expect("complete");
        assert!(s.is_empty());
        assert_eq!(again.is_object(), v.is_object());
        assert_eq!(encode_frame(&v, max).is_err(), printed.len() > max);
    }
}
