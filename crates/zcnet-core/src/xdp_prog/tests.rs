//! The program run by a small interpreter of the instructions it uses, on built, truncated and
//! mutated frames, against a reference classifier written in plain Rust. The interpreter
//! refuses a packet read outside `[data, data_end)` (what the verifier proves impossible), so
//! these tests also show every read is bounds-checked on the path that makes it.
#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use super::*;
use crate::udp_frame::{UdpFlow, HEADERS_LEN};
use proptest::prelude::*;
use std::net::Ipv4Addr;

#[derive(Debug, Clone, Copy, PartialEq)]
enum V {
    Uninit,
    Scalar(u64),
    Ctx,
    Pkt(i64),
    PktEnd,
    Map(i32),
}

const MAP_FD: i32 = 42;
const PORT: u16 = 5201;

/// Runs `prog` on `frame` received on `queue`, with an XSKMAP holding a socket at
/// `socket_at`. Returns the XDP action.
fn exec(prog: &[Insn], frame: &[u8], queue: u32, socket_at: Option<u32>) -> Result<u32, String> {
    let mut r = [V::Uninit; 11];
    r[1] = V::Ctx;
    let mut pc = 0usize;
    for _ in 0..1000 {
        let i = *prog.get(pc).ok_or("fell off the end")?;
        let (d, s) = (usize::from(i.dst), usize::from(i.src));
        pc += 1;
        let scalar = |v: V| match v {
            V::Scalar(x) => Ok(x),
            other => Err(format!("pc {}: {other:?} is not a scalar", pc - 1)),
        };
        match i.code {
            op::MOV64_X => r[d] = r[s],
            op::MOV64_K => r[d] = V::Scalar(i.imm as i64 as u64),
            op::ADD64_K | op::ADD64_X => {
                let k = if i.code == op::ADD64_K {
                    i.imm as i64 as u64
                } else {
                    scalar(r[s])?
                };
                r[d] = match r[d] {
                    V::Scalar(x) => V::Scalar(x.wrapping_add(k)),
                    V::Pkt(o) => V::Pkt(o + k as i64),
                    other => return Err(format!("add to {other:?}")),
                }
            }
            op::AND64_K => r[d] = V::Scalar(scalar(r[d])? & (i.imm as i64 as u64)),
            op::LSH64_K => r[d] = V::Scalar(scalar(r[d])? << i.imm),
            op::LDX_W | op::LDX_H | op::LDX_B => {
                let size = match i.code {
                    op::LDX_W => 4,
                    op::LDX_H => 2,
                    _ => 1,
                };
                r[d] = match (r[s], i.off) {
                    (V::Ctx, xdp_md::DATA) => V::Pkt(0),
                    (V::Ctx, xdp_md::DATA_END) => V::PktEnd,
                    (V::Ctx, xdp_md::RX_QUEUE_INDEX) => V::Scalar(u64::from(queue)),
                    (V::Pkt(o), off) => {
                        let at = o + i64::from(off);
                        if at < 0 || at + size > frame.len() as i64 {
                            return Err(format!(
                                "pc {}: read of {size} B at {at} past a {} B packet",
                                pc - 1,
                                frame.len()
                            ));
                        }
                        let b = &frame[at as usize..(at + size) as usize];
                        V::Scalar(match size {
                            4 => u64::from(u32::from_ne_bytes([b[0], b[1], b[2], b[3]])),
                            2 => u64::from(u16::from_ne_bytes([b[0], b[1]])),
                            _ => u64::from(b[0]),
                        })
                    }
                    (base, off) => return Err(format!("load from {base:?}+{off}")),
                }
            }
            op::LD_IMM64 => {
                assert_eq!(i.src, BPF_PSEUDO_MAP_FD);
                r[d] = V::Map(i.imm);
                pc += 1;
            }
            op::JGT_X => {
                let taken = match (r[d], r[s]) {
                    (V::Pkt(o), V::PktEnd) => o > frame.len() as i64,
                    other => return Err(format!("jgt on {other:?}")),
                };
                if taken {
                    pc = (pc as i64 + i64::from(i.off)) as usize;
                }
            }
            op::JNE_K | op::JLT_K => {
                let x = scalar(r[d])?;
                let k = i.imm as i64 as u64;
                if (i.code == op::JNE_K && x != k) || (i.code == op::JLT_K && x < k) {
                    pc = (pc as i64 + i64::from(i.off)) as usize;
                }
            }
            op::CALL => {
                assert_eq!(i.imm, BPF_FUNC_REDIRECT_MAP);
                assert_eq!(r[1], V::Map(MAP_FD));
                let key = scalar(r[2])?;
                let flags = scalar(r[3])?;
                let ret = if socket_at.map(u64::from) == Some(key) {
                    u64::from(XDP_REDIRECT)
                } else {
                    flags & 3
                };
                r[1..=5].fill(V::Uninit);
                r[0] = V::Scalar(ret);
            }
            op::EXIT => return Ok(scalar(r[0])? as u32),
            c => return Err(format!("opcode {c:#x} not interpreted")),
        }
    }
    Err("no exit within 1000 instructions".into())
}

/// What the program should decide, written plainly.
fn reference(frame: &[u8], port: u16) -> bool {
    let be16 = |at: usize| u16::from_be_bytes([frame[at], frame[at + 1]]);
    if frame.len() < 34 || be16(12) != 0x0800 || frame[23] != 17 || be16(20) & 0x3fff != 0 {
        return false;
    }
    let ihl = usize::from(frame[14] & 0x0f) * 4;
    frame[14] >> 4 == 4 && ihl >= 20 && frame.len() >= 14 + ihl + 8 && be16(14 + ihl + 2) == port
}

fn frame(dport: u16, payload: usize) -> Vec<u8> {
    let f = UdpFlow {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        src: Ipv4Addr::new(10, 10, 0, 1),
        dst: Ipv4Addr::new(10, 10, 0, 2),
        src_port: 999,
        dst_port: dport,
        udp_checksum: false,
    };
    let mut b = vec![0u8; HEADERS_LEN + payload];
    f.write(&mut b, 0, &vec![0xab; payload]).unwrap();
    b
}

fn run(f: &[u8]) -> u32 {
    exec(&udp_port_redirect(MAP_FD, PORT), f, 0, Some(0)).unwrap()
}

#[test]
fn redirects_only_its_port() {
    assert_eq!(run(&frame(PORT, 10)), XDP_REDIRECT);
    assert_eq!(run(&frame(PORT, 0)), XDP_REDIRECT, "an empty datagram");
    assert_eq!(run(&frame(PORT + 1, 10)), XDP_PASS);
    assert_eq!(
        run(&frame(PORT.swap_bytes(), 10)),
        XDP_PASS,
        "byte order matters"
    );
    // Another queue, or no socket in the map: to the stack.
    let prog = udp_port_redirect(MAP_FD, PORT);
    assert_eq!(exec(&prog, &frame(PORT, 10), 1, Some(0)).unwrap(), XDP_PASS);
    assert_eq!(exec(&prog, &frame(PORT, 10), 0, None).unwrap(), XDP_PASS);
    assert_eq!(
        exec(&prog, &frame(PORT, 10), 3, Some(3)).unwrap(),
        XDP_REDIRECT
    );
}

#[test]
fn other_traffic_passes() {
    let mut arp = frame(PORT, 10);
    arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    assert_eq!(run(&arp), XDP_PASS);
    let mut tcp = frame(PORT, 10);
    tcp[23] = 6;
    assert_eq!(run(&tcp), XDP_PASS);
    let mut frag = frame(PORT, 10);
    frag[20] |= 0x20; // more fragments
    assert_eq!(run(&frag), XDP_PASS);
    let mut later = frame(PORT, 10);
    later[21] = 1; // fragment offset 8
    assert_eq!(run(&later), XDP_PASS);
    let mut v6 = frame(PORT, 10);
    v6[14] = 0x65;
    assert_eq!(run(&v6), XDP_PASS, "version 6 in an IPv4 EtherType");
    for n in 0..HEADERS_LEN {
        assert_eq!(
            run(&frame(PORT, 10)[..n]),
            XDP_PASS,
            "{n} B: too short to tell"
        );
    }
}

#[test]
fn ip_options_move_the_udp_header() {
    // IHL 6: four bytes of options (NOPs) between the IPv4 and UDP headers.
    let mut f = frame(PORT + 7, 10);
    f.insert(34, 1);
    f.insert(34, 1);
    f.insert(34, 1);
    f.insert(34, 1);
    f[14] = 0x46;
    f[38 + 2..38 + 4].copy_from_slice(&PORT.to_be_bytes());
    assert_eq!(run(&f), XDP_REDIRECT);
    f[14] = 0x44; // IHL 4: malformed
    assert_eq!(run(&f), XDP_PASS);
}

#[test]
fn encoding_matches_the_kernel_layout() {
    let p = udp_port_redirect(7, PORT);
    let bytes = to_bytes(&p);
    assert_eq!(bytes.len(), p.len() * 8);
    // r6 = r1: opcode 0xbf, dst 6 in the low nibble (little-endian hosts), src 1 in the high.
    if cfg!(target_endian = "little") {
        assert_eq!(&bytes[..8], &[0xbf, 0x16, 0, 0, 0, 0, 0, 0]);
    }
    let ld = p.iter().position(|i| i.code == op::LD_IMM64).unwrap();
    assert_eq!((p[ld].src, p[ld].imm), (BPF_PSEUDO_MAP_FD, 7));
    assert_eq!(p[ld + 1], Insn::default(), "second half of the 64-bit load");
    // Every jump lands inside the program.
    for (i, insn) in p.iter().enumerate() {
        if matches!(insn.code, op::JGT_X | op::JNE_K | op::JLT_K) {
            let to = i as i64 + 1 + i64::from(insn.off);
            assert!(to > i as i64 && (to as usize) < p.len(), "jump at {i}");
        }
    }
    assert_eq!(p.last().unwrap().code, op::EXIT);
}

proptest! {
    /// Arbitrary bytes, and frames built and then mutated and cut anywhere: the program agrees
    /// with the reference and never reads outside the packet.
    #[test]
    fn agrees_with_the_reference(
        bytes in prop::collection::vec(any::<u8>(), 0..80),
        dport in prop_oneof![Just(PORT), any::<u16>()],
        payload in 0usize..40,
        flips in prop::collection::vec((0usize..80, any::<u8>()), 0..3),
        cut in any::<usize>(),
    ) {
        prop_assert_eq!(run(&bytes) == XDP_REDIRECT, reference(&bytes, PORT));
        let mut f = frame(dport, payload);
        for (at, v) in flips {
            let at = at % f.len();
            f[at] = v;
        }
        let f = &f[..cut % (f.len() + 1)];
        prop_assert_eq!(run(f) == XDP_REDIRECT, reference(f, PORT));
    }
}
