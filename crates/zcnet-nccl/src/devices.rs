//! The plugin's devices (one per usable interface) and its knobs (`ZCNET_NCCL_*`).
//!
//! Interfaces: `ZCNET_NCCL_IFACE` if set, else `NCCL_SOCKET_IFNAME` (NCCL's syntax: a comma list
//! of name prefixes, `=name` for an exact name, a leading `^` to exclude), else every interface
//! with an IPv4 address but `lo`, `docker*` and `virbr*` (`lo` when it is the only one).

use crate::error::{PluginError, Result};
use std::ffi::CString;
use std::net::IpAddr;

/// One device NCCL sees.
#[derive(Debug)]
pub struct Device {
    /// Interface name (for logs, and NCCL's `name`).
    pub name: CString,
    /// The address connections are made to.
    pub addr: IpAddr,
    /// `/sys/devices/...` of the NIC, when it is a PCI device.
    pub pci_path: Option<CString>,
    /// Link speed, Mbit/s.
    pub speed_mbps: i32,
}

/// The knobs, read once at `init`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Knobs {
    /// TCP sockets per connection (`ZCNET_NCCL_NSOCKS`, 1..=16, default 2).
    pub nsocks: u16,
    /// Chunk size in bytes (`ZCNET_NCCL_CHUNK`, 4 KiB..=16 MiB, default 512 KiB).
    pub chunk: u32,
    /// How sends move (`ZCNET_NCCL_TX`).
    pub tx: TxMode,
    /// How receives move (`ZCNET_NCCL_RX`).
    pub rx: RxMode,
    /// How long a connection may take to connect and greet, on either side
    /// (`ZCNET_NCCL_CONNECT_TIMEOUT_MS`, 100..=600000, default 30000).
    pub connect_timeout: std::time::Duration,
}

/// `ZCNET_NCCL_TX`: how the plugin sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxMode {
    /// `send()` on non-blocking sockets, driven from `isend`/`test`.
    Copy,
    /// io_uring `IORING_OP_SEND` (the kernel copies).
    Uring,
    /// io_uring `SEND_ZC` from NCCL's buffers (fixed buffers where `regMr` could register).
    UringZc,
    /// `uring-zc`, switching to `uring` while the kernel reports that it copies anyway (TCP over
    /// loopback and veth), with periodic re-checks (`zcnet_core::AutoPolicy`).
    Auto,
}

/// `ZCNET_NCCL_RX`: how the plugin receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxMode {
    /// `recv()` on non-blocking sockets, driven from `irecv`/`test`.
    Copy,
    /// io_uring `IORING_OP_RECV` straight into NCCL's buffers (one request per socket, posted
    /// ahead, so data lands while NCCL does other work).
    Uring,
}

impl TxMode {
    /// The knob's spelling.
    pub fn name(self) -> &'static str {
        match self {
            TxMode::Copy => "copy",
            TxMode::Uring => "uring",
            TxMode::UringZc => "uring-zc",
            TxMode::Auto => "auto",
        }
    }
}

impl RxMode {
    /// The knob's spelling.
    pub fn name(self) -> &'static str {
        match self {
            RxMode::Copy => "copy",
            RxMode::Uring => "uring",
        }
    }
}

fn parse_choice<T: Copy>(
    get: &impl Fn(&str) -> Option<String>,
    name: &str,
    default: T,
    choices: &[(&str, T)],
) -> Result<T> {
    let Some(v) = get(name) else {
        return Ok(default);
    };
    choices
        .iter()
        .find(|(n, _)| *n == v.trim())
        .map(|(_, t)| *t)
        .ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
            PluginError::Invalid(format!("{name}={v}: give one of {}", names.join(", ")))
        })
}

impl Knobs {
    /// Reads the knobs with `get` (the environment in the plugin); a bad value is an error
    /// naming the variable and the range.
    pub fn from(get: impl Fn(&str) -> Option<String>) -> Result<Knobs> {
        let nsocks = parse_knob(&get, "ZCNET_NCCL_NSOCKS", 2, 1, 16)?;
        let chunk = parse_knob(&get, "ZCNET_NCCL_CHUNK", 512 << 10, 4 << 10, 16 << 20)?;
        let tx = parse_choice(
            &get,
            "ZCNET_NCCL_TX",
            TxMode::Auto,
            &[
                ("copy", TxMode::Copy),
                ("uring", TxMode::Uring),
                ("uring-zc", TxMode::UringZc),
                ("auto", TxMode::Auto),
            ],
        )?;
        let rx = parse_choice(
            &get,
            "ZCNET_NCCL_RX",
            RxMode::Uring,
            &[("copy", RxMode::Copy), ("uring", RxMode::Uring)],
        )?;
        let timeout_ms = parse_knob(&get, "ZCNET_NCCL_CONNECT_TIMEOUT_MS", 30_000, 100, 600_000)?;
        Ok(Knobs {
            nsocks: nsocks as u16,
            chunk: chunk as u32,
            tx,
            rx,
            connect_timeout: std::time::Duration::from_millis(timeout_ms),
        })
    }
}

fn parse_knob(
    get: &impl Fn(&str) -> Option<String>,
    name: &str,
    default: u64,
    min: u64,
    max: u64,
) -> Result<u64> {
    let Some(v) = get(name) else {
        return Ok(default);
    };
    let t = v.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 1 << 10),
        Some((i, 'M' | 'm')) => (&t[..i], 1 << 20),
        _ => (t, 1),
    };
    match num.parse::<u64>().ok().and_then(|n| n.checked_mul(mult)) {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(PluginError::Invalid(format!(
            "{name}={v}: give a number from {min} to {max} (K and M suffixes allowed)"
        ))),
    }
}

/// Whether interface `name` passes an NCCL_SOCKET_IFNAME-style filter.
pub fn matches_filter(filter: &str, name: &str) -> bool {
    let (exclude, list) = match filter.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, filter),
    };
    let hit = list
        .split(',')
        .map(str::trim)
        .any(|p| match p.strip_prefix('=') {
            Some(exact) => name == exact,
            None => !p.is_empty() && name.starts_with(p),
        });
    hit != exclude
}

/// Chooses interfaces from `(name, address)` pairs (IPv4 only, first address of each).
pub fn choose(addrs: &[(String, IpAddr)], filter: Option<&str>) -> Vec<(String, IpAddr)> {
    let mut out: Vec<(String, IpAddr)> = Vec::new();
    for (name, ip) in addrs {
        if !ip.is_ipv4() || out.iter().any(|(n, _)| n == name) {
            continue;
        }
        let ok = match filter {
            Some(f) => matches_filter(f, name),
            None => !["lo", "docker", "virbr"]
                .iter()
                .any(|p| name.starts_with(p)),
        };
        if ok {
            out.push((name.clone(), *ip));
        }
    }
    if out.is_empty() && filter.is_none() {
        if let Some((n, ip)) = addrs.iter().find(|(n, ip)| n == "lo" && ip.is_ipv4()) {
            out.push((n.clone(), *ip));
        }
    }
    out
}

/// The devices of this machine (or network namespace).
pub fn discover(get: impl Fn(&str) -> Option<String>) -> Result<Vec<Device>> {
    let addrs = zcnet::os::interface_addresses().map_err(|e| PluginError::io("getifaddrs", &e))?;
    let filter = get("ZCNET_NCCL_IFACE").or_else(|| get("NCCL_SOCKET_IFNAME"));
    let chosen = choose(&addrs, filter.as_deref());
    if chosen.is_empty() {
        return Err(PluginError::Invalid(format!(
            "no usable interface (filter {:?}; interfaces with IPv4: {:?}): set ZCNET_NCCL_IFACE to one",
            filter,
            addrs.iter().filter(|(_, a)| a.is_ipv4()).map(|(n, _)| n.as_str()).collect::<Vec<_>>()
        )));
    }
    Ok(chosen
        .into_iter()
        .map(|(name, addr)| {
            let sys = format!("/sys/class/net/{name}");
            let speed = std::fs::read_to_string(format!("{sys}/speed"))
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok())
                .filter(|s| *s > 0)
                .unwrap_or(10_000);
            let pci_path = std::fs::canonicalize(format!("{sys}/device"))
                .ok()
                .filter(|p| p.to_string_lossy().contains("/pci"))
                .and_then(|p| CString::new(p.to_string_lossy().into_owned()).ok());
            Device {
                name: CString::new(name).unwrap_or_default(),
                addr,
                pci_path,
                speed_mbps: speed,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let v: Vec<(String, String)> = pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        move |k| v.iter().find(|(a, _)| a == k).map(|(_, b)| b.clone())
    }

    #[zcnet_testkit::test]
    fn knobs_have_defaults_suffixes_and_ranges() {
        assert_eq!(
            Knobs::from(env(&[])).expect("defaults"),
            Knobs {
                nsocks: 2,
                chunk: 512 << 10,
                tx: TxMode::Auto,
                rx: RxMode::Uring,
                connect_timeout: std::time::Duration::from_secs(30),
            }
        );
        let k = Knobs::from(env(&[
            ("ZCNET_NCCL_NSOCKS", "4"),
            ("ZCNET_NCCL_CHUNK", "1M"),
            ("ZCNET_NCCL_TX", "uring-zc"),
            ("ZCNET_NCCL_RX", "copy"),
        ]))
        .expect("set");
        assert_eq!((k.nsocks, k.chunk), (4, 1 << 20));
        assert_eq!((k.tx, k.rx), (TxMode::UringZc, RxMode::Copy));
        for (n, v) in [
            ("ZCNET_NCCL_NSOCKS", "0"),
            ("ZCNET_NCCL_NSOCKS", "17"),
            ("ZCNET_NCCL_CHUNK", "1K"),
            ("ZCNET_NCCL_CHUNK", "lots"),
            ("ZCNET_NCCL_TX", "zerocopy"),
            ("ZCNET_NCCL_RX", "zcrx"),
        ] {
            let e = Knobs::from(env(&[(n, v)])).expect_err(v).to_string();
            assert!(e.contains(n) && e.contains(v), "{e}");
        }
    }

    #[zcnet_testkit::test]
    fn socket_ifname_syntax() {
        assert!(matches_filter("eth", "eth0"));
        assert!(!matches_filter("eth", "ens3"));
        assert!(matches_filter("=eth0", "eth0"));
        assert!(!matches_filter("=eth0", "eth01"));
        assert!(!matches_filter("^docker,lo", "lo"));
        assert!(matches_filter("^docker,lo", "eth0"));
        assert!(matches_filter("ib,eth", "eth1"));
    }

    #[zcnet_testkit::test]
    fn default_choice_skips_loopback_unless_alone() {
        let v4 = |s: &str| s.parse::<IpAddr>().expect("ip");
        let both = vec![
            ("lo".to_string(), v4("127.0.0.1")),
            ("eth0".to_string(), v4("10.0.0.2")),
            ("eth0".to_string(), v4("10.0.0.3")),
            ("eth1".to_string(), v4("fe80::1")),
        ];
        assert_eq!(choose(&both, None), vec![("eth0".into(), v4("10.0.0.2"))]);
        assert_eq!(
            choose(&both[..1], None),
            vec![("lo".into(), v4("127.0.0.1"))]
        );
        assert_eq!(
            choose(&both, Some("lo")),
            vec![("lo".into(), v4("127.0.0.1"))]
        );
        assert!(choose(&both, Some("eth1")).is_empty(), "IPv6 only");
    }
}
