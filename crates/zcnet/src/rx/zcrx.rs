//! `zcrx`: io_uring zero-copy receive. The NIC queue `cfg.queue` of `cfg.iface` is registered
//! with an area of host memory (`IORING_REGISTER_ZCRX_IFQ`, Linux 6.15); each connection gets
//! one multishot `IORING_OP_RECV_ZC`; payload lands in the area and is lent as
//! [`Location::Host`] fragments (key = offset in the area), never copied by zcnet. A dropped
//! [`super::RxBuf`] becomes a refill-ring entry at the next poll (zcnet_sys::zcrx::ZcrxReceiver
//! and zcnet_core::rxring::ZcrxRx hold the rules).
//!
//! What it needs (the kernel checks, in io_uring/zcrx.c; the errors name each one):
//! CAP_NET_ADMIN, a NIC driver with queue-management ops and header split (mlx5, bnxt, gve,
//! fbnic in 6.18), header split on and the queue not used by another memory provider
//! (`zcnet nic setup` does both, and takes the queue out of RSS), and the connections' flows
//! steered to that queue (an ntuple rule). Traffic of an added connection that arrives on
//! another queue is copied into the area by the kernel (6.18 does not flag it, so it is counted
//! as zero-copy; zcnet cannot tell).
//!
//! dma-buf areas (`IORING_ZCRX_AREA_DMABUF`, 6.16+) would deliver [`Location::Device`]
//! ranges with the same refill protocol; zcnet registers host areas only (see ZcrxReceiver).

use super::copy::recv_error;
use super::{ConnId, Ctx, Location, RxBackend, RxConfig, RxMode};
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;
use zcnet_core::rxring::{Frag, RxEvent, ZcrxRx};
use zcnet_netlink::netdev::{Netdev, QueueKind};
use zcnet_sys::zcrx::{ZcrxCompletion, ZcrxIfq, ZcrxReceiver, ZCRX_MAX_RQ_ENTRIES};

/// The NIC queue a zero-copy backend works on.
#[derive(Debug, Clone)]
pub(super) struct Target {
    pub iface: String,
    pub ifindex: u32,
    pub queue: u32,
}

/// Resolves `cfg.iface` in the calling thread's network namespace and picks the queue:
/// `cfg.queue`, else the interface's last RX queue (the one `zcnet nic setup` reserves).
pub(super) fn target(cfg: &RxConfig, mode: RxMode) -> Result<Target> {
    let Some(iface) = cfg.iface.clone() else {
        return Err(Error::Unsupported {
            what: format!("{mode} receive without an interface"),
            source: io::Error::from_raw_os_error(libc::EINVAL),
            fix: "pass --iface IFACE (RxConfig::iface): the NIC whose queue the flows are steered to (see 'zcnet nic setup')",
        });
    };
    let ifindex = zcnet_sys::zcrx::if_index(&iface).ok_or_else(|| Error::UnknownInterface {
        given: iface.clone(),
    })?;
    let queue = cfg.queue.unwrap_or_else(|| last_rx_queue(ifindex));
    Ok(Target {
        iface,
        ifindex,
        queue,
    })
}

/// The highest RX queue id the netdev family lists (it answers for the caller's network
/// namespace, unlike `/sys/class/net`); 0 when it lists none (a down device) or cannot answer.
fn last_rx_queue(ifindex: u32) -> u32 {
    Netdev::open()
        .and_then(|mut nd| nd.queue_dump(ifindex))
        .ok()
        .and_then(|qs| {
            qs.iter()
                .filter(|q| q.kind == QueueKind::Rx)
                .map(|q| q.id)
                .max()
        })
        .unwrap_or(0)
}

/// Why `IORING_REGISTER_ZCRX_IFQ` (or the ring it needs) was refused, and the way out.
fn refusal(t: &Target, e: io::Error) -> Error {
    let (reason, fix) = match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) => (
            "the driver has no queue-management ops or header split; virtual devices such as veth, lo, ifb and tun never have them",
            "use a NIC with header split (mlx5, bnxt, gve, fbnic), run 'zcnet nic setup --iface IFACE', or use --rx uring",
        ),
        Some(libc::EINVAL) => (
            "the kernel refused the setup: header split (tcp-data-split) is off on the queue, or the kernel lacks zcrx (Linux 6.15+)",
            "run 'zcnet nic setup --iface IFACE' (header split on, hds-thresh 0), check 'zcnet probe --iface IFACE', or use --rx uring",
        ),
        Some(libc::ENODEV) => (
            "the interface is not in this network namespace (any more)",
            "check 'ip link' and retry, or use --rx uring",
        ),
        Some(libc::EPERM) | Some(libc::EACCES) => (
            "needs CAP_NET_ADMIN (or io_uring is disabled by kernel.io_uring_disabled)",
            "run it as root (CAP_NET_ADMIN), or use --rx uring",
        ),
        Some(libc::ENOMEM) => (
            "pinning the receive area failed: out of memory, or past RLIMIT_MEMLOCK",
            "raise the locked-memory limit (ulimit -l) or use a smaller --area, or use --rx uring",
        ),
        Some(libc::ERANGE) => (
            "the queue index is past the device's RX queues",
            "pick a --queue below the RX queue count ('ethtool -l IFACE'), or leave --queue out",
        ),
        Some(libc::EEXIST) | Some(libc::EBUSY) => (
            "the queue already has a memory provider (another zcrx area or a devmem binding)",
            "use another --queue, or stop the other user of the queue",
        ),
        Some(libc::ENOSYS) => (
            "the kernel has no io_uring",
            "needs Linux 6.15+ with io_uring; use --rx copy",
        ),
        Some(errno) => (
            zcnet_sys::zcrx::explain_register_errno(errno),
            "needs Linux 6.15+ with CONFIG_IO_URING_ZCRX and a NIC with header split; use --rx uring",
        ),
        None => (
            "the kernel's reply did not fit the refill region",
            "please report this; use --rx uring",
        ),
    };
    Error::Unsupported {
        what: format!(
            "io_uring zero-copy receive (zcrx) on {} queue {} ({reason})",
            t.iface, t.queue
        ),
        source: e,
        fix,
    }
}

/// What happens to the completions of a connection that is no longer received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Detached {
    /// Removed by the application: report it closable at the final completion.
    Removed,
    /// Failed (protocol violation) and cancelled: drop its completions, report nothing more.
    Failed,
}

/// The `zcrx` backend.
#[derive(Debug)]
pub(super) struct ZcrxBackend {
    rx: ZcrxReceiver,
    target: Target,
    /// Connections receiving (armed, or waiting to be re-armed).
    fds: HashMap<ConnId, RawFd>,
    /// Connections whose request the kernel ended (ENOSPC, ENOMEM, EINTR), oldest first.
    rearm: Vec<ConnId>,
    /// Connections whose request was cancelled and whose final completion is awaited.
    detached: HashMap<ConnId, Detached>,
    /// Receiving is paused for want of buffers (counted once per pause).
    starving: bool,
    done: Vec<ZcrxCompletion>,
}

impl ZcrxBackend {
    pub fn new(cfg: &RxConfig) -> Result<ZcrxBackend> {
        let target = target(cfg, RxMode::Zcrx)?;
        if cfg.area_len == 0 {
            return Err(Error::io(
                "zcrx receive area of 0 bytes: give --area a size (default 64M)",
                io::Error::from_raw_os_error(libc::EINVAL),
            ));
        }
        // One refill entry per buffer (page) of the area, as a power of two the kernel accepts.
        let pages = cfg.area_len.div_ceil(zcnet_sys::mem::page_size());
        let rq_entries = (pages.min(ZCRX_MAX_RQ_ENTRIES as usize) as u32).next_power_of_two();
        let ifq =
            ZcrxIfq::register_for_receive(target.ifindex, target.queue, cfg.area_len, rq_entries)
                .map_err(|e| refusal(&target, e))?;
        // On error the ifq drops here: the ring closes, the kernel unpins everything.
        let rx =
            ZcrxReceiver::new(ifq).map_err(|e| Error::io("zcrx receive area bookkeeping", e))?;
        Ok(ZcrxBackend {
            rx,
            target,
            fds: HashMap::new(),
            rearm: Vec::new(),
            detached: HashMap::new(),
            starving: false,
            done: Vec::new(),
        })
    }

    fn arm(&mut self, conn: ConnId) -> Result<()> {
        let fd = *self.fds.get(&conn).ok_or_else(|| {
            Error::io(
                format!("arming connection {conn}"),
                io::Error::from_raw_os_error(libc::ENOENT),
            )
        })?;
        self.rx.arm(fd, conn.0).map_err(|e| {
            Error::io(
                format!(
                    "arming zero-copy receive on connection {conn} ({} queue {})",
                    self.target.iface, self.target.queue
                ),
                e,
            )
        })
    }

    /// Returns released fragments to the kernel; notes a pause when the application holds (or
    /// has not yet handed back) every buffer of the area, or the refill ring is full.
    fn refill(&mut self, ctx: &mut Ctx<'_>) {
        let f = self.rx.flush_refills();
        let core: &ZcrxRx = self.rx.core();
        let starving = f.waiting > 0 || core.stats().bufs_in_kernel == 0;
        if starving && !self.starving {
            ctx.stats.starved += 1;
        }
        self.starving = starving;
    }

    /// Re-arms connections whose request the kernel ended, unless no buffer is free (the
    /// kernel would end it again at once): they wait for the application to give some back.
    /// A connection that cannot be re-armed has failed (the others go on).
    fn rearm_waiting(&mut self, ctx: &mut Ctx<'_>) {
        if self.rearm.is_empty() || self.rx.core().stats().bufs_in_kernel == 0 {
            return;
        }
        for conn in std::mem::take(&mut self.rearm) {
            if !self.fds.contains_key(&conn) {
                continue;
            }
            match self.arm(conn) {
                Ok(()) => ctx.stats.rearms += 1,
                Err(e) => {
                    self.fds.remove(&conn);
                    ctx.failed(conn, e);
                }
            }
        }
    }

    fn complete(&mut self, ctx: &mut Ctx<'_>, c: ZcrxCompletion) {
        let conn = ConnId(c.cqe.user_data);
        if let Some(&d) = self.detached.get(&conn) {
            // Data that raced the cancel goes back at once; the socket is done with.
            if let Ok(RxEvent::Data { frag, .. }) = c.event {
                let _ = self.rx.release(frag);
            }
            // The bookkeeping disarms a request at its final completion.
            if !self.rx.is_armed(conn.0) {
                self.detached.remove(&conn);
                if d == Detached::Removed {
                    ctx.closable.push(conn);
                }
            }
            return;
        }
        match c.event {
            Ok(RxEvent::Data { frag, more, .. }) => {
                if !self.fds.contains_key(&conn) {
                    // Not ours to lend (cannot happen: every armed request is in `fds` or
                    // detached); give it straight back.
                    let _ = self.rx.release(frag);
                    return;
                }
                ctx.deliver(conn, frag.off, frag.len as usize, Location::Host, false);
                if !more {
                    self.rearm.push(conn);
                }
            }
            Ok(RxEvent::Eof { .. }) => {
                self.fds.remove(&conn);
                ctx.eof(conn);
            }
            // `Done` ends a request with a byte limit; zcnet arms without one, so treat it as a
            // request that needs re-arming.
            Ok(RxEvent::Rearm { .. }) | Ok(RxEvent::Done { .. }) => self.rearm.push(conn),
            Ok(RxEvent::Error { errno, .. }) => {
                if self.fds.remove(&conn).is_some() {
                    ctx.failed(conn, recv_error(conn, io::Error::from_raw_os_error(errno)));
                }
            }
            Err(e) => {
                // A completion that contradicts the protocol: nothing was recorded for it.
                // Stop this connection (cancel if the request goes on) and say so.
                if self.fds.remove(&conn).is_none() {
                    return;
                }
                self.rearm.retain(|&r| r != conn);
                if self.rx.is_armed(conn.0) && self.rx.cancel(conn.0).is_ok() {
                    self.detached.insert(conn, Detached::Failed);
                }
                ctx.failed(
                    conn,
                    Error::io(
                        format!("zero-copy receive on connection {conn}: kernel completion contradicts the protocol: {e} (please report this)"),
                        io::Error::from_raw_os_error(libc::EPROTO),
                    ),
                );
            }
        }
    }
}

impl RxBackend for ZcrxBackend {
    fn mode(&self) -> RxMode {
        RxMode::Zcrx
    }

    fn add(&mut self, conn: ConnId, fd: RawFd) -> Result<()> {
        self.fds.insert(conn, fd);
        if let Err(e) = self.arm(conn) {
            self.fds.remove(&conn);
            return Err(e);
        }
        Ok(())
    }

    fn remove(&mut self, conn: ConnId) -> bool {
        self.fds.remove(&conn);
        self.rearm.retain(|&c| c != conn);
        if self.rx.is_armed(conn.0) && self.rx.cancel(conn.0).is_ok() {
            self.detached.insert(conn, Detached::Removed);
            return false;
        }
        // Not armed (ended already, or waiting for a re-arm), or the cancel could not be queued:
        // the kernel holds its own reference to the socket for a request still running, so the
        // fd may close; completions that still come are given back unread.
        if self.rx.is_armed(conn.0) {
            self.detached.insert(conn, Detached::Failed);
        }
        true
    }

    fn release(&mut self, key: u64, len: usize) {
        // A key that is not held cannot come from a live RxBuf; ignore rather than panic.
        if let Ok(len) = u32::try_from(len) {
            let _ = self.rx.release(Frag { off: key, len });
        }
    }

    fn poll(&mut self, ctx: &mut Ctx<'_>, timeout: Duration) -> Result<()> {
        self.refill(ctx);
        self.rearm_waiting(ctx);
        let timeout = if self.starving {
            Duration::ZERO
        } else {
            timeout
        };
        self.rx
            .wait(1, timeout)
            .map_err(|e| Error::io("io_uring_enter (zero-copy receive)", e))?;
        let mut done = std::mem::take(&mut self.done);
        self.rx.drain(|c| done.push(c));
        for c in done.drain(..) {
            self.complete(ctx, c);
        }
        self.done = done;
        Ok(())
    }

    fn bytes(&self, key: u64, len: usize) -> Option<&[u8]> {
        self.rx.bytes(Frag {
            off: key,
            len: u32::try_from(len).ok()?,
        })
    }

    fn held(&self) -> usize {
        self.rx.core().stats().held_fragments as usize
    }
}
