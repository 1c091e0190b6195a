//! The fuzz smoke run of the `nccl_recv` target (fuzz/bodies/nccl_recv.rs), whose body drives
//! this crate's sans-IO [`proto`](nccl_net_zcnet::proto) and so is not built by the smoke test
//! of every other target, crates/zcnet-tools/tests/fuzz_smoke.rs (zcnet-tools does not depend
//! on this crate). The run is the same as there, and this file's helpers are a copy of that
//! file's: the body over every file of its kept corpus (fuzz/corpus/nccl_recv/), then over
//! seeded pseudo-random and mutated inputs.
//!
//! `ZCNET_FUZZ_SMOKE_RUNS` sets the number of generated inputs (default 5000);
//! `ZCNET_FUZZ_SMOKE_SEED` changes the seed (default: fixed, so a failure reproduces). A
//! failing input is printed in hex: save it as a file and replay it with
//! `cargo +nightly fuzz run -O nccl_recv <file>` in fuzz/.

#[path = "../../../fuzz/bodies/input.rs"]
mod input;
#[path = "../../../fuzz/bodies/nccl_recv.rs"]
mod nccl_recv;

use input::Rng;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The kept corpus of `target`, sorted by name.
fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = fuzz_dir().join("corpus").join(target);
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (the corpus is kept in the repository)",
                dir.display()
            )
        })
        .map(|e| {
            let path = e.expect("a directory entry").path();
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (name.unwrap_or_default(), bytes)
        })
        .collect();
    files.sort();
    files
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Runs `body` on `data`; on a panic, fails naming the target, the input and its bytes.
fn one(target: &str, what: &str, body: fn(&[u8]), data: &[u8]) {
    if catch_unwind(AssertUnwindSafe(|| body(data))).is_err() {
        panic!(
            "fuzz body {target} failed on {what}: {} bytes, hex {}",
            data.len(),
            hex(data)
        );
    }
}

/// A corpus file changed the way libFuzzer's mutators change one: bits flipped, bytes set,
/// inserted, erased, repeated, a piece of another file spliced in, the end cut.
fn mutate(base: &[u8], other: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut v = base.to_vec();
    for _ in 0..=(rng.next() % 4) {
        let at = |rng: &mut Rng, len: usize| (rng.next() % (len as u64 + 1)) as usize;
        match rng.next() % 7 {
            0 if !v.is_empty() => {
                let i = at(rng, v.len() - 1);
                v[i] ^= 1 << (rng.next() % 8);
            }
            1 if !v.is_empty() => {
                let i = at(rng, v.len() - 1);
                v[i] = [0, 0xff, 0x7f, 0x80, 1][(rng.next() % 5) as usize];
            }
            2 => {
                let i = at(rng, v.len());
                let n = 1 + rng.next() % 8;
                for _ in 0..n {
                    v.insert(i, rng.next() as u8);
                }
            }
            3 if !v.is_empty() => {
                let i = at(rng, v.len() - 1);
                let n = (1 + rng.next() % 16) as usize;
                v.drain(i..(i + n).min(v.len()));
            }
            4 if !v.is_empty() => {
                let i = at(rng, v.len() - 1);
                let n = (1 + rng.next() % 16) as usize;
                let piece: Vec<u8> = v[i..(i + n).min(v.len())].to_vec();
                let j = at(rng, v.len());
                v.splice(j..j, piece);
            }
            5 if !other.is_empty() => {
                let i = at(rng, other.len() - 1);
                let n = (1 + rng.next() % 32) as usize;
                let j = at(rng, v.len());
                v.splice(j..j, other[i..(i + n).min(other.len())].iter().copied());
            }
            _ => {
                let n = at(rng, v.len());
                v.truncate(n);
            }
        }
    }
    v
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The smoke run of one target: its corpus, then generated inputs, half of them random bytes
/// (mostly short), half mutated corpus files.
fn smoke(target: &str, body: fn(&[u8])) {
    let files = corpus(target);
    assert!(!files.is_empty(), "fuzz/corpus/{target}/ is empty");
    for (name, data) in &files {
        one(target, &format!("corpus file {name}"), body, data);
    }
    let runs = env_u64("ZCNET_FUZZ_SMOKE_RUNS", 5000);
    let seed = env_u64("ZCNET_FUZZ_SMOKE_SEED", 0x7a63_6e65_7466_757a);
    let mut rng = Rng(target.bytes().fold(seed, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    }));
    for i in 0..runs {
        let data = if i % 2 == 0 {
            let len = match rng.next() % 8 {
                0 => rng.next() % 1024,
                1..=3 => rng.next() % 64,
                _ => rng.next() % 256,
            };
            (0..len).map(|_| rng.next() as u8).collect::<Vec<u8>>()
        } else {
            let a = &files[(rng.next() % files.len() as u64) as usize].1;
            let b = &files[(rng.next() % files.len() as u64) as usize].1;
            mutate(a, b, &mut rng)
        };
        one(target, &format!("generated input {i}"), body, &data);
    }
}

#[zcnet_testkit::test]
fn nccl_recv() {
    smoke("nccl_recv", nccl_recv::run);
}

/// The body is a target of fuzz/, and that target runs it (zcnet-tools' smoke test checks that
/// it leaves this body to this file).
#[zcnet_testkit::test]
fn the_body_is_a_fuzz_target() {
    let toml = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).expect("fuzz/Cargo.toml");
    assert!(
        toml.contains("name = \"nccl_recv\"\npath = \"fuzz_targets/nccl_recv.rs\""),
        "fuzz/Cargo.toml has no [[bin]] nccl_recv"
    );
    let target = std::fs::read_to_string(fuzz_dir().join("fuzz_targets/nccl_recv.rs"))
        .expect("the target's file");
    assert!(
        target.contains("\"../bodies/nccl_recv.rs\""),
        "nccl_recv does not run its body"
    );
}

zcnet_testkit::main!();
