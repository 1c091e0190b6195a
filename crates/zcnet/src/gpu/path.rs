//! Choosing how data moves between the network and GPU memory, best first, and saying why the
//! better paths were refused: devmem TCP (the NIC reads or writes the GPU's dma-buf), zcrx with
//! a dma-buf area (receive), and staging through pinned host memory (always possible).

#[cfg(doc)]
use super::staging::StagedReceiver;
use super::staging::{StagedSender, StagedStats};
use crate::error::{Error, Result};
use crate::region::Region;
use crate::rx::{Receiver, RxConfig, RxMode};
use crate::tx::{Sender, Socket, TxConfig, TxMode, TxStats};
use zcnet_core::Pattern;

/// A way between the network and GPU memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GpuPath {
    /// devmem TCP: the NIC DMAs straight to/from a dma-buf of GPU memory.
    Devmem,
    /// io_uring zero-copy receive into a dma-buf area (receive only).
    ZcrxDmabuf,
    /// Pinned host buffers and asynchronous copies (the CPU copies nothing; the GPU's copy
    /// engine does).
    Staging,
}

impl GpuPath {
    /// The name in output and JSON.
    pub fn name(self) -> &'static str {
        match self {
            GpuPath::Devmem => "devmem",
            GpuPath::ZcrxDmabuf => "zcrx-dmabuf",
            GpuPath::Staging => "staging",
        }
    }
}

impl std::fmt::Display for GpuPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A better path that was not taken, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The path.
    pub path: GpuPath,
    /// Why (the kernel's or driver's answer, or what was not asked for).
    pub reason: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} refused: {}", self.path, self.reason)
    }
}

/// Sends from GPU memory by the best path: devmem TX when asked for (`--tx devmem`) or when
/// `auto` finds it works, else staging with `cfg.mode` (default `uring-zc` under `auto`) on
/// the host leg.
#[derive(Debug)]
pub enum GpuSender {
    /// devmem TX: a [`Sender`] over the device region's buffers.
    Devmem(Box<Sender>),
    /// Staging through pinned host memory.
    Staged(Box<StagedSender>),
}

impl GpuSender {
    /// Opens a sender on `sock` from `region` (device memory), with the refusals of the
    /// paths better than the one taken.
    pub fn open(
        sock: Socket,
        mut region: Region,
        cfg: &TxConfig,
    ) -> Result<(GpuSender, Vec<Refusal>)> {
        let dev = super::staging::device_of(&region, "sending from GPU memory")?;
        let mut refused = Vec::new();
        if matches!(cfg.mode, TxMode::Devmem | TxMode::Auto) {
            let attempt = region.dmabuf().and_then(|fd| {
                let mut c = cfg.clone();
                c.mode = TxMode::Devmem;
                c.dmabuf = Some(fd);
                Sender::new(sock.try_clone()?, region, &c)
            });
            match attempt {
                Ok(tx) => return Ok((GpuSender::Devmem(Box::new(tx)), refused)),
                // Asked for by name: its refusal is the answer.
                Err(e) if cfg.mode == TxMode::Devmem => return Err(e),
                Err(e) => refused.push(Refusal {
                    path: GpuPath::Devmem,
                    reason: e.to_string(),
                }),
            }
        } else {
            refused.push(Refusal {
                path: GpuPath::Devmem,
                reason: format!(
                    "not tried (--tx {}; --tx auto or devmem tries it)",
                    cfg.mode
                ),
            });
        }
        let mut c = cfg.clone();
        if matches!(c.mode, TxMode::Auto | TxMode::Devmem) {
            c.mode = TxMode::UringZc;
        }
        let tx = StagedSender::from_device(sock, dev, &c)?;
        Ok((GpuSender::Staged(Box::new(tx)), refused))
    }

    /// The path in use.
    pub fn path(&self) -> GpuPath {
        match self {
            GpuSender::Devmem(_) => GpuPath::Devmem,
            GpuSender::Staged(_) => GpuPath::Staging,
        }
    }

    /// Sends the stream's next `len` bytes (`len` at most the buffer size) from GPU memory.
    /// With `fill`, the bytes are first written there as `fill`'s pattern at `stream_off` (a
    /// synchronous copy to the GPU: verification mode only); without, whatever the GPU memory
    /// holds is sent.
    pub fn send_chunk(
        &mut self,
        stream_off: u64,
        len: usize,
        fill: Option<&Pattern>,
        scratch: &mut Vec<u8>,
    ) -> Result<()> {
        if let Some(p) = fill {
            scratch.resize(len, 0);
            p.fill(stream_off, scratch);
        }
        match self {
            GpuSender::Devmem(tx) => {
                let mut buf = tx.buffer()?;
                if len > buf.capacity() {
                    return Err(Error::invalid_input("send_chunk: more than one buffer"));
                }
                if fill.is_some() {
                    buf.write(scratch)?;
                }
                tx.send(buf, len)
            }
            GpuSender::Staged(st) => {
                let Some(dev) = st.source().cloned() else {
                    return Err(Error::invalid_input("staged sender without GPU memory"));
                };
                // Chunks go round the GPU buffer; `send` returns only once every copy out of it
                // finished, so the next write cannot race a copy.
                let slots = (dev.len() / len.max(1)).max(1) as u64;
                let off = (stream_off / len.max(1) as u64 % slots) * len as u64;
                if fill.is_some() {
                    dev.write(off, scratch).map_err(|e| {
                        super::gpu_error(format!("copying to cuda:{}", dev.context().ordinal()), e)
                    })?;
                }
                st.send(off, len as u64)
            }
        }
    }

    /// Waits for every send to complete; the statistics from the kernel's completions.
    pub fn finish(self) -> Result<GpuSendStats> {
        match self {
            GpuSender::Devmem(tx) => Ok(GpuSendStats {
                path: GpuPath::Devmem,
                tx: (*tx).finish()?,
                staged: StagedStats::default(),
            }),
            GpuSender::Staged(st) => {
                let (tx, staged) = st.finish()?;
                Ok(GpuSendStats {
                    path: GpuPath::Staging,
                    tx,
                    staged,
                })
            }
        }
    }
}

/// A receiver into GPU memory and the path it takes (see [`prepare_receive`]).
pub type DirectReceive = (Receiver, GpuPath);

/// Prepares a receive into GPU memory by the best path, before any connection arrives (so that a
/// refused mechanism fails first), and says which path that is:
/// - devmem TCP with the region's dma-buf bound to the queue (`cfg.mode` `devmem` insists on
///   it; `auto` tries it when `cfg.iface` names the steered interface, see `zcnet nic setup`);
/// - else io_uring zero-copy receive (zcrx) with the region's dma-buf as the area
///   (`IORING_ZCRX_AREA_DMABUF`, Linux 6.16+; `cfg.mode` `zcrx` insists on it; `auto` tries it
///   when `cfg.iface` is set). Its buffers are device ranges ([`crate::rx::RxBuf::device`]).
///
/// `None` means staging: hand the stream to [`StagedReceiver::new`] with the region. The
/// refusals say why the better paths were not taken.
pub fn prepare_receive(
    region: &mut Region,
    cfg: &RxConfig,
) -> Result<(Option<DirectReceive>, Vec<Refusal>)> {
    super::staging::device_of(region, "receiving into GPU memory")?;
    let mut refused = Vec::new();
    let auto_with_iface = cfg.mode == RxMode::Auto && cfg.iface.is_some();
    let not_tried = |by: RxMode| -> String {
        if cfg.mode == RxMode::Auto {
            "needs --iface (the interface whose queue is steered, see zcnet nic setup)".into()
        } else {
            format!(
                "not tried (--rx {}; --rx auto with --iface, or --rx {by}, tries it)",
                cfg.mode
            )
        }
    };
    for (path, mode) in [
        (GpuPath::Devmem, RxMode::Devmem),
        (GpuPath::ZcrxDmabuf, RxMode::Zcrx),
    ] {
        if cfg.mode != mode && !auto_with_iface {
            refused.push(Refusal {
                path,
                reason: not_tried(mode),
            });
            continue;
        }
        let r = region.dmabuf().and_then(|fd| {
            let mut c = cfg.clone();
            c.mode = mode;
            c.dmabuf = Some(fd);
            Receiver::new(&c)
        });
        match r {
            Ok(rx) => return Ok((Some((rx, path)), refused)),
            // Asked for by name: its refusal is the answer.
            Err(e) if cfg.mode == mode => return Err(e),
            Err(e) => refused.push(Refusal {
                path,
                reason: e.to_string(),
            }),
        }
    }
    Ok((None, refused))
}

/// What a GPU send did.
#[derive(Debug, Clone)]
pub struct GpuSendStats {
    /// The path.
    pub path: GpuPath,
    /// The host leg's (or devmem's) statistics, from the kernel's completions.
    pub tx: TxStats,
    /// Staging's counters (default for devmem).
    pub staged: StagedStats,
}
