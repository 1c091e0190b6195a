//! The ring arithmetic and frame ownership against a simulated kernel: four shared rings whose
//! kernel side consumes TX descriptors (in copy mode only when kicked, as `xsk_generic_xmit`;
//! in "driver" mode while awake, sleeping with NEED_WAKEUP set when idle), completes them,
//! puts what it sent on a wire, and delivers wire packets into frames taken from the fill ring
//! (dropping, and counting, when the fill ring is empty or the RX ring full).
#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use super::*;
use proptest::prelude::*;
use std::collections::VecDeque;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Desc {
    addr: u64,
    len: u32,
}

/// One ring as the kernel maps it: the two indexes, the flags word and the entries.
#[derive(Debug)]
struct SimRing<T> {
    prod: u32,
    cons: u32,
    flags: u32,
    slots: Vec<T>,
}

impl<T: Copy + Default> SimRing<T> {
    fn new(size: u32, start: u32) -> Self {
        SimRing {
            prod: start,
            cons: start,
            flags: 0,
            slots: vec![T::default(); size as usize],
        }
    }
    fn mask(&self) -> u32 {
        self.slots.len() as u32 - 1
    }
    fn len(&self) -> u32 {
        self.prod.wrapping_sub(self.cons)
    }
    /// Kernel as producer (completion, RX).
    fn kpush(&mut self, v: T) -> bool {
        if self.len() == self.slots.len() as u32 {
            return false;
        }
        let i = (self.prod & self.mask()) as usize;
        self.slots[i] = v;
        self.prod = self.prod.wrapping_add(1);
        true
    }
    /// Kernel as consumer (fill, TX).
    fn kpop(&mut self) -> Option<T> {
        if self.len() == 0 {
            return None;
        }
        let v = self.slots[(self.cons & self.mask()) as usize];
        self.cons = self.cons.wrapping_add(1);
        Some(v)
    }
}

#[derive(Debug)]
struct SimKernel {
    fill: SimRing<u64>,
    comp: SimRing<u64>,
    rx: SimRing<Desc>,
    tx: SimRing<Desc>,
    umem: Vec<u8>,
    frame_size: u32,
    headroom: u32,
    need_wakeup: bool,
    copy_mode: bool,
    awake: bool,
    budget: u32,
    wire: VecDeque<Vec<u8>>,
    /// Frames taken from the fill ring and not used yet.
    held: Vec<u64>,
    fill_empty: u64,
    ring_full: u64,
    kicks: u64,
}

impl SimKernel {
    fn new(cfg: &SimCfg) -> Self {
        let mut k = SimKernel {
            fill: SimRing::new(cfg.ring, cfg.start),
            comp: SimRing::new(cfg.ring, cfg.start),
            rx: SimRing::new(cfg.ring, cfg.start),
            tx: SimRing::new(cfg.ring, cfg.start),
            umem: vec![0; ((cfg.rx_frames + cfg.tx_frames) * FRAME) as usize],
            frame_size: FRAME,
            headroom: cfg.headroom,
            need_wakeup: cfg.need_wakeup,
            copy_mode: cfg.copy_mode,
            awake: !cfg.need_wakeup,
            budget: cfg.budget,
            wire: VecDeque::new(),
            held: Vec::new(),
            fill_empty: 0,
            ring_full: 0,
            kicks: 0,
        };
        k.set_tx_flag();
        k
    }

    fn set_tx_flag(&mut self) {
        let asleep = self.copy_mode || !self.awake;
        self.tx.flags = if self.need_wakeup && asleep {
            XDP_RING_NEED_WAKEUP
        } else {
            0
        };
    }

    /// sendto(): what a kick does.
    fn kick(&mut self) {
        assert!(self.tx.len() > 0, "kicked with no descriptor pending");
        if self.need_wakeup {
            assert_ne!(
                self.tx.flags & XDP_RING_NEED_WAKEUP,
                0,
                "kicked while the kernel did not ask"
            );
        }
        self.kicks += 1;
        if self.copy_mode {
            self.transmit();
        } else {
            self.awake = true;
            self.set_tx_flag();
            self.napi();
        }
    }

    /// The driver's poll loop (zero-copy style): transmits while awake, sleeps when idle.
    fn napi(&mut self) {
        if self.copy_mode || !self.awake {
            return;
        }
        self.transmit();
        if self.tx.len() == 0 && self.need_wakeup {
            self.awake = false;
            self.set_tx_flag();
        }
    }

    fn transmit(&mut self) {
        for _ in 0..self.budget {
            // The completion slot is reserved before the descriptor is taken.
            if self.comp.len() == self.comp.slots.len() as u32 {
                break;
            }
            let Some(d) = self.tx.kpop() else { break };
            let a = d.addr as usize;
            self.wire
                .push_back(self.umem[a..a + d.len as usize].to_vec());
            assert!(self.comp.kpush(d.addr));
        }
    }

    /// A packet arrives for the socket.
    fn deliver(&mut self, pkt: &[u8]) {
        let addr = match self.held.pop().or_else(|| self.fill.kpop()) {
            Some(a) => a,
            None => {
                self.fill_empty += 1;
                if self.need_wakeup {
                    self.fill.flags |= XDP_RING_NEED_WAKEUP;
                }
                return;
            }
        };
        if self.rx.len() == self.rx.slots.len() as u32 {
            self.ring_full += 1;
            self.held.push(addr);
            return;
        }
        let base = addr - addr % u64::from(self.frame_size);
        let data = base + u64::from(XDP_PACKET_HEADROOM + self.headroom);
        assert!(pkt.len() as u32 <= rx_capacity(self.frame_size, self.headroom));
        let d = data as usize;
        self.umem[d..d + pkt.len()].copy_from_slice(pkt);
        assert!(self.rx.kpush(Desc {
            addr: data,
            len: pkt.len() as u32,
        }));
    }

    fn deliver_wire(&mut self, n: usize) {
        for _ in 0..n {
            let Some(p) = self.wire.pop_front() else {
                break;
            };
            self.deliver(&p);
        }
    }
}

const FRAME: u32 = 2048;

#[derive(Debug, Clone)]
struct SimCfg {
    ring: u32,
    start: u32,
    rx_frames: u32,
    tx_frames: u32,
    headroom: u32,
    need_wakeup: bool,
    copy_mode: bool,
    budget: u32,
}

/// The user side, as zcnet-sys drives it (loads and stores are plain here: one thread).
#[derive(Debug)]
struct User {
    fill: Producer,
    comp: Consumer,
    rx: Consumer,
    tx: Producer,
    frames: Frames,
    rx_free: Vec<u32>,
    tx_free: Vec<u32>,
    need_wakeup: bool,
    next_seq: u64,
    got: Vec<u64>,
    skipped_kicks: u64,
}

fn payload(seq: u64) -> Vec<u8> {
    // 8 to 71 bytes: the sequence number, then a byte pattern of it.
    let len = 8 + (seq % 64) as usize;
    let mut p = seq.to_le_bytes().to_vec();
    p.extend((0..len - 8).map(|i| (seq as u8).wrapping_mul(31).wrapping_add(i as u8)));
    p
}

fn check_payload(p: &[u8]) -> u64 {
    let seq = u64::from_le_bytes(p[..8].try_into().unwrap());
    assert_eq!(p, &payload(seq)[..], "frame {seq} corrupted");
    seq
}

impl User {
    fn new(cfg: &SimCfg, k: &SimKernel) -> User {
        User {
            fill: Producer::new(cfg.ring, k.fill.prod, k.fill.cons),
            comp: Consumer::new(cfg.ring, k.comp.prod, k.comp.cons),
            rx: Consumer::new(cfg.ring, k.rx.prod, k.rx.cons),
            tx: Producer::new(cfg.ring, k.tx.prod, k.tx.cons),
            frames: Frames::new(cfg.rx_frames + cfg.tx_frames, FRAME),
            rx_free: (0..cfg.rx_frames).collect(),
            tx_free: (cfg.rx_frames..cfg.rx_frames + cfg.tx_frames).collect(),
            need_wakeup: cfg.need_wakeup,
            next_seq: 0,
            got: Vec::new(),
            skipped_kicks: 0,
        }
    }

    fn refill(&mut self, k: &mut SimKernel) {
        let b = self
            .fill
            .reserve(self.rx_free.len() as u32, || k.fill.cons)
            .unwrap();
        for slot in b.slots() {
            let f = self.rx_free.pop().unwrap();
            k.fill.slots[slot] = self.frames.give_fill(f).unwrap();
        }
        k.fill.prod = self.fill.submit(b.len).unwrap();
        if b.len > 0 {
            // The application refilled: a poll() would clear the flag (xsk_poll).
            k.fill.flags = 0;
        }
    }

    fn reap(&mut self, k: &mut SimKernel) {
        let b = self.comp.peek(u32::MAX, || k.comp.prod).unwrap();
        for slot in b.slots() {
            let f = self.frames.on_complete(k.comp.slots[slot]).unwrap();
            self.tx_free.push(f);
        }
        k.comp.cons = self.comp.release(b.len).unwrap();
    }

    fn send(&mut self, k: &mut SimKernel, n: u32) {
        self.reap(k);
        let n = n.min(self.tx_free.len() as u32);
        let b = self.tx.reserve(n, || k.tx.cons).unwrap();
        for slot in b.slots() {
            let f = self.tx_free.pop().unwrap();
            assert_eq!(self.frames.state(f), Some(FrameState::User));
            let p = payload(self.next_seq);
            self.next_seq += 1;
            let off = (self.next_seq % 3) as u32 * 8; // descriptors need not start a frame
            let a = (self.frames.addr(f) + u64::from(off)) as usize;
            k.umem[a..a + p.len()].copy_from_slice(&p);
            let addr = self.frames.give_tx(f, off, p.len() as u32).unwrap();
            k.tx.slots[slot] = Desc {
                addr,
                len: p.len() as u32,
            };
        }
        k.tx.prod = self.tx.submit(b.len).unwrap();
        self.kick_if_needed(k);
    }

    fn kick_if_needed(&mut self, k: &mut SimKernel) {
        self.tx.refresh(|| k.tx.cons).unwrap();
        if tx_kick_needed(self.need_wakeup, k.tx.flags, self.tx.pending()) {
            k.kick();
        } else if self.tx.pending() > 0 {
            self.skipped_kicks += 1;
        }
    }

    fn recv(&mut self, k: &mut SimKernel, max: u32) {
        let b = self.rx.peek(max, || k.rx.prod).unwrap();
        for slot in b.slots() {
            let d = k.rx.slots[slot];
            let span = self.frames.on_rx(d.addr, d.len).unwrap();
            assert_eq!(span.offset, XDP_PACKET_HEADROOM + k.headroom);
            let a = d.addr as usize;
            self.got.push(check_payload(&k.umem[a..a + d.len as usize]));
            self.rx_free.push(span.frame);
        }
        k.rx.cons = self.rx.release(b.len).unwrap();
        self.refill(k);
    }
}

/// What a run of the simulation did.
#[derive(Debug, Clone, Copy)]
enum Op {
    Send(u32),
    Recv(u32),
    Reap,
    Napi,
    Wire(usize),
}

fn run(cfg: &SimCfg, ops: &[Op]) -> (User, SimKernel) {
    let mut k = SimKernel::new(cfg);
    let mut u = User::new(cfg, &k);
    u.refill(&mut k);
    for op in ops {
        match *op {
            Op::Send(n) => u.send(&mut k, n),
            Op::Recv(n) => u.recv(&mut k, n),
            Op::Reap => u.reap(&mut k),
            Op::Napi => k.napi(),
            Op::Wire(n) => k.deliver_wire(n),
        }
    }
    // Drain: everything sent reaches the wire, every wire packet is delivered or dropped,
    // every delivered packet is received and every TX frame completes.
    for _ in 0..10_000 {
        u.reap(&mut k);
        u.kick_if_needed(&mut k);
        k.napi();
        k.deliver_wire(usize::MAX);
        u.recv(&mut k, u32::MAX);
        u.reap(&mut k);
        if k.tx.len() == 0 && k.wire.is_empty() && k.rx.len() == 0 && k.comp.len() == 0 {
            break;
        }
    }
    (u, k)
}

fn check(cfg: &SimCfg, u: &User, k: &SimKernel) {
    let sent = u.next_seq;
    // Every frame was transmitted and completed; none stays with the kernel's TX side.
    let c = u.frames.counts();
    assert_eq!(c.sent, sent);
    assert_eq!(c.completed, sent, "every TX frame came back");
    assert_eq!(u.frames.in_state(FrameState::Tx), 0);
    assert_eq!(u.tx_free.len() as u32, cfg.tx_frames);
    // Every frame sent was received in order, or counted as dropped.
    assert!(
        u.got.windows(2).all(|w| w[0] < w[1]),
        "in order, no duplicate"
    );
    assert_eq!(
        u.got.len() as u64 + k.fill_empty + k.ring_full,
        sent,
        "received + dropped = sent"
    );
    if k.fill_empty + k.ring_full == 0 {
        assert_eq!(u.got, (0..sent).collect::<Vec<_>>());
    }
    // RX frames are all on the fill ring (or the kernel's hands), none lost.
    assert_eq!(
        u.frames.in_state(FrameState::Fill) + u.rx_free.len(),
        cfg.rx_frames as usize
    );
    assert_eq!(
        u.frames.in_state(FrameState::Fill),
        k.fill.len() as usize + k.held.len()
    );
    // Copy mode without a kick transmits nothing: a sent frame implies a kick.
    if cfg.copy_mode && sent > 0 {
        assert!(k.kicks > 0);
    }
}

fn cfg(ring: u32, start: u32) -> SimCfg {
    SimCfg {
        ring,
        start,
        rx_frames: ring,
        tx_frames: ring,
        headroom: 0,
        need_wakeup: true,
        copy_mode: true,
        budget: 32,
    }
}

#[test]
fn batches_wrap_at_u32_max() {
    let mut p = Producer::new(8, u32::MAX - 2, u32::MAX - 2);
    let b = p.reserve(8, || unreachable!("room is known")).unwrap();
    assert_eq!(b.len, 8);
    assert_eq!(b.slots().collect::<Vec<_>>(), [5, 6, 7, 0, 1, 2, 3, 4]);
    assert_eq!(p.submit(8).unwrap(), 5, "u32::MAX - 2 + 8 wraps to 5");
    assert_eq!(p.pending(), 8);
    // Full: nothing more until the consumer moves, across the wrap.
    assert_eq!(p.reserve(1, || u32::MAX - 2).unwrap().len, 0);
    let b = p.reserve(4, || 1).unwrap();
    assert_eq!((b.start, b.len), (5, 4));
    assert_eq!(p.pending(), 4);

    let mut c = Consumer::new(4, 2, u32::MAX - 1);
    let b = c.peek(4, || unreachable!("4 are known ready")).unwrap();
    assert_eq!((b.start, b.len), (u32::MAX - 1, 4));
    assert_eq!(b.slots().collect::<Vec<_>>(), [2, 3, 0, 1]);
    assert_eq!(c.release(4).unwrap(), 2);
}

/// A second reservation before a submit must count the first one. Free slots are
/// `size - (tail - consumer)`, from the *reserved* end (`tail`), not the published one
/// (`head`): counting from `head` hands out slots already reserved (reserve 5 + reserve 5 on a
/// ring of 8 gave 10), which only the fuzz smoke noticed. Every count is checked exactly
/// through reserve, reserve, submit, a partial consume by the kernel side and the wrap.
#[test]
fn reserving_twice_before_submitting_counts_the_first_reservation() {
    let loads = std::cell::Cell::new(0u32);
    let mut p = Producer::new(8, 0, 0);
    let kernel_consumer = std::cell::Cell::new(0u32);
    // Copy (it captures references only): each reserve gets its own.
    let load = || {
        loads.set(loads.get() + 1);
        kernel_consumer.get()
    };

    let a = p.reserve(5, load).unwrap();
    assert_eq!((a.start, a.len), (0, 5));
    assert_eq!((p.reserved(), p.pending(), p.producer()), (5, 0, 0));
    // Only 3 slots are left: the 5 reserved are not free although none is published yet.
    let b = p.reserve(5, load).unwrap();
    assert_eq!(
        (b.start, b.len),
        (5, 3),
        "second reserve on a ring of 8 with 5 reserved"
    );
    assert_eq!(b.slots().collect::<Vec<_>>(), [5, 6, 7]);
    assert_eq!(p.reserved(), 8);
    assert_eq!(
        loads.get(),
        1,
        "5 known free, so the second reserve reloaded"
    );
    // Full with nothing published: a third reserve gets nothing.
    assert_eq!(p.reserve(1, load).unwrap().len, 0);
    assert_eq!(p.reserved(), 8);

    // Publish 6 of the 8: 2 stay reserved, and the ring is still full.
    assert_eq!(p.submit(6).unwrap(), 6);
    assert_eq!((p.reserved(), p.pending()), (2, 6));
    assert_eq!(p.reserve(1, load).unwrap().len, 0, "6 pending + 2 reserved");

    // The kernel consumes 4 of the 6: exactly 4 slots free up, wrapping to slots 0..4.
    kernel_consumer.set(4);
    let c = p.reserve(8, load).unwrap();
    assert_eq!((c.start, c.len), (8, 4), "only what the kernel consumed");
    assert_eq!(c.slots().collect::<Vec<_>>(), [0, 1, 2, 3]);
    assert_eq!((p.reserved(), p.pending(), p.cached_consumer()), (6, 2, 4));
    assert_eq!(p.reserve(1, load).unwrap().len, 0);

    // Give back 1 reserved entry: exactly that one is free again.
    p.cancel(1).unwrap();
    assert_eq!(p.reserved(), 5);
    let d = p.reserve(2, load).unwrap();
    assert_eq!((d.start, d.len), (11, 1));
    assert_eq!(p.submit(6).unwrap(), 12);
    assert_eq!((p.reserved(), p.pending()), (0, 8));
    assert!(matches!(
        p.submit(1),
        Err(RingError::Overrun {
            asked: 1,
            available: 0
        })
    ));

    // The kernel catches up: the whole ring is free, and no more.
    kernel_consumer.set(12);
    let e = p.reserve(9, load).unwrap();
    assert_eq!((e.start, e.len), (12, 8));
    assert_eq!(p.reserve(1, load).unwrap().len, 0);
}

#[test]
fn the_other_index_is_loaded_only_when_needed() {
    let mut loads = 0;
    let mut p = Producer::new(16, 0, 0);
    p.reserve(10, || {
        loads += 1;
        0
    })
    .unwrap();
    assert_eq!(loads, 0, "16 free known from the start");
    p.submit(10).unwrap();
    let b = p
        .reserve(10, || {
            loads += 1;
            4
        })
        .unwrap();
    assert_eq!((loads, b.len), (1, 10), "6 known free, reloaded: 10");

    let mut c = Consumer::new(16, 0, 0);
    assert_eq!(c.peek(4, || 3).unwrap().len, 3);
    let b = c.peek(0, || panic!("nothing asked")).unwrap();
    assert!(b.is_empty());
}

#[test]
fn impossible_indexes_are_errors() {
    let mut p = Producer::new(8, 100, 100);
    p.reserve(4, || 100).unwrap();
    p.submit(4).unwrap();
    // The kernel cannot consume what was not published, nor go back.
    assert!(matches!(
        p.refresh(|| 105),
        Err(RingError::BadConsumer { read: 105, .. })
    ));
    assert!(matches!(
        p.refresh(|| 99),
        Err(RingError::BadConsumer { .. })
    ));
    p.refresh(|| 104).unwrap();
    assert_eq!(p.pending(), 0);
    assert!(matches!(p.submit(1), Err(RingError::Overrun { .. })));

    let mut c = Consumer::new(8, 10, 10);
    // More than a ring ahead, or backwards.
    assert!(matches!(
        c.refresh(|| 19),
        Err(RingError::BadProducer { .. })
    ));
    assert!(c.refresh(|| 9).is_err());
    // A small step from the last producer seen that still puts more than a ring in it.
    let mut c2 = Consumer::new(8, 14, 10);
    assert!(c2.refresh(|| 20).is_err());
    c2.refresh(|| 18).unwrap();
    c.refresh(|| 18).unwrap();
    let b = c.peek(3, || 18).unwrap();
    assert_eq!(b.len, 3);
    assert!(matches!(
        c.release(4),
        Err(RingError::Overrun {
            asked: 4,
            available: 3
        })
    ));
    p.cancel(0).unwrap();
    assert!(p.cancel(1).is_err());
}

/// Found by fuzz/ (target xsk): indexes read at setup that put more than a ring's entries in
/// it underflowed the producer's free count (a panic, or in release a reserve of up to 2^32
/// slots over entries the kernel had not consumed) and let the consumer peek more entries
/// than the ring has. Now the ring starts full (producer) or empty (consumer), and the first
/// read of the kernel's index reports it.
#[test]
fn impossible_starting_indexes_are_errors_at_the_first_read() {
    let mut p = Producer::new(8, 100, 91);
    assert_eq!(p.pending() + p.reserved(), 8, "taken as full");
    assert!(matches!(
        p.reserve(1, || 91),
        Err(RingError::BadConsumer { read: 91, .. })
    ));
    assert_eq!((p.producer(), p.reserved()), (100, 0));
    let mut p = Producer::new(8, 100, 101);
    assert!(
        p.reserve(1, || 101).is_err(),
        "a consumer ahead of the producer"
    );
    // A full ring that is really full is no error, and frees up as the kernel consumes.
    let mut p = Producer::new(8, 100, 92);
    assert_eq!(p.reserve(1, || 92).unwrap().len, 0);
    assert_eq!(p.reserve(3, || 95).unwrap().len, 3);

    let mut c = Consumer::new(8, 109, 100);
    assert_eq!(c.ready_cached(), 0, "taken as empty");
    assert!(matches!(
        c.peek(4, || 109),
        Err(RingError::BadProducer { read: 109, .. })
    ));
    assert_eq!((c.consumer(), c.peeked()), (100, 0));
    let mut c = Consumer::new(8, 99, 100);
    assert!(c.peek(1, || 99).is_err(), "a producer behind the consumer");
    let mut c = Consumer::new(8, 108, 100);
    assert_eq!(
        c.peek(9, || 108).unwrap().len,
        8,
        "exactly a full ring is fine"
    );
}

#[test]
fn kick_only_when_pending_and_asked() {
    let nw = XDP_RING_NEED_WAKEUP;
    assert!(!tx_kick_needed(true, nw, 0), "nothing pending: no syscall");
    assert!(!tx_kick_needed(true, 0, 5), "driver awake: no syscall");
    assert!(tx_kick_needed(true, nw, 5));
    assert!(tx_kick_needed(false, 0, 1), "without need-wakeup: always");
    assert!(!tx_kick_needed(false, 0, 0));
    assert!(fill_wakeup_needed(true, nw));
    assert!(!fill_wakeup_needed(true, 0));
    assert!(fill_wakeup_needed(false, 0));
}

#[test]
fn frames_refuse_impossible_moves() {
    let mut f = Frames::new(4, 2048);
    let a = f.give_tx(1, 0, 100).unwrap();
    assert_eq!(a, 2048);
    assert!(matches!(
        f.give_tx(1, 0, 10),
        Err(FrameError::WrongState { frame: 1, .. })
    ));
    assert!(matches!(f.give_fill(1), Err(FrameError::WrongState { .. })));
    assert!(
        f.on_rx(2048 + 256, 10).is_err(),
        "a TX frame is not received"
    );
    assert_eq!(
        f.on_complete(2048 + 50).unwrap(),
        1,
        "any address in the frame"
    );
    assert!(f.on_complete(2048).is_err(), "completed twice");
    assert!(matches!(
        f.give_tx(0, 2000, 100),
        Err(FrameError::TooLong { .. })
    ));
    assert!(f.give_tx(0, 0, 0).is_err(), "zero length is invalid");
    assert!(matches!(
        f.on_complete(4 * 2048),
        Err(FrameError::OutOfRange { .. })
    ));
    f.give_fill(2).unwrap();
    assert!(matches!(
        f.on_rx(2 * 2048 + 256, 2000),
        Err(FrameError::TooLong { .. })
    ));
    let s = f.on_rx(2 * 2048 + 256, 1500).unwrap();
    assert_eq!((s.frame, s.offset, s.len), (2, 256, 1500));
    f.give_fill(3).unwrap();
    f.take_back(3).unwrap();
    assert_eq!(f.counts().filled, 1);
    assert_eq!(rx_capacity(2048, 0), 1792);
    assert_eq!(rx_capacity(4096, 128), 3712);
}

/// Found by fuzz/ (target xsk): a UMEM of 0-byte frames divided by zero on the first
/// descriptor; every address is out of range instead.
#[test]
fn zero_byte_frames_have_no_address() {
    let mut f = Frames::new(4, 0);
    f.give_fill(0).unwrap();
    assert!(matches!(
        f.on_rx(0, 0),
        Err(FrameError::OutOfRange { addr: 0 })
    ));
    assert!(matches!(
        f.on_complete(7),
        Err(FrameError::OutOfRange { addr: 7 })
    ));
    assert!(matches!(
        f.give_tx(1, 0, 1),
        Err(FrameError::TooLong { .. })
    ));
    assert_eq!(f.state(0), Some(FrameState::Fill));
}

#[test]
fn a_thousand_frames_cross_the_u32_wrap() {
    let c = cfg(8, u32::MAX - 10);
    let ops: Vec<Op> = (0..250)
        .flat_map(|_| [Op::Send(4), Op::Wire(4), Op::Recv(8)])
        .collect();
    let (u, k) = run(&c, &ops);
    check(&c, &u, &k);
    assert_eq!(u.got.len(), 1000);
    assert!(k.tx.prod < 1000 && k.rx.prod < 1000, "indexes wrapped");
    assert_eq!(k.fill_empty + k.ring_full, 0);
}

#[test]
fn fill_ring_starvation_drops_and_asks_for_a_wakeup() {
    let mut c = cfg(4, 0);
    c.rx_frames = 2;
    let mut k = SimKernel::new(&c);
    let mut u = User::new(&c, &k);
    u.refill(&mut k);
    u.send(&mut k, 4);
    k.deliver_wire(4);
    // Two frames on the fill ring: two received, two dropped for want of a frame.
    assert_eq!(k.fill_empty, 2);
    assert!(fill_wakeup_needed(true, k.fill.flags));
    u.recv(&mut k, 8);
    assert_eq!(u.got, [0, 1]);
    assert!(!fill_wakeup_needed(true, k.fill.flags), "refilled");
}

#[test]
fn driver_mode_skips_kicks_while_awake() {
    let mut c = cfg(16, 7);
    c.copy_mode = false;
    c.budget = 2;
    let ops: Vec<Op> = (0..50)
        .flat_map(|_| {
            [
                Op::Send(3),
                Op::Send(3),
                Op::Napi,
                Op::Wire(16),
                Op::Recv(16),
            ]
        })
        .collect();
    let (u, k) = run(&c, &ops);
    check(&c, &u, &k);
    assert!(u.skipped_kicks > 0, "the awake driver needed no syscall");
    assert!(k.kicks < 50, "fewer kicks than sends: {}", k.kicks);
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u32..40).prop_map(Op::Send),
        (0u32..40).prop_map(Op::Recv),
        Just(Op::Reap),
        Just(Op::Napi),
        (0usize..40).prop_map(Op::Wire),
    ]
}

fn sim_cfg() -> impl Strategy<Value = SimCfg> {
    (
        1u32..7,
        prop_oneof![any::<u32>(), (u32::MAX - 300)..=u32::MAX],
        1u32..40,
        1u32..40,
        prop_oneof![Just(0u32), Just(64), Just(256)],
        any::<bool>(),
        any::<bool>(),
        1u32..40,
    )
        .prop_map(
            |(log, start, rx_frames, tx_frames, headroom, need_wakeup, copy_mode, budget)| SimCfg {
                ring: 1 << log,
                start,
                rx_frames,
                tx_frames,
                headroom,
                need_wakeup,
                copy_mode,
                budget,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any start index (near the u32 wrap included), ring size, batch sizes and interleaving:
    /// every frame sent is received in order or counted as a drop, every TX frame completes,
    /// no RX frame is lost, and no kick is made with nothing pending or unasked.
    #[test]
    fn simulated_kernel_accounts_for_every_frame(c in sim_cfg(), ops in prop::collection::vec(op(), 0..200)) {
        let (u, k) = run(&c, &ops);
        check(&c, &u, &k);
    }

    /// Reserve/submit and peek/release in arbitrary batches agree with a model that counts
    /// entries in u64 (no wrap), from any start index.
    #[test]
    fn producer_and_consumer_match_an_unwrapped_model(
        log in 0u32..8,
        start in any::<u32>(),
        steps in prop::collection::vec((0u32..300, 0u32..300, 0u32..300), 1..100),
    ) {
        let size = 1u32 << log;
        let mut p = Producer::new(size, start, start);
        let mut c = Consumer::new(size, start, start);
        let (mut produced, mut consumed) = (0u64, 0u64);
        let mut ring = vec![u64::MAX; size as usize];
        for (want, take, _) in steps {
            let kernel_cons = start.wrapping_add(consumed as u32);
            let b = p.reserve(want, || kernel_cons).unwrap();
            prop_assert_eq!(u64::from(b.len), u64::from(want).min(u64::from(size) - (produced - consumed)));
            for (i, slot) in b.slots().enumerate() {
                ring[slot] = produced + i as u64;
            }
            let published = p.submit(b.len).unwrap();
            produced += u64::from(b.len);
            prop_assert_eq!(published, start.wrapping_add(produced as u32));
            let b = c.peek(take, || published).unwrap();
            prop_assert_eq!(u64::from(b.len), u64::from(take).min(produced - consumed));
            for (i, slot) in b.slots().enumerate() {
                prop_assert_eq!(ring[slot], consumed + i as u64);
            }
            consumed += u64::from(b.len);
            prop_assert_eq!(c.release(b.len).unwrap(), start.wrapping_add(consumed as u32));
        }
    }
}
