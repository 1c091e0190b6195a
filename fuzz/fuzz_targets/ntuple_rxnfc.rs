#![no_main]

use libfuzzer_sys::fuzz_target;
use zcnet_netlink::ntuple::{decode_drvinfo, decode_indir, decode_rule, decode_rule_locs};

// struct ethtool_rxnfc (rules, rule locations), ethtool_rxfh_indir, ethtool_drvinfo images.
fuzz_target!(|data: &[u8]| {
    let _ = decode_rule(data);
    let _ = decode_rule_locs(data, 1 << 16);
    let _ = decode_indir(data);
    let _ = decode_drvinfo(data);
});
