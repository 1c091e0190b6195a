//! `zcnet bench raw`: one of the raw loops of `zcnet_rawbench::baseline` alone, on a UDP socket
//! connected to ADDR, so that a script can run it beside `zcnet send` and an external peer
//! (liburing's examples/send-zerocopy) on the same path and CPU: the yardstick without zcnet's
//! library around it. `msg-zerocopy` is the minimal MSG_ZEROCOPY loop (the kernel selftest's
//! shape), `send-zc` the raw SEND_ZC loop, with the `uring-zc` backend's kernel-facing choices
//! unless flags flip them to liburing's example's (`--no-report-usage`, `--one-buffer`,
//! `--ring-fd`, `--single-issuer`, `--no-fixed-file`): what each choice costs the kernel, apart
//! from any library. `send` is the same loop of IORING_OP_SEND, with the `uring` backend's
//! choices (all but `--no-report-usage` apply), the peer of the example's `-z 0`.

use crate::units::{count_arg, seconds_arg, size_arg};
use clap::Args;
use zcnet::{net, Error};

/// Options of `zcnet bench raw`.
#[derive(Args, Debug)]
pub struct BenchRawArgs {
    /// Where to send UDP datagrams (ADDR:PORT).
    pub addr: String,
    /// The loop: msg-zerocopy (send(MSG_ZEROCOPY) and the error queue), send-zc
    /// (IORING_OP_SEND_ZC from a registered buffer) or send (IORING_OP_SEND).
    #[arg(long = "loop", default_value = "msg-zerocopy")]
    pub which: String,
    /// Bytes per datagram (at most 65507).
    #[arg(long, default_value = "64000")]
    pub size: String,
    /// Sends in flight.
    #[arg(long, default_value_t = 8, allow_negative_numbers = true)]
    pub inflight: usize,
    /// Seconds to send.
    #[arg(long, default_value_t = 3.0, allow_negative_numbers = true)]
    pub duration: f64,
    /// UDP_SEGMENT (GSO segment size, bytes); 0, the default: none, one datagram per send
    /// (the selftest's shape).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub gso: u16,
    /// send-zc: no IORING_SEND_ZC_REPORT_USAGE (liburing's example does not ask whether the
    /// kernel copied; zcnet does).
    #[arg(long)]
    pub no_report_usage: bool,
    /// send-zc, send: every request sends the same bytes (liburing's example) instead of a slice of
    /// its own (zcnet).
    #[arg(long)]
    pub one_buffer: bool,
    /// send-zc, send: register the ring's fd (IORING_REGISTER_RING_FDS, as liburing's example does).
    #[arg(long)]
    pub ring_fd: bool,
    /// send-zc, send: IORING_SETUP_SINGLE_ISSUER (as liburing's example does).
    #[arg(long)]
    pub single_issuer: bool,
    /// send-zc, send: name the socket by its number, not as a fixed file.
    #[arg(long)]
    pub no_fixed_file: bool,
    /// Print one JSON object instead of the line.
    #[arg(long)]
    pub json: bool,
}

impl BenchRawArgs {
    /// The send-zc flags given, each of which takes the example's choice instead of the
    /// backend's.
    fn flags_given(&self) -> Vec<&'static str> {
        [
            (self.no_report_usage, "--no-report-usage"),
            (self.one_buffer, "--one-buffer"),
            (self.ring_fd, "--ring-fd"),
            (self.single_issuer, "--single-issuer"),
            (self.no_fixed_file, "--no-fixed-file"),
        ]
        .into_iter()
        .filter_map(|(on, flag)| on.then_some(flag))
        .collect()
    }

    /// The io_uring loop's choices, or the refusal of a flag its loop does not take.
    fn choices(&self) -> Result<zcnet_rawbench::baseline::RawZcChoices, Error> {
        let refused = match self.which.as_str() {
            "send-zc" => None,
            "send" => self
                .no_report_usage
                .then_some(("--no-report-usage", "send-zc")),
            _ => self.flags_given().first().map(|f| (*f, "send-zc or send")),
        };
        if let Some((f, loops)) = refused {
            return Err(Error::invalid_input(format!(
                "{f} applies to --loop {loops} only: drop it, or use --loop send-zc"
            )));
        }
        let z = if self.which == "send" {
            zcnet_rawbench::baseline::RawZcChoices::ZCNET_SEND
        } else {
            zcnet_rawbench::baseline::RawZcChoices::ZCNET
        };
        Ok(zcnet_rawbench::baseline::RawZcChoices {
            zero_copy: z.zero_copy,
            // No usage to report without zero copy.
            report_usage: z.zero_copy && z.report_usage && !self.no_report_usage,
            one_buffer: z.one_buffer || self.one_buffer,
            fixed_file: z.fixed_file && !self.no_fixed_file,
            ring_fd: z.ring_fd || self.ring_fd,
            single_issuer: z.single_issuer || self.single_issuer,
        })
    }
}

pub fn run(a: &BenchRawArgs) -> Result<(), Error> {
    let size = size_arg("--size", &a.size, zcnet_tools::bench::UDP_MAX_PAYLOAD)?;
    let inflight = count_arg("--inflight", a.inflight, 4096)?;
    let duration = seconds_arg("--duration", a.duration)?;
    if !matches!(a.which.as_str(), "msg-zerocopy" | "send-zc" | "send") {
        return Err(Error::invalid_input(format!(
            "--loop {}: use msg-zerocopy, send-zc or send",
            a.which
        )));
    }
    let choices = a.choices()?;
    let addr = crate::args::dest_addr(&a.addr)?;
    let sock = net::connect_udp(addr, (a.gso > 0).then_some(a.gso))?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&sock);
    let halt = zcnet_tools::interrupt::flag();
    let uring = a.which != "msg-zerocopy";
    let r = if uring {
        zcnet_rawbench::baseline::raw_send_zc_with(fd, size, inflight, duration, halt, choices)
    } else {
        zcnet_rawbench::baseline::raw_msg_zerocopy(fd, size, inflight, duration, halt)
    }
    .map_err(|e| match e.kind() {
        // The kernel's ICMP port unreachable, reported on the connected socket's next send.
        std::io::ErrorKind::ConnectionRefused => Error::io(
            format!("raw {} loop to {addr}: nothing receives UDP there (ICMP port unreachable): start a receiver first (zcnet recv --udp --listen {addr}), or send where something listens", a.which, addr = zcnet::net::AddrText(addr)),
            e,
        ),
        _ => Error::io(format!("raw {} loop", a.which), e),
    })?;
    let mb_per_s = if r.seconds > 0.0 {
        r.bytes as f64 / r.seconds / 1e6
    } else {
        0.0
    };
    // send-zc, send: the kernel-facing choices the run made (which differ from the backend's).
    let (json_choices, text_choices) = if uring {
        let c = choices;
        let flipped = a.flags_given();
        (
            format!(
                ",\"choices\":{{\"zero_copy\":{},\"report_usage\":{},\"one_buffer\":{},\"fixed_file\":{},\"ring_fd\":{},\"single_issuer\":{}}}",
                c.zero_copy, c.report_usage, c.one_buffer, c.fixed_file, c.ring_fd, c.single_issuer
            ),
            if flipped.is_empty() {
                format!(
                    " (the {} backend's choices)",
                    if c.zero_copy { "uring-zc" } else { "uring" }
                )
            } else {
                format!(" (the example's choice for {})", flipped.join(", "))
            },
        )
    } else {
        (String::new(), String::new())
    };
    if a.json {
        zcnet_tools::outln!(
            "{{\"loop\":\"{}\",\"bytes\":{},\"sends\":{},\"seconds\":{:.6},\"mb_per_s\":{:.1},\"notifications\":{},\"copied_notifications\":{},\"cpu_seconds\":{:.6}{json_choices}}}",
            a.which,
            r.bytes,
            r.sends,
            r.seconds,
            mb_per_s,
            r.notifications,
            r.copied_notifications,
            r.cpu_seconds
        );
    } else {
        zcnet_tools::outln!(
            "raw {}{text_choices}: {} B in {:.2} s ({mb_per_s:.0} MB/s), {} sends, {} notifications ({} copied), CPU {:.3} s",
            a.which,
            r.bytes,
            r.seconds,
            r.sends,
            r.notifications,
            r.copied_notifications,
            r.cpu_seconds
        );
    }
    Ok(())
}
