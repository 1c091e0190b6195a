//! RLIMIT_MEMLOCK: the remedy of [`Error::MemlockTooSmall`] is a limit that
//! works (it counts the io_uring ring as well as the registered region where the kernel charges
//! the ring: 6.18 does, 7.2 no longer does; [`ring_kib`]), `MSG_ZEROCOPY` under a
//! small limit names RLIMIT_MEMLOCK rather than `net.core.optmem_max`, and `auto` falls back to
//! `uring`, then `copy`, saying why, and completes the transfer.
//!
//! The kernel charges locked memory only to a process without CAP_IPC_LOCK, and to a counter
//! per *user* that all its processes share, and it releases a closed ring's charge
//! asynchronously (a run right after another at the exact limit was measured to fail now and
//! then). So every scenario runs in a child process — this test binary again, the ignored
//! [`memlock_child`] — as a user id of its own with no capabilities (`setpriv`), which sets its
//! soft limit itself and sends a seeded pattern to a receiver thread that verifies it.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use zcnet::{Pattern, Region, Sender, Socket, TxConfig, TxMode};

const BYTES: u64 = 4 << 20;
const SEED: u64 = 13;

/// A user id nobody else uses: its locked-memory counter starts at zero.
fn fresh_uid() -> u32 {
    static N: AtomicU32 = AtomicU32::new(0);
    2_000_000_000 + std::process::id() * 64 + N.fetch_add(1, Ordering::Relaxed) % 64
}

/// KiB the kernel charges for the sender's ring (zcnet's 16-entry ring for 8 buffers, or any
/// ring up to 8 KiB; 0 where the kernel does not charge rings), as the library measures it;
/// every remedy below is then checked against the kernel itself (it works, a page less fails).
fn ring_kib(kib: u64) -> u64 {
    match zcnet_sys::os::uring_rings_charged() {
        Some(false) => 0,
        Some(true) => kib,
        None => panic!("the kernel did not say whether it charges io_uring rings"),
    }
}

/// Skips the calling test unless the child can run as a user of its own.
fn need_child() {
    zcnet_testkit::require_root("to run the child as a user of its own");
    zcnet_testkit::require_tool("setpriv", "util-linux: the child's user and limits");
}

/// What one child run reported.
#[derive(Debug, Default)]
struct Report {
    lines: Vec<String>,
}

impl Report {
    /// The rest of the first line that starts with `tag ` (`NEW-ERR`, `SEND-ERR`, `NOTE`, ...).
    fn get(&self, tag: &str) -> Option<&str> {
        self.lines
            .iter()
            .find_map(|l| l.strip_prefix(tag)?.strip_prefix(' '))
    }

    fn all(&self, tag: &str) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|l| l.strip_prefix(tag)?.strip_prefix(' '))
            .collect()
    }

    /// Whether the transfer completed: every byte sent and verified by the receiver.
    fn completed(&self) -> bool {
        self.get("SENT")
            .is_some_and(|s| s.starts_with(&format!("{BYTES} ")))
            && self.get("RECEIVED") == Some(&format!("{BYTES} verified")[..])
    }

    /// Whether the sender failed with [`zcnet::Error::MemlockTooSmall`].
    fn memlock_too_small(&self) -> bool {
        self.lines.iter().any(|l| l == "MEMLOCK-TOO-SMALL")
    }

    /// The `ulimit -l` value the error suggested.
    fn suggested_kib(&self) -> u64 {
        let e = self
            .get("NEW-ERR")
            .or(self.get("SEND-ERR"))
            .unwrap_or_else(|| panic!("no error: {self:?}"));
        ulimit_in(e).unwrap_or_else(|| panic!("no 'ulimit -l N' in: {e}"))
    }
}

/// N of the first "ulimit -l N" in `msg`.
fn ulimit_in(msg: &str) -> Option<u64> {
    let rest = msg.split("ulimit -l ").nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// Runs [`memlock_child`] sending `BYTES` with `mode`, `inflight` buffers of `size`, as a
/// fresh user without capabilities and with a soft RLIMIT_MEMLOCK of `limit_kib` KiB.
fn child(mode: &str, size: usize, inflight: usize, limit_kib: u64) -> Report {
    let uid = fresh_uid().to_string();
    let out = Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={uid}"),
            "--clear-groups",
        ])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "memlock_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            "ZCNET_MEMLOCK_CHILD",
            format!("{mode} {size} {inflight} {}", limit_kib * 1024),
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<String> = stdout
        .lines()
        // The harness prints "test memlock_child ... " before the first line.
        .filter_map(|l| l.split_once("MEMLOCK-CHILD ").map(|(_, r)| r.to_string()))
        .collect();
    assert!(
        lines.iter().any(|l| l == "START"),
        "the child did not run: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        lines.iter().any(|l| l == "END"),
        "the child did not finish: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Report { lines }
}

/// The child: one sender under a small RLIMIT_MEMLOCK, reported line by line on stdout.
#[zcnet_testkit::test]
#[ignore = "run by the other tests of this file as a fresh user with a small RLIMIT_MEMLOCK"]
fn memlock_child() {
    let Ok(spec) = std::env::var("ZCNET_MEMLOCK_CHILD") else {
        eprintln!("skipped memlock_child: only the other tests of tests/memlock.rs run it");
        return;
    };
    let say = |s: String| println!("MEMLOCK-CHILD {s}");
    say("START".into());
    let f: Vec<&str> = spec.split(' ').collect();
    // "MODE+hold": another sender of the same shape holds its locked memory meanwhile.
    let (mode, hold) = f[0]
        .split_once('+')
        .map_or((f[0], false), |(m, h)| (m, h == "hold"));
    let (mode, size, inflight, limit): (TxMode, usize, usize, u64) = (
        TxMode::parse(mode).unwrap(),
        f[1].parse().unwrap(),
        f[2].parse().unwrap(),
        f[3].parse().unwrap(),
    );
    assert!(
        !zcnet_sys::os::has_cap_ipc_lock(),
        "the child must not have CAP_IPC_LOCK"
    );
    zcnet_sys::os::set_memlock_soft(limit).unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let receiver = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let pattern = Pattern::new(SEED);
        let (mut off, mut buf) = (0u64, vec![0u8; 1 << 16]);
        loop {
            let n = s.read(&mut buf).unwrap_or(0);
            if n == 0 {
                return (off, true);
            }
            if pattern.verify(off, &buf[..n]).is_err() {
                return (off, false);
            }
            off += n as u64;
        }
    });
    let mut cfg = TxConfig::new(mode);
    cfg.buf_size = size;
    cfg.inflight = inflight;
    // Exactly `inflight` buffers: the remedies measured below are for that many.
    cfg.window = 0;
    let _holder = hold.then(|| {
        let hl = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(hl.local_addr().unwrap()).unwrap();
        let peer = hl.accept().unwrap();
        let region = Region::anonymous(zcnet::tx::region_len(&cfg)).unwrap();
        match Sender::new(Socket::from(s), region, &cfg) {
            Ok(tx) => {
                say("HOLD-OK".into());
                Some((tx, peer))
            }
            Err(e) => {
                say(format!("HOLD-ERR {e}"));
                None
            }
        }
    });
    let region = Region::anonymous(zcnet::tx::region_len(&cfg)).unwrap();
    let sock = Socket::from(TcpStream::connect(addr).unwrap());
    let sent = match Sender::new(sock, region, &cfg) {
        Err(e) => {
            say(format!("NEW-ERR {e}"));
            if let zcnet::Error::MemlockTooSmall { .. } = e {
                say("MEMLOCK-TOO-SMALL".into());
            }
            None
        }
        Ok(mut tx) => {
            for fb in tx.fallbacks() {
                say(format!("FALLBACK {} {}", fb.tried, fb.reason));
            }
            if let Some(n) = tx.note() {
                say(format!("NOTE {n}"));
            }
            let pattern = Pattern::new(SEED);
            let mut off = 0u64;
            let mut failed = None;
            while off < BYTES {
                let n = size.min((BYTES - off) as usize);
                let r = tx.buffer().and_then(|mut b| {
                    pattern.fill(off, &mut b.bytes_mut().unwrap()[..n]);
                    tx.send(b, n)
                });
                if let Err(e) = r {
                    failed = Some(e);
                    break;
                }
                off += n as u64;
            }
            match failed.map_or_else(|| tx.finish(), Err) {
                Err(e) => {
                    say(format!("SEND-ERR {e}"));
                    if let zcnet::Error::MemlockTooSmall { .. } = e {
                        say("MEMLOCK-TOO-SMALL".into());
                    }
                    None
                }
                Ok(st) => {
                    for s in &st.switches {
                        say(format!("SWITCH {s}"));
                    }
                    say(format!(
                        "SENT {} notifications={} enobufs_waits={}",
                        st.bytes, st.notifications, st.enobufs_waits
                    ));
                    Some(st.bytes)
                }
            }
        }
    };
    let (got, verified) = receiver.join().unwrap();
    if sent.is_some() {
        say(format!(
            "RECEIVED {got} {}",
            if verified { "verified" } else { "corrupt" }
        ));
    }
    say("END".into());
}

#[zcnet_testkit::test]
fn uring_zc_remedy_is_a_limit_that_works_and_a_page_less_does_not() {
    need_child();
    // (size, inflight, the smallest `ulimit -l` measured to work: region + the ring's 8 KiB
    // where rings are charged)
    let ring = ring_kib(8);
    for (size, inflight, region) in [(64 << 10, 8, 512), (60000, 8, 480), (4096, 1, 4)] {
        let measured = region + ring;
        // A limit of 0 is too small for anything.
        let r = child("uring-zc", size, inflight, 0);
        assert!(r.memlock_too_small(), "{r:?}");
        let kib = r.suggested_kib();
        assert_eq!(kib, measured, "{size} x {inflight}: {r:?}");
        let ok = child("uring-zc", size, inflight, kib);
        assert!(
            ok.completed(),
            "{size} x {inflight} at the suggested {kib} KiB: {ok:?}"
        );
        assert!(ok.all("FALLBACK").is_empty(), "{ok:?}");
        let below = child("uring-zc", size, inflight, kib - 4);
        assert!(
            below.memlock_too_small(),
            "{size} x {inflight} one page below {kib} KiB must be refused: {below:?}"
        );
        assert_eq!(below.suggested_kib(), kib, "{below:?}");
    }
}

#[zcnet_testkit::test]
fn uring_remedy_counts_the_ring() {
    need_child();
    if ring_kib(8) == 0 {
        // Nothing to count: `uring` locks nothing, and sends under a limit of 0.
        let r = child("uring", 64 << 10, 256, 0);
        assert!(r.completed() && !r.memlock_too_small(), "{r:?}");
        assert!(r.all("FALLBACK").is_empty(), "{r:?}");
        return;
    }
    // 256 buffers: a 512-entry ring, 13 pages (52 KiB), measured.
    for (inflight, measured) in [(8, 8), (256, 52)] {
        let r = child("uring", 64 << 10, inflight, 4);
        assert!(r.memlock_too_small(), "{r:?}");
        let kib = r.suggested_kib();
        assert_eq!(kib, measured, "{inflight}: {r:?}");
        assert!(child("uring", 64 << 10, inflight, kib).completed());
        let below = child("uring", 64 << 10, inflight, kib - 4);
        assert!(below.memlock_too_small(), "{below:?}");
    }
}

#[zcnet_testkit::test]
fn msg_zerocopy_under_a_small_limit_names_rlimit_memlock_with_a_limit_that_works() {
    need_child();
    // 64 KiB limit, 64 KiB sends: one send charges 18 pages (72 KiB): ENOBUFS at the first send.
    let r = child("msg-zerocopy", 64 << 10, 8, 64);
    let e = r.get("SEND-ERR").unwrap_or_else(|| panic!("{r:?}"));
    assert!(r.memlock_too_small(), "{r:?}");
    assert!(
        e.contains("RLIMIT_MEMLOCK (65536 B)") && !e.contains("optmem"),
        "{e}"
    );
    // 8 sends of 18 pages in flight.
    let kib = r.suggested_kib();
    assert_eq!(kib, 8 * 72, "{e}");
    let ok = child("msg-zerocopy", 64 << 10, 8, kib);
    assert!(ok.completed(), "at the suggested {kib} KiB: {ok:?}");
}

#[zcnet_testkit::test]
fn auto_falls_back_to_uring_then_copy_says_why_and_completes() {
    need_child();
    let ring = ring_kib(8);
    let want = 512 + ring;
    // 64 KiB: the ring (8 KiB) fits, the ring and the 512 KiB region do not.
    let r = child("auto", 64 << 10, 8, 64);
    assert!(r.completed(), "{r:?}");
    let fb = r.all("FALLBACK");
    assert_eq!(fb.len(), 1, "{r:?}");
    assert!(
        fb[0].starts_with("uring-zc RLIMIT_MEMLOCK (65536 B)")
            && fb[0].contains(&format!("ulimit -l {want}")),
        "{r:?}"
    );
    let note = r.get("NOTE").unwrap_or_else(|| panic!("no note: {r:?}"));
    assert!(
        note.contains("uring-zc refused: RLIMIT_MEMLOCK") && note.ends_with("sending with uring"),
        "{note}"
    );
    let switch = r
        .get("SWITCH")
        .unwrap_or_else(|| panic!("no switch: {r:?}"));
    assert!(
        switch.starts_with("at 0.000s: uring-zc refused") && switch.ends_with("sending with uring"),
        "{switch}"
    );
    assert!(r.get("SENT").unwrap().contains("notifications=0"), "{r:?}");

    // 4 KiB: not even the ring fits: copy (where the ring is charged; else uring again).
    let r = child("auto", 64 << 10, 8, 4);
    assert!(r.completed(), "{r:?}");
    let fb = r.all("FALLBACK");
    if ring == 0 {
        assert_eq!(fb.len(), 1, "{r:?}");
        assert!(
            r.get("NOTE").unwrap().ends_with("sending with uring"),
            "{r:?}"
        );
    } else {
        assert_eq!(fb.len(), 2, "{r:?}");
        assert!(
            fb[0].starts_with("uring-zc ") && fb[1].starts_with("uring RLIMIT_MEMLOCK"),
            "{r:?}"
        );
        assert!(fb[1].contains("ulimit -l 8"), "{r:?}");
        assert!(
            r.get("NOTE").unwrap().ends_with("sending with copy"),
            "{r:?}"
        );
    }

    // Enough for zero copy: no fallback.
    let r = child("auto", 64 << 10, 8, want);
    assert!(r.completed(), "{r:?}");
    assert!(
        r.all("FALLBACK").is_empty() && r.get("NOTE").is_none(),
        "{r:?}"
    );
    assert!(!r.get("SENT").unwrap().contains("notifications=0"), "{r:?}");

    // Sends too small for zero copy lock nothing at all.
    let r = child("auto", 4096, 8, 4);
    assert!(r.completed(), "{r:?}");
    assert!(r.all("FALLBACK").is_empty(), "{r:?}");
}

#[zcnet_testkit::test]
fn a_limit_shared_with_other_locked_memory_says_so_and_leaves_room_for_it() {
    need_child();
    // A first uring-zc sender of the same user holds 520 KiB (512 where the ring is not
    // charged); 1 MiB (1008 KiB) would hold either alone, not both.
    let own = 512 + ring_kib(8);
    let limit = 2 * own - 16;
    let r = child("uring-zc+hold", 64 << 10, 8, limit);
    assert!(r.lines.iter().any(|l| l == "HOLD-OK"), "{r:?}");
    assert!(r.memlock_too_small(), "{r:?}");
    let e = r.get("NEW-ERR").unwrap();
    assert!(
        e.contains("other locked memory of this user counts against the same limit"),
        "{e}"
    );
    // Its own 520 KiB plus up to the current limit for the others.
    let kib = r.suggested_kib();
    assert_eq!(kib, own + limit, "{e}");
    let ok = child("uring-zc+hold", 64 << 10, 8, kib);
    assert!(
        ok.lines.iter().any(|l| l == "HOLD-OK") && ok.completed(),
        "{ok:?}"
    );
}

zcnet_testkit::main!();
