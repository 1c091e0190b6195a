//! struct ethtool_rxnfc (rules, rule locations), ethtool_rxfh_indir, ethtool_drvinfo images.
//! Shared by fuzz/fuzz_targets/ntuple_rxnfc.rs and crates/zcnet-tools/tests/fuzz_smoke.rs: arbitrary bytes
//! must never make the parser panic.

use zcnet_netlink::ntuple::{decode_drvinfo, decode_indir, decode_rule, decode_rule_locs};

pub fn run(data: &[u8]) {
    let _ = decode_rule(data);
    let _ = decode_rule_locs(data, 1 << 16);
    let _ = decode_indir(data);
    let _ = decode_drvinfo(data);
}
