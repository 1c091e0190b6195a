#![no_main]

use libfuzzer_sys::fuzz_target;
use zcnet_netlink::ethtool::Rings;

fuzz_target!(|data: &[u8]| {
    let _ = Rings::parse(data);
});
