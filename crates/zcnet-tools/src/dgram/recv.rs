//! `zcnet recv --udp`: datagrams from an AF_XDP socket fed by an XDP program, or from a UDP
//! socket, each checked against the pattern, and the report of what arrived.

use super::*;

/// How [`UdpReceiver`] takes datagrams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UdpRxMode {
    /// A UDP socket bound to the address (`recv()`: the kernel copies each datagram out).
    Copy,
    /// An AF_XDP socket on `queue` of `iface`, fed by an XDP program that redirects the UDP
    /// port to it (every other packet goes on to the stack).
    AfXdp {
        /// The interface.
        iface: String,
        /// The queue.
        queue: u32,
    },
}

impl UdpRxMode {
    /// `copy`, `af-xdp`.
    pub fn name(&self) -> &'static str {
        match self {
            UdpRxMode::Copy => "copy",
            UdpRxMode::AfXdp { .. } => "af-xdp",
        }
    }
}

/// What [`UdpReceiver::open`] sets up and how [`UdpReceiver::run`] ends.
#[derive(Debug, Clone)]
pub struct UdpRecvConfig {
    /// The address to receive on (IPv4 for af-xdp; an unspecified address takes every one).
    pub listen: SocketAddr,
    /// The mechanism.
    pub mode: UdpRxMode,
    /// The UMEM's memory (af-xdp).
    pub memory: MemoryKind,
    /// Check every datagram against this pattern.
    pub verify: Option<Pattern>,
    /// Stop once this many payload bytes have arrived.
    pub bytes: Option<u64>,
    /// Stop once nothing has arrived for this long, after the first datagram.
    pub idle: Duration,
}

#[derive(Debug)]
enum Inner {
    Socket {
        sock: UdpSocket,
        rcvbuf: usize,
    },
    Xsk {
        /// Dropped first: the XDP program is detached before the reservation closes.
        xsk: Box<Xsk>,
        frames: Vec<RxFrame>,
        /// The UDP port held in the stack; datagrams that reach it were not redirected
        /// (another queue, or generic XDP missing them): read and counted as unsteered.
        stack: UdpSocket,
        ip: Option<Ipv4Addr>,
        port: u16,
        zerocopy_refused: Option<String>,
        /// The frame and the UDP payload it holds, for the drops said as they happen.
        limits: XskLimits,
        /// The kernel's `rx_dropped` last said, and when it was last read.
        dropped_said: u64,
        dropped_read: Instant,
    },
}

/// Receives UDP datagrams through one mechanism.
#[derive(Debug)]
pub struct UdpReceiver {
    inner: Inner,
    listen: SocketAddr,
    buf: Vec<u8>,
}

/// Why [`UdpReceiver::run`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The byte count asked for arrived.
    Bytes,
    /// Nothing arrived for the idle time.
    Idle,
    /// SIGINT/SIGTERM.
    Interrupted,
}

/// What a [`UdpReceiver`] received.
#[derive(Debug, Clone)]
pub struct UdpRecvReport {
    /// The mechanism.
    pub mode: &'static str,
    /// Payload bytes received.
    pub bytes: u64,
    /// Datagrams received.
    pub datagrams: u64,
    /// Seconds from the first datagram to the last.
    pub seconds: f64,
    /// Whether every datagram was checked against the pattern (and passed), and there was at
    /// least one byte to check: 0 B verify nothing.
    pub verified: bool,
    /// With verification: bytes below the highest offset that never arrived.
    pub missing_bytes: Option<u64>,
    /// With verification: datagrams that arrived after a later one.
    pub late: Option<u64>,
    /// Why it stopped.
    pub stop: Stop,
    /// Copy: the receive buffer granted and the kernel's drop count for the socket.
    pub socket: Option<(usize, u64)>,
    /// AF_XDP: its account.
    pub xsk: Option<XskRecvAccount>,
}

/// The AF_XDP receiver's account.
#[derive(Debug, Clone)]
pub struct XskRecvAccount {
    /// The interface and queue.
    pub iface: String,
    /// The queue.
    pub queue: u32,
    /// Whether the socket was bound in zero-copy mode.
    pub zerocopy: bool,
    /// Why it was not, when the driver refused.
    pub zerocopy_refused: Option<String>,
    /// Where the XDP program ran ("native", "generic").
    pub xdp_mode: Option<&'static str>,
    /// Frames, and `XDP_STATISTICS`.
    pub stats: XskStats,
    /// Frames redirected that were not an intact IPv4/UDP datagram (counted, skipped).
    pub malformed: u64,
    /// Frames for the port but another destination address (counted, skipped).
    pub other_address: u64,
    /// Datagrams that reached the stack's socket instead (not redirected), bytes.
    pub unsteered_bytes: u64,
}

/// The running totals of one receive.
struct Totals<'w> {
    check: Option<DatagramCheck>,
    sink: Option<&'w mut dyn Write>,
    bytes: u64,
    datagrams: u64,
    first: Option<Instant>,
    last: Option<Instant>,
}

impl Totals<'_> {
    fn datagram(&mut self, payload: &[u8]) -> Result<()> {
        if let Some(c) = self.check.as_mut() {
            c.datagram(payload).map_err(Error::Verify)?;
        }
        if let Some(s) = self.sink.as_deref_mut() {
            s.write_all(payload)
                .map_err(|e| Error::io("writing received data", e))?;
        }
        let now = Instant::now();
        self.first.get_or_insert(now);
        self.last = Some(now);
        self.bytes += payload.len() as u64;
        self.datagrams += 1;
        Ok(())
    }
}

fn bind_udp(addr: SocketAddr) -> Result<UdpSocket> {
    UdpSocket::bind(addr).map_err(|e| match e.kind() {
        std::io::ErrorKind::AddrInUse => Error::io(
            format!("bind UDP {addr}: address in use (pick another --listen port)"),
            e,
        ),
        std::io::ErrorKind::AddrNotAvailable => Error::NotLocalAddress { addr },
        std::io::ErrorKind::PermissionDenied if addr.port() < 1024 => Error::io(
            format!("bind UDP {addr}: a port below 1024 needs root (CAP_NET_BIND_SERVICE; net.ipv4.ip_unprivileged_port_start): listen on a port of 1024 or above, or run it as root"),
            e,
        ),
        _ => Error::io(format!("bind UDP {addr}"), e),
    })
}

/// How often `recv --rx af-xdp` reads the kernel's drop count while it waits.
const DROPS_READ_EVERY: Duration = Duration::from_millis(500);

/// The line that says the kernel dropped `new` datagrams (`total` so far) on an AF_XDP socket.
fn drops_line(new: u64, total: u64, iface: &str, queue: u32, limits: &XskLimits) -> String {
    format!(
        "the kernel dropped {new} datagram(s) for {iface} queue {queue} ({total} so far, XDP_STATISTICS rx_dropped): a packet larger than one AF_XDP frame ({} B, a UDP payload of at most {} B) is dropped, not received: send datagrams of at most {} B (zcnet send --size {})",
        limits.frame_size, limits.max_payload, limits.max_payload, limits.max_payload
    )
}

impl UdpReceiver {
    /// Binds the UDP socket (copy), or the AF_XDP socket and its XDP program for the port
    /// (af-xdp, zero-copy where the driver allows, else copy; the UDP port is also held in the
    /// stack so that no other socket takes it).
    pub fn open(cfg: &UdpRecvConfig) -> Result<UdpReceiver> {
        let inner = match &cfg.mode {
            UdpRxMode::Copy => {
                let sock = bind_udp(cfg.listen)?;
                let rcvbuf = zcnet::os::sock::set_recv_buffer(sock.as_raw_fd(), SOCKET_RCVBUF)
                    .map_err(|e| Error::io("SO_RCVBUF", e))?;
                sock.set_nonblocking(true)
                    .map_err(|e| Error::io("O_NONBLOCK", e))?;
                Inner::Socket { sock, rcvbuf }
            }
            UdpRxMode::AfXdp { iface, queue } => {
                let SocketAddr::V4(v4) = cfg.listen else {
                    return Err(Error::invalid_input(format!(
                        "--rx af-xdp receives IPv4/UDP: --listen {} is IPv6; give an IPv4 address or 0.0.0.0:PORT",
                        cfg.listen
                    )));
                };
                if v4.port() == 0 {
                    return Err(Error::invalid_input(
                        "--rx af-xdp needs a fixed port to redirect: --listen ADDR:PORT with a port other than 0",
                    ));
                }
                let limits = XskLimits::of(iface)?;
                let stack = bind_udp(cfg.listen)?;
                stack
                    .set_nonblocking(true)
                    .map_err(|e| Error::io("O_NONBLOCK", e))?;
                let mut x = XskConfig::new(*queue);
                x.frame_size = limits.frame_size;
                x.rx_frames = RX_FRAMES;
                x.tx_frames = 0;
                x.ring_size = RX_FRAMES;
                x.rx_port = Some(v4.port());
                let (xsk, zerocopy_refused) = open_xsk(iface, cfg.memory, &x)?;
                Inner::Xsk {
                    xsk: Box::new(xsk),
                    frames: Vec::with_capacity(BATCH),
                    stack,
                    ip: (!v4.ip().is_unspecified()).then_some(*v4.ip()),
                    port: v4.port(),
                    zerocopy_refused,
                    limits,
                    dropped_said: 0,
                    dropped_read: Instant::now(),
                }
            }
        };
        let listen = match &inner {
            Inner::Socket { sock, .. } => sock.local_addr(),
            Inner::Xsk { stack, .. } => stack.local_addr(),
        }
        .map_err(|e| Error::io("getsockname", e))?;
        Ok(UdpReceiver {
            inner,
            listen,
            buf: vec![0u8; 65536],
        })
    }

    /// The address received on (with the port the kernel chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listen
    }

    /// Why the zero-copy bind was refused (af-xdp), if it was.
    pub fn zerocopy_refused(&self) -> Option<&str> {
        match &self.inner {
            Inner::Xsk {
                zerocopy_refused, ..
            } => zerocopy_refused.as_deref(),
            Inner::Socket { .. } => None,
        }
    }

    /// One line on how datagrams are received.
    pub fn describe(&self) -> String {
        match &self.inner {
            Inner::Socket { rcvbuf, .. } => format!(
                "copy: a UDP socket on {} (receive buffer {rcvbuf} B)",
                self.listen
            ),
            Inner::Xsk { xsk, port, .. } => format!(
                "af-xdp: UDP port {port} on {} queue {}, {} mode, {} XDP program {}; other packets go on to the stack",
                xsk.iface(),
                xsk.config().queue,
                if xsk.is_zerocopy().unwrap_or(false) {
                    "zero-copy"
                } else {
                    "copy"
                },
                xsk.xdp_mode().unwrap_or("no"),
                xsk.xdp_prog_id().map_or("?".into(), |i| i.to_string()),
            ),
        }
    }

    /// Receives until `cfg.bytes` have arrived, nothing has for `cfg.idle` after the first
    /// datagram, or SIGINT/SIGTERM ([`Stop::Interrupted`]: the report is still returned).
    /// Each datagram is checked with `cfg.verify` (a mismatch is [`Error::Verify`]) and written
    /// to `sink`.
    pub fn run(
        &mut self,
        cfg: &UdpRecvConfig,
        sink: Option<&mut dyn Write>,
    ) -> Result<UdpRecvReport> {
        let mut t = Totals {
            check: cfg.verify.map(DatagramCheck::new),
            sink,
            bytes: 0,
            datagrams: 0,
            first: None,
            last: None,
        };
        let mut malformed = 0u64;
        let mut other_address = 0u64;
        let mut unsteered = 0u64;
        let stop = loop {
            if cfg.bytes.is_some_and(|b| t.bytes >= b) {
                break Stop::Bytes;
            }
            if crate::interrupt::interrupted() {
                break Stop::Interrupted;
            }
            // Wait for at most what is left of the idle time once data has come.
            let wait = t.last.map(|l| cfg.idle.saturating_sub(l.elapsed()));
            if wait.is_some_and(|w| w.is_zero()) {
                break Stop::Idle;
            }
            let r = match &mut self.inner {
                Inner::Socket { sock, .. } => {
                    recv_socket(sock, &mut self.buf, &mut t, wait, cfg.bytes)
                }
                Inner::Xsk {
                    xsk,
                    frames,
                    stack,
                    ip,
                    port,
                    limits,
                    dropped_said,
                    dropped_read,
                    ..
                } => {
                    // Datagrams the kernel drops (a frame larger than the UMEM frame, most
                    // often) never arrive: said as they happen, not only in the totals.
                    if dropped_read.elapsed() >= DROPS_READ_EVERY {
                        *dropped_read = Instant::now();
                        let dropped = xsk.stats()?.kernel.rx_dropped;
                        if dropped > *dropped_said {
                            crate::eoutln!(
                                "zcnet recv: {}",
                                drops_line(
                                    dropped - *dropped_said,
                                    dropped,
                                    xsk.iface(),
                                    xsk.config().queue,
                                    limits
                                )
                            );
                            *dropped_said = dropped;
                        }
                    }
                    // Datagrams the XDP program did not take: read and counted, not lost.
                    let before = t.bytes;
                    let r = recv_socket(stack, &mut self.buf, &mut t, Some(Duration::ZERO), None);
                    unsteered += t.bytes - before;
                    r.and_then(|()| {
                        let w = wait
                            .unwrap_or(Duration::from_millis(100))
                            .min(Duration::from_millis(100));
                        recv_xsk(
                            xsk,
                            frames,
                            &mut t,
                            w,
                            (*ip, *port),
                            &mut malformed,
                            &mut other_address,
                        )
                    })
                }
            };
            match r {
                Ok(()) => {}
                Err(Error::Interrupted) => break Stop::Interrupted,
                Err(e) => return Err(e),
            }
        };
        let seconds = match (t.first, t.last) {
            (Some(f), Some(l)) => l.duration_since(f).as_secs_f64(),
            _ => 0.0,
        };
        let socket = match &self.inner {
            Inner::Socket { sock, rcvbuf } => Some((
                *rcvbuf,
                u64::from(
                    zcnet::os::sock::socket_drops(sock.as_raw_fd())
                        .map_err(|e| Error::io("SO_MEMINFO", e))?,
                ),
            )),
            Inner::Xsk { .. } => None,
        };
        let xsk = match &self.inner {
            Inner::Xsk {
                xsk,
                zerocopy_refused,
                ..
            } => Some(XskRecvAccount {
                iface: xsk.iface().to_string(),
                queue: xsk.config().queue,
                zerocopy: xsk.is_zerocopy()?,
                zerocopy_refused: zerocopy_refused.clone(),
                xdp_mode: xsk.xdp_mode(),
                stats: xsk.stats()?,
                malformed,
                other_address,
                unsteered_bytes: unsteered,
            }),
            Inner::Socket { .. } => None,
        };
        Ok(UdpRecvReport {
            mode: cfg.mode.name(),
            bytes: t.bytes,
            datagrams: t.datagrams,
            seconds,
            verified: t.check.is_some() && t.bytes > 0,
            missing_bytes: t.check.as_ref().map(DatagramCheck::missing_bytes),
            late: t.check.as_ref().map(DatagramCheck::late),
            stop,
            socket,
            xsk,
        })
    }
}

/// Reads what the socket has (up to `limit` bytes in all); when it has nothing, waits for it up
/// to `wait` (`None`: until something comes or SIGINT/SIGTERM).
fn recv_socket(
    sock: &UdpSocket,
    buf: &mut [u8],
    t: &mut Totals<'_>,
    wait: Option<Duration>,
    limit: Option<u64>,
) -> Result<()> {
    let mut got = false;
    loop {
        if limit.is_some_and(|l| t.bytes >= l) {
            return Ok(());
        }
        match sock.recv(buf) {
            Ok(n) => {
                got = true;
                t.datagram(&buf[..n])?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                if crate::interrupt::interrupted() {
                    return Err(Error::Interrupted);
                }
            }
            // An ICMP error for an earlier datagram (connection refused): not data.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
            Err(e) => return Err(Error::io("recv (UDP)", e)),
        }
    }
    if got || wait.is_some_and(|w| w.is_zero()) {
        return Ok(());
    }
    match zcnet::os::wait_fd(sock.as_fd(), libc::POLLIN, wait) {
        Ok(Wake::Interrupted) => Err(Error::Interrupted),
        Ok(_) => Ok(()),
        Err(e) => Err(Error::io("poll (UDP socket)", e)),
    }
}

/// Takes what the RX ring has (waiting up to `wait` for the first), parses each frame and
/// hands the datagrams for `(ip, port)` on; the frames go back to the fill ring.
fn recv_xsk(
    xsk: &mut Xsk,
    frames: &mut Vec<RxFrame>,
    t: &mut Totals<'_>,
    wait: Duration,
    (ip, port): (Option<Ipv4Addr>, u16),
    malformed: &mut u64,
    other_address: &mut u64,
) -> Result<()> {
    xsk.recv(frames, BATCH, wait)?;
    let mut result = Ok(());
    for f in frames.drain(..) {
        if result.is_err() {
            continue;
        }
        // A datagram from the local stack over a device with checksum offload carries only
        // the pseudo-header sum (CHECKSUM_PARTIAL): the pattern checks the payload instead.
        match udp_frame::parse_udp_partial_csum(f.data()) {
            Ok(p) if p.dst_port != port => *other_address += 1,
            Ok(p) if ip.is_some_and(|a| a != p.dst) => *other_address += 1,
            Ok(p) => result = t.datagram(p.payload),
            Err(_) => *malformed += 1,
        }
    }
    result
}

impl UdpRecvReport {
    /// Payload bytes the kernel placed without a copy (AF_XDP zero-copy bind only).
    pub fn zerocopy_bytes(&self) -> u64 {
        match &self.xsk {
            Some(x) if x.zerocopy => self.bytes - x.unsteered_bytes,
            _ => 0,
        }
    }

    /// The human summary (one line).
    pub fn summary(&self) -> String {
        let mut s = format!(
            "{} B in {} datagrams in {:.2} s ({:.0} MB/s) with {}",
            self.bytes,
            self.datagrams,
            self.seconds,
            mb_per_s(self.bytes, self.seconds),
            self.mode
        );
        match (&self.socket, &self.xsk) {
            (Some((rcvbuf, drops)), _) => s += &format!(
                " (a UDP socket: the kernel copied each datagram out): receive buffer {rcvbuf} B, the kernel dropped {drops} datagrams for this socket"
            ),
            (_, Some(x)) => {
                let k = &x.stats.kernel;
                s += &format!(
                    " ({}, {} XDP on {} queue {}): {} frames; kernel: rx_dropped {}, RX ring full {}x, fill ring empty {}x, {} invalid RX descriptors; {} malformed, {} for other addresses, {} B through the stack (not redirected)",
                    if x.zerocopy {
                        "AF_XDP zero-copy mode: the NIC wrote into the UMEM, zero copy"
                    } else {
                        "AF_XDP copy mode: the kernel copied each packet into the UMEM, not zero copy"
                    },
                    x.xdp_mode.unwrap_or("no"),
                    x.iface,
                    x.queue,
                    x.stats.rx_frames,
                    k.rx_dropped,
                    k.rx_ring_full,
                    k.rx_fill_ring_empty_descs,
                    k.rx_invalid_descs,
                    x.malformed,
                    x.other_address,
                    x.unsteered_bytes
                );
            }
            _ => {}
        }
        match (self.missing_bytes, self.late) {
            (Some(_), Some(_)) if !self.verified => {
                s += "; nothing to verify: 0 B of payload arrived";
            }
            (Some(m), Some(l)) => {
                s += &format!("; pattern verified, {m} B missing, {l} datagrams late");
            }
            _ => {}
        }
        s
    }

    /// The `--json` document: the keys of `zcnet recv --json` and UDP's own.
    pub fn to_json(&self, requested: &str) -> Value {
        let mut fallbacks = Vec::new();
        if let Some(r) = self.xsk.as_ref().and_then(|x| x.zerocopy_refused.as_ref()) {
            fallbacks.push(json!({"tried": "af-xdp-zerocopy", "reason": r}));
        }
        let zc = self.zerocopy_bytes();
        json!({
            "rx": self.mode,
            "requested": requested,
            "proto": "udp",
            "fallbacks": fallbacks,
            "bytes": self.bytes,
            "reads": self.datagrams,
            "datagrams": self.datagrams,
            "seconds": self.seconds,
            "verified": self.verified,
            "missing_bytes": self.missing_bytes,
            "late": self.late,
            "stop": match self.stop {
                Stop::Bytes => "bytes",
                Stop::Idle => "idle",
                Stop::Interrupted => "interrupted",
            },
            "zerocopy_bytes": zc,
            "copied_bytes": self.bytes - zc,
            "device_bytes": 0,
            "starved": self.xsk.as_ref().map_or(0, |x| x.stats.kernel.rx_fill_ring_empty_descs),
            "rearms": 0,
            "linear_fallbacks": 0,
            "unsteered": self.xsk.as_ref().map_or(0, |x| x.unsteered_bytes),
            "socket": self.socket.map(|(rcvbuf, drops)| json!({"rcvbuf": rcvbuf, "drops": drops})),
            "af_xdp": self.xsk.as_ref().map(|x| json!({
                "bind": if x.zerocopy { "zero-copy" } else { "copy" },
                "zerocopy_refused": x.zerocopy_refused,
                "iface": x.iface,
                "queue": x.queue,
                "xdp_mode": x.xdp_mode,
                "frames": x.stats.rx_frames,
                "malformed": x.malformed,
                "other_address": x.other_address,
                "xdp_statistics": kernel_json(&x.stats.kernel),
            })),
        })
    }
}
