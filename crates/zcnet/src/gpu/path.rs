//! Choosing how data moves between the network and GPU memory, best first, and saying why the
//! better paths were refused: devmem TCP (the NIC reads or writes the GPU's dma-buf), zcrx with
//! a dma-buf area (receive), and staging through pinned host memory (always possible).

#[cfg(doc)]
use super::staging::StagedReceiver;
use super::staging::{StagedSender, StagedStats};
use crate::error::{Error, Result};
use crate::region::{Region, TxBuf};
use crate::rx::{Receiver, RxConfig, RxMode};
use crate::tx::{Sender, Socket, TxConfig, TxMode, TxStats};
use std::collections::VecDeque;
use std::sync::Arc;
use zcnet_core::Pattern;
use zcnet_sys::mem::Mapping;

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

/// A better path that was not taken, and why (`tried`: the path), as `auto`'s sends and
/// receives report theirs.
pub type Refusal = crate::fallback::Fallback<GpuPath>;

/// Sends from GPU memory by the best path: devmem TX when asked for ([`TxMode::Devmem`]) or when
/// `auto` finds it works (TCP only), else staging with `cfg.mode` (`auto` for the host leg under
/// `auto`) on the host leg. On a UDP socket each buffer sent is one datagram.
///
/// Like a [`Sender`], it lends buffers of the region ([`Self::buffer`], device memory written
/// with [`TxBuf::write`]) that [`Self::send`] takes back: `zcnet send --mem cuda`, `bench tx
/// --mem cuda` and the C ABI's senders on a CUDA region all send through it.
#[derive(Debug)]
pub struct GpuSender {
    how: How,
}

#[derive(Debug)]
enum How {
    /// devmem TX: a [`Sender`] over the device region's buffers.
    Devmem(Box<Sender>),
    /// Staging through pinned host memory, from the device region's buffers.
    Staged(Box<Staged>),
}

/// A staged sender and the device region cut into buffers.
#[derive(Debug)]
struct Staged {
    tx: StagedSender,
    /// The device mapping the buffers are cut from (offsets are from its start).
    map: Arc<Mapping>,
    /// Buffers not lent, in the order they are handed out again.
    free: VecDeque<TxBuf>,
    total: usize,
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
        if !sock.is_stream() {
            if cfg.mode == TxMode::Devmem {
                return Err(Error::invalid_input(crate::text!(
                    "devmem TX sends TCP streams only: this socket sends datagrams (UDP); use ",
                    TxMode::Auto.term(),
                    ", which stages them through host memory",
                )));
            }
            refused.push(Refusal {
                tried: GpuPath::Devmem,
                reason: "not tried (a UDP socket: devmem TX sends TCP streams only)".into(),
            });
        } else if matches!(cfg.mode, TxMode::Devmem | TxMode::Auto) {
            let attempt = region.dmabuf().and_then(|fd| {
                let mut c = cfg.clone();
                c.mode = TxMode::Devmem;
                c.dmabuf = Some(fd);
                Sender::new(sock.try_clone()?, region, &c)
            });
            match attempt {
                Ok(tx) => {
                    let how = How::Devmem(Box::new(tx));
                    return Ok((GpuSender { how }, refused));
                }
                // Asked for by name: its refusal is the answer.
                Err(e) if cfg.mode == TxMode::Devmem => return Err(e),
                Err(e) => refused.push(Refusal {
                    tried: GpuPath::Devmem,
                    reason: e.text(),
                }),
            }
        } else {
            refused.push(Refusal {
                tried: GpuPath::Devmem,
                reason: crate::text!(
                    "not tried (",
                    cfg.mode.term(),
                    "; ",
                    TxMode::Auto.term(),
                    " or ",
                    TxMode::Devmem.term(),
                    " tries it)",
                ),
            });
        }
        let mut c = cfg.clone();
        // The host leg follows the kernel's verdicts as any `auto` sender does: SEND_ZC from
        // the pinned host buffers while the kernel sends them without copying, plain sends
        // once it says it copies. (Fixed to uring-zc before: on loopback, which copies, an H100's
        // staged send ran 0.79x what the same staged send did with plain sends.)
        if c.mode == TxMode::Devmem {
            c.mode = TxMode::Auto;
        }
        // The device memory is cut into buffers as a Sender cuts a region: each is a range the
        // caller fills (a copy to the GPU) and the pipeline copies out of.
        let len = dev.len();
        let stride = crate::tx::buffer_stride(c.buf_size);
        if c.buf_size == 0 || c.buf_size > len {
            return Err(Error::RegionTooSmall {
                need: c.buf_size.max(1),
                have: len,
            });
        }
        let count = c.buffers().min((len - c.buf_size) / stride + 1).max(1);
        let (map, slots) = Arc::clone(&dev)
            .into_mapping()
            .into_slots_strided(c.buf_size, stride, count)
            .map_err(|e| Error::io("cutting the GPU memory into buffers", e))?;
        let tx = StagedSender::from_device(sock, dev, &c)?;
        let staged = Staged {
            tx,
            map,
            free: slots.into_iter().map(|slot| TxBuf { slot }).collect(),
            total: count,
        };
        let how = How::Staged(Box::new(staged));
        Ok((GpuSender { how }, refused))
    }

    /// The path in use.
    pub fn path(&self) -> GpuPath {
        match &self.how {
            How::Devmem(_) => GpuPath::Devmem,
            How::Staged(_) => GpuPath::Staging,
        }
    }

    /// The mechanism that sends: [`TxMode::Devmem`], or the host leg's under staging.
    pub fn mode(&self) -> TxMode {
        match &self.how {
            How::Devmem(tx) => tx.mode(),
            How::Staged(st) => st.tx.mode(),
        }
    }

    /// Number of buffers of the device region.
    pub fn buffers(&self) -> usize {
        match &self.how {
            How::Devmem(tx) => tx.buffers(),
            How::Staged(st) => st.total,
        }
    }

    /// A buffer of the device region to fill ([`TxBuf::write`]: a copy to the GPU) and
    /// [`Self::send`]. devmem waits for the NIC to release one; staging has every buffer not
    /// lent free at once (its sends return after the copies out of the buffer completed), so
    /// there it is an error when all are lent.
    pub fn buffer(&mut self) -> Result<TxBuf> {
        match &mut self.how {
            How::Devmem(tx) => tx.buffer(),
            How::Staged(st) => st.free.pop_front().ok_or_else(|| {
                Error::invalid_input(
                    "every GPU buffer is lent: send one first (a send of 0 bytes gives it back)",
                )
            }),
        }
    }

    /// Sends `buf[..len]` from GPU memory. devmem: the NIC reads the buffer, which comes back
    /// from [`Self::buffer`] once it is done. Staging: returns once every byte was copied out of
    /// the buffer into a host buffer and handed to the kernel, and the buffer is free again.
    pub fn send(&mut self, buf: TxBuf, len: usize) -> Result<()> {
        match &mut self.how {
            How::Devmem(tx) => tx.send(buf, len),
            How::Staged(st) => {
                if !Arc::ptr_eq(buf.slot.mapping(), &st.map) {
                    return Err(Error::invalid_input(
                        "GpuSender::send: the buffer is not one of this sender's",
                    ));
                }
                if len > buf.capacity() {
                    st.free.push_back(buf);
                    return Err(Error::io(
                        "send",
                        std::io::Error::from_raw_os_error(libc::EINVAL),
                    ));
                }
                if len > 0 {
                    let off = (buf.slot.addr() - st.map.addr()) as u64;
                    // On failure the buffer is not given back: a copy out of it may still run.
                    st.tx.send(off, len as u64)?;
                }
                st.free.push_back(buf);
                Ok(())
            }
        }
    }

    /// Sends the stream's next `len` bytes (`len` at most the buffer size) from GPU memory, from
    /// the next buffer. With `fill`, the bytes are first written there as `fill`'s pattern at
    /// `stream_off` (a synchronous copy to the GPU: verification mode only); without, whatever
    /// the GPU memory holds is sent.
    pub fn send_chunk(
        &mut self,
        stream_off: u64,
        len: usize,
        fill: Option<&Pattern>,
        scratch: &mut Vec<u8>,
    ) -> Result<()> {
        let mut buf = self.buffer()?;
        if len > buf.capacity() {
            // Given back unsent (a send of 0 bytes).
            self.send(buf, 0)?;
            return Err(Error::invalid_input("send_chunk: more than one buffer"));
        }
        if let Some(p) = fill {
            scratch.resize(len, 0);
            p.fill(stream_off, scratch);
            buf.write(scratch)?;
        }
        self.send(buf, len)
    }

    /// Waits until every send so far completed.
    pub fn flush(&mut self) -> Result<()> {
        match &mut self.how {
            How::Devmem(tx) => tx.flush(),
            How::Staged(st) => st.tx.flush(),
        }
    }

    /// The statistics of the sends (devmem's, or staging's host leg) so far.
    pub fn stats(&self) -> TxStats {
        match &self.how {
            How::Devmem(tx) => tx.stats(),
            How::Staged(st) => st.tx.stats(),
        }
    }

    /// Waits for every send to complete; the statistics from the kernel's completions.
    pub fn finish(self) -> Result<GpuSendStats> {
        match self.how {
            How::Devmem(tx) => Ok(GpuSendStats {
                path: GpuPath::Devmem,
                tx: (*tx).finish()?,
                staged: StagedStats::default(),
            }),
            How::Staged(st) => {
                let (tx, staged) = st.tx.finish()?;
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
    let not_tried = |by: RxMode| -> crate::text::Text {
        use crate::text::{Call, Field};
        if cfg.mode == RxMode::Auto {
            crate::text!(
                "needs ",
                Field::RxIface,
                " (the interface whose queue is steered, see ",
                Call::NicSetup {
                    iface: None,
                    queue: None
                },
                ")",
            )
        } else {
            crate::text!(
                "not tried (",
                cfg.mode.term(),
                "; ",
                RxMode::Auto.term(),
                " with ",
                Field::RxIface,
                ", or ",
                by.term(),
                ", tries it)",
            )
        }
    };
    for (path, mode) in [
        (GpuPath::Devmem, RxMode::Devmem),
        (GpuPath::ZcrxDmabuf, RxMode::Zcrx),
    ] {
        if cfg.mode != mode && !auto_with_iface {
            refused.push(Refusal {
                tried: path,
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
                tried: path,
                reason: e.text(),
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
