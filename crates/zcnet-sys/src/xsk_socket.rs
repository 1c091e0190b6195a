//! An AF_XDP socket with its UMEM and four mapped rings, moving frames between the application
//! and the kernel (Documentation/networking/af_xdp.rst).
//!
//! ```text
//!   XdpSocket::new(umem: Mapping) ─► (socket, every frame as a UmemFrame)
//!   XdpSocket::new_shared(&first)  ─► a socket on first's UMEM, another queue or device
//!   fill(frames)      UmemFrame ─► fill ring      (kernel writes packets into it)
//!   receive(out)      RX ring   ─► UmemFrame with data span
//!   transmit(frames)  UmemFrame ─► TX ring        (kernel reads it) ; kick_tx() when asked
//!     (or tx_queue(n), TxQueue::push per frame, TxQueue::submit)
//!   complete(out)     completion ring ─► UmemFrame
//! ```
//!
//! Sockets sharing a UMEM (`XDP_SHARED_UMEM`) each have their own four rings and their own
//! frame table ([`zcnet_core::xsk::Frames`], every frame `User` at first): a frame can be
//! given to any of them, since a `UmemFrame` is in one place at a time, and comes back on the
//! rings of the socket it was given to, which is what each table checks.
//!
//! A [`UmemFrame`] is a unique, non-`Clone` piece of the UMEM (a [`Slot`]): the only way to read
//! or write frame bytes. Handing a frame to the kernel moves it into the socket, which keeps it
//! until the kernel gives its address back on the RX or completion ring — so no frame the
//! kernel may write or read is reachable from safe code. Addresses the kernel returns are
//! checked by [`zcnet_core::xsk::Frames`]: one that names a frame the kernel was not given is an
//! `InvalidData` error, never a second owner.
//!
//! Errors seen on Linux 6.18 (net/xdp/xsk.c, xdp_umem.c): `XDP_UMEM_REG` fails with `EINVAL`
//! for an address not page-aligned, a chunk size not a power of two in 2048..=PAGE_SIZE, or a
//! headroom that leaves no room; `ENOBUFS` when pinning would pass RLIMIT_MEMLOCK without
//! CAP_IPC_LOCK; ring sizes not a power of two: `EINVAL`; bind: see [`crate::xsk`].

use crate::mem::{Mapping, Slot};
use crate::xsk::{
    getsockopt, setsockopt, SockaddrXdp, XdpDesc, XdpMmapOffsets, XdpStatistics, XdpUmemReg,
    XskBindMode, AF_XDP, BUSY_PAUSE, BUSY_RETRIES, XDP_MMAP_OFFSETS, XDP_OPTIONS,
    XDP_OPTIONS_ZEROCOPY, XDP_PGOFF_RX_RING, XDP_PGOFF_TX_RING, XDP_RX_RING, XDP_SHARED_UMEM,
    XDP_STATISTICS, XDP_TX_RING, XDP_UMEM_COMPLETION_RING, XDP_UMEM_FILL_RING,
    XDP_UMEM_PGOFF_COMPLETION_RING, XDP_UMEM_PGOFF_FILL_RING, XDP_UMEM_REG, XDP_USE_NEED_WAKEUP,
};
use crate::xsk_ring::MappedRing;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;
use zcnet_core::xsk::{self as core_xsk, Batch, Consumer, FrameState, Frames, Producer};

/// Sizes and options of an [`XdpSocket`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XdpSocketConfig {
    /// Bytes per frame: 2048 or 4096 (a power of two up to the page size).
    pub frame_size: u32,
    /// Frames in the UMEM (`frame_count * frame_size` bytes of the mapping are registered).
    pub frame_count: u32,
    /// Bytes the kernel leaves free in front of received data (beyond its own 256).
    pub headroom: u32,
    /// Fill ring entries (a power of two).
    pub fill_size: u32,
    /// Completion ring entries (a power of two).
    pub comp_size: u32,
    /// RX ring entries (a power of two).
    pub rx_size: u32,
    /// TX ring entries (a power of two).
    pub tx_size: u32,
    /// Bind with `XDP_USE_NEED_WAKEUP`.
    pub need_wakeup: bool,
    /// Copy or zero-copy.
    pub mode: XskBindMode,
}

impl Default for XdpSocketConfig {
    /// 4096 frames of 2048 bytes (8 MiB), 2048-entry rings, need-wakeup, copy mode.
    fn default() -> Self {
        XdpSocketConfig {
            frame_size: 2048,
            frame_count: 4096,
            headroom: 0,
            fill_size: 2048,
            comp_size: 2048,
            rx_size: 2048,
            tx_size: 2048,
            need_wakeup: true,
            mode: XskBindMode::Copy,
        }
    }
}

impl XdpSocketConfig {
    /// Bytes of UMEM this configuration registers.
    pub fn umem_len(&self) -> usize {
        self.frame_count as usize * self.frame_size as usize
    }
}

/// A frame of the UMEM, held by the application: its bytes, and the span that holds a packet
/// (set by [`XdpSocket::receive`], or by the application before [`XdpSocket::transmit`]).
#[derive(Debug)]
pub struct UmemFrame {
    slot: Slot,
    off: u32,
    len: u32,
}

impl UmemFrame {
    /// The frame's index in the UMEM.
    pub fn index(&self) -> u32 {
        self.slot.id()
    }

    /// Bytes in the frame.
    pub fn capacity(&self) -> usize {
        self.slot.len()
    }

    /// The whole frame, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // A UMEM mapping is host memory (checked in XdpSocket::new): bytes are always there.
        self.slot.bytes_mut().unwrap_or_default()
    }

    /// The packet: `len` bytes from `offset`.
    pub fn data(&self) -> &[u8] {
        let b = self.slot.bytes().unwrap_or_default();
        &b[self.off as usize..(self.off + self.len) as usize]
    }

    /// The packet length.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether the packet is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sets the packet span (for transmit). `InvalidInput` when it does not fit the frame.
    pub fn set_data(&mut self, offset: u32, len: u32) -> io::Result<()> {
        if u64::from(offset) + u64::from(len) > self.slot.len() as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a {len} B packet at offset {offset} does not fit a {} B UMEM frame",
                    self.slot.len()
                ),
            ));
        }
        self.off = offset;
        self.len = len;
        Ok(())
    }
}

/// An AF_XDP socket bound to a queue, with its UMEM and rings. Dropping it closes the socket
/// (the kernel unbinds it and removes it from any XSKMAP), unmaps the rings, and releases the
/// UMEM once no frame is left with the application.
#[derive(Debug)]
pub struct XdpSocket {
    // Field order is drop order: the socket closes before the rings and the UMEM go.
    fd: OwnedFd,
    fill: MappedRing<u64>,
    comp: MappedRing<u64>,
    rx: MappedRing<XdpDesc>,
    tx: MappedRing<XdpDesc>,
    fill_idx: Producer,
    comp_idx: Consumer,
    rx_idx: Consumer,
    tx_idx: Producer,
    frames: Frames,
    /// Frames the kernel holds (fill or TX ring), by index.
    held: Vec<Option<Slot>>,
    /// The UMEM: a frame belongs to this socket only if its slot is of this mapping.
    umem: Arc<Mapping>,
    config: XdpSocketConfig,
    kicks: u64,
    /// Frames the device dropped in copy mode (a kick answered `EBUSY`, see [`Self::kick_tx`]).
    tx_dropped: u64,
    /// Receive-path wakeups the fill ring asked for ([`Self::fill`]).
    rx_wakeups: u64,
    /// Descriptors written into the current TX reservation ([`TxQueue`]), not yet published.
    tx_pushed: u32,
}

/// Room reserved on a socket's TX ring ([`XdpSocket::tx_queue`]). Frames pushed go to the
/// kernel at [`TxQueue::submit`], or when the queue is dropped; room not used is given back.
#[derive(Debug)]
pub struct TxQueue<'a> {
    sock: &'a mut XdpSocket,
    batch: Batch,
    done: bool,
}

impl TxQueue<'_> {
    /// Frames that can still be pushed.
    pub fn room(&self) -> usize {
        (self.batch.len - self.sock.tx_pushed) as usize
    }

    /// Writes the TX descriptor of `f` (its span is the packet) into the next reserved entry;
    /// the socket holds the frame until its completion. A frame with an empty span, of another
    /// UMEM, or with no room left comes back with an `InvalidInput` error.
    #[inline]
    pub(crate) fn push(&mut self, f: UmemFrame) -> Result<(), (io::Error, UmemFrame)> {
        match self.describe(&f) {
            Ok(idx) => {
                self.sock.held[idx as usize] = Some(f.slot);
                Ok(())
            }
            Err(e) => Err((e, f)),
        }
    }

    /// `TxQueue::push` of the frame in `*f`, taken out on success (`None` afterwards) and left
    /// there on error; `InvalidInput` for `None` too. For a caller keeping frames in options
    /// of its own: the frame is not copied through an argument.
    #[inline]
    pub fn push_from(&mut self, f: &mut Option<UmemFrame>) -> io::Result<()> {
        let Some(fr) = f.as_ref() else {
            return Err(invalid("no frame to push".into()));
        };
        let idx = self.describe(fr)?;
        self.sock.held[idx as usize] = f.take().map(|fr| fr.slot);
        Ok(())
    }

    /// Checks `f`, marks it sent and writes its descriptor in the next reserved entry; the
    /// caller then moves its slot into `held`. Returns the frame index.
    #[inline]
    fn describe(&mut self, f: &UmemFrame) -> io::Result<u32> {
        if self.sock.tx_pushed == self.batch.len {
            return Err(invalid("no room reserved on the TX ring".into()));
        }
        if !Arc::ptr_eq(f.slot.mapping(), &self.sock.umem) {
            return Err(invalid(format!(
                "UMEM frame {} belongs to another AF_XDP socket",
                f.index()
            )));
        }
        if f.len == 0 {
            return Err(invalid(format!(
                "UMEM frame {} has no packet to send (set_data)",
                f.index()
            )));
        }
        let idx = f.index();
        let addr = self
            .sock
            .frames
            .give_tx(idx, f.off, f.len)
            .map_err(protocol)?;
        self.sock.tx.write(
            self.batch.slot(self.sock.tx_pushed),
            XdpDesc {
                addr,
                len: f.len,
                options: 0,
            },
        );
        self.sock.tx_pushed += 1;
        Ok(idx)
    }

    /// Publishes the frames pushed (a release store of the producer index) and gives back the
    /// room not used. Returns how many went.
    pub fn submit(mut self) -> io::Result<usize> {
        self.finish()
    }

    fn finish(&mut self) -> io::Result<usize> {
        if std::mem::replace(&mut self.done, true) {
            return Ok(0);
        }
        self.sock.finish_tx_reservation()
    }
}

impl Drop for TxQueue<'_> {
    fn drop(&mut self) {
        // Only a producer out of step with itself fails, which `submit` would have reported.
        let _ = self.finish();
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

fn protocol(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("AF_XDP: {e}"))
}

/// Ends a batch of `len` entries peeked from a consumer ring of which the first `taken` were
/// read: those are released (the consumer index to store is returned), the rest are put back
/// for the next peek, so that a reader stopped part-way leaves no entry peeked for good.
fn end_batch(idx: &mut Consumer, len: u32, taken: u32) -> io::Result<u32> {
    idx.unpeek(len - taken).map_err(protocol)?;
    idx.release(taken).map_err(protocol)
}

/// A fresh AF_XDP socket.
fn xsk_fd() -> io::Result<OwnedFd> {
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
    fn share(
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

    /// Whether `other` is on the same UMEM (this socket's, or shared with it).
    pub fn shares_umem_with(&self, other: &XdpSocket) -> bool {
        Arc::ptr_eq(&self.umem, &other.umem)
    }

    /// The socket (for an XSKMAP entry, poll).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The configuration.
    pub fn config(&self) -> &XdpSocketConfig {
        &self.config
    }

    /// Who holds the frames, and how many moved each way.
    pub fn frames(&self) -> &Frames {
        &self.frames
    }

    /// Kicks made by [`Self::kick_tx`] (syscalls).
    pub fn kicks(&self) -> u64 {
        self.kicks
    }

    /// Frames the device dropped instead of sending (copy mode: each kick answered `EBUSY`
    /// is one, whose address still comes back on the completion ring).
    pub fn tx_dropped(&self) -> u64 {
        self.tx_dropped
    }

    /// Frames on the TX ring or not yet completed.
    pub fn frames_in_tx(&self) -> usize {
        self.frames.in_state(FrameState::Tx)
    }

    /// `InvalidInput` when a frame is of another socket's UMEM (its index would name one of
    /// ours, which the application may hold).
    fn check_own(&self, frames: &[UmemFrame]) -> io::Result<()> {
        match frames
            .iter()
            .find(|f| !Arc::ptr_eq(f.slot.mapping(), &self.umem))
        {
            Some(f) => Err(invalid(format!(
                "UMEM frame {} belongs to another AF_XDP socket",
                f.index()
            ))),
            None => Ok(()),
        }
    }

    /// Gives frames to the kernel for receiving, from the end of `frames`, as many as the fill
    /// ring has room for. Returns how many went. When one of those is of another socket, the
    /// call is `InvalidInput` and nothing goes. A frame the frame table refuses (only a table
    /// out of step with the rings) is an error with the reservation finished: the frames
    /// before it go, it and the rest stay in `frames`.
    pub fn fill(&mut self, frames: &mut Vec<UmemFrame>) -> io::Result<usize> {
        let fill = &self.fill;
        let b = self
            .fill_idx
            .reserve(frames.len() as u32, || fill.load_consumer())
            .map_err(protocol)?;
        // Only the frames that go are checked: `frames` is often all of a socket's spare
        // frames, and checking every one on every call cost more than the receive itself
        // (measured with `zcnet bench xsk`).
        if let Err(e) = self.check_own(&frames[frames.len() - b.len as usize..]) {
            self.fill_idx.cancel(b.len).map_err(protocol)?;
            return Err(e);
        }
        let (mut written, mut failed) = (0, None);
        for slot in b.slots() {
            let Some(f) = frames.pop() else { break };
            let idx = f.index();
            match self.frames.give_fill(idx) {
                Ok(addr) => {
                    self.fill.write(slot, addr);
                    self.held[idx as usize] = Some(f.slot);
                    written += 1;
                }
                Err(e) => {
                    frames.push(f);
                    failed = Some(protocol(e));
                    break;
                }
            }
        }
        // The reservation ends here whatever happened: the entries written go, the rest is
        // given back (left reserved, the next fill would publish them, stale, before its own).
        self.fill_idx.cancel(b.len - written).map_err(protocol)?;
        let p = self.fill_idx.submit(written).map_err(protocol)?;
        self.fill.store_producer(p);
        if let Some(e) = failed {
            return Err(e);
        }
        // A driver that ran out of fill entries stopped and set XDP_RING_NEED_WAKEUP on the
        // fill ring (zero-copy drivers do, include/uapi/linux/if_xdp.h): with entries back it
        // must be woken, or nothing more is received however long the caller polls the RX ring
        // without a system call.
        if written > 0
            && self.config.need_wakeup
            && core_xsk::fill_wakeup_needed(true, self.fill.load_flags())
        {
            self.wake_rx()?;
        }
        Ok(written as usize)
    }

    /// Wakes the driver's receive path (`recvfrom` of nothing, `MSG_DONTWAIT`: xsk_recvmsg
    /// kicks the driver's NAPI). `EAGAIN`, `EBUSY`, `ENOBUFS` and `EINTR` only mean try later.
    fn wake_rx(&mut self) -> io::Result<()> {
        self.rx_wakeups += 1;
        // SAFETY: a zero-length recvfrom with null buffer and address: the kernel writes no
        // user memory (xsk_recvmsg only wakes the driver).
        let r = unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            let e = crate::last_err();
            match e.raw_os_error() {
                Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::EINTR) => {}
                _ => return Err(e),
            }
        }
        Ok(())
    }

    /// Receive-path wakeups made because the fill ring asked for them.
    pub fn rx_wakeups(&self) -> u64 {
        self.rx_wakeups
    }

    /// Queues frames for transmission, from the front of `frames` (each frame's span is the
    /// packet), as many as the TX ring has room for; those queued are removed from `frames`.
    /// Nothing is sent until [`Self::kick_tx`] (copy mode) or the driver's next poll. A frame
    /// with an empty span, or of another socket, is `InvalidInput` and nothing is queued.
    pub fn transmit(&mut self, frames: &mut Vec<UmemFrame>) -> io::Result<usize> {
        self.check_own(frames)?;
        if let Some(f) = frames.iter().find(|f| f.len == 0) {
            return Err(invalid(format!(
                "UMEM frame {} has no packet to send (set_data)",
                f.index()
            )));
        }
        let mut q = self.tx_queue(frames.len())?;
        let n = q.room();
        for f in frames.drain(..n) {
            // Checked above: only a frame table out of step with the rings fails here.
            q.push(f).map_err(|(e, _)| e)?;
        }
        q.submit()
    }

    /// Reserves room for up to `want` frames on the TX ring (fewer when it has less, maybe
    /// none): `TxQueue::push` frames into it, then [`TxQueue::submit`] them. For callers that
    /// keep their frames in their own containers ([`Self::transmit`] takes a `Vec`).
    pub fn tx_queue(&mut self, want: usize) -> io::Result<TxQueue<'_>> {
        // A queue forgotten rather than dropped (`mem::forget` is safe) left its reservation:
        // finish it as its drop would have, or this queue's entries would come after entries
        // never published, and its submit would publish the old ones, stale included.
        if self.tx_idx.reserved() > 0 {
            self.finish_tx_reservation()?;
        }
        let want = u32::try_from(want).unwrap_or(u32::MAX);
        let tx = &self.tx;
        let batch = self
            .tx_idx
            .reserve(want, || tx.load_consumer())
            .map_err(protocol)?;
        Ok(TxQueue {
            sock: self,
            batch,
            done: false,
        })
    }

    /// Publishes the descriptors pushed into the TX reservation (a release store of the
    /// producer index) and gives back the room not used; how many went.
    fn finish_tx_reservation(&mut self) -> io::Result<usize> {
        let pushed = std::mem::take(&mut self.tx_pushed);
        let unused = self.tx_idx.reserved() - pushed;
        self.tx_idx.cancel(unused).map_err(protocol)?;
        let p = self.tx_idx.submit(pushed).map_err(protocol)?;
        self.tx.store_producer(p);
        Ok(pushed as usize)
    }

    /// TX descriptors published and not yet taken by the kernel (reads its index).
    pub(crate) fn tx_pending(&mut self) -> io::Result<u32> {
        let tx = &self.tx;
        self.tx_idx
            .refresh(|| tx.load_consumer())
            .map_err(protocol)?;
        Ok(self.tx_idx.pending())
    }

    /// Wakes the kernel to transmit (`sendto(MSG_DONTWAIT)` of nothing) when descriptors are
    /// pending and — with need-wakeup — the TX ring asks for it
    /// ([`zcnet_core::xsk::tx_kick_needed`]). In copy mode one kick sends at most the kernel's
    /// TX budget (32 frames by default) and the ring keeps asking; `EAGAIN`, `EBUSY` and
    /// `ENOBUFS` (the kernel is busy or out of completion room: try again after
    /// [`Self::complete`]) are not errors. Returns whether a syscall was made.
    pub fn kick_tx(&mut self) -> io::Result<bool> {
        let pending = self.tx_pending()?;
        if !core_xsk::tx_kick_needed(self.config.need_wakeup, self.tx.load_flags(), pending) {
            return Ok(false);
        }
        self.kicks += 1;
        // SAFETY: a zero-length sendto with null buffers and no address: the kernel reads no
        // user memory (xsk_sendmsg only triggers transmission of the TX ring).
        let r = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        };
        if r < 0 {
            let e = crate::last_err();
            match e.raw_os_error() {
                // Copy mode (net/xdp/xsk.c __xsk_generic_xmit): the device answered
                // NET_XMIT_DROP for one frame, "completed but not sent": its address goes on
                // the completion ring like a sent one's, and the kernel stops the kick there.
                Some(libc::EBUSY) => self.tx_dropped += 1,
                // EAGAIN: the device is busy or the completion ring full (try again); EINTR.
                Some(libc::EAGAIN | libc::ENOBUFS | libc::EINTR) => {}
                _ => return Err(e),
            }
        }
        Ok(true)
    }

    /// Takes back up to `max` transmitted frames from the completion ring into `out`. An entry
    /// the frame table refuses (only a table out of step with the rings) is an error; the
    /// frames before it are taken and their entries released, it and the rest stay unread.
    pub fn complete(&mut self, out: &mut Vec<UmemFrame>, max: u32) -> io::Result<usize> {
        let comp = &self.comp;
        let b = self
            .comp_idx
            .peek(max, || comp.load_producer())
            .map_err(protocol)?;
        let mut taken = 0;
        let r = b.slots().try_for_each(|slot| {
            let addr = self.comp.read(slot);
            let idx = self.frames.on_complete(addr).map_err(protocol)?;
            let slot = self.held[idx as usize]
                .take()
                .ok_or_else(|| protocol(format!("frame {idx} completed but not held")))?;
            out.push(UmemFrame {
                slot,
                off: 0,
                len: 0,
            });
            taken += 1;
            Ok(())
        });
        let c = end_batch(&mut self.comp_idx, b.len, taken)?;
        self.comp.store_consumer(c);
        r.map(|()| taken as usize)
    }

    /// Takes up to `max` received frames from the RX ring into `out`, each with its packet
    /// span. A descriptor the frame table refuses (only a table out of step with the rings) is
    /// an error; the frames before it are taken and their entries released, it and the rest
    /// stay unread.
    pub fn receive(&mut self, out: &mut Vec<UmemFrame>, max: u32) -> io::Result<usize> {
        let rx = &self.rx;
        let b = self
            .rx_idx
            .peek(max, || rx.load_producer())
            .map_err(protocol)?;
        let mut taken = 0;
        let r = b.slots().try_for_each(|slot| {
            let d = self.rx.read(slot);
            let span = self.frames.on_rx(d.addr, d.len).map_err(protocol)?;
            let slot = self.held[span.frame as usize]
                .take()
                .ok_or_else(|| protocol(format!("frame {} received but not held", span.frame)))?;
            out.push(UmemFrame {
                slot,
                off: span.offset,
                len: span.len,
            });
            taken += 1;
            Ok(())
        });
        let c = end_batch(&mut self.rx_idx, b.len, taken)?;
        self.rx.store_consumer(c);
        r.map(|()| taken as usize)
    }

    /// Waits up to `timeout` for a received frame (`poll(POLLIN)`, which also wakes the driver
    /// when the fill ring asks). `true` when the RX ring has entries.
    pub fn wait_rx(&mut self, timeout: Duration) -> io::Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // Rounded up: a wait under a millisecond must not become a poll of 0 (a busy loop).
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
        // SAFETY: one live pollfd, count 1; the kernel writes only its revents.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r < 0 {
            let e = crate::last_err();
            if e.raw_os_error() == Some(libc::EINTR) {
                return Ok(false);
            }
            return Err(e);
        }
        Ok(pfd.revents & libc::POLLIN != 0)
    }

    /// The kernel's drop counters (`XDP_STATISTICS`).
    pub fn statistics(&self) -> io::Result<XdpStatistics> {
        getsockopt(self.fd.as_fd(), XDP_STATISTICS)
    }

    /// Whether the kernel bound the socket in zero-copy mode (`XDP_OPTIONS`).
    pub fn is_zerocopy(&self) -> io::Result<bool> {
        let flags: u32 = getsockopt(self.fd.as_fd(), XDP_OPTIONS)?;
        Ok(flags & XDP_OPTIONS_ZEROCOPY != 0)
    }
}

#[cfg(test)]
mod tests;
