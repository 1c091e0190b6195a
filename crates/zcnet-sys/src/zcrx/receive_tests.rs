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
