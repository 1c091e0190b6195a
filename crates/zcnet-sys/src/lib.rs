//! # zcnet-sys: the unsafe code of the zcnet library
//!
//! Every `unsafe` line under the library is here: zcnet, zcnet-core, zcnet-netlink and
//! zcnet-tools forbid unsafe code. The two crates that face C, zcnet-ffi (the C ABI) and
//! zcnet-nccl (the NCCL plugin), hold their own `unsafe` at that boundary: their `extern "C"`
//! entry points and the raw pointers they are handed.
//!
//! The public surface is the modules below, each exporting what the other crates use; the rest
//! (uapi layouts, raw ring mappings such as the AF_XDP rings, helpers) is crate-private.
//!
//! - io_uring: [`uring`] (the one ring owner: it holds a request's memory, an owned slot or a
//!   foreign lease, for exactly as long as the kernel may touch it), [`bufring`] (multishot
//!   receive into provided buffers), [`zcrx`] (zero-copy receive), [`uring_probe`] and
//!   [`uring_query`] (what the kernel's io_uring offers).
//! - sockets: [`sock`] (options, plain and `MSG_ZEROCOPY` sends, the error queue), [`epoll`],
//!   [`xsk`] and [`xsk_socket`] (AF_XDP), [`bpf`] (the XSKMAP and XDP program),
//!   [`devmem`] and [`devmem_tx`] (devmem TCP), `tokio_fd` (with the feature `tokio`).
//! - memory: [`mem`] (mappings and their disjoint slots), [`foreign`] (memory lent by foreign
//!   code), [`cuda`] (the CUDA driver API, opened at run time).
//! - netlink and devices: [`netlink`] (a raw netlink socket), [`ethtool`] (the `SIOCETHTOOL`
//!   ioctl), [`ifaddr`] (an interface's MAC address).
//! - process: [`os`] (thread CPU time, RLIMIT_MEMLOCK, privileges, network namespaces, the
//!   interrupt flag).
//!
//! Each `unsafe` block carries a `// SAFETY:` comment; the API exported is safe.
//!
//! No benchmark code lives here: the raw loops and AF_PACKET engines zcnet's benchmarks compare
//! the library against are zcnet-rawbench's, with their own `unsafe`.
#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod bpf;
pub mod bufring;
pub mod cuda;
pub mod devmem;
pub mod devmem_tx;
pub mod epoll;
pub mod ethtool;
pub mod foreign;
pub mod ifaddr;
pub mod mem;
pub mod netlink;
pub mod os;
mod ring;
pub mod sock;
#[cfg(test)]
mod test_util;
#[cfg(feature = "tokio")]
pub mod tokio_fd;
pub mod uring;
pub mod uring_probe;
pub mod uring_query;
pub mod xsk;
mod xsk_ring;
pub mod xsk_socket;
pub mod zcrx;

/// The last OS error as an `io::Error` (errno).
pub(crate) fn last_err() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// Converts a libc return value (`-1` means errno) into a result.
pub(crate) fn cvt(ret: libc::c_int) -> std::io::Result<libc::c_int> {
    if ret < 0 {
        Err(last_err())
    } else {
        Ok(ret)
    }
}

// The unit tests' harness (`[lib] harness = false`): see zcnet-testkit.
#[cfg(test)]
zcnet_testkit::main!();
