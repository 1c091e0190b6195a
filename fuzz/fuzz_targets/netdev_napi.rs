#![no_main]

use libfuzzer_sys::fuzz_target;
use zcnet_netlink::netdev::NapiInfo;

fuzz_target!(|data: &[u8]| {
    let _ = NapiInfo::parse(data);
});
