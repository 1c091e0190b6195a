//! zcnet-netlink: netdev_queue.
//! Shared by fuzz/fuzz_targets/netdev_queue.rs and crates/zcnet-tools/tests/fuzz_smoke.rs: arbitrary bytes
//! must never make the parser panic.

use zcnet_netlink::netdev::QueueInfo;

pub fn run(data: &[u8]) {
    let _ = QueueInfo::parse(data);
}
