//! UDP data streams: iperf3's connect handshake, datagrams that carry its header, paced
//! sending through a zcnet [`Sender`] (several datagrams per send with UDP GSO, `--gso`), and a
//! receiver that counts loss, reordering and jitter with [`UdpRecvStats`].
//!
//! Handshake and header: see [`super::proto::udp`] (iperf3 src/iperf_udp.c). The server binds
//! a socket to its port, learns the client's address from its connect datagram, connects the
//! socket to it, binds a fresh one for the next stream, and answers; both ends then hold a
//! connected socket per stream.

use std::cell::Cell;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use zcnet::{Region, Sender, TxConfig};

use crate::sendloop::{End, Fill, Payload, SendLoop};

use super::proto::udp::{
    connect_reply_budget, is_connect_reply, UDP_CONNECT_MSG, UDP_CONNECT_REPLY,
};
use super::proto::{Timestamp, UdpHeader, UdpRecvStats};
use super::streams::{
    failed_setup, pace, sender_end, Job, Notice, PathReport, StreamEnd, UdpRxReport,
};

/// How datagrams are made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpConfig {
    /// `--udp-counters-64bit`: 16-byte headers.
    pub counters_64bit: bool,
    /// `--gso`: hand the kernel up to 64 KB per send, cut into datagrams (UDP_SEGMENT).
    pub gso: bool,
}

/// A UDP stream's datagram counts at its end.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct UdpEnd {
    /// Datagrams sent, or the highest sequence number received.
    pub packets: u64,
    /// Datagrams lost (receiver).
    pub errors: i64,
    /// Jitter, seconds (receiver).
    pub jitter: f64,
    /// Datagrams that arrived out of order (receiver).
    pub out_of_order: u64,
}

/// Sends in flight per UDP stream.
const INFLIGHT: usize = 8;
/// Datagrams per send with `--gso` at most (the kernel's UDP_MAX_SEGMENTS is 64, in 64 KB).
const GSO_MAX_SEGMENTS: usize = 64;
/// How long a receive waits before looking at the test's flags.
const RX_WAIT: Duration = Duration::from_millis(20);
/// A draining UDP receiver stops after this long without a datagram (lost ones never come).
const DRAIN_IDLE: Duration = Duration::from_millis(200);

/// The time as iperf3 stamps datagrams (`gettimeofday`).
fn now_stamp() -> Timestamp {
    let us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    Timestamp::from_micros(us)
}

fn unspecified(v4: bool) -> IpAddr {
    if v4 {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    } else {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    }
}

fn udp_socket(bind: SocketAddr) -> io::Result<Socket> {
    let s = Socket::new(Domain::for_address(bind), Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_address(true)?;
    if bind.is_ipv6() && bind.ip().is_unspecified() {
        s.set_only_v6(false)?;
    }
    s.bind(&SockAddr::from(bind))?;
    Ok(s)
}

/// Client: a UDP stream to the server (`iperf_udp_connect`): connect, send the connect
/// datagram, wait for the reply (in reverse mode up to two data datagrams may come first).
pub fn client_connect(
    server: SocketAddr,
    bind: Option<IpAddr>,
    port: Option<u16>,
    reverse: bool,
    len: u32,
    timeout: Duration,
) -> io::Result<UdpSocket> {
    let local = SocketAddr::new(
        bind.unwrap_or(unspecified(server.is_ipv4())),
        port.unwrap_or(0),
    );
    let s: UdpSocket = udp_socket(local)?.into();
    s.connect(server)?;
    s.send(&UDP_CONNECT_MSG)?;
    s.set_read_timeout(Some(timeout))?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut budget = connect_reply_budget(reverse, len);
    loop {
        let n = s.recv(&mut buf).map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => io::Error::new(
                io::ErrorKind::TimedOut,
                "no UDP connect reply from the server (is UDP to its port blocked?)",
            ),
            _ => e,
        })?;
        if is_connect_reply(&buf[..n]) {
            s.set_read_timeout(None)?;
            return Ok(s);
        }
        budget = budget.checked_sub(n).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "the server's UDP connect reply never came",
            )
        })?;
    }
}

/// Server: binds the socket for the next UDP stream on `listen` (the control port).
pub fn server_bind(listen: SocketAddr) -> io::Result<UdpSocket> {
    Ok(udp_socket(listen)?.into())
}

/// Server: waits for a client's connect datagram on `s`, connects `s` to it, binds the socket
/// for the next stream (`next`), and answers (`iperf_udp_accept`).
pub fn server_accept(
    s: &UdpSocket,
    timeout: Duration,
    next: Option<SocketAddr>,
) -> io::Result<Option<UdpSocket>> {
    s.set_read_timeout(Some(timeout))?;
    let mut buf = [0u8; 64];
    let (_, peer) = s.recv_from(&mut buf)?;
    s.set_read_timeout(None)?;
    s.connect(peer)?;
    let next = next.map(server_bind).transpose()?;
    s.send(&UDP_CONNECT_REPLY)?;
    Ok(next)
}

/// A sending UDP stream: datagrams of `len` bytes, each with iperf3's header, at `-b`.
pub(crate) fn run_sender<E>(job: Job<E>, sock: UdpSocket) -> StreamEnd {
    let udp = job.path.udp.unwrap_or_default();
    let len = job.path.len.max(UdpHeader::len(udp.counters_64bit));
    let mut segs = 1;
    let mut note = None;
    if udp.gso {
        let want = (65_000 / len).clamp(1, GSO_MAX_SEGMENTS);
        match zcnet::os::sock::set_udp_segment(sock.as_raw_fd(), len as u16) {
            Ok(()) => segs = want,
            Err(e) => note = Some(format!("UDP GSO refused ({e}): one datagram per send")),
        }
    }
    let mut cfg = TxConfig::new(job.path.tx);
    cfg.cancel = crate::interrupt::token();
    cfg.buf_size = len * segs;
    cfg.inflight = INFLIGHT;
    let made = Region::for_sender(job.path.memory, &cfg)
        .and_then(|r| Sender::new(zcnet::Socket::from(sock), r, &cfg));
    let mut tx = match made {
        Ok(tx) => tx,
        Err(e) => return failed_setup(&job.notify, job.index, e),
    };
    let (seq, mut last) = (Cell::new(0), None);
    let datagrams = Datagrams {
        len,
        c64: udp.counters_64bit,
        seq: &seq,
        payload: Payload::once(|id| 0x7564_7000 ^ u64::from(id)),
    };
    let result = send_datagrams(&mut tx, &job, datagrams, segs, &mut last);
    let udp = UdpEnd {
        packets: seq.get(),
        ..UdpEnd::default()
    };
    sender_end(&job, tx, result, last, note, None, Some(udp))
}

/// A UDP sender's datagrams: each buffer filled once with payload, then a header stamped on
/// each datagram of a send.
struct Datagrams<'a> {
    len: usize,
    c64: bool,
    /// Datagrams stamped so far: the last sequence number.
    seq: &'a Cell<u64>,
    payload: Payload,
}

/// Sends datagrams until the test stops or the budget (`-n`, `-k`) is spent, at the stream's
/// rate, `segs` datagrams per send; `last` is when the last send returned.
fn send_datagrams<E>(
    tx: &mut Sender,
    job: &Job<E>,
    datagrams: Datagrams<'_>,
    segs: usize,
    last: &mut Option<Instant>,
) -> zcnet::Result<()> {
    let (len, hdr, seq) = (datagrams.len, UdpHeader::len(datagrams.c64), datagrams.seq);
    let sent = SendLoop {
        amount: |_| {
            let mut want = job.shared.budget.take(len * segs);
            if want == 0 {
                return Ok(None);
            }
            // Every datagram carries a whole header, even the last, short one.
            if !want.is_multiple_of(len) && want % len < hdr {
                want += hdr - want % len;
            }
            Ok(Some(want))
        },
        fill: datagrams,
        pace: pace(job, Instant::now()),
        cancelled: || !job.shared.sending(),
        progress: |n| {
            *last = Some(Instant::now());
            job.counters.add_moved(n as u64);
            job.counters.packets.store(seq.get(), Ordering::Relaxed);
        },
    }
    .run(tx)?;
    if sent.end == End::Done {
        job.notify.send(Notice::BudgetSpent(job.index));
    }
    Ok(())
}

impl Fill for Datagrams<'_> {
    /// Fills a buffer once with payload, then stamps a header on each datagram of `want`.
    fn fill(&mut self, buf: &mut zcnet::TxBuf, _offset: u64, want: usize) -> zcnet::Result<usize> {
        self.payload.fill(buf, 0, want)?;
        let bytes = buf.bytes_mut().ok_or(zcnet::Error::NotCpuAccessible)?;
        let sent = now_stamp();
        for start in (0..want).step_by(self.len) {
            self.seq.set(self.seq.get() + 1);
            let h = UdpHeader {
                sent,
                packet_count: self.seq.get(),
            };
            h.write(self.c64, &mut bytes[start..want])
                .map_err(|e| zcnet::Error::invalid_input(e.to_string()))?;
        }
        Ok(want)
    }
}

/// A receiving UDP stream: `recv()` per datagram (zcnet's receivers take TCP streams), its
/// header read for loss and jitter.
pub(crate) fn run_receiver<E>(job: Job<E>, sock: UdpSocket) -> StreamEnd {
    let c64 = job.path.udp.unwrap_or_default().counters_64bit;
    if let Err(e) = sock.set_read_timeout(Some(RX_WAIT)) {
        return failed_setup(
            &job.notify,
            job.index,
            zcnet::Error::io("UDP read timeout", e),
        );
    }
    let mut stats = UdpRecvStats::new();
    let mut buf = vec![0u8; 64 * 1024];
    let (mut bytes, mut last, mut error) = (0u64, None::<Instant>, None);
    let mut drain_since: Option<Instant> = None;
    while !job.shared.abort.load(Ordering::Relaxed) {
        match sock.recv(&mut buf) {
            Ok(n) => {
                bytes += n as u64;
                last = Some(Instant::now());
                if let Ok(h) = UdpHeader::read(&buf[..n], c64) {
                    stats.on_datagram(h.packet_count, h.sent, now_stamp());
                }
                publish(&job, &stats, n);
            }
            Err(e) if is_transient(&e) => {}
            Err(e) => {
                error = Some(format!("UDP receive: {e}"));
                break;
            }
        }
        if job.shared.drain.load(Ordering::Relaxed) {
            let since = *drain_since.get_or_insert_with(Instant::now);
            if last.map_or(since, |l| l.max(since)).elapsed() >= DRAIN_IDLE {
                break;
            }
        }
    }
    if let Some(e) = &error {
        job.notify.send(Notice::Failed(job.index, e.clone()));
    }
    StreamEnd {
        bytes,
        last,
        path: Some(PathReport::UdpRx(UdpRxReport {
            requested: job.path.rx.mode,
            bytes,
        })),
        udp: Some(UdpEnd {
            packets: stats.packets(),
            errors: stats.errors(),
            jitter: stats.jitter(),
            out_of_order: stats.out_of_order(),
        }),
        error,
    }
}

/// A receive that found nothing yet, or an ICMP error for an earlier send to a peer that has
/// closed (the test's end, not this stream's failure).
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock
            | io::ErrorKind::TimedOut
            | io::ErrorKind::Interrupted
            | io::ErrorKind::ConnectionRefused
    )
}

fn publish<E>(job: &Job<E>, stats: &UdpRecvStats, n: usize) {
    let c = &job.counters;
    c.add_moved(n as u64);
    c.packets.store(stats.packets(), Ordering::Relaxed);
    c.lost
        .store(stats.errors().max(0) as u64, Ordering::Relaxed);
    c.jitter.store(stats.jitter().to_bits(), Ordering::Relaxed);
}
