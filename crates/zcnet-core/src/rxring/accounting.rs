//! Which zcrx bytes the kernel copied: the honest split of delivered bytes into copied,
//! zero-copy and unknown.
//!
//! A RECV_ZC completion looks the same whether the NIC wrote the bytes into the area or the
//! kernel copied them there (`io_zcrx_copy_chunk`: payload left in an skb's linear part, a
//! flow not steered to the queue, and every byte of an ifq registered without a device). So a
//! byte is zero-copy only where something says so:
//! - An ifq without a device (`ZCRX_REG_NODEV`, Linux 7.1) copies everything: all copied.
//! - A dma-buf area cannot be copied into: data the kernel would copy fails the request with
//!   `EFAULT` (`io_zcrx_copy_chunk`) before Linux 6.18, `ENOMEM` since (`io_alloc_fallback_niov`),
//!   so every delivered byte is zero-copy.
//! - Linux 7.2 keeps per-ifq statistics (`struct zcrx_stats`: `copy_count`, `copy_bytes`,
//!   cumulative) in the refill region when asked (`ZCRX_EVENT_DESC_FLAG_STATS`): those bytes
//!   are copied, the rest zero-copy.
//! - Otherwise (6.15–7.1 with a device, or 7.2 where the statistics were refused) the kernel
//!   cannot tell: the bytes are *unknown*, never zero-copy.
//!
//! The counter is cumulative and read after the completions are drained; with
//! DEFER_TASKRUN the copy and its count happen inside the same `io_uring_enter` that posts the
//! completion, so the counter never lags the completions read, but it may lead them (copies
//! whose completions are still in the CQ). [`ZcrxCopyAccount`] carries such a lead over to the
//! next delivery, so every component only grows and the three always add up to what was
//! delivered.

/// What is known about the copies behind delivered zcrx bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZcrxCopyKnowledge {
    /// The ifq has no device (`ZCRX_REG_NODEV`): the kernel copies every byte.
    AllCopied,
    /// The area is a dma-buf: the kernel cannot copy into it, so nothing delivered was copied.
    NoneCopied,
    /// The kernel's cumulative `zcrx_stats.copy_bytes` (Linux 7.2), read after draining.
    Counted {
        /// `copy_bytes`.
        copy_bytes: u64,
    },
    /// Nothing says which bytes were copied.
    Unknown,
}

/// Delivered bytes split by how they reached the area.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CopySplit {
    /// Bytes the kernel copied into the area.
    pub copied: u64,
    /// Bytes the NIC wrote into the area.
    pub zerocopy: u64,
    /// Bytes whose way in nothing reports.
    pub unknown: u64,
}

impl CopySplit {
    /// `copied + zerocopy + unknown`.
    #[cfg(test)]
    pub(crate) fn total(&self) -> u64 {
        self.copied + self.zerocopy + self.unknown
    }
}

/// The running split of one ifq's deliveries (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ZcrxCopyAccount {
    /// The last `copy_bytes` seen.
    seen: u64,
    /// Copies counted by the kernel whose bytes were not delivered yet.
    carry: u64,
    /// Everything accounted so far.
    total: CopySplit,
}

impl ZcrxCopyAccount {
    /// A fresh account (the kernel's counter starts at 0 with the ifq).
    pub fn new() -> Self {
        Self::default()
    }

    /// Accounts `delivered` more bytes (those of the completions just drained) with what is
    /// known now, and returns their split (which adds up to `delivered`).
    pub fn account(&mut self, delivered: u64, known: ZcrxCopyKnowledge) -> CopySplit {
        let split = match known {
            ZcrxCopyKnowledge::AllCopied => CopySplit {
                copied: delivered,
                ..CopySplit::default()
            },
            ZcrxCopyKnowledge::NoneCopied => CopySplit {
                zerocopy: delivered,
                ..CopySplit::default()
            },
            ZcrxCopyKnowledge::Unknown => CopySplit {
                unknown: delivered,
                ..CopySplit::default()
            },
            ZcrxCopyKnowledge::Counted { copy_bytes } => {
                // A counter that went backwards (it cannot) adds nothing rather than wrapping.
                let fresh = copy_bytes.saturating_sub(self.seen);
                self.seen = self.seen.max(copy_bytes);
                let pending = self.carry.saturating_add(fresh);
                let copied = pending.min(delivered);
                self.carry = pending - copied;
                CopySplit {
                    copied,
                    zerocopy: delivered - copied,
                    unknown: 0,
                }
            }
        };
        self.total.copied += split.copied;
        self.total.zerocopy += split.zerocopy;
        self.total.unknown += split.unknown;
        split
    }

    /// Everything accounted so far.
    #[cfg(test)]
    pub(crate) fn total(&self) -> CopySplit {
        self.total
    }

    /// Bytes the kernel counted as copied that no delivery has taken yet.
    #[cfg(test)]
    pub(crate) fn carried(&self) -> u64 {
        self.carry
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ZcrxCopyKnowledge::*;

    fn split(copied: u64, zerocopy: u64, unknown: u64) -> CopySplit {
        CopySplit {
            copied,
            zerocopy,
            unknown,
        }
    }

    #[test]
    fn nodev_is_all_copied_and_never_zero_copy() {
        let mut a = ZcrxCopyAccount::new();
        assert_eq!(a.account(4096, AllCopied), split(4096, 0, 0));
        assert_eq!(a.account(100, AllCopied), split(100, 0, 0));
        assert_eq!(a.total(), split(4196, 0, 0));
    }

    #[test]
    fn without_statistics_the_split_is_unknown_not_zero_copy() {
        let mut a = ZcrxCopyAccount::new();
        assert_eq!(a.account(1 << 20, Unknown), split(0, 0, 1 << 20));
        assert_eq!(a.total().zerocopy, 0);
    }

    #[test]
    fn dmabuf_areas_are_zero_copy() {
        let mut a = ZcrxCopyAccount::new();
        assert_eq!(a.account(8192, NoneCopied), split(0, 8192, 0));
    }

    #[test]
    fn counted_copies_are_copied_and_the_rest_zero_copy() {
        let mut a = ZcrxCopyAccount::new();
        assert_eq!(
            a.account(1000, Counted { copy_bytes: 300 }),
            split(300, 700, 0)
        );
        // The counter is cumulative: only its growth is new.
        assert_eq!(
            a.account(500, Counted { copy_bytes: 300 }),
            split(0, 500, 0)
        );
        assert_eq!(
            a.account(200, Counted { copy_bytes: 500 }),
            split(200, 0, 0)
        );
        assert_eq!(a.total(), split(500, 1200, 0));
    }

    #[test]
    fn a_counter_ahead_of_the_completions_carries_over() {
        let mut a = ZcrxCopyAccount::new();
        // 300 B copied, only 100 B of them drained yet: never more copied than delivered.
        assert_eq!(
            a.account(100, Counted { copy_bytes: 300 }),
            split(100, 0, 0)
        );
        assert_eq!(a.carried(), 200);
        // The rest arrives with 50 B the NIC wrote.
        assert_eq!(
            a.account(250, Counted { copy_bytes: 300 }),
            split(200, 50, 0)
        );
        assert_eq!(a.carried(), 0);
        assert_eq!(a.total().total(), 350);
    }

    #[test]
    fn components_only_grow_and_add_up() {
        let mut a = ZcrxCopyAccount::new();
        let mut prev = a.total();
        let steps = [
            (10, 0),
            (0, 40),
            (30, 40),
            (100, 45),
            (5, 200),
            (0, 200),
            (60, 150),
        ];
        let mut delivered = 0;
        for (d, cb) in steps {
            let s = a.account(d, Counted { copy_bytes: cb });
            delivered += d;
            assert_eq!(s.total(), d);
            let t = a.total();
            assert!(
                t.copied >= prev.copied && t.zerocopy >= prev.zerocopy,
                "{t:?} < {prev:?}"
            );
            assert_eq!(t.total(), delivered);
            prev = t;
        }
        // A counter that went backwards (200 -> 150) added nothing.
        assert_eq!(a.total().copied + a.carried(), 200);
    }
}
