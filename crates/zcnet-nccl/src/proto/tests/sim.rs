//! A whole connection, simulated: NCCL posting sends and grouped receives at random moments, a
//! scheduler giving each chunk to a random free socket, sockets with a few chunks of kernel
//! buffer each (so flow control holds writers back), headers going over the wire encoded, and
//! per-socket FIFO delivery interleaved at random. Payload bytes are a pattern by (seq, offset)
//! copied into simulated buffers.

use super::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use std::cell::RefCell;
use std::collections::{BTreeSet, VecDeque};
use zcnet_core::pattern::Pattern;

mod run;

const MAX_RECVS: usize = 8;
const SEND_ID: u64 = 1_000;
const RECV_ID: u64 = 50_000;
const SENTINEL: u8 = 0xee;

#[derive(Debug, Clone)]
struct Plan {
    chunk: u32,
    sockets: usize,
    /// Chunks a socket's kernel buffers hold.
    kernel: usize,
    max_sends: usize,
    max_posted: usize,
    /// Weight of posting a receive against 4 for every other action: 1 posts late.
    recv_weight: u64,
    /// Per receive, its messages in send order: (tag, size, spare buffer bytes).
    groups: Vec<Vec<(i32, u64, u64)>>,
    seed: u64,
}

fn plan() -> impl Strategy<Value = Plan> {
    (1u32..=8)
        .prop_flat_map(|chunk| {
            let c = u64::from(chunk);
            let size = prop_oneof![Just(0u64), (1u64..=3).prop_map(move |k| k * c), 0..=4 * c];
            let spare = prop_oneof![3 => Just(0u64), 1 => 1u64..=5];
            let group = prop::collection::vec((-1i32..2, size, spare), 1..=MAX_RECVS);
            let groups = prop::collection::vec(group, 1..=10);
            let limits = (1usize..=4, 1usize..=3, 1usize..=6, 1usize..=4, 1u64..=8);
            (Just(chunk), limits, groups, any::<u64>())
        })
        .prop_map(
            |(chunk, (sockets, kernel, max_sends, max_posted, recv_weight), groups, seed)| Plan {
                chunk,
                sockets,
                kernel,
                max_sends,
                max_posted,
                recv_weight,
                groups,
                seed,
            },
        )
}

/// What each message should become.
#[derive(Debug, Clone, Copy)]
struct Expect {
    tag: i32,
    size: u64,
    group: usize,
    slot: usize,
    chunks: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rx {
    Idle,
    Waiting,
    Placed,
}

#[derive(Debug, Clone, Copy)]
enum Act {
    PostSend,
    HandOut(usize),
    Write(usize),
    Read(usize),
    PostRecv,
    Take(usize),
}

#[derive(Debug, Default, Clone, Copy)]
struct Stats {
    waits: u64,
    /// Waits while a posted receive had a free buffer: an earlier message not yet announced.
    waits_with_room: u64,
    zero_byte: u64,
    /// Messages into a larger buffer.
    smaller: u64,
}

struct Sock {
    writing: Option<SendChunk>,
    kernel: VecDeque<[u8; HEADER_LEN]>,
    rx: Rx,
}

struct Sim<'a> {
    p: &'a Plan,
    rng: Rng,
    tx: SendSched,
    rx: RecvMatch,
    msgs: Vec<Expect>,
    slots: Vec<Vec<(i32, u64)>>,
    socks: Vec<Sock>,
    sent: usize,
    posted: usize,
    last: Option<(u64, u64)>,
    /// Per message: chunks written, chunks landed.
    written: Vec<u64>,
    landed: Vec<u64>,
    chunks: BTreeSet<(u64, u64)>,
    send_done: BTreeSet<u64>,
    recv_done: BTreeSet<usize>,
    taken: BTreeSet<usize>,
    bufs: Vec<Vec<Vec<u8>>>,
    stats: Stats,
}

type R<T = ()> = Result<T, TestCaseError>;

fn fail<T>(what: String) -> R<T> {
    Err(TestCaseError::fail(what))
}

impl<'a> Sim<'a> {
    fn new(p: &'a Plan) -> Sim<'a> {
        let mut rng = Rng::new(p.seed);
        let (mut msgs, mut slots) = (Vec::new(), Vec::new());
        for (g, group) in p.groups.iter().enumerate() {
            // The buffers' tags: the messages' tags, shuffled.
            let mut tags: Vec<i32> = group.iter().map(|m| m.0).collect();
            for i in (1..tags.len()).rev() {
                tags.swap(i, rng.pick(i + 1));
            }
            let mut caps: Vec<Option<u64>> = vec![None; tags.len()];
            for &(tag, size, spare) in group {
                // The rule: the first unassigned buffer with the tag.
                let slot = (0..tags.len())
                    .find(|&j| caps[j].is_none() && tags[j] == tag)
                    .unwrap_or(0);
                caps[slot] = Some(size + spare);
                let chunks = size.div_ceil(u64::from(p.chunk)).max(1);
                msgs.push(Expect {
                    tag,
                    size,
                    group: g,
                    slot,
                    chunks,
                });
            }
            let caps = caps.into_iter().map(|c| c.unwrap_or(0));
            slots.push(tags.into_iter().zip(caps).collect());
        }
        let socks = (0..p.sockets).map(|_| Sock {
            writing: None,
            kernel: VecDeque::new(),
            rx: Rx::Idle,
        });
        Sim {
            p,
            rng,
            tx: SendSched::new(p.chunk, p.max_sends),
            rx: RecvMatch::new(p.max_posted, MAX_RECVS),
            written: vec![0; msgs.len()],
            landed: vec![0; msgs.len()],
            msgs,
            slots,
            socks: socks.collect(),
            sent: 0,
            posted: 0,
            last: None,
            chunks: BTreeSet::new(),
            send_done: BTreeSet::new(),
            recv_done: BTreeSet::new(),
            taken: BTreeSet::new(),
            bufs: Vec::new(),
            stats: Stats::default(),
        }
    }

    fn head(&self, s: usize) -> R<ChunkHeader> {
        let b = self.socks[s]
            .kernel
            .front()
            .copied()
            .unwrap_or([0; HEADER_LEN]);
        let max = self.msgs.iter().map(|m| m.size).max().unwrap_or(0);
        ChunkHeader::decode(&b, self.p.chunk, max).or_else(|e| fail(format!("socket {s}: {e}")))
    }

    fn enabled(&self) -> R<Vec<(u64, Act)>> {
        let mut acts = Vec::new();
        if self.sent < self.msgs.len() && self.tx.outstanding() < self.p.max_sends {
            acts.push((4, Act::PostSend));
        }
        if self.posted < self.slots.len() && self.rx.pending() < self.p.max_posted {
            acts.push((self.p.recv_weight, Act::PostRecv));
        }
        for (s, k) in self.socks.iter().enumerate() {
            if k.writing.is_none() && self.tx.has_chunk() {
                acts.push((4, Act::HandOut(s)));
            }
            if k.writing.is_some() && k.kernel.len() < self.p.kernel {
                acts.push((4, Act::Write(s)));
            }
            let ready = k.rx != Rx::Waiting || self.rx.next_unassigned() > self.head(s)?.seq;
            if !k.kernel.is_empty() && ready {
                acts.push((4, Act::Read(s)));
            }
        }
        let done = self.recv_done.difference(&self.taken);
        acts.extend(done.map(|&g| (2, Act::Take(g))));
        Ok(acts)
    }

    fn run(mut self) -> R<Stats> {
        for _ in 0..1_000_000 {
            let acts = self.enabled()?;
            let total: u64 = acts.iter().map(|a| a.0).sum();
            let mut at = self.rng.below(total);
            let Some(&(_, act)) = acts
                .iter()
                .find(|a| at.checked_sub(a.0).map(|x| at = x).is_none())
            else {
                return self.finish();
            };
            self.step(act)?;
            self.poke()?;
            self.rx.check().or_else(|e| fail(format!("{act:?}: {e}")))?;
            prop_assert!(self.rx.tracked() <= self.p.max_posted * MAX_RECVS + self.p.sockets);
            prop_assert!(self.tx.chunks_in_flight() <= self.p.sockets);
        }
        fail("no end in a million steps".into())
    }
}

/// Every message lands in its buffer at the right offsets, every receive completes exactly
/// once with the right sizes, every send completes once, no chunk is lost or duplicated, and
/// nothing is left in the books at the end. The runs must have waited, also with a buffer
/// free (a later message announced before an earlier one), sent zero-byte messages and
/// received into buffers larger than the message.
#[zcnet_testkit::test]
fn simulated_connections_deliver_everything() {
    let config = Config {
        cases: 300,
        failure_persistence: None,
        ..Config::default()
    };
    let total = RefCell::new(Stats::default());
    let mut runner = TestRunner::new(config);
    let result = runner.run(&plan(), |p| {
        let s = Sim::new(&p).run()?;
        let mut t = total.borrow_mut();
        t.waits += s.waits;
        t.waits_with_room += s.waits_with_room;
        t.zero_byte += s.zero_byte;
        t.smaller += s.smaller;
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let t = *total.borrow();
    assert!(t.waits > 0 && t.waits_with_room > 0, "{t:?}");
    assert!(t.zero_byte > 0 && t.smaller > 0, "{t:?}");
}
