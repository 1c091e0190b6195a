//! AF_XDP: the index arithmetic of the four rings (`Producer`, `Consumer`) with arbitrary
//! starting indexes and arbitrary (honest, lagging, lying) kernel indexes, and the ownership
//! of UMEM frames (`Frames`) under arbitrary RX descriptors and completions. A ring never
//! counts more than `size` entries, never hands out a slot twice in one batch, and a refused
//! index or overrun changes nothing; a frame is with exactly one party and moves only as the
//! model says.

use crate::input::Input;
use zcnet_core::xsk::{Consumer, FrameState, Frames, Producer, XDP_PACKET_HEADROOM};

fn distinct(slots: impl Iterator<Item = usize>, size: u32) {
    let mut seen = vec![false; size as usize];
    for s in slots {
        assert!(s < size as usize, "slot {s} outside a ring of {size}");
        assert!(!seen[s], "slot {s} twice in one batch");
        seen[s] = true;
    }
}

fn producer(inp: &mut Input<'_>, size: u32) {
    let start = inp.u32();
    let cons = if inp.bool() {
        start.wrapping_sub(inp.u32())
    } else {
        start.wrapping_sub(inp.below(u64::from(size) + 1) as u32)
    };
    let mut p = Producer::new(size, start, cons);
    // The kernel's consumer index, kept honest except when the input says to lie.
    let mut kcons = cons;
    for _ in 0..64 {
        if inp.is_empty() {
            break;
        }
        let op = inp.u8();
        let load = match op >> 6 {
            0 => inp.u32(),
            _ => {
                // Consume some of what is published.
                let pend = p.producer().wrapping_sub(kcons);
                if pend <= size {
                    kcons = kcons.wrapping_add(inp.below(u64::from(pend) + 1) as u32);
                }
                kcons
            }
        };
        let before = (p.producer(), p.reserved(), p.cached_consumer());
        let r = match op % 4 {
            0 => {
                let want = inp.below(u64::from(size) * 2 + 2) as u32;
                match p.reserve(want, || load) {
                    Ok(b) => {
                        assert!(b.len <= want);
                        distinct(b.slots(), size);
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            1 => p
                .submit(inp.below(u64::from(size) + 2) as u32)
                .map(|h| assert_eq!(h, p.producer())),
            2 => p.cancel(inp.below(u64::from(size) + 2) as u32),
            _ => p.refresh(|| load),
        };
        if r.is_err() {
            assert_eq!(
                before,
                (p.producer(), p.reserved(), p.cached_consumer()),
                "a refused step changed the ring"
            );
        }
        // Published and reserved entries never exceed the ring, as the kernel sees it.
        let used = p.pending().checked_add(p.reserved());
        assert!(
            used.is_some_and(|u| u <= size),
            "{} pending + {} reserved in a ring of {size}",
            p.pending(),
            p.reserved()
        );
    }
}

fn consumer(inp: &mut Input<'_>, size: u32) {
    let start = inp.u32();
    let prod = if inp.bool() {
        start.wrapping_add(inp.u32())
    } else {
        start.wrapping_add(inp.below(u64::from(size) + 1) as u32)
    };
    let mut c = Consumer::new(size, prod, start);
    let mut kprod = prod;
    for _ in 0..64 {
        if inp.is_empty() {
            break;
        }
        let op = inp.u8();
        let load = match op >> 6 {
            0 => inp.u32(),
            _ => {
                let filled = kprod.wrapping_sub(c.consumer());
                if filled <= size {
                    kprod = kprod.wrapping_add(inp.below(u64::from(size - filled) + 1) as u32);
                }
                kprod
            }
        };
        let before = (c.consumer(), c.peeked(), c.ready_cached());
        let r = match op % 3 {
            0 => {
                let max = inp.below(u64::from(size) * 2 + 2) as u32;
                match c.peek(max, || load) {
                    Ok(b) => {
                        assert!(b.len <= max);
                        distinct(b.slots(), size);
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            1 => c
                .release(inp.below(u64::from(size) + 2) as u32)
                .map(|h| assert_eq!(h, c.consumer())),
            _ => c.refresh(|| load),
        };
        if r.is_err() {
            assert_eq!(
                before,
                (c.consumer(), c.peeked(), c.ready_cached()),
                "a refused step changed the ring"
            );
        }
        let seen = c.peeked().checked_add(c.ready_cached());
        assert!(
            seen.is_some_and(|u| u <= size),
            "{} peeked + {} ready in a ring of {size}",
            c.peeked(),
            c.ready_cached()
        );
    }
}

fn frames(inp: &mut Input<'_>) {
    let count = inp.below(33) as u32;
    let fs = inp.pick(&[2048u32, 4096, 1, 3000, 0]);
    let mut f = Frames::new(count, fs);
    let mut model = vec![FrameState::User; count as usize];
    for _ in 0..64 {
        if inp.is_empty() {
            break;
        }
        let frame = inp.below(u64::from(count) + 2) as u32;
        let st = model.get(frame as usize).copied();
        match inp.u8() % 5 {
            0 => {
                let ok = f.give_fill(frame).is_ok();
                assert_eq!(ok, st == Some(FrameState::User));
                if ok {
                    model[frame as usize] = FrameState::Fill;
                }
            }
            1 => {
                let (off, len) = (u32::from(inp.u16()), u32::from(inp.u16()));
                let fits = u64::from(off) + u64::from(len) <= u64::from(fs) && len > 0;
                let ok = f.give_tx(frame, off, len);
                assert_eq!(ok.is_ok(), st == Some(FrameState::User) && fits);
                if let Ok(a) = ok {
                    assert_eq!(a, u64::from(frame) * u64::from(fs) + u64::from(off));
                    model[frame as usize] = FrameState::Tx;
                }
            }
            2 => {
                let ok = f.take_back(frame).is_ok();
                assert_eq!(ok, matches!(st, Some(FrameState::Fill | FrameState::Tx)));
                if ok {
                    model[frame as usize] = FrameState::User;
                }
            }
            op => {
                // A descriptor from the kernel: inside a frame (past the headroom), or anything.
                let addr = if inp.bool() {
                    u64::from(frame) * u64::from(fs)
                        + u64::from(XDP_PACKET_HEADROOM)
                        + u64::from(inp.u8())
                } else {
                    inp.u64()
                };
                let len = u32::from(inp.u16());
                let at = addr
                    .checked_div(u64::from(fs))
                    .filter(|&i| i < u64::from(count));
                let st = at.map(|i| model[i as usize]);
                if op == 3 {
                    let r = f.on_rx(addr, len);
                    let fits =
                        at.is_some_and(|_| addr % u64::from(fs) + u64::from(len) <= u64::from(fs));
                    assert_eq!(
                        r.is_ok(),
                        st == Some(FrameState::Fill) && fits,
                        "rx {addr:#x}+{len}"
                    );
                    if let Ok(s) = r {
                        assert_eq!(Some(u64::from(s.frame)), at);
                        assert_eq!(u64::from(s.offset), addr % u64::from(fs));
                        model[s.frame as usize] = FrameState::User;
                    }
                } else {
                    let r = f.on_complete(addr);
                    assert_eq!(
                        r.is_ok(),
                        st == Some(FrameState::Tx),
                        "completion {addr:#x}"
                    );
                    if let Ok(i) = r {
                        model[i as usize] = FrameState::User;
                    }
                }
            }
        }
        for s in [FrameState::User, FrameState::Fill, FrameState::Tx] {
            assert_eq!(f.in_state(s), model.iter().filter(|m| **m == s).count());
        }
        for (i, m) in model.iter().enumerate() {
            assert_eq!(f.state(i as u32), Some(*m));
        }
    }
}

pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let size = 1u32 << inp.index(12);
    match inp.u8() % 3 {
        0 => producer(&mut inp, size),
        1 => consumer(&mut inp, size),
        _ => frames(&mut inp),
    }
}
