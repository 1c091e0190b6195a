//! # zcnet-tools: applications built on zcnet
//!
//! The measurement tools are applications of the library, not the library: they live here,
//! above `zcnet`, so that a program embedding zcnet does not carry them.
//!
//! They hold no command line's wording: they return typed errors and reports (the library's
//! [`zcnet::Error`]s and [`zcnet::text::Text`]s, and [`reason::Reason`]s that carry both), and
//! a front end says them in its own words (zcnet-cli's `Cli` voice, for the `zcnet` command and
//! the `zcnet-perf` binary).
//!
//! Today this crate holds [`perf`]: [`perf::proto`], iperf3's control and data protocol as
//! sans-IO state machines (no sockets, no syscalls, no clock: time is passed in), and around
//! it the client and server of `zcnet perf` ([`perf::run()`], which the front ends call with
//! their voice), which drive those machines with real sockets and zcnet's senders and
//! receivers, so that they run against an unmodified `iperf3 -s`, and an unmodified `iperf3
//! -c` against them.
//!
//! ```text
//!  zcnet perf (CLI) ─► sockets, timers, zcnet Sender/Receiver   (the caller: all I/O)
//!                          │ bytes in, time, events      ▲ actions: bytes out, start, stop…
//!                          ▼                             │
//!                  perf::proto::{ClientControl, ServerControl}
//!                  perf::proto::{TestParams, TestResults, Cookie, State, FrameDecoder}
//!                  perf::proto::udp::{UdpHeader, UdpRecvStats}
//! ```
//!
//! The first steps of a test, the client machine's writes handed to the server machine and
//! back (the crate's tests play whole conversations this way, faults included):
//!
//! ```
//! use std::time::Duration;
//! use zcnet_tools::perf::proto::*;
//!
//! let now = Duration::ZERO;
//! let cookie = Cookie::from_random(&[42; 36]); // the caller draws the random bytes
//! let params = TestParams { time: 5, parallel: 2, ..TestParams::default() };
//! let mut client = ClientControl::new(ClientConfig::default(), cookie, params).unwrap();
//! let mut server = ServerControl::new(ServerConfig::default(), now);
//!
//! let sent = |actions: Vec<ClientAction>| -> Vec<u8> {
//!     actions.into_iter().flat_map(|a| match a { ClientAction::Send(b) => b, _ => vec![] }).collect()
//! };
//! // cookie → PARAM_EXCHANGE
//! let answer = server.on_bytes(now, &sent(client.connected(now)));
//! let ServerAction::Send(param_exchange) = &answer[0] else { panic!() };
//! // PARAM_EXCHANGE → parameter block → the server has the parameters
//! let block = sent(client.on_bytes(now, param_exchange));
//! let answer = server.on_bytes(now, &block);
//! let ServerAction::Params(got) = &answer[0] else { panic!() };
//! assert_eq!((got.time, got.parallel), (5, 2));
//! // the caller opens the data listener → CREATE_STREAMS → the client connects two streams
//! let ServerAction::Send(create) = &server.listening(now)[0] else { panic!() };
//! let actions = client.on_bytes(now, create);
//! assert_eq!(actions, vec![ClientAction::CreateStreams(stream_plan(client.params()))]);
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]
// A closed stdout or stderr must not panic a command: print with `outln!` and co. (`say`).
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod bench;
pub mod cpu;
pub mod dgram;
pub mod echo;
pub mod gpu_rxbench;
pub mod interrupt;
pub mod lab;
pub mod perf;
pub mod reason;
pub mod rxbench;
pub mod say;
pub mod sendloop;
pub mod xskbench;

// The unit tests' harness (`[lib] harness = false`): see zcnet-testkit.
#[cfg(test)]
zcnet_testkit::main!();
