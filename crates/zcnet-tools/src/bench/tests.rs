use super::*;
use PathKind::{Loopback, Sink, Veth};

const WHAT: &str = "bench tx: nothing can run: the namespace lab (paths sink and veth)";

#[zcnet_testkit::test]
fn dummy_is_a_default_path_only_where_the_driver_exists() {
    assert_eq!(default_paths(true), PathKind::ALL.to_vec());
    assert_eq!(default_paths(false), vec![Sink, Veth, Loopback]);
    assert_eq!(
        TxBenchConfig::default().paths.contains(&PathKind::Dummy),
        lab::dummy_driver()
    );
    assert_eq!(PathKind::parse("dummy").unwrap(), PathKind::Dummy);
    assert_eq!(effective_size(PathKind::Dummy, 65536), 64_000);
}

/// On a kernel without the dummy driver (this host: CONFIG_DUMMY off), `--path dummy` is
/// refused before any lab is made, in one line naming CONFIG_DUMMY and the fix; with the
/// driver, the lab makes the device and the path sends (kernel_lab_devices runs it in 7.2).
#[zcnet_testkit::test]
fn dummy_path_without_the_driver_is_refused_in_one_line() {
    let cfg = TxBenchConfig {
        paths: vec![PathKind::Dummy],
        modes: vec![TxMode::MsgZerocopy],
        sizes: vec![65536],
        duration: Duration::from_millis(100),
        repeats: 1,
        ..TxBenchConfig::default()
    };
    if lab::dummy_driver() {
        // No refusal to see: the path runs, and the kernel sends without copying.
        zcnet_testkit::require_root("the dummy path's namespace");
        let r = run_tx(&cfg, &mut |_| {}).unwrap();
        let row = r.rows.iter().find(|r| r.tx == "msg-zerocopy").unwrap();
        assert!(row.error.is_none() && row.sends > 0, "{row:?}");
        assert_eq!(row.zerocopy_percent(), Some(100.0), "{row:?}");
        return;
    }
    let e = run_tx(&cfg, &mut |_| {}).unwrap_err();
    let m = e.to_string();
    assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
    for want in ["dummy path", "CONFIG_DUMMY", "kernel-lab.sh", "--path sink"] {
        assert!(m.contains(want), "missing '{want}' in: {m}");
    }
    assert!(!m.contains('\n'), "one line: {m}");
    // The kernel's own answer, where root can ask it: the same refusal, with what ip said.
    if zcnet::os::is_root() {
        let mut l = Lab::new().unwrap();
        let e = l.dummy().unwrap_err();
        let m = e.to_string();
        assert!(m.contains("CONFIG_DUMMY") && m.contains("; ip: "), "{m}");
        assert!(!m.contains('\n'), "one line: {m}");
    }
}

#[zcnet_testkit::test]
fn root_runs_every_path_asked_once() {
    let mut notes = Vec::new();
    let p = runnable_paths(&[Sink, Veth, Sink, Loopback], true, WHAT, &mut notes).unwrap();
    assert_eq!(p, vec![Sink, Veth, Loopback]);
    assert!(notes.is_empty());
}

#[zcnet_testkit::test]
fn without_root_the_lab_paths_are_left_out_with_a_note() {
    let mut notes = Vec::new();
    let p = runnable_paths(&[Sink, Veth, Loopback], false, WHAT, &mut notes).unwrap();
    assert_eq!(p, vec![Loopback]);
    assert_eq!(
        notes,
        ["not root: running the loopback path only (sink and veth need network namespaces; run as root for them)"]
    );
    let mut notes = Vec::new();
    runnable_paths(&[Veth, Loopback], false, WHAT, &mut notes).unwrap();
    assert_eq!(
        notes,
        ["not root: running the loopback path only (veth needs network namespaces; run as root for it)"]
    );
    let mut notes = Vec::new();
    runnable_paths(&[Loopback], false, WHAT, &mut notes).unwrap();
    assert!(notes.is_empty());
}

#[zcnet_testkit::test]
fn without_root_nothing_to_run_is_an_error_not_an_empty_table() {
    for asked in [&[Sink, Veth][..], &[Sink], &[Veth], &[Veth, Veth]] {
        let mut notes = Vec::new();
        match runnable_paths(asked, false, WHAT, &mut notes) {
            Err(e @ Error::NotRoot { .. }) => {
                let m = e.to_string();
                assert!(
                    m.contains("nothing can run") && m.contains("needs root"),
                    "{m}"
                );
                // Not the caller's mistake: the `zcnet` command exits 1, not 2.
                assert!(!e.is_caller_mistake(), "{m}");
            }
            other => panic!("{asked:?}: {other:?}"),
        }
    }
}

fn row(path: PathKind, tx: &str, size: usize, zc: u64, copied: u64) -> TxRow {
    TxRow {
        path: path.name(),
        tx: tx.into(),
        size,
        bytes: zc + copied,
        sends: (zc + copied) / size as u64,
        zerocopy_bytes: zc,
        copied_bytes: copied,
        notifications: 10,
        ..TxRow::default()
    }
}

#[zcnet_testkit::test]
fn the_reported_row_gets_its_why_line() {
    // A row once printed without a why line: sink msg-zerocopy 16 KiB at 0.69x copy, every
    // byte zero-copy.
    let r = row(Sink, "msg-zerocopy", 16384, 1 << 30, 0);
    let why = slow_zero_copy_reason(&r, Some(0.69), 17).expect("a why line");
    assert!(why.contains("avoided the copy"), "{why}");
}

/// The rule is total: every zero-copy row below 0.9x copy gets a reason, whatever its
/// path, size and accounting; rows at or above 0.9x, copy rows and failed rows get none.
#[zcnet_testkit::test]
fn every_slow_zero_copy_row_says_why() {
    let zero_copy = ["msg-zerocopy", "uring-zc", RAW_BASELINE, RAW_MSG_ZEROCOPY];
    let sizes = [1, 1024, 4096, 16383, 16384, 64000, 65536, 1 << 20];
    let accounts = [
        (0, 0),
        (0, 1000),
        (1000, 0),
        (500, 500),
        (950, 50),
        (10, 990),
    ];
    for path in PathKind::ALL {
        for tx in zero_copy.iter().chain(&["auto"]) {
            for size in sizes {
                for (zc, copied) in accounts {
                    let r = row(path, tx, size, zc * size as u64, copied * size as u64);
                    let counts = *tx != "auto" || zc > 0;
                    for ratio in [0.0, 0.1, 0.5, 0.69, 0.8999] {
                        let why = slow_zero_copy_reason(&r, Some(ratio), 17);
                        assert_eq!(why.is_some(), counts, "{r:?} at {ratio}: {why:?}");
                        assert!(why.is_none_or(|w| !w.is_empty()));
                    }
                    for ratio in [None, Some(0.9), Some(1.5)] {
                        assert!(slow_zero_copy_reason(&r, ratio, 17).is_none());
                    }
                    let mut failed = r.clone();
                    failed.error = Some("x".into());
                    assert!(slow_zero_copy_reason(&failed, Some(0.5), 17).is_none());
                }
            }
        }
        for tx in ["copy", "uring"] {
            let r = row(path, tx, 4096, 0, 4096 * 100);
            assert!(slow_zero_copy_reason(&r, Some(0.5), 17).is_none());
        }
    }
}

#[zcnet_testkit::test]
fn the_reasons_match_the_accounting() {
    let why = |r: &TxRow| slow_zero_copy_reason(r, Some(0.5), 17).unwrap_or_default();
    let all_copied = why(&row(Loopback, "uring-zc", 65536, 0, 1 << 20));
    assert!(all_copied.contains("copied every byte"), "{all_copied}");
    assert!(all_copied.contains("receive side"), "{all_copied}");
    let small_tcp = why(&row(Loopback, "msg-zerocopy", 1024, 0, 1 << 20));
    assert!(small_tcp.contains("at most 17"), "{small_tcp}");
    let sink_copied = why(&row(Sink, "uring-zc", 65536, 0, 1 << 20));
    assert!(!sink_copied.contains("receive side"), "{sink_copied}");
    let part = why(&row(Sink, "uring-zc", 65536, 1 << 19, 1 << 19));
    assert!(part.contains("copied 50 %"), "{part}");
    let small = why(&row(Sink, "msg-zerocopy", 4096, 1 << 20, 0));
    assert!(small.contains("below 16 KiB"), "{small}");
    let unknown = why(&row(Sink, "uring-zc", 65536, 0, 0));
    assert!(unknown.contains("no notification"), "{unknown}");
}

#[zcnet_testkit::test]
fn a_mode_and_its_raw_loop_alternate_and_the_rest_run_once() {
    let cases: Vec<String> = [
        "copy",
        "msg-zerocopy",
        "uring-zc",
        RAW_BASELINE,
        RAW_MSG_ZEROCOPY,
    ]
    .map(String::from)
    .to_vec();
    let order = run_order(&cases, 2);
    assert_eq!(
        order,
        [
            (0, 0, 1),
            (2, 0, 2),
            (3, 0, 2),
            (3, 1, 2),
            (2, 1, 2),
            (1, 0, 2),
            (4, 0, 2),
            (4, 1, 2),
            (1, 1, 2)
        ]
    );
    // No raw loop (not the sink, or --no-baseline): every case once, in order.
    let order = run_order(&cases[..3], 3);
    assert_eq!(order, [(0, 0, 1), (1, 0, 1), (2, 0, 1)]);
    assert_eq!(run_order(&cases, 0).len(), 5);
}

#[zcnet_testkit::test]
fn overhead_is_the_median_of_paired_runs_with_its_spread() {
    let o = Overhead::of(&[(97.0, 100.0), (45.0, 50.0), (200.0, 200.0)]).unwrap();
    assert_eq!((o.runs, o.min, o.median, o.max), (3, 0.9, 0.97, 1.0));
    assert!(!o.noisy());
    let l = o.line("sink", 16384, "msg-zerocopy", RAW_MSG_ZEROCOPY);
    assert_eq!(
        l,
        "  sink 16384 B msg-zerocopy / raw-msg-zerocopy: 0.97 (3 paired runs: 0.90 to 1.00)"
    );
    // A noisy run once read 1.29 and 0.55: noise, and the line says so.
    let noisy = Overhead::of(&[(129.0, 100.0), (55.0, 100.0), (90.0, 100.0)]).unwrap();
    assert!(noisy.noisy());
    assert!(noisy
        .line("sink", 4096, "uring-zc", RAW_BASELINE)
        .contains("noisy"));
    assert!(Overhead::of(&[(1.0, 0.0)]).is_none());
    let once = Overhead::of(&[(1.0, 1.0)]).unwrap();
    assert!(once
        .line("sink", 1, "uring-zc", RAW_BASELINE)
        .contains("1 run"));
    assert!(OVERHEAD_HEADING.contains("1.00 = no overhead"));
}
