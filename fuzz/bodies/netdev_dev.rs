//! zcnet-netlink: netdev_dev.
//! Shared by fuzz/fuzz_targets/netdev_dev.rs and crates/zcnet-tools/tests/fuzz_smoke.rs: arbitrary bytes
//! must never make the parser panic.

use zcnet_netlink::netdev::DevInfo;

pub fn run(data: &[u8]) {
    if let Ok(d) = DevInfo::parse(data) {
        let _ = (d.names(), d.rx_metadata_names(), d.xsk_names());
    }
}
