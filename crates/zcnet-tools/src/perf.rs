//! `zcnet perf`: an iperf3 that speaks iperf3's protocol.
//!
//! So far this holds [`proto`], the protocol itself; the data paths that move the bytes with
//! zcnet's senders and receivers come on top of it.

pub mod proto;
