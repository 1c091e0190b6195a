//! The request/reply header nest every ethtool message starts with (`ETHTOOL_A_HEADER_*`,
//! include/uapi/linux/ethtool_netlink_generated.h).

use std::fmt;

use crate::error::{Error, Result};
use crate::wire::{Attrs, MsgBuilder};

/// The header is attribute 1 of every ethtool message (`ETHTOOL_A_*_HEADER`).
pub const HEADER: u16 = 1;
/// `ETHTOOL_A_HEADER_DEV_INDEX` (u32).
pub const HEADER_DEV_INDEX: u16 = 1;
/// `ETHTOOL_A_HEADER_DEV_NAME` (string).
pub const HEADER_DEV_NAME: u16 = 2;
/// `ETHTOOL_A_HEADER_FLAGS` (u32).
pub const HEADER_FLAGS: u16 = 3;

/// `ETHTOOL_FLAG_COMPACT_BITSETS`: bitsets as u32 arrays instead of named bit lists.
pub const FLAG_COMPACT_BITSETS: u32 = 1;
/// `ETHTOOL_FLAG_OMIT_REPLY`: no reply to a set request.
pub const FLAG_OMIT_REPLY: u32 = 2;
/// `ETHTOOL_FLAG_STATS`: include statistics.
pub const FLAG_STATS: u32 = 4;

/// Which device a request is about: by index or by name (in the caller's namespace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dev<'a> {
    /// By interface index.
    Index(u32),
    /// By interface name (1 to 15 bytes).
    Name(&'a str),
}

impl fmt::Display for Dev<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dev::Index(i) => write!(f, "ifindex {i}"),
            Dev::Name(n) => write!(f, "dev {n}"),
        }
    }
}

impl Dev<'_> {
    /// Refuses names the kernel would refuse (empty, 16 bytes or more, NUL inside).
    pub fn check(&self) -> Result<()> {
        if let Dev::Name(n) = self {
            if n.is_empty() || n.len() > 15 || n.contains('\0') {
                return Err(Error::InvalidInput {
                    what: format!("interface name {n:?} must be 1 to 15 bytes without NUL"),
                });
            }
        }
        Ok(())
    }
}

/// Writes the header nest for `dev` with `flags` (`ETHTOOL_FLAG_*`, 0 for none).
pub fn fill_header(b: &mut MsgBuilder, dev: Dev<'_>, flags: u32) {
    b.nest_begin(HEADER);
    match dev {
        Dev::Index(i) => b.put_u32(HEADER_DEV_INDEX, i),
        Dev::Name(n) => b.put_str(HEADER_DEV_NAME, n),
    };
    if flags != 0 {
        b.put_u32(HEADER_FLAGS, flags);
    }
    b.nest_end();
}

/// The device a reply is about.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplyHeader {
    /// Interface index.
    pub ifindex: Option<u32>,
    /// Interface name.
    pub name: Option<String>,
}

/// Parses the payload of a reply's header nest.
pub fn parse_reply_header(payload: &[u8]) -> Result<ReplyHeader> {
    let mut h = ReplyHeader::default();
    for a in Attrs::new(payload) {
        let a = a?;
        match a.kind() {
            HEADER_DEV_INDEX => h.ifindex = Some(a.u32()?),
            HEADER_DEV_NAME => h.name = Some(a.str()),
            _ => {}
        }
    }
    Ok(h)
}

/// Names of header attributes (path starting at the header nest), for error messages.
pub(crate) fn header_attr_name(p: &[u16]) -> Option<&'static str> {
    match p {
        [HEADER] => Some("header"),
        [HEADER, HEADER_DEV_INDEX] => Some("header.dev-index"),
        [HEADER, HEADER_DEV_NAME] => Some("header.dev-name"),
        [HEADER, HEADER_FLAGS] => Some("header.flags"),
        _ => None,
    }
}
