//! What `bench xsk` measured: one run, a row (the medians of its runs) and the ratios of
//! AF_XDP to the best AF_PACKET variant.

use super::*;

/// One run of one case.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Run {
    /// Frames the kernel took from the sender.
    pub sent: u64,
    /// Frames of the flow the receiver got, each checked.
    pub received: u64,
    /// Seconds the sender sent (its final flush included).
    pub tx_seconds: f64,
    /// Seconds from the sender's start to the last frame received.
    pub rx_seconds: f64,
    /// Sender thread CPU seconds.
    pub tx_cpu: f64,
    /// Receiver thread CPU seconds.
    pub rx_cpu: f64,
    /// What the kernel said it dropped (`XDP_STATISTICS` rx_dropped + rx_ring_full;
    /// `PACKET_STATISTICS` tp_drops; `ENOBUFS` from the device).
    pub kernel_drops: u64,
    /// Frames missing between received sequence numbers (the rest of the drops are at the end).
    pub gaps: u64,
}

impl Run {
    /// Sent per second.
    pub fn tx_pps(&self) -> f64 {
        per_second(self.sent, self.tx_seconds)
    }

    /// Received per second.
    pub fn rx_pps(&self) -> f64 {
        per_second(self.received, self.rx_seconds)
    }

    /// `sent − received`.
    pub fn drops(&self) -> u64 {
        self.sent.saturating_sub(self.received)
    }

    /// Sender + receiver CPU seconds per million packets received.
    pub fn cpu_s_per_mpkt(&self) -> Option<f64> {
        per_mpkt(self.tx_cpu + self.rx_cpu, self.received)
    }

    /// Sender CPU seconds per million packets sent.
    pub fn tx_cpu_s_per_mpkt(&self) -> Option<f64> {
        per_mpkt(self.tx_cpu, self.sent)
    }

    /// Receiver CPU seconds per million packets received.
    pub fn rx_cpu_s_per_mpkt(&self) -> Option<f64> {
        per_mpkt(self.rx_cpu, self.received)
    }
}

fn per_second(n: u64, s: f64) -> f64 {
    if s > 0.0 {
        n as f64 / s
    } else {
        0.0
    }
}

fn per_mpkt(cpu: f64, n: u64) -> Option<f64> {
    (n > 0).then(|| cpu / (n as f64 / 1e6))
}

/// The median of `v` (the mean of the two middle values for an even count); `None` if empty.
pub fn median(v: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = v.into_iter().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

/// One row: a case at one size, its runs, or why it could not run.
#[derive(Debug, Clone)]
pub struct Row {
    /// The lab path ("veth").
    pub path: &'static str,
    /// The case.
    pub case: Case,
    /// Frame bytes.
    pub size: usize,
    /// The runs that completed.
    pub runs: Vec<Run>,
    /// Why the case could not run, if it could not ([`Row::error_line`] says it in one line).
    pub error: Option<Reason>,
    /// Whether that error is the kernel or driver refusing the mode (expected, e.g. zero-copy on
    /// veth), rather than a failure.
    pub refused: bool,
}

impl Row {
    fn med(&self, f: impl Fn(&Run) -> f64) -> Option<f64> {
        median(self.runs.iter().map(f))
    }

    /// Median TX packets per second.
    pub fn tx_pps(&self) -> Option<f64> {
        self.med(Run::tx_pps)
    }

    /// Whether the row has a receiver (the sink's rows do not).
    pub fn has_receiver(&self) -> bool {
        self.case.rx != RxVariant::None
    }

    /// Median RX packets per second (`None` without a receiver).
    pub fn rx_pps(&self) -> Option<f64> {
        self.has_receiver().then(|| self.med(Run::rx_pps)).flatten()
    }

    /// Median CPU seconds (sender + receiver) per million packets received; without a
    /// receiver, the sender's per million sent.
    pub fn cpu_s_per_mpkt(&self) -> Option<f64> {
        if !self.has_receiver() {
            return self.tx_cpu_s_per_mpkt();
        }
        median(self.runs.iter().filter_map(Run::cpu_s_per_mpkt))
    }

    /// Median sender CPU seconds per million sent.
    pub fn tx_cpu_s_per_mpkt(&self) -> Option<f64> {
        median(self.runs.iter().filter_map(Run::tx_cpu_s_per_mpkt))
    }

    /// Median receiver CPU seconds per million received.
    pub fn rx_cpu_s_per_mpkt(&self) -> Option<f64> {
        self.has_receiver()
            .then(|| median(self.runs.iter().filter_map(Run::rx_cpu_s_per_mpkt)))
            .flatten()
    }

    /// Frames sent over all runs.
    pub fn sent(&self) -> u64 {
        self.runs.iter().map(|r| r.sent).sum()
    }

    /// Frames received over all runs.
    pub fn received(&self) -> u64 {
        self.runs.iter().map(|r| r.received).sum()
    }

    /// `sent − received` over all runs (`None` without a receiver, or before any run).
    pub fn drops(&self) -> Option<u64> {
        (self.has_receiver() && self.error.is_none() && !self.runs.is_empty())
            .then(|| self.sent().saturating_sub(self.received()))
    }

    /// The kernel's drop counters over all runs.
    pub fn kernel_drops(&self) -> u64 {
        self.runs.iter().map(|r| r.kernel_drops).sum()
    }

    /// Why the case could not run, in one line of `voice`'s words.
    pub fn error_line(&self, voice: &dyn zcnet::Voice) -> Option<String> {
        self.error.as_ref().map(|e| one_line(&e.render(voice)))
    }
}

/// AF_XDP copy mode against the best AF_PACKET variant at one frame size.
#[derive(Debug, Clone, PartialEq)]
pub struct Ratio {
    /// The lab path.
    pub path: &'static str,
    /// Frame bytes.
    pub size: usize,
    /// The AF_PACKET TX variant with the highest median TX rate, and that rate.
    pub best_af_packet_tx: Option<(&'static str, f64)>,
    /// AF_XDP copy TX rate ÷ that.
    pub tx_ratio: Option<f64>,
    /// The AF_PACKET receiver (and its sender) with the highest median RX rate, and that rate.
    pub best_af_packet_rx: Option<(String, f64)>,
    /// AF_XDP copy RX rate ÷ that (`None` on the sink).
    pub rx_ratio: Option<f64>,
}

/// Everything `zcnet bench xsk` measured.
#[derive(Debug, Clone)]
pub struct XskReport {
    /// One row per (case, size), in the order of the configuration.
    pub rows: Vec<Row>,
    /// The sender thread's CPU.
    pub sender_cpu: usize,
    /// The receiver thread's CPU.
    pub receiver_cpu: usize,
    /// Where each side ran, in words.
    pub placement: String,
    /// The ratios, per size.
    pub ratios: Vec<Ratio>,
    /// Runs per row.
    pub repeat: usize,
    /// Seconds per run.
    pub duration: Duration,
}

impl XskReport {
    /// Rows that failed (errors that are not an expected refusal).
    pub fn failed(&self) -> usize {
        self.rows
            .iter()
            .filter(|r| r.error.is_some() && !r.refused)
            .count()
    }
}

/// AF_XDP copy against the best AF_PACKET rows, for each path and size that has rows.
pub fn ratios(rows: &[Row], sizes: &[usize]) -> Vec<Ratio> {
    let mut paths: Vec<&'static str> = Vec::new();
    for r in rows {
        if !paths.contains(&r.path) {
            paths.push(r.path);
        }
    }
    let mut out = Vec::new();
    for &path in &paths {
        for &size in sizes {
            let at = |m: Mode| {
                rows.iter().filter(move |r| {
                    r.path == path && r.size == size && r.case.mode == m && r.error.is_none()
                })
            };
            if at(Mode::AfXdpCopy).next().is_none() && at(Mode::AfPacket).next().is_none() {
                continue;
            }
            let xdp = at(Mode::AfXdpCopy).next();
            let best_tx = at(Mode::AfPacket)
                .filter_map(|r| Some((r.case.tx.name(), r.tx_pps()?)))
                .max_by(|a, b| a.1.total_cmp(&b.1));
            let best_rx = at(Mode::AfPacket)
                .filter_map(|r| {
                    Some((
                        format!("{} (from {})", r.case.rx.name(), r.case.tx.name()),
                        r.rx_pps()?,
                    ))
                })
                .max_by(|a, b| a.1.total_cmp(&b.1));
            let ratio = |x: Option<f64>, best: Option<f64>| match (x, best) {
                (Some(x), Some(b)) if b > 0.0 => Some(x / b),
                _ => None,
            };
            out.push(Ratio {
                path,
                size,
                tx_ratio: ratio(xdp.and_then(Row::tx_pps), best_tx.map(|b| b.1)),
                rx_ratio: ratio(xdp.and_then(Row::rx_pps), best_rx.as_ref().map(|b| b.1)),
                best_af_packet_tx: best_tx,
                best_af_packet_rx: best_rx,
            });
        }
    }
    out
}
