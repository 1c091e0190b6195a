//! What `zcnet send` and `zcnet recv` were asked, checked into one plan before anything is
//! connected, listened on or allocated (exit code 2 for a bad argument): [`SendPlan`] and
//! [`RecvPlan`] hold the library's configuration and what the run needs beside it. The commands
//! then run their plan on the library (host memory: `sendrecv`; device memory: `gpu_cmd`) and
//! print its report. (`--udp` receives and `--tx af-xdp` sends are `udp_cmd`'s, with their own
//! checks.)

use crate::args::{parse_mem, run_limits, send_amount, RecvArgs, SendArgs, AF_XDP};
use crate::units::bytes_arg;
use crate::units::{
    count_arg, seconds_arg, size_arg, total_arg, window_arg, MAX_BUFFER, MAX_INFLIGHT,
};
use std::net::SocketAddr;
use std::time::Instant;
use zcnet::{net, Error, MemoryKind, RxConfig, RxMode, TxConfig, TxMode};

/// `zcnet send` over a socket (not `--tx af-xdp`), checked.
#[derive(Debug)]
pub(crate) struct SendPlan {
    /// `--tx`.
    pub mode: TxMode,
    /// The destination.
    pub addr: SocketAddr,
    /// Bytes per send (a UDP datagram's payload with `--udp`).
    pub size: usize,
    /// `--mem`.
    pub memory: MemoryKind,
    /// The sender's configuration.
    pub cfg: TxConfig,
    /// `--bytes` (or `--verify`'s 1 GiB); `None`: to the deadline, or stdin's end.
    pub limit: Option<u64>,
    /// `--duration`'s end.
    pub deadline: Option<Instant>,
}

impl SendPlan {
    /// Every argument of `a`, checked in the order the messages assume.
    pub(crate) fn from_args(a: &SendArgs) -> Result<SendPlan, Error> {
        let mode = tx_mode(&a.tx)?;
        check_send_flags(a)?;
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
            check_gpu_send(a)?;
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
        Ok(SendPlan {
            mode,
            addr,
            size,
            memory,
            cfg,
            limit,
            deadline,
        })
    }
}

/// `zcnet recv` of a TCP stream (not `--udp`), checked.
#[derive(Debug)]
pub(crate) struct RecvPlan {
    /// `--rx`, as asked.
    pub mode: RxMode,
    /// Where to listen.
    pub addr: SocketAddr,
    /// The receiver's configuration (the receive low-water mark is set when the run knows
    /// whether the data is written out).
    pub cfg: RxConfig,
    /// `--mem`.
    pub memory: MemoryKind,
    /// `--rcvlowat` (`None`: auto).
    pub lowat: Option<u32>,
    /// `--bytes`: the length the stream must have.
    pub want_bytes: Option<u64>,
}

impl RecvPlan {
    /// Every argument of `a`, checked in the order the messages assume.
    pub(crate) fn from_args(a: &RecvArgs) -> Result<RecvPlan, Error> {
        let mode = RxMode::parse(&a.rx)?;
        let want_bytes = check_stream_recv_flags(a)?;
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
        Ok(RecvPlan {
            mode,
            addr,
            cfg,
            memory,
            lowat,
            want_bytes,
        })
    }
}

/// `--tx` for the socket mechanisms; the refusal of an unknown name lists af-xdp too.
pub(crate) fn tx_mode(s: &str) -> Result<TxMode, Error> {
    TxMode::parse(s).map_err(|e| match e {
        Error::UnknownMode { .. } => Error::invalid_input(format!(
            "unknown send mode '{s}': use one of {}, or {AF_XDP} (with --udp and --iface)",
            TxMode::NAMED
                .iter()
                .map(|m| m.name())
                .collect::<Vec<_>>()
                .join(", ")
        )),
        e => e,
    })
}

/// `--tx devmem` is TCP only; `--iface`/`--queue` of `send` belong to `--tx af-xdp` (devmem
/// finds its interface from the socket).
fn check_send_flags(a: &SendArgs) -> Result<(), Error> {
    // devmem transmit is TCP only: refused here, before a socket or memory is made (the
    // library's refusal comes after both, exit 1).
    if a.udp && TxMode::parse(&a.tx).is_ok_and(|m| m == TxMode::Devmem) {
        return Err(Error::invalid_input(
            "--tx devmem with --udp: devmem transmit is TCP only: drop --udp, or use --tx msg-zerocopy or uring-zc for UDP",
        ));
    }
    if a.iface.is_some() || a.queue.is_some() {
        let flag = if a.iface.is_some() {
            "--iface"
        } else {
            "--queue"
        };
        return Err(Error::invalid_input(format!(
            "{flag} applies to --tx {AF_XDP} (frames sent from an interface's queue), not --tx {}: drop {flag} or use --udp --tx {AF_XDP}",
            a.tx
        )));
    }
    Ok(())
}

/// `--idle` of `recv` belongs to `--udp` (a stream ends by itself); `--bytes` on a stream is
/// the length it must have. Returns that length.
fn check_stream_recv_flags(a: &RecvArgs) -> Result<Option<u64>, Error> {
    if a.idle.is_some() {
        return Err(Error::invalid_input(
            "--idle applies to --udp (datagrams have no end of stream); a TCP stream ends when the sender closes it: drop --idle or add --udp",
        ));
    }
    a.bytes
        .as_deref()
        .map(|b| bytes_arg("--bytes", b))
        .transpose()
}

/// Checks what `--mem cuda` cannot do, before anything is connected or allocated.
fn check_gpu_send(a: &SendArgs) -> Result<(), Error> {
    if a.udp && a.naive {
        return Err(Error::invalid_input(
            "--naive with --udp: the naive baseline sends a TCP stream; drop --naive or --udp",
        ));
    }
    if !a.verify && a.duration.is_none() && a.bytes.is_none() {
        return Err(Error::invalid_input(
            "--mem cuda sends what is in GPU memory, not stdin: give --bytes, --duration or --verify",
        ));
    }
    Ok(())
}

/// `--rx zcrx` and `--rx devmem` receive on one NIC queue, so they need `--iface`: refused
/// here as a usage error naming the flag, before the library would refuse its unset field
/// (`RxConfig::iface`). `--naive` receives with `recv()` and needs none.
fn check_rx_iface(mode: RxMode, iface: Option<&str>, naive: bool) -> Result<(), Error> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_send_mode_names_af_xdp_too() {
        let m = tx_mode("warp").unwrap_err().to_string();
        assert!(
            m.contains("'warp'") && m.contains("uring-zc") && m.contains(AF_XDP),
            "{m}"
        );
        assert_eq!(tx_mode("copy").unwrap(), TxMode::Copy);
    }
}
