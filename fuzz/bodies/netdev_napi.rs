//! zcnet-netlink: netdev_napi.
//! Shared by fuzz/fuzz_targets/netdev_napi.rs and crates/zcnet-tools/tests/fuzz_smoke.rs: arbitrary bytes
//! must never make the parser panic.

use zcnet_netlink::netdev::NapiInfo;

pub fn run(data: &[u8]) {
    let _ = NapiInfo::parse(data);
}
