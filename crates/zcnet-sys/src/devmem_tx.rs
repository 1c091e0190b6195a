//! devmem TCP transmit (Documentation/networking/devmem.rst, "TX Interface"): `sendmsg` from a
//! dma-buf bound to the egress device with the netdev family's `bind-tx`, and the two questions
//! a sender asks before binding: which device is the socket bound to, and which device owns its
//! local address.
//!
//! What Linux 6.18 does with such a send (net/ipv4/tcp.c `tcp_sendmsg_locked`, net/core/sock.c
//! `__sock_cmsg_send`, net/core/devmem.c, net/core/datagram.c `zerocopy_fill_skb_from_devmem`):
//! - The control message is `SOL_SOCKET`/`SCM_DEVMEM_DMABUF` with exactly `CMSG_LEN(sizeof(u32))`
//!   bytes holding the binding id; any other length is `EINVAL`. Each `iov_base` is an *offset*
//!   into the dma-buf (the kernel never reads memory of this process for it).
//! - A zero-length send returns 0 after the control message is parsed; Linux 7.2 refuses it with
//!   `EINVAL` (zcnet never sends zero bytes).
//! - `MSG_ZEROCOPY` on a socket with `SO_ZEROCOPY` is required, else `EINVAL`; completions come
//!   on the error queue exactly as for `MSG_ZEROCOPY` (see [`crate::sock::read_errqueue`]).
//! - An id that names no binding, or an RX binding, is `EINVAL`; a socket whose route (its
//!   cached dst, rebuilt if it expired, `EHOSTUNREACH` if that fails) leaves through another
//!   device than the binding's is `ENODEV`. `SO_BINDTODEVICE` is recommended, not required.
//! - An offset at or past the dma-buf's size is `EFAULT` (`net_devmem_get_niov_at`); when some
//!   bytes were already queued the call returns that short count instead and the next call
//!   fails. A failed call consumes no zero-copy id (the uarg is aborted).
//! - Only TCP implements it: on a UDP socket the cmsg is accepted and ignored, and the kernel
//!   would read `iov_base` as an address. Binding ids start at 1; an id of 0 means "no devmem"
//!   and would do the same. [`sendmsg_devmem`] refuses id 0 without a call, and its callers
//!   must pass a TCP socket.

use crate::devmem::{cmsg_space, CMSG_HDR_LEN};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::RawFd;
use zcnet_core::devmem::{SCM_DEVMEM_DMABUF, SOL_SOCKET};

/// Bytes of the binding id the control message carries (`__u32`).
pub(crate) const DMABUF_ID_LEN: usize = std::mem::size_of::<u32>();
/// `CMSG_LEN(sizeof(__u32))`: the `cmsg_len` the kernel insists on (20 on 64-bit).
pub(crate) const TX_CMSG_LEN: usize = CMSG_HDR_LEN + DMABUF_ID_LEN;
/// `CMSG_SPACE(sizeof(__u32))`: bytes of the whole control buffer (24 on 64-bit).
pub(crate) const TX_CMSG_SPACE: usize = cmsg_space(DMABUF_ID_LEN);

/// The control buffer of one devmem send: one `SCM_DEVMEM_DMABUF` message, aligned like a
/// `struct cmsghdr` (the kernel copies it before parsing, so this is belt and braces).
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TxControl([u8; TX_CMSG_SPACE]);

impl TxControl {
    /// The bytes, as `msg_control`/`msg_controllen` take them.
    pub(crate) fn as_bytes(&self) -> &[u8; TX_CMSG_SPACE] {
        &self.0
    }
}

/// The control buffer for a devmem send from binding `dmabuf_id`, byte for byte what
/// `CMSG_FIRSTHDR`/`CMSG_LEN`/`CMSG_DATA` build in devmem.rst's example: `cmsg_len =
/// CMSG_LEN(4)`, `SOL_SOCKET`, `SCM_DEVMEM_DMABUF`, the id in native byte order, zero padding
/// up to `CMSG_SPACE(4)`. Pure.
pub(crate) fn tx_control(dmabuf_id: u32) -> TxControl {
    let mut b = [0u8; TX_CMSG_SPACE];
    let w = std::mem::size_of::<usize>();
    b[..w].copy_from_slice(&TX_CMSG_LEN.to_ne_bytes());
    b[w..w + 4].copy_from_slice(&SOL_SOCKET.to_ne_bytes());
    b[w + 4..w + 8].copy_from_slice(&SCM_DEVMEM_DMABUF.to_ne_bytes());
    b[CMSG_HDR_LEN..TX_CMSG_LEN].copy_from_slice(&dmabuf_id.to_ne_bytes());
    TxControl(b)
}

/// `sendmsg(fd)` of `len` bytes at `offset` in the dma-buf of binding `dmabuf_id`, with
/// `flags | MSG_ZEROCOPY | MSG_NOSIGNAL`; returns the bytes the kernel accepted (a stream may
/// take fewer). `fd` must be a connected TCP socket with `SO_ZEROCOPY` (kernel rules and errnos
/// in the module docs). Refused without a call, `EINVAL`: `dmabuf_id` 0 (the kernel would take
/// `offset` for an address in this process) and `offset + len` past `u64`/`usize`.
pub fn sendmsg_devmem(
    fd: RawFd,
    dmabuf_id: u32,
    offset: u64,
    len: usize,
    flags: libc::c_int,
) -> io::Result<usize> {
    sendmsg_with_control(
        fd,
        tx_control(dmabuf_id).as_bytes(),
        dmabuf_id,
        offset,
        len,
        flags,
    )
}

fn sendmsg_with_control(
    fd: RawFd,
    control: &[u8],
    dmabuf_id: u32,
    offset: u64,
    len: usize,
    flags: libc::c_int,
) -> io::Result<usize> {
    let einval = || io::Error::from_raw_os_error(libc::EINVAL);
    if dmabuf_id == 0 {
        return Err(einval());
    }
    let base = usize::try_from(offset).map_err(|_| einval())?;
    base.checked_add(len).ok_or_else(einval)?;
    let mut iov = libc::iovec {
        // An integer in pointer clothing: the kernel resolves it against the binding
        // (net_devmem_get_niov_at); nothing here or there dereferences it in this process.
        iov_base: base as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: msghdr is a plain C struct for which all-zero bytes are a valid value (null
    // pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_ptr().cast_mut().cast();
    msg.msg_controllen = control.len() as _;
    // SAFETY: `msg` points at one live iovec and at `control`, which the kernel only reads
    // (sendmsg copies msg_control in); the iovec's base is a dma-buf offset that the kernel
    // interprets through the binding named in the control message (dmabuf_id != 0 was checked)
    // on the TCP socket the caller promises, and never as memory of this process.
    let n = unsafe { libc::sendmsg(fd, &msg, flags | libc::MSG_ZEROCOPY | libc::MSG_NOSIGNAL) };
    if n < 0 {
        Err(crate::last_err())
    } else {
        Ok(n as usize)
    }
}

/// The device the socket is bound to with `SO_BINDTODEVICE`, `None` when it is not bound.
pub fn bound_device(fd: RawFd) -> io::Result<Option<String>> {
    let mut name = [0u8; libc::IFNAMSIZ];
    let mut len = name.len() as libc::socklen_t;
    // SAFETY: name/len are live locals; the kernel writes at most `len` bytes into `name`.
    crate::cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_BINDTODEVICE,
            name.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    let got = &name[..(len as usize).min(name.len())];
    let end = got.iter().position(|&c| c == 0).unwrap_or(got.len());
    Ok((end > 0).then(|| String::from_utf8_lossy(&got[..end]).into_owned()))
}

/// The socket's local address (`getsockname`), `None` for a socket that is not IP.
pub fn local_ip(fd: RawFd) -> io::Result<Option<IpAddr>> {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: ss/len are live locals of the size the kernel is told.
    crate::cvt(unsafe {
        libc::getsockname(
            fd,
            (&mut ss as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    })?;
    // SAFETY: `ss` is a sockaddr_storage the kernel filled; reading it as the family it
    // declares stays inside its size (sockaddr_storage is larger than either).
    Ok(unsafe { sockaddr_ip((&ss as *const libc::sockaddr_storage).cast()) })
}

/// The IP address in a socket address, `None` for other families.
///
/// # Safety
/// `sa` must be null or point at a readable socket address whose `sa_family` tells its type
/// (as `getsockname` and `getifaddrs` give them).
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: non-null and readable per the contract; sa_family leads every sockaddr.
    let family = i32::from(unsafe { (*sa).sa_family });
    match family {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in; read_unaligned makes no alignment
            // assumption about the caller's buffer.
            let sin = unsafe { std::ptr::read_unaligned(sa.cast::<libc::sockaddr_in>()) };
            Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                sin.sin_addr.s_addr,
            ))))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address is a sockaddr_in6; as above.
            let sin6 = unsafe { std::ptr::read_unaligned(sa.cast::<libc::sockaddr_in6>()) };
            Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
        }
        _ => None,
    }
}

/// The interfaces of the calling thread's network namespace that carry `ip` (`getifaddrs(3)`,
/// which asks rtnetlink), in the order the kernel lists them. An IPv4-mapped IPv6 address is
/// looked up as IPv4.
pub fn ifaces_with_addr(ip: IpAddr) -> io::Result<Vec<String>> {
    let want = ip.to_canonical();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: `head` is a live out-pointer; on success it owns a list freed below.
    crate::cvt(unsafe { libc::getifaddrs(&mut head) })?;
    let mut names = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        // SAFETY: ifa_addr is null or a socket address of the family it declares.
        let addr = unsafe { sockaddr_ip(ifa.ifa_addr) };
        if addr.map(|a| a.to_canonical()) == Some(want) && !ifa.ifa_name.is_null() {
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
            let name = name.to_string_lossy().into_owned();
            if !names.contains(&name) {
                names.push(name);
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and is freed once; no reference into it survives.
    unsafe { libc::freeifaddrs(head) };
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devmem::cmsgs;
    use std::io::Read;
    use std::os::fd::AsRawFd;

    #[zcnet_testkit::test]
    fn control_bytes_are_exact() {
        // x86_64 (and every 64-bit little-endian Linux): size_t cmsg_len = 20, int level = 1,
        // int type = 79, __u32 id, 4 bytes of padding.
        #[cfg(all(target_pointer_width = "64", target_endian = "little"))]
        assert_eq!(
            tx_control(0x0403_0201).as_bytes(),
            &[
                20, 0, 0, 0, 0, 0, 0, 0, // cmsg_len = CMSG_LEN(4)
                1, 0, 0, 0, // SOL_SOCKET
                79, 0, 0, 0, // SCM_DEVMEM_DMABUF
                1, 2, 3, 4, // the binding id
                0, 0, 0, 0, // padding to CMSG_SPACE(4)
            ]
        );
        assert_eq!(std::mem::align_of::<TxControl>(), 8);
        // SAFETY: CMSG_LEN/CMSG_SPACE are pure arithmetic.
        let (len, space) = unsafe { (libc::CMSG_LEN(4), libc::CMSG_SPACE(4)) };
        assert_eq!((TX_CMSG_LEN, TX_CMSG_SPACE), (len as usize, space as usize));
        assert_eq!(SCM_DEVMEM_DMABUF, libc::SCM_DEVMEM_DMABUF);
    }

    #[zcnet_testkit::test]
    fn control_bytes_match_the_c_macros() {
        for id in [1u32, 7, 0xdead_beef, u32::MAX] {
            // What devmem.rst's example builds with CMSG_FIRSTHDR/CMSG_LEN/CMSG_DATA.
            let mut c = [0u64; TX_CMSG_SPACE / 8];
            // SAFETY: all-zero is a valid msghdr.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_control = c.as_mut_ptr().cast();
            msg.msg_controllen = TX_CMSG_SPACE as _;
            // SAFETY: msg describes the live, 8-aligned buffer `c` of TX_CMSG_SPACE bytes,
            // enough for one header and 4 data bytes; the writes stay inside it.
            unsafe {
                let h = libc::CMSG_FIRSTHDR(&msg);
                assert!(!h.is_null());
                (*h).cmsg_level = libc::SOL_SOCKET;
                (*h).cmsg_type = libc::SCM_DEVMEM_DMABUF;
                (*h).cmsg_len = libc::CMSG_LEN(4) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(h).cast::<u32>(), id);
            }
            let want: Vec<u8> = c.iter().flat_map(|w| w.to_ne_bytes()).collect();
            assert_eq!(&tx_control(id).as_bytes()[..], &want[..], "id {id}");
            // And the walker of the receive path reads it back.
            let ctl = tx_control(id);
            let got: Vec<_> = cmsgs(ctl.as_bytes()).map(|m| m.unwrap()).collect();
            assert_eq!(got.len(), 1);
            assert_eq!(
                (got[0].level, got[0].ty),
                (libc::SOL_SOCKET, SCM_DEVMEM_DMABUF)
            );
            assert_eq!(got[0].data, id.to_ne_bytes());
        }
    }

    fn tcp_pair() -> (std::net::TcpStream, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    #[zcnet_testkit::test]
    fn the_kernel_parses_the_control_message_and_refuses_unknown_bindings() {
        let (a, mut b) = tcp_pair();
        let fd = a.as_raw_fd();
        // Without SO_ZEROCOPY: EINVAL (tcp_sendmsg_locked wants MSG_ZEROCOPY + SOCK_ZEROCOPY).
        let e = sendmsg_devmem(fd, 5, 0, 4096, 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
        crate::sock::enable_zerocopy(fd).unwrap();
        // On 6.18 a zero-length send gets past the devmem checks (the binding is looked up
        // only for a send with a size), so it tells a well-formed control message (0 bytes
        // sent) from a malformed one (EINVAL from __sock_cmsg_send). Linux 7.2 refuses any
        // zero-length devmem send with EINVAL (no probe tells it apart: by release).
        let zero = sendmsg_devmem(fd, 5, 0, 0, 0);
        if zcnet_testkit::kernel_version().is_some_and(|v| v >= (7, 2)) {
            let e = zero.unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
        } else {
            assert_eq!(zero.unwrap(), 0);
        }
        let mut bad = *tx_control(5).as_bytes();
        bad[0] = TX_CMSG_SPACE as u8; // cmsg_len CMSG_SPACE(4) instead of CMSG_LEN(4)
        let e = sendmsg_with_control(fd, &bad, 5, 0, 0, 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
        // An id that names no binding (nothing can bind here: no device supports netmem TX):
        // EINVAL from net_devmem_get_binding, and no zero-copy id consumed.
        let e = sendmsg_devmem(fd, u32::MAX, 4096, 4096, libc::MSG_DONTWAIT).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
        // Nothing reached the peer, and the next plain MSG_ZEROCOPY send gets id 0.
        let n = crate::sock::send(fd, b"zc", libc::MSG_ZEROCOPY).unwrap();
        assert_eq!(n, 2);
        let mut got = [0u8; 8];
        b.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        assert_eq!(b.read(&mut got).unwrap(), 2);
        assert_eq!(&got[..2], b"zc");
        let mut entries = Vec::new();
        for _ in 0..500 {
            crate::sock::read_errqueue(fd, &mut entries).unwrap();
            if !entries.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(
            matches!(
                entries.first(),
                Some(zcnet_core::errqueue::ErrqueueEntry::Zerocopy { lo: 0, hi: 0, .. })
            ),
            "{entries:?}"
        );
    }

    #[zcnet_testkit::test]
    fn refused_without_a_call() {
        let (a, _b) = tcp_pair();
        crate::sock::enable_zerocopy(a.as_raw_fd()).unwrap();
        for (id, off, len) in [
            (0u32, 0u64, 4096usize),
            (3, u64::MAX, 2),
            (3, 1, usize::MAX),
        ] {
            let e = sendmsg_devmem(a.as_raw_fd(), id, off, len, 0).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{id} {off} {len}");
        }
        // Not a socket: the kernel answers (ENOTSOCK), proving the checks above were ours.
        let f = std::fs::File::open("/dev/null").unwrap();
        let e = sendmsg_devmem(f.as_raw_fd(), 3, 0, 1, 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTSOCK));
    }

    #[zcnet_testkit::test]
    fn loopback_socket_is_on_lo() {
        let (a, _b) = tcp_pair();
        let ip = local_ip(a.as_raw_fd()).unwrap().unwrap();
        assert_eq!(ip, IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(ifaces_with_addr(ip).unwrap(), ["lo"]);
        // The mapped form finds the same interface.
        let mapped = IpAddr::V6(Ipv4Addr::LOCALHOST.to_ipv6_mapped());
        assert_eq!(ifaces_with_addr(mapped).unwrap(), ["lo"]);
        assert!(ifaces_with_addr("192.0.2.77".parse().unwrap())
            .unwrap()
            .is_empty());
        assert_eq!(bound_device(a.as_raw_fd()).unwrap(), None);
        let f = std::fs::File::open("/dev/null").unwrap();
        assert!(local_ip(f.as_raw_fd()).is_err());
    }

    #[zcnet_testkit::test]
    fn bound_device_reads_so_bindtodevice() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let name = c"lo";
        // SAFETY: `name` is a live NUL-terminated string whose length (with the NUL) is passed.
        let r = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_BINDTODEVICE,
                name.as_ptr().cast(),
                3,
            )
        };
        if r != 0 {
            // Binding needs CAP_NET_RAW.
            let e = io::Error::last_os_error();
            assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}");
            zcnet_testkit::skip(
                zcnet_testkit::Need::Root,
                "SO_BINDTODEVICE needs CAP_NET_RAW",
            );
        }
        assert_eq!(bound_device(s.as_raw_fd()).unwrap().as_deref(), Some("lo"));
    }
}
