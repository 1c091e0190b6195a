//! `zcnet send` and `zcnet recv`: netcat-style, over the same backends as the benchmark.

use crate::args::{parse_mem, run_limits, send_amount, RecvArgs, SendArgs};
use crate::endpoints::{listen_announced, nothing_to_verify, stream_length, Source, Stdout};
use crate::output::print_json;
use crate::units::{
    count_arg, seconds_arg, size_arg, total_arg, window_arg, MAX_BUFFER, MAX_INFLIGHT,
};
use serde::Serialize;
use std::io::{IsTerminal, Write};
use zcnet::{
    net, Error, MemoryKind, Pattern, Receiver, Region, RxConfig, RxMode, Sender, Socket, TxConfig,
};
use zcnet_tools::sendloop::{SendLoop, Until};

#[derive(Serialize)]
struct SendJson<'a> {
    /// Ctrl-C ended the run (present only then): the totals are those so far.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    interrupted: bool,
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

pub fn send(a: &SendArgs) -> Result<(), Error> {
    if a.tx == crate::udp_cmd::AF_XDP {
        return crate::udp_cmd::send_af_xdp(a);
    }
    // Every argument is checked before anything is connected or allocated (exit code 2).
    let mode = crate::udp_cmd::tx_mode(&a.tx)?;
    crate::udp_cmd::check_send_flags(a)?;
    let addr = crate::args::dest_addr(&a.addr)?;
    let mut size = size_arg("--size", a.size_or_default(), MAX_BUFFER)?;
    if a.udp {
        // 64K (the default) does not fit a datagram: sent as 64,000 B, bench tx's rule on its
        // UDP path.
        size = zcnet_tools::bench::effective_size(zcnet_tools::bench::PathKind::Sink, size);
    }
    let inflight = count_arg("--inflight", a.inflight, MAX_INFLIGHT)?;
    total_arg(("--size", size), ("--inflight", inflight))?;
    let window = window_arg(&a.window)?;
    let (bytes, duration) = send_amount(a)?;
    let stall_timeout = a
        .stall_timeout
        .map(|s| seconds_arg("--stall-timeout", s))
        .transpose()?;
    let memory = parse_mem(&a.mem)?;
    crate::args::check_naive(a.naive, memory)?;
    if memory.is_device() {
        crate::gpu_cmd::check_send(a)?;
    }
    if a.udp && size > zcnet_tools::bench::UDP_MAX_PAYLOAD {
        return Err(Error::invalid_input(format!(
            "--size {} ({size} B) is larger than one UDP datagram can carry ({} B over IPv4): use a smaller --size",
            a.size_or_default(),
            zcnet_tools::bench::UDP_MAX_PAYLOAD
        )));
    }
    let (limit, deadline) = run_limits(bytes, duration, a.verify);
    let mut cfg = TxConfig::new(mode);
    cfg.cancel = zcnet_tools::interrupt::token();
    cfg.inflight = inflight;
    cfg.window = window;
    cfg.buf_size = size;
    if let Some(t) = stall_timeout {
        cfg.stall_timeout = t;
    }
    if memory.is_device() {
        return crate::gpu_cmd::send(a, addr, memory, &cfg, limit, deadline);
    }
    // The region, and whether RLIMIT_MEMLOCK can hold what the sender will lock (its ring and
    // the registered region), before connecting: a limit too small is said before any peer
    // sees a connection (exit code 2, the message the sender's own refusal would have).
    let region = Region::for_sender(memory, &cfg)?;
    if let Some(e) = zcnet::tx::memlock_refusal(&region, &cfg) {
        return Err(Error::invalid_input(e.text()));
    }
    let sock: Socket = if a.udp {
        net::connect_udp_for(addr, size)?.into()
    } else {
        net::connect_tcp(addr, &zcnet_tools::interrupt::token())?.into()
    };
    let mut tx = Sender::new(sock, region, &cfg)?;
    if let Some(n) = tx.note() {
        zcnet_tools::eoutln!("zcnet: note: {}", n.render(&zcnet_cli::cli_text::Cli));
    }
    // What goes into each send. Only a data source writes the buffers: stdin (netcat-style),
    // or with --verify the seeded pattern at its stream offset, for the receiver to check.
    // --bytes/--duration without --verify send the buffers as they are (zero-filled, never
    // written), as `bench tx` does: writing a payload per send would cost more than a
    // zero-copy send of it (a fill runs at a few GB/s, a zero-copy send to the sink at tens).
    // The deadline is read once per buffers' worth of sends (about once per wait for the
    // kernel), as `bench tx` reads it, not once per send.
    let mut until = Until::new(size, limit, deadline, tx.buffers());
    let ran = SendLoop {
        amount: |offset| until.next(offset),
        fill: Source::for_args(a)?,
        pace: None,
        cancelled: || false,
        progress: |_| {},
    }
    .run(&mut tx);
    // Ctrl-C: the totals so far are still printed (what the kernel had accepted by then: the
    // sends still in flight are abandoned with the sender), then the exit is 130.
    let interrupted = matches!(ran, Err(Error::Interrupted));
    if !interrupted {
        ran?;
    }
    let st = if interrupted {
        tx.stats()
    } else {
        tx.finish()?
    };
    if a.json {
        let doc = SendJson {
            interrupted,
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
            switches: st
                .switches
                .iter()
                .map(|s| s.render(&zcnet_cli::cli_text::Cli))
                .collect(),
        };
        print_json(&doc)?;
    } else {
        let zc = st
            .zerocopy_fraction()
            .map_or("n/a".into(), |f| format!("{:.1}%", f * 100.0));
        zcnet_tools::eoutln!(
            "zcnet send{}: {} B in {:.2} s ({:.0} MB/s) with {}: zero-copy {zc} ({} B zero-copy, {} B copied, {} notifications), CPU {:.3} s",
            if interrupted { " (interrupted)" } else { "" },
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
            zcnet_tools::eoutln!("zcnet send: auto {}", s.render(&zcnet_cli::cli_text::Cli));
        }
    }
    if interrupted {
        return Err(Error::Interrupted);
    }
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

/// `--iface` and `--queue` name the NIC queue a zero-copy receiver binds (zcrx, devmem, and
/// auto, which tries zcrx with them): with `--rx copy` or `uring`, or a `--queue` without an
/// interface, they would be ignored, so they are refused (exit code 2). The naive GPU loop
/// receives with `recv()` and binds none either.
fn check_rx_queue_flags(a: &RecvArgs, mode: RxMode) -> Result<(), Error> {
    let flag = match (a.iface.is_some(), a.queue.is_some()) {
        (true, _) => "--iface",
        (false, true) => "--queue",
        (false, false) => return Ok(()),
    };
    if matches!(mode, RxMode::Copy | RxMode::Uring) {
        return Err(Error::invalid_input(format!(
            "{flag} names the NIC queue a zero-copy receiver binds (--rx zcrx, devmem or auto); --rx {mode} receives from a socket on any interface: drop {flag}"
        )));
    }
    if a.naive {
        return Err(Error::invalid_input(format!(
            "{flag} names the NIC queue a zero-copy receiver binds; --naive receives with recv() from a socket on any interface: drop {flag}"
        )));
    }
    if a.iface.is_none() {
        return Err(Error::invalid_input(format!(
            "--queue is a queue of the --iface interface: add --iface IFACE or drop --queue (--rx {mode})"
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

#[derive(Serialize)]
struct FallbackJson {
    tried: &'static str,
    reason: String,
}

#[derive(Serialize)]
struct RecvJson {
    /// Ctrl-C ended the run (present only then): the totals are those so far.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    interrupted: bool,
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
    cfg.cancel = zcnet_tools::interrupt::token();
    cfg.iface = a.iface.clone();
    cfg.queue = a.queue;
    cfg.no_device = a.no_device;
    cfg.buf_size = size_arg("--buf-size", &a.buf_size, MAX_BUFFER)?;
    cfg.buffers = count_arg("--buffers", a.buffers, usize::MAX)?;
    total_arg(("--buf-size", cfg.buf_size), ("--buffers", cfg.buffers))?;
    cfg.area_len = size_arg("--area", &a.area, crate::units::MAX_AREA)?;
    if let Some(len) = &a.rx_buf_len {
        if mode != RxMode::Zcrx {
            return Err(Error::invalid_input(format!(
                "--rx-buf-len is the zcrx receive buffer size, not one of --rx {mode}: add --rx zcrx or drop --rx-buf-len"
            )));
        }
        cfg.rx_buf_len = size_arg("--rx-buf-len", len, 2 << 20)?;
        if !cfg.rx_buf_len.is_power_of_two() || cfg.rx_buf_len < 4096 {
            return Err(Error::invalid_input(format!(
                "--rx-buf-len {len}: give a power of two from a page (4K) to 2M"
            )));
        }
    }
    let lowat = crate::units::lowat_arg("--rcvlowat", &a.rcvlowat)?;
    let memory = parse_mem(&a.mem)?;
    crate::args::check_naive(a.naive, memory)?;
    check_rx_queue_flags(a, mode)?;
    // A queue the interface does not have: refused before anything is made (exit code 2).
    if let (Some(iface), Some(queue)) = (a.iface.as_deref(), a.queue) {
        zcnet::nic::check_queue(
            iface,
            queue,
            false,
            Some("leave --queue out (the interface's last RX queue)"),
        )?;
    }
    if memory.is_device() {
        return crate::gpu_cmd::recv(a, memory, &cfg, want_bytes);
    }
    // The udmabuf the kernel writes into, kept to read what landed there back (--verify).
    let mut udmabuf: Option<Region> = None;
    if memory == MemoryKind::Udmabuf {
        // The receive area as a dma-buf of host memory: zcrx's dma-buf area
        // (IORING_ZCRX_AREA_DMABUF) or devmem's binding, which then meet the kernel for real.
        if !matches!(mode, RxMode::Zcrx | RxMode::Devmem) {
            return Err(Error::invalid_input(format!(
                "--mem udmabuf with --rx {}: only --rx zcrx and --rx devmem receive into a dma-buf; use --mem host",
                mode.name()
            )));
        }
        let mut region = Region::udmabuf(cfg.area_len)?;
        cfg.dmabuf = Some(region.dmabuf()?);
        udmabuf = Some(region);
    }
    if mode.is_device() && a.verify && udmabuf.is_none() {
        return Err(Error::invalid_input(
            "--verify with --rx devmem reads each buffer back from the memory the NIC wrote: add --mem udmabuf (host memory) or --mem cuda, drop --verify, or use --rx auto",
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
            zcnet_tools::eoutln!("zcnet recv: {}", f.render(&zcnet_cli::cli_text::Cli));
        }
        if mode == RxMode::Auto {
            zcnet_tools::eoutln!("zcnet recv: auto chose {}", rx.mode());
        }
    }
    let (s, peer) = net::accept(&listener, &zcnet_tools::interrupt::token())?;
    let mut out = if discard { None } else { Some(Stdout::open()?) };
    let sink = out.as_mut().map(|o| o as &mut dyn Write);
    let verify = a.verify.then(|| Pattern::new(a.seed));
    // Buffers in the udmabuf are read back through its host mapping, at their offset in the
    // dma-buf, before they go back to the kernel.
    let udmabuf = std::cell::RefCell::new(udmabuf);
    let read_back =
        |slice: &zcnet::rx::DeviceSlice, out: &mut [u8]| match &mut *udmabuf.borrow_mut() {
            Some(r) => r.read_back(slice.offset as usize, out),
            None => Err(Error::invalid_input("no host mapping of the device memory")),
        };
    let reader: Option<zcnet::rx::DeviceReader<'_>> =
        udmabuf.borrow().is_some().then_some(&read_back as _);
    let (rep, failed) = zcnet::rx::receive_stream_until_failure(&mut rx, s, verify, sink, reader)?;
    drop(out);
    // A peer reset ends the stream where it was: the bytes that came (and were checked) are
    // still reported, then the reset is the exit status (1). Other failures say only themselves.
    match failed {
        Some(e) if !e.is_connection_reset() && !matches!(e, Error::Interrupted) => return Err(e),
        _ => {}
    }
    let interrupted = matches!(failed, Some(Error::Interrupted));
    let st = &rep.stats;
    if a.json {
        let doc = RecvJson {
            interrupted,
            rx: rx.mode().name(),
            requested: mode.name(),
            fallbacks: rx
                .fallbacks()
                .iter()
                .map(|f| FallbackJson {
                    tried: f.tried.name(),
                    reason: f.reason.render(&zcnet_cli::cli_text::Cli),
                })
                .collect(),
            bytes: rep.recv.bytes,
            reads: rep.recv.reads,
            seconds: rep.recv.seconds,
            verified: a.verify && rep.recv.bytes > 0,
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
            "zcnet recv{}: {} B from {peer} in {secs:.2} s ({mbps:.0} MB/s) with {}{}: {} B zero-copy, {} B copied{unknown}, {} buffers, starved {}x, re-armed {}x{}",
            if interrupted { " (interrupted)" } else { "" },
            rep.recv.bytes,
            rx.mode(),
            if a.no_device { " without a device" } else { "" },
            st.zerocopy_bytes,
            st.copied_bytes,
            rep.recv.reads,
            st.starved,
            st.rearms,
            if a.verify && rep.recv.bytes > 0 {
                ", pattern verified"
            } else {
                ""
            }
        );
    }
    if let Some(reset) = failed {
        return Err(reset);
    }
    if a.verify && rep.recv.bytes == 0 {
        return Err(nothing_to_verify());
    }
    stream_length(rep.recv.bytes, want_bytes)
}
