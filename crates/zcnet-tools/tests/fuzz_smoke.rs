//! The fuzz smoke run of CI: every target body of fuzz/ (the cargo-fuzz project, which needs
//! nightly and cargo-fuzz) run here on stable, inside `cargo test`, over every file of its kept
//! corpus (fuzz/corpus/<target>/) and over seeded pseudo-random and mutated inputs. The bodies
//! are the fuzz targets' own code (fuzz/bodies/<target>.rs, included here and by
//! fuzz/fuzz_targets/<target>.rs with `#[path]`), so the invariants asserted are the same.
//!
//! `ZCNET_FUZZ_SMOKE_RUNS` sets the number of generated inputs per target (default 5000);
//! `ZCNET_FUZZ_SMOKE_SEED` changes the seed (default: fixed, so a failure reproduces). A
//! failing input is printed in hex: save it as a file and replay it with
//! `cargo +nightly fuzz run -O <target> <file>` in fuzz/.

#[path = "../../../fuzz/bodies/input.rs"]
mod input;
#[path = "../../../fuzz/bodies/perf_gen.rs"]
mod perf_gen;

// zcnet-netlink's parsers.
#[path = "../../../fuzz/bodies/ethtool_channels.rs"]
mod ethtool_channels;
#[path = "../../../fuzz/bodies/ethtool_features.rs"]
mod ethtool_features;
#[path = "../../../fuzz/bodies/ethtool_rings.rs"]
mod ethtool_rings;
#[path = "../../../fuzz/bodies/ethtool_rss.rs"]
mod ethtool_rss;
#[path = "../../../fuzz/bodies/genl_family.rs"]
mod genl_family;
#[path = "../../../fuzz/bodies/netdev_dev.rs"]
mod netdev_dev;
#[path = "../../../fuzz/bodies/netdev_napi.rs"]
mod netdev_napi;
#[path = "../../../fuzz/bodies/netdev_page_pool.rs"]
mod netdev_page_pool;
#[path = "../../../fuzz/bodies/netdev_qstats.rs"]
mod netdev_qstats;
#[path = "../../../fuzz/bodies/netdev_queue.rs"]
mod netdev_queue;
#[path = "../../../fuzz/bodies/ntuple_rxnfc.rs"]
mod ntuple_rxnfc;
#[path = "../../../fuzz/bodies/rtnl.rs"]
mod rtnl;
#[path = "../../../fuzz/bodies/wire_attrs.rs"]
mod wire_attrs;
#[path = "../../../fuzz/bodies/wire_extack.rs"]
mod wire_extack;
// The rest of the kernel- and peer-facing parsers and machines.
#[path = "../../../fuzz/bodies/devmem_cmsg.rs"]
mod devmem_cmsg;
#[path = "../../../fuzz/bodies/dgram.rs"]
mod dgram;
#[path = "../../../fuzz/bodies/echo.rs"]
mod echo;
#[path = "../../../fuzz/bodies/errqueue.rs"]
mod errqueue;
#[path = "../../../fuzz/bodies/nccl_recv.rs"]
mod nccl_recv;
#[path = "../../../fuzz/bodies/perf_client.rs"]
mod perf_client;
#[path = "../../../fuzz/bodies/perf_frame.rs"]
mod perf_frame;
#[path = "../../../fuzz/bodies/perf_json.rs"]
mod perf_json;
#[path = "../../../fuzz/bodies/perf_server.rs"]
mod perf_server;
#[path = "../../../fuzz/bodies/perf_udp.rs"]
mod perf_udp;
#[path = "../../../fuzz/bodies/sendzc.rs"]
mod sendzc;
#[path = "../../../fuzz/bodies/tcp_info.rs"]
mod tcp_info;
#[path = "../../../fuzz/bodies/tpacket.rs"]
mod tpacket;
#[path = "../../../fuzz/bodies/udp_frame.rs"]
mod udp_frame;
#[path = "../../../fuzz/bodies/xsk.rs"]
mod xsk;
#[path = "../../../fuzz/bodies/zc_ranges.rs"]
mod zc_ranges;
#[path = "../../../fuzz/bodies/zcrx_rx.rs"]
mod zcrx_rx;

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

macro_rules! targets {
    ($($t:ident),* $(,)?) => {
        const TARGETS: &[&str] = &[$(stringify!($t)),*];
        $(
            #[zcnet_testkit::test]
            fn $t() {
                smoke(stringify!($t), $t::run);
            }
        )*
    };
}

targets!(
    devmem_cmsg,
    dgram,
    echo,
    errqueue,
    ethtool_channels,
    ethtool_features,
    ethtool_rings,
    ethtool_rss,
    genl_family,
    nccl_recv,
    netdev_dev,
    netdev_napi,
    netdev_page_pool,
    netdev_qstats,
    netdev_queue,
    ntuple_rxnfc,
    perf_client,
    perf_frame,
    perf_json,
    perf_server,
    perf_udp,
    rtnl,
    sendzc,
    tcp_info,
    tpacket,
    udp_frame,
    wire_attrs,
    wire_extack,
    xsk,
    zc_ranges,
    zcrx_rx,
);

/// Every body in fuzz/bodies/ is a fuzz target and is run here (a new one cannot be left out of
/// CI by mistake).
#[zcnet_testkit::test]
fn every_body_is_a_target_and_is_smoked() {
    let toml = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).expect("fuzz/Cargo.toml");
    let mut bodies: Vec<String> = std::fs::read_dir(fuzz_dir().join("bodies"))
        .expect("fuzz/bodies")
        .filter_map(|e| {
            let p = e.ok()?.path();
            let stem = p.file_stem()?.to_string_lossy().into_owned();
            (p.extension()? == "rs" && stem != "input" && stem != "perf_gen").then_some(stem)
        })
        .collect();
    bodies.sort();
    let mut smoked: Vec<String> = TARGETS.iter().map(|t| t.to_string()).collect();
    smoked.sort();
    assert_eq!(
        bodies, smoked,
        "fuzz/bodies/ and this test's targets differ"
    );
    for t in TARGETS {
        let bin = format!("name = \"{t}\"\npath = \"fuzz_targets/{t}.rs\"");
        assert!(toml.contains(&bin), "fuzz/Cargo.toml has no [[bin]] {t}");
        let src = std::fs::read_to_string(fuzz_dir().join(format!("fuzz_targets/{t}.rs")))
            .expect("the target's file");
        assert!(
            src.contains(&format!("\"../bodies/{t}.rs\"")),
            "{t} does not run its body"
        );
    }
}

zcnet_testkit::main!();
