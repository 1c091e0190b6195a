//! SIGINT/SIGTERM/SIGHUP: the handlers, the interrupt flag and pipe that wake every wait, the
//! caller's own stop flag set with them, and SIGTERM to a child.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, Ordering};
use std::sync::Arc;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// The read end of the interrupt pipe (-1 until [`install_interrupt_handler`]); readable from
/// the first SIGINT/SIGTERM/SIGHUP on, until [`set_interrupted`]`(false)` drains it.
pub(super) static WAKE_READ: AtomicI32 = AtomicI32::new(-1);
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
///
/// [`wait_fd`]: super::wait_fd
/// [`sleep`]: super::sleep
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
///
/// [`wait_fd`]: super::wait_fd
/// [`sleep`]: super::sleep
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

/// Sends SIGTERM to process `pid` (kill(2)), e.g. to a child when this process was asked to
/// stop and the child, not being in the terminal's foreground group, did not get the signal.
pub fn terminate(pid: u32) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: kill takes a pid and a signal number; no memory is passed.
    crate::cvt(unsafe { libc::kill(pid, libc::SIGTERM) }).map(drop)
}
