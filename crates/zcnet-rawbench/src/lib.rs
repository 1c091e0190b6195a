//! # zcnet-rawbench: what zcnet's benchmarks compare the library against
//!
//! Measurement code, kept out of the library's sys crate (zcnet-sys carries no benchmark
//! code):
//!
//! - [`baseline`]: the raw `IORING_OP_SEND_ZC` / `IORING_OP_SEND` and `MSG_ZEROCOPY` loops that
//!   `zcnet bench tx` and `zcnet bench raw` measure zcnet's own send overhead against;
//! - [`af_packet`]: AF_PACKET sockets with `sendmmsg`/`recvmmsg` and TPACKET_V3 rings, the
//!   engines `zcnet bench xsk` measures AF_XDP against;
//! - [`af_xdp`]: that bench's AF_XDP side, on zcnet-sys's socket, rings and XDP program
//!   loader directly (the library's `zcnet::xsk` is the layer above them).
//!
//! It uses zcnet-sys's safe helpers (mappings and their slots, socket options and the error
//! queue, thread CPU time) and zcnet-core's TPACKET layouts. Its `unsafe` is confined to these
//! two modules (the io_uring submissions of the raw loops, the AF_PACKET socket calls and ring
//! mappings), each block with its `// SAFETY:` comment; the API exported is safe.
#![warn(missing_docs)]

pub mod af_packet;
pub mod af_xdp;
pub mod baseline;

/// The last OS error as an `io::Error` (errno).
fn last_err() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// Converts a libc return value (`-1` means errno) into a result.
fn cvt(ret: libc::c_int) -> std::io::Result<libc::c_int> {
    if ret < 0 {
        Err(last_err())
    } else {
        Ok(ret)
    }
}

// The unit tests' harness (`[lib] harness = false`): see zcnet-testkit.
#[cfg(test)]
zcnet_testkit::main!();
