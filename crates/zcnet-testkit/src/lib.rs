//! zcnet's test harness, for every test target that does I/O (all but zcnet-core's sans-IO
//! tests and the command's pure argument tests, which stay on libtest).
//!
//! libtest has no way for a running test to say "I could not run": a test that returns early
//! without root or without `iperf3` reports `ok`, and its printed reason is hidden because it
//! passed. libtest also has no time limit, so a hang is a hang, not a failure. This harness,
//! built on `libtest-mimic` (libtest's output and flags), fixes both:
//!
//! - a test calls [`skip`] (or [`require_root`], [`require_tool`], [`require_kernel`]) and is
//!   reported as `ignored, <reason> [<need>]` in the normal `cargo test` output and counted as ignored
//!   in `test result:`;
//! - every test runs under a time limit ([`DEFAULT_TIMEOUT_S`], or `timeout = N` on its
//!   attribute, times `ZCNET_TEST_TIMEOUT_SCALE`) and fails naming itself when it runs over;
//! - with `ZCNET_TEST_STRICT=root,tool,kernel` (what CI sets: it is root and installs every
//!   tool) a skip for a need in that list is a failure instead: the machine could have run it.
//!
//! A test file (or a library's unit tests) opts in with `harness = false` for its target in
//! Cargo.toml, `#[zcnet_testkit::test]` on each test, and [`main!`] once. The workspace test
//! `no_libtest_tests_left` checks that no `#[test]` hides in such a target (it would never run).

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub mod cuda_standin;
pub mod signals;

#[doc(hidden)]
pub use inventory;
pub use zcnet_testkit_macros::test;

/// A test's time limit when its attribute names none, in seconds.
pub const DEFAULT_TIMEOUT_S: u64 = 120;

/// A test registered by `#[zcnet_testkit::test]` (built by the attribute, not by hand).
#[derive(Debug)]
pub struct Test {
    /// The function's name.
    pub name: &'static str,
    /// `module_path!()` where it stands.
    pub module: &'static str,
    /// Its own time limit in seconds, if it has one.
    pub timeout_s: Option<u64>,
    /// `Some(reason)` for a test kept out of normal runs (`#[ignore]`).
    pub ignored: Option<&'static str>,
    /// Runs it.
    pub run: fn() -> Result<(), String>,
}

inventory::collect!(Test);

/// What a test function may return: nothing, or a `Result` whose error fails it.
pub trait TestResult {
    /// `Err(message)` fails the test.
    fn into_result(self) -> Result<(), String>;
}

impl TestResult for () {
    fn into_result(self) -> Result<(), String> {
        Ok(())
    }
}

impl<E: fmt::Debug> TestResult for Result<(), E> {
    fn into_result(self) -> Result<(), String> {
        self.map_err(|e| format!("{e:?}"))
    }
}

/// Why a test could not run here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Root (network namespaces, CAP_NET_ADMIN, CAP_BPF…).
    Root,
    /// A program that is not installed (iperf3, cc, setpriv, ip…).
    Tool,
    /// A kernel feature this kernel should have but refused or lacks (io_uring disabled, a
    /// ring flag refused).
    Kernel,
    /// A kernel release newer than this one ([`require_kernel`]): such tests run in the kernel
    /// lab (scripts/kernel-lab.sh), so CI allows this skip on its own older kernel.
    KernelVersion,
    /// Hardware this machine lacks (a GPU, a NIC with header split and queue management), or
    /// hardware it has that the test must not meet (a real CUDA driver).
    Hardware,
    /// Something a server outside this machine no longer serves or cannot be reached for (a
    /// pinned kernel package Debian dropped): not the machine's to fix, so CI allows it.
    Download,
}

impl Need {
    /// The name used in `ZCNET_TEST_STRICT` and in the reason shown.
    pub fn name(self) -> &'static str {
        match self {
            Need::Root => "root",
            Need::Tool => "tool",
            Need::Kernel => "kernel",
            Need::KernelVersion => "kernel-version",
            Need::Hardware => "hardware",
            Need::Download => "download",
        }
    }
}

/// The unwind payload of [`skip`].
#[derive(Debug)]
struct Skipped {
    need: Need,
    why: String,
}

/// Ends the calling test as skipped: it is reported `ignored (<why> [<need>])`. Works from
/// any depth of the test (helpers may call it) and from threads the test joins, if they pass
/// the panic on (`join().unwrap()` does not: use [`propagate`]).
pub fn skip(need: Need, why: impl fmt::Display) -> ! {
    // resume_unwind does not run the panic hook: no "panicked at" noise for a skip.
    std::panic::resume_unwind(Box::new(Skipped {
        need,
        why: why.to_string(),
    }))
}

/// Re-raises the outcome of a joined thread as it was (a skip stays a skip).
pub fn propagate<T>(r: std::thread::Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(p) => std::panic::resume_unwind(p),
    }
}

/// Whether the effective user is root (read from /proc: no unsafe here).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// Skips unless root; `what` says what needs it.
pub fn require_root(what: &str) {
    if !is_root() {
        skip(Need::Root, format!("needs root ({what})"));
    }
}

/// Whether `tool` is an executable file on `PATH` (or a path to one).
pub fn have_tool(tool: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let exec = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if tool.contains('/') {
        return exec(Path::new(tool));
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| exec(&d.join(tool))))
}

/// Skips unless `tool` is installed; `why` says what it is for.
pub fn require_tool(tool: &str, why: &str) {
    if !have_tool(tool) {
        skip(Need::Tool, format!("needs `{tool}` on PATH ({why})"));
    }
}

/// Whether a TCP socket listens on `port` (IPv4 or IPv6) in the network namespace of process
/// `pid` (`None`: this process's), from `/proc/PID/net/tcp{,6}`: state `0A` is TCP_LISTEN and the
/// local address is `ADDR:PORT` in hex. Lets a test wait for a server without connecting to it
/// (iperf3 takes a bare connect and close as a failed test).
pub fn tcp_listening(pid: Option<u32>, port: u16) -> bool {
    let want = format!(":{port:04X}");
    let dir = pid.map_or("/proc/net".to_string(), |p| format!("/proc/{p}/net"));
    ["tcp", "tcp6"].iter().any(|f| {
        std::fs::read_to_string(format!("{dir}/{f}")).is_ok_and(|t| {
            t.lines().any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3 && cols[1].ends_with(&want) && cols[3] == "0A"
            })
        })
    })
}

/// This kernel's (major, minor), from /proc/sys/kernel/osrelease.
pub fn kernel_version() -> Option<(u32, u32)> {
    let s = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let mut it = s.trim().split(['.', '-']);
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// Skips unless the kernel is at least `major.minor`; `what` names the feature.
pub fn require_kernel(major: u32, minor: u32, what: &str) {
    match kernel_version() {
        Some(v) if v >= (major, minor) => {}
        v => skip(
            Need::KernelVersion,
            format!(
                "{what} needs Linux {major}.{minor} (this is {})",
                v.map_or("unknown".to_string(), |(a, b)| format!("{a}.{b}"))
            ),
        ),
    }
}

/// The needs that `ZCNET_TEST_STRICT` forbids skipping (`all`, or names from [`Need::name`]);
/// public for harnesses of their own (the NCCL conformance harness) that keep the same rule.
pub fn strict_needs() -> Vec<Need> {
    let all = [
        Need::Root,
        Need::Tool,
        Need::Kernel,
        Need::KernelVersion,
        Need::Hardware,
        Need::Download,
    ];
    match std::env::var("ZCNET_TEST_STRICT") {
        Ok(v) if v.trim() == "all" => all.to_vec(),
        Ok(v) => all
            .into_iter()
            .filter(|n| v.split(',').any(|w| w.trim() == n.name()))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// The time limit for a test whose attribute says `own` seconds (None: the default), scaled by
/// `ZCNET_TEST_TIMEOUT_SCALE`.
pub fn limit(own: Option<u64>) -> Duration {
    let scale = std::env::var("ZCNET_TEST_TIMEOUT_SCALE")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(1.0);
    Duration::from_secs_f64(own.unwrap_or(DEFAULT_TIMEOUT_S) as f64 * scale)
}

/// The outcome of one test, as the harness decides it.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It ran and passed.
    Passed,
    /// It could not run here.
    Skipped(String),
    /// It failed (a panic, an error, a time-out, or a skip that strict mode forbids).
    Failed(String),
}

thread_local! {
    /// Set on the thread that runs a test's body (not on threads the test starts).
    static TEST_THREAD: Cell<bool> = const { Cell::new(false) };
    /// The last panic on this test thread: where, what, and a backtrace if RUST_BACKTRACE asks.
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// A panic hook that keeps a test thread's panic for its failure message instead of printing
/// it (libtest shows a failing test's output only, and so does this harness); panics of other
/// threads print as usual.
fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !TEST_THREAD.with(Cell::get) {
                return default(info);
            }
            let at = info
                .location()
                .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()))
                .unwrap_or_default();
            let bt = std::backtrace::Backtrace::capture();
            let bt = match bt.status() {
                std::backtrace::BacktraceStatus::Captured => format!("\n{bt}"),
                _ => String::new(),
            };
            let text = format!("{}\n  at {at}{bt}", panic_text(info.payload()));
            LAST_PANIC.with(|l| *l.borrow_mut() = Some(text));
        }));
    });
}

fn panic_text(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panicked".to_string()
    }
}

/// Runs `f` as the test `name` on a thread of its own, under `limit`; `strict` lists the needs
/// that may not be skipped. A test past its limit is left running (its thread is detached) and
/// reported failed; the process ends when the harness finishes.
pub fn run_bounded(
    name: &str,
    limit: Duration,
    strict: &[Need],
    f: fn() -> Result<(), String>,
) -> Outcome {
    install_panic_hook();
    let (tx, rx) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            TEST_THREAD.with(|t| t.set(true));
            let r = catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
                // The hook's text (with the location) when the panic came from this thread.
                let text = LAST_PANIC.with(|l| l.borrow_mut().take());
                (p, text)
            });
            let _ = tx.send(r);
        });
    if let Err(e) = spawned {
        return Outcome::Failed(format!("could not start a thread for it: {e}"));
    }
    let start = Instant::now();
    let r = rx.recv_timeout(limit);
    // A test near its limit is a hang waiting to happen on a slower machine: say so.
    let took = start.elapsed();
    if r.is_ok() && took > limit / 2 {
        eprintln!(
            "zcnet-testkit: {name} took {:.0} s of its {:.0} s limit",
            took.as_secs_f64(),
            limit.as_secs_f64()
        );
    }
    // A test (or a tool it runs) that deletes /dev/null leaves the machine broken for every
    // later process: the next `>/dev/null` makes it a regular file that collects what is
    // written to it, and what reads it (cargo's probe of rustc reads its stdin from it) gets
    // that text. Name the test that did it.
    if let Some(what) = dev_null_broken() {
        return Outcome::Failed(format!(
            "/dev/null is {what} after this test: a test or a tool it ran replaced it (repair: rm -f /dev/null; mknod -m 666 /dev/null c 1 3)"
        ));
    }
    match r {
        Ok(Ok(Ok(()))) => Outcome::Passed,
        Ok(Ok(Err(e))) => Outcome::Failed(e),
        Ok(Err((p, text))) => match p.downcast::<Skipped>() {
            Ok(s) if strict.contains(&s.need) => Outcome::Failed(format!(
                "skipped ({} [{}]), but ZCNET_TEST_STRICT says this machine must run it",
                s.why,
                s.need.name()
            )),
            Ok(s) => Outcome::Skipped(format!("{} [{}]", s.why, s.need.name())),
            Err(p) => Outcome::Failed(text.unwrap_or_else(|| panic_text(&*p))),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => Outcome::Failed(format!(
            "{name}: timed out after {:.0} s (its limit; ZCNET_TEST_TIMEOUT_SCALE scales it); where the process's threads wait:\n{}",
            start.elapsed().as_secs_f64(),
            thread_waits()
        )),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            Outcome::Failed("its thread ended without a result".to_string())
        }
    }
}

/// Runs `ip ARGS` (iproute2) and fails the test, with ip's stderr, when it does not succeed. A
/// child process starts in the network namespace of the thread that spawns it.
pub fn ip(args: &[&str]) {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running ip (iproute2): {e}"));
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What /dev/null is when it is not the null character device (1:3): "missing", "a regular
/// file", …; `None` when it is fine.
pub fn dev_null_broken() -> Option<String> {
    not_null_device(std::path::Path::new("/dev/null"))
}

/// What `path` is when it is not the null character device (1:3); `None` when it is.
pub fn not_null_device(path: &std::path::Path) -> Option<String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    match std::fs::symlink_metadata(path) {
        Err(e) => Some(format!("unreadable ({e})")),
        Ok(m) if !m.file_type().is_char_device() => Some(if m.is_file() {
            format!("a regular file of {} B", m.len())
        } else {
            "not a character device".to_string()
        }),
        Ok(m) if m.rdev() != libc::makedev(1, 3) => {
            Some(format!("device {:#x}, not 1:3", m.rdev()))
        }
        Ok(_) => None,
    }
}

/// One line per thread of this process: its name, state and the kernel function it sleeps in
/// (`/proc/self/task/*/{comm,stat,wchan}`), and any child processes still running: what a
/// test that ran past its limit is stuck on (a connect in `inet_wait_for_connect`, an `ip`
/// command, a futex of a join).
pub fn thread_waits() -> String {
    let read = |p: std::path::PathBuf| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    let mut lines = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return "  (no /proc/self/task)".to_string();
    };
    for t in tasks.flatten() {
        let d = t.path();
        let stat = read(d.join("stat"));
        // Field 3, after the parenthesised comm (which may hold spaces).
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split(' ').next())
            .unwrap_or("?")
            .to_string();
        lines.push(format!(
            "  thread {} '{}' {state} in {}",
            t.file_name().to_string_lossy(),
            read(d.join("comm")),
            read(d.join("wchan"))
        ));
    }
    lines.sort();
    let me = std::process::id().to_string();
    if let Ok(procs) = std::fs::read_dir("/proc") {
        for p in procs.flatten() {
            let stat = read(p.path().join("stat"));
            let ppid = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.split(' ').nth(1));
            if ppid == Some(me.as_str()) {
                let cmd = read(p.path().join("cmdline")).replace('\0', " ");
                lines.push(format!(
                    "  child {} '{}' in {}",
                    p.file_name().to_string_lossy(),
                    cmd.trim(),
                    read(p.path().join("wchan"))
                ));
            }
        }
    }
    lines.join("\n")
}

/// The name libtest would give: the module path without the crate, then the function.
fn full_name(t: &Test) -> String {
    match t.module.split_once("::") {
        Some((_, rest)) => format!("{rest}::{}", t.name),
        None => t.name.to_string(),
    }
}

/// Runs every registered test with libtest's flags and output, then exits.
pub fn run_main() -> ! {
    let args = libtest_mimic::Arguments::from_args();
    let strict = strict_needs();
    let mut tests: Vec<&'static Test> = inventory::iter::<Test>.into_iter().collect();
    tests.sort_by_key(|t| full_name(t));
    // libtest-mimic prints a test ignored by its flag as a bare "ignored". Unless the run asks
    // for ignored tests (then the flag selects them), an `#[ignore = "why"]` test is instead
    // reported at run time, so its line says why ("ignored, run by its parent test ...").
    let wants_ignored = args.ignored || args.include_ignored;
    let trials = tests
        .into_iter()
        .map(|t| {
            let name = full_name(t);
            let strict = strict.clone();
            let n = name.clone();
            let static_skip = t.ignored.filter(|_| !wants_ignored);
            libtest_mimic::Trial::ignorable_test(name, move || {
                if let Some(why) = static_skip {
                    return Ok(libtest_mimic::Completion::ignored_with(if why.is_empty() {
                        "#[ignore] (run it with --ignored)"
                    } else {
                        why
                    }));
                }
                match run_bounded(&n, limit(t.timeout_s), &strict, t.run) {
                    Outcome::Passed => Ok(libtest_mimic::Completion::Completed),
                    Outcome::Skipped(why) => Ok(libtest_mimic::Completion::ignored_with(why)),
                    Outcome::Failed(msg) => Err(msg.into()),
                }
            })
            .with_ignored_flag(t.ignored.is_some() && wants_ignored)
        })
        .collect();
    libtest_mimic::run(&args, trials).exit()
}

/// The `main` of a test target with `harness = false`: `zcnet_testkit::main!();` at the top
/// level of an integration test file, or under `#[cfg(test)]` in a library's root.
#[macro_export]
macro_rules! main {
    () => {
        fn main() {
            $crate::run_main()
        }
    };
}
