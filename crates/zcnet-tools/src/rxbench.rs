//! `zcnet bench rx`: the RPC echo benchmark of the talk "Zero Copy Rx with io_uring" (David Wei,
//! Pavel Begunkov: Thrift, 64 KB echo, one pinned server thread, 24 closed-loop connections) for every receive mode on every TCP path, with the same client.
//!
//! Paths: `veth` (server in lab namespace b on 10.10.0.2, clients in namespace a: root only) and
//! `loopback` (127.0.0.1, port chosen by the kernel). The server thread is pinned to one CPU
//! (default: the last one this process may use) and the client threads to the others, so that
//! the server's CPU time per request is the server's alone.
//!
//! A mode the kernel refuses is a row that says so, with the kernel's reason; `auto` rows say
//! what was chosen and why the others were not.
//!
//! `iface` (`RxBenchConfig::iface`, `zcnet bench rx --iface IF --listen ADDR:PORT`): the server on
//! a NIC's address in this namespace, its zcrx and devmem rows on the NIC's queue (steered there
//! by `zcnet nic setup --port PORT`, which the caller holds), the clients in another namespace
//! that reaches ADDR through the NIC's peer (`--client-netns`; the kernel lab's software NIC
//! pair, scripts/zcnic-lab.sh). The devmem row binds a udmabuf of host memory and echoes what
//! landed there by reading it back (the CPU cannot send from a device's buffers): a copy for
//! the echo, not for the receive, whose bytes the row counts as zero-copy.
//!
//! `zcrx-nodev` is zcrx without a network device (`ZCRX_REG_NODEV`, Linux 7.1+): the zcrx API
//! end to end on any TCP path, with the kernel copying every byte into the area, so its
//! zero-copy share is 0 %. A kernel without it (`EINVAL` where its zcrx query lacks the flag, found by one registration
//! before anything runs) makes its rows skipped, with the reason; asked for alone, it is an error.

use crate::bench::{runnable_paths, PathKind};
use crate::echo::{
    run_clients, Check, ClientConfig, ConnFailure, EchoConfig, EchoServer, StartError,
};
use crate::lab::{Lab, VethPath};
use crate::reason::Reason;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;
use zcnet::rx::{Fallback, RxMode};
use zcnet::text::Text;
use zcnet::{Error, Result};

/// A receive mode of the bench: a [`RxMode`], and for zcrx whether without a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BenchRxMode {
    /// The receive mechanism.
    pub mode: RxMode,
    /// zcrx registered without a network device (`RxConfig::no_device`): the kernel copies.
    pub no_device: bool,
}

impl BenchRxMode {
    /// zcrx without a device (`zcrx-nodev`).
    pub const ZCRX_NODEV: BenchRxMode = BenchRxMode {
        mode: RxMode::Zcrx,
        no_device: true,
    };

    /// Every mode, in table order (the default set).
    pub const ALL: [BenchRxMode; 6] = [
        BenchRxMode::of(RxMode::Copy),
        BenchRxMode::of(RxMode::Uring),
        BenchRxMode::of(RxMode::Zcrx),
        BenchRxMode::ZCRX_NODEV,
        BenchRxMode::of(RxMode::Devmem),
        BenchRxMode::of(RxMode::Auto),
    ];

    /// `mode` with its device (the library's modes).
    pub const fn of(mode: RxMode) -> BenchRxMode {
        BenchRxMode {
            mode,
            no_device: false,
        }
    }

    /// The `--rx` name.
    pub fn name(self) -> &'static str {
        if self.no_device {
            "zcrx-nodev"
        } else {
            self.mode.name()
        }
    }

    /// Parses a `--rx` name of `bench rx`.
    pub fn parse(s: &str) -> Result<BenchRxMode> {
        BenchRxMode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = BenchRxMode::ALL.iter().map(|m| m.name()).collect();
                Error::invalid_input(format!(
                    "unknown receive mode '{s}': use one of {}",
                    names.join(", ")
                ))
            })
    }
}

impl From<RxMode> for BenchRxMode {
    fn from(mode: RxMode) -> BenchRxMode {
        BenchRxMode::of(mode)
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct RxBenchConfig {
    /// Paths (`veth`, `loopback`).
    pub paths: Vec<PathKind>,
    /// Receive modes, in table order.
    pub modes: Vec<BenchRxMode>,
    /// Bytes per request (and response).
    pub size: usize,
    /// Client connections.
    pub connections: usize,
    /// Client threads.
    pub threads: usize,
    /// Seconds per case.
    pub duration: Duration,
    /// The server's CPU (`None`: the last CPU this process may use).
    pub cpu: Option<usize>,
    /// Check every byte of every response (default: length, first and last 16 bytes).
    pub full_check: bool,
    /// Receive buffer size (`None`: the receiver's default, 16 KiB).
    pub buf_size: Option<usize>,
    /// Receive buffers (`None`: the receiver's default, 64).
    pub buffers: Option<usize>,
    /// `uring`: use bundles.
    pub bundle: bool,
    /// `veth`: steer each end's receive processing (RPS) to the CPUs of the side that receives
    /// (vB → the server's CPU, vA → the clients'), as a NIC's interrupts would on two hosts.
    /// Without it (the default), veth runs a packet's receive path on the sending CPU. On the
    /// 2-vCPU VM steering costs an inter-processor interrupt per batch and cuts qps by ~2.7×
    /// (docs/perf.md).
    pub steer_rx: bool,
    /// Run on a NIC instead of `paths` (the path is then named `iface`).
    pub iface: Option<IfaceTarget>,
}

/// The `iface` path: a NIC, the server's address on it and where the clients run.
#[derive(Debug, Clone)]
pub struct IfaceTarget {
    /// The NIC (in this network namespace) whose queue zcrx and devmem use.
    pub iface: String,
    /// Its receive queue (`None`: the receiver's default, the last one).
    pub queue: Option<u32>,
    /// The server's address and port on the NIC (the port the flows are steered by).
    pub listen: SocketAddr,
    /// The network namespace the clients run in (`None`: this one).
    pub client_netns: Option<String>,
}

impl Default for RxBenchConfig {
    fn default() -> Self {
        RxBenchConfig {
            paths: vec![PathKind::Veth, PathKind::Loopback],
            modes: BenchRxMode::ALL.to_vec(),
            size: 64 << 10,
            connections: 24,
            threads: 4,
            duration: Duration::from_secs(3),
            cpu: None,
            full_check: false,
            buf_size: None,
            buffers: None,
            bundle: true,
            steer_rx: false,
            iface: None,
        }
    }
}

/// One case.
#[derive(Debug, Clone, Default)]
pub struct RxRow {
    /// Path name.
    pub path: &'static str,
    /// The mode asked for.
    pub rx: &'static str,
    /// The mode used (for `auto`, the one it chose); `None` when refused.
    pub chosen: Option<&'static str>,
    /// Why the kernel (or the machine) refused the mode; no numbers then.
    pub refused: Option<Reason>,
    /// Why the mode did not run although asked for (`zcrx-nodev` on a kernel without
    /// `ZCRX_REG_NODEV`); no numbers then. Not a failure.
    pub skipped: Option<Reason>,
    /// What `auto` tried before its choice, and why each was refused.
    pub fallbacks: Vec<Fallback>,
    /// Bytes per request.
    pub size: usize,
    /// Client connections.
    pub connections: usize,
    /// Client threads.
    pub threads: usize,
    /// The server's CPU.
    pub server_cpu: Option<usize>,
    /// Round trips completed in the window.
    pub requests: u64,
    /// Round trips that completed after the window (the drain), not in `requests`.
    pub late: u64,
    /// The window, seconds.
    pub seconds: f64,
    /// Round trips per second.
    pub qps: f64,
    /// Gbit/s of request payload (one direction; as much again goes back).
    pub gbps: f64,
    /// Server thread CPU seconds while serving.
    pub server_cpu_seconds: f64,
    /// Server CPU µs per request (server thread CPU / round trips completed).
    pub server_cpu_us_per_req: Option<f64>,
    /// Client threads' CPU seconds.
    pub client_cpu_seconds: f64,
    /// Median round trip, µs.
    pub p50_us: Option<f64>,
    /// 99th percentile round trip, µs.
    pub p99_us: Option<f64>,
    /// Receiver polls per request.
    pub polls_per_req: Option<f64>,
    /// Server write calls per request.
    pub sends_per_req: Option<f64>,
    /// Receive buffers delivered per request.
    pub buffers_per_req: Option<f64>,
    /// Echoes the socket did not take whole.
    pub partial_sends: u64,
    /// Times receiving paused for want of a buffer.
    pub starved: u64,
    /// Payload bytes the server received (its whole life, the drain included).
    pub rx_bytes: u64,
    /// Of `rx_bytes`, those the kernel copied.
    pub copied_bytes: u64,
    /// Of `rx_bytes`, those the NIC wrote into registered memory (zero-copy).
    pub zerocopy_bytes: u64,
    /// Of `rx_bytes`, those whose way in nothing reports (never counted as zero-copy).
    pub unknown_copy_bytes: u64,
    /// Multishot re-arms.
    pub rearms: u64,
    /// Connections the server gave up on, and why.
    pub server_failures: Vec<ConnFailure>,
    /// Client connections that failed, and why.
    pub client_errors: Vec<String>,
    /// CPU seconds (user + system) that other processes used on this machine during the case
    /// (from /proc/stat and /proc/self/stat): a busy machine makes the numbers meaningless.
    pub other_cpu_seconds: Option<f64>,
    /// Why the case failed, if it did (not a refusal).
    pub error: Option<Reason>,
}

/// A whole run.
#[derive(Debug, Clone, Default)]
pub struct RxReport {
    /// The cases.
    pub rows: Vec<RxRow>,
    /// Things to know (paths skipped and why, CPU placement).
    pub notes: Vec<Text>,
}

impl RxReport {
    /// `row`'s qps divided by `copy`'s on the same path and size.
    pub fn ratio_to_copy(&self, row: &RxRow) -> Option<f64> {
        let base = self.rows.iter().find(|r| {
            r.path == row.path && r.size == row.size && r.rx == "copy" && r.ran_clean()
        })?;
        (base.qps > 0.0 && row.ran_clean()).then(|| row.qps / base.qps)
    }
}

impl RxRow {
    /// Whether the case ran (not refused, not skipped), so that it has numbers.
    pub fn measured(&self) -> bool {
        self.refused.is_none() && self.skipped.is_none()
    }

    fn ran_clean(&self) -> bool {
        self.measured() && self.error.is_none()
    }

    /// Percent of the received bytes that arrived zero-copy (`None`: nothing received).
    pub fn zero_copy_pct(&self) -> Option<f64> {
        (self.measured() && self.rx_bytes > 0)
            .then(|| self.zerocopy_bytes as f64 * 100.0 / self.rx_bytes as f64)
    }
}

/// Progress of a run.
#[derive(Debug)]
pub enum RxProgress<'a> {
    /// Case `index` of `total` starts.
    Start {
        /// 1-based.
        index: usize,
        /// Cases in all.
        total: usize,
        /// Path.
        path: &'static str,
        /// Mode.
        rx: &'static str,
    },
    /// A case finished.
    Done(&'a RxRow),
}

/// Where the server goes on one path.
enum Place {
    Veth(VethPath),
    Loopback,
    Iface(IfaceTarget),
}

/// What [`runnable_paths`] says could not run when a receive bench has nothing to run without
/// root.
pub(crate) const RX_WITHOUT_ROOT: &str = "bench rx: nothing can run: the namespace lab (path veth)";

/// Runs every mode on every path. Without root, only `loopback` runs (a note says why); asking
/// for `veth` alone without root is an error. The lab is gone when this returns.
pub fn run_rx(cfg: &RxBenchConfig, progress: &mut dyn FnMut(RxProgress<'_>)) -> Result<RxReport> {
    if cfg.size == 0 || cfg.connections == 0 || cfg.threads == 0 || cfg.duration.is_zero() {
        return Err(Error::invalid_input(
            "bench rx: size, connections, threads and duration must be positive",
        ));
    }
    if let Some(p) = cfg.paths.iter().find(|p| p.is_udp_drop()) {
        return Err(Error::invalid_input(format!(
            "bench rx: path '{}' has no echo peer (UDP into a drop device): use veth or loopback",
            p.name()
        )));
    }
    if let Some(t) = &cfg.iface {
        if let Some(ns) = &t.client_netns {
            if !crate::lab::netns_exists(ns) {
                return Err(Error::invalid_input(format!(
                    "bench rx: no network namespace '{ns}' for the clients (ip netns list): give one whose route to {} goes through {}'s peer",
                    t.listen.ip(),
                    t.iface
                )));
            }
        }
    }
    let mut report = RxReport::default();
    let paths = if cfg.iface.is_some() {
        Vec::new()
    } else {
        runnable_paths(
            &cfg.paths,
            zcnet::os::is_root(),
            RX_WITHOUT_ROOT,
            &mut report.notes,
        )?
    };
    let allowed = zcnet::os::thread_affinity().map_err(|e| Error::io("sched_getaffinity", e))?;
    let server_cpu = match cfg.cpu {
        Some(c) if allowed.contains(&c) => c,
        Some(c) => {
            return Err(Error::invalid_input(format!(
                "--cpu {c}: this process may run on CPUs {allowed:?} only: pick one of them"
            )))
        }
        None => *allowed.last().ok_or_else(|| {
            Error::io("sched_getaffinity", std::io::Error::other("no CPU allowed"))
        })?,
    };
    let client_cpus: Vec<usize> = allowed
        .iter()
        .copied()
        .filter(|&c| c != server_cpu)
        .collect();
    report.notes.push(
        if client_cpus.is_empty() {
            format!("server pinned to CPU {server_cpu}; only one CPU here, so the clients share it")
        } else {
            format!("server pinned to CPU {server_cpu}, clients on CPUs {client_cpus:?}")
        }
        .into(),
    );
    // zcrx-nodev: one registration tells whether the kernel has it at all, before any lab.
    let mut nodev_skip = None;
    if cfg.modes.iter().any(|m| m.no_device) {
        if let Some(e) = nodev_unsupported() {
            if cfg.modes.iter().all(|m| m.no_device) {
                return Err(e);
            }
            nodev_skip = Some(Reason::from(e));
        }
    }
    let mut lab = if paths.contains(&PathKind::Veth) {
        Some(Lab::new()?)
    } else {
        None
    };
    let mut places = Vec::new();
    for &p in &paths {
        let place = match (p, lab.as_mut()) {
            (PathKind::Veth, Some(l)) => {
                let v = l.veth()?;
                if cfg.steer_rx && !client_cpus.is_empty() {
                    let steered = steer_rx(&v.b, "vB", &[server_cpu])
                        .and_then(|()| steer_rx(&v.a, "vA", &client_cpus));
                    let note = match steered {
                        Ok(()) => format!(
                            "veth: receive processing steered (RPS) to the receiving side: vB -> CPU {server_cpu}, vA -> CPUs {client_cpus:?}"
                        ),
                        Err(e) => format!("veth: receive processing not steered ({e}): each packet's receive path runs on the sending CPU"),
                    };
                    report.notes.push(note.into());
                }
                Place::Veth(v)
            }
            _ => Place::Loopback,
        };
        places.push((p.name(), place));
    }
    if let Some(t) = &cfg.iface {
        places.push(("iface", Place::Iface(t.clone())));
    }
    let total = places.len() * cfg.modes.len();
    let mut index = 0;
    for &(path, ref place) in &places {
        for &mode in &cfg.modes {
            if crate::interrupt::interrupted() {
                return Err(Error::Interrupted);
            }
            index += 1;
            progress(RxProgress::Start {
                index,
                total,
                path,
                rx: mode.name(),
            });
            let mut row = RxRow {
                path,
                rx: mode.name(),
                size: cfg.size,
                connections: cfg.connections,
                threads: cfg.threads.min(cfg.connections),
                server_cpu: Some(server_cpu),
                ..RxRow::default()
            };
            if let (true, Some(why)) = (mode.no_device, &nodev_skip) {
                row.skipped = Some(why.clone());
                progress(RxProgress::Done(&row));
                report.rows.push(row);
                continue;
            }
            let other = crate::cpu::OtherCpu::start();
            let outcome = run_case(cfg, place, mode, server_cpu, &client_cpus, &mut row);
            row.other_cpu_seconds = other.seconds();
            match outcome {
                Ok(()) => {}
                Err(Error::Interrupted) => return Err(Error::Interrupted),
                Err(e) => row.error = Some(e.into()),
            }
            progress(RxProgress::Done(&row));
            report.rows.push(row);
        }
    }
    drop(lab.take());
    Ok(report)
}

/// devmem on a NIC: binds a udmabuf of host memory of the receive area's size and echoes
/// what lands there by reading it back ([`crate::echo::EchoConfig::device_reader`]).
fn device_memory(ecfg: &mut EchoConfig) -> Result<()> {
    let mut region = zcnet::Region::udmabuf(ecfg.rx.area_len)?;
    ecfg.rx.dmabuf = Some(region.dmabuf()?);
    let region = std::sync::Mutex::new(region);
    ecfg.device_reader = Some(crate::echo::DeviceReader(std::sync::Arc::new(
        move |off: u64, out: &mut [u8]| {
            let off = usize::try_from(off).map_err(|_| {
                Error::io(
                    "reading the udmabuf back",
                    std::io::Error::from_raw_os_error(libc::EOVERFLOW),
                )
            })?;
            region
                .lock()
                .map_err(|_| {
                    Error::io(
                        "reading the udmabuf back",
                        std::io::Error::other("its lock was poisoned"),
                    )
                })?
                .read_back(off, out)
        },
    )));
    Ok(())
}

/// Whether this kernel lacks zcrx without a device: a registration of a four-page area is
/// tried, and `Some(its error)` comes back when the kernel refused the flag itself (`EINVAL`
/// where its zcrx query does not list `ZCRX_REG_NODEV`). Anything else (it works, or a refusal for another reason, such as
/// CAP_NET_ADMIN) is left to the cases, whose rows say so.
fn nodev_unsupported() -> Option<Error> {
    let mut rc = zcnet::rx::RxConfig::new(RxMode::Zcrx);
    rc.cancel = crate::interrupt::token();
    rc.no_device = true;
    rc.area_len = 16 << 10;
    match zcnet::rx::Receiver::new(&rc) {
        Ok(_) => None,
        Err(e) => kernel_lacks_nodev(&e).then_some(e),
    }
}

/// Whether `e` is the refusal of `ZCRX_REG_NODEV` by a kernel whose zcrx query (asked, not
/// inferred from its release) does not list the flag: its `EINVAL`.
fn kernel_lacks_nodev(e: &Error) -> bool {
    let einval = matches!(e, Error::Unsupported { source, .. } if source.raw_os_error() == Some(libc::EINVAL));
    einval && !zcnet::probe::ZcrxCaps::get().nodev()
}

/// `cpus` as the kernel's cpumask text (`bitmap_parse`): 32-bit hex groups, highest first,
/// joined with commas ("1,00000000" is CPU 32), as many as the highest CPU needs.
fn cpumask(cpus: &[usize]) -> String {
    let words = cpus.iter().max().map_or(1, |&c| c / 32 + 1);
    let mut w = vec![0u32; words];
    for &c in cpus {
        w[c / 32] |= 1 << (c % 32);
    }
    let mut groups: Vec<String> = w.iter().rev().map(|x| format!("{x:08x}")).collect();
    // The first group needs no leading zeros.
    if let Some(first) = groups.first_mut() {
        *first = format!("{:x}", w[words - 1]);
    }
    groups.join(",")
}

/// Sets `dev`'s receive packet steering (`/sys/class/net/DEV/queues/rx-0/rps_cpus`, seen from
/// inside namespace `ns`) to `cpus`.
fn steer_rx(ns: &str, dev: &str, cpus: &[usize]) -> Result<()> {
    let script = format!(
        "echo {} > /sys/class/net/{dev}/queues/rx-0/rps_cpus",
        cpumask(cpus)
    );
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", ns, "sh", "-c", &script])
        .output()
        .map_err(|e| Error::io("running 'ip netns exec'", e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(crate::lab::command_failed(
            format!("ip netns exec {ns} sh -c '{script}'"),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }
}

fn run_case(
    cfg: &RxBenchConfig,
    place: &Place,
    mode: BenchRxMode,
    server_cpu: usize,
    client_cpus: &[usize],
    row: &mut RxRow,
) -> Result<()> {
    let (bind, server_ns, client_ns, iface) = match place {
        Place::Veth(v) => (
            SocketAddr::new(v.b_addr, 0),
            Some(v.b.clone()),
            Some(v.a.clone()),
            "vB",
        ),
        Place::Loopback => (
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            None,
            None,
            "lo",
        ),
        Place::Iface(t) => (t.listen, None, t.client_netns.clone(), t.iface.as_str()),
    };
    let mut ecfg = EchoConfig::new(mode.mode, bind);
    if let Place::Iface(t) = place {
        ecfg.rx.queue = t.queue;
        if mode.mode == RxMode::Devmem {
            device_memory(&mut ecfg)?;
        }
    }
    ecfg.netns = server_ns;
    ecfg.cpu = Some(server_cpu);
    if mode.no_device {
        // No interface: any TCP connection, the kernel copying into the area.
        ecfg.rx.no_device = true;
    } else {
        // zcrx/devmem (and auto's zcrx attempt) need the interface the flows arrive on; on
        // these paths the kernel refuses them, and the row says why in the kernel's words.
        ecfg.rx.iface = Some(iface.to_string());
    }
    if let Some(b) = cfg.buf_size {
        ecfg.rx.buf_size = b;
    }
    if let Some(n) = cfg.buffers {
        ecfg.rx.buffers = n;
    }
    ecfg.rx.bundle = cfg.bundle;
    let server = match EchoServer::start_classified(ecfg) {
        Ok(s) => s,
        Err(StartError::Refused(e)) => {
            row.refused = Some(e.into());
            return Ok(());
        }
        Err(StartError::Other(e)) => return Err(e),
    };
    let chosen = |m: RxMode| {
        if m == mode.mode {
            mode.name()
        } else {
            m.name()
        }
    };
    row.chosen = Some(chosen(server.mode()));
    row.fallbacks = server.fallbacks().to_vec();
    let mut ccfg = ClientConfig::new(server.addr());
    ccfg.netns = client_ns;
    ccfg.size = cfg.size;
    ccfg.connections = cfg.connections;
    ccfg.threads = cfg.threads;
    ccfg.duration = cfg.duration;
    ccfg.check = if cfg.full_check {
        Check::Full
    } else {
        Check::Cheap
    };
    ccfg.cpus = (!client_cpus.is_empty()).then(|| client_cpus.to_vec());
    let clients = run_clients(&ccfg);
    let srv = server.stop()?;
    let clients = clients?;
    row.requests = clients.requests;
    row.late = clients.late;
    row.seconds = clients.seconds;
    row.qps = clients.qps();
    row.gbps = clients.gbps();
    row.p50_us = clients.percentile_us(50.0);
    row.p99_us = clients.percentile_us(99.0);
    row.client_cpu_seconds = clients.cpu_seconds;
    row.client_errors = clients.errors.clone();
    row.server_cpu_seconds = srv.cpu_seconds;
    // Server counters cover its whole life (the drain after the window too): per request, they
    // are divided by every round trip it served (counted + late).
    let served = (clients.requests + clients.late) as f64;
    let per = |x: f64| (served > 0.0).then(|| x / served);
    row.server_cpu_us_per_req = per(srv.cpu_seconds * 1e6);
    row.polls_per_req = per(srv.polls as f64);
    row.sends_per_req = per(srv.send_calls as f64);
    row.buffers_per_req = per(srv.rx.buffers as f64);
    row.partial_sends = srv.partial_sends;
    row.starved = srv.rx.starved;
    row.rearms = srv.rx.rearms;
    row.rx_bytes = srv.rx.bytes;
    row.copied_bytes = srv.rx.copied_bytes;
    row.zerocopy_bytes = srv.rx.zerocopy_bytes;
    row.unknown_copy_bytes = srv.rx.unknown_copy_bytes;
    row.server_failures = srv.failures.clone();
    if srv.mode != mode.mode {
        row.chosen = Some(chosen(srv.mode));
    }
    let mut problems: Vec<Reason> = Vec::new();
    if let Some(e) = &srv.error {
        problems.push(format!("server: {e}").into());
    }
    if !clients.errors.is_empty() {
        problems.push(
            format!(
                "{} client connection(s) failed, first: {}",
                clients.errors.len(),
                clients.errors[0]
            )
            .into(),
        );
    }
    if let Some(first) = srv.failures.first() {
        problems.push(
            Reason::from(format!(
                "server gave up on {} connection(s), first: ",
                srv.failures.len()
            )) + first,
        );
    }
    if srv.held_at_stop != 0 || srv.open_at_stop != 0 {
        problems.push(
            format!(
                "after stop the receiver still held {} buffer(s) and {} connection(s)",
                srv.held_at_stop, srv.open_at_stop
            )
            .into(),
        );
    }
    // A machine busy enough that the first round trip ends after a short window (seen with
    // --duration 0.3 on a 2-CPU machine under load) measured nothing, but the path worked: the
    // row shows 0 requests in the window, not a failure. No round trip at all is one.
    if clients.requests + clients.late == 0 {
        problems.push("no round trip completed".into());
    }
    if !problems.is_empty() {
        row.error = Some(Reason::join(problems, "; "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[zcnet_testkit::test]
    fn cpumasks_are_the_kernels_text_past_32_cpus() {
        assert_eq!(cpumask(&[0]), "1");
        assert_eq!(cpumask(&[1, 3]), "a");
        assert_eq!(cpumask(&[31]), "80000000");
        assert_eq!(cpumask(&[32]), "1,00000000");
        assert_eq!(cpumask(&[47, 0]), "8000,00000001");
        assert_eq!(cpumask(&[64]), "1,00000000,00000000");
        assert_eq!(cpumask(&[]), "0");
    }

    #[zcnet_testkit::test]
    fn zcrx_nodev_is_a_mode_of_its_own_in_the_default_set() {
        let m = BenchRxMode::parse("zcrx-nodev").unwrap();
        assert_eq!(m, BenchRxMode::ZCRX_NODEV);
        assert_eq!((m.mode, m.no_device), (RxMode::Zcrx, true));
        assert_eq!(BenchRxMode::parse("zcrx").unwrap(), RxMode::Zcrx.into());
        assert!(RxBenchConfig::default().modes.contains(&m));
        let e = BenchRxMode::parse("bogus").unwrap_err().to_string();
        assert!(
            e.contains("unknown receive mode 'bogus'") && e.contains("zcrx-nodev"),
            "{e}"
        );
    }

    #[zcnet_testkit::test]
    fn zero_copy_share_counts_only_zero_copy_bytes() {
        let copied = RxRow {
            rx_bytes: 1000,
            copied_bytes: 1000,
            ..RxRow::default()
        };
        assert_eq!(copied.zero_copy_pct(), Some(0.0));
        let unknown = RxRow {
            rx_bytes: 1000,
            unknown_copy_bytes: 1000,
            ..RxRow::default()
        };
        assert_eq!(
            unknown.zero_copy_pct(),
            Some(0.0),
            "unknown is never zero-copy"
        );
        let half = RxRow {
            rx_bytes: 1000,
            copied_bytes: 500,
            zerocopy_bytes: 500,
            ..RxRow::default()
        };
        assert_eq!(half.zero_copy_pct(), Some(50.0));
        let skipped = RxRow {
            skipped: Some("needs ZCRX_REG_NODEV".into()),
            ..RxRow::default()
        };
        assert_eq!(skipped.zero_copy_pct(), None);
        assert!(!skipped.measured());
    }
}
