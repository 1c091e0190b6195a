//! zcnet-netlink: netdev_qstats.
//! Shared by fuzz/fuzz_targets/netdev_qstats.rs and crates/zcnet-tools/tests/fuzz_smoke.rs: arbitrary bytes
//! must never make the parser panic.

use zcnet_netlink::netdev::QStats;

pub fn run(data: &[u8]) {
    if let Ok(q) = QStats::parse(data) {
        let _ = q.get("rx-packets");
    }
}
