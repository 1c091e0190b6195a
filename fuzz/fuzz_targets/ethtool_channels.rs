#![no_main]

// The body is shared with the main workspace's fuzz smoke test
// (crates/zcnet-tools/tests/fuzz_smoke.rs): see fuzz/README.md.
#[path = "../bodies/ethtool_channels.rs"]
mod body;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| body::run(data));
