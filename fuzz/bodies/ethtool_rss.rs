//! zcnet-netlink: ethtool_rss.
//! Shared by fuzz/fuzz_targets/ethtool_rss.rs and crates/zcnet-tools/tests/fuzz_smoke.rs: arbitrary bytes
//! must never make the parser panic.

use zcnet_netlink::ethtool::Rss;

pub fn run(data: &[u8]) {
    if let Ok(r) = Rss::parse(data) {
        let _ = r.hfunc_names();
    }
}
