//! The options that more than one command module reads, and what they mean: those of `send`
//! and `recv` (sendrecv, udp_cmd, gpu_cmd), of `bench tx` and `bench rx` (bench_cmd,
//! bench_gpu), `--mem`, and the end of a `send` run (`--bytes`, `--duration`). A leaf: it
//! imports no command module.

use crate::units::{bytes_arg, seconds_arg};
use clap::Args;
use std::time::{Duration, Instant};
use zcnet::{Error, MemoryKind};

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
    /// 65507, and 64K is sent as 64000 B (as `bench tx` does). Default: 64K; with --tx af-xdp
    /// the largest datagram one frame carries on --iface (1472 at an MTU of 1500).
    #[arg(long, allow_hyphen_values = true)]
    pub size: Option<String>,
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
    /// Give up (exit 1) once the kernel has taken no byte and confirmed no send for this many
    /// seconds: the receiver stopped reading, or the path stalls (default 10).
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    pub stall_timeout: Option<f64>,
    /// Buffer memory: auto (transparent huge pages for --tx msg-zerocopy, else host), host
    /// (alias anon; 4 KiB pages), hugepage (alias huge; with --tx uring-zc the kernel charges
    /// each send to the socket buffers as if it spanned its huge page), udmabuf (host
    /// memory that is also a dma-buf, for --tx devmem; needs /dev/udmabuf, CONFIG_UDMABUF), or
    /// cuda[:N] (GPU memory N: sent by devmem TX where the NIC can, else staged through pinned
    /// host memory).
    #[arg(long, default_value = "auto")]
    pub mem: String,
    /// With --mem cuda: the loop people write first instead (a synchronous copy from the GPU
    /// into pageable memory, then send()), to compare with.
    #[arg(long)]
    pub naive: bool,
    /// Print the statistics as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

impl SendArgs {
    /// `--size` as given, or the default of the socket modes (64K).
    pub fn size_or_default(&self) -> &str {
        self.size.as_deref().unwrap_or(DEFAULT_SEND_SIZE)
    }
}

/// `send`'s `--size` but with `--tx af-xdp`.
pub const DEFAULT_SEND_SIZE: &str = "64K";

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
    /// dma-buf is given. zcrx: a connection may hold at most half of it (its receive buffer is
    /// lowered to that where larger), so that TCP's out-of-order segments never take it all.
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

/// Options of `zcnet bench tx`.
#[derive(Args, Debug)]
pub struct BenchTxArgs {
    /// Paths: sink (UDP+GSO into an ifb drop), veth (TCP between namespaces), loopback (TCP),
    /// dummy (UDP into a dummy device with MTU 65535 that drops; needs CONFIG_DUMMY). Default:
    /// sink,veth,loopback, and dummy where the kernel has the dummy driver.
    #[arg(long, value_delimiter = ',')]
    pub path: Vec<String>,
    /// Send mechanisms: copy, msg-zerocopy, uring, uring-zc, auto; also devmem (devmem TCP
    /// transmit from a dma-buf: not in the default set, it needs a NIC with netmem TX).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "copy,msg-zerocopy,uring,uring-zc,auto"
    )]
    pub tx: Vec<String>,
    /// Payload sizes (K = 1024, M = 1024²; at most 64M); on sink, 64K is sent as 64000 B and
    /// at most 65507 B fit a datagram.
    #[arg(long, value_delimiter = ',', default_value = "4K,16K,64K")]
    pub size: Vec<String>,
    /// Seconds per case.
    #[arg(long, default_value_t = 3.0, allow_negative_numbers = true)]
    pub duration: f64,
    /// Sends (buffers) in flight: at least this many (1 to 4096).
    #[arg(long, default_value_t = 8, allow_negative_numbers = true)]
    pub inflight: usize,
    /// Bytes in flight: smaller sends get more buffers (4K sends: 128); 0: exactly --inflight.
    #[arg(long, default_value = "512K", allow_hyphen_values = true)]
    pub window: String,
    /// Buffer memory: host (alias anon; 4 KiB pages), hugepage (alias huge; 2 MiB pages, THP
    /// when none reserved), or cuda[:N] (GPU memory: devmem TX where the NIC can, else staged
    /// through pinned host memory).
    #[arg(long, default_value = "host")]
    pub mem: String,
    /// Skip the raw loops that measure zcnet's own overhead on sink: raw-uring-zc (SEND_ZC,
    /// beside uring-zc) and raw-msg-zerocopy (MSG_ZEROCOPY, beside msg-zerocopy).
    #[arg(long)]
    pub no_baseline: bool,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// Options of `zcnet bench rx`.
#[derive(Args, Debug)]
pub struct BenchRxArgs {
    /// Paths: veth (server and clients in two lab namespaces, root only), loopback.
    #[arg(long, value_delimiter = ',', default_value = "veth,loopback")]
    pub path: Vec<String>,
    /// Receive mechanisms: copy, uring, zcrx, zcrx-nodev (zcrx without a device, Linux 7.1+:
    /// the kernel copies), devmem, auto (refused ones are reported as such; zcrx-nodev is
    /// skipped on a kernel without it).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "copy,uring,zcrx,zcrx-nodev,devmem,auto"
    )]
    pub rx: Vec<String>,
    /// Bytes per request and per response (K = 1024, M = 1024²).
    #[arg(long, default_value = "64K")]
    pub size: String,
    /// Client connections, each a closed loop (one request in flight).
    #[arg(long, default_value_t = 24, allow_negative_numbers = true)]
    pub connections: usize,
    /// Client threads the connections are spread over.
    #[arg(long, default_value_t = 4, allow_negative_numbers = true)]
    pub threads: usize,
    /// Seconds per case.
    #[arg(long, default_value_t = 3.0, allow_negative_numbers = true)]
    pub duration: f64,
    /// CPU the server thread is pinned to (default: the last one); clients use the others.
    #[arg(long, allow_negative_numbers = true)]
    pub cpu: Option<usize>,
    /// Check every byte of every response (default: length, first and last 16 bytes).
    #[arg(long)]
    pub verify: bool,
    /// Receive buffer size of the server (default 16K).
    #[arg(long)]
    pub buf_size: Option<String>,
    /// Receive buffers of the server (default 64).
    #[arg(long, allow_negative_numbers = true)]
    pub buffers: Option<usize>,
    /// uring: one completion per buffer instead of bundles.
    #[arg(long)]
    pub no_bundle: bool,
    /// veth: steer each end's receive processing (RPS) to the receiving side's CPUs, as two
    /// hosts' NICs would (default: veth runs it on the sending CPU).
    #[arg(long)]
    pub steer_rx: bool,
    /// Run on a NIC instead of --path (the path is named iface): the server listens on
    /// --listen, an address of IF here; its zcrx and devmem rows use IF's --queue (steer the
    /// port there first: zcnet nic setup --iface IF --queue Q --port PORT -- zcnet bench rx
    /// ...); devmem receives into a udmabuf of host memory. The clients run in --client-netns.
    #[arg(long)]
    pub iface: Option<String>,
    /// With --iface: the receive queue for zcrx and devmem (default: IF's last RX queue).
    #[arg(long, allow_negative_numbers = true)]
    pub queue: Option<u32>,
    /// With --iface: the server's ADDR:PORT on IF (IP literal; the port is the one steered).
    #[arg(long)]
    pub listen: Option<String>,
    /// With --iface: the network namespace the clients run in (one whose route to --listen
    /// goes through IF's peer; default: this one).
    #[arg(long)]
    pub client_netns: Option<String>,
    /// Where requests land: host (the echo benchmark), or cuda[:N]: one stream per case received
    /// into host memory, into GPU memory by the best path, and by the naive loop, side by side
    /// (--rx, --connections, --threads, --cpu, --buf-size, --buffers do not apply then).
    #[arg(long, default_value = "host")]
    pub mem: String,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
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

/// `--naive` is the loop people write first for GPU memory: without `--mem cuda` it would be
/// ignored, so it is refused (exit code 2).
pub(crate) fn check_naive(naive: bool, memory: MemoryKind) -> Result<(), Error> {
    if naive && !memory.is_device() {
        return Err(Error::invalid_input(format!(
            "--naive is the naive loop for GPU memory (a synchronous copy beside each send or receive), with --mem cuda[:N]; with --mem {} it would do nothing: add --mem cuda or drop --naive",
            memory.name()
        )));
    }
    Ok(())
}

/// `send`'s destination: `HOST:PORT` with a port a receiver can listen on (port 0 names no
/// listener: the kernel gives a listener a port of its own for it).
pub(crate) fn dest_addr(s: &str) -> Result<std::net::SocketAddr, Error> {
    let addr = zcnet::net::parse_addr(s)?;
    if addr.port() == 0 {
        return Err(Error::invalid_input(format!(
            "{s}: port 0 is no destination (a receiver told to listen on port 0 gets another one, which it prints): give the port the receiver listens on"
        )));
    }
    Ok(addr)
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

/// The `--tx`/`--rx` name of AF_XDP.
pub const AF_XDP: &str = "af-xdp";
