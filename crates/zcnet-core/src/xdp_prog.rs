//! The XDP program that hands one UDP port's packets to an AF_XDP socket, as eBPF instructions
//! built in code (no clang, no BPF toolchain).
//!
//! ```text
//!  frame ─► Ethernet EtherType 0x0800? ─► IPv4, version 4, IHL ≥ 5, not a fragment?
//!        ─► protocol 17 (UDP)? ─► UDP destination port == P?
//!        ─► yes: bpf_redirect_map(&xskmap, ctx->rx_queue_index, XDP_PASS)
//!        ─► no (anything else, or a frame too short to tell): XDP_PASS
//! ```
//!
//! The redirect's flags argument is the action when the map has no socket at that key
//! (`bpf_redirect_map` in include/uapi/linux/bpf.h: "the lower two bits of flags are used as
//! the return code if the map lookup fails"), so a queue without a socket passes its packets to
//! the stack too. Every packet read is preceded by a bounds check against `data_end`, which is
//! what the verifier asks for.
//!
//! Encoding: `struct bpf_insn` (include/uapi/linux/bpf.h) — opcode, destination and source
//! register (4 bits each), a signed 16-bit offset, a signed 32-bit immediate; opcodes from
//! include/uapi/linux/bpf_common.h and bpf.h (Documentation/bpf/standardization/
//! instruction-set.rst). Packet loads are in host byte order, so network-order constants are
//! compared as [`u16::from_ne_bytes`] of their big-endian bytes.

/// `XDP_PASS`: to the normal network stack.
pub(crate) const XDP_PASS: u32 = 2;
/// `XDP_REDIRECT`.
#[cfg(test)]
pub(crate) const XDP_REDIRECT: u32 = 4;
/// `BPF_FUNC_redirect_map` helper number.
pub(crate) const BPF_FUNC_REDIRECT_MAP: i32 = 51;
/// `BPF_PSEUDO_MAP_FD`: the source register of a 64-bit immediate load whose immediate is a map
/// file descriptor (the kernel replaces it with the map).
pub(crate) const BPF_PSEUDO_MAP_FD: u8 = 1;

/// Offsets in `struct xdp_md` (include/uapi/linux/bpf.h).
mod xdp_md {
    /// `data`: start of the packet.
    pub(crate) const DATA: i16 = 0;
    /// `data_end`: one past its end.
    pub(crate) const DATA_END: i16 = 4;
    /// `rx_queue_index`.
    pub(crate) const RX_QUEUE_INDEX: i16 = 16;
}

/// Opcodes (class | size/op | mode/source), include/uapi/linux/bpf_common.h and bpf.h.
pub mod op {
    /// `BPF_LDX | BPF_MEM | BPF_W`: 32-bit load.
    pub const LDX_W: u8 = 0x61;
    /// `BPF_LDX | BPF_MEM | BPF_H`: 16-bit load.
    pub(crate) const LDX_H: u8 = 0x69;
    /// `BPF_LDX | BPF_MEM | BPF_B`: 8-bit load.
    pub const LDX_B: u8 = 0x71;
    /// `BPF_LD | BPF_IMM | BPF_DW`: 64-bit immediate, two instructions.
    pub(crate) const LD_IMM64: u8 = 0x18;
    /// `BPF_ALU64 | BPF_MOV | BPF_X`.
    pub(crate) const MOV64_X: u8 = 0xbf;
    /// `BPF_ALU64 | BPF_MOV | BPF_K`.
    pub(crate) const MOV64_K: u8 = 0xb7;
    /// `BPF_ALU64 | BPF_ADD | BPF_K`.
    pub(crate) const ADD64_K: u8 = 0x07;
    /// `BPF_ALU64 | BPF_ADD | BPF_X`.
    pub(crate) const ADD64_X: u8 = 0x0f;
    /// `BPF_ALU64 | BPF_AND | BPF_K`.
    pub(crate) const AND64_K: u8 = 0x57;
    /// `BPF_ALU64 | BPF_LSH | BPF_K`.
    pub(crate) const LSH64_K: u8 = 0x67;
    /// `BPF_JMP | BPF_JGT | BPF_X`: unsigned greater than, registers.
    pub(crate) const JGT_X: u8 = 0x2d;
    /// `BPF_JMP | BPF_JNE | BPF_K`.
    pub(crate) const JNE_K: u8 = 0x55;
    /// `BPF_JMP | BPF_JLT | BPF_K`: unsigned less than an immediate.
    pub(crate) const JLT_K: u8 = 0xa5;
    /// `BPF_JMP | BPF_CALL`.
    pub(crate) const CALL: u8 = 0x85;
    /// `BPF_JMP | BPF_EXIT`.
    pub const EXIT: u8 = 0x95;
}

/// One eBPF instruction, fields as in `struct bpf_insn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Insn {
    /// Opcode.
    pub code: u8,
    /// Destination register (0..=10).
    pub dst: u8,
    /// Source register (0..=10), or a pseudo source for `LD_IMM64`.
    pub src: u8,
    /// Signed offset (memory accesses, jumps).
    pub off: i16,
    /// Signed immediate.
    pub imm: i32,
}

impl Insn {
    const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            dst,
            src,
            off,
            imm,
        }
    }

    /// The 8 bytes the kernel reads, in this host's byte order (the register nibbles are a C
    /// bitfield: `dst_reg` is the low nibble on little-endian hosts, the high one on big-endian).
    pub(crate) fn to_bytes(self) -> [u8; 8] {
        let regs = if cfg!(target_endian = "little") {
            (self.src << 4) | (self.dst & 0x0f)
        } else {
            (self.dst << 4) | (self.src & 0x0f)
        };
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = regs;
        b[2..4].copy_from_slice(&self.off.to_ne_bytes());
        b[4..8].copy_from_slice(&self.imm.to_ne_bytes());
        b
    }
}

/// A 16-bit network-order constant as a packet load sees it on this host.
fn net16(v: u16) -> i32 {
    i32::from(u16::from_ne_bytes(v.to_be_bytes()))
}

/// Where the program's "pass" exit is patched in.
const PASS: i16 = i16::MAX;

/// The program: packets of IPv4/UDP to `port` go to the socket at key `rx_queue_index` of the
/// XSKMAP `map_fd`; all others (and those of a queue without a socket) to the stack. Packets
/// with IPv4 options are understood (IHL up to 15); fragments pass.
pub fn udp_port_redirect(map_fd: i32, port: u16) -> Vec<Insn> {
    use op::*;
    let (r0, r1, r2, r3, r4, r5, r6, r7) = (0, 1, 2, 3, 4, 5, 6, 7);
    let mut p = vec![
        Insn::new(MOV64_X, r6, r1, 0, 0),                      // r6 = ctx
        Insn::new(LDX_W, r2, r6, xdp_md::DATA, 0),             // r2 = data
        Insn::new(LDX_W, r3, r6, xdp_md::DATA_END, 0),         // r3 = data_end
        Insn::new(MOV64_X, r4, r2, 0, 0),                      //
        Insn::new(ADD64_K, r4, 0, 0, 14 + 20),                 // Ethernet + minimal IPv4 header
        Insn::new(JGT_X, r4, r3, PASS, 0),                     // too short
        Insn::new(LDX_H, r5, r2, 12, 0),                       // EtherType
        Insn::new(JNE_K, r5, 0, PASS, net16(0x0800)),          // not IPv4
        Insn::new(LDX_B, r5, r2, 14 + 9, 0),                   // protocol
        Insn::new(JNE_K, r5, 0, PASS, 17),                     // not UDP
        Insn::new(LDX_H, r5, r2, 14 + 6, 0),                   // flags + fragment offset
        Insn::new(AND64_K, r5, 0, 0, net16(0x3fff)),           // MF | offset
        Insn::new(JNE_K, r5, 0, PASS, 0),                      // a fragment
        Insn::new(LDX_B, r5, r2, 14, 0),                       // version | IHL
        Insn::new(MOV64_X, r7, r5, 0, 0),                      //
        Insn::new(AND64_K, r7, 0, 0, 0xf0),                    //
        Insn::new(JNE_K, r7, 0, PASS, 0x40),                   // not version 4
        Insn::new(AND64_K, r5, 0, 0, 0x0f),                    // IHL in words
        Insn::new(JLT_K, r5, 0, PASS, 5),                      // malformed
        Insn::new(LSH64_K, r5, 0, 0, 2),                       // IHL in bytes, 20..=60
        Insn::new(ADD64_X, r2, r5, 0, 0),                      // r2 = data + IHL
        Insn::new(MOV64_X, r4, r2, 0, 0),                      //
        Insn::new(ADD64_K, r4, 0, 0, 14 + 8),                  // + Ethernet + UDP header
        Insn::new(JGT_X, r4, r3, PASS, 0),                     // too short
        Insn::new(LDX_H, r5, r2, 14 + 2, 0),                   // UDP destination port
        Insn::new(JNE_K, r5, 0, PASS, net16(port)),            // another port
        Insn::new(LD_IMM64, r1, BPF_PSEUDO_MAP_FD, 0, map_fd), // r1 = &xskmap
        Insn::new(0, 0, 0, 0, 0),                              //   (upper 32 bits)
        Insn::new(LDX_W, r2, r6, xdp_md::RX_QUEUE_INDEX, 0),   // key
        Insn::new(MOV64_K, r3, 0, 0, XDP_PASS as i32),         // no socket there: pass
        Insn::new(CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP),       //
        Insn::new(EXIT, 0, 0, 0, 0),                           // its result
    ];
    let pass = p.len();
    p.push(Insn::new(MOV64_K, r0, 0, 0, XDP_PASS as i32));
    p.push(Insn::new(EXIT, 0, 0, 0, 0));
    for (i, insn) in p.iter_mut().enumerate() {
        if insn.off == PASS {
            // Jumps are relative to the next instruction; the program is far shorter than i16.
            insn.off = (pass - i - 1) as i16;
        }
    }
    p
}

/// The program as the bytes of a `struct bpf_insn` array.
pub fn to_bytes(prog: &[Insn]) -> Vec<u8> {
    prog.iter().flat_map(|i| i.to_bytes()).collect()
}

#[cfg(test)]
mod tests;
