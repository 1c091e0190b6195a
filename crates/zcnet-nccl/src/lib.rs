//! # zcnet-nccl: an NCCL net plugin on zcnet
//!
//! Built as `libnccl_net_zcnet.so`; NCCL loads it as `libnccl-net-zcnet.so` with
//! `NCCL_NET_PLUGIN=zcnet` (scripts/nccl-plugin.sh copies it under that name) or by absolute
//! path. It exports `ncclNetPlugin_v12` down to `ncclNetPlugin_v8` (the structs are written here
//! from NCCL's plugin ABI: [`abi`]).
//!
//! ```text
//!  NCCL proxy thread ──► exports (extern "C": check pointers, catch panics)
//!                          │
//!                          ▼
//!                        api (handles are keys into one table, never dereferenced)
//!                          │
//!            ┌─────────────┼──────────────────┐
//!            ▼             ▼                  ▼
//!          conn          data               devices / knobs (ZCNET_NCCL_*)
//!   listen/connect/   SendComm/RecvComm ──► proto (chunking, in-order matching; sans-IO)
//!   accept, no block  N TCP sockets per connection; each chunk to whichever socket is free
//! ```
//!
//! [`proto`] is the wire protocol and the send / receive state machines, sans-IO (no syscalls):
//! [`data`] drives them over the sockets, the unit tests and the `nccl_recv` fuzz target over
//! simulated ones.
//!
//! Progress happens inside `isend`, `irecv` and `test`: no thread of the plugin runs (or spins)
//! while NCCL is idle. Knobs: `ZCNET_NCCL_IFACE` (else `NCCL_SOCKET_IFNAME`), `ZCNET_NCCL_NSOCKS`
//! (sockets per connection, default 2), `ZCNET_NCCL_CHUNK` (default 512K),
//! `ZCNET_NCCL_CONNECT_TIMEOUT_MS` (connect and greeting, default 30000), `ZCNET_NCCL_DEBUG`
//! (log to stderr when NCCL gave no logger), `ZCNET_NCCL_STATS` (a file for the byte counters:
//! [`stats`]).

pub mod abi;
pub mod api;
mod conn;
pub use conn::MAX_GREETING;
pub mod data;
pub mod devices;
pub mod error;
mod exports;
pub mod handle;
mod log;
pub mod proto;
pub mod stats;

// The unit tests' harness (`[lib] harness = false`): see zcnet-testkit.
#[cfg(test)]
zcnet_testkit::main!();
