//! RSS configuration (`ETHTOOL_MSG_RSS_GET`, `ETHTOOL_A_RSS_*`): hash function, key,
//! indirection table, per context.

use super::header::{parse_reply_header, ReplyHeader, HEADER};
use crate::error::Result;
use crate::wire::Attrs;

// ETHTOOL_A_RSS_* (include/uapi/linux/ethtool_netlink_generated.h).
pub(crate) const CONTEXT: u16 = 2;
const HFUNC: u16 = 3;
const INDIR: u16 = 4;
const HKEY: u16 = 5;
const INPUT_XFRM: u16 = 6;
pub(crate) const START_CONTEXT: u16 = 7;
const FLOW_HASH: u16 = 8;

/// Hash function bits of `hfunc` and their names (`ETH_RSS_HASH_*_BIT`, include/linux/ethtool.h;
/// strings of `ETH_SS_RSS_HASH_FUNCS`, net/ethtool/common.c).
pub const HFUNC_NAMES: [(u32, &str); 3] = [(1, "toeplitz"), (2, "xor"), (4, "crc32")];

/// Names of RSS attributes, for error messages.
pub(crate) fn rss_attr_name(p: &[u16]) -> Option<&'static str> {
    match p {
        [1, ..] => super::header::header_attr_name(p),
        [CONTEXT] => Some("context"),
        [START_CONTEXT] => Some("start-context"),
        _ => None,
    }
}

/// One RSS context as rss-get describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rss {
    /// The device.
    pub header: ReplyHeader,
    /// Context number (0: the default context).
    pub context: u32,
    /// Hash function bits (see [`HFUNC_NAMES`]).
    pub hfunc: Option<u32>,
    /// Indirection table: RX queue for each hash bucket.
    pub indir: Vec<u32>,
    /// Hash key.
    pub hkey: Vec<u8>,
    /// Input transformation bits (`RXH_XFRM_*`).
    pub input_xfrm: Option<u32>,
    /// Per flow type hashed fields (Linux 6.17): `(ETHTOOL_A_FLOW_* type, RXH_* bits)`.
    pub flow_hash: Vec<(u16, u64)>,
}

impl Rss {
    /// Parses an rss-get reply.
    pub fn parse(attrs: &[u8]) -> Result<Rss> {
        let mut r = Rss::default();
        for a in Attrs::new(attrs) {
            let a = a?;
            match a.kind() {
                HEADER => r.header = parse_reply_header(a.payload())?,
                CONTEXT => r.context = a.u32()?,
                HFUNC => r.hfunc = Some(a.u32()?),
                INDIR => r.indir = a.u32_array()?,
                HKEY => r.hkey = a.payload().to_vec(),
                INPUT_XFRM => r.input_xfrm = Some(a.u32()?),
                FLOW_HASH => {
                    for f in a.nested() {
                        let f = f?;
                        r.flow_hash.push((f.kind(), f.uint()?));
                    }
                }
                _ => {}
            }
        }
        Ok(r)
    }

    /// Names of the hash functions set in `hfunc`.
    pub fn hfunc_names(&self) -> Vec<&'static str> {
        let h = self.hfunc.unwrap_or(0);
        HFUNC_NAMES
            .iter()
            .filter(|(b, _)| h & b != 0)
            .map(|(_, n)| *n)
            .collect()
    }
}
