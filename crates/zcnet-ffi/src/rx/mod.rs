//! `zcnet_receiver`: receives on TCP connections into buffers lent to the caller, with every
//! receive mode of the library behind one handle.

mod ffi;
mod receiver;

pub use ffi::*;
pub use receiver::zcnet_receiver;

use crate::error::{invalid, zcnet_status, Result};
use std::ffi::{c_char, CStr};
use zcnet::{RxConfig, RxMode, RxStats};

/// Receive mode: the best of zcrx (only with an interface), uring and copy that works here
/// (`zcnet_receiver_fallbacks` says why the others were not taken). The default (0).
pub const ZCNET_RX_AUTO: u32 = 0;
/// Receive mode: epoll + `recv()` into a pool of buffers; the kernel copies. The baseline.
pub const ZCNET_RX_COPY: u32 = 1;
/// Receive mode: io_uring multishot receive into a provided buffer ring (the kernel copies).
pub const ZCNET_RX_URING: u32 = 2;
/// Receive mode: io_uring zero-copy receive from a NIC queue (`iface`, `queue`).
pub const ZCNET_RX_ZCRX: u32 = 3;
/// Receive mode: devmem TCP; payload lands in device memory the CPU cannot read.
pub const ZCNET_RX_DEVMEM: u32 = 4;

/// `zcnet_rx_config.flags`: no io_uring bundles (one completion per buffer).
pub const ZCNET_RX_NO_BUNDLE: u32 = 1;
/// `zcnet_rx_config.flags`: `queue` is set (otherwise the interface's last queue is used).
pub const ZCNET_RX_QUEUE: u32 = 2;

/// How to receive. A zeroed struct (`zcnet_rx_config cfg = {0};`) means every default.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct zcnet_rx_config {
    /// One of the `ZCNET_RX_*` modes (0: `ZCNET_RX_AUTO`).
    pub mode: u32,
    /// Buffers (copy, uring: rounded up to a power of two) (0: 64).
    pub buffers: u32,
    /// Bytes per buffer (copy, uring, devmem's linear data) (0: 16384).
    pub buf_size: u64,
    /// zcrx: bytes of the registered receive area (0: 64 MiB).
    pub area_len: u64,
    /// zcrx, devmem: the receive queue, when `flags` has `ZCNET_RX_QUEUE`.
    pub queue: u32,
    /// `ZCNET_RX_NO_BUNDLE`, `ZCNET_RX_QUEUE`.
    pub flags: u32,
    /// zcrx, devmem: the interface the connections arrive on, NUL-terminated ("" for none).
    pub iface: [c_char; 16],
}

/// `zcnet_rx_event.kind`: data arrived in a lent buffer.
pub const ZCNET_RX_DATA: u32 = 1;
/// `zcnet_rx_event.kind`: the peer closed its sending half; no more data on `conn`.
pub const ZCNET_RX_EOF: u32 = 2;
/// `zcnet_rx_event.kind`: receiving on `conn` failed and stopped (`status`, `error`).
pub const ZCNET_RX_FAILED: u32 = 3;

/// One thing `zcnet_receiver_poll` reports.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct zcnet_rx_event {
    /// `ZCNET_RX_DATA`, `ZCNET_RX_EOF` or `ZCNET_RX_FAILED`.
    pub kind: u32,
    /// `ZCNET_RX_FAILED`: why; otherwise `ZCNET_OK`.
    pub status: zcnet_status,
    /// The connection (from `zcnet_receiver_accept`).
    pub conn: u64,
    /// `ZCNET_RX_DATA`: the lent buffer, to give back with `zcnet_receiver_release`; else 0.
    pub buf: u64,
    /// `ZCNET_RX_DATA`: the bytes, valid until the buffer is released; NULL when they are in
    /// device memory (see `dmabuf_id`, `dmabuf_offset`; `zcnet_receiver_read` copies them out of
    /// a region the receiver bound).
    pub data: *const u8,
    /// `ZCNET_RX_DATA`: bytes received into the buffer.
    pub len: u64,
    /// Device memory: the offset in the dma-buf (for a receiver made with
    /// `zcnet_receiver_new_in`, in the region).
    pub dmabuf_offset: u64,
    /// Device memory: the kernel's dma-buf binding id; 0 for host memory.
    pub dmabuf_id: u32,
    /// `ZCNET_RX_DATA`: 1 when the kernel copied these bytes, 0 when the NIC wrote them in
    /// place.
    pub copied: u32,
    /// `ZCNET_RX_FAILED`: the message, valid until the connection is closed; else NULL.
    pub error: *const c_char,
}

impl Default for zcnet_rx_event {
    /// Kind 0 (no event), every field 0 or NULL.
    fn default() -> Self {
        zcnet_rx_event {
            kind: 0,
            status: zcnet_status::ZCNET_OK,
            conn: 0,
            buf: 0,
            data: std::ptr::null(),
            len: 0,
            dmabuf_offset: 0,
            dmabuf_id: 0,
            copied: 0,
            error: std::ptr::null(),
        }
    }
}

/// Counters since the receiver was made.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct zcnet_rx_stats {
    /// Payload bytes delivered.
    pub bytes: u64,
    /// Buffers delivered.
    pub buffers: u64,
    /// Of `bytes`, those the kernel copied.
    pub copied_bytes: u64,
    /// Of `bytes`, those the NIC wrote directly into registered memory.
    pub zerocopy_bytes: u64,
    /// Times receiving paused because the caller held every buffer.
    pub starved: u64,
    /// Multishot receives re-armed after the kernel ended them.
    pub rearms: u64,
    /// Connections that reached end of stream.
    pub eofs: u64,
    /// Connections whose receive failed.
    pub failures: u64,
    /// devmem: data that arrived as linear (host) data instead of device memory.
    pub linear_fallbacks: u64,
    /// zcrx, devmem: bytes that arrived outside the bound queue (not steered).
    pub unsteered: u64,
    /// Buffers given back to the kernel.
    pub returned: u64,
    /// Buffers lent to the caller now (delivered, not yet released).
    pub held: u64,
    /// Of `bytes`, those whose copy the kernel did not report (zcrx on a device before Linux
    /// 7.2's statistics): counted neither as copied nor as zero-copy.
    pub unknown_copy_bytes: u64,
}

/// What `zcnet_receiver_recv_stream` saw.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct zcnet_stream_report {
    /// Bytes received.
    pub bytes: u64,
    /// Buffers delivered.
    pub reads: u64,
    /// Bytes that landed in device memory (counted, not read).
    pub device_bytes: u64,
    /// Seconds from the first byte to the end of the stream.
    pub seconds: f64,
    /// The receiver's counters at the end.
    pub stats: zcnet_rx_stats,
}

/// The library's configuration for `cfg` (NULL: the defaults).
pub fn rx_config(cfg: Option<&zcnet_rx_config>) -> Result<RxConfig> {
    let c = cfg.copied().unwrap_or_default();
    let mode = match c.mode {
        ZCNET_RX_AUTO => RxMode::Auto,
        ZCNET_RX_COPY => RxMode::Copy,
        ZCNET_RX_URING => RxMode::Uring,
        ZCNET_RX_ZCRX => RxMode::Zcrx,
        ZCNET_RX_DEVMEM => RxMode::Devmem,
        n => return Err(invalid(format!("cfg->mode {n} is no ZCNET_RX_* mode"))),
    };
    if c.flags & !(ZCNET_RX_NO_BUNDLE | ZCNET_RX_QUEUE) != 0 {
        return Err(invalid(format!(
            "cfg->flags {:#x} has unknown bits",
            c.flags
        )));
    }
    let iface: Vec<u8> = c.iface.iter().map(|&b| b as u8).collect();
    let iface = CStr::from_bytes_until_nul(&iface)
        .map_err(|_| invalid("cfg->iface is not NUL-terminated within its 16 bytes"))?
        .to_str()
        .map_err(|e| invalid(format!("cfg->iface is not valid UTF-8 ({e})")))?;
    let mut r = RxConfig::new(mode);
    if c.buffers != 0 {
        r.buffers = c.buffers as usize;
    }
    let size = |v: u64, name: &str| {
        usize::try_from(v).map_err(|_| invalid(format!("cfg->{name} {v} is too large")))
    };
    if c.buf_size != 0 {
        r.buf_size = size(c.buf_size, "buf_size")?;
    }
    if c.area_len != 0 {
        r.area_len = size(c.area_len, "area_len")?;
    }
    r.bundle = c.flags & ZCNET_RX_NO_BUNDLE == 0;
    r.queue = (c.flags & ZCNET_RX_QUEUE != 0).then_some(c.queue);
    r.iface = (!iface.is_empty()).then(|| iface.to_string());
    Ok(r)
}

/// A mode's name, NUL-terminated.
pub(crate) fn mode_name(m: RxMode) -> &'static CStr {
    match m {
        RxMode::Copy => c"copy",
        RxMode::Uring => c"uring",
        RxMode::Zcrx => c"zcrx",
        RxMode::Devmem => c"devmem",
        RxMode::Auto => c"auto",
    }
}

/// The C counters of `s`, with `held` buffers lent to the caller now.
pub(crate) fn stats(s: &RxStats, held: usize) -> zcnet_rx_stats {
    zcnet_rx_stats {
        bytes: s.bytes,
        buffers: s.buffers,
        copied_bytes: s.copied_bytes,
        zerocopy_bytes: s.zerocopy_bytes,
        starved: s.starved,
        rearms: s.rearms,
        eofs: s.eofs,
        failures: s.failures,
        linear_fallbacks: s.linear_fallbacks,
        unsteered: s.unsteered,
        returned: s.returned,
        held: held as u64,
        unknown_copy_bytes: s.unknown_copy_bytes,
    }
}
