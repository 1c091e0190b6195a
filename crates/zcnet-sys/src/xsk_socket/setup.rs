//! Making a socket: registering its UMEM (or sharing another socket's), sizing and mapping its
//! four rings, and binding it to a queue.

use super::{invalid, UmemFrame, XdpSocket, XdpSocketConfig};
use crate::mem::Mapping;
use crate::xsk::{
    getsockopt, setsockopt, SockaddrXdp, XdpDesc, XdpMmapOffsets, XdpUmemReg, AF_XDP, BUSY_PAUSE,
    BUSY_RETRIES, XDP_MMAP_OFFSETS, XDP_PGOFF_RX_RING, XDP_PGOFF_TX_RING, XDP_RX_RING,
    XDP_SHARED_UMEM, XDP_TX_RING, XDP_UMEM_COMPLETION_RING, XDP_UMEM_FILL_RING,
    XDP_UMEM_PGOFF_COMPLETION_RING, XDP_UMEM_PGOFF_FILL_RING, XDP_UMEM_REG, XDP_USE_NEED_WAKEUP,
};
use crate::xsk_ring::MappedRing;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use zcnet_core::xsk::{Consumer, Frames, Producer};

/// A fresh AF_XDP socket.
pub(super) fn xsk_fd() -> io::Result<OwnedFd> {
    // SAFETY: socket() takes only integers; a non-negative result is a new fd owned below.
    let raw = crate::cvt(unsafe { libc::socket(AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: raw is a fresh fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// The four rings of a socket, sized (setsockopt) and mapped at the offsets it reports.
struct Rings {
    fill: MappedRing<u64>,
    comp: MappedRing<u64>,
    rx: MappedRing<XdpDesc>,
    tx: MappedRing<XdpDesc>,
}

fn size_and_map(fd: BorrowedFd<'_>, cfg: &XdpSocketConfig) -> io::Result<Rings> {
    for (opt, n) in [
        (XDP_UMEM_FILL_RING, cfg.fill_size),
        (XDP_UMEM_COMPLETION_RING, cfg.comp_size),
        (XDP_RX_RING, cfg.rx_size),
        (XDP_TX_RING, cfg.tx_size),
    ] {
        setsockopt(fd, opt, &n)?;
    }
    let off: XdpMmapOffsets = getsockopt(fd, XDP_MMAP_OFFSETS)?;
    Ok(Rings {
        fill: MappedRing::map(fd, XDP_UMEM_PGOFF_FILL_RING, &off.fr, cfg.fill_size)?,
        comp: MappedRing::map(fd, XDP_UMEM_PGOFF_COMPLETION_RING, &off.cr, cfg.comp_size)?,
        rx: MappedRing::map(fd, XDP_PGOFF_RX_RING, &off.rx, cfg.rx_size)?,
        tx: MappedRing::map(fd, XDP_PGOFF_TX_RING, &off.tx, cfg.tx_size)?,
    })
}

/// Binds, retrying `EBUSY` (the queue's previous socket not released yet) 10 times, 20 ms
/// apart. A failed bind leaves the socket unbound (net/xdp/xsk.c `xsk_bind` sets XSK_BOUND
/// only on success), so the same socket can try again.
fn bind_retrying(fd: BorrowedFd<'_>, sa: &SockaddrXdp) -> io::Result<()> {
    let mut attempt = 0;
    loop {
        match crate::xsk::bind(fd, sa) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && attempt < BUSY_RETRIES => {
                attempt += 1;
                std::thread::sleep(BUSY_PAUSE);
            }
            r => return r,
        }
    }
}

impl XdpSocket {
    /// Registers `umem` (host memory, page-aligned) as the UMEM of a new AF_XDP socket, sizes
    /// and maps its rings and binds it to queue `queue_id` of interface `ifindex` (in the
    /// calling thread's network namespace). Returns the socket and every frame, all with the
    /// application. `EBUSY` at bind (the queue's previous socket not released yet) is retried
    /// 10 times, 20 ms apart. On error everything made so far is closed and unmapped.
    pub fn new(
        umem: Mapping,
        ifindex: u32,
        queue_id: u32,
        cfg: &XdpSocketConfig,
    ) -> io::Result<(XdpSocket, Vec<UmemFrame>)> {
        if !umem.cpu_accessible() {
            return Err(invalid("an AF_XDP UMEM must be host memory".into()));
        }
        if cfg.frame_count == 0 || cfg.umem_len() > umem.len() {
            return Err(invalid(format!(
                "{} frames of {} B do not fit a {} B UMEM mapping",
                cfg.frame_count,
                cfg.frame_size,
                umem.len()
            )));
        }
        let fd = xsk_fd()?;
        let reg = XdpUmemReg {
            addr: umem.addr() as u64,
            len: cfg.umem_len() as u64,
            chunk_size: cfg.frame_size,
            headroom: cfg.headroom,
            ..XdpUmemReg::default()
        };
        // The kernel pins the pages here (xdp_umem_reg), charged to RLIMIT_MEMLOCK unless the
        // caller has CAP_IPC_LOCK. It writes only into frames given on the fill ring.
        setsockopt(fd.as_fd(), XDP_UMEM_REG, &reg)?;
        let rings = size_and_map(fd.as_fd(), cfg)?;
        let mut flags = cfg.mode.flag();
        if cfg.need_wakeup {
            flags |= XDP_USE_NEED_WAKEUP;
        }
        bind_retrying(
            fd.as_fd(),
            &SockaddrXdp {
                sxdp_family: AF_XDP as u16,
                sxdp_flags: flags,
                sxdp_ifindex: ifindex,
                sxdp_queue_id: queue_id,
                sxdp_shared_umem_fd: 0,
            },
        )?;
        let (umem, slots) = umem.into_slots(cfg.frame_size as usize, cfg.frame_count as usize)?;
        let frames = slots
            .into_iter()
            .map(|slot| UmemFrame {
                slot,
                off: 0,
                len: 0,
            })
            .collect();
        Ok((Self::assemble(fd, rings, umem, cfg), frames))
    }

    /// A second socket on the UMEM of `first`, bound to queue `queue_id` of interface `ifindex`
    /// with its own fill, completion, RX and TX rings (`XDP_SHARED_UMEM`,
    /// Documentation/networking/af_xdp.rst "XDP_SHARED_UMEM bind flag"; kernel 5.10+ for other
    /// queues and devices). The queue or the device must differ from `first`'s: the kernel
    /// wants a fill and a completion ring per (device, queue) pair, and refuses them (`EINVAL`)
    /// on a socket that shares `first`'s own queue, which zcnet does not do (two users of one
    /// single-producer fill ring). `cfg` gives the ring sizes; its frame size, frame count,
    /// headroom, mode and need-wakeup must equal `first`'s (`InvalidInput` otherwise): the
    /// kernel takes them from the UMEM and refuses mode flags on a shared bind
    /// (net/xdp/xsk.c `xsk_bind`, `xp_assign_dev_shared` in net/xdp/xsk_buff_pool.c).
    ///
    /// No frame comes with it: the UMEM's frames are those `first`'s [`XdpSocket::new`] handed
    /// out, and any of them may be given to either socket (a [`UmemFrame`] is unique, so a
    /// frame is with one socket or the application at a time; each socket checks what its own
    /// rings hand back). Frames go back to the socket whose rings took them. Errors: the
    /// kernel's errno — `EINVAL` for a queue the device does not have (or `first`'s own
    /// queue), `EBUSY` for a queue another socket is bound to (after the retries of
    /// [`XdpSocket::new`]), `ENODEV` for an unknown interface. On error the new socket is
    /// closed and `first` is unchanged.
    pub fn new_shared(
        first: &XdpSocket,
        ifindex: u32,
        queue_id: u32,
        cfg: &XdpSocketConfig,
    ) -> io::Result<XdpSocket> {
        let f = &first.config;
        if (
            cfg.frame_size,
            cfg.frame_count,
            cfg.headroom,
            cfg.mode,
            cfg.need_wakeup,
        ) != (
            f.frame_size,
            f.frame_count,
            f.headroom,
            f.mode,
            f.need_wakeup,
        ) {
            return Err(invalid(format!(
                "a socket sharing a UMEM has its frame size, frame count, headroom, mode and \
                 need-wakeup ({} x {} B, headroom {}, {}, need-wakeup {}): {} x {} B, headroom {}, \
                 {}, need-wakeup {} were asked for",
                f.frame_count,
                f.frame_size,
                f.headroom,
                f.mode.name(),
                f.need_wakeup,
                cfg.frame_count,
                cfg.frame_size,
                cfg.headroom,
                cfg.mode.name(),
                cfg.need_wakeup
            )));
        }
        Self::share(
            first.fd.as_fd(),
            Arc::clone(&first.umem),
            ifindex,
            queue_id,
            cfg,
        )
    }

    /// [`XdpSocket::new_shared`] with the UMEM's socket given as a bare fd (the tests give it
    /// ones that are not bound AF_XDP sockets).
    pub(super) fn share(
        umem_fd: BorrowedFd<'_>,
        umem: Arc<Mapping>,
        ifindex: u32,
        queue_id: u32,
        cfg: &XdpSocketConfig,
    ) -> io::Result<XdpSocket> {
        let fd = xsk_fd()?;
        // No XDP_UMEM_REG: the UMEM is the other socket's. Its own fill and completion rings.
        let rings = size_and_map(fd.as_fd(), cfg)?;
        bind_retrying(
            fd.as_fd(),
            &SockaddrXdp {
                sxdp_family: AF_XDP as u16,
                // Mode and need-wakeup flags are refused with XDP_SHARED_UMEM: inherited.
                sxdp_flags: XDP_SHARED_UMEM,
                sxdp_ifindex: ifindex,
                sxdp_queue_id: queue_id,
                sxdp_shared_umem_fd: umem_fd.as_raw_fd() as u32,
            },
        )?;
        Ok(Self::assemble(fd, rings, umem, cfg))
    }

    fn assemble(fd: OwnedFd, r: Rings, umem: Arc<Mapping>, cfg: &XdpSocketConfig) -> XdpSocket {
        XdpSocket {
            fill_idx: Producer::new(
                cfg.fill_size,
                r.fill.load_producer(),
                r.fill.load_consumer(),
            ),
            comp_idx: Consumer::new(
                cfg.comp_size,
                r.comp.load_producer(),
                r.comp.load_consumer(),
            ),
            rx_idx: Consumer::new(cfg.rx_size, r.rx.load_producer(), r.rx.load_consumer()),
            tx_idx: Producer::new(cfg.tx_size, r.tx.load_producer(), r.tx.load_consumer()),
            fd,
            fill: r.fill,
            comp: r.comp,
            rx: r.rx,
            tx: r.tx,
            frames: Frames::new(cfg.frame_count, cfg.frame_size),
            held: (0..cfg.frame_count).map(|_| None).collect(),
            umem,
            config: *cfg,
            kicks: 0,
            tx_dropped: 0,
            rx_wakeups: 0,
            tx_pushed: 0,
        }
    }
}
