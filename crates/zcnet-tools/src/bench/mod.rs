//! `zcnet bench tx`: every send backend on every lab path, side by side, in one run.
//!
//! Paths: `sink` (UDP with GSO into an ifb that drops everything: the kernel can really avoid the
//! copy), `veth` (TCP between two namespaces) and `loopback` (TCP on 127.0.0.1): on those two the
//! kernel copies whatever the application asks for, and the accounting must say so. `dummy`
//! (UDP into a dummy device with MTU 65535, the device of the original SEND_ZC measurements) is
//! the sink's twin where the kernel has the dummy driver (CONFIG_DUMMY): in the default set only
//! there ([`default_paths`]), refused in one line when asked for elsewhere.

mod cases;
#[cfg(test)]
mod tests;

use crate::lab::{self, DummyPath, Lab, SinkPath, VethPath};
use crate::reason::Reason;
pub use cases::send_for;
pub(crate) use cases::tcp_stream;
use cases::{run_case, run_raw};
use std::time::Duration;
use zcnet::region::MemoryKind;
use zcnet::text::Text;
use zcnet::tx::{TxConfig, TxMode, TxStats};
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
            .ok_or_else(|| {
                Error::invalid_input(format!(
                    "unknown path '{s}': use one of {}",
                    PathKind::ALL.map(PathKind::name).join(", ")
                ))
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
        t.cancel = crate::interrupt::token();
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
    /// Mode switches of `auto` (a front end words their reasons).
    pub switches: Vec<zcnet_core::Switch>,
    /// MB/s of each run, when the case ran more than once ([`TxBenchConfig::repeats`]); the
    /// row's other numbers are the sums (and `mb_per_s` the rate) over all of them.
    pub samples_mb_per_s: Vec<f64>,
    /// CPU seconds other processes used during the case ([`crate::cpu::OtherCpu`]).
    pub other_cpu_seconds: Option<f64>,
    /// Why the case failed, if it did.
    pub error: Option<Reason>,
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
    /// Things the user should know (paths skipped and why, memory fallbacks), their terms
    /// typed.
    pub notes: Vec<Text>,
    /// SIGINT/SIGTERM stopped the run: `rows` are the cases measured to their end before it.
    pub interrupted: bool,
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
    notes: &mut Vec<Text>,
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
        notes.push(
            format!(
                "not root: running the {} path only ({need})",
                run.join(" and ")
            )
            .into(),
        );
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
        zcnet::os::is_root(),
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
    // Ctrl-C ends the run with the rows measured so far (every run of their case done), as
    // `zcnet send` prints its totals so far: the caller prints them, then exits 130.
    'all: for ((path, env), (cases, order)) in envs.iter().zip(&plans) {
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
            let mut finished = vec![false; rows.len()];
            for &(case, run, runs) in order {
                if crate::interrupt::interrupted() {
                    report.interrupted = true;
                    report.rows.extend(keep_finished(rows, &finished));
                    break 'all;
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
                // A case the signal cut short (ended, or failed because the other side
                // stopped on it) was not measured to its end: not a row.
                if crate::interrupt::interrupted() {
                    report.interrupted = true;
                    report.rows.extend(keep_finished(rows, &finished));
                    break 'all;
                }
                match outcome {
                    Ok((st, received, note)) => {
                        add_run(row, &st, received, runs > 1);
                        if let Some(n) = note {
                            if !report.notes.contains(&n) {
                                report.notes.push(n);
                            }
                        }
                    }
                    Err(Error::Interrupted) => {
                        report.interrupted = true;
                        report.rows.extend(keep_finished(rows, &finished));
                        break 'all;
                    }
                    Err(e) => row.error = Some(e.into()),
                }
                if run + 1 == runs || row.error.is_some() {
                    finished[case] = true;
                    progress(Progress::Done(row));
                }
            }
            report.rows.extend(rows);
        }
    }
    drop(lab.take());
    Ok(report)
}

/// The rows whose every run ended (`finished`), for a report cut short.
fn keep_finished(rows: Vec<TxRow>, finished: &[bool]) -> impl Iterator<Item = TxRow> + '_ {
    rows.into_iter()
        .zip(finished)
        .filter(|(_, &f)| f)
        .map(|(r, _)| r)
}

/// One run of a case: (index into the cases, run from 0, runs of that case).
pub type Run = (usize, usize, usize);

/// The order of the runs of one (path, size): `(case, run, runs)` with `case` an index into
/// `cases`. A mode with a raw loop among `cases` and its loop run `repeats` times each,
/// alternated so that each pair of runs sees the same machine, and in ABBA order (mode, loop,
/// loop, mode, …) so that neither always runs first: order alone moves results by a few
/// percent. Every other case runs once.
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
            let (first, second) = if k % 2 == 0 { (m, r) } else { (r, m) };
            order.push((first, k, repeats));
            order.push((second, k, repeats));
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
    row.switches.extend(st.switches.iter().cloned());
    if let Some(r) = received {
        if r != st.bytes {
            row.error = Some(
                format!(
                    "receiver got {r} B of the {} B the kernel accepted",
                    st.bytes
                )
                .into(),
            );
        }
    }
}

/// Reads a plain TCP stream to its end (the peer of the send benches and tests, no receive
/// backend); with `verify`, checks every byte against the pattern, failing at
/// the first mismatch. With `sink`, hands each chunk to it (e.g. stdout). [`Error::Interrupted`]
/// once `cancel` is cancelled.
pub fn drain_stream(
    stream: &mut std::net::TcpStream,
    verify: Option<zcnet_core::Pattern>,
    mut sink: Option<&mut dyn std::io::Write>,
    cancel: &zcnet::Cancel,
) -> Result<zcnet::net::RecvReport> {
    let mut buf = vec![0u8; 1 << 20];
    let mut rep = zcnet::net::RecvReport::default();
    let mut start = None;
    loop {
        let n = match zcnet::net::recv_interruptible(stream, &mut buf, cancel) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                return Err(Error::Interrupted)
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return Err(Error::io(
                    format!("peer reset the connection after {} B", rep.bytes),
                    e,
                ))
            }
            Err(e) => return Err(Error::io("recv", e)),
        };
        start.get_or_insert_with(std::time::Instant::now);
        if let Some(p) = verify {
            p.verify(rep.bytes, &buf[..n])?;
        }
        if let Some(s) = sink.as_deref_mut() {
            s.write_all(&buf[..n])
                .map_err(|e| Error::io("writing received data", e))?;
        }
        rep.bytes += n as u64;
        rep.reads += 1;
    }
    rep.seconds = start.map_or(0.0, |s| s.elapsed().as_secs_f64());
    Ok(rep)
}
