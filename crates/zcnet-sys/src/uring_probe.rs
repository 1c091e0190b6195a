//! What io_uring offers on this kernel: supported opcodes (`IORING_REGISTER_PROBE`), feature bits
//! (`io_uring_params.features`) and which `IORING_SETUP_*` flag combinations the kernel accepts.
//!
//! Everything here goes through the raw `io_uring_setup(2)` / `io_uring_register(2)` system calls
//! so that the kernel's exact errno comes back: a tiny ring is created, asked, and closed (an
//! [`OwnedFd`]). No ring memory is mapped: registration calls only need the ring's fd.
//!
//! Constants are those of `include/uapi/linux/io_uring.h` (Linux 6.18); the struct layouts below
//! were checked against that header and against the running 6.18 kernel's BTF
//! (`/sys/kernel/btf/vmlinux`), and the tests pin their sizes and offsets.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

// ---- opcodes (enum io_uring_op) -----------------------------------------------------------

/// `IORING_OP_SEND` (5.6).
#[cfg(test)]
pub(crate) const IORING_OP_SEND: u8 = 26;
/// `IORING_OP_RECV` (5.6). Multishot receive is this opcode with `IORING_RECV_MULTISHOT` in
/// `sqe->ioprio` (6.0); bundles add `IORING_RECVSEND_BUNDLE` (6.10).
pub const IORING_OP_RECV: u8 = 27;
/// `IORING_OP_SEND_ZC` (6.0).
pub const IORING_OP_SEND_ZC: u8 = 47;
/// `IORING_OP_SENDMSG_ZC` (6.1).
pub(crate) const IORING_OP_SENDMSG_ZC: u8 = 48;
/// `IORING_OP_READ_MULTISHOT` (6.7).
pub(crate) const IORING_OP_READ_MULTISHOT: u8 = 49;
/// `IORING_OP_RECV_ZC` (6.15): zero-copy receive into a registered zcrx area
/// ([`crate::zcrx`]).
pub const IORING_OP_RECV_ZC: u8 = 58;

/// The opcodes zcnet reports, with the names used in reports.
pub(crate) const PROBED_OPS: &[(u8, &str)] = &[
    (IORING_OP_SEND_ZC, "send-zc"),
    (IORING_OP_SENDMSG_ZC, "sendmsg-zc"),
    (IORING_OP_RECV, "recv"),
    (IORING_OP_RECV_ZC, "recv-zc"),
    (IORING_OP_READ_MULTISHOT, "read-multishot"),
];

// ---- sqe->ioprio flags of SEND/RECV ---------------------------------------------------------

/// `IORING_RECV_MULTISHOT`: one RECV (or RECV_ZC) request, many completions.
#[cfg(test)]
pub(crate) const IORING_RECV_MULTISHOT: u16 = 1 << 1;

// ---- io_uring_params.features ---------------------------------------------------------------

/// `IORING_FEAT_SINGLE_MMAP` (5.4).
#[cfg(test)]
pub(crate) const IORING_FEAT_SINGLE_MMAP: u32 = 1 << 0;
/// `IORING_FEAT_NODROP` (5.5).
pub(crate) const IORING_FEAT_NODROP: u32 = 1 << 1;
/// `IORING_FEAT_FAST_POLL` (5.7).
pub(crate) const IORING_FEAT_FAST_POLL: u32 = 1 << 5;
/// `IORING_FEAT_EXT_ARG` (5.11).
pub(crate) const IORING_FEAT_EXT_ARG: u32 = 1 << 8;
/// `IORING_FEAT_RECVSEND_BUNDLE` (6.10): RECV/SEND accept `IORING_RECVSEND_BUNDLE`.
pub(crate) const IORING_FEAT_RECVSEND_BUNDLE: u32 = 1 << 14;

/// The feature bits zcnet reports, with the names used in reports.
pub(crate) const PROBED_FEATURES: &[(u32, &str)] = &[
    (IORING_FEAT_NODROP, "nodrop"),
    (IORING_FEAT_FAST_POLL, "fast-poll"),
    (IORING_FEAT_EXT_ARG, "ext-arg"),
    (IORING_FEAT_RECVSEND_BUNDLE, "recvsend-bundle"),
];

// ---- io_uring_setup(2) flags ------------------------------------------------------------------

/// `IORING_SETUP_CQSIZE`: `cq_entries` is given (with the raw [`try_setup`], which passes 0,
/// the kernel answers `EINVAL`).
#[cfg(test)]
pub(crate) const IORING_SETUP_CQSIZE: u32 = 1 << 3;
/// `IORING_SETUP_COOP_TASKRUN` (5.19): no IPI to run completions' task work.
#[cfg(test)]
pub(crate) const IORING_SETUP_COOP_TASKRUN: u32 = 1 << 8;
/// `IORING_SETUP_SQE128` (5.19): 128-byte SQEs.
#[cfg(test)]
pub(crate) const IORING_SETUP_SQE128: u32 = 1 << 10;
/// `IORING_SETUP_CQE32` (5.19): 32-byte CQEs (zcrx needs this or `CQE_MIXED`).
pub const IORING_SETUP_CQE32: u32 = 1 << 11;
/// `IORING_SETUP_SINGLE_ISSUER` (6.0): only the creating task submits.
pub const IORING_SETUP_SINGLE_ISSUER: u32 = 1 << 12;
/// `IORING_SETUP_DEFER_TASKRUN` (6.1): task work runs only when the issuer waits; requires
/// [`IORING_SETUP_SINGLE_ISSUER`] (the kernel answers `EINVAL` without it).
pub const IORING_SETUP_DEFER_TASKRUN: u32 = 1 << 13;

/// The flags a zero-copy receive ring needs (Documentation/networking/iou-zcrx.rst).
pub const ZCRX_SETUP_FLAGS: u32 =
    IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_CQE32;

// ---- io_uring_register(2) ---------------------------------------------------------------------

/// `IORING_REGISTER_PROBE` (5.6).
pub(crate) const IORING_REGISTER_PROBE: u32 = 8;
/// `IO_URING_OP_SUPPORTED`: `io_uring_probe_op.flags` bit.
pub(crate) const IO_URING_OP_SUPPORTED: u16 = 1 << 0;

/// `struct io_sqring_offsets` (40 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IoSqringOffsets {
    /// `head`.
    pub(crate) head: u32,
    /// `tail`.
    pub(crate) tail: u32,
    /// `ring_mask`.
    pub(crate) ring_mask: u32,
    /// `ring_entries`.
    pub(crate) ring_entries: u32,
    /// `flags`.
    pub(crate) flags: u32,
    /// `dropped`.
    pub(crate) dropped: u32,
    /// `array`.
    pub(crate) array: u32,
    /// `resv1`.
    pub(crate) resv1: u32,
    /// `user_addr` (IORING_SETUP_NO_MMAP).
    pub(crate) user_addr: u64,
}

/// `struct io_cqring_offsets` (40 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IoCqringOffsets {
    /// `head`.
    pub(crate) head: u32,
    /// `tail`.
    pub(crate) tail: u32,
    /// `ring_mask`.
    pub(crate) ring_mask: u32,
    /// `ring_entries`.
    pub(crate) ring_entries: u32,
    /// `overflow`.
    pub(crate) overflow: u32,
    /// `cqes`.
    pub(crate) cqes: u32,
    /// `flags`.
    pub(crate) flags: u32,
    /// `resv1`.
    pub(crate) resv1: u32,
    /// `user_addr` (IORING_SETUP_NO_MMAP).
    pub(crate) user_addr: u64,
}

/// `struct io_uring_params` (120 bytes), in and out of `io_uring_setup(2)`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IoUringParams {
    /// `sq_entries` (out).
    pub(crate) sq_entries: u32,
    /// `cq_entries` (in with IORING_SETUP_CQSIZE, out).
    pub(crate) cq_entries: u32,
    /// `flags`: IORING_SETUP_*.
    pub(crate) flags: u32,
    /// `sq_thread_cpu`.
    pub(crate) sq_thread_cpu: u32,
    /// `sq_thread_idle` (ms).
    pub(crate) sq_thread_idle: u32,
    /// `features` (out): IORING_FEAT_*.
    pub(crate) features: u32,
    /// `wq_fd` (IORING_SETUP_ATTACH_WQ).
    pub(crate) wq_fd: u32,
    /// `resv`.
    pub(crate) resv: [u32; 3],
    /// `sq_off` (out).
    pub(crate) sq_off: IoSqringOffsets,
    /// `cq_off` (out).
    pub(crate) cq_off: IoCqringOffsets,
}

/// `struct io_uring_probe` header (16 bytes), followed in memory by `ops_len` entries.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IoUringProbeHdr {
    /// `last_op`: the highest opcode the kernel knows.
    pub(crate) last_op: u8,
    /// `ops_len`: how many `ops` entries the kernel filled.
    pub(crate) ops_len: u8,
    /// `resv`.
    pub(crate) resv: u16,
    /// `resv2`.
    pub(crate) resv2: [u32; 3],
}

/// `struct io_uring_probe_op` (8 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IoUringProbeOp {
    /// `op`: the opcode.
    pub(crate) op: u8,
    /// `resv`.
    pub(crate) resv: u8,
    /// `flags`: [`IO_URING_OP_SUPPORTED`].
    pub(crate) flags: u16,
    /// `resv2`.
    pub(crate) resv2: u32,
}

/// The probe buffer handed to the kernel: the header and room for every possible `u8` opcode.
#[repr(C)]
struct ProbeBuf {
    hdr: IoUringProbeHdr,
    ops: [IoUringProbeOp; 256],
}

/// A ring fd from the raw `io_uring_setup(2)`, with the parameters the kernel wrote back. Not
/// mapped: only good for `io_uring_register(2)` calls. Closed on drop.
#[derive(Debug)]
pub(crate) struct RawRing {
    fd: OwnedFd,
    params: IoUringParams,
}

impl RawRing {
    /// `io_uring_setup(entries, {flags})`: the kernel's errno on failure.
    pub(crate) fn setup(entries: u32, flags: u32) -> io::Result<RawRing> {
        let mut params = IoUringParams {
            flags,
            ..IoUringParams::default()
        };
        // SAFETY: params is a live, writable io_uring_params of the size the kernel expects
        // (layout pinned by the tests); the kernel reads and writes only that struct.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_io_uring_setup,
                entries,
                &mut params as *mut IoUringParams,
            )
        };
        if ret < 0 {
            return Err(crate::last_err());
        }
        let raw = libc::c_int::try_from(ret)
            .map_err(|_| io::Error::other("io_uring_setup returned an out-of-range fd"))?;
        // SAFETY: a non-negative return of io_uring_setup is a new fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(RawRing { fd, params })
    }

    /// The parameters the kernel wrote back (features, ring sizes, offsets).
    pub(crate) fn params(&self) -> &IoUringParams {
        &self.params
    }

    /// The ring's fd.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }
}

/// `io_uring_register(fd, opcode, arg, nr_args)`: the return value, or the kernel's errno.
///
/// # Safety
/// `arg` must be what the kernel expects for `opcode` and `nr_args` (a pointer to live memory
/// of the right size, readable and, where the kernel writes back, writable), or null where the
/// opcode takes none.
pub(crate) unsafe fn io_uring_register_raw(
    fd: BorrowedFd<'_>,
    opcode: u32,
    arg: *mut libc::c_void,
    nr_args: u32,
) -> io::Result<libc::c_long> {
    // SAFETY: the caller guarantees `arg` matches `opcode`/`nr_args`; fd is a live ring fd
    // borrowed for the duration of the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_io_uring_register,
            fd.as_raw_fd(),
            opcode,
            arg,
            nr_args,
        )
    };
    if ret < 0 {
        Err(crate::last_err())
    } else {
        Ok(ret)
    }
}

/// What `IORING_REGISTER_PROBE` and `io_uring_setup(2)` said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UringProbe {
    /// The highest opcode the kernel knows (`IORING_OP_LAST - 1`; 62 on 6.18).
    pub(crate) last_op: u8,
    /// The supported opcodes, ascending.
    pub(crate) supported: Vec<u8>,
    /// `io_uring_params.features` of a ring created with no flags.
    pub(crate) features: u32,
}

impl UringProbe {
    /// Whether opcode `op` is supported.
    pub fn supports(&self, op: u8) -> bool {
        self.supported.binary_search(&op).is_ok()
    }

    /// Whether every bit of `flag` (IORING_FEAT_*) is set.
    pub(crate) fn has_feature(&self, flag: u32) -> bool {
        self.features & flag == flag
    }

    /// `PROBED_OPS` with whether each is supported.
    pub fn probed_ops(&self) -> Vec<(&'static str, bool)> {
        PROBED_OPS
            .iter()
            .map(|&(op, name)| (name, self.supports(op)))
            .collect()
    }

    /// `PROBED_FEATURES` with whether each is present.
    pub fn probed_features(&self) -> Vec<(&'static str, bool)> {
        PROBED_FEATURES
            .iter()
            .map(|&(flag, name)| (name, self.has_feature(flag)))
            .collect()
    }
}

/// Sets up a 1-entry ring with no flags, asks `IORING_REGISTER_PROBE` and closes the ring.
/// Errors are the kernel's errno (`ENOSYS` without io_uring, `EPERM` when
/// `kernel.io_uring_disabled` forbids it, `EINVAL` from kernels before 5.6 for the probe).
pub fn probe() -> io::Result<UringProbe> {
    let ring = RawRing::setup(1, 0)?;
    let mut buf = Box::new(ProbeBuf {
        hdr: IoUringProbeHdr::default(),
        ops: [IoUringProbeOp::default(); 256],
    });
    // The kernel rejects a probe buffer that is not all zeroes (EINVAL) and caps nr_args at
    // IORING_OP_LAST (io_uring/register.c: io_probe).
    // SAFETY: buf is a live, writable, zeroed ProbeBuf: a 16-byte header followed by 256
    // io_uring_probe_op entries, exactly what nr_args = 256 tells the kernel it may touch.
    unsafe {
        io_uring_register_raw(
            ring.fd(),
            IORING_REGISTER_PROBE,
            (&mut *buf as *mut ProbeBuf).cast(),
            256,
        )?
    };
    let n = usize::from(buf.hdr.ops_len);
    let mut supported = buf.ops[..n]
        .iter()
        .filter(|o| o.flags & IO_URING_OP_SUPPORTED != 0)
        .map(|o| o.op)
        .collect::<Vec<_>>();
    supported.sort_unstable();
    supported.dedup();
    Ok(UringProbe {
        last_op: buf.hdr.last_op,
        supported,
        features: ring.params().features,
    })
}

/// Creates (and immediately closes) an 8-entry ring with exactly the raw `IORING_SETUP_*`
/// `flags` and no other parameters; `Err` carries the kernel's errno (`EINVAL` for an
/// unsupported or inconsistent combination, e.g. DEFER_TASKRUN without SINGLE_ISSUER).
/// Flags that need more parameters (CQSIZE, ATTACH_WQ, NO_MMAP, SQ_AFF) fail here by design.
pub fn try_setup(flags: u32) -> io::Result<()> {
    RawRing::setup(8, flags).map(drop)
}

/// `/proc/sys/kernel/io_uring_disabled` (6.6): 0 all may create rings, 1 only members of
/// `kernel.io_uring_group` (and CAP_SYS_ADMIN), 2 nobody. `None` where the file is absent.
pub fn io_uring_disabled() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[zcnet_testkit::test]
    fn layouts_match_uapi() {
        // include/uapi/linux/io_uring.h; confirmed against the 6.18 kernel's BTF.
        assert_eq!(size_of::<IoSqringOffsets>(), 40);
        assert_eq!(offset_of!(IoSqringOffsets, array), 24);
        assert_eq!(offset_of!(IoSqringOffsets, user_addr), 32);
        assert_eq!(size_of::<IoCqringOffsets>(), 40);
        assert_eq!(offset_of!(IoCqringOffsets, cqes), 20);
        assert_eq!(offset_of!(IoCqringOffsets, flags), 24);
        assert_eq!(offset_of!(IoCqringOffsets, user_addr), 32);
        assert_eq!(size_of::<IoUringParams>(), 120);
        assert_eq!(offset_of!(IoUringParams, flags), 8);
        assert_eq!(offset_of!(IoUringParams, features), 20);
        assert_eq!(offset_of!(IoUringParams, wq_fd), 24);
        assert_eq!(offset_of!(IoUringParams, resv), 28);
        assert_eq!(offset_of!(IoUringParams, sq_off), 40);
        assert_eq!(offset_of!(IoUringParams, cq_off), 80);
        assert_eq!(size_of::<IoUringProbeHdr>(), 16);
        assert_eq!(offset_of!(IoUringProbeHdr, ops_len), 1);
        assert_eq!(offset_of!(IoUringProbeHdr, resv2), 4);
        assert_eq!(size_of::<IoUringProbeOp>(), 8);
        assert_eq!(offset_of!(IoUringProbeOp, flags), 2);
        assert_eq!(offset_of!(IoUringProbeOp, resv2), 4);
        assert_eq!(size_of::<ProbeBuf>(), 16 + 256 * 8);
        assert_eq!(offset_of!(ProbeBuf, ops), 16);
    }

    #[zcnet_testkit::test]
    fn constants_match_uapi_and_the_io_uring_crate() {
        use io_uring::opcode;
        assert_eq!(IORING_OP_SEND, opcode::Send::CODE);
        assert_eq!(IORING_OP_RECV, opcode::Recv::CODE);
        assert_eq!(IORING_OP_SEND_ZC, opcode::SendZc::CODE);
        assert_eq!(IORING_OP_SENDMSG_ZC, opcode::SendMsgZc::CODE);
        assert_eq!(IORING_OP_READ_MULTISHOT, opcode::ReadMulti::CODE);
        assert_eq!(IORING_OP_RECV_ZC, opcode::RecvZc::CODE);
        assert_eq!(
            (IORING_SETUP_SINGLE_ISSUER, IORING_SETUP_DEFER_TASKRUN),
            (0x1000, 0x2000)
        );
        assert_eq!((IORING_SETUP_CQE32, IORING_SETUP_SQE128), (0x800, 0x400));
        assert_eq!(IORING_SETUP_COOP_TASKRUN, 0x100);
        assert_eq!(IORING_FEAT_RECVSEND_BUNDLE, 0x4000);
        assert_eq!(IORING_RECV_MULTISHOT, 2);
    }

    #[zcnet_testkit::test]
    fn probe_report_helpers() {
        let p = UringProbe {
            last_op: 62,
            supported: vec![IORING_OP_RECV, IORING_OP_SEND_ZC],
            features: IORING_FEAT_NODROP | IORING_FEAT_RECVSEND_BUNDLE,
        };
        assert!(p.supports(IORING_OP_SEND_ZC));
        assert!(!p.supports(IORING_OP_RECV_ZC));
        assert!(p.has_feature(IORING_FEAT_RECVSEND_BUNDLE));
        assert!(!p.has_feature(IORING_FEAT_RECVSEND_BUNDLE | IORING_FEAT_EXT_ARG));
        let ops = p.probed_ops();
        assert_eq!(ops.len(), PROBED_OPS.len());
        assert!(ops.contains(&("send-zc", true)));
        assert!(ops.contains(&("recv-zc", false)));
        assert!(p.probed_features().contains(&("recvsend-bundle", true)));
    }

    /// Skips the calling test when io_uring is disabled by sysctl.
    fn uring_enabled() {
        if let Some(v @ 1..) = io_uring_disabled() {
            zcnet_testkit::skip(
                zcnet_testkit::Need::Kernel,
                format!("kernel.io_uring_disabled = {v}"),
            );
        }
    }

    #[zcnet_testkit::test]
    fn probe_reports_zero_copy_ops_on_615_and_later() {
        uring_enabled();
        let p = probe().unwrap();
        assert!(p.supports(IORING_OP_RECV));
        assert!(p.last_op >= IORING_OP_RECV);
        assert!(p.has_feature(IORING_FEAT_NODROP));
        // Facts of 6.15+ kernels: SEND_ZC (6.0), READ_MULTISHOT (6.7), bundles (6.10) and
        // RECV_ZC (6.15) are all there. Older kernels report the test skipped from here.
        zcnet_testkit::require_kernel(6, 15, "the zero-copy ops' assertions");
        for &(op, name) in PROBED_OPS {
            assert!(p.supports(op), "{name} not supported");
        }
        assert!(p.has_feature(IORING_FEAT_RECVSEND_BUNDLE));
    }

    #[zcnet_testkit::test]
    fn setup_flag_combinations() {
        uring_enabled();
        try_setup(0).unwrap();
        zcnet_testkit::require_kernel(6, 1, "DEFER_TASKRUN");
        // io_uring/io_uring.c io_uring_sanitise_params: DEFER_TASKRUN needs SINGLE_ISSUER.
        let e = try_setup(IORING_SETUP_DEFER_TASKRUN).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
        try_setup(ZCRX_SETUP_FLAGS).unwrap();
        try_setup(IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN).unwrap();
        try_setup(IORING_SETUP_COOP_TASKRUN).unwrap();
        try_setup(IORING_SETUP_SQE128 | IORING_SETUP_CQE32).unwrap();
        // CQSIZE with cq_entries = 0 is refused.
        let e = try_setup(IORING_SETUP_CQSIZE).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
        // An unknown flag bit is refused.
        let e = try_setup(1 << 31).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
    }

    #[zcnet_testkit::test]
    fn raw_ring_reports_params() {
        uring_enabled();
        let r = RawRing::setup(8, 0).unwrap();
        assert_eq!(r.params().sq_entries, 8);
        assert_eq!(r.params().cq_entries, 16);
        assert!(r.params().features & IORING_FEAT_SINGLE_MMAP != 0);
    }

    #[zcnet_testkit::test]
    fn io_uring_disabled_reads_sysctl() {
        if std::path::Path::new("/proc/sys/kernel/io_uring_disabled").exists() {
            assert!(io_uring_disabled().is_some_and(|v| v <= 2));
        }
    }
}
