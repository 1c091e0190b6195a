use super::*;

#[zcnet_testkit::test]
fn limits_follow_the_frame_and_the_mtu() {
    let l = XskLimits::for_mtu(1500);
    assert_eq!((l.frame_size, l.max_payload), (2048, 1472));
    let l = XskLimits::for_mtu(1700);
    assert_eq!((l.frame_size, l.max_payload), (2048, 1672));
    // 1792 + 14 no longer fits behind the 256 B of receive headroom: 4096 B frames.
    let l = XskLimits::for_mtu(9000);
    // The receiving frame keeps 256 B of headroom: 4096 - 256 - 42.
    assert_eq!((l.frame_size, l.max_payload), (4096, 3798));
    let l = XskLimits::for_mtu(65536);
    assert_eq!(l.max_payload, 3798);
    assert!(l.check("--size", "3798", 3798, "lo").is_ok());
    assert!(l.check("--size", "3799", 3799, "lo").is_err());
    let e = l.check("--size", "64K", 65536, "lo").unwrap_err();
    let m = e.to_string();
    assert!(e.is_bad_argument(), "{m}");
    assert!(
        m.contains("--size 64K (65536 B)") && m.contains("at most 3798 B"),
        "{m}"
    );
    assert!(
        m.contains("use --size 3798 or less") && !m.contains('\n'),
        "{m}"
    );
    let m = XskLimits::for_mtu(1500)
        .check("--size", "1473", 1473, "vA")
        .unwrap_err()
        .to_string();
    assert!(
        m.contains("MTU 1500") && m.contains("at most 1472 B"),
        "{m}"
    );
}
