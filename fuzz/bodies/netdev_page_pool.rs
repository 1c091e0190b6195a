//! zcnet-netlink: netdev_page_pool.
//! Shared by fuzz/fuzz_targets/netdev_page_pool.rs and crates/zcnet-tools/tests/fuzz_smoke.rs: arbitrary bytes
//! must never make the parser panic.

use zcnet_netlink::netdev::PagePoolInfo;

pub fn run(data: &[u8]) {
    let _ = PagePoolInfo::parse(data);
}
