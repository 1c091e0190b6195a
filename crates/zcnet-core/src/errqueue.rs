//! The socket error queue's control messages, read from the bytes `recvmsg(MSG_ERRQUEUE)` wrote.
//!
//! Documentation/networking/msg_zerocopy.rst: a MSG_ZEROCOPY completion arrives as a control
//! message of level `SOL_IP`/`IP_RECVERR` (or `SOL_IPV6`/`IPV6_RECVERR`) holding a
//! `struct sock_extended_err` (include/uapi/linux/errqueue.h) with `ee_origin ==
//! SO_EE_ORIGIN_ZEROCOPY`, `ee_errno == 0` and the inclusive id range `[ee_info, ee_data]`;
//! ICMP errors, local errors and timestamps use the same message with other origins.
//!
//! [`parse_control`] walks the control buffer exactly as glibc's (and the libc crate's)
//! `CMSG_FIRSTHDR`/`CMSG_NXTHDR` do, with plain byte arithmetic: zcnet-sys's `read_errqueue`
//! does the `recvmsg` and hands the bytes here, so the parsing is safe code that can be fuzzed
//! (fuzz/, target `errqueue`). Nothing the bytes say can make it read out of range.

/// `SOL_IP` (include/linux/socket.h).
pub const SOL_IP: i32 = 0;
/// `IP_RECVERR` (include/uapi/linux/in.h).
pub const IP_RECVERR: i32 = 11;
/// `SOL_IPV6` (include/linux/socket.h).
pub const SOL_IPV6: i32 = 41;
/// `IPV6_RECVERR` (include/uapi/linux/in6.h).
pub const IPV6_RECVERR: i32 = 25;
/// `SO_EE_ORIGIN_ZEROCOPY` (include/uapi/linux/errqueue.h).
pub const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
/// `SO_EE_CODE_ZEROCOPY_COPIED` (include/uapi/linux/errqueue.h).
pub const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;
/// Bytes of `struct sock_extended_err`: `u32 ee_errno; u8 ee_origin, ee_type, ee_code, ee_pad;
/// u32 ee_info; u32 ee_data;`.
pub const SOCK_EXTENDED_ERR_LEN: usize = 16;

/// Bytes of `size_t` (`cmsg_len`), which is also what control messages are aligned to.
const WORD: usize = std::mem::size_of::<usize>();

/// `CMSG_ALIGN`: rounded up to `sizeof(size_t)`; `None` on overflow.
const fn cmsg_align(len: usize) -> Option<usize> {
    match len.checked_add(WORD - 1) {
        Some(l) => Some(l & !(WORD - 1)),
        None => None,
    }
}

/// `sizeof(struct cmsghdr)`: `size_t cmsg_len; int cmsg_level; int cmsg_type;` (16 on 64-bit).
pub const CMSG_HDR_LEN: usize = match cmsg_align(WORD + 8) {
    Some(l) => l,
    None => 0,
};

/// `CMSG_LEN(sizeof(struct sock_extended_err))`: the shortest `cmsg_len` that holds one.
pub const RECVERR_CMSG_LEN: usize = CMSG_HDR_LEN + SOCK_EXTENDED_ERR_LEN;

/// One message read from the error queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrqueueEntry {
    /// A MSG_ZEROCOPY completion for ids `lo..=hi`.
    Zerocopy {
        /// `ee_info`.
        lo: u32,
        /// `ee_data`.
        hi: u32,
        /// `ee_code & SO_EE_CODE_ZEROCOPY_COPIED`.
        copied: bool,
    },
    /// Any other error-queue message (ICMP error, local error, timestamp).
    Other {
        /// `ee_errno`.
        errno: u32,
        /// `ee_origin`.
        origin: u8,
    },
}

impl ErrqueueEntry {
    /// What a `struct sock_extended_err` (its [`SOCK_EXTENDED_ERR_LEN`] bytes, native endian)
    /// says; `None` if `ee` is shorter.
    pub(crate) fn from_extended_err(ee: &[u8]) -> Option<ErrqueueEntry> {
        let ee = ee.get(..SOCK_EXTENDED_ERR_LEN)?;
        let u32_at = |i: usize| u32::from_ne_bytes([ee[i], ee[i + 1], ee[i + 2], ee[i + 3]]);
        let (errno, origin, code) = (u32_at(0), ee[4], ee[6]);
        Some(if origin == SO_EE_ORIGIN_ZEROCOPY && errno == 0 {
            ErrqueueEntry::Zerocopy {
                lo: u32_at(8),
                hi: u32_at(12),
                copied: code & SO_EE_CODE_ZEROCOPY_COPIED != 0,
            }
        } else {
            ErrqueueEntry::Other { errno, origin }
        })
    }
}

/// `cmsg_len` of the header at `off`, if its word lies inside `buf`.
fn cmsg_len_at(buf: &[u8], off: usize) -> Option<usize> {
    let w = buf.get(off..off.checked_add(WORD)?)?;
    let mut b = [0u8; WORD];
    b.copy_from_slice(w);
    Some(usize::from_ne_bytes(b))
}

/// An `int` at `off`, if inside `buf`.
fn int_at(buf: &[u8], off: usize) -> Option<i32> {
    let w = buf.get(off..off.checked_add(4)?)?;
    Some(i32::from_ne_bytes([w[0], w[1], w[2], w[3]]))
}

/// Appends to `out` the entry of every `IP_RECVERR`/`IPV6_RECVERR` control message long enough
/// for a `sock_extended_err`, in order, and returns how many it appended.
///
/// `buf` is the control buffer given to `recvmsg` and `controllen` the `msg_controllen` it
/// returned (the bytes it wrote). The walk is the libc crate's `CMSG_FIRSTHDR`/`CMSG_NXTHDR`
/// (which zcnet-sys used before): the first header exists if `controllen` holds one; the next
/// starts `CMSG_ALIGN(cmsg_len)` further on and exists if its header ends within `controllen`;
/// a `cmsg_len` shorter than a header (or one whose step overflows) ends the walk. Like
/// `CMSG_DATA`, a message's data is read from `buf` even where its `cmsg_len` claims more than
/// `controllen` holds (the kernel never writes that: `put_cmsg` truncates); unlike it, data
/// that would lie past the end of `buf` is not read, and that message is skipped.
pub fn parse_control(buf: &[u8], controllen: usize, out: &mut Vec<ErrqueueEntry>) -> usize {
    let end = controllen.min(buf.len());
    let before = out.len();
    if end < CMSG_HDR_LEN {
        return 0;
    }
    let mut off = 0usize;
    // The header at `off` lies within `end` (checked before moving to it).
    while let (Some(len), Some(level), Some(ty)) = (
        cmsg_len_at(buf, off),
        int_at(buf, off + WORD),
        int_at(buf, off + WORD + 4),
    ) {
        let is_recverr =
            (level == SOL_IP && ty == IP_RECVERR) || (level == SOL_IPV6 && ty == IPV6_RECVERR);
        if is_recverr && len >= RECVERR_CMSG_LEN {
            let data = off + CMSG_HDR_LEN;
            if let Some(e) = buf
                .get(data..data + SOCK_EXTENDED_ERR_LEN)
                .and_then(ErrqueueEntry::from_extended_err)
            {
                out.push(e);
            }
        }
        // CMSG_NXTHDR.
        if len < CMSG_HDR_LEN {
            break;
        }
        let Some(next) = cmsg_align(len).and_then(|a| off.checked_add(a)) else {
            break;
        };
        if next.checked_add(CMSG_HDR_LEN).is_none_or(|e| e > end) {
            break;
        }
        off = next;
    }
    out.len() - before
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One control message as the kernel's `put_cmsg` writes it: header, data, padding to
    /// `CMSG_SPACE`.
    fn cmsg(level: i32, ty: i32, data: &[u8]) -> Vec<u8> {
        let len = CMSG_HDR_LEN + data.len();
        let mut m = Vec::new();
        m.extend_from_slice(&len.to_ne_bytes());
        m.extend_from_slice(&level.to_ne_bytes());
        m.extend_from_slice(&ty.to_ne_bytes());
        m.resize(CMSG_HDR_LEN, 0);
        m.extend_from_slice(data);
        m.resize(cmsg_align(len).unwrap_or(len), 0);
        m
    }

    fn ee(errno: u32, origin: u8, code: u8, info: u32, data: u32) -> [u8; 16] {
        let mut e = [0u8; 16];
        e[..4].copy_from_slice(&errno.to_ne_bytes());
        e[4] = origin;
        e[6] = code;
        e[8..12].copy_from_slice(&info.to_ne_bytes());
        e[12..].copy_from_slice(&data.to_ne_bytes());
        e
    }

    #[test]
    fn zerocopy_completions_and_other_errors() {
        let mut buf = cmsg(SOL_IP, IP_RECVERR, &ee(0, SO_EE_ORIGIN_ZEROCOPY, 1, 3, 9));
        // An ICMP error carries the offender's address after the sock_extended_err.
        let mut icmp = ee(113, 2, 0, 0, 0).to_vec();
        icmp.extend_from_slice(&[0u8; 16]);
        buf.extend(cmsg(SOL_IPV6, IPV6_RECVERR, &icmp));
        buf.extend(cmsg(
            SOL_IPV6,
            IPV6_RECVERR,
            &ee(0, SO_EE_ORIGIN_ZEROCOPY, 0, 10, 10),
        ));
        let mut out = Vec::new();
        assert_eq!(parse_control(&buf, buf.len(), &mut out), 3);
        assert_eq!(
            out,
            [
                ErrqueueEntry::Zerocopy {
                    lo: 3,
                    hi: 9,
                    copied: true
                },
                ErrqueueEntry::Other {
                    errno: 113,
                    origin: 2
                },
                ErrqueueEntry::Zerocopy {
                    lo: 10,
                    hi: 10,
                    copied: false
                },
            ]
        );
        // A zero-copy origin with an errno is not a completion.
        out.clear();
        let b = cmsg(SOL_IP, IP_RECVERR, &ee(5, SO_EE_ORIGIN_ZEROCOPY, 0, 1, 2));
        parse_control(&b, b.len(), &mut out);
        assert_eq!(
            out,
            [ErrqueueEntry::Other {
                errno: 5,
                origin: SO_EE_ORIGIN_ZEROCOPY
            }]
        );
    }

    #[test]
    fn other_levels_short_messages_and_truncation() {
        let zc = ee(0, SO_EE_ORIGIN_ZEROCOPY, 0, 1, 1);
        // Another level or type, and a RECVERR too short for a sock_extended_err: skipped.
        let mut buf = cmsg(1, IP_RECVERR, &zc);
        buf.extend(cmsg(SOL_IP, IPV6_RECVERR, &zc));
        buf.extend(cmsg(SOL_IP, IP_RECVERR, &zc[..15]));
        buf.extend(cmsg(SOL_IP, IP_RECVERR, &zc));
        let mut out = Vec::new();
        assert_eq!(parse_control(&buf, buf.len(), &mut out), 1);
        // msg_controllen says where the kernel stopped: a message whose header is past it is
        // not there (one whose header is in is read, as CMSG_NXTHDR does).
        out.clear();
        let two = [cmsg(SOL_IP, IP_RECVERR, &zc), cmsg(SOL_IP, IP_RECVERR, &zc)].concat();
        assert_eq!(parse_control(&two, 32 + CMSG_HDR_LEN - 1, &mut out), 1);
        assert_eq!(parse_control(&two, 32 + CMSG_HDR_LEN, &mut out), 2);
        assert_eq!(parse_control(&two, CMSG_HDR_LEN - 1, &mut out), 0);
        assert_eq!(parse_control(&[], 64, &mut out), 0);
    }

    #[test]
    fn a_cmsg_len_shorter_than_a_header_or_huge_ends_the_walk() {
        let zc = ee(0, SO_EE_ORIGIN_ZEROCOPY, 0, 1, 1);
        let mut buf = cmsg(SOL_IP, IP_RECVERR, &zc);
        let mut bad = cmsg(SOL_IP, IP_RECVERR, &zc);
        bad[..WORD].copy_from_slice(&usize::MAX.to_ne_bytes());
        buf.extend_from_slice(&bad);
        buf.extend(cmsg(SOL_IP, IP_RECVERR, &zc));
        // The huge one is read (its cmsg_len is long enough, as CMSG_DATA would), and its step
        // overflows: the third is never reached.
        let mut out = Vec::new();
        assert_eq!(parse_control(&buf, buf.len(), &mut out), 2);
        let mut first = cmsg(SOL_IP, IP_RECVERR, &zc);
        first[..WORD].copy_from_slice(&(CMSG_HDR_LEN - 1).to_ne_bytes());
        first.extend(cmsg(SOL_IP, IP_RECVERR, &zc));
        assert_eq!(parse_control(&first, first.len(), &mut out), 0);
        // The first message's data is read from the buffer even when its cmsg_len runs past
        // controllen (as CMSG_FIRSTHDR/CMSG_DATA would); never past the buffer.
        let one = cmsg(SOL_IP, IP_RECVERR, &zc);
        assert_eq!(parse_control(&one, CMSG_HDR_LEN, &mut out), 1);
        assert_eq!(parse_control(&one[..CMSG_HDR_LEN + 4], 64, &mut out), 0);
        // A later header that fits but whose data would run past the buffer: skipped, and the
        // walk goes on from it as CMSG_NXTHDR would.
        let mut tail = [cmsg(SOL_IP, IP_RECVERR, &zc), cmsg(SOL_IP, IP_RECVERR, &zc)].concat();
        tail.truncate(32 + CMSG_HDR_LEN + 8);
        out.clear();
        assert_eq!(parse_control(&tail, tail.len(), &mut out), 1);
    }
}
