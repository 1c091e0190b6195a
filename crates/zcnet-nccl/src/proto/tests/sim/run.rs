//! The simulation's steps and its final accounting.

use super::*;

impl Sim<'_> {
    pub(super) fn step(&mut self, act: Act) -> R {
        match act {
            Act::PostSend => {
                let (k, m) = (self.sent, self.msgs[self.sent]);
                let seq = self.tx.post(SEND_ID + k as u64, m.tag, m.size);
                prop_assert_eq!(seq, Ok(k as u64));
                self.stats.zero_byte += u64::from(m.size == 0);
                self.stats.smaller += u64::from(self.slots[m.group][m.slot].1 > m.size);
                self.sent += 1;
            }
            Act::HandOut(s) => {
                let c = self
                    .tx
                    .next_chunk()
                    .ok_or_else(|| TestCaseError::fail("no chunk"))?;
                let h = c.header;
                let m = self.msgs[h.seq as usize];
                prop_assert!(
                    self.last < Some((h.seq, h.offset)),
                    "{c:?} after {:?}",
                    self.last
                );
                prop_assert_eq!((c.id, h.tag, h.total), (SEND_ID + h.seq, m.tag, m.size));
                let len = u64::from(self.p.chunk).min(m.size - h.offset);
                prop_assert_eq!(
                    (h.offset % u64::from(self.p.chunk), u64::from(h.len)),
                    (0, len)
                );
                prop_assert!(self.chunks.insert((h.seq, h.offset)), "{c:?} twice");
                self.last = Some((h.seq, h.offset));
                self.socks[s].writing = Some(c);
            }
            Act::Write(s) => {
                let Some(c) = self.socks[s].writing.take() else {
                    return fail("nothing written".into());
                };
                self.socks[s].kernel.push_back(c.header.encode());
                let seq = c.header.seq as usize;
                self.written[seq] += 1;
                let done = self.tx.chunk_done(&c);
                let last = self.written[seq] == self.msgs[seq].chunks;
                prop_assert_eq!(done, Ok(last.then_some(SEND_ID + seq as u64)));
                prop_assert!(!last || self.send_done.insert(seq as u64));
                prop_assert!(!last || self.tx.is_complete(SEND_ID + seq as u64));
                let again = self.tx.chunk_done(&c);
                let (seq, offset) = (c.header.seq, c.header.offset);
                prop_assert_eq!(again, Err(SendError::ChunkAlreadyDone { seq, offset }));
            }
            Act::Read(s) => self.read(s)?,
            Act::PostRecv => {
                let g = self.posted;
                prop_assert_eq!(self.rx.post(RECV_ID + g as u64, &self.slots[g]), Ok(()));
                let bufs = self.slots[g]
                    .iter()
                    .map(|&(_, cap)| vec![SENTINEL; cap as usize]);
                self.bufs.push(bufs.collect());
                self.posted += 1;
            }
            Act::Take(g) => {
                let want: Vec<u64> = (0..self.slots[g].len())
                    .map(|j| {
                        self.msgs
                            .iter()
                            .find(|m| m.group == g && m.slot == j)
                            .map_or(0, |m| m.size)
                    })
                    .collect();
                prop_assert_eq!(self.rx.take_sizes(RECV_ID + g as u64), Some(want.clone()));
                prop_assert_eq!(self.rx.take_sizes(RECV_ID + g as u64), None);
                for (seq, m) in self.msgs.iter().enumerate().filter(|(_, m)| m.group == g) {
                    let buf = &self.bufs[g][m.slot];
                    let (data, rest) = buf.split_at(want[m.slot] as usize);
                    Pattern::new(seq as u64)
                        .verify(0, data)
                        .or_else(|e| fail(format!("message {seq}: {e}")))?;
                    prop_assert!(rest.iter().all(|&b| b == SENTINEL), "message {seq} overran");
                }
                self.taken.insert(g);
            }
        }
        Ok(())
    }

    fn read(&mut self, s: usize) -> R {
        let h = self.head(s)?;
        let m = self.msgs[h.seq as usize];
        let want = Placement::Into {
            recv: RECV_ID + m.group as u64,
            slot: m.slot,
            offset: h.offset,
        };
        let placed = self.rx.place(&h);
        match self.socks[s].rx {
            Rx::Idle | Rx::Waiting if placed == Ok(Placement::Wait) => {
                prop_assert!(self.socks[s].rx == Rx::Idle, "Wait past next_unassigned()");
                prop_assert!(h.seq >= self.rx.next_unassigned());
                let posted: usize = self.slots[..self.posted].iter().map(Vec::len).sum();
                self.stats.waits += 1;
                self.stats.waits_with_room += u64::from(posted as u64 > self.rx.next_unassigned());
                self.socks[s].rx = Rx::Waiting;
            }
            Rx::Idle | Rx::Waiting => {
                prop_assert_eq!(placed, Ok(want), "{:?}", h);
                self.socks[s].rx = Rx::Placed;
            }
            Rx::Placed => {
                prop_assert_eq!(placed, Ok(want), "placed again: {:?}", h);
                let g = m.group;
                let at = h.offset as usize..h.end() as usize;
                let buf = &mut self.bufs[g][m.slot][at];
                prop_assert!(buf.iter().all(|&b| b == SENTINEL), "{h:?} landed twice");
                Pattern::new(h.seq).fill(h.offset, buf);
                let done = self.rx.payload_done(&h);
                self.landed[h.seq as usize] += 1;
                let mut group = self
                    .msgs
                    .iter()
                    .zip(&self.landed)
                    .filter(|(m, _)| m.group == g);
                let complete = group.all(|(m, &landed)| landed == m.chunks);
                prop_assert_eq!(
                    done,
                    Ok(if complete {
                        vec![RECV_ID + g as u64]
                    } else {
                        vec![]
                    })
                );
                prop_assert!(!complete || self.recv_done.insert(g));
                let (seq, offset) = (h.seq, h.offset);
                prop_assert_eq!(
                    self.rx.payload_done(&h),
                    Err(RecvError::NotPlaced { seq, offset })
                );
                self.socks[s].kernel.pop_front();
                self.socks[s].rx = Rx::Idle;
            }
        }
        Ok(())
    }

    /// Calls that must change nothing: a waiting chunk placed again too early.
    pub(super) fn poke(&mut self) -> R {
        let s = self.rng.pick(self.socks.len());
        if self.socks[s].rx == Rx::Waiting {
            let h = self.head(s)?;
            if h.seq >= self.rx.next_unassigned() {
                prop_assert_eq!(self.rx.place(&h), Ok(Placement::Wait));
            }
        }
        Ok(())
    }

    pub(super) fn finish(self) -> R<Stats> {
        let n = self.msgs.len();
        let stuck = format!(
            "stuck: sent {}/{n}, posted {}/{}, next unassigned {}, sockets {:?}",
            self.sent,
            self.posted,
            self.slots.len(),
            self.rx.next_unassigned(),
            self.socks
                .iter()
                .map(|k| (k.writing.is_some(), k.kernel.len(), k.rx))
                .collect::<Vec<_>>()
        );
        prop_assert!(
            self.taken.len() == self.slots.len() && self.sent == n,
            "{}",
            stuck
        );
        prop_assert_eq!(self.send_done.len(), n);
        let chunks: Vec<u64> = self.msgs.iter().map(|m| m.chunks).collect();
        prop_assert_eq!(self.chunks.len() as u64, chunks.iter().sum::<u64>());
        prop_assert_eq!(&self.written, &chunks, "chunks written per message");
        prop_assert_eq!(&self.landed, &chunks, "chunks landed per message");
        prop_assert_eq!((self.tx.outstanding(), self.tx.chunks_in_flight()), (0, 0));
        prop_assert!(!self.tx.has_chunk());
        prop_assert_eq!((self.rx.pending(), self.rx.tracked()), (0, 0));
        prop_assert_eq!(self.rx.next_unassigned(), n as u64);
        Ok(self.stats)
    }
}
