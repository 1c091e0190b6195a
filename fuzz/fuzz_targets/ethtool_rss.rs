#![no_main]

use libfuzzer_sys::fuzz_target;
use zcnet_netlink::ethtool::Rss;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = Rss::parse(data) {
        let _ = r.hfunc_names();
    }
});
