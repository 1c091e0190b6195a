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
//! another queue is copied into the area by the kernel (6.18 does not flag it; see "Accounting"
//! below: such bytes are copied per 7.2's statistics, or unknown, never zero-copy by default).
//!
//! With `cfg.dmabuf` set and `cfg.mode` `zcrx` (not `auto`) the area is that dma-buf instead (`IORING_ZCRX_AREA_DMABUF`, Linux
//! 6.16+; e.g. GPU memory): the whole dma-buf, offset 0 and its size (`lseek(SEEK_END)`, which
//! is what 6.18 accepts; `cfg.area_len` is not used). Fragments are lent as
//! [`Location::Device`] ranges (key = offset in the area, `copied` false, counted as zero-copy
//! bytes) with the same refill protocol; the CPU cannot read them ([`super::Receiver::bytes`]
//! is `None`). Their [`super::DeviceSlice::dmabuf_id`] is the ifq's area id (the bits above
//! `IORING_ZCRX_AREA_SHIFT` of the kernel's area token: 0 in 6.18, one area per ifq), not a
//! netdev binding id as with devmem: the dma-buf is the one the caller passed, and `offset` is
//! relative to its start. The kernel cannot copy into device memory, so data it would have to
//! copy (an unsteered flow, payload left in an skb's linear part) ends the connection's
//! request: with `EFAULT` before Linux 6.18, with `ENOMEM` since (`io_alloc_fallback_niov`
//! finds no buffer for a dma-buf area, and `io_zcrx_copy_chunk` says so). Either way that
//! connection fails with the reason and the fix; `ENOMEM` is not taken for a shortage to wait
//! out, which would re-arm a request that fails at once, for good.
//!
//! With `cfg.no_device` (and `cfg.mode` `zcrx`: `auto` never takes it) the ifq has no device
//! (`ZCRX_REG_NODEV`, Linux 7.1+): any TCP connection works, loopback included, and the kernel
//! copies every byte into the area (fragments are [`Location::Host`], `copied` true). Nothing
//! consumes its refill ring by itself, so every publish of refill entries is followed by
//! `ZCRX_CTRL_FLUSH_RQ` (zcnet_sys::zcrx::ZcrxReceiver::flush_refills).
//!
//! Accounting (zcnet_core::rxring::ZcrxCopyAccount): a completion does not say whether the NIC
//! wrote its bytes or the kernel copied them. Without a device every byte is copied; into a
//! dma-buf none is; with a device into host memory the kernel's zcrx statistics (Linux 7.2,
//! asked for at registration) say how many were copied, and where there are none the bytes
//! are counted as unknown ([`super::RxStats::unknown_copy_bytes`]), never as zero-copy.

use super::conns::{Conns, OnRearmError};
use super::copy::recv_error;
use super::{ConnId, Ctx, DeviceSlice, Location, RxBackend, RxConfig, RxMode};
use crate::error::{Error, Result};
use crate::remedy::Remedy;
use crate::text::{Call, Field, Piece, Term, Text};
use std::io;
use std::os::fd::{AsFd, RawFd};
use std::sync::Arc;
use std::time::Duration;
use zcnet_core::rxring::{Frag, RxEvent, ZcrxCopyAccount, ZcrxCopyKnowledge, ZcrxRx};
use zcnet_netlink::netdev::{Netdev, QueueKind};
use zcnet_sys::mem::Mapping;
use zcnet_sys::uring_query::ZcrxCaps;
use zcnet_sys::zcrx::{
    HostRegistration, ZcrxCompletion, ZcrxIfq, ZcrxReceiver, ZCRX_MAX_RQ_ENTRIES,
};

mod refusal;
pub(in crate::rx) use refusal::not_permitted;
use refusal::{nodev_refusal, refusal};

/// The NIC queue a zero-copy backend works on.
#[derive(Debug, Clone)]
pub(super) struct Target {
    pub iface: String,
    pub ifindex: u32,
    pub queue: u32,
}

/// Resolves `cfg.iface` in the calling thread's network namespace and picks the queue:
/// `cfg.queue`, else the interface's last RX queue (the one `zcnet nic setup` reserves).
fn area_of_0_bytes() -> Text {
    crate::text!(
        "zcrx receive area of 0 bytes: the receive area (",
        Field::RxAreaLen,
        ") must be at least a page",
    )
}

pub(super) fn target(cfg: &RxConfig, mode: RxMode) -> Result<Target> {
    // The library names its own field; a command line maps it to its flag (zcnet's `--iface`)
    // and refuses the combination before it gets here.
    let Some(iface) = cfg.iface.clone() else {
        return Err(Error::Unsupported {
            what: crate::text!(
                format!("{mode} receive without an interface ("),
                Field::RxIface,
                " is unset)",
            ),
            source: io::Error::from_raw_os_error(libc::EINVAL),
            remedy: Remedy::Say(&[
                Piece::Str("set "),
                Piece::Term(Term::Field(Field::RxIface)),
                Piece::Str(" to the NIC whose queue the flows are steered to ("),
                Piece::Term(Term::Call(Call::NicSetup {
                    iface: None,
                    queue: None,
                })),
                Piece::Str(" steers them)"),
            ]),
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

/// The `rx_buf_len` to ask for: 0 (the kernel's page) for 0 or a page; a larger power of two
/// up to 2 MiB where the kernel's zcrx query lists `ZCRX_FEATURE_RX_PAGE_SIZE` (asked, never
/// inferred from the release). Anything else is refused before anything is registered.
fn buffer_size(want: usize, caps: &ZcrxCaps) -> Result<u32> {
    let page = zcnet_sys::mem::page_size();
    if want == 0 || want == page {
        return Ok(0);
    }
    if !want.is_power_of_two() || want < page || want > zcnet_sys::mem::HUGE_2M {
        return Err(Error::invalid_input(format!(
            "zcrx buffer size {want} B: it must be a power of two from a page ({page} B) to 2 MiB"
        )));
    }
    if !caps.rx_buf_len() {
        return Err(Error::Unsupported {
            what: format!(
                "io_uring zero-copy receive (zcrx) into {want}-byte buffers (this kernel's zcrx query does not list ZCRX_FEATURE_RX_PAGE_SIZE; Linux 7.0 added it)"
            ).into(),
            source: io::Error::from_raw_os_error(libc::EOPNOTSUPP),
            remedy: Remedy::Other("leave the buffer size at the kernel's default (a page), or run a kernel that lists the feature"),
        });
    }
    // Checked above: at most 2 MiB.
    Ok(want as u32)
}

/// The receive area: anonymous memory, or with buffers larger than a page, reserved 2 MiB
/// huge pages (the kernel needs each buffer physically contiguous: io_uring/zcrx.c
/// `io_area_max_shift`, else `ERANGE`).
fn receive_area(len: usize, rx_buf_len: u32) -> Result<Mapping> {
    if rx_buf_len == 0 {
        return Mapping::anonymous(len).map_err(|e| Error::io("zcrx receive area", e));
    }
    Mapping::huge_tlb(len).map_err(|e| Error::Unsupported {
        what: format!(
            "a zcrx receive area of {len} B in 2 MiB huge pages for {rx_buf_len}-byte buffers (none reserved, or too few)"
        ).into(),
        source: e,
        remedy: Remedy::Other("reserve huge pages (sysctl vm.nr_hugepages=N, N x 2 MiB at least the area) or leave the buffer size at its default"),
    })
}

/// The device range of fragment `frag` of a dma-buf area of `area_len` bytes at `area_offset`
/// of the dma-buf, whose area id is `area_id` (the [`DeviceSlice::dmabuf_id`] zcnet reports for
/// zcrx); `None` when the fragment is not inside the area (the bookkeeping never delivers one).
fn device_slice(area_id: u32, area_offset: u64, area_len: u64, frag: Frag) -> Option<DeviceSlice> {
    let (offset, len) = zcnet_sys::zcrx::dmabuf_range(area_offset, area_len, frag.off, frag.len)?;
    Some(DeviceSlice {
        dmabuf_id: area_id,
        offset,
        len: usize::try_from(len).ok()?,
    })
}

/// The connection's request ended with `errno`: the error to report.
fn request_error(conn: ConnId, errno: i32, dmabuf: bool) -> Error {
    if dmabuf && matches!(errno, libc::EFAULT | libc::ENOMEM) {
        return Error::Unsupported {
            what: format!("zero-copy receive into a dma-buf on connection {conn}: the kernel had data it would have to copy (the flow is not steered to the queue, or header split left payload in the packet's linear part), and it cannot copy into device memory").into(),
            source: io::Error::from_raw_os_error(errno),
            remedy: Remedy::Any(&[Remedy::SteerFlow, Remedy::Staging]),
        };
    }
    recv_error(conn, io::Error::from_raw_os_error(errno))
}

/// One refill entry per buffer (page) of an area of `len` bytes, as a power of two the kernel
/// accepts.
fn rq_entries_for(len: u64) -> u32 {
    let pages = len.div_ceil(zcnet_sys::mem::page_size() as u64);
    (pages.clamp(1, u64::from(ZCRX_MAX_RQ_ENTRIES)) as u32).next_power_of_two()
}

/// The `zcrx` backend.
#[derive(Debug)]
pub(super) struct ZcrxBackend {
    rx: ZcrxReceiver,
    target: Target,
    /// The connections: receiving, waiting to be re-armed (the kernel ended their request:
    /// ENOSPC, ENOMEM, EINTR), or cancelled and waiting for their final completion.
    conns: Conns,
    /// Receiving is paused for want of buffers (counted once per pause).
    starving: bool,
    done: Vec<ZcrxCompletion>,
    /// For a dma-buf area: (area id, offset of the area in the dma-buf, area length).
    device: Option<(u32, u64, u64)>,
    /// Bytes delivered by the completions of the current poll, not yet split.
    unsplit: u64,
    /// Which delivered bytes were copied.
    account: ZcrxCopyAccount,
    /// The readiness fd, registered with the ring at the first [`RxBackend::ready_fd`].
    efd: Option<zcnet_sys::epoll::EventFd>,
}

impl ZcrxBackend {
    pub fn new(cfg: &RxConfig) -> Result<ZcrxBackend> {
        if cfg.no_device && cfg.mode == RxMode::Zcrx {
            return Self::without_device(cfg);
        }
        let target = target(cfg, RxMode::Zcrx)?;
        // Only an explicit zcrx takes the dma-buf: `auto` never chooses device memory, which an
        // application that asked for bytes cannot read (it registers host memory, as before).
        let dmabuf = cfg.dmabuf.as_ref().filter(|_| cfg.mode == RxMode::Zcrx);
        let ifq = match dmabuf {
            Some(dmabuf) => Self::register_dmabuf(&target, dmabuf)?,
            None => {
                if cfg.area_len == 0 {
                    return Err(Error::io(
                        area_of_0_bytes(),
                        io::Error::from_raw_os_error(libc::EINVAL),
                    ));
                }
                let rx_buf_len = buffer_size(cfg.rx_buf_len, &ZcrxCaps::get())?;
                let area = receive_area(cfg.area_len, rx_buf_len)?;
                let reg = HostRegistration {
                    ifindex: target.ifindex,
                    rx_queue: target.queue,
                    rq_entries: rq_entries_for(cfg.area_len as u64),
                    rx_buf_len,
                    nodev: false,
                };
                ZcrxIfq::register_for_receive_with(area, reg)
                    .map_err(|e| refusal(&target, e, None))?
            }
        };
        let device = ifq
            .is_dmabuf()
            .then(|| (ifq.area_id(), 0, ifq.area().len()));
        Self::with_ifq(ifq, target, device)
    }

    /// `cfg.no_device`: an ifq without a network device (`ZCRX_REG_NODEV`, Linux 7.1+).
    fn without_device(cfg: &RxConfig) -> Result<ZcrxBackend> {
        if cfg.iface.is_some() || cfg.queue.is_some() || cfg.dmabuf.is_some() {
            return Err(Error::invalid_input(crate::text!(
                "zcrx without a device (",
                Field::RxNoDevice,
                ") takes no interface, queue or dma-buf: leave them unset",
            )));
        }
        if cfg.area_len == 0 {
            return Err(Error::io(
                area_of_0_bytes(),
                io::Error::from_raw_os_error(libc::EINVAL),
            ));
        }
        let page = zcnet_sys::mem::page_size();
        if cfg.rx_buf_len != 0 && cfg.rx_buf_len != page {
            return Err(Error::invalid_input(format!(
                "zcrx without a device receives into buffers of a page ({page} B): the kernel copies into them and refuses any other size (EOPNOTSUPP); leave the buffer size unset"
            )));
        }
        let caps = ZcrxCaps::get();
        let ifq =
            ZcrxIfq::register_nodev_for_receive(cfg.area_len, rq_entries_for(cfg.area_len as u64))
                .map_err(|e| nodev_refusal(e, caps.nodev(), zcnet_sys::os::kernel_version()))?;
        let target = Target {
            iface: "no device".into(),
            ifindex: 0,
            queue: 0,
        };
        Self::with_ifq(ifq, target, None)
    }

    fn with_ifq(
        ifq: ZcrxIfq,
        target: Target,
        device: Option<(u32, u64, u64)>,
    ) -> Result<ZcrxBackend> {
        // On error the ifq drops here: the ring closes, the kernel unpins everything (and lets
        // go of the dma-buf).
        let rx =
            ZcrxReceiver::new(ifq).map_err(|e| Error::io("zcrx receive area bookkeeping", e))?;
        Ok(ZcrxBackend {
            rx,
            target,
            conns: Conns::default(),
            starving: false,
            done: Vec::new(),
            device,
            unsplit: 0,
            account: ZcrxCopyAccount::new(),
            efd: None,
        })
    }

    /// Where the data comes from, for messages.
    fn source(&self) -> String {
        if self.rx.ifq().is_nodev() {
            "without a device".into()
        } else {
            format!("{} queue {}", self.target.iface, self.target.queue)
        }
    }

    /// What is known now about which delivered bytes the kernel copied (read after draining).
    fn copy_knowledge(&self) -> ZcrxCopyKnowledge {
        let ifq = self.rx.ifq();
        if ifq.is_nodev() {
            ZcrxCopyKnowledge::AllCopied
        } else if ifq.is_dmabuf() {
            ZcrxCopyKnowledge::NoneCopied
        } else {
            match ifq.kernel_stats() {
                Some(st) => ZcrxCopyKnowledge::Counted {
                    copy_bytes: st.copy_bytes,
                },
                None => ZcrxCopyKnowledge::Unknown,
            }
        }
    }

    /// Registers the queue with the whole of `dmabuf` as the area (offset 0, its size: what
    /// Linux 6.18 accepts). A size that cannot be read is passed as 0: the kernel checks the
    /// device first, so a device that cannot do zcrx is still what the error says.
    fn register_dmabuf(target: &Target, dmabuf: &Arc<std::os::fd::OwnedFd>) -> Result<ZcrxIfq> {
        let len = zcnet_sys::devmem::dmabuf_size(dmabuf.as_fd()).unwrap_or(0);
        ZcrxIfq::register_dmabuf_for_receive(
            target.ifindex,
            target.queue,
            Arc::clone(dmabuf),
            0,
            len,
            rq_entries_for(len),
        )
        .map_err(|e| refusal(target, e, Some(len)))
    }

    /// Keeps the connection from holding more than half the area (see
    /// [`super::socket_limit`]). Only an area a NIC writes into: without a device the kernel
    /// copies from ordinary pages at receive time.
    fn limit_socket(&self, conn: ConnId, fd: RawFd) -> Result<()> {
        let ifq = self.rx.ifq();
        if ifq.is_nodev() {
            return Ok(());
        }
        super::socket_limit::limit_to_half_area(conn, fd, ifq.area().len())
    }

    fn arm(&mut self, conn: ConnId, fd: RawFd) -> Result<()> {
        let source = self.source();
        self.rx.arm(fd, conn.0).map_err(|e| {
            Error::io(
                format!("arming zero-copy receive on connection {conn} ({source})"),
                e,
            )
        })
    }

    /// Returns released fragments to the kernel; notes a pause when the application holds (or
    /// has not yet handed back) every buffer of the area, or the refill ring is full.
    fn refill(&mut self, ctx: &mut Ctx<'_>) -> Result<()> {
        let f = self.rx.flush_refills().map_err(|e| {
            Error::io(
                "returning buffers to a zcrx ifq without a device (IORING_REGISTER_ZCRX_CTRL, ZCRX_CTRL_FLUSH_RQ)",
                e,
            )
        })?;
        let core: &ZcrxRx = self.rx.core();
        let starving = f.waiting > 0 || core.stats().bufs_in_kernel == 0;
        if starving && !self.starving {
            ctx.stats.starved += 1;
        }
        self.starving = starving;
        Ok(())
    }

    /// Re-arms connections whose request the kernel ended, unless no buffer is free (the
    /// kernel would end it again at once): they wait for the application to give some back.
    /// A connection that cannot be re-armed has failed (the others go on).
    fn rearm_waiting(&mut self, ctx: &mut Ctx<'_>) {
        if !self.conns.any_waiting() || self.rx.core().stats().bufs_in_kernel == 0 {
            return;
        }
        let mut conns = std::mem::take(&mut self.conns);
        let r = conns.rearm_waiting(OnRearmError::FailConnection, |conn, fd| self.arm(conn, fd));
        self.conns = conns;
        ctx.stats.rearms += r.count;
        for (conn, e) in r.failed {
            ctx.failed(conn, e);
        }
    }

    fn complete(&mut self, ctx: &mut Ctx<'_>, c: ZcrxCompletion) {
        let conn = ConnId(c.cqe.user_data);
        // The bookkeeping disarms a request at its final completion.
        let ended = !self.rx.is_armed(conn.0);
        if let Some(closable) = self.conns.detached_completion(conn, ended) {
            // Data that raced the cancel goes back at once; the socket is done with.
            if let Ok(RxEvent::Data { frag, .. }) = c.event {
                let _ = self.rx.release(frag);
            }
            if closable {
                ctx.closable.push(conn);
            }
            return;
        }
        match c.event {
            Ok(RxEvent::Data { frag, more, .. }) => {
                if !self.conns.contains(conn) {
                    // Not ours to lend (cannot happen: every armed request is receiving or
                    // detached); give it straight back.
                    let _ = self.rx.release(frag);
                    return;
                }
                let loc = match self.device {
                    None => Location::Host,
                    Some((id, off, len)) => match device_slice(id, off, len, frag) {
                        Some(d) => Location::Device(d),
                        // Cannot happen: the bookkeeping checked it against the area.
                        None => {
                            let _ = self.rx.release(frag);
                            return;
                        }
                    },
                };
                self.unsplit += u64::from(frag.len);
                let copied = self.rx.ifq().is_nodev();
                ctx.deliver_unsplit(conn, frag.off, frag.len as usize, loc, copied);
                if !more {
                    self.conns.wait(conn);
                }
            }
            Ok(RxEvent::Eof { .. }) => {
                self.conns.end(conn);
                ctx.eof(conn);
            }
            // `Done` ends a request with a byte limit; zcnet arms without one, so treat it as a
            // request that needs re-arming.
            // A dma-buf area takes no copies: ENOMEM there is data the kernel would have had
            // to copy (Linux 6.18+), not a shortage to wait out.
            Ok(RxEvent::Rearm {
                errno: libc::ENOMEM,
                ..
            }) if self.device.is_some() => {
                if self.conns.end(conn) {
                    ctx.failed(conn, request_error(conn, libc::ENOMEM, true));
                }
            }
            Ok(RxEvent::Rearm { .. }) | Ok(RxEvent::Done { .. }) => self.conns.wait(conn),
            Ok(RxEvent::Error { errno, .. }) => {
                if self.conns.end(conn) {
                    ctx.failed(conn, request_error(conn, errno, self.device.is_some()));
                }
            }
            Err(e) => {
                // A completion that contradicts the protocol: nothing was recorded for it.
                // Stop this connection (cancel if the request goes on) and say so.
                let rx = &mut self.rx;
                let armed = rx.is_armed(conn.0);
                if !self.conns.fail(conn, armed, || rx.cancel(conn.0).is_ok()) {
                    return;
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
        self.limit_socket(conn, fd)?;
        self.conns.insert(conn, fd);
        if let Err(e) = self.arm(conn, fd) {
            self.conns.end(conn);
            return Err(e);
        }
        Ok(())
    }

    fn remove(&mut self, conn: ConnId) -> bool {
        // Not armed (ended already, or waiting for a re-arm), or the cancel could not be
        // queued: the kernel holds its own reference to the socket for a request still running,
        // so the fd may close; completions that still come are given back unread.
        let rx = &mut self.rx;
        let armed = rx.is_armed(conn.0);
        self.conns.remove(conn, armed, || rx.cancel(conn.0).is_ok())
    }

    fn release(&mut self, key: u64, len: usize) {
        // A key that is not held cannot come from a live RxBuf; ignore rather than panic.
        if let Ok(len) = u32::try_from(len) {
            let _ = self.rx.release(Frag { off: key, len });
        }
    }

    fn poll(&mut self, ctx: &mut Ctx<'_>, timeout: Duration) -> Result<()> {
        self.refill(ctx)?;
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
        let alloc_fails = self.rx.events().alloc_fail;
        self.rx.drain(|c| done.push(c));
        for c in done.drain(..) {
            self.complete(ctx, c);
        }
        self.done = done;
        // ZCRX_EVENT_ALLOC_FAIL: the device found no free buffer (the application holds them
        // all, or they wait to be refilled): a pause the kernel saw, even if this side did not.
        if self.rx.events().alloc_fail > alloc_fails && !self.starving {
            ctx.stats.starved += 1;
            self.starving = true;
        }
        if self.unsplit > 0 {
            let known = self.copy_knowledge();
            ctx.account_split(
                self.account
                    .account(std::mem::take(&mut self.unsplit), known),
            );
        }
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

    fn ready_fd(&mut self) -> Result<std::os::fd::BorrowedFd<'_>> {
        let ifq = self.rx.ifq();
        let efd = crate::engine::ready_eventfd(&mut self.efd, |e| ifq.register_eventfd(e))?;
        Ok(efd.as_fd())
    }

    fn waker(&self) -> Option<zcnet_sys::epoll::EventFd> {
        self.efd.as_ref().and_then(|e| e.try_clone().ok())
    }

    fn starving(&self) -> bool {
        self.starving
    }
}

#[cfg(test)]
mod tests;
