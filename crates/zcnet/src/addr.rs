//! How messages name a socket address (a leaf: errors, remedies and the network calls use it).

use std::net::SocketAddr;

/// Displays a socket address as `zcnet::net::parse_addr` reads it back: a link-local IPv6
/// address's scope by its interface's name (`[fe80::1%eth1]:5201`; an index that names no
/// interface in this network namespace stays a number). Every message that names an address
/// says it this way.
#[derive(Debug, Clone, Copy)]
pub struct AddrText(pub SocketAddr);

impl std::fmt::Display for AddrText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            SocketAddr::V6(a) if a.scope_id() != 0 => {
                match zcnet_sys::zcrx::if_name(a.scope_id()) {
                    Some(name) => write!(f, "[{}%{name}]:{}", a.ip(), a.port()),
                    None => write!(f, "{a}"),
                }
            }
            a => write!(f, "{a}"),
        }
    }
}
