//! Process and thread calls: CPU time, RLIMIT_MEMLOCK, privileges, network namespaces, interrupts.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, Ordering};
use std::sync::Arc;

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

/// Whether this kernel charges an io_uring ring's own memory (its rings and SQE regions) to
/// RLIMIT_MEMLOCK of a process without CAP_IPC_LOCK: Linux 6.18 does (io_uring/memmap.c
/// `io_create_region`), 7.2 no longer does (only registered buffers are charged there).
/// Measured once per process and cached: a forked child drops CAP_IPC_LOCK from its effective
/// set, sets its soft limit to 0 (any charge then fails, whatever else the user has locked) and
/// sets up a one-entry ring: `ENOMEM` means the ring is charged, success that it is not. `None`
/// when it cannot tell (io_uring disabled or missing, fork refused).
pub fn uring_rings_charged() -> Option<bool> {
    static CHARGED: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    *CHARGED.get_or_init(measure_uring_rings_charged)
}

fn measure_uring_rings_charged() -> Option<bool> {
    // `struct __user_cap_header_struct` / `__user_cap_data_struct` (linux/capability.h), v3.
    #[repr(C)]
    struct CapHeader {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct CapData {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    const CAP_IPC_LOCK: u32 = 14;
    let mut params = crate::uring_probe::IoUringParams::default();
    // SAFETY: fork has no preconditions; the child below makes only raw system calls on its own
    // stack (no allocation, no locks: safe after fork in a multithreaded process) and _exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return None;
    }
    if pid == 0 {
        let mut hdr = CapHeader {
            version: LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        let mut data = [CapData {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        // SAFETY: hdr and data are live locals of the layout capget/capset take (v3: two
        // data structs); setrlimit reads a live rlimit; io_uring_setup reads and writes
        // `params`, a live io_uring_params; _exit never returns.
        unsafe {
            if libc::syscall(
                libc::SYS_capget,
                &mut hdr as *mut CapHeader,
                data.as_mut_ptr(),
            ) == 0
            {
                data[0].effective &= !(1 << CAP_IPC_LOCK);
                libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr());
            }
            let mut r = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r);
            r.rlim_cur = 0;
            if libc::setrlimit(libc::RLIMIT_MEMLOCK, &r) != 0 {
                libc::_exit(3);
            }
            let ret = libc::syscall(
                libc::SYS_io_uring_setup,
                1u32,
                &mut params as *mut crate::uring_probe::IoUringParams,
            );
            let code = if ret >= 0 {
                0
            } else if *libc::__errno_location() == libc::ENOMEM {
                1
            } else {
                2
            };
            libc::_exit(code);
        }
    }
    let mut status = 0;
    loop {
        // SAFETY: status is a live int the kernel writes; pid is our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        if r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return None;
        }
    }
    if !libc::WIFEXITED(status) {
        return None;
    }
    match libc::WEXITSTATUS(status) {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    }
}

/// Moves the calling *thread* into the network namespace of `ns` (an fd of /run/netns/NAME).
/// Sockets created afterwards belong to that namespace; sockets keep their namespace for life.
pub fn enter_netns(ns: &std::fs::File) -> io::Result<()> {
    // SAFETY: setns takes an fd we own (borrowed for the call) and a flag; no memory is passed.
    crate::cvt(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) }).map(drop)
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// The read end of the interrupt pipe (-1 until [`install_interrupt_handler`]); readable from
/// the first SIGINT/SIGTERM/SIGHUP on, until [`set_interrupted`]`(false)` drains it.
static WAKE_READ: AtomicI32 = AtomicI32::new(-1);
/// The write end: the signal handler writes one byte to it.
static WAKE_WRITE: AtomicI32 = AtomicI32::new(-1);
static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
/// The flag given to [`set_on_interrupt`] (null: none), a leaked `Arc` that lives as long as the
/// process: the handler may store to it at any time.
static ON_INTERRUPT: AtomicPtr<AtomicBool> = AtomicPtr::new(std::ptr::null_mut());

/// Makes SIGINT/SIGTERM/SIGHUP (once [`install_interrupt_handler`] runs) also set `flag`, e.g. the
/// flag of the cancel token an application hands to the library, so that the token is set
/// before a system call cut short by the signal returns `EINTR`. One flag at a time: a later
/// call replaces it (the earlier one is kept alive, never freed, since a handler may be using
/// it). When SIGINT/SIGTERM/SIGHUP already arrived, `flag` is set at once.
pub fn set_on_interrupt(flag: Arc<AtomicBool>) {
    ON_INTERRUPT.store(Arc::into_raw(flag).cast_mut(), Ordering::SeqCst);
    if INTERRUPTED.load(Ordering::SeqCst) {
        set_registered(true);
    }
}

/// Stores `v` to the flag of [`set_on_interrupt`], if there is one. Async-signal-safe: an
/// atomic load and store.
fn set_registered(v: bool) {
    let p = ON_INTERRUPT.load(Ordering::SeqCst);
    // SAFETY: a non-null pointer came from Arc::into_raw in set_on_interrupt and is never
    // released, so it points to a live AtomicBool for the life of the process.
    if let Some(flag) = unsafe { p.as_ref() } {
        flag.store(v, Ordering::SeqCst);
    }
}

/// Writes one byte to the interrupt pipe, if there is one. Async-signal-safe: `write(2)` is on
/// the list of signal-safety(7); the pipe is non-blocking, so a full pipe (a byte is already
/// there, which is all a waiter needs) costs nothing.
fn wake_waiters() {
    let fd = WAKE_WRITE.load(Ordering::SeqCst);
    if fd >= 0 {
        let b = 1u8;
        // SAFETY: writes one byte from a live local to a descriptor this module owns for the
        // life of the process; the result is deliberately ignored (EAGAIN: already readable).
        let _ = unsafe { libc::write(fd, (&b as *const u8).cast(), 1) };
    }
}

extern "C" fn on_signal(_: libc::c_int) {
    // SAFETY: __errno_location returns this thread's errno; a handler must leave it as it found
    // it (signal-safety(7)), since the interrupted code may be about to read it.
    let saved = unsafe { *libc::__errno_location() };
    INTERRUPTED.store(true, Ordering::SeqCst);
    set_registered(true);
    wake_waiters();
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved };
}

/// Installs SIGINT/SIGTERM/SIGHUP handlers that set a flag ([`interrupted`]) and make the interrupt
/// pipe readable, so that long runs stop at their next check and clean up (namespaces,
/// registrations) on the normal path, and every blocking wait made with [`wait_fd`] or
/// [`sleep`] returns at once, whichever thread the kernel delivered the signal to
/// (the self-pipe trick: pipe(2), poll(2), signal-safety(7)).
///
/// SIGHUP (the terminal went away, e.g. an ssh session dropped while `zcnet nic setup` held a
/// NIC) is taken the same way, unless the process was started with it ignored (`nohup`): its
/// default action would end the process with the NIC or the namespaces left as they were.
///
/// The handlers are installed without `SA_RESTART` (sigaction(2)): a blocking call in the
/// thread that took the signal fails with `EINTR` instead of being restarted. Calling this
/// again is harmless.
pub fn install_interrupt_handler() -> io::Result<()> {
    let _one_at_a_time = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
    if WAKE_READ.load(Ordering::SeqCst) < 0 {
        let mut fds = [-1 as libc::c_int; 2];
        // SAFETY: fds is a live array of two c_ints the kernel fills (pipe2(2)).
        crate::cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) })?;
        // The write end first: a waiter that sees the read end can rely on the handler.
        WAKE_WRITE.store(fds[1], Ordering::SeqCst);
        WAKE_READ.store(fds[0], Ordering::SeqCst);
        if INTERRUPTED.load(Ordering::SeqCst) {
            wake_waiters();
        }
    }
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: all-zero is a valid sigaction; the handler only stores to an atomic and calls
        // write(2), both async-signal-safe, and restores errno. Reading the old action (a NULL
        // new one) changes nothing.
        unsafe {
            if sig == libc::SIGHUP {
                let mut old: libc::sigaction = std::mem::zeroed();
                crate::cvt(libc::sigaction(sig, std::ptr::null(), &mut old))?;
                if old.sa_sigaction == libc::SIG_IGN {
                    continue;
                }
            }
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            crate::cvt(libc::sigaction(sig, &sa, std::ptr::null_mut()))?;
        }
    }
    Ok(())
}

/// Whether SIGINT, SIGTERM or SIGHUP arrived since [`install_interrupt_handler`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// Sets or clears the interrupt flag, and the flag of [`set_on_interrupt`] with it (tests; and a
/// caller that wants to stop its own runs). Setting it wakes every [`wait_fd`] and [`sleep`] as a signal would; clearing it drains the
/// interrupt pipe so that they wait again.
pub fn set_interrupted(v: bool) {
    INTERRUPTED.store(v, Ordering::SeqCst);
    set_registered(v);
    if v {
        wake_waiters();
        return;
    }
    let fd = WAKE_READ.load(Ordering::SeqCst);
    if fd >= 0 {
        let mut buf = [0u8; 64];
        // SAFETY: reads into a live local buffer of the size given; the pipe is non-blocking, so
        // the loop ends at EAGAIN once it is empty.
        while unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
    }
}

/// How a [`wait_fd`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The descriptor is ready: its `revents` (may include `POLLERR`/`POLLHUP`).
    Ready(i16),
    /// SIGINT, SIGTERM or SIGHUP arrived (or [`set_interrupted`]`(true)`), or for [`wait_fd_until`] its
    /// stop flag was set (for [`poll_until`] ending at signals: or a signal came): stop and clean
    /// up.
    Interrupted,
    /// The timeout passed first.
    TimedOut,
}

/// Waits until `fd` is ready for `events` (`POLLIN`, `POLLOUT`, ...), SIGINT/SIGTERM/SIGHUP arrives, or
/// `timeout` (none: no limit) passes — poll(2) on `fd` and on the interrupt pipe of
/// [`install_interrupt_handler`] (without it, only the flag checked around an `EINTR` ends the
/// wait early). An interrupt wins over readiness. `EINTR` is handled here: it ends the wait
/// only when the interrupt flag is set, else the wait goes on for the time left.
pub fn wait_fd(
    fd: std::os::fd::BorrowedFd<'_>,
    events: i16,
    timeout: Option<std::time::Duration>,
) -> io::Result<Wake> {
    poll_with_wake(Some((fd.as_raw_fd(), events)), timeout)
}

/// The longest single poll(2) of [`wait_fd_until`] and [`sleep_until`]: how late at most they
/// see their stop flag set by another thread.
pub const STOP_CHECK: std::time::Duration = std::time::Duration::from_millis(20);

/// Waits until `fd` is ready for `events`, `stop` is set, or `timeout` (none: no limit) passes;
/// a stop wins over readiness. Unlike [`wait_fd`] it knows nothing of signals: `stop` belongs
/// to the caller, who may set it from any thread (or from a signal handler, see
/// [`set_on_interrupt`]), and is looked at between polls of at most [`STOP_CHECK`]. `EINTR`
/// ends the wait only when `stop` is set, else the wait goes on for the time left.
pub fn wait_fd_until(
    fd: std::os::fd::BorrowedFd<'_>,
    events: i16,
    timeout: Option<std::time::Duration>,
    stop: &AtomicBool,
) -> io::Result<Wake> {
    poll_until(Some((fd.as_raw_fd(), events)), timeout, stop, false)
}

/// Sleeps for `d`, or less when `stop` is set (looked at every [`STOP_CHECK`] at most);
/// returns whether it is.
pub fn sleep_until(d: std::time::Duration, stop: &AtomicBool) -> bool {
    if poll_until(None, Some(d), stop, false).is_err() {
        // poll without descriptors does not fail; if it ever did, sleep the plain way.
        std::thread::sleep(d);
    }
    stop.load(Ordering::SeqCst)
}

/// The wait of [`wait_fd_until`] and [`sleep_until`] (no `target`: a sleep), on a raw fd, with
/// a choice of what a signal does: with `eintr_ends` a poll cut short by one (`EINTR`: a
/// handler installed without `SA_RESTART`) ends the wait as [`Wake::Interrupted`], for callers
/// whose runtime runs its signal handlers between calls (CPython), leaving `stop` as it was;
/// without, the wait goes on for the time left.
pub fn poll_until(
    target: Option<(RawFd, i16)>,
    timeout: Option<std::time::Duration>,
    stop: &AtomicBool,
    eintr_ends: bool,
) -> io::Result<Wake> {
    let deadline = timeout.map(|t| std::time::Instant::now() + t);
    loop {
        if stop.load(Ordering::SeqCst) {
            return Ok(Wake::Interrupted);
        }
        let now = std::time::Instant::now();
        let left = deadline.map_or(STOP_CHECK, |d| d.saturating_duration_since(now));
        if deadline.is_some() && left.is_zero() {
            return Ok(Wake::TimedOut);
        }
        // Round up: a wait of 0.4 ms must not become a busy loop of 0 ms polls.
        let ms = left.min(STOP_CHECK).as_micros().div_ceil(1000) as libc::c_int;
        let (fd, events) = target.unwrap_or((-1, 0));
        // A negative fd is ignored by poll(2): without a target the call only sleeps.
        let mut pfd = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: one live pollfd, the count passed.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            let e = crate::last_err();
            if e.raw_os_error() == Some(libc::EINTR) {
                if eintr_ends {
                    return Ok(Wake::Interrupted);
                }
                continue;
            }
            return Err(e);
        }
        if target.is_some() && pfd.revents != 0 {
            if stop.load(Ordering::SeqCst) {
                return Ok(Wake::Interrupted);
            }
            return Ok(Wake::Ready(pfd.revents));
        }
    }
}

/// Sleeps for `d`, or less when SIGINT/SIGTERM/SIGHUP arrives; returns [`interrupted`] (poll(2) on the
/// interrupt pipe alone).
pub fn sleep(d: std::time::Duration) -> bool {
    match poll_with_wake(None, Some(d)) {
        Ok(_) => interrupted(),
        Err(_) => {
            // poll on a pipe we own does not fail; if it ever did, sleep the plain way.
            std::thread::sleep(d);
            interrupted()
        }
    }
}

fn poll_with_wake(
    target: Option<(RawFd, i16)>,
    timeout: Option<std::time::Duration>,
) -> io::Result<Wake> {
    let deadline = timeout.map(|t| std::time::Instant::now() + t);
    loop {
        if interrupted() {
            return Ok(Wake::Interrupted);
        }
        let ms: libc::c_int = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(std::time::Instant::now());
                // Round up: a wait of 0.4 ms must not become a busy loop of 0 ms polls.
                left.as_micros()
                    .div_ceil(1000)
                    .min(libc::c_int::MAX as u128) as libc::c_int
            }
        };
        let (fd, events) = target.unwrap_or((-1, 0));
        // A negative fd is ignored by poll(2): without a target (sleep) or without the pipe
        // (no handler installed), the other entry alone is waited on.
        let mut fds = [
            libc::pollfd {
                fd: WAKE_READ.load(Ordering::SeqCst),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd,
                events,
                revents: 0,
            },
        ];
        // SAFETY: two live pollfds, the count passed.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n < 0 {
            let e = crate::last_err();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        if fds[0].revents != 0 && interrupted() {
            return Ok(Wake::Interrupted);
        }
        if target.is_some() && fds[1].revents != 0 {
            return Ok(Wake::Ready(fds[1].revents));
        }
        if n == 0 && deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            return Ok(Wake::TimedOut);
        }
        if fds[0].revents != 0 {
            // Readable but the flag is clear: set_interrupted(false) raced with a signal's
            // byte. Drain it so that the wait does not spin.
            set_interrupted(false);
        }
    }
}

/// Sends SIGTERM to process `pid` (kill(2)), e.g. to a child when this process was asked to
/// stop and the child, not being in the terminal's foreground group, did not get the signal.
pub fn terminate(pid: u32) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: kill takes a pid and a signal number; no memory is passed.
    crate::cvt(unsafe { libc::kill(pid, libc::SIGTERM) }).map(drop)
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
/// ([`unshare_netns`]); the namespace dies with the thread. Without root the calling test is
/// skipped (reported as such by zcnet-testkit). A panic or skip in `f` propagates.
#[cfg(test)]
pub(crate) fn in_private_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    zcnet_testkit::require_root("a private network namespace");
    let h = std::thread::spawn(move || {
        unshare_netns().expect("unshare(CLONE_NEWNET)");
        f()
    });
    zcnet_testkit::propagate(h.join())
}

#[cfg(test)]
mod netns_tests {
    use super::*;

    #[zcnet_testkit::test]
    fn parses_kernel_releases() {
        assert_eq!(parse_kernel_release("6.18.44-fc-v669"), Some((6, 18, 44)));
        assert_eq!(parse_kernel_release("6.1.0-18-amd64"), Some((6, 1, 0)));
        assert_eq!(parse_kernel_release("6.15"), Some((6, 15, 0)));
        assert_eq!(parse_kernel_release("6.15-rc1"), Some((6, 15, 0)));
        assert_eq!(parse_kernel_release("garbage"), None);
        assert!(kernel_version().is_some());
    }

    #[zcnet_testkit::test]
    fn unshare_netns_gives_a_private_loopback() {
        zcnet_testkit::require_root("unshare(CLONE_NEWNET)");
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

// ---- CPU affinity, and the socket calls of the echo server (zcnet_tools::echo) and its tests ----

use std::os::fd::RawFd;

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

/// The most slices one [`send_vectored`] call passes (the rest is left for the next call).
pub const SEND_IOVECS: usize = 64;

/// `sendmsg(fd, {bufs}, flags | MSG_NOSIGNAL)` on a connected stream socket: one call for
/// several buffers (at most [`SEND_IOVECS`]); returns the bytes accepted, which may end
/// inside any of them.
pub fn send_vectored(fd: RawFd, bufs: &[&[u8]], flags: libc::c_int) -> io::Result<usize> {
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; SEND_IOVECS];
    let n = bufs.len().min(SEND_IOVECS);
    for (v, b) in iov.iter_mut().zip(bufs) {
        v.iov_base = b.as_ptr() as *mut libc::c_void;
        v.iov_len = b.len();
    }
    // SAFETY: all-zero is a valid msghdr (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = n as _;
    // SAFETY: `msg` points to `n` live iovecs, each describing a live slice of `bufs` that the
    // kernel only reads during the call; no name or control buffer is passed.
    let r = unsafe { libc::sendmsg(fd, &msg, flags | libc::MSG_NOSIGNAL) };
    if r < 0 {
        Err(crate::last_err())
    } else {
        Ok(r as usize)
    }
}

fn setsockopt_raw<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, val: &T) -> io::Result<()> {
    // SAFETY: `val` is a live T and its exact size is passed; the kernel only reads it.
    crate::cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (val as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// `SO_LINGER {on, 0}`: the next `close()` aborts the connection with a reset (RST) instead of
/// a FIN, dropping unsent data.
pub fn set_linger_zero(fd: RawFd) -> io::Result<()> {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    setsockopt_raw(fd, libc::SOL_SOCKET, libc::SO_LINGER, &l)
}

/// `SO_RCVBUF` (the kernel doubles it; setting it turns receive-buffer autotuning off).
pub fn set_recv_buffer(fd: RawFd, bytes: usize) -> io::Result<()> {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    setsockopt_raw(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &v)
}

/// `TCP_USER_TIMEOUT`: the connection fails with `ETIMEDOUT` (or the last soft error, e.g.
/// `EHOSTUNREACH`) when data it sent stays unacknowledged this long (Linux 2.6.37).
pub fn set_tcp_user_timeout(fd: RawFd, timeout: std::time::Duration) -> io::Result<()> {
    let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
    setsockopt_raw(fd, libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, &ms)
}

/// TCP keepalive: the first probe after `idle` without traffic, then every `interval`, and the
/// connection fails after `count` unanswered probes (or earlier, with `TCP_USER_TIMEOUT`).
/// Whole seconds, at least 1.
pub fn set_tcp_keepalive(
    fd: RawFd,
    idle: std::time::Duration,
    interval: std::time::Duration,
    count: u32,
) -> io::Result<()> {
    let secs = |d: std::time::Duration| d.as_secs().clamp(1, 32767) as libc::c_int;
    setsockopt_raw(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, &1 as &libc::c_int)?;
    setsockopt_raw(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, &secs(idle))?;
    setsockopt_raw(fd, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, &secs(interval))?;
    let cnt = count.clamp(1, 127) as libc::c_int;
    setsockopt_raw(fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, &cnt)
}

#[cfg(test)]
mod echo_support_tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsRawFd;

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

    #[zcnet_testkit::test]
    fn send_vectored_sends_every_slice_in_order() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut b, _) = l.accept().unwrap();
        let n = send_vectored(a.as_raw_fd(), &[b"ab", b"", b"cde"], 0).unwrap();
        assert_eq!(n, 5);
        drop(a);
        let mut got = Vec::new();
        b.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"abcde");
    }

    #[zcnet_testkit::test]
    fn linger_zero_close_resets_the_peer() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut b, _) = l.accept().unwrap();
        set_linger_zero(a.as_raw_fd()).unwrap();
        set_recv_buffer(a.as_raw_fd(), 65536).unwrap();
        set_tcp_user_timeout(a.as_raw_fd(), std::time::Duration::from_secs(1)).unwrap();
        set_tcp_keepalive(
            a.as_raw_fd(),
            std::time::Duration::from_secs(1),
            std::time::Duration::from_secs(1),
            2,
        )
        .unwrap();
        drop(a);
        let mut buf = [0u8; 8];
        let e = b.read(&mut buf).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ECONNRESET));
    }
}

/// The IP addresses of every interface that has one, as (interface name, address), from
/// getifaddrs(3), in the kernel's order.
pub fn interface_addresses() -> io::Result<Vec<(String, std::net::IpAddr)>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head to `head`; freed below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: cur is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: ifa_addr points to a sockaddr whose family says its real type and size.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        let ip = match family {
            libc::AF_INET => {
                // SAFETY: family AF_INET: the address is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                std::net::IpAddr::V4(std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)))
            }
            libc::AF_INET6 => {
                // SAFETY: family AF_INET6: the address is a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                std::net::IpAddr::V6(std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr))
            }
            _ => continue,
        };
        out.push((name, ip));
    }
    // SAFETY: head came from getifaddrs and is freed once; no node is used after this.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

#[cfg(test)]
mod tests {
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

    /// The kernel answers the probe, and as its release says: 6.18 charges the rings, 7.2 not.
    #[zcnet_testkit::test]
    fn uring_rings_charged_follows_the_kernel() {
        let charged = super::uring_rings_charged();
        match zcnet_testkit::kernel_version() {
            Some(v) if v >= (7, 2) => assert_eq!(charged, Some(false), "{v:?}"),
            Some(v) if ((6, 18)..(7, 0)).contains(&v) => assert_eq!(charged, Some(true), "{v:?}"),
            v => assert!(charged.is_some(), "{v:?}"),
        }
        // Cached: the same answer without another child.
        assert_eq!(super::uring_rings_charged(), charged);
    }
}
