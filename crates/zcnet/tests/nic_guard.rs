#![allow(clippy::unwrap_used)]
//! The NIC setup guard against a simulated NIC: every change is recorded before it is made,
//! a refusal at any step leaves the device exactly as it was, and a state file left by a
//! crash is enough to restore it.

mod common;

use std::collections::BTreeMap;

use common::fake_nic::{files, mlx5_like, tcp_9999, tempdir, Config, FakeNic};
use proptest::prelude::*;
use zcnet::nic::{
    self, default_indir, restore_from_file, split, FlowSpec, NicControl, NicGuard, NicSetup, Proto,
    RxChannels,
};
use zcnet::Error;

#[zcnet_testkit::test]
fn setup_makes_every_change_and_restore_undoes_them() {
    let dir = tempdir();
    let before = mlx5_like();
    let nic = FakeNic::new(before.clone(), None);
    let g = NicGuard::apply(nic.clone(), &tcp_9999(7), &dir).unwrap();
    let now = nic.cfg();
    assert_eq!(
        (now.split, now.hds, now.ntuple),
        (split::ENABLED, Some(0), Some(true))
    );
    assert!(
        !now.indir.contains(&7),
        "queue 7 still in RSS: {:?}",
        now.indir
    );
    assert_eq!(now.indir.len(), 128);
    for q in 0..7 {
        assert!(now.indir.contains(&q), "queue {q} lost from RSS");
    }
    let rule = FlowSpec {
        proto: Proto::Tcp,
        ipv6: false,
        dst_port: 9999,
        queue: 7,
    };
    assert_eq!(now.rules.values().copied().collect::<Vec<_>>(), vec![rule]);
    assert_eq!(g.changes().len(), 4);
    let state = g.state_path().unwrap().to_path_buf();
    let (owner, recs) = nic::state::read(&state).unwrap();
    assert_eq!((owner.iface.as_str(), owner.queue), ("fake0", 7));
    assert!(recs.iter().all(|r| r.done));
    assert_eq!(g.restore().unwrap(), 4);
    assert_eq!(nic.cfg(), before);
    assert_eq!(files(&dir), 0, "state file left behind");
}

#[zcnet_testkit::test]
fn a_rule_installed_already_is_not_inserted_again() {
    // The user's own rule is the one setup would insert: a duplicate would add nothing, and a
    // restore after a crash between its insert and its record (which finds it by what it
    // matches) would delete the user's rule with it (nic_sigkill.rs kills setup there).
    let dir = tempdir();
    let mut before = mlx5_like();
    before.ntuple = Some(true);
    let rule = FlowSpec {
        proto: Proto::Tcp,
        ipv6: false,
        dst_port: 9999,
        queue: 7,
    };
    before.rules.insert(3, rule);
    let nic = FakeNic::new(before.clone(), None);
    let g = NicGuard::apply(nic.clone(), &tcp_9999(7), &dir).unwrap();
    assert_eq!(nic.cfg().rules, before.rules);
    assert_eq!(g.changes().len(), 2, "{:?}", g.changes());
    // The same port to another queue is another rule: inserted.
    let g2_dir = tempdir();
    let nic2 = FakeNic::new(before.clone(), None);
    let g2 = NicGuard::apply(nic2.clone(), &tcp_9999(6), &g2_dir).unwrap();
    assert_eq!(nic2.cfg().rules.len(), 2);
    assert_eq!((g.restore().unwrap(), g2.restore().unwrap()), (2, 3));
    assert_eq!((nic.cfg(), nic2.cfg()), (before.clone(), before));
}

/// The device is read again once the state file is claimed (35b1455; that fix had no test of
/// its own): a setup that held the interface until just then may have put header split back
/// off after the first read saw it on, and the new setup must turn it on, not skip it. Here
/// the earlier holder's restore lands right after the first read (the reads `preflight`
/// makes, the same as the setup's check); the claim itself is a file, not a device call.
#[zcnet_testkit::test]
fn the_device_is_read_again_once_the_state_file_is_claimed() {
    let dir = tempdir();
    let before = mlx5_like();
    let mut held = before.clone();
    (held.split, held.hds) = (split::ENABLED, Some(0));
    let mut reads = FakeNic::new(held.clone(), None);
    nic::preflight(&mut reads, &tcp_9999(7)).unwrap();
    let after_first_read = reads.boundaries();
    let nic = FakeNic::new(held, None).changing_at(after_first_read, before.clone());
    let g = NicGuard::apply(nic.clone(), &tcp_9999(7), &dir).unwrap();
    let now = nic.cfg();
    assert_eq!(
        (now.split, now.hds),
        (split::ENABLED, Some(0)),
        "header split turned on from what the device has"
    );
    assert_eq!(g.restore().unwrap(), 4);
    assert_eq!(nic.cfg(), before);
}

#[zcnet_testkit::test]
fn drop_restores() {
    let dir = tempdir();
    let before = mlx5_like();
    let nic = FakeNic::new(before.clone(), None);
    {
        let _g = NicGuard::apply(nic.clone(), &tcp_9999(3), &dir).unwrap();
        assert_ne!(nic.cfg(), before);
    }
    assert_eq!(nic.cfg(), before);
    assert_eq!(files(&dir), 0);
}

#[zcnet_testkit::test]
fn a_refusal_at_any_step_leaves_the_device_as_it_was() {
    // Four changes: header split, ntuple, RSS, rule.
    for k in 0..4 {
        let dir = tempdir();
        let before = mlx5_like();
        let nic = FakeNic::new(before.clone(), Some(k));
        let e = NicGuard::apply(nic.clone(), &tcp_9999(7), &dir).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("fake driver refuses"), "step {k}: {msg}");
        let undo = if k == 0 {
            "nothing was changed"
        } else {
            "were undone"
        };
        assert!(msg.contains(undo), "step {k}: {msg}");
        assert_eq!(nic.cfg(), before, "step {k}");
        assert_eq!(files(&dir), 0, "step {k}: state file left behind");
    }
}

#[zcnet_testkit::test]
fn bad_queue_and_missing_ntuple_change_nothing() {
    let dir = tempdir();
    let before = mlx5_like();
    let nic = FakeNic::new(before.clone(), None);
    let e = NicGuard::apply(nic.clone(), &tcp_9999(8), &dir).unwrap_err();
    assert!(e.to_string().contains("has 8 RX queue(s) (0..7)"), "{e}");
    let mut no_ntuple = mlx5_like();
    no_ntuple.ntuple = None;
    let nic2 = FakeNic::new(no_ntuple.clone(), None);
    let e = NicGuard::apply(nic2.clone(), &tcp_9999(1), &dir).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("does not offer ntuple-filters"), "{msg}");
    assert!(
        msg.contains("were undone"),
        "header split was on and must be undone: {msg}"
    );
    assert_eq!((nic.cfg(), nic2.cfg()), (before, no_ntuple));
    assert_eq!(files(&dir), 0);
}

#[zcnet_testkit::test]
fn queue_refusals_name_a_command_that_works_or_say_there_is_none() {
    // `nic setup --iface lo` once suggested `ethtool -L lo combined 2`, which
    // cannot work on lo (no channel control) and needs a tool that may not be installed.
    let dir = tempdir();
    let mut one = mlx5_like();
    one.rings = 1;
    one.indir = default_indir(128, 1);
    for (channels, want, unwanted) in [
        // lo/ifb: no channels at all.
        (None, "no command can give it more RX queues", "ethtool -L"),
        // A driver at its maximum.
        (
            Some(RxChannels {
                combined: 1,
                combined_max: 1,
                ..RxChannels::default()
            }),
            "allows at most 1 RX queue(s)",
            "ethtool -L",
        ),
        // One that can have more: the library's channel change, which needs no ethtool.
        (
            Some(RxChannels {
                combined: 1,
                combined_max: 4,
                ..RxChannels::default()
            }),
            "add one: nic::LiveNic::set_channels (fake0, combined 2)",
            "combined N",
        ),
    ] {
        let nic = FakeNic::new(one.clone(), None).with_channels(channels);
        let e = NicGuard::apply(nic.clone(), &tcp_9999(0), &dir).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("has one RX queue"), "{msg}");
        assert!(msg.contains(want), "{channels:?}: {msg}");
        assert!(!msg.contains(unwanted), "{channels:?}: {msg}");
        assert!(msg.contains("nothing was changed"), "{msg}");
        // The same refusal without privileges: reads only.
        let mut ctl = nic.clone();
        let e = nic::preflight(&mut ctl, &tcp_9999(0)).unwrap_err();
        assert!(e.to_string().contains(want), "{e}");
        assert_eq!(nic.cfg(), one);
    }
    // A queue past the last: the count to reach, or the driver's limit.
    let nic = FakeNic::new(mlx5_like(), None);
    let e = NicGuard::apply(nic, &tcp_9999(11), &dir).unwrap_err();
    assert!(
        e.to_string().contains(
            "pick one of them, or add queues: nic::LiveNic::set_channels (fake0, combined 12)"
        ),
        "{e}"
    );
    let nic = FakeNic::new(mlx5_like(), None);
    let e = NicGuard::apply(nic, &tcp_9999(16), &dir).unwrap_err();
    assert!(e.to_string().contains("at most 16 RX queue(s)"), "{e}");
    assert_eq!(files(&dir), 0);
}

/// A device that cannot split headers (no ring parameters, as veth) is refused for that first,
/// whatever else is wrong with it: advice to add queues would have the user change channels
/// (which zcnet does not undo) only to be refused on header split afterwards.
#[zcnet_testkit::test]
fn no_header_split_is_said_before_any_queue_advice() {
    let dir = tempdir();
    let mut one = mlx5_like();
    one.rings = 1;
    one.indir = default_indir(128, 1);
    for (cfg, queue) in [(one, 0), (mlx5_like(), 11), (mlx5_like(), 1)] {
        let nic = FakeNic::new(cfg.clone(), None).without_ringparam();
        let mut ctl = nic.clone();
        let pre = nic::preflight(&mut ctl, &tcp_9999(queue)).unwrap_err();
        let applied = NicGuard::apply(nic.clone(), &tcp_9999(queue), &dir).unwrap_err();
        for e in [pre, applied] {
            let msg = e.to_string();
            assert!(msg.contains("header split cannot be turned on"), "{msg}");
            assert!(
                !msg.contains("nic channels") && !msg.contains("queue"),
                "{msg}"
            );
            assert!(msg.contains("nothing was changed"), "{msg}");
        }
        assert_eq!(nic.cfg(), cfg);
        assert_eq!(files(&dir), 0);
    }
}

#[zcnet_testkit::test]
fn preflight_passes_a_device_only_privileges_stand_in_the_way_of() {
    let nic = FakeNic::new(mlx5_like(), None);
    let mut ctl = nic.clone();
    nic::preflight(&mut ctl, &tcp_9999(7)).unwrap();
    assert_eq!(nic.cfg(), mlx5_like(), "preflight changes nothing");
}

#[zcnet_testkit::test]
fn a_second_setup_is_refused_while_changes_are_applied() {
    let dir = tempdir();
    let nic = FakeNic::new(mlx5_like(), None);
    let g = NicGuard::apply(nic.clone(), &tcp_9999(7), &dir).unwrap();
    let applied = nic.cfg();
    let e = NicGuard::apply(nic.clone(), &tcp_9999(6), &dir).unwrap_err();
    assert!(
        e.to_string()
            .contains("nic::restore_from_file (interface fake0)"),
        "{e}"
    );
    assert_eq!(nic.cfg(), applied, "the refused setup touched the device");
    drop(g);
}

#[zcnet_testkit::test]
fn a_kept_setup_is_restored_from_its_state_file() {
    let dir = tempdir();
    let before = mlx5_like();
    let nic = FakeNic::new(before.clone(), None);
    let path = NicGuard::apply(nic.clone(), &tcp_9999(5), &dir)
        .unwrap()
        .keep()
        .unwrap();
    assert_ne!(nic.cfg(), before, "keep() must leave the changes");
    let mut again = nic.clone();
    let recs = restore_from_file(&mut again, &path).unwrap();
    assert_eq!(recs.len(), 4);
    assert_eq!(nic.cfg(), before);
    assert!(!path.exists());
}

/// A restore that finds another rule at the location its rule had (its own deleted by an earlier,
/// partial restore, the location reused since) leaves that rule alone.
#[zcnet_testkit::test]
fn a_restore_never_deletes_a_rule_that_took_its_rules_location() {
    let dir = tempdir();
    let before = mlx5_like();
    let mut nic = FakeNic::new(before.clone(), None);
    let path = NicGuard::apply(nic.clone(), &tcp_9999(5), &dir)
        .unwrap()
        .keep()
        .unwrap();
    let (_, recs) = nic::state::read(&path).unwrap();
    let Some(zcnet::nic::Change::Rule {
        location: Some(ours),
        ..
    }) = recs
        .iter()
        .map(|r| r.change.clone())
        .find(|c| matches!(c, zcnet::nic::Change::Rule { .. }))
    else {
        panic!("no rule recorded: {recs:?}");
    };
    // Someone deletes the rule and another takes its location.
    nic.delete_rule(ours).unwrap();
    let theirs = FlowSpec {
        proto: Proto::Tcp,
        ipv6: false,
        dst_port: 4242,
        queue: 1,
    };
    assert_eq!(nic.insert_rule_at(ours, &theirs), ours);
    // Their rule keeps ntuple busy, so the restore stops there, and says so; what matters
    // here is that it never deleted their rule.
    let e = restore_from_file(&mut nic.clone(), &path).unwrap_err();
    assert!(e.to_string().contains("busy"), "{e}");
    let after = nic.cfg();
    assert_eq!(after.rules.get(&ours), Some(&theirs), "their rule stays");
    assert_eq!(
        after.indir, before.indir,
        "the RSS table, undone before ntuple, is back"
    );
    assert!(path.exists(), "the state file stays for a later restore");
}

#[zcnet_testkit::test]
fn a_crash_between_insert_and_record_is_restored_by_matching_the_rule() {
    let dir = tempdir();
    let before = mlx5_like();
    let nic = FakeNic::new(before.clone(), None);
    let path = NicGuard::apply(nic.clone(), &tcp_9999(5), &dir)
        .unwrap()
        .keep()
        .unwrap();
    // Cut the file as a crash right after the insert would: drop the rule's 'done' line and
    // tear the last line.
    let text = std::fs::read_to_string(&path).unwrap();
    let cut: Vec<&str> = text.lines().filter(|l| !l.starts_with("done 3")).collect();
    std::fs::write(&path, format!("{}\ndone 9", cut.join("\n"))).unwrap();
    let (_, recs) = nic::state::read(&path).unwrap();
    assert!(!recs[3].done);
    restore_from_file(&mut nic.clone(), &path).unwrap();
    assert_eq!(nic.cfg(), before);
}

#[zcnet_testkit::test]
fn corrupt_state_files_are_named_in_the_error() {
    let dir = tempdir();
    let p = dir.join("nic-1-x.state");
    std::fs::write(&p, "something else\n").unwrap();
    let e = restore_from_file(&mut FakeNic::new(mlx5_like(), None), &p).unwrap_err();
    assert!(e.to_string().contains("nic-1-x.state"), "{e}");
    assert!(
        p.exists(),
        "an unreadable file is left for a person to look at"
    );
}

#[zcnet_testkit::test]
fn a_state_file_appears_whole_and_stale_headers_are_swept() {
    use zcnet::nic::state::{read, state_path, Owner, StateFile};
    let dir = tempdir();
    let owner = Owner {
        netns: 1,
        ..Owner::this_process("x0", 7, 3)
    };
    let path = state_path(&dir, "x0");
    // A header left by a process killed before linking it (pid 0 is never a process's).
    let stale = format!("{}.tmp.0", path.display());
    std::fs::write(&stale, "zcnet-nic").unwrap();
    let f = StateFile::create(&dir, &owner).unwrap();
    assert!(!std::path::Path::new(&stale).exists(), "stale header swept");
    // The file is readable as soon as it exists: the owner line is in it, no temp file beside.
    let (o, records) = read(&path).unwrap();
    assert_eq!((o.pid, o.ifindex, o.queue), (owner.pid, 7, 3));
    assert_eq!((o.pidns, o.start), (owner.pidns, owner.start));
    assert!(o.pidns != 0 && o.start != 0, "{o:?}");
    assert!(records.is_empty());
    assert_eq!(files(&dir), 1, "only the state file");
    // A second setup is refused, naming the owner, and leaves no temp file either.
    let e = StateFile::create(&dir, &owner).unwrap_err().to_string();
    assert!(e.contains(&format!("pid {}", owner.pid)), "{e}");
    assert_eq!(files(&dir), 1);
    f.remove().unwrap();
    assert_eq!(files(&dir), 0);
}

fn any_config() -> impl Strategy<Value = (Config, u32)> {
    (
        prop_oneof![
            Just(split::UNKNOWN),
            Just(split::DISABLED),
            Just(split::ENABLED)
        ],
        proptest::option::of(0u32..1024),
        proptest::option::of(any::<bool>()),
        2u32..16,
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(|(s, hds, ntuple, rings, custom, seed)| {
            let mut indir = default_indir(64, rings);
            if custom {
                for (i, e) in indir.iter_mut().enumerate() {
                    *e = ((seed >> (i % 60)) as u32) % rings;
                }
            }
            let q = (seed % rings as u64) as u32;
            let cfg = Config {
                split: s,
                hds,
                ntuple,
                rings,
                indir,
                rules: BTreeMap::new(),
            };
            (cfg, q)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Whatever the device looked like and wherever it refuses, setup + restore (or the
    /// failed setup) leaves it as it was, with no state file.
    #[zcnet_testkit::test]
    fn restore_is_exact((cfg, q) in any_config(), fail_at in proptest::option::of(0u32..5), rule in any::<bool>()) {
        let dir = tempdir();
        let nic = FakeNic::new(cfg.clone(), fail_at);
        let setup = NicSetup { queue: q, flow: rule.then_some((Proto::Udp, true, 4791)) };
        match NicGuard::apply(nic.clone(), &setup, &dir) {
            Ok(g) => {
                let now = nic.cfg();
                prop_assert!(!now.indir.contains(&q));
                prop_assert_eq!(now.split, split::ENABLED);
                drop(g);
            }
            Err(e) => prop_assert!(matches!(e, Error::NicSetup { .. }), "{}", e),
        }
        // A refusal during restore is possible too (fail_at past the setup's calls): then the
        // state file stays and restore_from_file finishes the job.
        for p in nic::state::list(&dir) {
            nic.set_fail_at(None);
            restore_from_file(&mut nic.clone(), &p).unwrap();
        }
        prop_assert_eq!(nic.cfg(), cfg);
        prop_assert_eq!(files(&dir), 0);
    }
}

/// A thread that entered a namespace of its own files its state under that namespace, not its
/// process's (which /proc/self/ns/net names): a restore in the root namespace must not take
/// it for one of the root's interfaces of the same name.
#[zcnet_testkit::test]
fn the_state_file_is_named_by_the_calling_threads_namespace() {
    zcnet_testkit::require_root("to move a thread into a network namespace of its own");
    let main = zcnet::nic::state::current_netns();
    let dir = std::path::Path::new("/run/zcnet");
    let here = zcnet::nic::state::state_path(dir, "eth0");
    let (inside, path) = std::thread::spawn(move || {
        zcnet_sys::os::unshare_netns().unwrap();
        (
            zcnet::nic::state::current_netns(),
            zcnet::nic::state::state_path(dir, "eth0"),
        )
    })
    .join()
    .unwrap();
    assert_ne!(inside, main);
    assert_ne!(path, here);
    assert_eq!(
        zcnet::nic::state::current_netns(),
        main,
        "this thread did not move"
    );
}

/// Whether the process that made a state file's changes still runs is told by its pid *and*
/// start time (a pid reused since is not it), and across PID namespaces by the processes of its
/// namespace visible from here (`NSpid`): a `zcnet` that set the NIC up in a container and
/// still runs is alive to a restore from the host, whatever its pid there.
#[zcnet_testkit::test(timeout = 60)]
fn the_owner_is_told_by_pid_start_time_and_pid_namespace() {
    use zcnet::nic::state::{owner_liveness, Liveness, Owner, Process};
    let me = Owner::this_process("x0", 7, 3);
    assert_eq!(owner_liveness(&me), Liveness::Alive);
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let theirs = Owner {
        pid: child.id(),
        start: proc_start(child.id()),
        ..me.clone()
    };
    assert_eq!(owner_liveness(&theirs), Liveness::Alive);
    // The same pid, another start time: a later process given the pid, not the owner.
    let reused = Owner {
        start: theirs.start + 1,
        ..theirs.clone()
    };
    assert_eq!(owner_liveness(&reused), Liveness::Gone);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(owner_liveness(&theirs), Liveness::Gone);

    // A process in a PID namespace of its own, where it is pid 1.
    zcnet_testkit::require_root("to make a PID namespace (unshare --pid)");
    let mut outer = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--kill-child", "sleep", "30"])
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    let inner = loop {
        let kids = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", outer.id()))
            .unwrap_or_default();
        if let Some(k) = kids.split_whitespace().next() {
            break k.parse::<u32>().unwrap();
        }
        assert!(t0.elapsed().as_secs() < 10, "unshare made no child");
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let ns = Process::of_pid(inner).unwrap();
    assert_ne!(ns.pidns, me.pidns, "a PID namespace of its own");
    let contained = Owner {
        pid: 1,
        pidns: ns.pidns,
        start: ns.start,
        ..me.clone()
    };
    assert_eq!(owner_liveness(&contained), Liveness::Alive);
    // Its namespace is visible and holds no process 2: gone.
    let other = Owner {
        pid: 2,
        ..contained.clone()
    };
    assert_eq!(owner_liveness(&other), Liveness::Gone);
    // SIGKILL to unshare: --kill-child takes its child (the namespace's pid 1) with it.
    outer.kill().unwrap();
    outer.wait().unwrap();
    let t0 = std::time::Instant::now();
    while owner_liveness(&contained) != Liveness::Gone {
        assert!(
            t0.elapsed().as_secs() < 10,
            "{:?}",
            owner_liveness(&contained)
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// `/proc/<pid>/stat`'s start time.
fn proc_start(pid: u32) -> u64 {
    zcnet::nic::state::Process::of_pid(pid).unwrap().start
}

/// A restore right after a zcrx receiver exits meets the kernel refusing to turn header split
/// off while the queue still has a memory provider (the ring's exit work has not run yet): the
/// undo waits for it, a while, and then says what held it.
#[zcnet_testkit::test(timeout = 60)]
fn a_restore_waits_for_the_memory_provider_to_let_go() {
    let dir = tempdir();
    let cfg = mlx5_like();
    let nic = FakeNic::new(cfg.clone(), None);
    let g = NicGuard::apply(nic.clone(), &tcp_9999(7), &dir).unwrap();
    assert_eq!(nic.cfg().split, split::ENABLED);
    // Refused three times (150 ms), then let go of: the restore goes through.
    nic.bind_provider_for(3);
    let t0 = std::time::Instant::now();
    g.restore().unwrap();
    assert!(t0.elapsed() >= std::time::Duration::from_millis(100));
    assert_eq!(nic.cfg(), cfg);
    assert_eq!(files(&dir), 0);

    // Never let go of (within the wait): the restore fails with the kernel's reason, and the
    // state file stays for a later restore.
    let g = NicGuard::apply(nic.clone(), &tcp_9999(7), &dir).unwrap();
    nic.bind_provider_for(u32::MAX);
    let records: Vec<zcnet::nic::state::Record> = g
        .changes()
        .iter()
        .map(|c| zcnet::nic::state::Record {
            change: c.clone(),
            done: true,
        })
        .collect();
    let e = zcnet::nic::undo_records_waiting(
        &mut nic.clone(),
        &records,
        std::time::Duration::from_millis(200),
    )
    .unwrap_err();
    assert!(zcnet::nic::provider_bound(&e), "{e}");
    assert!(e.to_string().contains("memory provider"), "{e}");
    nic.bind_provider_for(0);
    g.restore().unwrap();
    assert_eq!(nic.cfg(), cfg);
    assert_eq!(files(&dir), 0);
}

/// A step the kernel did not answer in time may be applied all the same: the failed setup
/// undoes it with the steps before it, so the device is as it was and no state file is left;
/// whichever step it is.
#[zcnet_testkit::test]
fn a_step_that_timed_out_is_undone_too() {
    for k in 0..4 {
        let dir = tempdir();
        let cfg = mlx5_like();
        let nic = FakeNic::new(cfg.clone(), None);
        nic.set_time_out_at(Some(k));
        let e = NicGuard::apply(nic.clone(), &tcp_9999(7), &dir).unwrap_err();
        assert!(matches!(e, Error::NicSetup { .. }), "step {k}: {e}");
        assert!(e.to_string().contains("did not answer"), "step {k}: {e}");
        assert_eq!(nic.cfg(), cfg, "step {k}: the device as it was");
        assert_eq!(files(&dir), 0, "step {k}: no state file");
    }
}

zcnet_testkit::main!();
