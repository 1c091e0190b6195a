//! # zcnet: zero-copy networking for Linux, with honest accounting
//!
//! ```
//! use zcnet::{Region, Sender, Socket, TxConfig, TxMode};
//! # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
//! # let addr = listener.local_addr()?;
//! # let drain = std::thread::spawn(move || -> std::io::Result<u64> {
//! #     std::io::copy(&mut listener.accept()?.0, &mut std::io::sink())
//! # });
//! let stream = std::net::TcpStream::connect(addr)?; // a receiver on loopback
//! let cfg = TxConfig::new(TxMode::UringZc);
//! let region = Region::anonymous(zcnet::tx::region_len(&cfg))?;
//! let mut tx = Sender::new(Socket::from(stream), region, &cfg)?;
//! for _ in 0..1000 {
//!     let mut buf = tx.buffer()?;            // waits until the kernel released one
//!     let n = buf.write(b"hello")?;          // only the owner of a TxBuf can write it
//!     tx.send(buf, n)?;                      // the kernel owns it until its notification
//! }
//! let stats = tx.finish()?;
//! println!("{} B, {:?} zero-copy", stats.bytes, stats.zerocopy_fraction());
//! # assert_eq!(drain.join().expect("drain")?, 5000);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Layers: `zcnet-core` (sans-IO bookkeeping and decisions) ← `zcnet-sys` (the library's unsafe
//! code) ← this crate (regions, send and receive backends, probe, NIC setup) ← `zcnet-tools`
//! (bench, echo, perf; the namespace lab is `zcnet-lab`'s) ← `zcnet-cli` (the `zcnet` command).
//! Inside it, the modules shared by the others sit below them: `kinds` (the modes and memory
//! kinds), `text`, `remedy`, `error`; no two modules import each other in a circle (a test
//! reads the sources: zcnet-testkit's `layering`).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// The code blocks of README.md, compiled and run as doctests (`cargo test --doc -p zcnet`).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

mod addr;
pub mod cancel;
mod cuda;
pub mod engine;
pub mod error;
pub mod fallback;
pub mod gpu;
mod iface;
pub mod kinds;
pub mod net;
pub mod nexthop;
pub mod nic;
pub mod os;
pub mod probe;
pub mod region;
pub mod remedy;
pub mod rx;
pub mod tx;
pub mod xsk;

pub use cancel::Cancel;
pub use error::{Error, Result};
pub use region::{MemoryKind, Region, TxBuf};
pub use remedy::{Remedy, Voice};
pub use rx::{ConnId, Receiver, RxBuf, RxConfig, RxEvent, RxMode, RxStats};
pub use tx::{Sender, Socket, TxConfig, TxMode, TxStats};
/// Messages as data: words and typed terms each front end says its own way (zcnet-core's).
pub use zcnet_core::text;
pub use zcnet_core::Pattern;

/// Reads an integer sysctl (`/proc/sys/<path>`), if present.
pub(crate) fn sysctl_u64(path: &str) -> Option<u64> {
    sysctl_text(path)?.trim().parse().ok()
}

/// Field `n` (from 0) of a sysctl of several integers (`net/ipv4/tcp_rmem`: min, default, max).
pub(crate) fn sysctl_field(path: &str, n: usize) -> Option<u64> {
    sysctl_text(path)?.split_whitespace().nth(n)?.parse().ok()
}

fn sysctl_text(path: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/sys/{path}")).ok()
}

// The unit tests' harness (`[lib] harness = false`): see zcnet-testkit.
#[cfg(test)]
zcnet_testkit::main!();
