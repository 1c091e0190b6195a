//! devmem TCP socket calls (Documentation/networking/devmem.rst): `recvmsg` with a control
//! buffer (the payload's device frags come as `SCM_DEVMEM_DMABUF` cmsgs), a safe walk over the
//! control messages it wrote, `SO_DEVMEM_DONTNEED` to give frags back, and a dma-buf made of
//! host memory (udmabuf) for machines without a device exporter.
//!
//! What Linux 6.18 does (net/ipv4/tcp.c `tcp_recvmsg_locked`, `tcp_recvmsg_dmabuf`):
//! - `recvmsg(.., MSG_SOCK_DEVMEM)` on a socket whose skbs hold device memory copies the skb's
//!   linear part into the iovec (one `SCM_DEVMEM_LINEAR` cmsg per copy) and describes each
//!   device frag with an `SCM_DEVMEM_DMABUF` cmsg; device frags do *not* advance the iovec, so
//!   the linear copies are packed at its start, in stream order. Every byte, linear or device,
//!   counts against the iovec's length: it bounds how much one call takes.
//! - One call never mixes readable (host) and unreadable (device) skbs: host data (a flow that
//!   arrived on a queue without the binding) is copied as by a plain `recvmsg`, with no cmsg.
//! - cmsgs are written with `put_cmsg_notrunc`: when the control buffer is full the call stops
//!   early and returns what it described (`-ETOOSMALL` only if not even the first fits); the
//!   rest stays in the socket. Without `MSG_SOCK_DEVMEM`, device data is refused (`EFAULT`).
//! - `SO_DEVMEM_DONTNEED` takes an array of `struct dmabuf_token` and returns how many tokens
//!   it freed (limits in zcnet_core::devmem).

use crate::cvt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use zcnet_core::devmem::{DmabufToken, MAX_DONTNEED_TOKENS, MSG_SOCK_DEVMEM, SO_DEVMEM_DONTNEED};

/// `MSG_SOCK_DEVMEM` as a `recvmsg` flag.
pub const MSG_SOCK_DEVMEM_FLAG: libc::c_int = MSG_SOCK_DEVMEM as libc::c_int;

/// `UDMABUF_CREATE` = `_IOW('u', 0x42, struct udmabuf_create)` (include/uapi/linux/udmabuf.h).
pub(crate) const UDMABUF_CREATE: libc::c_ulong = (1 << 30)
    | ((std::mem::size_of::<UdmabufCreate>() as libc::c_ulong) << 16)
    | ((b'u' as libc::c_ulong) << 8)
    | 0x42;
/// `UDMABUF_FLAGS_CLOEXEC`.
pub(crate) const UDMABUF_FLAGS_CLOEXEC: u32 = 0x01;
/// Where the udmabuf device lives (CONFIG_UDMABUF).
pub const UDMABUF_DEV: &str = "/dev/udmabuf";

/// `struct udmabuf_create` (24 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UdmabufCreate {
    /// `memfd`: a sealed memfd (F_SEAL_SHRINK set, F_SEAL_WRITE not).
    pub(crate) memfd: u32,
    /// `flags`: [`UDMABUF_FLAGS_CLOEXEC`].
    pub(crate) flags: u32,
    /// `offset` in the memfd (page-aligned).
    pub(crate) offset: u64,
    /// `size` (page multiple).
    pub(crate) size: u64,
}

/// What `recvmsg_ctrl` received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// The call's return value: bytes taken from the socket (for devmem, device and linear
    /// bytes together); 0 at end of stream.
    pub bytes: usize,
    /// Bytes of the control buffer the kernel wrote (`msg_controllen` on return).
    pub ctrl_len: usize,
    /// `MSG_CTRUNC` was set: control messages were lost.
    pub ctrl_truncated: bool,
}

/// Buffers one [`recvmsg_ctrl_vectored`] call takes at most (the iovec array lives on the stack;
/// the kernel's own limit, `UIO_MAXIOV`, is 1024).
pub const MAX_IOVECS: usize = 64;

/// `recvmsg(fd)` into `buf` with `ctrl` as the control buffer and `flags` (e.g.
/// [`MSG_SOCK_DEVMEM_FLAG`]` | MSG_DONTWAIT`). Walk the control messages with
/// [`cmsgs`]`(&ctrl[..r.ctrl_len])`. One buffer of [`recvmsg_ctrl_vectored`].
#[cfg(test)]
pub(crate) fn recvmsg_ctrl(
    fd: RawFd,
    buf: &mut [u8],
    ctrl: &mut [u8],
    flags: libc::c_int,
) -> io::Result<Received> {
    recvmsg_ctrl_vectored(fd, [buf], ctrl, flags)
}

/// `recvmsg(fd)` into several buffers (an iovec array, filled in the order given) with `ctrl`
/// as the control buffer. With `MSG_SOCK_DEVMEM`, every byte the call takes counts against the
/// buffers' total length, device bytes included, while only linear bytes are written, packed
/// from the start of the first buffer on (crossing into the next ones as they fill).
///
/// `EINVAL` without a call for more than [`MAX_IOVECS`] buffers, or for a total length of 0:
/// TCP answers an empty read with 0, which would be indistinguishable from end of stream.
pub fn recvmsg_ctrl_vectored<'a, I>(
    fd: RawFd,
    bufs: I,
    ctrl: &mut [u8],
    flags: libc::c_int,
) -> io::Result<Received>
where
    I: IntoIterator<Item = &'a mut [u8]>,
{
    let empty = libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    };
    let mut iov = [empty; MAX_IOVECS];
    let (mut n, mut total) = (0usize, 0usize);
    for b in bufs {
        let slot = iov
            .get_mut(n)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        *slot = libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        };
        n += 1;
        total = total.saturating_add(b.len());
    }
    if total == 0 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: msghdr is a plain C struct for which all-zero bytes are a valid value (null
    // pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = n as _;
    if !ctrl.is_empty() {
        msg.msg_control = ctrl.as_mut_ptr().cast();
        msg.msg_controllen = ctrl.len() as _;
    }
    // SAFETY: `msg` points at the first `n` entries of `iov`, each describing a slice borrowed
    // mutably for `'a` (which outlives this call, so nothing else can touch those bytes during
    // it; safe slices are disjoint), and at `ctrl`, exclusively borrowed; the kernel writes at
    // most each entry's length into it and at most `ctrl.len()` control bytes.
    let r = unsafe { libc::recvmsg(fd, &mut msg, flags) };
    if r < 0 {
        return Err(crate::last_err());
    }
    Ok(Received {
        bytes: r as usize,
        ctrl_len: (msg.msg_controllen as usize).min(ctrl.len()),
        ctrl_truncated: msg.msg_flags & libc::MSG_CTRUNC != 0,
    })
}

/// `CMSG_ALIGN`: control messages are aligned to `sizeof(long)` (include/linux/socket.h).
pub(crate) const fn cmsg_align(len: usize) -> usize {
    let a = std::mem::size_of::<usize>();
    (len + a - 1) & !(a - 1)
}

/// Bytes of a control-message header as the kernel writes it: `size_t cmsg_len; int
/// cmsg_level; int cmsg_type;`, aligned (16 on 64-bit).
pub const CMSG_HDR_LEN: usize = cmsg_align(std::mem::size_of::<usize>() + 8);

/// `CMSG_SPACE(data_len)`: bytes one control message with `data_len` bytes of data takes.
pub const fn cmsg_space(data_len: usize) -> usize {
    CMSG_HDR_LEN + cmsg_align(data_len)
}

/// One control message: `cmsg_level`, `cmsg_type` and its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cmsg<'a> {
    /// `cmsg_level` (e.g. `SOL_SOCKET`).
    pub level: i32,
    /// `cmsg_type` (e.g. `SCM_DEVMEM_DMABUF`).
    pub ty: i32,
    /// `cmsg_len - CMSG_LEN(0)` bytes of data.
    pub data: &'a [u8],
}

/// The control messages in `ctrl` (the bytes a `recvmsg` wrote: `&ctrl[..ctrl_len]`), in order.
/// Plain byte arithmetic, the same walk as `CMSG_FIRSTHDR`/`CMSG_NXTHDR`: a header that does
/// not fit, or whose `cmsg_len` is shorter than a header or runs past the end, yields one
/// `InvalidData` error and ends the walk.
pub fn cmsgs(ctrl: &[u8]) -> Cmsgs<'_> {
    Cmsgs { ctrl, off: 0 }
}

/// Iterator of [`cmsgs`].
#[derive(Debug, Clone)]
pub struct Cmsgs<'a> {
    ctrl: &'a [u8],
    off: usize,
}

impl<'a> Iterator for Cmsgs<'a> {
    type Item = io::Result<Cmsg<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.ctrl.get(self.off..)?;
        if rest.is_empty() {
            return None;
        }
        let bad = |what: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("malformed control message: {what}"),
            )
        };
        let w = std::mem::size_of::<usize>();
        if rest.len() < CMSG_HDR_LEN {
            self.off = self.ctrl.len();
            return Some(Err(bad("truncated header")));
        }
        let mut len = [0u8; std::mem::size_of::<usize>()];
        len.copy_from_slice(&rest[..w]);
        let len = usize::from_ne_bytes(len);
        let int_at =
            |i: usize| i32::from_ne_bytes([rest[i], rest[i + 1], rest[i + 2], rest[i + 3]]);
        let (level, ty) = (int_at(w), int_at(w + 4));
        if len < CMSG_HDR_LEN || len > rest.len() {
            self.off = self.ctrl.len();
            return Some(Err(bad(&format!(
                "cmsg_len {len} with {} bytes left",
                rest.len()
            ))));
        }
        self.off += cmsg_align(len).min(rest.len());
        Some(Ok(Cmsg {
            level,
            ty,
            data: &rest[CMSG_HDR_LEN..len],
        }))
    }
}

/// `setsockopt(fd, SOL_SOCKET, SO_DEVMEM_DONTNEED, tokens)`: gives device frags back; returns
/// how many tokens the kernel freed (tokens it does not know are skipped, so 0 is a valid
/// answer). 6.18 refuses non-TCP sockets with `EBADF`, and more than 128 entries with `EINVAL`
/// (checked here first, without a call). An empty array is `Ok(0)` without a call: the kernel
/// would refuse it with `EINVAL` (`sk_setsockopt` wants at least `sizeof(int)` bytes).
pub fn devmem_dontneed(fd: RawFd, tokens: &[DmabufToken]) -> io::Result<u32> {
    if tokens.len() > MAX_DONTNEED_TOKENS {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    if tokens.is_empty() {
        return Ok(0);
    }
    let raw: Vec<libc::dmabuf_token> = tokens
        .iter()
        .map(|t| libc::dmabuf_token {
            token_start: t.token_start,
            token_count: t.token_count,
        })
        .collect();
    let len = std::mem::size_of_val(raw.as_slice()) as libc::socklen_t;
    // SAFETY: `raw` is a live array of `len` bytes of `struct dmabuf_token` (repr(C), checked
    // against the uapi size in the tests), which the kernel only reads.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_DEVMEM_DONTNEED,
            raw.as_ptr().cast(),
            len,
        )
    };
    cvt(r).map(|n| n as u32)
}

/// The size of dma-buf `fd` (`lseek(fd, 0, SEEK_END)`, which dma-bufs answer with their size;
/// on other files it is their length too).
pub fn dmabuf_size(fd: BorrowedFd<'_>) -> io::Result<u64> {
    // SAFETY: lseek takes an fd (borrowed, so open) and integers; it touches no memory of ours.
    let r = unsafe { libc::lseek(fd.as_raw_fd(), 0, libc::SEEK_END) };
    if r < 0 {
        Err(crate::last_err())
    } else {
        Ok(r as u64)
    }
}

/// A dma-buf of `len` bytes (rounded up to pages) of host memory: a memfd sealed against
/// shrinking, handed to `/dev/udmabuf` (`UDMABUF_CREATE`, drivers/dma-buf/udmabuf.c). The
/// dma-buf keeps the pages; the memfd and the device fd are closed before returning, on every
/// path. Errors keep the errno: `ENOENT` when `/dev/udmabuf` does not exist (a kernel without
/// CONFIG_UDMABUF, or the module not loaded), `EINVAL` past the driver's `size_limit_mb` (64 MiB
/// by default), `EACCES`/`EPERM` without access to the device. See [`explain_udmabuf_errno`].
pub fn udmabuf_create(len: usize) -> io::Result<OwnedFd> {
    let (dev, memfd, size) = udmabuf_parts(len)?;
    udmabuf_of(&dev, &memfd, size)
}

/// A host region that is also a dma-buf: a memfd of `len` bytes (rounded up to pages) sealed
/// against shrinking, mapped shared and writable into this process ([`crate::mem::Mapping`],
/// `Backing::Memfd`), and the dma-buf `/dev/udmabuf` made of the same pages (offset 0 = the
/// mapping's first byte). What the CPU writes through the mapping is what a device reads
/// through the dma-buf. The memfd and the device fd are closed before returning; the mapping
/// and the dma-buf each keep the pages. Errors as [`udmabuf_create`]'s.
pub fn udmabuf_region(len: usize) -> io::Result<(crate::mem::Mapping, OwnedFd)> {
    let (dev, memfd, size) = udmabuf_parts(len)?;
    let map = crate::mem::Mapping::shared_fd(memfd.as_fd(), size)?;
    let dmabuf = udmabuf_of(&dev, &memfd, size)?;
    Ok((map, dmabuf))
}

/// `/dev/udmabuf` opened, and a memfd of `len` bytes rounded up to pages (returned as `size`)
/// sealed with `F_SEAL_SHRINK`, as `UDMABUF_CREATE` requires (drivers/dma-buf/udmabuf.c
/// `check_memfd_seals`: F_SEAL_SHRINK set, F_SEAL_WRITE not). The device is opened first:
/// without it nothing else is made.
fn udmabuf_parts(len: usize) -> io::Result<(std::fs::File, OwnedFd, usize)> {
    if len == 0 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let page = crate::mem::page_size();
    let size = len
        .checked_next_multiple_of(page)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(UDMABUF_DEV)?;
    // SAFETY: the name is a NUL-terminated literal; memfd_create only reads it.
    let memfd = unsafe {
        libc::memfd_create(
            c"zcnet-udmabuf".as_ptr(),
            libc::MFD_ALLOW_SEALING | libc::MFD_CLOEXEC,
        )
    };
    let memfd = cvt(memfd)?;
    // SAFETY: memfd_create just returned this fd; nothing else owns it.
    let memfd = unsafe { OwnedFd::from_raw_fd(memfd) };
    let size_off =
        libc::off_t::try_from(size).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
    // SAFETY: ftruncate takes an owned, open fd and an integer.
    cvt(unsafe { libc::ftruncate(memfd.as_raw_fd(), size_off) })?;
    // SAFETY: fcntl(F_ADD_SEALS) takes an owned, open fd and an integer flag set.
    cvt(unsafe { libc::fcntl(memfd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) })?;
    Ok((dev, memfd, size))
}

/// `UDMABUF_CREATE` on `dev` for `size` bytes of `memfd` from offset 0: a new dma-buf fd.
fn udmabuf_of(dev: &std::fs::File, memfd: &OwnedFd, size: usize) -> io::Result<OwnedFd> {
    let mut req = UdmabufCreate {
        memfd: u32::try_from(memfd.as_raw_fd())
            .map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?,
        flags: UDMABUF_FLAGS_CLOEXEC,
        offset: 0,
        size: size as u64,
    };
    // SAFETY: `req` is a live `struct udmabuf_create` (layout checked in the tests) that the
    // kernel only reads; `dev` is open.
    let fd = unsafe { libc::ioctl(dev.as_raw_fd(), UDMABUF_CREATE as _, &mut req) };
    let fd = cvt(fd)?;
    // SAFETY: UDMABUF_CREATE returns a new dma-buf fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// What an errno from [`udmabuf_create`] most likely means.
pub fn explain_udmabuf_errno(errno: i32) -> &'static str {
    match errno {
        libc::ENOENT | libc::ENODEV | libc::ENXIO => {
            "no /dev/udmabuf: the kernel lacks CONFIG_UDMABUF or the udmabuf module is not loaded"
        }
        libc::EACCES | libc::EPERM => "no permission to open /dev/udmabuf",
        libc::EINVAL => "the size exceeds the udmabuf driver's size_limit_mb (64 MiB by default)",
        libc::ENOMEM => "out of memory for the udmabuf",
        _ => "unexpected error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::mem::{offset_of, size_of};
    use std::os::fd::AsFd;

    #[zcnet_testkit::test]
    fn uapi_layouts() {
        // include/uapi/linux/uio.h, udmabuf.h of 6.18.
        assert_eq!(size_of::<libc::dmabuf_token>(), 8);
        assert_eq!(
            size_of::<libc::dmabuf_token>(),
            zcnet_core::devmem::DMABUF_TOKEN_LEN
        );
        assert_eq!(offset_of!(libc::dmabuf_token, token_count), 4);
        assert_eq!(
            size_of::<libc::dmabuf_cmsg>(),
            zcnet_core::devmem::DMABUF_CMSG_LEN
        );
        assert_eq!(size_of::<UdmabufCreate>(), 24);
        assert_eq!(offset_of!(UdmabufCreate, offset), 8);
        assert_eq!(offset_of!(UdmabufCreate, size), 16);
        assert_eq!(UDMABUF_CREATE, 0x4018_7542);
        // The header the kernel writes is the C library's cmsghdr.
        assert_eq!(CMSG_HDR_LEN, cmsg_align(size_of::<libc::cmsghdr>()));
        for n in [0usize, 1, 8, 16, 24, 100] {
            // SAFETY: CMSG_SPACE/CMSG_LEN are pure arithmetic.
            let (space, len) = unsafe { (libc::CMSG_SPACE(n as u32), libc::CMSG_LEN(n as u32)) };
            assert_eq!(cmsg_space(n), space as usize, "CMSG_SPACE({n})");
            assert_eq!(CMSG_HDR_LEN + n, len as usize, "CMSG_LEN({n})");
        }
    }

    /// Writes one control message the way the kernel does.
    fn put(buf: &mut Vec<u8>, level: i32, ty: i32, data: &[u8]) {
        let start = buf.len();
        buf.extend_from_slice(&(CMSG_HDR_LEN + data.len()).to_ne_bytes());
        buf.extend_from_slice(&level.to_ne_bytes());
        buf.extend_from_slice(&ty.to_ne_bytes());
        buf.resize(start + CMSG_HDR_LEN, 0);
        buf.extend_from_slice(data);
        buf.resize(start + cmsg_space(data.len()), 0);
    }

    #[zcnet_testkit::test]
    fn walks_devmem_cmsgs_in_order() {
        use zcnet_core::devmem::{DevmemCmsg, DmabufCmsg, SCM_DEVMEM_DMABUF, SCM_DEVMEM_LINEAR};
        let lin = DmabufCmsg {
            frag_size: 66,
            ..Default::default()
        };
        let dev = DmabufCmsg {
            frag_offset: 0x1_0000_2000,
            frag_size: 1448,
            frag_token: 7,
            dmabuf_id: 3,
            flags: 0,
        };
        let mut b = Vec::new();
        put(&mut b, libc::SOL_SOCKET, SCM_DEVMEM_LINEAR, &lin.to_bytes());
        put(&mut b, libc::SOL_SOCKET, SCM_DEVMEM_DMABUF, &dev.to_bytes());
        put(&mut b, libc::SOL_IP, libc::IP_TOS, &[0x10]);
        assert_eq!(b.len(), 2 * cmsg_space(24) + cmsg_space(1));
        let got: Vec<_> = cmsgs(&b).map(|c| c.unwrap()).collect();
        assert_eq!(got.len(), 3);
        let parsed: Vec<_> = got
            .iter()
            .map(|c| DevmemCmsg::parse(c.level, c.ty, c.data).unwrap())
            .collect();
        assert_eq!(
            parsed,
            [
                Some(DevmemCmsg::Linear { len: 66 }),
                Some(DevmemCmsg::Dmabuf(dev)),
                None
            ]
        );
        assert_eq!(got[2].data, [0x10]);
        // The last message's padding may be missing (the kernel counts it in msg_controllen,
        // but a walk must not need it).
        let trimmed = &b[..b.len() - (cmsg_space(1) - CMSG_HDR_LEN - 1)];
        assert_eq!(cmsgs(trimmed).filter(|c| c.is_ok()).count(), 3);
        assert_eq!(cmsgs(&[]).count(), 0);
    }

    #[zcnet_testkit::test]
    fn malformed_control_buffers_end_the_walk() {
        let mut b = Vec::new();
        put(&mut b, libc::SOL_SOCKET, 79, &[0; 24]);
        // A truncated header after a good message.
        let mut t = b.clone();
        t.extend_from_slice(&[1, 2, 3]);
        let v: Vec<_> = cmsgs(&t).collect();
        assert_eq!(v.len(), 2);
        assert!(v[0].is_ok());
        assert_eq!(
            v[1].as_ref().unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        // cmsg_len shorter than a header, and longer than what is left.
        for bad_len in [CMSG_HDR_LEN - 1, b.len() + 1] {
            let mut t = b.clone();
            t[..size_of::<usize>()].copy_from_slice(&bad_len.to_ne_bytes());
            let v: Vec<_> = cmsgs(&t).collect();
            assert_eq!(v.len(), 1, "cmsg_len {bad_len}");
            assert!(v[0].is_err());
        }
    }

    fn tcp_pair() -> (std::net::TcpStream, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    fn set_int(fd: RawFd, level: i32, opt: i32, v: i32) {
        // SAFETY: `v` is a live c_int whose size is passed; the kernel only reads it.
        let r = unsafe {
            libc::setsockopt(
                fd,
                level,
                opt,
                (&v as *const i32).cast(),
                size_of::<i32>() as libc::socklen_t,
            )
        };
        cvt(r).unwrap();
    }

    #[zcnet_testkit::test]
    fn msg_sock_devmem_on_host_memory_is_a_plain_receive() {
        // TCP over loopback: the skbs are host memory (readable), so MSG_SOCK_DEVMEM changes
        // nothing: the bytes are copied and no devmem cmsg comes. With SO_TIMESTAMPNS the
        // kernel adds a real control message to walk.
        let (mut a, b) = tcp_pair();
        set_int(b.as_raw_fd(), libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1);
        let mut buf = [0u8; 64];
        let mut ctrl = [0u8; 256];
        // The first socket to ask for timestamps turns them on for the whole system from a
        // work item (net_enable_timestamp: the static key is flipped later), so packets of the
        // next moments may come unstamped: wait until one comes stamped.
        for i in 0.. {
            a.write_all(b"w").unwrap();
            let r = recvmsg_ctrl(b.as_raw_fd(), &mut buf, &mut ctrl, 0).unwrap();
            assert_eq!(r.bytes, 1);
            if r.ctrl_len > 0 {
                break;
            }
            assert!(i < 500, "no timestamp after 5 s");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        a.write_all(b"hello devmem").unwrap();
        let r = recvmsg_ctrl(b.as_raw_fd(), &mut buf, &mut ctrl, MSG_SOCK_DEVMEM_FLAG).unwrap();
        assert_eq!(&buf[..r.bytes], b"hello devmem");
        assert!(!r.ctrl_truncated);
        let msgs: Vec<_> = cmsgs(&ctrl[..r.ctrl_len]).map(|c| c.unwrap()).collect();
        assert_eq!(msgs.len(), 1, "{msgs:?}");
        assert_eq!(
            (msgs[0].level, msgs[0].ty),
            (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS)
        );
        assert_eq!(msgs[0].data.len(), size_of::<libc::timespec>());
        // Nothing more: EAGAIN with MSG_DONTWAIT.
        let e = recvmsg_ctrl(
            b.as_raw_fd(),
            &mut buf,
            &mut ctrl,
            MSG_SOCK_DEVMEM_FLAG | libc::MSG_DONTWAIT,
        )
        .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        // A too-small control buffer: the data still comes, the cmsg is cut (MSG_CTRUNC).
        a.write_all(b"x").unwrap();
        let mut tiny = [0u8; 8];
        let r = recvmsg_ctrl(b.as_raw_fd(), &mut buf, &mut tiny, 0).unwrap();
        assert_eq!((r.bytes, r.ctrl_truncated), (1, true));
        // End of stream.
        drop(a);
        let r = recvmsg_ctrl(b.as_raw_fd(), &mut buf, &mut ctrl, MSG_SOCK_DEVMEM_FLAG).unwrap();
        assert_eq!(r.bytes, 0);
    }

    #[zcnet_testkit::test]
    fn one_read_fills_several_buffers_in_order() {
        let (mut a, b) = tcp_pair();
        a.write_all(b"abcdefghij").unwrap();
        let (mut x, mut y, mut z) = ([0u8; 4], [0u8; 3], [0u8; 8]);
        let mut ctrl = [0u8; 64];
        // Wait for all ten bytes to be there (loopback delivers them at once, but be sure).
        let mut peek = [0u8; 16];
        while crate::sock::recv(b.as_raw_fd(), &mut peek, libc::MSG_PEEK).unwrap() < 10 {}
        let bufs: [&mut [u8]; 3] = [&mut x, &mut y, &mut z];
        let r =
            recvmsg_ctrl_vectored(b.as_raw_fd(), bufs, &mut ctrl, MSG_SOCK_DEVMEM_FLAG).unwrap();
        assert_eq!(r.bytes, 10);
        assert_eq!((&x, &y, &z[..3]), (b"abcd", b"efg", &b"hij"[..]));
        // Nothing to read into, or too many buffers: refused before the call (a 0-byte TCP
        // read would look like end of stream).
        let e = recvmsg_ctrl_vectored(b.as_raw_fd(), [&mut [][..]], &mut ctrl, 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        let none: [&mut [u8]; 0] = [];
        let e = recvmsg_ctrl_vectored(b.as_raw_fd(), none, &mut ctrl, 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        let mut many = [[0u8; 1]; MAX_IOVECS + 1];
        let e = recvmsg_ctrl_vectored(
            b.as_raw_fd(),
            many.iter_mut().map(|m| &mut m[..]),
            &mut ctrl,
            libc::MSG_DONTWAIT,
        )
        .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        // Exactly the limit is fine (and there is nothing to read: EAGAIN, not EINVAL).
        let e = recvmsg_ctrl_vectored(
            b.as_raw_fd(),
            many[..MAX_IOVECS].iter_mut().map(|m| &mut m[..]),
            &mut ctrl,
            libc::MSG_DONTWAIT,
        )
        .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    }

    #[zcnet_testkit::test]
    fn dontneed_on_sockets_without_device_frags() {
        // 6.18 net/core/sock.c sock_devmem_dontneed: a TCP socket with no frags handed out
        // frees nothing (unknown tokens are skipped); other sockets are EBADF; more than
        // MAX_DONTNEED_TOKENS entries EINVAL.
        let (_a, b) = tcp_pair();
        let t = |s, c| DmabufToken {
            token_start: s,
            token_count: c,
        };
        assert_eq!(
            devmem_dontneed(b.as_raw_fd(), &[t(0, 5), t(100, 1)]).unwrap(),
            0
        );
        assert_eq!(devmem_dontneed(b.as_raw_fd(), &[]).unwrap(), 0);
        // One entry of 4 billion tokens: the kernel looks at 1024 of them at most and frees none.
        assert_eq!(
            devmem_dontneed(b.as_raw_fd(), &[t(0, u32::MAX)]).unwrap(),
            0
        );
        let many = vec![t(0, 1); MAX_DONTNEED_TOKENS + 1];
        let e = devmem_dontneed(b.as_raw_fd(), &many).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let e = devmem_dontneed(u.as_raw_fd(), &[t(0, 1)]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBADF));
    }

    fn open_fds() -> usize {
        std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
    }

    #[zcnet_testkit::test]
    fn udmabuf_errors_keep_the_errno() {
        assert_eq!(
            udmabuf_create(0).unwrap_err().raw_os_error(),
            Some(libc::EINVAL)
        );
        if std::path::Path::new(UDMABUF_DEV).exists() {
            // A kernel with CONFIG_UDMABUF: a real dma-buf whose size is the rounded length.
            let fd = udmabuf_create(5000).unwrap();
            let page = crate::mem::page_size() as u64;
            assert_eq!(
                dmabuf_size(fd.as_fd()).unwrap(),
                5000u64.div_ceil(page) * page
            );
            return;
        }
        // A kernel built without CONFIG_UDMABUF (as this machine's): ENOENT, and nothing left open.
        let before = open_fds();
        for _ in 0..16 {
            let e = udmabuf_create(1 << 20).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
            assert!(explain_udmabuf_errno(libc::ENOENT).contains("CONFIG_UDMABUF"));
        }
        // Other tests run concurrently: allow their transient fds, not 16 leaked ones.
        assert!(open_fds() < before + 8);
    }

    #[zcnet_testkit::test]
    fn dmabuf_size_of_a_plain_file() {
        let mut f = std::fs::File::from(
            // SAFETY: the name is a NUL-terminated literal.
            cvt(unsafe { libc::memfd_create(c"zcnet-test".as_ptr(), libc::MFD_CLOEXEC) })
                // SAFETY: memfd_create returned a fresh fd that nothing else owns.
                .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
                .unwrap(),
        );
        f.write_all(&[7u8; 12345]).unwrap();
        assert_eq!(dmabuf_size(f.as_fd()).unwrap(), 12345);
    }
}
