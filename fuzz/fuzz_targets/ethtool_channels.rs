#![no_main]

use libfuzzer_sys::fuzz_target;
use zcnet_netlink::ethtool::Channels;

fuzz_target!(|data: &[u8]| {
    let _ = Channels::parse(data);
});
