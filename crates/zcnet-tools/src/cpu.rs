//! CPU time other processes took during a measurement: the main source of noise on a shared
//! machine, measured the same way by every benchmark (`bench rx`, `bench tx`).

/// `USER_HZ`, the unit of /proc/stat (100 on Linux for every architecture zcnet runs on).
const TICKS_PER_SECOND: f64 = 100.0;

/// Share of a case's wall time that other processes may use before the case is reported as
/// run on a machine that was not quiet.
pub const QUIET_SHARE: f64 = 0.1;

/// Busy ticks of the whole machine (user, nice, system) and utime + stime ticks of this
/// process, from /proc/stat and /proc/self/stat. Interrupt and softirq time are left out: on a
/// kernel with CONFIG_IRQ_TIME_ACCOUNTING they are in no process's utime/stime, so the
/// bench's own packet processing (softirq in its threads, or ksoftirqd for it) would count as
/// other processes' and flag a quiet machine as busy.
fn ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .take(7)
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq: the first three.
    let busy = cpu.get(..3)?.iter().sum::<u64>();
    let me = std::fs::read_to_string("/proc/self/stat").ok()?;
    // utime and stime.
    let own = zcnet::os::stat_field(&me, 14)? + zcnet::os::stat_field(&me, 15)?;
    Some((busy, own))
}

/// A measurement of the CPU time other processes use, from [`OtherCpu::start`] to
/// [`OtherCpu::seconds`].
#[derive(Debug, Clone, Copy)]
pub struct OtherCpu(Option<(u64, u64)>);

impl OtherCpu {
    /// Starts measuring.
    pub fn start() -> OtherCpu {
        OtherCpu(ticks())
    }

    /// CPU seconds the rest of the machine used since [`OtherCpu::start`] (`None` when /proc
    /// cannot be read).
    pub fn seconds(&self) -> Option<f64> {
        self.0.zip(ticks()).map(|((m0, s0), (m1, s1))| {
            let other = m1.saturating_sub(m0) as f64 - s1.saturating_sub(s0) as f64;
            (other / TICKS_PER_SECOND).max(0.0)
        })
    }
}

/// The warning for a case of `seconds` during which other processes used `other` CPU seconds,
/// when that is more than [`QUIET_SHARE`] of it.
pub fn busy_warning(other: Option<f64>, seconds: f64) -> Option<String> {
    let o = other.filter(|&o| o > QUIET_SHARE * seconds)?;
    Some(format!(
        "warning: other processes used {o:.2} CPU-s during these {seconds:.1} s: the machine was not quiet"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[zcnet_testkit::test]
    fn a_busy_machine_is_reported_a_quiet_one_is_not() {
        assert_eq!(busy_warning(None, 3.0), None);
        assert_eq!(busy_warning(Some(0.3), 3.0), None);
        let w = busy_warning(Some(1.5), 3.0).unwrap_or_default();
        assert!(w.contains("1.50 CPU-s") && w.contains("3.0 s"), "{w}");
        assert!(OtherCpu::start().seconds().is_some_and(|s| s >= 0.0));
    }
}
