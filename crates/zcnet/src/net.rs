//! Sockets for the commands and the lab: connect, accept and listen with clear errors,
//! interruptible reads and writes, UDP GSO. Reading a stream to its end through a receiver,
//! counting or verifying what arrives, is [`crate::rx::receive_stream`].

use crate::cancel::Cancel;
use crate::error::{Error, Result};
use crate::remedy::Remedy;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs, UdpSocket};
use std::os::fd::AsRawFd;

/// The largest UDP GSO segment that fits a 1500-byte MTU (1500 - 20 IPv4 - 8 UDP).
pub const GSO_SEGMENT_1500: u16 = 1472;

/// The TCP connection on `fd`'s TCP_INFO now (getsockopt); `None` for another kind of socket
/// or when the kernel refused.
pub fn tcp_info(fd: std::os::fd::RawFd) -> Option<zcnet_core::tcp_info::TcpInfo> {
    let mut buf = [0u8; zcnet_core::tcp_info::BUF_LEN];
    let n = zcnet_sys::sock::tcp_info(fd, &mut buf).ok()?;
    zcnet_core::tcp_info::TcpInfo::parse(&buf[..n])
}

/// Parses `HOST:PORT`: an IP address (`127.0.0.1:5201`, `[::1]:5201`, a link-local one with
/// its scope as `[fe80::1%eth0]:5201` or `[fe80::1%2]:5201`), or a name the system resolves
/// (the first address wins). What is not `HOST:PORT` is [`Error::BadAddress`]; a name that
/// does not resolve is [`Error::Unresolved`]; a scope that names no interface is
/// [`Error::UnknownInterface`].
pub fn parse_addr(s: &str) -> Result<SocketAddr> {
    parse_addr_with(s, &|host, port| {
        (host, port).to_socket_addrs().map(|a| a.collect())
    })
}

/// A socket address as [`parse_addr`] reads it back (`[fe80::1%eth1]:5201`, not the standard
/// library's `[fe80::1%3]:5201`).
pub use crate::addr::AddrText;

/// [`parse_addr`] with the name lookup given (the tests' stand-in never asks a resolver).
fn parse_addr_with(
    s: &str,
    resolve: &dyn Fn(&str, u16) -> std::io::Result<Vec<SocketAddr>>,
) -> Result<SocketAddr> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let bad = || Error::BadAddress {
        given: s.to_string(),
    };
    let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        // The standard library's parser takes no scope: `[fe80::1%lo]`.
        let (ip, scope) = inner.split_once('%').ok_or_else(bad)?;
        let ip: std::net::Ipv6Addr = ip.parse().map_err(|_| bad())?;
        let scope_id = match scope.parse::<u32>() {
            Ok(n) => n,
            Err(_) => zcnet_sys::zcrx::if_index(scope).ok_or_else(|| Error::UnknownInterface {
                given: scope.to_string(),
            })?,
        };
        return Ok(SocketAddr::V6(std::net::SocketAddrV6::new(
            ip, port, 0, scope_id,
        )));
    }
    // An IPv6 address without brackets, or nothing before the port: not HOST:PORT.
    if host.is_empty() || host.contains([':', '[', ']', '%']) || host.contains(char::is_whitespace)
    {
        return Err(bad());
    }
    let unresolved = || Error::Unresolved {
        host: host.to_string(),
        given: s.to_string(),
    };
    resolve(host, port)
        .map_err(|_| unresolved())?
        .into_iter()
        .next()
        .ok_or_else(unresolved)
}

/// Connects a TCP stream, with a clear error if nobody listens. The wait for the handshake ends
/// with [`Error::Interrupted`] once `cancel` is cancelled (a blocking `connect` would wait out
/// the kernel's SYN retries, minutes for an address that does not answer).
pub fn connect_tcp(addr: SocketAddr, cancel: &Cancel) -> Result<TcpStream> {
    connect_tcp_within(addr, None, cancel)
}

/// [`connect_tcp`] that gives up after `limit` (`None`: the kernel's SYN retries, about two
/// minutes at the default `net.ipv4.tcp_syn_retries` of 6). A handshake whose SYN or SYN-ACK
/// was lost (the path went down mid-handshake, a firewall drops it) otherwise waits that long:
/// the kernel retransmits a SYN that cannot leave until its retries run out.
pub fn connect_tcp_within(
    addr: SocketAddr,
    limit: Option<std::time::Duration>,
    cancel: &Cancel,
) -> Result<TcpStream> {
    zcnet_sys::sock::connect_tcp(&addr, limit, cancel.flag()).map_err(|e| match e.kind() {
        std::io::ErrorKind::ConnectionRefused => Error::ConnectionRefused { addr },
        std::io::ErrorKind::Interrupted => Error::Interrupted,
        std::io::ErrorKind::TimedOut => Error::io(
            format!(
                "connect {}: no answer within {:.1} s (is the path to it up, and does nothing drop the handshake?)",
                AddrText(addr),
                limit.map_or(0.0, |l| l.as_secs_f64())
            ),
            e,
        ),
        _ => Error::io(format!("connect {}", AddrText(addr)), e),
    })
}

/// Accepts one connection on `listener` (made blocking-free for it: the listener is left
/// non-blocking); [`Error::Interrupted`] once `cancel` is cancelled. The standard library's
/// `accept` restarts after `EINTR`, so a blocking one would wait for a peer however often the
/// user pressed Ctrl-C. The stream returned is blocking.
pub fn accept(listener: &TcpListener, cancel: &Cancel) -> Result<(TcpStream, SocketAddr)> {
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::io("listener O_NONBLOCK", e))?;
    loop {
        match listener.accept() {
            Ok((s, peer)) => {
                s.set_nonblocking(false)
                    .map_err(|e| Error::io("accepted stream O_NONBLOCK", e))?;
                return Ok((s, peer));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                cancel.wait_readable(listener)?
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted && !cancel.ends_at_eintr() => {}
            // A connection reset before it was accepted: wait for the next one.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionAborted => {}
            Err(e) => return Err(Error::io("accept", e)),
        }
    }
}

/// One `recv` from a blocking TCP stream that stops waiting once `cancel` is cancelled
/// ([`std::io::ErrorKind::Interrupted`], which [`Error::io`] turns into
/// [`Error::Interrupted`]): the call is made with `MSG_DONTWAIT` and only when nothing is there
/// does it wait (in `poll`, looking at the token between polls), so a flowing stream costs no
/// extra system call. Returns 0 at the end of the stream.
pub fn recv_interruptible(
    stream: &TcpStream,
    buf: &mut [u8],
    cancel: &Cancel,
) -> std::io::Result<usize> {
    loop {
        match zcnet_sys::sock::recv(stream.as_raw_fd(), buf, libc::MSG_DONTWAIT) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                match cancel.wait_readable(stream) {
                    Ok(()) => {}
                    Err(Error::Interrupted) => return Err(interrupted_io()),
                    Err(Error::Io { source, .. }) => return Err(source),
                    Err(e) => return Err(std::io::Error::other(e.to_string())),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted && !cancel.ends_at_eintr() => {}
            r => return r,
        }
    }
}

/// Writes all of `data` to a blocking TCP stream, stopping once `cancel` is cancelled
/// ([`std::io::ErrorKind::Interrupted`], which [`Error::io`] turns into
/// [`Error::Interrupted`]): as [`recv_interruptible`], `MSG_DONTWAIT` first and `poll` only
/// when the socket buffer is full.
pub fn send_all_interruptible(
    stream: &TcpStream,
    mut data: &[u8],
    cancel: &Cancel,
) -> std::io::Result<()> {
    while !data.is_empty() {
        match zcnet_sys::sock::send(stream.as_raw_fd(), data, libc::MSG_DONTWAIT) {
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                match cancel.wait_writable(stream) {
                    Ok(()) => {}
                    Err(Error::Interrupted) => return Err(interrupted_io()),
                    Err(Error::Io { source, .. }) => return Err(source),
                    Err(e) => return Err(std::io::Error::other(e.to_string())),
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted && !cancel.ends_at_eintr() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn interrupted_io() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::Interrupted, "cancelled")
}

/// A UDP socket connected to `addr`; with `gso` set, the kernel cuts each send into datagrams
/// of that size (UDP_SEGMENT). A single UDP datagram carries at most 65,507 B over IPv4.
pub fn connect_udp(addr: SocketAddr, gso: Option<u16>) -> Result<UdpSocket> {
    let bind: SocketAddr = if addr.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    }
    .parse()
    .map_err(|_| Error::BadAddress {
        given: addr.to_string(),
    })?;
    let s = UdpSocket::bind(bind).map_err(|e| Error::io("bind UDP socket", e))?;
    s.connect(addr)
        .map_err(|e| Error::io(format!("connect UDP {}", AddrText(addr)), e))?;
    if let Some(seg) = gso {
        set_segment(&s, seg)?;
    }
    Ok(s)
}

/// UDP_SEGMENT `seg` on `s` (Linux 4.18), refused in one line where the kernel cannot.
fn set_segment(s: &UdpSocket, seg: u16) -> Result<()> {
    zcnet_sys::sock::set_udp_segment(s.as_raw_fd(), seg).map_err(|e| Error::Unsupported {
        what: "UDP GSO (UDP_SEGMENT)".into(),
        source: e,
        remedy: Remedy::Other("needs Linux 4.18; send datagrams of at most the MTU instead"),
    })
}

/// The largest UDP payload one IP packet of `mtu` bytes carries (IPv4: 20 B IP and 8 B UDP
/// headers; IPv6: 40 and 8), at most 65,507 (what the 16-bit length fields allow).
pub fn udp_payload_for_mtu(mtu: u32, v6: bool) -> u16 {
    let headers = if v6 { 48 } else { 28 };
    mtu.saturating_sub(headers).min(65_507) as u16
}

/// A UDP socket connected to `addr` for sends of up to `size` bytes: when a send that large
/// does not fit one packet of the route's MTU (`IP_MTU` once connected), the kernel cuts each
/// send into datagrams as large as the route carries (UDP_SEGMENT: 1,472 B for an MTU of 1500,
/// 8,972 B for 9000); sends that fit go out as one datagram each, with no segmentation.
pub fn connect_udp_for(addr: SocketAddr, size: usize) -> Result<UdpSocket> {
    let s = connect_udp(addr, None)?;
    let mtu = zcnet_sys::sock::path_mtu(s.as_raw_fd(), addr.is_ipv6()).map_err(|e| {
        Error::io(
            format!("reading the path MTU to {} (IP_MTU)", AddrText(addr)),
            e,
        )
    })?;
    let seg = udp_payload_for_mtu(mtu, addr.is_ipv6());
    if size > usize::from(seg) && seg > 0 {
        set_segment(&s, seg)?;
    }
    Ok(s)
}

/// What a receiver saw.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RecvReport {
    /// Bytes received.
    pub bytes: u64,
    /// Read calls that returned data.
    pub reads: u64,
    /// Seconds from the first byte to end of stream.
    pub seconds: f64,
}

/// Binds a TCP listener, with a clear error.
pub fn listen_tcp(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr).map_err(|e| match e.kind() {
        std::io::ErrorKind::AddrInUse => Error::io(
            format!("listen {}: address in use (pick another port)", AddrText(addr)),
            e,
        ),
        std::io::ErrorKind::AddrNotAvailable => Error::NotLocalAddress { addr },
        std::io::ErrorKind::PermissionDenied if addr.port() < 1024 => Error::io(
            format!("listen {}: a port below 1024 needs root (CAP_NET_BIND_SERVICE; net.ipv4.ip_unprivileged_port_start): listen on a port of 1024 or above, or run it as root", AddrText(addr)),
            e,
        ),
        _ => Error::io(format!("listen {}", AddrText(addr)), e),
    })
}

#[cfg(test)]
mod addr_tests {
    use super::*;

    /// A resolver that knows one name and asks nobody about the others.
    fn fake(host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        match host {
            "known.test" => Ok(vec![SocketAddr::from(([192, 0, 2, 7], port))]),
            "empty.test" => Ok(vec![]),
            _ => Err(std::io::Error::other("Name or service not known")),
        }
    }

    #[zcnet_testkit::test]
    fn an_address_is_parsed_a_name_resolved_and_each_failure_said_for_what_it_is() {
        let p = |s: &str| parse_addr_with(s, &fake);
        assert_eq!(p("127.0.0.1:5201").unwrap().port(), 5201);
        assert_eq!(p("[::1]:9").unwrap().to_string(), "[::1]:9");
        assert_eq!(p("known.test:80").unwrap().to_string(), "192.0.2.7:80");
        // A name that does not resolve is not a malformed address.
        for name in ["nosuch.invalid:5000", "empty.test:1"] {
            let e = p(name).unwrap_err();
            assert!(matches!(e, Error::Unresolved { .. }), "{name}: {e:?}");
            let t = e.to_string();
            assert!(
                t.contains("does not resolve") && !t.contains("bad address"),
                "{t}"
            );
            assert!(e.is_caller_mistake(), "{name}");
        }
        // Not HOST:PORT at all.
        for bad in [
            "nosuch",
            "127.0.0.1",
            "127.0.0.1:",
            "127.0.0.1:70000",
            ":5",
            "::1:5",
            "a b:5",
        ] {
            let e = p(bad).unwrap_err();
            assert!(matches!(e, Error::BadAddress { .. }), "{bad}: {e:?}");
        }
        // A link-local address with its scope, by index or by name.
        let a = p("[fe80::1%1]:5000").unwrap();
        let std::net::SocketAddr::V6(v6) = a else {
            panic!("{a}")
        };
        assert_eq!((v6.scope_id(), v6.port()), (1, 5000));
        let lo = zcnet_sys::zcrx::if_index("lo").unwrap();
        let std::net::SocketAddr::V6(v6) = p("[fe80::1%lo]:7").unwrap() else {
            panic!()
        };
        assert_eq!(v6.scope_id(), lo);
        // Said back by name, and read back to the same address.
        let a = p(&format!("[fe80::1%{lo}]:7")).unwrap();
        assert_eq!(AddrText(a).to_string(), "[fe80::1%lo]:7");
        assert_eq!(p(&AddrText(a).to_string()).unwrap(), a);
        // An index that names no interface stays a number; no scope, the standard form.
        let none = p("[fe80::1%999999]:7").unwrap();
        assert_eq!(AddrText(none).to_string(), "[fe80::1%999999]:7");
        assert_eq!(AddrText(p("[::1]:7").unwrap()).to_string(), "[::1]:7");
        assert_eq!(
            AddrText(p("127.0.0.1:7").unwrap()).to_string(),
            "127.0.0.1:7"
        );
        assert!(matches!(
            p("[fe80::1%nosuch0]:7"),
            Err(Error::UnknownInterface { .. })
        ));
    }
}
