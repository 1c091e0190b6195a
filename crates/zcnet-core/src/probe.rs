//! The probe's judgement: from what was read off the machine (and, with an active probe, what
//! the kernel answered when each mechanism was tried), a verdict per mechanism with the reason
//! and the remedy as a [`Text`]: an OS command (`sysctl`, `ethtool -K`) as it is, zcnet's own
//! NIC changes as typed calls ([`Call::SetChannels`], [`Call::NicSetup`]) and its settings as
//! fields, which each front end says in its own words (the `zcnet` command as its commands).
//!
//! Pure: the facts are gathered by the facade (`zcnet::probe`) through netlink, ioctls and
//! trial registrations; here they are only weighed, so every rule is tested with made-up
//! machines (a veth, an mlx5 with header split off, an old kernel, ...).
//!
//! Sources for the rules: Documentation/networking/iou-zcrx.rst and devmem.rst (header split
//! on, hds-thresh 0, a queue with queue-management ops, flow steering), msg_zerocopy.rst
//! (loopback and local delivery copy: `skb_orphan_frags_rx`), af_xdp.rst (XDP_COPY works on
//! every device through generic XDP; XDP_ZEROCOPY needs driver support, advertised as
//! NETDEV_XDP_ACT_XSK_ZEROCOPY in the netdev family's xdp-features).
//!
//! [`Text`]: crate::text::Text
//! [`Call::SetChannels`]: crate::text::Call::SetChannels
//! [`Call::NicSetup`]: crate::text::Call::NicSetup

mod af_xdp;
mod devmem;
mod facts;
pub mod gpu;
mod remedy;
mod rx;
mod send;
mod trial;
mod verdict;
pub mod xsk;

pub use facts::{
    HeaderSplit, IfaceFacts, IfaceKind, KernelFacts, Refusal, RxChannels, Trials, UringFacts,
    XDP_ACT_XSK_ZEROCOPY,
};
pub use remedy::{add_rx_queues, rx_queue_plan, setup_command};
pub use rx::rx_device_rules;
pub use verdict::{Finding, Mechanism, Verdict};

use af_xdp::{xsk_copy, xsk_zerocopy};
use devmem::{devmem_rx, devmem_tx};
use rx::zcrx;
use send::send_path;

/// Linux errno values the rules look at (asm-generic/errno-base.h, errno.h; the same on x86,
/// arm64, riscv).
pub mod errno {
    /// Operation not permitted.
    pub const EPERM: i32 = 1;
    /// Bad file descriptor.
    pub const EBADF: i32 = 9;
    /// Out of memory (also: RLIMIT_MEMLOCK exceeded when pinning).
    pub const ENOMEM: i32 = 12;
    /// Device or resource busy.
    pub const EBUSY: i32 = 16;
    /// File exists (a queue that already has a memory provider or socket bound).
    pub const EEXIST: i32 = 17;
    /// No such device.
    pub const ENODEV: i32 = 19;
    /// Invalid argument.
    pub const EINVAL: i32 = 22;
    /// Operation not supported.
    pub const EOPNOTSUPP: i32 = 95;
    /// Address family not supported by protocol (no AF_XDP in the kernel).
    pub const EAFNOSUPPORT: i32 = 97;
    /// No buffer space available.
    pub const ENOBUFS: i32 = 105;
}

/// Judges every mechanism on one interface.
pub fn judge(k: &KernelFacts, i: &IfaceFacts, t: &Trials) -> Vec<(Mechanism, Finding)> {
    Mechanism::ALL
        .iter()
        .map(|&m| (m, judge_one(m, k, i, t)))
        .collect()
}

/// Judges one mechanism on one interface.
pub fn judge_one(m: Mechanism, k: &KernelFacts, i: &IfaceFacts, t: &Trials) -> Finding {
    match m {
        Mechanism::Copy => Finding::new(
            Verdict::Copies,
            "send()/recv() copy every byte between user memory and the kernel",
        ),
        Mechanism::MsgZerocopy => send_path(m, k, i, t.msg_zerocopy_loopback.as_ref()),
        Mechanism::UringZc => send_path(m, k, i, t.send_zc_loopback.as_ref()),
        Mechanism::Zcrx => zcrx(k, i, t.zcrx.as_ref()),
        Mechanism::DevmemRx => devmem_rx(k, i, t.devmem_rx.as_ref()),
        Mechanism::DevmemTx => devmem_tx(k, i, t.devmem_tx.as_ref()),
        Mechanism::AfXdpCopy => xsk_copy(k, i, t.xsk_copy.as_ref()),
        Mechanism::AfXdpZerocopy => xsk_zerocopy(k, i, t.xsk_zerocopy.as_ref()),
    }
}

#[cfg(test)]
mod tests;
