#![no_main]

use libfuzzer_sys::fuzz_target;
use zcnet_netlink::netdev::PagePoolInfo;

fuzz_target!(|data: &[u8]| {
    let _ = PagePoolInfo::parse(data);
});
