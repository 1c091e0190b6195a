//! Layouts against include/uapi/linux/bpf.h, and (as root, in a private network namespace)
//! the program through the real verifier, a refused one with its log, and link lifetimes.

use super::*;
use std::mem::{offset_of, size_of};
use zcnet_core::xdp_prog::{self, op};

#[zcnet_testkit::test]
fn attr_layouts_match_uapi() {
    assert_eq!(size_of::<MapCreateAttr>(), 44);
    assert_eq!(offset_of!(MapCreateAttr, map_name), 28);
    assert_eq!(size_of::<MapElemAttr>(), 32);
    assert_eq!(offset_of!(MapElemAttr, key), 8);
    assert_eq!(offset_of!(MapElemAttr, flags), 24);
    assert_eq!(size_of::<ProgLoadAttr>(), 72);
    assert_eq!(offset_of!(ProgLoadAttr, license), 16);
    assert_eq!(offset_of!(ProgLoadAttr, log_buf), 32);
    assert_eq!(offset_of!(ProgLoadAttr, prog_name), 48);
    assert_eq!(offset_of!(ProgLoadAttr, expected_attach_type), 68);
    assert_eq!(size_of::<LinkCreateAttr>(), 16);
    assert_eq!(offset_of!(LinkCreateAttr, attach_type), 8);
    assert_eq!(size_of::<InfoAttr>(), 16);
    assert_eq!(size_of::<IdAttr>(), 12);
    assert_eq!(offset_of!(LinkInfoRaw, xdp_ifindex), 16);
    assert_eq!(offset_of!(ProgInfoRaw, id), 4);
    assert_eq!(name16("zcnet-xsk:5201"), *b"zcnet_xsk_5201\0\0");
}

fn root() {
    zcnet_testkit::require_root("CAP_BPF, CAP_NET_ADMIN");
}

#[zcnet_testkit::test]
fn the_udp_redirect_program_passes_the_verifier() {
    root();
    let map = XskMap::create(4, "zcnet_test").expect("XSKMAP");
    let prog = xdp_prog::udp_port_redirect(map.fd().as_raw_fd(), 5201);
    let p = BpfProg::load_xdp(&prog, "zcnet_test").unwrap_or_else(|e| panic!("refused: {e}"));
    let id = p.id().expect("prog id");
    assert!(id > 0 && prog_exists(id).expect("prog by id"));
}

#[zcnet_testkit::test]
fn a_refused_program_comes_with_the_verifier_log() {
    root();
    // r2 = ctx->data; r0 = *(u8 *)(r2 + 0); exit — a packet read with no bounds check.
    let bad = [
        Insn {
            code: op::LDX_W,
            dst: 2,
            src: 1,
            ..Insn::default()
        },
        Insn {
            code: op::LDX_B,
            dst: 0,
            src: 2,
            ..Insn::default()
        },
        Insn {
            code: op::EXIT,
            ..Insn::default()
        },
    ];
    let e = BpfProg::load_xdp(&bad, "zcnet_bad").expect_err("the verifier must refuse it");
    assert_eq!(e.source.raw_os_error(), Some(libc::EACCES), "{e}");
    assert!(e.log.contains("invalid access to packet"), "log: {}", e.log);
    assert!(e.to_string().contains("verifier:"), "{e}");
}

#[zcnet_testkit::test]
fn a_link_detaches_when_dropped_and_refuses_a_second_program() {
    let r = crate::os::in_private_netns(|| {
        let map = XskMap::create(1, "zcnet_test").expect("XSKMAP");
        let prog = xdp_prog::udp_port_redirect(map.fd().as_raw_fd(), 9);
        let p = BpfProg::load_xdp(&prog, "zcnet_test").expect("load");
        // lo (ifindex 1) has no native XDP; generic works on every device.
        let native = XdpLink::attach(&p, 1, XdpAttachMode::Native).map(drop);
        let link = XdpLink::attach(&p, 1, XdpAttachMode::Generic).expect("generic on lo");
        let info = link.info().expect("link info");
        let second = XdpLink::attach(&p, 1, XdpAttachMode::Generic)
            .err()
            .and_then(|e| e.raw_os_error());
        let listed = link_ids().expect("link ids").contains(&info.id);
        let by_id = link_info(info.id).expect("link by id");
        drop(link);
        let after = link_info(info.id).expect("link by id after drop");
        (
            native.err().and_then(|e| e.raw_os_error()),
            info,
            p.id().expect("prog id"),
            second,
            listed,
            by_id,
            after,
        )
    });
    let (native, info, prog_id, second, listed, by_id, after) = r;
    assert_eq!(native, Some(libc::EOPNOTSUPP), "lo has no native XDP");
    assert_eq!(info.link_type, BPF_LINK_TYPE_XDP);
    assert_eq!((info.prog_id, info.ifindex), (prog_id, 1));
    assert_eq!(
        second,
        Some(libc::EBUSY),
        "one XDP program per interface and mode"
    );
    assert!(listed, "BPF_LINK_GET_NEXT_ID enumerates it");
    assert_eq!(by_id, Some(info));
    assert_eq!(after, None, "closing the link's fd removes it");
}
