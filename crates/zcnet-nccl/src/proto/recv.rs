//! Receive side: [`RecvMatch`] matches arriving chunks to posted (grouped) receives in order.
//!
//! ```text
//!  irecv ──► post(id, [(tag, cap); n])          (queued in post order; matching runs)
//!  header read off a socket ──► place(h) ──► Into { recv, slot, offset }: read the payload there
//!                                       └──► Wait: leave the payload in the socket; place(h)
//!                                            again once next_unassigned() > h.seq
//!  payload landed ──► payload_done(h) ──► ids of receives now complete
//!  test() ──► take_sizes(id) ──► the size of each buffer's message
//! ```
//!
//! Messages are assigned strictly in seq order: message `s` goes to the first receive (in post
//! order) that has an unassigned buffer, into its first unassigned buffer with the message's
//! tag. Its tag and size are learned from whichever of its chunks is placed first; assignment
//! runs after every [`RecvMatch::place`] and [`RecvMatch::post`], as far as it can go.
//!
//! Memory: the pending receives (at most `max_posted`), and per message known and not yet
//! received in full: the chunks placed and not landed (one per socket), and the landed bytes as
//! merged ranges (a gap per chunk still under way, however large the message). Known messages
//! are those assigned (at most `max_posted * max_recvs`) and those waiting for a receive,
//! at most one per socket (a socket whose head chunk waits is not read further) and never more
//! than [`MAX_WAITING`]. A message is forgotten when it lands in full, a receive when taken.

use super::wire::ChunkHeader;
use std::collections::{BTreeMap, VecDeque};

mod error;
pub use error::RecvError;

/// How far past the next unassigned message a chunk's seq may be.
pub(crate) const MAX_SEQ_AHEAD: u64 = 1 << 20;
/// Most messages known and waiting for a receive (far above any socket count).
pub(crate) const MAX_WAITING: usize = 4096;

/// Where a placed chunk's payload goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Into buffer `slot` of receive `recv`, at `offset` (the chunk's offset in its message).
    Into {
        /// The receive's id.
        recv: u64,
        /// The buffer's index in the receive.
        slot: usize,
        /// Where the payload starts in the buffer.
        offset: u64,
    },
    /// No receive for the message yet: leave the payload where it is.
    Wait,
}

#[derive(Debug, Clone)]
struct Slot {
    tag: i32,
    cap: u64,
    /// The message assigned.
    seq: Option<u64>,
    /// Its size, once received in full.
    size: Option<u64>,
}

#[derive(Debug, Clone)]
struct Recv {
    id: u64,
    slots: Vec<Slot>,
    unassigned: usize,
    incomplete: usize,
}

/// A message known (a chunk was placed) and not yet received in full.
#[derive(Debug, Clone)]
struct Msg {
    tag: i32,
    total: u64,
    /// `(receive id, slot)` once assigned.
    to: Option<(u64, usize)>,
    received: u64,
    /// Landed byte ranges, merged: start → end.
    got: BTreeMap<u64, u64>,
    /// Chunks placed and not landed: offset → end.
    landing: BTreeMap<u64, u64>,
}

/// Whether `[start, end)` overlaps a range of `m` (disjoint ranges, start → end).
fn overlaps(m: &BTreeMap<u64, u64>, start: u64, end: u64) -> bool {
    m.range(..end).next_back().is_some_and(|(_, &e)| e > start)
}

/// Adds `[start, end)` (disjoint from `m`'s ranges) to `m`, merged with its neighbours.
fn merge(m: &mut BTreeMap<u64, u64>, mut start: u64, mut end: u64) {
    if start == end {
        return;
    }
    if let Some((&s, &e)) = m.range(..start).next_back() {
        if e == start {
            m.remove(&s);
            start = s;
        }
    }
    if let Some(e) = m.remove(&end) {
        end = e;
    }
    m.insert(start, end);
}

/// Matches arriving chunks to posted (grouped) receives in order.
#[derive(Debug, Clone)]
pub struct RecvMatch {
    max_posted: usize,
    max_recvs: usize,
    /// Pending receives, in post order (complete ones too, until taken).
    recvs: VecDeque<Recv>,
    /// Messages known, not received in full, by seq.
    msgs: BTreeMap<u64, Msg>,
    /// The next message to assign: those before are assigned.
    next: u64,
    /// Messages in `msgs` at or after `next`.
    waiting: usize,
}

impl RecvMatch {
    /// A matcher for at most `max_posted` pending receives of at most `max_recvs` buffers.
    pub fn new(max_posted: usize, max_recvs: usize) -> RecvMatch {
        RecvMatch {
            max_posted,
            max_recvs,
            recvs: VecDeque::new(),
            msgs: BTreeMap::new(),
            next: 0,
            waiting: 0,
        }
    }

    /// Posts a receive of slots (tag, capacity in bytes). Err when `max_posted` are pending,
    /// n == 0 or n > max_recvs, or the id is pending. Matching then runs: a peer error it finds
    /// (tag or size) is returned by the next [`Self::place`].
    pub fn post(&mut self, id: u64, slots: &[(i32, u64)]) -> Result<(), RecvError> {
        let n = slots.len();
        if n == 0 || n > self.max_recvs {
            let max = self.max_recvs;
            return Err(RecvError::BadGroup { n, max });
        }
        if self.recvs.len() >= self.max_posted {
            let max = self.max_posted;
            return Err(RecvError::TooMany { max });
        }
        if self.recvs.iter().any(|r| r.id == id) {
            return Err(RecvError::IdInUse(id));
        }
        let slots = slots.iter().map(|&(tag, cap)| Slot {
            tag,
            cap,
            seq: None,
            size: None,
        });
        self.recvs.push_back(Recv {
            id,
            slots: slots.collect(),
            unassigned: n,
            incomplete: n,
        });
        // The post is valid whatever the peer sent; an error stops matching at the same
        // message every time, so the next place() runs into it again and reports it.
        let _ = self.assign();
        Ok(())
    }

    /// A chunk header has been read from some socket. Returns where its payload goes, or Wait
    /// when its message cannot be assigned yet; then place() it again once
    /// [`Self::next_unassigned`] is past `h.seq` (only a [`Self::post`] or a place() of another
    /// chunk moves it). Repeated calls before [`Self::payload_done`] give the same placement
    /// (Wait until assigned, then always the same `Into`).
    ///
    /// Errors: a header inconsistent in itself; a seq already received in full, or more than
    /// `MAX_SEQ_AHEAD` past the next unassigned; a tag or total that differs from an earlier
    /// chunk of the message; a range overlapping one placed or landed; and from matching, a
    /// message larger than its buffer or with a tag matching no unassigned buffer of the first
    /// receive that has one.
    pub fn place(&mut self, h: &ChunkHeader) -> Result<Placement, RecvError> {
        h.check(u32::MAX, u64::MAX).map_err(RecvError::Chunk)?;
        let (seq, start, end) = (h.seq, h.offset, h.end());
        if seq < self.next && !self.msgs.contains_key(&seq) {
            return Err(RecvError::StaleSeq { seq });
        }
        if seq.saturating_sub(self.next) > MAX_SEQ_AHEAD {
            let next = self.next;
            return Err(RecvError::SeqTooFar { seq, next });
        }
        if let Some(m) = self.msgs.get_mut(&seq) {
            if m.tag != h.tag {
                let (was, now) = (m.tag, h.tag);
                return Err(RecvError::TagChanged { seq, was, now });
            }
            if m.total != h.total {
                let (was, now) = (m.total, h.total);
                return Err(RecvError::TotalChanged { seq, was, now });
            }
            if m.landing.get(&start) != Some(&end) {
                if overlaps(&m.landing, start, end) || overlaps(&m.got, start, end) {
                    let (offset, len) = (start, h.len);
                    return Err(RecvError::Overlap { seq, offset, len });
                }
                m.landing.insert(start, end);
            }
        } else {
            if self.waiting >= MAX_WAITING {
                let max = MAX_WAITING;
                return Err(RecvError::TooManyWaiting { max });
            }
            let m = Msg {
                tag: h.tag,
                total: h.total,
                to: None,
                received: 0,
                got: BTreeMap::new(),
                landing: BTreeMap::from([(start, end)]),
            };
            self.msgs.insert(seq, m);
            self.waiting += 1;
        }
        self.assign()?;
        Ok(match self.msgs.get(&seq).and_then(|m| m.to) {
            Some((recv, slot)) => Placement::Into {
                recv,
                slot,
                offset: start,
            },
            None => Placement::Wait,
        })
    }

    /// Assigns known messages from `next` on, in seq order, while receives have room.
    fn assign(&mut self) -> Result<(), RecvError> {
        while let Some(m) = self.msgs.get_mut(&self.next) {
            let seq = self.next;
            let Some(r) = self.recvs.iter_mut().find(|r| r.unassigned > 0) else {
                break;
            };
            let free = |s: &Slot| s.seq.is_none() && s.tag == m.tag;
            let Some(slot) = r.slots.iter().position(free) else {
                let (tag, recv) = (m.tag, r.id);
                return Err(RecvError::NoSlot { seq, tag, recv });
            };
            let s = &mut r.slots[slot];
            if m.total > s.cap {
                let (total, recv, cap) = (m.total, r.id, s.cap);
                return Err(RecvError::TooLarge {
                    seq,
                    total,
                    recv,
                    slot,
                    cap,
                });
            }
            s.seq = Some(seq);
            r.unassigned -= 1;
            m.to = Some((r.id, slot));
            self.waiting -= 1;
            self.next += 1;
        }
        Ok(())
    }

    /// The payload of that chunk has fully landed. Returns the ids of receives that completed
    /// (every slot's message fully received), in post order; a receive completes only when
    /// ALL its slots got a complete message. Err when the chunk is not placed into a buffer.
    pub fn payload_done(&mut self, h: &ChunkHeader) -> Result<Vec<u64>, RecvError> {
        let (seq, start, end) = (h.seq, h.offset, h.end());
        let m = self.msgs.get_mut(&seq).filter(|m| {
            m.to.is_some()
                && m.tag == h.tag
                && m.total == h.total
                && m.landing.get(&start) == Some(&end)
        });
        let Some(m) = m else {
            let offset = start;
            return Err(RecvError::NotPlaced { seq, offset });
        };
        m.landing.remove(&start);
        merge(&mut m.got, start, end);
        m.received += end - start;
        if m.received < m.total {
            return Ok(Vec::new());
        }
        let (to, total) = (m.to, m.total);
        self.msgs.remove(&seq);
        let Some((id, slot)) = to else {
            return Ok(Vec::new());
        };
        let Some(r) = self.recvs.iter_mut().find(|r| r.id == id) else {
            return Ok(Vec::new());
        };
        r.slots[slot].size = Some(total);
        r.incomplete -= 1;
        Ok(if r.incomplete == 0 {
            vec![id]
        } else {
            Vec::new()
        })
    }

    /// The received sizes of a completed receive, one per slot (and forgets it). None if not
    /// complete/unknown.
    pub fn take_sizes(&mut self, id: u64) -> Option<Vec<u64>> {
        let i = self
            .recvs
            .iter()
            .position(|r| r.id == id && r.incomplete == 0)?;
        let r = self.recvs.remove(i)?;
        r.slots.iter().map(|s| s.size).collect()
    }

    /// Receives posted, not yet taken.
    pub fn pending(&self) -> usize {
        self.recvs.len()
    }

    /// The next message to be assigned to a receive: every seq below it is.
    pub fn next_unassigned(&self) -> u64 {
        self.next
    }

    /// Messages known and not yet received in full (assigned or waiting).
    #[cfg(test)]
    pub(crate) fn tracked(&self) -> usize {
        self.msgs.len()
    }

    /// Recomputes the counters and cross-references; `Err` says what broke. For tests and
    /// debug assertions: O(state).
    pub fn check(&self) -> Result<(), String> {
        let waiting = self.msgs.range(self.next..).count();
        if waiting != self.waiting {
            return Err(format!("waiting is {}, state says {waiting}", self.waiting));
        }
        for (&seq, m) in &self.msgs {
            let landed: u64 = m.got.iter().map(|(s, e)| e - s).sum();
            if landed != m.received || landed > m.total {
                return Err(format!("message {seq}: {landed} landed, {m:?}"));
            }
            let mut ends = m.got.values().zip(m.got.keys().skip(1));
            if ends.any(|(end, next)| end >= next) {
                return Err(format!("message {seq}: landed ranges not merged, {m:?}"));
            }
            let slot = m.to.and_then(|(id, i)| {
                let r = self.recvs.iter().find(|r| r.id == id)?;
                r.slots.get(i)
            });
            let ok = match slot {
                None => seq >= self.next && m.to.is_none(),
                Some(s) => seq < self.next && s.seq == Some(seq) && s.size.is_none(),
            };
            if !ok {
                return Err(format!("message {seq}: assignment {:?} broken", m.to));
            }
        }
        for r in &self.recvs {
            let unassigned = r.slots.iter().filter(|s| s.seq.is_none()).count();
            let incomplete = r.slots.iter().filter(|s| s.size.is_none()).count();
            if (unassigned, incomplete) != (r.unassigned, r.incomplete) {
                return Err(format!(
                    "receive {}: counters {unassigned}, {incomplete} off",
                    r.id
                ));
            }
        }
        Ok(())
    }
}
