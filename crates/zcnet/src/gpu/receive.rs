//! Whole-stream receives into GPU memory by the best path ([`receive`]: devmem, zcrx-dmabuf or
//! staging, as [`prepare_receive`] decides).
//!
//! The GPU memory is a ring: stream byte `p` lands at `p % region.len()`. With a pattern, every
//! byte is read back from the GPU and checked (verification only: it costs a device-to-host copy
//! per chunk).

use super::path::{prepare_receive, GpuPath, Refusal};
use super::staging::{StagedReceiver, StagingOptions};
use crate::error::{Error, Result};
use crate::region::Region;
use crate::rx::RxConfig;
use std::net::TcpStream;
use std::time::{Duration, Instant};
use zcnet_core::Pattern;

/// What a receive into GPU memory did.
#[derive(Debug, Clone, Default)]
pub struct GpuRecvReport {
    /// The path that ran: `devmem`, `zcrx-dmabuf`, `staging` or `naive`.
    pub path: &'static str,
    /// Why the better paths were not taken.
    pub refused: Vec<Refusal>,
    /// Stream bytes that reached GPU memory.
    pub bytes: u64,
    /// Seconds from the first poll to the end of the stream.
    pub seconds: f64,
    /// CPU seconds of the receiving thread (user + system) over those seconds.
    pub cpu_seconds: f64,
    /// Host-to-device copies completed (staging and naive; none on the direct paths).
    pub copies: u64,
    /// Times staging waited for GPU ring space.
    pub ring_full: u64,
    /// Every byte was checked against the pattern.
    pub verified: bool,
}

impl GpuRecvReport {
    /// Megabytes (10⁶ B) per second.
    pub fn mb_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / self.seconds / 1e6
        } else {
            0.0
        }
    }
}

/// Reads `stream` to its end into `region` (GPU memory) by the best path `cfg` allows (see
/// [`prepare_receive`]); with `verify`, checks every byte by copying it back: on a direct path
/// (devmem, zcrx-dmabuf) each device range the kernel hands out is read from the region at its
/// offset while it is still held, which costs a device-to-host copy per buffer.
pub fn receive(
    stream: TcpStream,
    region: &mut Region,
    cfg: &RxConfig,
    opts: &StagingOptions,
    verify: Option<Pattern>,
) -> Result<GpuRecvReport> {
    PreparedReceive::new(region, cfg)?.run(stream, region, opts, verify)
}

/// A receive into GPU memory whose path is chosen (and whose kernel resources, for a direct
/// path, are set up) before any connection arrives, so that a refusal is reported first.
#[derive(Debug)]
pub struct PreparedReceive {
    direct: Option<super::path::DirectReceive>,
    refused: Vec<Refusal>,
}

impl PreparedReceive {
    /// Chooses the path for `region` as [`prepare_receive`] does.
    pub fn new(region: &mut Region, cfg: &RxConfig) -> Result<PreparedReceive> {
        let (direct, refused) = prepare_receive(region, cfg)?;
        Ok(PreparedReceive { direct, refused })
    }

    /// The path it will take.
    pub fn path(&self) -> GpuPath {
        self.direct.as_ref().map_or(GpuPath::Staging, |d| d.1)
    }

    /// Why the better paths were refused.
    pub fn refused(&self) -> &[Refusal] {
        &self.refused
    }

    /// Reads `stream` to its end into `region` (the region it was prepared for).
    pub fn run(
        self,
        stream: TcpStream,
        region: &Region,
        opts: &StagingOptions,
        verify: Option<Pattern>,
    ) -> Result<GpuRecvReport> {
        let (t0, cpu0) = (Instant::now(), zcnet_sys::os::thread_cpu_seconds());
        let mut rep = match self.direct {
            Some((mut rx, path)) => {
                // The dma-buf bound is the region's own export (offset 0 = the region's first
                // byte), so a device range reads back at its offset; the host bytes a direct
                // path copied (devmem's linear parts) are checked as they are.
                let read_back = |d: &crate::rx::DeviceSlice, out: &mut [u8]| {
                    let off = usize::try_from(d.offset).map_err(|_| {
                        Error::invalid_input(format!("device offset {} out of range", d.offset))
                    })?;
                    region.read_at(off, out)
                };
                let r = crate::rx::receive_stream_reading_device(
                    &mut rx,
                    stream,
                    verify,
                    None,
                    Some(&read_back),
                )?;
                GpuRecvReport {
                    path: path.name(),
                    bytes: r.recv.bytes,
                    ..GpuRecvReport::default()
                }
            }
            None => {
                let mut rx = StagedReceiver::new(stream, region, opts)?;
                let mut back = Vec::new();
                drain_staged(&mut rx, |at, off, len| match &verify {
                    Some(p) => {
                        back.resize(len as usize, 0);
                        region.read_at(off as usize, &mut back)?;
                        Ok(p.verify(at, &back)?)
                    }
                    None => Ok(()),
                })?;
                let st = rx.stats();
                GpuRecvReport {
                    path: GpuPath::Staging.name(),
                    bytes: st.bytes,
                    copies: st.pipeline.copies_completed,
                    ring_full: st.pipeline.ring_full,
                    ..GpuRecvReport::default()
                }
            }
        };
        rep.refused = self.refused;
        rep.seconds = t0.elapsed().as_secs_f64();
        rep.cpu_seconds = zcnet_sys::os::thread_cpu_seconds() - cpu0;
        rep.verified = verify.is_some();
        Ok(rep)
    }
}

/// Runs a staged receive to the end of its stream, handing each delivered range to `on_data`
/// as (stream position, ring offset, length) before releasing it. Returns the bytes delivered.
pub fn drain_staged(
    rx: &mut StagedReceiver,
    mut on_data: impl FnMut(u64, u64, u64) -> Result<()>,
) -> Result<u64> {
    let mut at = 0u64;
    while !rx.finished() || rx.readable()[0].1 > 0 {
        rx.cancel().check()?;
        rx.poll(Duration::from_millis(100))?;
        for (off, len) in rx.readable() {
            if len == 0 {
                continue;
            }
            on_data(at, off, len)?;
            at += len;
            rx.release(len)?;
        }
    }
    Ok(at)
}
