#![no_main]

use libfuzzer_sys::fuzz_target;
use zcnet_netlink::genl::Family;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = Family::parse(data) {
        let _ = f.has_op(1);
    }
});
