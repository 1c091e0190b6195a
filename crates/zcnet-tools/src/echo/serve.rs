//! One server thread's loop: the connections it owns, what each has read and still has to echo,
//! and how a connection ends (its summary, or its failure).

use super::*;

pub(super) fn serve(
    cfg: EchoConfig,
    stop: Arc<AtomicBool>,
    live: Arc<Live>,
    ready: mpsc::Sender<Result<Ready, StartError>>,
) -> EchoReport {
    let mut report = EchoReport {
        requested: cfg.rx.mode,
        mode: cfg.rx.mode,
        fallbacks: Vec::new(),
        cpu: cfg.cpu,
        accepted: 0,
        bytes_received: 0,
        bytes_echoed: 0,
        send_calls: 0,
        partial_sends: 0,
        outbox_bytes: 0,
        outbox_peak: 0,
        polls: 0,
        clean_closes: 0,
        closed_at_stop: 0,
        failures: Vec::new(),
        connections: Vec::new(),
        accept_errors: 0,
        rx: RxStats::default(),
        cpu_seconds: 0.0,
        seconds: 0.0,
        held_at_stop: 0,
        open_at_stop: 0,
        error: None,
    };
    let (rx, addr, acceptor, accepted) = match setup(&cfg, &stop, &live) {
        Ok(x) => x,
        Err(e) => {
            let _ = ready.send(Err(e));
            return report;
        }
    };
    report.mode = rx.mode();
    report.fallbacks = rx.fallbacks().to_vec();
    let _ = ready.send(Ok(Ready {
        addr,
        mode: rx.mode(),
        fallbacks: rx.fallbacks().to_vec(),
    }));
    let mut server = Server {
        rx,
        conns: HashMap::new(),
        pending: Vec::new(),
        doomed: Vec::new(),
        finished: Vec::new(),
        cfg: &cfg,
        report,
    };
    let cpu0 = zcnet::os::thread_cpu_seconds();
    let t0 = Instant::now();
    server.run(&stop, &live, &accepted);
    server.report.cpu_seconds = zcnet::os::thread_cpu_seconds() - cpu0;
    server.report.seconds = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    let _ = acceptor.join();
    // Streams accepted but never handed over are closed here.
    while let Ok((s, _)) = accepted.try_recv() {
        server.report.accepted += 1;
        server.report.closed_at_stop += 1;
        drop(s);
    }
    server.teardown();
    live.open.store(0, Ordering::Relaxed);
    server.report.accept_errors = live.accept_errors.load(Ordering::Relaxed);
    server.report
}

/// One connection's echo state.
#[derive(Debug)]
struct Conn {
    fd: RawFd,
    peer: Option<SocketAddr>,
    out: Vec<u8>,
    out_off: usize,
    bytes_in: u64,
    bytes_out: u64,
    outbox_peak: usize,
    eof: bool,
    /// Last write progress (or when the outbox last became non-empty).
    since: Instant,
}

impl Conn {
    fn pending(&self) -> usize {
        self.out.len() - self.out_off
    }
}

type Fail = (FailKind, String);

fn send_failure(e: io::Error) -> Fail {
    let why = match e.raw_os_error() {
        Some(libc::ECONNRESET) | Some(libc::EPIPE) => {
            format!("reset by the peer while echoing ({e})")
        }
        _ => format!("send: {e}"),
    };
    (FailKind::Send, why)
}

struct Server<'a> {
    rx: Receiver,
    conns: HashMap<ConnId, Conn>,
    /// Connections with a non-empty outbox.
    pending: Vec<ConnId>,
    /// Connections to close as failed.
    doomed: Vec<(ConnId, Fail)>,
    /// Connections to close cleanly (EOF seen, echo flushed).
    finished: Vec<ConnId>,
    cfg: &'a EchoConfig,
    report: EchoReport,
}

impl Server<'_> {
    fn run(
        &mut self,
        stop: &AtomicBool,
        live: &Live,
        accepted: &mpsc::Receiver<(TcpStream, SocketAddr)>,
    ) {
        let mut events = Vec::new();
        loop {
            if stop.load(Ordering::Relaxed) || crate::interrupt::interrupted() {
                break;
            }
            while let Ok((s, peer)) = accepted.try_recv() {
                self.add(s, peer);
            }
            let timeout = if self.pending.is_empty() {
                self.cfg.idle_poll
            } else {
                self.cfg.flush_poll
            };
            if let Err(e) = self.rx.poll(&mut events, timeout) {
                self.report.error = Some(e.to_string());
                break;
            }
            self.report.polls += 1;
            self.handle(&events);
            // Dropping the events gives the buffers back (recycled at the next poll).
            events.clear();
            self.flush_pending();
            self.apply_closes();
            live.accepted.store(self.report.accepted, Ordering::Relaxed);
            live.open.store(self.conns.len() as u64, Ordering::Relaxed);
            live.failed
                .store(self.report.failures.len() as u64, Ordering::Relaxed);
            live.clean
                .store(self.report.clean_closes, Ordering::Relaxed);
            live.echoed
                .store(self.report.bytes_echoed, Ordering::Relaxed);
            live.polls.store(self.report.polls, Ordering::Relaxed);
        }
    }

    fn add(&mut self, s: TcpStream, peer: SocketAddr) {
        self.report.accepted += 1;
        // Echo segments go out at once (no Nagle wait for the ACK of the previous one).
        let _ = s.set_nodelay(true);
        let fd = s.as_raw_fd();
        if let Some(idle) = self.cfg.keepalive {
            let _ = zcnet::os::set_tcp_keepalive(fd, idle, Duration::from_secs(1), 2);
        }
        if let Some(t) = self.cfg.user_timeout {
            let _ = zcnet::os::set_tcp_user_timeout(fd, t);
        }
        if let Some(b) = self.cfg.send_buffer {
            let _ = zcnet::os::sock::set_send_buffer(fd, b);
        }
        match self.rx.add(s) {
            Ok(id) => {
                self.conns.insert(
                    id,
                    Conn {
                        fd,
                        peer: Some(peer),
                        out: Vec::new(),
                        out_off: 0,
                        bytes_in: 0,
                        bytes_out: 0,
                        outbox_peak: 0,
                        eof: false,
                        since: Instant::now(),
                    },
                );
            }
            Err(e) => self.report.failures.push(ConnFailure {
                conn: ConnId(0),
                peer: Some(peer),
                kind: FailKind::Add,
                reason: e.into(),
                bytes_in: 0,
                bytes_out: 0,
            }),
        }
    }

    fn handle(&mut self, events: &[RxEvent]) {
        let mut i = 0;
        while i < events.len() {
            match &events[i] {
                RxEvent::Data(b) => {
                    let c = b.conn();
                    let mut j = i + 1;
                    while j < events.len()
                        && matches!(&events[j], RxEvent::Data(b2) if b2.conn() == c)
                    {
                        j += 1;
                    }
                    let doomed = self.doomed.iter().any(|(d, _)| *d == c);
                    if let (Some(conn), false) = (self.conns.get_mut(&c), doomed) {
                        let was_pending = conn.pending() > 0;
                        let reader = self.cfg.device_reader.as_ref();
                        match echo(&self.rx, reader, conn, &events[i..j], &mut self.report) {
                            Ok(()) => {
                                let p = conn.pending();
                                conn.outbox_peak = conn.outbox_peak.max(p);
                                self.report.outbox_peak = self.report.outbox_peak.max(p);
                                if p > self.cfg.outbox_cap {
                                    let why = format!(
                                        "the peer is not reading: {p} B waiting to be echoed exceed the outbox cap of {} B",
                                        self.cfg.outbox_cap
                                    );
                                    self.doomed.push((c, (FailKind::OutboxFull, why)));
                                } else if p > 0 && !was_pending {
                                    self.pending.push(c);
                                }
                            }
                            Err(f) => self.doomed.push((c, f)),
                        }
                    }
                    i = j;
                }
                RxEvent::Eof(c) => {
                    if let Some(conn) = self.conns.get_mut(c) {
                        conn.eof = true;
                        if conn.pending() == 0 {
                            self.finished.push(*c);
                        }
                    }
                    i += 1;
                }
                RxEvent::Failed(c, e) => {
                    self.doomed.push((*c, (FailKind::Receive, e.to_string())));
                    i += 1;
                }
            }
        }
    }

    fn flush_pending(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut k = 0;
        while k < self.pending.len() {
            let c = self.pending[k];
            let Some(conn) = self.conns.get_mut(&c) else {
                self.pending.swap_remove(k);
                continue;
            };
            if let Err(f) = flush(conn, &mut self.report) {
                self.doomed.push((c, f));
                self.pending.swap_remove(k);
                continue;
            }
            if conn.pending() == 0 {
                if conn.eof {
                    self.finished.push(c);
                }
                self.pending.swap_remove(k);
                continue;
            }
            if now.duration_since(conn.since) > self.cfg.stall_timeout {
                let why = format!(
                    "no write progress for {:.1} s with {} B waiting to be echoed",
                    now.duration_since(conn.since).as_secs_f64(),
                    conn.pending()
                );
                self.doomed.push((c, (FailKind::Stalled, why)));
                self.pending.swap_remove(k);
                continue;
            }
            k += 1;
        }
    }

    fn apply_closes(&mut self) {
        for c in std::mem::take(&mut self.finished) {
            if self.doomed.iter().any(|(d, _)| *d == c) {
                continue;
            }
            if let Some(conn) = self.conns.remove(&c) {
                self.rx.close(c);
                self.report.clean_closes += 1;
                self.report
                    .connections
                    .push(summary(c, &conn, ConnEnd::Clean));
            }
        }
        for (c, (kind, reason)) in std::mem::take(&mut self.doomed) {
            let Some(conn) = self.conns.remove(&c) else {
                continue;
            };
            self.pending.retain(|&p| p != c);
            self.rx.close(c);
            self.report
                .connections
                .push(summary(c, &conn, ConnEnd::Failed(kind)));
            self.report.failures.push(ConnFailure {
                conn: c,
                peer: conn.peer,
                kind,
                reason: reason.into(),
                bytes_in: conn.bytes_in,
                bytes_out: conn.bytes_out,
            });
        }
    }

    /// Closes everything and waits (up to 2 s) until the receiver has let go of every socket
    /// and buffer.
    fn teardown(&mut self) {
        let ids: Vec<ConnId> = self.conns.keys().copied().collect();
        for c in ids {
            if let Some(conn) = self.conns.remove(&c) {
                self.report
                    .connections
                    .push(summary(c, &conn, ConnEnd::Stopped));
            }
            self.rx.close(c);
            self.report.closed_at_stop += 1;
        }
        self.pending.clear();
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut events = Vec::new();
        loop {
            let r = self.rx.poll(&mut events, Duration::from_millis(5));
            events.clear();
            if r.is_err() || Instant::now() >= deadline {
                break;
            }
            if self.rx.closing() == 0 {
                // Buffers dropped just now go back with one more poll.
                let _ = self.rx.poll(&mut events, Duration::ZERO);
                events.clear();
                if self.rx.held() == 0 {
                    break;
                }
            }
        }
        self.report.rx = self.rx.stats();
        self.report.held_at_stop = self.rx.held();
        self.report.open_at_stop = self.rx.connections() + self.rx.closing();
    }
}

fn summary(c: ConnId, conn: &Conn, end: ConnEnd) -> ConnSummary {
    ConnSummary {
        conn: c,
        peer: conn.peer,
        bytes_in: conn.bytes_in,
        bytes_out: conn.bytes_out,
        outbox_peak: conn.outbox_peak,
        end,
    }
}

/// Echoes one connection's consecutive buffers: one `sendmsg` from the lent buffers when its
/// outbox is empty; whatever the socket does not take is copied to the outbox.
fn echo(
    rx: &Receiver,
    reader: Option<&DeviceReader>,
    conn: &mut Conn,
    group: &[RxEvent],
    st: &mut EchoReport,
) -> Result<(), Fail> {
    if let Some(reader) = reader {
        let device = |ev: &RxEvent| matches!(ev, RxEvent::Data(b) if b.device().is_some());
        if group.iter().any(device) {
            return echo_staged(rx, reader, conn, group, st);
        }
    }
    if conn.pending() > 0 {
        flush(conn, st)?;
    }
    let mut slices: [&[u8]; SEND_IOVECS] = [&[]; SEND_IOVECS];
    for chunk in group.chunks(SEND_IOVECS) {
        let mut n = 0;
        let mut total = 0usize;
        for ev in chunk {
            if let RxEvent::Data(b) = ev {
                let Some(bytes) = rx.bytes(b) else {
                    return Err((
                        FailKind::DeviceMemory,
                        "data landed in device memory, which the CPU cannot echo: use a host-memory mode".into(),
                    ));
                };
                slices[n] = bytes;
                n += 1;
                total += bytes.len();
            }
        }
        conn.bytes_in += total as u64;
        st.bytes_received += total as u64;
        let mut sent = 0usize;
        if conn.pending() == 0 {
            sent = loop {
                match send_vectored(conn.fd, &slices[..n], libc::MSG_DONTWAIT) {
                    Ok(k) => break k,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break 0,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(send_failure(e)),
                }
            };
            st.send_calls += 1;
            conn.bytes_out += sent as u64;
            st.bytes_echoed += sent as u64;
            if sent < total {
                st.partial_sends += 1;
                conn.since = Instant::now();
            }
        }
        if sent < total {
            queue_unsent(&slices[..n], sent, &mut conn.out);
            st.outbox_bytes += (total - sent) as u64;
        }
    }
    Ok(())
}

/// Echoes a group that has data in device memory: every buffer, in order, goes to the outbox
/// (device data read back through `reader`), then the outbox is flushed.
fn echo_staged(
    rx: &Receiver,
    reader: &DeviceReader,
    conn: &mut Conn,
    group: &[RxEvent],
    st: &mut EchoReport,
) -> Result<(), Fail> {
    let mut total = 0usize;
    for ev in group {
        let RxEvent::Data(b) = ev else { continue };
        if let Some(bytes) = rx.bytes(b) {
            conn.out.extend_from_slice(bytes);
            total += bytes.len();
        } else if let Some(d) = b.device() {
            let start = conn.out.len();
            conn.out.resize(start + d.len, 0);
            (reader.0)(d.offset, &mut conn.out[start..]).map_err(|e| {
                conn.out.truncate(start);
                (
                    FailKind::DeviceMemory,
                    format!(
                        "reading {} B of device memory back at offset {} to echo them: {e}",
                        d.len, d.offset
                    ),
                )
            })?;
            total += d.len;
        }
    }
    conn.bytes_in += total as u64;
    st.bytes_received += total as u64;
    st.outbox_bytes += total as u64;
    flush(conn, st)
}

/// Appends to `out` what a vectored send of `slices` left unsent when the socket took `sent`
/// bytes (the tail from byte `sent` on), and returns how many bytes it appended: the total
/// minus `sent`, or 0 if `sent` covers everything.
///
/// `sent` is what the kernel answered; this and [`check_response`] are the echo protocol's only
/// handling of what the kernel or the peer says, kept pure so that fuzz/ (target `echo`) and
/// the fuzz smoke test drive them with arbitrary values.
pub fn queue_unsent(slices: &[&[u8]], sent: usize, out: &mut Vec<u8>) -> usize {
    let before = out.len();
    let mut skip = sent;
    for s in slices {
        if skip >= s.len() {
            skip -= s.len();
            continue;
        }
        out.extend_from_slice(&s[skip..]);
        skip = 0;
    }
    out.len() - before
}

/// Writes as much of the outbox as the socket takes now.
fn flush(conn: &mut Conn, st: &mut EchoReport) -> Result<(), Fail> {
    while conn.pending() > 0 {
        match zcnet::os::sock::send(conn.fd, &conn.out[conn.out_off..], libc::MSG_DONTWAIT) {
            Ok(k) => {
                st.send_calls += 1;
                conn.out_off += k;
                conn.bytes_out += k as u64;
                st.bytes_echoed += k as u64;
                conn.since = Instant::now();
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(send_failure(e)),
        }
    }
    if conn.pending() == 0 {
        conn.out.clear();
        conn.out_off = 0;
        if conn.out.capacity() > (1 << 20) {
            conn.out.shrink_to(64 << 10);
        }
    } else if conn.out_off >= (1 << 20) && conn.out_off * 2 >= conn.out.len() {
        conn.out.drain(..conn.out_off);
        conn.out_off = 0;
    }
    Ok(())
}
