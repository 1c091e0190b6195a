//! What is read about an interface, for the probe's report and for refusals that need to
//! know what the device could do ([`iface_facts`]). Reading an interface: rtnetlink for the list, indexes and flags, the netdev family for XDP
//! features, queues, NAPI and bindings, ethtool netlink for rings, channels, features and RSS,
//! the ethtool ioctl for the driver name. Each read that fails becomes a note, not an error.
//!
//! Nothing here reads `/sys/class/net`: sysfs shows the network namespace of whoever mounted
//! it, not the one of the calling thread, so a thread that entered a lab namespace with
//! `setns` would see (and probe) the root namespace's devices. Netlink and ioctl sockets are
//! made in the calling thread's namespace, so every source used here follows it.

use std::io;
use std::time::Instant;

use zcnet_core::probe::xsk::{GenericZcXmit, ZcXmit};
use zcnet_core::probe::{HeaderSplit, IfaceFacts, IfaceKind, RxChannels, Trials};
use zcnet_netlink::conn::collect_until;
use zcnet_netlink::ethtool::{Dev, Ethtool, TcpDataSplit};
use zcnet_netlink::netdev::{Netdev, QueueKind};
use zcnet_netlink::ntuple;
use zcnet_netlink::wire::{
    messages, parse_done, parse_error, Attrs, NLA_HDRLEN, NLMSG_DONE, NLMSG_ERROR, NLMSG_HDRLEN,
    NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_REQUEST,
};
use zcnet_sys::netlink::{NlSocket, NETLINK_ROUTE};

use crate::{Error, Result};
use zcnet_core::probe::xsk::QueueTrials;
use zcnet_core::probe::{Finding, Mechanism};

/// `IFF_UP` and `IFF_LOOPBACK` (include/uapi/linux/if.h).
const IFF_UP: u32 = 0x1;
const IFF_LOOPBACK: u32 = 0x8;

/// `RTM_NEWLINK`, `RTM_GETLINK` (include/uapi/linux/rtnetlink.h).
const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
/// `struct ifinfomsg`: family, pad, type (u16), index (i32), flags (u32), change (u32).
const IFINFOMSG_LEN: usize = 16;
/// `IFLA_*` attributes (include/uapi/linux/if_link.h).
const IFLA_IFNAME: u16 = 3;
const IFLA_EXT_MASK: u16 = 29;
const IFLA_NUM_RX_QUEUES: u16 = 32;
const IFLA_PARENT_DEV_NAME: u16 = 56;
/// `RTEXT_FILTER_SKIP_STATS`: no statistics in the dump (they are most of its bytes).
const RTEXT_FILTER_SKIP_STATS: u32 = 1 << 3;
/// A dump the kernel marks inconsistent (a device came or went meanwhile) is retried this often.
const DUMP_TRIES: usize = 3;

/// One interface of the calling thread's network namespace, as rtnetlink describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Link {
    pub(crate) name: String,
    pub(crate) ifindex: u32,
    /// `ifi_flags` (`IFF_*`).
    pub(crate) flags: u32,
    /// A bus device is behind it (`IFLA_PARENT_DEV_NAME`, what sysfs shows as `device`).
    pub(crate) parent: bool,
    /// `IFLA_NUM_RX_QUEUES`: RX queues allocated (the ones in use may be fewer).
    pub(crate) num_rx_queues: Option<u32>,
}

fn bad(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// An `RTM_GETLINK` dump request for every interface, without statistics.
fn link_dump_request(seq: u32) -> Vec<u8> {
    let attr_len = NLA_HDRLEN + 4;
    let len = NLMSG_HDRLEN + IFINFOMSG_LEN + attr_len;
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&RTM_GETLINK.to_ne_bytes());
    m.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    // AF_UNSPEC, no filter: every link.
    m.extend_from_slice(&[0u8; IFINFOMSG_LEN]);
    m.extend_from_slice(&(attr_len as u16).to_ne_bytes());
    m.extend_from_slice(&IFLA_EXT_MASK.to_ne_bytes());
    m.extend_from_slice(&RTEXT_FILTER_SKIP_STATS.to_ne_bytes());
    m
}

/// Parses the payload of one `RTM_NEWLINK` message: `struct ifinfomsg`, then attributes.
fn parse_link(payload: &[u8]) -> io::Result<Link> {
    let hdr = payload.get(..IFINFOMSG_LEN).ok_or_else(|| {
        bad(format!(
            "rtnetlink: RTM_NEWLINK of {} bytes cannot hold struct ifinfomsg",
            payload.len()
        ))
    })?;
    let u32_at = |i: usize| u32::from_ne_bytes([hdr[i], hdr[i + 1], hdr[i + 2], hdr[i + 3]]);
    let mut link = Link {
        name: String::new(),
        ifindex: u32_at(4),
        flags: u32_at(8),
        parent: false,
        num_rx_queues: None,
    };
    for a in Attrs::new(&payload[IFINFOMSG_LEN..]) {
        let a = a.map_err(|e| bad(format!("rtnetlink: {e}")))?;
        match a.kind() {
            IFLA_IFNAME => link.name = a.str(),
            IFLA_NUM_RX_QUEUES => link.num_rx_queues = a.u32().ok(),
            IFLA_PARENT_DEV_NAME => link.parent = true,
            _ => {}
        }
    }
    if link.name.is_empty() || link.ifindex == 0 {
        return Err(bad(format!(
            "rtnetlink: a link without a name or index ({:?}, {})",
            link.name, link.ifindex
        )));
    }
    Ok(link)
}

/// Feeds one datagram of the dump with sequence number `seq` into `out`. `Ok(true)` at the end
/// of the dump; `interrupted` is set when the kernel marked a message `NLM_F_DUMP_INTR`.
fn feed_links(
    datagram: &[u8],
    seq: u32,
    out: &mut Vec<Link>,
    interrupted: &mut bool,
) -> io::Result<bool> {
    for m in messages(datagram) {
        let m = m.map_err(|e| bad(format!("rtnetlink: {e}")))?;
        if m.header.seq != seq {
            continue;
        }
        *interrupted |= m.header.flags & NLM_F_DUMP_INTR != 0;
        let errno = match m.header.kind {
            NLMSG_DONE => parse_done(m.header.flags, m.payload).map(|(e, _)| e),
            NLMSG_ERROR => parse_error(m.header.flags, m.payload).map(|e| e.errno),
            RTM_NEWLINK => {
                out.push(parse_link(m.payload)?);
                continue;
            }
            _ => continue,
        }
        .map_err(|e| bad(format!("rtnetlink: {e}")))?;
        if errno != 0 {
            return Err(io::Error::from_raw_os_error(errno));
        }
        return Ok(true);
    }
    Ok(false)
}

/// Every interface of the calling thread's network namespace (an `RTM_GETLINK` dump on a
/// route netlink socket, which belongs to the namespace it was made in), in ifindex order.
fn links() -> io::Result<Vec<Link>> {
    let sock = NlSocket::open(NETLINK_ROUTE)?;
    let until = Instant::now() + zcnet_netlink::conn::EXCHANGE_DEADLINE;
    dump_links(|req| sock.send(req), |b| sock.recv(b), until)
}

/// The dump of [`links`] over `send` and `recv` (a route netlink socket's), received as every
/// netlink exchange is ([`zcnet_netlink::conn::collect_until`]): given up once `until` has
/// passed, however its datagrams trickle in, the retries of an interrupted dump included.
fn dump_links(
    mut send: impl FnMut(&[u8]) -> io::Result<()>,
    mut recv: impl FnMut(&mut [u8]) -> io::Result<usize>,
    until: Instant,
) -> io::Result<Vec<Link>> {
    let mut buf = vec![0u8; 64 << 10];
    let mut out = Vec::new();
    let ctx = || "rtnetlink RTM_GETLINK dump".to_string();
    for seq in 1..=DUMP_TRIES as u32 {
        send(&link_dump_request(seq))?;
        out.clear();
        let mut interrupted = false;
        let fed = |d: &[u8]| {
            feed_links(d, seq, &mut out, &mut interrupted).map_err(|source| {
                zcnet_netlink::Error::Io {
                    context: ctx(),
                    source,
                }
            })
        };
        collect_until(until, &mut recv, &mut buf, &ctx, fed).map_err(|e| match e {
            zcnet_netlink::Error::Io { source, .. } => source,
            e => io::Error::new(io::ErrorKind::InvalidData, e.to_string()),
        })?;
        if !interrupted {
            break;
        }
    }
    out.sort_by_key(|l| l.ifindex);
    Ok(out)
}

/// Interfaces of the calling thread's network namespace, in ifindex order.
pub(crate) fn list() -> Result<Vec<Link>> {
    links().map_err(|e| Error::io("listing interfaces (rtnetlink RTM_GETLINK dump)", e))
}

/// Number of RX queues of interface `ifindex` in the calling thread's namespace: the ones the
/// netdev family lists (exact, but only for a device that is up), else the RX and combined
/// channels ethtool reports, else the queues rtnetlink says are allocated; 0 when none answers.
pub(crate) fn rx_queues(ifindex: u32, et: &mut Ethtool) -> u32 {
    let listed = Netdev::open()
        .and_then(|mut nd| nd.queue_dump(ifindex))
        .map(|qs| qs.iter().filter(|q| q.kind == QueueKind::Rx).count() as u32)
        .unwrap_or(0);
    if listed > 0 {
        return listed;
    }
    let channels = et
        .channels_get(Dev::Index(ifindex))
        .map(|c| c.rx_count.unwrap_or(0) + c.combined_count.unwrap_or(0))
        .unwrap_or(0);
    if channels > 0 {
        return channels;
    }
    links()
        .ok()
        .and_then(|ls| ls.into_iter().find(|l| l.ifindex == ifindex))
        .and_then(|l| l.num_rx_queues)
        .unwrap_or(0)
}

/// The RX part of a channels-get reply, as the probe's rules and the NIC setup weigh it.
pub(crate) fn rx_channels(c: &zcnet_netlink::ethtool::Channels) -> RxChannels {
    RxChannels {
        rx: c.rx_count.unwrap_or(0),
        rx_max: c.rx_max.unwrap_or(0),
        combined: c.combined_count.unwrap_or(0),
        combined_max: c.combined_max.unwrap_or(0),
    }
}

/// The two netlink families, opened once per probe and shared by every interface (each open
/// resolves the family through nlctrl); `Err` holds why one is unusable.
pub(crate) struct Families {
    pub(crate) netdev: std::result::Result<Netdev, String>,
    pub(crate) ethtool: std::result::Result<Ethtool, String>,
}

impl Families {
    pub(crate) fn open() -> Families {
        Families {
            netdev: Netdev::open().map_err(|e| e.to_string()),
            ethtool: Ethtool::open().map_err(|e| e.to_string()),
        }
    }

    /// The netdev family's operations by name.
    pub(crate) fn netdev_ops(&self) -> std::result::Result<Vec<String>, String> {
        self.netdev
            .as_ref()
            .map(Netdev::op_names)
            .map_err(Clone::clone)
    }

    /// The ethtool netlink family's version.
    pub(crate) fn ethtool_version(&self) -> std::result::Result<u32, String> {
        self.ethtool
            .as_ref()
            .map(|e| e.family().version)
            .map_err(Clone::clone)
    }
}

fn kind(link: &Link, driver: Option<&str>) -> IfaceKind {
    if link.flags & IFF_LOOPBACK != 0 {
        return IfaceKind::Loopback;
    }
    match driver {
        Some("veth") => IfaceKind::Veth,
        Some("ifb") => IfaceKind::Ifb,
        // A device with hardware (or a hypervisor's virtual NIC) behind it has a bus device.
        _ if link.parent => IfaceKind::Physical,
        _ => IfaceKind::Virtual,
    }
}

/// Reads everything the probe reports about one interface.
pub(crate) fn gather(link: &Link, fam: &mut Families) -> IfaceReport {
    let mut notes = Vec::new();
    let (name, ifindex) = (link.name.as_str(), link.ifindex);
    let driver = ntuple::driver_info(name)
        .ok()
        .map(|d| d.driver)
        .filter(|d| !d.is_empty());
    let kind = kind(link, driver.as_deref());
    let mut r = IfaceReport {
        name: name.to_string(),
        ifindex,
        up: link.flags & IFF_UP != 0,
        queues: Vec::new(),
        napi_ids: Vec::new(),
        xdp_features: Vec::new(),
        xsk_features: Vec::new(),
        hds_thresh_max: None,
        channels: Vec::new(),
        rss_contexts: None,
        bindings: Vec::new(),
        notes: Vec::new(),
        facts: IfaceFacts {
            name: name.to_string(),
            kind,
            driver,
            xdp_features: None,
            // Until a better source answers (netdev queues, then ethtool channels, below).
            rx_queues: link.num_rx_queues.unwrap_or(0),
            header_split: HeaderSplit::NotReported("not read".into()),
            hds_thresh: None,
            ntuple: None,
            scatter_gather: None,
            channels: None,
        },
        trials: Trials::default(),
        mechanisms: Vec::new(),
        // Judged by the caller, once the kernel's facts are known.
        generic_zc_xmit: GenericZcXmit {
            answer: ZcXmit::Unknown,
            reason: "not judged".into(),
            inferred: false,
        },
        xsk_queues: None,
    };
    if let Ok(nd) = &mut fam.netdev {
        netdev_facts(nd, &mut r, &mut notes);
    }
    match &mut fam.ethtool {
        Ok(et) => ethtool_facts(et, &mut r, &mut notes),
        Err(e) => {
            r.facts.header_split = HeaderSplit::NotReported(format!("no ethtool netlink: {e}"));
            notes.push(format!("ethtool netlink: {e}"));
        }
    }
    r.notes = notes;
    r
}

fn netdev_facts(nd: &mut Netdev, r: &mut IfaceReport, notes: &mut Vec<String>) {
    match nd.dev_get(r.ifindex) {
        Ok(d) => {
            r.facts.xdp_features = Some(d.xdp_features);
            r.xdp_features = d.names();
            r.xsk_features = d.xsk_names();
        }
        Err(e) => notes.push(format!("dev-get: {e}")),
    }
    match nd.queue_dump(r.ifindex) {
        Ok(qs) => {
            let mut rx = 0;
            for q in &qs {
                let t = match q.kind {
                    QueueKind::Rx => {
                        rx += 1;
                        "rx"
                    }
                    QueueKind::Tx => "tx",
                };
                r.queues.push((t, q.id, q.napi_id));
                if let Some(fd) = q.dmabuf {
                    r.bindings
                        .push(format!("{t} queue {}: dma-buf binding {fd}", q.id));
                }
                if q.io_uring {
                    r.bindings
                        .push(format!("{t} queue {}: io_uring zcrx", q.id));
                }
                if q.xsk {
                    r.bindings
                        .push(format!("{t} queue {}: AF_XDP socket", q.id));
                }
            }
            if rx > 0 {
                r.facts.rx_queues = rx;
            }
        }
        Err(e) => notes.push(format!("queue-get: {e}")),
    }
    if !r.up {
        notes.push("down: the kernel lists no queues or NAPI instances of a down device".into());
    }
    match nd.napi_dump(r.ifindex) {
        Ok(ns) => r.napi_ids = ns.iter().map(|n| n.id).collect(),
        Err(e) => notes.push(format!("napi-get: {e}")),
    }
    if let Ok(pools) = nd.page_pool_dump() {
        let (bindings, lingering) = pool_bindings(&pools, r.ifindex);
        r.bindings.extend(bindings);
        notes.extend(lingering);
    }
}

/// The page pools of device `ifindex` whose memory a provider gives (a dma-buf, an io_uring zcrx
/// area), as binding lines; and, as notes, those the driver has already detached (the queue was
/// restarted without them): the kernel frees such a pool once the buffers it lent come back
/// (from socket queues, the per-CPU deferred-free lists), which can take a while after the
/// process that held the binding is gone. A detached pool is bound to no queue any more: it is
/// not a binding of the device.
fn pool_bindings(
    pools: &[zcnet_netlink::netdev::PagePoolInfo],
    ifindex: u32,
) -> (Vec<String>, Vec<String>) {
    let (mut bound, mut lingering) = (Vec::new(), Vec::new());
    for p in pools.iter().filter(|p| p.ifindex == Some(ifindex)) {
        let what = match (p.dmabuf, p.io_uring) {
            (Some(b), _) => format!("dma-buf binding {b}"),
            (None, true) => "io_uring zcrx".to_string(),
            (None, false) => continue,
        };
        if p.detach_time.is_some() {
            let held = p
                .inflight
                .map(|n| format!("its {n} buffer(s) in flight"))
                .unwrap_or_else(|| "its buffers in flight".into());
            lingering.push(format!(
                "page pool {} ({what}) is detached from the device: the kernel frees it once {held} come back",
                p.id
            ));
        } else {
            bound.push(format!("page pool {}: {what}", p.id));
        }
    }
    (bound, lingering)
}

fn ethtool_facts(et: &mut Ethtool, r: &mut IfaceReport, notes: &mut Vec<String>) {
    let dev = Dev::Index(r.ifindex);
    r.facts.header_split = match et.rings_get(dev) {
        Ok(rings) => {
            r.facts.hds_thresh = rings.hds_thresh;
            r.hds_thresh_max = rings.hds_thresh_max;
            match rings.tcp_data_split {
                None => HeaderSplit::NotReported("the driver reports no tcp-data-split".into()),
                Some(TcpDataSplit::Enabled) => HeaderSplit::Enabled,
                Some(TcpDataSplit::Disabled) => HeaderSplit::Disabled,
                Some(_) => HeaderSplit::Unknown,
            }
        }
        Err(e) => HeaderSplit::NotReported(format!("rings-get: {e}")),
    };
    match et.channels_get(dev) {
        Ok(c) => {
            // The queue count, unless the netdev family listed the queues (exact).
            let rx = c.rx_count.unwrap_or(0) + c.combined_count.unwrap_or(0);
            if rx > 0 && !r.queues.iter().any(|q| q.0 == "rx") {
                r.facts.rx_queues = rx;
            }
            r.facts.channels = Some(rx_channels(&c));
            for (n, cur, max) in [
                ("rx", c.rx_count, c.rx_max),
                ("tx", c.tx_count, c.tx_max),
                ("other", c.other_count, c.other_max),
                ("combined", c.combined_count, c.combined_max),
            ] {
                if cur.unwrap_or(0) > 0 || max.unwrap_or(0) > 0 {
                    r.channels.push((n, cur.unwrap_or(0), max.unwrap_or(0)));
                }
            }
        }
        Err(e) => note(notes, "channels", &e),
    }
    match et.features_get(dev) {
        Ok(f) => {
            r.facts.ntuple = f
                .feature("ntuple-filters")
                .filter(|x| x.changeable || x.active)
                .map(|x| x.active);
            r.facts.scatter_gather = f.is_active("tx-scatter-gather");
        }
        Err(e) => note(notes, "features", &e),
    }
    if r.facts.ntuple.is_some() || r.facts.kind == IfaceKind::Physical {
        match et.rss_dump(Some(dev)) {
            Ok(ctxs) => r.rss_contexts = Some(ctxs.iter().filter(|c| c.context != 0).count()),
            Err(e) => note(notes, "rss", &e),
        }
    }
}

/// Notes a failed read, unless it only says the device has no such thing (EOPNOTSUPP).
fn note(notes: &mut Vec<String>, what: &str, e: &zcnet_netlink::Error) {
    if e.errno() != Some(libc::EOPNOTSUPP) {
        notes.push(format!("{what}: {e}"));
    }
}

/// One interface.
#[derive(Debug, Clone)]
pub struct IfaceReport {
    /// Name.
    pub name: String,
    /// Index.
    pub ifindex: u32,
    /// Administratively up.
    pub up: bool,
    /// Queues: ("rx" | "tx", id, NAPI id).
    pub queues: Vec<(&'static str, u32, Option<u32>)>,
    /// NAPI instance ids.
    pub napi_ids: Vec<u32>,
    /// xdp-features by name.
    pub xdp_features: Vec<String>,
    /// xsk-features by name.
    pub xsk_features: Vec<String>,
    /// hds-thresh maximum, if reported.
    pub hds_thresh_max: Option<u32>,
    /// Channels: (kind, current, max) for rx, tx, other, combined.
    pub channels: Vec<(&'static str, u32, u32)>,
    /// RSS contexts besides the default (`None`: unknown).
    pub rss_contexts: Option<usize>,
    /// Memory-provider bindings in force (dma-buf or io_uring on queues, page pools).
    pub bindings: Vec<String>,
    /// What could not be read, and why.
    pub notes: Vec<String>,
    /// What the judgement uses.
    pub facts: IfaceFacts,
    /// Trials on this interface (`--active`).
    pub trials: Trials,
    /// The verdicts.
    pub mechanisms: Vec<(Mechanism, Finding)>,
    /// Whether AF_XDP copy-mode TX avoids the copy here (inferred, see the module docs).
    pub generic_zc_xmit: GenericZcXmit,
    /// The per-queue AF_XDP bind trial (`--active` with one interface named; `None`: not run).
    pub xsk_queues: Option<QueueTrials>,
}

/// Whether the `ethtool` command is installed: an executable file named `ethtool` in a
/// directory of `PATH`. Remedies name `ethtool` only when it is (zcnet itself reaches the same
/// settings through ethtool netlink, without it).
pub fn ethtool_installed() -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join("ethtool"))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// What the probe reads about interface `name` of the calling thread's network namespace
/// (no trials), for a refusal that needs to know whether the device itself could: `None`
/// when there is no such interface or the interfaces cannot be listed.
pub fn iface_facts(name: &str) -> Option<IfaceFacts> {
    let link = list().ok()?.into_iter().find(|l| l.name == name)?;
    Some(gather(&link, &mut Families::open()).facts)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn pool(
        id: u64,
        dmabuf: Option<u32>,
        io_uring: bool,
        detached: bool,
    ) -> zcnet_netlink::netdev::PagePoolInfo {
        zcnet_netlink::netdev::PagePoolInfo {
            id,
            ifindex: Some(7),
            napi_id: None,
            inflight: Some(3),
            inflight_mem: None,
            detach_time: detached.then_some(100),
            dmabuf,
            io_uring,
        }
    }

    #[zcnet_testkit::test]
    fn a_detached_provider_pool_is_a_note_not_a_binding() {
        let mut other = pool(5, None, true, false);
        other.ifindex = Some(8);
        let pools = [
            pool(1, None, false, false), // an ordinary pool: neither
            pool(2, None, true, false),
            pool(3, Some(9), false, false),
            pool(4, None, true, true),
            other,
        ];
        let (bound, lingering) = pool_bindings(&pools, 7);
        assert_eq!(
            bound,
            [
                "page pool 2: io_uring zcrx",
                "page pool 3: dma-buf binding 9"
            ]
        );
        assert_eq!(lingering.len(), 1, "{lingering:?}");
        assert!(
            lingering[0].starts_with("page pool 4 (io_uring zcrx) is detached"),
            "{lingering:?}"
        );
        assert!(
            lingering[0].contains("its 3 buffer(s) in flight"),
            "{lingering:?}"
        );
    }

    /// One netlink message as the kernel writes it.
    fn msg(kind: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&((NLMSG_HDRLEN + payload.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&7u32.to_ne_bytes());
        m.extend_from_slice(payload);
        m.resize(m.len().next_multiple_of(4), 0);
        m
    }

    fn attr(kind: u16, data: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend_from_slice(&((NLA_HDRLEN + data.len()) as u16).to_ne_bytes());
        a.extend_from_slice(&kind.to_ne_bytes());
        a.extend_from_slice(data);
        a.resize(a.len().next_multiple_of(4), 0);
        a
    }

    /// An RTM_NEWLINK payload: ifinfomsg, then the name and other attributes.
    fn newlink(index: u32, flags: u32, name: &str, more: &[Vec<u8>]) -> Vec<u8> {
        let mut p = vec![0u8, 0];
        p.extend_from_slice(&1u16.to_ne_bytes()); // ARPHRD_ETHER
        p.extend_from_slice(&index.to_ne_bytes());
        p.extend_from_slice(&flags.to_ne_bytes());
        p.extend_from_slice(&0u32.to_ne_bytes());
        p.extend(attr(IFLA_IFNAME, format!("{name}\0").as_bytes()));
        for m in more {
            p.extend_from_slice(m);
        }
        p
    }

    #[zcnet_testkit::test]
    fn request_is_a_dump_of_every_link_without_stats() {
        let r = link_dump_request(9);
        let m: Vec<_> = messages(&r).map(|m| m.unwrap()).collect();
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].header.kind, RTM_GETLINK);
        assert_eq!(m[0].header.flags, NLM_F_REQUEST | NLM_F_DUMP);
        assert_eq!(m[0].header.seq, 9);
        assert_eq!(&m[0].payload[..IFINFOMSG_LEN], &[0u8; IFINFOMSG_LEN]);
        let a: Vec<_> = Attrs::new(&m[0].payload[IFINFOMSG_LEN..])
            .map(|a| a.unwrap())
            .collect();
        assert_eq!(a.len(), 1);
        assert_eq!(
            (a[0].kind(), a[0].u32().unwrap()),
            (IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS)
        );
    }

    /// A link dump whose datagrams keep coming without its end (a kernel that trickles, or a
    /// socket that gets another exchange's answers) is given up at its deadline, as every other
    /// netlink exchange is: before, only a receive that waited 5 s for nothing ended it, so a
    /// trickle kept the probe (and `zcnet nic`'s reads) waiting for good. Simulated: a kernel
    /// that never ends its dump cannot be made here.
    #[zcnet_testkit::test]
    fn a_link_dump_that_never_ends_is_given_up_at_its_deadline() {
        let start = Instant::now();
        let until = start + std::time::Duration::from_millis(200);
        let mut sent = Vec::new();
        let mut fed = 0u32;
        let r = dump_links(
            |req| {
                sent.push(messages(req).next().unwrap().unwrap().header.seq);
                Ok(())
            },
            |buf| {
                // One link each time, of this dump (seq 1), never NLMSG_DONE.
                std::thread::sleep(std::time::Duration::from_millis(1));
                fed += 1;
                let d = msg(RTM_NEWLINK, 2, 1, &newlink(fed, 0, "trickle", &[]));
                buf[..d.len()].copy_from_slice(&d);
                Ok(d.len())
            },
            until,
        );
        let e = r.expect_err("no end");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        assert!(start.elapsed() < std::time::Duration::from_secs(2));
        assert_eq!(sent, [1]);
        assert!(fed > 10, "datagrams kept coming: {fed}");
        // A silent socket (its receive timeout, EAGAIN) is waited on until the deadline too.
        let until = Instant::now() + std::time::Duration::from_millis(50);
        let e = dump_links(|_| Ok(()), |_| Err(io::ErrorKind::WouldBlock.into()), until)
            .expect_err("nothing came");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
    }

    #[zcnet_testkit::test]
    fn parses_a_link_dump() {
        let mut d = msg(
            RTM_NEWLINK,
            2,
            5,
            &newlink(1, IFF_UP | IFF_LOOPBACK | 0x40, "lo", &[]),
        );
        // A late answer to another request: skipped.
        d.extend(msg(RTM_NEWLINK, 2, 4, &newlink(9, 0, "old", &[])));
        d.extend(msg(
            RTM_NEWLINK,
            2,
            5,
            &newlink(
                2,
                0x1003,
                "eth0",
                &[
                    attr(IFLA_NUM_RX_QUEUES, &4u32.to_ne_bytes()),
                    attr(IFLA_PARENT_DEV_NAME, b"virtio0\0"),
                ],
            ),
        ));
        let (mut out, mut intr) = (Vec::new(), false);
        assert!(!feed_links(&d, 5, &mut out, &mut intr).unwrap());
        let done = msg(NLMSG_DONE, 2 | NLM_F_DUMP_INTR, 5, &0i32.to_ne_bytes());
        assert!(feed_links(&done, 5, &mut out, &mut intr).unwrap());
        assert!(intr, "NLM_F_DUMP_INTR is noticed");
        assert_eq!(
            out,
            [
                Link {
                    name: "lo".into(),
                    ifindex: 1,
                    flags: IFF_UP | IFF_LOOPBACK | 0x40,
                    parent: false,
                    num_rx_queues: None,
                },
                Link {
                    name: "eth0".into(),
                    ifindex: 2,
                    flags: 0x1003,
                    parent: true,
                    num_rx_queues: Some(4),
                },
            ]
        );
        let fake = Link {
            name: "x".into(),
            ifindex: 3,
            flags: 0,
            parent: false,
            num_rx_queues: None,
        };
        assert_eq!(kind(&out[0], None), IfaceKind::Loopback);
        assert_eq!(kind(&out[1], Some("virtio_net")), IfaceKind::Physical);
        assert_eq!(kind(&fake, Some("veth")), IfaceKind::Veth);
        assert_eq!(kind(&fake, Some("tun")), IfaceKind::Virtual);
    }

    #[zcnet_testkit::test]
    fn dump_errors_and_bad_replies_are_errors() {
        let (mut out, mut intr) = (Vec::new(), false);
        let e = msg(NLMSG_DONE, 2, 1, &(-libc::EPERM).to_ne_bytes());
        let e = feed_links(&e, 1, &mut out, &mut intr).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPERM));
        // Too short for struct ifinfomsg; a link without a name.
        for payload in [vec![0u8; 8], newlink(3, 0, "", &[])] {
            let d = msg(RTM_NEWLINK, 2, 1, &payload);
            let e = feed_links(&d, 1, &mut out, &mut intr).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        }
        // A length that runs past the datagram.
        let mut d = msg(RTM_NEWLINK, 2, 1, &newlink(3, 0, "a", &[]));
        d[0] = 200;
        assert!(feed_links(&d, 1, &mut out, &mut intr).is_err());
        assert!(out.is_empty());
    }

    #[zcnet_testkit::test]
    fn lists_the_calling_threads_namespace() {
        let ls = links().unwrap();
        let lo = ls.iter().find(|l| l.name == "lo").unwrap();
        assert!(lo.flags & IFF_LOOPBACK != 0);
        for l in &ls {
            assert_eq!(zcnet_sys::zcrx::if_index(&l.name), Some(l.ifindex), "{l:?}");
        }
        zcnet_testkit::require_root("the private namespace part: unshare(CLONE_NEWNET)");
        let (ls, lo_queues) = std::thread::spawn(|| {
            zcnet_sys::os::unshare_netns().unwrap();
            let ls = links().unwrap();
            let mut et = Ethtool::open().unwrap();
            (ls, rx_queues(1, &mut et))
        })
        .join()
        .unwrap();
        // A new namespace holds only its own loopback device, down.
        assert_eq!(ls.len(), 1, "{ls:?}");
        assert_eq!((ls[0].name.as_str(), ls[0].ifindex), ("lo", 1));
        assert_eq!(ls[0].flags & (IFF_UP | IFF_LOOPBACK), IFF_LOOPBACK);
        // Down, so the netdev family lists no queue and lo has no channels: what is allocated.
        assert_eq!(lo_queues, 1);
    }
}
