//! What `zcnet::xsk::Xsk` costs over driving `zcnet_sys::xsk_socket::XdpSocket` directly:
//! N 64 B frames sent from an XSK on vA of a lab veth pair, once through each, pinned to the
//! CPU `zcnet bench xsk` gives its sender, the two interleaved, five rounds, medians printed.
//! Frames go to another host's MAC address, so vB's stack drops each one at once and the send
//! path is what is measured. Every run checks that all N frames completed and that vB counted
//! at least N received frames. The frames, the batch and the CPU are bench xsk's own
//! (`zcnet_tools::xskbench`), which is why it lives with the tools.
//!
//! Ignored by default (it is a measurement, a few seconds); run it in release:
//!
//! ```text
//! cargo test --release -p zcnet-tools --test xsk_speed -- --ignored --nocapture
//! ZCNET_XSK_SPEED_N=4000000 ZCNET_XSK_SPEED_ROUNDS=7 cargo test --release ...   # longer
//! ZCNET_XSK_SPEED_ONLY=xsk perf record -g target/release/deps/xsk_speed-* --ignored   # one side
//! ```

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use zcnet::xsk::{Xsk, XskConfig};
use zcnet::Region;
use zcnet_sys::mem::Mapping;
use zcnet_sys::xsk::XskBindMode;
use zcnet_sys::xsk_socket::{UmemFrame, XdpSocket, XdpSocketConfig};
use zcnet_tools::xskbench::{self, BATCH, SEQ_OFFSET};

const FRAME: usize = 64;
const FRAMES: u32 = 4096;
const RING: u32 = 2048;

/// One lab test at a time in this process.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// A lab with a veth pair; skips the test (reported as ignored) when not root.
fn veth_lab() -> (zcnet_tools::lab::Lab, zcnet_tools::lab::VethPath) {
    match zcnet_tools::lab::Lab::new() {
        Ok(mut lab) => {
            let p = lab.veth().unwrap();
            (lab, p)
        }
        Err(zcnet::Error::NotRoot { .. }) => {
            zcnet_testkit::skip(zcnet_testkit::Need::Root, "network namespaces for the lab")
        }
        Err(e) => panic!("lab: {e}"),
    }
}

/// Runs `f` on a thread inside namespace `ns` (the test thread's namespace stays as it is).
fn in_ns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    zcnet_lab::in_ns(ns, f).unwrap()
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn write_frame(buf: &mut [u8], tmpl: &[u8], seq: u64) -> usize {
    buf[..tmpl.len()].copy_from_slice(tmpl);
    buf[SEQ_OFFSET..SEQ_OFFSET + 8].copy_from_slice(&seq.to_le_bytes());
    tmpl.len()
}

/// The receive counter of `dev` in the calling thread's namespace (`/proc/thread-self/net/dev`).
fn rx_packets(dev: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/thread-self/net/dev").unwrap();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{dev}:")))
        .unwrap_or_else(|| panic!("{dev} in /proc/net/dev"));
    let (_, nums) = line.split_once(':').unwrap();
    nums.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// One run: wall time, the sender thread's CPU time, frames completed.
struct Run {
    took: Duration,
    cpu: f64,
    completed: u64,
}

/// As `zcnet bench xsk`'s AF_XDP sender: complete, write up to BATCH frames, transmit, kick.
fn direct(ifindex: u32, tmpl: &[u8], n: u64) -> Run {
    let cfg = XdpSocketConfig {
        frame_size: 2048,
        frame_count: FRAMES,
        headroom: 0,
        fill_size: 64,
        rx_size: 64,
        comp_size: RING,
        tx_size: RING,
        need_wakeup: true,
        mode: XskBindMode::Copy,
    };
    let umem = Mapping::anonymous(cfg.umem_len()).unwrap();
    let (mut sock, mut free) = XdpSocket::new(umem, ifindex, 0, &cfg).unwrap();
    let mut work: Vec<UmemFrame> = Vec::with_capacity(BATCH);
    let mut seq = 0u64;
    let cpu0 = zcnet_sys::os::thread_cpu_seconds();
    let start = Instant::now();
    while seq < n {
        sock.complete(&mut free, u32::MAX).unwrap();
        while work.len() < BATCH && seq + (work.len() as u64) < n {
            let Some(mut f) = free.pop() else { break };
            let len = write_frame(f.bytes_mut(), tmpl, seq + work.len() as u64);
            f.set_data(0, len as u32).unwrap();
            work.push(f);
        }
        seq += sock.transmit(&mut work).unwrap() as u64;
        sock.kick_tx().unwrap();
    }
    let end = Instant::now() + Duration::from_secs(10);
    while sock.frames_in_tx() > 0 {
        assert!(Instant::now() < end, "direct: frames not completed");
        sock.kick_tx().unwrap();
        sock.complete(&mut free, u32::MAX).unwrap();
    }
    Run {
        took: start.elapsed(),
        cpu: zcnet_sys::os::thread_cpu_seconds() - cpu0,
        completed: sock.frames().counts().completed,
    }
}

/// The same through `Xsk`: tx_frame, write, send (which completes and kicks), flush.
fn facade(iface: &str, tmpl: &[u8], n: u64) -> Run {
    let mut cfg = XskConfig::new(0);
    cfg.rx_frames = 0;
    cfg.tx_frames = FRAMES;
    cfg.ring_size = RING;
    let mut xsk = Xsk::open(iface, Region::anonymous(cfg.umem_len()).unwrap(), &cfg).unwrap();
    let mut batch = Vec::with_capacity(BATCH);
    let mut seq = 0u64;
    let cpu0 = zcnet_sys::os::thread_cpu_seconds();
    let start = Instant::now();
    while seq < n {
        while batch.len() < BATCH && seq + (batch.len() as u64) < n {
            let Some(mut f) = xsk.tx_frame().unwrap() else {
                break;
            };
            let len = write_frame(f.bytes_mut(), tmpl, seq + batch.len() as u64);
            f.set_len(len).unwrap();
            batch.push(f);
        }
        seq += xsk.send(&mut batch).unwrap() as u64;
    }
    assert!(xsk.flush(Duration::from_secs(10)).unwrap(), "Xsk: flush");
    Run {
        took: start.elapsed(),
        cpu: zcnet_sys::os::thread_cpu_seconds() - cpu0,
        completed: xsk.stats().unwrap().tx_completed,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[zcnet_testkit::test]
#[ignore = "a measurement: run with --release -- --ignored --nocapture"]
fn xsk_facade_vs_direct_send_rate() {
    let _g = serial();
    let (_lab, p) = veth_lab();
    let n = env_u64("ZCNET_XSK_SPEED_N", 2_000_000);
    let rounds = env_u64("ZCNET_XSK_SPEED_ROUNDS", 5);
    let only = std::env::var("ZCNET_XSK_SPEED_ONLY").ok();
    let (cpu, _) = xskbench::pick_cpus(None).unwrap();
    let flow = xskbench::veth_flow(&p, false).unwrap();
    let tmpl = xskbench::template(&flow, FRAME).unwrap();
    // Per round: Mpps and CPU ns per frame of each, and their ratios (the machine is shared
    // and drifts: a ratio within one round is steadier than either figure).
    let (mut d, mut x, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    let (mut dcpu, mut xcpu, mut cpu_ratio) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        // Alternate which goes first, so neither always follows the other.
        let order: [bool; 2] = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        let mut this = [(f64::NAN, f64::NAN); 2];
        for use_xsk in order {
            // ZCNET_XSK_SPEED_ONLY=xsk or =direct: one side alone (to profile it).
            match (only.as_deref(), use_xsk) {
                (Some("xsk"), false) | (Some("direct"), true) => continue,
                _ => {}
            }
            let rx0 = in_ns(&p.b, || rx_packets("vB"));
            let run = in_ns(&p.a, || {
                zcnet_sys::os::set_thread_affinity(&[cpu]).unwrap();
                let ifindex = zcnet_sys::zcrx::if_index("vA").unwrap();
                if use_xsk {
                    facade("vA", &tmpl, n)
                } else {
                    direct(ifindex, &tmpl, n)
                }
            });
            let rx = in_ns(&p.b, || rx_packets("vB")) - rx0;
            let who = if use_xsk { "Xsk" } else { "direct" };
            assert_eq!(run.completed, n, "{who}: every frame completed");
            assert!(rx >= n, "{who}: vB received {rx} of {n} frames");
            let mpps = n as f64 / run.took.as_secs_f64() / 1e6;
            let cpu_ns = run.cpu * 1e9 / n as f64;
            eprintln!(
                "round {round} {who:>6}: {mpps:.3} Mpps ({:.1} ns/frame wall, {cpu_ns:.1} ns/frame CPU)",
                1e3 / mpps
            );
            this[usize::from(use_xsk)] = (mpps, cpu_ns);
        }
        let [(dm, dc), (xm, xc)] = this;
        d.push(dm);
        x.push(xm);
        ratio.push(xm / dm);
        dcpu.push(dc);
        xcpu.push(xc);
        cpu_ratio.push(dc / xc);
    }
    let (md, mx) = (median(d), median(x));
    eprintln!(
        "{n} frames of {FRAME} B, sender pinned to CPU {cpu}, medians of {rounds} interleaved rounds: \
         direct {md:.3} Mpps, Xsk {mx:.3} Mpps (ratio of medians {:.3}, median of per-round ratios {:.3}); \
         CPU per frame direct {:.1} ns, Xsk {:.1} ns (direct/Xsk median per round {:.3})",
        mx / md,
        median(ratio),
        median(dcpu),
        median(xcpu),
        median(cpu_ratio),
    );
    assert!(md > 0.0 || mx > 0.0, "at least one side ran");
}

zcnet_testkit::main!();
