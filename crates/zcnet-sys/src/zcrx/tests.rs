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
