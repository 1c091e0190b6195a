//! The test cookie: 37 bytes that open the control connection and every TCP data stream.
//!
//! iperf3 src/iperf.h: `COOKIE_SIZE 37 /* size of an ascii uuid */`. src/iperf_util.c,
//! `make_cookie`: 36 bytes of entropy, each mapped to `rndchars[byte % 32]` with
//! `rndchars = "abcdefghijklmnopqrstuvwxyz234567"`, then a NUL. The client writes it first on
//! the control connection (`iperf_connect`, src/iperf_client_api.c) and first on each TCP stream
//! (`iperf_tcp_connect`, src/iperf_tcp.c); the server compares a stream's cookie with the
//! control connection's (`iperf_tcp_accept`: `strncmp`, `ACCESS_DENIED` on a mismatch).

use super::error::ProtoError;

/// Bytes of a cookie on the wire, the terminating NUL included.
pub const COOKIE_SIZE: usize = 37;

/// The characters `make_cookie` draws from.
pub const COOKIE_ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// A test cookie: 36 characters of [`COOKIE_ALPHABET`] and a NUL.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cookie([u8; COOKIE_SIZE]);

impl Cookie {
    /// The cookie `make_cookie` makes from these random bytes (the caller draws them, e.g.
    /// from `getrandom`: this module reads no entropy itself).
    pub fn from_random(random: &[u8; COOKIE_SIZE - 1]) -> Cookie {
        let mut bytes = [0u8; COOKIE_SIZE];
        for (out, r) in bytes.iter_mut().zip(random) {
            *out = COOKIE_ALPHABET[usize::from(*r) % COOKIE_ALPHABET.len()];
        }
        Cookie(bytes)
    }

    /// Checks 37 received bytes: 36 alphabet characters, then a NUL.
    ///
    /// iperf3 itself does not check the control connection's cookie; zcnet does, so that a
    /// client that is not iperf3 (an HTTP request, a port scanner) is turned away at once.
    pub fn parse(bytes: &[u8]) -> Result<Cookie, ProtoError> {
        let bytes: [u8; COOKIE_SIZE] = bytes
            .try_into()
            .map_err(|_| ProtoError::BadCookie("not 37 bytes"))?;
        if bytes[COOKIE_SIZE - 1] != 0 {
            return Err(ProtoError::BadCookie("no NUL at byte 37"));
        }
        if !bytes[..COOKIE_SIZE - 1]
            .iter()
            .all(|b| COOKIE_ALPHABET.contains(b))
        {
            return Err(ProtoError::BadCookie(
                "a character outside iperf3's alphabet [a-z2-7]",
            ));
        }
        Ok(Cookie(bytes))
    }

    /// The 37 bytes to send.
    pub fn as_bytes(&self) -> &[u8; COOKIE_SIZE] {
        &self.0
    }

    /// The 36 characters, without the NUL.
    pub fn as_str(&self) -> &str {
        // The constructors only ever store ASCII from COOKIE_ALPHABET before the NUL.
        std::str::from_utf8(&self.0[..COOKIE_SIZE - 1]).unwrap_or_default()
    }

    /// Whether the bytes a data stream opened with are this cookie (exactly these 37 bytes).
    pub fn matches(&self, received: &[u8]) -> bool {
        received == self.0.as_slice()
    }
}

impl std::fmt::Debug for Cookie {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cookie({})", self.as_str())
    }
}

impl std::fmt::Display for Cookie {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
