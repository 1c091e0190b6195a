use super::*;
use std::collections::BTreeMap;

fn ids(cmds: &[CopyCmd]) -> Vec<(u16, u64, u32, u64)> {
    cmds.iter()
        .map(|c| (c.host_buf, c.dev_off, c.len, c.stream_off))
        .collect()
}

/// Chunks go out in stream order whatever order their copies end in; a buffer is copied into
/// again only after its send's notification; a chunk never spans two pushed ranges.
#[test]
fn sends_in_order_and_reuses_buffers_after_notification() {
    let mut tx = StagingTx::new(&cfg(100, 2).with_max_copies(4)).unwrap();
    assert_eq!(
        (tx.next_copy(), tx.pause()),
        (None, None),
        "nothing to send"
    );
    tx.push_source(1000, 300).unwrap();
    let (a, b) = (tx.next_copy().unwrap(), tx.next_copy().unwrap());
    assert_eq!(ids(&[a, b]), [(0, 1000, 100, 0), (1, 1100, 100, 100)]);
    assert_eq!((a.copy, a.host_off, b.copy), (CopyId(0), 0, CopyId(1)));
    assert_eq!(
        (tx.next_copy(), tx.pause()),
        (None, Some(Pause::NoHostBuffer))
    );
    assert_eq!(tx.on_copy_done(b.copy), Ok(None));
    assert_eq!(tx.next_send(), None, "chunk 0 is not copied yet");
    assert_eq!(tx.on_copy_done(a.copy), Ok(None));
    let s0 = tx.next_send().unwrap();
    let s1 = tx.next_send().unwrap();
    assert_eq!((s0.host_buf, s0.len, s0.stream_off), (0, 100, 0));
    assert_eq!((s1.host_buf, s1.len, s1.stream_off), (1, 100, 100));
    assert_eq!(
        (tx.next_send(), tx.next_copy()),
        (None, None),
        "both buffers being sent"
    );
    assert_eq!(tx.on_send_done(1), Ok(None));
    assert_eq!(tx.confirmed(), 0, "chunk 0 not confirmed yet");
    let c = tx.next_copy().unwrap();
    assert_eq!((c.host_buf, c.dev_off, c.stream_off), (1, 1200, 200));
    assert_eq!(tx.on_send_done(0), Ok(None));
    assert_eq!(tx.confirmed(), 200);
    tx.on_copy_done(c.copy).unwrap();
    let s2 = tx.next_send().unwrap();
    assert!(!tx.is_finished());
    tx.on_send_done(s2.host_buf).unwrap();
    assert!(tx.is_finished() && tx.confirmed() == 300 && tx.free_host_bufs() == 2);
    // Adjacent ranges merge; others do not, and no chunk spans two.
    tx.push_source(5000, 50).unwrap();
    tx.push_source(5050, 30).unwrap();
    tx.push_source(9000, 20).unwrap();
    tx.push_source(9999, 0).unwrap();
    let (d, e) = (tx.next_copy().unwrap(), tx.next_copy().unwrap());
    assert_eq!(ids(&[d, e]), [(1, 5000, 80, 300), (0, 9000, 20, 380)]);
    let s = tx.stats();
    assert_eq!(
        (
            s.starved,
            s.bytes_in,
            s.copies_issued,
            s.max_copies_in_flight
        ),
        (1, 400, 5, 2)
    );
    assert_eq!(
        (s.sends_completed, s.bytes_sent, s.host_bufs_held),
        (3, 300, 2)
    );
    tx.check().unwrap();
}

/// The copy and send limits hold back; each episode is counted once.
#[test]
fn limits_hold_back_copies_and_sends() {
    let c = cfg(10, 8).with_max_copies(2).with_max_sends(1);
    let mut tx = StagingTx::new(&c).unwrap();
    tx.push_source(0, 50).unwrap();
    let a = tx.next_copy().unwrap();
    let b = tx.next_copy().unwrap();
    assert_eq!(
        (tx.next_copy(), tx.pause()),
        (None, Some(Pause::CopiesInFlight))
    );
    tx.on_copy_done(a.copy).unwrap();
    tx.on_copy_done(b.copy).unwrap();
    let s0 = tx.next_send().unwrap();
    assert_eq!(tx.next_send(), None, "one send at a time");
    assert_eq!(tx.stats().send_limited, 1);
    tx.on_send_done(s0.host_buf).unwrap();
    let s1 = tx.next_send().unwrap();
    assert_eq!(s1.stream_off, 10);
    let st = tx.stats();
    assert_eq!((st.copy_limited, st.send_limited, st.starved), (1, 1, 0));
    tx.check().unwrap();
}

#[test]
fn tx_errors_change_nothing() {
    let mut tx = StagingTx::new(&cfg(10, 4)).unwrap();
    tx.push_source(0, 40).unwrap();
    let a = tx.next_copy().unwrap(); // host 0
    let b = tx.next_copy().unwrap(); // host 1
    tx.on_copy_done(a.copy).unwrap();
    tx.on_copy_done(b.copy).unwrap();
    let s0 = tx.next_send().unwrap();
    tx.on_send_done(s0.host_buf).unwrap(); // host 0 free again
    let c = tx.next_copy().unwrap(); // host 0, copying
    let bad_source = StagingError::BadSource {
        dev_off: u64::MAX,
        len: 1,
    };
    type Case = fn(&mut StagingTx) -> Result<(), StagingError>;
    let cases: [(Case, StagingError); 10] = [
        (
            |t| t.on_copy_done(CopyId(3)).map(drop),
            StagingError::UnknownCopy(CopyId(3)),
        ),
        (
            |t| t.on_copy_done(CopyId(0)).map(drop),
            StagingError::CopyAlreadyDone(CopyId(0)),
        ),
        (
            |t| t.on_copy_done(CopyId(1)).map(drop),
            StagingError::CopyAlreadyDone(CopyId(1)),
        ),
        (
            |t| t.on_copy_failed(CopyId(1)).map(drop),
            StagingError::CopyAlreadyDone(CopyId(1)),
        ),
        (
            |t| t.on_send_done(4).map(drop),
            StagingError::UnknownHostBuf(4),
        ),
        (|t| t.on_send_done(0).map(drop), StagingError::NotSending(0)),
        (|t| t.on_send_done(1).map(drop), StagingError::NotSending(1)),
        (|t| t.on_send_done(2).map(drop), StagingError::NotSending(2)),
        (
            |t| t.on_send_failed(3).map(drop),
            StagingError::NotSending(3),
        ),
        (|t| t.push_source(u64::MAX, 1), bad_source),
    ];
    for (call, want) in cases {
        let before = tx.stats().clone();
        let (pushed, confirmed) = (tx.pushed(), tx.confirmed());
        assert_eq!(call(&mut tx), Err(want));
        assert!(unchanged(tx.stats(), &before), "{want}");
        assert_eq!((tx.pushed(), tx.confirmed()), (pushed, confirmed));
        tx.check().unwrap();
    }
    // After the stop: input refused, completions of what was in flight still taken.
    let mut back = tx.abort();
    back.sort_unstable();
    assert_eq!(back, [1, 2, 3], "0 is still being copied into");
    let stopped = StagingError::Stopped(Cause::Aborted);
    assert_eq!(tx.push_source(100, 1), Err(stopped));
    assert_eq!((tx.next_copy(), tx.next_send()), (None, None));
    assert_eq!(tx.on_copy_done(c.copy), Ok(Some(0)));
    assert_eq!(
        tx.on_send_done(0),
        Err(StagingError::NotSending(0)),
        "returned"
    );
    assert_eq!((tx.held_host_bufs(), tx.stats().rejected), (0, 12));
    tx.check().unwrap();
}

/// A failed send stops the pipeline: free and copied buffers come back at once, buffers in a
/// copy or send at its end; `confirmed` never passes the failed chunk.
#[test]
fn failure_returns_every_buffer_and_reports_confirmed_bytes() {
    let mut tx = StagingTx::new(&cfg(10, 6)).unwrap();
    tx.push_source(0, 100).unwrap();
    let copies: Vec<CopyCmd> = std::iter::from_fn(|| tx.next_copy()).collect();
    assert_eq!(copies.len(), 6);
    for c in &copies[..5] {
        tx.on_copy_done(c.copy).unwrap();
    }
    let sends: Vec<SendCmd> = std::iter::from_fn(|| tx.next_send()).collect();
    assert_eq!(sends.len(), 5);
    tx.on_send_done(sends[2].host_buf).unwrap();
    tx.on_send_done(sends[0].host_buf).unwrap();
    assert_eq!(tx.confirmed(), 10);
    let mut back = tx.on_send_failed(sends[1].host_buf).unwrap();
    back.sort_unstable();
    let mut want = vec![sends[0].host_buf, sends[1].host_buf, sends[2].host_buf];
    want.sort_unstable();
    assert_eq!(back, want);
    assert_eq!(tx.stopped(), Some(Cause::SendFailed(sends[1].host_buf)));
    assert_eq!(
        tx.on_send_done(sends[3].host_buf),
        Ok(Some(sends[3].host_buf))
    );
    assert_eq!(
        tx.on_send_failed(sends[4].host_buf),
        Ok(vec![sends[4].host_buf])
    );
    assert_eq!(
        tx.on_copy_done(copies[5].copy),
        Ok(Some(copies[5].host_buf))
    );
    assert_eq!(
        (tx.confirmed(), tx.held_host_bufs()),
        (10, 0),
        "chunk 1 failed"
    );
    let s = tx.stats();
    assert_eq!(
        (s.sends_failed, s.late_completions, s.bytes_sent),
        (2, 3, 30)
    );
    tx.check().unwrap();

    // A failed copy: the copied chunk's buffer and the free ones come back at once.
    let mut tx = StagingTx::new(&cfg(10, 3)).unwrap();
    tx.push_source(0, 20).unwrap();
    let (a, b) = (tx.next_copy().unwrap(), tx.next_copy().unwrap());
    tx.on_copy_done(b.copy).unwrap();
    let mut back = tx.on_copy_failed(a.copy).unwrap();
    back.sort_unstable();
    assert_eq!(back, [0, 1, 2]);
    assert_eq!(tx.stopped(), Some(Cause::CopyFailed(a.copy)));
    assert_eq!(
        tx.push_source(0, 1),
        Err(StagingError::Stopped(Cause::CopyFailed(a.copy)))
    );
    assert_eq!((tx.confirmed(), tx.stats().copies_failed), (0, 1));
    tx.check().unwrap();
}

/// Simulated world of a send pipeline: GPU memory holding the stream's bytes in scattered
/// ranges, an engine that copies them into host buffers when a copy completes, a NIC that reads
/// a host buffer when the send's notification comes (zero copy: until then it may read).
struct TxSim {
    pat: Pattern,
    gpu: Vec<u8>,
    segs: Vec<(u64, u64)>,
    pushed: usize,
    host: Vec<Vec<u8>>,
    /// Per buffer: 0 free, 1 copying, 2 copied, 3 sending, 4 handed back after the stop.
    state: Vec<u8>,
    lens: Vec<u32>,
    copies: Vec<CopyCmd>,
    sends: Vec<SendCmd>,
    wire: BTreeMap<u64, Vec<u8>>,
    next_copy: u64,
    next_send: u64,
    confirmed: u64,
    max: (u32, u32),
}

impl TxSim {
    fn push(&mut self, tx: &mut StagingTx) -> Result<(), TestCaseError> {
        let Some(&(off, len)) = self.segs.get(self.pushed) else {
            return Ok(());
        };
        self.pushed += 1;
        match tx.stopped() {
            Some(c) => prop_assert_eq!(tx.push_source(off, len), Err(StagingError::Stopped(c))),
            None => prop_assert_eq!(tx.push_source(off, len), Ok(())),
        }
        Ok(())
    }

    fn issue(&mut self, tx: &mut StagingTx) -> Result<(), TestCaseError> {
        while let Some(c) = tx.next_copy() {
            let h = usize::from(c.host_buf);
            prop_assert_eq!(self.state[h], 0, "{:?} into a buffer in use", c);
            prop_assert_eq!((c.stream_off, c.host_off), (self.next_copy, 0));
            let (d, n) = (c.dev_off as usize, c.len as usize);
            prop_assert!(n > 0 && n <= self.host[h].len() && d + n <= self.gpu.len());
            prop_assert!(self.pat.verify(c.stream_off, &self.gpu[d..d + n]).is_ok());
            (self.state[h], self.lens[h]) = (1, c.len);
            self.next_copy += u64::from(c.len);
            self.copies.push(c);
        }
        let waiting = self.segs[..self.pushed].iter().map(|s| s.1).sum::<u64>() > self.next_copy;
        let free = self.state.iter().filter(|&&s| s == 0).count();
        match tx.pause() {
            Some(Pause::NoHostBuffer) => prop_assert_eq!(free, 0),
            Some(Pause::CopiesInFlight) => prop_assert_eq!(self.copies.len() as u32, self.max.0),
            Some(Pause::Stopped) => prop_assert!(tx.stopped().is_some()),
            p => prop_assert!(p.is_none() && !waiting, "{:?} with source bytes waiting", p),
        }
        while let Some(s) = tx.next_send() {
            let h = usize::from(s.host_buf);
            prop_assert_eq!(self.state[h], 2, "{:?} of a buffer not copied", s);
            prop_assert_eq!((s.stream_off, s.len), (self.next_send, self.lens[h]));
            self.state[h] = 3;
            self.next_send += u64::from(s.len);
            self.sends.push(s);
            prop_assert!(self.sends.len() as u32 <= self.max.1);
        }
        Ok(())
    }

    fn back(&mut self, bufs: impl IntoIterator<Item = u16>) -> Result<(), TestCaseError> {
        for b in bufs {
            let st = &mut self.state[usize::from(b)];
            prop_assert!(
                *st == 0 || *st == 2,
                "buffer {} handed back in state {}",
                b,
                *st
            );
            *st = 4;
        }
        Ok(())
    }

    fn end_copy(&mut self, tx: &mut StagingTx, i: usize, ok: bool) -> Result<(), TestCaseError> {
        let c = self.copies.swap_remove(i);
        let (h, d, n) = (usize::from(c.host_buf), c.dev_off as usize, c.len as usize);
        let stopped = tx.stopped().is_some();
        if ok {
            self.host[h][..n].copy_from_slice(&self.gpu[d..d + n]);
            self.state[h] = 2;
            let got = tx
                .on_copy_done(c.copy)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(got, stopped.then_some(c.host_buf));
            self.back(got)
        } else {
            self.state[h] = 0;
            let got = tx
                .on_copy_failed(c.copy)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            self.back(got)
        }
    }

    fn end_send(&mut self, tx: &mut StagingTx, i: usize, ok: bool) -> Result<(), TestCaseError> {
        let s = self.sends.swap_remove(i);
        let h = usize::from(s.host_buf);
        self.state[h] = 0;
        let stopped = tx.stopped().is_some();
        let got = if ok {
            let bytes = self.host[h][..s.len as usize].to_vec();
            prop_assert!(
                self.pat.verify(s.stream_off, &bytes).is_ok(),
                "overwritten in send"
            );
            self.wire.insert(s.stream_off, bytes);
            while let Some(b) = self.wire.get(&self.confirmed) {
                self.confirmed += b.len() as u64;
            }
            let got = tx
                .on_send_done(s.host_buf)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(got, stopped.then_some(s.host_buf));
            got.into_iter().collect()
        } else {
            tx.on_send_failed(s.host_buf)
                .map_err(|e| TestCaseError::fail(e.to_string()))?
        };
        self.back(got)?;
        prop_assert_eq!(tx.confirmed(), self.confirmed);
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    /// Source ranges pushed over time, an engine that completes copies out of order, a NIC whose
    /// notifications come out of order, both stalling at times, and (mode 1) a failed copy, (2)
    /// a failed send, (3) an abort. What is sent is the stream, in order; no buffer is reused
    /// before its notification; every buffer comes back exactly once; `confirmed` is exactly
    /// the gapless prefix of completed sends.
    #[test]
    fn tx_simulated_pipeline(
        buf in 1u32..48, nbufs in 1u16..7, max_copies in 1u32..5, max_sends in 1u32..5,
        seg_lens in proptest::collection::vec(0u64..300, 1..6),
        steps in 10usize..160, mode in 0u8..4, seed in any::<u64>(),
    ) {
        let mut r = Rng::new(seed);
        let pat = Pattern::new(seed);
        let (mut gpu, mut segs, mut at) = (Vec::new(), Vec::new(), 0u64);
        for len in seg_lens {
            gpu.resize(gpu.len() + r.below(16) as usize, 0xee);
            let start = gpu.len();
            gpu.resize(start + len as usize, 0);
            pat.fill(at, &mut gpu[start..]);
            segs.push((start as u64, len));
            at += len;
        }
        let c = cfg(buf, nbufs).with_max_copies(max_copies).with_max_sends(max_sends);
        let mut tx = StagingTx::new(&c).unwrap();
        let n = usize::from(nbufs);
        let mut sim = TxSim {
            pat, gpu, segs, pushed: 0, host: vec![vec![0; buf as usize]; n], state: vec![0; n],
            lens: vec![0; n], copies: Vec::new(), sends: Vec::new(), wire: BTreeMap::new(),
            next_copy: 0, next_send: 0, confirmed: 0, max: (max_copies, max_sends),
        };
        let fail_at = r.below(steps as u64) as usize;
        let (mut engine_stall, mut nic_stall) = (0u64, 0u64);
        for step in 0..steps {
            if step == 0 || r.one_in(3) {
                sim.push(&mut tx)?;
            }
            if step >= fail_at && tx.stopped().is_none() {
                match mode {
                    1 if !sim.copies.is_empty() => {
                        let i = r.below(sim.copies.len() as u64) as usize;
                        sim.end_copy(&mut tx, i, false)?;
                    }
                    2 if !sim.sends.is_empty() => {
                        let i = r.below(sim.sends.len() as u64) as usize;
                        sim.end_send(&mut tx, i, false)?;
                    }
                    3 => { let b = tx.abort(); sim.back(b)?; }
                    _ => {}
                }
            }
            engine_stall = engine_stall.saturating_sub(1);
            nic_stall = nic_stall.saturating_sub(1);
            if r.one_in(10) { engine_stall = 1 + r.below(8); }
            if r.one_in(10) { nic_stall = 1 + r.below(8); }
            for _ in 0..r.below(4) {
                if engine_stall == 0 && !sim.copies.is_empty() {
                    let i = r.below(sim.copies.len() as u64) as usize;
                    let ok = tx.stopped().is_none() || !r.one_in(4);
                    sim.end_copy(&mut tx, i, ok)?;
                }
            }
            sim.issue(&mut tx)?;
            for _ in 0..r.below(4) {
                if nic_stall == 0 && !sim.sends.is_empty() {
                    let i = r.below(sim.sends.len() as u64) as usize;
                    let ok = tx.stopped().is_none() || !r.one_in(4);
                    sim.end_send(&mut tx, i, ok)?;
                }
            }
            sim.issue(&mut tx)?;
            tx.check().map_err(TestCaseError::fail)?;
        }
        // The end: the rest of the source, then everything in flight completes.
        while sim.pushed < sim.segs.len() {
            sim.push(&mut tx)?;
        }
        loop {
            sim.issue(&mut tx)?;
            let ok = tx.stopped().is_none() || !r.one_in(3);
            if !sim.copies.is_empty() && (sim.sends.is_empty() || r.one_in(2)) {
                let i = r.below(sim.copies.len() as u64) as usize;
                sim.end_copy(&mut tx, i, ok)?;
            } else if !sim.sends.is_empty() {
                let i = r.below(sim.sends.len() as u64) as usize;
                sim.end_send(&mut tx, i, ok)?;
            } else {
                break;
            }
            tx.check().map_err(TestCaseError::fail)?;
        }
        let s = tx.stats();
        prop_assert_eq!((tx.confirmed(), tx.held_host_bufs()), (sim.confirmed, 0));
        prop_assert!(s.max_copies_in_flight <= u64::from(max_copies));
        prop_assert_eq!(s.copies_issued, s.copies_completed + s.copies_failed);
        if tx.stopped().is_none() {
            let total: u64 = sim.segs.iter().map(|s| s.1).sum();
            prop_assert!(tx.is_finished());
            prop_assert_eq!((tx.confirmed(), s.bytes_sent, tx.pushed()), (total, total, total));
            prop_assert!(sim.state.iter().all(|&s| s == 0));
            prop_assert_eq!(tx.free_host_bufs(), n);
            prop_assert_eq!(s.sends_completed, s.copies_completed);
        } else {
            prop_assert!(sim.state.iter().all(|&s| s == 4), "not handed back: {:?}", sim.state);
            prop_assert!(tx.confirmed() <= sim.next_send);
        }
    }
}
