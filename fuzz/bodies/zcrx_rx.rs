//! io_uring zero-copy receive (`ZcrxRx`): arbitrary RECV_ZC completions (raw 32-byte CQEs or
//! chosen fields: any result, flags, offset, area token, connection), releases (held, released
//! twice, never delivered) and refill-ring pushes with any room. After every step the
//! machine's own `check()` holds (no overlapping fragments in a buffer, counters equal the
//! state), and against a model: a release succeeds exactly for a held fragment, once; the
//! refill ring gets exactly the released fragments, in release order, with the area token;
//! a connection is armed until its final CQE; delivered bytes add up.

use crate::input::Input;
use std::collections::VecDeque;
use zcnet_core::rxring::{
    Frag, RecvZcCqe, RefillEntry, RxEvent, ZcrxRx, CQE32_LEN, IORING_ZCRX_AREA_SHIFT,
};
use zcnet_core::sendzc::IORING_CQE_F_MORE;

pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let buf_size = 1u32 << inp.index(17);
    let nbufs = 1 + inp.below(16);
    let token = u64::from(inp.u8() % 4) << IORING_ZCRX_AREA_SHIFT;
    let area_len = nbufs * u64::from(buf_size);
    let mut rx = ZcrxRx::with_buf_size(area_len, buf_size, token).expect("a valid area");
    // Wrong configurations are refused, not panicked on.
    assert!(ZcrxRx::with_buf_size(area_len, buf_size * 3, token).is_err());
    assert!(ZcrxRx::with_buf_size(0, buf_size, token).is_err());
    assert!(ZcrxRx::with_buf_size(area_len, buf_size, token | 1).is_err());
    let mut held: Vec<Frag> = Vec::new();
    let mut released: Vec<Frag> = Vec::new();
    let mut queued: VecDeque<RefillEntry> = VecDeque::new();
    let mut armed = [None::<(u32, u64)>; 4]; // limit, got
    let mut delivered = 0u64;
    while !inp.is_empty() {
        let op = inp.u8();
        match op % 8 {
            0 => {
                let conn = inp.below(4);
                let len = u32::from(inp.u16() % 512);
                let was = armed[conn as usize].is_some();
                assert_eq!(rx.arm(conn, len).is_ok(), !was);
                if !was {
                    armed[conn as usize] = Some((len, 0));
                }
            }
            1..=3 => {
                let cqe = if op % 8 == 1 {
                    match RecvZcCqe::parse(inp.bytes(CQE32_LEN)) {
                        Ok(c) => c,
                        Err(_) => continue,
                    }
                } else {
                    let b = inp.below(nbufs + 1);
                    let start = inp.below(u64::from(buf_size) + 1);
                    let res = match inp.u8() % 6 {
                        0 => 0,
                        1 => -i32::from(inp.u8()),
                        2 => inp.i32(),
                        _ => 1 + i32::from(inp.u16()) % (buf_size as i32).min(70000),
                    };
                    let flags = match inp.u8() % 4 {
                        0 => 0,
                        1 => inp.u32(),
                        _ => IORING_CQE_F_MORE,
                    };
                    let area = if inp.one_in(16) {
                        inp.u64() & !((1 << 48) - 1)
                    } else {
                        token
                    };
                    RecvZcCqe {
                        user_data: inp.below(5),
                        res,
                        flags,
                        off: area | (b * u64::from(buf_size) + start),
                    }
                };
                let conn = cqe.user_data;
                let before = rx.stats().clone();
                match rx.on_cqe32(&cqe) {
                    Ok(RxEvent::Data {
                        conn: c,
                        frag,
                        more,
                    }) => {
                        assert_eq!(c, conn);
                        assert!(cqe.res > 0 && frag.len == cqe.res as u32);
                        assert_eq!(more, cqe.flags & IORING_CQE_F_MORE != 0);
                        assert!(frag.off + u64::from(frag.len) <= area_len);
                        assert_eq!(
                            frag.off / u64::from(buf_size),
                            (frag.off + u64::from(frag.len) - 1) / u64::from(buf_size),
                            "fragment crosses a buffer"
                        );
                        let a = armed
                            .get_mut(conn as usize)
                            .and_then(|a| a.as_mut())
                            .expect("data for an armed connection");
                        a.1 += u64::from(frag.len);
                        assert!(a.0 == 0 || a.1 <= u64::from(a.0), "over the asked length");
                        if !more {
                            armed[conn as usize] = None;
                        }
                        assert!(!held.contains(&frag));
                        held.push(frag);
                        delivered += u64::from(frag.len);
                    }
                    Ok(ev) => {
                        assert!(cqe.res <= 0 && cqe.flags & IORING_CQE_F_MORE == 0, "{ev:?}");
                        let slot = armed.get_mut(conn as usize).expect("an armed connection");
                        assert!(slot.is_some());
                        *slot = None;
                    }
                    Err(_) => {
                        let after = rx.stats();
                        assert_eq!(after.rejected, before.rejected + 1);
                        assert_eq!(
                            (after.bytes, after.fragments),
                            (before.bytes, before.fragments)
                        );
                    }
                }
                for c in 0..5u64 {
                    let model = armed.get(c as usize).is_some_and(|a| a.is_some());
                    assert_eq!(rx.is_armed(c), model, "connection {c}");
                }
            }
            4 => {
                // Release a held fragment, a released one again, or anything.
                let frag = match inp.u8() % 4 {
                    0 | 1 if !held.is_empty() => held[inp.index(held.len())],
                    2 if !released.is_empty() => released[inp.index(released.len())],
                    _ => Frag {
                        off: inp.below(area_len + 2),
                        len: u32::from(inp.u16()),
                    },
                };
                let was_held = held.contains(&frag);
                assert_eq!(rx.is_held(frag), was_held);
                assert_eq!(rx.release(frag).is_ok(), was_held, "release of {frag:?}");
                if was_held {
                    held.retain(|f| *f != frag);
                    released.push(frag);
                    queued.push_back(RefillEntry {
                        off: token | frag.off,
                        len: frag.len,
                    });
                }
            }
            5 => {
                let room = inp.index(6);
                let mut got = Vec::new();
                let n = rx.flush_refills(|e| {
                    if got.len() < room {
                        got.push(e);
                        true
                    } else {
                        false
                    }
                });
                assert_eq!(n, got.len());
                for e in got {
                    assert_eq!(Some(e), queued.pop_front(), "refill out of order");
                }
            }
            6 => {
                let got = rx.take_refills(inp.index(6));
                for e in got {
                    assert_eq!(Some(e), queued.pop_front(), "refill out of order");
                }
            }
            _ => {
                // A fragment delivered again before it went back: the kernel cannot do that.
                if let Some(&f) = held.first() {
                    let conn = inp.below(4);
                    if armed[conn as usize].is_some() {
                        let r = rx.on_cqe(conn, f.len as i32, IORING_CQE_F_MORE, token | f.off);
                        assert!(r.is_err(), "a held fragment delivered twice");
                    }
                }
            }
        }
        if let Err(e) = rx.check() {
            panic!("state broken: {e}");
        }
        let s = rx.stats();
        assert_eq!(s.bytes, delivered);
        assert_eq!(s.held_fragments, held.len() as u64);
        assert_eq!(s.queued_refills, queued.len() as u64);
        assert_eq!(rx.queued_refills(), queued.len());
    }
}
