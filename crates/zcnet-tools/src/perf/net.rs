//! Sockets for perf: resolving the server, connecting from a chosen address and port,
//! listening on both address families, and naming addresses the way iperf3 prints them.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::args::Family;
use super::error::PerfError;

/// How long a connect may take before the client gives up (iperf3 has no default; a closed
/// port answers at once, a silent host is found out in this time).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The server's address: an IP literal, or a name resolved with the family's preference.
pub fn resolve(host: &str, port: u16, family: Family) -> Result<SocketAddr, PerfError> {
    let wanted = |a: &SocketAddr| match family {
        Family::Any => true,
        Family::V4 => a.is_ipv4(),
        Family::V6 => a.is_ipv6(),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    resolve_with(host, port, &|h, p| {
        (h, p).to_socket_addrs().map(|a| a.collect())
    })
    .and_then(|found| {
        found.iter().copied().find(wanted).ok_or_else(|| {
            PerfError::Usage(format!(
                "-c {host} has no {} address: give one with -c, or drop -4/-6",
                if family == Family::V6 { "IPv6" } else { "IPv4" }
            ))
        })
    })
}

/// The addresses of `host` by `lookup` (the tests' stand-in never asks a resolver); a name
/// that does not resolve is a usage error, as `zcnet send` has it.
fn resolve_with(
    host: &str,
    port: u16,
    lookup: &dyn Fn(&str, u16) -> io::Result<Vec<SocketAddr>>,
) -> Result<Vec<SocketAddr>, PerfError> {
    match lookup(host, port) {
        Ok(found) if !found.is_empty() => Ok(found),
        _ => Err(PerfError::Usage(format!(
            "-c {host}: {host} does not resolve (no address for that name here): check the name, or give an IP address"
        ))),
    }
}

/// A TCP connection to `addr`, from `bind` and `port` when given (`-B`, `--cport`), within
/// `timeout`. Errors are the socket's: the caller names the step.
pub fn connect(
    addr: SocketAddr,
    bind: Option<IpAddr>,
    port: Option<u16>,
    timeout: Duration,
) -> io::Result<TcpStream> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if bind.is_some() || port.is_some() {
        let ip = bind.unwrap_or(if addr.is_ipv4() {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        } else {
            IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        });
        s.set_reuse_address(true)?;
        s.bind(&SockAddr::from(SocketAddr::new(ip, port.unwrap_or(0))))?;
    }
    s.connect_timeout(&SockAddr::from(addr), timeout)?;
    Ok(s.into())
}

/// Why connecting to the server failed, in one line with the fix.
pub fn connect_error(addr: SocketAddr, what: &str, e: &io::Error) -> PerfError {
    let hint = match e.kind() {
        io::ErrorKind::ConnectionRefused => {
            "nothing listens there: start `zcnet perf -s` or `iperf3 -s` on it, or check -p"
        }
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
            "no answer: check the address and that no firewall drops the port"
        }
        io::ErrorKind::AddrInUse => "the local port is taken: pick another --cport",
        io::ErrorKind::AddrNotAvailable => "-B names no address of this host",
        _ => "check the address and port",
    };
    PerfError::failed(format!("unable to connect {what} to {addr}: {e} ({hint})"))
}

/// The server's listener on `port`: on `bind` if given; else on `::` accepting IPv4 too,
/// falling back to `0.0.0.0` where IPv6 is off (`-4`: `0.0.0.0` only; `-6`: `::` only).
pub fn listen(port: u16, bind: Option<IpAddr>, family: Family) -> Result<TcpListener, PerfError> {
    let any6 = IpAddr::V6(Ipv6Addr::UNSPECIFIED);
    let any4 = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    let result = match (bind, family) {
        (Some(ip), _) => listen_on(SocketAddr::new(ip, port), family == Family::V6),
        (None, Family::V4) => listen_on(SocketAddr::new(any4, port), false),
        (None, Family::V6) => listen_on(SocketAddr::new(any6, port), true),
        (None, Family::Any) => listen_on(SocketAddr::new(any6, port), false)
            .or_else(|_| listen_on(SocketAddr::new(any4, port), false)),
    };
    result.map_err(|e| {
        let hint = match e.kind() {
            io::ErrorKind::AddrInUse => "another server has it: stop that one or pick another -p",
            io::ErrorKind::AddrNotAvailable => "-B names no address of this host",
            io::ErrorKind::PermissionDenied => "ports below 1024 need root: pick another -p",
            _ => "check -p and -B",
        };
        PerfError::failed(format!("unable to listen on port {port}: {e} ({hint})"))
    })
}

fn listen_on(addr: SocketAddr, v6_only: bool) -> io::Result<TcpListener> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    if addr.is_ipv6() {
        s.set_only_v6(v6_only)?;
    }
    s.bind(&SockAddr::from(addr))?;
    s.listen(128)?;
    Ok(s.into())
}

/// An address as iperf3 prints it: an IPv4-mapped IPv6 address as plain IPv4
/// (`mapped_v4_to_regular_v4`).
pub fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

/// The local and remote address of a connected stream, canonical.
pub fn endpoints(s: &TcpStream) -> io::Result<(SocketAddr, SocketAddr)> {
    Ok((canonical(s.local_addr()?), canonical(s.peer_addr()?)))
}

#[cfg(test)]
mod resolve_tests {
    use super::*;

    #[zcnet_testkit::test]
    fn a_name_that_does_not_resolve_and_a_family_it_lacks_are_usage_errors() {
        let none = |_: &str, _: u16| Err(io::Error::other("Name or service not known"));
        let e = resolve_with("nosuch.invalid", 5201, &none).unwrap_err();
        assert_eq!(e.exit_code(), 2, "{e}");
        assert!(e.to_string().contains("does not resolve"), "{e}");
        assert!(!e.to_string().contains("give an IP address:"), "{e}");
        // An IPv6 literal asked for with -4: the arguments disagree.
        let e = resolve("::1", 5201, Family::V4).unwrap_err();
        assert_eq!(e.exit_code(), 2, "{e}");
        assert!(e.to_string().contains("-4/-6"), "{e}");
        assert!(resolve("127.0.0.1", 5201, Family::V4).is_ok());
    }
}
