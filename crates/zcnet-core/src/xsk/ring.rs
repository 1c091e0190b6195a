//! Index arithmetic of one AF_XDP ring, seen from user space.
//!
//! Every AF_XDP ring (fill, completion, RX, TX) is single-producer/single-consumer with two
//! free-running `u32` indexes, `producer` and `consumer`, in memory shared with the kernel
//! (include/uapi/linux/if_xdp.h `struct xdp_ring_offset`). Entry `i` lives in slot
//! `i & (size - 1)`; `producer - consumer` (wrapping) is the number of entries in the ring, at
//! most `size`. Indexes are never reset: after 2^32 entries they wrap, and only the wrapping
//! difference is meaningful (Documentation/networking/af_xdp.rst, "dequeue_one/enqueue_one").
//!
//! The user side owns one index per ring and reads the other (net/xdp/xsk_queue.h, the A-D
//! comment): a producer loads `consumer` (A), writes entries, then store-releases `producer`
//! (B); a consumer load-acquires `producer` (C), reads entries, then store-releases `consumer`
//! (D). (A) pairs with (D), (B) with (C). This module does the arithmetic; the loads and stores
//! are the caller's (zcnet-sys): each method that needs the other side's index takes a closure
//! that loads it (with `Acquire`), and each that moves ours returns the value to store (with
//! `Release`). The kernel's index is checked before use: a value that would put more than
//! `size` entries in the ring, or move backwards, is a [`RingError`], never a wrong count.
//!
//! Like libbpf's `xsk_ring_prod__reserve`/`submit` and `xsk_ring_cons__peek`/`release`, the
//! other side's index is cached and only reloaded when the cached view cannot satisfy a request.

use std::fmt;

/// `XDP_RING_NEED_WAKEUP` (include/uapi/linux/if_xdp.h): set by the kernel in the `flags` word
/// of the fill and TX rings of a socket bound with `XDP_USE_NEED_WAKEUP` when it needs a
/// syscall to make progress.
pub(crate) const XDP_RING_NEED_WAKEUP: u32 = 1 << 0;

/// The kernel's index contradicts the ring protocol (memory corruption or a bug, here or there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingError {
    /// The consumer index read from the ring is not between the last one seen and our producer.
    BadConsumer {
        /// The value read.
        read: u32,
        /// The last consumer index seen.
        last: u32,
        /// Our producer index (published).
        producer: u32,
    },
    /// The producer index read from the ring is behind the last one seen or more than `size`
    /// entries ahead of our consumer.
    BadProducer {
        /// The value read.
        read: u32,
        /// The last producer index seen.
        last: u32,
        /// Our consumer index (released).
        consumer: u32,
    },
    /// More entries submitted or released than reserved or peeked: a bug in the caller.
    Overrun {
        /// Entries asked for.
        asked: u32,
        /// Entries available to submit or release.
        available: u32,
    },
}

impl fmt::Display for RingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RingError::BadConsumer {
                read,
                last,
                producer,
            } => write!(
                f,
                "ring consumer index {read} is outside [{last}, {producer}] (last seen, our producer)"
            ),
            RingError::BadProducer {
                read,
                last,
                consumer,
            } => write!(
                f,
                "ring producer index {read} went back from {last} or runs more than a ring ahead of consumer {consumer}"
            ),
            RingError::Overrun { asked, available } => write!(
                f,
                "{asked} ring entries submitted or released, only {available} reserved or peeked"
            ),
        }
    }
}

impl std::error::Error for RingError {}

/// A run of consecutive ring indexes: `start, start+1, ..` (wrapping), `len` of them. Slot of
/// the `i`-th: [`Batch::slot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batch {
    /// The first index.
    pub(crate) start: u32,
    /// How many.
    pub len: u32,
    mask: u32,
}

impl Batch {
    /// The next `len` entries from `*tail`, which moves past them.
    fn take(tail: &mut u32, len: u32, mask: u32) -> Batch {
        let start = *tail;
        *tail = start.wrapping_add(len);
        Batch { start, len, mask }
    }

    /// The slot (array position) of the `i`-th entry of the batch (`i < len`).
    pub fn slot(&self, i: u32) -> usize {
        (self.start.wrapping_add(i) & self.mask) as usize
    }

    /// Whether the batch is empty.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The slots of the batch, in order.
    pub fn slots(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.len).map(move |i| self.slot(i))
    }
}

fn check_size(size: u32) -> u32 {
    assert!(
        size.is_power_of_two(),
        "AF_XDP ring size {size} must be a power of two"
    );
    size - 1
}

/// The user side of a ring user space produces into: the fill ring and the TX ring.
#[derive(Debug, Clone)]
pub struct Producer {
    mask: u32,
    size: u32,
    /// Published producer index (what the kernel sees once stored).
    head: u32,
    /// Reserved up to here (`head..tail` reserved, not yet submitted).
    tail: u32,
    /// The last consumer index read from the ring.
    cons: u32,
}

impl Producer {
    /// A producer over a ring of `size` entries (a power of two) whose indexes now read
    /// `producer` and `consumer` (zero on a new ring).
    ///
    /// A `consumer` more than `size` entries behind `producer` (or ahead of it) is not a state
    /// the kernel can be in: the ring is then taken as full, and the next read of the
    /// consumer index (which [`Producer::reserve`] does first) reports the index as a
    /// [`RingError::BadConsumer`]. (Found by fuzz/, target xsk: the free count underflowed.)
    ///
    /// # Panics
    /// If `size` is not a power of two (the kernel refuses such rings with `EINVAL`).
    pub fn new(size: u32, producer: u32, consumer: u32) -> Producer {
        let mask = check_size(size);
        let cons = if producer.wrapping_sub(consumer) <= size {
            consumer
        } else {
            producer.wrapping_sub(size)
        };
        Producer {
            mask,
            size,
            head: producer,
            tail: producer,
            cons,
        }
    }

    /// The producer index published so far.
    pub fn producer(&self) -> u32 {
        self.head
    }

    /// The consumer index last read.
    pub fn cached_consumer(&self) -> u32 {
        self.cons
    }

    /// Entries reserved and not yet submitted.
    pub fn reserved(&self) -> u32 {
        self.tail.wrapping_sub(self.head)
    }

    /// Entries published that the kernel had not consumed at the last read of its index.
    pub fn pending(&self) -> u32 {
        self.head.wrapping_sub(self.cons)
    }

    fn free_cached(&self) -> u32 {
        self.size - self.tail.wrapping_sub(self.cons)
    }

    /// Reads the kernel's consumer index through `load` (an `Acquire` load, (A)) and checks it.
    pub fn refresh(&mut self, load: impl FnOnce() -> u32) -> Result<(), RingError> {
        let read = load();
        // The consumer moves forward only, and never past what we published.
        let moved = read.wrapping_sub(self.cons);
        if moved > self.head.wrapping_sub(self.cons) {
            return Err(RingError::BadConsumer {
                read,
                last: self.cons,
                producer: self.head,
            });
        }
        self.cons = read;
        Ok(())
    }

    /// Reserves up to `want` entries (fewer when the ring has less room; possibly none). The
    /// consumer index is loaded through `load` only when the cached one leaves less room than
    /// `want`. Write the entries at [`Batch::slot`], then [`Producer::submit`] them.
    pub fn reserve(&mut self, want: u32, load: impl FnOnce() -> u32) -> Result<Batch, RingError> {
        if self.free_cached() < want {
            self.refresh(load)?;
        }
        let len = want.min(self.free_cached());
        Ok(Batch::take(&mut self.tail, len, self.mask))
    }

    /// Gives back the last `n` reserved entries without publishing them.
    pub fn cancel(&mut self, n: u32) -> Result<(), RingError> {
        let available = self.reserved();
        step_back(&mut self.tail, available, n)
    }

    /// Publishes the first `n` reserved entries: returns the producer index to store with
    /// `Release` (B), after the entries are written.
    pub fn submit(&mut self, n: u32) -> Result<u32, RingError> {
        let available = self.reserved();
        if n > available {
            return Err(RingError::Overrun {
                asked: n,
                available,
            });
        }
        self.head = self.head.wrapping_add(n);
        Ok(self.head)
    }
}

/// The user side of a ring the kernel produces into: the completion ring and the RX ring.
#[derive(Debug, Clone)]
pub struct Consumer {
    mask: u32,
    size: u32,
    /// Released consumer index (what the kernel sees once stored).
    head: u32,
    /// Peeked up to here (`head..tail` being read).
    tail: u32,
    /// The last producer index read from the ring.
    prod: u32,
}

impl Consumer {
    /// A consumer over a ring of `size` entries (a power of two) whose indexes now read
    /// `producer` and `consumer`.
    ///
    /// A `producer` more than `size` entries ahead of `consumer` (or behind it) is not a state
    /// the kernel can be in: the ring is then taken as empty, and the next read of the
    /// producer index (which [`Consumer::peek`] does first) reports the index as a
    /// [`RingError::BadProducer`]. (Found by fuzz/, target xsk: more than `size` entries were
    /// handed out, some slots twice.)
    ///
    /// # Panics
    /// If `size` is not a power of two.
    pub fn new(size: u32, producer: u32, consumer: u32) -> Consumer {
        let mask = check_size(size);
        let prod = if producer.wrapping_sub(consumer) <= size {
            producer
        } else {
            consumer
        };
        Consumer {
            mask,
            size,
            head: consumer,
            tail: consumer,
            prod,
        }
    }

    /// The consumer index released so far.
    pub fn consumer(&self) -> u32 {
        self.head
    }

    /// Entries peeked and not yet released.
    pub fn peeked(&self) -> u32 {
        self.tail.wrapping_sub(self.head)
    }

    /// Entries known to be ready and not yet peeked (as of the last read of the producer).
    pub fn ready_cached(&self) -> u32 {
        self.prod.wrapping_sub(self.tail)
    }

    /// Reads the kernel's producer index through `load` (an `Acquire` load, (C)) and checks it.
    pub fn refresh(&mut self, load: impl FnOnce() -> u32) -> Result<(), RingError> {
        let read = load();
        let moved = read.wrapping_sub(self.prod);
        // Forward only, and never more than `size` entries ahead of what we released.
        if moved > self.size || read.wrapping_sub(self.head) > self.size {
            return Err(RingError::BadProducer {
                read,
                last: self.prod,
                consumer: self.head,
            });
        }
        self.prod = read;
        Ok(())
    }

    /// Takes up to `max` ready entries (possibly none). The producer index is loaded through
    /// `load` only when fewer than `max` are known to be ready. Read the entries at
    /// [`Batch::slot`], then [`Consumer::release`] them.
    pub fn peek(&mut self, max: u32, load: impl FnOnce() -> u32) -> Result<Batch, RingError> {
        if self.ready_cached() < max {
            self.refresh(load)?;
        }
        let len = max.min(self.ready_cached());
        Ok(Batch::take(&mut self.tail, len, self.mask))
    }

    /// Puts back the last `n` peeked entries unread: the next [`Consumer::peek`] reads them
    /// again (a reader that stopped part-way through a batch).
    pub fn unpeek(&mut self, n: u32) -> Result<(), RingError> {
        let available = self.peeked();
        step_back(&mut self.tail, available, n)
    }

    /// Hands the first `n` peeked entries back to the kernel: returns the consumer index to
    /// store with `Release` (D), after the entries are read.
    pub fn release(&mut self, n: u32) -> Result<u32, RingError> {
        let available = self.peeked();
        if n > available {
            return Err(RingError::Overrun {
                asked: n,
                available,
            });
        }
        self.head = self.head.wrapping_add(n);
        Ok(self.head)
    }
}

/// Whether to kick the kernel to transmit (a zero-length `sendto(MSG_DONTWAIT)`,
/// Documentation/networking/af_xdp.rst "XDP_USE_NEED_WAKEUP bind flag"): only when descriptors
/// are pending (published and not yet consumed), and — on a socket bound with
/// `XDP_USE_NEED_WAKEUP` — only when the TX ring's flags say `XDP_RING_NEED_WAKEUP`. Without
/// need-wakeup the kernel never says, so every pending batch is kicked. (In copy mode the kernel
/// keeps the flag set: it transmits only from a syscall, `xsk_generic_xmit`.)
pub fn tx_kick_needed(need_wakeup_bound: bool, tx_flags: u32, pending: u32) -> bool {
    pending > 0 && (!need_wakeup_bound || tx_flags & XDP_RING_NEED_WAKEUP != 0)
}

/// Whether the receive path needs a wakeup (`poll(POLLIN)` or `recvfrom`): the fill ring's
/// flags say `XDP_RING_NEED_WAKEUP` (the driver ran out of fill entries and stopped), or the
/// socket was bound without need-wakeup, where the kernel is assumed to need one whenever user
/// space waits.
pub fn fill_wakeup_needed(need_wakeup_bound: bool, fill_flags: u32) -> bool {
    !need_wakeup_bound || fill_flags & XDP_RING_NEED_WAKEUP != 0
}

/// Moves a ring side's private `tail` back by `n` of the `available` entries it holds (reserved
/// or peeked, not yet published): the last `n` go back as if never taken.
fn step_back(tail: &mut u32, available: u32, n: u32) -> Result<(), RingError> {
    if n > available {
        return Err(RingError::Overrun {
            asked: n,
            available,
        });
    }
    *tail = tail.wrapping_sub(n);
    Ok(())
}
