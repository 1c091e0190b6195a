//! `zcnet send` and `zcnet recv`: netcat-style, over the same backends as the benchmark.

use crate::args::{RecvArgs, SendArgs};
use crate::endpoints::{listen_announced, nothing_to_verify, stream_length, Source, Stdout};
use crate::output::print_json;
use crate::plan::{RecvPlan, SendPlan};
use serde::Serialize;
use std::io::{IsTerminal, Write};
use zcnet::{net, Error, MemoryKind, Pattern, Receiver, Region, RxMode, Sender, Socket};
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
    if a.tx == crate::args::AF_XDP {
        return crate::udp_cmd::send_af_xdp(a);
    }
    // Every argument is checked before anything is connected or allocated (exit code 2).
    let plan = SendPlan::from_args(a)?;
    if plan.memory.is_device() {
        return crate::gpu_cmd::send(a, &plan);
    }
    let SendPlan {
        mode,
        addr,
        size,
        memory,
        cfg,
        limit,
        deadline,
    } = plan;
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
    if a.udp || a.rx == crate::args::AF_XDP {
        if a.no_device {
            return Err(Error::invalid_input(
                "--no-device is zcrx without a network device, a TCP receive mode: drop it, or drop --udp and use --rx zcrx",
            ));
        }
        return crate::udp_cmd::recv_udp(a);
    }
    // Every argument is checked before anything is listened on or allocated (exit code 2).
    let plan = RecvPlan::from_args(a)?;
    if plan.memory.is_device() {
        return crate::gpu_cmd::recv(a, &plan);
    }
    let RecvPlan {
        mode,
        addr,
        mut cfg,
        memory,
        lowat,
        want_bytes,
    } = plan;
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
    let peer = net::AddrText(peer);
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
