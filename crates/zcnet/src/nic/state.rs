//! The NIC state file: every change is written here *before* it is made, and marked done after,
//! so that `zcnet nic restore` can undo what a crashed or killed process left applied.
//!
//! One file per interface and network namespace, `nic-<netns inode>-<iface>.state` under
//! `/run/zcnet` (or `$ZCNET_STATE_DIR`). Plain text, one record per line, fsynced after each:
//!
//! ```text
//! zcnet-nic-state 1
//! owner pid=4242 iface=eth0 ifindex=2 netns=4026531840 queue=7 pidns=4026531836 start=81234
//! pending 0 header-split prev-split=1 prev-hds=256
//! done 0
//! pending 1 rss prev=0,1,2,3,4,5,6,7 default=yes
//! done 1
//! pending 2 rule proto=tcp ip=4 port=9999 queue=7
//! done 2 location=1023
//! ```

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{Change, FlowSpec, Proto};
use crate::{Error, Result};

const MAGIC: &str = "zcnet-nic-state 1";

/// Where state files live: `$ZCNET_STATE_DIR`, else `/run/zcnet`.
pub fn state_dir() -> PathBuf {
    std::env::var_os("ZCNET_STATE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/run/zcnet"))
}

/// The network namespace the calling thread is in (inode of /proc/thread-self/ns/net: a thread
/// that entered a lab namespace with setns(2) is not in its process's main namespace, which
/// /proc/self names).
pub fn current_netns() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/thread-self/ns/net").map_or(0, |m| m.ino())
}

/// The state file of `iface` in the current namespace.
pub fn state_path(dir: &Path, iface: &str) -> PathBuf {
    dir.join(format!("nic-{}-{iface}.state", current_netns()))
}

/// Who made the changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Process id, in its own PID namespace (`pidns`).
    pub pid: u32,
    /// Interface name.
    pub iface: String,
    /// Interface index when the changes were made.
    pub ifindex: u32,
    /// Network namespace inode.
    pub netns: u64,
    /// The queue set aside.
    pub queue: u32,
    /// PID namespace inode of the process (0: not recorded, files written before it was).
    pub pidns: u64,
    /// The process's start time (clock ticks after boot, proc(5) `/proc/<pid>/stat` field 22),
    /// which tells it from a later process given the same pid (0: not recorded).
    pub start: u64,
}

impl Owner {
    /// The calling process as the owner of `iface`'s changes.
    pub fn this_process(iface: &str, ifindex: u32, queue: u32) -> Owner {
        let me = Process::current();
        Owner {
            pid: std::process::id(),
            iface: iface.to_string(),
            ifindex,
            netns: current_netns(),
            queue,
            pidns: me.pidns,
            start: me.start,
        }
    }
}

/// The PID namespace and start time of a process, read from /proc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Process {
    /// PID namespace inode (`/proc/<pid>/ns/pid`), 0 if unreadable.
    pub pidns: u64,
    /// Start time, clock ticks after boot (`/proc/<pid>/stat` field 22), 0 if unreadable.
    pub start: u64,
}

/// The initial PID namespace's inode (`PROC_PID_INIT_INO`, include/linux/proc_ns.h): fixed,
/// whatever the machine. Every other PID namespace descends from it, so every process is
/// visible from it.
pub const INITIAL_PIDNS: u64 = 0xEFFF_FFFC;

impl Process {
    /// The calling process.
    pub fn current() -> Process {
        Process::of("self").unwrap_or(Process { pidns: 0, start: 0 })
    }

    /// The process `pid` (as this PID namespace numbers it), if it exists.
    pub fn of_pid(pid: u32) -> Option<Process> {
        Process::of(&pid.to_string())
    }

    /// The process `/proc/<dir>` (a pid as this namespace numbers it, or "self"), if it exists.
    fn of(dir: &str) -> Option<Process> {
        use std::os::unix::fs::MetadataExt;
        let stat = std::fs::read_to_string(format!("/proc/{dir}/stat")).ok()?;
        let pidns = std::fs::metadata(format!("/proc/{dir}/ns/pid")).map_or(0, |m| m.ino());
        Some(Process {
            pidns,
            start: stat_start(&stat).unwrap_or(0),
        })
    }
}

/// Field 22 (starttime) of a `/proc/<pid>/stat` line.
pub(crate) fn stat_start(stat: &str) -> Option<u64> {
    zcnet_sys::os::stat_field(stat, 22)
}

/// Whether the process that made a state file's changes still runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    /// It does (or its pid names a process here and the file predates start times).
    Alive,
    /// It is gone: the changes are nobody's.
    Gone,
    /// It cannot be told from here (why, and what to do instead).
    Unknown(String),
}

/// Whether `owner`'s process still runs, as seen from this process: by its pid and start time
/// where it was in this PID namespace (a pid reused since by another process is not it); else
/// by the processes of its namespace that are visible here (`NSpid` in `/proc/<pid>/status`
/// gives a process's pid in each namespace it is in, innermost last). A namespace none of
/// whose processes is visible is gone if this is the initial namespace, which sees every
/// process; from inside another, it may be one this namespace cannot see: [`Liveness::Unknown`].
pub fn owner_liveness(owner: &Owner) -> Liveness {
    let me = Process::current();
    if owner.pidns == 0 || owner.pidns == me.pidns {
        return match Process::of_pid(owner.pid) {
            None => Liveness::Gone,
            Some(p) if owner.start != 0 && p.start != owner.start => Liveness::Gone,
            Some(_) => Liveness::Alive,
        };
    }
    let (found, visible) = scan_pidns(owner);
    decide_elsewhere(me.pidns, owner.pidns, found, visible)
}

/// [`owner_liveness`] for an owner in another PID namespace `theirs`, from this namespace
/// `mine`: whether its process was `found`, and whether any process of `theirs` is `visible`.
pub(crate) fn decide_elsewhere(mine: u64, theirs: u64, found: bool, visible: bool) -> Liveness {
    if found {
        Liveness::Alive
    } else if visible || mine == INITIAL_PIDNS {
        Liveness::Gone
    } else {
        Liveness::Unknown(format!(
            "the changes were made in PID namespace {theirs}, which this one ({mine}) cannot see: restore them from the host's (initial) PID namespace, or from that one"
        ))
    }
}

/// Looks through `/proc` for `owner`'s process: (found, any process of its namespace seen).
fn scan_pidns(owner: &Owner) -> (bool, bool) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return (false, false);
    };
    let mut visible = false;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let ns = std::fs::metadata(format!("/proc/{pid}/ns/pid")).map_or(0, |m| m.ino());
        if ns != owner.pidns {
            continue;
        }
        visible = true;
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let inner = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|p| p.parse::<u32>().ok());
        if inner == Some(owner.pid) {
            let start = Process::of(pid).map_or(0, |p| p.start);
            if owner.start == 0 || start == owner.start {
                return (true, true);
            }
        }
    }
    (false, visible)
}

/// Whether `owner` is the calling process.
pub fn is_this_process(owner: &Owner) -> bool {
    let me = Process::current();
    owner.pid == std::process::id()
        && (owner.pidns == 0 || owner.pidns == me.pidns)
        && (owner.start == 0 || owner.start == me.start)
}

/// One change and how far it got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The change (with the values to restore).
    pub change: Change,
    /// Whether it was confirmed made (a pending one may or may not have happened).
    pub done: bool,
}

/// Where the process `pid` writes the header of the state file `path` before linking it there.
fn header_path(path: &Path, pid: u32) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(format!(".tmp.{pid}"));
    PathBuf::from(p)
}

/// Removes the header files of `path` left by processes killed before they removed them.
fn remove_stale_headers(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return;
    };
    let prefix = format!("{name}.tmp.");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let n = e.file_name();
        let pid = n.to_str().and_then(|n| n.strip_prefix(&prefix));
        if let Some(pid) = pid.and_then(|p| p.parse::<u32>().ok()) {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// A state file being written.
#[derive(Debug)]
pub struct StateFile {
    path: PathBuf,
    file: File,
    next: u32,
}

impl StateFile {
    /// Creates the file for `owner`; fails if one exists (changes are already applied).
    pub fn create(dir: &Path, owner: &Owner) -> Result<StateFile> {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let path = state_path(dir, &owner.iface);
        // The header is written to a file of its own and linked into place whole: a process
        // killed half-way leaves no state file, or one whose owner can be read, never an empty
        // one that `nic restore` could not read and `nic setup` would refuse to replace.
        let header = format!(
            "{MAGIC}\nowner pid={} iface={} ifindex={} netns={} queue={} pidns={} start={}\n",
            owner.pid,
            owner.iface,
            owner.ifindex,
            owner.netns,
            owner.queue,
            owner.pidns,
            owner.start
        );
        remove_stale_headers(&path);
        let tmp = header_path(&path, std::process::id());
        let written = (|| {
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&tmp)?;
            f.write_all(header.as_bytes())?;
            f.sync_data()?;
            std::fs::hard_link(&tmp, &path)
        })();
        let _ = std::fs::remove_file(&tmp);
        match written {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let who = read(&path)
                    .map(|(o, _)| format!("pid {}", o.pid))
                    .unwrap_or_else(|_| "an unreadable state file".into());
                return Err(Error::NicState {
                    path,
                    problem: crate::text!(
                        format!(
                            "{} already has zero-copy changes applied ({who}); undo them with ",
                            owner.iface
                        ),
                        crate::text::Call::NicRestore {
                            iface: Some(crate::text::IfName::new(&owner.iface)),
                        },
                    ),
                });
            }
            Err(e) => return Err(Error::io(format!("creating {}", path.display()), e)),
        }
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
        Ok(StateFile {
            path,
            file,
            next: 0,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn line(&mut self, text: &str) -> Result<()> {
        let ctx = || format!("writing {}", self.path.display());
        writeln!(self.file, "{text}").map_err(|e| Error::io(ctx(), e))?;
        self.file.sync_data().map_err(|e| Error::io(ctx(), e))
    }

    /// Records a change about to be made; returns its id for [`StateFile::done`].
    pub fn pending(&mut self, change: &Change) -> Result<u32> {
        let id = self.next;
        self.next += 1;
        self.line(&format!("pending {id} {}", encode(change)))?;
        Ok(id)
    }

    /// Records that change `id` was made (with the rule location the driver chose).
    pub fn done(&mut self, id: u32, location: Option<u32>) -> Result<()> {
        match location {
            Some(l) => self.line(&format!("done {id} location={l}")),
            None => self.line(&format!("done {id}")),
        }
    }

    /// Deletes the file (everything was undone).
    pub fn remove(self) -> Result<()> {
        std::fs::remove_file(&self.path)
            .map_err(|e| Error::io(format!("removing {}", self.path.display()), e))
    }
}

fn encode(c: &Change) -> String {
    match c {
        Change::HeaderSplit {
            prev_split,
            prev_hds,
        } => format!(
            "header-split prev-split={prev_split} prev-hds={}",
            prev_hds.map_or_else(|| "none".to_string(), |v| v.to_string())
        ),
        Change::Ntuple { prev_on } => {
            format!("ntuple prev={}", if *prev_on { "on" } else { "off" })
        }
        Change::Rss { prev, was_default } => format!(
            "rss prev={} default={}",
            prev.iter()
                .map(|q| q.to_string())
                .collect::<Vec<_>>()
                .join(","),
            if *was_default { "yes" } else { "no" }
        ),
        Change::Rule { spec, location } => {
            let mut s = format!(
                "rule proto={} ip={} port={} queue={}",
                spec.proto.name(),
                if spec.ipv6 { 6 } else { 4 },
                spec.dst_port,
                spec.queue
            );
            if let Some(l) = location {
                s.push_str(&format!(" location={l}"));
            }
            s
        }
    }
}

/// `key=value` fields of a record.
fn fields<'a>(words: &'a [&'a str]) -> impl Fn(&str) -> Option<String> + 'a {
    move |key: &str| {
        words.iter().find_map(|w| {
            w.strip_prefix(key)
                .and_then(|r| r.strip_prefix('='))
                .map(str::to_string)
        })
    }
}

fn num<T: std::str::FromStr>(v: Option<String>) -> Option<T> {
    v?.parse().ok()
}

fn decode(words: &[&str]) -> Option<Change> {
    let f = fields(words);
    Some(match *words.first()? {
        "header-split" => Change::HeaderSplit {
            prev_split: num(f("prev-split"))?,
            prev_hds: match f("prev-hds")?.as_str() {
                "none" => None,
                v => Some(v.parse().ok()?),
            },
        },
        "ntuple" => Change::Ntuple {
            prev_on: f("prev")? == "on",
        },
        "rss" => Change::Rss {
            prev: f("prev")?
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::parse)
                .collect::<Result<_, _>>()
                .ok()?,
            was_default: f("default")? == "yes",
        },
        "rule" => Change::Rule {
            spec: FlowSpec {
                proto: Proto::parse(&f("proto")?)?,
                ipv6: f("ip")? == "6",
                dst_port: num(f("port"))?,
                queue: num(f("queue"))?,
            },
            location: num(f("location")),
        },
        _ => return None,
    })
}

/// Reads a state file: its owner and its records in the order they were made.
pub fn read(path: &Path) -> Result<(Owner, Vec<Record>)> {
    let bad = |problem: String| Error::NicState {
        path: path.to_path_buf(),
        problem: problem.into(),
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    let mut lines = text.lines();
    if lines.next() != Some(MAGIC) {
        return Err(bad(format!("not a '{MAGIC}' file")));
    }
    let owner_line = lines.next().unwrap_or_default();
    let words: Vec<&str> = owner_line.split_whitespace().collect();
    let f = fields(&words);
    let owner = (|| {
        Some(Owner {
            pid: num(f("pid"))?,
            iface: f("iface")?,
            ifindex: num(f("ifindex"))?,
            netns: num(f("netns"))?,
            queue: num(f("queue"))?,
            // Absent from files written before they were recorded.
            pidns: num(f("pidns")).unwrap_or(0),
            start: num(f("start")).unwrap_or(0),
        })
    })()
    .ok_or_else(|| bad(format!("bad owner line '{owner_line}'")))?;
    let mut records: Vec<(u32, Record)> = Vec::new();
    let rest: Vec<&str> = lines.collect();
    // The file ends in a newline unless the writer died mid-line.
    let torn = !text.ends_with('\n');
    for (n, line) in rest.iter().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let id: Option<u32> = words.get(1).and_then(|w| w.parse().ok());
        match (words.first().copied(), id) {
            // A torn last line: a pending record's change was never started (the record is
            // written before the change), a torn 'done' leaves its change pending (undone
            // anyway).
            _ if torn && n + 1 == rest.len() => {}
            (Some("pending"), Some(id)) => {
                let change =
                    decode(&words[2..]).ok_or_else(|| bad(format!("bad record '{line}'")))?;
                records.push((
                    id,
                    Record {
                        change,
                        done: false,
                    },
                ));
            }
            (Some("done"), Some(id)) => {
                let loc: Option<u32> = num(fields(&words[2..])("location"));
                let r = records
                    .iter_mut()
                    .find(|(i, _)| *i == id)
                    .ok_or_else(|| bad(format!("'done {id}' without its change")))?;
                r.1.done = true;
                if let (Change::Rule { location, .. }, Some(l)) = (&mut r.1.change, loc) {
                    *location = Some(l);
                }
            }
            _ if line.trim().is_empty() => {}
            _ => return Err(bad(format!("bad line '{line}'"))),
        }
    }
    Ok((owner, records.into_iter().map(|(_, r)| r).collect()))
}

/// State files in `dir` for the current network namespace.
pub fn list(dir: &Path) -> Vec<PathBuf> {
    let prefix = format!("nic-{}-", current_netns());
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".state"))
        })
        .collect();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[zcnet_testkit::test]
    fn the_start_time_is_counted_from_the_last_parenthesis() {
        // A command name with spaces and parentheses of its own (proc(5): field 2 is in
        // parentheses, whatever it holds); starttime is field 22.
        let mut fields: Vec<String> = (3..=52).map(|i| i.to_string()).collect();
        fields[22 - 3] = "987654".into();
        let line = format!("4242 (a) b (c)) {}", fields.join(" "));
        assert_eq!(stat_start(&line), Some(987654));
        assert_eq!(stat_start("4242 (x) S 1"), None);
        assert_eq!(stat_start("no parenthesis"), None);
        let me = Process::current();
        assert!(me.start > 0 && me.pidns > 0, "{me:?}");
    }

    #[zcnet_testkit::test]
    fn an_owner_elsewhere_is_gone_only_where_its_namespace_would_be_seen() {
        assert_eq!(
            decide_elsewhere(INITIAL_PIDNS, 5, true, true),
            Liveness::Alive
        );
        assert_eq!(decide_elsewhere(7, 5, false, true), Liveness::Gone);
        // From the initial namespace every process is visible: none of its means none left.
        assert_eq!(
            decide_elsewhere(INITIAL_PIDNS, 5, false, false),
            Liveness::Gone
        );
        // From a container, an unseen namespace may be the host's.
        match decide_elsewhere(7, 5, false, false) {
            Liveness::Unknown(why) => {
                assert!(
                    why.contains("PID namespace 5") && why.contains("(7)"),
                    "{why}"
                );
                assert!(!why.contains("--"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }
}
