#![no_main]

use libfuzzer_sys::fuzz_target;
use zcnet_netlink::netdev::QueueInfo;

fuzz_target!(|data: &[u8]| {
    let _ = QueueInfo::parse(data);
});
