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

/// Moves the calling *thread* into a new, private network namespace (`unshare(CLONE_NEWNET)`):
/// it holds only a loopback device (ifindex 1), down. Other threads keep theirs. The namespace
/// goes away when nothing uses it any more (this thread has exited or moved, and its sockets and
/// rings are closed). Needs CAP_SYS_ADMIN. Tests use it to touch no device of the root namespace.
pub fn unshare_netns() -> io::Result<()> {
    // SAFETY: unshare takes only a flag; CLONE_NEWNET changes this thread's network namespace
    // and nothing in this process's memory.
    crate::cvt(unsafe { libc::unshare(libc::CLONE_NEWNET) }).map(drop)
}

/// The running kernel's release as (major, minor, patch), from `/proc/sys/kernel/osrelease`
/// (`6.18.44-fc-v669` gives `(6, 18, 44)`); `None` when unreadable.
pub fn kernel_version() -> Option<(u32, u32, u32)> {
    let s = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    parse_kernel_release(s.trim())
}

fn parse_kernel_release(s: &str) -> Option<(u32, u32, u32)> {
    let mut it = s.split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    let patch = it.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    Some((major, minor, patch))
}

/// Runs `f` in a new thread that first moves into a private network namespace
/// ([`unshare_netns`]); the namespace dies with the thread. `None` (with a printed reason) when
/// not root, so that callers skip. A panic in `f` propagates.
#[cfg(test)]
pub(crate) fn in_private_netns<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    if !is_root() {
        eprintln!("skipped: needs root (a private network namespace)");
        return None;
    }
    let h = std::thread::spawn(move || {
        unshare_netns().expect("unshare(CLONE_NEWNET)");
        f()
    });
    match h.join() {
        Ok(v) => Some(v),
        Err(p) => std::panic::resume_unwind(p),
    }
}

#[cfg(test)]
mod netns_tests {
    use super::*;

    #[test]
    fn parses_kernel_releases() {
        assert_eq!(parse_kernel_release("6.18.44-fc-v669"), Some((6, 18, 44)));
        assert_eq!(parse_kernel_release("6.1.0-18-amd64"), Some((6, 1, 0)));
        assert_eq!(parse_kernel_release("6.15"), Some((6, 15, 0)));
        assert_eq!(parse_kernel_release("6.15-rc1"), Some((6, 15, 0)));
        assert_eq!(parse_kernel_release("garbage"), None);
        assert!(kernel_version().is_some());
    }

    #[test]
    fn unshare_netns_gives_a_private_loopback() {
        if !is_root() {
            eprintln!("skipped: unshare(CLONE_NEWNET) needs root");
            return;
        }
        let ours = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
        let before = ours.clone();
        std::thread::spawn(move || {
            unshare_netns().unwrap();
            let new = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
            assert_ne!(new, before);
            // Only `lo`, ifindex 1: the root namespace's devices are not visible.
            let index = |name: &str| {
                let c = std::ffi::CString::new(name).unwrap();
                // SAFETY: c is a NUL-terminated string that outlives the call.
                unsafe { libc::if_nametoindex(c.as_ptr()) }
            };
            assert_eq!(index("lo"), 1);
            assert_eq!(index("eth0"), 0);
            assert_eq!(index("ifb0"), 0);
        })
        .join()
        .unwrap();
        // This thread is unchanged.
        assert_eq!(
            std::fs::read_link("/proc/thread-self/ns/net").unwrap(),
            ours
        );
    }
}
