//! The connection handle NCCL carries from `listen` to `connect` (within its 128 bytes), and
//! the hello each data socket starts with. Both little endian, both checked on the way in.
//!
//! ```text
//! handle: magic u32 "ZCNH" | version u16 | nsocks u16 | port u16 | family u16 (4 or 6) |
//!         ip [u8; 16] | nonce u64 | stage u64 (connect's progress, written by connect)   = 48 B
//! hello:  magic u32 "ZCNS" | version u16 | index u16 | nsocks u16 | reserved u16 | nonce u64 = 20 B
//! answer: "ZCNW" (the listener took the socket)                                              =  4 B
//! ```
//!
//! Version 2 added the answer: a version 1 listener never sends it, so a version 2 connect to
//! one fails after its timeout instead of hanging.

use crate::abi::NET_HANDLE_MAXSIZE;
use crate::error::{PluginError, Result};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

const HANDLE_MAGIC: u32 = u32::from_le_bytes(*b"ZCNH");
const HELLO_MAGIC: u32 = u32::from_le_bytes(*b"ZCNS");
const VERSION: u16 = 2;
/// Bytes of the handle that are used.
pub const HANDLE_LEN: usize = 48;
/// Bytes of a hello.
pub const HELLO_LEN: usize = 20;
/// The listener's answer to a hello it took: the connecting side waits for it, so a peer that
/// accepts and never reads, or goes away, fails `connect` instead of a later send.
pub const WELCOME: [u8; 4] = *b"ZCNW";
/// Where `stage` lives in the handle.
const STAGE_AT: usize = 40;

const _: () = assert!(HANDLE_LEN <= NET_HANDLE_MAXSIZE);

/// What `listen` tells the connecting side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handle {
    /// Where to connect.
    pub addr: SocketAddr,
    /// Sockets per connection.
    pub nsocks: u16,
    /// Identifies this connection's sockets at the listener.
    pub nonce: u64,
}

impl Handle {
    /// Writes the handle (stage 0).
    pub fn encode(&self) -> [u8; HANDLE_LEN] {
        let mut b = [0u8; HANDLE_LEN];
        b[0..4].copy_from_slice(&HANDLE_MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&self.nsocks.to_le_bytes());
        b[8..10].copy_from_slice(&self.addr.port().to_le_bytes());
        let (family, ip) = match self.addr.ip() {
            IpAddr::V4(a) => (4u16, a.to_ipv6_mapped().octets()),
            IpAddr::V6(a) => (6u16, a.octets()),
        };
        b[10..12].copy_from_slice(&family.to_le_bytes());
        b[12..28].copy_from_slice(&ip);
        b[32..40].copy_from_slice(&self.nonce.to_le_bytes());
        b
    }

    /// Reads a handle; one from another plugin or version is refused.
    pub fn decode(b: &[u8]) -> Result<Handle> {
        let b: &[u8; HANDLE_LEN] = b
            .get(..HANDLE_LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| PluginError::Invalid("handle shorter than 48 bytes".into()))?;
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let magic = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        if magic != HANDLE_MAGIC || u16_at(4) != VERSION {
            return Err(PluginError::Usage(format!(
                "not a zcnet handle (magic {magic:#010x}, version {}): both sides must load the same plugin (NCCL_NET_PLUGIN=zcnet)",
                u16_at(4)
            )));
        }
        let nsocks = u16_at(6);
        let mut ip = [0u8; 16];
        ip.copy_from_slice(&b[12..28]);
        let v6 = Ipv6Addr::from(ip);
        let ip = match u16_at(10) {
            4 => IpAddr::V4(v6.to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED)),
            6 => IpAddr::V6(v6),
            f => return Err(PluginError::Usage(format!("handle: address family {f}"))),
        };
        if nsocks == 0 || nsocks > 64 {
            return Err(PluginError::Usage(format!("handle: {nsocks} sockets")));
        }
        let mut n = [0u8; 8];
        n.copy_from_slice(&b[32..40]);
        Ok(Handle {
            addr: SocketAddr::new(ip, u16_at(8)),
            nsocks,
            nonce: u64::from_le_bytes(n),
        })
    }
}

/// connect's progress stored in NCCL's handle buffer between calls (0: not started).
pub fn stage(b: &[u8]) -> u64 {
    let mut s = [0u8; 8];
    if let Some(x) = b.get(STAGE_AT..STAGE_AT + 8) {
        s.copy_from_slice(x);
    }
    u64::from_le_bytes(s)
}

/// Records connect's progress in NCCL's handle buffer.
pub fn set_stage(b: &mut [u8], v: u64) {
    if let Some(x) = b.get_mut(STAGE_AT..STAGE_AT + 8) {
        x.copy_from_slice(&v.to_le_bytes());
    }
}

/// The first bytes on each data socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// The connection.
    pub nonce: u64,
    /// This socket's index.
    pub index: u16,
    /// Sockets in the connection.
    pub nsocks: u16,
}

impl Hello {
    /// Its bytes.
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..4].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&self.index.to_le_bytes());
        b[8..10].copy_from_slice(&self.nsocks.to_le_bytes());
        b[12..20].copy_from_slice(&self.nonce.to_le_bytes());
        b
    }

    /// Reads a hello; anything else (a port scanner, another program) is refused.
    pub fn decode(b: &[u8; HELLO_LEN]) -> Result<Hello> {
        let magic = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let h = Hello {
            index: u16::from_le_bytes([b[6], b[7]]),
            nsocks: u16::from_le_bytes([b[8], b[9]]),
            nonce: u64::from_le_bytes([b[12], b[13], b[14], b[15], b[16], b[17], b[18], b[19]]),
        };
        if magic != HELLO_MAGIC || u16::from_le_bytes([b[4], b[5]]) != VERSION {
            return Err(PluginError::Remote(format!(
                "a connection that is not a zcnet data socket (first bytes {:02x?})",
                &b[..8]
            )));
        }
        if h.nsocks == 0 || h.index >= h.nsocks {
            return Err(PluginError::Remote(format!(
                "hello: socket {} of {}",
                h.index, h.nsocks
            )));
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[zcnet_testkit::test]
    fn handles_round_trip_and_foreign_ones_are_refused() {
        for addr in ["127.0.0.1:5000", "[::1]:6000", "10.10.0.2:1"] {
            let h = Handle {
                addr: addr.parse().expect("addr"),
                nsocks: 3,
                nonce: 0xdead_beef_1234,
            };
            let mut b = [0u8; NET_HANDLE_MAXSIZE];
            b[..HANDLE_LEN].copy_from_slice(&h.encode());
            assert_eq!(Handle::decode(&b).expect("decode"), h);
            set_stage(&mut b, 77);
            assert_eq!(stage(&b), 77);
            assert_eq!(Handle::decode(&b).expect("stage does not disturb"), h);
        }
        let mut other = [0u8; NET_HANDLE_MAXSIZE];
        other[..4].copy_from_slice(b"SOCK");
        let e = Handle::decode(&other).expect_err("foreign");
        assert!(matches!(e, PluginError::Usage(_)), "{e}");
        assert!(e.to_string().contains("NCCL_NET_PLUGIN=zcnet"), "{e}");
        assert!(Handle::decode(&other[..10]).is_err());
    }

    #[zcnet_testkit::test]
    fn hellos_round_trip_and_garbage_is_a_remote_error() {
        let h = Hello {
            nonce: 9,
            index: 1,
            nsocks: 2,
        };
        assert_eq!(Hello::decode(&h.encode()).expect("decode"), h);
        let mut g = h.encode();
        g[0] = b'G';
        assert!(matches!(Hello::decode(&g), Err(PluginError::Remote(_))));
        let bad = Hello { index: 2, ..h };
        assert!(Hello::decode(&bad.encode()).is_err());
    }
}
