//! The echo client: closed-loop connections that send requests and check the echoes (see the
//! parent module).

use super::*;

// ------------------------------------------------------------------------------------------
// The client.

/// How much of each response the client checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// The length, and the first and last 16 bytes (which carry the request's connection and
    /// sequence number, so a stale or misplaced response is caught).
    Cheap,
    /// Every byte against the request.
    Full,
}

/// How to run the closed-loop clients.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The server.
    pub addr: SocketAddr,
    /// Network namespace (lab) every client thread enters first.
    pub netns: Option<String>,
    /// Bytes per request (and response).
    pub size: usize,
    /// Connections in all.
    pub connections: usize,
    /// Threads the connections are spread over (each polls its own).
    pub threads: usize,
    /// How long to measure.
    pub duration: Duration,
    /// What to check in each response.
    pub check: Check,
    /// Seed of the request bytes.
    pub seed: u64,
    /// CPUs the client threads may run on (`None`: any).
    pub cpus: Option<Vec<usize>>,
    /// A round trip that takes longer fails its connection (and the drain at the end waits at
    /// most this long).
    pub timeout: Duration,
    /// Connecting fails after this long (a handshake whose SYN was lost on a path that went down
    /// would otherwise wait out the kernel's SYN retries, about two minutes). Keep it above 1 s:
    /// a SYN dropped on a busy machine (a full backlog) is sent again after 1 s.
    pub connect_timeout: Duration,
}

impl ClientConfig {
    /// Defaults: 24 connections over 4 threads, 64 KiB requests, 3 s, cheap check, 5 s timeout
    /// for a round trip and for connecting.
    pub fn new(addr: SocketAddr) -> ClientConfig {
        ClientConfig {
            addr,
            netns: None,
            size: 64 << 10,
            connections: 24,
            threads: 4,
            duration: Duration::from_secs(3),
            check: Check::Cheap,
            seed: 0x2c6e_6574_6563_686f,
            cpus: None,
            timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// What the clients measured.
#[derive(Debug, Clone, Default)]
pub struct ClientReport {
    /// Bytes per request.
    pub size: usize,
    /// Connections that were opened.
    pub connections: usize,
    /// Round trips completed (and checked) inside the measured window.
    pub requests: u64,
    /// Round trips completed after the window (draining), not counted in `requests`.
    pub late: u64,
    /// The measured window, seconds.
    pub seconds: f64,
    /// Every counted round trip's latency, nanoseconds, ascending.
    pub latencies_ns: Vec<u64>,
    /// Bytes checked against the request.
    pub checked_bytes: u64,
    /// Responses that differed from their request.
    pub mismatches: u64,
    /// Connections that failed, and why (one line each).
    pub errors: Vec<String>,
    /// CPU seconds of all client threads.
    pub cpu_seconds: f64,
}

impl ClientReport {
    /// Round trips per second.
    pub fn qps(&self) -> f64 {
        if self.seconds > 0.0 {
            self.requests as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// Gbit/s of request payload (one direction; the responses carry as much back), the
    /// convention of that talk's table (20.6 Kqps × 64 KB ≈ 10 Gbps).
    pub fn gbps(&self) -> f64 {
        self.qps() * self.size as f64 * 8.0 / 1e9
    }

    /// The `p`-th percentile (0..=100) latency in microseconds; `None` without samples.
    pub fn percentile_us(&self, p: f64) -> Option<f64> {
        let n = self.latencies_ns.len();
        if n == 0 {
            return None;
        }
        let rank = ((p / 100.0) * n as f64).ceil() as usize;
        let i = rank.clamp(1, n) - 1;
        Some(self.latencies_ns[i] as f64 / 1e3)
    }
}

/// One client connection.
#[derive(Debug)]
struct ClientConn {
    stream: TcpStream,
    fd: RawFd,
    index: u64,
    req: Vec<u8>,
    seq: u64,
    sent: usize,
    got: usize,
    started: Instant,
    active: bool,
    want_out: bool,
    alive: bool,
}

#[derive(Debug, Default)]
struct ThreadResult {
    requests: u64,
    late: u64,
    lat: Vec<u64>,
    checked: u64,
    mismatches: u64,
    errors: Vec<String>,
    cpu: f64,
    connections: usize,
    seconds: f64,
}

/// Runs `cfg.connections` closed-loop connections over `cfg.threads` threads for
/// `cfg.duration`: each sends a request, reads the whole echo back, checks it, and sends the
/// next. When the window ends, requests in flight finish (not counted), then every connection
/// half-closes and waits for the server's end of stream. A connection that fails is reported in
/// [`ClientReport::errors`]; the others go on. Connecting failures are errors.
pub fn run_clients(cfg: &ClientConfig) -> Result<ClientReport> {
    if cfg.size == 0 || cfg.connections == 0 || cfg.threads == 0 {
        return Err(Error::invalid_input(
            "echo clients: size, connections and threads must be positive",
        ));
    }
    let threads = cfg.threads.min(cfg.connections);
    let barrier = Barrier::new(threads);
    let results: Vec<Result<ThreadResult>> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                // Connections t, t + threads, ...: spread evenly.
                let idx: Vec<u64> = (t..cfg.connections)
                    .step_by(threads)
                    .map(|i| i as u64)
                    .collect();
                let barrier = &barrier;
                sc.spawn(move || client_thread(cfg, idx, barrier))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(Error::io("client thread", io::Error::other("panicked")))
                })
            })
            .collect()
    });
    let mut rep = ClientReport {
        size: cfg.size,
        ..ClientReport::default()
    };
    for r in results {
        let r = r?;
        rep.requests += r.requests;
        rep.late += r.late;
        rep.latencies_ns.extend(r.lat);
        rep.checked_bytes += r.checked;
        rep.mismatches += r.mismatches;
        rep.errors.extend(r.errors);
        rep.cpu_seconds += r.cpu;
        rep.connections += r.connections;
        rep.seconds = rep.seconds.max(r.seconds);
    }
    rep.latencies_ns.sort_unstable();
    Ok(rep)
}

fn client_thread(cfg: &ClientConfig, idx: Vec<u64>, barrier: &Barrier) -> Result<ThreadResult> {
    // Every exit path must reach the barrier once, or the other threads wait forever.
    let setup = (|| -> Result<Vec<ClientConn>> {
        if let Some(ns) = &cfg.netns {
            lab::enter(ns)?;
        }
        if let Some(cpus) = &cfg.cpus {
            zcnet::os::set_thread_affinity(cpus)
                .map_err(|e| Error::io(format!("pinning a client thread to CPUs {cpus:?}"), e))?;
        }
        let pattern = Pattern::new(cfg.seed);
        idx.iter()
            .map(|&i| {
                let stream = net::connect_tcp_within(
                    cfg.addr,
                    Some(cfg.connect_timeout),
                    &crate::interrupt::token(),
                )?;
                let _ = stream.set_nodelay(true);
                let mut req = vec![0u8; cfg.size];
                pattern.fill(i * cfg.size as u64, &mut req);
                Ok(ClientConn {
                    fd: stream.as_raw_fd(),
                    stream,
                    index: i,
                    req,
                    seq: 0,
                    sent: 0,
                    got: 0,
                    started: Instant::now(),
                    active: false,
                    want_out: false,
                    alive: true,
                })
            })
            .collect()
    })();
    barrier.wait();
    let mut conns = setup?;
    let cpu0 = zcnet::os::thread_cpu_seconds();
    let mut res = ThreadResult {
        connections: conns.len(),
        ..ThreadResult::default()
    };
    let mut ep = zcnet::os::epoll::Epoll::new(64).map_err(|e| Error::io("epoll_create1", e))?;
    for (k, c) in conns.iter().enumerate() {
        ep.add(
            c.fd,
            k as u64,
            zcnet::os::epoll::IN | zcnet::os::epoll::RDHUP,
        )
        .map_err(|e| Error::io("epoll_ctl(ADD)", e))?;
    }
    let mut scratch = vec![0u8; cfg.size.min(1 << 20)];
    let t0 = Instant::now();
    let deadline = t0 + cfg.duration;
    for (k, c) in conns.iter_mut().enumerate() {
        start_request(c, &ep, k, t0, &mut res);
    }
    let mut ready = Vec::new();
    let mut stopping = false;
    let mut last_timeout_check = t0;
    loop {
        let now = Instant::now();
        if !stopping && now >= deadline {
            stopping = true;
        }
        if stopping && !conns.iter().any(|c| c.alive && c.active) {
            break;
        }
        // Every connection failed: nothing is left to measure or to wait for.
        if !conns.iter().any(|c| c.alive) {
            break;
        }
        if now.duration_since(last_timeout_check) >= Duration::from_millis(50) {
            last_timeout_check = now;
            for c in conns.iter_mut().filter(|c| c.alive && c.active) {
                if now.duration_since(c.started) > cfg.timeout {
                    fail(
                        c,
                        &ep,
                        &mut res,
                        format!(
                            "no complete response {} within {:.1} s ({} of {} B back)",
                            c.seq,
                            cfg.timeout.as_secs_f64(),
                            c.got,
                            cfg.size
                        ),
                    );
                }
            }
        }
        if crate::interrupt::interrupted() {
            return Err(Error::Interrupted);
        }
        ready.clear();
        let wait_ms = if stopping {
            10
        } else {
            10.min(deadline.saturating_duration_since(now).as_millis() as i32 + 1)
        };
        ep.wait(&mut ready, wait_ms)
            .map_err(|e| Error::io("epoll_wait", e))?;
        for &(tok, ev) in &ready {
            let k = tok as usize;
            let c = &mut conns[k];
            if !c.alive || !c.active {
                if c.alive
                    && ev
                        & (zcnet::os::epoll::IN
                            | zcnet::os::epoll::RDHUP
                            | zcnet::os::epoll::HUP
                            | zcnet::os::epoll::ERR)
                        != 0
                {
                    // Data or a close while no request is in flight: the server broke the loop.
                    let why =
                        match zcnet::os::sock::recv(c.fd, &mut scratch[..1], libc::MSG_DONTWAIT) {
                            Ok(0) => {
                                "the server closed the connection between requests".to_string()
                            }
                            Ok(_) => "the server sent bytes that were not asked for".to_string(),
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                            Err(e) => format!("between requests: {e}"),
                        };
                    fail(c, &ep, &mut res, why);
                }
                continue;
            }
            if ev & zcnet::os::epoll::OUT != 0 && c.sent < cfg.size {
                if let Err(why) = send_more(c) {
                    fail(c, &ep, &mut res, why);
                    continue;
                }
                update_out(c, &ep, k);
            }
            if let Err(why) = read_more(c, cfg, &mut scratch, &mut res) {
                fail(c, &ep, &mut res, why);
                continue;
            }
            if c.got == cfg.size && c.sent == cfg.size {
                let done = Instant::now();
                if done <= deadline {
                    res.requests += 1;
                    res.lat
                        .push(done.duration_since(c.started).as_nanos() as u64);
                } else {
                    res.late += 1;
                }
                c.active = false;
                c.seq += 1;
                if !stopping && done < deadline {
                    start_request(c, &ep, k, done, &mut res);
                }
            }
        }
    }
    res.seconds = cfg.duration.as_secs_f64();
    res.cpu = zcnet::os::thread_cpu_seconds() - cpu0;
    // Half-close and wait for the server's end of stream: the server then closes cleanly.
    for c in conns.iter_mut().filter(|c| c.alive) {
        let _ = ep.delete(c.fd);
        let _ = c.stream.shutdown(Shutdown::Write);
    }
    let end = Instant::now() + cfg.timeout.min(Duration::from_secs(2));
    for c in conns.iter_mut().filter(|c| c.alive) {
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let _ = c.stream.set_read_timeout(Some(left));
            match io::Read::read(&mut c.stream, &mut scratch) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    }
    Ok(res)
}

fn fail(c: &mut ClientConn, ep: &zcnet::os::epoll::Epoll, res: &mut ThreadResult, why: String) {
    c.alive = false;
    c.active = false;
    let _ = ep.delete(c.fd);
    res.errors
        .push(format!("client connection {}: {why}", c.index));
}

fn start_request(
    c: &mut ClientConn,
    ep: &zcnet::os::epoll::Epoll,
    k: usize,
    now: Instant,
    res: &mut ThreadResult,
) {
    // The connection and sequence number at both ends: a stale or misplaced response differs.
    let stamp = ((c.index << 40) | (c.seq & ((1 << 40) - 1))).to_le_bytes();
    let n = c.req.len();
    let h = n.min(8);
    c.req[..h].copy_from_slice(&stamp[..h]);
    c.req[n - h..].copy_from_slice(&stamp[8 - h..]);
    c.sent = 0;
    c.got = 0;
    c.active = true;
    c.started = now;
    if let Err(why) = send_more(c) {
        fail(c, ep, res, why);
        return;
    }
    update_out(c, ep, k);
}

fn send_more(c: &mut ClientConn) -> Result<(), String> {
    while c.sent < c.req.len() {
        match zcnet::os::sock::send(c.fd, &c.req[c.sent..], libc::MSG_DONTWAIT) {
            Ok(k) => c.sent += k,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("sending request {}: {e}", c.seq)),
        }
    }
    Ok(())
}

fn update_out(c: &mut ClientConn, ep: &zcnet::os::epoll::Epoll, k: usize) {
    let want = c.sent < c.req.len();
    if want != c.want_out {
        let mut ev = zcnet::os::epoll::IN | zcnet::os::epoll::RDHUP;
        if want {
            ev |= zcnet::os::epoll::OUT;
        }
        if ep.modify(c.fd, k as u64, ev).is_ok() {
            c.want_out = want;
        }
    }
}

fn read_more(
    c: &mut ClientConn,
    cfg: &ClientConfig,
    scratch: &mut [u8],
    res: &mut ThreadResult,
) -> Result<(), String> {
    let size = cfg.size;
    while c.got < size {
        // Never read past this response: the next one is not asked for yet anyway.
        let want = (size - c.got).min(scratch.len());
        match zcnet::os::sock::recv(c.fd, &mut scratch[..want], libc::MSG_DONTWAIT) {
            Ok(0) => {
                return Err(format!(
                    "the server closed the connection after {} of {size} B of response {}",
                    c.got, c.seq
                ))
            }
            Ok(n) => {
                let off = c.got;
                match check_response(&c.req, c.sent, off, &scratch[..n], cfg.check) {
                    ResponseCheck::RunsAhead => {
                        return Err(format!(
                            "response {} runs ahead of its request ({} B back, {} B sent)",
                            c.seq,
                            off + n,
                            c.sent
                        ))
                    }
                    ResponseCheck::Differs { checked, at } => {
                        res.checked += checked;
                        res.mismatches += 1;
                        return Err(format!(
                            "response {} differs from its request at byte {at}",
                            c.seq
                        ));
                    }
                    ResponseCheck::Match { checked } => res.checked += checked,
                }
                c.got += n;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(format!(
                    "reading response {} ({} of {size} B back): {e}",
                    c.seq, c.got
                ))
            }
        }
    }
    Ok(())
}

/// What [`check_response`] found in one piece of a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseCheck {
    /// The bytes [`Check`] looks at are the request's; `checked` of them were compared.
    Match {
        /// Bytes compared.
        checked: u64,
    },
    /// The piece ends past what was sent of the request (or past the request).
    RunsAhead,
    /// A compared byte differs.
    Differs {
        /// Bytes compared.
        checked: u64,
        /// Request offset of the piece's first byte that differs from the request (with
        /// [`Check::Cheap`], possibly one the check itself skipped).
        at: usize,
    },
}

/// Checks `piece`, the response bytes that arrived for request offsets `off..off + piece.len()`,
/// against `req` of which `sent` bytes went out: every byte with [`Check::Full`], the first and
/// last 16 bytes of the request (where the connection and sequence stamp are) with
/// [`Check::Cheap`]. Pure: any piece, offset and count give an answer, never a panic.
pub fn check_response(
    req: &[u8],
    sent: usize,
    off: usize,
    piece: &[u8],
    check: Check,
) -> ResponseCheck {
    let size = req.len();
    let n = piece.len();
    let Some(end) = off.checked_add(n).filter(|&e| e <= sent && e <= size) else {
        return ResponseCheck::RunsAhead;
    };
    let mut checked = 0u64;
    let ok = match check {
        Check::Full => {
            checked += n as u64;
            *piece == req[off..end]
        }
        Check::Cheap => {
            let edge = 16.min(size);
            let mut ok = true;
            for (lo, hi) in [(0, edge), (size - edge, size)] {
                let (a, b) = (lo.max(off), hi.min(end));
                if a < b {
                    checked += (b - a) as u64;
                    ok &= piece[a - off..b - off] == req[a..b];
                }
            }
            ok
        }
    };
    if ok {
        return ResponseCheck::Match { checked };
    }
    let at = (0..n)
        .find(|&i| piece[i] != req[off + i])
        .map_or(off, |i| off + i);
    ResponseCheck::Differs { checked, at }
}
