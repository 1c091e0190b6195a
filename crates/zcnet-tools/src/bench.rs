//! `zcnet bench tx`: every send backend on every lab path, side by side, in one run.
//!
//! Paths: `sink` (UDP with GSO into an ifb that drops everything: the kernel can really avoid the
//! copy), `veth` (TCP between two namespaces) and `loopback` (TCP on 127.0.0.1): on those two the
//! kernel copies whatever the application asks for, and the accounting must say so. `dummy`
//! (UDP into a dummy device with MTU 65535, the device of the original SEND_ZC measurements) is
//! the sink's twin where the kernel has the dummy driver (CONFIG_DUMMY): in the default set only
//! there ([`default_paths`]), refused in one line when asked for elsewhere.

use crate::lab::{self, DummyPath, Lab, SinkPath, VethPath};
use crate::sendloop::{Payload, SendLoop, Until};
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};
use zcnet::gpu::GpuSender;
use zcnet::net;
use zcnet::region::{MemoryKind, Region};
use zcnet::tx::{region_len, Sender, Socket, TxConfig, TxMode, TxStats};
use zcnet::{Error, Result};

/// Largest UDP payload in one IPv4 datagram (65,535 - 20 - 8).
pub const UDP_MAX_PAYLOAD: usize = 65_507;

/// A lab path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    /// UDP + GSO into the ifb sink.
    Sink,
    /// TCP over a veth pair between namespaces.
    Veth,
    /// TCP over loopback.
    Loopback,
    /// UDP into a dummy device (MTU 65535) whose driver drops: needs CONFIG_DUMMY.
    Dummy,
}

impl PathKind {
    /// All paths, in table order.
    pub const ALL: [PathKind; 4] = [
        PathKind::Sink,
        PathKind::Veth,
        PathKind::Loopback,
        PathKind::Dummy,
    ];

    /// The `--path` name.
    pub fn name(self) -> &'static str {
        match self {
            PathKind::Sink => "sink",
            PathKind::Veth => "veth",
            PathKind::Loopback => "loopback",
            PathKind::Dummy => "dummy",
        }
    }

    /// Whether it sends UDP into a device that drops (`sink`, `dummy`): no receiver, and a
    /// datagram cannot carry 64 KiB.
    pub fn is_udp_drop(self) -> bool {
        matches!(self, PathKind::Sink | PathKind::Dummy)
    }

    /// Parses a `--path` name.
    pub fn parse(s: &str) -> Result<PathKind> {
        PathKind::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| Error::UnknownPath {
                given: s.to_string(),
            })
    }

    /// Whether it needs the namespace lab (root).
    pub fn needs_root(self) -> bool {
        self != PathKind::Loopback
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct TxBenchConfig {
    /// Paths.
    pub paths: Vec<PathKind>,
    /// Send modes.
    pub modes: Vec<TxMode>,
    /// Payload sizes (on `sink`, 65,536 is sent as 64,000 B: one UDP datagram cannot carry 64 KiB).
    pub sizes: Vec<usize>,
    /// Seconds per case.
    pub duration: Duration,
    /// Sends in flight: at least this many ([`TxConfig::inflight`]).
    pub inflight: usize,
    /// Bytes in flight: more buffers for small sizes ([`TxConfig::window`]; 0: `inflight` only).
    pub window: usize,
    /// Memory for the buffers.
    pub memory: MemoryKind,
    /// Also run the raw loops on `sink` to measure zcnet's own overhead: the raw SEND_ZC loop
    /// when `uring-zc` is in `modes`, the raw MSG_ZEROCOPY loop when `msg-zerocopy` is.
    pub baseline: bool,
    /// Runs of each case compared with a raw loop (the mode and its loop, alternated, each run
    /// `duration / repeats` long): the spread of [`TxReport::overhead`]. At least 1.
    pub repeats: usize,
}

impl TxBenchConfig {
    /// The sender's configuration for one case.
    pub fn tx_config(&self, mode: TxMode, size: usize) -> TxConfig {
        let mut t = TxConfig::new(mode);
        t.inflight = self.inflight;
        t.window = self.window;
        t.buf_size = size;
        t
    }
}

/// The paths `bench tx` runs when none are named: all of them, `dummy` only where the kernel
/// has the dummy driver (`dummy_driver`: [`lab::dummy_driver`]), so that the default run never
/// fails for want of it.
pub fn default_paths(dummy_driver: bool) -> Vec<PathKind> {
    PathKind::ALL
        .into_iter()
        .filter(|p| *p != PathKind::Dummy || dummy_driver)
        .collect()
}

impl Default for TxBenchConfig {
    fn default() -> Self {
        TxBenchConfig {
            paths: default_paths(lab::dummy_driver()),
            modes: TxMode::ALL.to_vec(),
            sizes: vec![4096, 16384, 65536],
            duration: Duration::from_secs(3),
            inflight: 8,
            window: zcnet::tx::DEFAULT_WINDOW,
            memory: MemoryKind::Anonymous,
            baseline: true,
            repeats: OVERHEAD_RUNS,
        }
    }
}

/// The `tx` name of the raw SEND_ZC loop's rows (the yardstick of `uring-zc`).
pub const RAW_BASELINE: &str = "raw-uring-zc";

/// The `tx` name of the raw MSG_ZEROCOPY loop's rows (the yardstick of `msg-zerocopy`).
pub const RAW_MSG_ZEROCOPY: &str = "raw-msg-zerocopy";

/// Runs of a mode and of its raw loop, alternated, for [`TxReport::overhead`] (default).
pub const OVERHEAD_RUNS: usize = 3;

/// The raw loops and the mode each measures: `(mode, raw row name)`.
pub const RAW_LOOPS: [(TxMode, &str); 2] = [
    (TxMode::UringZc, RAW_BASELINE),
    (TxMode::MsgZerocopy, RAW_MSG_ZEROCOPY),
];

/// One measured case.
#[derive(Debug, Clone, Default)]
pub struct TxRow {
    /// Path name.
    pub path: &'static str,
    /// Mode name (or [`RAW_BASELINE`]).
    pub tx: String,
    /// Bytes per send.
    pub size: usize,
    /// Sends in flight.
    pub inflight: usize,
    /// Bytes the kernel accepted.
    pub bytes: u64,
    /// Sends the kernel accepted.
    pub sends: u64,
    /// Wall seconds (including the final wait for notifications).
    pub seconds: f64,
    /// MB/s (10^6 B/s).
    pub mb_per_s: f64,
    /// Bytes the kernel confirmed zero-copy.
    pub zerocopy_bytes: u64,
    /// Bytes copied.
    pub copied_bytes: u64,
    /// CPU seconds of the sending thread.
    pub cpu_seconds: f64,
    /// Notifications received.
    pub notifications: u64,
    /// Bytes the receiver got (TCP paths; `None` on the sink).
    pub received_bytes: Option<u64>,
    /// Mode switches of `auto`, in words.
    pub switches: Vec<String>,
    /// MB/s of each run, when the case ran more than once ([`TxBenchConfig::repeats`]); the
    /// row's other numbers are the sums (and `mb_per_s` the rate) over all of them.
    pub samples_mb_per_s: Vec<f64>,
    /// CPU seconds other processes used during the case ([`crate::cpu::OtherCpu`]).
    pub other_cpu_seconds: Option<f64>,
    /// Why the case failed, if it did.
    pub error: Option<String>,
}

impl TxRow {
    /// Percent of confirmed bytes that were zero-copy.
    pub fn zerocopy_percent(&self) -> Option<f64> {
        let c = self.zerocopy_bytes + self.copied_bytes;
        (c > 0).then(|| 100.0 * self.zerocopy_bytes as f64 / c as f64)
    }

    /// CPU seconds per GB sent.
    pub fn cpu_seconds_per_gb(&self) -> Option<f64> {
        (self.bytes > 0).then(|| self.cpu_seconds / (self.bytes as f64 / 1e9))
    }
}

/// A whole run.
#[derive(Debug, Clone, Default)]
pub struct TxReport {
    /// Measured cases.
    pub rows: Vec<TxRow>,
    /// Things the user should know (paths skipped and why, memory fallbacks).
    pub notes: Vec<String>,
}

impl TxReport {
    /// `row`'s throughput divided by `copy`'s on the same path and size.
    pub fn ratio_to(&self, row: &TxRow, tx: &str) -> Option<f64> {
        let base = self.rows.iter().find(|r| {
            r.path == row.path && r.size == row.size && r.tx == tx && r.error.is_none()
        })?;
        (base.mb_per_s > 0.0 && row.error.is_none()).then(|| row.mb_per_s / base.mb_per_s)
    }

    /// zcnet's overhead for `row` (a mode's row): its throughput over the `raw` loop's on the
    /// same path and size, run by run (the runs alternate, so each pair saw the same machine).
    pub fn overhead(&self, row: &TxRow, raw: &str) -> Option<Overhead> {
        let base = self.rows.iter().find(|r| {
            r.path == row.path && r.size == row.size && r.tx == raw && r.error.is_none()
        })?;
        if row.error.is_some() {
            return None;
        }
        let pairs: Vec<(f64, f64)> = if row.samples_mb_per_s.is_empty() {
            vec![(row.mb_per_s, base.mb_per_s)]
        } else {
            row.samples_mb_per_s
                .iter()
                .copied()
                .zip(base.samples_mb_per_s.iter().copied())
                .collect()
        };
        Overhead::of(&pairs)
    }
}

/// zcnet's throughput over the raw loop's, over paired runs: 1 = no overhead, below 1 =
/// zcnet's own cost; above 1 is noise (zcnet makes the raw loop's syscalls and more).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Overhead {
    /// The median of the runs' ratios.
    pub median: f64,
    /// The lowest run's ratio.
    pub min: f64,
    /// The highest run's ratio.
    pub max: f64,
    /// Paired runs.
    pub runs: usize,
}

impl Overhead {
    /// The spread above which the runs are said to disagree (the machine was noisy).
    pub const NOISY_SPREAD: f64 = 0.1;

    /// From `(zcnet MB/s, raw MB/s)` per run; `None` when no pair has a positive raw rate.
    pub fn of(pairs: &[(f64, f64)]) -> Option<Overhead> {
        let mut r: Vec<f64> = pairs
            .iter()
            .filter(|(_, raw)| *raw > 0.0)
            .map(|(z, raw)| z / raw)
            .collect();
        if r.is_empty() {
            return None;
        }
        r.sort_by(f64::total_cmp);
        let n = r.len();
        let median = if n % 2 == 1 {
            r[n / 2]
        } else {
            (r[n / 2 - 1] + r[n / 2]) / 2.0
        };
        Some(Overhead {
            median,
            min: r[0],
            max: r[n - 1],
            runs: n,
        })
    }

    /// Whether the runs disagree by more than [`Overhead::NOISY_SPREAD`], or one of them says
    /// zcnet beat the loop it wraps by as much: either means noise, not zcnet.
    pub fn noisy(&self) -> bool {
        self.max - self.min > Self::NOISY_SPREAD || self.max > 1.0 + Self::NOISY_SPREAD
    }

    /// The line of the table: `sink 16384 B msg-zerocopy / raw-msg-zerocopy: 0.97 (3 paired
    /// runs: 0.95 to 0.99)`, two decimals, and what a noisy result means.
    pub fn line(&self, path: &str, size: usize, mode: &str, raw: &str) -> String {
        let mut l = format!("  {path} {size} B {mode} / {raw}: {:.2}", self.median);
        if self.runs > 1 {
            l.push_str(&format!(
                " ({} paired runs: {:.2} to {:.2})",
                self.runs, self.min, self.max
            ));
        } else {
            l.push_str(" (1 run: no spread known)");
        }
        if self.noisy() {
            l.push_str(
                "; noisy: the runs disagree or zcnet 'beat' its own raw loop, so this is the machine, not zcnet: rerun on a quiet machine or with a longer --duration",
            );
        }
        l
    }
}

/// The heading of the overhead lines: what the ratio means.
pub const OVERHEAD_HEADING: &str = "zcnet overhead (a mode's MB/s / its raw loop's MB/s on the same path and size, runs alternated; 1.00 = no overhead, below 1 = zcnet's own cost, above 1 = noise: zcnet makes the raw loop's syscalls and more):";

/// The ratio to copy below which a zero-copy row gets a `why:` line.
pub const SLOW_ZERO_COPY: f64 = 0.9;

/// `net.core.max_skb_frags`: the page fragments one TCP segment holds (17 when unreadable).
pub fn max_skb_frags() -> u32 {
    std::fs::read_to_string("/proc/sys/net/core/max_skb_frags")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(17)
}

/// Why a zero-copy row runs below [`SLOW_ZERO_COPY`] times copy (`ratio`), in words: every
/// such row gets one, so that no row looks broken unexplained. A zero-copy row is a
/// `msg-zerocopy`, `uring-zc` or raw-loop row, or an `auto` row that sent zero-copy. `None` for
/// other rows, failed rows, and rows at or above the threshold. Pure: `max_skb_frags` is
/// [`max_skb_frags`] of the machine that ran the row.
pub fn slow_zero_copy_reason(
    row: &TxRow,
    ratio: Option<f64>,
    max_skb_frags: u32,
) -> Option<String> {
    let zero_copy = matches!(
        row.tx.as_str(),
        "msg-zerocopy" | "uring-zc" | RAW_BASELINE | RAW_MSG_ZEROCOPY
    ) || row.zerocopy_bytes > 0;
    let ratio = ratio?;
    if !zero_copy || row.error.is_some() || ratio.is_nan() || ratio >= SLOW_ZERO_COPY {
        return None;
    }
    let tcp = !PathKind::parse(row.path).is_ok_and(PathKind::is_udp_drop);
    let confirmed = row.zerocopy_bytes + row.copied_bytes;
    if confirmed == 0 {
        return Some(format!(
            "no notification confirmed any byte ({} notifications for {} sends), so the kernel's accounting cannot say whether it copied; zero copy paid its pinning and notifications either way",
            row.notifications, row.sends
        ));
    }
    if row.zerocopy_bytes == 0 {
        let mut why = if tcp {
            "the kernel copied every byte (TCP over loopback or veth is copied on the receive side), so zero copy only adds pinning and notifications here".to_string()
        } else {
            "the kernel copied every byte on this path (it reported every send COPIED), so zero copy only adds pinning and notifications here".to_string()
        };
        if tcp && row.size < zcnet::tx::buffer_stride(1) {
            // Measured on loopback at 1 KiB: ~8.6 KB sent per TCP segment (ACKs included)
            // against ~18 KB copying (nstat TcpOutSegs, docs/perf.md).
            why.push_str(&format!(
                "; and sends of {} B each take a page fragment of their own, of which a segment holds at most {max_skb_frags} (net.core.max_skb_frags): smaller segments than copying makes",
                row.size
            ));
        }
        return Some(why);
    }
    let copied_pct = 100.0 * row.copied_bytes as f64 / confirmed as f64;
    if copied_pct >= 10.0 {
        return Some(format!(
            "the kernel copied {copied_pct:.0} % of the bytes anyway (notifications flagged COPIED), so much of the sending paid both the copy and zero copy's pinning and notifications"
        ));
    }
    if row.size < zcnet::tx::AUTO_MIN_ZERO_COPY {
        return Some(format!(
            "below {} KiB a notification per send costs more than the copy saves (auto copies here)",
            zcnet::tx::AUTO_MIN_ZERO_COPY >> 10
        ));
    }
    Some(format!(
        "the kernel avoided the copy ({:.0} % zero-copy), but on this path a {} B copy costs less than zero copy's fixed work per send: pinning the pages, holding them until the device lets go, and a completion to reap; the size where zero copy starts to pay is above {} B here",
        100.0 - copied_pct,
        row.size,
        row.size
    ))
}

/// Progress of a run.
#[derive(Debug)]
pub enum Progress<'a> {
    /// Case `index` of `total` starts.
    Start {
        /// 1-based.
        index: usize,
        /// Cases in all.
        total: usize,
        /// Path.
        path: &'static str,
        /// Mode.
        tx: &'a str,
        /// Size.
        size: usize,
        /// Which run of the case this is, of how many (`(1, 1)` for a case run once).
        run: (usize, usize),
    },
    /// A case finished.
    Done(&'a TxRow),
}

/// The payload size actually sent for `size` on `path`.
pub fn effective_size(path: PathKind, size: usize) -> usize {
    if path.is_udp_drop() && size == 65536 {
        64_000
    } else {
        size
    }
}

enum Env {
    Sink(SinkPath),
    Dummy(DummyPath),
    Veth(VethPath),
    Loopback,
}

/// The paths of `asked` (duplicates dropped) that a process with (`root`) or without root can
/// run: the decision every bench makes before anything is set up. Without root, the paths that
/// need the namespace lab ([`PathKind::needs_root`]) are left out with a note saying so; when
/// that leaves nothing, the answer is [`Error::NotRoot`] naming `what` could not run — an empty
/// table would pass for a run that measured nothing.
pub fn runnable_paths(
    asked: &[PathKind],
    root: bool,
    what: &'static str,
    notes: &mut Vec<String>,
) -> Result<Vec<PathKind>> {
    let mut paths: Vec<PathKind> = Vec::new();
    for &p in asked {
        if !paths.contains(&p) {
            paths.push(p);
        }
    }
    if root {
        return Ok(paths);
    }
    let dropped: Vec<&str> = paths
        .iter()
        .filter(|p| p.needs_root())
        .map(|p| p.name())
        .collect();
    paths.retain(|p| !p.needs_root());
    if paths.is_empty() {
        return Err(Error::NotRoot { what });
    }
    if !dropped.is_empty() {
        let need = if dropped.len() == 1 {
            format!(
                "{} needs network namespaces; run as root for it",
                dropped[0]
            )
        } else {
            format!(
                "{} need network namespaces; run as root for them",
                dropped.join(" and ")
            )
        };
        let run: Vec<&str> = paths.iter().map(|p| p.name()).collect();
        notes.push(format!(
            "not root: running the {} path only ({need})",
            run.join(" and ")
        ));
    }
    Ok(paths)
}

/// Runs the benchmark. Without root, only `loopback` runs (and a note says why); when nothing
/// is left to run, [`Error::NotRoot`]. The lab is torn down before this returns, whatever
/// happens.
pub fn run_tx(cfg: &TxBenchConfig, progress: &mut dyn FnMut(Progress<'_>)) -> Result<TxReport> {
    // Asked for by name on a kernel without the driver: refused before anything is made.
    if cfg.paths.contains(&PathKind::Dummy) && !lab::dummy_driver() {
        return Err(lab::no_dummy_driver(None));
    }
    let mut report = TxReport::default();
    let paths = runnable_paths(
        &cfg.paths,
        zcnet_sys::os::is_root(),
        "bench tx: nothing can run: the namespace lab (paths sink, veth and dummy)",
        &mut report.notes,
    )?;
    let mut lab = if paths.iter().any(|p| p.needs_root()) {
        Some(Lab::new()?)
    } else {
        None
    };
    let mut envs = Vec::new();
    for &p in &paths {
        let env = match (p, lab.as_mut()) {
            (PathKind::Sink, Some(l)) => Env::Sink(l.sink()?),
            (PathKind::Veth, Some(l)) => Env::Veth(l.veth()?),
            (PathKind::Dummy, Some(l)) => Env::Dummy(l.dummy()?),
            _ => Env::Loopback,
        };
        envs.push((p, env));
    }
    let raws: Vec<&str> = RAW_LOOPS
        .iter()
        .filter(|(m, _)| cfg.baseline && cfg.modes.contains(m))
        .map(|&(_, name)| name)
        .collect();
    // Per path: the cases and the order of their runs.
    let plans: Vec<(Vec<String>, Vec<Run>)> = paths
        .iter()
        .map(|&p| {
            let mut cases: Vec<String> = cfg.modes.iter().map(|m| m.name().to_string()).collect();
            if p == PathKind::Sink {
                cases.extend(raws.iter().map(|r| r.to_string()));
            }
            let order = run_order(&cases, cfg.repeats);
            (cases, order)
        })
        .collect();
    let total: usize = plans.iter().map(|(_, o)| o.len()).sum::<usize>() * cfg.sizes.len();
    let mut index = 0;
    for ((path, env), (cases, order)) in envs.iter().zip(&plans) {
        for &size in &cfg.sizes {
            let size = effective_size(*path, size);
            let mut rows: Vec<TxRow> = cases
                .iter()
                .map(|tx| TxRow {
                    path: path.name(),
                    tx: tx.clone(),
                    size,
                    // The raw loops keep the same number in flight as zcnet's sender.
                    inflight: cfg.tx_config(TxMode::Copy, size).buffers(),
                    ..TxRow::default()
                })
                .collect();
            for &(case, run, runs) in order {
                if zcnet::interrupted() {
                    return Err(Error::Interrupted);
                }
                index += 1;
                let row = &mut rows[case];
                if row.error.is_some() {
                    continue;
                }
                progress(Progress::Start {
                    index,
                    total,
                    path: path.name(),
                    tx: &row.tx,
                    size,
                    run: (run + 1, runs),
                });
                let mut case_cfg = cfg.clone();
                case_cfg.duration = cfg.duration / runs as u32;
                let other = crate::cpu::OtherCpu::start();
                let outcome = if raws.contains(&row.tx.as_str()) {
                    run_raw(env, &row.tx, size, &case_cfg)
                } else {
                    TxMode::parse(&row.tx).and_then(|m| run_case(env, m, size, &case_cfg))
                };
                let other = other.seconds();
                row.other_cpu_seconds = match (row.other_cpu_seconds, other) {
                    (Some(a), Some(b)) => Some(a + b),
                    (a, b) => a.or(b),
                };
                match outcome {
                    Ok((st, received, note)) => {
                        add_run(row, &st, received, runs > 1);
                        if let Some(n) = note {
                            if !report.notes.contains(&n) {
                                report.notes.push(n);
                            }
                        }
                    }
                    Err(Error::Interrupted) => return Err(Error::Interrupted),
                    Err(e) => row.error = Some(crate::cli_text::error_text(&e)),
                }
                if run + 1 == runs || row.error.is_some() {
                    progress(Progress::Done(row));
                }
            }
            report.rows.extend(rows);
        }
    }
    drop(lab.take());
    Ok(report)
}

/// One run of a case: (index into the cases, run from 0, runs of that case).
pub type Run = (usize, usize, usize);

/// The order of the runs of one (path, size): `(case, run, runs)` with `case` an index into
/// `cases`. A mode with a raw loop among `cases` and its loop run `repeats` times each,
/// alternated (mode, loop, mode, loop…) so that each pair of runs sees the same machine; every
/// other case runs once.
pub fn run_order(cases: &[String], repeats: usize) -> Vec<Run> {
    let repeats = repeats.max(1);
    let pos = |name: &str| cases.iter().position(|c| c == name);
    let pairs: Vec<(usize, usize)> = RAW_LOOPS
        .iter()
        .filter_map(|(m, raw)| pos(m.name()).zip(pos(raw)))
        .collect();
    let paired = |i: usize| pairs.iter().any(|&(m, r)| m == i || r == i);
    let mut order = Vec::new();
    for i in (0..cases.len()).filter(|&i| !paired(i)) {
        order.push((i, 0, 1));
    }
    for &(m, r) in &pairs {
        for k in 0..repeats {
            order.push((m, k, repeats));
            order.push((r, k, repeats));
        }
    }
    order
}

/// Adds one run's numbers to `row` (keeping its MB/s as a sample when `sample`).
fn add_run(row: &mut TxRow, st: &TxStats, received: Option<u64>, sample: bool) {
    row.bytes += st.bytes;
    row.sends += st.sends;
    row.seconds += st.seconds;
    row.mb_per_s = if row.seconds > 0.0 {
        row.bytes as f64 / row.seconds / 1e6
    } else {
        0.0
    };
    if sample {
        row.samples_mb_per_s.push(st.mb_per_s());
    }
    row.zerocopy_bytes += st.zerocopy_bytes;
    row.copied_bytes += st.copied_bytes;
    row.cpu_seconds += st.cpu_seconds;
    row.notifications += st.notifications;
    if let Some(r) = received {
        row.received_bytes = Some(row.received_bytes.unwrap_or(0) + r);
    }
    row.switches
        .extend(st.switches.iter().map(|s| s.to_string()));
    if let Some(r) = received {
        if r != st.bytes {
            row.error = Some(format!(
                "receiver got {r} B of the {} B the kernel accepted",
                st.bytes
            ));
        }
    }
}

/// The error for a lab thread that panicked (its `join` failed).
fn panicked(what: &str) -> Error {
    Error::io(what, std::io::Error::other("panicked"))
}

type CaseResult = Result<(TxStats, Option<u64>, Option<String>)>;

fn gso_for(size: usize) -> Option<u16> {
    (size > usize::from(net::GSO_SEGMENT_1500)).then_some(net::GSO_SEGMENT_1500)
}

/// Sends `tcfg.buf_size`-byte messages for `duration`; the buffers hold the seeded pattern.
pub fn send_for(
    sock: Socket,
    tcfg: &TxConfig,
    memory: MemoryKind,
    duration: Duration,
) -> Result<(TxStats, Option<String>)> {
    let size = tcfg.buf_size;
    let region = Region::new(memory, region_len(tcfg))?;
    if memory.is_device() {
        return send_gpu_for(sock, region, tcfg, memory, duration);
    }
    let mut tx = Sender::new(sock, region, tcfg)?;
    let note = tx.note().map(str::to_string);
    // Read the clock once per buffers' worth of sends (about once per wait), as the raw
    // baseline does.
    let mut until = Until::new(size, None, Some(Instant::now() + duration), tx.buffers());
    SendLoop {
        amount: |offset| until.next(offset),
        fill: Payload::once(|_| 0x2c6e_6574),
        pace: None,
        cancelled: || false,
        progress: |_| {},
    }
    .run(&mut tx)?;
    Ok((tx.finish()?, note))
}

/// [`send_for`] from GPU memory: devmem TX or staging (whichever [`GpuSender`] takes); the note
/// names the path and why the better one was refused. Sends what the GPU memory holds.
fn send_gpu_for(
    sock: Socket,
    region: Region,
    tcfg: &TxConfig,
    memory: MemoryKind,
    duration: Duration,
) -> Result<(TxStats, Option<String>)> {
    let (mut tx, refused) = GpuSender::open(sock, region, tcfg)?;
    let mut note = format!("from {} by {}", memory.name(), tx.path());
    for r in &refused {
        note.push_str(&format!("; {r}"));
    }
    let mut until = Until::new(tcfg.buf_size, None, Some(Instant::now() + duration), 1);
    let (mut off, mut scratch) = (0u64, Vec::new());
    while let Some(n) = until.next(off)? {
        tx.send_chunk(off, n, None, &mut scratch)?;
        off += n as u64;
    }
    Ok((tx.finish()?.tx, Some(note)))
}

fn run_case(env: &Env, mode: TxMode, size: usize, cfg: &TxBenchConfig) -> CaseResult {
    match env {
        Env::Sink(s) => std::thread::scope(|sc| {
            sc.spawn(|| {
                lab::enter(&s.ns)?;
                let sock = net::connect_udp(s.dest, gso_for(size))?;
                let (st, note) = send_for(
                    sock.into(),
                    &cfg.tx_config(mode, size),
                    cfg.memory,
                    cfg.duration,
                )?;
                Ok((st, None, note))
            })
            .join()
            .unwrap_or_else(|_| Err(panicked("sender thread")))
        }),
        // One datagram per send, no GSO: the MTU (65535) takes the largest, and with the
        // checksum left to the device UDP sends it from the pages as they are.
        Env::Dummy(d) => std::thread::scope(|sc| {
            sc.spawn(|| {
                lab::enter(&d.ns)?;
                let sock = net::connect_udp(d.dest, None)?;
                let (st, note) = send_for(
                    sock.into(),
                    &cfg.tx_config(mode, size),
                    cfg.memory,
                    cfg.duration,
                )?;
                Ok((st, None, note))
            })
            .join()
            .unwrap_or_else(|_| Err(panicked("sender thread")))
        }),
        Env::Veth(v) => tcp_case(
            Some(&v.a),
            Some(&v.b),
            SocketAddr::new(v.b_addr, 5201),
            mode,
            size,
            cfg,
        ),
        Env::Loopback => tcp_case(
            None,
            None,
            "127.0.0.1:0".parse().map_err(|_| Error::BadAddress {
                given: "127.0.0.1:0".into(),
            })?,
            mode,
            size,
            cfg,
        ),
    }
}

/// A TCP case: a receiver thread (in `rx_ns`) that drains, a sender thread (in `tx_ns`).
fn tcp_case(
    tx_ns: Option<&str>,
    rx_ns: Option<&str>,
    bind: SocketAddr,
    mode: TxMode,
    size: usize,
    cfg: &TxBenchConfig,
) -> CaseResult {
    let (sent, received) = tcp_stream(
        tx_ns,
        rx_ns,
        bind,
        |mut s| Ok(net::drain_stream(&mut s, None, None)?.bytes),
        |sock| {
            send_for(
                sock.into(),
                &cfg.tx_config(mode, size),
                cfg.memory,
                cfg.duration,
            )
        },
    )?;
    let (st, note) = sent?;
    Ok((st, Some(received?), note))
}

/// One TCP stream between two threads: the receiver (in `rx_ns`) listens on `bind` and runs
/// `recv` on the accepted stream; the sender (in `tx_ns`) connects and runs `send`. Returns
/// (what the sender did, what the receiver did); the outer error is set-up failing before the
/// sender could start (e.g. the listen).
pub(crate) fn tcp_stream<S: Send, R: Send>(
    tx_ns: Option<&str>,
    rx_ns: Option<&str>,
    bind: SocketAddr,
    recv: impl FnOnce(std::net::TcpStream) -> Result<R> + Send,
    send: impl FnOnce(std::net::TcpStream) -> Result<S> + Send,
) -> Result<(Result<S>, Result<R>)> {
    std::thread::scope(|sc| {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<SocketAddr>>();
        let receiver = sc.spawn(move || -> Result<R> {
            let listener = (|| -> Result<TcpListener> {
                if let Some(ns) = rx_ns {
                    lab::enter(ns)?;
                }
                net::listen_tcp(bind)
            })();
            let listener = match listener {
                Ok(l) => l,
                Err(e) => {
                    let msg = e.to_string();
                    let _ = ready_tx.send(Err(e));
                    return Err(Error::io(msg, std::io::Error::other("receiver")));
                }
            };
            let addr = listener
                .local_addr()
                .map_err(|e| Error::io("local_addr", e))?;
            let _ = ready_tx.send(Ok(addr));
            let (s, _) = net::accept(&listener)?;
            recv(s)
        });
        let addr = ready_rx
            .recv()
            .map_err(|_| Error::io("receiver thread", std::io::Error::other("exited early")))??;
        let sender = sc.spawn(move || -> Result<S> {
            if let Some(ns) = tx_ns {
                lab::enter(ns)?;
            }
            send(net::connect_tcp(addr)?)
        });
        let sent = sender
            .join()
            .unwrap_or_else(|_| Err(panicked("sender thread")));
        if sent.is_err() {
            // Unblock the receiver if the sender never connected.
            let _ = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200));
        }
        let received = receiver
            .join()
            .unwrap_or_else(|_| Err(panicked("receiver thread")));
        Ok((sent, received))
    })
}

/// Runs the raw loop named `raw` ([`RAW_LOOPS`]) on the sink.
fn run_raw(env: &Env, raw: &str, size: usize, cfg: &TxBenchConfig) -> CaseResult {
    let Env::Sink(s) = env else {
        return Err(Error::UnknownPath {
            given: "raw baseline runs on sink only".into(),
        });
    };
    let (run, what): (fn(_, _, _, _) -> _, _) = if raw == RAW_MSG_ZEROCOPY {
        (
            zcnet_sys::baseline::raw_msg_zerocopy,
            "raw MSG_ZEROCOPY loop",
        )
    } else {
        (zcnet_sys::baseline::raw_send_zc, "raw SEND_ZC loop")
    };
    std::thread::scope(|sc| {
        sc.spawn(|| {
            lab::enter(&s.ns)?;
            let sock = net::connect_udp(s.dest, gso_for(size))?;
            let fd = std::os::fd::AsRawFd::as_raw_fd(&sock);
            let inflight = cfg.tx_config(TxMode::Copy, size).buffers();
            let r = run(fd, size, inflight, cfg.duration).map_err(|e| match e.kind() {
                std::io::ErrorKind::Interrupted => Error::Interrupted,
                _ => Error::io(what, e),
            })?;
            let copied_bytes = (r.bytes * r.copied_notifications)
                .checked_div(r.notifications)
                .unwrap_or(0);
            let st = TxStats {
                bytes: r.bytes,
                sends: r.sends,
                notifications: r.notifications,
                copied_notifications: r.copied_notifications,
                zerocopy_bytes: r.bytes - copied_bytes,
                copied_bytes,
                seconds: r.seconds,
                cpu_seconds: r.cpu_seconds,
                ..TxStats::default()
            };
            Ok((st, None, None))
        })
        .join()
        .unwrap_or_else(|_| Err(panicked("raw loop thread")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use PathKind::{Loopback, Sink, Veth};

    const WHAT: &str = "bench tx: nothing can run: the namespace lab (paths sink and veth)";

    #[zcnet_testkit::test]
    fn dummy_is_a_default_path_only_where_the_driver_exists() {
        assert_eq!(default_paths(true), PathKind::ALL.to_vec());
        assert_eq!(default_paths(false), vec![Sink, Veth, Loopback]);
        assert_eq!(
            TxBenchConfig::default().paths.contains(&PathKind::Dummy),
            lab::dummy_driver()
        );
        assert_eq!(PathKind::parse("dummy").unwrap(), PathKind::Dummy);
        assert_eq!(effective_size(PathKind::Dummy, 65536), 64_000);
    }

    /// On a kernel without the dummy driver (this host: CONFIG_DUMMY off), `--path dummy` is
    /// refused before any lab is made, in one line naming CONFIG_DUMMY and the fix; with the
    /// driver, the lab makes the device and the path sends (kernel_lab_devices runs it in 7.2).
    #[zcnet_testkit::test]
    fn dummy_path_without_the_driver_is_refused_in_one_line() {
        let cfg = TxBenchConfig {
            paths: vec![PathKind::Dummy],
            modes: vec![TxMode::MsgZerocopy],
            sizes: vec![65536],
            duration: Duration::from_millis(100),
            repeats: 1,
            ..TxBenchConfig::default()
        };
        if lab::dummy_driver() {
            // No refusal to see: the path runs, and the kernel sends without copying.
            zcnet_testkit::require_root("the dummy path's namespace");
            let r = run_tx(&cfg, &mut |_| {}).unwrap();
            let row = r.rows.iter().find(|r| r.tx == "msg-zerocopy").unwrap();
            assert!(row.error.is_none() && row.sends > 0, "{row:?}");
            assert_eq!(row.zerocopy_percent(), Some(100.0), "{row:?}");
            return;
        }
        let e = run_tx(&cfg, &mut |_| {}).unwrap_err();
        let m = e.to_string();
        assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
        for want in ["dummy path", "CONFIG_DUMMY", "kernel-lab.sh", "--path sink"] {
            assert!(m.contains(want), "missing '{want}' in: {m}");
        }
        assert!(!m.contains('\n'), "one line: {m}");
        // The kernel's own answer, where root can ask it: the same refusal, with what ip said.
        if zcnet_sys::os::is_root() {
            let mut l = Lab::new().unwrap();
            let e = l.dummy().unwrap_err();
            let m = e.to_string();
            assert!(m.contains("CONFIG_DUMMY") && m.contains("; ip: "), "{m}");
            assert!(!m.contains('\n'), "one line: {m}");
        }
    }

    #[zcnet_testkit::test]
    fn root_runs_every_path_asked_once() {
        let mut notes = Vec::new();
        let p = runnable_paths(&[Sink, Veth, Sink, Loopback], true, WHAT, &mut notes).unwrap();
        assert_eq!(p, vec![Sink, Veth, Loopback]);
        assert!(notes.is_empty());
    }

    #[zcnet_testkit::test]
    fn without_root_the_lab_paths_are_left_out_with_a_note() {
        let mut notes = Vec::new();
        let p = runnable_paths(&[Sink, Veth, Loopback], false, WHAT, &mut notes).unwrap();
        assert_eq!(p, vec![Loopback]);
        assert_eq!(
            notes,
            ["not root: running the loopback path only (sink and veth need network namespaces; run as root for them)"]
        );
        let mut notes = Vec::new();
        runnable_paths(&[Veth, Loopback], false, WHAT, &mut notes).unwrap();
        assert_eq!(
            notes,
            ["not root: running the loopback path only (veth needs network namespaces; run as root for it)"]
        );
        let mut notes = Vec::new();
        runnable_paths(&[Loopback], false, WHAT, &mut notes).unwrap();
        assert!(notes.is_empty());
    }

    #[zcnet_testkit::test]
    fn without_root_nothing_to_run_is_an_error_not_an_empty_table() {
        for asked in [&[Sink, Veth][..], &[Sink], &[Veth], &[Veth, Veth]] {
            let mut notes = Vec::new();
            match runnable_paths(asked, false, WHAT, &mut notes) {
                Err(e @ Error::NotRoot { .. }) => {
                    let m = e.to_string();
                    assert!(
                        m.contains("nothing can run") && m.contains("needs root"),
                        "{m}"
                    );
                    assert_eq!(e.exit_code(), 1);
                }
                other => panic!("{asked:?}: {other:?}"),
            }
        }
    }

    fn row(path: PathKind, tx: &str, size: usize, zc: u64, copied: u64) -> TxRow {
        TxRow {
            path: path.name(),
            tx: tx.into(),
            size,
            bytes: zc + copied,
            sends: (zc + copied) / size as u64,
            zerocopy_bytes: zc,
            copied_bytes: copied,
            notifications: 10,
            ..TxRow::default()
        }
    }

    #[zcnet_testkit::test]
    fn the_reported_row_gets_its_why_line() {
        // A row once printed without a why line: sink msg-zerocopy 16 KiB at 0.69x copy, every
        // byte zero-copy.
        let r = row(Sink, "msg-zerocopy", 16384, 1 << 30, 0);
        let why = slow_zero_copy_reason(&r, Some(0.69), 17).expect("a why line");
        assert!(why.contains("avoided the copy"), "{why}");
    }

    /// The rule is total: every zero-copy row below 0.9x copy gets a reason, whatever its
    /// path, size and accounting; rows at or above 0.9x, copy rows and failed rows get none.
    #[zcnet_testkit::test]
    fn every_slow_zero_copy_row_says_why() {
        let zero_copy = ["msg-zerocopy", "uring-zc", RAW_BASELINE, RAW_MSG_ZEROCOPY];
        let sizes = [1, 1024, 4096, 16383, 16384, 64000, 65536, 1 << 20];
        let accounts = [
            (0, 0),
            (0, 1000),
            (1000, 0),
            (500, 500),
            (950, 50),
            (10, 990),
        ];
        for path in PathKind::ALL {
            for tx in zero_copy.iter().chain(&["auto"]) {
                for size in sizes {
                    for (zc, copied) in accounts {
                        let r = row(path, tx, size, zc * size as u64, copied * size as u64);
                        let counts = *tx != "auto" || zc > 0;
                        for ratio in [0.0, 0.1, 0.5, 0.69, 0.8999] {
                            let why = slow_zero_copy_reason(&r, Some(ratio), 17);
                            assert_eq!(why.is_some(), counts, "{r:?} at {ratio}: {why:?}");
                            assert!(why.is_none_or(|w| !w.is_empty()));
                        }
                        for ratio in [None, Some(0.9), Some(1.5)] {
                            assert!(slow_zero_copy_reason(&r, ratio, 17).is_none());
                        }
                        let mut failed = r.clone();
                        failed.error = Some("x".into());
                        assert!(slow_zero_copy_reason(&failed, Some(0.5), 17).is_none());
                    }
                }
            }
            for tx in ["copy", "uring"] {
                let r = row(path, tx, 4096, 0, 4096 * 100);
                assert!(slow_zero_copy_reason(&r, Some(0.5), 17).is_none());
            }
        }
    }

    #[zcnet_testkit::test]
    fn the_reasons_match_the_accounting() {
        let why = |r: &TxRow| slow_zero_copy_reason(r, Some(0.5), 17).unwrap_or_default();
        let all_copied = why(&row(Loopback, "uring-zc", 65536, 0, 1 << 20));
        assert!(all_copied.contains("copied every byte"), "{all_copied}");
        assert!(all_copied.contains("receive side"), "{all_copied}");
        let small_tcp = why(&row(Loopback, "msg-zerocopy", 1024, 0, 1 << 20));
        assert!(small_tcp.contains("at most 17"), "{small_tcp}");
        let sink_copied = why(&row(Sink, "uring-zc", 65536, 0, 1 << 20));
        assert!(!sink_copied.contains("receive side"), "{sink_copied}");
        let part = why(&row(Sink, "uring-zc", 65536, 1 << 19, 1 << 19));
        assert!(part.contains("copied 50 %"), "{part}");
        let small = why(&row(Sink, "msg-zerocopy", 4096, 1 << 20, 0));
        assert!(small.contains("below 16 KiB"), "{small}");
        let unknown = why(&row(Sink, "uring-zc", 65536, 0, 0));
        assert!(unknown.contains("no notification"), "{unknown}");
    }

    #[zcnet_testkit::test]
    fn a_mode_and_its_raw_loop_alternate_and_the_rest_run_once() {
        let cases: Vec<String> = [
            "copy",
            "msg-zerocopy",
            "uring-zc",
            RAW_BASELINE,
            RAW_MSG_ZEROCOPY,
        ]
        .map(String::from)
        .to_vec();
        let order = run_order(&cases, 2);
        assert_eq!(
            order,
            [
                (0, 0, 1),
                (2, 0, 2),
                (3, 0, 2),
                (2, 1, 2),
                (3, 1, 2),
                (1, 0, 2),
                (4, 0, 2),
                (1, 1, 2),
                (4, 1, 2)
            ]
        );
        // No raw loop (not the sink, or --no-baseline): every case once, in order.
        let order = run_order(&cases[..3], 3);
        assert_eq!(order, [(0, 0, 1), (1, 0, 1), (2, 0, 1)]);
        assert_eq!(run_order(&cases, 0).len(), 5);
    }

    #[zcnet_testkit::test]
    fn overhead_is_the_median_of_paired_runs_with_its_spread() {
        let o = Overhead::of(&[(97.0, 100.0), (45.0, 50.0), (200.0, 200.0)]).unwrap();
        assert_eq!((o.runs, o.min, o.median, o.max), (3, 0.9, 0.97, 1.0));
        assert!(!o.noisy());
        let l = o.line("sink", 16384, "msg-zerocopy", RAW_MSG_ZEROCOPY);
        assert_eq!(
            l,
            "  sink 16384 B msg-zerocopy / raw-msg-zerocopy: 0.97 (3 paired runs: 0.90 to 1.00)"
        );
        // A noisy run once read 1.29 and 0.55: noise, and the line says so.
        let noisy = Overhead::of(&[(129.0, 100.0), (55.0, 100.0), (90.0, 100.0)]).unwrap();
        assert!(noisy.noisy());
        assert!(noisy
            .line("sink", 4096, "uring-zc", RAW_BASELINE)
            .contains("noisy"));
        assert!(Overhead::of(&[(1.0, 0.0)]).is_none());
        let once = Overhead::of(&[(1.0, 1.0)]).unwrap();
        assert!(once
            .line("sink", 1, "uring-zc", RAW_BASELINE)
            .contains("1 run"));
        assert!(OVERHEAD_HEADING.contains("1.00 = no overhead"));
    }
}
