//! What iperf3 reports about the machine: CPU use of the process, the system line, the time.
//!
//! CPU use follows iperf3's `cpu_util` (src/iperf_api.c): user and system time of the whole
//! process (`getrusage(RUSAGE_SELF)`) over the wall time since the test started, in percent
//! of one CPU. They are read from `/proc/self/stat` (proc(5): fields 14 `utime` and 15 `stime`,
//! in clock ticks of `sysconf(_SC_CLK_TCK)`, which Linux fixes at 100 for user space).

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Clock ticks per second in `/proc` (USER_HZ: 100 on every Linux architecture).
const USER_HZ: f64 = 100.0;

/// CPU use over a period, in percent of one CPU (iperf3's `cpu_util` triple).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuUtil {
    /// User and system.
    pub total: f64,
    /// User.
    pub user: f64,
    /// System.
    pub system: f64,
}

/// A starting point for [`CpuUtil`]: the wall clock and the process's CPU times.
#[derive(Debug, Clone, Copy)]
pub struct CpuClock {
    wall: Instant,
    user: f64,
    system: f64,
}

impl CpuClock {
    /// Starts measuring now.
    pub fn start() -> CpuClock {
        let (user, system) = process_times();
        CpuClock {
            wall: Instant::now(),
            user,
            system,
        }
    }

    /// CPU use since [`CpuClock::start`].
    pub fn utilization(&self) -> CpuUtil {
        let wall = self.wall.elapsed().as_secs_f64();
        if wall <= 0.0 {
            return CpuUtil::default();
        }
        let (user, system) = process_times();
        let user = (user - self.user).max(0.0) / wall * 100.0;
        let system = (system - self.system).max(0.0) / wall * 100.0;
        CpuUtil {
            total: user + system,
            user,
            system,
        }
    }
}

/// User and system CPU seconds of this process (0 when `/proc` cannot be read).
fn process_times() -> (f64, f64) {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| parse_stat_times(&s))
        .unwrap_or((0.0, 0.0))
}

/// `utime` and `stime` (fields 14 and 15) from a `/proc/<pid>/stat` line.
fn parse_stat_times(stat: &str) -> Option<(f64, f64)> {
    let utime = zcnet::os::stat_field(stat, 14)? as f64;
    let stime = zcnet::os::stat_field(stat, 15)? as f64;
    Some((utime / USER_HZ, stime / USER_HZ))
}

/// iperf3's `system_info` line: the fields of `uname -a` that it prints
/// ("Linux vm 6.18.44 #1 SMP PREEMPT_DYNAMIC @0 x86_64").
pub fn system_info() -> String {
    let read = |k: &str| {
        std::fs::read_to_string(format!("/proc/sys/kernel/{k}"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    format!(
        "{} {} {} {} {}",
        read("ostype"),
        read("hostname"),
        read("osrelease"),
        read("version"),
        std::env::consts::ARCH
    )
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A time as iperf3's `Time:` line and JSON `timestamp.time` print it
/// (`strftime("%a, %d %b %Y %H:%M:%S %Z")` in UTC): "Sun, 22 Nov 2026 13:01:23 GMT".
pub fn http_date(secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{}, {d:02} {} {y} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        MONTHS[(m - 1) as usize],
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Year, month (1..=12), day (1..=31) of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[zcnet_testkit::test]
    fn reads_utime_and_stime_after_the_command_name() {
        let line = "1234 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 250 75 0 0 20 0 1 0";
        assert_eq!(parse_stat_times(line), Some((2.5, 0.75)));
        assert_eq!(parse_stat_times("garbage"), None);
    }

    #[zcnet_testkit::test]
    fn own_process_times_are_readable() {
        assert!(std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|s| parse_stat_times(&s))
            .is_some());
    }

    #[zcnet_testkit::test]
    fn dates_print_as_iperf3_does() {
        // iperf3 3.12 printed "Sun, 22 Nov 2026 13:01:23 GMT" with timesecs 1795352483.
        assert_eq!(http_date(1_795_352_483), "Sun, 22 Nov 2026 13:01:23 GMT");
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
    }
}
