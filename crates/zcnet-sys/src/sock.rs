//! Socket calls: options, plain and `MSG_ZEROCOPY` sends, the error queue, poll, an
//! interruptible TCP connect.

use std::io;
use std::os::fd::RawFd;

/// `SO_ZEROCOPY` (include/uapi/asm-generic/socket.h).
pub(crate) const SO_ZEROCOPY: libc::c_int = 60;
/// `UDP_SEGMENT` (include/uapi/linux/udp.h): UDP GSO segment size.
pub(crate) const UDP_SEGMENT: libc::c_int = 103;
/// `SO_EE_ORIGIN_ZEROCOPY` (include/uapi/linux/errqueue.h); missing from libc.
#[cfg(test)]
pub(crate) const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
/// `SO_EE_CODE_ZEROCOPY_COPIED` (include/uapi/linux/errqueue.h); missing from libc.
#[cfg(test)]
pub(crate) const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;

fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    val: libc::c_int,
) -> io::Result<()> {
    // SAFETY: passes a pointer to a live c_int and its size; the kernel only reads it.
    crate::cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&val as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(drop)
}

fn getsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut val: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: val/len are live locals of the sizes the kernel is told.
    crate::cvt(unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            (&mut val as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    Ok(val)
}

/// `getsockopt(IPPROTO_TCP, TCP_INFO)` into `buf`: the number of bytes the kernel wrote
/// (`min(sizeof(struct tcp_info), buf.len())`), to be read by `zcnet_core::tcp_info`.
pub fn tcp_info(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    let mut len = libc::socklen_t::try_from(buf.len()).unwrap_or(libc::socklen_t::MAX);
    // SAFETY: buf is a live, writable slice of at least `len` bytes, and len a live local; the
    // kernel writes at most `len` bytes and stores how many it wrote.
    crate::cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    Ok((len as usize).min(buf.len()))
}

/// `setsockopt(SOL_SOCKET, SO_ZEROCOPY, 1)`: allow `MSG_ZEROCOPY` sends (Linux 4.14, UDP 5.0).
pub fn enable_zerocopy(fd: RawFd) -> io::Result<()> {
    setsockopt_int(fd, libc::SOL_SOCKET, SO_ZEROCOPY, 1)
}

/// `setsockopt(SOL_UDP, UDP_SEGMENT, size)`: the kernel cuts each send into `size`-byte
/// datagrams (UDP GSO, Linux 4.18).
pub fn set_udp_segment(fd: RawFd, size: u16) -> io::Result<()> {
    setsockopt_int(fd, libc::SOL_UDP, UDP_SEGMENT, libc::c_int::from(size))
}

/// The UDP_SEGMENT size set on `fd` (0: none).
pub fn udp_segment(fd: RawFd) -> io::Result<u16> {
    Ok(getsockopt_int(fd, libc::SOL_UDP, UDP_SEGMENT)?.clamp(0, 65_535) as u16)
}

/// The path MTU of a connected socket: `getsockopt(IPPROTO_IP, IP_MTU)` (ip(7)), or
/// `IPPROTO_IPV6, IPV6_MTU` for an IPv6 one (ipv6(7)); `ENOTCONN` when it is not connected.
pub fn path_mtu(fd: RawFd, v6: bool) -> io::Result<u32> {
    let (level, name) = if v6 {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU)
    } else {
        (libc::IPPROTO_IP, libc::IP_MTU)
    };
    Ok(getsockopt_int(fd, level, name)?.max(0) as u32)
}

/// `setsockopt(IPPROTO_TCP, TCP_NODELAY, 1)`: no Nagle delay, each send goes out at once
/// (tcp(7)).
pub fn set_nodelay(fd: RawFd) -> io::Result<()> {
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)
}

/// `setsockopt(SOL_SOCKET, SO_SNDTIMEO, timeout)`: a blocking send that finds no room waits at
/// most `timeout` (in all, per call) and then returns what it sent, or `EAGAIN` (socket(7)).
pub fn set_send_timeout(fd: RawFd, timeout: std::time::Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_usec: timeout.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: `tv` is a live timeval and its size is passed; the kernel only reads it.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    crate::cvt(r).map(drop)
}

/// Whether TCP_NODELAY is set.
pub fn nodelay(fd: RawFd) -> io::Result<bool> {
    Ok(getsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY)? != 0)
}

/// `setsockopt(IPPROTO_TCP, TCP_NOTSENT_LOWAT, bytes)`: the socket counts as writable (and a
/// blocking send goes on) only while fewer than `bytes` of it are not yet sent (tcp(7),
/// Linux 3.12).
pub fn set_notsent_lowat(fd: RawFd, bytes: u32) -> io::Result<()> {
    setsockopt_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_NOTSENT_LOWAT,
        bytes.min(i32::MAX as u32) as libc::c_int,
    )
}

/// `TCP_NOTSENT_LOWAT` as the socket has it (the `net.ipv4.tcp_notsent_lowat` sysctl's value
/// when never set).
pub fn notsent_lowat(fd: RawFd) -> io::Result<u32> {
    Ok(getsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT)? as u32)
}

/// `setsockopt(SOL_SOCKET, SO_RCVLOWAT, bytes)`: the socket counts as readable once `bytes`
/// are queued (socket(7)).
pub fn set_recv_lowat(fd: RawFd, bytes: u32) -> io::Result<()> {
    setsockopt_int(
        fd,
        libc::SOL_SOCKET,
        libc::SO_RCVLOWAT,
        bytes.min(i32::MAX as u32) as libc::c_int,
    )
}

/// `SO_RCVLOWAT` as the socket has it (the kernel caps what it is given at half of
/// `net.ipv4.tcp_rmem`'s maximum).
pub fn recv_lowat(fd: RawFd) -> io::Result<u32> {
    Ok(getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT)? as u32)
}

/// `SO_SNDBUF`.
pub fn set_send_buffer(fd: RawFd, bytes: usize) -> io::Result<()> {
    setsockopt_int(
        fd,
        libc::SOL_SOCKET,
        libc::SO_SNDBUF,
        bytes.min(i32::MAX as usize) as libc::c_int,
    )
}

/// Asks for a receive buffer of `bytes`: `SO_RCVBUFFORCE` (CAP_NET_ADMIN: past
/// `net.core.rmem_max`), else `SO_RCVBUF` (capped at `rmem_max`). Returns what the kernel
/// granted as `SO_RCVBUF` reads it (twice the request, for its bookkeeping overhead:
/// socket(7)).
pub fn set_recv_buffer(fd: RawFd, bytes: usize) -> io::Result<usize> {
    let v = bytes.min(i32::MAX as usize / 2) as libc::c_int;
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, v)
        .or_else(|_| setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, v))?;
    let got = getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF)?;
    Ok(usize::try_from(got).unwrap_or(0))
}

/// The socket's receive buffer as `SO_RCVBUF` reads it: the limit, in the kernel's accounting
/// (bytes of memory, `skb->truesize`), on what its receive and out-of-order queues may hold.
pub fn recv_buffer(fd: RawFd) -> io::Result<usize> {
    Ok(usize::try_from(getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF)?).unwrap_or(0))
}

/// `SK_MEMINFO_DROPS` of `SO_MEMINFO` (include/uapi/linux/sock_diag.h): packets the kernel
/// dropped for this socket (a full receive buffer, a failed filter) since it was made.
pub fn socket_drops(fd: RawFd) -> io::Result<u32> {
    // enum { SK_MEMINFO_RMEM_ALLOC, …, SK_MEMINFO_BACKLOG, SK_MEMINFO_DROPS, SK_MEMINFO_VARS }
    const SK_MEMINFO_DROPS: usize = 8;
    let mut mem = [0u32; SK_MEMINFO_DROPS + 1];
    let mut len = std::mem::size_of_val(&mem) as libc::socklen_t;
    // SAFETY: mem and len are live locals; the kernel writes at most len bytes into mem
    // (net/core/sock.c, SO_MEMINFO: min(len, sizeof(meminfo))) and stores the length.
    crate::cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            mem.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    if (len as usize) < std::mem::size_of_val(&mem) {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("SO_MEMINFO returned {len} bytes, without the drop count"),
        ));
    }
    Ok(mem[SK_MEMINFO_DROPS])
}

/// `SO_ERROR`: the pending socket error, cleared by reading it.
pub fn take_error(fd: RawFd) -> io::Result<Option<io::Error>> {
    let e = getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_ERROR)?;
    Ok((e != 0).then(|| io::Error::from_raw_os_error(e)))
}

/// `send(fd, buf, flags | MSG_NOSIGNAL)`; returns bytes accepted.
pub fn send(fd: RawFd, buf: &[u8], flags: libc::c_int) -> io::Result<usize> {
    // SAFETY: buf is a live slice; the kernel reads at most buf.len() bytes from it.
    let n = unsafe {
        libc::send(
            fd,
            buf.as_ptr().cast(),
            buf.len(),
            flags | libc::MSG_NOSIGNAL,
        )
    };
    if n < 0 {
        Err(crate::last_err())
    } else {
        Ok(n as usize)
    }
}

/// `recv(fd, buf, flags)`; returns bytes read (0 at end of stream).
pub fn recv(fd: RawFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
    // SAFETY: buf is a live, writable slice of buf.len() bytes.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), flags) };
    if n < 0 {
        Err(crate::last_err())
    } else {
        Ok(n as usize)
    }
}

/// One message read from the error queue (defined with its parser in `zcnet_core::errqueue`).
use zcnet_core::errqueue::ErrqueueEntry;

/// Reads everything on the socket's error queue (`recvmsg(MSG_ERRQUEUE | MSG_DONTWAIT)` until
/// `EAGAIN`), appending to `out`. Returns how many messages were read.
///
/// Documentation/networking/msg_zerocopy.rst: completions arrive as a cmsg of level
/// `SOL_IP`/`IP_RECVERR` (or `SOL_IPV6`/`IPV6_RECVERR`) holding a `sock_extended_err`.
pub fn read_errqueue(fd: RawFd, out: &mut Vec<ErrqueueEntry>) -> io::Result<usize> {
    read_errqueue_max(fd, out, usize::MAX)
}

/// [`read_errqueue`], but at most `max` messages: a caller that can tell nothing more of its
/// own is queued (every zero-copy id it sent is reported) stops without the `recvmsg` that
/// would only say `EAGAIN`.
pub fn read_errqueue_max(fd: RawFd, out: &mut Vec<ErrqueueEntry>, max: usize) -> io::Result<usize> {
    let mut count = 0;
    while count < max {
        // Room for one cmsg with a sock_extended_err and an address (ICMP errors carry one),
        // aligned for `struct cmsghdr`.
        let mut control = Control([0u8; 128]);
        // SAFETY: all-zero is a valid msghdr.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = control.0.len();
        // SAFETY: msg points at a live control buffer of the stated size and no iovecs.
        let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
        if n < 0 {
            let e = crate::last_err();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) => Ok(count),
                Some(libc::EINTR) => continue,
                _ => Err(e),
            };
        }
        count += 1;
        // The walk of CMSG_FIRSTHDR/CMSG_NXTHDR over the bytes the kernel wrote, in safe code.
        zcnet_core::errqueue::parse_control(&control.0, msg.msg_controllen as usize, out);
    }
    Ok(count)
}

/// A control buffer aligned for `struct cmsghdr` (its `size_t cmsg_len`).
#[repr(C, align(8))]
struct Control([u8; 128]);

/// `poll` on one fd; returns `revents` (0 on timeout). `EINTR` returns 0.
pub fn poll_one(fd: RawFd, events: i16, timeout_ms: i32) -> io::Result<i16> {
    match poll_one_or_signal(fd, events, timeout_ms) {
        Err(e) if e.raw_os_error() == Some(libc::EINTR) => Ok(0),
        r => r,
    }
}

/// [`poll_one`], but a signal that cuts the poll short is `Err(EINTR)` instead of no events
/// (for callers that end their wait at signals).
pub fn poll_one_or_signal(fd: RawFd, events: i16, timeout_ms: i32) -> io::Result<i16> {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    if n < 0 {
        return Err(crate::last_err());
    }
    Ok(p.revents)
}

/// `addr` as a `sockaddr_storage` and the length of the part that is used.
fn sockaddr_of(addr: &std::net::SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data (integers and padding); all-zero is valid.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        std::net::SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large enough and suitably aligned for any sockaddr
            // (its purpose, socket(7)); the cast views its first bytes as a sockaddr_in.
            let sin = unsafe {
                &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>()
            };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr = libc::in_addr {
                s_addr: u32::from_ne_bytes(a.ip().octets()),
            };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        std::net::SocketAddr::V6(a) => {
            // SAFETY: as above, for a sockaddr_in6.
            let sin6 = unsafe {
                &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_addr = libc::in6_addr {
                s6_addr: a.ip().octets(),
            };
            sin6.sin6_scope_id = a.scope_id();
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// Connects a TCP stream to `addr` as a blocking `connect(2)` would, but the wait for the
/// handshake can be cut short: the socket is made with `SOCK_NONBLOCK`, `connect` answers
/// `EINPROGRESS`, and [`crate::os::wait_fd_until`] waits for `POLLOUT` (connect(2): "It is
/// possible to select(2) or poll(2) for completion by selecting the socket for writing"), then
/// `SO_ERROR` gives the outcome. The caller's `stop` flag, once set, ends the wait with
/// [`io::ErrorKind::Interrupted`], `timeout` with [`io::ErrorKind::TimedOut`]; without either,
/// the kernel's own SYN retries decide (about two minutes, tcp(7) `tcp_syn_retries`). The
/// stream returned is blocking again.
pub fn connect_tcp(
    addr: &std::net::SocketAddr,
    timeout: Option<std::time::Duration>,
    stop: &std::sync::atomic::AtomicBool,
) -> io::Result<std::net::TcpStream> {
    use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
    let family = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: socket takes only integers; a non-negative result is a new descriptor we own.
    let raw = crate::cvt(unsafe {
        libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            libc::IPPROTO_TCP,
        )
    })?;
    // SAFETY: `raw` was just returned by socket(2) and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let (ss, len) = sockaddr_of(addr);
    // SAFETY: `ss` is a live sockaddr_storage holding a sockaddr of `len` bytes; the kernel
    // only reads it.
    let r = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&ss as *const libc::sockaddr_storage).cast(),
            len,
        )
    };
    if r < 0 {
        let e = crate::last_err();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(e);
        }
        match crate::os::wait_fd_until(fd.as_fd(), libc::POLLOUT, timeout, stop)? {
            crate::os::Wake::Ready(_) => {
                if let Some(e) = take_error(fd.as_raw_fd())? {
                    return Err(e);
                }
            }
            crate::os::Wake::Interrupted => {
                return Err(io::Error::new(
                    io::ErrorKind::Interrupted,
                    "connect stopped by its caller",
                ))
            }
            crate::os::Wake::TimedOut => {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))
            }
        }
    }
    let stream = std::net::TcpStream::from(fd);
    stream.set_nonblocking(false)?;
    Ok(stream)
}

/// Aborts a TCP connection without closing its descriptor: `connect(fd, {AF_UNSPEC})`
/// (connect(2): a socket "may dissolve the association by connecting to an address with the
/// sa_family member of sockaddr set to AF_UNSPEC"; on TCP, Linux runs `tcp_disconnect()`: the
/// peer gets a RST and the send and retransmit queues are dropped). Zero-copy buffers held in
/// those queues are released at once, so their notifications arrive without waiting for a peer
/// that may never read again.
pub fn disconnect(fd: RawFd) -> io::Result<()> {
    // SAFETY: all-zero is a valid sockaddr, and its family 0 is AF_UNSPEC.
    let sa: libc::sockaddr = unsafe { std::mem::zeroed() };
    // SAFETY: `sa` is a live sockaddr of the size passed; the kernel only reads it.
    crate::cvt(unsafe {
        libc::connect(
            fd,
            &sa,
            std::mem::size_of::<libc::sockaddr>() as libc::socklen_t,
        )
    })
    .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    use zcnet_core::tcp_info::{TcpInfo, BUF_LEN};

    #[zcnet_testkit::test]
    fn a_full_receive_buffer_counts_its_drops() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        // The smallest buffer the kernel grants (SOCK_MIN_RCVBUF): a few datagrams fit.
        let granted = set_recv_buffer(rx.as_raw_fd(), 1).unwrap();
        assert!(granted > 0 && granted < 16 * 1024, "{granted}");
        assert_eq!(socket_drops(rx.as_raw_fd()).unwrap(), 0);
        for _ in 0..100 {
            tx.send(&[7u8; 1000]).unwrap();
        }
        let drops = socket_drops(rx.as_raw_fd()).unwrap();
        assert!(drops > 50 && drops < 100, "{drops} of 100 dropped");
        let big = set_recv_buffer(rx.as_raw_fd(), 1 << 20).unwrap();
        assert!(big >= 1 << 20 || !crate::os::is_root(), "{big}");
    }

    /// A 128-byte control buffer with 64 bytes of slack after it: the libc walk reads a
    /// message's data wherever its header says, which for random bytes can be up to 32 bytes
    /// past the last header that fits in 128 (the kernel never writes such a header).
    #[repr(C, align(8))]
    struct Wide([u8; 192]);

    /// The walk `read_errqueue` did before its parsing moved to `zcnet_core::errqueue`: the libc
    /// crate's CMSG_FIRSTHDR/CMSG_NXTHDR over the control buffer.
    fn libc_walk(control: &Wide, controllen: usize) -> Vec<ErrqueueEntry> {
        assert!(controllen <= 128);
        let mut out = Vec::new();
        // SAFETY: all-zero is a valid msghdr.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_control = control.0.as_ptr().cast_mut().cast();
        msg.msg_controllen = controllen;
        // SAFETY: msg points at the live 192-byte buffer and controllen <= 128; CMSG_NXTHDR only
        // returns headers that end within controllen, and a header's data (16 bytes after it)
        // then ends within 160.
        let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        while !cmsg.is_null() {
            // SAFETY: non-null headers lie inside the buffer (above).
            let hdr = unsafe { std::ptr::read_unaligned(cmsg) };
            let is_recverr = (hdr.cmsg_level == libc::SOL_IP && hdr.cmsg_type == libc::IP_RECVERR)
                || (hdr.cmsg_level == libc::SOL_IPV6 && hdr.cmsg_type == libc::IPV6_RECVERR);
            let need = std::mem::size_of::<libc::sock_extended_err>() as u32;
            // SAFETY: CMSG_LEN is a pure computation on its argument.
            let min_len = unsafe { libc::CMSG_LEN(need) } as usize;
            if is_recverr && hdr.cmsg_len >= min_len {
                // SAFETY: within the buffer (above); read_unaligned as the old code did.
                let ee: libc::sock_extended_err = unsafe {
                    std::ptr::read_unaligned(
                        libc::CMSG_DATA(cmsg).cast::<libc::sock_extended_err>(),
                    )
                };
                out.push(
                    if ee.ee_origin == SO_EE_ORIGIN_ZEROCOPY && ee.ee_errno == 0 {
                        ErrqueueEntry::Zerocopy {
                            lo: ee.ee_info,
                            hi: ee.ee_data,
                            copied: ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED != 0,
                        }
                    } else {
                        ErrqueueEntry::Other {
                            errno: ee.ee_errno,
                            origin: ee.ee_origin,
                        }
                    },
                );
            }
            // SAFETY: as for CMSG_FIRSTHDR.
            cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
        }
        out
    }

    /// zcnet_core's constants and layout are the C ones.
    #[zcnet_testkit::test]
    fn errqueue_constants_match_libc() {
        use zcnet_core::errqueue as eq;
        assert_eq!(eq::SOL_IP, libc::SOL_IP);
        assert_eq!(eq::IP_RECVERR, libc::IP_RECVERR);
        assert_eq!(eq::SOL_IPV6, libc::SOL_IPV6);
        assert_eq!(eq::IPV6_RECVERR, libc::IPV6_RECVERR);
        assert_eq!(eq::SO_EE_ORIGIN_ZEROCOPY, SO_EE_ORIGIN_ZEROCOPY);
        assert_eq!(eq::SO_EE_CODE_ZEROCOPY_COPIED, SO_EE_CODE_ZEROCOPY_COPIED);
        assert_eq!(
            eq::SOCK_EXTENDED_ERR_LEN,
            std::mem::size_of::<libc::sock_extended_err>()
        );
        assert_eq!(eq::CMSG_HDR_LEN, std::mem::size_of::<libc::cmsghdr>());
        // SAFETY: CMSG_LEN is a pure computation.
        let len = unsafe { libc::CMSG_LEN(eq::SOCK_EXTENDED_ERR_LEN as u32) } as usize;
        assert_eq!(eq::RECVERR_CMSG_LEN, len);
    }

    /// The safe parser reads what the libc walk read, for well-formed buffers and for 200,000
    /// seeded random and mutated ones (every controllen up to 128 bytes, as read_errqueue's
    /// buffer).
    #[zcnet_testkit::test]
    fn errqueue_parse_is_the_libc_walk() {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let hdr = std::mem::size_of::<libc::cmsghdr>();
        for round in 0..200_000u32 {
            let mut c = Wide([0u8; 192]);
            for b in &mut c.0[128..] {
                *b = rnd() as u8;
            }
            // Well-formed messages first, then damage.
            let mut off = 0;
            while off + 48 <= 128 && rnd() % 4 != 0 {
                let (level, ty) = match rnd() % 4 {
                    0 => (libc::SOL_IP, libc::IP_RECVERR),
                    1 => (libc::SOL_IPV6, libc::IPV6_RECVERR),
                    2 => (libc::SOL_SOCKET, 1),
                    _ => ((rnd() % 64) as i32, (rnd() % 32) as i32),
                };
                let data = [16usize, 32, 15, 0][(rnd() % 4) as usize];
                let len = hdr + data;
                c.0[off..off + 8].copy_from_slice(&len.to_ne_bytes());
                c.0[off + 8..off + 12].copy_from_slice(&level.to_ne_bytes());
                c.0[off + 12..off + 16].copy_from_slice(&ty.to_ne_bytes());
                for b in &mut c.0[off + 16..off + 16 + data] {
                    *b = rnd() as u8;
                }
                if rnd() % 2 == 0 {
                    c.0[off + 16..off + 20].fill(0); // ee_errno 0
                    c.0[off + 20] = SO_EE_ORIGIN_ZEROCOPY;
                }
                off += (len + 7) & !7;
            }
            for _ in 0..(rnd() % 3) {
                let i = (rnd() % 128) as usize;
                c.0[i] = rnd() as u8;
            }
            if round % 16 == 0 {
                // A wild cmsg_len somewhere (below 2^40: the libc crate's pointer arithmetic
                // would wrap on larger ones, which the safe parser refuses instead).
                let at = ((rnd() % 15) * 8) as usize;
                let len = rnd() >> (24 + rnd() % 40);
                c.0[at..at + 8].copy_from_slice(&len.to_ne_bytes());
            }
            let controllen = if rnd() % 2 == 0 {
                off
            } else {
                (rnd() % 129) as usize
            };
            let mut got = Vec::new();
            zcnet_core::errqueue::parse_control(&c.0, controllen, &mut got);
            assert_eq!(got, libc_walk(&c, controllen), "round {round}, {:?}", c.0);
        }
    }

    /// The offsets zcnet_core reads are the running kernel's: a loopback connection that moved
    /// 4 MiB is ESTABLISHED (1), has loopback's MTU as its path MTU, an MSS under it, a window, a smoothed RTT,
    /// and has had every byte acknowledged.
    #[zcnet_testkit::test]
    fn tcp_info_reads_a_live_connection() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut c = std::net::TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (mut s, _) = l.accept().expect("accept");
        let total = 4usize << 20;
        let reader = std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 << 10];
            let mut got = 0;
            while got < total {
                got += s.read(&mut buf).expect("read");
            }
            (got, s) // kept open: a closed peer would leave the connection in CLOSE_WAIT
        });
        c.write_all(&vec![7u8; total]).expect("write");
        let (got, _peer) = reader.join().expect("reader");
        assert_eq!(got, total);
        let mut buf = [0u8; BUF_LEN];
        let n = tcp_info(c.as_raw_fd(), &mut buf).expect("TCP_INFO");
        assert!(n >= 232, "this kernel returns tcpi_snd_wnd and more: {n} B");
        let i = TcpInfo::parse(&buf[..n]).expect("parse");
        assert_eq!(i.state, 1, "{i:?}");
        let mtu = std::fs::read_to_string("/sys/class/net/lo/mtu").expect("lo mtu");
        // tcpi_pmtu is capped at IP_MAX_MTU (65535); lo's MTU is 65536.
        let mtu = mtu.trim().parse::<u32>().expect("mtu").min(65_535);
        assert_eq!(i.pmtu, mtu, "{i:?}");
        assert!(i.snd_mss > 0 && i.snd_mss < i.pmtu, "{i:?}");
        assert!(i.snd_cwnd >= 1 && i.rtt_us > 0, "{i:?}");
        assert!(i.snd_wnd.is_some_and(|w| w > 0), "{i:?}");
        // The peer read everything, so the kernel saw it all acknowledged (plus the SYN's 1).
        let acked = i.bytes_acked.expect("bytes_acked");
        assert!(acked >= total as u64 && acked <= total as u64 + 1, "{i:?}");
        // A buffer shorter than the struct gets only that much, and the parse says what is there.
        let mut short = [0u8; 120];
        let n = tcp_info(c.as_raw_fd(), &mut short).expect("TCP_INFO");
        assert_eq!(n, 120);
        assert_eq!(
            TcpInfo::parse(&short[..n]).map(|i| i.bytes_acked),
            Some(None)
        );
    }
}
