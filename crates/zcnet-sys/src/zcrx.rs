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
//!   an [`IoUringZcrxCqe`] with the offset.
//! - The *refill ring* lives in a memory region described by an [`IoUringRegionDesc`]. 6.18
//!   accepts either user memory (`IORING_MEM_REGION_TYPE_USER`, `user_addr` set: pinned by the
//!   kernel) or kernel memory (`user_addr` 0: the kernel allocates and writes back an
//!   `mmap_offset` at which to mmap the ring fd). zcnet passes user memory, as the kernel
//!   documentation does: nothing to mmap, and the memory is an owned [`Mapping`]. The kernel
//!   needs `ALIGN(sizeof(struct io_uring), L1_CACHE_BYTES)` bytes of header (head and tail,
//!   64 bytes on x86-64) followed by `rq_entries` (rounded up to a power of two)
//!   [`IoUringZcrxRqe`]s; region sizes are page multiples. Following iou-zcrx.rst, zcnet
//!   reserves a whole page for the header ([`refill_region_len`]). The kernel writes the actual
//!   `rq_entries` and the head/tail/rqes offsets back into the [`IoUringZcrxIfqReg`], the area
//!   token into the [`IoUringZcrxAreaReg`], and `zcrx_id` (the `zcrx_ifq_idx` of RECV_ZC SQEs).
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
//!   [`ZcrxIfq::register_dmabuf_for_receive`]): `area.flags` = [`IORING_ZCRX_AREA_DMABUF`],
//!   `area.dmabuf_fd` the dma-buf, `area.addr` the *offset* into it (not a pointer) and
//!   `area.len` the length. The kernel takes its own reference (`dma_buf_get`), attaches the
//!   dma-buf to the NIC's DMA device and maps it (`io_import_dmabuf`); completions carry offsets
//!   within the area exactly as for host memory (area id in the bits of
//!   [`IORING_ZCRX_AREA_MASK`], `io_zcrx_queue_cqe`) and the refill ring is the same. The CPU
//!   cannot read the data, and the kernel cannot copy into the area: data it would have to copy
//!   (a flow not steered to the queue, payload left in an skb's linear part) ends the RECV_ZC
//!   request with `-EFAULT` (`io_zcrx_copy_chunk`). The device check comes first, so on lo,
//!   veth, ifb and tun a dma-buf area is `EOPNOTSUPP` like a host one, whatever the fd. Past
//!   it, 6.18's `io_import_area`/`io_import_dmabuf` refuse, in order: a length of 0 or above
//!   1 GiB (`EFAULT`, `io_validate_user_buf_range`; the 1 GiB limit was dropped later), an
//!   offset or length not page-aligned (`EINVAL`), an offset other than 0 (`EINVAL`), an fd that is not
//!   open (`EBADF`) or not a dma-buf (`EINVAL`, `dma_buf_get`), an exporter that cannot attach
//!   or map it for the NIC (its errno), and a length other than the dma-buf's mapped size
//!   (`EINVAL`): in 6.18 the area is the whole dma-buf.

use crate::mem::{Backing, Mapping};
use crate::uring_probe::io_uring_register_raw;
use crate::uring_query::{ZcrxCaps, ZCRX_EVENT_ALLOC_FAIL, ZCRX_EVENT_COPY};
use io_uring::{cqueue, squeue, IoUring};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// `IORING_REGISTER_ZCRX_IFQ` (6.15).
pub const IORING_REGISTER_ZCRX_IFQ: u32 = 32;
/// `IORING_MEM_REGION_TYPE_USER`: the region's memory is the user's (`user_addr`).
pub const IORING_MEM_REGION_TYPE_USER: u32 = 1;
/// `IORING_ZCRX_AREA_DMABUF`: the area is a dma-buf (`dmabuf_fd`), not user memory.
pub const IORING_ZCRX_AREA_DMABUF: u32 = 1;
/// `IORING_ZCRX_AREA_SHIFT`: the bit from which the area id is encoded into offsets.
pub const IORING_ZCRX_AREA_SHIFT: u32 = 48;
/// `IORING_ZCRX_AREA_MASK`: the area-id bits of an offset.
pub const IORING_ZCRX_AREA_MASK: u64 = !((1u64 << IORING_ZCRX_AREA_SHIFT) - 1);
/// The most refill-ring entries the kernel accepts (`IO_RQ_MAX_ENTRIES`, io_uring/zcrx.c);
/// more is `EINVAL` unless the ring has `IORING_SETUP_CLAMP`.
pub const ZCRX_MAX_RQ_ENTRIES: u32 = 32768;
/// Submission-queue entries of the ring [`ZcrxIfq::register`] creates.
pub const DEFAULT_RING_ENTRIES: u32 = 256;

/// A ring that zero-copy receive accepts: 32-byte CQEs (`IORING_SETUP_CQE32`, set by the
/// `cqueue::Entry32` type), built with SINGLE_ISSUER and DEFER_TASKRUN.
pub type ZcrxRing = IoUring<squeue::Entry, cqueue::Entry32>;

/// `struct io_uring_zcrx_rqe` (16 bytes): one refill-ring entry.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IoUringZcrxRqe {
    /// `off`: area offset of the buffer, ORed with the area token.
    pub off: u64,
    /// `len`.
    pub len: u32,
    /// `__pad`.
    pub pad: u32,
}

/// `struct io_uring_zcrx_cqe` (16 bytes): the second half of a RECV_ZC 32-byte CQE.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IoUringZcrxCqe {
    /// `off`: area id in the bits of [`IORING_ZCRX_AREA_MASK`], offset in the area below.
    pub off: u64,
    /// `__pad`.
    pub pad: u64,
}

/// `struct io_uring_zcrx_offsets` (32 bytes): where head, tail and entries of the refill ring
/// are in its region (written by the kernel).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IoUringZcrxOffsets {
    /// `head` (written by the kernel as it consumes entries).
    pub head: u32,
    /// `tail` (written by the user as it adds entries).
    pub tail: u32,
    /// `rqes`: the entry array.
    pub rqes: u32,
    /// `__resv2`.
    pub resv2: u32,
    /// `__resv`.
    pub resv: [u64; 2],
}

/// `struct io_uring_zcrx_area_reg` (48 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IoUringZcrxAreaReg {
    /// `addr`: start (page-aligned), or the dma-buf offset (must be 0).
    pub addr: u64,
    /// `len`: page multiple.
    pub len: u64,
    /// `rq_area_token` (out; must be 0 in).
    pub rq_area_token: u64,
    /// `flags`: [`IORING_ZCRX_AREA_DMABUF`].
    pub flags: u32,
    /// `dmabuf_fd`.
    pub dmabuf_fd: u32,
    /// `__resv2`.
    pub resv2: [u64; 2],
}

/// `struct io_uring_region_desc` (64 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IoUringRegionDesc {
    /// `user_addr`: the memory, with [`IORING_MEM_REGION_TYPE_USER`]; 0 otherwise.
    pub user_addr: u64,
    /// `size`: page multiple.
    pub size: u64,
    /// `flags`: [`IORING_MEM_REGION_TYPE_USER`].
    pub flags: u32,
    /// `id` (must be 0).
    pub id: u32,
    /// `mmap_offset` (out, kernel-allocated regions only; must be 0 in).
    pub mmap_offset: u64,
    /// `__resv`.
    pub resv: [u64; 4],
}

/// `struct io_uring_zcrx_ifq_reg` (96 bytes), the argument of `IORING_REGISTER_ZCRX_IFQ`.
/// In 6.18 the field after `zcrx_id` is `__resv2` and the next 24 bytes `__resv[3]`, all of
/// which must be 0 (else `EINVAL`); Linux 7.2 names them `rx_buf_len` and `event_desc`,
/// `__resv[2]` (include/uapi/linux/io_uring.h), with 0 still meaning "as before".
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IoUringZcrxIfqReg {
    /// `if_idx`: interface index.
    pub if_idx: u32,
    /// `if_rxq`: hardware receive queue.
    pub if_rxq: u32,
    /// `rq_entries`: refill-ring entries (in; the kernel writes back the power of two it used).
    pub rq_entries: u32,
    /// `flags` (must be 0 in 6.18; [`ZCRX_REG_NODEV`] from Linux 7.1).
    pub flags: u32,
    /// `area_ptr`: pointer to an [`IoUringZcrxAreaReg`] (the kernel writes it back).
    pub area_ptr: u64,
    /// `region_ptr`: pointer to an [`IoUringRegionDesc`] (the kernel writes it back).
    pub region_ptr: u64,
    /// `offsets` (out).
    pub offsets: IoUringZcrxOffsets,
    /// `zcrx_id` (out; must be 0 in).
    pub zcrx_id: u32,
    /// `rx_buf_len` (7.2; `__resv2` before): buffer size, 0 for the default `PAGE_SIZE`.
    pub rx_buf_len: u32,
    /// `event_desc` (7.2; `__resv[0]` before, which must be 0): pointer to a
    /// [`ZcrxEventDesc`], or 0.
    pub event_desc: u64,
    /// `__resv` (must be 0).
    pub resv: [u64; 2],
}

/// `ZCRX_REG_NODEV` (Linux 7.1, `enum zcrx_reg_flags`): an ifq without a network device, with
/// `if_idx` and `if_rxq` 0. Every received byte is *copied* into the area by the kernel, and
/// refill entries are not consumed until [`ZcrxIfq::flush_refill_queue`]
/// (`ZCRX_CTRL_FLUSH_RQ`). 6.18 refuses any `flags` with `EINVAL`.
pub const ZCRX_REG_NODEV: u32 = 2;
/// `IORING_REGISTER_ZCRX_CTRL` (Linux 7.1): auxiliary zcrx operations ([`ZcrxCtrl`]).
pub const IORING_REGISTER_ZCRX_CTRL: u32 = 36;
/// `ZCRX_CTRL_FLUSH_RQ` (`enum zcrx_ctrl_op`): make the kernel consume the refill ring now.
pub const ZCRX_CTRL_FLUSH_RQ: u32 = 0;
/// `ZCRX_CTRL_ARM_EVENT` (Linux 7.2): let an event type that fired fire again
/// (`zcrx_ctrl_arm_event.event_type`; `EINVAL` for a type that has not fired).
pub const ZCRX_CTRL_ARM_EVENT: u32 = 2;
/// `user_data` of the event completions zcnet asks for (`zcrx_event_desc.user_data`); never a
/// connection's, nor [`ZCRX_CANCEL_TAG`].
pub const ZCRX_EVENT_TAG: u64 = u64::MAX - 1;
/// `ZCRX_EVENT_DESC_FLAG_STATS` (Linux 7.2, `enum zcrx_event_desc_flags`): `stats_offset`
/// names where in the refill region the kernel keeps a [`ZcrxStats`].
pub const ZCRX_EVENT_DESC_FLAG_STATS: u32 = 1;

/// `struct zcrx_ctrl` (72 bytes), the argument of `IORING_REGISTER_ZCRX_CTRL` (`nr_args` 0,
/// as liburing's test/zcrx.c passes it): `zcrx_id`, `op`, `__resv[2]`, then a 48-byte union
/// (`zcrx_ctrl_flush_rq` is `__resv[6]`, all 0; `zcrx_ctrl_export` is an fd and padding).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ZcrxCtrl {
    /// `zcrx_id`: the ifq.
    pub zcrx_id: u32,
    /// `op`: [`ZCRX_CTRL_FLUSH_RQ`], ...
    pub op: u32,
    /// `__resv` (must be 0).
    pub resv: [u64; 2],
    /// The op's union member (all 0 for a flush).
    pub arg: [u64; 6],
}

/// `struct zcrx_event_desc` (96 bytes, Linux 7.2): notifications (`type_mask`, none here) and
/// statistics (`flags` = [`ZCRX_EVENT_DESC_FLAG_STATS`], `stats_offset` from the start of the
/// refill region).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ZcrxEventDesc {
    /// `user_data` of notification CQEs.
    pub user_data: u64,
    /// `type_mask`: notification types wanted (`1 << ZCRX_EVENT_*`).
    pub type_mask: u32,
    /// `flags`: [`ZCRX_EVENT_DESC_FLAG_STATS`].
    pub flags: u32,
    /// `stats_offset`: where the [`ZcrxStats`] is, from the start of the refill region.
    pub stats_offset: u64,
    /// `__resv2` (must be 0).
    pub resv2: [u64; 9],
}

/// `struct zcrx_stats` (16 bytes, Linux 7.2), kept up to date by the kernel in the refill
/// region: cumulative copy-fallback completions and bytes the kernel copied into the area.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ZcrxStats {
    /// `copy_count`: completions whose bytes the kernel copied.
    pub copy_count: u64,
    /// `copy_bytes`: bytes the kernel copied.
    pub copy_bytes: u64,
}

/// Bytes at the end of the refill region where zcnet asks for the [`ZcrxStats`]: past the
/// entries in any case, since [`refill_region_len`] leaves at least a page minus the kernel's
/// header (`ALIGN(sizeof(struct io_uring), L1_CACHE_BYTES)`) after them.
const STATS_TAIL: usize = 64;

/// Bytes of refill-region memory for `rq_entries` entries: one page of header (the kernel
/// needs 64 bytes on x86-64; iou-zcrx.rst reserves a page) plus the entries, with `rq_entries`
/// rounded up to a power of two as the kernel does, clamped to `1..=`[`ZCRX_MAX_RQ_ENTRIES`]
/// (outside that range the kernel refuses the registration before it looks at the region),
/// and the total rounded up to the page size.
pub fn refill_region_len(rq_entries: u32) -> usize {
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

/// The user side of the refill ring: raw pointers into a region shared with the kernel, which
/// reads entries up to `tail` and publishes how far it got in `head`.
struct RefillRing {
    head: NonNull<AtomicU32>,
    tail: NonNull<AtomicU32>,
    rqes: NonNull<IoUringZcrxRqe>,
    entries: u32,
    /// Entries written but perhaps not yet published end here.
    local_tail: u32,
}

impl RefillRing {
    /// Validates `off`/`entries` against the region `[base, base+len)` and builds the ring.
    ///
    /// # Safety
    /// `[base, base+len)` must be mapped, readable and writable for as long as the ring is used,
    /// and accessed by nothing but this ring and the kernel.
    unsafe fn new(
        base: NonNull<u8>,
        len: usize,
        off: &IoUringZcrxOffsets,
        entries: u32,
    ) -> io::Result<RefillRing> {
        let bad = |what: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("kernel returned a refill ring that does not fit its region: {what}"),
            )
        };
        if entries == 0 || !entries.is_power_of_two() {
            return Err(bad("entries not a power of two"));
        }
        let (head, tail, rqes) = (off.head as usize, off.tail as usize, off.rqes as usize);
        let rq_bytes = (entries as usize)
            .checked_mul(std::mem::size_of::<IoUringZcrxRqe>())
            .and_then(|b| b.checked_add(rqes))
            .ok_or_else(|| bad("size overflow"))?;
        if head % 4 != 0 || tail % 4 != 0 || rqes % 8 != 0 {
            return Err(bad("misaligned offsets"));
        }
        if head + 4 > len || tail + 4 > len || rq_bytes > len {
            return Err(bad("offsets past the end"));
        }
        // SAFETY: every offset was just checked to lie inside [base, base+len) with room for the
        // object and its alignment (the base is page-aligned); the caller keeps it mapped.
        let ring = unsafe {
            RefillRing {
                head: base.add(head).cast(),
                tail: base.add(tail).cast(),
                rqes: base.add(rqes).cast(),
                entries,
                local_tail: 0,
            }
        };
        let local_tail = ring.tail().load(Ordering::Relaxed);
        Ok(RefillRing { local_tail, ..ring })
    }

    fn head(&self) -> &AtomicU32 {
        // SAFETY: validated, aligned and mapped for the ring's life (constructor contract); the
        // kernel only ever stores to it atomically (smp_store_release).
        unsafe { self.head.as_ref() }
    }

    fn tail(&self) -> &AtomicU32 {
        // SAFETY: as for head; only this ring stores to it, the kernel load-acquires it.
        unsafe { self.tail.as_ref() }
    }

    /// Entries that can be pushed now.
    fn free(&self) -> u32 {
        let head = self.head().load(Ordering::Acquire);
        self.entries
            .saturating_sub(self.local_tail.wrapping_sub(head))
    }

    /// Writes one entry after the last; not visible to the kernel until [`Self::commit`].
    fn push(&mut self, rqe: IoUringZcrxRqe) -> bool {
        if self.free() == 0 {
            return false;
        }
        let idx = (self.local_tail & (self.entries - 1)) as usize;
        // SAFETY: idx < entries, inside the validated entry array; slots between the published
        // tail and head + entries are not read by the kernel until the tail moves past them.
        unsafe { self.rqes.as_ptr().add(idx).write(rqe) };
        self.local_tail = self.local_tail.wrapping_add(1);
        true
    }

    /// Publishes the pushed entries (store-release of the tail).
    fn commit(&mut self) {
        self.tail().store(self.local_tail, Ordering::Release);
    }
}

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
    pub fn is_dmabuf(&self) -> bool {
        matches!(self, ZcrxArea::Dmabuf { .. })
    }
}

/// Where a RECV_ZC fragment of a dma-buf area is in the dma-buf: `cqe_off` is the
/// [`IoUringZcrxCqe::off`] (area-id bits ignored: the offset below them is relative to the
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
    ring: ZcrxRing,
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
    /// The ring was made here with `IORING_SETUP_TASKRUN_FLAG` ([`receive_ring`]): a
    /// zero-timeout wait may skip the system call when the SQ flags show no work.
    taskrun_flag: bool,
}

/// How to register a host-memory area ([`ZcrxIfq::register_host_on`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostRegistration {
    /// The interface (0 with [`Self::nodev`]).
    pub ifindex: u32,
    /// Its receive queue (0 with [`Self::nodev`]).
    pub rx_queue: u32,
    /// Refill-ring entries (the kernel rounds up to a power of two).
    pub rq_entries: u32,
    /// The receive buffer size (`rx_buf_len`): 0 for the kernel's default, a page. Larger
    /// powers of two need the kernel's `ZCRX_FEATURE_RX_PAGE_SIZE` (Linux 7.0,
    /// [`ZcrxCaps::rx_buf_len`]), a device (NODEV is `EOPNOTSUPP`), a driver that takes the
    /// queue's page size, and an area whose physically contiguous runs are at least that long
    /// (huge pages), else `ERANGE` (io_uring/zcrx.c `io_zcrx_create_area`,
    /// `io_area_max_shift`).
    pub rx_buf_len: u32,
    /// Without a network device (`ZCRX_REG_NODEV`, Linux 7.1).
    pub nodev: bool,
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
    /// Creates a SINGLE_ISSUER|DEFER_TASKRUN|CQE32 ring of [`DEFAULT_RING_ENTRIES`], an area of
    /// `area_len` bytes (rounded up to pages) of anonymous memory, and registers receive queue
    /// `rx_queue` of interface `ifindex` with a refill ring of `rq_entries` entries. Errors carry
    /// the kernel's errno ([`explain_register_errno`]); on error nothing stays pinned or open.
    pub fn register(
        ifindex: u32,
        rx_queue: u32,
        area_len: usize,
        rq_entries: u32,
    ) -> io::Result<ZcrxIfq> {
        if area_len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let ring = ZcrxRing::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(DEFAULT_RING_ENTRIES)?;
        let area = Mapping::anonymous(area_len)?;
        Self::register_on(ring, ifindex, rx_queue, area, rq_entries)
    }

    /// As [`Self::register`] with a ring and an area of the caller's choosing (ring size, CQ
    /// size, huge-page area...). The ring must have been built with SINGLE_ISSUER and
    /// DEFER_TASKRUN (else the kernel says `EINVAL`); the area must be page-aligned mapped memory
    /// (anonymous or huge pages; `Backing::Caller` is refused with `EINVAL`). Taking the mapping
    /// by value guarantees it has not been cut into slots.
    pub fn register_on(
        ring: ZcrxRing,
        ifindex: u32,
        rx_queue: u32,
        area: Mapping,
        rq_entries: u32,
    ) -> io::Result<ZcrxIfq> {
        let reg = HostRegistration {
            ifindex,
            rx_queue,
            rq_entries,
            ..HostRegistration::default()
        };
        Self::register_host_on(ring, area, reg)
    }

    /// As [`Self::register_on`] without a network device (`ZCRX_REG_NODEV`, Linux 7.1+:
    /// `if_idx` and `if_rxq` 0): RECV_ZC then works on any TCP socket, loopback included, and
    /// the kernel *copies* every received byte into `area` (at most a page per completion, the
    /// same 32-byte CQEs as with a device). Refill entries are consumed only when
    /// [`Self::flush_refill_queue`] asks ([`ZcrxReceiver::flush_refills`] does). Host memory
    /// only (a dma-buf area needs a device to attach to). A kernel without NODEV (6.18) refuses
    /// the flag with `EINVAL` (after `EPERM` without CAP_NET_ADMIN, and the ring checks).
    pub fn register_nodev_on(
        ring: ZcrxRing,
        area: Mapping,
        rq_entries: u32,
    ) -> io::Result<ZcrxIfq> {
        let reg = HostRegistration {
            rq_entries,
            nodev: true,
            ..HostRegistration::default()
        };
        Self::register_host_on(ring, area, reg)
    }

    /// Registers a host-memory `area` on `ring` as `reg` says: a device queue or none, the
    /// refill ring's size, the buffer size. The ring must be SINGLE_ISSUER|DEFER_TASKRUN with
    /// 32-byte CQEs; `Backing::Caller` memory is refused with `EINVAL`. Where the kernel says
    /// it can ([`ZcrxCaps`]), its copy statistics ([`Self::kernel_stats`]) and its ALLOC_FAIL
    /// and COPY events ([`ZcrxReceiver::events`]) are asked for. Errors are the kernel's errno;
    /// on error nothing stays pinned or open.
    pub fn register_host_on(
        ring: ZcrxRing,
        area: Mapping,
        reg: HostRegistration,
    ) -> io::Result<ZcrxIfq> {
        if area.backing() == Backing::Caller {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let rq_mem = Mapping::anonymous(refill_region_len(reg.rq_entries))?;
        // SAFETY: the ring (and so its fd) is alive for the whole call. (io-uring's `AsFd` impl
        // is behind its `io_safety` feature.)
        let ring_fd = unsafe { BorrowedFd::borrow_raw(ring.as_raw_fd()) };
        let opts = RegOpts {
            flags: if reg.nodev { ZCRX_REG_NODEV } else { 0 },
            rx_buf_len: reg.rx_buf_len,
        };
        let (ifindex, rx_queue) = (reg.ifindex, reg.rx_queue);
        // SAFETY: `area` and `rq_mem` are owned here and move into the ZcrxIfq below (on error
        // the kernel has released everything before returning); neither is cut into slots nor
        // caller-backed, so no Rust reference to their bytes exists, and ZcrxIfq touches them
        // only through raw pointers and atomics.
        let done = unsafe {
            register_raw(
                ring_fd,
                ifindex,
                rx_queue,
                reg.rq_entries,
                &area,
                &rq_mem,
                opts,
            )
        }?;
        Self::assemble(ring, rq_mem, ZcrxArea::Host(area), ifindex, rx_queue, done)
    }

    /// As [`Self::register_on`] with a dma-buf area: `len` bytes at `offset` of `dmabuf`
    /// (`IORING_ZCRX_AREA_DMABUF`, Linux 6.16+; 6.18 wants `offset` 0 and `len` the dma-buf's
    /// whole size, see the module docs for the errnos). The ifq keeps `dmabuf` open as long as
    /// the registration. Nothing is checked here: the kernel checks the device first, so its
    /// errno says what is wrong first. On error nothing stays registered or open (the caller's
    /// `dmabuf` aside).
    pub fn register_dmabuf_on(
        ring: ZcrxRing,
        ifindex: u32,
        rx_queue: u32,
        dmabuf: Arc<OwnedFd>,
        offset: u64,
        len: u64,
        rq_entries: u32,
    ) -> io::Result<ZcrxIfq> {
        let rq_mem = Mapping::anonymous(refill_region_len(rq_entries))?;
        let area_reg = {
            use std::os::fd::AsFd;
            dmabuf_area_reg(dmabuf.as_fd(), offset, len)
        };
        // SAFETY: the ring (and so its fd) is alive for the whole call.
        let ring_fd = unsafe { BorrowedFd::borrow_raw(ring.as_raw_fd()) };
        let opts = RegOpts::default();
        // SAFETY: `rq_mem` is owned here and moves into the ZcrxIfq below (on error the kernel
        // has released everything before returning), never cut into slots, and used afterwards
        // only through raw pointers and atomics; the dma-buf fd in `area_reg` is open (`dmabuf`
        // is held) for the call and, moved into the ZcrxIfq, for the registration's life.
        let done = unsafe {
            register_area_raw(
                ring_fd, ifindex, rx_queue, rq_entries, area_reg, &rq_mem, opts,
            )
        }?;
        Self::assemble(
            ring,
            rq_mem,
            ZcrxArea::Dmabuf {
                fd: dmabuf,
                offset,
                len,
            },
            ifindex,
            rx_queue,
            done,
        )
    }

    /// The refill ring over `rq_mem` as the kernel described it, and the ifq; on error the ring
    /// is closed first (ending the registration), then the memory is released.
    fn assemble(
        ring: ZcrxRing,
        rq_mem: Mapping,
        area: ZcrxArea,
        ifindex: u32,
        rx_queue: u32,
        done: Registered,
    ) -> io::Result<ZcrxIfq> {
        let base = NonNull::new(rq_mem.addr() as *mut u8)
            .ok_or_else(|| io::Error::other("refill region at address 0"))?;
        // SAFETY: rq_mem is mapped read-write and moves into the ZcrxIfq together with the ring,
        // its only user besides the kernel; on error the ring is closed first (below).
        let refill =
            unsafe { RefillRing::new(base, rq_mem.len(), &done.reg.offsets, done.reg.rq_entries) };
        let refill = match refill {
            Ok(r) => r,
            Err(e) => {
                drop(ring);
                return Err(e);
            }
        };
        // The statistics must lie past the entries the kernel described, inside the region.
        let entries_end = (done.reg.offsets.rqes as usize)
            .saturating_add(done.reg.rq_entries as usize * std::mem::size_of::<IoUringZcrxRqe>());
        let stats = done
            .stats_offset
            .filter(|&off| {
                off >= entries_end
                    && off % 8 == 0
                    && off + std::mem::size_of::<ZcrxStats>() <= rq_mem.len()
            })
            // SAFETY: just checked to lie inside the region, 8-aligned (the base is a page).
            .map(|off| unsafe { base.add(off) }.cast::<ZcrxStats>());
        Ok(ZcrxIfq {
            ring,
            refill,
            rq_mem,
            area,
            zcrx_id: done.reg.zcrx_id,
            if_idx: ifindex,
            if_rxq: rx_queue,
            rq_entries: done.reg.rq_entries,
            offsets: done.reg.offsets,
            area_token: done.area_token,
            nodev: done.flags & ZCRX_REG_NODEV != 0,
            stats,
            buf_len: match done.reg.rx_buf_len {
                0 => u32::try_from(crate::mem::page_size()).unwrap_or(4096),
                n => n,
            },
            events: done.events,
            taskrun_flag: false,
        })
    }

    /// The id the kernel gave this ifq: the `zcrx_ifq_idx` of RECV_ZC requests
    /// (`io_uring::opcode::RecvZc::ifq`).
    pub fn id(&self) -> u32 {
        self.zcrx_id
    }

    /// Whether it was registered without a device ([`Self::register_nodev_on`]): every byte is
    /// copied by the kernel, and refills need [`Self::flush_refill_queue`].
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
    pub fn flush_refill_queue(&self) -> io::Result<()> {
        self.ctrl(ZCRX_CTRL_FLUSH_RQ, [0; 6])
    }

    /// `IORING_REGISTER_ZCRX_CTRL` with [`ZCRX_CTRL_ARM_EVENT`] (Linux 7.2): event type `ty`
    /// (`ZCRX_EVENT_*`), which fires once, may fire again. `EINVAL` when it has not fired since
    /// it was last armed, or is unknown (io_uring/zcrx.c `zcrx_arm_notif`).
    pub fn arm_event(&self, ty: u32) -> io::Result<()> {
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
    pub fn event_mask(&self) -> u32 {
        self.events
    }

    /// The size of each receive buffer: the kernel's `rx_buf_len` (a page unless a larger one
    /// was asked for and granted). A completion never spans two buffers.
    pub fn buf_len(&self) -> u32 {
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
        let ring = unsafe { BorrowedFd::borrow_raw(self.ring.as_raw_fd()) };
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

    /// The interface index.
    pub fn ifindex(&self) -> u32 {
        self.if_idx
    }

    /// The receive queue.
    pub fn rx_queue(&self) -> u32 {
        self.if_rxq
    }

    /// The ring (for its fd, parameters, submitter).
    pub fn ring(&self) -> &ZcrxRing {
        &self.ring
    }

    /// The ring, to queue RECV_ZC requests and read their 32-byte CQEs.
    pub fn ring_mut(&mut self) -> &mut ZcrxRing {
        &mut self.ring
    }

    /// Registers `efd` (`IOring_REGISTER_EVENTFD`): the kernel signals it for every completion
    /// posted (and, on a DEFER_TASKRUN ring, when work is queued for the next wait), so an
    /// event loop can wait on it. The kernel takes its own reference: `efd` may be dropped
    /// later. `EBUSY` when one is registered already.
    pub fn register_eventfd(&self, efd: &crate::epoll::EventFd) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        self.ring.submitter().register_eventfd(efd.as_raw_fd())
    }

    /// Start address of the area (for offsets; read received bytes with [`Self::area_bytes`]);
    /// 0 for a dma-buf area, which has no address here.
    pub fn area_addr(&self) -> usize {
        match &self.area {
            ZcrxArea::Host(m) => m.addr(),
            ZcrxArea::Dmabuf { .. } => 0,
        }
    }

    /// Length of the area in bytes.
    pub fn area_len(&self) -> usize {
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

    /// Whether the area is a dma-buf (fragments are device memory: [`Self::area_bytes`] is
    /// `None`, [`Self::dmabuf_range`] says where they are).
    pub fn is_dmabuf(&self) -> bool {
        self.area.is_dmabuf()
    }

    /// The id of the area in completions and refill entries (`rq_area_token >>`
    /// [`IORING_ZCRX_AREA_SHIFT`]; always 0 in 6.18, which has one area per ifq).
    pub fn area_id(&self) -> u32 {
        (self.area_token >> IORING_ZCRX_AREA_SHIFT) as u32
    }

    /// For a dma-buf area: where the fragment of a RECV_ZC completion (`cqe_off`, `len`) is
    /// in the dma-buf, as `(offset, len)` ([`dmabuf_range`]); `None` for host areas and
    /// fragments outside the area.
    pub fn dmabuf_range(&self, cqe_off: u64, len: u32) -> Option<(u64, u64)> {
        match &self.area {
            ZcrxArea::Dmabuf {
                offset, len: alen, ..
            } => dmabuf_range(*offset, *alen, cqe_off, len),
            ZcrxArea::Host(_) => None,
        }
    }

    /// The area token the kernel returned (`rq_area_token`), ORed into refill entries.
    pub fn area_token(&self) -> u64 {
        self.area_token
    }

    /// Refill-ring entries (the power of two the kernel used).
    pub fn rq_entries(&self) -> u32 {
        self.rq_entries
    }

    /// Offsets of head, tail and entries in the refill region.
    pub fn rq_offsets(&self) -> IoUringZcrxOffsets {
        self.offsets
    }

    /// Start address and length of the refill region.
    pub fn rq_region(&self) -> (usize, usize) {
        (self.rq_mem.addr(), self.rq_mem.len())
    }

    /// Refill entries that can be pushed now.
    pub fn refill_free(&self) -> u32 {
        self.refill.free()
    }

    /// Queues the buffer of a RECV_ZC completion for return to the kernel: `cqe_off` is the
    /// [`IoUringZcrxCqe::off`] it came with, `len` its length (the CQE's `res`). `false` when
    /// the refill ring is full. Not visible to the kernel until [`Self::refill_commit`].
    pub fn refill_push(&mut self, cqe_off: u64, len: u32) -> bool {
        self.refill.push(IoUringZcrxRqe {
            off: (cqe_off & !IORING_ZCRX_AREA_MASK) | self.area_token,
            len,
            pad: 0,
        })
    }

    /// Publishes the pushed refill entries to the kernel.
    pub fn refill_commit(&mut self) {
        self.refill.commit();
    }

    /// The `len` received bytes at `cqe_off` (an [`IoUringZcrxCqe::off`]; the area-id bits are
    /// ignored); `None` when the range is outside the area, and always for a dma-buf area (the
    /// CPU cannot read device memory).
    ///
    /// # Safety
    /// The kernel writes into area buffers it owns. The range must be (part of) a buffer the
    /// kernel handed over in a RECV_ZC completion and that has not been returned with
    /// [`Self::refill_push`] since: only then does nothing write it while the slice lives.
    pub unsafe fn area_bytes(&self, cqe_off: u64, len: usize) -> Option<&[u8]> {
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
mod tests {
    use super::*;
    use crate::uring_probe::{
        RawRing, IORING_SETUP_CQE32, IORING_SETUP_DEFER_TASKRUN, IORING_SETUP_SINGLE_ISSUER,
    };
    use std::mem::{offset_of, size_of};

    #[zcnet_testkit::test]
    fn layouts_match_uapi() {
        // include/uapi/linux/io_uring.h of 6.18, confirmed against the running 6.18 kernel's BTF.
        assert_eq!(size_of::<IoUringZcrxRqe>(), 16);
        assert_eq!(offset_of!(IoUringZcrxRqe, len), 8);
        assert_eq!(offset_of!(IoUringZcrxRqe, pad), 12);
        assert_eq!(size_of::<IoUringZcrxCqe>(), 16);
        assert_eq!(offset_of!(IoUringZcrxCqe, pad), 8);
        assert_eq!(size_of::<IoUringZcrxOffsets>(), 32);
        assert_eq!(offset_of!(IoUringZcrxOffsets, tail), 4);
        assert_eq!(offset_of!(IoUringZcrxOffsets, rqes), 8);
        assert_eq!(offset_of!(IoUringZcrxOffsets, resv2), 12);
        assert_eq!(offset_of!(IoUringZcrxOffsets, resv), 16);
        assert_eq!(size_of::<IoUringZcrxAreaReg>(), 48);
        assert_eq!(offset_of!(IoUringZcrxAreaReg, len), 8);
        assert_eq!(offset_of!(IoUringZcrxAreaReg, rq_area_token), 16);
        assert_eq!(offset_of!(IoUringZcrxAreaReg, flags), 24);
        assert_eq!(offset_of!(IoUringZcrxAreaReg, dmabuf_fd), 28);
        assert_eq!(offset_of!(IoUringZcrxAreaReg, resv2), 32);
        assert_eq!(size_of::<IoUringRegionDesc>(), 64);
        assert_eq!(offset_of!(IoUringRegionDesc, size), 8);
        assert_eq!(offset_of!(IoUringRegionDesc, flags), 16);
        assert_eq!(offset_of!(IoUringRegionDesc, id), 20);
        assert_eq!(offset_of!(IoUringRegionDesc, mmap_offset), 24);
        assert_eq!(offset_of!(IoUringRegionDesc, resv), 32);
        assert_eq!(size_of::<IoUringZcrxIfqReg>(), 96);
        assert_eq!(offset_of!(IoUringZcrxIfqReg, if_rxq), 4);
        assert_eq!(offset_of!(IoUringZcrxIfqReg, rq_entries), 8);
        assert_eq!(offset_of!(IoUringZcrxIfqReg, flags), 12);
        assert_eq!(offset_of!(IoUringZcrxIfqReg, area_ptr), 16);
        assert_eq!(offset_of!(IoUringZcrxIfqReg, region_ptr), 24);
        assert_eq!(offset_of!(IoUringZcrxIfqReg, offsets), 32);
        assert_eq!(offset_of!(IoUringZcrxIfqReg, zcrx_id), 64);
        assert_eq!(offset_of!(IoUringZcrxIfqReg, rx_buf_len), 68);
        assert_eq!(offset_of!(IoUringZcrxIfqReg, event_desc), 72);
        assert_eq!(offset_of!(IoUringZcrxIfqReg, resv), 80);
        assert_eq!(size_of::<ZcrxCtrl>(), 72);
        assert_eq!(offset_of!(ZcrxCtrl, op), 4);
        assert_eq!(offset_of!(ZcrxCtrl, resv), 8);
        assert_eq!(offset_of!(ZcrxCtrl, arg), 24);
        assert_eq!(size_of::<ZcrxEventDesc>(), 96);
        assert_eq!(offset_of!(ZcrxEventDesc, type_mask), 8);
        assert_eq!(offset_of!(ZcrxEventDesc, flags), 12);
        assert_eq!(offset_of!(ZcrxEventDesc, stats_offset), 16);
        assert_eq!(offset_of!(ZcrxEventDesc, resv2), 24);
        assert_eq!(size_of::<ZcrxStats>(), 16);
        assert_eq!(offset_of!(ZcrxStats, copy_bytes), 8);
        assert_eq!(IORING_ZCRX_AREA_MASK, 0xffff_0000_0000_0000);
    }

    #[zcnet_testkit::test]
    fn refill_region_sizes() {
        let page = crate::mem::page_size();
        assert_eq!(refill_region_len(0), 2 * page);
        assert_eq!(refill_region_len(1), 2 * page);
        assert_eq!(
            refill_region_len(128),
            (page + 128 * 16).div_ceil(page) * page
        );
        assert_eq!(refill_region_len(100), refill_region_len(128));
        assert_eq!(refill_region_len(4096), page + 4096 * 16);
        assert_eq!(
            refill_region_len(u32::MAX),
            refill_region_len(ZCRX_MAX_RQ_ENTRIES)
        );
        for n in [1u32, 7, 64, 1000, 32768] {
            assert_eq!(refill_region_len(n) % page, 0);
            assert!(refill_region_len(n) >= 64 + 16 * n.next_power_of_two() as usize);
        }
    }

    #[zcnet_testkit::test]
    fn refill_ring_arithmetic() {
        // Simulate the kernel's side on plain memory laid out as 6.18 lays it out.
        let mem = Mapping::anonymous(refill_region_len(8)).unwrap();
        let off = IoUringZcrxOffsets {
            head: 0,
            tail: 4,
            rqes: 64,
            ..Default::default()
        };
        let base = NonNull::new(mem.addr() as *mut u8).unwrap();
        // SAFETY: `mem` is owned by this test, never cut into slots, and outlives `ring`.
        let mut ring = unsafe { RefillRing::new(base, mem.len(), &off, 8) }.unwrap();
        assert_eq!(ring.free(), 8);
        for i in 0..8u64 {
            assert!(ring.push(IoUringZcrxRqe {
                off: i * 4096,
                len: 1,
                pad: 0
            }));
        }
        assert!(!ring.push(IoUringZcrxRqe::default()));
        assert_eq!(ring.tail().load(Ordering::Relaxed), 0, "not yet published");
        ring.commit();
        assert_eq!(ring.tail().load(Ordering::Relaxed), 8);
        // The "kernel" consumes three.
        ring.head().store(3, Ordering::Release);
        assert_eq!(ring.free(), 3);
        assert!(ring.push(IoUringZcrxRqe {
            off: 99,
            len: 2,
            pad: 0
        }));
        // Entry 8 wrapped to slot 0.
        // SAFETY: slot 0 of the entry array, inside `mem`.
        let slot0 = unsafe { ring.rqes.as_ptr().read() };
        assert_eq!((slot0.off, slot0.len), (99, 2));

        let bad = IoUringZcrxOffsets { rqes: 4096, ..off };
        // SAFETY: as above.
        assert!(unsafe { RefillRing::new(base, 4096, &bad, 8) }.is_err());
        // SAFETY: as above.
        assert!(unsafe { RefillRing::new(base, mem.len(), &off, 6) }.is_err());
    }

    fn zcrx_kernel() {
        zcnet_testkit::require_kernel(6, 15, "zcrx");
    }

    fn errno(r: io::Result<ZcrxIfq>) -> Option<i32> {
        match r {
            Ok(ifq) => panic!("registration unexpectedly succeeded: {ifq:?}"),
            Err(e) => e.raw_os_error(),
        }
    }

    #[zcnet_testkit::test]
    fn register_on_loopback_is_not_supported() {
        zcrx_kernel();
        // lo of a private namespace: ifindex 1. No DMA device, no queue ops.
        let r = crate::os::in_private_netns(|| errno(ZcrxIfq::register(1, 0, 1 << 20, 128)));
        let e = r;
        assert_eq!(
            e,
            Some(libc::EOPNOTSUPP),
            "{}",
            explain_register_errno(libc::EOPNOTSUPP)
        );
    }

    #[zcnet_testkit::test]
    fn register_on_missing_interface_is_enodev() {
        zcrx_kernel();
        let r = crate::os::in_private_netns(|| errno(ZcrxIfq::register(4242, 0, 1 << 20, 128)));
        let e = r;
        assert_eq!(e, Some(libc::ENODEV));
    }

    #[zcnet_testkit::test]
    fn bad_rq_entries_are_einval() {
        zcrx_kernel();
        let r = crate::os::in_private_netns(|| {
            [
                errno(ZcrxIfq::register(1, 0, 1 << 16, 0)),
                errno(ZcrxIfq::register(1, 0, 1 << 16, ZCRX_MAX_RQ_ENTRIES + 1)),
                errno(ZcrxIfq::register(1, 0, 0, 64)),
            ]
        });
        let e = r;
        assert_eq!(e, [Some(libc::EINVAL); 3]);
    }

    /// Registration through a raw ring with the given setup flags.
    fn register_with_flags(flags: u32) -> io::Result<Registered> {
        let ring = RawRing::setup(8, flags)?;
        let area = Mapping::anonymous(1 << 16)?;
        let rq = Mapping::anonymous(refill_region_len(64))?;
        // SAFETY: area and rq are owned by this function, not cut into slots, and dropped only
        // after `ring` (locals drop in reverse order), which ends any registration.
        let r = unsafe { register_raw(ring.fd(), 1, 0, 64, &area, &rq, RegOpts::default()) };
        drop(ring);
        r
    }

    #[zcnet_testkit::test]
    fn ring_flags_the_kernel_requires() {
        zcrx_kernel();
        let r = crate::os::in_private_netns(|| {
            [
                // No CQE32: EINVAL (the ring check comes before the device lookup).
                register_with_flags(IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN),
                // No DEFER_TASKRUN: EINVAL.
                register_with_flags(IORING_SETUP_CQE32),
                // All three: the device decides (lo: EOPNOTSUPP).
                register_with_flags(
                    IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_CQE32,
                ),
            ]
            .map(|r| r.err().and_then(|e| e.raw_os_error()))
        });
        let e = r;
        assert_eq!(
            e,
            [
                Some(libc::EINVAL),
                Some(libc::EINVAL),
                Some(libc::EOPNOTSUPP)
            ]
        );
    }

    fn open_fds() -> usize {
        std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
    }

    fn vm_size_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("VmSize:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })
            .unwrap_or(0)
    }

    #[zcnet_testkit::test]
    fn failed_registrations_leak_nothing() {
        zcrx_kernel();
        // 48 failures with a 4 MiB area each: a leaked fd per try would add 48 fds, a leaked
        // mapping 192 MiB of address space. Other tests run concurrently in this process, so
        // the thresholds leave room for their transient fds and mappings. (Pinned pages: the
        // kernel pins the refill region before it looks up the device and unpins it on the
        // error path; as root, with CAP_IPC_LOCK, nothing is charged to VmPin or
        // RLIMIT_MEMLOCK, so there is no counter to watch for it here.)
        let r = crate::os::in_private_netns(|| {
            let (fds, vm) = (open_fds(), vm_size_kib());
            for i in 0..48 {
                let ifindex = if i % 2 == 0 { 1 } else { 4242 };
                let e = errno(ZcrxIfq::register(ifindex, 0, 4 << 20, 256));
                assert!(
                    matches!(e, Some(libc::EOPNOTSUPP) | Some(libc::ENODEV)),
                    "{e:?}"
                );
            }
            (
                open_fds().saturating_sub(fds),
                vm_size_kib().saturating_sub(vm),
            )
        });
        let (more_fds, more_vm_kib) = r;
        assert!(more_fds < 24, "{more_fds} more fds");
        assert!(
            more_vm_kib < 96 * 1024,
            "{more_vm_kib} KiB more address space"
        );
    }

    #[zcnet_testkit::test]
    fn caller_memory_is_refused() {
        let ring = match ZcrxRing::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(8)
        {
            Ok(r) => r,
            Err(e) => zcnet_testkit::skip(
                zcnet_testkit::Need::Kernel,
                format!("no DEFER_TASKRUN ring here: {e}"),
            ),
        };
        let area = Mapping::from_boxed(vec![0u8; 8192].into_boxed_slice()).unwrap();
        let e = ZcrxIfq::register_on(ring, 1, 0, area, 64).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }

    #[zcnet_testkit::test]
    fn errno_explanations() {
        assert_eq!(explain_register_errno(libc::EPERM), "needs CAP_NET_ADMIN");
        assert!(explain_register_errno(libc::EOPNOTSUPP).contains("device"));
        assert_eq!(explain_register_errno(12345), "unexpected error");
    }
}

// ---------------------------------------------------------------------------------------------
// Receiving: multishot RECV_ZC requests on a registered ifq, their 32-byte completions, and the
// fragments the application reads until it gives them back.
// ---------------------------------------------------------------------------------------------

use io_uring::{opcode, types};
use std::time::Duration;
use zcnet_core::rxring::{Frag, RecvZcCqe, RxError, RxEvent, ZcrxRx};

/// `user_data` of the cancel requests [`ZcrxReceiver`] submits; never a connection's.
pub const ZCRX_CANCEL_TAG: u64 = u64::MAX;

/// The index of interface `name` in the *calling thread's* network namespace
/// (`if_nametoindex(3)`, an ioctl on a socket of that namespace); `None` when there is none.
/// Unlike `/sys/class/net`, which shows the namespace sysfs was mounted in, this follows a
/// thread that moved with `setns`.
pub fn if_index(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: `c` is a NUL-terminated string that outlives the call; if_nametoindex only reads it.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (idx != 0).then_some(idx)
}

/// Completion-queue entries of the ring [`ZcrxIfq::register_for_receive`] creates: every
/// received fragment is one CQE, and a RECV_ZC request that finds the CQ full ends with
/// `-ENOSPC` (io_uring/zcrx.c `io_zcrx_queue_cqe`), so the CQ is sized for a burst.
pub const RECEIVE_CQ_ENTRIES: u32 = 4096;
/// Submission-queue entries of that ring (arms and cancels only).
pub const RECEIVE_SQ_ENTRIES: u32 = 64;

/// A ring sized for receiving: [`RECEIVE_SQ_ENTRIES`] SQEs and [`RECEIVE_CQ_ENTRIES`] CQEs,
/// SINGLE_ISSUER|DEFER_TASKRUN|CQE32.
fn receive_ring() -> io::Result<ZcrxRing> {
    ZcrxRing::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_taskrun_flag()
        .setup_cqsize(RECEIVE_CQ_ENTRIES)
        .build(RECEIVE_SQ_ENTRIES)
}

impl ZcrxIfq {
    /// As [`Self::register`], with a ring sized for receiving: [`RECEIVE_SQ_ENTRIES`] SQEs and
    /// [`RECEIVE_CQ_ENTRIES`] CQEs (SINGLE_ISSUER|DEFER_TASKRUN|CQE32). On error nothing stays
    /// pinned or open.
    pub fn register_for_receive(
        ifindex: u32,
        rx_queue: u32,
        area_len: usize,
        rq_entries: u32,
    ) -> io::Result<ZcrxIfq> {
        if area_len == 0 {
            return Err(einval());
        }
        let ring = receive_ring()?;
        let area = Mapping::anonymous(area_len)?;
        Self::register_on(ring, ifindex, rx_queue, area, rq_entries).map(Self::with_taskrun_flag)
    }

    /// As [`Self::register_host_on`] with a ring sized for receiving ([`RECEIVE_SQ_ENTRIES`]
    /// SQEs, [`RECEIVE_CQ_ENTRIES`] CQEs): the way to ask for a buffer size
    /// ([`HostRegistration::rx_buf_len`], with an area of huge pages). On error nothing stays
    /// pinned or open.
    pub fn register_for_receive_with(area: Mapping, reg: HostRegistration) -> io::Result<ZcrxIfq> {
        Self::register_host_on(receive_ring()?, area, reg).map(Self::with_taskrun_flag)
    }

    /// Marks an ifq whose ring [`receive_ring`] made (with `IORING_SETUP_TASKRUN_FLAG`).
    fn with_taskrun_flag(mut self) -> ZcrxIfq {
        self.taskrun_flag = true;
        self
    }

    /// As [`Self::register_for_receive`] without a network device ([`Self::register_nodev_on`],
    /// Linux 7.1+): an area of `area_len` bytes of anonymous memory that the kernel copies
    /// every received byte into. On error nothing stays pinned or open.
    pub fn register_nodev_for_receive(area_len: usize, rq_entries: u32) -> io::Result<ZcrxIfq> {
        if area_len == 0 {
            return Err(einval());
        }
        let ring = receive_ring()?;
        let area = Mapping::anonymous(area_len)?;
        Self::register_nodev_on(ring, area, rq_entries).map(Self::with_taskrun_flag)
    }

    /// As [`Self::register_for_receive`] with a dma-buf area of `len` bytes at `offset` of
    /// `dmabuf` ([`Self::register_dmabuf_on`]: Linux 6.16+; 6.18 wants `offset` 0 and `len`
    /// the dma-buf's size). On error nothing stays registered or open (`dmabuf` is the
    /// caller's).
    pub fn register_dmabuf_for_receive(
        ifindex: u32,
        rx_queue: u32,
        dmabuf: Arc<OwnedFd>,
        offset: u64,
        len: u64,
        rq_entries: u32,
    ) -> io::Result<ZcrxIfq> {
        let ring = receive_ring()?;
        Self::register_dmabuf_on(ring, ifindex, rx_queue, dmabuf, offset, len, rq_entries)
            .map(Self::with_taskrun_flag)
    }
}

/// One RECV_ZC completion read by [`ZcrxReceiver::drain`]: the raw fields and what the
/// bookkeeping ([`ZcrxRx::on_cqe32`]) made of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZcrxCompletion {
    /// `user_data`, `res`, `flags` and the `io_uring_zcrx_cqe` offset.
    pub cqe: RecvZcCqe,
    /// A fragment now held by the application, the end of the request (EOF, re-arm, error), or
    /// a completion that contradicts the protocol (nothing changed then).
    pub event: Result<RxEvent, RxError>,
}

impl ZcrxCompletion {
    /// Whether the kernel will post more completions for this request (`IORING_CQE_F_MORE`).
    pub fn more(&self) -> bool {
        self.cqe.flags & zcnet_core::sendzc::IORING_CQE_F_MORE != 0
    }
}

/// What [`ZcrxReceiver::flush_refills`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RefillFlush {
    /// Entries pushed into the refill ring and published.
    pub pushed: usize,
    /// Released fragments still waiting because the refill ring was full.
    pub waiting: usize,
}

/// Zero-copy receive on a registered [`ZcrxIfq`] with its bookkeeping ([`ZcrxRx`]): arms
/// multishot RECV_ZC requests on sockets, reads their 32-byte completions, lends the received
/// fragments and returns them through the refill ring.
///
/// The one rule memory safety rests on lives here: [`Self::bytes`] gives a fragment's bytes only
/// while the bookkeeping says the application holds it (delivered by a data completion, not
/// released). Its refill entry — after which the NIC may write the buffer again — can only be
/// pushed by [`Self::flush_refills`], which takes `&mut self`, so no slice from `bytes` outlives
/// the fragment's return.
///
/// Requests are `IORING_OP_RECV_ZC` with `IORING_RECV_MULTISHOT` and `len` 0 (6.18 rejects
/// RECV_ZC without the multishot flag, io_uring/net.c `io_recvzc_prep`; `len` 0 means no byte
/// limit) and `zcrx_ifq_idx` = [`ZcrxIfq::id`]. The request runs until the stream ends
/// (`res` 0), fails, is cancelled, or the kernel ends it with `-ENOSPC` (no CQ room), `-ENOMEM`
/// (no free buffer for the copy fallback) or `-EINTR`: then re-arm ([`RxEvent::Rearm`]).
/// Data arriving on another queue than the registered one (flow not steered) is *copied* into
/// the area by the kernel (`io_zcrx_copy_chunk`), indistinguishably in 6.18's completions.
///
/// dma-buf areas (`IORING_ZCRX_AREA_DMABUF`, 6.16+: `area.flags`, `area.dmabuf_fd`, `addr` the
/// offset in the dma-buf; [`ZcrxIfq::register_dmabuf_for_receive`]) fit the same shape:
/// completions carry offsets within the area, the refill ring and the bookkeeping are the same,
/// and only `bytes` changes — it returns `None` (device memory) and callers describe the
/// fragment as a device range instead ([`ZcrxIfq::dmabuf_range`]). Data the kernel would have
/// to copy ends the request with `-EFAULT` instead of being copied (see the module docs).
///
/// Like the ring, it must stay on the thread that made it (SINGLE_ISSUER; `!Send`).
pub struct ZcrxReceiver {
    ifq: ZcrxIfq,
    core: ZcrxRx,
    events: ZcrxEvents,
}

/// The kernel's zcrx events seen by a [`ZcrxReceiver`] (Linux 7.2: `ZCRX_EVENT_*` completions
/// with [`ZCRX_EVENT_TAG`], asked for where the kernel says it has them). Each type fires once
/// until re-armed: ALLOC_FAIL is re-armed by [`ZcrxReceiver::flush_refills`] once buffers went
/// back (one event per drought), COPY only by [`ZcrxReceiver::rearm_event`] (the statistics
/// count every copy: the event only says copying happened).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ZcrxEvents {
    /// `ZCRX_EVENT_ALLOC_FAIL`: the device's page pool found no free buffer in the area
    /// (every buffer held by the application or waiting to be refilled): packets may have
    /// been dropped and retransmitted. Device mode only: without a device the kernel ends the
    /// request with `-ENOMEM` instead.
    pub alloc_fail: u64,
    /// `ZCRX_EVENT_COPY`: the kernel copied received data into the area.
    pub copy: u64,
    /// Event completions of a type zcnet does not know.
    pub other: u64,
    /// Types that fired and are not re-armed yet (`1 << ZCRX_EVENT_*`).
    pub fired: u32,
}

impl std::fmt::Debug for ZcrxReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZcrxReceiver")
            .field("ifq", &self.ifq)
            .field("stats", self.core.stats())
            .field("events", &self.events)
            .finish()
    }
}

/// `io_uring_enter` errors after which the queued SQE is simply submitted with the next call.
fn transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
    )
}

impl ZcrxReceiver {
    /// Receiving on `ifq`: its whole area in buffers of [`ZcrxIfq::buf_len`] (one `net_iov`
    /// each, `io_zcrx_create_area`; a page unless a larger `rx_buf_len` was granted), every
    /// one the kernel's.
    pub fn new(ifq: ZcrxIfq) -> io::Result<ZcrxReceiver> {
        let core = ZcrxRx::with_buf_size(ifq.area_len() as u64, ifq.buf_len(), ifq.area_token())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        Ok(ZcrxReceiver {
            ifq,
            core,
            events: ZcrxEvents::default(),
        })
    }

    /// The kernel's events seen so far ([`ZcrxEvents`]).
    pub fn events(&self) -> ZcrxEvents {
        self.events
    }

    /// Lets event type `ty` (`ZCRX_EVENT_*`) fire again ([`ZcrxIfq::arm_event`]); nothing to
    /// do (`Ok`) when it has not fired since it was last armed.
    pub fn rearm_event(&mut self, ty: u32) -> io::Result<()> {
        if ty >= 32 || self.events.fired & (1 << ty) == 0 {
            return Ok(());
        }
        self.ifq.arm_event(ty)?;
        self.events.fired &= !(1 << ty);
        Ok(())
    }

    /// The registration (interface, queue, area, refill ring).
    pub fn ifq(&self) -> &ZcrxIfq {
        &self.ifq
    }

    /// The bookkeeping: counters, held fragments, queued refills.
    pub fn core(&self) -> &ZcrxRx {
        &self.core
    }

    /// Arms a multishot RECV_ZC on socket `fd` for `user_data` (unique among armed requests,
    /// else `EBUSY`; not [`ZCRX_CANCEL_TAG`] or [`ZCRX_EVENT_TAG`], else `EINVAL`) and submits it. The caller keeps
    /// `fd` open until the request's final completion. If `io_uring_enter` fails for good the
    /// error is returned but the SQE stays queued and counts as armed: it goes in with the next
    /// [`Self::wait`].
    pub fn arm(&mut self, fd: std::os::fd::RawFd, user_data: u64) -> io::Result<()> {
        if user_data == ZCRX_CANCEL_TAG || user_data == ZCRX_EVENT_TAG {
            return Err(einval());
        }
        if self.core.is_armed(user_data) {
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        let sqe = opcode::RecvZc::new(types::Fd(fd), 0)
            .ifq(self.ifq.id())
            .build()
            .user_data(user_data);
        self.push(&sqe)?;
        // Cannot fail: not armed (checked above) and len 0.
        self.core.arm(user_data, 0).map_err(|_| einval())?;
        match self.ifq.ring().submit() {
            Err(e) if !transient(&e) => Err(e),
            _ => Ok(()),
        }
    }

    /// Asks the kernel to cancel request `user_data` (`IORING_OP_ASYNC_CANCEL` by user_data) and
    /// submits. Its final completion (`-ECANCELED`, or whatever ended it first) arrives through
    /// [`Self::drain`]. `ENOENT` when no such request is armed.
    pub fn cancel(&mut self, user_data: u64) -> io::Result<()> {
        if !self.core.is_armed(user_data) {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        let sqe = opcode::AsyncCancel2::new(types::CancelBuilder::user_data(user_data))
            .build()
            .user_data(ZCRX_CANCEL_TAG);
        self.push(&sqe)?;
        match self.ifq.ring().submit() {
            Err(e) if !transient(&e) => Err(e),
            _ => Ok(()),
        }
    }

    /// Whether request `user_data` is armed (its final completion not yet drained).
    pub fn is_armed(&self, user_data: u64) -> bool {
        self.core.is_armed(user_data)
    }

    /// Queues an SQE that references no user memory.
    fn push(&mut self, sqe: &squeue::Entry) -> io::Result<()> {
        let ring = self.ifq.ring_mut();
        if ring.submission().is_full() {
            ring.submit()?;
        }
        // SAFETY: RECV_ZC and cancel SQEs carry no pointer: the kernel writes into the area
        // registered with the ifq, which `self` owns until the ring is closed.
        unsafe { ring.submission().push(sqe) }
            .map_err(|_| io::Error::from_raw_os_error(libc::EAGAIN))
    }

    /// Pushes released fragments' refill entries, oldest first, into the refill ring and
    /// publishes them. Entries that do not fit wait for the next flush (counted in the
    /// bookkeeping's `refill_starved`). On a NODEV ifq ([`ZcrxIfq::is_nodev`]) the kernel is
    /// then told to consume them ([`ZcrxIfq::flush_refill_queue`]): nothing else would, and
    /// receiving would stall once the area is out. Its error is the only one.
    pub fn flush_refills(&mut self) -> io::Result<RefillFlush> {
        let ZcrxReceiver { ifq, core, .. } = self;
        let pushed = core.flush_refills(|e| ifq.refill_push(e.off, e.len));
        if pushed > 0 {
            ifq.refill_commit();
            if ifq.is_nodev() {
                ifq.flush_refill_queue()?;
            }
            // Buffers went back: the next drought is a new one.
            self.rearm_event(ZCRX_EVENT_ALLOC_FAIL)?;
        }
        let core = &self.core;
        Ok(RefillFlush {
            pushed,
            waiting: core.queued_refills(),
        })
    }

    /// Submits what is queued and waits for at least `min` completions or `timeout`. With
    /// DEFER_TASKRUN the kernel does the receive work inside this call. A timeout or `EINTR`
    /// is not an error.
    pub fn wait(&mut self, min: usize, timeout: Duration) -> io::Result<()> {
        if timeout.is_zero() && self.ifq.taskrun_flag {
            return crate::bufring::progress_now(self.ifq.ring_mut());
        }
        let ts = types::Timespec::new()
            .sec(timeout.as_secs())
            .nsec(timeout.subsec_nanos());
        let args = types::SubmitArgs::new().timespec(&ts);
        match self.ifq.ring().submitter().submit_with_args(min, &args) {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Hands every available RECV_ZC completion to `f`, interpreted by the bookkeeping: a data
    /// completion's fragment is held by the application from then on, until
    /// [`Self::release`]d. Cancel completions are consumed here, and so are event completions
    /// (counted in [`Self::events`]).
    pub fn drain(&mut self, mut f: impl FnMut(ZcrxCompletion)) {
        let ZcrxReceiver { ifq, core, events } = self;
        let mut cq = ifq.ring_mut().completion();
        cq.sync();
        for cqe in &mut cq {
            if cqe.user_data() == ZCRX_CANCEL_TAG {
                continue;
            }
            if cqe.user_data() == ZCRX_EVENT_TAG {
                // io_uring/zcrx.c zcrx_send_notif: an auxiliary CQE, `res` the event type.
                match u32::try_from(cqe.result()) {
                    Ok(ZCRX_EVENT_ALLOC_FAIL) => events.alloc_fail += 1,
                    Ok(ZCRX_EVENT_COPY) => events.copy += 1,
                    _ => events.other += 1,
                }
                if let Ok(ty @ 0..=31) = u32::try_from(cqe.result()) {
                    events.fired |= 1 << ty;
                }
                continue;
            }
            let c = RecvZcCqe {
                user_data: cqe.user_data(),
                res: cqe.result(),
                flags: cqe.flags(),
                off: cqe.big_cqe()[0],
            };
            let event = core.on_cqe32(&c);
            f(ZcrxCompletion { cqe: c, event });
        }
    }

    /// The bytes of `frag` while the application holds it (see the type's docs); `None` for
    /// anything else (never delivered, released, a sub-range, outside the area) and for every
    /// fragment of a dma-buf area.
    pub fn bytes(&self, frag: Frag) -> Option<&[u8]> {
        if !self.core.is_held(frag) {
            return None;
        }
        // SAFETY: the bookkeeping says `frag` was delivered by a RECV_ZC data completion and has
        // not been released since, so its refill entry has not been pushed and the kernel does
        // not write those bytes; pushing one needs `&mut self`, which the returned borrow of
        // `self` excludes until the slice is gone.
        unsafe { self.ifq.area_bytes(frag.off, frag.len as usize) }
    }

    /// The application is done with `frag`: its refill entry is queued for the next
    /// [`Self::flush_refills`]. Refuses a fragment not held (never delivered, or released).
    pub fn release(&mut self, frag: Frag) -> Result<(), RxError> {
        self.core.release(frag)
    }
}

fn einval() -> io::Error {
    io::Error::from_raw_os_error(libc::EINVAL)
}

#[cfg(test)]
mod receive_tests {
    use super::*;

    #[zcnet_testkit::test]
    fn if_index_follows_the_thread_namespace() {
        assert_eq!(if_index("lo"), Some(1));
        assert_eq!(if_index("zcnet-no-such-if"), None);
        assert_eq!(if_index("bad\0name"), None);
        // In a private namespace only `lo` exists (and has index 1 there).
        let r = crate::os::in_private_netns(|| (if_index("lo"), if_index("eth0")));
        assert_eq!(r, (Some(1), None));
    }

    #[zcnet_testkit::test]
    fn receive_ring_is_one_the_kernel_takes() {
        zcnet_testkit::require_kernel(6, 15, "zcrx");
        // The larger CQ must not cost a flag the kernel needs: on lo the ring passes the flag
        // checks (EINVAL otherwise) and the device is what refuses.
        let r = crate::os::in_private_netns(|| {
            [
                ZcrxIfq::register_for_receive(1, 0, 1 << 20, 256),
                ZcrxIfq::register_for_receive(1, 0, 0, 256),
            ]
            .map(|r| r.err().and_then(|e| e.raw_os_error()))
        });
        let e = r;
        assert_eq!(e, [Some(libc::EOPNOTSUPP), Some(libc::EINVAL)]);
    }
}

#[cfg(test)]
mod nodev_tests {
    use super::*;
    use std::io::{Read, Write};

    /// A connected loopback TCP pair in the calling thread's network namespace.
    fn tcp_pair() -> (std::net::TcpStream, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    /// Skips unless the kernel's zcrx query lists `ZCRX_REG_NODEV` (asked, not by version).
    fn require_nodev() {
        zcnet_testkit::require_root("zcrx needs CAP_NET_ADMIN");
        if !ZcrxCaps::get().nodev() {
            zcnet_testkit::skip(
                zcnet_testkit::Need::KernelVersion,
                "this kernel's zcrx query (IORING_REGISTER_QUERY) lists no ZCRX_REG_NODEV (Linux 7.1 added it)",
            );
        }
    }

    #[zcnet_testkit::test]
    fn nodev_is_einval_where_the_kernel_does_not_list_it() {
        zcnet_testkit::require_kernel(6, 15, "zcrx");
        zcnet_testkit::require_root("CAP_NET_ADMIN, checked before the flags");
        if ZcrxCaps::get().nodev() {
            zcnet_testkit::skip(
                zcnet_testkit::Need::KernelVersion,
                "this kernel's zcrx query lists ZCRX_REG_NODEV",
            );
        }
        // 6.18 refuses any flag (`reg.flags` must be 0), whatever the area.
        let e = ZcrxIfq::register_nodev_for_receive(4 << 12, 4).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
    }

    /// What one [`receive_exact`] saw besides the bytes.
    #[derive(Debug, Default)]
    struct Seen {
        /// Requests the kernel ended that were re-armed, by errno.
        rearms: Vec<i32>,
        eof: bool,
    }

    /// Receives `len` bytes of the pattern `(i % 251)` (numbered from `from`) on `sock`
    /// through `rx` (request `7`, armed by the caller), checking every byte and re-arming
    /// requests the kernel ends; stops early at end of stream.
    fn receive_exact(
        rx: &mut ZcrxReceiver,
        sock: &std::net::TcpStream,
        from: usize,
        len: usize,
    ) -> Seen {
        let mut seen = Seen::default();
        let mut got = 0usize;
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while got < len && !seen.eof {
            assert!(
                std::time::Instant::now() < deadline,
                "stalled at {got} of {len} B ({seen:?}, {:?})",
                rx.core().stats()
            );
            rx.flush_refills().unwrap();
            rx.wait(1, Duration::from_millis(100)).unwrap();
            let mut done = Vec::new();
            rx.drain(|c| done.push(c));
            for c in done {
                match c.event.unwrap() {
                    RxEvent::Data { frag, .. } => {
                        let b = rx.bytes(frag).unwrap();
                        for (k, &x) in b.iter().enumerate() {
                            let i = from + got + k;
                            assert_eq!(x, (i % 251) as u8, "byte {i}");
                        }
                        got += b.len();
                        rx.release(frag).unwrap();
                    }
                    RxEvent::Eof { .. } => seen.eof = true,
                    RxEvent::Rearm { errno, .. } => {
                        seen.rearms.push(errno);
                        rx.arm(sock.as_raw_fd(), 7).unwrap()
                    }
                    RxEvent::Done { .. } => rx.arm(sock.as_raw_fd(), 7).unwrap(),
                    RxEvent::Error { errno, .. } => {
                        panic!("RECV_ZC: {}", io::Error::from_raw_os_error(errno))
                    }
                }
            }
        }
        assert_eq!(got, len, "{seen:?}");
        seen
    }

    /// Writes `len` bytes of the pattern, numbered from `from`, on another thread.
    fn send_pattern(
        mut tx: std::net::TcpStream,
        from: usize,
        len: usize,
    ) -> std::thread::JoinHandle<std::net::TcpStream> {
        std::thread::spawn(move || {
            let data: Vec<u8> = (from..from + len).map(|i| (i % 251) as u8).collect();
            tx.write_all(&data).unwrap();
            tx
        })
    }

    /// Receives `len` bytes of a pattern on loopback through `ifq`, checking every byte, then
    /// the end of the stream; returns what was seen and the kernel's statistics at the end.
    fn receive_over_loopback(ifq: ZcrxIfq, len: usize) -> (Seen, Option<ZcrxStats>) {
        assert!(ifq.is_nodev());
        let mut rx = ZcrxReceiver::new(ifq).unwrap();
        let (tx, sock) = tcp_pair();
        let sender = send_pattern(tx, 0, len);
        rx.arm(sock.as_raw_fd(), 7).unwrap();
        let seen = receive_exact(&mut rx, &sock, 0, len);
        drop(sender.join().unwrap());
        let end = receive_exact(&mut rx, &sock, len, 0);
        assert!(seen.eof || end.eof || Read::read(&mut &sock, &mut [0u8; 1]).unwrap() == 0);
        (seen, rx.ifq().kernel_stats())
    }

    fn nodev_ifq(pages: usize) -> ZcrxIfq {
        let page = crate::mem::page_size();
        ZcrxIfq::register_nodev_for_receive(pages * page, pages as u32).unwrap()
    }

    #[zcnet_testkit::test]
    fn nodev_receives_loopback_through_a_small_area() {
        require_nodev();
        // 4 pages for 1 MiB: every buffer goes round 64 times; without the flush it stalls.
        let (_, stats) = receive_over_loopback(nodev_ifq(4), 1 << 20);
        if ZcrxCaps::get().stats().is_some() {
            let st = stats.expect("the kernel says it keeps zcrx statistics");
            // NODEV copies everything. (`copy_count` counts copy runs, not completions: 108
            // for this 1 MiB in the kernel lab's 7.2.)
            assert_eq!(st.copy_bytes, 1 << 20, "{st:?}");
            assert!(st.copy_count > 0, "{st:?}");
        } else {
            assert!(stats.is_none());
        }
    }

    /// A completion queue too small for what arrives: the kernel ends the request with
    /// `-ENOSPC` (io_uring/zcrx.c `io_zcrx_queue_cqe` finds no room; its final CQE waits in
    /// the overflow list) and re-arming goes on where it stopped, losing nothing.
    #[zcnet_testkit::test]
    fn a_full_completion_queue_ends_the_request_and_rearming_recovers() {
        require_nodev();
        let page = crate::mem::page_size();
        let ring = ZcrxRing::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_cqsize(8)
            .build(8)
            .unwrap();
        let area = Mapping::anonymous(64 * page).unwrap();
        let ifq = ZcrxIfq::register_nodev_on(ring, area, 64).unwrap();
        let (seen, _) = receive_over_loopback(ifq, 1 << 20);
        assert!(
            seen.rearms.contains(&libc::ENOSPC),
            "8 CQEs for 256 pages must run out: {seen:?}"
        );
    }

    /// Where the kernel has them, a COPY event arrives once, stays quiet until re-armed, and
    /// comes again after re-arming; re-arming one that has not fired is the kernel's EINVAL.
    #[zcnet_testkit::test]
    fn the_copy_event_fires_once_until_rearmed() {
        require_nodev();
        let caps = ZcrxCaps::get();
        if !(caps.event(ZCRX_EVENT_COPY) && caps.arm_event()) {
            zcnet_testkit::skip(
                zcnet_testkit::Need::KernelVersion,
                "this kernel's zcrx query lists no COPY event or ZCRX_CTRL_ARM_EVENT (Linux 7.2 added them)",
            );
        }
        let ifq = nodev_ifq(16);
        assert_eq!(
            ifq.event_mask() & (1 << ZCRX_EVENT_COPY),
            1 << ZCRX_EVENT_COPY
        );
        let mut rx = ZcrxReceiver::new(ifq).unwrap();
        let (tx, sock) = tcp_pair();
        rx.arm(sock.as_raw_fd(), 7).unwrap();
        let tx = send_pattern(tx, 0, 256 << 10).join().unwrap();
        receive_exact(&mut rx, &sock, 0, 256 << 10);
        let ev = rx.events();
        assert_eq!((ev.copy, ev.alloc_fail, ev.other), (1, 0, 0), "{ev:?}");
        assert_eq!(ev.fired, 1 << ZCRX_EVENT_COPY);
        rx.rearm_event(ZCRX_EVENT_COPY).unwrap();
        assert_eq!(rx.events().fired, 0);
        let e = rx.ifq().arm_event(ZCRX_EVENT_COPY).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "not fired since: {e}");
        let tx = send_pattern(tx, 256 << 10, 64 << 10).join().unwrap();
        receive_exact(&mut rx, &sock, 256 << 10, 64 << 10);
        assert_eq!(rx.events().copy, 2, "{:?}", rx.events());
        drop(tx);
    }

    /// `rx_buf_len`: a page is what a device-less ifq has (and the kernel says so back); a
    /// larger buffer needs a device (`EOPNOTSUPP`, io_uring/zcrx.c `io_zcrx_create_area`);
    /// not a power of two is `EINVAL`.
    #[zcnet_testkit::test]
    fn buffer_size_without_a_device_is_a_page() {
        require_nodev();
        if !ZcrxCaps::get().rx_buf_len() {
            zcnet_testkit::skip(
                zcnet_testkit::Need::KernelVersion,
                "this kernel's zcrx query lists no ZCRX_FEATURE_RX_PAGE_SIZE",
            );
        }
        let page = crate::mem::page_size();
        let reg = |rx_buf_len: u32| {
            let area = Mapping::huge_tlb(2 << 20)
                .or_else(|_| Mapping::anonymous(2 << 20))
                .unwrap();
            ZcrxIfq::register_for_receive_with(
                area,
                HostRegistration {
                    rq_entries: 64,
                    rx_buf_len,
                    nodev: true,
                    ..HostRegistration::default()
                },
            )
        };
        let ifq = reg(page as u32).unwrap();
        assert_eq!(ifq.buf_len() as usize, page);
        assert_eq!(reg(0).unwrap().buf_len() as usize, page, "written back");
        let e = reg(16 << 10).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}");
        let e = reg(3 * page as u32).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
    }

    /// Where the kernel takes no event descriptor (6.18), none is asked for: no statistics,
    /// no events, and registration still works (the device check is what refuses here).
    #[zcnet_testkit::test]
    fn no_event_descriptor_where_the_kernel_lists_none() {
        let caps = ZcrxCaps::get();
        assert_eq!(event_request(&caps).is_some(), caps.events(), "{caps:?}");
        let c72 = ZcrxCaps {
            zcrx: Some(crate::uring_query::QueryZcrx {
                features: 3,
                nr_ctrl_opcodes: 3,
                ..Default::default()
            }),
            events: Some(crate::uring_query::QueryZcrxEvent {
                event_flags: 3,
                stats_size: 16,
                stats_off_alignment: 8,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(event_request(&c72), Some((8, 3)));
        // No ARM_EVENT: events would fire once for good; only the statistics are asked for.
        let mut no_arm = c72;
        no_arm.zcrx = no_arm.zcrx.map(|z| crate::uring_query::QueryZcrx {
            nr_ctrl_opcodes: 2,
            ..z
        });
        assert_eq!(event_request(&no_arm), Some((8, 0)));
        assert_eq!(event_request(&ZcrxCaps::default()), None);
        let off = stats_offset_in(8192, 8);
        assert!(off.is_multiple_of(8) && off + 16 <= 8192 && off >= 4096 + 64 * 16);
    }
}

#[cfg(test)]
mod dmabuf_tests {
    use super::*;
    use std::os::fd::{AsFd, FromRawFd};

    fn zcrx_dmabuf_kernel() {
        zcnet_testkit::require_kernel(6, 16, "a zcrx dma-buf area");
    }

    /// A memfd of `len` bytes: a file that is not a dma-buf, but has a size.
    fn memfd(len: u64) -> Arc<OwnedFd> {
        // SAFETY: the name is a NUL-terminated literal; memfd_create only reads it.
        let fd = unsafe { libc::memfd_create(c"zcnet-zcrx-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0, "memfd_create: {}", io::Error::last_os_error());
        // SAFETY: memfd_create returned a fresh fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: ftruncate takes an open fd and an integer; it touches no memory of ours.
        let r = unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) };
        assert_eq!(r, 0, "ftruncate: {}", io::Error::last_os_error());
        Arc::new(fd)
    }

    fn dev_null() -> Arc<OwnedFd> {
        Arc::new(std::fs::File::open("/dev/null").unwrap().into())
    }

    fn open_fds() -> usize {
        std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
    }

    /// The errno of a dma-buf registration that must fail; the ifq must not keep `fd`.
    fn dmabuf_errno(ifindex: u32, fd: &Arc<OwnedFd>, offset: u64, len: u64) -> Option<i32> {
        let r = ZcrxIfq::register_dmabuf_for_receive(ifindex, 0, Arc::clone(fd), offset, len, 128);
        let e = match r {
            Ok(ifq) => panic!("dma-buf registration unexpectedly succeeded: {ifq:?}"),
            Err(e) => e.raw_os_error(),
        };
        assert_eq!(
            Arc::strong_count(fd),
            1,
            "a failed registration kept the dma-buf"
        );
        e
    }

    #[zcnet_testkit::test]
    fn dmabuf_area_registration_fields() {
        let fd = memfd(1 << 20);
        let reg = dmabuf_area_reg(fd.as_fd(), 8192, 1 << 20);
        assert_eq!(reg.flags, IORING_ZCRX_AREA_DMABUF);
        assert_eq!(reg.dmabuf_fd, fd.as_raw_fd() as u32);
        assert_eq!(
            (reg.addr, reg.len),
            (8192, 1 << 20),
            "addr is the offset, not a pointer"
        );
        assert_eq!((reg.rq_area_token, reg.resv2), (0, [0; 2]));
    }

    #[zcnet_testkit::test]
    fn dmabuf_ranges_are_area_offsets_plus_the_area_start() {
        // Area id bits are ignored; the offset below them is relative to the area.
        let id1 = 1u64 << IORING_ZCRX_AREA_SHIFT;
        assert_eq!(
            dmabuf_range(0, 1 << 20, 4096 + 100, 1400),
            Some((4196, 1400))
        );
        assert_eq!(
            dmabuf_range(0, 1 << 20, id1 | 8192, 4096),
            Some((8192, 4096))
        );
        assert_eq!(
            dmabuf_range(1 << 21, 1 << 20, 4096, 10),
            Some(((1 << 21) + 4096, 10))
        );
        // The last byte of the area, and one past it.
        assert_eq!(dmabuf_range(0, 8192, 8191, 1), Some((8191, 1)));
        assert_eq!(dmabuf_range(0, 8192, 8191, 2), None);
        assert_eq!(dmabuf_range(0, 8192, 8192, 0), Some((8192, 0)));
        assert_eq!(dmabuf_range(u64::MAX - 10, 1 << 20, 4096, 1), None);
    }

    #[zcnet_testkit::test]
    fn dmabuf_area_on_loopback_is_refused_by_the_device_first() {
        zcrx_dmabuf_kernel();
        // lo of a private namespace (ifindex 1) has no DMA device: the kernel refuses before it
        // looks at the area, so neither a file that is not a dma-buf, nor an offset other than
        // 0, nor a length of 0 changes the answer. A missing interface is ENODEV, earlier still.
        let r = crate::os::in_private_netns(|| {
            let (null, mem) = (dev_null(), memfd(1 << 20));
            [
                dmabuf_errno(1, &null, 0, 1 << 20),
                dmabuf_errno(1, &mem, 0, 1 << 20),
                dmabuf_errno(1, &mem, 4096, 4096),
                dmabuf_errno(1, &mem, 0, 0),
                dmabuf_errno(4242, &mem, 0, 1 << 20),
            ]
        });
        let e = r;
        let op = Some(libc::EOPNOTSUPP);
        assert_eq!(e, [op, op, op, op, Some(libc::ENODEV)]);
    }

    #[zcnet_testkit::test]
    fn dmabuf_area_on_veth_is_not_supported_and_leaks_nothing() {
        zcrx_dmabuf_kernel();
        let r = crate::os::in_private_netns(|| {
            // A child process inherits this thread's network namespace.
            let ok = std::process::Command::new("ip")
                .args([
                    "link", "add", "zdv0", "type", "veth", "peer", "name", "zdv1",
                ])
                .status()
                .is_ok_and(|s| s.success());
            let Some(idx) = ok.then(|| if_index("zdv0")).flatten() else {
                zcnet_testkit::skip(
                    zcnet_testkit::Need::Tool,
                    "could not create a veth pair with ip(8) (iproute2)",
                );
            };
            let (null, mem) = (dev_null(), memfd(4 << 20));
            let _ = dmabuf_errno(idx, &mem, 0, 4 << 20);
            let before = open_fds();
            let mut errs = Vec::new();
            for _ in 0..16 {
                errs.push(dmabuf_errno(idx, &null, 0, 4 << 20));
                errs.push(dmabuf_errno(idx, &mem, 0, 4 << 20));
            }
            (errs, open_fds().saturating_sub(before))
        });
        let (errs, leaked) = r;
        assert!(
            errs.iter().all(|e| *e == Some(libc::EOPNOTSUPP)),
            "{errs:?}"
        );
        // Other tests of this binary open fds concurrently: 32 failures leaking one each
        // would be far above this.
        assert!(
            leaked < 16,
            "{leaked} more fds after 32 failed registrations"
        );
    }
}
