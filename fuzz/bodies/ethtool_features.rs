//! Features replies (compact and verbose bitsets), the features-set reply, the string set.
//! Shared by fuzz/fuzz_targets/ethtool_features.rs and crates/zcnet-tools/tests/fuzz_smoke.rs: arbitrary bytes
//! must never make the parser panic.

use zcnet_netlink::ethtool::{parse_strset, Bitset, Features, FeaturesSetReply};

pub fn run(data: &[u8]) {
    let names = parse_strset(data, 4).unwrap_or_default();
    for n in [&names[..], &[]] {
        if let Ok(f) = Features::parse(data, n) {
            let _ = (f.list(), f.feature("rx-gro"), f.is_active("ntuple-filters"));
        }
    }
    if let Ok(r) = FeaturesSetReply::parse(data) {
        let _ = r.not_applied("rx-gro");
    }
    if let Ok(b) = Bitset::parse(data) {
        let _ = (b.set_bits(), b.in_mask(u32::MAX), b.name(0));
    }
}
