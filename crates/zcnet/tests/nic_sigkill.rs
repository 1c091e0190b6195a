#![allow(clippy::unwrap_used)]
//! `zcnet nic setup` killed with SIGKILL at every step, then `zcnet nic restore`: nothing lost,
//! nothing left behind.
//!
//! The simulated NIC keeps its configuration in a file, so that it outlives the process as a
//! real device's does. A child process (this test binary again, its role chosen by
//! environment variables) runs [`NicGuard::apply`] against it and parks at call boundary N of
//! the NIC (before or after each read and change), or once the setup is complete; the parent
//! SIGKILLs it there, then does what `zcnet nic restore` does (every state file of the
//! directory, [`restore_from_file`]) and requires the NIC's configuration to be the original
//! one exactly, no state file left, and a second restore to find nothing to do. The restore
//! is killed at each of its own steps too, and finished by a later restore.

mod common;

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::fake_nic::{announce, mlx5_like, park, tcp_9999, tempdir, Config, FakeNic};
use zcnet::nic::state::{self, Record};
use zcnet::nic::{
    restore_from_file, split, undo_records, Change, FlowSpec, NicControl, NicGuard, NicSetup, Proto,
};

/// This test's name: the child runs it (`--exact`) with [`ROLE`] set.
const TEST: &str = "sigkill_at_every_step_of_setup_then_restore_loses_nothing";
/// "setup" or "restore": the child's role.
const ROLE: &str = "ZCNET_NIC_SIGKILL_ROLE";
/// Which of [`cases`] the child sets up.
const CASE: &str = "ZCNET_NIC_SIGKILL_CASE";
/// The simulated NIC's file, the state directory, the marker file, the boundary to park at.
const NIC: &str = "ZCNET_NIC_SIGKILL_NIC";
const STATE: &str = "ZCNET_NIC_SIGKILL_STATE";
const MARKER: &str = "ZCNET_NIC_SIGKILL_MARKER";
const PARK: &str = "ZCNET_NIC_SIGKILL_PARK";

const SETUP_DONE: &str = "setup complete";
const RESTORE_DONE: &str = "restore complete";

/// The devices and setups: between them, every kind of change, a pending rule among the
/// user's own rules, a custom RSS table and a driver that reports no hds-thresh.
fn cases() -> Vec<(Config, NicSetup, &'static [&'static str])> {
    // mlx5 as it comes up: header split, ntuple, RSS (the default table) and a rule.
    let mlx5 = (
        mlx5_like(),
        tcp_9999(7),
        &["header-split", "ntuple", "rss", "rule"][..],
    );
    // ntuple already on with a rule of the user's for the same port to another queue (it
    // must survive), a custom RSS table, tcp-data-split unknown, no hds-thresh reported.
    let mut rules = BTreeMap::new();
    let users = FlowSpec {
        proto: Proto::Udp,
        ipv6: true,
        dst_port: 4791,
        queue: 2,
    };
    rules.insert(5, users);
    let custom = Config {
        split: split::UNKNOWN,
        hds: None,
        ntuple: Some(true),
        rings: 4,
        indir: (0..64).map(|i| [0, 0, 1, 2, 3, 3][i % 6]).collect(),
        rules,
    };
    let steer = NicSetup {
        queue: 3,
        flow: Some((Proto::Udp, true, 4791)),
    };
    // The user's own rule is the very one setup would insert: it must survive too.
    let mut same = mlx5_like();
    same.ntuple = Some(true);
    same.rules.insert(
        3,
        FlowSpec {
            proto: Proto::Tcp,
            ipv6: false,
            dst_port: 9999,
            queue: 7,
        },
    );
    vec![
        mlx5,
        (custom, steer, &["header-split", "rss", "rule"]),
        // Nothing to insert: the rule is there.
        (same, tcp_9999(7), &["header-split", "rss"]),
    ]
}

fn var(k: &str) -> String {
    std::env::var(k).unwrap()
}

/// What `zcnet nic restore` does (zcnet-cli's nic_cmd.rs): every state file of this network
/// namespace in `dir`, each restored with [`restore_from_file`]. Returns the records undone.
fn restore_like_cli(nic: &mut FakeNic, dir: &Path) -> Vec<Record> {
    let mut undone = Vec::new();
    for p in state::list(dir) {
        let (owner, _) = state::read(&p).unwrap();
        assert_eq!(owner.iface, nic.name());
        undone.extend(restore_from_file(nic, &p).unwrap());
    }
    undone
}

/// The child: sets up or restores, parking where told (and after a setup, holding it as
/// `zcnet nic setup` does, until killed).
fn child(role: &str) -> ! {
    let marker = PathBuf::from(var(MARKER));
    let at: u32 = var(PARK).parse().unwrap();
    let mut nic = FakeNic::open_file(Path::new(&var(NIC))).parking_at(at, &marker);
    let dir = PathBuf::from(var(STATE));
    match role {
        "setup" => {
            let (_, setup, _) = &cases()[var(CASE).parse::<usize>().unwrap()];
            let _held = NicGuard::apply(nic, setup, &dir).unwrap();
            park(&marker, SETUP_DONE)
        }
        "restore" => {
            restore_like_cli(&mut nic, &dir);
            announce(&marker, RESTORE_DONE);
            std::process::exit(0)
        }
        r => panic!("unknown {ROLE} '{r}'"),
    }
}

/// A child process, killed (and reaped) if the test fails before it does.
struct Reaped(Option<Child>);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs a child in `role` that parks at boundary `at`; SIGKILLs it once parked. Returns the
/// marker: "boundary N" (killed there), [`SETUP_DONE`] (killed holding a complete setup) or
/// [`RESTORE_DONE`] (the restore finished before boundary `at`; the child exited 0).
fn run_child(role: &str, case: usize, nic: &Path, dir: &Path, at: u32) -> String {
    let marker = nic.with_file_name("marker");
    let _ = std::fs::remove_file(&marker);
    let exe = std::env::current_exe().unwrap();
    let mut child = Reaped(Some(
        Command::new(exe)
            .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
            .env(ROLE, role)
            .env(CASE, case.to_string())
            .env(NIC, nic)
            .env(STATE, dir)
            .env(MARKER, &marker)
            .env(PARK, at.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    let start = Instant::now();
    loop {
        if let Ok(m) = std::fs::read_to_string(&marker) {
            let mut c = child.0.take().unwrap();
            if m == RESTORE_DONE {
                let out = c.wait_with_output().unwrap();
                assert!(out.status.success(), "{role} child: {out:?}");
            } else {
                c.kill().unwrap();
                let st = c.wait().unwrap();
                assert_eq!(st.signal(), Some(9), "{role} child parked at '{m}': {st:?}");
            }
            return m;
        }
        if child.0.as_mut().unwrap().try_wait().unwrap().is_some() {
            let out = child.0.take().unwrap().wait_with_output().unwrap();
            // A restore that wrote its marker just before exiting.
            if let Ok(m) = std::fs::read_to_string(&marker) {
                assert!(out.status.success(), "{role} child: {out:?}");
                return m;
            }
            // Exited without saying where: a failure of the child's own (its output tells).
            panic!(
                "{role} child (park at {at}) exited {} without parking:\n{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{role} child did not reach boundary {at} in 60 s"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Entries of `dir` (none if it was never made).
fn entries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default()
}

/// Restores as the CLI does and checks the result: the original configuration exactly, no
/// state file, and a second restore with nothing to do (the CLI's "nothing to restore"), while
/// restoring the removed file again is an error naming it. Returns the records undone.
fn restore_and_check(nic_file: &Path, dir: &Path, want: &Config, what: &str) -> Vec<Record> {
    let files = state::list(dir);
    let mut nic = FakeNic::open_file(nic_file);
    let undone = restore_like_cli(&mut nic, dir);
    assert_eq!(FakeNic::file_cfg(nic_file), *want, "{what}: not restored");
    assert_eq!(entries(dir), Vec::<PathBuf>::new(), "{what}: left behind");
    // Again: nothing to find, nothing changed.
    assert!(restore_like_cli(&mut nic, dir).is_empty(), "{what}");
    for p in &files {
        let e = restore_from_file(&mut nic, p).unwrap_err().to_string();
        let name = p.file_name().unwrap().to_str().unwrap();
        assert!(e.contains(name), "{what}: second restore: {e}");
    }
    assert_eq!(FakeNic::file_cfg(nic_file), *want, "{what}: second restore");
    undone
}

/// A copy of the NIC's file and the state directory, as the kill left them.
struct Snapshot {
    nic: String,
    state: Vec<(PathBuf, Vec<u8>)>,
}

impl Snapshot {
    fn take(nic: &Path, dir: &Path) -> Snapshot {
        Snapshot {
            nic: std::fs::read_to_string(nic).unwrap(),
            state: entries(dir)
                .into_iter()
                .map(|p| {
                    let b = std::fs::read(&p).unwrap();
                    (p.file_name().unwrap().into(), b)
                })
                .collect(),
        }
    }

    fn put(&self, nic: &Path, dir: &Path) {
        std::fs::write(nic, &self.nic).unwrap();
        let _ = std::fs::remove_dir_all(dir);
        if !self.state.is_empty() {
            std::fs::create_dir_all(dir).unwrap();
        }
        for (name, b) in &self.state {
            std::fs::write(dir.join(name), b).unwrap();
        }
    }
}

/// A restore that trusts only the records marked done: what these checks must catch. Whether
/// it brought `want` back.
fn restore_done_only(nic: &Path, dir: &Path, want: &Config) -> bool {
    let mut ctl = FakeNic::open_file(nic);
    for p in state::list(dir) {
        let (_, recs) = state::read(&p).unwrap();
        let done: Vec<Record> = recs.into_iter().filter(|r| r.done).collect();
        if undo_records(&mut ctl, &done).is_err() {
            return false;
        }
    }
    FakeNic::file_cfg(nic) == *want
}

#[zcnet_testkit::test]
fn sigkill_at_every_step_of_setup_then_restore_loses_nothing() {
    if let Ok(role) = std::env::var(ROLE) {
        child(&role);
    }
    let mut restore_kills = 0;
    let mut changed_when_killed = 0;
    let mut broken_caught = 0;
    for (case, (original, setup, want)) in cases().into_iter().enumerate() {
        let tmp = tempdir();
        let nic = tmp.join("fake0.nic");
        let dir = tmp.join("state");
        let mut points = 0;
        for at in 0.. {
            assert!(at < 200, "case {case}: the setup never completed");
            FakeNic::create_file(&nic, original.clone());
            let _ = std::fs::remove_dir_all(&dir);
            let m = run_child("setup", case, &nic, &dir, at);
            let what = format!("case {case}: setup killed at '{m}'");
            let killed = Snapshot::take(&nic, &dir);
            if FakeNic::file_cfg(&nic) != original {
                changed_when_killed += 1;
            }
            points += 1;
            if m == SETUP_DONE {
                // The complete setup: each kind of change the case makes, all recorded done.
                let files = state::list(&dir);
                assert_eq!(files.len(), 1, "{what}");
                let (owner, recs) = state::read(&files[0]).unwrap();
                assert_eq!(owner.queue, setup.queue);
                assert!(recs.iter().all(|r| r.done), "{what}: {recs:?}");
                let kinds: Vec<&str> = recs
                    .iter()
                    .map(|r| match r.change {
                        Change::HeaderSplit { .. } => "header-split",
                        Change::Ntuple { .. } => "ntuple",
                        Change::Rss { .. } => "rss",
                        Change::Rule { .. } => "rule",
                    })
                    .collect();
                assert_eq!(kinds, want, "{what}");
            } else {
                assert_eq!(m, format!("boundary {at}"), "{what}");
            }
            let undone = restore_and_check(&nic, &dir, &original, &what);
            if m == SETUP_DONE {
                assert_eq!(undone.len(), want.len(), "{what}");
            }
            // The same kill, then a restore that is itself killed at each of its steps and
            // finished by the next.
            for rat in 0.. {
                assert!(rat < 200, "{what}: the restore never completed");
                killed.put(&nic, &dir);
                let r = run_child("restore", case, &nic, &dir, rat);
                if r == RESTORE_DONE {
                    assert_eq!(FakeNic::file_cfg(&nic), original, "{what}, restore");
                    assert_eq!(entries(&dir), Vec::<PathBuf>::new(), "{what}, restore");
                    break;
                }
                restore_kills += 1;
                let what = format!("{what}, restore killed at '{r}'");
                restore_and_check(&nic, &dir, &original, &what);
            }
            // The checks can fail: a restore that skips pending records is caught at some
            // kill points.
            killed.put(&nic, &dir);
            if !restore_done_only(&nic, &dir, &original) {
                broken_caught += 1;
            }
            if m == SETUP_DONE {
                break;
            }
        }
        // Two boundaries per call, at least a read and a change per kind of change.
        assert!(points > 2 * 2 * 3, "case {case}: only {points} kill points");
        eprintln!("case {case}: setup killed at {points} points");
    }
    eprintln!(
        "{changed_when_killed} kills left the NIC changed; {restore_kills} restores killed; \
         a restore of done records only was caught {broken_caught} times"
    );
    assert!(changed_when_killed > 0 && restore_kills > 0);
    assert!(broken_caught > 0, "the checks never catch a broken restore");
}

zcnet_testkit::main!();
