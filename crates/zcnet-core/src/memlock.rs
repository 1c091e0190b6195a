//! What the kernel charges to `RLIMIT_MEMLOCK` for a sender, and what a refusal means.
//!
//! Without `CAP_IPC_LOCK` the kernel counts pinned and ring memory in the *user's*
//! `locked_vm` (one counter per uid, shared by all its processes) and refuses what would take it
//! over the calling process's soft `RLIMIT_MEMLOCK`. Linux 6.18, read and then measured here
//! (the smallest `ulimit -l` that works, per mode and size; docs/design.md "Send backends"):
//!
//! - **io_uring ring** (io_uring/memmap.c `io_create_region`, io_uring/io_uring.c
//!   `io_allocate_scq_urings`, `rings_size`): two regions, each charged in whole pages with
//!   `__io_account_mem` when the ring is set up — `struct io_rings` (a 64-byte header, then the
//!   CQEs, the whole doubled for `IORING_SETUP_CQE32`, cache-line aligned, then one `u32` per SQ
//!   entry unless `IORING_SETUP_NO_SQARRAY`) and the SQE array (64 B per entry, 128 B with
//!   `IORING_SETUP_SQE128`). `io_uring_setup` fails with `ENOMEM` when they do not fit.
//! - **Registered buffers** (io_uring/rsrc.c `io_buffer_account_pin`): every pinned page, except
//!   that a page of a compound (huge) folio charges the whole folio, once. `ENOMEM`.
//! - **`MSG_ZEROCOPY`** (net/core/skbuff.c `mm_account_pinned_pages`): each send call charges
//!   `(size >> PAGE_SHIFT) + 2` pages ("worst case") until its notification; over the limit the
//!   send fails with `ENOBUFS` — the errno that also means "`net.core.optmem_max` is full"
//!   (`sock_omalloc` of the notification skb). devmem TX is not charged.
//!
//! This module is the arithmetic and the decision between those causes; the facade gathers the
//! facts (limits, capability, sysctl) and words the errors.

/// Bytes of `struct io_rings` before its CQE array (`cq_off.cqes`): 64 on Linux 6.18 x86_64
/// (measured with `io_uring_setup`).
pub(crate) const IO_RINGS_HEADER: u64 = 64;
/// The CQE array of `struct io_rings` is aligned to this (`SMP_CACHE_BYTES` on x86_64).
const CACHE_LINE: u64 = 64;
/// Smallest `net.core.optmem_max` (bytes) that holds one `MSG_ZEROCOPY` notification skb on
/// 6.18: 512 refuses the first send, 640 lets it through (measured in a private network
/// namespace). With nothing in flight, an `optmem_max` at or above this is not why a send fails.
pub(crate) const OPTMEM_ONE_NOTIFICATION: u64 = 1024;
/// `net.core.optmem_max`'s default on Linux 6.18 (128 KiB, read on these machines).
pub(crate) const OPTMEM_DEFAULT: u64 = 128 << 10;

/// The shape of an io_uring ring, as far as its locked memory goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingGeometry {
    /// SQ entries (a power of two).
    pub(crate) sq_entries: u32,
    /// CQ entries (a power of two).
    pub(crate) cq_entries: u32,
    /// `IORING_SETUP_CQE32`.
    pub(crate) cqe32: bool,
    /// `IORING_SETUP_SQE128`.
    pub(crate) sqe128: bool,
    /// `IORING_SETUP_NO_SQARRAY`.
    pub(crate) no_sqarray: bool,
}

impl RingGeometry {
    /// The ring `io_uring_setup(entries, ..)` makes without `IORING_SETUP_CQSIZE` and with
    /// 64-byte SQEs and 16-byte CQEs: `entries` rounded up to a power of two, twice as many CQEs.
    pub fn for_entries(entries: u32) -> RingGeometry {
        let sq = entries.max(1).next_power_of_two();
        RingGeometry {
            sq_entries: sq,
            cq_entries: sq.saturating_mul(2),
            cqe32: false,
            sqe128: false,
            no_sqarray: false,
        }
    }

    /// Bytes the ring charges to `RLIMIT_MEMLOCK`: the rings region and the SQE region, each
    /// rounded up to whole pages of `page` bytes.
    pub fn locked_bytes(&self, page: u64) -> u64 {
        let mut rings = IO_RINGS_HEADER + u64::from(self.cq_entries) * 16;
        if self.cqe32 {
            rings *= 2;
        }
        rings = round_up(rings, CACHE_LINE);
        if !self.no_sqarray {
            rings += u64::from(self.sq_entries) * 4;
        }
        let sqe = if self.sqe128 { 128 } else { 64 };
        let sqes = u64::from(self.sq_entries) * sqe;
        round_up(rings, page) + round_up(sqes, page)
    }
}

/// Bytes registering `[addr, addr + len)` as an io_uring fixed buffer charges: every page it
/// touches, rounded out to `folio` bytes (the page size for ordinary memory, 2 MiB for memory
/// backed by huge pages — the kernel charges a compound folio whole).
pub fn registered_bytes(addr: u64, len: u64, page: u64, folio: u64) -> u64 {
    if len == 0 {
        return 0;
    }
    let unit = folio.max(page);
    let start = addr / unit * unit;
    let end = round_up(addr + len, unit);
    end - start
}

/// Bytes one `MSG_ZEROCOPY` send call of `len` bytes charges until its notification, rounded
/// up: the kernel charges `(size >> PAGE_SHIFT) + 2` pages of the size it is given (for UDP
/// that includes the 8-byte header, hence the round-up here).
pub fn msg_zerocopy_send_bytes(len: u64, page: u64) -> u64 {
    (len.div_ceil(page) + 2) * page
}

/// The `ulimit -l` value (KiB) that admits `need` bytes of locked memory. `limit` is the soft
/// limit that refused it; `shared` says the refusal came although `need` fitted under `limit`,
/// i.e. other locked memory of the same user (other processes, a ring still being torn down)
/// already counted: then the suggestion leaves room for up to `limit` bytes of that as well.
pub fn ulimit_kib(need: u64, limit: u64, shared: bool) -> u64 {
    let want = if shared {
        need.saturating_add(limit)
    } else {
        need
    };
    want.div_ceil(1024)
}

/// A `net.core.optmem_max` worth suggesting when it is too small: double the current value,
/// at least the default — never the value it already has.
pub fn optmem_suggestion(current: Option<u64>) -> u64 {
    match current {
        Some(v) => v.saturating_mul(2).max(OPTMEM_DEFAULT),
        None => 8 * OPTMEM_DEFAULT,
    }
}

/// What a `MSG_ZEROCOPY` sender knew when a send failed with `ENOBUFS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnobufsFacts {
    /// The soft `RLIMIT_MEMLOCK` in bytes, or `None` when the kernel does not apply it (the
    /// process has `CAP_IPC_LOCK`, or the limit is unlimited).
    pub memlock: Option<u64>,
    /// `net.core.optmem_max` of the socket's network namespace, if it could be read.
    pub optmem_max: Option<u64>,
    /// Bytes of the send call that failed.
    pub send_len: u64,
    /// Buffers the sender keeps in flight at most.
    pub buffers: u64,
    /// Size of each buffer.
    pub buf_size: u64,
    /// Whether sends of this sender were still awaiting their notifications.
    pub in_flight: bool,
    /// The page size.
    pub page: u64,
}

/// Why a `MSG_ZEROCOPY` send failed with `ENOBUFS`, and the remedy's number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnobufsCause {
    /// `RLIMIT_MEMLOCK`: the pages of the sends do not fit.
    Memlock {
        /// Bytes this sender's sends charge with every buffer in flight.
        need: u64,
        /// The soft limit.
        limit: u64,
        /// The limit would hold this send alone: other locked memory of the user counted too.
        shared: bool,
    },
    /// `net.core.optmem_max`: the socket's option memory cannot hold the notification.
    Optmem {
        /// The current value, if known.
        current: Option<u64>,
        /// The value to set (larger than the current one).
        suggest: u64,
    },
}

/// Decides which limit an `ENOBUFS` from a `MSG_ZEROCOPY` send hit. Both causes return the same
/// errno, so the facts decide: the memlock charge of this send exceeding the limit is certain;
/// with nothing in flight the socket's option memory holds nothing of ours, so `optmem_max` is
/// the cause only when it cannot hold even one notification; otherwise a memlock limit that
/// applies is (other memory of the user is locked), and failing that, option memory.
pub fn enobufs_cause(f: &EnobufsFacts) -> EnobufsCause {
    let this_send = msg_zerocopy_send_bytes(f.send_len, f.page);
    let need = f
        .buffers
        .max(1)
        .saturating_mul(msg_zerocopy_send_bytes(f.buf_size.max(f.send_len), f.page));
    let optmem = EnobufsCause::Optmem {
        current: f.optmem_max,
        suggest: optmem_suggestion(f.optmem_max),
    };
    let optmem_tiny = f.optmem_max.is_some_and(|v| v < OPTMEM_ONE_NOTIFICATION);
    match f.memlock {
        Some(limit) if limit < this_send => EnobufsCause::Memlock {
            need,
            limit,
            shared: false,
        },
        _ if optmem_tiny => optmem,
        Some(limit) if !f.in_flight => EnobufsCause::Memlock {
            need,
            limit,
            shared: true,
        },
        Some(limit) if limit < need => EnobufsCause::Memlock {
            need,
            limit,
            shared: false,
        },
        _ => optmem,
    }
}

fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to) * to
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: u64 = 4096;

    #[test]
    fn ring_pages_match_what_the_kernel_charged() {
        // Smallest RLIMIT_MEMLOCK (pages) with which io_uring_setup(entries) succeeded on 6.18,
        // measured per flag set: none, CQE32, SQE128, NO_SQARRAY.
        let measured: [(u32, [u64; 4]); 10] = [
            (1, [2, 2, 2, 2]),
            (8, [2, 2, 2, 2]),
            (16, [2, 2, 2, 2]),
            (64, [2, 3, 3, 2]),
            (128, [4, 5, 6, 4]),
            (256, [7, 9, 11, 7]),
            (512, [13, 17, 21, 13]),
            (1024, [26, 34, 42, 25]),
            (2048, [51, 67, 83, 49]),
            (4096, [101, 133, 165, 97]),
        ];
        for (entries, pages) in measured {
            let base = RingGeometry::for_entries(entries);
            let shapes = [
                base,
                RingGeometry {
                    cqe32: true,
                    ..base
                },
                RingGeometry {
                    sqe128: true,
                    ..base
                },
                RingGeometry {
                    no_sqarray: true,
                    ..base
                },
            ];
            for (g, want) in shapes.iter().zip(pages) {
                assert_eq!(
                    g.locked_bytes(PAGE),
                    want * PAGE,
                    "{entries} entries, {g:?}"
                );
            }
        }
    }

    #[test]
    fn entries_round_up_and_the_cq_is_twice_the_sq() {
        let g = RingGeometry::for_entries(12);
        assert_eq!((g.sq_entries, g.cq_entries), (16, 32));
        assert_eq!(RingGeometry::for_entries(0).sq_entries, 1);
    }

    #[test]
    fn registered_memory_is_charged_in_pages_or_whole_folios() {
        // A 512 KiB page-aligned region: 128 pages.
        assert_eq!(registered_bytes(0x10000, 512 << 10, PAGE, PAGE), 512 << 10);
        // Unaligned caller memory touches one more page.
        assert_eq!(registered_bytes(0x10010, 8192, PAGE, PAGE), 3 * PAGE);
        // Huge-page memory: whole 2 MiB folios.
        let huge = 2 << 20;
        assert_eq!(registered_bytes(0x20_0000, 4 << 20, PAGE, huge), 4 << 20);
        assert_eq!(registered_bytes(0x20_0000, 1, PAGE, huge), huge);
        assert_eq!(registered_bytes(0x1000, 0, PAGE, PAGE), 0);
    }

    #[test]
    fn uring_zc_needs_the_ring_as_well_as_the_region() {
        // The case: 8 x 64 KiB = 512 KiB registered, a 16-entry ring (2 pages).
        // Measured: ulimit -l 516 fails, 520 works.
        let need = RingGeometry::for_entries(16).locked_bytes(PAGE)
            + registered_bytes(0x7f00_0000_0000, 512 << 10, PAGE, PAGE);
        assert_eq!(ulimit_kib(need, 512 << 10, false), 520);
    }

    #[test]
    fn msg_zerocopy_charges_two_pages_more_than_the_send() {
        // Measured smallest working `ulimit -l` (KiB) for one send of: 64 KiB -> 72,
        // 60000 B -> 64, 4 KiB -> 12, 100000 B -> 104, 1 MiB -> 1032.
        assert_eq!(msg_zerocopy_send_bytes(64 << 10, PAGE), 72 << 10);
        assert_eq!(msg_zerocopy_send_bytes(4096, PAGE), 12 << 10);
        assert_eq!(msg_zerocopy_send_bytes(1 << 20, PAGE), 1032 << 10);
        // Not page multiples: rounded up, one page above the kernel's TCP charge at most.
        assert_eq!(msg_zerocopy_send_bytes(60000, PAGE), 68 << 10);
        assert_eq!(msg_zerocopy_send_bytes(100_000, PAGE), 108 << 10);
    }

    #[test]
    fn ulimit_covers_need_and_others_when_shared() {
        assert_eq!(ulimit_kib(532_480, 65_536, false), 520);
        assert_eq!(ulimit_kib(1, 0, false), 1);
        assert_eq!(ulimit_kib(532_480, 1 << 20, true), 520 + 1024);
    }

    #[test]
    fn optmem_suggestion_is_never_the_current_value() {
        for v in [0, 1, 512, 20480, 131_072, 1 << 20, u64::MAX] {
            let s = optmem_suggestion(Some(v));
            assert!(s > v || v == u64::MAX, "{v} -> {s}");
            assert!(s >= OPTMEM_DEFAULT);
        }
        assert_eq!(optmem_suggestion(Some(1 << 20)), 2 << 20);
        assert_eq!(optmem_suggestion(Some(512)), OPTMEM_DEFAULT);
        assert!(optmem_suggestion(None) > OPTMEM_DEFAULT);
    }

    fn facts() -> EnobufsFacts {
        EnobufsFacts {
            memlock: Some(64 << 10),
            optmem_max: Some(131_072),
            send_len: 64 << 10,
            buffers: 8,
            buf_size: 64 << 10,
            in_flight: false,
            page: PAGE,
        }
    }

    #[test]
    fn a_memlock_limit_below_one_send_is_the_cause_whatever_optmem_is() {
        // The case: ulimit -l 64, 64 KiB sends, optmem_max at its default.
        let c = enobufs_cause(&facts());
        assert_eq!(
            c,
            EnobufsCause::Memlock {
                need: 8 * (72 << 10),
                limit: 64 << 10,
                shared: false
            }
        );
        // Even with a tiny optmem as well, the memlock charge is certain to fail first.
        let c = enobufs_cause(&EnobufsFacts {
            optmem_max: Some(0),
            ..facts()
        });
        assert!(
            matches!(c, EnobufsCause::Memlock { shared: false, .. }),
            "{c:?}"
        );
    }

    #[test]
    fn a_tiny_optmem_is_the_cause_when_memlock_does_not_apply_or_fits() {
        for memlock in [None, Some(8 << 20)] {
            let c = enobufs_cause(&EnobufsFacts {
                memlock,
                optmem_max: Some(512),
                ..facts()
            });
            assert_eq!(
                c,
                EnobufsCause::Optmem {
                    current: Some(512),
                    suggest: OPTMEM_DEFAULT
                },
                "{memlock:?}"
            );
        }
    }

    #[test]
    fn a_fitting_memlock_limit_with_a_sane_optmem_means_other_locked_memory() {
        let c = enobufs_cause(&EnobufsFacts {
            memlock: Some(8 << 20),
            ..facts()
        });
        assert_eq!(
            c,
            EnobufsCause::Memlock {
                need: 8 * (72 << 10),
                limit: 8 << 20,
                shared: true
            }
        );
    }

    #[test]
    fn without_a_memlock_limit_optmem_is_all_that_is_left() {
        let c = enobufs_cause(&EnobufsFacts {
            memlock: None,
            optmem_max: Some(1 << 20),
            ..facts()
        });
        assert_eq!(
            c,
            EnobufsCause::Optmem {
                current: Some(1 << 20),
                suggest: 2 << 20
            }
        );
    }

    #[test]
    fn in_flight_sends_blame_memlock_only_when_the_window_does_not_fit() {
        let busy = EnobufsFacts {
            in_flight: true,
            memlock: Some(256 << 10),
            ..facts()
        };
        assert!(matches!(
            enobufs_cause(&busy),
            EnobufsCause::Memlock { shared: false, .. }
        ));
        let roomy = EnobufsFacts {
            memlock: Some(8 << 20),
            ..busy
        };
        assert!(matches!(enobufs_cause(&roomy), EnobufsCause::Optmem { .. }));
    }
}
