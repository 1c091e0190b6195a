//! The plugin's overhead, measured in one run: throughput through the plugin (`dlopen`ed, the
//! v12 table, driven as NCCL drives it: `outstanding` isends and irecvs, test() polling) against
//! zcnet's own sender on the same path (loopback TCP), the same mode and message size
//! ([`send_for`]: bench tx's send loop, the one `zcnet send` shares, rebuilt here so that the
//! plugin's tests do not depend on the tools, into a receiver draining the stream with recv()). Each plugin configuration runs in a process of its own
//! (the `ZCNET_NCCL_*` knobs are read once per process); CPU is the process's user + system
//! time per GB moved, both ends together.
//!
//! Both loops yield the CPU after a pass that completed nothing, as NCCL's proxy thread does;
//! on a machine with few CPUs the two polling threads and the kernel's loopback work still
//! compete, so compare rows of one run, on an otherwise idle machine.
//!
//! A second part runs one 8 MiB message in flight through the plugin as it comes (its default
//! knobs) against the plugin reduced to a plain one-socket plugin (`send()`/`recv()` on one
//! socket, the message as one chunk: `ZCNET_NCCL_TX=copy`, `ZCNET_NCCL_RX=copy`,
//! `ZCNET_NCCL_NSOCKS=1`, `ZCNET_NCCL_CHUNK=16777216`), rounds interleaved, and prints the ratio of
//! the medians: what zcnet's defaults cost or give when nothing else is in flight.
//!
//! Not part of the default test run (it measures, it asserts nothing about speed); run
//! `cargo test --release -p zcnet-nccl --test overhead` (see docs/perf.md). Environment:
//! `ZCNET_OVERHEAD_SECS` (default 3) per case, `ZCNET_OVERHEAD_ROUNDS` (default 5) rounds of the
//! second part, `ZCNET_OVERHEAD_PART` (`table` or `single` for one part only).
#![allow(clippy::undocumented_unsafe_blocks)]

mod common;

use common::*;
use nccl_net_zcnet::abi::*;
use std::ffi::c_int;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NULLP: P = std::ptr::null_mut();

/// The number in environment variable `name`, if it holds one.
fn env_num<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

fn secs() -> f64 {
    env_num("ZCNET_OVERHEAD_SECS").unwrap_or(3.0)
}

/// Messages in flight: NCCL keeps up to 8 per connection; fewer for 64 MiB to bound memory;
/// `ZCNET_OVERHEAD_INFLIGHT` in a plugin child when its parent sets it.
fn outstanding(size: usize) -> usize {
    if let Some(n) = env_num("ZCNET_OVERHEAD_INFLIGHT") {
        return n;
    }
    if size >= 16 << 20 {
        4
    } else {
        8
    }
}

/// (MB/s, CPU s/GB).
type Rate = (f64, f64);

fn rate(bytes: u64, secs: f64, cpu: f64) -> Rate {
    let gb = bytes as f64 / 1e9;
    (
        bytes as f64 / secs / 1e6,
        if gb > 0.0 { cpu / gb } else { 0.0 },
    )
}

/// Reads a TCP stream to its end; the bytes it held.
fn drain(s: &mut std::net::TcpStream) -> u64 {
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0u64;
    loop {
        match std::io::Read::read(s, &mut buf) {
            Ok(0) => return got,
            Ok(n) => got += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("drain after {got} B: {e}"),
        }
    }
}

/// zcnet's own sender driven as bench tx drives it (zcnet-tools' `bench::send_for` and its
/// send loop): a buffer from the sender, sent whole, until `duration` is over; each buffer is
/// written once with bytes that do not compress and sent as it is from then on.
fn send_for(sock: zcnet::Socket, tcfg: &zcnet::TxConfig, duration: Duration) -> zcnet::TxStats {
    let len = zcnet::tx::region_len(tcfg);
    let region = zcnet::Region::new(zcnet::MemoryKind::Anonymous, len).expect("region");
    let mut tx = zcnet::Sender::new(sock, region, tcfg).expect("sender");
    let mut filled: Vec<bool> = Vec::new();
    let deadline = Instant::now() + duration;
    while Instant::now() < deadline {
        let mut b = tx.buffer().expect("buffer");
        let id = b.id() as usize;
        if filled.len() <= id {
            filled.resize(id + 1, false);
        }
        if !filled[id] {
            let bytes = b.bytes_mut().expect("host memory");
            zcnet::Pattern::new(0x2c6e_6574).fill(0, bytes);
            filled[id] = true;
        }
        tx.send(b, tcfg.buf_size).expect("send");
    }
    tx.finish().expect("finish")
}

/// zcnet's own sender with `tx` into a draining receiver over loopback.
fn baseline(tx: &str, size: usize) -> Rate {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let addr = l.local_addr().expect("addr");
    let cpu0 = zcnet::os::process_cpu_seconds();
    let drain = std::thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept");
        drain(&mut s)
    });
    let sock = std::net::TcpStream::connect(addr).expect("connect");
    let mode = zcnet::TxMode::parse(tx).expect("mode");
    let t = Instant::now();
    let mut tcfg = zcnet::TxConfig::new(mode);
    tcfg.buf_size = size;
    // Exactly as many in flight as the plugin keeps: no window's worth of extra buffers.
    tcfg.inflight = outstanding(size);
    tcfg.window = 0;
    let st = send_for(sock.into(), &tcfg, Duration::from_secs_f64(secs()));
    let got = drain.join().expect("drain thread");
    let wall = t.elapsed().as_secs_f64();
    assert_eq!(got, st.bytes, "the receiver got what was sent");
    rate(st.bytes, wall, zcnet::os::process_cpu_seconds() - cpu0)
}

/// In this process: a sender and a receiver thread through the plugin; prints `RATE mbps cpu`.
fn plugin(size: usize) {
    let t = load(12);
    let (rc, ctx) = t.init();
    assert_eq!(rc, 0, "init");
    let mut h = [0u8; NET_HANDLE_MAXSIZE];
    let (rc, l) = t.listen(ctx, 0, &mut h);
    assert_eq!(rc, 0, "listen");
    let (mut s, mut r) = (NULLP, NULLP);
    while s.is_null() || r.is_null() {
        if s.is_null() {
            s = t.connect(ctx, 0, &mut h).1;
        }
        if r.is_null() {
            r = t.accept(l).1;
        }
    }
    let k = outstanding(size);
    let sent = Arc::new(AtomicU64::new(u64::MAX));
    let cpu0 = zcnet::os::process_cpu_seconds();
    let start = Instant::now();
    let (rs, rsent) = (r as usize, Arc::clone(&sent));
    let receiver = std::thread::spawn(move || {
        let t = load(12);
        let r = rs as P;
        let mut bufs: Vec<Vec<u8>> = (0..k).map(|_| vec![0u8; size]).collect();
        let mrs: Vec<P> = bufs
            .iter_mut()
            .map(|b| t.reg_mr(r, b.as_mut_ptr(), b.len(), PTR_HOST).1)
            .collect();
        let mut slots: Vec<Option<P>> = vec![None; k];
        let mut got = 0u64;
        loop {
            let total = rsent.load(Ordering::Acquire);
            if got == total {
                break;
            }
            let before = got;
            // Receives for every message still to come: all slots until the sender says how
            // many it sent, then only as many as are missing (a stop flag alone left a message
            // the receiver never posted for, and the run spun for good).
            let mut posted = slots.iter().filter(|s| s.is_some()).count() as u64;
            for (i, slot) in slots.iter_mut().enumerate() {
                match slot {
                    None if got + posted < total => {
                        let b = &mut bufs[i];
                        let (rc, req) = t.irecv(r, &[(b.as_mut_ptr(), size)], &[1], &[mrs[i]]);
                        assert_eq!(rc, 0, "irecv");
                        *slot = (!req.is_null()).then_some(req);
                        posted += u64::from(slot.is_some());
                    }
                    Some(req) => {
                        let mut sz = [0 as c_int; 1];
                        let (rc, done) = t.test(*req, &mut sz);
                        assert_eq!(rc, 0, "test recv");
                        if done {
                            assert_eq!(sz[0] as usize, size);
                            got += 1;
                            posted -= 1;
                            *slot = None;
                        }
                    }
                    None => {}
                }
            }
            if got == before {
                // As NCCL's proxy thread does when a pass made no progress.
                std::thread::yield_now();
            }
        }
        // Receives posted beyond the last message are abandoned with the comm.
        assert_eq!(t.close_recv(r), 0);
        for m in mrs {
            let _ = t.dereg_mr(r, m);
        }
        got
    });
    let mut buf = vec![0x5au8; size];
    let (_, mr) = t.reg_mr(s, buf.as_mut_ptr(), buf.len(), PTR_HOST);
    let deadline = start + Duration::from_secs_f64(secs());
    let mut pending: Vec<P> = Vec::new();
    let mut n = 0u64;
    while Instant::now() < deadline || !pending.is_empty() {
        if Instant::now() < deadline && pending.len() < k {
            let (rc, req) = t.isend(s, buf.as_mut_ptr(), size, 1, mr);
            assert_eq!(rc, 0, "isend");
            if !req.is_null() {
                pending.push(req);
                n += 1;
            }
        }
        let before = pending.len();
        pending.retain(|req| {
            let mut sz = [0 as c_int; 1];
            let (rc, done) = t.test(*req, &mut sz);
            assert_eq!(rc, 0, "test send");
            !done
        });
        if pending.len() == before && pending.len() == k {
            std::thread::yield_now();
        }
    }
    sent.store(n, Ordering::Release);
    let got = receiver.join().expect("receiver");
    let wall = start.elapsed().as_secs_f64();
    assert_eq!(got, n);
    let (mbps, cpu) = rate(
        n * size as u64,
        wall,
        zcnet::os::process_cpu_seconds() - cpu0,
    );
    assert_eq!(t.dereg_mr(s, mr), 0);
    assert_eq!(t.close_send(s), 0);
    assert_eq!(t.close_listen(l), 0);
    println!("RATE {mbps} {cpu}");
}

fn run_plugin(size: usize, tx: &str, rx: &str, nsocks: u32) -> Rate {
    let nsocks = nsocks.to_string();
    run_plugin_with(
        size,
        None,
        &[
            ("ZCNET_NCCL_TX", tx),
            ("ZCNET_NCCL_RX", rx),
            ("ZCNET_NCCL_NSOCKS", &nsocks),
        ],
    )
}

/// The plugin in a child process of its own with the `knobs` given (the others at their
/// defaults) and `inflight` messages in flight (the table's rule without).
fn run_plugin_with(size: usize, inflight: Option<usize>, knobs: &[(&str, &str)]) -> Rate {
    let mut c = Command::new(std::env::current_exe().expect("exe"));
    c.env("ZCNET_OVERHEAD_ROLE", "plugin")
        .env("ZCNET_OVERHEAD_SIZE", size.to_string())
        .env("ZCNET_NCCL_IFACE", "=lo");
    for k in [
        "ZCNET_NCCL_TX",
        "ZCNET_NCCL_RX",
        "ZCNET_NCCL_NSOCKS",
        "ZCNET_NCCL_CHUNK",
        "ZCNET_OVERHEAD_INFLIGHT",
    ] {
        c.env_remove(k);
    }
    if let Some(n) = inflight {
        c.env("ZCNET_OVERHEAD_INFLIGHT", n.to_string());
    }
    for (k, v) in knobs {
        c.env(k, v);
    }
    let out = c.output().expect("spawn");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("RATE "))
        .unwrap_or_else(|| {
            panic!(
                "plugin run failed: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let v: Vec<f64> = line
        .split(' ')
        .map(|x| x.parse().expect("number"))
        .collect();
    (v[0], v[1])
}

fn main() {
    if std::env::var("ZCNET_OVERHEAD_ROLE").as_deref() == Ok("plugin") {
        let size = std::env::var("ZCNET_OVERHEAD_SIZE")
            .expect("size")
            .parse()
            .expect("size");
        plugin(size);
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let part = std::env::var("ZCNET_OVERHEAD_PART").unwrap_or_default();
    if part != "single" {
        table();
    }
    if part != "table" {
        single_message();
    }
}

/// One 8 MiB message in flight: the plugin's defaults against a plain one-socket plugin,
/// interleaved rounds, medians.
fn single_message() {
    const SIZE: usize = 8 << 20;
    let rounds: usize = env_num("ZCNET_OVERHEAD_ROUNDS").unwrap_or(5);
    let plain = [
        ("ZCNET_NCCL_TX", "copy"),
        ("ZCNET_NCCL_RX", "copy"),
        ("ZCNET_NCCL_NSOCKS", "1"),
        ("ZCNET_NCCL_CHUNK", "16777216"),
    ];
    println!(
        "one 8 MiB message in flight over loopback TCP, {} s per run, {rounds} rounds: the plugin's defaults against a plain one-socket plugin (TX copy, RX copy, 1 socket, one chunk)",
        secs()
    );
    let (mut d, mut p) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        // Alternate which runs first.
        let (a, b) = if r % 2 == 0 {
            let a = run_plugin_with(SIZE, Some(1), &[]);
            (a, run_plugin_with(SIZE, Some(1), &plain))
        } else {
            let b = run_plugin_with(SIZE, Some(1), &plain);
            (run_plugin_with(SIZE, Some(1), &[]), b)
        };
        println!(
            "round {}: defaults {:.0} MB/s ({:.3} CPU s/GB), plain {:.0} MB/s ({:.3} CPU s/GB)",
            r + 1,
            a.0,
            a.1,
            b.0,
            b.1
        );
        d.push(a.0);
        p.push(b.0);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (md, mp) = (median(&mut d), median(&mut p));
    println!(
        "medians: defaults {md:.0} MB/s, plain {mp:.0} MB/s: ratio {:.2} (target >= 1.0)",
        md / mp
    );
}

/// The plugin against zcnet's own sender, every mode and size.
fn table() {
    println!("plugin overhead over loopback TCP, {} s per case", secs());
    println!(
        "{:>6} {:>9} {:>6} {:>6} | {:>9} {:>8} | {:>9} {:>8} | {:>6}",
        "size", "tx", "rx", "socks", "zcnet MB/s", "CPU s/GB", "plugin MB/s", "CPU s/GB", "ratio"
    );
    for size in [1usize << 20, 64 << 20] {
        for tx in ["copy", "uring", "uring-zc", "auto"] {
            let base = baseline(tx, size);
            for (rx, nsocks) in [("copy", 1), ("uring", 1), ("uring", 2)] {
                let p = run_plugin(size, tx, rx, nsocks);
                println!(
                    "{:>5}M {:>9} {:>6} {:>6} | {:>10.0} {:>8.3} | {:>11.0} {:>8.3} | {:>5.2}x",
                    size >> 20,
                    tx,
                    rx,
                    nsocks,
                    base.0,
                    base.1,
                    p.0,
                    p.1,
                    p.0 / base.0
                );
            }
        }
    }
}
