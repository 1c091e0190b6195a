//! Device features (`ETHTOOL_MSG_FEATURES_GET`/`_SET`) and the string set that names them
//! (`ETHTOOL_MSG_STRSET_GET` with `ETH_SS_FEATURES`).
//!
//! The kernel's feature names are those of `netdev_features_strings` (net/ethtool/common.c),
//! e.g. `rx-gro-hw`, `rx-ntuple-filter`. The ethtool tool shows a few features under older
//! names (`ntuple-filters`, `receive-hashing`, ...); [`canonical_name`] maps those.

use super::bitset::Bitset;
use super::header::{parse_reply_header, ReplyHeader, HEADER};
use crate::error::Result;
use crate::wire::{malformed, Attrs};

// ETHTOOL_A_FEATURES_*.
pub(crate) const HW: u16 = 2;
pub(crate) const WANTED: u16 = 3;
pub(crate) const ACTIVE: u16 = 4;
pub(crate) const NOCHANGE: u16 = 5;

// ETHTOOL_A_STRSET_*, ETHTOOL_A_STRINGSETS_*, ETHTOOL_A_STRINGSET_*, ETHTOOL_A_STRINGS_*,
// ETHTOOL_A_STRING_*.
pub(crate) const STRSET_STRINGSETS: u16 = 2;
pub(crate) const STRINGSETS_STRINGSET: u16 = 1;
pub(crate) const STRINGSET_ID: u16 = 1;
const STRINGSET_COUNT: u16 = 2;
const STRINGSET_STRINGS: u16 = 3;
const STRINGS_STRING: u16 = 1;
const STRING_INDEX: u16 = 1;
const STRING_VALUE: u16 = 2;
/// `ETH_SS_FEATURES` (enum ethtool_stringset, include/uapi/linux/ethtool.h).
pub const ETH_SS_FEATURES: u32 = 4;
/// Strings sets larger than this are refused as malformed.
const MAX_STRINGS: u32 = 1 << 16;

/// The ethtool tool's legacy feature names and the kernel name each stands for.
pub const ALIASES: [(&str, &str); 9] = [
    ("ntuple-filters", "rx-ntuple-filter"),
    ("ntuple", "rx-ntuple-filter"),
    ("receive-hashing", "rx-hashing"),
    ("rxhash", "rx-hashing"),
    ("generic-receive-offload", "rx-gro"),
    ("gro", "rx-gro"),
    ("large-receive-offload", "rx-lro"),
    ("lro", "rx-lro"),
    ("generic-segmentation-offload", "tx-generic-segmentation"),
];

/// The kernel's name for `name` (itself, unless it is one of [`ALIASES`]).
pub fn canonical_name(name: &str) -> &str {
    ALIASES
        .iter()
        .find(|(a, _)| *a == name)
        .map(|(_, k)| *k)
        .unwrap_or(name)
}

/// Parses a strset-get reply and returns the strings of set `id`, indexed by position
/// (missing indices are empty strings).
pub fn parse_strset(attrs: &[u8], id: u32) -> Result<Vec<String>> {
    for a in Attrs::new(attrs) {
        let a = a?;
        if a.kind() != STRSET_STRINGSETS {
            continue;
        }
        for set in a.nested() {
            let set = set?;
            if set.kind() != STRINGSETS_STRINGSET {
                continue;
            }
            let (mut this_id, mut count, mut strings) = (None, 0u32, Vec::new());
            for x in set.nested() {
                let x = x?;
                match x.kind() {
                    STRINGSET_ID => this_id = Some(x.u32()?),
                    STRINGSET_COUNT => count = x.u32()?,
                    STRINGSET_STRINGS => {
                        for s in x.nested() {
                            let s = s?;
                            if s.kind() != STRINGS_STRING {
                                continue;
                            }
                            let (mut idx, mut val) = (None, String::new());
                            for y in s.nested() {
                                let y = y?;
                                match y.kind() {
                                    STRING_INDEX => idx = Some(y.u32()?),
                                    STRING_VALUE => val = y.str(),
                                    _ => {}
                                }
                            }
                            let idx = idx.ok_or_else(|| malformed("string without index"))?;
                            strings.push((idx, val));
                        }
                    }
                    _ => {}
                }
            }
            if this_id != Some(id) {
                continue;
            }
            let top = strings
                .iter()
                .map(|(i, _)| i.saturating_add(1))
                .max()
                .unwrap_or(0);
            let n = count.max(top);
            if n > MAX_STRINGS {
                return Err(malformed(format!("string set of {n} strings")));
            }
            let mut out = vec![String::new(); n as usize];
            for (i, v) in strings {
                out[i as usize] = v;
            }
            return Ok(out);
        }
    }
    Err(malformed(format!("strset reply without string set {id}")))
}

/// One feature, looked up by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feature {
    /// The kernel's name.
    pub name: String,
    /// Bit index.
    pub index: u32,
    /// In `hw`: the user may change it.
    pub changeable: bool,
    /// In `wanted`: requested by the user.
    pub wanted: bool,
    /// In `active`: on.
    pub active: bool,
    /// In `nochange`: can never change.
    pub fixed: bool,
}

/// A features-get reply: the four bitsets, plus bit names (from the `ETH_SS_FEATURES`
/// string set or from verbose bitsets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Features {
    /// The device.
    pub header: ReplyHeader,
    /// `hw`: features the user may toggle (value) out of all (mask).
    pub hw: Bitset,
    /// `wanted`: features the user requested.
    pub wanted: Bitset,
    /// `active`: features on now.
    pub active: Bitset,
    /// `nochange`: features that can never change.
    pub nochange: Bitset,
    /// Bit names by index.
    pub names: Vec<String>,
}

impl Features {
    /// Parses a features-get reply; `names` is the `ETH_SS_FEATURES` string set, or empty to
    /// take the names from verbose bitsets.
    pub fn parse(attrs: &[u8], names: &[String]) -> Result<Features> {
        let mut header = ReplyHeader::default();
        let mut sets: [Option<Bitset>; 4] = [None, None, None, None];
        for a in Attrs::new(attrs) {
            let a = a?;
            match a.kind() {
                HEADER => header = parse_reply_header(a.payload())?,
                k @ HW..=NOCHANGE => sets[usize::from(k - HW)] = Some(Bitset::parse(a.payload())?),
                _ => {}
            }
        }
        let [hw, wanted, active, nochange] = sets;
        let missing = || malformed("features reply without all of hw, wanted, active, nochange");
        let (hw, wanted, active, nochange) = (
            hw.ok_or_else(missing)?,
            wanted.ok_or_else(missing)?,
            active.ok_or_else(missing)?,
            nochange.ok_or_else(missing)?,
        );
        let mut all = names.to_vec();
        if all.is_empty() {
            all = vec![String::new(); hw.size as usize];
            for set in [&hw, &wanted, &active, &nochange] {
                for (i, n) in &set.names {
                    if let Some(slot) = all.get_mut(*i as usize) {
                        *slot = n.clone();
                    }
                }
            }
        }
        Ok(Features {
            header,
            hw,
            wanted,
            active,
            nochange,
            names: all,
        })
    }

    /// The bit index of feature `name` (aliases accepted).
    pub fn index_of(&self, name: &str) -> Option<u32> {
        let name = canonical_name(name);
        self.names
            .iter()
            .position(|n| !n.is_empty() && n == name)
            .and_then(|i| u32::try_from(i).ok())
    }

    /// Feature `name` (aliases accepted).
    pub fn feature(&self, name: &str) -> Option<Feature> {
        self.index_of(name).map(|i| self.at(i))
    }

    fn at(&self, i: u32) -> Feature {
        Feature {
            name: self.names.get(i as usize).cloned().unwrap_or_default(),
            index: i,
            changeable: self.hw.get(i),
            wanted: self.wanted.get(i),
            active: self.active.get(i),
            fixed: self.nochange.get(i),
        }
    }

    /// Whether feature `name` is on, or `None` if the kernel has no such feature.
    pub fn is_active(&self, name: &str) -> Option<bool> {
        self.feature(name).map(|f| f.active)
    }

    /// Every named feature.
    pub fn list(&self) -> Vec<Feature> {
        (0..self.names.len())
            .filter_map(|i| u32::try_from(i).ok())
            .filter(|&i| !self.names[i as usize].is_empty())
            .map(|i| self.at(i))
            .collect()
    }
}

/// The features-set reply: what still differs after the change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeaturesSetReply {
    /// Features whose wanted state differs from the active state (requested, not applied).
    pub wanted_diff: Bitset,
    /// Features whose active state changed.
    pub active_diff: Bitset,
}

impl FeaturesSetReply {
    /// Parses a features-set reply (`ETHTOOL_MSG_FEATURES_SET_REPLY`).
    pub fn parse(attrs: &[u8]) -> Result<FeaturesSetReply> {
        let mut r = FeaturesSetReply::default();
        for a in Attrs::new(attrs) {
            let a = a?;
            match a.kind() {
                WANTED => r.wanted_diff = Bitset::parse(a.payload())?,
                ACTIVE => r.active_diff = Bitset::parse(a.payload())?,
                _ => {}
            }
        }
        Ok(r)
    }

    /// Whether feature `name` was requested but is not in the requested state.
    pub fn not_applied(&self, name: &str) -> bool {
        let name = canonical_name(name);
        self.wanted_diff
            .index_of(name)
            .is_some_and(|i| self.wanted_diff.in_mask(i))
    }
}
