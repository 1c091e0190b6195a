//! The soak (long runs and faults): many gigabytes through every send and receive
//! mode, every byte verified, every zero-copy notification and buffer accounted, with the
//! process's memory, descriptors and threads sampled between cases so that a leak shows as
//! growth.
//!
//! Two parts, interleaved over `ZCNET_SOAK_ROUNDS` rounds:
//! - **verified streams**: one TCP connection per (path, tx, rx) case, loopback and the lab's
//!   veth pair (root), every `--tx` mode against every `--rx` mode this machine can run (zcrx
//!   and devmem are tried and their refusal recorded); the sender writes the seeded pattern at
//!   each send's stream offset, the receiver checks every byte (`zcnet::rx::receive_stream`),
//!   and the counts must agree exactly;
//! - **notifications**: UDP to the lab's sink with `msg-zerocopy` and `uring-zc` at 4 KiB, the
//!   fastest way to make the kernel report millions of sends: every send must get its
//!   notification, and the bytes reported zero-copy plus copied must equal the bytes sent.
//!
//! Not part of the default test run; run `cargo test --release -p zcnet-tools --test soak`
//! (docs/reliability.md has the figures). Environment: `ZCNET_SOAK_GB` (default 100) of
//! verified stream data in all, `ZCNET_SOAK_NOTIFS` (default 10,000,000) notifications in all,
//! `ZCNET_SOAK_ROUNDS` (default 4). Exits 1 on any corrupted byte, mismatch or leak.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use zcnet::{Pattern, Receiver, Region, RxConfig, RxMode, Sender, Socket, TxConfig, TxMode};
use zcnet_tools::lab::{self, Lab, SinkPath, VethPath};

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// What one case moved, summed over rounds.
#[derive(Default, Clone)]
struct Tally {
    bytes: u64,
    verified: u64,
    sends: u64,
    notifications: u64,
    zerocopy: u64,
    copied: u64,
    seconds: f64,
    runs: u32,
    error: Option<String>,
}

/// The process's resident memory (KiB), open descriptors and threads.
fn footprint() -> (u64, usize, usize) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
    (field("VmRSS:"), fds, field("Threads:") as usize)
}

/// Runs `f` on a thread inside namespace `ns` (`None`: here).
fn in_ns<T: Send>(
    ns: Option<&str>,
    f: impl FnOnce() -> zcnet::Result<T> + Send,
) -> zcnet::Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            if let Some(ns) = ns {
                lab::enter(ns)?;
            }
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(zcnet::Error::invalid_input("soak thread panicked")))
    })
}

const SEED: u64 = 0x5_0a4;
const SEND_SIZE: usize = 64 << 10;

/// One verified TCP stream of `total` bytes: the receiver in `rx_ns` listening on `bind`, the
/// sender in `tx_ns`. Returns the tally of this run.
fn stream_case(
    (tx_ns, rx_ns, bind): (Option<&str>, Option<&str>, SocketAddr),
    tx: TxMode,
    rx: RxMode,
    total: u64,
) -> zcnet::Result<Tally> {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel::<zcnet::Result<SocketAddr>>();
    std::thread::scope(|s| {
        let receiver = s.spawn(move || {
            in_ns(rx_ns, || {
                let l = TcpListener::bind(bind).map_err(|e| zcnet::Error::io("bind", e))?;
                let mut r = Receiver::new(&RxConfig::new(rx))?;
                let _ = addr_tx.send(l.local_addr().map_err(|e| zcnet::Error::io("addr", e)));
                let (c, _) = zcnet::net::accept(&l, &zcnet::Cancel::new())?;
                zcnet::rx::receive_stream(&mut r, c, Some(Pattern::new(SEED)), None)
            })
        });
        let sent = in_ns(tx_ns, move || {
            let addr = addr_rx
                .recv_timeout(Duration::from_secs(10))
                .map_err(|_| zcnet::Error::invalid_input("receiver did not start"))??;
            let stream = TcpStream::connect(addr).map_err(|e| zcnet::Error::io("connect", e))?;
            let mut cfg = TxConfig::new(tx);
            cfg.buf_size = SEND_SIZE;
            let region = Region::anonymous(zcnet::tx::region_len(&cfg))?;
            let mut sender = Sender::new(Socket::from(stream), region, &cfg)?;
            let p = Pattern::new(SEED);
            let mut off = 0u64;
            while off < total {
                let mut b = sender.buffer()?;
                let n = ((total - off) as usize).min(SEND_SIZE);
                let bytes = b.bytes_mut().ok_or(zcnet::Error::NotCpuAccessible)?;
                p.fill(off, &mut bytes[..n]);
                sender.send(b, n)?;
                off += n as u64;
            }
            sender.finish()
        });
        let got = receiver
            .join()
            .unwrap_or_else(|_| Err(zcnet::Error::invalid_input("receiver panicked")));
        let (st, rep) = (sent?, got?);
        if rep.recv.bytes != st.bytes || st.bytes != total {
            return Err(zcnet::Error::invalid_input(format!(
                "sent {} of {total}, received {}",
                st.bytes, rep.recv.bytes
            )));
        }
        Ok(Tally {
            bytes: st.bytes,
            verified: rep.recv.bytes,
            sends: st.sends,
            notifications: st.notifications,
            zerocopy: st.zerocopy_bytes,
            copied: st.copied_bytes,
            seconds: st.seconds,
            runs: 1,
            error: None,
        })
    })
}

/// `notifs` zero-copy sends of 4 KiB to the sink with `tx`; every send must be notified and
/// every byte reported zero-copy or copied.
fn sink_case(sink: &SinkPath, tx: TxMode, notifs: u64) -> zcnet::Result<Tally> {
    in_ns(Some(&sink.ns), || {
        // With UDP GSO, as `bench tx` sends to the sink: a 4 KiB datagram longer than the MTU
        // without it is never checksum-offloaded, and the kernel copies it (ip_append_data).
        let sock = zcnet::net::connect_udp(sink.dest, Some(zcnet::net::GSO_SEGMENT_1500))?;
        let mut cfg = TxConfig::new(tx);
        cfg.buf_size = 4096;
        let region = Region::anonymous(zcnet::tx::region_len(&cfg))?;
        let mut sender = Sender::new(Socket::from(sock), region, &cfg)?;
        for _ in 0..notifs {
            let b = sender.buffer()?;
            sender.send(b, 4096)?;
        }
        let st = sender.finish()?;
        // MSG_ZEROCOPY completions come in ranges; count ids, not messages, through the bytes.
        // The sink frees every datagram unread: all of it must have gone without a copy.
        if st.zerocopy_bytes != st.bytes || st.copied_bytes != 0 || st.sends != notifs {
            return Err(zcnet::Error::invalid_input(format!(
                "{} sends, {} B: {} B zero-copy + {} B copied reported",
                st.sends, st.bytes, st.zerocopy_bytes, st.copied_bytes
            )));
        }
        if tx == TxMode::UringZc && st.notifications != st.sends {
            return Err(zcnet::Error::invalid_input(format!(
                "{} sends, {} notifications",
                st.sends, st.notifications
            )));
        }
        Ok(Tally {
            bytes: st.bytes,
            verified: 0,
            sends: st.sends,
            // Every id was completed (the bytes say so): one notification per send.
            notifications: st.sends,
            zerocopy: st.zerocopy_bytes,
            copied: st.copied_bytes,
            seconds: st.seconds,
            runs: 1,
            error: None,
        })
    })
}

struct Case {
    name: String,
    run: Box<dyn Fn(u64) -> zcnet::Result<Tally>>,
    per_round: u64,
    tally: Tally,
}

fn add(t: &mut Tally, r: zcnet::Result<Tally>) {
    match r {
        Ok(x) => {
            t.bytes += x.bytes;
            t.verified += x.verified;
            t.sends += x.sends;
            t.notifications += x.notifications;
            t.zerocopy += x.zerocopy;
            t.copied += x.copied;
            t.seconds += x.seconds;
            t.runs += x.runs;
        }
        Err(e) => t.error = Some(e.to_string()),
    }
}

fn main() {
    let gb: u64 = env_or("ZCNET_SOAK_GB", 100);
    let notifs: u64 = env_or("ZCNET_SOAK_NOTIFS", 10_000_000);
    let rounds: u64 = env_or("ZCNET_SOAK_ROUNDS", 4).max(1);
    let lab = match Lab::new() {
        Ok(mut l) => {
            let paths = (l.veth(), l.sink());
            match paths {
                (Ok(v), Ok(s)) => Some((l, v, s)),
                (v, s) => {
                    eprintln!(
                        "soak: lab paths failed ({:?} {:?}): loopback only",
                        v.err(),
                        s.err()
                    );
                    None
                }
            }
        }
        Err(e) => {
            eprintln!("soak: no lab ({e}): loopback only, no sink notifications");
            None
        }
    };
    let loopback: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let mut paths: Vec<(&str, Option<String>, Option<String>, SocketAddr)> =
        vec![("loopback", None, None, loopback)];
    if let Some((_, v, _)) = &lab {
        let VethPath { a, b, b_addr, .. } = v.clone();
        paths.push(("veth", Some(a), Some(b), SocketAddr::new(b_addr, 0)));
    }
    let mut cases: Vec<Case> = Vec::new();
    let streams = paths.len() * TxMode::ALL.len() * 2;
    for (name, a, b, bind) in &paths {
        for tx in TxMode::ALL {
            for rx in [RxMode::Copy, RxMode::Uring] {
                let (a, b, bind) = (a.clone(), b.clone(), *bind);
                cases.push(Case {
                    name: format!("{name} {} -> {}", tx.name(), rx.name()),
                    run: Box::new(move |n| {
                        stream_case((a.as_deref(), b.as_deref(), bind), tx, rx, n)
                    }),
                    per_round: (gb << 30) / (streams as u64 * rounds),
                    tally: Tally::default(),
                });
            }
        }
    }
    if let Some((_, _, s)) = &lab {
        for tx in [TxMode::MsgZerocopy, TxMode::UringZc] {
            let s = s.clone();
            cases.push(Case {
                name: format!("sink {} 4 KiB", tx.name()),
                run: Box::new(move |n| sink_case(&s, tx, n)),
                per_round: notifs / (2 * rounds),
                tally: Tally::default(),
            });
        }
    }
    // zcrx and devmem need a NIC with header split and flow steering: ask the kernel on the
    // veth (or lo) and print why they cannot run here.
    let mut refused = Vec::new();
    let (ns, iface) = match &lab {
        Some((_, v, _)) => (Some(v.b.clone()), "vB"),
        None => (None, "lo"),
    };
    for rx in [RxMode::Zcrx, RxMode::Devmem] {
        let r = in_ns(ns.as_deref(), || {
            let mut cfg = RxConfig::new(rx);
            cfg.iface = Some(iface.to_string());
            Receiver::new(&cfg).map(drop)
        });
        match r {
            Err(e) => refused.push(format!("{} on {iface}: {e}", rx.name())),
            Ok(()) => refused.push(format!(
                "{} on {iface}: accepted, but not soaked",
                rx.name()
            )),
        }
    }
    let start = Instant::now();
    let mut samples = vec![footprint()];
    for round in 0..rounds {
        for c in cases.iter_mut() {
            if c.tally.error.is_some() {
                continue;
            }
            eprint!("\rsoak round {}/{rounds}: {:<40}", round + 1, c.name);
            let r = (c.run)(c.per_round);
            add(&mut c.tally, r);
        }
        samples.push(footprint());
        if zcnet_tools::interrupt::interrupted() {
            break;
        }
    }
    eprintln!();
    drop(lab);
    let mut failed = false;
    println!(
        "{:<36} {:>9} {:>11} {:>11} {:>9} {:>7}",
        "case", "GB", "verified", "notifs", "GB/s", "zc %"
    );
    let (mut total, mut verified, mut notified) = (0u64, 0u64, 0u64);
    for c in &cases {
        let t = &c.tally;
        total += t.bytes;
        verified += t.verified;
        notified += t.notifications;
        let zc = if t.zerocopy + t.copied > 0 {
            format!(
                "{:.0}",
                100.0 * t.zerocopy as f64 / (t.zerocopy + t.copied) as f64
            )
        } else {
            "-".into()
        };
        println!(
            "{:<36} {:>9.2} {:>11.2} {:>11} {:>9.2} {:>7}",
            c.name,
            t.bytes as f64 / 1e9,
            t.verified as f64 / 1e9,
            t.notifications,
            if t.seconds > 0.0 {
                t.bytes as f64 / 1e9 / t.seconds
            } else {
                0.0
            },
            zc
        );
        if let Some(e) = &t.error {
            println!("{:<36} FAILED: {e}", "");
            failed = true;
        }
    }
    for r in &refused {
        println!("not run here: {r}");
    }
    // Flat: after the first round (allocators and rings warmed up), nothing grows.
    let first = samples.get(1).copied().unwrap_or(samples[0]);
    let last = *samples.last().expect("samples");
    println!(
        "footprint (RSS KiB, fds, threads): start {:?}, after round 1 {first:?}, end {last:?}",
        samples[0]
    );
    let rss_growth = last.0.saturating_sub(first.0);
    if last.1 > first.1 || last.2 > first.2 || rss_growth > 16 << 10 {
        println!("LEAK: descriptors, threads or more than 16 MiB of memory grew after round 1");
        failed = true;
    }
    println!(
        "soak: {:.1} GB moved, {:.1} GB verified, 0 corrupted bytes{}, {notified} notifications accounted, {:.0} s",
        total as f64 / 1e9,
        verified as f64 / 1e9,
        if failed { " in the cases that finished" } else { "" },
        start.elapsed().as_secs_f64()
    );
    let left: Vec<String> = lab::list_namespaces()
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n.starts_with(&format!("zcnet-{}-", std::process::id())))
        .collect();
    if !left.is_empty() {
        println!("namespaces left behind: {left:?}");
        failed = true;
    }
    std::process::exit(i32::from(failed));
}
