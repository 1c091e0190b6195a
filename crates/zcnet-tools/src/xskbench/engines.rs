//! The benchmark's engines: the AF_XDP and AF_PACKET senders and receivers, their threads, and
//! one measured run (see the parent module).

use super::*;

/// Every thread has its socket open (or one failed): a rendezvous that never waits for a
/// party that gave up.
#[derive(Debug, Default)]
struct Rendezvous {
    parties: u32,
    state: Mutex<(u32, bool)>,
    cv: Condvar,
}

impl Rendezvous {
    /// Arrives (`ok`: this side is ready); returns whether every party is ready.
    fn arrive(&self, ok: bool) -> bool {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.0 += 1;
        st.1 |= !ok;
        self.cv.notify_all();
        while st.0 < self.parties && !st.1 {
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        !st.1
    }
}

/// What the sender thread and the receiver thread share during one run.
#[derive(Debug, Default)]
struct Shared {
    ready: Rendezvous,
    start: OnceLock<Instant>,
    /// Frames sent, once the sender is done (u64::MAX until then).
    sent: AtomicU64,
    /// One side failed: the other stops.
    abort: AtomicBool,
}

/// The AF_XDP side: zcnet-rawbench's raw [`XdpSide`] (as the AF_PACKET side is its
/// `af_packet`), with the interface and mode its errors name.
struct XskSide {
    side: XdpSide,
    dev: String,
    mode: XskBindMode,
}

fn xsk_error(e: io::Error, dev: &str, mode: XskBindMode) -> Error {
    let what = format!("AF_XDP {} bind to queue 0 of {dev}", mode.name());
    match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) if mode == XskBindMode::ZeroCopy => Error::Unsupported {
            what: what.into(),
            source: e,
            remedy: zcnet::Remedy::Other(
                "the driver has no AF_XDP zero-copy support (veth, ifb and lo have none); copy mode works",
            ),
        },
        Some(libc::EPERM) => Error::NotRoot { what: "AF_XDP" },
        Some(libc::ENOBUFS) => Error::io(
            format!("{what}: the UMEM is over RLIMIT_MEMLOCK (raise it with 'ulimit -l')"),
            e,
        ),
        _ => Error::io(what, e),
    }
}

/// A failed step of the AF_XDP side as the bench's error.
fn xdp_error(e: XdpError, dev: &str, mode: XskBindMode) -> Error {
    let XdpError { step, source: e } = e;
    let bpf = |what: String, e: io::Error| match e.raw_os_error() {
        Some(libc::EPERM) => Error::NotRoot {
            what: "loading an XDP program",
        },
        _ => Error::io(what, e),
    };
    match step {
        Step::Umem(len) => Error::io(format!("mmap {len} B for the UMEM"), e),
        Step::Bind => xsk_error(e, dev, mode),
        Step::MapCreate => bpf("BPF_MAP_CREATE (XSKMAP)".into(), e),
        Step::MapSet => bpf("putting the AF_XDP socket in the XSKMAP".into(), e),
        Step::ProgLoad => Error::io("loading the XDP program", e),
        Step::Attach => bpf(format!("attaching the XDP program to {dev}"), e),
        Step::Rings => Error::io("AF_XDP rings", e),
        Step::Kick => Error::io("sendto (AF_XDP transmit)", e),
        Step::Poll => Error::io("poll (AF_XDP)", e),
        Step::Unsent(n) => Error::io(
            format!("{n} frame(s) still not transmitted 2 s after the last was queued"),
            e,
        ),
    }
}

impl XskSide {
    fn open(case: Case, dev: &str, rx: bool) -> Result<XskSide> {
        let mode = if case.mode == Mode::AfXdpZeroCopy {
            XskBindMode::ZeroCopy
        } else {
            XskBindMode::Copy
        };
        let side = XdpSide::open(mode, ifindex(dev)?, rx.then_some(PORT))
            .map_err(|e| xdp_error(e, dev, mode))?;
        Ok(XskSide {
            side,
            dev: dev.to_string(),
            mode,
        })
    }

    fn err(&self, e: XdpError) -> Error {
        xdp_error(e, &self.dev, self.mode)
    }

    /// Sender: takes back completed frames, queues up to [`BATCH`] more from `*seq` on, kicks.
    fn send(&mut self, tmpl: &[u8], seq: &mut u64) -> Result<()> {
        let r = self
            .side
            .send(BATCH, seq, |buf, s| write_frame(buf, tmpl, s));
        r.map_err(|e| self.err(e))
    }

    /// Sender: kicks and completes until every frame queued is sent (at most 2 s); frames
    /// still with the kernel then are an error, not frames sent.
    fn flush(&mut self) -> Result<()> {
        let r = self.side.flush();
        r.map_err(|e| self.err(e))
    }

    /// Receiver: refills, takes what arrived and checks it; waits up to `wait` if nothing had.
    fn receive(&mut self, check: &mut SeqCheck<'_>, wait: Duration) -> Result<()> {
        let r = self.side.receive(wait, |f| check.frame(f));
        r.map_err(|e| self.err(e))
    }
}

fn ifindex(dev: &str) -> Result<u32> {
    zcnet::os::if_index(dev).ok_or_else(|| Error::UnknownInterface {
        given: dev.to_string(),
    })
}

fn packet_error(what: &str, e: io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::EPERM) => Error::NotRoot {
            what: "an AF_PACKET socket",
        },
        _ => Error::io(what.to_string(), e),
    }
}

enum Sender {
    Xsk(Box<XskSide>),
    Mmsg(PacketSocket, Vec<u8>),
    Ring(TxRing),
}

impl Sender {
    fn open(case: Case, dev: &str) -> Result<Sender> {
        Ok(match case.tx {
            TxVariant::Xsk => Sender::Xsk(Box::new(XskSide::open(case, dev, false)?)),
            TxVariant::Sendmmsg | TxVariant::SendmmsgBypass => {
                let s = PacketSocket::open(ifindex(dev)?, Protocol::SendOnly)
                    .map_err(|e| packet_error(&format!("AF_PACKET socket on {dev}"), e))?;
                if case.tx == TxVariant::SendmmsgBypass {
                    s.set_qdisc_bypass(true)
                        .map_err(|e| packet_error("PACKET_QDISC_BYPASS", e))?;
                }
                Sender::Mmsg(s, vec![0u8; BATCH * 2048])
            }
            TxVariant::TxRing | TxVariant::TxRingBypass => {
                let req = RingRequest::tx_v3(1 << 16, 2048, 2048, zcnet::os::page_size())
                    .map_err(|e| Error::invalid_input(e.to_string()))?;
                let r = TxRing::open(ifindex(dev)?, &req, case.tx == TxVariant::TxRingBypass)
                    .map_err(|e| packet_error(&format!("AF_PACKET TX ring on {dev}"), e))?;
                Sender::Ring(r)
            }
        })
    }

    /// Sends up to [`BATCH`] frames from `*seq` on; `*seq` moves past those the kernel took.
    fn send(&mut self, tmpl: &[u8], seq: &mut u64) -> Result<()> {
        match self {
            Sender::Xsk(x) => x.send(tmpl, seq)?,
            Sender::Mmsg(s, buf) => {
                let len = tmpl.len();
                let mut frames: Vec<&[u8]> = Vec::with_capacity(BATCH);
                for (i, chunk) in buf.chunks_mut(2048).enumerate() {
                    write_frame(chunk, tmpl, *seq + i as u64);
                }
                frames.extend(buf.chunks(2048).map(|c| &c[..len]));
                match s.send_batch(&frames) {
                    Ok(m) => *seq += m as u64,
                    // The device dropped the first frame: it was sent, and is lost (the device
                    // counts it, see `tx_dropped`).
                    Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => *seq += 1,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        s.wait(libc::POLLOUT, Duration::from_millis(1))
                            .map_err(|e| Error::io("poll (AF_PACKET send)", e))?;
                    }
                    Err(e) => return Err(Error::io("sendmmsg on AF_PACKET", e)),
                }
            }
            Sender::Ring(r) => {
                let mut n = 0;
                while n < BATCH {
                    let Some(mut slot) = r
                        .next_slot()
                        .map_err(|e| Error::io("AF_PACKET TX ring", e))?
                    else {
                        break;
                    };
                    let len = write_frame(slot.data_mut(), tmpl, *seq);
                    slot.submit(len)
                        .map_err(|e| Error::io("AF_PACKET TX ring", e))?;
                    *seq += 1;
                    n += 1;
                }
                r.kick()
                    .map_err(|e| Error::io("send on the AF_PACKET TX ring", e))?;
                if n == 0 {
                    std::thread::yield_now();
                }
            }
        }
        Ok(())
    }

    /// Waits until the kernel has sent every frame taken.
    fn finish(&mut self) -> Result<()> {
        match self {
            Sender::Xsk(x) => x.flush(),
            Sender::Mmsg(..) => Ok(()),
            Sender::Ring(r) => r
                .flush(Duration::from_secs(2))
                .map(drop)
                .map_err(|e| Error::io("flushing the AF_PACKET TX ring", e)),
        }
    }
}

enum Receiver {
    Xsk(Box<XskSide>),
    Ring(RxRingV3),
    Mmsg(PacketSocket, Vec<u8>, Vec<usize>),
}

const MMSG_SLOT: usize = 2048;

impl Receiver {
    fn open(case: Case, dev: &str) -> Result<Receiver> {
        Ok(match case.rx {
            RxVariant::None => {
                return Err(Error::invalid_input(
                    "a case without a receiver has none to open",
                ))
            }
            RxVariant::Xsk => Receiver::Xsk(Box::new(XskSide::open(case, dev, true)?)),
            RxVariant::TpacketV3 => {
                // 128 blocks of 256 KiB (32 MiB, like the AF_XDP receiver's UMEM), each handed
                // over when full or after 2 ms.
                let req = RingRequest::rx_v3(1 << 18, 128, 2, zcnet::os::page_size())
                    .map_err(|e| Error::invalid_input(e.to_string()))?;
                let r = RxRingV3::open(ifindex(dev)?, Protocol::All, &req)
                    .map_err(|e| packet_error(&format!("AF_PACKET RX ring on {dev}"), e))?;
                Receiver::Ring(r)
            }
            RxVariant::Recvmmsg => {
                let s = PacketSocket::open(ifindex(dev)?, Protocol::All)
                    .map_err(|e| packet_error(&format!("AF_PACKET socket on {dev}"), e))?;
                s.set_ignore_outgoing(true)
                    .map_err(|e| packet_error("PACKET_IGNORE_OUTGOING", e))?;
                s.set_recv_buffer(32 << 20)
                    .map_err(|e| packet_error("SO_RCVBUF", e))?;
                Receiver::Mmsg(s, vec![0u8; BATCH * MMSG_SLOT], vec![0; BATCH])
            }
        })
    }

    /// Takes what has arrived (waiting up to `wait` when nothing has) and checks it.
    fn poll(&mut self, check: &mut SeqCheck<'_>, wait: Duration) -> Result<()> {
        match self {
            Receiver::Xsk(x) => x.receive(check, wait)?,
            Receiver::Ring(r) => {
                let Some(block) = r.next_block() else {
                    r.wait(wait)
                        .map_err(|e| Error::io("poll (AF_PACKET RX ring)", e))?;
                    return Ok(());
                };
                let packets = block.packets().map_err(|e| {
                    Error::io(
                        "AF_PACKET RX ring",
                        io::Error::new(io::ErrorKind::InvalidData, e),
                    )
                })?;
                for p in packets {
                    let p = p.map_err(|e| {
                        Error::io(
                            "AF_PACKET RX ring",
                            io::Error::new(io::ErrorKind::InvalidData, e),
                        )
                    })?;
                    check.frame(p.data);
                }
            }
            Receiver::Mmsg(s, buf, lens) => match s.recv_batch(buf, MMSG_SLOT, lens) {
                Ok(n) => {
                    for (i, &len) in lens.iter().enumerate().take(n) {
                        check.frame(&buf[i * MMSG_SLOT..i * MMSG_SLOT + len]);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    s.wait(libc::POLLIN, wait)
                        .map_err(|e| Error::io("poll (AF_PACKET recvmmsg)", e))?;
                }
                Err(e) => return Err(Error::io("recvmmsg on AF_PACKET", e)),
            },
        }
        Ok(())
    }

    /// What the kernel says it dropped.
    fn kernel_drops(&self) -> Result<u64> {
        Ok(match self {
            Receiver::Xsk(x) => {
                // rx_dropped counts the packets dropped for want of a fill-ring frame too
                // (rx_fill_ring_empty_descs counts the same events again).
                let k = x
                    .side
                    .statistics()
                    .map_err(|e| Error::io("getsockopt(XDP_STATISTICS)", e))?;
                k.rx_dropped + k.rx_ring_full
            }
            Receiver::Ring(r) => u64::from(
                r.socket()
                    .statistics()
                    .map_err(|e| Error::io("PACKET_STATISTICS", e))?
                    .drops,
            ),
            Receiver::Mmsg(s, _, _) => u64::from(
                s.statistics()
                    .map_err(|e| Error::io("PACKET_STATISTICS", e))?
                    .drops,
            ),
        })
    }
}

/// How a receiver that finds nothing waits ([`RxWait::Sleep`]).
pub const SLEEP: Duration = Duration::from_micros(50);

/// How a receiver waits when its ring (or socket) is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxWait {
    /// Sleeps [`SLEEP`] (nanosleep) and looks again: it never waits on the socket, so the
    /// sending CPU, where veth runs the receive path, never has to wake it with an
    /// inter-processor interrupt. The default.
    Sleep,
    /// `poll()` on the socket (up to 1 ms): the kernel wakes the receiver when packets come,
    /// from the sending CPU (per NAPI batch for AF_XDP and `recvmmsg`, per block for
    /// TPACKET_V3).
    Poll,
    /// Looks again at once: the receiver's CPU is busy all the time.
    Spin,
}

impl RxWait {
    /// `sleep`, `poll`, `spin`.
    pub fn name(self) -> &'static str {
        match self {
            RxWait::Sleep => "sleep",
            RxWait::Poll => "poll",
            RxWait::Spin => "spin",
        }
    }

    /// The way named `s`.
    pub fn parse(s: &str) -> Result<RxWait> {
        [RxWait::Sleep, RxWait::Poll, RxWait::Spin]
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| {
                Error::invalid_input(format!("--rx-wait '{s}': use sleep, poll or spin"))
            })
    }
}

/// How long the receiver waits for stragglers after the sender is done (longer than the
/// TPACKET_V3 block timeout).
const DRAIN: Duration = Duration::from_millis(100);

struct TxOut {
    sent: u64,
    seconds: f64,
    cpu: f64,
    device_drops: u64,
}

#[derive(Default)]
struct RxOut {
    received: u64,
    last: Option<Instant>,
    cpu: f64,
    kernel_drops: u64,
    gaps: u64,
    next: u64,
}

fn pin(cpu: usize) -> Result<()> {
    zcnet::os::set_thread_affinity(&[cpu]).map_err(|e| {
        Error::io(
            format!("pinning a thread to CPU {cpu} (sched_setaffinity)"),
            e,
        )
    })
}

/// The transmit drops of `dev` as the calling thread's namespace counts them
/// (`/proc/thread-self/net/dev`, the fourth transmit column): veth counts there the frames its
/// peer could not take (a full backlog or XDP ring), which the sender may never hear of.
fn tx_dropped(dev: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/net/dev").ok()?;
    let line = text.lines().find(|l| {
        l.trim_start()
            .strip_prefix(dev)
            .is_some_and(|r| r.starts_with(':'))
    })?;
    let (_, nums) = line.split_once(':')?;
    nums.split_whitespace().nth(11)?.parse().ok()
}

fn sender_thread(
    (ns, dev): (&str, &str),
    sh: &Shared,
    case: Case,
    tmpl: &[u8],
    duration: Duration,
    cpu: usize,
    count_device_drops: bool,
) -> Result<TxOut> {
    let opened = lab::enter(ns)
        .and_then(|()| pin(cpu))
        .and_then(|()| Sender::open(case, dev));
    if !sh.ready.arrive(opened.is_ok()) {
        return opened.map(|_| TxOut {
            sent: 0,
            seconds: 0.0,
            cpu: 0.0,
            device_drops: 0,
        });
    }
    let mut s = opened?;
    let dropped0 = tx_dropped(dev);
    let cpu0 = zcnet::os::thread_cpu_seconds();
    let start = *sh.start.get_or_init(Instant::now);
    let mut seq = 0u64;
    let r = (|| {
        while start.elapsed() < duration {
            s.send(tmpl, &mut seq)?;
            if crate::interrupt::interrupted() {
                return Err(Error::Interrupted);
            }
            if sh.abort.load(Ordering::Relaxed) {
                break;
            }
        }
        s.finish()
    })();
    let seconds = start.elapsed().as_secs_f64();
    let cpu = zcnet::os::thread_cpu_seconds() - cpu0;
    sh.sent.store(seq, Ordering::Release);
    r?;
    let device_drops = match (count_device_drops, dropped0, tx_dropped(dev)) {
        (true, Some(a), Some(b)) => b.saturating_sub(a),
        _ => 0,
    };
    Ok(TxOut {
        sent: seq,
        seconds,
        cpu,
        device_drops,
    })
}

fn receiver_thread(
    (ns, dev): (&str, &str),
    sh: &Shared,
    case: Case,
    tmpl: &[u8],
    cpu: usize,
    rx_wait: RxWait,
) -> Result<RxOut> {
    let opened = lab::enter(ns)
        .and_then(|()| pin(cpu))
        .and_then(|()| Receiver::open(case, dev));
    let mut check = SeqCheck::new(tmpl);
    let empty = |check: &SeqCheck<'_>| RxOut {
        received: check.received(),
        last: None,
        cpu: 0.0,
        kernel_drops: 0,
        gaps: 0,
        next: 0,
    };
    if !sh.ready.arrive(opened.is_ok()) {
        return opened.map(|_| empty(&check));
    }
    let mut r = opened?;
    let cpu0 = zcnet::os::thread_cpu_seconds();
    let mut last = None;
    let mut done_at: Option<Instant> = None;
    loop {
        let before = check.received();
        let wait = match rx_wait {
            RxWait::Poll => Duration::from_millis(1),
            RxWait::Sleep | RxWait::Spin => Duration::ZERO,
        };
        r.poll(&mut check, wait)?;
        let mut now = Instant::now();
        if check.received() > before {
            last = Some(now);
        } else if rx_wait == RxWait::Sleep {
            std::thread::sleep(SLEEP);
            now = Instant::now();
        }
        if crate::interrupt::interrupted() {
            return Err(Error::Interrupted);
        }
        if sh.abort.load(Ordering::Relaxed) {
            return Ok(empty(&check));
        }
        let sent = sh.sent.load(Ordering::Acquire);
        if sent != u64::MAX {
            if check.received() >= sent {
                break;
            }
            let d = *done_at.get_or_insert(now);
            // Stop once nothing has come for DRAIN after the sender finished.
            if now.duration_since(last.unwrap_or(d).max(d)) >= DRAIN {
                break;
            }
        }
    }
    let cpu = zcnet::os::thread_cpu_seconds() - cpu0;
    if let (n, Some(why)) = check.failures() {
        return Err(Error::io(
            format!("verifying received frames ({n} failed)"),
            io::Error::new(io::ErrorKind::InvalidData, why.to_string()),
        ));
    }
    Ok(RxOut {
        received: check.received(),
        last,
        cpu,
        kernel_drops: r.kernel_drops()?,
        gaps: check.gaps(),
        next: check.next(),
    })
}

fn join<T>(h: std::thread::ScopedJoinHandle<'_, Result<T>>) -> Result<T> {
    h.join()
        .unwrap_or_else(|_| Err(Error::invalid_input("a benchmark thread panicked")))
}

/// One run of `case` on `link`: fresh sockets, the sender sending frames made from `tmpl` for
/// `duration`, the receiver (where the link has one) checking each.
pub fn run_once(
    link: &Link,
    tmpl: &[u8],
    case: Case,
    duration: Duration,
    (tx_cpu, rx_cpu): (usize, usize),
    rx_wait: RxWait,
) -> Result<Run> {
    let receiver = link.rx.as_ref().filter(|_| case.rx != RxVariant::None);
    let sh = Shared {
        ready: Rendezvous {
            parties: if receiver.is_some() { 2 } else { 1 },
            ..Rendezvous::default()
        },
        sent: AtomicU64::new(u64::MAX),
        ..Shared::default()
    };
    let (tx, rx) = std::thread::scope(|s| {
        let rx = receiver.map(|(ns, dev)| {
            s.spawn(|| {
                let r = receiver_thread((ns, dev), &sh, case, tmpl, rx_cpu, rx_wait);
                if r.is_err() {
                    sh.abort.store(true, Ordering::Relaxed);
                }
                r
            })
        });
        let tx = s.spawn(|| {
            let r = sender_thread(
                (&link.tx_ns, link.tx_dev),
                &sh,
                case,
                tmpl,
                duration,
                tx_cpu,
                receiver.is_some(),
            );
            if r.is_err() {
                sh.abort.store(true, Ordering::Relaxed);
                sh.sent.store(0, Ordering::Release);
            }
            r
        });
        let rx = match rx {
            Some(h) => join(h),
            None => Ok(RxOut::default()),
        };
        (join(tx), rx)
    });
    // The interruption, the sender's own error, then the receiver's.
    let (tx, rx) = match (tx, rx) {
        (Err(Error::Interrupted), _) | (_, Err(Error::Interrupted)) => {
            return Err(Error::Interrupted)
        }
        (Err(e), _) | (_, Err(e)) => return Err(e),
        (Ok(t), Ok(r)) => (t, r),
    };
    let start = sh.start.get().copied();
    let rx_seconds = match (start, rx.last) {
        (Some(s), Some(l)) => l.duration_since(s).as_secs_f64(),
        _ => 0.0,
    };
    let run = Run {
        sent: tx.sent,
        received: rx.received,
        tx_seconds: tx.seconds,
        rx_seconds,
        tx_cpu: tx.cpu,
        rx_cpu: rx.cpu,
        kernel_drops: rx.kernel_drops + tx.device_drops,
        gaps: rx.gaps,
    };
    // Every frame is accounted for: received, a gap between received ones, or after the last.
    if run.received > run.sent || rx.next > run.sent {
        return Err(Error::io(
            "counting frames",
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} frames received up to sequence number {} but {} sent",
                    run.received, rx.next, run.sent
                ),
            ),
        ));
    }
    Ok(run)
}
