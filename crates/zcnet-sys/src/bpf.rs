//! The `bpf(2)` calls an AF_XDP receiver needs: an XSKMAP, an XDP program loaded from
//! instructions built in code (with the verifier's log when it is refused), and a bpf_link
//! that attaches it to an interface for as long as the link's fd is open — so the program goes
//! away with the process, SIGKILL included (Documentation/bpf/ and include/uapi/linux/bpf.h,
//! `union bpf_attr`; net/core/dev.c `bpf_xdp_link_attach`).
//!
//! Every object is an owned fd, closed on drop; nothing is pinned in bpffs.
//!
//! Errors seen on Linux 6.18: `BPF_LINK_CREATE` on an interface that already has an XDP
//! program (attached by netlink or by another link) is `EBUSY`; native mode on a driver
//! without XDP is `EOPNOTSUPP`; a program the verifier refuses is `EACCES` or `EINVAL` with the
//! reason in the log; without CAP_BPF/CAP_NET_ADMIN: `EPERM`.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use zcnet_core::xdp_prog::Insn;

const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_PROG_GET_FD_BY_ID: libc::c_int = 13;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_int = 15;
const BPF_LINK_CREATE: libc::c_int = 28;
const BPF_LINK_GET_FD_BY_ID: libc::c_int = 30;
const BPF_LINK_GET_NEXT_ID: libc::c_int = 31;

/// `BPF_MAP_TYPE_XSKMAP`.
pub(crate) const BPF_MAP_TYPE_XSKMAP: u32 = 17;
/// `BPF_PROG_TYPE_XDP`.
pub(crate) const BPF_PROG_TYPE_XDP: u32 = 6;
/// `BPF_XDP` (enum bpf_attach_type).
pub(crate) const BPF_XDP: u32 = 37;
/// `BPF_LINK_TYPE_XDP` (enum bpf_link_type).
pub(crate) const BPF_LINK_TYPE_XDP: u32 = 6;
/// `XDP_FLAGS_SKB_MODE` (include/uapi/linux/if_link.h): generic XDP.
pub(crate) const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: native (driver) XDP.
pub(crate) const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// `union bpf_attr` for `BPF_MAP_CREATE` (the fields up to `map_name`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

/// `union bpf_attr` for `BPF_MAP_*_ELEM`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// `union bpf_attr` for `BPF_PROG_LOAD` (the fields up to `expected_attach_type`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// `union bpf_attr` for `BPF_LINK_CREATE` (the common fields; XDP takes nothing more).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// `union bpf_attr` for `BPF_OBJ_GET_INFO_BY_FD`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// `union bpf_attr` for `BPF_*_GET_NEXT_ID` and `BPF_*_GET_FD_BY_ID`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct IdAttr {
    id: u32,
    next_id: u32,
    open_flags: u32,
}

/// The head of `struct bpf_link_info` with its `xdp` member (the union starts at 16: it holds
/// 64-bit fields).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct LinkInfoRaw {
    link_type: u32,
    id: u32,
    prog_id: u32,
    _pad: u32,
    xdp_ifindex: u32,
    _rest: [u32; 3],
}

/// The head of `struct bpf_prog_info`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct ProgInfoRaw {
    prog_type: u32,
    id: u32,
    tag: [u8; 8],
}

/// `bpf(cmd, attr, sizeof attr)`; `T` must be one of the attr structs above.
fn bpf<T>(cmd: libc::c_int, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: attr is a live, writable repr(C) struct of the layout the kernel expects for
    // `cmd` (pinned by the tests), and the size passed is its exact size; the kernel copies it
    // in and, for some commands, writes fields of it back. Pointers inside it are set by the
    // callers to buffers that outlive this call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            (attr as *mut T).cast::<libc::c_void>(),
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if r < 0 {
        Err(crate::last_err())
    } else {
        Ok(r)
    }
}

fn bpf_fd<T>(cmd: libc::c_int, attr: &mut T) -> io::Result<OwnedFd> {
    let r = bpf(cmd, attr)?;
    let raw = libc::c_int::try_from(r).map_err(|_| io::Error::other("bpf() fd out of range"))?;
    // SAFETY: these commands return a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

fn name16(name: &str) -> [u8; 16] {
    let mut n = [0u8; 16];
    for (d, s) in n.iter_mut().zip(name.bytes().take(15)) {
        *d = if s.is_ascii_alphanumeric() || s == b'_' || s == b'.' {
            s
        } else {
            b'_'
        };
    }
    n
}

/// An XSKMAP (`BPF_MAP_TYPE_XSKMAP`): key = queue index, value = an AF_XDP socket.
#[derive(Debug)]
pub struct XskMap {
    fd: OwnedFd,
    entries: u32,
}

impl XskMap {
    /// A new map with `entries` keys (`0..entries`).
    pub fn create(entries: u32, name: &str) -> io::Result<XskMap> {
        let mut a = MapCreateAttr {
            map_type: BPF_MAP_TYPE_XSKMAP,
            key_size: 4,
            value_size: 4,
            max_entries: entries,
            map_name: name16(name),
            ..MapCreateAttr::default()
        };
        Ok(XskMap {
            fd: bpf_fd(BPF_MAP_CREATE, &mut a)?,
            entries,
        })
    }

    /// The map's fd (for the program's `LD_IMM64` of a map).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Keys in the map.
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// Puts the AF_XDP socket `xsk` (bound) at `key`. The map holds the socket until the entry
    /// is deleted or the socket is closed (the kernel removes closed sockets from every map).
    pub fn set(&self, key: u32, xsk: BorrowedFd<'_>) -> io::Result<()> {
        let value = xsk.as_raw_fd() as u32;
        let mut a = MapElemAttr {
            map_fd: self.fd.as_raw_fd() as u32,
            key: &key as *const u32 as u64,
            value: &value as *const u32 as u64,
            ..MapElemAttr::default()
        };
        bpf(BPF_MAP_UPDATE_ELEM, &mut a).map(drop)
    }
}

/// The kernel refused a program: the errno and the verifier's log.
#[derive(Debug)]
pub struct ProgLoadError {
    /// The errno of `BPF_PROG_LOAD`.
    pub source: io::Error,
    /// The verifier's log (empty when the refusal came before verification, e.g. `EPERM`).
    pub(crate) log: String,
}

impl ProgLoadError {
    /// The last `n` non-empty lines of the log, joined with " | ": where the verifier stopped.
    pub(crate) fn log_tail(&self, n: usize) -> String {
        let lines: Vec<&str> = self
            .log
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        lines[lines.len().saturating_sub(n)..].join(" | ")
    }
}

impl std::fmt::Display for ProgLoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.source)?;
        if !self.log.is_empty() {
            write!(f, "; verifier: {}", self.log_tail(3))?;
        }
        Ok(())
    }
}

impl std::error::Error for ProgLoadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Verifier log buffer, for a reload after a refusal.
const LOG_SIZE: usize = 256 * 1024;

/// A loaded BPF program.
#[derive(Debug)]
pub struct BpfProg {
    fd: OwnedFd,
}

fn prog_load(insns: &[Insn], name: &str, log: Option<&mut [u8]>) -> io::Result<OwnedFd> {
    let code = zcnet_core::xdp_prog::to_bytes(insns);
    let license = c"Dual MIT/GPL";
    let mut a = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_XDP,
        insn_cnt: insns.len() as u32,
        insns: code.as_ptr() as u64,
        license: license.as_ptr() as u64,
        prog_name: name16(name),
        expected_attach_type: BPF_XDP,
        ..ProgLoadAttr::default()
    };
    if let Some(buf) = log {
        a.log_level = 1;
        a.log_size = buf.len() as u32;
        a.log_buf = buf.as_mut_ptr() as u64;
    }
    // `code`, `license` and the log buffer outlive the call; the kernel writes only the log.
    bpf_fd(BPF_PROG_LOAD, &mut a)
}

impl BpfProg {
    /// Loads an XDP program (`BPF_PROG_TYPE_XDP`, expected attach type `BPF_XDP`). When the
    /// kernel refuses it, loads it again with a log to return the verifier's reasons.
    pub fn load_xdp(insns: &[Insn], name: &str) -> Result<BpfProg, ProgLoadError> {
        match prog_load(insns, name, None) {
            Ok(fd) => Ok(BpfProg { fd }),
            Err(source) => {
                let mut buf = vec![0u8; LOG_SIZE];
                // Its own result says nothing new (the same refusal, or ENOSPC for a log
                // too long, in which case the buffer holds its beginning).
                let _ = prog_load(insns, name, Some(&mut buf));
                let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
                Err(ProgLoadError {
                    source,
                    log: String::from_utf8_lossy(&buf[..end]).into_owned(),
                })
            }
        }
    }

    /// The program's id (`BPF_OBJ_GET_INFO_BY_FD`).
    pub fn id(&self) -> io::Result<u32> {
        let mut info = ProgInfoRaw::default();
        obj_info(self.fd.as_fd(), &mut info)?;
        Ok(info.id)
    }
}

fn obj_info<T>(fd: BorrowedFd<'_>, info: &mut T) -> io::Result<()> {
    let mut a = InfoAttr {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: std::mem::size_of::<T>() as u32,
        info: info as *mut T as u64,
    };
    // `info` is a live repr(C) integer struct; the kernel writes at most info_len bytes.
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a).map(drop)
}

/// How to attach an XDP program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpAttachMode {
    /// Native (driver) XDP: `XDP_FLAGS_DRV_MODE`; `EOPNOTSUPP` where the driver has none.
    Native,
    /// Generic XDP on the skb path: `XDP_FLAGS_SKB_MODE`; works on every device.
    Generic,
}

impl XdpAttachMode {
    /// The `XDP_FLAGS_*` bit.
    pub(crate) fn flags(self) -> u32 {
        match self {
            XdpAttachMode::Native => XDP_FLAGS_DRV_MODE,
            XdpAttachMode::Generic => XDP_FLAGS_SKB_MODE,
        }
    }

    /// "native" or "generic".
    pub fn name(self) -> &'static str {
        match self {
            XdpAttachMode::Native => "native",
            XdpAttachMode::Generic => "generic",
        }
    }
}

/// An XDP program attached to an interface through a bpf_link: detached when this value is
/// dropped, or when the process dies (the kernel closes the fd).
#[derive(Debug)]
pub struct XdpLink {
    fd: OwnedFd,
}

impl XdpLink {
    /// `BPF_LINK_CREATE` of `prog` on interface `ifindex` (calling thread's namespace).
    pub fn attach(prog: &BpfProg, ifindex: u32, mode: XdpAttachMode) -> io::Result<XdpLink> {
        let mut a = LinkCreateAttr {
            prog_fd: prog.fd.as_raw_fd() as u32,
            target_ifindex: ifindex,
            attach_type: BPF_XDP,
            flags: mode.flags(),
        };
        Ok(XdpLink {
            fd: bpf_fd(BPF_LINK_CREATE, &mut a)?,
        })
    }

    /// What the kernel says about the link.
    pub fn info(&self) -> io::Result<LinkInfo> {
        link_info_of(self.fd.as_fd())
    }
}

/// A bpf_link as `BPF_OBJ_GET_INFO_BY_FD` describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkInfo {
    /// `enum bpf_link_type` ([`BPF_LINK_TYPE_XDP`] for XDP).
    pub(crate) link_type: u32,
    /// The link id.
    pub id: u32,
    /// The attached program's id.
    pub(crate) prog_id: u32,
    /// For an XDP link: the interface index (in the link's namespace); 0 once detached.
    pub(crate) ifindex: u32,
}

fn link_info_of(fd: BorrowedFd<'_>) -> io::Result<LinkInfo> {
    let mut raw = LinkInfoRaw::default();
    obj_info(fd, &mut raw)?;
    Ok(LinkInfo {
        link_type: raw.link_type,
        id: raw.id,
        prog_id: raw.prog_id,
        ifindex: if raw.link_type == BPF_LINK_TYPE_XDP {
            raw.xdp_ifindex
        } else {
            0
        },
    })
}

/// The ids of every bpf_link in the system (`BPF_LINK_GET_NEXT_ID`).
pub fn link_ids() -> io::Result<Vec<u32>> {
    let mut ids = Vec::new();
    let mut a = IdAttr::default();
    loop {
        match bpf(BPF_LINK_GET_NEXT_ID, &mut a) {
            Ok(_) => {
                ids.push(a.next_id);
                a.id = a.next_id;
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(ids),
            Err(e) => return Err(e),
        }
    }
}

/// The link with id `id`, or `None` when there is none (any more).
pub fn link_info(id: u32) -> io::Result<Option<LinkInfo>> {
    let mut a = IdAttr {
        id,
        ..IdAttr::default()
    };
    match bpf_fd(BPF_LINK_GET_FD_BY_ID, &mut a) {
        Ok(fd) => link_info_of(fd.as_fd()).map(Some),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether a program with id `id` still exists (`BPF_PROG_GET_FD_BY_ID`).
pub fn prog_exists(id: u32) -> io::Result<bool> {
    let mut a = IdAttr {
        id,
        ..IdAttr::default()
    };
    match bpf_fd(BPF_PROG_GET_FD_BY_ID, &mut a) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests;
