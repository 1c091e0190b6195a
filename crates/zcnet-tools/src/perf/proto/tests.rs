//! Tests of the protocol: each piece alone, iperf3-shaped fixtures, and whole conversations
//! between the two machines.

mod client;
mod conversation;
mod cookie;
mod fixtures;
mod frame;
mod harness;
mod params;
mod results;
mod server;
mod state;
mod stream;
mod udp;
