//! [`NicControl`] for a real device: ethtool netlink for rings and features, the ethtool
//! ioctl for the RSS indirection table and ntuple rules (which have no netlink interface).

use zcnet_netlink::ethtool::{ChannelsSet, Dev, Ethtool, RingsSet, TcpDataSplit};
use zcnet_netlink::ntuple::{self, FlowRule, FlowType};

use super::{FlowSpec, NicControl, Proto, RingsState, RxChannels};
use crate::{Error, Result};

/// A network device of this namespace, reached through ethtool netlink and ioctls.
#[derive(Debug)]
pub struct LiveNic {
    name: String,
    ifindex: u32,
    ethtool: Ethtool,
}

/// A netlink/ioctl error as the facade's error, keeping the kernel's message and errno. The
/// netlink error already names the operation and the device, so nothing is prefixed.
pub(crate) fn kernel_err(e: zcnet_netlink::Error) -> Error {
    // No answer in time is not the kernel's refusal: the request may still be applied (see
    // `nic::outcome_unknown`), so it stays a timeout.
    if let zcnet_netlink::Error::Io { source, .. } = &e {
        if matches!(
            source.kind(),
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
        ) {
            return Error::io(
                e.to_string(),
                std::io::Error::from(std::io::ErrorKind::TimedOut),
            );
        }
    }
    Error::Kernel {
        what: String::new().into(),
        errno: e.errno(),
        message: e.to_string().into(),
    }
}

impl LiveNic {
    /// Opens `name`, which must exist in the calling thread's network namespace (looked up
    /// with `if_nametoindex`, which follows a thread that entered a namespace with `setns`;
    /// `/sys/class/net` would show the namespace sysfs was mounted in).
    pub fn open(name: &str) -> Result<LiveNic> {
        let ifindex = zcnet_sys::zcrx::if_index(name).ok_or_else(|| Error::UnknownInterface {
            given: name.to_string(),
        })?;
        let ethtool = Ethtool::open().map_err(kernel_err)?;
        Ok(LiveNic {
            name: name.to_string(),
            ifindex,
            ethtool,
        })
    }

    /// Its ethtool netlink socket.
    pub(crate) fn ethtool(&mut self) -> &mut Ethtool {
        &mut self.ethtool
    }

    fn dev(&self) -> Dev<'static> {
        Dev::Index(self.ifindex)
    }
}

/// A device's channel (queue) counts, `(current, max)` per kind, as ethtool channels-get
/// reports them (`ethtool -l`); a kind the driver does not report is `(0, 0)`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChannelCounts {
    /// RX-only channels.
    pub rx: (u32, u32),
    /// TX-only channels.
    pub tx: (u32, u32),
    /// Other channels.
    pub other: (u32, u32),
    /// Combined channels.
    pub combined: (u32, u32),
}

impl ChannelCounts {
    /// `(kind, current, max)` for rx, tx, other, combined.
    pub fn kinds(&self) -> [(&'static str, u32, u32); 4] {
        [
            ("rx", self.rx.0, self.rx.1),
            ("tx", self.tx.0, self.tx.1),
            ("other", self.other.0, self.other.1),
            ("combined", self.combined.0, self.combined.1),
        ]
    }
}

impl LiveNic {
    /// The channel counts; `None` when the driver has no channel control (lo, ifb).
    pub fn channel_counts(&mut self) -> Result<Option<ChannelCounts>> {
        let dev = self.dev();
        let c = match self.ethtool.channels_get(dev) {
            Ok(c) => c,
            Err(e) if e.errno() == Some(libc::EOPNOTSUPP) => return Ok(None),
            Err(e) => return Err(kernel_err(e)),
        };
        let pair = |cur: Option<u32>, max: Option<u32>| (cur.unwrap_or(0), max.unwrap_or(0));
        Ok(Some(ChannelCounts {
            rx: pair(c.rx_count, c.rx_max),
            tx: pair(c.tx_count, c.tx_max),
            other: pair(c.other_count, c.other_max),
            combined: pair(c.combined_count, c.combined_max),
        }))
    }

    /// Sets the channel counts that are `Some` (ethtool netlink channels-set, the request
    /// `ethtool -L` makes; needs CAP_NET_ADMIN). The kernel's refusal is in the error.
    pub fn set_channels(
        &mut self,
        rx: Option<u32>,
        tx: Option<u32>,
        combined: Option<u32>,
    ) -> Result<()> {
        let dev = self.dev();
        let set = ChannelsSet {
            rx,
            tx,
            combined,
            other: None,
        };
        self.ethtool.channels_set(dev, &set).map_err(kernel_err)
    }
}

fn flow_type(s: &FlowSpec) -> FlowType {
    match (s.proto, s.ipv6) {
        (Proto::Tcp, false) => FlowType::TcpV4,
        (Proto::Udp, false) => FlowType::UdpV4,
        (Proto::Tcp, true) => FlowType::TcpV6,
        (Proto::Udp, true) => FlowType::UdpV6,
    }
}

fn spec_of(r: &FlowRule) -> Option<FlowSpec> {
    let (proto, ipv6) = match r.flow {
        FlowType::TcpV4 => (Proto::Tcp, false),
        FlowType::UdpV4 => (Proto::Udp, false),
        FlowType::TcpV6 => (Proto::Tcp, true),
        FlowType::UdpV6 => (Proto::Udp, true),
        FlowType::Other(_) => return None,
    };
    // Only rules of the shape zcnet inserts (destination port only) are "ours" to match.
    if r.dst_ip.is_some() || r.src_ip.is_some() || r.src_port.is_some() {
        return None;
    }
    Some(FlowSpec {
        proto,
        ipv6,
        dst_port: r.dst_port?,
        queue: r.queue,
    })
}

impl NicControl for LiveNic {
    fn name(&self) -> &str {
        &self.name
    }

    fn ifindex(&self) -> u32 {
        self.ifindex
    }

    fn rings(&mut self) -> Result<RingsState> {
        let dev = self.dev();
        let r = self.ethtool.rings_get(dev).map_err(kernel_err)?;
        Ok(RingsState {
            split: r.tcp_data_split.map_or(0, |t| t.value()),
            hds_thresh: r.hds_thresh,
        })
    }

    fn set_rings(&mut self, split: u8, hds_thresh: Option<u32>) -> Result<()> {
        let set = RingsSet {
            tcp_data_split: Some(TcpDataSplit::from_value(split)),
            hds_thresh,
            ..RingsSet::default()
        };
        let dev = self.dev();
        self.ethtool.rings_set(dev, &set).map_err(kernel_err)
    }

    fn ntuple(&mut self) -> Result<Option<bool>> {
        let dev = self.dev();
        let f = self.ethtool.features_get(dev).map_err(kernel_err)?;
        Ok(f.feature("ntuple-filters")
            .filter(|x| x.changeable || x.active)
            .map(|x| x.active))
    }

    fn set_ntuple(&mut self, on: bool) -> Result<()> {
        let dev = self.dev();
        self.ethtool
            .feature_set(dev, "ntuple-filters", on)
            .map_err(kernel_err)
    }

    fn rx_rings(&mut self) -> Result<u32> {
        match ntuple::rx_rings(&self.name) {
            Ok(n) => Ok(n),
            // Drivers without get_rxnfc (no RSS control): the queues the kernel set up.
            Err(e) if e.errno() == Some(libc::EOPNOTSUPP) => {
                Ok(crate::iface::rx_queues(self.ifindex, &mut self.ethtool))
            }
            Err(e) => Err(kernel_err(e)),
        }
    }

    fn channels(&mut self) -> Result<Option<RxChannels>> {
        let dev = self.dev();
        match self.ethtool.channels_get(dev) {
            Ok(c) => Ok(Some(crate::iface::rx_channels(&c))),
            // No get_channels (lo, ifb): no channel control at all.
            Err(e) if e.errno() == Some(libc::EOPNOTSUPP) => Ok(None),
            Err(e) => Err(kernel_err(e)),
        }
    }

    fn indir(&mut self) -> Result<Vec<u32>> {
        ntuple::indir_get(&self.name).map_err(kernel_err)
    }

    fn set_indir(&mut self, table: Option<&[u32]>) -> Result<()> {
        match table {
            Some(t) => ntuple::indir_set(&self.name, t),
            None => ntuple::indir_reset(&self.name),
        }
        .map_err(kernel_err)
    }

    fn insert_rule(&mut self, spec: &FlowSpec) -> Result<u32> {
        let rule = FlowRule {
            flow: flow_type(spec),
            dst_ip: None,
            dst_port: Some(spec.dst_port),
            src_ip: None,
            src_port: None,
            queue: spec.queue,
            location: None,
        };
        ntuple::rule_insert(&self.name, &rule).map_err(kernel_err)
    }

    fn delete_rule(&mut self, location: u32) -> Result<()> {
        ntuple::rule_delete(&self.name, location).map_err(kernel_err)
    }

    fn rules(&mut self) -> Result<Vec<(u32, FlowSpec)>> {
        let rules = ntuple::rule_list(&self.name).map_err(kernel_err)?;
        Ok(rules
            .iter()
            .filter_map(|r| Some((r.location?, spec_of(r)?)))
            .collect())
    }
}
