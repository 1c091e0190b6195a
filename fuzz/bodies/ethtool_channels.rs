//! zcnet-netlink: ethtool_channels.
//! Shared by fuzz/fuzz_targets/ethtool_channels.rs and crates/zcnet-tools/tests/fuzz_smoke.rs: arbitrary bytes
//! must never make the parser panic.

use zcnet_netlink::ethtool::Channels;

pub fn run(data: &[u8]) {
    let _ = Channels::parse(data);
}
