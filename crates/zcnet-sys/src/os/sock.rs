//! The socket calls of the echo server (zcnet_tools::echo) and its tests: vectored sends and
//! socket options.

use std::io;
use std::os::fd::RawFd;

/// The most slices one [`send_vectored`] call passes (the rest is left for the next call).
pub const SEND_IOVECS: usize = 64;

/// `sendmsg(fd, {bufs}, flags | MSG_NOSIGNAL)` on a connected stream socket: one call for
/// several buffers (at most [`SEND_IOVECS`]); returns the bytes accepted, which may end
/// inside any of them.
pub fn send_vectored(fd: RawFd, bufs: &[&[u8]], flags: libc::c_int) -> io::Result<usize> {
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; SEND_IOVECS];
    let n = bufs.len().min(SEND_IOVECS);
    for (v, b) in iov.iter_mut().zip(bufs) {
        v.iov_base = b.as_ptr() as *mut libc::c_void;
        v.iov_len = b.len();
    }
    // SAFETY: all-zero is a valid msghdr (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = n as _;
    // SAFETY: `msg` points to `n` live iovecs, each describing a live slice of `bufs` that the
    // kernel only reads during the call; no name or control buffer is passed.
    let r = unsafe { libc::sendmsg(fd, &msg, flags | libc::MSG_NOSIGNAL) };
    if r < 0 {
        Err(crate::last_err())
    } else {
        Ok(r as usize)
    }
}

fn setsockopt_raw<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, val: &T) -> io::Result<()> {
    // SAFETY: `val` is a live T and its exact size is passed; the kernel only reads it.
    crate::cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (val as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// `SO_LINGER {on, 0}`: the next `close()` aborts the connection with a reset (RST) instead of
/// a FIN, dropping unsent data.
pub fn set_linger_zero(fd: RawFd) -> io::Result<()> {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    setsockopt_raw(fd, libc::SOL_SOCKET, libc::SO_LINGER, &l)
}

/// `SO_RCVBUF` (the kernel doubles it; setting it turns receive-buffer autotuning off).
pub fn set_recv_buffer(fd: RawFd, bytes: usize) -> io::Result<()> {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    setsockopt_raw(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &v)
}

/// `TCP_USER_TIMEOUT`: the connection fails with `ETIMEDOUT` (or the last soft error, e.g.
/// `EHOSTUNREACH`) when data it sent stays unacknowledged this long (Linux 2.6.37).
pub fn set_tcp_user_timeout(fd: RawFd, timeout: std::time::Duration) -> io::Result<()> {
    let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
    setsockopt_raw(fd, libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, &ms)
}

/// TCP keepalive: the first probe after `idle` without traffic, then every `interval`, and the
/// connection fails after `count` unanswered probes (or earlier, with `TCP_USER_TIMEOUT`).
/// Whole seconds, at least 1.
pub fn set_tcp_keepalive(
    fd: RawFd,
    idle: std::time::Duration,
    interval: std::time::Duration,
    count: u32,
) -> io::Result<()> {
    let secs = |d: std::time::Duration| d.as_secs().clamp(1, 32767) as libc::c_int;
    setsockopt_raw(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, &1 as &libc::c_int)?;
    setsockopt_raw(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, &secs(idle))?;
    setsockopt_raw(fd, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, &secs(interval))?;
    let cnt = count.clamp(1, 127) as libc::c_int;
    setsockopt_raw(fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, &cnt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsRawFd;

    #[zcnet_testkit::test]
    fn send_vectored_sends_every_slice_in_order() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut b, _) = l.accept().unwrap();
        let n = send_vectored(a.as_raw_fd(), &[b"ab", b"", b"cde"], 0).unwrap();
        assert_eq!(n, 5);
        drop(a);
        let mut got = Vec::new();
        b.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"abcde");
    }

    #[zcnet_testkit::test]
    fn linger_zero_close_resets_the_peer() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut b, _) = l.accept().unwrap();
        set_linger_zero(a.as_raw_fd()).unwrap();
        set_recv_buffer(a.as_raw_fd(), 65536).unwrap();
        set_tcp_user_timeout(a.as_raw_fd(), std::time::Duration::from_secs(1)).unwrap();
        set_tcp_keepalive(
            a.as_raw_fd(),
            std::time::Duration::from_secs(1),
            std::time::Duration::from_secs(1),
            2,
        )
        .unwrap();
        drop(a);
        let mut buf = [0u8; 8];
        let e = b.read(&mut buf).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ECONNRESET));
    }
}
