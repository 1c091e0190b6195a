//! The conformance harness: drives the built plugin (`dlopen`ed, through each exported table
//! version) the way NCCL does, across two processes: this process sends, a child (this binary
//! again, `ZCNET_NCCL_ROLE=recv`) receives and checks every byte. Random scripts (seeded, the
//! same in both processes) of grouped transfers with sizes from 0 B to 8 MiB and messages of
//! 64 MiB, receive buffers larger than the send, tags matched to slots in a shuffled order, up
//! to 32 receives and 256 sends outstanding, random test() polling. Over loopback with the
//! default modes here, with every other `ZCNET_NCCL_TX`/`ZCNET_NCCL_RX` pair in a sender
//! process of its own (`ZCNET_NCCL_ROLE=send`; the knobs are read once per process), and, as
//! root, between two lab namespaces over veth. Then the faults: a peer killed with SIGKILL, a
//! close in the middle, garbage on a data socket, and bad arguments, each with its ncclResult
//! and no hang. No file descriptor or thread may be left behind.
//!
//! It runs with `harness = false` (it needs a `main` to be the child too) and prints the
//! `test result:` line cargo's own harness prints.
#![allow(clippy::undocumented_unsafe_blocks)]

mod common;

use common::*;
use nccl_net_zcnet::abi::*;
use std::ffi::c_int;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use zcnet_testkit::{Need, Outcome};

const NULLP: P = std::ptr::null_mut();
const LIMIT: Duration = Duration::from_secs(60);
/// How long a sender process of its own may take (its transfers each wait up to LIMIT).
const SENDER_LIMIT: Duration = Duration::from_secs(300);

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> [u8; NET_HANDLE_MAXSIZE] {
    let mut h = [0u8; NET_HANDLE_MAXSIZE];
    for (i, c) in s.as_bytes().chunks(2).enumerate().take(NET_HANDLE_MAXSIZE) {
        h[i] = u8::from_str_radix(std::str::from_utf8(c).unwrap_or("00"), 16).unwrap_or(0);
    }
    h
}

fn init(t: &Table) -> P {
    let (rc, ctx) = t.init();
    assert_eq!(rc, NCCL_SUCCESS, "init");
    let (rc, n) = t.devices();
    assert_eq!((rc, n > 0), (NCCL_SUCCESS, true), "devices");
    let (rc, ptr, max_recvs, name) = t.props(0);
    assert_eq!(rc, NCCL_SUCCESS);
    assert_eq!(ptr, PTR_HOST, "never a capability the machine lacks");
    assert_eq!(max_recvs, 8);
    let want = std::env::var("ZCNET_NCCL_IFACE").unwrap_or_default();
    assert_eq!(
        format!("={name}"),
        want,
        "the device ZCNET_NCCL_IFACE names"
    );
    ctx
}

/// The receiving child: listen, print the handle, accept, run the script, verify.
fn child() -> Result<u64, String> {
    let v: u32 = std::env::var("ZCNET_NCCL_VERSION")
        .map_err(|e| e.to_string())?
        .parse()
        .map_err(|_| "version")?;
    let seed: u64 = std::env::var("ZCNET_NCCL_SEED")
        .map_err(|e| e.to_string())?
        .parse()
        .map_err(|_| "seed")?;
    let max: usize = std::env::var("ZCNET_NCCL_MAX")
        .map_err(|e| e.to_string())?
        .parse()
        .map_err(|_| "max")?;
    let ngroups: usize = std::env::var("ZCNET_NCCL_GROUPS")
        .map_err(|e| e.to_string())?
        .parse()
        .map_err(|_| "groups")?;
    let t = load(v);
    let ctx = init(&t);
    // The receiver's whole run, accept included, is bounded by LIMIT.
    let start = Instant::now();
    let (l, r) = listen_and_accept(&t, ctx)?;
    let groups = script(seed, ngroups, max);
    let mut rng = Rng(seed ^ 0xabc);
    // Buffers per group, slots in a shuffled order (tags choose the slot).
    let mut bufs: Vec<Vec<(c_int, usize, Vec<u8>)>> = groups
        .iter()
        .map(|g| {
            let mut s: Vec<(c_int, usize, Vec<u8>)> = g
                .iter()
                .map(|(tag, size, cap)| (*tag, *size, vec![0xeeu8; *cap]))
                .collect();
            for i in (1..s.len()).rev() {
                s.swap(i, rng.below(i as u64 + 1) as usize);
            }
            s
        })
        .collect();
    let mut pending: Vec<(usize, P)> = Vec::new();
    let mut next = 0;
    let mut bytes = 0u64;
    let mut seq_base = vec![0u64; groups.len()];
    for i in 1..groups.len() {
        seq_base[i] = seq_base[i - 1] + groups[i - 1].len() as u64;
    }
    while next < groups.len() || !pending.is_empty() {
        if start.elapsed() > LIMIT {
            return Err(format!(
                "receiver stuck: {next} posted, {} pending",
                pending.len()
            ));
        }
        if next < groups.len() && pending.len() < 32 && rng.below(3) != 0 {
            let g = &mut bufs[next];
            let slots: Vec<(*mut u8, usize)> = g
                .iter_mut()
                .map(|s| (s.2.as_mut_ptr(), s.2.len()))
                .collect();
            let tags: Vec<c_int> = g.iter().map(|s| s.0).collect();
            let (rc, req) = t.irecv(r, &slots, &tags, &vec![NULLP; slots.len()]);
            if rc != 0 {
                return Err(format!("irecv rc {rc}"));
            }
            if !req.is_null() {
                pending.push((next, req));
                next += 1;
            }
        }
        if pending.is_empty() {
            continue;
        }
        let k = rng.below(pending.len() as u64) as usize;
        let (gi, req) = pending[k];
        let mut sizes = [-1 as c_int; 8];
        let (rc, done) = t.test(req, &mut sizes);
        if rc != 0 {
            return Err(format!("test rc {rc} on group {gi}"));
        }
        if !done {
            continue;
        }
        pending.swap_remove(k);
        for (slot, (tag, size, buf)) in bufs[gi].iter().enumerate() {
            if sizes[slot] as usize != *size {
                return Err(format!(
                    "group {gi} slot {slot} (tag {tag}): size {} != {size}",
                    sizes[slot]
                ));
            }
            let pos = groups[gi].iter().position(|x| x.0 == *tag).unwrap_or(0);
            let seq = seq_base[gi] + pos as u64;
            if let Some(off) = (0..*size).find(|&o| buf[o] != pattern(seq, o)) {
                return Err(format!(
                    "group {gi} tag {tag}: byte {off} of message {seq} wrong"
                ));
            }
            if buf[*size..].iter().any(|&b| b != 0xee) {
                return Err(format!(
                    "group {gi} tag {tag}: bytes written past the message"
                ));
            }
            bytes += *size as u64;
        }
        bufs[gi] = Vec::new();
    }
    assert_eq!(t.close_recv(r), 0);
    assert_eq!(t.close_listen(l), 0);
    assert_eq!(t.finalize(ctx), 0);
    Ok(bytes)
}

fn spawn_receiver(
    v: u32,
    seed: u64,
    max: usize,
    groups: usize,
) -> (
    std::process::Child,
    [u8; NET_HANDLE_MAXSIZE],
    BufReader<std::process::ChildStdout>,
) {
    let mut c = receiver_command("recv")
        .env("ZCNET_NCCL_VERSION", v.to_string())
        .env("ZCNET_NCCL_SEED", seed.to_string())
        .env("ZCNET_NCCL_MAX", max.to_string())
        .env("ZCNET_NCCL_GROUPS", groups.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn receiver");
    let mut out = BufReader::new(c.stdout.take().expect("stdout"));
    let h = read_handle(&mut out);
    (c, h, out)
}

/// This binary as a receiving child in `role`: in namespace `ZCNET_NCCL_RECV_NETNS` on
/// `ZCNET_NCCL_RECV_IFACE` when the lab leg set them, else beside us on our interface.
fn receiver_command(role: &str) -> Command {
    let exe = std::env::current_exe().expect("exe");
    let mut c = match std::env::var("ZCNET_NCCL_RECV_NETNS") {
        Ok(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &ns]).arg(exe);
            c
        }
        Err(_) => Command::new(exe),
    };
    let iface = std::env::var("ZCNET_NCCL_RECV_IFACE")
        .or_else(|_| std::env::var("ZCNET_NCCL_IFACE"))
        .unwrap_or_else(|_| "=lo".into());
    c.env("ZCNET_NCCL_ROLE", role)
        .env("ZCNET_NCCL_IFACE", iface);
    // The counters check gives the receiver a stats file of its own.
    if let Ok(f) = std::env::var("ZCNET_NCCL_RECV_STATS") {
        c.env("ZCNET_NCCL_STATS", f);
    }
    c
}

/// Reads the child's `HANDLE` line.
fn read_handle(out: &mut impl BufRead) -> [u8; NET_HANDLE_MAXSIZE] {
    let mut line = String::new();
    out.read_line(&mut line).expect("handle line");
    unhex(
        line.trim()
            .strip_prefix("HANDLE ")
            .unwrap_or_else(|| panic!("child said {line:?}")),
    )
}

fn connect(t: &Table, ctx: P, h: &mut [u8; NET_HANDLE_MAXSIZE]) -> P {
    let start = Instant::now();
    loop {
        let (rc, s) = t.connect(ctx, 0, h);
        assert_eq!(rc, 0, "connect");
        if !s.is_null() {
            return s;
        }
        assert!(start.elapsed() < LIMIT, "connect never finished");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// One two-process run through table `v`: the script, every byte checked by the child.
fn transfer(v: u32, seed: u64, max: usize) {
    transfer_groups(v, seed, max, 60)
}

fn transfer_groups(v: u32, seed: u64, max: usize, ngroups: usize) {
    let t = load(v);
    let ctx = init(&t);
    let (mut child, mut h, mut out) = spawn_receiver(v, seed, max, ngroups);
    let s = connect(&t, ctx, &mut h);
    let groups = script(seed, ngroups, max);
    let msgs: Vec<(c_int, usize)> = groups
        .iter()
        .flatten()
        .map(|(tag, size, _)| (*tag, *size))
        .collect();
    let total: usize = msgs.iter().map(|m| m.1).sum();
    let mut arena = vec![0u8; total.max(1)];
    let mut at = 0;
    let mut offs = Vec::new();
    for (seq, (_, size)) in msgs.iter().enumerate() {
        for o in 0..*size {
            arena[at + o] = pattern(seq as u64, o);
        }
        offs.push(at);
        at += size;
    }
    let (rc, mr) = t.reg_mr(s, arena.as_mut_ptr(), arena.len(), PTR_HOST);
    assert_eq!(rc, 0, "regMr");
    let mut rng = Rng(seed ^ 0x5e4d);
    let mut pending: Vec<(usize, P)> = Vec::new();
    let mut next = 0;
    let start = Instant::now();
    while next < msgs.len() || !pending.is_empty() {
        assert!(
            start.elapsed() < LIMIT,
            "v{v} seed {seed}: sender stuck at {next}, {} pending",
            pending.len()
        );
        if next < msgs.len() && rng.below(4) != 0 {
            let (tag, size) = msgs[next];
            let (rc, req) = t.isend(s, arena[offs[next]..].as_mut_ptr(), size, tag, mr);
            assert_eq!(rc, 0, "isend");
            if !req.is_null() {
                pending.push((next, req));
                next += 1;
                assert!(pending.len() <= 256);
            }
        }
        if pending.is_empty() {
            continue;
        }
        let k = rng.below(pending.len() as u64) as usize;
        let mut sz = [-1 as c_int; 1];
        let (rc, done) = t.test(pending[k].1, &mut sz);
        assert_eq!(rc, 0, "test");
        if done {
            assert_eq!(sz[0] as usize, msgs[pending[k].0].1, "send size");
            pending.swap_remove(k);
        }
    }
    assert_eq!(t.dereg_mr(s, mr), 0);
    assert_eq!(t.close_send(s), 0);
    let mut rest = String::new();
    out.read_to_string(&mut rest).expect("child output");
    let st = child.wait().expect("child");
    assert!(st.success(), "v{v} seed {seed}: receiver failed: {rest}");
    assert!(rest.contains(&format!("OK {total}")), "v{v}: {rest}");
    assert_eq!(t.finalize(ctx), 0);
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(0)
}

fn main() {
    match std::env::var("ZCNET_NCCL_ROLE").as_deref() {
        Ok("recv") => match child() {
            Ok(b) => {
                println!("OK {b}");
                std::process::exit(0);
            }
            Err(e) => {
                println!("FAIL {e}");
                std::process::exit(1);
            }
        },
        Ok("recv-then-hang") => faults::recv_then_hang(),
        Ok("send-then-hang") => faults::send_then_hang(),
        Ok("send-abandon") => faults::send_abandon(),
        Ok("recv-late") => match recv_late() {
            Ok(()) => {
                println!("OK");
                std::process::exit(0);
            }
            Err(e) => {
                println!("FAIL {e}");
                std::process::exit(1);
            }
        },
        Ok("conn-faults") => {
            connect::child();
            println!("OK");
            std::process::exit(0);
        }
        Ok("send-rewrite") => {
            send_rewrite();
            println!("OK");
            std::process::exit(0);
        }
        Ok("send-stats") => {
            // One transfer, the counters written at the last close (ZCNET_NCCL_STATS).
            transfer_groups(12, STATS_SEED, STATS_MAX, STATS_GROUPS);
            println!("OK");
            std::process::exit(0);
        }
        Ok("send") => {
            // A sender process of its own for one (ZCNET_NCCL_TX, ZCNET_NCCL_RX) pair.
            every_version_once();
            huge_messages();
            println!("OK");
            std::process::exit(0);
        }
        _ => {}
    }
    if std::env::var("ZCNET_NCCL_IFACE").is_err() {
        std::env::set_var("ZCNET_NCCL_IFACE", "=lo");
    }
    // (name, its time limit in seconds, the case). Each runs on a thread of its own under its
    // limit (zcnet_testkit::run_bounded): a hang anywhere in it, or in a child it waits for,
    // fails naming it. A case that cannot run here calls zcnet_testkit::skip/require_* and is
    // counted as ignored, or failed where ZCNET_TEST_STRICT names the need.
    type Case = fn() -> Result<(), String>;
    macro_rules! case {
        ($name:literal, $secs:expr, $f:path) => {
            ($name, $secs, (|| Ok($f())) as Case)
        };
    }
    let tests: Vec<(&str, u64, Case)> = vec![
        case!(
            "every_version_moves_random_scripts_verified_byte_for_byte",
            300,
            every_version
        ),
        case!("large_messages_over_several_sockets", 120, large_messages),
        case!("messages_of_64_mib", 180, huge_messages),
        case!(
            "every_tx_and_rx_mode_in_a_process_of_its_own",
            600,
            every_mode
        ),
        case!(
            "a_buffer_rewritten_once_test_says_done_never_changes_what_the_peer_gets",
            180,
            rewrite_after_done
        ),
        case!(
            "counters_in_zcnet_nccl_stats_match_the_bytes_moved",
            300,
            stats_files
        ),
        case!(
            "send_zc_out_of_locked_memory_falls_back_to_copies_and_says_memlock",
            300,
            memlock_fallback
        ),
        case!("between_lab_namespaces_over_veth", 300, lab_namespaces),
        case!(
            "faults_give_the_matching_result_and_never_hang",
            180,
            faults::all
        ),
        case!(
            "connections_that_never_finish_greeting_fail_in_time_and_leak_nothing",
            120,
            connect::all
        ),
    ];
    let strict = zcnet_testkit::strict_needs();
    let (fds0, threads0) = (open_fds(), threads());
    let (mut passed, mut failed, mut ignored) = (0, 0, 0);
    let mut failures = Vec::new();
    for (name, limit_s, f) in &tests {
        match zcnet_testkit::run_bounded(name, zcnet_testkit::limit(Some(*limit_s)), &strict, *f) {
            Outcome::Passed => {
                println!("test {name} ... ok");
                passed += 1;
            }
            Outcome::Skipped(why) => {
                println!("test {name} ... ignored, {why}");
                ignored += 1;
            }
            Outcome::Failed(msg) => {
                println!("test {name} ... FAILED");
                failures.push((*name, msg));
                failed += 1;
            }
        }
    }
    // Connect threads end with their connect; give the last one a moment.
    std::thread::sleep(Duration::from_millis(100));
    let leak = (open_fds() > fds0, threads() > threads0);
    if leak == (false, false) {
        println!("test nothing_is_left_behind ... ok");
        passed += 1;
    } else {
        println!("test nothing_is_left_behind ... FAILED");
        failures.push((
            "nothing_is_left_behind",
            format!(
                "fds {fds0} -> {}, threads {threads0} -> {}",
                open_fds(),
                threads()
            ),
        ));
        failed += 1;
    }
    if !failures.is_empty() {
        println!("\nfailures:");
        for (name, msg) in &failures {
            println!("\n---- {name} ----\n{msg}");
        }
        println!("\nfailures:");
        for (name, _) in &failures {
            println!("    {name}");
        }
    }
    println!(
        "\ntest result: {}. {passed} passed; {failed} failed; {ignored} ignored; 0 measured; 0 filtered out",
        if failed == 0 { "ok" } else { "FAILED" },
    );
    std::process::exit(i32::from(failed > 0));
}

fn every_version() {
    for v in VERSIONS {
        for seed in 1..=3u64 {
            transfer(v, seed * 7919 + u64::from(v), 1 << 20);
        }
    }
}

fn every_version_once() {
    for v in VERSIONS {
        transfer(v, 31 * u64::from(v), 1 << 20);
    }
}

fn large_messages() {
    transfer(12, 4242, 8 << 20);
}

/// Messages of exactly 64 MiB (and smaller ones around them), every byte checked: the first
/// seed whose short script has one.
fn huge_messages() {
    const MAX: usize = 64 << 20;
    let seed = (1..)
        .find(|s| script(*s, 6, MAX).iter().flatten().any(|m| m.1 == MAX))
        .expect("a seed");
    transfer_groups(12, seed, MAX, 6);
}

/// The (ZCNET_NCCL_TX, ZCNET_NCCL_RX) pairs run in processes of their own; the default pair
/// (auto, uring) runs in this one.
const MODES: &[(&str, &str)] = &[
    ("copy", "copy"),
    ("uring", "uring"),
    ("uring-zc", "uring"),
    ("uring-zc", "copy"),
    ("copy", "uring"),
    ("auto", "copy"),
];

/// Runs this binary as a sender (`ZCNET_NCCL_ROLE=send`) with `cmd`'s environment, the receiver
/// children inheriting it; panics with its output unless it printed OK in time.
fn run_sender(what: &str, cmd: &mut Command) {
    run_role("send", what, cmd)
}

/// Runs this binary in `role` with `cmd`'s environment; panics with its output unless it
/// printed OK within [`SENDER_LIMIT`] (it is killed then: a hang is a failure, not a hang).
fn run_role(role: &str, what: &str, cmd: &mut Command) {
    let mut child = cmd
        .env("ZCNET_NCCL_ROLE", role)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sender");
    let pipe = |r: Option<Box<dyn Read + Send>>| {
        let (tx, rx) = std::sync::mpsc::channel();
        if let Some(mut r) = r {
            std::thread::spawn(move || {
                let mut b = Vec::new();
                let _ = r.read_to_end(&mut b);
                let _ = tx.send(b);
            });
        }
        rx
    };
    let out = pipe(child.stdout.take().map(|p| Box::new(p) as _));
    let err = pipe(child.stderr.take().map(|p| Box::new(p) as _));
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if start.elapsed() > SENDER_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            let text = |rx: std::sync::mpsc::Receiver<Vec<u8>>| {
                rx.recv_timeout(Duration::from_secs(1))
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default()
            };
            panic!(
                "{what}: no result within {} s: killed (a hang)\n{}\n{}",
                SENDER_LIMIT.as_secs(),
                text(out),
                text(err)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // The receiver children it started hold no copy of these pipes past its end (they have
    // their own stdout; stderr they inherit ends with them, each bounded by LIMIT).
    let text = |rx: std::sync::mpsc::Receiver<Vec<u8>>| {
        rx.recv_timeout(LIMIT)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    };
    let (text, etext) = (text(out), text(err));
    assert!(
        status.success() && text.lines().any(|l| l == "OK"),
        "{what}: {status}\n{text}\n{etext}"
    );
}

fn every_mode() {
    for (tx, rx) in MODES {
        let mut c = Command::new(std::env::current_exe().expect("exe"));
        c.env("ZCNET_NCCL_TX", tx).env("ZCNET_NCCL_RX", rx);
        run_sender(&format!("ZCNET_NCCL_TX={tx} ZCNET_NCCL_RX={rx}"), &mut c);
    }
}

/// The transfer of the counters check (the script: both processes derive it from these).
const STATS_SEED: u64 = 4242;
const STATS_MAX: usize = 1 << 20;
const STATS_GROUPS: usize = 20;

/// `"key":<integer>` of the flat JSON object `json`.
fn json_u64(json: &str, key: &str) -> u64 {
    let pat = format!("\"{key}\":");
    let at = json
        .find(&pat)
        .unwrap_or_else(|| panic!("no {key} in {json}"))
        + pat.len();
    let digits: String = json[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("{key} is not an integer in {json}"))
}

/// Runs `cmd` (this binary, or a prefix running it) as the `send-stats` sender with `tx`, `rx`
/// and a stats file per side in `dir`; the (sender's, receiver's) JSON.
fn stats_run(dir: &std::path::Path, tx: &str, rx: &str, cmd: &mut Command) -> (String, String) {
    let (sf, rf) = (
        dir.join(format!("send-{tx}.json")),
        dir.join(format!("recv-{rx}.json")),
    );
    let _ = (std::fs::remove_file(&sf), std::fs::remove_file(&rf));
    cmd.env("ZCNET_NCCL_TX", tx)
        .env("ZCNET_NCCL_RX", rx)
        .env("ZCNET_NCCL_STATS", &sf)
        .env("ZCNET_NCCL_RECV_STATS", &rf);
    run_role(
        "send-stats",
        &format!("ZCNET_NCCL_STATS with ZCNET_NCCL_TX={tx} ZCNET_NCCL_RX={rx}"),
        cmd,
    );
    let read = |f: &std::path::Path| {
        std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()))
    };
    (read(&sf), read(&rf))
}

/// The bytes the counters check's transfer moves.
fn stats_total() -> u64 {
    script(STATS_SEED, STATS_GROUPS, STATS_MAX)
        .iter()
        .flatten()
        .map(|m| m.1 as u64)
        .sum()
}

/// As root: the sender and its receiver as a user of their own without CAP_IPC_LOCK and with
/// 256 KiB of locked memory, less than one 512 KiB chunk costs `SEND_ZC` to pin (and the
/// registration of the send buffer fails too): every zero-copy payload is refused with ENOMEM,
/// and the transfer must still complete, sent copied, the fallback counted as `memlock`.
fn memlock_fallback() {
    zcnet_testkit::require_root("to run the plugin as a user of its own, without CAP_IPC_LOCK");
    zcnet_testkit::require_tool(
        "setpriv",
        "util-linux: drops root for the plugin's processes",
    );
    let uid = 2_000_000_000 + std::process::id() % 1_000_000;
    let total = stats_total();
    let dir = std::env::temp_dir().join(format!("zcnet-nccl-memlock-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!(
            "ulimit -l 256 && exec setpriv --reuid={uid} --regid={uid} --clear-groups \"$0\""
        ))
        .arg(std::env::current_exe().expect("exe"));
    let (s, r) = stats_run(&dir, "uring-zc", "uring", &mut c);
    let what = format!("sender {s}, receiver {r}");
    assert_eq!(json_u64(&s, "bytes_sent"), total, "{what}");
    assert_eq!(json_u64(&r, "bytes_received"), total, "{what}");
    assert_eq!(json_u64(&s, "copied_bytes"), total, "{what}");
    assert!(s.contains("\"memlock\":"), "no memlock fallback: {what}");
    assert!(json_u64(&s, "fallbacks") >= 1, "{what}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// One transfer per mode in a sender process of its own with `ZCNET_NCCL_STATS` set on each
/// side: the counters in the files are the bytes moved, and the kernel's verdict on loopback
/// (it copies every SEND_ZC: notifications all say ZC_COPIED).
fn stats_files() {
    let total = stats_total();
    assert!(total > 0, "the script moves bytes");
    let dir = std::env::temp_dir().join(format!("zcnet-nccl-stats-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for (tx, rx) in [("uring-zc", "uring"), ("copy", "copy")] {
        let mut c = Command::new(std::env::current_exe().expect("exe"));
        let (s, r) = stats_run(&dir, tx, rx, &mut c);
        for key in [
            "bytes_sent",
            "bytes_received",
            "zerocopy_bytes",
            "copied_bytes",
            "notifications",
            "fallbacks",
        ] {
            json_u64(&s, key);
            json_u64(&r, key);
        }
        assert!(s.contains("\"fallback_reasons\":{"), "{s}");
        let what = format!("TX={tx} RX={rx}: sender {s}, receiver {r}");
        assert_eq!(json_u64(&s, "bytes_sent"), total, "{what}");
        assert_eq!(json_u64(&s, "bytes_received"), 0, "{what}");
        assert_eq!(json_u64(&r, "bytes_received"), total, "{what}");
        assert_eq!(json_u64(&r, "bytes_sent"), 0, "{what}");
        assert_eq!(
            json_u64(&s, "copied_bytes"),
            total,
            "loopback copies: {what}"
        );
        assert_eq!(json_u64(&s, "zerocopy_bytes"), 0, "loopback copies: {what}");
        assert_eq!(json_u64(&r, "fallbacks"), 0, "{what}");
        if tx == "copy" {
            assert_eq!(json_u64(&s, "notifications"), 0, "{what}");
        } else {
            if s.contains("no SEND_ZC") {
                zcnet_testkit::skip(Need::Kernel, "this kernel has no IORING_OP_SEND_ZC");
            }
            assert!(json_u64(&s, "notifications") > 0, "{what}");
            // Without CAP_IPC_LOCK the user's locked memory may run out (a `memlock` fallback,
            // which memlock_fallback checks); as root nothing may fall back.
            if unsafe { libc::geteuid() } == 0 {
                assert_eq!(json_u64(&s, "fallbacks"), 0, "{what}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// As root: the sender in one lab namespace, the receiver in another, over veth.
fn lab_namespaces() {
    zcnet_testkit::require_root("the lab leg: two network namespaces over veth");
    zcnet_testkit::require_tool("ip", "the lab leg runs the receiver with `ip netns exec`");
    let mut lab = zcnet_lab::Lab::new().expect("lab");
    let v = lab.veth().expect("veth");
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &v.a])
        .arg(std::env::current_exe().expect("exe"))
        .env("ZCNET_NCCL_IFACE", "=vA")
        .env("ZCNET_NCCL_RECV_NETNS", &v.b)
        .env("ZCNET_NCCL_RECV_IFACE", "=vB");
    run_sender("over veth between lab namespaces", &mut c);
    drop(lab);
}

/// The messages of the rewrite check: (size, sent from memory registered with regMr). The
/// receiver posts each receive only [`LATE`] after the previous one completed, so each message
/// sits in socket buffers, still read by the kernel, when its send's bytes are all accepted.
const REWRITE: &[(usize, bool)] = &[
    (1 << 20, true),
    (256 << 10, false),
    (3 << 20, true),
    (64 << 10, true),
    (1 << 20, false),
];
const LATE: Duration = Duration::from_millis(300);

fn rewrite_pattern(round: usize, off: usize) -> u8 {
    pattern(1000 + round as u64, off)
}

/// A receiving child's side of a connection: listens, hands the sender its handle on stdout
/// (`HANDLE <hex>`), then polls accept until the connection is up; (listen comm, recv comm).
fn listen_and_accept(t: &Table, ctx: P) -> Result<(P, P), String> {
    let mut h = [0u8; NET_HANDLE_MAXSIZE];
    let (rc, l) = t.listen(ctx, 0, &mut h);
    if rc != 0 || l.is_null() {
        return Err(format!("listen rc {rc}"));
    }
    println!("HANDLE {}", hex(&h));
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    let start = Instant::now();
    loop {
        let (rc, r) = t.accept(l);
        if rc != 0 {
            return Err(format!("accept rc {rc}"));
        }
        if !r.is_null() {
            return Ok((l, r));
        }
        if start.elapsed() > LIMIT {
            return Err("accept timed out".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Child (`recv-late`): accept, then for each message of [`REWRITE`] wait [`LATE`], post its
/// receive and compare every byte with what the sender gave isend.
fn recv_late() -> Result<(), String> {
    let t = load(12);
    let ctx = init(&t);
    let (l, r) = listen_and_accept(&t, ctx)?;
    let max = REWRITE.iter().map(|m| m.0).max().unwrap_or(0);
    let mut buf = vec![0u8; max];
    for (round, &(size, _)) in REWRITE.iter().enumerate() {
        std::thread::sleep(LATE);
        buf.fill(0);
        let start = Instant::now();
        let req = loop {
            let (rc, req) = t.irecv(r, &[(buf.as_mut_ptr(), size)], &[round as c_int], &[NULLP]);
            if rc != 0 {
                return Err(format!("irecv rc {rc}"));
            }
            if !req.is_null() {
                break req;
            }
            if start.elapsed() > LIMIT {
                return Err("irecv never accepted".into());
            }
        };
        loop {
            let mut sz = [-1 as c_int; 1];
            let (rc, done) = t.test(req, &mut sz);
            if rc != 0 {
                return Err(format!("test rc {rc} on message {round}"));
            }
            if done {
                if sz[0] as usize != size {
                    return Err(format!("message {round}: {} B, sent {size}", sz[0]));
                }
                break;
            }
            if start.elapsed() > LIMIT {
                return Err(format!("message {round} never arrived"));
            }
        }
        let wrong: Vec<usize> = (0..size)
            .filter(|&o| buf[o] != rewrite_pattern(round, o))
            .collect();
        if let Some(&first) = wrong.first() {
            return Err(format!(
                "message {round} ({size} B): {} bytes differ from what isend was given, the first at {first} ({:#04x}, sent {:#04x}): the sender rewrote its buffer once test() said done, and the kernel was still reading it",
                wrong.len(),
                buf[first],
                rewrite_pattern(round, first)
            ));
        }
    }
    assert_eq!(t.close_recv(r), 0);
    assert_eq!(t.close_listen(l), 0);
    assert_eq!(t.finalize(ctx), 0);
    Ok(())
}

/// Sender process (`send-rewrite`, `ZCNET_NCCL_TX` set by the parent): sends the messages of
/// [`REWRITE`] from one buffer and overwrites it with garbage the moment test() says the send
/// is done, as NCCL may: a send is done only when the kernel no longer reads the buffer (every
/// zero-copy notification in), so the receiver must still get every byte as sent.
fn send_rewrite() {
    let t = load(12);
    let ctx = init(&t);
    let mut child = receiver_command("recv-late")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn receiver");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut h = read_handle(&mut out);
    let s = connect(&t, ctx, &mut h);
    let max = REWRITE.iter().map(|m| m.0).max().unwrap_or(0);
    let mut arena = vec![0u8; max];
    let (rc, mr) = t.reg_mr(s, arena.as_mut_ptr(), arena.len(), PTR_HOST);
    assert_eq!(rc, 0, "regMr");
    for (round, &(size, registered)) in REWRITE.iter().enumerate() {
        for (o, b) in arena[..size].iter_mut().enumerate() {
            *b = rewrite_pattern(round, o);
        }
        let m = if registered { mr } else { NULLP };
        let start = Instant::now();
        let req = loop {
            let (rc, req) = t.isend(s, arena.as_mut_ptr(), size, round as c_int, m);
            assert_eq!(rc, 0, "isend");
            if !req.is_null() {
                break req;
            }
            assert!(start.elapsed() < LIMIT, "isend never accepted");
        };
        loop {
            let mut sz = [-1 as c_int; 1];
            let (rc, done) = t.test(req, &mut sz);
            assert_eq!(rc, 0, "test");
            if done {
                assert_eq!(sz[0] as usize, size, "send size");
                break;
            }
            assert!(start.elapsed() < LIMIT, "send {round} never completed");
        }
        // The buffer is the caller's again: garbage, at once.
        arena[..size].fill(0xa5);
    }
    assert_eq!(t.dereg_mr(s, mr), 0);
    assert_eq!(t.close_send(s), 0);
    let mut rest = String::new();
    out.read_to_string(&mut rest).expect("child output");
    let st = child.wait().expect("child");
    assert!(st.success() && rest.contains("OK"), "receiver: {rest}");
    assert_eq!(t.finalize(ctx), 0);
}

/// The rewrite check with zero-copy sends: `uring-zc`, and `auto` (which starts zero-copy),
/// each in a sender process of its own (the knobs are read once per process).
fn rewrite_after_done() {
    let zc = zcnet::engine::Engine::new(16, 0)
        .map(|r| r.supports_send_zc())
        .unwrap_or(false);
    if !zc {
        zcnet_testkit::skip(Need::Kernel, "no io_uring SEND_ZC (Linux 6.0)");
    }
    for tx in ["uring-zc", "auto"] {
        let mut c = Command::new(std::env::current_exe().expect("exe"));
        c.env("ZCNET_NCCL_TX", tx);
        run_role(
            "send-rewrite",
            &format!("ZCNET_NCCL_TX={tx}: a send buffer rewritten once test() said done"),
            &mut c,
        );
    }
}

#[path = "conformance/connect.rs"]
mod connect;
#[path = "conformance/faults.rs"]
mod faults;
