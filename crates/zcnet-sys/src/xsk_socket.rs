//! An AF_XDP socket with its UMEM and four mapped rings, moving frames between the application
//! and the kernel (Documentation/networking/af_xdp.rst).
//!
//! ```text
//!   XdpSocket::new(umem: Mapping) ─► (socket, every frame as a UmemFrame)
//!   fill(frames)      UmemFrame ─► fill ring      (kernel writes packets into it)
//!   receive(out)      RX ring   ─► UmemFrame with data span
//!   transmit(frames)  UmemFrame ─► TX ring        (kernel reads it) ; kick_tx() when asked
//!   complete(out)     completion ring ─► UmemFrame
//! ```
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
    XDP_OPTIONS_ZEROCOPY, XDP_PGOFF_RX_RING, XDP_PGOFF_TX_RING, XDP_RX_RING, XDP_STATISTICS,
    XDP_TX_RING, XDP_UMEM_COMPLETION_RING, XDP_UMEM_FILL_RING, XDP_UMEM_PGOFF_COMPLETION_RING,
    XDP_UMEM_PGOFF_FILL_RING, XDP_UMEM_REG, XDP_USE_NEED_WAKEUP,
};
use crate::xsk_ring::MappedRing;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;
use zcnet_core::xsk::{self as core_xsk, Consumer, FrameState, Frames, Producer};

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

    /// The packet, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        let (off, len) = (self.off as usize, self.len as usize);
        &mut self.bytes_mut()[off..off + len]
    }

    /// Where the packet starts in the frame.
    pub fn offset(&self) -> u32 {
        self.off
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
    ifindex: u32,
    queue_id: u32,
    config: XdpSocketConfig,
    kicks: u64,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

fn protocol(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("AF_XDP: {e}"))
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
        // SAFETY: socket() takes only integers; a non-negative result is a new fd owned below.
        let raw =
            crate::cvt(unsafe { libc::socket(AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })?;
        // SAFETY: raw is a fresh fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
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
        for (opt, n) in [
            (XDP_UMEM_FILL_RING, cfg.fill_size),
            (XDP_UMEM_COMPLETION_RING, cfg.comp_size),
            (XDP_RX_RING, cfg.rx_size),
            (XDP_TX_RING, cfg.tx_size),
        ] {
            setsockopt(fd.as_fd(), opt, &n)?;
        }
        let off: XdpMmapOffsets = getsockopt(fd.as_fd(), XDP_MMAP_OFFSETS)?;
        let fill = MappedRing::map(fd.as_fd(), XDP_UMEM_PGOFF_FILL_RING, &off.fr, cfg.fill_size)?;
        let comp = MappedRing::map(
            fd.as_fd(),
            XDP_UMEM_PGOFF_COMPLETION_RING,
            &off.cr,
            cfg.comp_size,
        )?;
        let rx = MappedRing::map(fd.as_fd(), XDP_PGOFF_RX_RING, &off.rx, cfg.rx_size)?;
        let tx = MappedRing::map(fd.as_fd(), XDP_PGOFF_TX_RING, &off.tx, cfg.tx_size)?;
        let mut flags = cfg.mode.flag();
        if cfg.need_wakeup {
            flags |= XDP_USE_NEED_WAKEUP;
        }
        let sa = SockaddrXdp {
            sxdp_family: AF_XDP as u16,
            sxdp_flags: flags,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: queue_id,
            sxdp_shared_umem_fd: 0,
        };
        let mut attempt = 0;
        loop {
            // SAFETY: sa is a live sockaddr_xdp and the length is its exact size.
            let r = crate::cvt(unsafe {
                libc::bind(
                    fd.as_raw_fd(),
                    (&sa as *const SockaddrXdp).cast(),
                    std::mem::size_of::<SockaddrXdp>() as libc::socklen_t,
                )
            });
            match r {
                Ok(_) => break,
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && attempt < BUSY_RETRIES => {
                    attempt += 1;
                    std::thread::sleep(BUSY_PAUSE);
                }
                Err(e) => return Err(e),
            }
        }
        let (umem, slots) = umem.into_slots(cfg.frame_size as usize, cfg.frame_count as usize)?;
        let frames = slots
            .into_iter()
            .map(|slot| UmemFrame {
                slot,
                off: 0,
                len: 0,
            })
            .collect();
        let sock = XdpSocket {
            fill_idx: Producer::new(cfg.fill_size, fill.load_producer(), fill.load_consumer()),
            comp_idx: Consumer::new(cfg.comp_size, comp.load_producer(), comp.load_consumer()),
            rx_idx: Consumer::new(cfg.rx_size, rx.load_producer(), rx.load_consumer()),
            tx_idx: Producer::new(cfg.tx_size, tx.load_producer(), tx.load_consumer()),
            fd,
            fill,
            comp,
            rx,
            tx,
            frames: Frames::new(cfg.frame_count, cfg.frame_size),
            held: (0..cfg.frame_count).map(|_| None).collect(),
            umem,
            ifindex,
            queue_id,
            config: *cfg,
            kicks: 0,
        };
        Ok((sock, frames))
    }

    /// The socket (for an XSKMAP entry, poll).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The interface index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The queue.
    pub fn queue_id(&self) -> u32 {
        self.queue_id
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

    /// Frames on the fill ring or being filled by the kernel.
    pub fn frames_in_fill(&self) -> usize {
        self.frames.in_state(FrameState::Fill)
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
    /// call is `InvalidInput` and nothing goes.
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
        for slot in b.slots() {
            let Some(f) = frames.pop() else { break };
            let idx = f.index();
            let addr = self.frames.give_fill(idx).map_err(protocol)?;
            self.fill.write(slot, addr);
            self.held[idx as usize] = Some(f.slot);
        }
        let p = self.fill_idx.submit(b.len).map_err(protocol)?;
        self.fill.store_producer(p);
        Ok(b.len as usize)
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
        let tx = &self.tx;
        let b = self
            .tx_idx
            .reserve(frames.len() as u32, || tx.load_consumer())
            .map_err(protocol)?;
        for (i, f) in frames.drain(..b.len as usize).enumerate() {
            let idx = f.index();
            let addr = self.frames.give_tx(idx, f.off, f.len).map_err(protocol)?;
            self.tx.write(
                b.slot(i as u32),
                XdpDesc {
                    addr,
                    len: f.len,
                    options: 0,
                },
            );
            self.held[idx as usize] = Some(f.slot);
        }
        let p = self.tx_idx.submit(b.len).map_err(protocol)?;
        self.tx.store_producer(p);
        Ok(b.len as usize)
    }

    /// TX descriptors published and not yet taken by the kernel (reads its index).
    pub fn tx_pending(&mut self) -> io::Result<u32> {
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
                Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::EINTR) => {}
                _ => return Err(e),
            }
        }
        Ok(true)
    }

    /// Takes back up to `max` transmitted frames from the completion ring into `out`.
    pub fn complete(&mut self, out: &mut Vec<UmemFrame>, max: u32) -> io::Result<usize> {
        let comp = &self.comp;
        let b = self
            .comp_idx
            .peek(max, || comp.load_producer())
            .map_err(protocol)?;
        for slot in b.slots() {
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
        }
        let c = self.comp_idx.release(b.len).map_err(protocol)?;
        self.comp.store_consumer(c);
        Ok(b.len as usize)
    }

    /// Takes up to `max` received frames from the RX ring into `out`, each with its packet span.
    pub fn receive(&mut self, out: &mut Vec<UmemFrame>, max: u32) -> io::Result<usize> {
        let rx = &self.rx;
        let b = self
            .rx_idx
            .peek(max, || rx.load_producer())
            .map_err(protocol)?;
        for slot in b.slots() {
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
        }
        let c = self.rx_idx.release(b.len).map_err(protocol)?;
        self.rx.store_consumer(c);
        Ok(b.len as usize)
    }

    /// Whether the fill ring asks for a wakeup (`poll`) to go on receiving.
    pub fn fill_needs_wakeup(&self) -> bool {
        core_xsk::fill_wakeup_needed(self.config.need_wakeup, self.fill.load_flags())
    }

    /// Waits up to `timeout` for a received frame (`poll(POLLIN)`, which also wakes the driver
    /// when the fill ring asks). `true` when the RX ring has entries.
    pub fn wait_rx(&mut self, timeout: Duration) -> io::Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
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
