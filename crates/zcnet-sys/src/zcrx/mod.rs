//! io_uring zero-copy receive (zcrx): registering a NIC receive queue with an area of host memory
//! (`IORING_REGISTER_ZCRX_IFQ`, Linux 6.15) and the refill ring through which received buffers
//! are handed back to the kernel.
//!
//! How Linux 6.18 does it (io_uring/zcrx.c `io_register_zcrx_ifq`, io_uring/memmap.c
//! `io_create_region`, Documentation/networking/iou-zcrx.rst):
//! - The ring must have `IORING_SETUP_DEFER_TASKRUN` (hence `SINGLE_ISSUER`) and `CQE32` or
//!   `CQE_MIXED`, else `EINVAL`. The caller needs CAP_NET_ADMIN, else `EPERM`.
//! - The *area* is user memory (page-aligned address and length) that the kernel pins and DMA-maps
//!   for the device; received payloads land there and a RECV_ZC completion's 32-byte CQE carries
//!   an `IoUringZcrxCqe` with the offset.
//! - The *refill ring* lives in a memory region described by an `IoUringRegionDesc`. 6.18
//!   accepts either user memory (`IORING_MEM_REGION_TYPE_USER`, `user_addr` set: pinned by the
//!   kernel) or kernel memory (`user_addr` 0: the kernel allocates and writes back an
//!   `mmap_offset` at which to mmap the ring fd). zcnet passes user memory, as the kernel
//!   documentation does: nothing to mmap, and the memory is an owned [`Mapping`]. The kernel
//!   needs `ALIGN(sizeof(struct io_uring), L1_CACHE_BYTES)` bytes of header (head and tail,
//!   64 bytes on x86-64) followed by `rq_entries` (rounded up to a power of two)
//!   `IoUringZcrxRqe`s; region sizes are page multiples. Following iou-zcrx.rst, zcnet
//!   reserves a whole page for the header (`refill_region_len`). The kernel writes the actual
//!   `rq_entries` and the head/tail/rqes offsets back into the `IoUringZcrxIfqReg`, the area
//!   token into the `IoUringZcrxAreaReg`, and `zcrx_id` (the `zcrx_ifq_idx` of RECV_ZC SQEs).
//! - There is no unregister opcode in 6.18 (`IORING_REGISTER_LAST` is 36 and none of the
//!   register opcodes undoes 32): closing the ring releases every ifq it holds
//!   (`io_unregister_zcrx_ifqs` at ring teardown, which runs asynchronously after the last
//!   reference goes), unpinning the area and the refill region.
//! - Checks happen in this order, which is what the errno says: CAP_NET_ADMIN (`EPERM`); ring
//!   flags (`EINVAL`); struct copies (`EFAULT`); reserved fields, `rq_entries` 0 or above 32768
//!   (`EINVAL`); refill region validation (`EINVAL`/`EFAULT`, or `ENOMEM` past RLIMIT_MEMLOCK
//!   without CAP_IPC_LOCK); the interface index (`ENODEV`); a DMA device for the queue
//!   (`EOPNOTSUPP`: virtual devices such as lo, veth, ifb, tun have none); area import
//!   (`EINVAL`, `EFAULT`, `ENOMEM`); opening the queue for the memory provider (`EOPNOTSUPP`
//!   without queue-management ops, `ERANGE` for a queue index past the device's, `EINVAL` when
//!   tcp-data-split is off, `EEXIST` when the queue already has a provider). A failed
//!   registration frees everything the kernel took before returning.
//! - dma-buf areas (`IORING_ZCRX_AREA_DMABUF`, 6.16; [`ZcrxArea::Dmabuf`],
//!   [`ZcrxIfq::register_dmabuf_for_receive`]): `area.flags` = `IORING_ZCRX_AREA_DMABUF`,
//!   `area.dmabuf_fd` the dma-buf, `area.addr` the *offset* into it (not a pointer) and
//!   `area.len` the length. The kernel takes its own reference (`dma_buf_get`), attaches the
//!   dma-buf to the NIC's DMA device and maps it (`io_import_dmabuf`); completions carry offsets
//!   within the area exactly as for host memory (area id in the bits of
//!   `IORING_ZCRX_AREA_MASK`, `io_zcrx_queue_cqe`) and the refill ring is the same. The CPU
//!   cannot read the data, and the kernel cannot copy into the area: data it would have to copy
//!   (a flow not steered to the queue, payload left in an skb's linear part) ends the RECV_ZC
//!   request: `-EFAULT` from `io_zcrx_copy_chunk` before Linux 6.18, `-ENOMEM` since, when
//!   `io_alloc_fallback_niov` finds no buffer it may copy into for a dma-buf area. The device check comes first, so on lo,
//!   veth, ifb and tun a dma-buf area is `EOPNOTSUPP` like a host one, whatever the fd. Past
//!   it, 6.18's `io_import_area`/`io_import_dmabuf` refuse, in order: a length of 0 or above
//!   1 GiB (`EFAULT`, `io_validate_user_buf_range`; the 1 GiB limit was dropped later), an
//!   offset or length not page-aligned (`EINVAL`), an offset other than 0 (`EINVAL`), an fd that is not
//!   open (`EBADF`) or not a dma-buf (`EINVAL`, `dma_buf_get`), an exporter that cannot attach
//!   or map it for the NIC (its errno), and a length other than the dma-buf's mapped size
//!   (`EINVAL`): in 6.18 the area is the whole dma-buf.

use crate::mem::{Backing, Mapping};
use crate::ring::{Core, TaskRun};
use crate::uring_probe::io_uring_register_raw;
use crate::uring_query::{ZcrxCaps, ZCRX_EVENT_ALLOC_FAIL, ZCRX_EVENT_COPY};
use io_uring::{cqueue, squeue, IoUring};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::Arc;

mod uapi;
pub(crate) use uapi::*;
pub use uapi::{ZcrxStats, ZCRX_MAX_RQ_ENTRIES};

/// Bytes at the end of the refill region where zcnet asks for the [`ZcrxStats`]: past the
/// entries in any case, since [`refill_region_len`] leaves at least a page minus the kernel's
/// header (`ALIGN(sizeof(struct io_uring), L1_CACHE_BYTES)`) after them.
const STATS_TAIL: usize = 64;

/// Bytes of refill-region memory for `rq_entries` entries: one page of header (the kernel
/// needs 64 bytes on x86-64; iou-zcrx.rst reserves a page) plus the entries, with `rq_entries`
/// rounded up to a power of two as the kernel does, clamped to `1..=`[`ZCRX_MAX_RQ_ENTRIES`]
/// (outside that range the kernel refuses the registration before it looks at the region),
/// and the total rounded up to the page size.
pub(crate) fn refill_region_len(rq_entries: u32) -> usize {
    let page = crate::mem::page_size();
    let n = rq_entries.clamp(1, ZCRX_MAX_RQ_ENTRIES).next_power_of_two() as usize;
    let bytes = page + n * std::mem::size_of::<IoUringZcrxRqe>();
    bytes.div_ceil(page) * page
}

/// What an errno from `IORING_REGISTER_ZCRX_IFQ` most likely means (for reports; the errno
/// itself stays in the `io::Error`).
pub fn explain_register_errno(errno: i32) -> &'static str {
    match errno {
        libc::EPERM => "needs CAP_NET_ADMIN",
        libc::EINVAL => {
            "refused: ring without DEFER_TASKRUN or CQE32, rq_entries 0 or above 32768, bad \
             area or region, unknown register opcode (kernel before 6.15), or tcp-data-split off"
        }
        libc::ENODEV => "no interface with that index in this network namespace",
        libc::EOPNOTSUPP => {
            "the device cannot do it: no DMA device or queue-management ops (virtual devices, \
             drivers without header split), or a kernel built without CONFIG_IO_URING_ZCRX"
        }
        libc::ERANGE => "receive queue index out of range for the device",
        libc::EEXIST => "the receive queue already has a memory provider (zcrx or devmem)",
        libc::ENOMEM => "out of memory, or pinned memory past RLIMIT_MEMLOCK",
        libc::EFAULT => "bad address in the registration structs",
        _ => "unexpected error",
    }
}

/// What the kernel wrote back on a successful registration.
#[derive(Debug, Clone, Copy)]
struct Registered {
    reg: IoUringZcrxIfqReg,
    area_token: u64,
    /// Where in the refill region the kernel keeps a [`ZcrxStats`] (Linux 7.2), if it took
    /// the request.
    stats_offset: Option<usize>,
    /// The registration's flags ([`ZCRX_REG_NODEV`]).
    flags: u32,
    /// Event types asked for (`1 << ZCRX_EVENT_*`), delivered with [`ZCRX_EVENT_TAG`].
    events: u32,
}

/// What a registration asks for beyond the queue and the memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct RegOpts {
    /// `io_uring_zcrx_ifq_reg.flags` ([`ZCRX_REG_NODEV`]).
    flags: u32,
    /// `io_uring_zcrx_ifq_reg.rx_buf_len`: 0 for the kernel's default (a page).
    rx_buf_len: u32,
}

/// What of the event descriptor (Linux 7.2) to ask for, from the kernel's own answer to
/// `IORING_REGISTER_QUERY` ([`ZcrxCaps`]), never from its version: the copy statistics where it
/// keeps them (`ZCRX_EVENT_DESC_FLAG_STATS`, at an offset aligned as it says) and the
/// ALLOC_FAIL and COPY events where it has them and can re-arm them (`ZCRX_CTRL_ARM_EVENT`).
/// `(stats alignment, event mask)`; `None` where the kernel takes no descriptor (before 7.2
/// `event_desc` is a reserved field that must be 0).
fn event_request(caps: &ZcrxCaps) -> Option<(usize, u32)> {
    if !caps.events() {
        return None;
    }
    let align = caps.stats().map_or(0, |(_, a)| a as usize);
    let mut mask = 0;
    if caps.arm_event() {
        for ty in [ZCRX_EVENT_ALLOC_FAIL, ZCRX_EVENT_COPY] {
            if caps.event(ty) {
                mask |= 1 << ty;
            }
        }
    }
    (align > 0 || mask != 0).then_some((align, mask))
}

/// `IORING_REGISTER_ZCRX_IFQ` on `ring` for `area` and the refill region `rq_mem`, with the
/// structs passed by `*mut` because the kernel writes them back. The kernel's errno on failure.
///
/// # Safety
/// On success the kernel pins `area` and `rq_mem` and may write into them (received data, the
/// refill ring's head, the statistics) until the ring is closed. The caller must ensure no Rust
/// reference to their bytes exists (they are not cut into slots, nor `Backing::Caller`) and
/// that every later access to them goes through raw pointers or atomics.
unsafe fn register_raw(
    ring: BorrowedFd<'_>,
    if_idx: u32,
    if_rxq: u32,
    rq_entries: u32,
    area: &Mapping,
    rq_mem: &Mapping,
    opts: RegOpts,
) -> io::Result<Registered> {
    let area_reg = IoUringZcrxAreaReg {
        addr: area.addr() as u64,
        len: area.len() as u64,
        ..IoUringZcrxAreaReg::default()
    };
    // SAFETY: the caller's contract covers `area` (the memory `area_reg` describes) and `rq_mem`.
    unsafe { register_area_raw(ring, if_idx, if_rxq, rq_entries, area_reg, rq_mem, opts) }
}

/// The `IORING_ZCRX_AREA_DMABUF` area registration for `len` bytes at `offset` of `dmabuf`.
fn dmabuf_area_reg(dmabuf: BorrowedFd<'_>, offset: u64, len: u64) -> IoUringZcrxAreaReg {
    IoUringZcrxAreaReg {
        addr: offset,
        len,
        flags: IORING_ZCRX_AREA_DMABUF,
        // An open fd is never negative.
        dmabuf_fd: dmabuf.as_raw_fd() as u32,
        ..IoUringZcrxAreaReg::default()
    }
}

/// Where zcnet asks the kernel to keep the statistics in a refill region of `len` bytes: at
/// the start of its last [`STATS_TAIL`] bytes (past the entries: see [`STATS_TAIL`]), rounded
/// down to the alignment the kernel asks for (8 in 7.2).
fn stats_offset_in(len: usize, align: usize) -> usize {
    let off = len - STATS_TAIL;
    off - off % align.max(1)
}

/// As [`register_raw`] with the area registration given as is (host memory or a dma-buf).
/// Where the kernel says it takes an event descriptor ([`event_request`]) it is asked for its
/// copy statistics, kept at the end of `rq_mem`, and for its ALLOC_FAIL and COPY events.
///
/// # Safety
/// As for [`register_raw`], for the memory `area_reg` describes when it is host memory; a
/// dma-buf fd in it must be open for the call (the kernel takes its own reference).
unsafe fn register_area_raw(
    ring: BorrowedFd<'_>,
    if_idx: u32,
    if_rxq: u32,
    rq_entries: u32,
    area_reg: IoUringZcrxAreaReg,
    rq_mem: &Mapping,
    opts: RegOpts,
) -> io::Result<Registered> {
    let events = event_request(&ZcrxCaps::get()).map(|(align, mask)| {
        let stats = (align > 0).then(|| stats_offset_in(rq_mem.len(), align));
        (stats, mask)
    });
    // SAFETY: the caller's contract, passed on.
    unsafe {
        register_once(
            ring, if_idx, if_rxq, rq_entries, area_reg, rq_mem, opts, events,
        )
    }
}

/// One `IORING_REGISTER_ZCRX_IFQ` call; with `events` = `(stats offset, event mask)` an event
/// descriptor asks for the statistics at that offset of the refill region (when given) and for
/// the events of the mask (delivered with [`ZCRX_EVENT_TAG`]).
///
/// # Safety
/// As for [`register_area_raw`].
#[allow(clippy::too_many_arguments)]
unsafe fn register_once(
    ring: BorrowedFd<'_>,
    if_idx: u32,
    if_rxq: u32,
    rq_entries: u32,
    mut area_reg: IoUringZcrxAreaReg,
    rq_mem: &Mapping,
    opts: RegOpts,
    events: Option<(Option<usize>, u32)>,
) -> io::Result<Registered> {
    let (stats_offset, event_mask) = events.unwrap_or((None, 0));
    let mut region = IoUringRegionDesc {
        user_addr: rq_mem.addr() as u64,
        size: rq_mem.len() as u64,
        flags: IORING_MEM_REGION_TYPE_USER,
        ..IoUringRegionDesc::default()
    };
    let mut desc = ZcrxEventDesc {
        user_data: ZCRX_EVENT_TAG,
        type_mask: event_mask,
        flags: if stats_offset.is_some() {
            ZCRX_EVENT_DESC_FLAG_STATS
        } else {
            0
        },
        stats_offset: stats_offset.unwrap_or(0) as u64,
        ..ZcrxEventDesc::default()
    };
    let mut reg = IoUringZcrxIfqReg {
        if_idx,
        if_rxq,
        rq_entries,
        flags: opts.flags,
        area_ptr: &mut area_reg as *mut IoUringZcrxAreaReg as u64,
        region_ptr: &mut region as *mut IoUringRegionDesc as u64,
        event_desc: match events {
            Some(_) => &mut desc as *mut ZcrxEventDesc as u64,
            None => 0,
        },
        rx_buf_len: opts.rx_buf_len,
        ..IoUringZcrxIfqReg::default()
    };
    // SAFETY: reg, area_reg, region and desc are live, writable locals of exactly the uapi
    // layouts (pinned by the tests) and outlive the call; the kernel reads and writes back only
    // those structs. The memory they describe (the statistics lie inside `rq_mem`) is covered
    // by the caller's contract.
    unsafe {
        io_uring_register_raw(
            ring,
            IORING_REGISTER_ZCRX_IFQ,
            (&mut reg as *mut IoUringZcrxIfqReg).cast(),
            1,
        )?
    };
    Ok(Registered {
        reg,
        area_token: area_reg.rq_area_token,
        stats_offset,
        flags: opts.flags,
        events: event_mask,
    })
}

mod receive;
mod refill;
mod register;

pub use receive::*;
use refill::RefillRing;
pub use register::HostRegistration;

/// The memory of a zcrx area: host memory the kernel pins, or a dma-buf it attaches to the NIC.
#[derive(Debug)]
pub enum ZcrxArea {
    /// Page-aligned host memory (anonymous or huge pages), readable by the CPU.
    Host(Mapping),
    /// `len` bytes at `offset` of a dma-buf (`IORING_ZCRX_AREA_DMABUF`, 6.16+): device memory
    /// the CPU does not read. The fd stays open as long as the registration.
    Dmabuf {
        /// The dma-buf.
        fd: Arc<OwnedFd>,
        /// Where the area starts in the dma-buf (6.18 accepts only 0).
        offset: u64,
        /// Bytes (6.18: the dma-buf's whole mapped size).
        len: u64,
    },
}

impl ZcrxArea {
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            ZcrxArea::Host(m) => m.len() as u64,
            ZcrxArea::Dmabuf { len, .. } => *len,
        }
    }

    /// Whether the area has no bytes (never, once registered).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether it is a dma-buf.
    pub(crate) fn is_dmabuf(&self) -> bool {
        matches!(self, ZcrxArea::Dmabuf { .. })
    }
}

/// Where a RECV_ZC fragment of a dma-buf area is in the dma-buf: `cqe_off` is the
/// `IoUringZcrxCqe::off` (area-id bits ignored: the offset below them is relative to the
/// area's start, `io_zcrx_queue_cqe`), `len` the CQE's `res`; the area is `area_len` bytes at
/// `area_offset` of the dma-buf. `(offset in the dma-buf, len)`, or `None` when the fragment
/// does not lie inside the area.
pub fn dmabuf_range(area_offset: u64, area_len: u64, cqe_off: u64, len: u32) -> Option<(u64, u64)> {
    let off = cqe_off & !IORING_ZCRX_AREA_MASK;
    if off.checked_add(u64::from(len))? > area_len {
        return None;
    }
    Some((area_offset.checked_add(off)?, u64::from(len)))
}

/// A registered zero-copy receive interface queue, with its ring, area and refill ring.
///
/// Fields are dropped in declaration order: the ring is closed first (the kernel then releases
/// the ifq and unpins the area and refill region), then the memory is unmapped. The pages stay
/// pinned by the kernel until its asynchronous teardown finishes, so even if it writes to them
/// late it writes to pages no longer mapped here, never to reused memory. A dma-buf area's fd
/// is closed last; the kernel holds its own reference to the dma-buf until its teardown.
///
/// The ring is SINGLE_ISSUER|DEFER_TASKRUN: only the thread that created it may submit and wait
/// (other threads get `EEXIST`). The raw pointers of the refill ring keep this type `!Send`.
pub struct ZcrxIfq {
    ring: Core<io_uring::cqueue::Entry32>,
    refill: RefillRing,
    rq_mem: Mapping,
    area: ZcrxArea,
    zcrx_id: u32,
    if_idx: u32,
    if_rxq: u32,
    rq_entries: u32,
    offsets: IoUringZcrxOffsets,
    area_token: u64,
    /// Registered with [`ZCRX_REG_NODEV`]: no device; refills need a flush.
    nodev: bool,
    /// The kernel's [`ZcrxStats`] in `rq_mem`, when it took the request (Linux 7.2).
    stats: Option<NonNull<ZcrxStats>>,
    /// The size of each receive buffer (`rx_buf_len` as the kernel wrote it back; a page where
    /// it writes nothing, before 7.0).
    buf_len: u32,
    /// Event types the kernel was asked to report (`1 << ZCRX_EVENT_*`).
    events: u32,
}

impl std::fmt::Debug for ZcrxIfq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZcrxIfq")
            .field("zcrx_id", &self.zcrx_id)
            .field("if_idx", &self.if_idx)
            .field("if_rxq", &self.if_rxq)
            .field("rq_entries", &self.rq_entries)
            .field("offsets", &self.offsets)
            .field("area", &self.area)
            .field("rq_mem", &self.rq_mem)
            .field("nodev", &self.nodev)
            .field("stats", &self.stats.is_some())
            .field("buf_len", &self.buf_len)
            .field("events", &self.events)
            .finish()
    }
}

impl ZcrxIfq {
    /// The id the kernel gave this ifq: the `zcrx_ifq_idx` of RECV_ZC requests
    /// (`io_uring::opcode::RecvZc::ifq`).
    pub(crate) fn id(&self) -> u32 {
        self.zcrx_id
    }

    /// Whether it was registered without a device (`Self::register_nodev_on`): every byte is
    /// copied by the kernel, and refills need `Self::flush_refill_queue`.
    pub fn is_nodev(&self) -> bool {
        self.nodev
    }

    /// The kernel's copy statistics (Linux 7.2: cumulative copy-fallback completions and
    /// bytes), or `None` where the kernel keeps none for this ifq. Read after the completions
    /// of interest were drained: with DEFER_TASKRUN the kernel does the receive work, copy
    /// and counters included, inside `io_uring_enter` on this thread, so a drained completion's
    /// copy is already counted.
    pub fn kernel_stats(&self) -> Option<ZcrxStats> {
        let p = self.stats?;
        // SAFETY: `p` was checked to lie 8-aligned inside `rq_mem`, which lives as long as
        // `self`; the kernel updates the counters in place, so they are read as atomics
        // (`AtomicU64` has the layout of `u64`), never through a reference to the struct.
        let (count, bytes) = unsafe {
            let base = p.as_ptr().cast::<std::sync::atomic::AtomicU64>();
            (&*base, &*base.add(1))
        };
        Some(ZcrxStats {
            copy_count: count.load(Ordering::Relaxed),
            copy_bytes: bytes.load(Ordering::Relaxed),
        })
    }

    /// `IORING_REGISTER_ZCRX_CTRL` with [`ZCRX_CTRL_FLUSH_RQ`]: the kernel consumes the refill
    /// ring now. A NODEV ifq needs it after every publish: nothing else consumes its refill
    /// ring, and once every buffer is out receiving stalls silently (liburing test/zcrx.c
    /// flushes after returning buffers). Errors are the kernel's (`EINVAL` before Linux 7.1).
    pub(crate) fn flush_refill_queue(&self) -> io::Result<()> {
        self.ctrl(ZCRX_CTRL_FLUSH_RQ, [0; 6])
    }

    /// `IORING_REGISTER_ZCRX_CTRL` with [`ZCRX_CTRL_ARM_EVENT`] (Linux 7.2): event type `ty`
    /// (`ZCRX_EVENT_*`), which fires once, may fire again. `EINVAL` when it has not fired since
    /// it was last armed, or is unknown (io_uring/zcrx.c `zcrx_arm_notif`).
    pub(crate) fn arm_event(&self, ty: u32) -> io::Result<()> {
        // zcrx_ctrl_arm_event: `event_type` is the union's first u32, the rest reserved.
        let mut first = [0u8; 8];
        first[..4].copy_from_slice(&ty.to_ne_bytes());
        self.ctrl(
            ZCRX_CTRL_ARM_EVENT,
            [u64::from_ne_bytes(first), 0, 0, 0, 0, 0],
        )
    }

    /// Event types the kernel was asked to report for this ifq (`1 << ZCRX_EVENT_*`): where
    /// it says it has them ([`ZcrxCaps`]), ALLOC_FAIL and COPY.
    #[cfg(test)]
    pub(crate) fn event_mask(&self) -> u32 {
        self.events
    }

    /// The size of each receive buffer: the kernel's `rx_buf_len` (a page unless a larger one
    /// was asked for and granted). A completion never spans two buffers.
    pub(crate) fn buf_len(&self) -> u32 {
        self.buf_len
    }

    /// One `IORING_REGISTER_ZCRX_CTRL` call of `op` with the 48-byte union `arg`.
    fn ctrl(&self, op: u32, arg: [u64; 6]) -> io::Result<()> {
        let mut ctrl = ZcrxCtrl {
            zcrx_id: self.zcrx_id,
            op,
            arg,
            ..ZcrxCtrl::default()
        };
        // SAFETY: the ring fd is open (owned by self) for the call.
        let ring = unsafe { BorrowedFd::borrow_raw(self.ring.uring().as_raw_fd()) };
        // SAFETY: `ctrl` is a live local of the uapi layout (pinned by the tests) that outlives
        // the call; the kernel only reads (and for other ops writes) those 72 bytes.
        unsafe {
            io_uring_register_raw(
                ring,
                IORING_REGISTER_ZCRX_CTRL,
                (&mut ctrl as *mut ZcrxCtrl).cast(),
                0,
            )?
        };
        Ok(())
    }

    /// The ring, to queue RECV_ZC requests, wait, and read their 32-byte CQEs.
    pub(crate) fn ring_mut(&mut self) -> &mut Core<io_uring::cqueue::Entry32> {
        &mut self.ring
    }

    /// Registers `efd` (`IOring_REGISTER_EVENTFD`): the kernel signals it for every completion
    /// posted (and, on a DEFER_TASKRUN ring, when work is queued for the next wait), so an
    /// event loop can wait on it. The kernel takes its own reference: `efd` may be dropped
    /// later. `EBUSY` when one is registered already.
    pub fn register_eventfd(&self, efd: &crate::epoll::EventFd) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        self.ring
            .uring()
            .submitter()
            .register_eventfd(efd.as_raw_fd())
    }

    /// Length of the area in bytes.
    pub(crate) fn area_len(&self) -> usize {
        match &self.area {
            ZcrxArea::Host(m) => m.len(),
            // A registered dma-buf area's length was accepted by the kernel for this machine's
            // address space (it is below 1 GiB in 6.18).
            ZcrxArea::Dmabuf { len, .. } => usize::try_from(*len).unwrap_or(usize::MAX),
        }
    }

    /// The area: host memory or a dma-buf.
    pub fn area(&self) -> &ZcrxArea {
        &self.area
    }

    /// Whether the area is a dma-buf (fragments are device memory: `Self::area_bytes` is
    /// `None`, [`dmabuf_range`] says where they are).
    pub fn is_dmabuf(&self) -> bool {
        self.area.is_dmabuf()
    }

    /// The id of the area in completions and refill entries (`rq_area_token >>`
    /// `IORING_ZCRX_AREA_SHIFT`; always 0 in 6.18, which has one area per ifq).
    pub fn area_id(&self) -> u32 {
        (self.area_token >> IORING_ZCRX_AREA_SHIFT) as u32
    }

    /// The area token the kernel returned (`rq_area_token`), ORed into refill entries.
    pub(crate) fn area_token(&self) -> u64 {
        self.area_token
    }

    /// Queues the buffer of a RECV_ZC completion for return to the kernel: `cqe_off` is the
    /// `IoUringZcrxCqe::off` it came with, `len` its length (the CQE's `res`). `false` when
    /// the refill ring is full. Not visible to the kernel until [`Self::refill_commit`].
    pub(crate) fn refill_push(&mut self, cqe_off: u64, len: u32) -> bool {
        self.refill.push(IoUringZcrxRqe {
            off: (cqe_off & !IORING_ZCRX_AREA_MASK) | self.area_token,
            len,
            pad: 0,
        })
    }

    /// Publishes the pushed refill entries to the kernel.
    pub(crate) fn refill_commit(&mut self) {
        self.refill.commit();
    }

    /// The `len` received bytes at `cqe_off` (an `IoUringZcrxCqe::off`; the area-id bits are
    /// ignored); `None` when the range is outside the area, and always for a dma-buf area (the
    /// CPU cannot read device memory).
    ///
    /// # Safety
    /// The kernel writes into area buffers it owns. The range must be (part of) a buffer the
    /// kernel handed over in a RECV_ZC completion and that has not been returned with
    /// [`Self::refill_push`] since: only then does nothing write it while the slice lives.
    pub(crate) unsafe fn area_bytes(&self, cqe_off: u64, len: usize) -> Option<&[u8]> {
        let ZcrxArea::Host(area) = &self.area else {
            return None;
        };
        let off = usize::try_from(cqe_off & !IORING_ZCRX_AREA_MASK).ok()?;
        if off.checked_add(len)? > area.len() {
            return None;
        }
        // SAFETY: [off, off+len) is inside the area, mapped for as long as `self`; the caller
        // guarantees the kernel does not write it while the borrow of `self` lasts.
        Some(unsafe { std::slice::from_raw_parts((area.addr() + off) as *const u8, len) })
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod receive_tests;

#[cfg(test)]
mod nodev_tests;

#[cfg(test)]
mod dmabuf_tests;
