//! The calling thread's and the process's CPU time, the coarse monotonic clock, and CPU
//! affinity.

use std::io;

/// `RUSAGE_THREAD` (Linux 2.6.26).
const RUSAGE_THREAD: libc::c_int = 1;

/// Field `n` (1-based, as proc(5) numbers them, 3 or later) of a `/proc/<pid>/stat` line,
/// as a number. The command name (field 2) is in parentheses and may itself hold spaces and
/// parentheses, so the fields are counted after the last ')'.
pub fn stat_field(stat: &str, n: usize) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After ')' comes field 3 (state).
    rest.split_whitespace().nth(n.checked_sub(3)?)?.parse().ok()
}

/// CPU seconds (user + system) the calling thread has used.
pub fn thread_cpu_seconds() -> f64 {
    cpu_seconds(RUSAGE_THREAD)
}

/// CLOCK_MONOTONIC_COARSE (clock_gettime(2)): CLOCK_MONOTONIC as of the last timer tick, up to
/// a tick (1-10 ms, the kernel's HZ) behind it, read from the vDSO's data page without reading
/// the TSC. For deadlines checked often on a hot path, where a tick late is on time.
pub fn monotonic_coarse() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a live timespec the call fills; CLOCK_MONOTONIC_COARSE exists since Linux
    // 2.6.32 and cannot fail with a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// CPU seconds (user + system) every thread of this process has used (the NCCL plugin's
/// overhead harness counts both ends of a transfer in one process).
pub fn process_cpu_seconds() -> f64 {
    cpu_seconds(libc::RUSAGE_SELF)
}

fn cpu_seconds(who: libc::c_int) -> f64 {
    // SAFETY: all-zero is a valid rusage.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: ru is a live rusage the kernel fills.
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The CPUs the calling thread may run on (`sched_getaffinity`), ascending.
pub fn thread_affinity() -> io::Result<Vec<usize>> {
    // SAFETY: all-zero is a valid (empty) cpu_set_t.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a live cpu_set_t of the size passed; pid 0 is the calling thread.
    crate::cvt(unsafe {
        libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set)
    })?;
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: CPU_ISSET reads bit `c` of `set`; `c` is below the set's size in bits.
    Ok((0..max)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Restricts the calling *thread* to `cpus` (`sched_setaffinity`); threads it spawns later
/// inherit the set. `EINVAL` when `cpus` is empty, names a CPU beyond `cpu_set_t`, or none of
/// them is online.
pub fn set_thread_affinity(cpus: &[usize]) -> io::Result<()> {
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    if cpus.is_empty() || cpus.iter().any(|&c| c >= max) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: all-zero is a valid (empty) cpu_set_t.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: `c < max` was checked, so the bit is inside `set`.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: `set` is a live cpu_set_t of the size passed; pid 0 is the calling thread.
    crate::cvt(unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) })
        .map(drop)
}

/// The CPU the calling thread runs on now (`sched_getcpu`).
pub fn current_cpu() -> io::Result<usize> {
    // SAFETY: sched_getcpu has no arguments.
    crate::cvt(unsafe { libc::sched_getcpu() }).map(|c| c as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The coarse clock moves with CLOCK_MONOTONIC, at most a tick (10 ms at HZ=100) behind.
    #[zcnet_testkit::test]
    fn the_coarse_clock_keeps_monotonic_time_within_a_tick() {
        let (c0, t0) = (super::monotonic_coarse(), std::time::Instant::now());
        std::thread::sleep(std::time::Duration::from_millis(40));
        let (c1, t1) = (super::monotonic_coarse(), std::time::Instant::now());
        let (coarse, fine) = (c1 - c0, t1 - t0);
        let skew = coarse.abs_diff(fine);
        assert!(
            skew <= std::time::Duration::from_millis(20),
            "coarse {coarse:?} against {fine:?}"
        );
    }

    #[zcnet_testkit::test]
    fn affinity_round_trip() {
        let cpus = thread_affinity().unwrap();
        assert!(!cpus.is_empty());
        let first = cpus[0];
        std::thread::spawn(move || {
            set_thread_affinity(&[first]).unwrap();
            assert_eq!(thread_affinity().unwrap(), vec![first]);
            assert_eq!(current_cpu().unwrap(), first);
        })
        .join()
        .unwrap();
        assert!(set_thread_affinity(&[]).is_err());
    }
}
