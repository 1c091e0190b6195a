//! Rings (`ETHTOOL_MSG_RINGS_GET`/`_SET`, including TCP data split and the header-split
//! threshold) and channels (`ETHTOOL_MSG_CHANNELS_GET`/`_SET`). Attribute numbers:
//! `ETHTOOL_A_RINGS_*`, `ETHTOOL_A_CHANNELS_*` in include/uapi/linux/ethtool_netlink_generated.h.

use super::header::{parse_reply_header, ReplyHeader, HEADER};
use crate::error::Result;
use crate::wire::{Attr, Attrs, MsgBuilder};

/// `ETHTOOL_A_RINGS_*`.
pub(crate) mod ring_attr {
    pub const RX_MAX: u16 = 2;
    pub const RX_MINI_MAX: u16 = 3;
    pub const RX_JUMBO_MAX: u16 = 4;
    pub const TX_MAX: u16 = 5;
    pub const RX: u16 = 6;
    pub const RX_MINI: u16 = 7;
    pub const RX_JUMBO: u16 = 8;
    pub const TX: u16 = 9;
    pub const RX_BUF_LEN: u16 = 10;
    pub const TCP_DATA_SPLIT: u16 = 11;
    pub const CQE_SIZE: u16 = 12;
    pub const TX_PUSH: u16 = 13;
    pub const RX_PUSH: u16 = 14;
    pub const TX_PUSH_BUF_LEN: u16 = 15;
    pub const TX_PUSH_BUF_LEN_MAX: u16 = 16;
    pub const HDS_THRESH: u16 = 17;
    pub const HDS_THRESH_MAX: u16 = 18;
}

/// Names of rings attributes, for error messages.
pub(crate) fn rings_attr_name(p: &[u16]) -> Option<&'static str> {
    use ring_attr::*;
    Some(match p {
        [1, ..] => return super::header::header_attr_name(p),
        [RX] => "rx",
        [RX_MINI] => "rx-mini",
        [RX_JUMBO] => "rx-jumbo",
        [TX] => "tx",
        [RX_BUF_LEN] => "rx-buf-len",
        [TCP_DATA_SPLIT] => "tcp-data-split",
        [CQE_SIZE] => "cqe-size",
        [TX_PUSH] => "tx-push",
        [RX_PUSH] => "rx-push",
        [TX_PUSH_BUF_LEN] => "tx-push-buf-len",
        [HDS_THRESH] => "hds-thresh",
        _ => return None,
    })
}

/// `enum ethtool_tcp_data_split`: header/data split of TCP payload into separate buffers
/// (what devmem TCP and io_uring zero-copy receive need).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpDataSplit {
    /// `ETHTOOL_TCP_DATA_SPLIT_UNKNOWN` (0): in a get, the driver does not say; in a set,
    /// "driver default" (ethtool's `auto`).
    Unknown,
    /// `ETHTOOL_TCP_DATA_SPLIT_DISABLED` (1).
    Disabled,
    /// `ETHTOOL_TCP_DATA_SPLIT_ENABLED` (2).
    Enabled,
    /// A value newer than this crate.
    Other(u8),
}

impl TcpDataSplit {
    /// The wire value.
    pub fn value(self) -> u8 {
        match self {
            TcpDataSplit::Unknown => 0,
            TcpDataSplit::Disabled => 1,
            TcpDataSplit::Enabled => 2,
            TcpDataSplit::Other(v) => v,
        }
    }

    /// From the wire value.
    pub fn from_value(v: u8) -> TcpDataSplit {
        match v {
            0 => TcpDataSplit::Unknown,
            1 => TcpDataSplit::Disabled,
            2 => TcpDataSplit::Enabled,
            v => TcpDataSplit::Other(v),
        }
    }
}

/// A rings-get reply; every field is optional because drivers report what they support.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rings {
    /// The device, from the reply header.
    pub header: ReplyHeader,
    /// Maximum RX ring size.
    pub rx_max: Option<u32>,
    /// Maximum RX mini ring size.
    pub rx_mini_max: Option<u32>,
    /// Maximum RX jumbo ring size.
    pub rx_jumbo_max: Option<u32>,
    /// Maximum TX ring size.
    pub tx_max: Option<u32>,
    /// RX ring size.
    pub rx: Option<u32>,
    /// RX mini ring size.
    pub rx_mini: Option<u32>,
    /// RX jumbo ring size.
    pub rx_jumbo: Option<u32>,
    /// TX ring size.
    pub tx: Option<u32>,
    /// Size of the buffers on the RX ring.
    pub rx_buf_len: Option<u32>,
    /// TCP header/data split.
    pub tcp_data_split: Option<TcpDataSplit>,
    /// Completion queue entry size.
    pub cqe_size: Option<u32>,
    /// TX push mode.
    pub tx_push: Option<bool>,
    /// RX push mode.
    pub rx_push: Option<bool>,
    /// TX push buffer size.
    pub tx_push_buf_len: Option<u32>,
    /// Maximum TX push buffer size.
    pub tx_push_buf_len_max: Option<u32>,
    /// Header-split threshold: payloads up to this size stay with the header (Linux 6.13).
    pub hds_thresh: Option<u32>,
    /// Largest supported header-split threshold.
    pub hds_thresh_max: Option<u32>,
}

fn bool_u8(a: &Attr<'_>) -> Result<bool> {
    Ok(a.u8()? != 0)
}

impl Rings {
    /// Parses a rings-get reply.
    pub fn parse(attrs: &[u8]) -> Result<Rings> {
        use ring_attr::*;
        let mut r = Rings::default();
        for a in Attrs::new(attrs) {
            let a = a?;
            let v = || a.u32().map(Some);
            match a.kind() {
                HEADER => r.header = parse_reply_header(a.payload())?,
                RX_MAX => r.rx_max = v()?,
                RX_MINI_MAX => r.rx_mini_max = v()?,
                RX_JUMBO_MAX => r.rx_jumbo_max = v()?,
                TX_MAX => r.tx_max = v()?,
                RX => r.rx = v()?,
                RX_MINI => r.rx_mini = v()?,
                RX_JUMBO => r.rx_jumbo = v()?,
                TX => r.tx = v()?,
                RX_BUF_LEN => r.rx_buf_len = v()?,
                TCP_DATA_SPLIT => r.tcp_data_split = Some(TcpDataSplit::from_value(a.u8()?)),
                CQE_SIZE => r.cqe_size = v()?,
                TX_PUSH => r.tx_push = Some(bool_u8(&a)?),
                RX_PUSH => r.rx_push = Some(bool_u8(&a)?),
                TX_PUSH_BUF_LEN => r.tx_push_buf_len = v()?,
                TX_PUSH_BUF_LEN_MAX => r.tx_push_buf_len_max = v()?,
                HDS_THRESH => r.hds_thresh = v()?,
                HDS_THRESH_MAX => r.hds_thresh_max = v()?,
                _ => {}
            }
        }
        Ok(r)
    }
}

/// What a rings-set changes; `None` fields are left alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingsSet {
    /// RX ring size.
    pub rx: Option<u32>,
    /// RX mini ring size.
    pub rx_mini: Option<u32>,
    /// RX jumbo ring size.
    pub rx_jumbo: Option<u32>,
    /// TX ring size.
    pub tx: Option<u32>,
    /// RX buffer size.
    pub rx_buf_len: Option<u32>,
    /// TCP header/data split.
    pub tcp_data_split: Option<TcpDataSplit>,
    /// Completion queue entry size.
    pub cqe_size: Option<u32>,
    /// TX push.
    pub tx_push: Option<bool>,
    /// RX push.
    pub rx_push: Option<bool>,
    /// TX push buffer size.
    pub tx_push_buf_len: Option<u32>,
    /// Header-split threshold.
    pub hds_thresh: Option<u32>,
}

impl RingsSet {
    /// Whether nothing would be changed.
    pub fn is_empty(&self) -> bool {
        *self == RingsSet::default()
    }

    /// Writes the attributes after the header.
    pub fn fill(&self, b: &mut MsgBuilder) {
        use ring_attr::*;
        for (k, v) in [
            (RX, self.rx),
            (RX_MINI, self.rx_mini),
            (RX_JUMBO, self.rx_jumbo),
            (TX, self.tx),
            (RX_BUF_LEN, self.rx_buf_len),
            (CQE_SIZE, self.cqe_size),
            (TX_PUSH_BUF_LEN, self.tx_push_buf_len),
            (HDS_THRESH, self.hds_thresh),
        ] {
            if let Some(v) = v {
                b.put_u32(k, v);
            }
        }
        if let Some(t) = self.tcp_data_split {
            b.put_u8(TCP_DATA_SPLIT, t.value());
        }
        if let Some(p) = self.tx_push {
            b.put_u8(TX_PUSH, u8::from(p));
        }
        if let Some(p) = self.rx_push {
            b.put_u8(RX_PUSH, u8::from(p));
        }
    }
}

/// `ETHTOOL_A_CHANNELS_*`.
pub(crate) mod chan_attr {
    pub const RX_MAX: u16 = 2;
    pub const TX_MAX: u16 = 3;
    pub const OTHER_MAX: u16 = 4;
    pub const COMBINED_MAX: u16 = 5;
    pub const RX_COUNT: u16 = 6;
    pub const TX_COUNT: u16 = 7;
    pub const OTHER_COUNT: u16 = 8;
    pub const COMBINED_COUNT: u16 = 9;
}

/// Names of channels attributes, for error messages.
pub(crate) fn channels_attr_name(p: &[u16]) -> Option<&'static str> {
    use chan_attr::*;
    Some(match p {
        [1, ..] => return super::header::header_attr_name(p),
        [RX_COUNT] => "rx-count",
        [TX_COUNT] => "tx-count",
        [OTHER_COUNT] => "other-count",
        [COMBINED_COUNT] => "combined-count",
        _ => return None,
    })
}

/// A channels-get reply (queue counts).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Channels {
    /// The device, from the reply header.
    pub header: ReplyHeader,
    /// Maximum RX-only channels.
    pub rx_max: Option<u32>,
    /// Maximum TX-only channels.
    pub tx_max: Option<u32>,
    /// Maximum other channels.
    pub other_max: Option<u32>,
    /// Maximum combined channels.
    pub combined_max: Option<u32>,
    /// RX-only channels.
    pub rx_count: Option<u32>,
    /// TX-only channels.
    pub tx_count: Option<u32>,
    /// Other channels.
    pub other_count: Option<u32>,
    /// Combined channels.
    pub combined_count: Option<u32>,
}

impl Channels {
    /// Parses a channels-get reply.
    pub fn parse(attrs: &[u8]) -> Result<Channels> {
        use chan_attr::*;
        let mut c = Channels::default();
        for a in Attrs::new(attrs) {
            let a = a?;
            let v = || a.u32().map(Some);
            match a.kind() {
                HEADER => c.header = parse_reply_header(a.payload())?,
                RX_MAX => c.rx_max = v()?,
                TX_MAX => c.tx_max = v()?,
                OTHER_MAX => c.other_max = v()?,
                COMBINED_MAX => c.combined_max = v()?,
                RX_COUNT => c.rx_count = v()?,
                TX_COUNT => c.tx_count = v()?,
                OTHER_COUNT => c.other_count = v()?,
                COMBINED_COUNT => c.combined_count = v()?,
                _ => {}
            }
        }
        Ok(c)
    }
}

/// What a channels-set changes; `None` fields are left alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChannelsSet {
    /// RX-only channels.
    pub rx: Option<u32>,
    /// TX-only channels.
    pub tx: Option<u32>,
    /// Other channels.
    pub other: Option<u32>,
    /// Combined channels.
    pub combined: Option<u32>,
}

impl ChannelsSet {
    /// Whether nothing would be changed.
    pub fn is_empty(&self) -> bool {
        *self == ChannelsSet::default()
    }

    /// Writes the attributes after the header.
    pub fn fill(&self, b: &mut MsgBuilder) {
        use chan_attr::*;
        for (k, v) in [
            (RX_COUNT, self.rx),
            (TX_COUNT, self.tx),
            (OTHER_COUNT, self.other),
            (COMBINED_COUNT, self.combined),
        ] {
            if let Some(v) = v {
                b.put_u32(k, v);
            }
        }
    }
}

/// Refuses an empty set request before it is sent.
pub(crate) fn nothing_to_set(op: &str) -> crate::Error {
    crate::Error::InvalidInput {
        what: format!("{op} with nothing to change"),
    }
}
