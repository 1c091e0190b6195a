//! A private lab of network namespaces: two hosts joined by a veth pair, and a UDP sink whose
//! route ends in an ifb device that drops every packet (the counterpart of the dummy device in
//! the SEND_ZC measurements of Pavel Begunkov's "[RFC 00/12] io_uring zerocopy send", 2021).
//!
//! ```text
//!   ns …-a: vA 10.10.0.1/24 ══ veth ══ ns …-b: vB 10.10.0.2/24
//!   ns …-s: sinkA (ifb) 10.20.0.1/24, route 10.30.0.0/24 dev sinkA → sends to 10.30.0.2 are dropped
//!   ns …-d: dumA (dummy, MTU 65535) 10.40.0.1/24, route 10.50.0.0/24 dev dumA → 10.50.0.2 dropped
//! ```
//! The dummy path is the device of the original SEND_ZC measurements; it needs the kernel's
//! dummy driver (CONFIG_DUMMY), which [`dummy_driver`] looks for and [`Lab::dummy`] names when
//! the kernel refuses the device.
//! Names are `zcnet-<pid>-<n>-<role>`: unique per process and per lab, so concurrent runs never
//! collide. Interfaces are created directly inside the lab's namespaces (`ip -n NS link add … netns
//! NS2`): nothing is added to, or taken from, the root namespace (its boot-time ifb0/ifb1 and eth0
//! are never touched). The lab deletes its namespaces on drop — on every exit path, including an
//! error or a Ctrl-C caught by zcnet-tools' interrupt handler (`zcnet_tools::interrupt`). A lab
//! killed with SIGKILL leaves its namespaces behind; [`cleanup_stale`] (run by every new lab and
//! by `zcnet lab cleanup`) deletes those whose process is gone.
//!
//! The lab stands beside the library, not above it: it depends on zcnet-sys (setns, the root
//! check), not on zcnet, so that the library's own tests use it as zcnet-tools does, without a
//! dependency circle. Its errors are its own ([`Error`]); zcnet-tools (`zcnet_tools::lab`) gives
//! the same lab with zcnet's errors, in the same words.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error;

pub use error::{no_dummy_driver_what, CommandFailed, Error, Result, NO_DUMMY_DRIVER_FIX};

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT_LAB: AtomicU32 = AtomicU32::new(0);
const PREFIX: &str = "zcnet-";

/// The veth path: a TCP sender in `a`, a receiver in `b`.
#[derive(Debug, Clone)]
pub struct VethPath {
    /// Sender namespace.
    pub a: String,
    /// Receiver namespace.
    pub b: String,
    /// Sender address.
    pub a_addr: IpAddr,
    /// Receiver address.
    pub b_addr: IpAddr,
}

/// The sink path: a UDP sender in `ns` whose packets to `dest` are dropped by an ifb device.
#[derive(Debug, Clone)]
pub struct SinkPath {
    /// Sender namespace.
    pub ns: String,
    /// Where to send.
    pub dest: SocketAddr,
    /// The ifb device the route ends in (inside `ns`).
    pub dev: String,
}

/// The dummy path: a UDP sender in `ns` whose packets to `dest` leave through a dummy device
/// (MTU 65535), whose driver drops them.
#[derive(Debug, Clone)]
pub struct DummyPath {
    /// Sender namespace.
    pub ns: String,
    /// Where to send.
    pub dest: SocketAddr,
    /// The dummy device the route ends in (inside `ns`).
    pub dev: String,
}

/// Whether this kernel can make a `dummy` device: the driver is built in or loaded
/// (`/sys/module/dummy`, which its `numdummies` parameter creates), or a module the kernel can
/// load on `ip link add` (`drivers/net/dummy.ko` in `modules.dep` or `modules.builtin` of the
/// running release). Needs no root; [`Lab::dummy`] gives the kernel's own answer.
pub fn dummy_driver() -> bool {
    if std::path::Path::new("/sys/module/dummy").exists() {
        return true;
    }
    let Ok(release) = std::fs::read_to_string("/proc/sys/kernel/osrelease") else {
        return false;
    };
    ["modules.dep", "modules.builtin"].iter().any(|f| {
        std::fs::read_to_string(format!("/lib/modules/{}/{f}", release.trim()))
            .is_ok_and(|s| s.contains("drivers/net/dummy.ko"))
    })
}

/// Namespaces made by this lab, deleted on drop.
#[derive(Debug)]
pub struct Lab {
    base: String,
    namespaces: Vec<String>,
}

/// The error of a lab command that failed: "lab setup failed: '`command`': `stderr`".
pub fn command_failed(command: String, stderr: String) -> Error {
    Error::Command(CommandFailed { command, stderr })
}

/// Loads driver `module` with no devices of its own (`count_param=0`) when it is a module not
/// loaded yet: `ip link add … type ifb|dummy`, even inside a namespace, would load it with its
/// defaults, and the module's init then adds ifb0/ifb1 or dummy0 to the root namespace, which
/// the lab must never touch. Built in or loaded already (`/sys/module/NAME`), or no modprobe:
/// nothing to do (the `ip` command then says what is missing).
fn preload_without_devices(module: &str, count_param: &str) {
    if std::path::Path::new("/sys/module").join(module).exists() {
        return;
    }
    let _ = Command::new("modprobe")
        .args([module, &format!("{count_param}=0")])
        .output();
}

fn ip(args: &[&str]) -> Result<()> {
    // In a process group of its own: a second Ctrl-C at the terminal (while the lab is torn
    // down) must not kill the `ip netns del` that cleans up after the first.
    let out = Command::new("ip")
        .args(args)
        .process_group(0)
        .output()
        .map_err(|e| {
            Error::io(
                "running 'ip' (iproute2): install it with 'apt-get install iproute2'",
                e,
            )
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(command_failed(
            format!("ip {}", args.join(" ")),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }
}

/// Names of all network namespaces (`ip netns list`).
pub fn list_namespaces() -> Result<Vec<String>> {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map_err(|e| Error::io("running 'ip netns list'", e))?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect())
}

/// The start time of process `/proc/<dir>` (a pid as this PID namespace numbers it, or
/// "self"): `/proc/<dir>/stat` field 22, clock ticks after boot, 0 if unreadable; `None` if
/// there is no such process.
fn start_time(dir: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{dir}/stat")).ok()?;
    Some(zcnet_sys::os::stat_field(&stat, 22).unwrap_or(0))
}

/// Deletes lab namespaces whose creating process no longer exists. Returns their names.
///
/// A lab's names are `zcnet-PID-NsSTART-…`: the creating process's pid and its start time
/// (`/proc/PID/stat` field 22), so that a later process given the same pid (pid 1 in every
/// container) is not taken for it. Names without a start time (older labs) go by the pid.
pub fn cleanup_stale() -> Result<Vec<String>> {
    let mut removed = Vec::new();
    for ns in list_namespaces()? {
        let Some(rest) = ns.strip_prefix(PREFIX) else {
            continue;
        };
        let mut parts = rest.split('-');
        let Some(pid) = parts.next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let start = parts
            .next()
            .and_then(|n| n.split_once('s'))
            .and_then(|(_, s)| s.parse::<u64>().ok());
        let alive = start_time(&pid.to_string()).is_some_and(|p| start.is_none_or(|s| s == p));
        if !alive {
            // Another run may be deleting the same stale namespace right now: gone is fine.
            match ip(&["netns", "del", &ns]) {
                Ok(()) => removed.push(ns),
                Err(_) if !netns_exists(&ns) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(removed)
}

/// Moves the calling thread into namespace `ns`. Sockets it creates afterwards live there.
pub fn enter(ns: &str) -> Result<()> {
    let f = std::fs::File::open(format!("/run/netns/{ns}"))
        .map_err(|e| Error::io(format!("open namespace {ns}"), e))?;
    zcnet_sys::os::enter_netns(&f).map_err(|e| Error::io(format!("setns into {ns}"), e))
}

/// Runs `f` on a thread of its own inside namespace `ns`, the calling thread's namespace left
/// as it is; a panic in `f` goes on in the caller.
pub fn in_ns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter(ns)?;
            Ok(f())
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

impl Lab {
    /// An empty lab. Needs root; cleans up namespaces left by dead zcnet processes first.
    pub fn new() -> Result<Lab> {
        if !zcnet_sys::os::is_root() {
            return Err(Error::NotRoot {
                what: "the namespace lab",
            });
        }
        cleanup_stale()?;
        let n = NEXT_LAB.fetch_add(1, Ordering::Relaxed);
        Ok(Lab {
            base: format!(
                "{PREFIX}{}-{n}s{}",
                std::process::id(),
                start_time("self").unwrap_or(0)
            ),
            namespaces: Vec::new(),
        })
    }

    /// The namespaces this lab made so far.
    pub fn namespaces(&self) -> &[String] {
        &self.namespaces
    }

    fn add_ns(&mut self, role: &str) -> Result<String> {
        self.add_ns_with(role, ip)
    }

    /// [`Lab::add_ns`] with the lab's `ip` commands run by `ip` (the tests' stand-in for an
    /// `ip` killed half-way).
    fn add_ns_with(&mut self, role: &str, ip: impl Fn(&[&str]) -> Result<()>) -> Result<String> {
        let name = format!("{}-{role}", self.base);
        if netns_exists(&name) {
            // This lab's already (a second path of the same kind): not ours to delete twice.
            return Err(command_failed(
                format!("ip netns add {name}"),
                format!("Cannot create namespace \"{name}\": it exists already"),
            ));
        }
        // Recorded before it is made: an `ip` killed half-way (a Ctrl-C reaches it too) may
        // leave the namespace behind, and the drop deletes what exists of it.
        self.namespaces.push(name.clone());
        ip(&["netns", "add", &name])?;
        ip(&["-n", &name, "link", "set", "lo", "up"])?;
        Ok(name)
    }

    /// Two namespaces joined by a veth pair, 10.10.0.1 ↔ 10.10.0.2.
    pub fn veth(&mut self) -> Result<VethPath> {
        let a = self.add_ns("a")?;
        let b = self.add_ns("b")?;
        ip(&[
            "-n", &a, "link", "add", "vA", "type", "veth", "peer", "name", "vB", "netns", &b,
        ])?;
        ip(&["-n", &a, "addr", "add", "10.10.0.1/24", "dev", "vA"])?;
        ip(&["-n", &b, "addr", "add", "10.10.0.2/24", "dev", "vB"])?;
        ip(&["-n", &a, "link", "set", "vA", "up"])?;
        ip(&["-n", &b, "link", "set", "vB", "up"])?;
        Ok(VethPath {
            a,
            b,
            a_addr: Ipv4Addr::new(10, 10, 0, 1).into(),
            b_addr: Ipv4Addr::new(10, 10, 0, 2).into(),
        })
    }

    /// A namespace whose route to 10.30.0.0/24 ends in an ifb device that drops everything.
    pub fn sink(&mut self) -> Result<SinkPath> {
        let s = self.add_ns("s")?;
        preload_without_devices("ifb", "numifbs");
        ip(&["-n", &s, "link", "add", "sinkA", "type", "ifb"])?;
        ip(&["-n", &s, "addr", "add", "10.20.0.1/24", "dev", "sinkA"])?;
        ip(&["-n", &s, "link", "set", "sinkA", "up"])?;
        ip(&["-n", &s, "route", "add", "10.30.0.0/24", "dev", "sinkA"])?;
        Ok(SinkPath {
            ns: s,
            dest: SocketAddr::new(Ipv4Addr::new(10, 30, 0, 2).into(), 9),
            dev: "sinkA".into(),
        })
    }

    /// A namespace whose route to 10.50.0.0/24 leaves through a dummy device (MTU 65535, so a
    /// 64 KB datagram leaves in one piece with its checksum left to the device, which lets UDP
    /// send it without copying); the driver drops every packet. Without the dummy driver:
    /// [`Error::NoDummyDriver`] with what `ip` said.
    pub fn dummy(&mut self) -> Result<DummyPath> {
        let d = self.add_ns("d")?;
        preload_without_devices("dummy", "numdummies");
        match ip(&["-n", &d, "link", "add", "dumA", "type", "dummy"]) {
            Ok(()) => {}
            Err(Error::Command(c))
                if c.stderr.contains("Unknown device type")
                    || c.stderr.contains("not supported")
                    || c.stderr.contains("Not supported") =>
            {
                return Err(Error::NoDummyDriver {
                    kernel: Some(c.stderr),
                });
            }
            Err(e) => return Err(e),
        }
        ip(&["-n", &d, "link", "set", "dumA", "mtu", "65535"])?;
        ip(&["-n", &d, "addr", "add", "10.40.0.1/24", "dev", "dumA"])?;
        ip(&["-n", &d, "link", "set", "dumA", "up"])?;
        ip(&["-n", &d, "route", "add", "10.50.0.0/24", "dev", "dumA"])?;
        Ok(DummyPath {
            ns: d,
            dest: SocketAddr::new(Ipv4Addr::new(10, 50, 0, 2).into(), 9),
            dev: "dumA".into(),
        })
    }
}

/// Whether the named namespace exists (`ip netns add` makes `/run/netns/NAME`).
pub fn netns_exists(name: &str) -> bool {
    std::path::Path::new("/run/netns").join(name).exists()
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in self.namespaces.drain(..).rev() {
            if !netns_exists(&ns) {
                continue; // its `ip netns add` failed before making it
            }
            if let Err(e) = ip(&["netns", "del", &ns]) {
                // A closed stderr must not panic a drop: the failed write is dropped.
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "zcnet: could not delete namespace {ns}: {e} (delete it with 'ip netns del {ns}')"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `ip netns add` killed after it made the namespace (a Ctrl-C reaches the lab's `ip`
    /// children too) leaves a namespace the lab must still delete: its name is recorded
    /// before the command runs (8220f17; that fix had no test of its own). The kill is a
    /// stand-in runner that makes the namespace with the real `ip` and then reports the
    /// command killed.
    #[zcnet_testkit::test]
    fn a_namespace_whose_ip_was_killed_half_way_is_deleted_with_the_lab() {
        zcnet_testkit::require_root("network namespaces for the lab");
        zcnet_testkit::require_tool("ip", "the lab runs iproute2's ip");
        let mut lab = Lab::new().expect("lab");
        let killed = |args: &[&str]| {
            ip(args)?;
            Err(command_failed(
                format!("ip {}", args.join(" ")),
                "killed by SIGINT".into(),
            ))
        };
        let e = lab.add_ns_with("k", killed).expect_err("killed");
        assert!(e.to_string().contains("killed by SIGINT"), "{e}");
        let name = format!("{}-k", lab.base);
        assert!(netns_exists(&name), "the killed ip made it");
        drop(lab);
        let left = netns_exists(&name);
        if left {
            let _ = ip(&["netns", "del", &name]);
        }
        assert!(!left, "namespace {name} was left behind");
    }

    /// The lab's messages are the ones the `zcnet` command has always printed (zcnet-tools
    /// passes them on in zcnet's error): the command that failed and what it said; the dummy
    /// path's refusal in one line, naming CONFIG_DUMMY, what `ip` said and the fix.
    #[zcnet_testkit::test]
    fn messages_name_the_command_and_the_fix() {
        let e = command_failed("ip netns add x".into(), "File exists\n".into());
        assert_eq!(
            e.to_string(),
            "lab setup failed: 'ip netns add x': File exists"
        );
        let e = Error::NoDummyDriver {
            kernel: Some("Error: Unknown device type.\n".into()),
        };
        let m = e.to_string();
        for want in [
            "dummy path",
            "CONFIG_DUMMY; ip: Error: Unknown device type.)",
            "not supported here",
            "kernel-lab.sh",
            "--path sink",
        ] {
            assert!(m.contains(want), "missing '{want}' in: {m}");
        }
        assert!(!m.contains('\n'), "one line: {m}");
        let e = Error::NotRoot {
            what: "the namespace lab",
        };
        assert!(
            e.to_string().starts_with("the namespace lab needs root"),
            "{e}"
        );
    }
}

// The unit tests' harness (`[lib] harness = false`): see zcnet-testkit.
#[cfg(test)]
zcnet_testkit::main!();
