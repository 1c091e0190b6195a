//! An echo server on a tokio runtime, with zcnet's receive and send (`--impl zcnet`: one
//! `AsyncReceiver` for every connection, an `AsyncSender` per connection; each received buffer
//! is sent back out itself, lent by the receiver, by its connection's task, where the receive
//! mode can lend it: `uring`; `--lend off` copies the bytes into the sender's buffers) or with plain
//! `tokio::net::TcpStream` reads and writes (`--impl tokio`, the same echo for comparison), and
//! the client that measures them (`client`: N connections, each writing a message and reading
//! it back, for a while; messages per second and GB/s each way).
//!
//! ```text
//! echo server 127.0.0.1:7000 [--impl zcnet|tokio] [--rx auto] [--tx auto] [--size 64K] [--lend on|off] [--buffers 16]
//! echo client 127.0.0.1:7000 [--conns 24] [--size 64K] [--seconds 5]
//! ```
//!
//! Both run on one thread (a current-thread runtime). The server stops on end of input
//! (its stdin closes) or when killed. scripts/tokio-echo-bench.sh runs both over veth between
//! two network namespaces and compares the two servers.

use std::collections::HashMap;
use std::error::Error as StdError;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use zcnet::engine::ForeignBuf;
use zcnet::rx::{ConnId, Receiver, RxConfig, RxEvent, RxMode};
use zcnet::{Region, Sender, Socket, TxConfig, TxMode};
use zcnet_tokio::{AsyncReceiver, AsyncSender};

type Res<T> = Result<T, Box<dyn StdError>>;

struct Args {
    role: String,
    addr: String,
    imp: String,
    rx: String,
    tx: String,
    size: usize,
    conns: usize,
    seconds: f64,
    /// Send received buffers back out themselves (`--lend on`, the default) or copy them.
    lend: bool,
    /// Receive buffers (`--buffers`). Few: every buffer the ring holds beyond those in use is
    /// memory the kernel writes into cold (the ring hands them out in turn); with 16 of 64 KiB
    /// (1 MiB, inside the L2 cache) the server moved 58 k msg/s over veth against 48-54 k with
    /// 64 and 256. Fewer than connections is fine: each connection's task gives its buffers
    /// back as its sends complete.
    buffers: usize,
}

/// A count of 1 or more for `flag`, or the one-line error naming it.
fn count(flag: &str, v: &str) -> Res<usize> {
    Ok(v.parse()
        .ok()
        .filter(|&n: &usize| n > 0)
        .ok_or_else(|| format!("echo: {flag} needs a count of 1 or more, not '{v}'"))?)
}

fn size(s: &str) -> Res<usize> {
    let (n, mul) = match s.as_bytes().last() {
        Some(b'K' | b'k') => (&s[..s.len() - 1], 1 << 10),
        Some(b'M' | b'm') => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    Ok(n.parse::<usize>()? * mul)
}

fn args() -> Res<Args> {
    let mut it = std::env::args().skip(1);
    let role = it
        .next()
        .ok_or("usage: echo server|client ADDR [options]")?;
    let addr = it
        .next()
        .ok_or("echo: give the address (e.g. 127.0.0.1:7000)")?;
    let mut a = Args {
        role,
        addr,
        imp: "zcnet".into(),
        rx: "auto".into(),
        tx: "auto".into(),
        size: 64 << 10,
        conns: 24,
        seconds: 5.0,
        lend: true,
        buffers: 16,
    };
    while let Some(flag) = it.next() {
        let v = it
            .next()
            .ok_or_else(|| format!("echo: {flag} needs a value"))?;
        match flag.as_str() {
            "--impl" => a.imp = v,
            "--rx" => a.rx = v,
            "--tx" => a.tx = v,
            "--size" => a.size = size(&v)?,
            "--conns" => a.conns = count(&flag, &v)?,
            "--seconds" => {
                a.seconds = v
                    .parse()
                    .ok()
                    .filter(|s: &f64| s.is_finite() && *s > 0.0)
                    .ok_or_else(|| format!("echo: --seconds needs a number above 0, not '{v}'"))?
            }
            "--lend" => a.lend = v == "on",
            "--buffers" => a.buffers = count(&flag, &v)?,
            _ => return Err(format!("echo: unknown option {flag}").into()),
        }
    }
    // An `AsyncSender` waits on the io_uring ring's readiness fd; copy, msg-zerocopy and
    // devmem send inside blocking calls and have none.
    if !matches!(a.tx.as_str(), "auto" | "uring" | "uring-zc") {
        return Err(format!(
            "echo: --tx {} cannot run under an event loop (it sends in blocking calls): use auto, uring or uring-zc",
            a.tx
        )
        .into());
    }
    Ok(a)
}

fn main() -> Res<()> {
    let a = args()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match (a.role.as_str(), a.imp.as_str()) {
        ("server", "zcnet") => tokio::task::LocalSet::new().block_on(&rt, zcnet_server(&a)),
        ("server", "tokio") => tokio::task::LocalSet::new().block_on(&rt, tokio_server(&a)),
        ("client", _) => rt.block_on(client(&a)),
        _ => Err("echo: server --impl zcnet|tokio, or client".into()),
    }
}

/// Ends when stdin reaches end of input (the bench script closes it to stop the server).
async fn stdin_closed() {
    let mut b = [0u8; 64];
    let mut stdin = tokio::io::stdin();
    while matches!(stdin.read(&mut b).await, Ok(n) if n > 0) {}
}

async fn zcnet_server(a: &Args) -> Res<()> {
    let listener = tokio::net::TcpListener::bind(&a.addr).await?;
    let mut rcfg = RxConfig::new(RxMode::parse(&a.rx)?);
    rcfg.buf_size = a.size;
    rcfg.buffers = a.buffers;
    let mut rx = AsyncReceiver::new(Receiver::new(&rcfg)?)?;
    let tx_mode = TxMode::parse(&a.tx)?;
    // Lending needs a receive mode whose buffers can go out as they are (uring).
    let lend = a.lend && rx.receiver().mode() == RxMode::Uring;
    eprintln!(
        "echo: zcnet server on {} (receive {}, send {tx_mode}, {})",
        a.addr,
        rx.receiver().mode(),
        if lend {
            "received buffers lent to the sender"
        } else {
            "received bytes copied"
        }
    );
    // Lent buffers go to each connection's task, which sends them and drives its sender (a
    // lent buffer comes back to the receive ring only when its sender takes back the
    // completion: a sender nobody drives would keep it, and enough of them starve the ring).
    // Copied bytes go out from here, into the connection's own send buffers.
    let mut lent_to: HashMap<ConnId, mpsc::UnboundedSender<(Arc<ForeignBuf>, usize)>> =
        HashMap::new();
    let mut senders: HashMap<ConnId, AsyncSender> = HashMap::new();
    let stop = stdin_closed();
    tokio::pin!(stop);
    loop {
        let idle = rx.receiver().connections() == 0;
        tokio::select! {
            _ = &mut stop => return Ok(()),
            acc = listener.accept() => {
                let (s, _) = acc?;
                let s = s.into_std()?;
                s.set_nodelay(true)?;
                s.set_nonblocking(false)?;
                let out = s.try_clone()?;
                let conn = rx.add(s)?;
                let mut tcfg = TxConfig::new(tx_mode);
                tcfg.buf_size = a.size;
                let region = Region::anonymous(zcnet::tx::region_len(&tcfg))?;
                let tx = AsyncSender::new(Sender::new(Socket::from(out), region, &tcfg)?)?;
                if lend {
                    let (to, from) = mpsc::unbounded_channel();
                    tokio::task::spawn_local(send_lent_buffers(tx, from));
                    lent_to.insert(conn, to);
                } else {
                    senders.insert(conn, tx);
                }
            }
            ev = rx.recv(), if !idle => match ev? {
                Some(RxEvent::Data(buf)) => {
                    let (c, n) = (buf.conn(), buf.len());
                    if let Some(to) = lent_to.get(&c) {
                        let lent = rx.lend(buf).map_err(|(_, e)| e)?;
                        // A closed task has said why on stderr; its connection ends at EOF.
                        let _ = to.send((lent, n));
                    } else if let (Some(tx), Some(bytes)) = (senders.get_mut(&c), rx.bytes(&buf)) {
                        tx.send_slice(bytes).await?;
                    }
                }
                Some(RxEvent::Failed(c, e)) => {
                    eprintln!("echo: connection {c} failed: {e}");
                    lent_to.remove(&c);
                    senders.remove(&c);
                    rx.close(c);
                }
                Some(RxEvent::Eof(c)) => {
                    // The task sends what it was given, flushes and ends.
                    lent_to.remove(&c);
                    if let Some(tx) = senders.remove(&c) {
                        tokio::task::spawn_local(finish(tx));
                    }
                    rx.close(c);
                }
                None => {}
            },
        }
    }
}

/// One connection's sends of lent buffers, in order; between them it takes back completions,
/// so the buffers return to the receive ring as soon as the kernel is done with them.
async fn send_lent_buffers(
    mut tx: AsyncSender,
    mut from: mpsc::UnboundedReceiver<(Arc<ForeignBuf>, usize)>,
) {
    loop {
        let busy = tx.sender().outstanding() > 0;
        tokio::select! {
            m = from.recv() => match m {
                Some((lent, n)) => {
                    if let Err(e) = tx.send_lent(lent, 0, n).await {
                        eprintln!("echo: send: {e}");
                        return;
                    }
                }
                None => break,
            },
            // Cancel-safe: nothing is taken or given.
            r = tx.flush(), if busy => {
                if let Err(e) = r {
                    eprintln!("echo: send: {e}");
                    return;
                }
            }
        }
    }
    finish(tx).await;
}

/// Flushes a connection's sender, for at most 5 s (a peer that stopped reading keeps sends).
async fn finish(tx: AsyncSender) {
    if let Err(e) = tokio::time::timeout(Duration::from_secs(5), tx.finish()).await {
        eprintln!("echo: flushing a closed connection: {e}");
    }
}

async fn tokio_server(a: &Args) -> Res<()> {
    let listener = tokio::net::TcpListener::bind(&a.addr).await?;
    eprintln!("echo: tokio server on {}", a.addr);
    let size = a.size;
    let stop = stdin_closed();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            acc = listener.accept() => {
                let (mut s, _) = acc?;
                s.set_nodelay(true)?;
                tokio::task::spawn_local(async move {
                    let mut buf = vec![0u8; size];
                    loop {
                        let n = match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        if s.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        }
    }
}

/// `conns` connections, each writing a `size`-byte message and reading it back, for
/// `seconds`; prints one line: `messages=N seconds=S msg_per_s=R gbps=G` (G: bytes echoed per
/// second, one way, in GB/s).
async fn client(a: &Args) -> Res<()> {
    let deadline = Instant::now() + Duration::from_secs_f64(a.seconds);
    let mut tasks = Vec::new();
    let local = tokio::task::LocalSet::new();
    for i in 0..a.conns {
        let addr = a.addr.clone();
        let size = a.size;
        tasks.push(local.spawn_local(async move {
            let mut s = tokio::net::TcpStream::connect(&addr).await?;
            s.set_nodelay(true)?;
            let msg: Vec<u8> = (0..size).map(|k| (k + i) as u8).collect();
            let mut back = vec![0u8; size];
            let mut n = 0u64;
            while Instant::now() < deadline {
                s.write_all(&msg).await?;
                s.read_exact(&mut back).await?;
                if back != msg {
                    return Err::<u64, Box<dyn StdError>>(
                        format!("connection {i}: the echo differs from what was sent").into(),
                    );
                }
                n += 1;
            }
            Ok(n)
        }));
    }
    let t0 = Instant::now();
    let total = local
        .run_until(async {
            let mut total = 0u64;
            for t in tasks {
                total += t
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())?;
            }
            Ok::<u64, String>(total)
        })
        .await?;
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "messages={total} seconds={secs:.3} msg_per_s={:.1} gbps={:.3}",
        total as f64 / secs,
        total as f64 * a.size as f64 / secs / 1e9
    );
    Ok(())
}
