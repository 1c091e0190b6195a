//! `zcnet bench rx --mem cuda[:N]`: one TCP stream received three ways on each path, in one
//! run, so that the GPU targets' ratios (GPU ≥ 0.9× host, ≥ 2× naive) come from the same
//! machine at the same time:
//!
//! - `host`: io_uring multishot receive into host memory (the baseline: no GPU at all);
//! - `cuda[:N]`: into GPU memory by the best path ([`zcnet::gpu::receive::receive`]: devmem,
//!   zcrx-dmabuf, or staging through pinned host buffers with asynchronous copies);
//! - `naive`: `recv()` into pageable memory, then a synchronous copy to the GPU
//!   ([`receive_naive`]), the loop people write first.
//!
//! The sender is the same for every case: plain `send()` of `size`-byte chunks from host memory
//! for the case's duration. The receiver thread's own CPU time gives CPU seconds per GB (the
//! driver's helper threads, if any, are not in it: the note says so).

use crate::bench::runnable_paths;
use crate::bench::PathKind;
use crate::lab::Lab;
use crate::reason::Reason;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use zcnet::gpu::receive::{receive, GpuRecvReport};
use zcnet::gpu::staging::StagingOptions;
use zcnet::net;
use zcnet::region::{MemoryKind, Region};
use zcnet::rx::{Receiver, RxConfig, RxMode};
use zcnet::text::Text;
use zcnet::{Cancel, Error, Result};
use zcnet_core::Pattern;

/// What to run.
#[derive(Debug, Clone)]
pub struct GpuRxBenchConfig {
    /// Paths (`veth` needs root; `sink` has no TCP peer and is refused).
    pub paths: Vec<PathKind>,
    /// The GPU memory (`cuda[:N]`).
    pub memory: MemoryKind,
    /// Bytes of the GPU ring the stream lands in.
    pub ring: usize,
    /// Bytes per `send()` of the sender.
    pub size: usize,
    /// Seconds per case.
    pub duration: Duration,
    /// Check every byte (GPU data by copying it back: slower, for validation only).
    pub verify: bool,
}

impl Default for GpuRxBenchConfig {
    fn default() -> Self {
        GpuRxBenchConfig {
            paths: vec![PathKind::Veth, PathKind::Loopback],
            memory: MemoryKind::Cuda(0),
            ring: 64 << 20,
            size: 64 << 10,
            duration: Duration::from_secs(3),
            verify: false,
        }
    }
}

/// One case.
#[derive(Debug, Clone, Default)]
pub struct GpuRxRow {
    /// Path name.
    pub path: &'static str,
    /// The case: `host`, the GPU memory's name (e.g. `cuda:0`), or `naive`.
    pub case: String,
    /// The mechanism that ran (`uring`, `devmem`, `zcrx-dmabuf`, `staging`, `naive`).
    pub via: &'static str,
    /// What the receiver saw.
    pub report: GpuRecvReport,
    /// Bytes the sender wrote.
    pub sent: u64,
    /// Why the case failed, if it did.
    pub error: Option<Reason>,
}

impl GpuRxRow {
    /// Receive throughput, MB/s.
    pub fn mb_per_s(&self) -> f64 {
        self.report.mb_per_s()
    }

    /// Receiver CPU seconds per GB (10⁹ B).
    pub fn cpu_seconds_per_gb(&self) -> Option<f64> {
        (self.report.bytes > 0).then(|| self.report.cpu_seconds / (self.report.bytes as f64 / 1e9))
    }
}

/// A whole run.
#[derive(Debug, Clone, Default)]
pub struct GpuRxReport {
    /// The cases.
    pub rows: Vec<GpuRxRow>,
    /// Things to know.
    pub notes: Vec<Text>,
}

impl GpuRxReport {
    /// `row`'s throughput over that of case `base` on the same path.
    pub fn ratio(&self, row: &GpuRxRow, base: &str) -> Option<f64> {
        let b = self
            .rows
            .iter()
            .find(|r| r.path == row.path && r.case == base && r.error.is_none())?;
        (row.error.is_none() && b.mb_per_s() > 0.0).then(|| row.mb_per_s() / b.mb_per_s())
    }
}

/// Progress of a run.
#[derive(Debug)]
pub enum GpuRxProgress<'a> {
    /// Case `index` of `total` starts.
    Start {
        /// 1-based.
        index: usize,
        /// Cases in all.
        total: usize,
        /// Path.
        path: &'static str,
        /// Case.
        case: &'a str,
    },
    /// A case finished.
    Done(&'a GpuRxRow),
}

/// How one case receives a whole stream (runs on the receiving thread, inside the namespace).
pub(crate) type RecvFn<'a> = dyn Fn(TcpStream) -> Result<GpuRecvReport> + Sync + 'a;

/// One case: its name and its receive function.
pub(crate) struct Case<'a> {
    pub(crate) name: String,
    pub(crate) recv: Box<RecvFn<'a>>,
}

/// Runs `host`, the GPU memory and `naive` on every path. Fails in one line before any lab is
/// made when there is no GPU; the lab is gone when this returns.
pub fn run(
    cfg: &GpuRxBenchConfig,
    progress: &mut dyn FnMut(GpuRxProgress<'_>),
) -> Result<GpuRxReport> {
    let MemoryKind::Cuda(ordinal) = cfg.memory else {
        return Err(Error::invalid_input(format!(
            "bench rx --mem {}: the GPU receive bench needs GPU memory: give --mem cuda[:N] (host memory runs the echo bench)",
            cfg.memory.name()
        )));
    };
    // One allocation up front: no driver, no device or no memory fails here, in one line.
    drop(Region::cuda(ordinal, cfg.ring)?);
    let verify = cfg.verify.then(|| Pattern::new(7));
    let memory = cfg.memory;
    let ring = cfg.ring;
    let cases = vec![
        Case {
            name: "host".into(),
            recv: Box::new(move |s| receive_host(s, verify)),
        },
        Case {
            name: memory.name(),
            recv: Box::new(move |s| {
                let mut region = Region::new(memory, ring)?;
                receive(
                    s,
                    &mut region,
                    &RxConfig {
                        cancel: crate::interrupt::token(),
                        ..RxConfig::new(RxMode::Auto)
                    },
                    &StagingOptions {
                        cancel: crate::interrupt::token(),
                        ..StagingOptions::default()
                    },
                    verify,
                )
            }),
        },
        Case {
            name: "naive".into(),
            recv: Box::new(move |s| {
                let mut region = Region::new(memory, ring)?;
                receive_naive(s, &mut region, verify, &crate::interrupt::token())
            }),
        },
    ];
    let mut report = run_cases(cfg, &cases, progress)?;
    report.notes.push(
        format!(
            "{}: staged copies are asynchronous on a CUDA stream; CPU s/GB is the receiving thread's own time (the CUDA driver's threads are not in it)",
            memory.name()
        )
        .into(),
    );
    Ok(report)
}

/// The host baseline: io_uring multishot receive into host buffers.
fn receive_host(s: TcpStream, verify: Option<Pattern>) -> Result<GpuRecvReport> {
    let (t0, cpu0) = (Instant::now(), zcnet::os::thread_cpu_seconds());
    let mut rx = Receiver::new(&RxConfig {
        cancel: crate::interrupt::token(),
        ..RxConfig::new(RxMode::Uring)
    })?;
    let r = zcnet::rx::receive_stream(&mut rx, s, verify, None)?;
    Ok(GpuRecvReport {
        path: RxMode::Uring.name(),
        bytes: r.recv.bytes,
        seconds: t0.elapsed().as_secs_f64(),
        cpu_seconds: zcnet::os::thread_cpu_seconds() - cpu0,
        verified: verify.is_some(),
        ..GpuRecvReport::default()
    })
}

/// Runs `cases` on every path of `cfg` (the harness; the cases decide where bytes land).
pub(crate) fn run_cases(
    cfg: &GpuRxBenchConfig,
    cases: &[Case<'_>],
    progress: &mut dyn FnMut(GpuRxProgress<'_>),
) -> Result<GpuRxReport> {
    if cfg.size == 0 || cfg.duration.is_zero() || cfg.ring == 0 {
        return Err(Error::invalid_input(
            "bench rx --mem cuda: size, ring and duration must be positive",
        ));
    }
    if let Some(p) = cfg.paths.iter().find(|p| p.is_udp_drop()) {
        return Err(Error::invalid_input(format!(
            "bench rx: path '{}' has no TCP receiver (UDP into a drop device): use veth or loopback",
            p.name()
        )));
    }
    let mut report = GpuRxReport::default();
    let paths = runnable_paths(
        &cfg.paths,
        zcnet::os::is_root(),
        crate::rxbench::RX_WITHOUT_ROOT,
        &mut report.notes,
    )?;
    let mut lab = None;
    let total = paths.len() * cases.len();
    let mut index = 0;
    for &path in &paths {
        let place = match path {
            PathKind::Veth => {
                let l = match lab.as_mut() {
                    Some(l) => l,
                    None => lab.insert(Lab::new()?),
                };
                let v = l.veth()?;
                (SocketAddr::new(v.b_addr, 0), Some(v.a), Some(v.b))
            }
            _ => (
                SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
                None,
                None,
            ),
        };
        for case in cases {
            if crate::interrupt::interrupted() {
                return Err(Error::Interrupted);
            }
            index += 1;
            progress(GpuRxProgress::Start {
                index,
                total,
                path: path.name(),
                case: &case.name,
            });
            let mut row = GpuRxRow {
                path: path.name(),
                case: case.name.clone(),
                ..GpuRxRow::default()
            };
            match stream_case(&place, cfg, &*case.recv) {
                Ok((rep, sent)) => {
                    row.via = rep.path;
                    row.sent = sent;
                    if rep.bytes != sent {
                        row.error =
                            Some(format!("received {} B of the {sent} B sent", rep.bytes).into());
                    }
                    row.report = rep;
                }
                Err(Error::Interrupted) => return Err(Error::Interrupted),
                Err(e) => row.error = Some(e.into()),
            }
            progress(GpuRxProgress::Done(&row));
            report.rows.push(row);
        }
    }
    drop(lab.take());
    Ok(report)
}

type Place = (SocketAddr, Option<String>, Option<String>);

/// One stream: the receiver thread (in the receiving namespace) runs `recv`, the sender thread
/// writes for the duration. Returns what the receiver saw and what the sender wrote.
fn stream_case(
    (bind, tx_ns, rx_ns): &Place,
    cfg: &GpuRxBenchConfig,
    recv: &RecvFn<'_>,
) -> Result<(GpuRecvReport, u64)> {
    let (sent, got) =
        crate::bench::tcp_stream(tx_ns.as_deref(), rx_ns.as_deref(), *bind, recv, |mut s| {
            send_for(&mut s, cfg)
        })?;
    match (got, sent) {
        (Ok(g), Ok(s)) => Ok((g, s)),
        // The receiver's error is the cause when both failed (the sender then sees a reset).
        (Err(e), _) | (Ok(_), Err(e)) => Err(e),
    }
}

/// Writes `size`-byte chunks (pattern bytes when verifying) for the duration, then closes.
fn send_for(s: &mut TcpStream, cfg: &GpuRxBenchConfig) -> Result<u64> {
    let pattern = Pattern::new(7);
    let mut buf = vec![0u8; cfg.size];
    if !cfg.verify {
        pattern.fill(0, &mut buf);
    }
    let end = Instant::now() + cfg.duration;
    let mut off = 0u64;
    while Instant::now() < end && !crate::interrupt::interrupted() {
        if cfg.verify {
            pattern.fill(off, &mut buf);
        }
        s.write_all(&buf)
            .map_err(|e| Error::io(format!("send after {off} B"), e))?;
        off += buf.len() as u64;
    }
    s.shutdown(std::net::Shutdown::Write)
        .map_err(|e| Error::io("shutdown", e))?;
    Ok(off)
}

/// The loop people write first: `recv()` into pageable memory, then a synchronous copy into
/// the GPU ring (in two pieces where it wraps). For comparison with [`receive`]: a bench
/// baseline, not a way to receive. [`Error::Interrupted`] once `cancel` is cancelled.
pub fn receive_naive(
    stream: TcpStream,
    region: &mut Region,
    verify: Option<Pattern>,
    cancel: &Cancel,
) -> Result<GpuRecvReport> {
    let ring = region.len() as u64;
    if ring == 0 {
        return Err(Error::invalid_input(
            "naive receive: the GPU region is empty: give it a length",
        ));
    }
    let mut host = vec![0u8; 256 << 10];
    let mut back = Vec::new();
    let (t0, cpu0) = (Instant::now(), zcnet::os::thread_cpu_seconds());
    let mut rep = GpuRecvReport {
        path: "naive",
        verified: verify.is_some(),
        ..GpuRecvReport::default()
    };
    loop {
        if cancel.is_cancelled() {
            return Err(Error::Interrupted);
        }
        // Interruptible: the CUDA driver's threads may be the ones a signal lands on.
        let n = match net::recv_interruptible(&stream, &mut host, cancel) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => return Err(Error::io("recv", e)),
        };
        let mut done = 0;
        while done < n {
            let off = (rep.bytes + done as u64) % ring;
            let k = ((ring - off) as usize).min(n - done);
            region.write_at(off as usize, &host[done..done + k])?;
            rep.copies += 1;
            if let Some(p) = &verify {
                back.resize(k, 0);
                region.read_at(off as usize, &mut back)?;
                p.verify(rep.bytes + done as u64, &back)?;
            }
            done += k;
        }
        rep.bytes += n as u64;
    }
    rep.seconds = t0.elapsed().as_secs_f64();
    rep.cpu_seconds = zcnet::os::thread_cpu_seconds() - cpu0;
    Ok(rep)
}

#[cfg(test)]
mod tests;
