//! The `SIOCETHTOOL` ioctl: the only interface for ntuple flow rules, and the old one for the
//! RSS indirection table and driver info.
//!
//! The command structs (`struct ethtool_rxnfc`, `struct ethtool_rxfh_indir`,
//! `struct ethtool_drvinfo`, include/uapi/linux/ethtool.h) are built and parsed as bytes by
//! `zcnet-netlink`; this module only makes the call. To keep the call sound it accepts only
//! the commands listed below and checks, before the call, that the buffer holds every byte the
//! kernel reads or writes for that command (`required_len`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `SIOCETHTOOL` (include/uapi/linux/sockios.h).
pub(crate) const SIOCETHTOOL: libc::c_ulong = 0x8946;
/// `IFNAMSIZ` (include/uapi/linux/if.h): interface names are at most 15 bytes plus a NUL.
pub(crate) const IFNAMSIZ: usize = 16;

/// `ETHTOOL_GDRVINFO` (include/uapi/linux/ethtool.h): driver name, version, bus info.
pub const ETHTOOL_GDRVINFO: u32 = 0x03;
/// `ETHTOOL_GRXFH`: get the RX flow hash fields of a flow type.
pub(crate) const ETHTOOL_GRXFH: u32 = 0x29;
/// `ETHTOOL_SRXFH`: set the RX flow hash fields of a flow type.
pub(crate) const ETHTOOL_SRXFH: u32 = 0x2a;
/// `ETHTOOL_GRXRINGS`: number of RX rings available for flow steering.
pub const ETHTOOL_GRXRINGS: u32 = 0x2d;
/// `ETHTOOL_GRXCLSRLCNT`: number of classification rules (and the table size).
pub const ETHTOOL_GRXCLSRLCNT: u32 = 0x2e;
/// `ETHTOOL_GRXCLSRULE`: one classification rule by location.
pub const ETHTOOL_GRXCLSRULE: u32 = 0x2f;
/// `ETHTOOL_GRXCLSRLALL`: the locations of all classification rules.
pub const ETHTOOL_GRXCLSRLALL: u32 = 0x30;
/// `ETHTOOL_SRXCLSRLDEL`: delete a classification rule.
pub const ETHTOOL_SRXCLSRLDEL: u32 = 0x31;
/// `ETHTOOL_SRXCLSRLINS`: insert a classification rule.
pub const ETHTOOL_SRXCLSRLINS: u32 = 0x32;
/// `ETHTOOL_GRXFHINDIR`: get the RSS indirection table.
pub const ETHTOOL_GRXFHINDIR: u32 = 0x38;
/// `ETHTOOL_SRXFHINDIR`: set (or, with size 0, reset) the RSS indirection table.
pub const ETHTOOL_SRXFHINDIR: u32 = 0x39;

/// `sizeof(struct ethtool_drvinfo)` on Linux (all fields u32/char: no padding).
pub const DRVINFO_LEN: usize = 196;
/// `sizeof(struct ethtool_rxnfc)` on 64-bit Linux (8-aligned because of `__u64 data`).
pub const RXNFC_LEN: usize = 192;
/// `offsetof(struct ethtool_rxnfc, rule_cnt)`.
pub const RXNFC_RULE_CNT_OFFSET: usize = 184;
/// `offsetof(struct ethtool_rxnfc, rule_locs)`: 188, *inside* the padded 192-byte struct; the
/// kernel writes `rule_cnt` u32 locations from here (net/ethtool/ioctl.c,
/// `ethtool_rxnfc_copy_to_user`).
pub const RXNFC_RULE_LOCS_OFFSET: usize = 188;
/// `offsetof(struct ethtool_rxfh_indir, ring_index)` (after `cmd` and `size`).
pub const RXFH_INDIR_HEADER_LEN: usize = 8;
/// `offsetof(struct ethtool_rxfh_indir, size)`.
pub(crate) const RXFH_INDIR_SIZE_OFFSET: usize = 4;

/// Reads the native-endian u32 at byte offset `off` of `data` (None past the end).
fn u32_at(data: &[u64], off: usize) -> Option<u32> {
    let mut b = [0u8; 4];
    for (i, slot) in b.iter_mut().enumerate() {
        let byte = off + i;
        let word = data.get(byte / 8)?;
        *slot = word.to_ne_bytes()[byte % 8];
    }
    Some(u32::from_ne_bytes(b))
}

/// The number of bytes the kernel reads or writes through `ifr_data` for the command in the
/// first u32 of `data`, derived from the same fields the kernel reads (net/ethtool/ioctl.c):
///
/// - `ETHTOOL_GDRVINFO`: `sizeof(struct ethtool_drvinfo)` = 196;
/// - the rxnfc commands: `sizeof(struct ethtool_rxnfc)` = 192, and for `ETHTOOL_GRXCLSRLALL`
///   also `rule_cnt` (at byte 184) u32 locations written from byte 188;
/// - `ETHTOOL_GRXFHINDIR`/`ETHTOOL_SRXFHINDIR`: 8 + 4 × `size` (the u32 at byte 4): the
///   kernel rejects any non-zero `size` other than the device's table size with `EINVAL`
///   before it touches the array.
///
/// Any other command is refused with `InvalidInput`: its size is unknown here.
pub(crate) fn required_len(data: &[u64]) -> io::Result<usize> {
    let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
    let cmd = u32_at(data, 0).ok_or_else(|| invalid("empty ethtool command buffer".into()))?;
    let need = match cmd {
        ETHTOOL_GDRVINFO => DRVINFO_LEN,
        ETHTOOL_GRXFH | ETHTOOL_SRXFH | ETHTOOL_GRXRINGS | ETHTOOL_GRXCLSRLCNT
        | ETHTOOL_GRXCLSRULE | ETHTOOL_SRXCLSRLDEL | ETHTOOL_SRXCLSRLINS => RXNFC_LEN,
        ETHTOOL_GRXCLSRLALL => {
            let cnt = u32_at(data, RXNFC_RULE_CNT_OFFSET).ok_or_else(|| {
                invalid("ETHTOOL_GRXCLSRLALL buffer shorter than struct ethtool_rxnfc".into())
            })?;
            let locs = (cnt as usize)
                .checked_mul(4)
                .and_then(|b| b.checked_add(RXNFC_RULE_LOCS_OFFSET))
                .ok_or_else(|| invalid(format!("rule_cnt {cnt} overflows")))?;
            locs.max(RXNFC_LEN)
        }
        ETHTOOL_GRXFHINDIR | ETHTOOL_SRXFHINDIR => {
            let size = u32_at(data, RXFH_INDIR_SIZE_OFFSET).ok_or_else(|| {
                invalid("RXFHINDIR buffer shorter than struct ethtool_rxfh_indir".into())
            })?;
            (size as usize)
                .checked_mul(4)
                .and_then(|b| b.checked_add(RXFH_INDIR_HEADER_LEN))
                .ok_or_else(|| invalid(format!("indirection size {size} overflows")))?
        }
        other => {
            return Err(invalid(format!(
                "ethtool command {other:#x} is not one this wrapper knows the size of"
            )))
        }
    };
    Ok(need)
}

/// Checks an interface name and returns it as the NUL-padded `ifr_name`.
pub(crate) fn ifr_name(ifname: &str) -> io::Result<[libc::c_char; IFNAMSIZ]> {
    let b = ifname.as_bytes();
    if b.is_empty() || b.len() >= IFNAMSIZ || b.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "interface name {ifname:?} must be 1 to {} bytes without NUL",
                IFNAMSIZ - 1
            ),
        ));
    }
    let mut name = [0 as libc::c_char; IFNAMSIZ];
    for (dst, &src) in name.iter_mut().zip(b) {
        *dst = src as libc::c_char;
    }
    Ok(name)
}

/// A socket to carry the ioctl: `AF_INET` datagram, or netlink where IPv4 is not built in.
pub(crate) fn ioctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket() takes only integers; the result is checked before use.
    let mut raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        // SAFETY: as above.
        raw = crate::cvt(unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                crate::netlink::NETLINK_GENERIC,
            )
        })?;
    }
    // SAFETY: raw is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// `ioctl(SIOCETHTOOL)` on interface `ifname` (in the calling thread's network namespace) with
/// `ifr_data` pointing at `data`, which holds the ethtool command struct (first u32: the
/// command). The kernel's answer is written back into `data`.
///
/// Contract (checked, so the call is sound for every input): the command must be one of the
/// `ETHTOOL_*` constants of this module, and `data` must be at least `required_len` bytes
/// (`data.len() * 8`), computed from the same header fields the kernel reads. Errors:
/// `InvalidInput` for a bad name, an unknown command or a short buffer; otherwise the errno of
/// the ioctl (`EOPNOTSUPP` when the driver lacks the operation, `ENODEV` for no such device,
/// `EPERM` for set commands without CAP_NET_ADMIN).
pub fn ethtool_ioctl(ifname: &str, data: &mut [u64]) -> io::Result<()> {
    let name = ifr_name(ifname)?;
    let need = required_len(data)?;
    let have = data.len() * 8;
    if have < need {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("ethtool command buffer has {have} bytes, the command needs {need}"),
        ));
    }
    let sock = ioctl_socket()?;
    // SAFETY: ifreq is plain old data (a name array and a union of integers/pointers).
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    ifr.ifr_name = name;
    ifr.ifr_ifru.ifru_data = data.as_mut_ptr().cast();
    // SAFETY: ifr is a live ifreq with a NUL-terminated name; ifru_data points at `data`, which
    // is exclusively borrowed for the call and holds at least `required_len` bytes: every byte
    // the kernel reads or writes for this command (checked above). Nothing keeps the pointer
    // after the call returns.
    crate::cvt(unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL, &mut ifr) }).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf_with(cmd: u32, words: usize) -> Vec<u64> {
        let mut v = vec![0u64; words];
        v[0] = u64::from_ne_bytes({
            let mut b = [0u8; 8];
            b[..4].copy_from_slice(&cmd.to_ne_bytes());
            b
        });
        v
    }

    fn set_u32(v: &mut [u64], off: usize, val: u32) {
        let mut b = v[off / 8].to_ne_bytes();
        b[off % 8..off % 8 + 4].copy_from_slice(&val.to_ne_bytes());
        v[off / 8] = u64::from_ne_bytes(b);
    }

    #[zcnet_testkit::test]
    fn sizes_follow_the_command() {
        assert_eq!(required_len(&buf_with(ETHTOOL_GDRVINFO, 25)).unwrap(), 196);
        assert_eq!(required_len(&buf_with(ETHTOOL_GRXRINGS, 24)).unwrap(), 192);
        let mut all = buf_with(ETHTOOL_GRXCLSRLALL, 24);
        assert_eq!(required_len(&all).unwrap(), 192);
        set_u32(&mut all, RXNFC_RULE_CNT_OFFSET, 10);
        assert_eq!(required_len(&all).unwrap(), 188 + 40);
        let mut ind = buf_with(ETHTOOL_GRXFHINDIR, 1);
        assert_eq!(required_len(&ind).unwrap(), 8);
        set_u32(&mut ind, RXFH_INDIR_SIZE_OFFSET, 128);
        assert_eq!(required_len(&ind).unwrap(), 8 + 512);
        assert!(required_len(&buf_with(0x1234, 30)).is_err());
        assert!(required_len(&[]).is_err());
        // rule_cnt lies past a too-short buffer: refused, not read out of bounds.
        assert!(required_len(&buf_with(ETHTOOL_GRXCLSRLALL, 2)).is_err());
    }

    #[zcnet_testkit::test]
    fn short_buffers_and_bad_names_are_refused_before_the_call() {
        let mut short = buf_with(ETHTOOL_GDRVINFO, 24);
        let e = ethtool_ioctl("lo", &mut short).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let mut ok = buf_with(ETHTOOL_GDRVINFO, 25);
        for bad in ["", "sixteen-bytes-xx", "a\0b"] {
            let e = ethtool_ioctl(bad, &mut ok).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
    }
}
