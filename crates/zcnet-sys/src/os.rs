//! Process and thread calls: CPU time, RLIMIT_MEMLOCK, privileges, network namespaces, interrupts.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};

/// `RUSAGE_THREAD` (Linux 2.6.26).
const RUSAGE_THREAD: libc::c_int = 1;

/// CPU seconds (user + system) the calling thread has used.
pub fn thread_cpu_seconds() -> f64 {
    // SAFETY: all-zero is a valid rusage.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: ru is a live rusage the kernel fills.
    if unsafe { libc::getrusage(RUSAGE_THREAD, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// RLIMIT_MEMLOCK as (soft, hard); `u64::MAX` is unlimited.
pub fn memlock_limit() -> io::Result<(u64, u64)> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: r is a live rlimit the kernel fills.
    crate::cvt(unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) })?;
    Ok((r.rlim_cur, r.rlim_max))
}

/// Sets the soft RLIMIT_MEMLOCK (tests use this to provoke `ENOMEM` on registration).
pub fn set_memlock_soft(soft: u64) -> io::Result<()> {
    let (_, hard) = memlock_limit()?;
    let r = libc::rlimit {
        rlim_cur: soft.min(hard),
        rlim_max: hard,
    };
    // SAFETY: r is a live rlimit the kernel reads.
    crate::cvt(unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &r) }).map(drop)
}

/// Whether the effective user is root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Whether the process has CAP_IPC_LOCK (pinned pages are then not charged to RLIMIT_MEMLOCK).
pub fn has_cap_ipc_lock() -> bool {
    // CapEff in /proc/self/status; CAP_IPC_LOCK is bit 14 (include/uapi/linux/capability.h).
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << 14) != 0)
}

/// Moves the calling *thread* into the network namespace of `ns` (an fd of /run/netns/NAME).
/// Sockets created afterwards belong to that namespace; sockets keep their namespace for life.
pub fn enter_netns(ns: &std::fs::File) -> io::Result<()> {
    // SAFETY: setns takes an fd we own (borrowed for the call) and a flag; no memory is passed.
    crate::cvt(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) }).map(drop)
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Installs SIGINT/SIGTERM handlers that only set a flag ([`interrupted`]), so that long runs can
/// stop at their next check and clean up (namespaces, registrations) on the normal path.
/// Without `SA_RESTART`: a blocking call returns `EINTR` in the thread that took the signal.
pub fn install_interrupt_handler() -> io::Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: all-zero is a valid sigaction; the handler only stores to an atomic, which is
        // async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            crate::cvt(libc::sigaction(sig, &sa, std::ptr::null_mut()))?;
        }
    }
    Ok(())
}

/// Whether SIGINT or SIGTERM arrived since [`install_interrupt_handler`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// Sets or clears the interrupt flag (tests; and a caller that wants to stop its own runs).
pub fn set_interrupted(v: bool) {
    INTERRUPTED.store(v, Ordering::SeqCst);
}
