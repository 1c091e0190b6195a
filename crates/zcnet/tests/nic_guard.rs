#![allow(clippy::unwrap_used)]
//! The NIC setup guard against a simulated NIC: every change is recorded before it is made,
//! a refusal at any step leaves the device exactly as it was, and a state file left by a
//! crash is enough to restore it.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, Ordering};

use proptest::prelude::*;
use zcnet::nic::{
    self, default_indir, restore_from_file, split, FlowSpec, NicControl, NicGuard, NicSetup, Proto,
    RingsState, RxChannels,
};
use zcnet::Error;

/// The device's configuration: what must come back unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Config {
    split: u8,
    hds: Option<u32>,
    ntuple: Option<bool>,
    rings: u32,
    indir: Vec<u32>,
    rules: BTreeMap<u32, FlowSpec>,
}

#[derive(Debug)]
struct Sim {
    cfg: Config,
    /// Mutating calls so far; the `fail_at`-th (0-based) is refused.
    calls: u32,
    fail_at: Option<u32>,
    next_loc: u32,
    /// What channels-get reports (`None`: no channel control, as lo and ifb).
    channels: Option<RxChannels>,
}

#[derive(Debug, Clone)]
struct FakeNic(Rc<RefCell<Sim>>);

fn refused() -> Error {
    Error::Kernel {
        what: "rings-set on fake0".into(),
        message: "Operation not supported (kernel: fake driver refuses)".into(),
        errno: Some(95),
    }
}

impl FakeNic {
    fn new(cfg: Config, fail_at: Option<u32>) -> FakeNic {
        // Combined channels, up to 16, like mlx5 on a 16-CPU machine.
        let channels = Some(RxChannels {
            combined: cfg.rings,
            combined_max: 16,
            ..RxChannels::default()
        });
        FakeNic(Rc::new(RefCell::new(Sim {
            cfg,
            calls: 0,
            fail_at,
            next_loc: 1000,
            channels,
        })))
    }

    fn with_channels(self, channels: Option<RxChannels>) -> FakeNic {
        self.0.borrow_mut().channels = channels;
        self
    }

    fn cfg(&self) -> Config {
        self.0.borrow().cfg.clone()
    }

    fn mutate(&self, f: impl FnOnce(&mut Config)) -> zcnet::Result<()> {
        let mut s = self.0.borrow_mut();
        let n = s.calls;
        s.calls += 1;
        if s.fail_at == Some(n) {
            return Err(refused());
        }
        f(&mut s.cfg);
        Ok(())
    }
}

impl NicControl for FakeNic {
    fn name(&self) -> &str {
        "fake0"
    }
    fn ifindex(&self) -> u32 {
        7
    }
    fn rings(&mut self) -> zcnet::Result<RingsState> {
        let c = self.cfg();
        Ok(RingsState {
            split: c.split,
            hds_thresh: c.hds,
        })
    }
    fn set_rings(&mut self, s: u8, hds: Option<u32>) -> zcnet::Result<()> {
        self.mutate(|c| {
            c.split = s;
            if hds.is_some() {
                c.hds = hds;
            }
        })
    }
    fn ntuple(&mut self) -> zcnet::Result<Option<bool>> {
        Ok(self.cfg().ntuple)
    }
    fn set_ntuple(&mut self, on: bool) -> zcnet::Result<()> {
        // Like drivers that refuse to turn ntuple off while rules exist: undo order matters.
        if !on && !self.cfg().rules.is_empty() {
            return Err(Error::Kernel {
                what: "features-set".into(),
                message: "Device or resource busy (rules installed)".into(),
                errno: Some(16),
            });
        }
        self.mutate(|c| c.ntuple = Some(on))
    }
    fn rx_rings(&mut self) -> zcnet::Result<u32> {
        Ok(self.cfg().rings)
    }
    fn channels(&mut self) -> zcnet::Result<Option<RxChannels>> {
        Ok(self.0.borrow().channels)
    }
    fn indir(&mut self) -> zcnet::Result<Vec<u32>> {
        Ok(self.cfg().indir)
    }
    fn set_indir(&mut self, table: Option<&[u32]>) -> zcnet::Result<()> {
        self.mutate(|c| {
            c.indir = match table {
                Some(t) => t.to_vec(),
                None => default_indir(c.indir.len(), c.rings),
            }
        })
    }
    fn insert_rule(&mut self, spec: &FlowSpec) -> zcnet::Result<u32> {
        let loc = self.0.borrow().next_loc;
        self.mutate(|c| {
            c.rules.insert(loc, *spec);
        })?;
        self.0.borrow_mut().next_loc += 1;
        Ok(loc)
    }
    fn delete_rule(&mut self, loc: u32) -> zcnet::Result<()> {
        let present = self.cfg().rules.contains_key(&loc);
        self.mutate(|c| {
            c.rules.remove(&loc);
        })?;
        if present {
            Ok(())
        } else {
            Err(Error::Kernel {
                what: "ntuple delete".into(),
                message: "No such file or directory".into(),
                errno: Some(2),
            })
        }
    }
    fn rules(&mut self) -> zcnet::Result<Vec<(u32, FlowSpec)>> {
        Ok(self.cfg().rules.into_iter().collect())
    }
}

fn mlx5_like() -> Config {
    Config {
        split: split::DISABLED,
        hds: Some(256),
        ntuple: Some(false),
        rings: 8,
        indir: default_indir(128, 8),
        rules: BTreeMap::new(),
    }
}

/// A scratch directory, removed when dropped.
struct TempDir(PathBuf);

impl std::ops::Deref for TempDir {
    type Target = PathBuf;
    fn deref(&self) -> &PathBuf {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempdir() -> TempDir {
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "zcnet-nic-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).unwrap();
    TempDir(d)
}

fn files(dir: &PathBuf) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

fn tcp_9999(queue: u32) -> NicSetup {
    NicSetup {
        queue,
        flow: Some((Proto::Tcp, false, 9999)),
    }
}

#[test]
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

#[test]
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

#[test]
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

#[test]
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

#[test]
fn queue_refusals_name_a_command_that_works_or_say_there_is_none() {
    // Issue 13 defect 5: `nic setup --iface lo` suggested `ethtool -L lo combined 2`, which
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
        // One that can have more: zcnet's own command, which needs no ethtool.
        (
            Some(RxChannels {
                combined: 1,
                combined_max: 4,
                ..RxChannels::default()
            }),
            "add one: zcnet nic channels --iface fake0 --combined 2",
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
            "pick one of them, or add queues: zcnet nic channels --iface fake0 --combined 12"
        ),
        "{e}"
    );
    let nic = FakeNic::new(mlx5_like(), None);
    let e = NicGuard::apply(nic, &tcp_9999(16), &dir).unwrap_err();
    assert!(e.to_string().contains("at most 16 RX queue(s)"), "{e}");
    assert_eq!(files(&dir), 0);
}

#[test]
fn preflight_passes_a_device_only_privileges_stand_in_the_way_of() {
    let nic = FakeNic::new(mlx5_like(), None);
    let mut ctl = nic.clone();
    nic::preflight(&mut ctl, &tcp_9999(7)).unwrap();
    assert_eq!(nic.cfg(), mlx5_like(), "preflight changes nothing");
}

#[test]
fn a_second_setup_is_refused_while_changes_are_applied() {
    let dir = tempdir();
    let nic = FakeNic::new(mlx5_like(), None);
    let g = NicGuard::apply(nic.clone(), &tcp_9999(7), &dir).unwrap();
    let applied = nic.cfg();
    let e = NicGuard::apply(nic.clone(), &tcp_9999(6), &dir).unwrap_err();
    assert!(
        e.to_string().contains("zcnet nic restore --iface fake0"),
        "{e}"
    );
    assert_eq!(nic.cfg(), applied, "the refused setup touched the device");
    drop(g);
}

#[test]
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

#[test]
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

#[test]
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
    #[test]
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
            nic.0.borrow_mut().fail_at = None;
            restore_from_file(&mut nic.clone(), &p).unwrap();
        }
        prop_assert_eq!(nic.cfg(), cfg);
        prop_assert_eq!(files(&dir), 0);
    }
}
