//! The C ABI where it touches CUDA memory, against the CUDA driver stand-in (not a GPU; see
//! zcnet-testkit's `cuda_standin`): `tests/c/cuda_region.c`, compiled with `cc` against
//! `libzcnet_ffi.so`, makes a "cuda" region, refuses "cuda:5", probes the GPU section, and sends
//! a seeded pattern from the device region to a listener here, which checks every byte; and
//! receives a pattern into a device region (`zcnet_receiver_copy_to_device`) and reads it back.
//! The stand-in's summary must show nothing leaked by the C program's handles.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use zcnet_testkit::cuda_standin::{self, Summary, Variant};

zcnet_testkit::main!();

/// The cdylib cargo built with this test (in `deps/` beside it, else the profile directory).
fn built_library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [deps, deps.parent().unwrap_or(deps)]
        .iter()
        .map(|d| d.join("libzcnet_ffi.so"))
        .find(|p| p.exists())
        .expect("cargo builds libzcnet_ffi.so with this test")
}

/// Compiles tests/c/cuda_region.c against the library and the committed header, once: the
/// tests run in parallel, and a second compile to the same path while the first test runs the
/// program failed the run with ETXTBSY ("Text file busy").
fn compile() -> PathBuf {
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(compile_once).clone()
}

fn compile_once() -> PathBuf {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    zcnet_testkit::require_tool(&cc, "builds tests/c/cuda_region.c");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let lib = built_library();
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cuda_region");
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2"])
        .arg(format!("-I{}", root.join("include").display()))
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/cuda_region.c"))
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.parent().unwrap().display()))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "compiling cuda_region.c: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Runs the C program with `arg` on the stand-in; returns its facts, its whole output, and the
/// stand-in's summary (checked clean: the program's handles leaked nothing).
fn run(arg: &str) -> (BTreeMap<String, String>, String) {
    let (facts, all, _) = run_with_summary(arg);
    (facts, all)
}

/// `run`, with the stand-in's summary too.
fn run_with_summary(arg: &str) -> (BTreeMap<String, String>, String, Summary) {
    let standin = cuda_standin::build(Variant::Full);
    let exe = compile();
    let summary = cuda_standin::summary_path("ffi");
    let run = Command::new(&exe)
        .arg(arg)
        .env("ZCNET_LIBCUDA", &standin)
        .env("ZCNET_STANDIN_SUMMARY", &summary)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    let all = format!(
        "{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(run.status.success(), "{:?}: {all}", run.status);
    let facts = stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let s = Summary::read(&summary);
    s.assert_clean();
    let all = format!("{all}\n{s}");
    (facts, all, s)
}

fn fact<'a>(facts: &'a BTreeMap<String, String>, k: &str, all: &str) -> &'a str {
    facts
        .get(k)
        .map(String::as_str)
        .unwrap_or_else(|| panic!("no {k}: {all}"))
}

#[zcnet_testkit::test(timeout = 300)]
fn c_abi_cuda_regions_on_the_stand_in() {
    let (f, all) = run("-");
    // A device that does not exist is a bad argument, with the devices there are.
    assert_eq!(fact(&f, "cuda5_status", &all), "ZCNET_E_INVALID", "{all}");
    assert!(
        fact(&f, "cuda5_error", &all).contains("one CUDA device (cuda:0)"),
        "{all}"
    );
    assert_eq!(fact(&f, "probe_names_stand_in", &all), "1", "{all}");
    assert_eq!(fact(&f, "probe_export_confirmed", &all), "1", "{all}");
    assert_eq!(fact(&f, "region_device", &all), "0", "{all}");
    assert_eq!(
        fact(&f, "region_len", &all),
        (1u64 << 20).to_string(),
        "{all}"
    );
}

/// A C program sends from a CUDA region: `zcnet_sender_connect` takes the library's GPU send
/// path (`zcnet::gpu::GpuSender`, as `zcnet send --mem cuda` does: devmem TX where the NIC can,
/// else staging through pinned host buffers), never registering device memory with io_uring
/// (EFAULT before, found by the stand-in). Every byte received is checked against the pattern
/// and the stand-in's summary must show nothing leaked.
#[zcnet_testkit::test(timeout = 300)]
fn c_abi_sends_from_a_cuda_region_on_the_stand_in() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let reader = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        got
    });
    let (f, all) = run(&addr);
    assert_eq!(fact(&f, "connect_status", &all), "ZCNET_OK", "{all}");
    // Loopback has no netmem TX: staging, whose host leg under auto is auto (SEND_ZC until the
    // kernel says it copies).
    assert_eq!(fact(&f, "mode", &all), "auto", "{all}");
    assert_eq!(
        fact(&f, "device_buffers_have_no_data_pointer", &all),
        "1",
        "{all}"
    );
    let total: u64 = 4 << 20;
    assert_eq!(fact(&f, "sent", &all), total.to_string(), "{all}");
    let got = zcnet_testkit::propagate(reader.join());
    assert_eq!(got.len() as u64, total, "{all}");
    let mut want = vec![0u8; got.len()];
    zcnet_core::pattern::Pattern::new(7).fill(0, &mut want);
    assert!(
        got == want,
        "the bytes sent from the CUDA region differ from the pattern"
    );
}

/// A C program receives into a CUDA region: every buffer of a uring receiver goes to the device
/// by `zcnet_receiver_copy_to_device` at its stream offset (asynchronous copies out of the
/// pinned receive ring, `zcnet::gpu::DeviceFill`), `zcnet_receiver_device_wait` waits for them,
/// and `zcnet_region_read` reads the region back: the pattern, byte for byte. A copy-mode
/// receiver is refused with the buffer still lent, host memory and unknown buffers are bad
/// arguments, a read outside the region too; nothing leaked.
#[zcnet_testkit::test(timeout = 300)]
fn c_abi_receives_into_a_cuda_region_on_the_stand_in() {
    let (f, all, s) = run_with_summary("recv");
    assert_eq!(
        fact(&f, "copy_mode_status", &all),
        "ZCNET_E_UNSUPPORTED",
        "{all}"
    );
    assert_eq!(fact(&f, "copy_mode_release", &all), "ZCNET_OK", "{all}");
    assert_eq!(
        fact(&f, "host_region_status", &all),
        "ZCNET_E_INVALID",
        "{all}"
    );
    assert_eq!(
        fact(&f, "unknown_buf_status", &all),
        "ZCNET_E_INVALID",
        "{all}"
    );
    assert_eq!(fact(&f, "writer_ok", &all), "1", "{all}");
    let total = (3u64 << 20) + 77;
    assert_eq!(fact(&f, "recv_bytes", &all), total.to_string(), "{all}");
    assert_eq!(fact(&f, "recv_verified", &all), "1", "{all}");
    assert_eq!(fact(&f, "held", &all), "0", "{all}");
    assert_eq!(
        fact(&f, "read_outside_status", &all),
        "ZCNET_E_INVALID",
        "{all}"
    );
    assert!(
        s.count("async_htod") >= 48,
        "too few asynchronous copies: {all}"
    );
    assert!(s.count("registers") >= 1, "{all}");
}
