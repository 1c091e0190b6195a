//! A simulated NIC for the NIC setup tests (`nic_guard.rs`, `nic_sigkill.rs`): a
//! [`NicControl`] whose configuration lives in memory, or in a file so that it outlives a
//! process killed in the middle of a setup, as a real device's does.
//!
//! It can refuse its k-th change (`fail_at`), and park the process at any of its calls
//! (before or after the call does its work) so that another process can SIGKILL it there.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use zcnet::nic::RxChannels;
use zcnet::nic::{default_indir, split, FlowSpec, NicControl, NicSetup, Proto, RingsState};
use zcnet::Error;

/// The device's configuration: what must come back unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub split: u8,
    pub hds: Option<u32>,
    pub ntuple: Option<bool>,
    pub rings: u32,
    pub indir: Vec<u32>,
    pub rules: BTreeMap<u32, FlowSpec>,
}

/// What the device holds: its configuration, and where it puts the next rule (not part of the
/// configuration a restore must bring back, as on a real device).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Device {
    cfg: Config,
    next_loc: u32,
}

impl Device {
    fn new(cfg: Config) -> Device {
        let next_loc = cfg.rules.keys().max().map_or(1000, |l| l + 1);
        Device { cfg, next_loc }
    }

    /// One `key value` per line, one line per rule.
    fn encode(&self) -> String {
        let c = &self.cfg;
        let mut s = format!(
            "split {}\nhds {}\nntuple {}\nrings {}\nindir {}\nnext_loc {}\n",
            c.split,
            c.hds.map_or_else(|| "none".into(), |v| v.to_string()),
            match c.ntuple {
                None => "none",
                Some(true) => "on",
                Some(false) => "off",
            },
            c.rings,
            c.indir
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
            self.next_loc
        );
        for (loc, r) in &c.rules {
            s.push_str(&format!(
                "rule {loc} {} {} {} {}\n",
                r.proto.name(),
                if r.ipv6 { 6 } else { 4 },
                r.dst_port,
                r.queue
            ));
        }
        s
    }

    fn decode(text: &str) -> Device {
        let mut d = Device::new(Config {
            split: 0,
            hds: None,
            ntuple: None,
            rings: 0,
            indir: Vec::new(),
            rules: BTreeMap::new(),
        });
        for line in text.lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            match w[..] {
                ["split", v] => d.cfg.split = v.parse().unwrap(),
                ["hds", "none"] => d.cfg.hds = None,
                ["hds", v] => d.cfg.hds = Some(v.parse().unwrap()),
                ["ntuple", v] => {
                    d.cfg.ntuple = match v {
                        "none" => None,
                        v => Some(v == "on"),
                    }
                }
                ["rings", v] => d.cfg.rings = v.parse().unwrap(),
                ["indir", v] => {
                    d.cfg.indir = v
                        .split(',')
                        .filter(|s| !s.is_empty())
                        .map(|q| q.parse().unwrap())
                        .collect()
                }
                ["next_loc", v] => d.next_loc = v.parse().unwrap(),
                ["rule", loc, proto, ip, port, queue] => {
                    let spec = FlowSpec {
                        proto: Proto::parse(proto).unwrap(),
                        ipv6: ip == "6",
                        dst_port: port.parse().unwrap(),
                        queue: queue.parse().unwrap(),
                    };
                    d.cfg.rules.insert(loc.parse().unwrap(), spec);
                }
                _ => panic!("bad line in the simulated NIC's file: '{line}'"),
            }
        }
        d
    }
}

/// Writes the device's file whole, through a rename: a device applies a change entirely or
/// not at all, and so does this file, whenever the process dies.
fn store(path: &Path, dev: &Device) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, dev.encode()).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[derive(Debug)]
pub struct Sim {
    dev: Device,
    /// Where the device lives when it must outlive the process.
    backing: Option<PathBuf>,
    /// Mutating calls so far; the `fail_at`-th (0-based) is refused.
    calls: u32,
    fail_at: Option<u32>,
    /// Call boundaries passed so far: before the i-th call (reads included) is 2i, after it
    /// 2i + 1.
    boundaries: u32,
    /// Park at this boundary: write the marker and sleep until killed.
    park: Option<(u32, PathBuf)>,
    /// What channels-get reports (`None`: no channel control, as lo and ifb).
    channels: Option<RxChannels>,
    /// Whether the driver has get_ringparam (veth, lo and ifb have none: every rings-get and
    /// rings-set is refused with EOPNOTSUPP, so header split can never be turned on).
    ringparam: bool,
    /// rings-sets still refused as the kernel refuses them while a queue has a memory provider
    /// (a zcrx area whose ring's exit work has not run yet).
    provider_refusals: u32,
    /// The mutating call (0-based, as `fail_at`) that is applied but not answered in time: a
    /// request the caller gave up on that the kernel made all the same.
    time_out_at: Option<u32>,
    /// At this boundary the device becomes this configuration, as another process's change
    /// made between two calls would make it.
    change_at: Option<(u32, Config)>,
}

#[derive(Debug, Clone)]
pub struct FakeNic(Rc<RefCell<Sim>>);

fn refused() -> Error {
    Error::Kernel {
        what: "rings-set on fake0".into(),
        message: "Operation not supported (kernel: fake driver refuses)".into(),
        errno: Some(95),
    }
}

/// Writes `what` to `marker` whole (through a rename), for another process to poll.
pub fn announce(marker: &Path, what: &str) {
    let tmp = marker.with_extension("tmp");
    std::fs::write(&tmp, what).unwrap();
    std::fs::rename(&tmp, marker).unwrap();
}

/// Says where the process is (in `marker`, written whole) and waits to be killed. A parked
/// process that nobody kills (its parent failed) exits after a minute rather than stay behind.
pub fn park(marker: &Path, what: &str) -> ! {
    announce(marker, what);
    std::thread::sleep(Duration::from_secs(60));
    eprintln!("parked at '{what}' for a minute and not killed: giving up");
    std::process::exit(3)
}

impl FakeNic {
    pub fn new(cfg: Config, fail_at: Option<u32>) -> FakeNic {
        // Combined channels, up to 16, like mlx5 on a 16-CPU machine.
        let channels = Some(RxChannels {
            combined: cfg.rings,
            combined_max: 16,
            ..RxChannels::default()
        });
        FakeNic(Rc::new(RefCell::new(Sim {
            dev: Device::new(cfg),
            backing: None,
            calls: 0,
            fail_at,
            boundaries: 0,
            park: None,
            channels,
            ringparam: true,
            provider_refusals: 0,
            time_out_at: None,
            change_at: None,
        })))
    }

    /// Creates the device's file at `path` with `cfg`.
    pub fn create_file(path: &Path, cfg: Config) {
        store(path, &Device::new(cfg));
    }

    /// The device whose file is at `path` (made by [`FakeNic::create_file`]).
    pub fn open_file(path: &Path) -> FakeNic {
        let dev = Device::decode(&std::fs::read_to_string(path).unwrap());
        let nic = FakeNic::new(dev.cfg.clone(), None);
        {
            let mut s = nic.0.borrow_mut();
            s.dev = dev;
            s.backing = Some(path.to_path_buf());
        }
        nic
    }

    /// The configuration in the file at `path`.
    pub fn file_cfg(path: &Path) -> Config {
        Device::decode(&std::fs::read_to_string(path).unwrap()).cfg
    }

    /// A driver without get_ringparam (as veth): no header split, ever.
    pub fn without_ringparam(self) -> FakeNic {
        self.0.borrow_mut().ringparam = false;
        self
    }

    pub fn with_channels(self, channels: Option<RxChannels>) -> FakeNic {
        self.0.borrow_mut().channels = channels;
        self
    }

    /// Makes the device `cfg` at call boundary `at` (see [`Sim`]): another process's change
    /// between two of the caller's calls.
    pub fn changing_at(self, at: u32, cfg: Config) -> FakeNic {
        self.0.borrow_mut().change_at = Some((at, cfg));
        self
    }

    /// Parks the process at call boundary `at` (see [`Sim`]), announcing it in `marker`.
    pub fn parking_at(self, at: u32, marker: &Path) -> FakeNic {
        self.0.borrow_mut().park = Some((at, marker.to_path_buf()));
        self
    }

    /// Refuses the `k`-th change from now on (`None`: none).
    /// The next `n` rings-sets are refused with the kernel's EINVAL for a device that still has
    /// a memory provider bound (net/ethtool/rings.c).
    pub fn bind_provider_for(&self, n: u32) {
        self.0.borrow_mut().provider_refusals = n;
    }

    /// The `k`-th mutating call is made, then answered with a timeout.
    pub fn set_time_out_at(&self, k: Option<u32>) {
        self.0.borrow_mut().time_out_at = k;
    }

    pub fn set_fail_at(&self, k: Option<u32>) {
        let mut s = self.0.borrow_mut();
        s.calls = 0;
        s.fail_at = k;
    }

    /// Call boundaries passed so far.
    /// Puts `spec` at location `loc` as another user's `ethtool -N ... loc L` would (not a
    /// call of the setup: no boundary, no failure).
    pub fn insert_rule_at(&self, loc: u32, spec: &FlowSpec) -> u32 {
        self.0.borrow_mut().dev.cfg.rules.insert(loc, *spec);
        loc
    }

    pub fn boundaries(&self) -> u32 {
        self.0.borrow().boundaries
    }

    pub fn cfg(&self) -> Config {
        self.0.borrow().dev.cfg.clone()
    }

    /// Passes a call boundary; parks there if asked to.
    fn boundary(&self) {
        let mut s = self.0.borrow_mut();
        let b = s.boundaries;
        s.boundaries += 1;
        if s.change_at.as_ref().is_some_and(|(at, _)| *at == b) {
            let (_, cfg) = s.change_at.take().unwrap_or_else(|| unreachable!());
            s.dev.cfg = cfg;
        }
        if let Some((at, marker)) = &s.park {
            if *at == b {
                let marker = marker.clone();
                drop(s);
                park(&marker, &format!("boundary {b}"));
            }
        }
    }

    /// A call to the device: the boundaries before and after it, and the device reread from
    /// its file first (it may have been changed by another process).
    fn call<T>(&self, f: impl FnOnce(&FakeNic) -> T) -> T {
        self.boundary();
        {
            let mut s = self.0.borrow_mut();
            if let Some(p) = s.backing.clone() {
                s.dev = Device::decode(&std::fs::read_to_string(p).unwrap());
            }
        }
        let r = f(self);
        self.boundary();
        r
    }

    fn mutate(&self, f: impl FnOnce(&mut Device)) -> zcnet::Result<()> {
        let mut s = self.0.borrow_mut();
        let n = s.calls;
        s.calls += 1;
        if s.fail_at == Some(n) {
            return Err(refused());
        }
        f(&mut s.dev);
        if let Some(p) = &s.backing {
            store(p, &s.dev);
        }
        if s.time_out_at == Some(n) {
            return Err(Error::io(
                "rings-set on fake0: the kernel did not answer in 30 s",
                std::io::Error::from(std::io::ErrorKind::TimedOut),
            ));
        }
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
        self.call(|n| {
            if !n.0.borrow().ringparam {
                return Err(refused());
            }
            let c = n.cfg();
            Ok(RingsState {
                split: c.split,
                hds_thresh: c.hds,
            })
        })
    }
    fn set_rings(&mut self, s: u8, hds: Option<u32>) -> zcnet::Result<()> {
        self.call(|n| {
            if !n.0.borrow().ringparam {
                return Err(refused());
            }
            {
                let mut sim = n.0.borrow_mut();
                if sim.provider_refusals > 0 {
                    sim.provider_refusals -= 1;
                    return Err(Error::Kernel {
                        what: "rings-set on fake0".into(),
                        message: "Invalid argument (kernel: can't disable tcp-data-split while device has memory provider enabled)".into(),
                        errno: Some(22),
                    });
                }
            }
            n.mutate(|d| {
                d.cfg.split = s;
                if hds.is_some() {
                    d.cfg.hds = hds;
                }
            })
        })
    }
    fn ntuple(&mut self) -> zcnet::Result<Option<bool>> {
        self.call(|n| Ok(n.cfg().ntuple))
    }
    fn set_ntuple(&mut self, on: bool) -> zcnet::Result<()> {
        self.call(|n| {
            // Like drivers that refuse to turn ntuple off while rules exist: undo order
            // matters.
            if !on && !n.cfg().rules.is_empty() {
                return Err(Error::Kernel {
                    what: "features-set".into(),
                    message: "Device or resource busy (rules installed)".into(),
                    errno: Some(16),
                });
            }
            n.mutate(|d| d.cfg.ntuple = Some(on))
        })
    }
    fn rx_rings(&mut self) -> zcnet::Result<u32> {
        self.call(|n| Ok(n.cfg().rings))
    }
    fn channels(&mut self) -> zcnet::Result<Option<RxChannels>> {
        self.call(|n| Ok(n.0.borrow().channels))
    }
    fn indir(&mut self) -> zcnet::Result<Vec<u32>> {
        self.call(|n| Ok(n.cfg().indir))
    }
    fn set_indir(&mut self, table: Option<&[u32]>) -> zcnet::Result<()> {
        self.call(|n| {
            n.mutate(|d| {
                d.cfg.indir = match table {
                    Some(t) => t.to_vec(),
                    None => default_indir(d.cfg.indir.len(), d.cfg.rings),
                }
            })
        })
    }
    fn insert_rule(&mut self, spec: &FlowSpec) -> zcnet::Result<u32> {
        self.call(|n| {
            let loc = n.0.borrow().dev.next_loc;
            n.mutate(|d| {
                d.cfg.rules.insert(loc, *spec);
                d.next_loc += 1;
            })?;
            Ok(loc)
        })
    }
    fn delete_rule(&mut self, loc: u32) -> zcnet::Result<()> {
        self.call(|n| {
            let present = n.cfg().rules.contains_key(&loc);
            n.mutate(|d| {
                d.cfg.rules.remove(&loc);
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
        })
    }
    fn rules(&mut self) -> zcnet::Result<Vec<(u32, FlowSpec)>> {
        self.call(|n| Ok(n.cfg().rules.into_iter().collect()))
    }
}

/// A device as mlx5 comes up: header split off, hds-thresh 256, ntuple off, 8 queues, the
/// default RSS table, no rules.
pub fn mlx5_like() -> Config {
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
pub struct TempDir(PathBuf);

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

pub fn tempdir() -> TempDir {
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "zcnet-nic-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).unwrap();
    TempDir(d)
}

/// Entries of `dir`.
pub fn files(dir: &Path) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

/// Queue `queue` set aside, TCP/IPv4 port 9999 steered to it.
pub fn tcp_9999(queue: u32) -> NicSetup {
    NicSetup {
        queue,
        flow: Some((Proto::Tcp, false, 9999)),
    }
}
