//! Running commands in the kernel lab's guest (`scripts/kernel-lab.sh`; docs/design.md, "Kernel
//! lab"), shared by the tests that boot one.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

/// The lab script of this checkout.
pub fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts/kernel-lab.sh")
        .canonicalize()
        .unwrap()
}

/// Runs `kernel-lab.sh ARGS` with `env` added (no guest is started unless ARGS ask for one).
pub fn lab(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new("bash")
        .arg(script())
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// One guest at a time in a test binary: two TCG guests of 2 vCPUs each on a 2-core machine
/// only slow each other down.
static ONE_GUEST: Mutex<()> = Mutex::new(());

/// Runs CMD as root under `kernel` with `env` added to this environment, its guest killed after
/// `timeout_s`. Skips the calling test when the lab could not start (exit 2 before any boot:
/// the script's last line says why and the fix): as `download` when Debian's archive is
/// unreachable or no longer serves the pinned kernel (not this machine's to fix; CI allows
/// it), else as `tool` (qemu or busybox missing).
pub fn guest(kernel: &str, timeout_s: u32, cmd: &[&str], env: &[(&str, &str)]) -> Output {
    let timeout = timeout_s.to_string();
    let mut args = vec!["--kernel", kernel, "--timeout", &timeout, "--"];
    args.extend_from_slice(cmd);
    let o = {
        let _one = ONE_GUEST.lock().unwrap_or_else(|e| e.into_inner());
        lab(&args, env)
    };
    let err = String::from_utf8_lossy(&o.stderr);
    if o.status.code() == Some(2) && !err.contains("kernel-lab: booting") {
        let line = err
            .lines()
            .rev()
            .find(|l| l.starts_with("kernel-lab: "))
            .unwrap_or("kernel-lab exited 2 without a reason")
            .to_string();
        let need = if line.contains("cannot fetch Debian's") || line.contains("downloading ") {
            zcnet_testkit::Need::Download
        } else {
            zcnet_testkit::Need::Tool
        };
        zcnet_testkit::skip(need, line);
    }
    o
}

/// A copy of a built program that no concurrent `cargo build` replaces while the guest runs it
/// (the guest reads it over 9p), under the target directory, which the guest sees (its /tmp is
/// its own); removed on drop.
pub struct ExeCopy(PathBuf);

impl ExeCopy {
    /// A copy of `exe`, named after `what`.
    pub fn of(exe: &Path, what: &str) -> Self {
        // Tests of one binary run at once: each copy gets a name of its own.
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("kernel-lab-{what}-{}-{n}", std::process::id()));
        std::fs::copy(exe, &p).unwrap();
        ExeCopy(p)
    }

    /// A copy of the built `zcnet`.
    pub fn zcnet() -> Self {
        ExeCopy::of(Path::new(env!("CARGO_BIN_EXE_zcnet")), "zcnet")
    }

    /// Its path.
    pub fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for ExeCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
