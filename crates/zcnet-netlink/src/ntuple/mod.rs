//! ntuple flow-steering rules, the RSS indirection table and driver info over the
//! `SIOCETHTOOL` ioctl ([`zcnet_sys::ethtool::ethtool_ioctl`]); ntuple rules have no netlink
//! interface. The command structs are built and parsed here as bytes; names are interface
//! names in the calling thread's network namespace.

mod rxnfc;

pub use rxnfc::{
    decode_rule, decode_rule_locs, encode_rule, rxnfc_buf, FlowRule, FlowType, FLOW_FLAGS, OFF_CMD,
    OFF_DATA, OFF_FLOW_TYPE, OFF_FS, OFF_FS_FLOW_TYPE, OFF_FS_H_EXT, OFF_FS_H_U, OFF_FS_LOCATION,
    OFF_FS_M_EXT, OFF_FS_M_U, OFF_FS_RING_COOKIE, OFF_RULE_CNT, OFF_RULE_LOCS, RX_CLS_FLOW_DISC,
    RX_CLS_LOC_ANY, RX_CLS_LOC_SPECIAL,
};

use std::io;

use rxnfc::{get_u32, get_u64, put};
use zcnet_sys::ethtool::{
    ethtool_ioctl, DRVINFO_LEN, ETHTOOL_GDRVINFO, ETHTOOL_GRXCLSRLALL, ETHTOOL_GRXCLSRLCNT,
    ETHTOOL_GRXCLSRULE, ETHTOOL_GRXFHINDIR, ETHTOOL_GRXRINGS, ETHTOOL_SRXCLSRLDEL,
    ETHTOOL_SRXCLSRLINS, ETHTOOL_SRXFHINDIR, RXFH_INDIR_HEADER_LEN,
};

use crate::error::{Error, KernelError, Result};
use crate::wire::{malformed, Extack};

/// Largest rule table or indirection table this module asks for (the kernel and drivers
/// use far less; this bounds the buffer a bogus count could make us allocate).
pub const MAX_ENTRIES: u32 = 1 << 16;

/// Copies bytes into 8-aligned words (the ioctl buffer), zero-padding the tail.
pub fn to_words(b: &[u8]) -> Vec<u64> {
    b.chunks(8)
        .map(|c| {
            let mut a = [0u8; 8];
            a[..c.len()].copy_from_slice(c);
            u64::from_ne_bytes(a)
        })
        .collect()
}

/// The bytes of an ioctl buffer.
pub fn to_bytes(w: &[u64]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

/// Runs one ethtool ioctl on a byte image of the command struct and returns the image the
/// kernel wrote back.
fn ioctl(op: &'static str, ifname: &str, buf: &[u8]) -> Result<Vec<u8>> {
    let mut words = to_words(buf);
    ethtool_ioctl(ifname, &mut words)
        .map(|()| to_bytes(&words))
        .map_err(|e| ioctl_error(op, ifname, e))
}

/// The crate error for a failed ethtool ioctl: the errno as a [`KernelError`] (no extended
/// ACK exists for ioctls), or the wrapper's refusal as [`Error::InvalidInput`].
pub fn ioctl_error(op: &'static str, ifname: &str, e: io::Error) -> Error {
    match e.raw_os_error() {
        Some(errno) => Error::from_kernel(KernelError {
            op,
            target: format!("dev {ifname}"),
            errno,
            extack: Extack::default(),
            bad_attr: None,
            missing_attr: None,
        }),
        None if e.kind() == io::ErrorKind::InvalidInput => Error::InvalidInput {
            what: format!("{op} dev {ifname}: {e}"),
        },
        None => Error::io(format!("{op} dev {ifname}"), e),
    }
}

/// Number of RX rings available to flow steering (`ETHTOOL_GRXRINGS`, the `data` field).
pub fn rx_rings(ifname: &str) -> Result<u32> {
    let b = ioctl("ETHTOOL_GRXRINGS", ifname, &rxnfc_buf(ETHTOOL_GRXRINGS, 0))?;
    let n = get_u64(&b, OFF_DATA).unwrap_or(0);
    u32::try_from(n).map_err(|_| malformed(format!("{n} RX rings")).in_context("ETHTOOL_GRXRINGS"))
}

/// Rule count and table size (`ETHTOOL_GRXCLSRLCNT`): `(rules, table size)`; the table size
/// has [`RX_CLS_LOC_SPECIAL`] set when the driver chooses locations itself.
pub fn rule_count(ifname: &str) -> Result<(u32, u32)> {
    let b = ioctl(
        "ETHTOOL_GRXCLSRLCNT",
        ifname,
        &rxnfc_buf(ETHTOOL_GRXCLSRLCNT, 0),
    )?;
    let cnt = get_u32(&b, OFF_RULE_CNT).unwrap_or(0);
    let size = get_u64(&b, OFF_DATA).unwrap_or(0) as u32;
    Ok((cnt, size))
}

/// Inserts `rule` (`ETHTOOL_SRXCLSRLINS`) and returns the location the driver used. A rule
/// without a location goes where the driver puts it when the driver takes special locations
/// (`RX_CLS_LOC_SPECIAL` in `ETHTOOL_GRXCLSRLCNT`'s table size); a driver that does not (mlx5)
/// refuses `RX_CLS_LOC_ANY`, so the location is chosen here as ethtool(8) chooses it: the
/// highest free one in the table ([`free_location`]).
pub fn rule_insert(ifname: &str, rule: &FlowRule) -> Result<u32> {
    let mut rule = *rule;
    if rule.location.is_none() {
        // A driver without a rule count (veth) answers the insert itself, with its refusal.
        let (cnt, table) = rule_count(ifname).unwrap_or((0, RX_CLS_LOC_SPECIAL));
        if table & RX_CLS_LOC_SPECIAL == 0 && table != 0 {
            let used = rule_locations(ifname, cnt)?;
            rule.location = Some(free_location(table, &used).ok_or_else(|| {
                ioctl_error(
                    "ETHTOOL_SRXCLSRLINS",
                    ifname,
                    io::Error::from_raw_os_error(libc::ENOSPC),
                )
            })?);
        }
    }
    let req = encode_rule(ETHTOOL_SRXCLSRLINS, &rule)?;
    let b = ioctl("ETHTOOL_SRXCLSRLINS", ifname, &req)?;
    get_u32(&b, OFF_FS_LOCATION)
        .ok_or_else(|| malformed("no location").in_context("ETHTOOL_SRXCLSRLINS"))
}

/// Deletes the rule at `location` (`ETHTOOL_SRXCLSRLDEL`).
pub fn rule_delete(ifname: &str, location: u32) -> Result<()> {
    let mut req = rxnfc_buf(ETHTOOL_SRXCLSRLDEL, 0);
    put(&mut req, OFF_FS_LOCATION, &location.to_ne_bytes());
    ioctl("ETHTOOL_SRXCLSRLDEL", ifname, &req).map(drop)
}

/// Reads the rule at `location` (`ETHTOOL_GRXCLSRULE`).
pub fn rule_get(ifname: &str, location: u32) -> Result<FlowRule> {
    let mut req = rxnfc_buf(ETHTOOL_GRXCLSRULE, 0);
    put(&mut req, OFF_FS_LOCATION, &location.to_ne_bytes());
    let b = ioctl("ETHTOOL_GRXCLSRULE", ifname, &req)?;
    decode_rule(&b).map_err(|e| e.in_context("ETHTOOL_GRXCLSRULE"))
}

/// The highest location below `table` (a `ETHTOOL_GRXCLSRLCNT` table size; its
/// `RX_CLS_LOC_SPECIAL` flag is ignored) that no rule in `used` holds: where ethtool(8) puts a
/// rule inserted with `loc any` on a driver that does not choose (its `rmgr_find_empty_slot`:
/// the end of the table, the lowest priority). `None` when the table is full.
pub fn free_location(table: u32, used: &[u32]) -> Option<u32> {
    let size = table & !RX_CLS_LOC_SPECIAL;
    (0..size).rev().find(|l| !used.contains(l))
}

/// The locations of the `cnt` rules installed (`ETHTOOL_GRXCLSRLALL`).
fn rule_locations(ifname: &str, cnt: u32) -> Result<Vec<u32>> {
    if cnt == 0 {
        return Ok(Vec::new());
    }
    if cnt > MAX_ENTRIES {
        return Err(malformed(format!("{cnt} rules")).in_context("ETHTOOL_GRXCLSRLCNT"));
    }
    let mut req = rxnfc_buf(ETHTOOL_GRXCLSRLALL, 4 * cnt as usize);
    put(&mut req, OFF_RULE_CNT, &cnt.to_ne_bytes());
    let b = ioctl("ETHTOOL_GRXCLSRLALL", ifname, &req)?;
    decode_rule_locs(&b, cnt).map_err(|e| e.in_context("ETHTOOL_GRXCLSRLALL"))
}

/// Every rule (`ETHTOOL_GRXCLSRLCNT`, `ETHTOOL_GRXCLSRLALL`, then `ETHTOOL_GRXCLSRULE` each).
pub fn rule_list(ifname: &str) -> Result<Vec<FlowRule>> {
    let (cnt, _) = rule_count(ifname)?;
    rule_locations(ifname, cnt)?
        .into_iter()
        .map(|l| rule_get(ifname, l))
        .collect()
}

/// `struct ethtool_rxfh_indir` with `size` entries and `cmd`.
pub fn indir_buf(cmd: u32, entries: &[u32], size: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(RXFH_INDIR_HEADER_LEN + 4 * entries.len());
    b.extend_from_slice(&cmd.to_ne_bytes());
    b.extend_from_slice(&size.to_ne_bytes());
    for e in entries {
        b.extend_from_slice(&e.to_ne_bytes());
    }
    b
}

/// Decodes an indirection-table reply: `size` at byte 4, then `size` u32 ring indices.
pub fn decode_indir(b: &[u8]) -> Result<Vec<u32>> {
    let size = get_u32(b, 4).ok_or_else(|| malformed("rxfh_indir reply too short"))?;
    (0..size as usize)
        .map(|i| {
            get_u32(b, RXFH_INDIR_HEADER_LEN + 4 * i)
                .ok_or_else(|| malformed(format!("indirection entry {i} past the reply")))
        })
        .collect()
}

/// The RSS indirection table (`ETHTOOL_GRXFHINDIR`: first the size, then the table).
pub fn indir_get(ifname: &str) -> Result<Vec<u32>> {
    let b = ioctl(
        "ETHTOOL_GRXFHINDIR",
        ifname,
        &indir_buf(ETHTOOL_GRXFHINDIR, &[], 0),
    )?;
    let size = get_u32(&b, 4).unwrap_or(0);
    if size == 0 {
        return Ok(Vec::new());
    }
    if size > MAX_ENTRIES {
        return Err(
            malformed(format!("indirection table of {size}")).in_context("ETHTOOL_GRXFHINDIR")
        );
    }
    let req = indir_buf(ETHTOOL_GRXFHINDIR, &vec![0; size as usize], size);
    let b = ioctl("ETHTOOL_GRXFHINDIR", ifname, &req)?;
    decode_indir(&b).map_err(|e| e.in_context("ETHTOOL_GRXFHINDIR"))
}

/// Sets the RSS indirection table (`ETHTOOL_SRXFHINDIR`); its length must equal the device's
/// table size. An empty table is refused here: use [`indir_reset`].
pub fn indir_set(ifname: &str, table: &[u32]) -> Result<()> {
    let size = u32::try_from(table.len())
        .ok()
        .filter(|&n| n > 0 && n <= MAX_ENTRIES)
        .ok_or_else(|| Error::InvalidInput {
            what: format!("indirection table of {} entries", table.len()),
        })?;
    ioctl(
        "ETHTOOL_SRXFHINDIR",
        ifname,
        &indir_buf(ETHTOOL_SRXFHINDIR, table, size),
    )
    .map(drop)
}

/// Resets the RSS indirection table to the driver default (`ETHTOOL_SRXFHINDIR`, size 0).
pub fn indir_reset(ifname: &str) -> Result<()> {
    ioctl(
        "ETHTOOL_SRXFHINDIR",
        ifname,
        &indir_buf(ETHTOOL_SRXFHINDIR, &[], 0),
    )
    .map(drop)
}

/// What `ETHTOOL_GDRVINFO` says about the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverInfo {
    /// Driver name, e.g. `veth`, `mlx5_core`.
    pub driver: String,
    /// Driver version.
    pub version: String,
    /// Firmware version.
    pub fw_version: String,
    /// Bus address, e.g. `0000:3b:00.0`.
    pub bus_info: String,
    /// Expansion ROM version.
    pub erom_version: String,
}

fn cstr(b: &[u8], off: usize, len: usize) -> String {
    let s = b.get(off..off + len).unwrap_or(&[]);
    let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
    String::from_utf8_lossy(&s[..end]).into_owned()
}

/// Decodes `struct ethtool_drvinfo` (196 bytes: `cmd`, then 32-byte strings `driver` at 4,
/// `version` 36, `fw_version` 68, `bus_info` 100, `erom_version` 132).
pub fn decode_drvinfo(b: &[u8]) -> Result<DriverInfo> {
    if b.len() < DRVINFO_LEN {
        return Err(malformed(format!("ethtool_drvinfo of {} bytes", b.len())));
    }
    Ok(DriverInfo {
        driver: cstr(b, 4, 32),
        version: cstr(b, 36, 32),
        fw_version: cstr(b, 68, 32),
        bus_info: cstr(b, 100, 32),
        erom_version: cstr(b, 132, 32),
    })
}

/// Driver info (`ETHTOOL_GDRVINFO`).
pub fn driver_info(ifname: &str) -> Result<DriverInfo> {
    let mut req = vec![0u8; DRVINFO_LEN];
    put(&mut req, 0, &ETHTOOL_GDRVINFO.to_ne_bytes());
    let b = ioctl("ETHTOOL_GDRVINFO", ifname, &req)?;
    decode_drvinfo(&b).map_err(|e| e.in_context("ETHTOOL_GDRVINFO"))
}

#[cfg(test)]
mod tests;
