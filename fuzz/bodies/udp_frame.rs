//! Ethernet/IPv4/UDP frames as AF_XDP receives them (`parse_udp`,
//! `parse_udp_partial_csum`): arbitrary or lightly damaged frames never panic, what parses
//! lies inside the frame, and a frame built by `UdpFlow::write` parses back to its flow and
//! payload (with the UDP checksum checked or not).

use crate::input::Input;
use std::net::Ipv4Addr;
use zcnet_core::udp_frame::{
    internet_checksum, parse_udp, parse_udp_partial_csum, UdpFlow, HEADERS_LEN,
};

fn check(frame: &[u8]) {
    let full = parse_udp(frame);
    let partial = parse_udp_partial_csum(frame);
    if let Ok(p) = full {
        assert_eq!(
            partial,
            Ok(p),
            "a checksum-checked parse disagrees with the unchecked one"
        );
    }
    if let Ok(p) = partial {
        let base = frame.as_ptr() as usize;
        let at = p.payload.as_ptr() as usize - base;
        assert!(
            at >= HEADERS_LEN && at + p.payload.len() <= frame.len(),
            "payload outside the frame"
        );
    }
}

pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    if inp.one_in(4) {
        check(inp.rest());
        return;
    }
    let flow = UdpFlow {
        src_mac: inp.array(),
        dst_mac: inp.array(),
        src: Ipv4Addr::from(inp.u32()),
        dst: Ipv4Addr::from(inp.u32()),
        src_port: inp.u16(),
        dst_port: inp.u16(),
        udp_checksum: inp.bool(),
    };
    let ip_id = inp.u16();
    let payload = inp.small_bytes(300).to_vec();
    let mut buf = vec![0u8; UdpFlow::frame_len(payload.len()) + inp.index(8)];
    let n = flow
        .write(&mut buf, ip_id, &payload)
        .expect("room for the frame");
    assert_eq!(n, UdpFlow::frame_len(payload.len()));
    assert_eq!(internet_checksum(&buf[14..34]), 0, "IPv4 header checksum");
    let p = parse_udp(&buf[..n]).expect("own frame parses");
    assert_eq!(
        (p.src, p.dst, p.src_port, p.dst_port, p.ip_id),
        (flow.src, flow.dst, flow.src_port, flow.dst_port, ip_id)
    );
    assert_eq!((p.src_mac, p.dst_mac), (flow.src_mac, flow.dst_mac));
    assert_eq!(p.payload, payload.as_slice());
    assert!(
        flow.write(&mut buf[..n - 1], ip_id, &payload).is_err(),
        "a frame written into too little room"
    );
    // Damage, then parse again.
    let edits = inp.index(4);
    for _ in 0..edits {
        let at = inp.index(n + 4);
        match buf.get_mut(at) {
            Some(b) => *b = inp.u8(),
            None => buf.push(inp.u8()),
        }
    }
    let cut = buf.len() - inp.index(buf.len().min(60) + 1);
    check(&buf[..cut]);
}
