//! The CUDA driver stand-in (`crates/zcnet-sys/tests/cuda-standin/standin.c`): a `libcuda.so.1`
//! written for zcnet's tests, built here with the system C compiler, for tests that run zcnet's
//! CUDA code on machines without a GPU (`ZCNET_LIBCUDA=<path>`). It is not a GPU: what runs
//! against it proves the driver API is used as the driver requires (contexts, asynchronous
//! copies that complete late, device memory the CPU cannot touch, nothing leaked), never speed.
//!
//! [`build`] compiles it once per source and variant into `target/<profile>/cuda-standin/`
//! (beside the test executables), skipping the test with [`Need::Tool`] when there is no `cc`.
//! [`Summary`] reads the counters it writes at exit to `ZCNET_STANDIN_SUMMARY`.

use crate::{skip, Need};
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};

/// The stand-in's C source, compiled into the test that asks for it.
const SOURCE: &str = include_str!("../../zcnet-sys/tests/cuda-standin/standin.c");

/// The exit status the stand-in gives a process that leaked driver objects.
pub const LEAK_EXIT: i32 = 86;

/// The device name the stand-in reports (`cuDeviceGetName`).
pub const DEVICE_NAME: &str = "zcnet stand-in";

/// Which stand-in to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// Every entry point zcnet calls, dma-buf export included (driver version 12.8).
    Full,
    /// Without `cuMemGetHandleForAddressRange`, as a driver older than CUDA 11.7 (11.4).
    NoDmabuf,
}

impl Variant {
    fn flags(self) -> &'static [&'static str] {
        match self {
            Variant::Full => &[],
            Variant::NoDmabuf => &["-DSTANDIN_NO_DMABUF"],
        }
    }
}

/// `$CC`, else `cc`, if it runs.
fn compiler() -> Option<String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    Command::new(&cc)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| cc)
}

/// Where built stand-ins go: `target/<profile>/cuda-standin/`, from this executable's path
/// (`target/<profile>/deps/<test>`), else the temporary directory.
fn out_root() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent()?.parent().map(Path::to_path_buf))
        .filter(|p| p.is_dir())
        .unwrap_or_else(std::env::temp_dir)
        .join("cuda-standin")
}

/// Builds the stand-in (once per source and variant; reused by later tests) and returns the
/// path of its `libcuda.so.1`. Skips the calling test with [`Need::Tool`] without a C compiler.
pub fn build(variant: Variant) -> PathBuf {
    let Some(cc) = compiler() else {
        skip(
            Need::Tool,
            "needs `cc` (or $CC) to build the CUDA driver stand-in",
        );
    };
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (SOURCE, variant.flags(), &cc).hash(&mut h);
    let dir = out_root().join(format!("{:016x}", h.finish()));
    let lib = dir.join("libcuda.so.1");
    if lib.exists() {
        return lib;
    }
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    // Several tests (threads and processes) may build at once: each writes its own files and
    // renames the library into place, which is atomic.
    static N: AtomicU64 = AtomicU64::new(0);
    let tag = format!(
        "{}.{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let src = dir.join(format!("standin.{tag}.c"));
    let tmp = dir.join(format!("libcuda.so.1.{tag}"));
    std::fs::write(&src, SOURCE).unwrap_or_else(|e| panic!("writing {}: {e}", src.display()));
    let out = Command::new(&cc)
        .args([
            "-shared",
            "-fPIC",
            "-O2",
            "-g",
            "-std=gnu11",
            "-Wall",
            "-Wextra",
            "-Werror",
        ])
        .args(variant.flags())
        .arg("-o")
        .arg(&tmp)
        .arg(&src)
        .arg("-lpthread")
        .output()
        .unwrap_or_else(|e| panic!("running {cc}: {e}"));
    let _ = std::fs::remove_file(&src);
    assert!(
        out.status.success(),
        "building the CUDA stand-in failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::rename(&tmp, &lib).unwrap_or_else(|e| panic!("renaming to {}: {e}", lib.display()));
    lib
}

/// The skip reason of a test that runs only inside [`run_child`]'s child process.
pub const CHILD: &str = "run by its parent test in a child process with the CUDA stand-in loaded";

/// Runs test `name` of this executable (marked `#[ignore = CHILD]`, starting with
/// [`in_child`]) in a child process with the stand-in `variant` loaded and `env` set; its
/// output and the stand-in's summary path.
pub fn run_child(name: &str, variant: Variant, env: &[(&str, &str)]) -> (Output, PathBuf) {
    let lib = build(variant);
    let summary = summary_path(name);
    let exe = std::env::current_exe().expect("the test executable's path");
    let out = Command::new(exe)
        .args([
            name,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("ZCNET_STANDIN_CHILD", "1")
        .env("ZCNET_LIBCUDA", &lib)
        .env("ZCNET_STANDIN_SUMMARY", &summary)
        .envs(env.iter().copied())
        .output()
        .expect("running the test executable as a child");
    (out, summary)
}

/// In a child of [`run_child`]: skips otherwise (never loads a real driver by accident).
pub fn in_child() {
    if std::env::var_os("ZCNET_STANDIN_CHILD").is_none() {
        skip(Need::Tool, CHILD);
    }
}

/// A child's status, stdout and stderr, for failure messages.
pub fn output_text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs the child `name` ([`run_child`]) and asserts it passed ([`assert_child_passed`]);
/// its summary.
pub fn child_passes(name: &str, variant: Variant, env: &[(&str, &str)]) -> Summary {
    let (o, summary) = run_child(name, variant, env);
    assert_child_passed(name, &o, &summary)
}

/// The child `name` passed (it ran, not skipped) and the stand-in saw nothing leaked or broken;
/// its summary.
pub fn assert_child_passed(name: &str, o: &Output, summary: &Path) -> Summary {
    assert!(
        o.status.success(),
        "{name} against the stand-in: {}",
        output_text(o)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("1 passed") && out.contains(&format!("{name} ... ok")),
        "{name} did not run: {}",
        output_text(o)
    );
    let s = Summary::read(summary);
    s.assert_clean();
    s
}

/// A fresh path for a stand-in summary (`ZCNET_STANDIN_SUMMARY`), named after `tag`.
pub fn summary_path(tag: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = out_root().join("summaries");
    let _ = std::fs::create_dir_all(&dir);
    let p = dir.join(format!(
        "{tag}.{}.{}.txt",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_file(&p);
    p
}

/// What the stand-in wrote at exit: `key=value` counters.
#[derive(Debug, Clone)]
pub struct Summary {
    path: PathBuf,
    fields: BTreeMap<String, String>,
}

impl Summary {
    /// Reads the summary at `path`; panics when it is missing (the process did not load the
    /// stand-in, or died before its exit handlers ran).
    pub fn read(path: &Path) -> Summary {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
            panic!(
                "no stand-in summary at {} ({e}): the process never loaded the stand-in or did not exit normally",
                path.display()
            )
        });
        let fields = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Summary {
            path: path.to_path_buf(),
            fields,
        }
    }

    /// A field as text.
    pub fn get(&self, key: &str) -> &str {
        self.fields
            .get(key)
            .unwrap_or_else(|| panic!("no {key} in the stand-in summary {}", self.path.display()))
    }

    /// A counter.
    pub fn count(&self, key: &str) -> u64 {
        let v = self.get(key);
        v.parse()
            .unwrap_or_else(|_| panic!("{key}={v} is not a number in {}", self.path.display()))
    }

    /// Panics unless nothing leaked, nothing was pending at exit and no rule was broken.
    pub fn assert_clean(&self) {
        assert_eq!(self.get("violation"), "none", "{self}");
        for k in [
            "leaked_allocations",
            "leaked_registrations",
            "leaked_streams",
            "leaked_events",
            "leaked_contexts",
            "leaked_dmabuf_fds",
            "pending_copies",
        ] {
            assert_eq!(self.count(k), 0, "{k}: {self}");
        }
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stand-in summary {}:", self.path.display())?;
        for (k, v) in &self.fields {
            write!(f, " {k}={v}")?;
        }
        Ok(())
    }
}
