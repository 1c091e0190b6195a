//! # zcnet-core: the sans-IO half of zcnet
//!
//! Everything here is deterministic bookkeeping: no syscalls, no clocks (time is passed in as
//! nanoseconds), no `unsafe`. The kernel-facing code in `zcnet-sys` / `zcnet` feeds this crate
//! what the kernel said; tests feed it what a *simulated* kernel says — reordered, coalesced,
//! duplicated — and check that every buffer is released exactly once and every byte is
//! attributed to "zero-copy" or "copied" exactly once.
//!
//! ```text
//!  send call ──► ZcRanges::push (MSG_ZEROCOPY id)      SendZc SQE ──► SendZcTracker::on_submit
//!  errqueue  ──► ZcRanges::complete  ──► Completed     CQE       ──► SendZcTracker::on_cqe ──► CqeOutcome
//!                         │                                               │
//!                         └──────────────► TxStats ◄──────────────────────┘
//!                                             │ notifications (zero-copy / copied)
//!                                             ▼
//!                                        AutoPolicy ──► Mode (zero-copy or copy) + Switch log
//!
//!  RECV_ZC CQE32 ──► ZcrxRx::on_cqe ──► Frag (app holds) ──► release ──► RefillEntry ──► refill ring
//!  devmem cmsgs  ──► DevmemRx::on_cmsg ──► DeviceFrag (token) ──► release ──► SO_DEVMEM_DONTNEED batch
//!  recv host buf ──► StagingRx::on_recv ──► CopyCmd (H2D) ──► on_copy_done ──► delivered ──► release
//!  GPU source    ──► StagingTx::push_source ──► CopyCmd (D2H) ──► on_copy_done ──► SendCmd ──► on_send_done
//! ```
//!
//! [`probe`] holds the probe's verdict rules: facts in, a verdict, reason and remedy out.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod auto;
pub mod devmem;
pub mod dgram;
pub mod errqueue;
pub mod memlock;
pub mod nccl;
pub mod pattern;
pub mod probe;
pub mod rxring;
pub mod sendzc;
pub mod staging;
pub mod stats;
pub mod tcp_info;
pub mod tpacket;
pub mod udp_frame;
pub mod xdp_prog;
pub mod xsk;
pub mod zc_ranges;

pub use auto::{AutoPolicy, Mode, Switch};
pub use devmem::{DeviceFrag, DevmemRx};
pub use pattern::{Mismatch, Pattern};
pub use rxring::{Frag, RefillEntry, RxEvent, ZcrxRx};
pub use sendzc::{CqeOutcome, SendZcTracker, TrackerError};
pub use staging::{
    CopyCmd, CopyId, Pause, SendCmd, StagingConfig, StagingError, StagingRx, StagingTx,
};
pub use stats::TxStats;
pub use zc_ranges::{Completed, RangeOutcome, ZcRanges};
