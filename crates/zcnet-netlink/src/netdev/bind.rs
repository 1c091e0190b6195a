//! dma-buf bindings (bind-rx, bind-tx). The kernel ties a binding to the netlink socket that
//! created it and releases it when that socket closes (net/core/netdev-genl.c), so each
//! binding owns a socket of its own and is released on drop.

use std::os::fd::RawFd;

use zcnet_sys::netlink::NlSocket;

use super::{OP_BIND_RX, OP_BIND_TX};
use crate::conn::{GenlConn, Op};
use crate::error::{Error, Result};
use crate::genl::Family;
use crate::wire::{malformed, Attrs, MsgBuilder};

/// `NETDEV_A_DMABUF_*` (include/uapi/linux/netdev.h).
pub(crate) mod dmabuf_attr {
    pub const IFINDEX: u16 = 1;
    pub const QUEUES: u16 = 2;
    pub const FD: u16 = 3;
    pub const ID: u16 = 4;
}
/// `NETDEV_A_QUEUE_ID` / `NETDEV_A_QUEUE_TYPE` inside a `queues` nest.
const QUEUE_ID: u16 = 1;
const QUEUE_TYPE: u16 = 3;
/// `NETDEV_QUEUE_TYPE_RX`.
const QUEUE_TYPE_RX: u32 = 0;

/// Parses a bind-rx/bind-tx reply: the binding id (`NETDEV_A_DMABUF_ID`).
pub fn parse_binding_id(attrs: &[u8]) -> Result<u32> {
    for a in Attrs::new(attrs) {
        let a = a?;
        if a.kind() == dmabuf_attr::ID {
            return a.u32();
        }
    }
    Err(malformed("bind reply without id"))
}

fn bind(
    family: &Family,
    op: Op,
    ifindex: u32,
    build: &dyn Fn(&mut MsgBuilder),
) -> Result<(NlSocket, u32)> {
    let mut conn = GenlConn::open()?;
    let target = format!("ifindex {ifindex}");
    let replies = conn.exchange(family.id, family.version_u8(), op, &target, false, build)?;
    let first = replies.first().ok_or_else(|| Error::Malformed {
        context: op.name.into(),
        what: "no reply before the ACK".into(),
    })?;
    let id = parse_binding_id(&first.attrs).map_err(|e| e.in_context(op.name))?;
    Ok((conn.into_socket(), id))
}

/// A dma-buf bound to RX queues of a device (devmem TCP receive). Dropping it closes its
/// socket, which makes the kernel unbind the dma-buf.
#[derive(Debug)]
pub struct RxBinding {
    _sock: NlSocket,
    id: u32,
    ifindex: u32,
    queues: Vec<u32>,
}

fn fd_number(fd: RawFd) -> Result<u32> {
    u32::try_from(fd).map_err(|_| Error::InvalidInput {
        what: format!("file descriptor {fd} is negative"),
    })
}

impl RxBinding {
    /// Resolves the netdev family and binds (see [`super::Netdev::bind_rx`]) in one call.
    /// `dmabuf_fd` is passed to the kernel as a number, which checks it (`EBADF`, or a
    /// refusal if it is no dma-buf); nothing here touches the descriptor.
    pub fn bind(ifindex: u32, dmabuf_fd: RawFd, queues: &[u32]) -> Result<RxBinding> {
        let nd = super::Netdev::open()?;
        nd.family().require(OP_BIND_RX)?;
        bind_rx(nd.family(), ifindex, fd_number(dmabuf_fd)?, queues)
    }

    /// The binding id the kernel assigned (what queue-get reports as `dmabuf`).
    pub fn id(&self) -> u32 {
        self.id
    }
    /// The device.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }
    /// The RX queues bound.
    pub fn queues(&self) -> &[u32] {
        &self.queues
    }
}

/// A dma-buf bound to a device for devmem TCP transmit; released on drop like [`RxBinding`].
#[derive(Debug)]
pub struct TxBinding {
    _sock: NlSocket,
    id: u32,
    ifindex: u32,
}

impl TxBinding {
    /// Resolves the netdev family and binds (see [`super::Netdev::bind_tx`]) in one call;
    /// `dmabuf_fd` as for [`RxBinding::bind`].
    pub fn bind(ifindex: u32, dmabuf_fd: RawFd) -> Result<TxBinding> {
        let nd = super::Netdev::open()?;
        nd.family().require(OP_BIND_TX)?;
        bind_tx(nd.family(), ifindex, fd_number(dmabuf_fd)?)
    }

    /// The binding id the kernel assigned (for `SCM_DEVMEM_DMABUF` sends).
    pub fn id(&self) -> u32 {
        self.id
    }
    /// The device.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }
}

/// bind-rx: ifindex, fd, then one `queues` nest (id, type rx) per queue.
pub(crate) fn fill_bind_rx(b: &mut MsgBuilder, ifindex: u32, fd: u32, queues: &[u32]) {
    b.put_u32(dmabuf_attr::IFINDEX, ifindex)
        .put_u32(dmabuf_attr::FD, fd);
    for &q in queues {
        b.nest_begin(dmabuf_attr::QUEUES)
            .put_u32(QUEUE_ID, q)
            .put_u32(QUEUE_TYPE, QUEUE_TYPE_RX)
            .nest_end();
    }
}

/// bind-tx: ifindex, fd.
pub(crate) fn fill_bind_tx(b: &mut MsgBuilder, ifindex: u32, fd: u32) {
    b.put_u32(dmabuf_attr::IFINDEX, ifindex)
        .put_u32(dmabuf_attr::FD, fd);
}

pub(super) fn bind_rx(family: &Family, ifindex: u32, fd: u32, queues: &[u32]) -> Result<RxBinding> {
    if queues.is_empty() {
        return Err(Error::InvalidInput {
            what: "bind-rx needs at least one RX queue".into(),
        });
    }
    let (sock, id) = bind(family, OP_BIND_RX, ifindex, &|b| {
        fill_bind_rx(b, ifindex, fd, queues)
    })?;
    Ok(RxBinding {
        _sock: sock,
        id,
        ifindex,
        queues: queues.to_vec(),
    })
}

pub(super) fn bind_tx(family: &Family, ifindex: u32, fd: u32) -> Result<TxBinding> {
    let (sock, id) = bind(family, OP_BIND_TX, ifindex, &|b| {
        fill_bind_tx(b, ifindex, fd)
    })?;
    Ok(TxBinding {
        _sock: sock,
        id,
        ifindex,
    })
}
