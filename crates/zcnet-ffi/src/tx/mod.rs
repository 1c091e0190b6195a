//! `zcnet_sender`: sends over a TCP connection from a region's buffers, with the library's
//! accounting of what the kernel sent without copying.

mod ffi;

pub use ffi::*;

use crate::error::{invalid, Result};
use crate::region::zcnet_region;
use std::ffi::CStr;
use std::net::SocketAddr;
use std::time::Duration;
use zcnet::gpu::GpuSender;
use zcnet::{Region, Sender, TxBuf, TxConfig, TxMode, TxStats};

/// Send mode: zero copy until the kernel reports that it copies, then plain sends (re-checked
/// now and then). The default (0).
pub const ZCNET_TX_AUTO: u32 = 0;
/// Send mode: `send()`; the kernel copies. The baseline.
pub const ZCNET_TX_COPY: u32 = 1;
/// Send mode: `MSG_ZEROCOPY` sends, completions from the socket's error queue.
pub const ZCNET_TX_MSG_ZEROCOPY: u32 = 2;
/// Send mode: io_uring `IORING_OP_SEND` (copies), several in flight.
pub const ZCNET_TX_URING: u32 = 3;
/// Send mode: io_uring `IORING_OP_SEND_ZC` from registered buffers.
pub const ZCNET_TX_URING_ZC: u32 = 4;
/// Send mode: devmem TCP transmit from a CUDA region's dma-buf (needs a NIC with netmem TX).
pub const ZCNET_TX_DEVMEM: u32 = 5;

/// How to send. A zeroed struct (`zcnet_tx_config cfg = {0};`) means every default.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct zcnet_tx_config {
    /// One of the `ZCNET_TX_*` modes (0: `ZCNET_TX_AUTO`).
    pub mode: u32,
    /// Buffers (and so sends) in flight: exactly this many; 0: at least 8, more for small
    /// buffers (up to 512 KiB in flight, as far as the region holds them).
    pub inflight: u32,
    /// Bytes per buffer (0: 65536).
    pub buf_size: u64,
    /// Fail with `ZCNET_E_STALLED` after this many milliseconds without a completion
    /// (0: 10000).
    pub stall_timeout_ms: u64,
}

/// A buffer lent to the caller by `zcnet_sender_buffer`, until it is sent.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct zcnet_txbuf {
    /// The buffer's bytes, to write the payload in place; NULL for device memory (write it
    /// with `zcnet_sender_write`). Valid until the buffer is sent.
    pub data: *mut u8,
    /// Bytes the buffer holds.
    pub capacity: u64,
    /// The buffer's number, for `zcnet_sender_write` and `zcnet_sender_send`.
    pub id: u32,
    /// Zero.
    pub reserved: u32,
}

/// What a sender did. After `zcnet_sender_finish`,
/// `bytes == zerocopy_bytes + copied_bytes`.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct zcnet_tx_stats {
    /// Bytes the kernel accepted.
    pub bytes: u64,
    /// Send calls or io_uring send requests.
    pub sends: u64,
    /// Zero-copy notifications received.
    pub notifications: u64,
    /// Of those, notifications that said the kernel copied.
    pub copied_notifications: u64,
    /// Bytes the kernel confirmed it sent from the caller's pages.
    pub zerocopy_bytes: u64,
    /// Bytes the kernel copied.
    pub copied_bytes: u64,
    /// Completions reported twice (should stay 0).
    pub duplicate_completions: u64,
    /// Completions for ids never sent (should stay 0).
    pub unknown_completions: u64,
    /// Times a send waited because net.core.optmem_max was full (ENOBUFS).
    pub enobufs_waits: u64,
    /// Mode changes of `ZCNET_TX_AUTO`.
    pub switches: u64,
    /// Wall-clock seconds from the first buffer to now (or to the finish).
    pub seconds: f64,
    /// CPU seconds (user + system) of the calling thread over the same time.
    pub cpu_seconds: f64,
}

impl From<&TxStats> for zcnet_tx_stats {
    fn from(s: &TxStats) -> Self {
        zcnet_tx_stats {
            bytes: s.bytes,
            sends: s.sends,
            notifications: s.notifications,
            copied_notifications: s.copied_notifications,
            zerocopy_bytes: s.zerocopy_bytes,
            copied_bytes: s.copied_bytes,
            duplicate_completions: s.duplicate_completions,
            unknown_completions: s.unknown_completions,
            enobufs_waits: s.enobufs_waits,
            switches: s.switches.len() as u64,
            seconds: s.seconds,
            cpu_seconds: s.cpu_seconds,
        }
    }
}

/// A connection to send on, with its buffers. One thread at a time may use it.
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct zcnet_sender {
    /// `None` once finished.
    tx: Option<Tx>,
    /// Buffers lent to the caller, by id.
    lent: Vec<Option<TxBuf>>,
}

/// The library's sender for the region, as `zcnet send` picks it: a [`Sender`] for host
/// memory, a [`GpuSender`] (devmem TX where the NIC can, else staging through pinned host
/// buffers) for a CUDA region. Only dispatch here: both are the library's code.
#[derive(Debug)]
pub(crate) enum Tx {
    Host(Box<Sender>),
    Gpu(GpuSender),
}

impl Tx {
    fn open(stream: std::net::TcpStream, region: Region, cfg: &TxConfig) -> Result<Tx> {
        Ok(if region.device_ordinal().is_some() {
            // The refusals of the better paths are the CLI's to print; the mode says what ran.
            Tx::Gpu(GpuSender::open(stream.into(), region, cfg)?.0)
        } else {
            Tx::Host(Box::new(Sender::new(stream.into(), region, cfg)?))
        })
    }

    fn buffers(&self) -> usize {
        match self {
            Tx::Host(t) => t.buffers(),
            Tx::Gpu(t) => t.buffers(),
        }
    }

    fn buffer(&mut self) -> zcnet::Result<TxBuf> {
        match self {
            Tx::Host(t) => t.buffer(),
            Tx::Gpu(t) => t.buffer(),
        }
    }

    fn send(&mut self, buf: TxBuf, len: usize) -> zcnet::Result<()> {
        match self {
            Tx::Host(t) => t.send(buf, len),
            Tx::Gpu(t) => t.send(buf, len),
        }
    }

    pub(crate) fn flush(&mut self) -> zcnet::Result<()> {
        match self {
            Tx::Host(t) => t.flush(),
            Tx::Gpu(t) => t.flush(),
        }
    }

    /// Sends `len` bytes of the caller's memory, held by the sender until the kernel is done
    /// ([`Sender::send_lent`]); a GPU region's sender sends only from its region.
    pub(crate) fn send_borrowed(
        &mut self,
        buf: std::sync::Arc<zcnet::engine::ForeignBuf>,
        len: usize,
    ) -> zcnet::Result<()> {
        match self {
            Tx::Host(t) => {
                t.send_lent(buf, 0, len)?;
                t.submit()
            }
            Tx::Gpu(_) => Err(zcnet::Error::Unsupported {
                what: "sending the caller's memory from a sender of GPU memory".into(),
                source: std::io::Error::from(std::io::ErrorKind::Unsupported),
                remedy: zcnet::Remedy::UseMemory(zcnet::MemoryKind::Anonymous),
            }),
        }
    }

    pub(crate) fn stats(&self) -> TxStats {
        match self {
            Tx::Host(t) => t.stats(),
            Tx::Gpu(t) => t.stats(),
        }
    }

    pub(crate) fn mode(&self) -> TxMode {
        match self {
            Tx::Host(t) => t.mode(),
            Tx::Gpu(t) => t.mode(),
        }
    }

    fn finish(self) -> zcnet::Result<TxStats> {
        match self {
            Tx::Host(t) => t.finish(),
            Tx::Gpu(t) => Ok(t.finish()?.tx),
        }
    }
}

/// The library's configuration for `cfg` (NULL: the defaults).
pub fn tx_config(cfg: Option<&zcnet_tx_config>) -> Result<TxConfig> {
    let c = cfg.copied().unwrap_or_default();
    let mode = match c.mode {
        ZCNET_TX_AUTO => TxMode::Auto,
        ZCNET_TX_COPY => TxMode::Copy,
        ZCNET_TX_MSG_ZEROCOPY => TxMode::MsgZerocopy,
        ZCNET_TX_URING => TxMode::Uring,
        ZCNET_TX_URING_ZC => TxMode::UringZc,
        ZCNET_TX_DEVMEM => TxMode::Devmem,
        n => return Err(invalid(format!("cfg->mode {n} is no ZCNET_TX_* mode"))),
    };
    let mut t = TxConfig::new(mode);
    if c.inflight != 0 {
        // An explicit count is the count (the struct has no window field).
        t.inflight = c.inflight as usize;
        t.window = 0;
    }
    if c.buf_size != 0 {
        // A send's length is 32 bits to the kernel.
        t.buf_size = u32::try_from(c.buf_size).map(|n| n as usize).map_err(|_| {
            invalid(format!(
                "cfg->buf_size {} is too large: at most {} B",
                c.buf_size,
                u32::MAX
            ))
        })?;
    }
    if c.stall_timeout_ms != 0 {
        t.stall_timeout = Duration::from_millis(c.stall_timeout_ms);
    }
    Ok(t)
}

/// A mode's name, NUL-terminated.
fn mode_name(m: TxMode) -> &'static CStr {
    match m {
        TxMode::Copy => c"copy",
        TxMode::MsgZerocopy => c"msg-zerocopy",
        TxMode::Uring => c"uring",
        TxMode::UringZc => c"uring-zc",
        TxMode::Auto => c"auto",
        TxMode::Devmem => c"devmem",
    }
}

/// Parses a numeric `IP:PORT` (`127.0.0.1:5201`, `[::1]:5201`); names are not resolved.
pub fn parse_addr(addr: &str) -> Result<SocketAddr> {
    addr.parse().map_err(|_| {
        zcnet::Error::BadAddress {
            given: addr.to_string(),
        }
        .into()
    })
}

impl zcnet_sender {
    fn connect(
        addr: &str,
        cfg: Option<&zcnet_tx_config>,
        region: Option<&mut zcnet_region>,
    ) -> Result<zcnet_sender> {
        let cfg = tx_config(cfg)?;
        let addr = parse_addr(addr)?;
        // A region too small is said before connecting, while it is still the caller's.
        // (One already given away is said by `take` below.)
        if let Some(Ok(r)) = region.as_deref().map(zcnet_region::memory) {
            let (need, have) = (zcnet::tx::min_region_len(&cfg), r.len());
            if need > have {
                return Err(zcnet::Error::RegionTooSmall { need, have }.into());
            }
        }
        let stream = zcnet::net::connect_tcp(addr, &cfg.cancel)?;
        let region = match region {
            Some(r) => r.take()?,
            None => Region::for_sender(zcnet::MemoryKind::Auto, &cfg)?,
        };
        let tx = Tx::open(stream, region, &cfg)?;
        let lent = (0..tx.buffers()).map(|_| None).collect();
        Ok(zcnet_sender { tx: Some(tx), lent })
    }

    fn sender(&mut self) -> Result<&mut Tx> {
        self.tx
            .as_mut()
            .ok_or_else(|| invalid("the sender was finished"))
    }

    fn lent_mut(&mut self, id: u32) -> Result<&mut Option<TxBuf>> {
        match self.lent.get_mut(id as usize) {
            Some(slot) if slot.is_some() => Ok(slot),
            _ => Err(invalid(format!(
                "buffer {id} is not lent to the caller (never handed out, or already sent)"
            ))),
        }
    }

    fn buffer(&mut self) -> Result<zcnet_txbuf> {
        if self.lent.iter().all(Option::is_some) {
            return Err(invalid(
                "every buffer is lent to the caller: send one first (a send of 0 bytes gives it back)",
            ));
        }
        let mut buf = self.sender()?.buffer()?;
        let out = zcnet_txbuf {
            data: buf
                .bytes_mut()
                .map_or(std::ptr::null_mut(), |b| b.as_mut_ptr()),
            capacity: buf.capacity() as u64,
            id: buf.id(),
            reserved: 0,
        };
        // Ids run from 0 to buffers() - 1: `lent` has one place for each.
        let place = self.lent.get_mut(out.id as usize);
        *place.ok_or_else(|| invalid(format!("buffer id {} out of range", out.id)))? = Some(buf);
        Ok(out)
    }

    fn write(&mut self, id: u32, data: &[u8]) -> Result<usize> {
        match self.lent_mut(id)? {
            Some(buf) => {
                // The copy takes the buffer's bytes as `&mut`: `data` must not be among them.
                if let Some(b) = buf.bytes() {
                    let (start, end) = (b.as_ptr() as usize, b.as_ptr() as usize + b.len());
                    let from = data.as_ptr() as usize;
                    if !data.is_empty() && from < end && start < from + data.len() {
                        return Err(invalid(format!(
                            "data lies in buffer {id} itself: write the buffer through its data pointer"
                        )));
                    }
                }
                Ok(buf.write(data)?)
            }
            None => Err(invalid(format!("buffer {id} is not lent to the caller"))),
        }
    }

    fn send(&mut self, id: u32, len: usize) -> Result<()> {
        let buf = self.lent_mut(id)?.take();
        let tx = self.sender()?;
        match buf {
            Some(buf) => Ok(tx.send(buf, len)?),
            None => Err(invalid(format!("buffer {id} is not lent to the caller"))),
        }
    }

    fn finish(&mut self) -> Result<zcnet_tx_stats> {
        let tx = self
            .tx
            .take()
            .ok_or_else(|| invalid("the sender was finished"))?;
        self.lent.iter_mut().for_each(|b| *b = None);
        Ok((&tx.finish()?).into())
    }
}
