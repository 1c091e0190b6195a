#![no_main]

// The body is shared with the main workspace's fuzz smoke test
// (crates/zcnet-tools/tests/fuzz_smoke.rs): see fuzz/README.md.
#[path = "../bodies/nccl_recv.rs"]
mod body;
#[path = "../bodies/input.rs"]
mod input;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| body::run(data));
