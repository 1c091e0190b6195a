//! A private lab of network namespaces: two hosts joined by a veth pair, and a UDP sink whose
//! route ends in an ifb device that drops every packet (the counterpart of the dummy device in
//! the SEND_ZC measurements of Pavel Begunkov's "[RFC 00/12] io_uring zerocopy send", 2021).
//!
//! ```text
//!   ns …-a: vA 10.10.0.1/24 ══ veth ══ ns …-b: vB 10.10.0.2/24
//!   ns …-s: sinkA (ifb) 10.20.0.1/24, route 10.30.0.0/24 dev sinkA → sends to 10.30.0.2 are dropped
//! ```
//! Names are `zcnet-<pid>-<n>-<role>`: unique per process and per lab, so concurrent runs never
//! collide. Interfaces are created directly inside the lab's namespaces (`ip -n NS link add … netns
//! NS2`): nothing is added to, or taken from, the root namespace (its boot-time ifb0/ifb1 and eth0
//! are never touched). The lab deletes its namespaces on drop — on every exit path, including an
//! error or Ctrl-C caught by [`zcnet::install_interrupt_handler`]. A lab killed with SIGKILL leaves
//! its namespaces behind; [`cleanup_stale`] (run by every new lab and by `zcnet lab cleanup`)
//! deletes those whose process is gone.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use zcnet::{Error, Result};

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

/// Namespaces made by this lab, deleted on drop.
#[derive(Debug)]
pub struct Lab {
    base: String,
    namespaces: Vec<String>,
}

fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip").args(args).output().map_err(|e| {
        Error::io(
            "running 'ip' (iproute2): install it with 'apt-get install iproute2'",
            e,
        )
    })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::Lab {
            command: format!("ip {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
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

/// Deletes lab namespaces whose creating process no longer exists. Returns their names.
pub fn cleanup_stale() -> Result<Vec<String>> {
    let mut removed = Vec::new();
    for ns in list_namespaces()? {
        let Some(rest) = ns.strip_prefix(PREFIX) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            ip(&["netns", "del", &ns])?;
            removed.push(ns);
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
            base: format!("{PREFIX}{}-{n}", std::process::id()),
            namespaces: Vec::new(),
        })
    }

    /// The namespaces this lab made so far.
    pub fn namespaces(&self) -> &[String] {
        &self.namespaces
    }

    fn add_ns(&mut self, role: &str) -> Result<String> {
        let name = format!("{}-{role}", self.base);
        ip(&["netns", "add", &name])?;
        self.namespaces.push(name.clone());
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
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in self.namespaces.drain(..).rev() {
            if let Err(e) = ip(&["netns", "del", &ns]) {
                crate::eoutln!("zcnet: could not delete namespace {ns}: {e} (delete it with 'ip netns del {ns}')");
            }
        }
    }
}
