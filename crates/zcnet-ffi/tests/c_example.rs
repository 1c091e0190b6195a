//! Compiles `examples/c/send_recv.c` with the system C compiler against the library cargo
//! just built (`libzcnet_ffi.so`, with the committed `include/zcnet.h`), runs it, and checks
//! that it exits 0 having verified every byte; compiles `examples/c/nic_recv.c` (a receiver on
//! a NIC queue, which runs for real in scripts/hw-suite.sh against the software NIC) and checks
//! its refusals here, where no NIC queue can be bound. Without a C compiler they are skipped.
//!
//! Cargo builds every crate type of the library (cdylib, staticlib, rlib) in the one rustc run
//! that integration tests depend on, into `target/<profile>/deps/` (a cdylib's name has no
//! hash), the directory this test's own executable is in; it also copies it up to
//! `target/<profile>/` when it compiles it, but not when it was already fresh.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `$CC`, else `cc`, if it runs.
fn c_compiler() -> Option<String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let works = Command::new(&cc)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    works.then_some(cc)
}

/// The library cargo built with this test: in `deps/` beside this executable, else in the
/// profile's directory above it.
fn built_library() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let deps = exe
        .parent()
        .expect("the test runs from target/<profile>/deps");
    let candidates = [
        deps.to_path_buf(),
        deps.parent().unwrap_or(deps).to_path_buf(),
    ];
    candidates
        .iter()
        .map(|d| d.join("libzcnet_ffi.so"))
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!(
                "libzcnet_ffi.so is in none of {candidates:?}: cargo should have built the cdylib with this test"
            )
        })
}

/// Runs `cmd` to its end or kills it after `limit`; returns (exit code, stdout, stderr).
fn run_bounded(cmd: &mut Command, limit: Duration) -> (Option<i32>, String, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the example");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("waiting for the example") {
            break Some(s);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child
        .wait_with_output()
        .expect("reading the example's output");
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    let (stdout, stderr) = (text(out.stdout), text(out.stderr));
    match status {
        None => panic!("the example ran past {limit:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"),
        Some(s) => (s.code(), stdout, stderr),
    }
}

#[zcnet_testkit::test]
fn c_example_sends_and_verifies_8_mib() {
    let exe = compile("send_recv");
    let (code, out, err) = run_bounded(&mut Command::new(&exe), Duration::from_secs(120));
    assert_eq!(
        code,
        Some(0),
        "the example failed\nstdout:\n{out}\nstderr:\n{err}"
    );
    let version = format!("zcnet {}", env!("CARGO_PKG_VERSION"));
    for want in [
        version.as_str(),
        "error path: ZCNET_E_INVALID: zcnet_receiver_new: out is NULL",
        "receiver: listening on 127.0.0.1:",
        "sender: mode=auto bytes=8388608 zerocopy=",
        "receiver: mode=",
        "held=0",
        "verified 8388608 bytes: OK",
    ] {
        assert!(
            out.contains(want),
            "{want:?} is not in the output:\n{out}\nstderr:\n{err}"
        );
    }
    // The sender's accounting adds up: every byte is either zero-copy or copied.
    let line = out
        .lines()
        .find(|l| l.starts_with("sender:"))
        .unwrap_or_default();
    let field = |name: &str| -> u64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {line:?}"))
    };
    assert_eq!(
        field("zerocopy=") + field("copied="),
        field("bytes="),
        "{line}"
    );
}

/// Compiles `examples/c/<name>.c` with `-Werror` against the library; the executable.
fn compile(name: &str) -> PathBuf {
    let Some(cc) = c_compiler() else {
        zcnet_testkit::skip(
            zcnet_testkit::Need::Tool,
            format!("no C compiler ($CC or cc) to build examples/c/{name}.c"),
        );
    };
    let lib = built_library();
    let lib_dir = lib.parent().expect("a directory").to_path_buf();
    let root = workspace_root();
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let mut c = Command::new(&cc);
    c.args([
        "-std=c11",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-pedantic",
        "-O2",
    ])
    .arg(format!("-I{}", root.join("include").display()))
    .arg(root.join(format!("examples/c/{name}.c")))
    .arg(&lib)
    .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
    .arg("-o")
    .arg(&exe);
    let (code, out, err) = run_bounded(&mut c, Duration::from_secs(120));
    assert_eq!(
        code,
        Some(0),
        "compiling examples/c/{name}.c failed:\n{out}{err}"
    );
    exe
}

/// nic_recv.c's refusals: bad arguments are one line and exit 2 before anything is made; a
/// queue lo cannot give is zcnet's line (the call, its status, the kernel's errno and the
/// fix) and exit 1, with nothing printed on stdout.
#[zcnet_testkit::test]
fn c_nic_recv_refuses_in_one_line() {
    let exe = compile("nic_recv");
    let cases: [(&[&str], i32, &[&str]); 6] = [
        (&[], 2, &["--listen IP:PORT is needed"]),
        (&["--listen", "127.0.0.1:0"], 2, &["--iface IF is needed"]),
        (
            &["--listen", "127.0.0.1:0", "--iface", "lo", "--rx", "uring"],
            2,
            &["--rx: give zcrx or devmem", "uring"],
        ),
        (
            &["--listen", "127.0.0.1:0", "--iface", "lo", "--rx", "devmem"],
            2,
            &["add --mem udmabuf"],
        ),
        (
            &["--listen", "127.0.0.1:0", "--iface", "lo", "--area", "lots"],
            2,
            &["--area", "wants a number"],
        ),
        (
            &["--listen", "127.0.0.1:0", "--iface", "lo", "--timeout", "5"],
            1,
            &[
                "zcnet_receiver_new",
                "ZCNET_E_UNSUPPORTED",
                "zcrx",
                "lo queue",
            ],
        ),
    ];
    for (args, want, words) in cases {
        let (code, out, err) = run_bounded(Command::new(&exe).args(args), Duration::from_secs(30));
        assert_eq!(code, Some(want), "nic_recv {args:?}: {err}");
        assert!(out.is_empty(), "nic_recv {args:?} printed on stdout: {out}");
        assert_eq!(err.lines().count(), 1, "nic_recv {args:?}: {err}");
        for w in words {
            assert!(
                err.contains(w),
                "{w:?} is not in nic_recv {args:?}'s line: {err}"
            );
        }
    }
}

zcnet_testkit::main!();
