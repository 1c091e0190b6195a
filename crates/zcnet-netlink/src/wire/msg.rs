//! Netlink messages: `struct nlmsghdr`, `struct genlmsghdr`, splitting a datagram into
//! messages, and the control messages `NLMSG_ERROR` (with extended ACK) and `NLMSG_DONE`.

use super::attr::{align4, malformed, Attrs};
use crate::error::Error;
pub use crate::error::Extack;

/// `NLMSG_HDRLEN`: size of `struct nlmsghdr` (include/uapi/linux/netlink.h).
pub const NLMSG_HDRLEN: usize = 16;
/// `GENL_HDRLEN`: size of `struct genlmsghdr` (include/uapi/linux/genetlink.h).
pub const GENL_HDRLEN: usize = 4;

/// `NLMSG_NOOP` (include/uapi/linux/netlink.h).
pub const NLMSG_NOOP: u16 = 1;
/// `NLMSG_ERROR`: an error or, with error 0, an ACK.
pub const NLMSG_ERROR: u16 = 2;
/// `NLMSG_DONE`: end of a multipart dump.
pub const NLMSG_DONE: u16 = 3;
/// `NLMSG_OVERRUN`: data lost.
pub const NLMSG_OVERRUN: u16 = 4;
/// `NLMSG_MIN_TYPE`: types below are control messages.
pub const NLMSG_MIN_TYPE: u16 = 0x10;

/// `NLM_F_REQUEST`: a request.
pub const NLM_F_REQUEST: u16 = 0x01;
/// `NLM_F_MULTI`: part of a multipart reply, ended by `NLMSG_DONE`.
pub const NLM_F_MULTI: u16 = 0x02;
/// `NLM_F_ACK`: ask for an ACK.
pub const NLM_F_ACK: u16 = 0x04;
/// `NLM_F_DUMP_INTR`: the dump was inconsistent because the data changed during it.
pub const NLM_F_DUMP_INTR: u16 = 0x10;
/// `NLM_F_ROOT | NLM_F_MATCH`: a dump request.
pub const NLM_F_DUMP: u16 = 0x300;
/// `NLM_F_CAPPED` (in an `NLMSG_ERROR` header): the echoed request was cut to its header.
pub const NLM_F_CAPPED: u16 = 0x100;
/// `NLM_F_ACK_TLVS` (in an `NLMSG_ERROR`/`NLMSG_DONE` header): extended-ACK TLVs follow.
pub const NLM_F_ACK_TLVS: u16 = 0x200;

/// `NLMSGERR_ATTR_MSG`: the kernel's error text (enum nlmsgerr_attrs).
pub const NLMSGERR_ATTR_MSG: u16 = 1;
/// `NLMSGERR_ATTR_OFFS`: offset of the offending attribute in the request.
pub const NLMSGERR_ATTR_OFFS: u16 = 2;
/// `NLMSGERR_ATTR_COOKIE`: an operation-specific cookie.
pub const NLMSGERR_ATTR_COOKIE: u16 = 3;
/// `NLMSGERR_ATTR_POLICY`: the policy of the offending attribute (nested).
pub const NLMSGERR_ATTR_POLICY: u16 = 4;
/// `NLMSGERR_ATTR_MISS_TYPE`: type of a missing required attribute.
pub const NLMSGERR_ATTR_MISS_TYPE: u16 = 5;
/// `NLMSGERR_ATTR_MISS_NEST`: offset of the nest that lacks the attribute.
pub const NLMSGERR_ATTR_MISS_NEST: u16 = 6;

/// A parsed `struct nlmsghdr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NlMsgHdr {
    /// `nlmsg_len`: header plus payload.
    pub len: u32,
    /// `nlmsg_type`: a control type or the generic netlink family id.
    pub kind: u16,
    /// `nlmsg_flags`.
    pub flags: u16,
    /// `nlmsg_seq`.
    pub seq: u32,
    /// `nlmsg_pid`: the port id.
    pub pid: u32,
}

impl NlMsgHdr {
    /// Parses the first 16 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<NlMsgHdr, Error> {
        let h = b.get(..NLMSG_HDRLEN).ok_or_else(|| {
            malformed(format!(
                "{} bytes cannot hold a 16-byte netlink header",
                b.len()
            ))
        })?;
        let u32_at = |i: usize| u32::from_ne_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let u16_at = |i: usize| u16::from_ne_bytes([h[i], h[i + 1]]);
        Ok(NlMsgHdr {
            len: u32_at(0),
            kind: u16_at(4),
            flags: u16_at(6),
            seq: u32_at(8),
            pid: u32_at(12),
        })
    }
}

/// One message of a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Msg<'a> {
    /// Its header.
    pub header: NlMsgHdr,
    /// Everything after the header, up to `nlmsg_len`.
    pub payload: &'a [u8],
}

/// Iterates the messages of a received datagram; yields one `Err` on a bad length, then stops.
#[derive(Debug, Clone)]
pub struct Messages<'a> {
    buf: &'a [u8],
    failed: bool,
}

/// Splits a datagram into its messages.
pub fn messages(buf: &[u8]) -> Messages<'_> {
    Messages { buf, failed: false }
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<Msg<'a>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.buf.is_empty() {
            return None;
        }
        let r = NlMsgHdr::parse(self.buf).and_then(|header| {
            let len = header.len as usize;
            if len < NLMSG_HDRLEN || len > self.buf.len() {
                return Err(malformed(format!(
                    "message length {len} outside 16..={} (the bytes received)",
                    self.buf.len()
                )));
            }
            let payload = &self.buf[NLMSG_HDRLEN..len];
            self.buf = self.buf.get(align4(len)..).unwrap_or(&[]);
            Ok(Msg { header, payload })
        });
        if r.is_err() {
            self.failed = true;
        }
        Some(r)
    }
}

/// A parsed `struct genlmsghdr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenlHdr {
    /// The command.
    pub cmd: u8,
    /// The family version.
    pub version: u8,
}

/// Splits a generic netlink payload into its header and its attributes.
pub fn split_genl(payload: &[u8]) -> Result<(GenlHdr, &[u8]), Error> {
    if payload.len() < GENL_HDRLEN {
        return Err(malformed(format!(
            "{} bytes cannot hold a generic netlink header",
            payload.len()
        )));
    }
    let hdr = GenlHdr {
        cmd: payload[0],
        version: payload[1],
    };
    Ok((hdr, &payload[GENL_HDRLEN..]))
}

impl Extack {
    /// Parses extended-ACK TLVs; unknown ones are ignored.
    pub fn parse(tlvs: &[u8]) -> Result<Extack, Error> {
        let mut e = Extack::default();
        for a in Attrs::new(tlvs) {
            let a = a?;
            match a.kind() {
                NLMSGERR_ATTR_MSG => e.msg = Some(a.str()),
                NLMSGERR_ATTR_OFFS => e.bad_attr_offset = Some(a.u32()?),
                NLMSGERR_ATTR_COOKIE => e.cookie = Some(a.payload().to_vec()),
                NLMSGERR_ATTR_POLICY => e.policy = Some(a.payload().to_vec()),
                NLMSGERR_ATTR_MISS_TYPE => e.missing_type = Some(a.u32()?),
                NLMSGERR_ATTR_MISS_NEST => e.missing_nest_offset = Some(a.u32()?),
                _ => {}
            }
        }
        Ok(e)
    }
}

/// An `NLMSG_ERROR` message: an ACK (`errno == 0`) or an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorMsg {
    /// The positive errno (the kernel sends it negated); 0 for an ACK.
    pub errno: i32,
    /// The header of the request this answers.
    pub request: NlMsgHdr,
    /// The extended ACK, empty without `NLM_F_ACK_TLVS`.
    pub extack: Extack,
}

/// Parses the payload of an `NLMSG_ERROR` message whose header flags are `flags`:
/// `int error`, the request's `nlmsghdr` (and its payload unless `NLM_F_CAPPED`), then, with
/// `NLM_F_ACK_TLVS`, the extended-ACK TLVs (include/uapi/linux/netlink.h, struct nlmsgerr).
pub fn parse_error(flags: u16, payload: &[u8]) -> Result<ErrorMsg, Error> {
    let err = payload
        .get(..4)
        .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| malformed("NLMSG_ERROR shorter than its 4-byte error code"))?;
    let rest = &payload[4..];
    let request = NlMsgHdr::parse(rest)
        .map_err(|_| malformed("NLMSG_ERROR without the echoed request header"))?;
    let echoed = if flags & NLM_F_CAPPED != 0 {
        NLMSG_HDRLEN
    } else {
        align4(request.len as usize).max(NLMSG_HDRLEN)
    };
    let tlvs = rest.get(echoed..).ok_or_else(|| {
        malformed(format!(
            "NLMSG_ERROR echoes a {echoed}-byte request but holds {}",
            rest.len()
        ))
    })?;
    let extack = if flags & NLM_F_ACK_TLVS != 0 {
        Extack::parse(tlvs)?
    } else {
        Extack::default()
    };
    Ok(ErrorMsg {
        errno: err.checked_neg().unwrap_or(i32::MAX),
        request,
        extack,
    })
}

/// Parses the payload of `NLMSG_DONE`: an optional `int error` (0 for success) and, with
/// `NLM_F_ACK_TLVS`, extended-ACK TLVs. Returns the positive errno and the extended ACK.
pub fn parse_done(flags: u16, payload: &[u8]) -> Result<(i32, Extack), Error> {
    let Some(b) = payload.get(..4) else {
        return Ok((0, Extack::default()));
    };
    let err = i32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
    let extack = if flags & NLM_F_ACK_TLVS != 0 {
        Extack::parse(&payload[4..])?
    } else {
        Extack::default()
    };
    Ok((err.checked_neg().unwrap_or(i32::MAX), extack))
}

#[cfg(test)]
mod tests {
    use super::super::builder::MsgBuilder;
    use super::*;

    #[zcnet_testkit::test]
    fn splits_messages_and_rejects_bad_lengths() {
        let a = MsgBuilder::new(20, 2, 1).finish().unwrap();
        let mut b = MsgBuilder::new(21, 2, 1);
        b.put_u8(1, 1);
        let b = b.finish().unwrap();
        let both = [a.clone(), b].concat();
        let v: Vec<_> = messages(&both).collect::<Result<_, _>>().unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].header.kind, 21);
        assert_eq!(v[1].payload.len(), 8);
        let mut bad = a;
        bad[0] = 200;
        assert!(messages(&bad).any(|m| m.is_err()));
    }

    #[zcnet_testkit::test]
    fn error_with_capped_request_and_tlvs() {
        let req = MsgBuilder::genl(30, 5, 9, 1, 1).finish().unwrap();
        let mut p = (-95i32).to_ne_bytes().to_vec();
        p.extend_from_slice(&req[..16]);
        let mut tl = MsgBuilder::new(0, 0, 0);
        tl.put_str(NLMSGERR_ATTR_MSG, "nope")
            .put_u32(NLMSGERR_ATTR_OFFS, 20);
        p.extend_from_slice(&tl.finish().unwrap()[16..]);
        let e = parse_error(NLM_F_CAPPED | NLM_F_ACK_TLVS, &p).unwrap();
        assert_eq!(e.errno, 95);
        assert_eq!(e.request.seq, 9);
        assert_eq!(e.extack.msg.as_deref(), Some("nope"));
        assert_eq!(e.extack.bad_attr_offset, Some(20));
        // Without NLM_F_CAPPED the echoed header claims 20 bytes but only 16 are there.
        assert!(parse_error(NLM_F_ACK_TLVS, &p[..20]).is_err());
    }
}
