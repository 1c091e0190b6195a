//! The `zcnet` command.

mod bench_cmd;
mod bench_gpu;
mod gpu_cmd;
mod nic_cmd;
mod probe_cmd;
mod sendrecv;
mod units;

use clap::{Args, Parser, Subcommand};

/// zcnet: zero-copy networking, measured honestly.
#[derive(Parser, Debug)]
#[command(name = "zcnet", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Which zero-copy mechanisms work here, why the others don't, and the fix.
    Probe(probe_cmd::ProbeArgs),
    /// Set a NIC up for zero-copy receive (header split, a reserved queue, flow steering).
    #[command(subcommand)]
    Nic(nic_cmd::NicCmd),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCmd),
    /// Send a stream (TCP) or datagrams (UDP) with a chosen mechanism, netcat-style.
    Send(sendrecv::SendArgs),
    /// Receive one TCP stream, netcat-style.
    Recv(sendrecv::RecvArgs),
    /// The namespace lab.
    #[command(subcommand)]
    Lab(LabCmd),
}

#[derive(Subcommand, Debug)]
enum BenchCmd {
    /// Every send backend on every lab path: MB/s, ratio to copy, % zero-copy, CPU s/GB.
    Tx(BenchTxArgs),
    /// RPC echo (seed 004): every receive backend on veth and loopback: qps, Gbit/s, server
    /// CPU µs per request, p50/p99 latency, ratio to copy.
    Rx(BenchRxArgs),
}

#[derive(Subcommand, Debug)]
enum LabCmd {
    /// Delete lab namespaces left behind by zcnet processes that no longer exist.
    Cleanup,
}

/// Options of `zcnet bench tx`.
#[derive(Args, Debug)]
pub struct BenchTxArgs {
    /// Paths: sink (UDP+GSO into an ifb drop), veth (TCP between namespaces), loopback (TCP).
    #[arg(long, value_delimiter = ',', default_value = "sink,veth,loopback")]
    pub path: Vec<String>,
    /// Send mechanisms: copy, msg-zerocopy, uring, uring-zc, auto; also devmem (devmem TCP
    /// transmit from a dma-buf: not in the default set, it needs a NIC with netmem TX).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "copy,msg-zerocopy,uring,uring-zc,auto"
    )]
    pub tx: Vec<String>,
    /// Payload sizes (K = 1024, M = 1024²); on sink, 64K is sent as 64000 B.
    #[arg(long, value_delimiter = ',', default_value = "4K,16K,64K")]
    pub size: Vec<String>,
    /// Seconds per case.
    #[arg(long, default_value_t = 3.0)]
    pub duration: f64,
    /// Sends (buffers) in flight.
    #[arg(long, default_value_t = 8)]
    pub inflight: usize,
    /// Buffer memory: host (4 KiB pages), hugepage (2 MiB pages; THP when none reserved), or
    /// cuda[:N] (GPU memory: devmem TX where the NIC can, else staged through pinned host memory).
    #[arg(long, default_value = "anon")]
    pub mem: String,
    /// Skip the raw SEND_ZC loop that measures zcnet's own overhead.
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
    /// Receive mechanisms: copy, uring, zcrx, devmem, auto (refused ones are reported as such).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "copy,uring,zcrx,devmem,auto"
    )]
    pub rx: Vec<String>,
    /// Bytes per request and per response (K = 1024, M = 1024²).
    #[arg(long, default_value = "64K")]
    pub size: String,
    /// Client connections, each a closed loop (one request in flight).
    #[arg(long, default_value_t = 24)]
    pub connections: usize,
    /// Client threads the connections are spread over.
    #[arg(long, default_value_t = 4)]
    pub threads: usize,
    /// Seconds per case.
    #[arg(long, default_value_t = 3.0)]
    pub duration: f64,
    /// CPU the server thread is pinned to (default: the last one); clients use the others.
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Check every byte of every response (default: length, first and last 16 bytes).
    #[arg(long)]
    pub verify: bool,
    /// Receive buffer size of the server (default 16K).
    #[arg(long)]
    pub buf_size: Option<String>,
    /// Receive buffers of the server (default 64).
    #[arg(long)]
    pub buffers: Option<usize>,
    /// uring: one completion per buffer instead of bundles.
    #[arg(long)]
    pub no_bundle: bool,
    /// veth: steer each end's receive processing (RPS) to the receiving side's CPUs, as two
    /// hosts' NICs would (default: veth runs it on the sending CPU).
    #[arg(long)]
    pub steer_rx: bool,
    /// Where requests land: host (the echo benchmark), or cuda[:N]: one stream per case received
    /// into host memory, into GPU memory by the best path, and by the naive loop, side by side
    /// (--rx, --connections, --threads, --cpu, --buf-size, --buffers do not apply then).
    #[arg(long, default_value = "host")]
    pub mem: String,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = zcnet::install_interrupt_handler() {
        eprintln!("zcnet: warning: {e}");
    }
    let r = match cli.cmd {
        Cmd::Probe(a) => probe_cmd::run(&a),
        Cmd::Nic(c) => match nic_cmd::run(&c) {
            Ok(0) => Ok(()),
            Ok(code) => std::process::exit(code),
            Err(e) => Err(e),
        },
        Cmd::Bench(BenchCmd::Tx(a)) => bench_cmd::run(&a),
        Cmd::Bench(BenchCmd::Rx(a)) => bench_cmd::run_rx(&a),
        Cmd::Send(a) => sendrecv::send(&a),
        Cmd::Recv(a) => sendrecv::recv(&a),
        Cmd::Lab(LabCmd::Cleanup) => lab_cleanup(),
    };
    if let Err(e) = r {
        eprintln!("zcnet: {e}");
        std::process::exit(e.exit_code());
    }
}

fn lab_cleanup() -> zcnet::Result<()> {
    if !zcnet_is_root() {
        return Err(zcnet::Error::NotRoot {
            what: "zcnet lab cleanup",
        });
    }
    let removed = zcnet::lab::cleanup_stale()?;
    if removed.is_empty() {
        println!("no stale lab namespaces");
    }
    for ns in removed {
        println!("deleted {ns}");
    }
    Ok(())
}

fn zcnet_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|v| v.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}
