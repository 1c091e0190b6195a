//! `zcnet send --udp --tx af-xdp` and `zcnet recv --udp [--rx copy|af-xdp]` as a user runs
//! them, between the two namespaces of a lab veth pair (root): AF_XDP → socket, socket →
//! AF_XDP and AF_XDP → AF_XDP, every datagram checked against the pattern and the byte counts
//! of both sides equal; other UDP ports still reaching the stack while the XDP program runs;
//! the program gone once the receiver exits (normally or on SIGINT, exit 130); a wrong seed
//! caught; an address nobody answers for refused in one line; bad arguments refused with exit
//! 2 before anything is bound.
//!
//! Why the counts can be required to be equal: each run moves fewer datagrams than the
//! receiver can hold unread (4096 UMEM frames and ring entries for AF_XDP, a 32 MiB socket
//! buffer for copy), so no drop is possible even if the receiver is off the CPU the whole
//! time; the kernel's drop counters are asserted to be 0 as well.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;
use common::{stderr, zcnet, StderrLines};

use serde_json::Value;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use zcnet_tools::lab::{self, Lab, VethPath};

const BIN: &str = env!("CARGO_BIN_EXE_zcnet");

/// `zcnet ARGS` inside namespace `ns`.
fn in_ns(ns: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, BIN])
        .args(args)
        .stdin(Stdio::null());
    c
}

/// A lab with a veth pair; skips the calling test when not root.
fn lab() -> (Lab, VethPath) {
    zcnet_testkit::require_root("the namespace lab and AF_XDP");
    let mut lab = Lab::new().unwrap();
    let v = lab.veth().unwrap();
    (lab, v)
}

/// The XDP programs attached to `iface` in namespace `ns`, as the kernel reports them
/// (rtnetlink `IFLA_XDP`).
fn xdp_progs(ns: &str, iface: &str) -> Vec<u32> {
    let (ns, iface) = (ns.to_string(), iface.to_string());
    std::thread::spawn(move || {
        lab::enter(&ns).unwrap();
        zcnet::nexthop::link(&iface).unwrap().xdp_prog_ids
    })
    .join()
    .unwrap()
}

/// A receiver running in the background: its stderr read line by line.
struct Receiver {
    child: Child,
    err: StderrLines,
}

impl Receiver {
    /// Starts `zcnet recv ARGS` in `ns` and waits until it listens (the XDP program, for
    /// af-xdp, is attached before that line).
    fn start(ns: &str, args: &[&str]) -> Receiver {
        let mut child = in_ns(ns, &[&["recv"], args].concat())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let err = StderrLines::follow(&mut child);
        let mut r = Receiver { child, err };
        r.wait_for("listening on");
        r
    }

    fn wait_for(&mut self, needle: &str) {
        if self.err.wait_for(needle, Duration::from_secs(20)).is_none() {
            let _ = self.child.kill();
            panic!("no '{needle}' from zcnet recv: {}", self.err.seen);
        }
    }

    /// Waits (at most 30 s) for the exit; returns the exit code, stdout and all of stderr.
    fn finish(mut self) -> (Option<i32>, String, String) {
        let until = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > until {
                let _ = self.child.kill();
                panic!("zcnet recv did not exit: {}", self.err.seen);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut out = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        self.err.drain(Duration::from_secs(2));
        (status.code(), out, self.err.seen)
    }
}

fn json(text: &str) -> Value {
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text:?}"))
}

fn num(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} is not a count: {v}"))
}

/// One transfer: `zcnet send --udp --tx TX` in a → `zcnet recv --udp --rx RX` in b, both with
/// --verify and --json; returns both documents after checking what every pair must show.
fn transfer(v: &VethPath, tx: &str, rx: &str, size: &str, bytes: u64, port: u16) -> (Value, Value) {
    let listen = format!("10.10.0.2:{port}");
    let n = bytes.to_string();
    let mut rargs = vec![
        "--udp", "--rx", rx, "--listen", &listen, "--verify", "--bytes", &n, "--idle", "5",
        "--json",
    ];
    if rx == "af-xdp" {
        rargs.extend(["--iface", "vB"]);
    }
    let r = Receiver::start(&v.b, &rargs);
    if rx == "af-xdp" {
        assert_eq!(
            xdp_progs(&v.b, "vB").len(),
            1,
            "the receiver's XDP program is attached"
        );
    }
    let mut sargs = vec![
        "send", "--udp", "--tx", tx, &listen, "--size", size, "--verify", "--bytes", &n, "--json",
    ];
    if tx == "af-xdp" {
        sargs.extend(["--iface", "vA"]);
    }
    let s = in_ns(&v.a, &sargs).output().unwrap();
    assert!(s.status.success(), "{tx} → {rx}: send: {}", stderr(&s));
    let (code, out, err) = r.finish();
    assert_eq!(code, Some(0), "{tx} → {rx}: recv: {err}");
    let (sj, rj) = (json(&String::from_utf8_lossy(&s.stdout)), json(&out));
    // Every byte sent arrived, each datagram where the pattern says it belongs.
    assert_eq!(num(&sj, "bytes"), bytes, "{sj}");
    assert_eq!(num(&rj, "bytes"), bytes, "{tx} → {rx}: {rj}");
    assert_eq!(num(&rj, "datagrams"), num(&sj, "sends"), "{sj} {rj}");
    assert_eq!(rj["verified"], true, "{rj}");
    assert_eq!(
        (num(&rj, "missing_bytes"), num(&rj, "late")),
        (0, 0),
        "{rj}"
    );
    assert_eq!(
        (rj["rx"].as_str(), rj["stop"].as_str()),
        (Some(rx), Some("bytes"))
    );
    if tx == "af-xdp" {
        let x = &sj["af_xdp"];
        assert_eq!(sj["tx"], "af-xdp", "{sj}");
        // The kernel took and completed every frame, and counted nothing invalid.
        assert_eq!(num(x, "frames"), num(&sj, "sends"), "{sj}");
        assert_eq!(num(x, "completions"), num(&sj, "sends"), "{sj}");
        assert_eq!(num(&sj, "notifications"), num(&sj, "sends"), "{sj}");
        assert!(num(x, "kicks") > 0, "{sj}");
        assert_eq!(num(&x["xdp_statistics"], "tx_invalid_descs"), 0, "{sj}");
        assert_eq!(
            x["src"].as_str().map(|s| s.starts_with("10.10.0.1:")),
            Some(true)
        );
        // Copy mode is not zero copy, and the account says so.
        if x["bind"] == "copy" {
            assert_eq!(
                (num(&sj, "zerocopy_bytes"), num(&sj, "copied_bytes")),
                (0, bytes)
            );
            assert!(x["zerocopy_refused"].is_string(), "{sj}");
        }
    }
    if rx == "af-xdp" {
        let x = &rj["af_xdp"];
        let k = &x["xdp_statistics"];
        assert_eq!(num(x, "frames"), num(&rj, "datagrams"), "{rj}");
        for c in ["rx_dropped", "rx_ring_full", "rx_invalid_descs"] {
            assert_eq!(num(k, c), 0, "{c}: {rj}");
        }
        assert_eq!(
            (num(x, "malformed"), num(x, "other_address")),
            (0, 0),
            "{rj}"
        );
        assert_eq!(num(&rj, "unsteered"), 0, "{rj}");
        if x["bind"] == "copy" {
            assert_eq!(
                (num(&rj, "zerocopy_bytes"), num(&rj, "copied_bytes")),
                (0, bytes)
            );
        }
        // The receiver is gone, and so is its XDP program.
        assert!(xdp_progs(&v.b, "vB").is_empty(), "XDP program left on vB");
    } else {
        assert_eq!(num(&rj["socket"], "drops"), 0, "{rj}");
    }
    (sj, rj)
}

#[zcnet_testkit::test]
fn af_xdp_and_socket_datagrams_arrive_whole_in_every_pairing() {
    let (_lab, v) = lab();
    // 1,500,500 B of 1000 B datagrams (the last one 500 B): 1501 datagrams; 2 MB of 1472 B
    // (the MTU's worth): 1359. Both fit the receivers' buffering whole.
    for (i, (tx, rx)) in [("af-xdp", "copy"), ("copy", "af-xdp"), ("af-xdp", "af-xdp")]
        .into_iter()
        .enumerate()
    {
        let port = 47_300 + i as u16;
        let (sj, _) = transfer(&v, tx, rx, "1000", 1_500_500, port);
        assert_eq!(num(&sj, "sends"), 1501, "{sj}");
        let (sj, _) = transfer(&v, tx, rx, "1472", 2_000_000, port);
        assert_eq!(num(&sj, "sends"), 1359, "{sj}");
    }
}

#[zcnet_testkit::test]
fn other_ports_reach_the_stack_while_the_xdp_program_runs() {
    let (_lab, v) = lab();
    let xdp = Receiver::start(
        &v.b,
        &[
            "--udp",
            "--rx",
            "af-xdp",
            "--iface",
            "vB",
            "--listen",
            "10.10.0.2:47400",
            "--verify",
            "--bytes",
            "300000",
            "--json",
        ],
    );
    let sock = Receiver::start(
        &v.b,
        &[
            "--udp",
            "--rx",
            "copy",
            "--listen",
            "10.10.0.2:47401",
            "--verify",
            "--bytes",
            "200000",
            "--json",
        ],
    );
    // To the other port first: the stack's socket gets it while the program is attached.
    for (port, bytes) in [("47401", "200000"), ("47400", "300000")] {
        let s = in_ns(
            &v.a,
            &[
                "send",
                "--udp",
                "--tx",
                "copy",
                &format!("10.10.0.2:{port}"),
                "--size",
                "1000",
                "--verify",
                "--bytes",
                bytes,
            ],
        )
        .output()
        .unwrap();
        assert!(s.status.success(), "{}", stderr(&s));
    }
    let (code, out, err) = sock.finish();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(num(&json(&out), "bytes"), 200_000, "{out}");
    let (code, out, err) = xdp.finish();
    assert_eq!(code, Some(0), "{err}");
    let j = json(&out);
    assert_eq!(num(&j, "bytes"), 300_000, "{j}");
    assert_eq!(
        num(&j["af_xdp"], "frames"),
        300,
        "only its own port's frames: {j}"
    );
    assert!(xdp_progs(&v.b, "vB").is_empty());
}

#[zcnet_testkit::test]
fn sigint_ends_the_af_xdp_receiver_with_130_and_detaches_it() {
    let (_lab, v) = lab();
    let r = Receiver::start(
        &v.b,
        &[
            "--udp",
            "--rx",
            "af-xdp",
            "--iface",
            "vB",
            "--listen",
            "0.0.0.0:47500",
            "--verify",
        ],
    );
    let prog = xdp_progs(&v.b, "vB");
    assert_eq!(prog.len(), 1, "attached while it runs");
    let s = in_ns(
        &v.a,
        &[
            "send",
            "--udp",
            "--tx",
            "af-xdp",
            "--iface",
            "vA",
            "10.10.0.2:47500",
            "--size",
            "1200",
            "--verify",
            "--bytes",
            "120000",
        ],
    )
    .output()
    .unwrap();
    assert!(s.status.success(), "{}", stderr(&s));
    // Let the datagrams land, then Ctrl-C: the totals are printed, exit 130.
    std::thread::sleep(Duration::from_millis(300));
    let pid = r.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let (code, _, err) = r.finish();
    assert_eq!(code, Some(130), "{err}");
    assert!(
        err.contains("zcnet recv: 120000 B in 100 datagrams"),
        "{err}"
    );
    assert!(
        err.contains("not zero copy") || err.contains("zero-copy mode"),
        "{err}"
    );
    assert!(err.trim_end().ends_with("zcnet: interrupted"), "{err}");
    assert!(
        xdp_progs(&v.b, "vB").is_empty(),
        "XDP program left after SIGINT"
    );
}

/// Datagrams larger than one AF_XDP frame are dropped by the kernel: the receiver says so as
/// it happens (the drop count, the largest payload a frame holds, the fix), not only in the
/// totals after Ctrl-C.
#[zcnet_testkit::test]
fn datagrams_larger_than_a_frame_are_said_dropped_as_it_happens() {
    let (_lab, v) = lab();
    // The namespace's own lo (MTU 65536: an 8000 B datagram is one packet, a frame holds less).
    let up = Command::new("ip")
        .args(["-n", &v.b, "link", "set", "lo", "up"])
        .status()
        .unwrap();
    assert!(up.success());
    let mut r = Receiver::start(
        &v.b,
        &[
            "--udp",
            "--rx",
            "af-xdp",
            "--iface",
            "lo",
            "--listen",
            "127.0.0.1:47610",
            "--discard",
        ],
    );
    let s = in_ns(
        &v.b,
        &[
            "send",
            "127.0.0.1:47610",
            "--udp",
            "--tx",
            "copy",
            "--size",
            "8000",
            "--bytes",
            "80000",
        ],
    )
    .output()
    .unwrap();
    assert!(s.status.success(), "{}", stderr(&s));
    r.wait_for("the kernel dropped 10 datagram(s) for lo queue 0");
    assert!(
        r.err
            .seen
            .contains("at most 3798 B (zcnet send --size 3798)"),
        "{}",
        r.err.seen
    );
    assert!(Command::new("kill")
        .args(["-INT", &r.child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let (code, _, err) = r.finish();
    assert_eq!(code, Some(130), "{err}");
}

#[zcnet_testkit::test]
fn a_wrong_seed_and_an_unanswered_address_are_refused_in_one_line() {
    let (_lab, v) = lab();
    let r = Receiver::start(
        &v.b,
        &[
            "--udp",
            "--rx",
            "af-xdp",
            "--iface",
            "vB",
            "--listen",
            "10.10.0.2:47600",
            "--verify",
            "--seed",
            "1",
        ],
    );
    let s = in_ns(
        &v.a,
        &[
            "send",
            "--udp",
            "--tx",
            "af-xdp",
            "--iface",
            "vA",
            "10.10.0.2:47600",
            "--size",
            "512",
            "--verify",
            "--seed",
            "2",
            "--bytes",
            "4096",
        ],
    )
    .output()
    .unwrap();
    assert!(s.status.success(), "{}", stderr(&s));
    let (code, _, err) = r.finish();
    assert_eq!(code, Some(1), "{err}");
    let last = err.lines().last().unwrap();
    assert!(
        last.starts_with("zcnet: payload mismatch at byte 0"),
        "{err}"
    );
    assert!(
        xdp_progs(&v.b, "vB").is_empty(),
        "XDP program left after a failure"
    );

    // Nobody has 10.10.0.99: ARP gets no answer, the send fails in one line within seconds.
    let t = Instant::now();
    let o = in_ns(
        &v.a,
        &[
            "send",
            "--udp",
            "--tx",
            "af-xdp",
            "--iface",
            "vA",
            "10.10.0.99:47600",
            "--size",
            "100",
            "--bytes",
            "100",
        ],
    )
    .output()
    .unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.contains("no Ethernet address for 10.10.0.99 on vA") && e.contains("ARP"),
        "{e}"
    );
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    // A destination routed elsewhere is refused before anything is bound.
    let o = in_ns(
        &v.a,
        &[
            "send",
            "--udp",
            "--tx",
            "af-xdp",
            "--iface",
            "lo",
            "10.10.0.2:47600",
            "--size",
            "100",
            "--bytes",
            "100",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("routed via vA, not lo"),
        "{}",
        stderr(&o)
    );
}

#[zcnet_testkit::test]
fn bad_arguments_exit_2_in_one_line_naming_the_flag() {
    // lo exists everywhere (MTU 65536: one AF_XDP frame carries at most 4096 − 42 B).
    let cases: [(&[&str], &[&str]); 10] = [
        (
            &[
                "send",
                "--udp",
                "--tx",
                "af-xdp",
                "127.0.0.1:9",
                "--bytes",
                "1",
            ],
            &["--iface"],
        ),
        (
            &["send", "--tx", "af-xdp", "--iface", "lo", "127.0.0.1:9"],
            &["--udp"],
        ),
        (
            &[
                "send",
                "--udp",
                "--tx",
                "af-xdp",
                "--iface",
                "lo",
                "127.0.0.1:9",
                "--size",
                "64K",
                "--bytes",
                "1",
            ],
            &["--size 64K (65536 B)", "at most 3798 B", "use --size 3798"],
        ),
        (
            &[
                "send",
                "--udp",
                "--tx",
                "copy",
                "--iface",
                "lo",
                "127.0.0.1:9",
            ],
            &["--iface applies to --tx af-xdp"],
        ),
        (
            &["send", "--tx", "warp", "127.0.0.1:9"],
            &["'warp'", "af-xdp"],
        ),
        (&["recv", "--udp", "--rx", "af-xdp"], &["--iface"]),
        (&["recv", "--rx", "af-xdp", "--iface", "lo"], &["--udp"]),
        (
            &["recv", "--udp", "--rx", "uring"],
            &["--rx uring", "--rx copy"],
        ),
        (&["recv", "--idle", "1"], &["--idle applies to --udp"]),
        // On a stream --bytes is the length it must have: checked like any size.
        (&["recv", "--bytes", "0"], &["--bytes"]),
    ];
    for (args, named) in cases {
        let o = zcnet(args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert_eq!(e.lines().count(), 1, "{args:?}: {e}");
        assert!(e.starts_with("zcnet: "), "{args:?}: {e}");
        for n in named {
            assert!(e.contains(n), "{args:?}: no {n:?} in {e}");
        }
    }
}

/// On a lab veth (one queue each way), a queue it lacks is refused with exit 2 before anything
/// is bound or attached: AF_XDP both ways, zcrx, and `nic setup`, whose fix offers no command to
/// add queues (a veth cannot split headers, so more queues would not give it zero-copy receive).
#[zcnet_testkit::test]
fn a_queue_the_veth_lacks_is_refused_before_anything_is_made() {
    let (_lab, v) = lab();
    let refused = |ns: &str, args: &[&str], queue: &str| {
        let o = in_ns(ns, args).output().unwrap();
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert_eq!(e.lines().count(), 1, "{args:?}: {e}");
        assert!(
            e.contains(&format!("--queue {queue}: "))
                && e.contains(" has 1 ")
                && e.contains("pick one of them"),
            "{args:?}: {e}"
        );
        assert!(!e.contains("listening on"), "{args:?}: {e}");
        e
    };
    let dst = format!("{}:9", v.b_addr);
    refused(
        &v.a,
        &[
            "send", "--udp", "--tx", "af-xdp", "--iface", "vA", "--queue", "9", "--size", "1K",
            "--bytes", "1K", &dst,
        ],
        "9",
    );
    refused(
        &v.b,
        &[
            "recv",
            "--udp",
            "--rx",
            "af-xdp",
            "--iface",
            "vB",
            "--queue",
            "9",
            "--listen",
            "0.0.0.0:5300",
            "--idle",
            "1",
        ],
        "9",
    );
    refused(
        &v.b,
        &[
            "recv",
            "--rx",
            "zcrx",
            "--iface",
            "vB",
            "--queue",
            "7",
            "--listen",
            "0.0.0.0:5301",
        ],
        "7",
    );
    let e = refused(
        &v.b,
        &["nic", "setup", "--iface", "vB", "--queue", "99"],
        "99",
    );
    assert!(
        e.contains("more queues would not help: vB reports no ring parameters"),
        "{e}"
    );
    // Nothing was attached.
    assert!(xdp_progs(&v.b, "vB").is_empty());
    assert!(xdp_progs(&v.a, "vA").is_empty());
}

zcnet_testkit::main!();
