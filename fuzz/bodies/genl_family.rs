//! zcnet-netlink: genl_family.
//! Shared by fuzz/fuzz_targets/genl_family.rs and crates/zcnet-tools/tests/fuzz_smoke.rs: arbitrary bytes
//! must never make the parser panic.

use zcnet_netlink::genl::Family;

pub fn run(data: &[u8]) {
    if let Ok(f) = Family::parse(data) {
        let _ = f.has_op(1);
    }
}
