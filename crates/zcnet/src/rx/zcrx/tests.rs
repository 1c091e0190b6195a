use super::*;

fn veth() -> Target {
    Target {
        iface: "vB".into(),
        ifindex: 2,
        queue: 0,
    }
}

#[zcnet_testkit::test]
fn dmabuf_fragments_become_device_ranges() {
    // A fragment 100 bytes into the second page of a 1 MiB area at the start of the
    // dma-buf: the CQE's offset (area id bits removed by the bookkeeping) is the offset in
    // the dma-buf.
    let f = Frag {
        off: 4096 + 100,
        len: 1400,
    };
    assert_eq!(
        device_slice(0, 0, 1 << 20, f),
        Some(DeviceSlice {
            dmabuf_id: 0,
            offset: 4196,
            len: 1400
        })
    );
    // An area further into the dma-buf (later kernels allow an offset) shifts it.
    assert_eq!(
        device_slice(3, 1 << 21, 1 << 20, f).map(|d| (d.dmabuf_id, d.offset, d.len)),
        Some((3, (1 << 21) + 4196, 1400))
    );
    // The last bytes of the area, and past its end.
    let last = Frag {
        off: (1 << 20) - 10,
        len: 10,
    };
    assert_eq!(
        device_slice(0, 0, 1 << 20, last).map(|d| (d.offset, d.len)),
        Some(((1 << 20) - 10, 10))
    );
    let past = Frag { len: 11, ..last };
    assert_eq!(device_slice(0, 0, 1 << 20, past), None);
}

#[zcnet_testkit::test]
fn refill_entries_follow_the_area() {
    let page = zcnet_sys::mem::page_size() as u64;
    assert_eq!(rq_entries_for(0), 1);
    assert_eq!(rq_entries_for(page), 1);
    assert_eq!(rq_entries_for(3 * page), 4);
    assert_eq!(rq_entries_for(1 << 40), ZCRX_MAX_RQ_ENTRIES);
}

#[zcnet_testkit::test]
fn a_queue_with_a_memory_provider_is_busy_not_unsupported() {
    for (errno, dmabuf) in [(libc::EEXIST, None), (libc::EBUSY, Some(4 << 20))] {
        let e = refusal(&veth(), io::Error::from_raw_os_error(errno), dmabuf);
        let msg = e.to_string();
        assert!(
            msg.contains("on vB queue 0 is refused: the queue already has a memory provider"),
            "{msg}"
        );
        assert!(!msg.contains("not supported"), "{msg}");
        assert!(!msg.contains('\n'), "one line: {msg}");
        assert_eq!(e.errno(), Some(errno));
        assert_eq!(e.remedy(), Some(Remedy::OtherQueue));
        assert!(matches!(e, Error::Busy { .. }), "{e:?}");
    }
}

#[zcnet_testkit::test]
fn dmabuf_refusals_say_why_in_one_line() {
    let cases = [
        (
            libc::EOPNOTSUPP,
            4 << 20,
            "queue-management ops or header split",
        ),
        (libc::EOPNOTSUPP, 4 << 20, "exporter cannot attach"),
        (libc::EINVAL, 0, "size 0: it is not a dma-buf"),
        (libc::EINVAL, 4 << 20, "not a dma-buf"),
        (libc::EBADF, 4 << 20, "not open"),
        (libc::EFAULT, 2 << 30, "1 GiB"),
        (libc::ENODEV, 4 << 20, "not in this network namespace"),
    ];
    for (errno, len, want) in cases {
        let e = refusal(&veth(), io::Error::from_raw_os_error(errno), Some(len));
        let msg = e.to_string();
        assert!(msg.contains("zcrx) into a dma-buf on vB queue 0"), "{msg}");
        assert!(msg.contains(want), "missing '{want}' in: {msg}");
        assert!(!msg.contains('\n'), "one line: {msg}");
        match e {
            Error::Unsupported { source, .. } => assert_eq!(source.raw_os_error(), Some(errno)),
            e => panic!("{e:?}"),
        }
    }
    // Host areas keep their wording.
    let msg = refusal(
        &veth(),
        io::Error::from_raw_os_error(libc::EOPNOTSUPP),
        None,
    )
    .to_string();
    assert!(msg.contains("(zcrx) on vB queue 0"), "{msg}");
    assert!(!msg.contains("dma-buf"), "{msg}");
}

#[zcnet_testkit::test]
fn nodev_refusals_name_the_kernel_and_the_fix_in_one_line() {
    let einval = || io::Error::from_raw_os_error(libc::EINVAL);
    let old = nodev_refusal(einval(), false, Some((6, 18, 44))).to_string();
    assert!(old.contains("without a device"), "{old}");
    assert!(
        old.contains("needs ZCRX_REG_NODEV, which this kernel's zcrx query does not list"),
        "{old}"
    );
    assert!(old.contains("this is Linux 6.18.44"), "{old}");
    assert!(
        old.contains("RxMode::Uring") && !old.contains("--"),
        "{old}"
    );
    // Where the kernel lists the flag, EINVAL is about what was passed, not the flag,
    // whatever the release says.
    let new = nodev_refusal(einval(), true, Some((6, 18, 44))).to_string();
    assert!(!new.contains("ZCRX_REG_NODEV"), "{new}");
    assert!(new.contains("refused the area"), "{new}");
    let perm = nodev_refusal(io::Error::from_raw_os_error(libc::EPERM), true, None).to_string();
    assert!(perm.contains("CAP_NET_ADMIN"), "{perm}");
    assert!(perm.contains("as root"), "{perm}");
    // EPERM where the kernel lacks the flag: root is refused too, so the kernel is the
    // fix, not root (the privilege is checked first).
    let unprivileged_old = nodev_refusal(
        io::Error::from_raw_os_error(libc::EPERM),
        false,
        Some((6, 18, 44)),
    )
    .to_string();
    assert!(
        unprivileged_old.contains("ZCRX_REG_NODEV")
            && unprivileged_old.contains("root is refused too")
            && unprivileged_old.contains("Linux 7.1 or later"),
        "{unprivileged_old}"
    );
    assert!(!unprivileged_old.contains("as root"), "{unprivileged_old}");
    for m in [&old, &new, &perm, &unprivileged_old] {
        assert!(!m.contains('\n'), "one line: {m}");
    }
    match nodev_refusal(einval(), false, None) {
        Error::Unsupported { source, .. } => {
            assert_eq!(source.raw_os_error(), Some(libc::EINVAL))
        }
        e => panic!("{e:?}"),
    }
}

#[zcnet_testkit::test]
fn buffer_sizes_follow_the_kernels_answer() {
    use zcnet_sys::uring_query::QueryZcrx;
    let page = zcnet_sys::mem::page_size();
    let none = ZcrxCaps::default();
    let with = ZcrxCaps {
        zcrx: Some(QueryZcrx {
            features: zcnet_sys::uring_query::ZCRX_FEATURE_RX_PAGE_SIZE,
            ..QueryZcrx::default()
        }),
        ..ZcrxCaps::default()
    };
    assert_eq!(buffer_size(0, &none).unwrap(), 0);
    assert_eq!(
        buffer_size(page, &none).unwrap(),
        0,
        "a page is the default"
    );
    assert_eq!(buffer_size(64 << 10, &with).unwrap(), 64 << 10);
    let e = buffer_size(64 << 10, &none).unwrap_err().to_string();
    assert!(e.contains("ZCRX_FEATURE_RX_PAGE_SIZE"), "{e}");
    assert!(!e.contains("--") && !e.contains('\n'), "{e}");
    for bad in [3 * page, page / 2, 4 << 20] {
        let e = buffer_size(bad, &with).unwrap_err().to_string();
        assert!(e.contains("power of two"), "{bad}: {e}");
    }
}

#[zcnet_testkit::test]
fn efault_or_enomem_on_a_dmabuf_area_means_the_kernel_had_to_copy() {
    // EFAULT before Linux 6.18, ENOMEM since (io_alloc_fallback_niov).
    for errno in [libc::EFAULT, libc::ENOMEM] {
        let msg = request_error(ConnId(7), errno, true).to_string();
        assert!(msg.contains("cannot copy into device memory"), "{msg}");
        assert!(msg.contains("nic::NicSetup"), "{msg}");
        assert!(!msg.contains('\n'), "{msg}");
        let host = request_error(ConnId(7), errno, false).to_string();
        assert!(!host.contains("device memory"), "{host}");
    }
}
