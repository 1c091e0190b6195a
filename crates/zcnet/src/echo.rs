//! RPC echo server and client (being written).
