use super::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

const MORE: u32 = IORING_CQE_F_MORE;

fn frag(off: u64, len: u32) -> Frag {
    Frag { off, len }
}

fn data(rx: &mut ZcrxRx, conn: u64, off: u64, len: u32) -> Result<RxEvent, RxError> {
    rx.on_cqe(conn, len as i32, MORE, off)
}

fn got(conn: u64, off: u64, len: u32, more: bool) -> RxEvent {
    let frag = frag(off, len);
    RxEvent::Data { conn, frag, more }
}

/// Nothing but `rejected` changed since `before`.
fn unchanged(rx: &ZcrxRx, before: &RxStats) -> bool {
    let rejected = before.rejected;
    RxStats {
        rejected,
        ..rx.stats().clone()
    } == *before
}

#[cfg(target_endian = "little")]
#[test]
fn cqe32_and_rqe_bytes() {
    // struct io_uring_cqe { u64 user_data; s32 res; u32 flags; }
    // + struct io_uring_zcrx_cqe { u64 off; u64 __pad; }
    let mut b = [0u8; 32];
    b[..8].copy_from_slice(&[7, 0, 0, 0, 0, 0, 0, 0]);
    b[8..12].copy_from_slice(&[0x00, 0x10, 0, 0]); // res 4096
    b[12..16].copy_from_slice(&[0x02, 0, 0, 0]); // IORING_CQE_F_MORE
    b[16..24].copy_from_slice(&[0x00, 0x20, 0, 0, 0, 0, 0x01, 0x00]); // area 1, offset 0x2000
    let cqe = RecvZcCqe::parse(&b).unwrap();
    assert_eq!((cqe.user_data, cqe.res, cqe.flags), (7, 4096, MORE));
    assert_eq!(cqe.off >> IORING_ZCRX_AREA_SHIFT, 1);
    assert_eq!(cqe.off & !IORING_ZCRX_AREA_MASK, 0x2000);
    b[8..12].copy_from_slice(&(-104i32).to_le_bytes());
    assert_eq!(RecvZcCqe::parse(&b).unwrap().res, -104);
    let short = RxError::BadLength {
        expected: 32,
        got: 31,
    };
    assert_eq!(RecvZcCqe::parse(&b[..31]), Err(short));
    b[31] = 1;
    assert_eq!(RecvZcCqe::parse(&b), Err(RxError::NonzeroPad));

    // struct io_uring_zcrx_rqe { u64 off; u32 len; u32 __pad; }
    let (off, len) = ((1 << 48) | 0x2000, 4096);
    let e = RefillEntry { off, len };
    let want = [0, 0x20, 0, 0, 0, 0, 1, 0, 0, 0x10, 0, 0, 0, 0, 0, 0];
    assert_eq!(e.to_bytes(), want);
    assert_eq!(e.area_offset(), 0x2000);
}

#[test]
fn config_is_validated() {
    assert!(ZcrxRx::new(0, 0).is_err());
    assert!(ZcrxRx::new(4096 + 1, 0).is_err());
    assert!(ZcrxRx::with_buf_size(8192, 3000, 0).is_err());
    assert!(ZcrxRx::new(8192, 0x1234).is_err(), "token with offset bits");
    let rx = ZcrxRx::with_buf_size(8192, 2048, 3 << 48).unwrap();
    let s = rx.stats();
    assert_eq!(
        (rx.buffers(), rx.buf_size(), s.bufs_in_kernel),
        (4, 2048, 4)
    );
}

/// Several fragments in one buffer: one refill entry each; the buffer is the kernel's only
/// when all are pushed, and until then bytes of any of them cannot be delivered again.
#[test]
fn fragments_share_a_buffer() {
    let token = 1 << 48;
    let mut rx = ZcrxRx::new(4 * 4096, token).unwrap();
    rx.arm(9, 0).unwrap();
    let ev = data(&mut rx, 9, token | 100, 200).unwrap();
    assert_eq!(ev, got(9, 100, 200, true));
    data(&mut rx, 9, token, 100).unwrap();
    data(&mut rx, 9, token | 4096, 4096).unwrap();
    assert_eq!(rx.stats().bufs_in_kernel, 2);
    rx.release(frag(0, 100)).unwrap();
    let (off, len) = (token, 100);
    assert_eq!(rx.take_refills(8), vec![RefillEntry { off, len }]);
    assert_eq!(rx.stats().bufs_in_kernel, 2, "buffer 0 still in use");
    // The kernel cannot have recycled buffer 0: re-delivering pushed bytes is a duplicate.
    let dup = data(&mut rx, 9, token | 50, 10);
    assert_eq!(dup, Err(RxError::Duplicate(frag(50, 10))));
    rx.release(frag(100, 200)).unwrap();
    rx.release(frag(4096, 4096)).unwrap();
    let pushed = rx.take_refills(8);
    assert_eq!(pushed.len(), 2);
    assert_eq!(rx.stats().bufs_in_kernel, 4);
    // Recycled now: the same bytes may come again.
    data(&mut rx, 9, token | 50, 10).unwrap();
    rx.check().unwrap();
    let s = rx.stats();
    assert_eq!((s.bytes, s.released_bytes, s.held_bytes), (4406, 4396, 10));
    assert_eq!((s.fragments, s.releases, s.refills_pushed), (4, 3, 3));
    assert_eq!(s.rejected, 1);
}

#[test]
fn bad_releases_change_nothing() {
    let mut rx = ZcrxRx::new(2 * 4096, 0).unwrap();
    rx.arm(1, 0).unwrap();
    data(&mut rx, 1, 0, 100).unwrap();
    data(&mut rx, 1, 100, 100).unwrap();
    rx.release(frag(0, 100)).unwrap();
    let before = rx.stats().clone();
    let bad = [
        (0, 100, true),
        (0, 99, false),
        (4096, 1, false),
        (8190, 4, false),
        (0, 0, false),
    ];
    for (off, len, twice) in bad {
        let f = frag(off, len);
        let want = if twice {
            RxError::AlreadyReleased(f)
        } else {
            RxError::NotHeld(f)
        };
        assert_eq!(rx.release(f), Err(want));
    }
    assert_eq!(rx.stats().rejected, before.rejected + 5);
    assert!(unchanged(&rx, &before));
    assert_eq!(rx.queued_refills(), 1, "no second refill entry");
    rx.release(frag(100, 100)).unwrap();
    assert_eq!(rx.take_refills(1).len(), 1);
    assert_eq!(rx.take_refills(1).len(), 1);
    // Wholly returned: a third release is refused too.
    let third = rx.release(frag(0, 100));
    assert_eq!(third, Err(RxError::NotHeld(frag(0, 100))));
    assert!(rx.take_refills(8).is_empty());
    rx.check().unwrap();
}

#[test]
fn impossible_completions_change_nothing() {
    let token = 2 << 48;
    let mut rx = ZcrxRx::new(2 * 4096, token).unwrap();
    rx.arm(1, 0).unwrap();
    let before = rx.stats().clone();
    let malformed = |res| RxError::Malformed { res, flags: MORE };
    let cases = [
        (rx.on_cqe(5, 10, MORE, token), RxError::UnknownConn(5)),
        (data(&mut rx, 1, 0, 10), RxError::WrongArea(0)),
        (
            data(&mut rx, 1, token | 8192, 1),
            RxError::OutOfArea(frag(8192, 1)),
        ),
        (
            data(&mut rx, 1, token | 4000, 200),
            RxError::CrossesBuffer(frag(4000, 200)),
        ),
        (rx.on_cqe(1, 0, MORE, 0), malformed(0)),
        (rx.on_cqe(1, -28, MORE, 0), malformed(-28)),
    ];
    for (got, want) in cases {
        assert_eq!(got, Err(want));
    }
    assert_eq!(rx.stats().rejected, 6);
    assert!(unchanged(&rx, &before));
    assert!(rx.is_armed(1));
    rx.check().unwrap();
}

#[test]
fn request_endings() {
    let mut rx = ZcrxRx::new(4 * 4096, 0).unwrap();
    rx.arm(1, 0).unwrap();
    assert_eq!(rx.arm(1, 0), Err(RxError::AlreadyArmed(1)));
    let rearm = |errno| Ok(RxEvent::Rearm { conn: 1, errno });
    assert_eq!(rx.on_cqe(1, -28, 0, 0), rearm(28));
    let after_end = data(&mut rx, 1, 0, 1);
    assert_eq!(
        after_end,
        Err(RxError::UnknownConn(1)),
        "ended: must re-arm"
    );
    rx.arm(1, 0).unwrap();
    assert_eq!(rx.on_cqe(1, -12, 0, 0), rearm(12));
    rx.arm(1, 0).unwrap();
    let reset = rx.on_cqe(1, -104, 0, 0);
    assert_eq!(
        reset,
        Ok(RxEvent::Error {
            conn: 1,
            errno: 104
        })
    );
    rx.arm(1, 0).unwrap();
    assert_eq!(rx.on_cqe(1, 0, 0, 0), Ok(RxEvent::Eof { conn: 1 }));
    // Single shot of 300 bytes: data CQEs, then res 0 once all arrived.
    rx.arm(2, 300).unwrap();
    data(&mut rx, 2, 0, 100).unwrap();
    assert_eq!(data(&mut rx, 2, 4096, 201), Err(RxError::OverLimit(2)));
    data(&mut rx, 2, 4096, 200).unwrap();
    assert_eq!(rx.on_cqe(2, 0, 0, 0), Ok(RxEvent::Done { conn: 2 }));
    // Short single shot: the stream ended first.
    rx.arm(3, 300).unwrap();
    data(&mut rx, 3, 8192, 10).unwrap();
    assert_eq!(rx.on_cqe(3, 0, 0, 0), Ok(RxEvent::Eof { conn: 3 }));
    // Data without F_MORE (not produced by 6.18): the fragment is still the application's.
    rx.arm(4, 0).unwrap();
    assert_eq!(rx.on_cqe(4, 5, 0, 3 * 4096), Ok(got(4, 3 * 4096, 5, false)));
    assert!(!rx.is_armed(4));
    let s = rx.stats();
    let ends = (s.rearms, s.enospc, s.errors, s.eofs, s.dones);
    assert_eq!(ends, (2, 1, 1, 2, 1));
    assert_eq!((s.fragments, s.held_bytes), (4, 315));
    rx.check().unwrap();
}

/// Ring full: entries stay queued, in order, and go out on later flushes; none lost.
#[test]
fn backpressure_keeps_entries() {
    let mut rx = ZcrxRx::new(8 * 4096, 0).unwrap();
    rx.arm(1, 0).unwrap();
    for i in 0..5u64 {
        data(&mut rx, 1, i * 4096, 10).unwrap();
        rx.release(frag(i * 4096, 10)).unwrap();
    }
    let mut out: Vec<u64> = rx.take_refills(2).iter().map(|e| e.off).collect();
    assert_eq!(rx.stats().refill_starved, 1);
    let mut room = 1;
    let pushed = rx.flush_refills(|e| {
        let ok = room > 0;
        if ok {
            out.push(e.off);
            room -= 1;
        }
        ok
    });
    assert_eq!(pushed, 1);
    assert_eq!((rx.queued_refills(), rx.stats().refill_starved), (2, 2));
    rx.check().unwrap();
    out.extend(rx.take_refills(10).iter().map(|e| e.off));
    assert_eq!(out, vec![0, 4096, 2 * 4096, 3 * 4096, 4 * 4096]);
    assert_eq!(rx.stats().refill_starved, 2, "empty queue: no starvation");
    assert_eq!(rx.stats().bufs_in_kernel, 8);
    rx.check().unwrap();
}

/// A simulated 6.18 kernel: buffers are filled in fragments, each CQE takes a user reference,
/// each refill entry must give back exactly one reference of a fragment the app released.
struct SimKernel {
    token: u64,
    /// Per buffer: planned fragment lengths not yet delivered, and user references.
    plan: Vec<(Vec<(u32, u32)>, u32)>,
    free: Vec<usize>,
    /// Fragments out: offset -> (len, released by the app).
    out: BTreeMap<u64, (u32, bool)>,
    ring: VecDeque<RefillEntry>,
    violations: Vec<String>,
    delivered: (u64, u64),
    consumed: u64,
}

impl SimKernel {
    fn consume(&mut self, n: usize) {
        for e in self
            .ring
            .drain(..n.min(self.ring.len()))
            .collect::<Vec<_>>()
        {
            let off = e.off & !IORING_ZCRX_AREA_MASK;
            match self.out.remove(&off) {
                Some((len, true))
                    if len == e.len && e.off & IORING_ZCRX_AREA_MASK == self.token =>
                {
                    let b = (off >> 12) as usize;
                    self.plan[b].1 -= 1;
                    if self.plan[b].1 == 0 && self.plan[b].0.is_empty() {
                        self.free.push(b);
                    }
                    self.consumed += 1;
                }
                other => self.violations.push(format!("refill {e:?} for {other:?}")),
            }
        }
    }

    /// Next fragment from a buffer being filled, or a fresh buffer cut into 1-4 fragments.
    fn next_frag(&mut self, r: &mut impl FnMut() -> u64) -> Option<Frag> {
        let b = match self.plan.iter().position(|p| !p.0.is_empty()) {
            Some(b) => b,
            None => {
                let b = self.free.pop()?;
                let (mut at, k) = (0u32, 1 + r() % 4);
                for _ in 0..k {
                    at += (r() % 64) as u32;
                    let len = 1 + (r() % 1000) as u32;
                    self.plan[b].0.push((at, len));
                    at += len;
                }
                b
            }
        };
        let (start, len) = self.plan[b].0.remove(0);
        self.plan[b].1 += 1;
        let off = ((b as u64) << 12) + u64::from(start);
        self.out.insert(off, (len, false));
        self.delivered = (self.delivered.0 + 1, self.delivered.1 + u64::from(len));
        Some(frag(off, len))
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    /// Random CQ batches over several connections, -ENOSPC/-ENOMEM endings that need a re-arm,
    /// a small refill ring drained lazily, injected duplicate CQEs, releases in random order:
    /// in the end the kernel gets every fragment's reference back exactly once.
    #[test]
    fn simulated_kernel_gets_every_buffer_back(
        nbufs in 2usize..12, conns in 1u64..4, cap in 1usize..8, steps in 10usize..150,
        seed in any::<u64>(),
    ) {
        let token = 1u64 << 48;
        let mut s = seed | 1;
        let mut r = move || { s ^= s << 13; s ^= s >> 7; s ^= s << 17; s };
        let mut rx = ZcrxRx::new(nbufs as u64 * 4096, token).unwrap();
        let mut k = SimKernel {
            token, plan: vec![(Vec::new(), 0); nbufs], free: (0..nbufs).rev().collect(),
            out: BTreeMap::new(), ring: VecDeque::new(), violations: Vec::new(),
            delivered: (0, 0), consumed: 0,
        };
        let mut armed = vec![false; conns as usize];
        let (mut held, mut rearms, mut enospc) = (Vec::<Frag>::new(), 0u64, 0u64);
        for step in 0..=steps {
            let last = step == steps;
            for c in 0..conns {
                if !armed[c as usize] && (last || r() % 3 == 0) {
                    rx.arm(c, 0).unwrap();
                    armed[c as usize] = true;
                }
            }
            // The kernel posts a batch of CQEs, interleaving connections.
            let mut cq = Vec::new();
            for _ in 0..(if last { 0 } else { r() % 8 }) {
                let c = r() % conns;
                if !armed[c as usize] { continue; }
                let x = r() % 16;
                let f = if x == 0 { None } else { k.next_frag(&mut r) };
                match f {
                    Some(f) => cq.push((c, f.len as i32, MORE, token | f.off, Some(f))),
                    None => {
                        let e = if x == 0 { 28 } else { 12 };
                        rearms += 1;
                        enospc += u64::from(e == 28);
                        armed[c as usize] = false;
                        cq.push((c, -e, 0, 0, None));
                    }
                }
            }
            for (c, res, flags, off, f) in cq {
                match rx.on_cqe(c, res, flags, off).unwrap() {
                    RxEvent::Data { conn, frag, more } => {
                        prop_assert_eq!((conn, Some(frag), more), (c, f, true));
                        held.push(frag);
                    }
                    RxEvent::Rearm { conn, errno } => prop_assert_eq!((conn, errno), (c, -res)),
                    ev => prop_assert!(false, "unexpected {:?}", ev),
                }
            }
            // A buggy kernel repeats a CQE for bytes the app holds: refused, nothing changes.
            if !held.is_empty() && r() % 5 == 0 {
                let f = held[(r() % held.len() as u64) as usize];
                let c = (0..conns).find(|&c| armed[c as usize]);
                let before = rx.stats().clone();
                let got = rx.on_cqe(c.unwrap_or(0), f.len as i32, MORE, token | f.off);
                let want = c.map_or(RxError::UnknownConn(0), |_| RxError::Duplicate(f));
                prop_assert_eq!(got, Err(want));
                prop_assert!(unchanged(&rx, &before));
            }
            // The app releases some (all at the end) in random order, and double-releases one.
            let mut i = 0;
            while i < held.len() {
                if last || r() % 3 == 0 {
                    let f = held.swap_remove(i);
                    rx.release(f).unwrap();
                    k.out.get_mut(&f.off).unwrap().1 = true;
                    if r() % 7 == 0 {
                        prop_assert!(rx.release(f).is_err());
                    }
                } else {
                    i += 1;
                }
            }
            // Flush into whatever room the ring has; the kernel consumes lazily.
            loop {
                let room = cap - k.ring.len();
                let room = if last { room } else { room.min((r() % 3) as usize) };
                k.ring.extend(rx.take_refills(room));
                k.consume(if last { cap } else { (r() % 3) as usize });
                rx.check().map_err(TestCaseError::fail)?;
                if !last || (rx.queued_refills() == 0 && k.ring.is_empty()) { break; }
            }
        }
        // The peer closes: every (re-armed) request ends with res 0.
        for c in 0..conns {
            prop_assert_eq!(rx.on_cqe(c, 0, 0, 0), Ok(RxEvent::Eof { conn: c }));
        }
        prop_assert!(k.violations.is_empty(), "{:?}", k.violations);
        prop_assert!(k.out.is_empty(), "references never returned: {:?}", k.out);
        prop_assert!(k.plan.iter().all(|p| p.1 == 0));
        let st = rx.stats();
        prop_assert_eq!((st.fragments, st.bytes), k.delivered);
        prop_assert_eq!((st.releases, st.released_bytes), k.delivered);
        prop_assert_eq!(st.refills_pushed, k.consumed);
        let gauges = (st.held_fragments, st.queued_refills, st.bufs_in_kernel);
        prop_assert_eq!(gauges, (0, 0, nbufs as u64));
        prop_assert_eq!((st.rearms, st.enospc, st.errors, st.eofs), (rearms, enospc, 0, conns));
    }
}
