//! As root, in a private network namespace: a socket on `lo` that sends UDP frames with
//! sequence numbers through its TX ring and gets them back on its RX ring (lo loops them back,
//! a generic-mode XDP program redirects them to the socket), across several ring wraps.

use super::*;
use crate::bpf::{BpfProg, XdpAttachMode, XdpLink, XskMap};
use std::net::Ipv4Addr;
use zcnet_core::udp_frame::{parse_udp, UdpFlow};

const PORT: u16 = 4791;

fn cfg() -> XdpSocketConfig {
    XdpSocketConfig {
        frame_size: 2048,
        frame_count: 64,
        headroom: 0,
        fill_size: 16,
        comp_size: 16,
        rx_size: 16,
        tx_size: 16,
        need_wakeup: true,
        mode: XskBindMode::Copy,
    }
}

fn lo_up() {
    let st = std::process::Command::new("ip")
        .args(["link", "set", "lo", "up"])
        .status()
        .expect("ip (iproute2)");
    assert!(st.success());
}

#[test]
fn frames_loop_back_through_all_four_rings() {
    let r = crate::os::in_private_netns(|| {
        lo_up();
        let umem = Mapping::anonymous(cfg().umem_len()).expect("umem");
        let (mut s, mut free) = XdpSocket::new(umem, 1, 0, &cfg()).expect("bind on lo");
        assert!(!s.is_zerocopy().expect("XDP_OPTIONS"));
        let map = XskMap::create(1, "zcnet_test").expect("XSKMAP");
        map.set(0, s.fd()).expect("XSKMAP entry");
        let insns = zcnet_core::xdp_prog::udp_port_redirect(map.fd().as_raw_fd(), PORT);
        let prog = BpfProg::load_xdp(&insns, "zcnet_test").expect("load");
        let _link = XdpLink::attach(&prog, 1, XdpAttachMode::Generic).expect("attach");
        // Half the frames receive, half send.
        let mut rx_frames = free.split_off(32);
        assert_eq!(
            s.fill(&mut rx_frames).expect("fill"),
            16,
            "the fill ring holds 16"
        );
        let flow = UdpFlow {
            src_mac: [0; 6],
            dst_mac: [0; 6],
            src: Ipv4Addr::LOCALHOST,
            dst: Ipv4Addr::LOCALHOST,
            src_port: 999,
            dst_port: PORT,
            udp_checksum: true,
        };
        let total = 200u64;
        let (mut sent, mut got) = (0u64, Vec::new());
        let mut rx = Vec::new();
        let mut batch = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while (got.len() as u64) < total && std::time::Instant::now() < deadline {
            s.complete(&mut free, 64).expect("complete");
            // At most 8 in flight, so that the receiver's 16-entry rings never overflow.
            while sent < total && sent - (got.len() as u64) < 8 {
                let Some(mut f) = free.pop() else { break };
                let n = flow
                    .write(f.bytes_mut(), sent as u16, &sent.to_le_bytes())
                    .expect("frame");
                f.set_data(0, n as u32).expect("span");
                batch.push(f);
                sent += 1;
            }
            s.transmit(&mut batch).expect("transmit");
            assert!(batch.is_empty(), "the TX ring had room");
            s.kick_tx().expect("kick");
            s.receive(&mut rx, 64).expect("receive");
            for f in rx.drain(..) {
                let p = parse_udp(f.data()).expect("a valid frame");
                got.push(u64::from_le_bytes(p.payload.try_into().expect("8 B")));
                rx_frames.push(f);
            }
            s.fill(&mut rx_frames).expect("refill");
            if got.len() as u64 == sent && sent < total {
                continue;
            }
            s.wait_rx(Duration::from_millis(1)).expect("poll");
        }
        let st = s.statistics().expect("stats");
        (got, st, s.kicks(), s.frames().counts(), s.frames_in_tx())
    });
    if let Some((got, st, kicks, counts, in_tx)) = r {
        assert_eq!(got, (0..200).collect::<Vec<u64>>(), "every frame, in order");
        assert_eq!(
            st.rx_dropped + st.rx_ring_full + st.rx_invalid_descs,
            0,
            "{st:?}"
        );
        assert_eq!(st.tx_invalid_descs, 0);
        assert!(kicks > 0);
        assert_eq!(counts.sent, 200);
        assert!(counts.completed + in_tx as u64 == 200);
        assert!(counts.received == 200 && counts.filled >= 200);
    }
}

#[test]
fn wrong_input_is_refused_before_the_kernel_sees_it() {
    let r = crate::os::in_private_netns(|| {
        let umem = Mapping::anonymous(cfg().umem_len()).expect("umem");
        let too_many = XdpSocketConfig {
            frame_count: 65,
            ..cfg()
        };
        let e1 = XdpSocket::new(umem, 1, 0, &too_many)
            .err()
            .map(|e| e.kind());
        let odd = XdpSocketConfig {
            frame_size: 3000,
            ..cfg()
        };
        let umem = Mapping::anonymous(odd.umem_len()).expect("umem");
        let e2 = XdpSocket::new(umem, 1, 0, &odd)
            .err()
            .and_then(|e| e.raw_os_error());
        let umem = Mapping::anonymous(cfg().umem_len()).expect("umem");
        let e3 = XdpSocket::new(umem, 1, 7, &cfg())
            .err()
            .and_then(|e| e.raw_os_error());
        let (mut a, _fa) = XdpSocket::new(
            Mapping::anonymous(cfg().umem_len()).expect("umem"),
            1,
            0,
            &cfg(),
        )
        .expect("a");
        // Frames of another UMEM (never registered) cannot be given to this socket.
        let (_, slots) = Mapping::anonymous(cfg().umem_len())
            .expect("umem")
            .into_slots(2048, 64)
            .expect("slots");
        let mut fb: Vec<UmemFrame> = slots
            .into_iter()
            .map(|slot| UmemFrame {
                slot,
                off: 0,
                len: 10,
            })
            .collect();
        let e4 = a.fill(&mut fb).err().map(|e| e.kind());
        let e5 = a.transmit(&mut fb).err().map(|e| e.kind());
        (e1, e2, e3, e4, e5, fb.len())
    });
    if let Some((e1, e2, e3, e4, e5, left)) = r {
        assert_eq!(
            e1,
            Some(io::ErrorKind::InvalidInput),
            "65 frames in a 64-frame UMEM"
        );
        assert_eq!(e2, Some(libc::EINVAL), "chunk size not a power of two");
        assert_eq!(e3, Some(libc::EINVAL), "lo has one queue");
        assert_eq!(e4, Some(io::ErrorKind::InvalidInput));
        assert_eq!(e5, Some(io::ErrorKind::InvalidInput));
        assert_eq!(left, 64, "a refused call takes no frame");
    }
}
