use super::*;
use crate::pattern::Pattern;
use proptest::prelude::*;

mod tx;

/// xorshift64: the simulations' only source of choices, seeded by proptest.
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
    fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

fn cfg(buf: u32, n: u16) -> StagingConfig {
    StagingConfig::new(buf, n)
}

/// Nothing but `rejected` changed.
fn unchanged(now: &StagingStats, before: &StagingStats) -> bool {
    let rejected = before.rejected + 1;
    StagingStats {
        rejected,
        ..before.clone()
    } == *now
}

#[test]
fn config_is_validated() {
    let bad = |e| Err::<(), _>(StagingError::BadConfig(e));
    assert_eq!(
        StagingRx::new(&cfg(0, 4), 64).map(drop),
        bad("no host buffer space")
    );
    assert_eq!(
        StagingRx::new(&cfg(64, 0), 64).map(drop),
        bad("no host buffer space")
    );
    let zero_copies = cfg(64, 4).with_max_copies(0);
    assert_eq!(
        StagingRx::new(&zero_copies, 64).map(drop),
        bad("a limit in flight of 0")
    );
    let small = StagingRx::new(&cfg(64, 4), 63).map(drop);
    assert_eq!(small, bad("GPU ring smaller than a host buffer"));
    let zero_sends = cfg(64, 4).with_max_sends(0);
    assert_eq!(
        StagingTx::new(&zero_sends).map(drop),
        bad("a limit in flight of 0")
    );
    assert!(StagingRx::new(&cfg(64, 4), 64).is_ok() && StagingTx::new(&cfg(1, 1)).is_ok());
    let c = cfg(4096, 8);
    assert_eq!((c.max_copies, c.max_sends), (8, 8));
}

/// A chunk crossing the end of the ring is two copies; its buffer goes back when both are
/// done, in either order; the second waits until the ring bytes it overwrites are released.
#[test]
fn wrapping_chunk_is_two_copies_and_waits_for_space() {
    let mut rx = StagingRx::new(&cfg(64, 4), 128).unwrap();
    rx.on_recv(0, 50).unwrap();
    rx.on_recv(1, 64).unwrap();
    let a = rx.next_copy().unwrap();
    let b = rx.next_copy().unwrap();
    assert_eq!((a.host_buf, a.dev_off, a.len, a.stream_off), (0, 0, 50, 0));
    assert_eq!((b.host_buf, b.host_off, b.dev_off, b.len), (1, 0, 50, 64));
    assert_eq!(rx.on_copy_done(b.copy), Ok(Some(1)));
    assert_eq!(rx.delivered(), 0, "the bytes before it are not copied yet");
    assert_eq!(rx.on_copy_done(a.copy), Ok(Some(0)));
    assert_eq!(rx.delivered(), 114);
    rx.on_recv(2, 64).unwrap();
    let c1 = rx.next_copy().unwrap();
    assert_eq!(
        (c1.host_buf, c1.host_off, c1.dev_off, c1.len),
        (2, 0, 114, 14)
    );
    assert_eq!(
        rx.next_copy(),
        None,
        "stream 128..178 would overwrite unreleased 0..50"
    );
    rx.release(50).unwrap();
    let c2 = rx.next_copy().unwrap();
    assert_eq!(
        (c2.host_buf, c2.host_off, c2.dev_off, c2.len),
        (2, 14, 0, 50)
    );
    assert_eq!(c2.stream_off, 128);
    assert_eq!(
        rx.on_copy_done(c2.copy),
        Ok(None),
        "14 bytes of buffer 2 still uncopied"
    );
    assert_eq!((rx.delivered(), rx.held_host_bufs()), (114, 1));
    assert_eq!(rx.on_copy_done(c1.copy), Ok(Some(2)));
    assert_eq!(rx.delivered(), 178);
    assert_eq!(rx.readable(), [(50, 78), (0, 50)]);
    rx.release(100).unwrap();
    assert_eq!(rx.readable(), [(22, 28), (0, 0)]);
    let s = rx.stats();
    assert_eq!(
        (s.copies_issued, s.copies_completed, s.bytes_copied),
        (4, 4, 178)
    );
    assert_eq!((s.max_copies_in_flight, s.host_bufs_held), (2, 0));
    rx.check().unwrap();
}

/// Copies complete out of order; delivery moves only over a gapless prefix; buffers go back
/// as soon as their own copy is done.
#[test]
fn delivery_is_in_order() {
    let mut rx = StagingRx::new(&cfg(10, 3), 30).unwrap();
    let mut cmds = Vec::new();
    for (h, len) in [(0, 10), (1, 5), (2, 7)] {
        rx.on_recv(h, len).unwrap();
        cmds.push(rx.next_copy().unwrap());
    }
    assert_eq!(rx.on_copy_done(cmds[2].copy), Ok(Some(2)));
    assert_eq!(rx.delivered(), 0);
    assert_eq!(rx.on_copy_done(cmds[0].copy), Ok(Some(0)));
    assert_eq!(rx.delivered(), 10);
    assert_eq!(rx.on_copy_done(cmds[1].copy), Ok(Some(1)));
    assert_eq!(rx.delivered(), 22);
    rx.check().unwrap();
}

/// Back-pressure: `max_copies` in flight, then a full ring; each episode counted once.
#[test]
fn pause_engages_and_episodes_are_counted() {
    let c = cfg(64, 8).with_max_copies(2);
    let mut rx = StagingRx::new(&c, 256).unwrap();
    rx.on_recv(0, 64).unwrap();
    let a = rx.next_copy().unwrap();
    assert_eq!(rx.pause(), None);
    rx.on_recv(1, 64).unwrap();
    let b = rx.next_copy().unwrap();
    assert_eq!(rx.pause(), Some(Pause::CopiesInFlight));
    assert!(!rx.can_receive());
    // A receive already under way is queued, not refused; its copy waits.
    rx.on_recv(2, 64).unwrap();
    assert_eq!(rx.next_copy(), None);
    assert_eq!(rx.on_copy_done(a.copy), Ok(Some(0)));
    assert_eq!(rx.pause(), None);
    let c2 = rx.next_copy().unwrap();
    assert_eq!((c2.host_buf, c2.stream_off), (2, 128));
    assert_eq!(rx.pause(), Some(Pause::CopiesInFlight));
    assert_eq!(rx.on_copy_done(b.copy), Ok(Some(1)));
    assert_eq!(rx.on_copy_done(c2.copy), Ok(Some(2)));
    assert_eq!(
        rx.pause(),
        None,
        "192 of 256 bytes taken: room for one more buffer"
    );
    rx.on_recv(3, 64).unwrap();
    assert_eq!(rx.pause(), Some(Pause::RingFull));
    let c3 = rx.next_copy().unwrap();
    assert_eq!((c3.dev_off, c3.len), (192, 64));
    assert_eq!(rx.on_copy_done(c3.copy), Ok(Some(3)));
    assert_eq!(
        rx.pause(),
        Some(Pause::RingFull),
        "delivered but not released"
    );
    rx.release(192).unwrap();
    assert_eq!(rx.pause(), None);
    rx.on_recv(4, 64).unwrap();
    rx.on_recv(5, 64).unwrap();
    assert_eq!(rx.pause(), None);
    rx.on_recv(6, 64).unwrap();
    assert_eq!(rx.pause(), Some(Pause::RingFull));
    let s = rx.stats();
    assert_eq!((s.copy_limited, s.ring_full), (2, 2));
    rx.check().unwrap();
}

#[test]
fn rx_errors_change_nothing() {
    let mut rx = StagingRx::new(&cfg(64, 4), 256).unwrap();
    rx.on_recv(0, 64).unwrap();
    rx.on_recv(1, 10).unwrap();
    let a = rx.next_copy().unwrap();
    let b = rx.next_copy().unwrap();
    rx.on_copy_done(a.copy).unwrap();
    let too_large = StagingError::ChunkTooLarge {
        host_buf: 2,
        len: 65,
        max: 64,
    };
    let past = StagingError::ReleasePastDelivered {
        asked: 65,
        deliverable: 64,
    };
    type Case = fn(&mut StagingRx) -> Result<(), StagingError>;
    let cases: [(Case, StagingError); 8] = [
        (|rx| rx.on_recv(4, 1), StagingError::UnknownHostBuf(4)),
        (|rx| rx.on_recv(2, 0), StagingError::EmptyChunk(2)),
        (|rx| rx.on_recv(2, 65), too_large),
        (|rx| rx.on_recv(1, 5), StagingError::HostBufHeld(1)),
        (
            |rx| rx.on_copy_done(CopyId(2)).map(drop),
            StagingError::UnknownCopy(CopyId(2)),
        ),
        (
            |rx| rx.on_copy_done(CopyId(0)).map(drop),
            StagingError::CopyAlreadyDone(CopyId(0)),
        ),
        (
            |rx| rx.on_copy_failed(CopyId(0)).map(drop),
            StagingError::CopyAlreadyDone(CopyId(0)),
        ),
        (|rx| rx.release(65), past),
    ];
    for (call, want) in cases {
        let before = rx.stats().clone();
        let (delivered, received) = (rx.delivered(), rx.received());
        assert_eq!(call(&mut rx), Err(want));
        assert!(unchanged(rx.stats(), &before), "{want}");
        assert_eq!((rx.delivered(), rx.received()), (delivered, received));
        rx.check().unwrap();
    }
    // A completion of a copy still behind an undelivered one is refused the second time too.
    rx.on_recv(2, 5).unwrap();
    let c = rx.next_copy().unwrap();
    rx.on_copy_done(c.copy).unwrap();
    assert_eq!(
        rx.on_copy_done(c.copy),
        Err(StagingError::CopyAlreadyDone(c.copy))
    );
    // Input after a stop: refused with the cause; completions still accepted.
    let cause = Cause::CopyFailed(b.copy);
    assert_eq!(
        rx.on_copy_failed(b.copy),
        Ok(vec![1]),
        "2 went back when copied"
    );
    assert_eq!(rx.on_recv(3, 1), Err(StagingError::Stopped(cause)));
    assert_eq!(rx.next_copy(), None);
    assert_eq!(
        (rx.pause(), rx.stopped()),
        (Some(Pause::Stopped), Some(cause))
    );
    assert_eq!(rx.abort(), Vec::<u16>::new());
    assert_eq!(rx.stats().rejected, 10);
}

#[test]
fn error_messages_are_one_line() {
    let all = [
        StagingError::BadConfig("no host buffer space"),
        StagingError::UnknownCopy(CopyId(7)),
        StagingError::CopyAlreadyDone(CopyId(7)),
        StagingError::UnknownHostBuf(9),
        StagingError::HostBufHeld(9),
        StagingError::NotSending(9),
        StagingError::EmptyChunk(9),
        StagingError::ChunkTooLarge {
            host_buf: 1,
            len: 2,
            max: 1,
        },
        StagingError::ReleasePastDelivered {
            asked: 2,
            deliverable: 1,
        },
        StagingError::BadSource {
            dev_off: u64::MAX,
            len: 2,
        },
        StagingError::Stopped(Cause::CopyFailed(CopyId(3))),
        StagingError::Stopped(Cause::SendFailed(4)),
        StagingError::Stopped(Cause::Aborted),
    ];
    let mut seen = std::collections::BTreeSet::new();
    for e in all {
        let msg = e.to_string();
        assert!(
            !msg.is_empty() && !msg.contains('\n') && !msg.ends_with('.'),
            "{msg:?}"
        );
        assert!(seen.insert(msg), "two errors read the same");
        let _: &dyn std::error::Error = &e;
    }
    assert_eq!(
        StagingError::Stopped(Cause::CopyFailed(CopyId(3))).to_string(),
        "pipeline stopped (copy 3 failed): input refused"
    );
}

/// A failure returns what no copy reads; each in-flight copy returns its buffer at its end
/// (a split chunk's buffer after its last piece), late failures included; nothing twice.
#[test]
fn rx_failure_returns_every_buffer_once() {
    let mut rx = StagingRx::new(&cfg(64, 5), 128).unwrap();
    rx.on_recv(0, 60).unwrap();
    let a = rx.next_copy().unwrap();
    rx.on_copy_done(a.copy).unwrap();
    rx.on_recv(1, 64).unwrap(); // 60..124
    rx.on_recv(2, 64).unwrap(); // 124..188: wraps, second piece waits for space
    rx.on_recv(3, 10).unwrap(); // waits
    let b = rx.next_copy().unwrap();
    let c1 = rx.next_copy().unwrap();
    assert_eq!((c1.host_buf, c1.len), (2, 4));
    assert_eq!(rx.next_copy(), None);
    assert_eq!(rx.on_recv(0, 1), Ok(()));
    let idle = rx.on_copy_failed(b.copy).unwrap();
    assert_eq!(idle, vec![0, 1, 3], "2 is still read by copy {}", c1.copy.0);
    assert_eq!(rx.held_host_bufs(), 1);
    assert_eq!(rx.on_copy_done(c1.copy), Ok(Some(2)));
    assert_eq!(rx.delivered(), 60, "stops before the failed bytes");
    let s = rx.stats();
    assert_eq!(
        (s.copies_failed, s.late_completions, s.host_bufs_held),
        (1, 1, 0)
    );
    rx.check().unwrap();

    // A late failure after an abort returns its buffer too.
    let mut rx = StagingRx::new(&cfg(8, 2), 16).unwrap();
    rx.on_recv(0, 8).unwrap();
    rx.on_recv(1, 8).unwrap();
    let (x, y) = (rx.next_copy().unwrap(), rx.next_copy().unwrap());
    assert_eq!(rx.abort(), Vec::<u16>::new());
    assert_eq!(rx.on_copy_failed(y.copy), Ok(vec![1]));
    assert_eq!(rx.on_copy_done(x.copy), Ok(Some(0)));
    assert_eq!(rx.delivered(), 8);
    assert_eq!(rx.stopped(), Some(Cause::Aborted));
    rx.check().unwrap();
}

/// The simulated world of a receive pipeline: a socket that fills host buffers with the
/// pattern, an engine that copies host to GPU when a copy completes, the application.
struct RxSim {
    pat: Pattern,
    ring: u64,
    max_copies: u32,
    host: Vec<Vec<u8>>,
    /// While the pipeline holds a buffer: (stream offset, length, bytes copied, copies reading).
    owned: Vec<Option<(u64, u32, u32, u32)>>,
    pool: Vec<u16>,
    gpu: Vec<u8>,
    /// Stream position each ring byte was last given to by an issued copy.
    gpu_pos: Vec<Option<u64>>,
    engine: Vec<CopyCmd>,
    sent: u64,
    copied: u64,
    released: u64,
    delivered: u64,
}

impl RxSim {
    fn new(seed: u64, buf: u32, n: u16, ring: u64, max_copies: u32) -> RxSim {
        RxSim {
            pat: Pattern::new(seed),
            ring,
            max_copies,
            host: vec![vec![0; buf as usize]; usize::from(n)],
            owned: vec![None; usize::from(n)],
            pool: (0..n).collect(),
            gpu: vec![0; ring as usize],
            gpu_pos: vec![None; ring as usize],
            engine: Vec::new(),
            sent: 0,
            copied: 0,
            released: 0,
            delivered: 0,
        }
    }

    /// The socket fills a random free buffer with 1..=buffer size stream bytes.
    fn recv(&mut self, rx: &mut StagingRx, r: &mut Rng) -> Result<bool, TestCaseError> {
        if self.pool.is_empty() {
            return Ok(false);
        }
        let buf = self.host[0].len() as u64;
        let room = self.ring.saturating_sub(self.sent - self.released);
        prop_assert!(
            !rx.can_receive() || room >= buf,
            "receiving with {} bytes free",
            room
        );
        let h = self
            .pool
            .swap_remove(r.below(self.pool.len() as u64) as usize);
        let len = 1 + r.below(buf) as u32;
        self.pat
            .fill(self.sent, &mut self.host[usize::from(h)][..len as usize]);
        if let Some(cause) = rx.stopped() {
            prop_assert_eq!(rx.on_recv(h, len), Err(StagingError::Stopped(cause)));
            self.pool.push(h); // still the caller's
            return Ok(false);
        }
        rx.on_recv(h, len)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        self.owned[usize::from(h)] = Some((self.sent, len, 0, 0));
        self.sent += u64::from(len);
        Ok(true)
    }

    /// Takes every copy the pipeline issues, checking where it reads and writes.
    fn issue(&mut self, rx: &mut StagingRx) -> Result<(), TestCaseError> {
        while let Some(c) = rx.next_copy() {
            let Some((off, len, _, reading)) = self.owned[usize::from(c.host_buf)].as_mut() else {
                return Err(TestCaseError::fail(format!(
                    "{c:?} reads a buffer not held"
                )));
            };
            prop_assert!(c.len > 0 && c.host_off + c.len <= *len, "{:?}", c);
            prop_assert_eq!(c.stream_off, *off + u64::from(c.host_off));
            prop_assert!(
                c.dev_off + u64::from(c.len) <= self.ring,
                "{:?} crosses the ring",
                c
            );
            prop_assert_eq!(c.dev_off, c.stream_off % self.ring);
            *reading += 1;
            for i in 0..u64::from(c.len) {
                let b = (c.dev_off + i) as usize;
                if let Some(p) = self.gpu_pos[b].filter(|&p| p >= self.released) {
                    prop_assert!(false, "{:?} overwrites unreleased stream byte {}", c, p);
                }
                self.gpu_pos[b] = Some(c.stream_off + i);
            }
            self.engine.push(c);
            prop_assert!(self.engine.len() as u32 <= self.max_copies);
        }
        Ok(())
    }

    /// A buffer came back: held, no copy reads it, and (unless stopped) wholly copied.
    fn give_back(&mut self, h: u16, stopped: bool) -> Result<(), TestCaseError> {
        let held = self.owned[usize::from(h)].take();
        let Some((_, len, copied, reading)) = held else {
            return Err(TestCaseError::fail(format!(
                "buffer {h} returned but not held"
            )));
        };
        prop_assert_eq!(reading, 0, "buffer {} returned while a copy reads it", h);
        prop_assert!(
            stopped || copied == len,
            "buffer {} returned before its copies",
            h
        );
        self.pool.push(h);
        Ok(())
    }

    /// The engine ends copy `i` of its queue: done (the bytes land in GPU memory) or failed.
    fn complete(&mut self, rx: &mut StagingRx, i: usize, ok: bool) -> Result<(), TestCaseError> {
        let c = self.engine.swap_remove(i);
        let h = usize::from(c.host_buf);
        if let Some((_, _, copied, reading)) = self.owned[h].as_mut() {
            *reading -= 1;
            *copied += c.len * u32::from(ok);
        }
        let was_stopped = rx.stopped().is_some();
        let back = if ok {
            let (d, s) = (c.dev_off as usize, c.host_off as usize);
            let n = c.len as usize;
            self.gpu[d..d + n].copy_from_slice(&self.host[h][s..s + n]);
            self.copied += u64::from(c.len);
            rx.on_copy_done(c.copy).map(|b| b.into_iter().collect())
        } else {
            rx.on_copy_failed(c.copy)
        };
        let back: Vec<u16> = back.map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(ok || rx.stopped().is_some());
        for b in back {
            self.give_back(b, !ok || was_stopped)?;
        }
        Ok(())
    }

    /// The application reads what was delivered (checking it) and releases some or all of it.
    fn app(&mut self, rx: &mut StagingRx, r: &mut Rng, all: bool) -> Result<(), TestCaseError> {
        let d = rx.delivered();
        prop_assert!(d >= self.delivered, "delivered went back");
        prop_assert!(d <= self.copied && d <= self.sent);
        let mut got = Vec::new();
        for (at, len) in rx.readable() {
            got.extend_from_slice(&self.gpu[at as usize..(at + len) as usize]);
        }
        prop_assert_eq!(got.len() as u64, d - self.released);
        // All unreleased bytes, read before: a later copy must not have overwritten them.
        if let Err(m) = self.pat.verify(self.released, &got) {
            prop_assert!(false, "{}", m);
        }
        self.delivered = d;
        let n = if all {
            d - self.released
        } else {
            r.below(d - self.released + 1)
        };
        rx.release(n)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        self.released += n;
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    /// A socket delivering 1 B..buffer-sized chunks (a few even while paused), an engine that
    /// completes copies out of order, stalls until back-pressure engages, and (mode 1) fails a
    /// copy or (mode 2) is aborted, an application that releases at random. Every delivered
    /// byte read from the simulated GPU ring is the stream's; no copy overwrites unreleased
    /// bytes; every host buffer comes back exactly once.
    #[test]
    fn rx_simulated_pipeline(
        buf in 1u32..48, nbufs in 1u16..8, ring_extra in 0u64..100, max_copies in 1u32..6,
        steps in 10usize..160, mode in 0u8..3, seed in any::<u64>(),
    ) {
        let mut r = Rng::new(seed);
        let ring = u64::from(buf) * (1 + r.below(4)) + ring_extra;
        let c = cfg(buf, nbufs).with_max_copies(max_copies);
        let mut rx = StagingRx::new(&c, ring).unwrap();
        let mut sim = RxSim::new(seed, buf, nbufs, ring, max_copies);
        let (mut stall, mut stalls_engaged) = (0u32, 0u32);
        let fail_at = r.below(steps as u64) as usize;
        for step in 0..steps {
            if mode != 0 && step >= fail_at && rx.stopped().is_none() {
                if mode == 2 {
                    for b in rx.abort() { sim.give_back(b, true)?; }
                } else if !sim.engine.is_empty() {
                    let i = r.below(sim.engine.len() as u64) as usize;
                    sim.complete(&mut rx, i, false)?;
                }
            }
            if stall == 0 && r.one_in(8) {
                stall = 2 + r.below(6) as u32;
            }
            if stall > 0 {
                // The engine withholds; the socket keeps going while it may.
                stall -= 1;
                sim.issue(&mut rx)?; // the release at the end of the last step made room
                while rx.can_receive() && sim.recv(&mut rx, &mut r)? {
                    sim.issue(&mut rx)?;
                }
                let engaged = rx.pause().is_some();
                let limited = matches!(rx.pause(), Some(Pause::RingFull | Pause::CopiesInFlight));
                prop_assert!(engaged || (sim.pool.is_empty() && u32::from(nbufs) < max_copies),
                    "no back-pressure: {} copies in flight, {} of {} ring bytes taken",
                    rx.copies_in_flight(), sim.sent - sim.released, ring);
                stalls_engaged += u32::from(limited);
            } else {
                for _ in 0..r.below(4) {
                    if !sim.engine.is_empty() {
                        let i = r.below(sim.engine.len() as u64) as usize;
                        let ok = rx.stopped().is_none() || !r.one_in(4);
                        sim.complete(&mut rx, i, ok)?;
                    }
                }
                for _ in 0..r.below(4) {
                    // A receive already posted may land while paused.
                    if rx.can_receive() || r.one_in(6) {
                        sim.recv(&mut rx, &mut r)?;
                    }
                }
            }
            sim.issue(&mut rx)?;
            prop_assert!(rx.copies_in_flight() <= max_copies);
            sim.app(&mut rx, &mut r, false)?;
            rx.check().map_err(TestCaseError::fail)?;
        }
        // The end: the engine completes everything, the application releases everything.
        while !sim.engine.is_empty() || (rx.stopped().is_none() && rx.delivered() < sim.sent) {
            sim.issue(&mut rx)?;
            if !sim.engine.is_empty() {
                let i = r.below(sim.engine.len() as u64) as usize;
                let ok = rx.stopped().is_none() || !r.one_in(3);
                sim.complete(&mut rx, i, ok)?;
            }
            sim.app(&mut rx, &mut r, true)?;
            rx.check().map_err(TestCaseError::fail)?;
        }
        sim.app(&mut rx, &mut r, true)?;
        prop_assert_eq!(sim.pool.len(), usize::from(nbufs), "host buffers not returned");
        prop_assert_eq!(rx.held_host_bufs(), 0);
        let s = rx.stats();
        prop_assert_eq!(s.copies_issued, s.copies_completed + s.copies_failed);
        prop_assert!(s.ring_full + s.copy_limited >= u64::from(stalls_engaged.min(1)));
        prop_assert!(s.max_copies_in_flight <= u64::from(max_copies));
        if rx.stopped().is_none() {
            prop_assert_eq!((rx.delivered(), s.bytes_copied, s.bytes_in), (sim.sent, sim.sent, sim.sent));
            prop_assert_eq!(s.copies_failed, 0);
        } else {
            prop_assert!(rx.delivered() <= sim.sent);
        }
    }
}
