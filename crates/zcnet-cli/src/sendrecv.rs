//! `zcnet send` and `zcnet recv`: netcat-style, over the same backends as the benchmark.

use crate::units::{
    bytes_arg, count_arg, seconds_arg, size_arg, total_arg, window_arg, MAX_BUFFER, MAX_INFLIGHT,
};
use clap::Args;
use serde::Serialize;
use std::fs::File;
use std::io::{IsTerminal, Read, Write};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};
use zcnet::{
    net, Error, MemoryKind, Pattern, Receiver, Region, RxConfig, RxMode, Sender, Socket, TxBuf,
    TxConfig,
};
use zcnet_tools::sendloop::{Fill, SendLoop, Until};

/// Options of `zcnet send`.
#[derive(Args, Debug)]
pub struct SendArgs {
    /// Where to send: HOST:PORT.
    pub addr: String,
    /// Mechanism: copy, msg-zerocopy, uring, uring-zc, auto, devmem (devmem TCP transmit from
    /// a dma-buf: with --mem cuda the GPU memory's export; needs a NIC with netmem TX), af-xdp
    /// (with --udp and --iface: each datagram an Ethernet frame from an AF_XDP socket; its copy
    /// mode, all veth/lo allow, is not zero copy).
    #[arg(long, default_value = "auto")]
    pub tx: String,
    /// UDP datagrams instead of a TCP stream (sizes above 1472 B use UDP GSO).
    #[arg(long)]
    pub udp: bool,
    /// --tx af-xdp: the interface the frames leave from (the kernel's route to HOST must use it).
    #[arg(long)]
    pub iface: Option<String>,
    /// --tx af-xdp: the interface's queue to send on (default 0).
    #[arg(long, allow_negative_numbers = true)]
    pub queue: Option<u32>,
    /// Bytes per send (at most 64M; with --inflight, at most 1G in all); with --udp at most
    /// 65507, and 64K is sent as 64000 B (as `bench tx` does).
    #[arg(long, default_value = "64K", allow_hyphen_values = true)]
    pub size: String,
    /// Sends in flight: at least this many (1 to 4096).
    #[arg(long, default_value_t = 8, allow_negative_numbers = true)]
    pub inflight: usize,
    /// Bytes in flight: smaller sends get more buffers, so that as many bytes keep moving
    /// (zero copy holds each buffer until its ACK); 0: exactly --inflight buffers.
    #[arg(long, default_value = "512K", allow_hyphen_values = true)]
    pub window: String,
    /// Send the seeded pattern (the receiver checks it with --verify) instead of stdin.
    #[arg(long)]
    pub verify: bool,
    /// Pattern seed.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub seed: u64,
    /// Stop after this many bytes (pattern mode; default 1G unless --duration).
    #[arg(long, allow_hyphen_values = true)]
    pub bytes: Option<String>,
    /// Stop after this many seconds (pattern mode).
    #[arg(long, allow_negative_numbers = true)]
    pub duration: Option<f64>,
    /// Buffer memory: host (alias anon), hugepage (alias huge), udmabuf (host memory that is
    /// also a dma-buf, for --tx devmem; needs /dev/udmabuf, CONFIG_UDMABUF), or cuda[:N] (GPU
    /// memory N: sent by devmem TX where the NIC can, else staged through pinned host memory).
    #[arg(long, default_value = "host")]
    pub mem: String,
    /// With --mem cuda: the loop people write first instead (a synchronous copy from the GPU
    /// into pageable memory, then send()), to compare with.
    #[arg(long)]
    pub naive: bool,
    /// Print the statistics as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Options of `zcnet recv`.
#[derive(Args, Debug)]
pub struct RecvArgs {
    /// Address to listen on: HOST:PORT.
    #[arg(long, default_value = "0.0.0.0:5201")]
    pub listen: String,
    /// Receive mechanism: copy, uring, zcrx, devmem, auto (auto says what it chose and why);
    /// with --udp: copy, af-xdp (an XDP program redirects the --listen port to an AF_XDP
    /// socket; its copy mode is not zero copy), auto (copy).
    #[arg(long, default_value = "auto")]
    pub rx: String,
    /// Receive UDP datagrams instead of one TCP stream (until --bytes, --idle or Ctrl-C).
    #[arg(long)]
    pub udp: bool,
    /// --udp: stop once this many bytes have arrived (fewer by --idle: exit 1). TCP: the
    /// stream must carry exactly this many bytes; one cut short (a peer reset, a sender that
    /// stopped early) or longer is exit 1, with --verify or not.
    #[arg(long, allow_hyphen_values = true)]
    pub bytes: Option<String>,
    /// --udp: stop once nothing has arrived for this many seconds after the first datagram
    /// (default 2).
    #[arg(long, allow_negative_numbers = true)]
    pub idle: Option<f64>,
    /// zcrx/devmem/af-xdp: the interface the data arrives on (for zcrx/devmem steer it to
    /// --queue first, see `zcnet nic setup`); auto tries zcrx only with it.
    #[arg(long)]
    pub iface: Option<String>,
    /// zcrx/devmem: the receive queue (default: the interface's last); af-xdp: the queue the
    /// socket binds to (default 0).
    #[arg(long, allow_negative_numbers = true)]
    pub queue: Option<u32>,
    /// copy/uring: bytes per receive buffer.
    #[arg(long, default_value = "16K", allow_hyphen_values = true)]
    pub buf_size: String,
    /// copy/uring: number of receive buffers.
    #[arg(long, default_value_t = 64, allow_negative_numbers = true)]
    pub buffers: usize,
    /// zcrx: receive without a network device (Linux 7.1+, ZCRX_REG_NODEV): any TCP
    /// connection, loopback included, but the kernel copies every byte into the area (counted
    /// as copied). Only with --rx zcrx; no --iface or --queue.
    #[arg(long)]
    pub no_device: bool,
    /// zcrx with a device: bytes per receive buffer (rx_buf_len), a power of two from a page
    /// to 2M; larger than a page needs a kernel whose zcrx query lists rx-buf-len (see
    /// 'zcnet probe'), a driver that takes it, and reserved 2 MiB huge pages for the area.
    /// Default: the kernel's (a page).
    #[arg(long, allow_hyphen_values = true)]
    pub rx_buf_len: Option<String>,
    /// zcrx: bytes of registered receive area; devmem: size of the udmabuf made when no
    /// dma-buf is given.
    #[arg(long, default_value = "64M", allow_hyphen_values = true)]
    pub area: String,
    /// Check the stream against the seeded pattern; exit 1 at the first wrong byte.
    #[arg(long)]
    pub verify: bool,
    /// Pattern seed.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub seed: u64,
    /// Throw the data away instead of writing it to stdout.
    #[arg(long)]
    pub discard: bool,
    /// copy/uring: SO_RCVLOWAT, bytes queued before the receiver is woken: N, off, or auto
    /// (128K when the data is not written to stdout, off when it is, so a pipe gets it as it
    /// comes).
    #[arg(
        long,
        default_value = "auto",
        value_name = "N|off|auto",
        allow_hyphen_values = true
    )]
    pub rcvlowat: String,
    /// Where the data lands: host, udmabuf (with --rx zcrx or devmem: the --area as a dma-buf
    /// of host memory; needs /dev/udmabuf, CONFIG_UDMABUF), or cuda[:N] (GPU memory N, a ring
    /// of --area bytes: devmem TCP where the NIC can, else staged through pinned host memory;
    /// --verify copies back).
    #[arg(long, default_value = "host")]
    pub mem: String,
    /// With --mem cuda: the loop people write first instead (recv() into pageable memory,
    /// then a synchronous copy to the GPU), to compare with.
    #[arg(long)]
    pub naive: bool,
    /// Print the statistics as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct SendJson<'a> {
    tx: &'a str,
    proto: &'a str,
    bytes: u64,
    sends: u64,
    seconds: f64,
    mb_per_s: f64,
    notifications: u64,
    zerocopy_bytes: u64,
    copied_bytes: u64,
    cpu_seconds: f64,
    switches: Vec<String>,
}

/// `--bytes` and `--duration`, checked (exit code 2 naming the flag).
pub(crate) fn send_amount(a: &SendArgs) -> Result<(Option<u64>, Option<Duration>), Error> {
    let bytes = a
        .bytes
        .as_deref()
        .map(|b| bytes_arg("--bytes", b))
        .transpose()?;
    let duration = a
        .duration
        .map(|d| seconds_arg("--duration", d))
        .transpose()?;
    Ok((bytes, duration))
}

pub fn send(a: &SendArgs) -> Result<(), Error> {
    if a.tx == crate::udp_cmd::AF_XDP {
        return crate::udp_cmd::send_af_xdp(a);
    }
    // Every argument is checked before anything is connected or allocated (exit code 2).
    let mode = crate::udp_cmd::tx_mode(&a.tx)?;
    crate::udp_cmd::check_send_flags(a)?;
    let addr = net::parse_addr(&a.addr)?;
    let mut size = size_arg("--size", &a.size, MAX_BUFFER)?;
    if a.udp {
        // 64K (the default) does not fit a datagram: sent as 64,000 B, bench tx's rule on its
        // UDP path.
        size = zcnet_tools::bench::effective_size(zcnet_tools::bench::PathKind::Sink, size);
    }
    let inflight = count_arg("--inflight", a.inflight, MAX_INFLIGHT)?;
    total_arg(("--size", size), ("--inflight", inflight))?;
    let window = window_arg(&a.window)?;
    let (bytes, duration) = send_amount(a)?;
    let memory = parse_mem(&a.mem)?;
    if memory.is_device() {
        crate::gpu_cmd::check_send(a)?;
    }
    if a.udp && size > zcnet_tools::bench::UDP_MAX_PAYLOAD {
        return Err(Error::invalid_input(format!(
            "--size {} ({size} B) is larger than one UDP datagram can carry ({} B over IPv4): use a smaller --size",
            a.size,
            zcnet_tools::bench::UDP_MAX_PAYLOAD
        )));
    }
    let (limit, deadline) = run_limits(bytes, duration, a.verify);
    let mut cfg = TxConfig::new(mode);
    cfg.inflight = inflight;
    cfg.window = window;
    cfg.buf_size = size;
    if memory.is_device() {
        return crate::gpu_cmd::send(a, addr, memory, &cfg, limit, deadline);
    }
    // The region, and whether RLIMIT_MEMLOCK can hold what the sender will lock (its ring and
    // the registered region), before connecting: a limit too small is said before any peer
    // sees a connection (exit code 2, the message the sender's own refusal would have).
    let region = Region::new(memory, zcnet::tx::region_len(&cfg))?;
    if let Some(e) = zcnet::tx::memlock_refusal(&region, &cfg) {
        return Err(Error::invalid_input(e.to_string()));
    }
    let sock: Socket = if a.udp {
        let gso = (size > usize::from(net::GSO_SEGMENT_1500)).then_some(net::GSO_SEGMENT_1500);
        net::connect_udp(addr, gso)?.into()
    } else {
        net::connect_tcp(addr)?.into()
    };
    let mut tx = Sender::new(sock, region, &cfg)?;
    if let Some(n) = tx.note() {
        zcnet_tools::eoutln!("zcnet: note: {}", zcnet_tools::cli_text::words(n));
    }
    // What goes into each send. Only a data source writes the buffers: stdin (netcat-style),
    // or with --verify the seeded pattern at its stream offset, for the receiver to check.
    // --bytes/--duration without --verify send the buffers as they are (zero-filled, never
    // written), as `bench tx` does: writing a payload per send would cost more than a
    // zero-copy send of it (a fill runs at a few GB/s, a zero-copy send to the sink at tens).
    // The deadline is read once per buffers' worth of sends (about once per wait for the
    // kernel), as `bench tx` reads it, not once per send.
    let mut until = Until::new(size, limit, deadline, tx.buffers());
    SendLoop {
        amount: |offset| until.next(offset),
        fill: Source::for_args(a)?,
        pace: None,
        cancelled: || false,
        progress: |_| {},
    }
    .run(&mut tx)?;
    let st = tx.finish()?;
    if a.json {
        let doc = SendJson {
            tx: mode.name(),
            proto: if a.udp { "udp" } else { "tcp" },
            bytes: st.bytes,
            sends: st.sends,
            seconds: st.seconds,
            mb_per_s: st.mb_per_s(),
            notifications: st.notifications,
            zerocopy_bytes: st.zerocopy_bytes,
            copied_bytes: st.copied_bytes,
            cpu_seconds: st.cpu_seconds,
            switches: st.switches.iter().map(|s| s.to_string()).collect(),
        };
        print_json(&doc)?;
    } else {
        let zc = st
            .zerocopy_fraction()
            .map_or("n/a".into(), |f| format!("{:.1}%", f * 100.0));
        zcnet_tools::eoutln!(
            "zcnet send: {} B in {:.2} s ({:.0} MB/s) with {}: zero-copy {zc} ({} B zero-copy, {} B copied, {} notifications), CPU {:.3} s",
            st.bytes,
            st.seconds,
            st.mb_per_s(),
            mode,
            st.zerocopy_bytes,
            st.copied_bytes,
            st.notifications,
            st.cpu_seconds
        );
        for s in &st.switches {
            zcnet_tools::eoutln!("zcnet send: auto {s}");
        }
    }
    Ok(())
}

/// The byte limit and the deadline of a run from `--bytes` and `--duration` (`--verify` alone
/// sends 1 GiB; neither: stdin to its end).
pub(crate) fn run_limits(
    bytes: Option<u64>,
    duration: Option<Duration>,
    verify: bool,
) -> (Option<u64>, Option<Instant>) {
    let limit = match (bytes, duration) {
        (Some(b), _) => Some(b),
        (None, Some(_)) => None,
        (None, None) if verify => Some(1 << 30),
        (None, None) => None,
    };
    (limit, duration.map(|d| Instant::now() + d))
}

/// Where `zcnet send` takes each send's bytes from.
pub(crate) enum Source {
    /// Standard input, netcat-style.
    Stdin(File),
    /// The seeded pattern, written at each send's stream offset (`--verify`).
    Pattern(Pattern),
    /// Nothing: the buffers go as they are (zero-filled; `--bytes`/`--duration` alone).
    Zeros,
}

impl Source {
    /// What `send`'s flags ask for: the pattern with `--verify`, stdin without `--bytes` or
    /// `--duration`, else nothing written.
    pub(crate) fn for_args(a: &SendArgs) -> Result<Source, Error> {
        Ok(if a.verify {
            Source::Pattern(Pattern::new(a.seed))
        } else if a.duration.is_none() && a.bytes.is_none() {
            Source::Stdin(stdin_file()?)
        } else {
            Source::Zeros
        })
    }

    /// Writes the payload at stream `offset` into `payload`; returns its bytes (fewer at the
    /// end of stdin, 0 there).
    pub(crate) fn fill_slice(&mut self, offset: u64, payload: &mut [u8]) -> Result<usize, Error> {
        match self {
            Source::Zeros => Ok(payload.len()),
            Source::Pattern(p) => {
                p.fill(offset, payload);
                Ok(payload.len())
            }
            Source::Stdin(f) => read_full(f, payload),
        }
    }
}

/// `send`'s buffers: see [`Source`]; with nothing to write, a buffer goes as it is.
impl Fill for Source {
    #[inline]
    fn fill(&mut self, buf: &mut TxBuf, offset: u64, want: usize) -> Result<usize, Error> {
        if let Source::Zeros = self {
            return Ok(want);
        }
        let bytes = buf.bytes_mut().ok_or(Error::NotCpuAccessible)?;
        self.fill_slice(offset, &mut bytes[..want])
    }
}

/// Listens on `addr` and says where on stderr (the port, when 0 was asked for).
pub fn listen_announced(addr: std::net::SocketAddr) -> Result<std::net::TcpListener, Error> {
    let listener = net::listen_tcp(addr)?;
    let at = listener
        .local_addr()
        .map_err(|e| Error::io("local_addr", e))?;
    zcnet_tools::eoutln!("zcnet recv: listening on {at}");
    Ok(listener)
}

/// Prints `doc` as one line of JSON on stdout (the `--json` output of send and recv).
pub fn print_json(doc: &impl Serialize) -> Result<(), Error> {
    let line = serde_json::to_string(doc)
        .map_err(|e| Error::io("writing JSON", std::io::Error::other(e)))?;
    zcnet_tools::outln!("{line}");
    Ok(())
}

/// `--rx zcrx` and `--rx devmem` receive on one NIC queue, so they need `--iface`: refused
/// here as a usage error naming the flag, before the library would refuse its unset field
/// (`RxConfig::iface`). `--naive` receives with `recv()` and needs none.
pub fn check_rx_iface(mode: RxMode, iface: Option<&str>, naive: bool) -> Result<(), Error> {
    if matches!(mode, RxMode::Zcrx | RxMode::Devmem) && iface.is_none() && !naive {
        return Err(Error::invalid_input(format!(
            "--rx {mode} needs --iface IFACE: the NIC whose queue the flows are steered to (see 'zcnet nic setup'); or use --rx auto"
        )));
    }
    Ok(())
}

/// `recv --no-device`: only with `--rx zcrx` (auto never takes it: it copies), without an
/// interface, a queue, device memory or the naive loop (exit code 2).
fn check_no_device(a: &RecvArgs, mode: RxMode) -> Result<(), Error> {
    if !a.no_device {
        return Ok(());
    }
    if mode != RxMode::Zcrx {
        return Err(Error::invalid_input(format!(
            "--no-device applies to --rx zcrx (zcrx without a network device), not --rx {mode}: add --rx zcrx or drop --no-device"
        )));
    }
    let clash = [
        (a.iface.is_some(), "--iface"),
        (a.queue.is_some(), "--queue"),
        (a.naive, "--naive"),
        (a.mem != "host", "--mem other than host"),
    ];
    if let Some((_, flag)) = clash.iter().find(|(on, _)| *on) {
        return Err(Error::invalid_input(format!(
            "--no-device receives into host memory without a NIC queue: drop {flag}"
        )));
    }
    Ok(())
}

/// Parses `--mem`.
pub fn parse_mem(s: &str) -> Result<MemoryKind, Error> {
    MemoryKind::parse(s).ok_or_else(|| {
        Error::invalid_input(format!(
            "unknown --mem '{s}': use one of {}",
            MemoryKind::NAMES
        ))
    })
}

/// Standard input as a file of its own (a duplicate of fd 0): unbuffered, so that a wait for it
/// in `poll` (which sees the descriptor, not a buffer) is never a wait for data already read.
pub(crate) fn stdin_file() -> Result<File, Error> {
    let fd = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| Error::io("duplicating stdin", e))?;
    Ok(File::from(fd))
}

/// Fills `buf` from `f` (stdin) up to its end. Each read first waits in `poll` with the
/// interrupt pipe, so SIGINT/SIGTERM ends a wait for input that may never come
/// ([`Error::Interrupted`], exit 130) — a blocking read is restarted by the standard library
/// or, when the signal lands on this thread, fails with a bare `EINTR`.
pub(crate) fn read_full(f: &mut File, buf: &mut [u8]) -> Result<usize, Error> {
    let mut n = 0;
    while n < buf.len() {
        zcnet::interrupt::wait_readable(&*f)?;
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            // A signal that is not SIGINT/SIGTERM: wait again.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted && !zcnet::interrupted() => {}
            Err(e) => return Err(Error::io("reading stdin", e)),
        }
    }
    Ok(n)
}

/// Standard output for the received stream: a duplicate of fd 1 written without buffering,
/// each write first waiting in `poll` with the interrupt pipe. A reader that stops reading
/// (`zcnet recv | sleep 1000`) would otherwise hold the command in a `write` that the standard
/// library restarts after every signal.
pub(crate) struct Stdout(File);

impl Stdout {
    pub(crate) fn open() -> Result<Stdout, Error> {
        let fd = std::io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| Error::io("duplicating stdout", e))?;
        Ok(Stdout(File::from(fd)))
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match zcnet::interrupt::wait_writable(&self.0) {
            Ok(()) => self.0.write(buf),
            Err(Error::Io { source, .. }) => Err(source),
            Err(e) => Err(std::io::Error::new(
                std::io::ErrorKind::Interrupted,
                e.to_string(),
            )),
        }
    }

    /// As the default, but an interrupt ends it (the default restarts after `Interrupted`).
    fn write_all(&mut self, mut buf: &[u8]) -> std::io::Result<()> {
        while !buf.is_empty() {
            match self.write(buf) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => buf = &buf[n..],
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted && !zcnet::interrupted() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[derive(Serialize)]
struct FallbackJson {
    tried: &'static str,
    reason: String,
}

#[derive(Serialize)]
struct RecvJson {
    rx: &'static str,
    requested: &'static str,
    fallbacks: Vec<FallbackJson>,
    bytes: u64,
    reads: u64,
    seconds: f64,
    verified: bool,
    zerocopy_bytes: u64,
    copied_bytes: u64,
    /// Bytes nothing says were copied or not (zcrx with a device, before Linux 7.2).
    unknown_copy_bytes: u64,
    device_bytes: u64,
    starved: u64,
    rearms: u64,
    linear_fallbacks: u64,
    unsteered: u64,
    /// The receive low-water mark asked for (`null`: the kernel's default).
    rcvlowat: Option<u32>,
}

/// `recv --rcvlowat auto` when the data is not written out.
const RECV_LOW_WATER: u32 = 128 << 10;

pub fn recv(a: &RecvArgs) -> Result<(), Error> {
    if a.udp || a.rx == crate::udp_cmd::AF_XDP {
        if a.no_device {
            return Err(Error::invalid_input(
                "--no-device is zcrx without a network device, a TCP receive mode: drop it, or drop --udp and use --rx zcrx",
            ));
        }
        return crate::udp_cmd::recv_udp(a);
    }
    // Every argument is checked before anything is listened on or allocated (exit code 2).
    let mode = RxMode::parse(&a.rx)?;
    let want_bytes = crate::udp_cmd::check_stream_recv_flags(a)?;
    check_no_device(a, mode)?;
    if !a.no_device {
        check_rx_iface(mode, a.iface.as_deref(), a.naive)?;
    }
    let addr = net::parse_addr(&a.listen)?;
    let mut cfg = RxConfig::new(mode);
    cfg.iface = a.iface.clone();
    cfg.queue = a.queue;
    cfg.no_device = a.no_device;
    cfg.buf_size = size_arg("--buf-size", &a.buf_size, MAX_BUFFER)?;
    cfg.buffers = count_arg("--buffers", a.buffers, usize::MAX)?;
    total_arg(("--buf-size", cfg.buf_size), ("--buffers", cfg.buffers))?;
    cfg.area_len = size_arg("--area", &a.area, usize::MAX)?;
    if let Some(len) = &a.rx_buf_len {
        if mode != RxMode::Zcrx {
            return Err(Error::invalid_input(format!(
                "--rx-buf-len is the zcrx receive buffer size, not one of --rx {mode}: add --rx zcrx or drop --rx-buf-len"
            )));
        }
        cfg.rx_buf_len = size_arg("--rx-buf-len", len, 2 << 20)?;
    }
    let lowat = crate::units::lowat_arg("--rcvlowat", &a.rcvlowat)?;
    let memory = parse_mem(&a.mem)?;
    // A queue the interface does not have: refused before anything is made (exit code 2).
    if let (Some(iface), Some(queue)) = (a.iface.as_deref(), a.queue) {
        zcnet_tools::cli_text::check_queue(
            iface,
            queue,
            false,
            Some("leave --queue out (the interface's last RX queue)"),
        )?;
    }
    if memory.is_device() {
        return crate::gpu_cmd::recv(a, memory, &cfg);
    }
    if memory == MemoryKind::Udmabuf {
        // The receive area as a dma-buf of host memory: zcrx's dma-buf area
        // (IORING_ZCRX_AREA_DMABUF) or devmem's binding, which then meet the kernel for real.
        if !matches!(mode, RxMode::Zcrx | RxMode::Devmem) {
            return Err(Error::invalid_input(format!(
                "--mem udmabuf with --rx {}: only --rx zcrx and --rx devmem receive into a dma-buf; use --mem host",
                mode.name()
            )));
        }
        cfg.dmabuf = Some(Region::udmabuf(cfg.area_len)?.dmabuf()?);
    }
    if mode.is_device() && a.verify {
        return Err(Error::invalid_input(
            "--verify with --rx devmem reads each buffer back from the memory the NIC wrote, which zcnet does only for GPU memory: add --mem cuda, drop --verify, or use --rx auto",
        ));
    }
    let discard = a.discard || a.verify || a.json || std::io::stdout().is_terminal();
    cfg.low_water = match lowat {
        // A bulk receive that nobody reads as it comes: fewer wakeups and window updates
        // (docs/perf.md, "Socket low-water marks"); the stream's tail comes with its end.
        None if discard => Some(RECV_LOW_WATER),
        None | Some(0) => None,
        Some(n) => Some(n),
    };
    // Made before listening: a refused mechanism fails before any peer connects.
    let mut rx = Receiver::new(&cfg)?;
    let listener = listen_announced(addr)?;
    if !a.json {
        for f in rx.fallbacks() {
            zcnet_tools::eoutln!(
                "zcnet recv: {}",
                zcnet_tools::cli_text::words(&f.to_string())
            );
        }
        if mode == RxMode::Auto {
            zcnet_tools::eoutln!("zcnet recv: auto chose {}", rx.mode());
        }
    }
    let (s, peer) = net::accept(&listener)?;
    let mut out = if discard { None } else { Some(Stdout::open()?) };
    let sink = out.as_mut().map(|o| o as &mut dyn Write);
    let verify = a.verify.then(|| Pattern::new(a.seed));
    let (rep, failed) = net::receive_stream_until_failure(&mut rx, s, verify, sink, None)?;
    drop(out);
    // A peer reset ends the stream where it was: the bytes that came (and were checked) are
    // still reported, then the reset is the exit status (1). Other failures say only themselves.
    match failed {
        Some(e) if !e.is_connection_reset() => return Err(e),
        _ => {}
    }
    let st = &rep.stats;
    if a.json {
        let doc = RecvJson {
            rx: rx.mode().name(),
            requested: mode.name(),
            fallbacks: rx
                .fallbacks()
                .iter()
                .map(|f| FallbackJson {
                    tried: f.tried.name(),
                    reason: zcnet_tools::cli_text::words(&f.reason),
                })
                .collect(),
            bytes: rep.recv.bytes,
            reads: rep.recv.reads,
            seconds: rep.recv.seconds,
            verified: a.verify,
            zerocopy_bytes: st.zerocopy_bytes,
            copied_bytes: st.copied_bytes,
            unknown_copy_bytes: st.unknown_copy_bytes,
            device_bytes: rep.device_bytes,
            starved: st.starved,
            rearms: st.rearms,
            linear_fallbacks: st.linear_fallbacks,
            unsteered: st.unsteered,
            rcvlowat: rx.applied_low_water(),
        };
        print_json(&doc)?;
    } else {
        let secs = rep.recv.seconds;
        let mbps = if secs > 0.0 {
            rep.recv.bytes as f64 / secs / 1e6
        } else {
            0.0
        };
        let unknown = if st.unknown_copy_bytes > 0 {
            format!(
                ", {} B copied or not (the kernel does not say)",
                st.unknown_copy_bytes
            )
        } else {
            String::new()
        };
        zcnet_tools::eoutln!(
            "zcnet recv: {} B from {peer} in {secs:.2} s ({mbps:.0} MB/s) with {}{}: {} B zero-copy, {} B copied{unknown}, {} buffers, starved {}x, re-armed {}x{}",
            rep.recv.bytes,
            rx.mode(),
            if a.no_device { " without a device" } else { "" },
            st.zerocopy_bytes,
            st.copied_bytes,
            rep.recv.reads,
            st.starved,
            st.rearms,
            if a.verify { ", pattern verified" } else { "" }
        );
    }
    if let Some(reset) = failed {
        return Err(reset);
    }
    stream_length(rep.recv.bytes, want_bytes)
}

/// `recv --bytes N` on a stream: `received` must be exactly N.
pub(crate) fn stream_length(received: u64, want: Option<u64>) -> Result<(), Error> {
    match want {
        Some(n) if received != n => Err(Error::io(
            format!("recv --bytes {n}"),
            std::io::Error::other(format!(
                "the stream carried {received} B, not {n} B: {}",
                if received < n {
                    "cut short"
                } else {
                    "longer than asked"
                }
            )),
        )),
        _ => Ok(()),
    }
}
