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
