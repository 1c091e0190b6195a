//! `zcnet send --udp --tx af-xdp` and `zcnet recv --udp [--rx copy|af-xdp]`: the argument
//! checks and the output; sending, receiving and the accounting are
//! `zcnet_tools::dgram`'s.

use crate::args::{parse_mem, run_limits, send_amount, RecvArgs, SendArgs, AF_XDP};
use crate::endpoints::{Source, Stdout};
use crate::output::print_json;
use crate::units::{bytes_arg, seconds_arg, size_arg, MAX_BUFFER};
use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use zcnet::{net, Error, Pattern, RxMode};
use zcnet_tools::dgram::{
    Stop, UdpReceiver, UdpRecvConfig, UdpRxMode, XskLimits, XskSendConfig, XskUdpSender, BATCH,
};
use zcnet_tools::sendloop::Until;

/// How long `recv --udp` waits after the last datagram by default (`--idle`).
const DEFAULT_IDLE: f64 = 2.0;

/// `zcnet send --udp --tx af-xdp --iface IFACE [--queue Q] ADDR:PORT`.
pub fn send_af_xdp(a: &SendArgs) -> Result<(), Error> {
    // Every argument is checked before anything is bound (exit code 2).
    if !a.udp {
        return Err(Error::invalid_input(format!(
            "--tx {AF_XDP} sends UDP datagrams as Ethernet frames from an AF_XDP socket: add --udp"
        )));
    }
    let iface = a.iface.as_deref().ok_or_else(|| {
        Error::invalid_input(format!(
            "--tx {AF_XDP} needs --iface IFACE: the interface the frames leave from (the kernel's route to {} must use it)",
            a.addr
        ))
    })?;
    let dst = match crate::args::dest_addr(&a.addr)? {
        SocketAddr::V4(v4) => v4,
        SocketAddr::V6(_) => {
            return Err(Error::invalid_input(format!(
                "--tx {AF_XDP} builds IPv4/UDP frames: {} is IPv6; give an IPv4 address",
                a.addr
            )))
        }
    };
    let (bytes, duration) = send_amount(a)?;
    if a.stall_timeout.is_some() {
        return Err(Error::invalid_input(format!(
            "--stall-timeout is for the socket send modes: --tx {AF_XDP} never waits on a receiver (drop --stall-timeout)"
        )));
    }
    let memory = parse_mem(&a.mem)?;
    if memory.is_device() || a.naive {
        return Err(Error::invalid_input(format!(
            "--tx {AF_XDP} sends from a UMEM in host memory: use --mem host or hugepage{}",
            if a.naive { " and drop --naive" } else { "" }
        )));
    }
    // The MTU is read, nothing is bound: a datagram that does not fit one frame is refused
    // here; without --size each datagram is the largest one frame carries.
    let limits = XskLimits::of(iface)?;
    let size = match a.size.as_deref() {
        Some(given) => {
            let size = size_arg("--size", given, MAX_BUFFER)?;
            limits.check("--size", given, size, iface)?;
            size
        }
        None => limits.max_payload,
    };
    if let Some(queue) = a.queue {
        zcnet::nic::check_queue(iface, queue, true, Some("leave --queue out (queue 0)"))?;
    }
    let (limit, deadline) = run_limits(bytes, duration, a.verify);
    let mut tx = XskUdpSender::open(&XskSendConfig {
        iface: iface.to_string(),
        queue: a.queue.unwrap_or(0),
        dst,
        memory,
    })?;
    if !a.json {
        if let Some(why) = tx.zerocopy_refused() {
            zcnet_tools::eoutln!("zcnet send: note: AF_XDP zero copy refused ({why}): copy mode");
        }
        zcnet_tools::eoutln!("zcnet send: {}", tx.describe());
    }
    // The same sources as the other modes: stdin, the pattern at each datagram's stream
    // offset (--verify), or nothing written (zeros: the UMEM frames are never written past
    // the headers).
    let mut source = Source::for_args(a)?;
    let mut until = Until::new(size, limit, deadline, BATCH);
    let mut offset = 0u64;
    while let Some(want) = until.next(offset)? {
        let n = tx.send_with(want, |payload| source.fill_slice(offset, payload))?;
        if n == 0 {
            break;
        }
        offset += n as u64;
    }
    let rep = tx.finish()?;
    if a.json {
        print_json(&rep.to_json())
    } else {
        zcnet_tools::eoutln!("zcnet send: {}", rep.summary());
        Ok(())
    }
}

/// `zcnet recv --udp [--rx copy|af-xdp|auto] [--iface IFACE] [--queue Q] --listen ADDR:PORT`.
pub fn recv_udp(a: &RecvArgs) -> Result<(), Error> {
    // Every argument is checked before anything is bound (exit code 2).
    if !a.udp {
        return Err(Error::invalid_input(format!(
            "--rx {AF_XDP} receives UDP datagrams (an XDP program redirects a UDP port): add --udp"
        )));
    }
    let mode = match a.rx.as_str() {
        AF_XDP => UdpRxMode::AfXdp {
            iface: a.iface.clone().ok_or_else(|| {
                Error::invalid_input(format!(
                    "--rx {AF_XDP} needs --iface IFACE: the interface the datagrams arrive on (an XDP program there hands the --listen port to an AF_XDP socket on --queue, default 0)"
                ))
            })?,
            queue: a.queue.unwrap_or(0),
        },
        "copy" | "auto" => UdpRxMode::Copy,
        other => {
            return Err(Error::invalid_input(match RxMode::parse(other) {
                Ok(_) => format!(
                    "--rx {other} receives TCP streams; with --udp use --rx copy or --rx {AF_XDP}"
                ),
                Err(_) => format!(
                    "unknown receive mode '{other}' for --udp: use copy, {AF_XDP} or auto"
                ),
            }));
        }
    };
    if mode == UdpRxMode::Copy && (a.iface.is_some() || a.queue.is_some()) {
        let flag = if a.iface.is_some() {
            "--iface"
        } else {
            "--queue"
        };
        return Err(Error::invalid_input(format!(
            "{flag} applies to --rx {AF_XDP} with --udp (a UDP socket receives from every interface): drop {flag} or use --rx {AF_XDP}"
        )));
    }
    let listen = net::parse_addr(&a.listen)?;
    let bytes = a
        .bytes
        .as_deref()
        .map(|b| bytes_arg("--bytes", b))
        .transpose()?;
    let idle = seconds_arg("--idle", a.idle.unwrap_or(DEFAULT_IDLE))?;
    let memory = parse_mem(&a.mem)?;
    crate::args::check_naive(a.naive, memory)?;
    if memory.is_device() {
        return Err(Error::invalid_input(format!(
            "--udp receives into host memory: use --mem host{}",
            if a.naive { " and drop --naive" } else { "" }
        )));
    }
    if let (UdpRxMode::AfXdp { iface, .. }, Some(queue)) = (&mode, a.queue) {
        zcnet::nic::check_queue(iface, queue, true, Some("leave --queue out (queue 0)"))?;
    }
    let cfg = UdpRecvConfig {
        listen,
        mode,
        memory,
        verify: a.verify.then(|| Pattern::new(a.seed)),
        bytes,
        idle,
    };
    let mut rx = UdpReceiver::open(&cfg)?;
    zcnet_tools::eoutln!(
        "zcnet recv: listening on {}",
        zcnet::net::AddrText(rx.local_addr())
    );
    if !a.json {
        if let Some(why) = rx.zerocopy_refused() {
            zcnet_tools::eoutln!("zcnet recv: note: AF_XDP zero copy refused ({why}): copy mode");
        }
        if a.rx == "auto" {
            zcnet_tools::eoutln!("zcnet recv: auto chose copy (UDP: af-xdp only when asked, it takes the port from the stack)");
        }
        zcnet_tools::eoutln!("zcnet recv: {}", rx.describe());
    }
    let discard = a.discard || a.verify || a.json || std::io::stdout().is_terminal();
    let mut out = if discard { None } else { Some(Stdout::open()?) };
    let sink = out.as_mut().map(|o| o as &mut dyn Write);
    let rep = rx.run(&cfg, sink);
    // Detached and unbound before anything is printed.
    drop(rx);
    drop(out);
    let rep = rep?;
    if a.json {
        print_json(&rep.to_json(&a.rx))?;
    } else {
        zcnet_tools::eoutln!("zcnet recv: {}", rep.summary());
    }
    if rep.stop == Stop::Interrupted {
        return Err(Error::Interrupted);
    }
    if a.verify && rep.bytes == 0 {
        return Err(crate::endpoints::nothing_to_verify());
    }
    if let Some(want) = bytes.filter(|&b| rep.bytes < b) {
        return Err(Error::io(
            format!("received {} of the {want} B of --bytes", rep.bytes),
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "nothing more arrived for {} s (--idle): the rest was lost or not sent",
                    idle.as_secs_f64()
                ),
            ),
        ));
    }
    Ok(())
}
