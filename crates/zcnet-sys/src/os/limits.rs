//! What this process may do on this kernel: root, CAP_IPC_LOCK, RLIMIT_MEMLOCK, whether
//! io_uring rings are charged to it, and the kernel's release.

use std::io;

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

#[cfg(test)]
mod tests {
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
