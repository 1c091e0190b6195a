//! Building request messages: `struct nlmsghdr`, optional `struct genlmsghdr`, attributes.

use super::attr::{align4, NLA_F_NESTED, NLA_HDRLEN};
use super::msg::{GENL_HDRLEN, NLMSG_HDRLEN};
use crate::error::Error;

/// Builds one netlink message. Attribute writes never fail; a message or attribute that would
/// exceed the 16-bit/32-bit length fields is reported by [`MsgBuilder::finish`].
#[derive(Debug, Clone)]
pub struct MsgBuilder {
    buf: Vec<u8>,
    nests: Vec<usize>,
    overflow: bool,
}

impl MsgBuilder {
    /// Starts a message of type `kind` with `flags` (`NLM_F_*`) and sequence number `seq`; the
    /// port id is 0 (the kernel fills in the sender's).
    pub fn new(kind: u16, flags: u16, seq: u32) -> MsgBuilder {
        let mut buf = Vec::with_capacity(64);
        buf.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_len, set by finish()
        buf.extend_from_slice(&kind.to_ne_bytes());
        buf.extend_from_slice(&flags.to_ne_bytes());
        buf.extend_from_slice(&seq.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_pid
        MsgBuilder {
            buf,
            nests: Vec::new(),
            overflow: false,
        }
    }

    /// Starts a generic netlink message: the header, then `struct genlmsghdr` with `cmd` and
    /// `version` (include/uapi/linux/genetlink.h).
    pub fn genl(family: u16, flags: u16, seq: u32, cmd: u8, version: u8) -> MsgBuilder {
        let mut b = MsgBuilder::new(family, flags, seq);
        b.buf.extend_from_slice(&[cmd, version, 0, 0]);
        debug_assert_eq!(b.buf.len(), NLMSG_HDRLEN + GENL_HDRLEN);
        b
    }

    /// Appends a family's fixed header after the netlink header (rtnetlink's `struct rtmsg`,
    /// `struct ndmsg`, `struct ifinfomsg`), padded to 4 bytes. Call it before any attribute.
    pub fn put_header(&mut self, header: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(header);
        self.pad();
        self
    }

    /// Bytes written so far (the offset the next attribute will have in the message).
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether nothing but the header has been written (never true: the header is there).
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    fn header(&mut self, kind: u16, len: usize) {
        if len > usize::from(u16::MAX) {
            self.overflow = true;
        }
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
    }

    fn pad(&mut self) {
        let n = align4(self.buf.len());
        self.buf.resize(n, 0);
    }

    /// Appends an attribute with a raw payload.
    pub fn put_bytes(&mut self, kind: u16, data: &[u8]) -> &mut Self {
        self.header(kind, NLA_HDRLEN + data.len());
        self.buf.extend_from_slice(data);
        self.pad();
        self
    }

    /// Appends a u8 attribute.
    pub fn put_u8(&mut self, kind: u16, v: u8) -> &mut Self {
        self.put_bytes(kind, &[v])
    }

    /// Appends a native-endian u16 attribute.
    pub fn put_u16(&mut self, kind: u16, v: u16) -> &mut Self {
        self.put_bytes(kind, &v.to_ne_bytes())
    }

    /// Appends a native-endian u32 attribute.
    pub fn put_u32(&mut self, kind: u16, v: u32) -> &mut Self {
        self.put_bytes(kind, &v.to_ne_bytes())
    }

    /// Appends a native-endian u64 attribute.
    pub fn put_u64(&mut self, kind: u16, v: u64) -> &mut Self {
        self.put_bytes(kind, &v.to_ne_bytes())
    }

    /// Appends a NUL-terminated string attribute (`NLA_NUL_STRING`/`NLA_STRING`).
    pub fn put_str(&mut self, kind: u16, s: &str) -> &mut Self {
        self.header(kind, NLA_HDRLEN + s.len() + 1);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
        self.pad();
        self
    }

    /// Appends a flag attribute (`NLA_FLAG`: no payload).
    pub fn put_flag(&mut self, kind: u16) -> &mut Self {
        self.put_bytes(kind, &[])
    }

    /// Opens a nested attribute (`NLA_F_NESTED` is set); close it with
    /// [`MsgBuilder::nest_end`].
    pub fn nest_begin(&mut self, kind: u16) -> &mut Self {
        self.nests.push(self.buf.len());
        self.header(kind | NLA_F_NESTED, 0);
        self
    }

    /// Closes the innermost open nest and writes its length. Without an open nest it does
    /// nothing.
    pub fn nest_end(&mut self) -> &mut Self {
        if let Some(start) = self.nests.pop() {
            let len = self.buf.len() - start;
            if len > usize::from(u16::MAX) {
                self.overflow = true;
            }
            self.buf[start..start + 2].copy_from_slice(&(len as u16).to_ne_bytes());
        }
        self
    }

    /// Closes any nests still open, writes `nlmsg_len` and returns the message.
    pub fn finish(mut self) -> Result<Vec<u8>, Error> {
        while !self.nests.is_empty() {
            self.nest_end();
        }
        let len = self.buf.len();
        if self.overflow || u32::try_from(len).is_err() {
            return Err(Error::InvalidInput {
                what: format!("netlink request too large ({len} bytes or an attribute > 64 KiB)"),
            });
        }
        self.buf[0..4].copy_from_slice(&(len as u32).to_ne_bytes());
        Ok(self.buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[zcnet_testkit::test]
    fn exact_bytes_of_a_small_genl_request() {
        let mut b = MsgBuilder::genl(0x1a, 0x5, 7, 3, 1);
        b.put_str(2, "netdev");
        let m = b.finish().unwrap();
        #[rustfmt::skip]
        let want: Vec<u8> = [
            &32u32.to_ne_bytes()[..], &0x1au16.to_ne_bytes(), &5u16.to_ne_bytes(),
            &7u32.to_ne_bytes(), &0u32.to_ne_bytes(),
            &[3, 1, 0, 0],
            &11u16.to_ne_bytes(), &2u16.to_ne_bytes(), b"netdev\0", &[0],
        ].concat();
        assert_eq!(m, want);
    }

    #[zcnet_testkit::test]
    fn nests_get_their_length_and_flag() {
        let mut b = MsgBuilder::genl(20, 1, 1, 1, 1);
        b.nest_begin(1).put_u32(1, 5).put_flag(3).nest_end();
        let m = b.finish().unwrap();
        assert_eq!(m.len(), 20 + 4 + 8 + 4);
        assert_eq!(u16::from_ne_bytes([m[20], m[21]]), 16);
        assert_eq!(u16::from_ne_bytes([m[22], m[23]]), 1 | NLA_F_NESTED);
    }

    #[zcnet_testkit::test]
    fn oversized_attribute_is_refused() {
        let mut b = MsgBuilder::new(16, 1, 1);
        b.put_bytes(1, &vec![0u8; 70_000]);
        assert!(b.finish().is_err());
    }
}
