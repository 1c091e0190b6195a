#![no_main]

// The body is shared with the main workspace's fuzz smoke test of zcnet-nccl
// (crates/zcnet-nccl/tests/fuzz_smoke_nccl.rs): see fuzz/README.md.
#[path = "../bodies/nccl_recv.rs"]
mod body;
#[path = "../bodies/input.rs"]
mod input;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| body::run(data));
