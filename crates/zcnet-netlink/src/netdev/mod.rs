//! The `netdev` generic netlink family (include/uapi/linux/netdev.h,
//! Documentation/netlink/specs/netdev.yaml): device XDP features, queues, NAPI instances,
//! queue statistics, page pools, and dma-buf bindings.
//!
//! [`Netdev`] is the client; the reply types parse from bytes on their own
//! ([`DevInfo::parse`], ...). Every request is checked against the operations the kernel
//! lists for the family, so a missing operation is reported as [`Error::OpMissing`] naming the
//! kernel that added it.

mod bind;
mod qstats;
mod types;

use std::os::fd::{AsRawFd, BorrowedFd};

pub use bind::{parse_binding_id, RxBinding, TxBinding};
pub use qstats::{QStats, QStatsScope, COUNTER_NAMES};
pub use types::*;

use crate::conn::{GenlConn, Op};
use crate::error::{Error, Result};
use crate::genl::{resolve_on, Family};
use crate::wire::MsgBuilder;

// enum netdev_cmd values (include/uapi/linux/netdev.h).
/// `NETDEV_CMD_DEV_GET`.
pub const CMD_DEV_GET: u8 = 1;
/// `NETDEV_CMD_PAGE_POOL_GET` (Linux 6.8).
pub const CMD_PAGE_POOL_GET: u8 = 5;
/// `NETDEV_CMD_PAGE_POOL_STATS_GET` (needs CONFIG_PAGE_POOL_STATS).
pub const CMD_PAGE_POOL_STATS_GET: u8 = 9;
/// `NETDEV_CMD_QUEUE_GET` (Linux 6.9).
pub const CMD_QUEUE_GET: u8 = 10;
/// `NETDEV_CMD_NAPI_GET` (Linux 6.9).
pub const CMD_NAPI_GET: u8 = 11;
/// `NETDEV_CMD_QSTATS_GET` (Linux 6.10).
pub const CMD_QSTATS_GET: u8 = 12;
/// `NETDEV_CMD_BIND_RX` (Linux 6.12).
pub const CMD_BIND_RX: u8 = 13;
/// `NETDEV_CMD_NAPI_SET` (Linux 6.13).
pub const CMD_NAPI_SET: u8 = 14;
/// `NETDEV_CMD_BIND_TX` (Linux 6.16: the devmem TX series, 8802087d20c0 "TCP tx netlink api").
pub const CMD_BIND_TX: u8 = 15;
/// `NETDEV_CMD_QUEUE_CREATE` (Linux 7.2 has it: the queue-lease series, which adds
/// `NETDEV_A_QUEUE_LEASE`; needs CAP_NET_ADMIN). The newest netdev command known here: the
/// enum netdev_cmd of Linux 7.2's include/uapi/linux/netdev.h ends with it, as the 7.2.13 lab
/// kernel's BTF (/sys/kernel/btf/vmlinux) lists the enum's constants.
pub const CMD_QUEUE_CREATE: u8 = 16;

/// The spec names of the netdev commands, by number (Documentation/netlink/specs/netdev.yaml;
/// enum netdev_cmd in include/uapi/linux/netdev.h, up to Linux 7.2's queue-create). A command
/// past the table is named `op-N` by [`cmd_name`].
pub const CMD_NAMES: [(u8, &str); 16] = [
    (1, "dev-get"),
    (2, "dev-add-ntf"),
    (3, "dev-del-ntf"),
    (4, "dev-change-ntf"),
    (5, "page-pool-get"),
    (6, "page-pool-add-ntf"),
    (7, "page-pool-del-ntf"),
    (8, "page-pool-change-ntf"),
    (9, "page-pool-stats-get"),
    (10, "queue-get"),
    (11, "napi-get"),
    (12, "qstats-get"),
    (13, "bind-rx"),
    (14, "napi-set"),
    (15, "bind-tx"),
    (16, "queue-create"),
];

/// The spec name of netdev command `cmd`, or `op-N` for one newer than this crate.
pub fn cmd_name(cmd: u32) -> String {
    CMD_NAMES
        .iter()
        .find(|(c, _)| u32::from(*c) == cmd)
        .map(|(_, n)| n.to_string())
        .unwrap_or_else(|| format!("op-{cmd}"))
}

fn dev_attr_name(p: &[u16]) -> Option<&'static str> {
    match p {
        [1] => Some("ifindex"),
        _ => None,
    }
}
fn queue_attr_name(p: &[u16]) -> Option<&'static str> {
    match p {
        [1] => Some("id"),
        [2] => Some("ifindex"),
        [3] => Some("type"),
        _ => None,
    }
}
fn napi_attr_name(p: &[u16]) -> Option<&'static str> {
    match p {
        [1] => Some("ifindex"),
        [2] => Some("id"),
        _ => None,
    }
}
fn qstats_attr_name(p: &[u16]) -> Option<&'static str> {
    match p {
        [1] => Some("ifindex"),
        [2] => Some("queue-type"),
        [3] => Some("queue-id"),
        [4] => Some("scope"),
        _ => None,
    }
}
fn pp_attr_name(p: &[u16]) -> Option<&'static str> {
    match p {
        [1] => Some("id"),
        [2] => Some("ifindex"),
        _ => None,
    }
}
pub(crate) fn dmabuf_attr_name(p: &[u16]) -> Option<&'static str> {
    match p {
        [1] => Some("ifindex"),
        [2] => Some("queues"),
        [2, 1] => Some("queues.id"),
        [2, 3] => Some("queues.type"),
        [3] => Some("fd"),
        [4] => Some("id"),
        _ => None,
    }
}

/// dev-get.
pub const OP_DEV_GET: Op = Op {
    name: "dev-get",
    cmd: CMD_DEV_GET,
    needs: "Linux 6.3 or newer",
    attr_name: dev_attr_name,
};
/// page-pool-get.
pub const OP_PAGE_POOL_GET: Op = Op {
    name: "page-pool-get",
    cmd: CMD_PAGE_POOL_GET,
    needs: "Linux 6.8 or newer",
    attr_name: pp_attr_name,
};
/// queue-get.
pub const OP_QUEUE_GET: Op = Op {
    name: "queue-get",
    cmd: CMD_QUEUE_GET,
    needs: "Linux 6.9 or newer",
    attr_name: queue_attr_name,
};
/// napi-get.
pub const OP_NAPI_GET: Op = Op {
    name: "napi-get",
    cmd: CMD_NAPI_GET,
    needs: "Linux 6.9 or newer",
    attr_name: napi_attr_name,
};
/// qstats-get (dump only).
pub const OP_QSTATS_GET: Op = Op {
    name: "qstats-get",
    cmd: CMD_QSTATS_GET,
    needs: "Linux 6.10 or newer",
    attr_name: qstats_attr_name,
};
/// bind-rx.
pub const OP_BIND_RX: Op = Op {
    name: "bind-rx",
    cmd: CMD_BIND_RX,
    needs: "Linux 6.12 or newer",
    attr_name: dmabuf_attr_name,
};
/// bind-tx.
pub const OP_BIND_TX: Op = Op {
    name: "bind-tx",
    cmd: CMD_BIND_TX,
    needs: "Linux 6.16 or newer",
    attr_name: dmabuf_attr_name,
};

/// A client of the netdev family.
#[derive(Debug)]
pub struct Netdev {
    conn: GenlConn,
    family: Family,
}

fn target_ifindex(ifindex: u32) -> String {
    format!("ifindex {ifindex}")
}

impl Netdev {
    /// Opens a socket and resolves the family. Fails with [`Error::FamilyMissing`] on kernels
    /// before 6.3.
    pub fn open() -> Result<Netdev> {
        let mut conn = GenlConn::open()?;
        let family = resolve_on(&mut conn, "netdev", "Linux 6.3 or newer")?;
        Ok(Netdev { conn, family })
    }

    /// What the controller said about the family (id, version, operations).
    pub fn family(&self) -> &Family {
        &self.family
    }

    /// The names of the operations this kernel offers, e.g. `["dev-get", ..., "bind-tx"]`.
    pub fn op_names(&self) -> Vec<String> {
        self.family.ops.iter().map(|o| cmd_name(o.id)).collect()
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

    fn one<T>(
        &mut self,
        op: Op,
        target: &str,
        build: &dyn Fn(&mut MsgBuilder),
        parse: fn(&[u8]) -> Result<T>,
    ) -> Result<T> {
        let r = self.request(op, target, false, build)?;
        let first = r.first().ok_or_else(|| Error::Malformed {
            context: op.name.into(),
            what: "no data message before the ACK".into(),
        })?;
        parse(first).map_err(|e| e.in_context(op.name))
    }

    fn all<T>(
        &mut self,
        op: Op,
        target: &str,
        build: &dyn Fn(&mut MsgBuilder),
        parse: fn(&[u8]) -> Result<T>,
    ) -> Result<Vec<T>> {
        self.request(op, target, true, build)?
            .iter()
            .map(|a| parse(a).map_err(|e| e.in_context(op.name)))
            .collect()
    }

    /// dev-get for one device.
    pub fn dev_get(&mut self, ifindex: u32) -> Result<DevInfo> {
        let t = target_ifindex(ifindex);
        self.one(
            OP_DEV_GET,
            &t,
            &|b| fill_u32(b, dev_attr::IFINDEX, ifindex),
            DevInfo::parse,
        )
    }

    /// dev-get dump: every device in the namespace.
    pub fn dev_dump(&mut self) -> Result<Vec<DevInfo>> {
        self.all(OP_DEV_GET, "", &|_| {}, DevInfo::parse)
    }

    /// queue-get for one queue.
    pub fn queue_get(&mut self, ifindex: u32, kind: QueueKind, id: u32) -> Result<QueueInfo> {
        let t = format!("ifindex {ifindex} {kind:?} queue {id}").to_lowercase();
        self.one(
            OP_QUEUE_GET,
            &t,
            &|b| fill_queue_get(b, ifindex, kind, id),
            QueueInfo::parse,
        )
    }

    /// queue-get dump of one device's queues.
    pub fn queue_dump(&mut self, ifindex: u32) -> Result<Vec<QueueInfo>> {
        let t = target_ifindex(ifindex);
        self.all(
            OP_QUEUE_GET,
            &t,
            &|b| fill_u32(b, queue_attr::IFINDEX, ifindex),
            QueueInfo::parse,
        )
    }

    /// napi-get for one NAPI id.
    pub fn napi_get(&mut self, napi_id: u32) -> Result<NapiInfo> {
        let t = format!("napi {napi_id}");
        self.one(
            OP_NAPI_GET,
            &t,
            &|b| fill_u32(b, napi_attr::ID, napi_id),
            NapiInfo::parse,
        )
    }

    /// napi-get dump of one device's NAPI instances (veth has some only while GRO or XDP is
    /// on).
    pub fn napi_dump(&mut self, ifindex: u32) -> Result<Vec<NapiInfo>> {
        let t = target_ifindex(ifindex);
        self.all(
            OP_NAPI_GET,
            &t,
            &|b| fill_u32(b, napi_attr::IFINDEX, ifindex),
            NapiInfo::parse,
        )
    }

    /// qstats-get dump, for one device or (`None`) all devices that report statistics. A
    /// device without queue statistics answers `EOPNOTSUPP` when asked for by index.
    pub fn qstats_dump(&mut self, ifindex: Option<u32>, scope: QStatsScope) -> Result<Vec<QStats>> {
        let t = ifindex.map(target_ifindex).unwrap_or_default();
        self.all(
            OP_QSTATS_GET,
            &t,
            &|b| fill_qstats(b, ifindex, scope),
            QStats::parse,
        )
    }

    /// page-pool-get for one pool.
    pub fn page_pool_get(&mut self, id: u64) -> Result<PagePoolInfo> {
        let t = format!("page pool {id}");
        self.one(
            OP_PAGE_POOL_GET,
            &t,
            &|b| {
                // NLA_UINT: the kernel accepts 4 or 8 bytes; send the short form when it fits.
                match u32::try_from(id) {
                    Ok(v) => b.put_u32(pp_attr::ID, v),
                    Err(_) => b.put_u64(pp_attr::ID, id),
                };
            },
            PagePoolInfo::parse,
        )
    }

    /// page-pool-get dump (only pools tied to a device are listed).
    pub fn page_pool_dump(&mut self) -> Result<Vec<PagePoolInfo>> {
        self.all(OP_PAGE_POOL_GET, "", &|_| {}, PagePoolInfo::parse)
    }

    /// bind-rx: binds the dma-buf `dmabuf` to RX queues `queues` of `ifindex` (devmem TCP).
    /// The binding lives as long as the returned [`RxBinding`], which owns its own socket.
    /// Needs CAP_NET_ADMIN and a driver with queue-management ops and header split.
    pub fn bind_rx(
        &self,
        ifindex: u32,
        dmabuf: BorrowedFd<'_>,
        queues: &[u32],
    ) -> Result<RxBinding> {
        self.family.require(OP_BIND_RX)?;
        let fd = fd_u32(dmabuf)?;
        bind::bind_rx(&self.family, ifindex, fd, queues)
    }

    /// bind-tx: binds the dma-buf `dmabuf` to `ifindex` for devmem TCP transmit. The binding
    /// lives as long as the returned [`TxBinding`].
    pub fn bind_tx(&self, ifindex: u32, dmabuf: BorrowedFd<'_>) -> Result<TxBinding> {
        self.family.require(OP_BIND_TX)?;
        let fd = fd_u32(dmabuf)?;
        bind::bind_tx(&self.family, ifindex, fd)
    }
}

/// One u32 attribute (the ifindex or id that most requests carry).
pub(crate) fn fill_u32(b: &mut MsgBuilder, attr: u16, v: u32) {
    b.put_u32(attr, v);
}

/// queue-get do: ifindex, type, id (all three are required).
pub(crate) fn fill_queue_get(b: &mut MsgBuilder, ifindex: u32, kind: QueueKind, id: u32) {
    b.put_u32(queue_attr::IFINDEX, ifindex)
        .put_u32(queue_attr::TYPE, kind.value())
        .put_u32(queue_attr::ID, id);
}

/// qstats-get dump filter: ifindex, and scope `queue` for per-queue entries.
pub(crate) fn fill_qstats(b: &mut MsgBuilder, ifindex: Option<u32>, scope: QStatsScope) {
    if let Some(i) = ifindex {
        b.put_u32(qstats::IFINDEX, i);
    }
    if scope == QStatsScope::Queue {
        b.put_u32(qstats::SCOPE, qstats::SCOPE_QUEUE);
    }
}

fn fd_u32(fd: BorrowedFd<'_>) -> Result<u32> {
    u32::try_from(fd.as_raw_fd()).map_err(|_| Error::InvalidInput {
        what: format!("file descriptor {} is negative", fd.as_raw_fd()),
    })
}

#[cfg(test)]
mod tests;
