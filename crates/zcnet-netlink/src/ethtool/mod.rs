//! The `ethtool` generic netlink family (include/uapi/linux/ethtool_netlink_generated.h,
//! Documentation/networking/ethtool-netlink.rst): rings (TCP data split, header-split
//! threshold), channels, features by name, RSS.
//!
//! Message ids are the kernel's `ETHTOOL_MSG_*` request values (e.g. rings-get is 15; one
//! published crate sends 21, which the kernel reads as pause-get). Every set reports the
//! kernel's extended-ACK text on failure.

mod bitset;
mod features;
mod header;
mod rings;
mod rss;

pub use bitset::{fill_named_bits, Bitset, MAX_BITS};
pub use features::{
    canonical_name, parse_strset, Feature, Features, FeaturesSetReply, ALIASES, ETH_SS_FEATURES,
};
pub use header::{
    fill_header, parse_reply_header, Dev, ReplyHeader, FLAG_COMPACT_BITSETS, FLAG_OMIT_REPLY,
    FLAG_STATS,
};
pub use rings::{Channels, ChannelsSet, Rings, RingsSet, TcpDataSplit};
pub use rss::{Rss, HFUNC_NAMES};

use crate::conn::{GenlConn, Op};
use crate::error::{Error, Result};
use crate::genl::{resolve_on, Family};
use crate::wire::MsgBuilder;

// enum ethtool_msg_user_types (include/uapi/linux/ethtool_netlink_generated.h).
/// `ETHTOOL_MSG_STRSET_GET`.
pub const MSG_STRSET_GET: u8 = 1;
/// `ETHTOOL_MSG_FEATURES_GET`.
pub const MSG_FEATURES_GET: u8 = 11;
/// `ETHTOOL_MSG_FEATURES_SET`.
pub const MSG_FEATURES_SET: u8 = 12;
/// `ETHTOOL_MSG_RINGS_GET`.
pub const MSG_RINGS_GET: u8 = 15;
/// `ETHTOOL_MSG_RINGS_SET`.
pub const MSG_RINGS_SET: u8 = 16;
/// `ETHTOOL_MSG_CHANNELS_GET`.
pub const MSG_CHANNELS_GET: u8 = 17;
/// `ETHTOOL_MSG_CHANNELS_SET`.
pub const MSG_CHANNELS_SET: u8 = 18;
/// `ETHTOOL_MSG_RSS_GET`.
pub const MSG_RSS_GET: u8 = 38;

fn header_only(p: &[u16]) -> Option<&'static str> {
    header::header_attr_name(p)
}
fn strset_attr_name(p: &[u16]) -> Option<&'static str> {
    match p {
        [2, ..] => Some("stringsets"),
        _ => header::header_attr_name(p),
    }
}
fn features_attr_name(p: &[u16]) -> Option<&'static str> {
    match p {
        [3] => Some("wanted"),
        [3, 3, 1, 2] => Some("wanted.bits.bit.name"),
        [3, 3, 1, 1] => Some("wanted.bits.bit.index"),
        [3, ..] => Some("wanted.bits"),
        _ => header::header_attr_name(p),
    }
}

macro_rules! op {
    ($(#[$m:meta])* $id:ident, $name:literal, $cmd:expr, $needs:literal, $names:expr) => {
        $(#[$m])*
        pub const $id: Op = Op { name: $name, cmd: $cmd, needs: $needs, attr_name: $names };
    };
}
op!(/// strset-get.
    OP_STRSET_GET, "strset-get", MSG_STRSET_GET, "Linux 5.6 or newer", strset_attr_name);
op!(/// features-get.
    OP_FEATURES_GET, "features-get", MSG_FEATURES_GET, "Linux 5.6 or newer", header_only);
op!(/// features-set.
    OP_FEATURES_SET, "features-set", MSG_FEATURES_SET, "Linux 5.6 or newer", features_attr_name);
op!(/// rings-get.
    OP_RINGS_GET, "rings-get", MSG_RINGS_GET, "Linux 5.6 or newer", header_only);
op!(/// rings-set.
    OP_RINGS_SET, "rings-set", MSG_RINGS_SET, "Linux 5.6 or newer", rings::rings_attr_name);
op!(/// channels-get.
    OP_CHANNELS_GET, "channels-get", MSG_CHANNELS_GET, "Linux 5.6 or newer", header_only);
op!(/// channels-set.
    OP_CHANNELS_SET, "channels-set", MSG_CHANNELS_SET, "Linux 5.6 or newer",
    rings::channels_attr_name);
op!(/// rss-get (dump: Linux 6.11).
    OP_RSS_GET, "rss-get", MSG_RSS_GET, "Linux 6.2 or newer", rss::rss_attr_name);

/// A client of the ethtool family.
#[derive(Debug)]
pub struct Ethtool {
    conn: GenlConn,
    family: Family,
    feature_names: Option<Vec<String>>,
}

impl Ethtool {
    /// Opens a socket and resolves the family (Linux 5.6+).
    pub fn open() -> Result<Ethtool> {
        let mut conn = GenlConn::open()?;
        let family = resolve_on(&mut conn, "ethtool", "Linux 5.6 or newer")?;
        Ok(Ethtool {
            conn,
            family,
            feature_names: None,
        })
    }

    /// What the controller said about the family.
    pub fn family(&self) -> &Family {
        &self.family
    }

    fn request(
        &mut self,
        op: Op,
        target: &str,
        dump: bool,
        build: &dyn Fn(&mut MsgBuilder),
    ) -> Result<Vec<Vec<u8>>> {
        self.conn.request(&self.family, op, target, dump, build)
    }

    fn get<T>(
        &mut self,
        op: Op,
        dev: Dev<'_>,
        build: &dyn Fn(&mut MsgBuilder),
        parse: &dyn Fn(&[u8]) -> Result<T>,
    ) -> Result<T> {
        dev.check()?;
        let r = self.request(op, &dev.to_string(), false, build)?;
        let first = r.first().ok_or_else(|| Error::Malformed {
            context: op.name.into(),
            what: "no reply before the ACK".into(),
        })?;
        parse(first).map_err(|e| e.in_context(op.name))
    }

    fn set(
        &mut self,
        op: Op,
        dev: Dev<'_>,
        build: &dyn Fn(&mut MsgBuilder),
    ) -> Result<Vec<Vec<u8>>> {
        dev.check()?;
        self.request(op, &dev.to_string(), false, build)
    }

    /// rings-get. Devices without ring parameters (veth, lo) answer `EOPNOTSUPP`.
    pub fn rings_get(&mut self, dev: Dev<'_>) -> Result<Rings> {
        self.get(
            OP_RINGS_GET,
            dev,
            &|b| fill_header(b, dev, 0),
            &Rings::parse,
        )
    }

    /// rings-set: changes the fields that are `Some`. The kernel's reason for a refusal
    /// (e.g. "setting TCP data split is not supported") is in the error.
    pub fn rings_set(&mut self, dev: Dev<'_>, set: &RingsSet) -> Result<()> {
        if set.is_empty() {
            return Err(rings::nothing_to_set("rings-set"));
        }
        self.set(OP_RINGS_SET, dev, &|b| fill_rings_set(b, dev, set))
            .map(drop)
    }

    /// channels-get.
    pub fn channels_get(&mut self, dev: Dev<'_>) -> Result<Channels> {
        self.get(
            OP_CHANNELS_GET,
            dev,
            &|b| fill_header(b, dev, 0),
            &Channels::parse,
        )
    }

    /// channels-set: changes the counts that are `Some`.
    pub fn channels_set(&mut self, dev: Dev<'_>, set: &ChannelsSet) -> Result<()> {
        if set.is_empty() {
            return Err(rings::nothing_to_set("channels-set"));
        }
        self.set(OP_CHANNELS_SET, dev, &|b| {
            fill_header(b, dev, 0);
            set.fill(b);
        })
        .map(drop)
    }

    /// The feature names (`ETH_SS_FEATURES`), fetched once and cached (they are the same for
    /// every device of a kernel).
    pub fn feature_names(&mut self, dev: Dev<'_>) -> Result<Vec<String>> {
        if let Some(n) = &self.feature_names {
            return Ok(n.clone());
        }
        let names = self.get(
            OP_STRSET_GET,
            dev,
            &|b| fill_strset(b, dev, ETH_SS_FEATURES),
            &|a| parse_strset(a, ETH_SS_FEATURES),
        )?;
        self.feature_names = Some(names.clone());
        Ok(names)
    }

    /// features-get, with every feature named.
    pub fn features_get(&mut self, dev: Dev<'_>) -> Result<Features> {
        let names = self.feature_names(dev)?;
        self.get(
            OP_FEATURES_GET,
            dev,
            &|b| fill_header(b, dev, FLAG_COMPACT_BITSETS),
            &|a| Features::parse(a, &names),
        )
    }

    /// features-set for one feature by name (the kernel's name, or one of [`ALIASES`]).
    /// An unknown name fails with the kernel's "bit name not found"; a change the kernel
    /// accepts but cannot make (a fixed feature) fails with [`Error::NotApplied`].
    pub fn feature_set(&mut self, dev: Dev<'_>, name: &str, on: bool) -> Result<()> {
        let kname = canonical_name(name);
        let replies = self.set(OP_FEATURES_SET, dev, &|b| {
            fill_feature_set(b, dev, kname, on)
        })?;
        for r in &replies {
            let reply = FeaturesSetReply::parse(r).map_err(|e| e.in_context("features-set"))?;
            if reply.not_applied(kname) {
                return Err(Error::NotApplied {
                    op: "features-set",
                    target: dev.to_string(),
                    what: format!(
                        "{kname} stays {} (the device cannot change it)",
                        if on { "off" } else { "on" }
                    ),
                });
            }
        }
        Ok(())
    }

    /// rss-get for one context (0: the default one). Devices without RSS answer `EOPNOTSUPP`.
    pub fn rss_get(&mut self, dev: Dev<'_>, context: u32) -> Result<Rss> {
        self.get(
            OP_RSS_GET,
            dev,
            &|b| fill_rss_get(b, dev, context),
            &Rss::parse,
        )
    }

    /// rss-get dump: every context of `dev`, or of every device when `None` (Linux 6.11).
    pub fn rss_dump(&mut self, dev: Option<Dev<'_>>) -> Result<Vec<Rss>> {
        if let Some(d) = dev {
            d.check()?;
        }
        if !self.family.op(MSG_RSS_GET).is_some_and(|o| o.can_dump()) {
            return Err(Error::OpMissing {
                family: self.family.name.clone(),
                op: "rss-get dump",
                needs: "Linux 6.11 or newer",
            });
        }
        let target = dev.map(|d| d.to_string()).unwrap_or_default();
        self.request(OP_RSS_GET, &target, true, &|b| {
            if let Some(d) = dev {
                fill_header(b, d, 0);
            }
        })?
        .iter()
        .map(|a| Rss::parse(a).map_err(|e| e.in_context("rss-get")))
        .collect()
    }
}

/// rings-set request attributes: header, then the fields to change.
pub fn fill_rings_set(b: &mut MsgBuilder, dev: Dev<'_>, set: &RingsSet) {
    fill_header(b, dev, 0);
    set.fill(b);
}

/// strset-get request attributes for string set `id`.
pub fn fill_strset(b: &mut MsgBuilder, dev: Dev<'_>, id: u32) {
    fill_header(b, dev, 0);
    b.nest_begin(features::STRSET_STRINGSETS)
        .nest_begin(features::STRINGSETS_STRINGSET)
        .put_u32(features::STRINGSET_ID, id)
        .nest_end()
        .nest_end();
}

/// features-set request attributes: `wanted` with one named bit.
pub fn fill_feature_set(b: &mut MsgBuilder, dev: Dev<'_>, name: &str, on: bool) {
    fill_header(b, dev, 0);
    fill_named_bits(b, features::WANTED, &[(name, on)]);
}

/// rss-get request attributes (the context attribute only for non-default contexts).
pub fn fill_rss_get(b: &mut MsgBuilder, dev: Dev<'_>, context: u32) {
    fill_header(b, dev, 0);
    if context != 0 {
        b.put_u32(rss::CONTEXT, context);
    }
}

#[cfg(test)]
mod tests;
