//! AF_PACKET sockets bound to one interface: batched sends (`sendmmsg`) and receives
//! (`recvmmsg`), `PACKET_QDISC_BYPASS`, a TPACKET_V3 receive ring and a TPACKET_V3 transmit
//! ring (`PACKET_RX_RING` / `PACKET_TX_RING` + mmap). The baseline `zcnet bench xsk` measures
//! AF_XDP against.
//!
//! Facts from `include/uapi/linux/if_packet.h` (option numbers, `struct tpacket_req3`,
//! `struct tpacket_stats_v3`, the status bits), `Documentation/networking/packet_mmap.rst`
//! (setup order: `PACKET_VERSION`, then the ring option, then mmap and bind; one mmap of
//! `tp_block_size * tp_block_nr` bytes; a socket with protocol 0 only transmits) and
//! `net/packet/af_packet.c` of Linux 6.18:
//! - **RX ring ordering.** The kernel fills a block, then `smp_wmb()` and stores
//!   `block_status = TP_STATUS_USER` (`prb_close_block`/`prb_flush_block`); before reusing a
//!   block it reads `block_status` after `smp_rmb()` (`prb_dispatch_next_block`). So this side
//!   load-acquires `block_status` before reading the block and store-releases
//!   `TP_STATUS_KERNEL` after it is done with it.
//! - **TX ring ordering.** `tpacket_snd` reads each frame's `tp_status` (`__packet_get_status`:
//!   `smp_rmb()` + `READ_ONCE`) and sends the frames marked `TP_STATUS_SEND_REQUEST` from its
//!   head on; the skb destructor stores `TP_STATUS_AVAILABLE` (`__packet_set_status`:
//!   `WRITE_ONCE` + `smp_wmb()`) once the device is done with the frame (the skb points into the
//!   ring: the frame stays the kernel's until then). So this side load-acquires `tp_status`
//!   before writing a frame and store-releases `TP_STATUS_SEND_REQUEST` after.
//! - `PACKET_STATISTICS` clears on read; for TPACKET_V3 `tp_packets` includes `tp_drops`.
//! - With `PACKET_QDISC_BYPASS` a device that drops (veth whose peer backlog is full) makes the
//!   send fail with `ENOBUFS` (`packet_xmit` → `dev_direct_xmit`, `net_xmit_errno`).
//!
//! The sans-IO half (ring request rules, block walking, offsets) is [`zcnet_core::tpacket`].

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use zcnet_core::tpacket::{
    self as tp, BlockPackets, RingRequest, TpacketError, BLOCK_STATUS_OFFSET, TX_DATA_OFFSET,
    TX_LEN_OFFSET, TX_NEXT_OFFSET_OFFSET, TX_SNAPLEN_OFFSET, TX_STATUS_OFFSET,
};

/// `SOL_PACKET` (include/linux/socket.h).
pub(crate) const SOL_PACKET: libc::c_int = 263;
/// `PACKET_RX_RING`.
pub(crate) const PACKET_RX_RING: libc::c_int = 5;
/// `PACKET_STATISTICS`.
pub(crate) const PACKET_STATISTICS: libc::c_int = 6;
/// `PACKET_VERSION`.
pub(crate) const PACKET_VERSION: libc::c_int = 10;
/// `PACKET_TX_RING`.
pub(crate) const PACKET_TX_RING: libc::c_int = 13;
/// `PACKET_QDISC_BYPASS`.
pub(crate) const PACKET_QDISC_BYPASS: libc::c_int = 20;
/// `PACKET_IGNORE_OUTGOING`.
pub(crate) const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// `ETH_P_ALL` (include/uapi/linux/if_ether.h).
pub(crate) const ETH_P_ALL: u16 = 0x0003;
/// `ETH_P_IP`.
pub(crate) const ETH_P_IP: u16 = 0x0800;
/// The most messages one [`PacketSocket::send_batch`] or [`PacketSocket::recv_batch`] call
/// passes to the kernel (the rest are left for the next call).
pub const MAX_BATCH: usize = 64;

/// Which packets a socket takes from the interface (the `protocol` of socket(2) and bind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// None: a send-only socket (no receive hook, packet_mmap.rst).
    SendOnly,
    /// `ETH_P_ALL`: every packet.
    All,
    /// `ETH_P_IP`: IPv4 only.
    Ipv4,
}

impl Protocol {
    fn ethertype(self) -> u16 {
        match self {
            Protocol::SendOnly => 0,
            Protocol::All => ETH_P_ALL,
            Protocol::Ipv4 => ETH_P_IP,
        }
    }
}

/// `struct tpacket_stats_v3`: what the kernel counted since the last read.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PacketStats {
    /// `tp_packets`: packets seen (for TPACKET_V3 the drops included).
    pub(crate) packets: u32,
    /// `tp_drops`: packets dropped (ring or receive buffer full).
    pub drops: u32,
    /// `tp_freeze_q_cnt` (TPACKET_V3): times the ring was found full.
    pub(crate) freeze_q_cnt: u32,
}

fn setsockopt<T>(fd: BorrowedFd<'_>, name: libc::c_int, val: &T) -> io::Result<()> {
    setsockopt_level(fd, SOL_PACKET, name, val)
}

fn setsockopt_level<T>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    val: &T,
) -> io::Result<()> {
    // SAFETY: val is a live T and optlen its exact size; the kernel only reads it.
    crate::cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (val as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// An AF_PACKET `SOCK_RAW` socket bound to one interface: frames go out and come in whole,
/// Ethernet header included.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
}

impl PacketSocket {
    /// A socket for `protocol`, not bound yet (rings are set up before bind).
    fn unbound(protocol: Protocol) -> io::Result<(OwnedFd, u16)> {
        let proto = protocol.ethertype().to_be();
        // SAFETY: socket() takes only integers; a non-negative result is a new fd owned below.
        let raw = crate::cvt(unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::c_int::from(proto),
            )
        })?;
        // SAFETY: raw is a fresh fd that nothing else owns.
        Ok((unsafe { OwnedFd::from_raw_fd(raw) }, proto))
    }

    fn bind_fd(fd: BorrowedFd<'_>, ifindex: u32, proto_be: u16) -> io::Result<()> {
        // SAFETY: sockaddr_ll is plain old data; all-zero is valid.
        let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sa.sll_family = libc::AF_PACKET as u16;
        sa.sll_protocol = proto_be;
        sa.sll_ifindex =
            i32::try_from(ifindex).map_err(|_| io::Error::from_raw_os_error(libc::ENODEV))?;
        // SAFETY: sa is a live sockaddr_ll and the length is its exact size.
        crate::cvt(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sa as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })
        .map(drop)
    }

    /// Opens an AF_PACKET socket for `protocol` bound to interface `ifindex` (of the calling
    /// thread's network namespace). `EPERM` without CAP_NET_RAW, `ENODEV` for no such
    /// interface.
    pub fn open(ifindex: u32, protocol: Protocol) -> io::Result<PacketSocket> {
        let (fd, proto) = Self::unbound(protocol)?;
        Self::bind_fd(fd.as_fd(), ifindex, proto)?;
        Ok(PacketSocket { fd })
    }

    /// The socket.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// `PACKET_QDISC_BYPASS`: sends go to the driver directly (`dev_direct_xmit`), past the
    /// qdisc layer (packet_mmap.rst: no buffering, no tc, drops show as `ENOBUFS`).
    pub fn set_qdisc_bypass(&self, on: bool) -> io::Result<()> {
        setsockopt(self.fd(), PACKET_QDISC_BYPASS, &libc::c_int::from(on))
    }

    /// `PACKET_IGNORE_OUTGOING`: do not receive the packets this host sends on the interface.
    pub fn set_ignore_outgoing(&self, on: bool) -> io::Result<()> {
        setsockopt(self.fd(), PACKET_IGNORE_OUTGOING, &libc::c_int::from(on))
    }

    /// The receive buffer (`SO_RCVBUFFORCE` with CAP_NET_ADMIN, else `SO_RCVBUF`, which the
    /// kernel caps at `net.core.rmem_max`).
    pub fn set_recv_buffer(&self, bytes: usize) -> io::Result<()> {
        let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        setsockopt_level(self.fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &v)
            .or_else(|_| setsockopt_level(self.fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, &v))
    }

    /// Sends each of `frames` (whole Ethernet frames) as one packet, up to [`MAX_BATCH`] in one
    /// `sendmmsg`; returns how many the kernel took. `WouldBlock` when it took none (send
    /// buffer full), `ENOBUFS` when the device dropped the first one.
    pub fn send_batch(&self, frames: &[&[u8]]) -> io::Result<usize> {
        let n = frames.len().min(MAX_BATCH);
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: iovec and mmsghdr are plain old data; all-zero is valid (null pointers,
        // zero lengths).
        let mut iov: [libc::iovec; MAX_BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
        for i in 0..n {
            iov[i].iov_base = frames[i].as_ptr() as *mut libc::c_void;
            iov[i].iov_len = frames[i].len();
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: msgs[..n] each point at one live iovec, which points at a live frame the
        // kernel only reads; no address (the socket is bound), no control data. The arrays
        // outlive the call.
        let r = unsafe {
            libc::sendmmsg(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if r < 0 {
            return Err(crate::last_err());
        }
        Ok(r as usize)
    }

    /// Receives up to `lens.len()` (at most [`MAX_BATCH`]) packets with one `recvmmsg`
    /// (non-blocking) into consecutive `slot`-byte pieces of `buf`; `lens[i]` is packet `i`'s
    /// length (truncated packets count their captured bytes). Returns how many; `WouldBlock`
    /// when there is none.
    pub fn recv_batch(&self, buf: &mut [u8], slot: usize, lens: &mut [usize]) -> io::Result<usize> {
        let n = lens
            .len()
            .min(MAX_BATCH)
            .min(buf.len().checked_div(slot).unwrap_or(0));
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: plain old data; all-zero is valid.
        let mut iov: [libc::iovec; MAX_BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
        let base = buf.as_mut_ptr();
        for i in 0..n {
            // SAFETY: i * slot + slot <= n * slot <= buf.len(): inside `buf`.
            iov[i].iov_base = unsafe { base.add(i * slot) }.cast();
            iov[i].iov_len = slot;
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: msgs[..n] each point at one iovec naming a disjoint `slot`-byte piece of the
        // exclusively borrowed `buf`; no name or control buffers; the kernel writes at most
        // iov_len bytes into each and msg_len into each header. No timeout.
        let r = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            return Err(crate::last_err());
        }
        let r = r as usize;
        for i in 0..r {
            lens[i] = (msgs[i].msg_len as usize).min(slot);
        }
        Ok(r)
    }

    /// `PACKET_STATISTICS`: the kernel's counts since the last read (which clears them).
    pub fn statistics(&self) -> io::Result<PacketStats> {
        let mut st = PacketStats::default();
        let mut len = std::mem::size_of::<PacketStats>() as libc::socklen_t;
        // SAFETY: st is a live, writable repr(C) struct of three u32s and len its size; the
        // kernel writes at most len bytes (8 for V1/V2 sockets, 12 for V3).
        crate::cvt(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                SOL_PACKET,
                PACKET_STATISTICS,
                (&mut st as *mut PacketStats).cast(),
                &mut len,
            )
        })?;
        Ok(st)
    }

    /// Waits up to `timeout` for `events` (`POLLIN`, `POLLOUT`); returns the events that came.
    pub fn wait(&self, events: i16, timeout: Duration) -> io::Result<i16> {
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        zcnet_sys::sock::poll_one(self.fd.as_raw_fd(), events, ms)
    }
}

/// A shared mapping of a packet socket's ring, unmapped on drop.
#[derive(Debug)]
struct RingMap {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory reached through raw pointers and atomics; the
// owner (a ring, used through `&mut self` for every access) may move between threads.
unsafe impl Send for RingMap {}

impl RingMap {
    fn map(fd: BorrowedFd<'_>, len: usize) -> io::Result<RingMap> {
        // SAFETY: a new shared mapping of the socket's ring at an address of the kernel's
        // choosing aliases no Rust object; MAP_FAILED is checked. The kernel refuses a length
        // other than the ring's (packet_mmap: EINVAL).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(crate::last_err());
        }
        let base = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap of the packet ring returned NULL"))?;
        Ok(RingMap { base, len })
    }

    /// The `u32` at `off` (4-aligned, inside the mapping) as an atomic.
    fn word(&self, off: usize) -> &AtomicU32 {
        assert!(
            off.is_multiple_of(4) && off + 4 <= self.len,
            "ring word {off} out of range"
        );
        // SAFETY: off is 4-aligned and inside the live, page-aligned mapping; the kernel
        // accesses these status words only with READ_ONCE/WRITE_ONCE and barriers, and this
        // side only atomically.
        unsafe { &*self.base.as_ptr().add(off).cast::<AtomicU32>() }
    }
}

impl Drop for RingMap {
    fn drop(&mut self) {
        // SAFETY: base/len describe the mapping made in `map`, unmapped only here; nothing
        // borrowed from it outlives its owner (blocks and slots borrow the ring mutably).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

fn request_error(e: TpacketError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, e.to_string())
}

/// Sets `PACKET_VERSION` to TPACKET_V3 and the ring `opt` to `req` on `fd`.
fn set_ring(fd: BorrowedFd<'_>, opt: libc::c_int, req: &RingRequest) -> io::Result<()> {
    setsockopt(fd, PACKET_VERSION, &(tp::TPACKET_V3 as libc::c_int))?;
    setsockopt(fd, opt, &req.to_words())
}

/// A TPACKET_V3 receive ring: the kernel writes packets into blocks and hands each over whole.
/// Field order is drop order: the socket closes before the ring is unmapped.
#[derive(Debug)]
pub struct RxRingV3 {
    sock: PacketSocket,
    map: RingMap,
    req: RingRequest,
    next: u32,
    blocks: u64,
}

impl RxRingV3 {
    /// A socket for `protocol` on `ifindex` with a receive ring as `req` asks
    /// ([`RingRequest::rx_v3`]), ignoring this host's outgoing packets.
    pub fn open(ifindex: u32, protocol: Protocol, req: &RingRequest) -> io::Result<RxRingV3> {
        req.check(zcnet_sys::mem::page_size(), false)
            .map_err(request_error)?;
        let len = req
            .ring_len()
            .ok_or_else(|| request_error(TpacketError::BadRequest("size".into())))?;
        let (fd, proto) = PacketSocket::unbound(protocol)?;
        set_ring(fd.as_fd(), PACKET_RX_RING, req)?;
        let map = RingMap::map(fd.as_fd(), len)?;
        PacketSocket::bind_fd(fd.as_fd(), ifindex, proto)?;
        let sock = PacketSocket { fd };
        sock.set_ignore_outgoing(true)?;
        Ok(RxRingV3 {
            sock,
            map,
            req: *req,
            next: 0,
            blocks: 0,
        })
    }

    /// The socket (statistics, poll).
    pub fn socket(&self) -> &PacketSocket {
        &self.sock
    }

    /// The next block, if the kernel has handed it over (`TP_STATUS_USER`, acquire). Dropping
    /// the block gives it back.
    pub fn next_block(&mut self) -> Option<RxBlock<'_>> {
        let off = self.req.block_offset(self.next);
        let status = self
            .map
            .word(off + BLOCK_STATUS_OFFSET)
            .load(Ordering::Acquire);
        if status & tp::TP_STATUS_USER == 0 {
            return None;
        }
        Some(RxBlock {
            off,
            len: self.req.block_size as usize,
            ring: self,
        })
    }

    /// Waits up to `timeout` for a block (poll: the kernel wakes the socket when it closes a
    /// block). Returns whether the next block is ready.
    pub fn wait(&mut self, timeout: Duration) -> io::Result<bool> {
        if self.next_block_ready() {
            return Ok(true);
        }
        self.sock
            .wait(libc::POLLIN | libc::POLLERR, timeout)
            .map(|_| self.next_block_ready())
    }

    fn next_block_ready(&self) -> bool {
        let off = self.req.block_offset(self.next);
        self.map
            .word(off + BLOCK_STATUS_OFFSET)
            .load(Ordering::Acquire)
            & tp::TP_STATUS_USER
            != 0
    }
}

/// A block handed over by the kernel: its bytes are the application's until it is dropped,
/// which stores `TP_STATUS_KERNEL` (release) and moves the ring on.
#[derive(Debug)]
pub struct RxBlock<'a> {
    ring: &'a mut RxRingV3,
    off: usize,
    len: usize,
}

impl RxBlock<'_> {
    /// The whole block as mapped.
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: [off, off+len) is one block inside the live mapping. The kernel does not
        // write a block while its status has TP_STATUS_USER (it only reads the status, and
        // reopens the block after we store TP_STATUS_KERNEL in drop, when no slice from here
        // is alive: they borrow `self`). The acquire load in `next_block` ordered the kernel's
        // writes of the contents before these reads.
        unsafe { std::slice::from_raw_parts(self.ring.map.base.as_ptr().add(self.off), self.len) }
    }

    /// The block's packets ([`zcnet_core::tpacket::walk_block`]).
    pub fn packets(&self) -> Result<BlockPackets<'_>, TpacketError> {
        tp::walk_block(self.bytes())
    }
}

impl Drop for RxBlock<'_> {
    fn drop(&mut self) {
        self.ring
            .map
            .word(self.off + BLOCK_STATUS_OFFSET)
            .store(tp::TP_STATUS_KERNEL, Ordering::Release);
        self.ring.next = (self.ring.next + 1) % self.ring.req.block_nr;
        self.ring.blocks += 1;
    }
}

/// A TPACKET_V3 transmit ring: frames written in place and sent by one `send()` for many.
/// Field order is drop order: the socket closes (the kernel waits for frames in flight) before
/// the ring is unmapped.
#[derive(Debug)]
pub struct TxRing {
    sock: PacketSocket,
    map: RingMap,
    req: RingRequest,
    head: u32,
    queued: u32,
}

impl TxRing {
    /// A send-only socket on `ifindex` with a transmit ring as `req` asks
    /// ([`RingRequest::tx_v3`]), optionally with `PACKET_QDISC_BYPASS`.
    pub fn open(ifindex: u32, req: &RingRequest, qdisc_bypass: bool) -> io::Result<TxRing> {
        req.check(zcnet_sys::mem::page_size(), true)
            .map_err(request_error)?;
        let len = req
            .ring_len()
            .ok_or_else(|| request_error(TpacketError::BadRequest("size".into())))?;
        let (fd, proto) = PacketSocket::unbound(Protocol::SendOnly)?;
        set_ring(fd.as_fd(), PACKET_TX_RING, req)?;
        let map = RingMap::map(fd.as_fd(), len)?;
        PacketSocket::bind_fd(fd.as_fd(), ifindex, proto)?;
        let sock = PacketSocket { fd };
        if qdisc_bypass {
            sock.set_qdisc_bypass(true)?;
        }
        Ok(TxRing {
            sock,
            map,
            req: *req,
            head: 0,
            queued: 0,
        })
    }

    /// The largest frame one slot holds.
    pub(crate) fn capacity(&self) -> usize {
        self.req.tx_capacity()
    }

    fn status(&self, i: u32) -> u32 {
        self.map
            .word(self.req.frame_offset(i) + TX_STATUS_OFFSET)
            .load(Ordering::Acquire)
    }

    /// The next slot, if the kernel has given it back (`TP_STATUS_AVAILABLE`, acquire);
    /// `None` while it is still queued or being sent. `InvalidData` when the kernel refused it
    /// (`TP_STATUS_WRONG_FORMAT`).
    pub fn next_slot(&mut self) -> io::Result<Option<TxSlot<'_>>> {
        let st = self.status(self.head);
        if st & tp::TP_STATUS_WRONG_FORMAT != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the kernel refused TX ring frame {} (TP_STATUS_WRONG_FORMAT)",
                    self.head
                ),
            ));
        }
        if st & (tp::TP_STATUS_SEND_REQUEST | tp::TP_STATUS_SENDING) != 0 {
            return Ok(None);
        }
        Ok(Some(TxSlot { ring: self }))
    }

    /// Sends every frame marked so far (`send(fd, NULL, 0, MSG_DONTWAIT)`): the kernel walks
    /// the ring from its head. `ENOBUFS` (the device dropped a frame, which is available
    /// again), `EAGAIN` and `EINTR` are not errors. Returns whether the kernel took them all.
    pub fn kick(&mut self) -> io::Result<bool> {
        if self.queued == 0 {
            return Ok(true);
        }
        self.send_marked()
    }

    fn send_marked(&mut self) -> io::Result<bool> {
        // SAFETY: a zero-length send with a null buffer: the kernel reads no user memory
        // (tpacket_snd sends the ring's marked frames).
        let r = unsafe {
            libc::send(
                self.sock.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
            )
        };
        if r < 0 {
            let e = crate::last_err();
            return match e.raw_os_error() {
                Some(libc::ENOBUFS | libc::EAGAIN | libc::EINTR) => Ok(false),
                _ => Err(e),
            };
        }
        self.queued = 0;
        Ok(true)
    }

    /// Frames not given back yet (queued or being sent), counted by walking every slot.
    pub(crate) fn in_flight(&self) -> usize {
        (0..self.req.frame_nr)
            .filter(|&i| self.status(i) & (tp::TP_STATUS_SEND_REQUEST | tp::TP_STATUS_SENDING) != 0)
            .count()
    }

    /// Kicks until every frame is given back or `timeout` passes; returns whether all were.
    pub fn flush(&mut self, timeout: Duration) -> io::Result<bool> {
        let end = std::time::Instant::now() + timeout;
        loop {
            self.send_marked()?;
            if self.in_flight() == 0 {
                return Ok(true);
            }
            if std::time::Instant::now() >= end {
                return Ok(false);
            }
            std::thread::yield_now();
        }
    }
}

/// A free TX ring frame: write the packet, then [`TxSlot::submit`] it.
#[derive(Debug)]
pub struct TxSlot<'a> {
    ring: &'a mut TxRing,
}

impl TxSlot<'_> {
    /// The frame's packet area (`TxRing::capacity` bytes).
    pub fn data_mut(&mut self) -> &mut [u8] {
        let off = self.ring.req.frame_offset(self.ring.head) + TX_DATA_OFFSET;
        let cap = self.ring.capacity();
        // SAFETY: [off, off+cap) lies in this frame (frame_offset + frame_size <= ring, the
        // request was checked) past its header; the frame's status is AVAILABLE (checked in
        // next_slot, acquire), so the kernel neither reads nor writes its packet area until we
        // mark it. `self` borrows the ring mutably: no other slice of it exists.
        unsafe { std::slice::from_raw_parts_mut(self.ring.map.base.as_ptr().add(off), cap) }
    }

    /// Marks the first `len` bytes for sending (`tp_len`, `tp_next_offset = 0`, then the
    /// status, store-release) and moves the ring on. `InvalidInput` when `len` is 0 or does
    /// not fit.
    pub fn submit(self, len: usize) -> io::Result<()> {
        if len == 0 || len > self.ring.capacity() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a {len} B frame does not fit a {} B TX ring slot",
                    self.ring.capacity()
                ),
            ));
        }
        let r = &mut *self.ring;
        let frame = r.req.frame_offset(r.head);
        r.map
            .word(frame + TX_NEXT_OFFSET_OFFSET)
            .store(0, Ordering::Relaxed);
        r.map
            .word(frame + TX_LEN_OFFSET)
            .store(len as u32, Ordering::Relaxed);
        r.map
            .word(frame + TX_SNAPLEN_OFFSET)
            .store(len as u32, Ordering::Relaxed);
        r.map
            .word(frame + TX_STATUS_OFFSET)
            .store(tp::TP_STATUS_SEND_REQUEST, Ordering::Release);
        r.head = (r.head + 1) % r.req.frame_nr;
        r.queued += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
