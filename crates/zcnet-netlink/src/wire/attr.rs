//! Netlink attributes (`struct nlattr` TLVs): a checked iterator and typed accessors.
//!
//! Layout (include/uapi/linux/netlink.h, `struct nlattr`): `u16 nla_len` (header + payload,
//! unpadded), `u16 nla_type` (low 14 bits the type, bit 15 `NLA_F_NESTED`, bit 14
//! `NLA_F_NET_BYTEORDER`), then the payload, padded to 4 bytes (`NLA_ALIGNTO`). Every accessor
//! checks lengths and returns [`Error::Malformed`] instead of panicking.

use crate::error::Error;

/// `NLA_F_NESTED` (include/uapi/linux/netlink.h).
pub const NLA_F_NESTED: u16 = 1 << 15;
/// `NLA_F_NET_BYTEORDER` (include/uapi/linux/netlink.h).
pub const NLA_F_NET_BYTEORDER: u16 = 1 << 14;
/// `NLA_TYPE_MASK`: the type bits of `nla_type`.
pub const NLA_TYPE_MASK: u16 = !(NLA_F_NESTED | NLA_F_NET_BYTEORDER);
/// `NLA_HDRLEN`: size of `struct nlattr`.
pub const NLA_HDRLEN: usize = 4;

/// Rounds `n` up to the 4-byte netlink alignment (`NLA_ALIGN`, `NLMSG_ALIGN`).
pub const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

pub(crate) fn malformed(what: impl Into<String>) -> Error {
    Error::Malformed {
        context: String::new(),
        what: what.into(),
    }
}

/// One attribute borrowed from a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr<'a> {
    kind: u16,
    flags: u16,
    payload: &'a [u8],
    offset: usize,
}

impl<'a> Attr<'a> {
    /// The attribute type (flag bits removed).
    pub fn kind(&self) -> u16 {
        self.kind
    }

    /// Whether `NLA_F_NESTED` is set. The kernel does not always set it on nests it sends, so
    /// parsers decide nesting by attribute type, not by this bit.
    pub fn is_nested_flag(&self) -> bool {
        self.flags & NLA_F_NESTED != 0
    }

    /// The payload, without the header and without padding.
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }

    /// Offset of this attribute's header from the start of the buffer the outermost
    /// [`Attrs`] iterator was created on (plus the base offset it was given).
    pub fn offset(&self) -> usize {
        self.offset
    }

    fn fixed<const N: usize>(&self, what: &str) -> Result<[u8; N], Error> {
        self.payload.try_into().map_err(|_| {
            malformed(format!(
                "attribute {} has {} bytes, {what} needs {N}",
                self.kind,
                self.payload.len()
            ))
        })
    }

    /// The payload as a u8 (exactly 1 byte).
    pub fn u8(&self) -> Result<u8, Error> {
        Ok(self.fixed::<1>("u8")?[0])
    }

    /// The payload as a native-endian u16 (exactly 2 bytes).
    pub fn u16(&self) -> Result<u16, Error> {
        Ok(u16::from_ne_bytes(self.fixed("u16")?))
    }

    /// The payload as a native-endian u32 (exactly 4 bytes).
    pub fn u32(&self) -> Result<u32, Error> {
        Ok(u32::from_ne_bytes(self.fixed("u32")?))
    }

    /// The payload as a native-endian u64 (exactly 8 bytes).
    pub fn u64(&self) -> Result<u64, Error> {
        Ok(u64::from_ne_bytes(self.fixed("u64")?))
    }

    /// A variable-width unsigned integer (`NLA_UINT`, Linux 6.8): 4 or 8 bytes.
    pub fn uint(&self) -> Result<u64, Error> {
        match self.payload.len() {
            4 => self.u32().map(u64::from),
            8 => self.u64(),
            n => Err(malformed(format!(
                "attribute {} has {n} bytes, uint needs 4 or 8",
                self.kind
            ))),
        }
    }

    /// A NUL-terminated string; the NUL and anything after it are dropped. Invalid UTF-8 is
    /// replaced (names from the kernel are ASCII).
    pub fn str(&self) -> String {
        let end = self
            .payload
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.payload.len());
        String::from_utf8_lossy(&self.payload[..end]).into_owned()
    }

    /// The payload as an array of native-endian u32s (length a multiple of 4).
    pub fn u32_array(&self) -> Result<Vec<u32>, Error> {
        if !self.payload.len().is_multiple_of(4) {
            return Err(malformed(format!(
                "attribute {} has {} bytes, not a whole number of u32s",
                self.kind,
                self.payload.len()
            )));
        }
        Ok(self
            .payload
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// The attributes nested in this one's payload.
    pub fn nested(&self) -> Attrs<'a> {
        Attrs::with_base(self.payload, self.offset + NLA_HDRLEN)
    }
}

/// A checked iterator over a buffer of attributes. Yields `Err` once on malformed input (an
/// attribute header cut short, a length that runs past the buffer, stray trailing bytes) and
/// then stops.
#[derive(Debug, Clone)]
pub struct Attrs<'a> {
    buf: &'a [u8],
    pos: usize,
    base: usize,
    failed: bool,
}

impl<'a> Attrs<'a> {
    /// Iterates the attributes in `buf`; offsets are reported relative to `buf`.
    pub fn new(buf: &'a [u8]) -> Attrs<'a> {
        Attrs::with_base(buf, 0)
    }

    /// Iterates the attributes in `buf`, reporting offsets as `base + position in buf` (so
    /// they can be matched against the kernel's extended-ACK offsets into a whole message).
    pub fn with_base(buf: &'a [u8], base: usize) -> Attrs<'a> {
        Attrs {
            buf,
            pos: 0,
            base,
            failed: false,
        }
    }

    fn fail(&mut self, what: String) -> Option<Result<Attr<'a>, Error>> {
        self.failed = true;
        Some(Err(malformed(what)))
    }
}

impl<'a> Iterator for Attrs<'a> {
    type Item = Result<Attr<'a>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        let rest = &self.buf[self.pos..];
        let at = self.base + self.pos;
        let Some(hdr) = rest.get(..NLA_HDRLEN) else {
            return self.fail(format!(
                "{} stray bytes after the last attribute at offset {at}",
                rest.len()
            ));
        };
        let len = usize::from(u16::from_ne_bytes([hdr[0], hdr[1]]));
        let ty = u16::from_ne_bytes([hdr[2], hdr[3]]);
        if len < NLA_HDRLEN {
            return self.fail(format!("attribute at offset {at} has length {len} < 4"));
        }
        let Some(payload) = rest.get(NLA_HDRLEN..len) else {
            return self.fail(format!(
                "attribute at offset {at} has length {len} but only {} bytes remain",
                rest.len()
            ));
        };
        // The last attribute may omit its padding; the position then lands past the end.
        self.pos += align4(len);
        Some(Ok(Attr {
            kind: ty & NLA_TYPE_MASK,
            flags: ty & !NLA_TYPE_MASK,
            payload,
            offset: at,
        }))
    }
}

/// Finds the attribute that starts at `offset` (an extended-ACK offset, counted from the start
/// of the request message) in the attributes `buf` that start at message offset `base`.
/// Returns the path of attribute types from the top level down, e.g. `[2, 1]` for type 1
/// inside nest 2. Nests are entered whenever the offset falls inside a payload that parses as
/// attributes.
pub fn attr_path_at(buf: &[u8], base: usize, offset: usize) -> Option<Vec<u16>> {
    for a in Attrs::with_base(buf, base) {
        let a = a.ok()?;
        if a.offset() == offset {
            return Some(vec![a.kind()]);
        }
        let start = a.offset() + NLA_HDRLEN;
        if offset >= start && offset < start + a.payload().len() {
            let mut path = vec![a.kind()];
            path.extend(attr_path_at(a.payload(), start, offset)?);
            return Some(path);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(ty: u16, payload: &[u8]) -> Vec<u8> {
        let mut v = ((payload.len() + 4) as u16).to_ne_bytes().to_vec();
        v.extend(ty.to_ne_bytes());
        v.extend(payload);
        v.resize(align4(v.len()), 0);
        v
    }

    #[zcnet_testkit::test]
    fn iterates_and_types() {
        let mut b = attr(1, &7u32.to_ne_bytes());
        b.extend(attr(2 | NLA_F_NESTED, &attr(3, b"eth0\0")));
        b.extend(attr(4, &[9]));
        let v: Vec<_> = Attrs::new(&b).collect::<Result<_, _>>().unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].u32().unwrap(), 7);
        assert!(v[1].is_nested_flag());
        assert_eq!(v[1].kind(), 2);
        let inner: Vec<_> = v[1].nested().collect::<Result<_, _>>().unwrap();
        assert_eq!(inner[0].str(), "eth0");
        assert_eq!(inner[0].offset(), 12);
        assert_eq!(v[2].u8().unwrap(), 9);
        assert!(v[2].u32().is_err());
        assert_eq!(attr_path_at(&b, 0, 12), Some(vec![2, 3]));
        assert_eq!(attr_path_at(&b, 0, 8), Some(vec![2]));
        assert_eq!(attr_path_at(&b, 0, 5), None);
    }

    #[zcnet_testkit::test]
    fn malformed_input_is_an_error_not_a_panic() {
        // Length 3 (< header), length past the end, stray bytes.
        for bad in [&[3u8, 0, 1, 0][..], &[9, 0, 1, 0, 0], &[1, 2]] {
            let r: Result<Vec<_>, _> = Attrs::new(bad).collect();
            assert!(r.is_err(), "{bad:?}");
        }
        // Unpadded last attribute is accepted.
        let ok = [5u8, 0, 1, 0, 42];
        let v: Vec<_> = Attrs::new(&ok).collect::<Result<_, _>>().unwrap();
        assert_eq!(v[0].u8().unwrap(), 42);
    }
}
