//! A raw netlink socket (`AF_NETLINK`, `SOCK_RAW`): open, send to the kernel, receive.
//!
//! Only the system calls live here; building and parsing messages is pure code in
//! `zcnet-netlink`. The socket is bound to a kernel-chosen port id and *connected* to the
//! kernel (port 0), so it only ever receives messages from the kernel (a connected netlink
//! socket refuses unicasts from other ports: net/netlink/af_netlink.c, `netlink_getsockbyportid`).

use std::io;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// `NETLINK_ROUTE` protocol (include/uapi/linux/netlink.h).
pub const NETLINK_ROUTE: i32 = 0;
/// `NETLINK_GENERIC` protocol (include/uapi/linux/netlink.h).
pub const NETLINK_GENERIC: i32 = 16;
/// `SOL_NETLINK` socket option level (include/linux/socket.h).
pub(crate) const SOL_NETLINK: i32 = 270;
/// `NETLINK_CAP_ACK` (include/uapi/linux/netlink.h): error messages carry only the header of
/// the failed request, not its whole payload.
pub(crate) const NETLINK_CAP_ACK: i32 = 10;
/// `NETLINK_EXT_ACK` (include/uapi/linux/netlink.h): error messages carry extended-ACK TLVs
/// (the kernel's message, the offset of the offending attribute, ...).
pub(crate) const NETLINK_EXT_ACK: i32 = 11;

/// The receive timeout a fresh socket gets: no request to the kernel may hang a probe.
pub(crate) const DEFAULT_RECV_TIMEOUT: Duration = Duration::from_secs(5);

/// A netlink socket bound to a kernel-assigned port and connected to the kernel.
///
/// Closing it (drop) ends everything the kernel ties to the socket, such as a netdev dma-buf
/// binding, which lives exactly as long as the socket that created it.
#[derive(Debug)]
pub struct NlSocket {
    fd: OwnedFd,
}

fn sockaddr_kernel() -> libc::sockaddr_nl {
    // SAFETY: sockaddr_nl is plain old data (integers and padding); all-zero is valid.
    let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    sa.nl_pid = 0;
    sa.nl_groups = 0;
    sa
}

impl NlSocket {
    /// Opens a netlink socket for `protocol` (e.g. [`NETLINK_GENERIC`]), binds it (the kernel
    /// picks the port id), connects it to the kernel, turns on extended ACKs and capped ACKs
    /// (failures of those two options are ignored: old kernels lack them), and sets a receive
    /// timeout of `DEFAULT_RECV_TIMEOUT`.
    pub fn open(protocol: i32) -> io::Result<NlSocket> {
        // SAFETY: socket() takes only integers; the result is checked before use.
        let raw = crate::cvt(unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                protocol,
            )
        })?;
        // SAFETY: raw is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let sock = NlSocket { fd };
        let sa = sockaddr_kernel();
        let len = size_of::<libc::sockaddr_nl>() as libc::socklen_t;
        // SAFETY: sa is a live sockaddr_nl and len its size; the kernel only reads it.
        crate::cvt(unsafe {
            libc::bind(
                sock.fd.as_raw_fd(),
                (&sa as *const libc::sockaddr_nl).cast(),
                len,
            )
        })?;
        // SAFETY: as above; connect() reads the address (the kernel, port 0).
        crate::cvt(unsafe {
            libc::connect(
                sock.fd.as_raw_fd(),
                (&sa as *const libc::sockaddr_nl).cast(),
                len,
            )
        })?;
        // Both options are best effort (NETLINK_CAP_ACK: Linux 4.2, NETLINK_EXT_ACK: 4.12).
        let _ = sock.set_int(SOL_NETLINK, NETLINK_EXT_ACK, 1);
        let _ = sock.set_int(SOL_NETLINK, NETLINK_CAP_ACK, 1);
        sock.set_recv_timeout(DEFAULT_RECV_TIMEOUT)?;
        Ok(sock)
    }

    fn set_int(&self, level: i32, name: i32, val: libc::c_int) -> io::Result<()> {
        // SAFETY: passes a pointer to a live c_int and its size; the kernel only reads it.
        crate::cvt(unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                level,
                name,
                (&val as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        })
        .map(drop)
    }

    /// Sets `SO_RCVTIMEO`: [`NlSocket::recv`] fails with `WouldBlock` after `timeout` without a
    /// message. A zero duration is raised to one microsecond (zero would mean "wait forever").
    pub(crate) fn set_recv_timeout(&self, timeout: Duration) -> io::Result<()> {
        let timeout = timeout.max(Duration::from_micros(1));
        let tv = libc::timeval {
            tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_usec: libc::suseconds_t::from(timeout.subsec_micros()),
        };
        // SAFETY: passes a pointer to a live timeval and its size; the kernel only reads it.
        crate::cvt(unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                size_of::<libc::timeval>() as libc::socklen_t,
            )
        })
        .map(drop)
    }

    /// Sends one buffer (one or more netlink messages) to the kernel. A short send is an error.
    pub fn send(&self, msg: &[u8]) -> io::Result<()> {
        let sa = sockaddr_kernel();
        // SAFETY: msg is a live slice the kernel reads at most msg.len() bytes of; sa is a live
        // sockaddr_nl of the size given.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                msg.as_ptr().cast(),
                msg.len(),
                0,
                (&sa as *const libc::sockaddr_nl).cast(),
                size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if n < 0 {
            return Err(crate::last_err());
        }
        if n as usize != msg.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("netlink send took {n} of {} bytes", msg.len()),
            ));
        }
        Ok(())
    }

    /// Receives one datagram (a batch of netlink messages) into `buf` and returns its length.
    ///
    /// Interrupted calls are retried. A datagram larger than `buf` is consumed and reported as
    /// an `InvalidData` error (`MSG_TRUNC`): give a buffer of at least 32 KiB for dumps
    /// (64 KiB is safe). A receive timeout reports `WouldBlock`/`TimedOut` from the OS.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            // SAFETY: buf is a live, writable slice; the kernel writes at most buf.len() bytes
            // (MSG_TRUNC only changes the value returned, not how much is written).
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_TRUNC,
                )
            };
            if n < 0 {
                let e = crate::last_err();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let n = n as usize;
            if n > buf.len() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "netlink datagram of {n} bytes truncated to the {}-byte buffer",
                        buf.len()
                    ),
                ));
            }
            return Ok(n);
        }
    }

    /// The port id the kernel assigned to this socket (`getsockname`), which the kernel's
    /// replies carry in `nlmsg_pid`.
    #[cfg(test)]
    pub(crate) fn port_id(&self) -> io::Result<u32> {
        // SAFETY: all-zero is a valid sockaddr_nl.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        let mut len = size_of::<libc::sockaddr_nl>() as libc::socklen_t;
        // SAFETY: sa/len are live locals of the size the kernel is told; it writes at most len.
        crate::cvt(unsafe {
            libc::getsockname(
                self.fd.as_raw_fd(),
                (&mut sa as *mut libc::sockaddr_nl).cast(),
                &mut len,
            )
        })?;
        Ok(sa.nl_pid)
    }
}

impl AsFd for NlSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[zcnet_testkit::test]
    fn open_generic_socket_has_a_port() {
        let s = NlSocket::open(NETLINK_GENERIC).expect("netlink generic socket");
        assert_ne!(s.port_id().expect("getsockname"), 0);
    }

    #[zcnet_testkit::test]
    fn recv_times_out_instead_of_hanging() {
        let s = NlSocket::open(NETLINK_GENERIC).expect("socket");
        s.set_recv_timeout(Duration::from_millis(50))
            .expect("timeout");
        let mut buf = [0u8; 64];
        let e = s
            .recv(&mut buf)
            .expect_err("nothing was sent, nothing arrives");
        assert!(
            matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ),
            "{e}"
        );
    }
}
