//! Tests through the namespace lab (root; each skips with a printed reason otherwise): the
//! zero-copy accounting matches the kernel's truth on each path — UDP+GSO into the ifb sink is
//! zero-copy, TCP over veth is copied — and the lab leaves nothing behind.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::Duration;
use zcnet::net;
use zcnet::{Pattern, Region, Sender, Socket, TxConfig, TxMode, TxStats};
use zcnet_tools::bench::drain_stream;
use zcnet_tools::lab::{self, Lab};

fn need_root() {
    zcnet_testkit::require_root("network namespaces for the lab");
}

fn send_n(sock: Socket, mode: TxMode, size: usize, n: usize, pattern: Option<Pattern>) -> TxStats {
    let mut cfg = TxConfig::new(mode);
    cfg.buf_size = size;
    let region = Region::anonymous(zcnet::tx::region_len(&cfg)).unwrap();
    let mut tx = Sender::new(sock, region, &cfg).unwrap();
    let mut off = 0u64;
    for _ in 0..n {
        let mut b = tx.buffer().unwrap();
        if let Some(p) = pattern {
            p.fill(off, &mut b.bytes_mut().unwrap()[..size]);
        }
        tx.send(b, size).unwrap();
        off += size as u64;
    }
    tx.finish().unwrap()
}

#[zcnet_testkit::test]
fn sink_zero_copy_is_confirmed_by_the_kernel() {
    need_root();
    let mut lab = Lab::new().unwrap();
    let sink = lab.sink().unwrap();
    for mode in TxMode::ALL {
        let ns = sink.ns.clone();
        let dest = sink.dest;
        let st = thread::spawn(move || {
            lab::enter(&ns).unwrap();
            let s = net::connect_udp(dest, Some(net::GSO_SEGMENT_1500)).unwrap();
            send_n(s.into(), mode, 64_000, 2000, None)
        })
        .join()
        .unwrap();
        assert_eq!(st.bytes, 2000 * 64_000, "{mode}");
        assert_eq!(
            st.zerocopy_bytes + st.copied_bytes,
            st.bytes,
            "{mode}: all confirmed"
        );
        match mode {
            TxMode::Copy | TxMode::Uring => assert_eq!(st.copied_bytes, st.bytes, "{mode} copies"),
            TxMode::MsgZerocopy | TxMode::UringZc | TxMode::Auto => {
                assert_eq!(
                    st.zerocopy_bytes, st.bytes,
                    "{mode}: the sink path is really zero-copy"
                );
                assert_eq!(st.copied_notifications, 0, "{mode}");
                assert!(
                    st.switches.is_empty(),
                    "{mode}: auto stays zero-copy: {:?}",
                    st.switches
                );
            }
            TxMode::Devmem => unreachable!("devmem is not in TxMode::ALL"),
        }
    }
}

#[zcnet_testkit::test]
fn veth_tcp_is_copied_and_data_verified() {
    need_root();
    let mut lab = Lab::new().unwrap();
    let veth = lab.veth().unwrap();
    for (i, mode) in TxMode::ALL.into_iter().enumerate() {
        let pattern = Pattern::new(1000 + i as u64);
        let b_ns = veth.b.clone();
        let addr = SocketAddr::new(veth.b_addr, 6000 + i as u16);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let rx = thread::spawn(move || {
            lab::enter(&b_ns).unwrap();
            let l = net::listen_tcp(addr).unwrap();
            ready_tx.send(()).unwrap();
            let (mut s, _) = l.accept().unwrap();
            drain_stream(&mut s, Some(pattern), None, &zcnet::Cancel::new()).unwrap()
        });
        ready_rx.recv().unwrap();
        let a_ns = veth.a.clone();
        let st = thread::spawn(move || {
            lab::enter(&a_ns).unwrap();
            let s = TcpStream::connect(addr).unwrap();
            send_n(s.into(), mode, 65536, 800, Some(pattern))
        })
        .join()
        .unwrap();
        let rep = rx.join().unwrap();
        assert_eq!(rep.bytes, 800 * 65536, "{mode}: verified bytes received");
        assert_eq!(st.bytes, rep.bytes, "{mode}");
        assert_eq!(
            st.zerocopy_bytes, 0,
            "{mode}: TCP over veth is copied by the kernel"
        );
        assert_eq!(st.copied_bytes, st.bytes, "{mode}");
    }
}

#[zcnet_testkit::test]
fn lab_deletes_its_namespaces_on_drop_and_on_error() {
    need_root();
    // The root namespace's interfaces, which the lab never adds to or takes from (a driver
    // loaded with its defaults would add ifb0/ifb1 or dummy0 here).
    let root = || {
        let mut v: Vec<String> = std::fs::read_dir("/sys/class/net")
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let before = root();
    let names = {
        let mut lab = Lab::new().unwrap();
        lab.veth().unwrap();
        lab.sink().unwrap();
        let _ = lab.dummy(); // without the dummy driver: refused, nothing added either
        assert_eq!(root(), before, "the root namespace changed");
        let names = lab.namespaces().to_vec();
        let now = lab::list_namespaces().unwrap();
        assert!(names.iter().all(|n| now.contains(n)), "created: {names:?}");
        // A second veth in the same lab collides on purpose: the error must not leak anything.
        assert!(lab.veth().is_err());
        lab.namespaces().to_vec()
    };
    let now = lab::list_namespaces().unwrap();
    for n in &names {
        assert!(!now.contains(n), "{n} left behind");
    }
    assert!(names
        .iter()
        .all(|n| n.starts_with(&format!("zcnet-{}-", std::process::id()))));
}

/// A lab namespace whose pid is alive but belongs to a later process (another start time:
/// pid 1 in every container) is stale and cleaned up; this process's own labs are not.
#[zcnet_testkit::test]
fn a_reused_pid_does_not_keep_a_stale_lab_alive() {
    need_root();
    let me = std::process::id();
    let stale = format!("zcnet-{me}-999s1-x");
    let ip = |args: &[&str]| {
        assert!(std::process::Command::new("ip")
            .args(args)
            .status()
            .unwrap()
            .success());
    };
    ip(&["netns", "add", &stale]);
    let mut lab = Lab::new().unwrap();
    lab.veth().unwrap();
    let mine = lab.namespaces().to_vec();
    // Lab::new cleans up first (so may any lab another test makes meanwhile); once more here.
    lab::cleanup_stale().unwrap();
    let now = lab::list_namespaces().unwrap();
    let left = now.contains(&stale);
    if left {
        ip(&["netns", "del", &stale]);
    }
    assert!(!left, "{stale} was taken for a live lab: {now:?}");
    assert!(
        mine.iter().all(|n| now.contains(n)),
        "this process's lab stays: {now:?}"
    );
}

#[zcnet_testkit::test]
fn bench_runs_every_path_and_tears_down() {
    need_root();
    let cfg = zcnet_tools::bench::TxBenchConfig {
        modes: vec![TxMode::Copy, TxMode::UringZc],
        sizes: vec![16384],
        duration: Duration::from_millis(300),
        ..Default::default()
    };
    let mut starts = 0;
    let report = zcnet_tools::bench::run_tx(&cfg, &mut |p| {
        // One start per row's first run (a mode and its raw loop run several times).
        if let zcnet_tools::bench::Progress::Start { run: (1, _), .. } = p {
            starts += 1
        }
    })
    .unwrap();
    assert_eq!(starts, report.rows.len());
    // 3 paths x 2 modes + the raw baseline on sink
    assert_eq!(
        report.rows.len(),
        7,
        "{:?}",
        report
            .rows
            .iter()
            .map(|r| (&r.path, &r.tx))
            .collect::<Vec<_>>()
    );
    for r in &report.rows {
        assert!(r.error.is_none(), "{} {}: {:?}", r.path, r.tx, r.error);
        assert!(r.bytes > 0);
        if r.path != "sink" {
            assert_eq!(r.received_bytes, Some(r.bytes), "{} {}", r.path, r.tx);
            assert_eq!(r.zerocopy_bytes, 0);
        } else if r.tx != "copy" {
            assert_eq!(r.zerocopy_bytes, r.bytes, "{}", r.tx);
        }
    }
}

#[zcnet_testkit::test]
fn each_zero_copy_mode_gets_its_raw_loop_on_the_sink() {
    need_root();
    let cfg = zcnet_tools::bench::TxBenchConfig {
        paths: vec![zcnet_tools::bench::PathKind::Sink],
        modes: vec![TxMode::MsgZerocopy, TxMode::UringZc],
        sizes: vec![16384],
        duration: Duration::from_millis(300),
        ..Default::default()
    };
    let report = zcnet_tools::bench::run_tx(&cfg, &mut |_| {}).unwrap();
    let tx: Vec<&str> = report.rows.iter().map(|r| r.tx.as_str()).collect();
    assert_eq!(
        tx,
        [
            "msg-zerocopy",
            "uring-zc",
            "raw-uring-zc",
            "raw-msg-zerocopy"
        ]
    );
    for r in &report.rows {
        assert!(r.error.is_none(), "{}: {:?}", r.tx, r.error);
        // The sink frees every datagram unread: every byte is zero-copy, every send notified.
        assert!(r.bytes > 0 && r.zerocopy_bytes == r.bytes, "{r:?}");
        assert!(r.notifications > 0, "{r:?}");
        assert!(report.ratio_to(r, "raw-msg-zerocopy").is_some());
    }
}

/// A path the bench does not know is the caller's mistake, refused in one line (moved here from
/// zcnet's send conformance suite, whose tests do not depend on the tools).
#[zcnet_testkit::test]
fn an_unknown_bench_path_is_a_caller_mistake() {
    let e = zcnet_tools::bench::PathKind::parse("wifi").unwrap_err();
    assert!(e.is_caller_mistake(), "{e:?}");
    assert!(!e.to_string().contains('\n'), "{e}");
}

zcnet_testkit::main!();
