//! # zcnet-netlink: the control plane
//!
//! Talks to the kernel about network devices, as zero-copy networking needs it:
//!
//! - [`netdev`]: the `netdev` generic netlink family (Linux 6.3+): XDP/AF_XDP features, queues,
//!   NAPI instances, queue statistics, page pools, and dma-buf bindings for devmem TCP
//!   ([`netdev::RxBinding`], [`netdev::TxBinding`], which live as long as their socket);
//! - [`ethtool`]: the `ethtool` generic netlink family: rings (including TCP data split and
//!   the header-split threshold), channels, features by name, RSS;
//! - [`ntuple`]: flow-steering rules, the RSS indirection table and driver info, over the
//!   `SIOCETHTOOL` ioctl (ntuple rules have no netlink interface);
//! - [`rtnl`]: rtnetlink's route lookup, neighbour table and link attributes (MTU, XDP
//!   attachment), for programs that address their own Ethernet frames (AF_XDP).
//!
//! Building and parsing are pure functions over bytes ([`wire`], and a `parse` function on
//! every reply type), tested against replies captured from Linux 6.18 and fuzzed. Every call
//! that reaches the kernel returns [`Error`], whose `Display` is one line naming the operation,
//! the device, the errno and the kernel's own message. Receives time out after 5 s.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod conn;
pub mod error;
pub mod ethtool;
pub mod genl;
pub mod netdev;
pub mod ntuple;
pub mod rtnl;
pub mod wire;

#[cfg(test)]
mod testutil;

pub use error::{Error, KernelError, Result};

// The unit tests' harness (`[lib] harness = false`): see zcnet-testkit.
#[cfg(test)]
zcnet_testkit::main!();
