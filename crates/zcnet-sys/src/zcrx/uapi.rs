//! The kernel's zcrx uapi (include/uapi/linux/io_uring.h, Linux 6.15 to 7.2): the
//! registration structs, the refill ring entry, the control and event descriptors and their
//! constants, laid out as the kernel reads them (checked by the layout tests).

use super::*;

/// `IORING_REGISTER_ZCRX_IFQ` (6.15).
pub(crate) const IORING_REGISTER_ZCRX_IFQ: u32 = 32;
/// `IORING_MEM_REGION_TYPE_USER`: the region's memory is the user's (`user_addr`).
pub(crate) const IORING_MEM_REGION_TYPE_USER: u32 = 1;
/// `IORING_ZCRX_AREA_DMABUF`: the area is a dma-buf (`dmabuf_fd`), not user memory.
pub(crate) const IORING_ZCRX_AREA_DMABUF: u32 = 1;
/// `IORING_ZCRX_AREA_SHIFT`: the bit from which the area id is encoded into offsets.
pub(crate) const IORING_ZCRX_AREA_SHIFT: u32 = 48;
/// `IORING_ZCRX_AREA_MASK`: the area-id bits of an offset.
pub(crate) const IORING_ZCRX_AREA_MASK: u64 = !((1u64 << IORING_ZCRX_AREA_SHIFT) - 1);
/// The most refill-ring entries the kernel accepts (`IO_RQ_MAX_ENTRIES`, io_uring/zcrx.c);
/// more is `EINVAL` unless the ring has `IORING_SETUP_CLAMP`.
pub const ZCRX_MAX_RQ_ENTRIES: u32 = 32768;
/// Submission-queue entries of the ring [`ZcrxIfq::register`] creates.
pub(crate) const DEFAULT_RING_ENTRIES: u32 = 256;

/// A ring that zero-copy receive accepts: 32-byte CQEs (`IORING_SETUP_CQE32`, set by the
/// `cqueue::Entry32` type), built with SINGLE_ISSUER and DEFER_TASKRUN.
pub(crate) type ZcrxRing = IoUring<squeue::Entry, cqueue::Entry32>;

/// `struct io_uring_zcrx_rqe` (16 bytes): one refill-ring entry.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IoUringZcrxRqe {
    /// `off`: area offset of the buffer, ORed with the area token.
    pub(crate) off: u64,
    /// `len`.
    pub(crate) len: u32,
    /// `__pad`.
    pub(crate) pad: u32,
}

/// `struct io_uring_zcrx_cqe` (16 bytes): the second half of a RECV_ZC 32-byte CQE.
#[cfg(test)]
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IoUringZcrxCqe {
    /// `off`: area id in the bits of [`IORING_ZCRX_AREA_MASK`], offset in the area below.
    pub(crate) off: u64,
    /// `__pad`.
    pub(crate) pad: u64,
}

/// `struct io_uring_zcrx_offsets` (32 bytes): where head, tail and entries of the refill ring
/// are in its region (written by the kernel).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IoUringZcrxOffsets {
    /// `head` (written by the kernel as it consumes entries).
    pub(crate) head: u32,
    /// `tail` (written by the user as it adds entries).
    pub(crate) tail: u32,
    /// `rqes`: the entry array.
    pub(crate) rqes: u32,
    /// `__resv2`.
    pub(crate) resv2: u32,
    /// `__resv`.
    pub(crate) resv: [u64; 2],
}

/// `struct io_uring_zcrx_area_reg` (48 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IoUringZcrxAreaReg {
    /// `addr`: start (page-aligned), or the dma-buf offset (must be 0).
    pub(crate) addr: u64,
    /// `len`: page multiple.
    pub(crate) len: u64,
    /// `rq_area_token` (out; must be 0 in).
    pub(crate) rq_area_token: u64,
    /// `flags`: [`IORING_ZCRX_AREA_DMABUF`].
    pub(crate) flags: u32,
    /// `dmabuf_fd`.
    pub(crate) dmabuf_fd: u32,
    /// `__resv2`.
    pub(crate) resv2: [u64; 2],
}

/// `struct io_uring_region_desc` (64 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IoUringRegionDesc {
    /// `user_addr`: the memory, with [`IORING_MEM_REGION_TYPE_USER`]; 0 otherwise.
    pub(crate) user_addr: u64,
    /// `size`: page multiple.
    pub(crate) size: u64,
    /// `flags`: [`IORING_MEM_REGION_TYPE_USER`].
    pub(crate) flags: u32,
    /// `id` (must be 0).
    pub(crate) id: u32,
    /// `mmap_offset` (out, kernel-allocated regions only; must be 0 in).
    pub(crate) mmap_offset: u64,
    /// `__resv`.
    pub(crate) resv: [u64; 4],
}

/// `struct io_uring_zcrx_ifq_reg` (96 bytes), the argument of `IORING_REGISTER_ZCRX_IFQ`.
/// In 6.18 the field after `zcrx_id` is `__resv2` and the next 24 bytes `__resv[3]`, all of
/// which must be 0 (else `EINVAL`); Linux 7.2 names them `rx_buf_len` and `event_desc`,
/// `__resv[2]` (include/uapi/linux/io_uring.h), with 0 still meaning "as before".
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IoUringZcrxIfqReg {
    /// `if_idx`: interface index.
    pub(crate) if_idx: u32,
    /// `if_rxq`: hardware receive queue.
    pub(crate) if_rxq: u32,
    /// `rq_entries`: refill-ring entries (in; the kernel writes back the power of two it used).
    pub(crate) rq_entries: u32,
    /// `flags` (must be 0 in 6.18; [`ZCRX_REG_NODEV`] from Linux 7.1).
    pub(crate) flags: u32,
    /// `area_ptr`: pointer to an [`IoUringZcrxAreaReg`] (the kernel writes it back).
    pub(crate) area_ptr: u64,
    /// `region_ptr`: pointer to an [`IoUringRegionDesc`] (the kernel writes it back).
    pub(crate) region_ptr: u64,
    /// `offsets` (out).
    pub(crate) offsets: IoUringZcrxOffsets,
    /// `zcrx_id` (out; must be 0 in).
    pub(crate) zcrx_id: u32,
    /// `rx_buf_len` (7.2; `__resv2` before): buffer size, 0 for the default `PAGE_SIZE`.
    pub(crate) rx_buf_len: u32,
    /// `event_desc` (7.2; `__resv[0]` before, which must be 0): pointer to a
    /// [`ZcrxEventDesc`], or 0.
    pub(crate) event_desc: u64,
    /// `__resv` (must be 0).
    pub(crate) resv: [u64; 2],
}

/// `ZCRX_REG_NODEV` (Linux 7.1, `enum zcrx_reg_flags`): an ifq without a network device, with
/// `if_idx` and `if_rxq` 0. Every received byte is *copied* into the area by the kernel, and
/// refill entries are not consumed until [`ZcrxIfq::flush_refill_queue`]
/// (`ZCRX_CTRL_FLUSH_RQ`). 6.18 refuses any `flags` with `EINVAL`.
pub(crate) const ZCRX_REG_NODEV: u32 = 2;
/// `IORING_REGISTER_ZCRX_CTRL` (Linux 7.1): auxiliary zcrx operations ([`ZcrxCtrl`]).
pub(crate) const IORING_REGISTER_ZCRX_CTRL: u32 = 36;
/// `ZCRX_CTRL_FLUSH_RQ` (`enum zcrx_ctrl_op`): make the kernel consume the refill ring now.
pub(crate) const ZCRX_CTRL_FLUSH_RQ: u32 = 0;
/// `ZCRX_CTRL_ARM_EVENT` (Linux 7.2): let an event type that fired fire again
/// (`zcrx_ctrl_arm_event.event_type`; `EINVAL` for a type that has not fired).
pub(crate) const ZCRX_CTRL_ARM_EVENT: u32 = 2;
/// `user_data` of the event completions zcnet asks for (`zcrx_event_desc.user_data`); never a
/// connection's, nor [`ZCRX_CANCEL_TAG`].
pub(crate) const ZCRX_EVENT_TAG: u64 = u64::MAX - 1;
/// `ZCRX_EVENT_DESC_FLAG_STATS` (Linux 7.2, `enum zcrx_event_desc_flags`): `stats_offset`
/// names where in the refill region the kernel keeps a [`ZcrxStats`].
pub(crate) const ZCRX_EVENT_DESC_FLAG_STATS: u32 = 1;

/// `struct zcrx_ctrl` (72 bytes), the argument of `IORING_REGISTER_ZCRX_CTRL` (`nr_args` 0,
/// as liburing's test/zcrx.c passes it): `zcrx_id`, `op`, `__resv[2]`, then a 48-byte union
/// (`zcrx_ctrl_flush_rq` is `__resv[6]`, all 0; `zcrx_ctrl_export` is an fd and padding).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ZcrxCtrl {
    /// `zcrx_id`: the ifq.
    pub(crate) zcrx_id: u32,
    /// `op`: [`ZCRX_CTRL_FLUSH_RQ`], ...
    pub(crate) op: u32,
    /// `__resv` (must be 0).
    pub(crate) resv: [u64; 2],
    /// The op's union member (all 0 for a flush).
    pub(crate) arg: [u64; 6],
}

/// `struct zcrx_event_desc` (96 bytes, Linux 7.2): notifications (`type_mask`, none here) and
/// statistics (`flags` = [`ZCRX_EVENT_DESC_FLAG_STATS`], `stats_offset` from the start of the
/// refill region).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ZcrxEventDesc {
    /// `user_data` of notification CQEs.
    pub(crate) user_data: u64,
    /// `type_mask`: notification types wanted (`1 << ZCRX_EVENT_*`).
    pub(crate) type_mask: u32,
    /// `flags`: [`ZCRX_EVENT_DESC_FLAG_STATS`].
    pub(crate) flags: u32,
    /// `stats_offset`: where the [`ZcrxStats`] is, from the start of the refill region.
    pub(crate) stats_offset: u64,
    /// `__resv2` (must be 0).
    pub(crate) resv2: [u64; 9],
}

/// `struct zcrx_stats` (16 bytes, Linux 7.2), kept up to date by the kernel in the refill
/// region: cumulative copy-fallback completions and bytes the kernel copied into the area.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ZcrxStats {
    /// `copy_count`: completions whose bytes the kernel copied.
    pub(crate) copy_count: u64,
    /// `copy_bytes`: bytes the kernel copied.
    pub copy_bytes: u64,
}
