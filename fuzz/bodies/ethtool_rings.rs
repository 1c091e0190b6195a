//! zcnet-netlink: ethtool_rings.
//! Shared by fuzz/fuzz_targets/ethtool_rings.rs and crates/zcnet-tools/tests/fuzz_smoke.rs: arbitrary bytes
//! must never make the parser panic.

use zcnet_netlink::ethtool::Rings;

pub fn run(data: &[u8]) {
    let _ = Rings::parse(data);
}
