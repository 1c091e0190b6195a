//! The echo protocol's handling of what the peer and the kernel say: the client's check of a
//! response piece against its request (`check_response`, any piece at any offset) and the
//! server's queueing of what a send left over (`queue_unsent`, any count the kernel returns).
//! Neither panics; a match means the compared bytes are equal; the first difference is where
//! it says; a piece past what was sent runs ahead; the queued tail is exactly the unsent bytes.

use crate::input::Input;
use zcnet_tools::echo::{check_response, queue_unsent, Check, ResponseCheck};

pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let size = inp.index(80);
    let req: Vec<u8> = (0..size).map(|i| (i * 7 + 3) as u8).collect();
    let sent = match inp.u8() % 4 {
        0 => inp.index(size + 3),
        _ => size,
    };
    let off = match inp.u8() % 8 {
        0 => inp.u64() as usize,
        _ => inp.index(size + 2),
    };
    let n = inp.index(size + 2);
    // The piece: the request's bytes there, with the input's damage, or the input itself.
    let mut piece: Vec<u8> = (0..n)
        .map(|i| req.get(off.wrapping_add(i)).copied().unwrap_or(0))
        .collect();
    if inp.bool() {
        for _ in 0..inp.index(3) {
            if !piece.is_empty() {
                let at = inp.index(piece.len());
                piece[at] ^= 1 | inp.u8();
            }
        }
    } else {
        piece = inp.small_bytes(n).to_vec();
    }
    for check in [Check::Full, Check::Cheap] {
        let r = check_response(&req, sent, off, &piece, check);
        let end = off.checked_add(piece.len());
        let fits = end.is_some_and(|e| e <= sent && e <= size);
        assert_eq!(r == ResponseCheck::RunsAhead, !fits, "{r:?}");
        let Some(end) = end.filter(|_| fits) else {
            continue;
        };
        let first_diff = (0..piece.len()).find(|&i| piece[i] != req[off + i]);
        match r {
            ResponseCheck::Match { checked } => {
                assert!(checked <= piece.len() as u64 * 2);
                if check == Check::Full {
                    assert_eq!(first_diff, None);
                    assert_eq!(checked, piece.len() as u64);
                } else {
                    let edge = 16.min(size);
                    for i in (0..edge).chain(size - edge..size) {
                        if (off..end).contains(&i) {
                            assert_eq!(piece[i - off], req[i], "a looked-at byte differs");
                        }
                    }
                }
            }
            ResponseCheck::Differs { at, .. } => {
                assert_eq!(Some(at - off), first_diff, "not the first difference");
            }
            ResponseCheck::RunsAhead => unreachable!(),
        }
    }
    // queue_unsent: slices cut from the input, and the kernel's count.
    let rest = inp.rest();
    let mut slices: Vec<&[u8]> = Vec::new();
    let mut r = rest;
    while !r.is_empty() && slices.len() < 8 {
        let k = usize::from(r[0] % 16).min(r.len());
        let (a, b) = r.split_at(k);
        slices.push(a);
        r = b;
    }
    let total: usize = slices.iter().map(|s| s.len()).sum();
    let all: Vec<u8> = slices.concat();
    for took in [0, total / 2, total, total + 1, usize::MAX, size] {
        let mut out = vec![9u8];
        let q = queue_unsent(&slices, took, &mut out);
        assert_eq!(q, total.saturating_sub(took));
        assert_eq!(&out[1..], &all[took.min(total)..]);
    }
}
