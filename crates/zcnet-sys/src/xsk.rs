//! AF_XDP sockets: registering a UMEM, sizing the four rings and binding to a device queue in
//! copy or zero-copy mode (Documentation/networking/af_xdp.rst). Enough for the probe (bind, then
//! close); the data path ([`crate::xsk_socket::XdpSocket`], shared UMEMs included) builds on
//! these constants.
//!
//! Constants and layouts are those of `include/uapi/linux/if_xdp.h` (Linux 6.18), checked against
//! the running kernel's BTF; the tests pin sizes and offsets. Bind errors seen on Linux 6.18
//! (net/xdp/xsk.c `xsk_bind`, net/xdp/xsk_buff_pool.c `xp_assign_dev`): `ENODEV` for an unknown
//! interface, `EINVAL` for a queue the device does not have or a socket without rings,
//! `EOPNOTSUPP` for XDP_ZEROCOPY on a driver without AF_XDP zero-copy support (no `ndo_bpf` /
//! `ndo_xsk_wakeup`: lo, veth, ifb...), `EBUSY` while another socket's UMEM is still attached to
//! the queue, which the kernel releases asynchronously after close() (retried here, bounded).

use crate::mem::Mapping;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// `AF_XDP` (include/linux/socket.h).
pub(crate) const AF_XDP: libc::c_int = 44;
/// `SOL_XDP` (include/linux/socket.h).
pub(crate) const SOL_XDP: libc::c_int = 283;

/// `XDP_MMAP_OFFSETS` socket option (getsockopt): ring offsets for mmap.
pub(crate) const XDP_MMAP_OFFSETS: libc::c_int = 1;
/// `XDP_RX_RING` socket option: RX ring entries.
pub(crate) const XDP_RX_RING: libc::c_int = 2;
/// `XDP_TX_RING` socket option: TX ring entries.
pub(crate) const XDP_TX_RING: libc::c_int = 3;
/// `XDP_UMEM_REG` socket option: register the UMEM ([`XdpUmemReg`]).
pub(crate) const XDP_UMEM_REG: libc::c_int = 4;
/// `XDP_UMEM_FILL_RING` socket option: fill ring entries.
pub(crate) const XDP_UMEM_FILL_RING: libc::c_int = 5;
/// `XDP_UMEM_COMPLETION_RING` socket option: completion ring entries.
pub(crate) const XDP_UMEM_COMPLETION_RING: libc::c_int = 6;
/// `XDP_STATISTICS` socket option (getsockopt): [`XdpStatistics`].
pub(crate) const XDP_STATISTICS: libc::c_int = 7;

/// `sxdp_flags`: share the UMEM of `sxdp_shared_umem_fd`.
pub(crate) const XDP_SHARED_UMEM: u16 = 1 << 0;
/// `sxdp_flags`: force copy mode.
pub(crate) const XDP_COPY: u16 = 1 << 1;
/// `sxdp_flags`: force zero-copy mode (fails where the driver cannot).
pub(crate) const XDP_ZEROCOPY: u16 = 1 << 2;
/// `sxdp_flags`: the application wakes the driver when the rings' NEED_WAKEUP flag says so.
pub(crate) const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;

/// `struct sockaddr_xdp` (16 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SockaddrXdp {
    /// `sxdp_family`: `AF_XDP`.
    pub(crate) sxdp_family: u16,
    /// `sxdp_flags`: XDP_COPY, XDP_ZEROCOPY, XDP_USE_NEED_WAKEUP, ...
    pub(crate) sxdp_flags: u16,
    /// `sxdp_ifindex`.
    pub(crate) sxdp_ifindex: u32,
    /// `sxdp_queue_id`.
    pub(crate) sxdp_queue_id: u32,
    /// `sxdp_shared_umem_fd`.
    pub(crate) sxdp_shared_umem_fd: u32,
}

/// `struct xdp_umem_reg` (32 bytes; 6.8+ with `tx_metadata_len`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct XdpUmemReg {
    /// `addr`: start of the packet data area (page-aligned).
    pub(crate) addr: u64,
    /// `len`.
    pub(crate) len: u64,
    /// `chunk_size`: frame size (power of two, 2048..=page size, in aligned mode).
    pub(crate) chunk_size: u32,
    /// `headroom`.
    pub(crate) headroom: u32,
    /// `flags`: `XDP_UMEM_UNALIGNED_CHUNK_FLAG`, ...
    pub(crate) flags: u32,
    /// `tx_metadata_len`.
    pub(crate) tx_metadata_len: u32,
}

/// `struct xdp_ring_offset` (32 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct XdpRingOffset {
    /// `producer`.
    pub(crate) producer: u64,
    /// `consumer`.
    pub(crate) consumer: u64,
    /// `desc`.
    pub(crate) desc: u64,
    /// `flags`.
    pub(crate) flags: u64,
}

/// `struct xdp_mmap_offsets` (128 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct XdpMmapOffsets {
    /// `rx`.
    pub(crate) rx: XdpRingOffset,
    /// `tx`.
    pub(crate) tx: XdpRingOffset,
    /// `fr`: fill ring.
    pub(crate) fr: XdpRingOffset,
    /// `cr`: completion ring.
    pub(crate) cr: XdpRingOffset,
}

/// `struct xdp_statistics` (48 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct XdpStatistics {
    /// `rx_dropped`.
    pub rx_dropped: u64,
    /// `rx_invalid_descs`.
    pub rx_invalid_descs: u64,
    /// `tx_invalid_descs`.
    pub tx_invalid_descs: u64,
    /// `rx_ring_full`.
    pub rx_ring_full: u64,
    /// `rx_fill_ring_empty_descs`.
    pub rx_fill_ring_empty_descs: u64,
    /// `tx_ring_empty_descs`.
    pub tx_ring_empty_descs: u64,
}

/// `struct xdp_desc` (16 bytes): an RX/TX ring entry.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct XdpDesc {
    /// `addr`: offset in the UMEM.
    pub(crate) addr: u64,
    /// `len`.
    pub(crate) len: u32,
    /// `options`.
    pub(crate) options: u32,
}

/// How the socket binds to the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XskBindMode {
    /// `XDP_COPY`: works on any device (generic or native XDP, packets copied into the UMEM).
    Copy,
    /// `XDP_ZEROCOPY`: the driver DMAs into the UMEM; `EOPNOTSUPP` where it cannot.
    ZeroCopy,
}

impl XskBindMode {
    /// The `sxdp_flags` bit.
    pub(crate) fn flag(self) -> u16 {
        match self {
            XskBindMode::Copy => XDP_COPY,
            XskBindMode::ZeroCopy => XDP_ZEROCOPY,
        }
    }

    /// A short name for reports ("copy", "zero-copy").
    pub fn name(self) -> &'static str {
        match self {
            XskBindMode::Copy => "copy",
            XskBindMode::ZeroCopy => "zero-copy",
        }
    }
}

/// UMEM and ring sizes of an [`XskSocket`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct XskConfig {
    /// Frames in the UMEM.
    pub(crate) frame_count: u32,
    /// Bytes per frame (a power of two from 2048 to the page size).
    pub(crate) frame_size: u32,
    /// Entries of each of the four rings (a power of two).
    pub(crate) ring_entries: u32,
    /// Bind with `XDP_USE_NEED_WAKEUP`.
    pub(crate) need_wakeup: bool,
}

impl Default for XskConfig {
    /// 64 frames of 4096 bytes, 64-entry rings, need-wakeup: small, enough to probe a bind.
    fn default() -> Self {
        XskConfig {
            frame_count: 64,
            frame_size: 4096,
            ring_entries: 64,
            need_wakeup: true,
        }
    }
}

/// `XDP_OPTIONS` socket option (getsockopt): `struct xdp_options { u32 flags }`.
pub(crate) const XDP_OPTIONS: libc::c_int = 8;
/// `xdp_options.flags`: the socket is bound in zero-copy mode.
pub(crate) const XDP_OPTIONS_ZEROCOPY: u32 = 1 << 0;
/// mmap offset of the RX ring (`XDP_PGOFF_RX_RING`).
pub(crate) const XDP_PGOFF_RX_RING: libc::off_t = 0;
/// mmap offset of the TX ring (`XDP_PGOFF_TX_RING`).
pub(crate) const XDP_PGOFF_TX_RING: libc::off_t = 0x8000_0000;
/// mmap offset of the fill ring (`XDP_UMEM_PGOFF_FILL_RING`).
pub(crate) const XDP_UMEM_PGOFF_FILL_RING: libc::off_t = 0x1_0000_0000;
/// mmap offset of the completion ring (`XDP_UMEM_PGOFF_COMPLETION_RING`).
pub(crate) const XDP_UMEM_PGOFF_COMPLETION_RING: libc::off_t = 0x1_8000_0000;

/// `EBUSY` retries of a bind (the previous socket on the queue is released asynchronously).
pub(crate) const BUSY_RETRIES: u32 = 10;
/// Pause between `EBUSY` retries.
pub(crate) const BUSY_PAUSE: Duration = Duration::from_millis(20);

/// A bound AF_XDP socket with its UMEM. Dropping closes the socket first (the kernel detaches
/// from the queue and unpins the UMEM, asynchronously), then unmaps the UMEM; the kernel keeps
/// the pages pinned until it lets go, so a late write never reaches reused memory.
#[derive(Debug)]
pub(crate) struct XskSocket {
    /// Closed first on drop; read by the tests.
    #[cfg_attr(not(test), allow(dead_code))]
    fd: OwnedFd,
    /// Unmapped after the socket is closed; read by the tests.
    #[cfg_attr(not(test), allow(dead_code))]
    umem: Mapping,
}

pub(crate) fn setsockopt<T>(fd: BorrowedFd<'_>, name: libc::c_int, val: &T) -> io::Result<()> {
    // SAFETY: val is a live T and optlen is its exact size; the kernel only reads it.
    crate::cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            SOL_XDP,
            name,
            (val as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// getsockopt(SOL_XDP, name) into a `T`, which must be plain old data (every bit pattern valid).
pub(crate) fn getsockopt<T: Default>(fd: BorrowedFd<'_>, name: libc::c_int) -> io::Result<T> {
    let mut val = T::default();
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: val is a live, writable T and len its size; the kernel writes at most len bytes
    // and the T used here are repr(C) integer structs, valid for any bytes.
    crate::cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            SOL_XDP,
            name,
            (&mut val as *mut T).cast(),
            &mut len,
        )
    })?;
    if len as usize != std::mem::size_of::<T>() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "getsockopt({name}) returned {len} bytes, expected {}",
                std::mem::size_of::<T>()
            ),
        ));
    }
    Ok(val)
}

/// One attempt: a fresh socket, `umem` registered, rings sized, bound.
fn open_and_bind(
    umem: &Mapping,
    ifindex: u32,
    queue_id: u32,
    mode: XskBindMode,
    cfg: &XskConfig,
) -> io::Result<OwnedFd> {
    // SAFETY: socket() takes only integers; a non-negative result is a new fd owned below.
    let raw = crate::cvt(unsafe { libc::socket(AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: raw is a fresh fd that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let reg = XdpUmemReg {
        addr: umem.addr() as u64,
        len: umem.len() as u64,
        chunk_size: cfg.frame_size,
        ..XdpUmemReg::default()
    };
    // The kernel pins the UMEM pages here (net/xdp/xdp_umem.c xdp_umem_reg), charged to
    // RLIMIT_MEMLOCK without CAP_IPC_LOCK.
    setsockopt(fd.as_fd(), XDP_UMEM_REG, &reg)?;
    for opt in [
        XDP_UMEM_FILL_RING,
        XDP_UMEM_COMPLETION_RING,
        XDP_RX_RING,
        XDP_TX_RING,
    ] {
        setsockopt(fd.as_fd(), opt, &cfg.ring_entries)?;
    }
    let mut flags = mode.flag();
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
    bind(fd.as_fd(), &sa)?;
    Ok(fd)
}

/// One `bind(2)` of an AF_XDP socket to `sa`.
pub(crate) fn bind(fd: BorrowedFd<'_>, sa: &SockaddrXdp) -> io::Result<()> {
    // SAFETY: sa is a live sockaddr_xdp and the length is its exact size; the kernel only
    // reads it.
    crate::cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (sa as *const SockaddrXdp).cast(),
            std::mem::size_of::<SockaddrXdp>() as libc::socklen_t,
        )
    })
    .map(drop)
}

impl XskSocket {
    /// Binds to queue `queue_id` of interface `ifindex` with [`XskConfig::default`].
    pub(crate) fn bind(ifindex: u32, queue_id: u32, mode: XskBindMode) -> io::Result<XskSocket> {
        Self::bind_with(ifindex, queue_id, mode, &XskConfig::default())
    }

    /// Creates an AF_XDP socket, registers a UMEM of `cfg.frame_count * cfg.frame_size` bytes of
    /// anonymous memory, sizes the fill, completion, RX and TX rings and binds. `EBUSY` (the
    /// queue's previous socket not yet released) is retried up to 10 times, 20 ms apart, each
    /// time with a fresh socket. Other errors are the kernel's errno, unchanged.
    pub(crate) fn bind_with(
        ifindex: u32,
        queue_id: u32,
        mode: XskBindMode,
        cfg: &XskConfig,
    ) -> io::Result<XskSocket> {
        let len = (cfg.frame_count as usize)
            .checked_mul(cfg.frame_size as usize)
            .filter(|&l| l > 0)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let umem = Mapping::anonymous(len)?;
        let mut attempt = 0;
        let fd = loop {
            match open_and_bind(&umem, ifindex, queue_id, mode, cfg) {
                Ok(fd) => break fd,
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && attempt < BUSY_RETRIES => {
                    attempt += 1;
                    std::thread::sleep(BUSY_PAUSE);
                }
                Err(e) => return Err(e),
            }
        };
        Ok(XskSocket { fd, umem })
    }

    /// Start address and length of the UMEM (descriptor addresses are offsets into it).
    #[cfg(test)]
    pub(crate) fn umem(&self) -> (usize, usize) {
        (self.umem.addr(), self.umem.len())
    }

    /// Where the rings are for mmap (`XDP_MMAP_OFFSETS`).
    #[cfg(test)]
    pub(crate) fn mmap_offsets(&self) -> io::Result<XdpMmapOffsets> {
        getsockopt(self.fd.as_fd(), XDP_MMAP_OFFSETS)
    }

    /// The socket's drop counters (`XDP_STATISTICS`).
    #[cfg(test)]
    pub(crate) fn statistics(&self) -> io::Result<XdpStatistics> {
        getsockopt(self.fd.as_fd(), XDP_STATISTICS)
    }
}

/// Binds an AF_XDP socket to queue `queue` of `ifindex` in `mode` (small UMEM, 64-entry rings,
/// need-wakeup), then closes it. The kernel's errno on failure (`EBUSY` retried first).
pub fn try_bind(ifindex: u32, queue: u32, mode: XskBindMode) -> io::Result<()> {
    XskSocket::bind(ifindex, queue, mode).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[zcnet_testkit::test]
    fn layouts_match_uapi() {
        // include/uapi/linux/if_xdp.h; confirmed against the running 6.18 kernel's BTF.
        assert_eq!(size_of::<SockaddrXdp>(), 16);
        assert_eq!(offset_of!(SockaddrXdp, sxdp_flags), 2);
        assert_eq!(offset_of!(SockaddrXdp, sxdp_ifindex), 4);
        assert_eq!(offset_of!(SockaddrXdp, sxdp_queue_id), 8);
        assert_eq!(offset_of!(SockaddrXdp, sxdp_shared_umem_fd), 12);
        assert_eq!(size_of::<XdpUmemReg>(), 32);
        assert_eq!(offset_of!(XdpUmemReg, chunk_size), 16);
        assert_eq!(offset_of!(XdpUmemReg, headroom), 20);
        assert_eq!(offset_of!(XdpUmemReg, flags), 24);
        assert_eq!(offset_of!(XdpUmemReg, tx_metadata_len), 28);
        assert_eq!(size_of::<XdpRingOffset>(), 32);
        assert_eq!(offset_of!(XdpRingOffset, desc), 16);
        assert_eq!(offset_of!(XdpRingOffset, flags), 24);
        assert_eq!(size_of::<XdpMmapOffsets>(), 128);
        assert_eq!(offset_of!(XdpMmapOffsets, tx), 32);
        assert_eq!(offset_of!(XdpMmapOffsets, fr), 64);
        assert_eq!(offset_of!(XdpMmapOffsets, cr), 96);
        assert_eq!(size_of::<XdpStatistics>(), 48);
        assert_eq!(offset_of!(XdpStatistics, tx_ring_empty_descs), 40);
        assert_eq!(size_of::<XdpDesc>(), 16);
        assert_eq!(offset_of!(XdpDesc, len), 8);
        assert_eq!(offset_of!(XdpDesc, options), 12);
        // And they agree with libc's definitions of the same structs.
        assert_eq!(size_of::<libc::sockaddr_xdp>(), size_of::<SockaddrXdp>());
        assert_eq!(size_of::<libc::xdp_umem_reg>(), size_of::<XdpUmemReg>());
        assert_eq!(
            size_of::<libc::xdp_mmap_offsets>(),
            size_of::<XdpMmapOffsets>()
        );
    }

    #[zcnet_testkit::test]
    fn constants_match_libc() {
        assert_eq!(AF_XDP, libc::AF_XDP);
        assert_eq!(SOL_XDP, libc::SOL_XDP);
        assert_eq!(XDP_UMEM_REG, libc::XDP_UMEM_REG);
        assert_eq!(XDP_RX_RING, libc::XDP_RX_RING);
        assert_eq!(XDP_TX_RING, libc::XDP_TX_RING);
        assert_eq!(XDP_UMEM_FILL_RING, libc::XDP_UMEM_FILL_RING);
        assert_eq!(XDP_UMEM_COMPLETION_RING, libc::XDP_UMEM_COMPLETION_RING);
        assert_eq!(XDP_MMAP_OFFSETS, libc::XDP_MMAP_OFFSETS);
        assert_eq!(XDP_STATISTICS, libc::XDP_STATISTICS);
        assert_eq!(XDP_COPY, libc::XDP_COPY);
        assert_eq!(XDP_ZEROCOPY, libc::XDP_ZEROCOPY);
        assert_eq!(XDP_USE_NEED_WAKEUP, libc::XDP_USE_NEED_WAKEUP);
        assert_eq!(XskBindMode::Copy.flag(), 2);
        assert_eq!(XskBindMode::ZeroCopy.name(), "zero-copy");
    }

    fn errno(r: io::Result<()>) -> Option<i32> {
        r.err().and_then(|e| e.raw_os_error())
    }

    #[zcnet_testkit::test]
    fn loopback_binds_in_copy_mode_only() {
        // lo of a private namespace (ifindex 1, one queue, down).
        let r = crate::os::in_private_netns(|| {
            let s = XskSocket::bind(1, 0, XskBindMode::Copy).expect("copy bind on lo");
            let off = s.mmap_offsets().expect("XDP_MMAP_OFFSETS");
            assert!(off.rx.desc > off.rx.consumer && off.fr.desc > 0);
            assert_eq!(
                s.statistics().expect("XDP_STATISTICS"),
                XdpStatistics::default()
            );
            assert_eq!(s.umem().1, 64 * 4096);
            drop(s);
            [
                // Rebinding right after close may meet EBUSY: retried inside.
                errno(try_bind(1, 0, XskBindMode::Copy)),
                errno(try_bind(1, 0, XskBindMode::Copy)),
                errno(try_bind(1, 0, XskBindMode::ZeroCopy)),
                errno(try_bind(1, 1, XskBindMode::Copy)),
                errno(try_bind(4242, 0, XskBindMode::Copy)),
            ]
        });
        let e = r;
        assert_eq!(
            e,
            [
                None,
                None,
                Some(libc::EOPNOTSUPP),
                Some(libc::EINVAL),
                Some(libc::ENODEV)
            ]
        );
    }

    #[zcnet_testkit::test]
    fn bad_sizes_are_einval() {
        let r = crate::os::in_private_netns(|| {
            let bad = |cfg: XskConfig| {
                XskSocket::bind_with(1, 0, XskBindMode::Copy, &cfg)
                    .err()
                    .and_then(|e| e.raw_os_error())
            };
            let d = XskConfig::default();
            [
                bad(XskConfig {
                    ring_entries: 100,
                    ..d
                }),
                bad(XskConfig {
                    frame_size: 3000,
                    ..d
                }),
                bad(XskConfig {
                    frame_count: 0,
                    ..d
                }),
            ]
        });
        let e = r;
        assert_eq!(e, [Some(libc::EINVAL); 3]);
    }
}
