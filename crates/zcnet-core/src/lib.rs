//! # zcnet-core: the sans-IO half of zcnet
//!
//! Everything here is deterministic bookkeeping: no syscalls, no clocks (time is passed in as
//! nanoseconds), no `unsafe`. The kernel-facing code in `zcnet-sys` / `zcnet` feeds this crate
//! what the kernel said; tests feed it what a *simulated* kernel says — reordered, coalesced,
//! duplicated — and check that every buffer is released exactly once and every byte is
//! attributed to "zero-copy" or "copied" exactly once.
//!
//! ```text
//!  send call ──► ZcRanges::push (MSG_ZEROCOPY id)      SQE ──► ReqState::submit (one per ring tag)
//!  errqueue  ──► ZcRanges::complete  ──► Completed     CQE ──► ReqState::on_cqe ──► Outcome ──► Counts
//!                         │                                                                       │
//!                         └──────────────► TxStats ◄──────────────────────────────────────────────┘
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
//! The public surface is the modules below, each exporting what the other crates use; what only
//! this crate uses is crate-private. The root re-exports the send side's types ([`ZcRanges`],
//! [`Completed`], [`ReqState`], [`Kind`], [`Step`], [`Outcome`], [`Counts`], [`TrackerError`], [`TxStats`], [`AutoPolicy`], [`Mode`],
//! [`Switch`]), [`DeviceFrag`], [`Pattern`] and [`Mismatch`].
//!
//! - sends: [`zc_ranges`] (MSG_ZEROCOPY completion ranges), [`errqueue`] (the error queue's
//!   control messages), [`sendzc`] (io_uring SEND / SEND_ZC / RECV requests and their counts), [`auto`] (the zero-copy
//!   or copy policy), [`stats`], [`memlock`] (what RLIMIT_MEMLOCK is charged and why it refuses).
//! - receives: [`rxring`] (io_uring zcrx), [`devmem`] (devmem TCP frag tokens), [`staging`]
//!   (socket to GPU memory through pinned host buffers, both ways), [`tcp_info`].
//! - AF_XDP and AF_PACKET: [`xsk`] (ring arithmetic, UMEM frame ownership), [`xdp_prog`] (the
//!   XDP program as instructions), [`udp_frame`] (Ethernet / IPv4 / UDP frames), [`tpacket`]
//!   (AF_PACKET mmap rings).
//! - payloads and protocols: [`pattern`] (the seeded byte pattern), [`dgram`] (UDP datagrams
//!   checked against it).
//! - [`probe`]: the probe's verdict rules: facts in, a verdict, reason and remedy out.
//! - [`text`](mod@text): messages as data: words and typed terms (settings, modes, memory kinds, calls)
//!   that each front end renders in its own language.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod auto;
pub mod devmem;
pub mod dgram;
pub mod driver;
pub mod errqueue;
pub mod memlock;
pub mod pattern;
pub mod probe;
pub mod rxring;
pub mod sendzc;
pub mod staging;
pub mod stats;
pub mod tcp_info;
pub mod text;
pub mod tpacket;
pub mod udp_frame;
pub mod xdp_prog;
pub mod xsk;
pub mod zc_ranges;

pub use auto::{AutoPolicy, Mode, Switch};
pub use devmem::DeviceFrag;
pub use driver::{Asked, Refusal, SendDriver, StallClock};
pub use pattern::{Mismatch, Pattern};
pub use sendzc::{Counts, Kind, Outcome, ReqState, Step, TrackerError};
pub use stats::TxStats;
pub use zc_ranges::{Completed, ZcRanges};
