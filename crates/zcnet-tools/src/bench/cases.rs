//! One case of `bench tx`: the sender thread (and on the TCP paths the receiver's) in the
//! lab's namespaces, the send loop it runs ([`send_for`]), and the raw loops.

use super::{Env, TxBenchConfig, RAW_MSG_ZEROCOPY};
use crate::lab;
use crate::sendloop::{Payload, SendLoop, Until};
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};
use zcnet::gpu::GpuSender;
use zcnet::net;
use zcnet::region::{MemoryKind, Region};
use zcnet::text::Text;
use zcnet::tx::{region_len, Sender, Socket, TxConfig, TxMode, TxStats};
use zcnet::{Error, Result};

/// The error for a lab thread that panicked (its `join` failed).
fn panicked(what: &str) -> Error {
    Error::io(what.to_string(), std::io::Error::other("panicked"))
}

type CaseResult = Result<(TxStats, Option<u64>, Option<Text>)>;

/// Sends `tcfg.buf_size`-byte messages for `duration`; the buffers hold the seeded pattern.
pub fn send_for(
    sock: Socket,
    tcfg: &TxConfig,
    memory: MemoryKind,
    duration: Duration,
) -> Result<(TxStats, Option<Text>)> {
    let size = tcfg.buf_size;
    let region = Region::new(memory, region_len(tcfg))?;
    if memory.is_device() {
        return send_gpu_for(sock, region, tcfg, memory, duration);
    }
    let mut tx = Sender::new(sock, region, tcfg)?;
    let note = tx.note().cloned();
    // Read the clock once per buffers' worth of sends (about once per wait), as the raw
    // baseline does.
    let mut until = Until::new(size, None, Some(Instant::now() + duration), tx.buffers());
    SendLoop {
        amount: |offset| until.next(offset),
        fill: Payload::once(|_| 0x2c6e_6574),
        pace: None,
        cancelled: || false,
        progress: |_| {},
    }
    .run(&mut tx)?;
    Ok((tx.finish()?, note))
}

/// [`send_for`] from GPU memory: devmem TX or staging (whichever [`GpuSender`] takes); the note
/// names the path and why the better one was refused. Sends what the GPU memory holds.
fn send_gpu_for(
    sock: Socket,
    region: Region,
    tcfg: &TxConfig,
    memory: MemoryKind,
    duration: Duration,
) -> Result<(TxStats, Option<Text>)> {
    let (mut tx, refused) = GpuSender::open(sock, region, tcfg)?;
    let mut note = format!("from {} by {}", memory.name(), tx.path());
    for r in &refused {
        note.push_str(&format!("; {r}"));
    }
    let mut until = Until::new(tcfg.buf_size, None, Some(Instant::now() + duration), 1);
    let (mut off, mut scratch) = (0u64, Vec::new());
    while let Some(n) = until.next(off)? {
        tx.send_chunk(off, n, None, &mut scratch)?;
        off += n as u64;
    }
    Ok((tx.finish()?.tx, Some(note.into())))
}

/// Sends UDP from namespace `ns` to `dest` on a thread of its own (GSO segments as large as
/// the route's MTU carries where a send does not fit one packet: [`net::connect_udp_for`]),
/// for the sink and dummy paths (nothing receives: the device drops it all).
fn udp_case(
    ns: &str,
    dest: SocketAddr,
    mode: TxMode,
    size: usize,
    cfg: &TxBenchConfig,
) -> CaseResult {
    std::thread::scope(|sc| {
        sc.spawn(|| {
            lab::enter(ns)?;
            let sock = net::connect_udp_for(dest, size)?;
            let (st, note) = send_for(
                sock.into(),
                &cfg.tx_config(mode, size),
                cfg.memory,
                cfg.duration,
            )?;
            Ok((st, None, note))
        })
        .join()
        .unwrap_or_else(|_| Err(panicked("sender thread")))
    })
}

pub(super) fn run_case(env: &Env, mode: TxMode, size: usize, cfg: &TxBenchConfig) -> CaseResult {
    match env {
        // The sink's MTU is 1500: 1,472-byte segments.
        Env::Sink(s) => udp_case(&s.ns, s.dest, mode, size, cfg),
        // One datagram per send, no GSO: the MTU (65535) takes the largest, and with the
        // checksum left to the device UDP sends it from the pages as they are.
        Env::Dummy(d) => udp_case(&d.ns, d.dest, mode, size, cfg),
        Env::Veth(v) => tcp_case(
            Some(&v.a),
            Some(&v.b),
            SocketAddr::new(v.b_addr, 5201),
            mode,
            size,
            cfg,
        ),
        Env::Loopback => tcp_case(
            None,
            None,
            "127.0.0.1:0".parse().map_err(|_| Error::BadAddress {
                given: "127.0.0.1:0".into(),
            })?,
            mode,
            size,
            cfg,
        ),
    }
}

/// A TCP case: a receiver thread (in `rx_ns`) that drains, a sender thread (in `tx_ns`).
fn tcp_case(
    tx_ns: Option<&str>,
    rx_ns: Option<&str>,
    bind: SocketAddr,
    mode: TxMode,
    size: usize,
    cfg: &TxBenchConfig,
) -> CaseResult {
    let (sent, received) = tcp_stream(
        tx_ns,
        rx_ns,
        bind,
        |mut s| Ok(super::drain_stream(&mut s, None, None, &crate::interrupt::token())?.bytes),
        |sock| {
            send_for(
                sock.into(),
                &cfg.tx_config(mode, size),
                cfg.memory,
                cfg.duration,
            )
        },
    )?;
    let (st, note) = sent?;
    Ok((st, Some(received?), note))
}

/// One TCP stream between two threads: the receiver (in `rx_ns`) listens on `bind` and runs
/// `recv` on the accepted stream; the sender (in `tx_ns`) connects and runs `send`. Returns
/// (what the sender did, what the receiver did); the outer error is set-up failing before the
/// sender could start (e.g. the listen).
pub(crate) fn tcp_stream<S: Send, R: Send>(
    tx_ns: Option<&str>,
    rx_ns: Option<&str>,
    bind: SocketAddr,
    recv: impl FnOnce(std::net::TcpStream) -> Result<R> + Send,
    send: impl FnOnce(std::net::TcpStream) -> Result<S> + Send,
) -> Result<(Result<S>, Result<R>)> {
    std::thread::scope(|sc| {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<SocketAddr>>();
        let receiver = sc.spawn(move || -> Result<R> {
            let listener = (|| -> Result<TcpListener> {
                if let Some(ns) = rx_ns {
                    lab::enter(ns)?;
                }
                // The previous case's listener, closed a moment ago, can live on in a child
                // process another thread is spawning (its copy of the fd table keeps the socket
                // until it execs): a clean-clone CI run failed the next bind with EADDRINUSE.
                // Retry the bind for a short while before saying so.
                let deadline = Instant::now() + Duration::from_secs(2);
                loop {
                    match TcpListener::bind(bind) {
                        Ok(l) => break Ok(l),
                        Err(e)
                            if e.kind() == std::io::ErrorKind::AddrInUse
                                && Instant::now() < deadline =>
                        {
                            std::thread::sleep(Duration::from_millis(10))
                        }
                        // The library's one-line error for it.
                        Err(_) => break net::listen_tcp(bind),
                    }
                }
            })();
            let listener = match listener {
                Ok(l) => l,
                Err(e) => {
                    let msg = e.to_string();
                    let _ = ready_tx.send(Err(e));
                    return Err(Error::io(msg, std::io::Error::other("receiver")));
                }
            };
            let addr = listener
                .local_addr()
                .map_err(|e| Error::io("local_addr", e))?;
            let _ = ready_tx.send(Ok(addr));
            let (s, _) = net::accept(&listener, &crate::interrupt::token())?;
            recv(s)
        });
        let addr = ready_rx
            .recv()
            .map_err(|_| Error::io("receiver thread", std::io::Error::other("exited early")))??;
        let sender = sc.spawn(move || -> Result<S> {
            if let Some(ns) = tx_ns {
                lab::enter(ns)?;
            }
            send(net::connect_tcp(addr, &crate::interrupt::token())?)
        });
        let sent = sender
            .join()
            .unwrap_or_else(|_| Err(panicked("sender thread")));
        if sent.is_err() {
            // Unblock the receiver if the sender never connected: from the sender's namespace,
            // where the address is (this thread's is the root namespace, whose routes must
            // never see the lab's addresses).
            let _ = sc
                .spawn(move || {
                    if tx_ns.is_some_and(|ns| lab::enter(ns).is_err()) {
                        return;
                    }
                    let _ = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200));
                })
                .join();
        }
        let received = receiver
            .join()
            .unwrap_or_else(|_| Err(panicked("receiver thread")));
        Ok((sent, received))
    })
}

/// Runs the raw loop named `raw` ([`RAW_LOOPS`]) on the sink.
pub(super) fn run_raw(env: &Env, raw: &str, size: usize, cfg: &TxBenchConfig) -> CaseResult {
    let Env::Sink(s) = env else {
        return Err(Error::invalid_input(
            "the raw baseline loops run on the sink path only",
        ));
    };
    let (run, what): (fn(_, _, _, _, &_) -> _, _) = if raw == RAW_MSG_ZEROCOPY {
        (
            zcnet_rawbench::baseline::raw_msg_zerocopy,
            "raw MSG_ZEROCOPY loop",
        )
    } else {
        (zcnet_rawbench::baseline::raw_send_zc, "raw SEND_ZC loop")
    };
    std::thread::scope(|sc| {
        sc.spawn(|| {
            lab::enter(&s.ns)?;
            let sock = net::connect_udp_for(s.dest, size)?;
            let fd = std::os::fd::AsRawFd::as_raw_fd(&sock);
            let inflight = cfg.tx_config(TxMode::Copy, size).buffers();
            let r = run(fd, size, inflight, cfg.duration, crate::interrupt::flag()).map_err(
                |e| match e.kind() {
                    std::io::ErrorKind::Interrupted => Error::Interrupted,
                    _ => Error::io(what, e),
                },
            )?;
            // The sends the COPIED notifications covered, weighted by the bytes per send (a
            // MSG_ZEROCOPY range may cover one send or thousands); u128: no overflow.
            let copied_bytes = (u128::from(r.bytes) * u128::from(r.copied_sends))
                .checked_div(u128::from(r.sends))
                .map_or(0, |b| b.min(u128::from(r.bytes)) as u64);
            let st = TxStats {
                bytes: r.bytes,
                sends: r.sends,
                notifications: r.notifications,
                copied_notifications: r.copied_notifications,
                zerocopy_bytes: r.bytes - copied_bytes,
                copied_bytes,
                seconds: r.seconds,
                cpu_seconds: r.cpu_seconds,
                ..TxStats::default()
            };
            Ok((st, None, None))
        })
        .join()
        .unwrap_or_else(|_| Err(panicked("raw loop thread")))
    })
}
