#![no_main]

use libfuzzer_sys::fuzz_target;
use zcnet_netlink::netdev::DevInfo;

fuzz_target!(|data: &[u8]| {
    if let Ok(d) = DevInfo::parse(data) {
        let _ = (d.names(), d.rx_metadata_names(), d.xsk_names());
    }
});
