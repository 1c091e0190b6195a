//! The command line of `zcnet perf`: iperf3's flags, plus zcnet's data-path choices.
//!
//! [`PerfArgs`] is what the user typed (a clap `Args`, so `zcnet perf` can take it as a
//! subcommand's arguments); [`Settings::from_args`] checks it all before any socket is opened
//! and turns it into what the client and server run with.

use std::net::IpAddr;
use std::time::Duration;

use clap::Args;
use zcnet::{MemoryKind, RxConfig, RxMode, TxMode, Voice};

use super::error::PerfError;
use super::proto::{
    Protocol, TestParams, DEFAULT_TCP_LEN, DEFAULT_UDP_LEN, MAX_OMIT, MAX_STREAMS, MAX_TIME,
};
use super::tuning::{Lowat, SocketTuning};
use super::units;
use super::voice::PerfVoice;

/// The iperf3 port.
pub const DEFAULT_PORT: u16 = 5201;

/// iperf3's default UDP rate, 1 Mbit/s (`UDP_RATE`, src/iperf.h: 1024 * 1024).
pub const DEFAULT_UDP_RATE: u64 = 1024 * 1024;

/// The key zcnet adds to the parameter block for `--verify`: the pattern's seed. iperf3
/// servers ignore keys they do not know (`get_parameters`), so it is safe to send to them.
pub const VERIFY_KEY: &str = "zcnet_verify_seed";

/// `zcnet perf` options: iperf3's (same letters, same meaning) and zcnet's.
#[derive(Args, Debug, Clone, Default)]
#[command(disable_version_flag = true)]
pub struct PerfArgs {
    /// Run as a server: serve one test after another until stopped.
    #[arg(short = 's', long = "server", conflicts_with = "client")]
    pub server: bool,
    /// Run as a client, testing against the server at HOST (an IP address or a name).
    #[arg(short = 'c', long = "client", value_name = "HOST")]
    pub client: Option<String>,
    /// Server port to listen on / connect to.
    #[arg(short = 'p', long = "port", default_value_t = DEFAULT_PORT.into(), allow_negative_numbers = true)]
    pub port: i64,
    /// Seconds to transmit (default 10; 0 for no limit). Only one of -t, -n, -k.
    #[arg(
        short = 't',
        long = "time",
        value_name = "SECS",
        allow_negative_numbers = true
    )]
    pub time: Option<i64>,
    /// Bytes to transmit instead of -t (K, M, G, T suffixes are powers of 1024).
    #[arg(
        short = 'n',
        long = "bytes",
        value_name = "N[KMGT]",
        allow_hyphen_values = true
    )]
    pub bytes: Option<String>,
    /// Blocks (-l each) to transmit instead of -t.
    #[arg(
        short = 'k',
        long = "blockcount",
        value_name = "N[KMGT]",
        allow_hyphen_values = true
    )]
    pub blockcount: Option<String>,
    /// Bytes per write: default 128K for TCP, 1460 for UDP.
    #[arg(
        short = 'l',
        long = "length",
        value_name = "N[KMG]",
        allow_hyphen_values = true
    )]
    pub length: Option<String>,
    /// Streams per direction (default 1).
    #[arg(
        short = 'P',
        long = "parallel",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub parallel: Option<i64>,
    /// Reverse: the server sends, the client receives.
    #[arg(short = 'R', long = "reverse", conflicts_with = "bidir")]
    pub reverse: bool,
    /// Both send at once (-P streams each way).
    #[arg(long = "bidir")]
    pub bidir: bool,
    /// Seconds between interval reports; 0 for none.
    #[arg(
        short = 'i',
        long = "interval",
        default_value_t = 1.0,
        value_name = "SECS",
        allow_negative_numbers = true
    )]
    pub interval: f64,
    /// Output in JSON, with iperf3's structure plus a "zerocopy" section.
    #[arg(short = 'J', long = "json")]
    pub json: bool,
    /// Server: handle one test, then exit.
    #[arg(short = '1', long = "one-off")]
    pub one_off: bool,
    /// Bind to this local address (server: listen on it).
    #[arg(short = 'B', long = "bind", value_name = "ADDR")]
    pub bind: Option<String>,
    /// Client: data streams from this local port (stream k from port + k).
    #[arg(long = "cport", value_name = "PORT", allow_negative_numbers = true)]
    pub cport: Option<i64>,
    /// Seconds at the start to leave out of the results (default 0).
    #[arg(
        short = 'O',
        long = "omit",
        value_name = "SECS",
        allow_negative_numbers = true
    )]
    pub omit: Option<i64>,
    /// More detail: the test's settings, CPU use, the data path per stream.
    #[arg(short = 'V', long = "verbose")]
    pub verbose: bool,
    /// IPv4 only.
    #[arg(short = '4', long = "version4", conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// IPv6 only.
    #[arg(short = '6', long = "version6")]
    pub ipv6: bool,
    /// UDP instead of TCP.
    #[arg(short = 'u', long = "udp")]
    pub udp: bool,
    /// Target bitrate in bits/s per stream (K, M, G are powers of 1000); 0 for unlimited.
    /// Default: unlimited for TCP, 1M for UDP.
    #[arg(
        short = 'b',
        long = "bitrate",
        value_name = "N[KMG]",
        allow_hyphen_values = true
    )]
    pub bitrate: Option<String>,
    /// Send mechanism: copy, msg-zerocopy, uring, uring-zc, auto.
    #[arg(long = "tx", default_value = "auto", value_name = "MODE")]
    pub tx: String,
    /// Receive mechanism: copy, uring, zcrx, devmem, auto (zcrx and devmem need --iface).
    #[arg(long = "rx", default_value = "auto", value_name = "MODE")]
    pub rx: String,
    /// zcrx/devmem: the interface the data streams arrive on.
    #[arg(long = "iface", value_name = "IF")]
    pub iface: Option<String>,
    /// zcrx/devmem: the receive queue they are steered to.
    #[arg(long = "queue", value_name = "Q", allow_negative_numbers = true)]
    pub queue: Option<u32>,
    /// Send from huge pages (reserved ones, else transparent huge pages, as the region says);
    /// without it, from the library's choice (`auto`: transparent huge pages for
    /// msg-zerocopy, 4 KiB pages otherwise).
    #[arg(long = "hugepages")]
    pub hugepages: bool,
    /// UDP: send up to 64 KB per call, cut into datagrams by the kernel (UDP GSO).
    #[arg(long = "gso")]
    pub gso: bool,
    /// TCP senders: TCP_NOTSENT_LOWAT in bytes, `off`, or `auto` (128K when this side's
    /// sending streams are at least as many as its CPUs).
    #[arg(
        long = "notsent-lowat",
        default_value = "auto",
        value_name = "N[KM]|off|auto"
    )]
    pub notsent_lowat: String,
    /// TCP receivers: SO_RCVLOWAT in bytes, `off`, or `auto` (128K; at most 1 ms of `-b`).
    #[arg(
        long = "rcvlowat",
        default_value = "auto",
        value_name = "N[KM]|off|auto"
    )]
    pub rcvlowat: String,
    /// Client: send a seeded pattern and check it on receipt (both ends must be zcnet).
    #[arg(long = "verify")]
    pub verify: bool,
    /// The pattern's seed for --verify.
    #[arg(long = "seed", default_value_t = 1, allow_negative_numbers = true)]
    pub seed: u64,
    /// Server: seconds a client may take for each step outside the running test.
    #[arg(
        long = "step-timeout",
        default_value_t = 10.0,
        hide = true,
        allow_negative_numbers = true
    )]
    pub step_timeout: f64,
}

/// Client or server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// `-s`.
    Server,
    /// `-c HOST`.
    Client(String),
}

/// Which address family to use (`-4`, `-6`, or either).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Whatever the host resolves to; the server listens on both.
    Any,
    /// `-4`.
    V4,
    /// `-6`.
    V6,
}

/// How the data streams move their bytes.
#[derive(Debug, Clone)]
pub struct DataPath {
    /// `--tx`.
    pub tx: TxMode,
    /// `--rx` and its interface and queue.
    pub rx: RxConfig,
    /// Where send buffers live (`--hugepages`).
    pub memory: MemoryKind,
}

/// Everything `zcnet perf` runs with, checked.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Client or server.
    pub role: Role,
    /// `-p`.
    pub port: u16,
    /// The test a client asks for (unused by a server, which takes the client's).
    pub params: TestParams,
    /// `-i`: `None` for no interval reports.
    pub interval: Option<Duration>,
    /// `-J`.
    pub json: bool,
    /// `-1`.
    pub one_off: bool,
    /// `-B`.
    pub bind: Option<IpAddr>,
    /// `--cport`.
    pub cport: Option<u16>,
    /// `-V`.
    pub verbose: bool,
    /// `-4` / `-6`.
    pub family: Family,
    /// `--tx`, `--rx`, `--hugepages`.
    pub data: DataPath,
    /// `--verify`: the seed.
    pub verify: Option<u64>,
    /// `--gso`.
    pub gso: bool,
    /// `--notsent-lowat`, `--rcvlowat`.
    pub tuning: SocketTuning,
    /// Server: how long a client may take per step.
    pub step_timeout: Duration,
    /// The front end's voice: the library's errors, notes and fallbacks are said in its
    /// words (its errors with perf's `-l`: [`PerfVoice`]).
    pub voice: &'static (dyn Voice + Sync),
}

impl Settings {
    /// Checks the arguments; every error names the flag and what to give instead, the
    /// library's in `voice`'s words (the front end's: see [`PerfVoice`]).
    pub fn from_args(
        a: &PerfArgs,
        voice: &'static (dyn Voice + Sync),
    ) -> Result<Settings, PerfError> {
        let role = match (&a.client, a.server) {
            (Some(h), false) => Role::Client(h.clone()),
            (None, true) => Role::Server,
            _ => return Err(usage("say what to be: -s (server) or -c HOST (client)")),
        };
        only_where_they_apply(a, &role)?;
        // A server may listen on port 0 (the kernel picks one); a client must name the port.
        let port = port_arg("-p", a.port, u16::from(matches!(role, Role::Client(_))))?;
        let cport = a.cport.map(|p| port_arg("--cport", p, 1)).transpose()?;
        let params = params_from(a)?;
        if let Some(first) = cport {
            // Stream k connects from first + k: the last one must still be a port.
            let streams = params.parallel * if params.bidirectional { 2 } else { 1 };
            let last = u32::from(first) + streams - 1;
            if last > u32::from(u16::MAX) {
                return Err(usage(format!(
                    "--cport {first}: {streams} streams connect from ports {first} to {last}, past 65535: give --cport {} or lower",
                    u32::from(u16::MAX) + 1 - streams
                )));
            }
        }
        let family = match (a.ipv4, a.ipv6) {
            (true, _) => Family::V4,
            (_, true) => Family::V6,
            _ => Family::Any,
        };
        let bind = a.bind.as_deref().map(parse_bind).transpose()?;
        let interval = interval(a.interval)?;
        let step_timeout = (a.step_timeout.is_finite() && a.step_timeout > 0.0)
            .then(|| Duration::from_secs_f64(a.step_timeout))
            .ok_or_else(|| usage("--step-timeout: give a positive number of seconds"))?;
        let data = data_path(a)?;
        if let Role::Client(_) = role {
            memlock_check(&params, &data, voice)?;
        }
        Ok(Settings {
            params,
            data,
            verify: a.verify.then_some(a.seed),
            gso: a.gso,
            tuning: tuning(a)?,
            role,
            port,
            interval,
            json: a.json,
            one_off: a.one_off,
            bind,
            cport,
            verbose: a.verbose,
            family,
            step_timeout,
            voice,
        })
    }
}

/// A client that sends TCP with `--tx uring` or `uring-zc`: whether RLIMIT_MEMLOCK holds what
/// one stream locks (its io_uring ring, and for uring-zc its registered buffers), said before
/// connecting, as `zcnet send` says it (exit code 2). Each stream locks as much, so `-P N`
/// needs N times this, which is what is checked; other locked memory is found when the kernel
/// refuses.
fn memlock_check(
    p: &TestParams,
    data: &DataPath,
    voice: &(dyn Voice + Sync),
) -> Result<(), PerfError> {
    let sends = !p.reverse || p.bidirectional;
    if !sends || p.protocol != Protocol::Tcp || !matches!(data.tx, TxMode::Uring | TxMode::UringZc)
    {
        return Ok(());
    }
    let mut cfg = zcnet::TxConfig::new(data.tx);
    cfg.buf_size = p.len as usize;
    cfg.inflight = super::tcp::TX_INFLIGHT;
    let Ok(region) = zcnet::Region::for_sender(data.memory, &cfg) else {
        // Memory that cannot be had is the sender's own error to give, with its fix.
        return Ok(());
    };
    match zcnet::tx::memlock_refusal_for(&region, &cfg, p.parallel.max(1) as u64) {
        None => Ok(()),
        Some(e) => Err(usage(e.render(&PerfVoice::new(voice)))),
    }
}

/// `-i`: `None` for 0 (no interval reports), else 0.1 to 60 seconds.
fn interval(i: f64) -> Result<Option<Duration>, PerfError> {
    if !(i.is_finite() && i >= 0.0) {
        return Err(usage(format!(
            "-i {i}: give seconds, 0 for no interval reports"
        )));
    }
    if i == 0.0 {
        return Ok(None);
    }
    if !(0.1..=60.0).contains(&i) {
        return Err(usage(format!(
            "-i {i}: the interval must be between 0.1 and 60 seconds (or 0 for none)"
        )));
    }
    Ok(Some(Duration::from_secs_f64(i)))
}

fn tuning(a: &PerfArgs) -> Result<SocketTuning, PerfError> {
    let t = SocketTuning {
        notsent: lowat("--notsent-lowat", &a.notsent_lowat)?,
        rcvlowat: lowat("--rcvlowat", &a.rcvlowat)?,
    };
    let counted = a.bytes.is_some() || a.blockcount.is_some();
    if let (Lowat::Bytes(_), true, true) = (t.rcvlowat, counted, a.reverse || a.bidir) {
        return Err(usage(format!(
            "--rcvlowat {}: a client that receives with -n or -k ends the test on the last byte, which the mark could hold back forever: drop --rcvlowat (auto leaves it off here)",
            a.rcvlowat
        )));
    }
    Ok(t)
}

fn lowat(flag: &str, s: &str) -> Result<Lowat, PerfError> {
    Lowat::parse(s).ok_or_else(|| {
        usage(format!(
            "{flag} {s}: give bytes (with an optional K or M, below 4G), off, or auto"
        ))
    })
}

fn usage(msg: impl Into<String>) -> PerfError {
    PerfError::Usage(msg.into())
}

fn parse_bind(s: &str) -> Result<IpAddr, PerfError> {
    s.parse().map_err(|_| {
        usage(format!(
            "-B {s}: give a local IP address (e.g. 127.0.0.1 or ::1), not a name"
        ))
    })
}

/// The parameter block a client sends, from iperf3's flags (as `iperf_parse_arguments` makes
/// it: `-n`/`-k` without `-t` mean no time limit; `-b` defaults to 1 Mbit/s for UDP).
fn params_from(a: &PerfArgs) -> Result<TestParams, PerfError> {
    let protocol = if a.udp { Protocol::Udp } else { Protocol::Tcp };
    if a.udp && a.verify {
        return Err(usage(
            "--verify checks TCP streams only (UDP datagrams may be lost or reordered): drop -u or --verify",
        ));
    }
    let ends = [
        a.time.map(|_| "-t"),
        a.bytes.as_ref().map(|_| "-n"),
        a.blockcount.as_ref().map(|_| "-k"),
    ];
    if let [x, y, ..] = ends.iter().flatten().collect::<Vec<_>>()[..] {
        return Err(usage(format!(
            "{x} and {y}: only one test end condition (-t, -n, -k) may be given: drop one"
        )));
    }
    let num = a.bytes.as_deref().map(|s| count("-n", s)).transpose()?;
    let blocks = a
        .blockcount
        .as_deref()
        .map(|s| count("-k", s))
        .transpose()?;
    let time = a
        .time
        .map(|t| whole("-t", t, MAX_TIME, "seconds (0 for no limit)"))
        .transpose()?;
    let omit = whole("-O", a.omit.unwrap_or(0), MAX_OMIT, "seconds")?;
    let parallel = match a.parallel {
        Some(p) if !(1..=i64::from(MAX_STREAMS)).contains(&p) => {
            return Err(usage(format!(
                "-P {p}: give 1 to {MAX_STREAMS} streams per direction"
            )))
        }
        Some(p) => p as u32,
        None => 1,
    };
    let default_len = if a.udp {
        DEFAULT_UDP_LEN
    } else {
        DEFAULT_TCP_LEN
    };
    let len = match a.length.as_deref() {
        // iperf3's limits (a UDP datagram's payload, a TCP block), said as the protocol's.
        Some(s) => {
            use super::proto::{MAX_TCP_LEN, MAX_UDP_LEN, MIN_UDP_LEN};
            let (lo, hi, what) = if a.udp {
                (MIN_UDP_LEN, MAX_UDP_LEN, "a datagram size")
            } else {
                (1, MAX_TCP_LEN, "a block size")
            };
            u32::try_from(size("-l", s)?)
                .ok()
                .filter(|l| (lo..=hi).contains(l))
                .ok_or_else(|| usage(format!("-l {s}: give {what} from {lo} to {hi} B")))?
        }
        None => default_len,
    };
    let bandwidth = match a.bitrate.as_deref() {
        Some(s) => units::parse_rate(s).ok_or_else(|| {
            usage(format!(
                "-b {s}: give bits per second, e.g. 100M or 1G (0 for unlimited)"
            ))
        })?,
        None if a.udp => DEFAULT_UDP_RATE,
        None => 0,
    };
    let time = match (time, num.is_some() || blocks.is_some()) {
        (Some(t), _) => t,
        (None, true) => 0,
        (None, false) => super::proto::DEFAULT_TIME,
    };
    let mut p = TestParams {
        protocol,
        time,
        num: num.unwrap_or(0),
        blockcount: blocks.unwrap_or(0),
        len,
        parallel,
        reverse: a.reverse,
        bidirectional: a.bidir,
        bandwidth,
        omit,
        client_version: Some(format!("zcnet-perf {}", env!("CARGO_PKG_VERSION"))),
        ..TestParams::default()
    };
    if a.verify {
        p.unknown.insert(VERIFY_KEY.into(), a.seed.into());
    }
    p.validate().map_err(|e| usage(format!("{e}")))?;
    Ok(p)
}

/// `-n`, `-k`: a size above 0 (0 would never end the test: iperf3 takes it as no -n at all).
fn count(flag: &str, s: &str) -> Result<u64, PerfError> {
    match size(flag, s)? {
        0 => Err(usage(format!(
            "{flag} {s}: give more than 0 (or drop {flag} for a {}-second test)",
            super::proto::DEFAULT_TIME
        ))),
        n => Ok(n),
    }
}

/// A whole number from 0 to `max` for `flag`, `what` saying what it counts.
fn whole(flag: &str, v: i64, max: u32, what: &str) -> Result<u32, PerfError> {
    u32::try_from(v)
        .ok()
        .filter(|&v| v <= max)
        .ok_or_else(|| usage(format!("{flag} {v}: give 0 to {max} {what}")))
}

/// `-p`, `--cport`: a port from `min` to 65535.
fn port_arg(flag: &str, v: i64, min: u16) -> Result<u16, PerfError> {
    u16::try_from(v)
        .ok()
        .filter(|&p| p >= min)
        .ok_or_else(|| usage(format!("{flag} {v}: give a port from {min} to 65535")))
}

/// iperf3's "some option you are trying to set is client only" (and server only), naming the
/// flag: a server takes the test's settings from its client, so these would do nothing there.
fn only_where_they_apply(a: &PerfArgs, role: &Role) -> Result<(), PerfError> {
    if *role == Role::Server {
        let client_only = [
            (a.time.is_some(), "-t"),
            (a.bytes.is_some(), "-n"),
            (a.blockcount.is_some(), "-k"),
            (a.length.is_some(), "-l"),
            (a.parallel.is_some(), "-P"),
            (a.reverse, "-R"),
            (a.bidir, "--bidir"),
            (a.omit.is_some(), "-O"),
            (a.udp, "-u"),
            (a.bitrate.is_some(), "-b"),
            (a.cport.is_some(), "--cport"),
            (a.verify, "--verify"),
        ];
        if let Some((_, flag)) = client_only.iter().find(|(given, _)| *given) {
            return Err(usage(format!(
                "{flag} is a client option: a server takes the test's settings from its client; drop {flag} here (give it to `zcnet perf -c`)"
            )));
        }
    } else if a.one_off {
        return Err(usage(
            "-1 is a server option (serve one test, then exit): drop it, or use -s",
        ));
    }
    Ok(())
}

fn size(flag: &str, s: &str) -> Result<u64, PerfError> {
    units::parse_size(s).ok_or_else(|| {
        usage(format!(
            "{flag} {s}: give a number with an optional K, M, G or T suffix (powers of 1024)"
        ))
    })
}

fn data_path(a: &PerfArgs) -> Result<DataPath, PerfError> {
    let tx = TxMode::parse(&a.tx).map_err(|e| usage(e.to_string()))?;
    // devmem transmit sends from a dma-buf (GPU memory, a udmabuf); perf's buffers are host
    // memory, so the library would refuse it once connected: said here, before.
    if tx == TxMode::Devmem {
        return Err(usage(
            "--tx devmem sends from a dma-buf (GPU memory), and zcnet perf sends from host memory: use --tx msg-zerocopy or uring-zc here, or 'zcnet send --tx devmem --mem cuda' for devmem",
        ));
    }
    let mode = RxMode::parse(&a.rx).map_err(|e| usage(e.to_string()))?;
    if mode.is_device() && a.verify {
        return Err(usage(
            "--verify reads the payload, but --rx devmem puts it in device memory: drop --verify or use --rx auto",
        ));
    }
    // Named by its flag here: the library would refuse its unset field (RxConfig::iface).
    if matches!(mode, RxMode::Zcrx | RxMode::Devmem) && a.iface.is_none() {
        return Err(usage(format!(
            "--rx {mode} needs --iface IF: the NIC whose queue the flows are steered to (see 'zcnet nic setup'); or use --rx auto"
        )));
    }
    let mut rx = RxConfig::new(mode);
    rx.cancel = crate::interrupt::token();
    rx.iface = a.iface.clone();
    rx.queue = a.queue;
    let memory = if a.hugepages {
        MemoryKind::Huge
    } else {
        MemoryKind::Auto
    };
    Ok(DataPath { tx, rx, memory })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cmd {
        #[command(flatten)]
        args: PerfArgs,
    }

    fn settings(line: &[&str]) -> Result<Settings, PerfError> {
        let mut argv = vec!["zcnet-perf"];
        argv.extend_from_slice(line);
        let cmd = Cmd::try_parse_from(argv).map_err(|e| PerfError::Usage(e.to_string()))?;
        Settings::from_args(&cmd.args, &zcnet::text::Library)
    }

    #[zcnet_testkit::test]
    fn iperf3_letters_parse() {
        let s = settings(&[
            "-c",
            "127.0.0.1",
            "-p",
            "6000",
            "-t",
            "3",
            "-P",
            "4",
            "-R",
            "-l",
            "64K",
            "-i",
            "0.5",
            "-J",
            "-O",
            "1",
            "-V",
            "-4",
            "--cport",
            "7000",
        ])
        .unwrap();
        assert_eq!(s.role, Role::Client("127.0.0.1".into()));
        assert_eq!(s.port, 6000);
        assert_eq!(
            (s.params.time, s.params.parallel, s.params.reverse),
            (3, 4, true)
        );
        assert_eq!((s.params.len, s.params.omit), (65536, 1));
        assert_eq!(s.interval, Some(Duration::from_millis(500)));
        assert!(s.json && s.verbose);
        assert_eq!((s.family, s.cport), (Family::V4, Some(7000)));
        let s = settings(&["-s", "-1", "-B", "::1"]).unwrap();
        assert_eq!(s.role, Role::Server);
        assert!(s.one_off);
        assert_eq!(s.bind, Some("::1".parse().unwrap()));
    }

    #[zcnet_testkit::test]
    fn bytes_or_blocks_mean_no_time_limit() {
        let s = settings(&["-c", "::1", "-n", "1M"]).unwrap();
        assert_eq!((s.params.time, s.params.num), (0, 1 << 20));
        let s = settings(&["-c", "::1", "-k", "10"]).unwrap();
        assert_eq!((s.params.time, s.params.blockcount), (0, 10));
        let s = settings(&["-c", "::1"]).unwrap();
        assert_eq!((s.params.time, s.params.len), (10, 128 * 1024));
    }

    #[zcnet_testkit::test]
    fn udp_defaults_are_iperf3s() {
        let s = settings(&["-c", "::1", "-u"]).unwrap();
        assert_eq!(s.params.protocol, Protocol::Udp);
        assert_eq!((s.params.len, s.params.bandwidth), (1460, 1024 * 1024));
        let s = settings(&["-c", "::1", "-u", "-b", "0"]).unwrap();
        assert_eq!(s.params.bandwidth, 0);
    }

    #[zcnet_testkit::test]
    fn verify_travels_in_the_parameter_block() {
        let s = settings(&["-c", "::1", "--verify", "--seed", "7"]).unwrap();
        assert_eq!(s.verify, Some(7));
        assert_eq!(s.params.to_json()[VERIFY_KEY], 7);
    }

    #[zcnet_testkit::test]
    fn low_water_marks_default_to_auto() {
        let s = settings(&["-c", "::1"]).unwrap();
        assert_eq!(s.tuning, SocketTuning::default());
        let s = settings(&["-c", "::1", "--rcvlowat", "off", "--notsent-lowat", "16K"]).unwrap();
        assert_eq!(s.tuning.rcvlowat, Lowat::Off);
        assert_eq!(s.tuning.notsent, Lowat::Bytes(16384));
    }

    #[zcnet_testkit::test]
    fn bad_input_is_refused_with_the_flag_named() {
        for (line, flag) in [
            (&["-c", "::1", "-l", "2M"][..], "-l 2M"),
            (&["-c", "::1", "-n", "lots"][..], "-n"),
            (&["-c", "::1", "-b", "fast"][..], "-b"),
            (&["-c", "::1", "-i", "100"][..], "-i"),
            (&["-c", "::1", "--tx", "telepathy"][..], "telepathy"),
            (&["-c", "::1", "--rcvlowat", "lots"][..], "--rcvlowat"),
            (
                &["-c", "::1", "--notsent-lowat", "5G"][..],
                "--notsent-lowat",
            ),
            (
                &["-c", "::1", "-R", "-n", "1M", "--rcvlowat", "64K"][..],
                "--rcvlowat",
            ),
            (&["-s", "-B", "localhost"][..], "-B"),
            // A count of 0 would never end; negative numbers reach the checks.
            (&["-c", "::1", "-n", "0"][..], "-n 0"),
            (&["-c", "::1", "-k", "0"][..], "-k 0"),
            (&["-c", "::1", "-n", "-5"][..], "-n -5"),
            (&["-c", "::1", "-P", "-1"][..], "-P -1"),
            (&["-c", "::1", "-P", "0"][..], "-P 0"),
            (&["-c", "::1", "-t", "-1"][..], "-t -1"),
            (&["-c", "::1", "-O", "-1"][..], "-O -1"),
            (&["-c", "::1", "-l", "-1"][..], "-l -1"),
            // -l by the protocol's limits, said as such.
            (
                &["-c", "::1", "-l", "2M"][..],
                "a block size from 1 to 1048576 B",
            ),
            (
                &["-c", "::1", "-u", "-l", "5G"][..],
                "a datagram size from 16 to 65507 B",
            ),
            (
                &["-c", "::1", "-u", "-l", "8"][..],
                "-l 8: give a datagram size",
            ),
            // A client must name the server's port; a server may take port 0.
            (&["-c", "::1", "-p", "0"][..], "-p 0: give a port from 1"),
            (&["-c", "::1", "-b", "-1"][..], "-b -1"),
            (&["-c", "::1", "-i", "-1"][..], "-i -1"),
            (&["-c", "::1", "-p", "-1"][..], "-p -1"),
            (&["-c", "::1", "--cport", "-1"][..], "--cport -1"),
            // Stream k connects from --cport + k: no wrapping past 65535.
            (
                &["-c", "::1", "--cport", "65534", "-P", "4"][..],
                "--cport 65532",
            ),
            (
                &["-c", "::1", "--cport", "65535", "-P", "1", "--bidir"][..],
                "--cport 65534",
            ),
            // One end condition, as iperf3.
            (&["-c", "::1", "-n", "1M", "-t", "5"][..], "-t and -n"),
            (&["-c", "::1", "-n", "1M", "-k", "5"][..], "-n and -k"),
            // Client options on a server, a server option on a client.
            (&["-s", "-t", "5"][..], "-t is a client option"),
            (&["-s", "-P", "2"][..], "-P is a client option"),
            (&["-s", "-u"][..], "-u is a client option"),
            (&["-s", "-R"][..], "-R is a client option"),
            (&["-s", "-n", "1M"][..], "-n is a client option"),
            (&["-s", "--cport", "5000"][..], "--cport is a client option"),
            (&["-s", "--verify"][..], "--verify is a client option"),
            (&["-c", "::1", "-1"][..], "-1 is a server option"),
            (&[][..], "-s"),
        ] {
            let e = settings(line).unwrap_err().to_string();
            assert!(e.contains(flag), "{line:?}: {e}");
        }
        assert!(settings(&["-c", "::1", "-R", "--bidir"]).is_err());
        // The edges still pass.
        let s = settings(&["-c", "::1", "--cport", "65532", "-P", "4"]).unwrap();
        assert_eq!(s.cport, Some(65532));
        assert_eq!(settings(&["-c", "::1", "-t", "0"]).unwrap().params.time, 0);
        assert!(settings(&["-s", "-1", "-p", "0", "-J", "-i", "0.5"]).is_ok());
        assert!(settings(&["-s", "-c", "::1"]).is_err());
    }
}
