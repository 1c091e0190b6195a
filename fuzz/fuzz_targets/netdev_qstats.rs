#![no_main]

use libfuzzer_sys::fuzz_target;
use zcnet_netlink::netdev::QStats;

fuzz_target!(|data: &[u8]| {
    if let Ok(q) = QStats::parse(data) {
        let _ = q.get("rx-packets");
    }
});
