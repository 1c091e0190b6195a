//! Receives one TCP stream on a NIC queue through the library's `Receiver` — io_uring zero-copy
//! receive (zcrx) into a host area or into a udmabuf area, or devmem TCP into a udmabuf — checks
//! every byte against zcnet's seeded pattern (what `zcnet send --verify` sends) and prints what
//! happened as one JSON object on stdout.
//!
//! ```text
//! nic_recv --listen IP:PORT --iface IF [--queue Q] [--rx zcrx|devmem|auto] [--mem host|udmabuf]
//!          [--area BYTES] [--seed N] [--timeout SECONDS]
//! ```
//!
//! The flow must already be steered to the queue, with header split on (`zcnet nic setup --iface
//! IF --queue Q --port PORT -- nic_recv ...`, as scripts/hw-suite.sh runs it). With `--mem
//! udmabuf` the payload lands in a dma-buf of host memory (needs `/dev/udmabuf`) and each buffer
//! is read back from it, at its dma-buf offset, before it goes back to the kernel. A bad argument
//! is one line on stderr and exit 2; a refusal or a wrong byte one line and exit 1.

use std::cell::RefCell;
use std::time::Duration;
use zcnet::rx::DeviceSlice;
use zcnet::{net, Cancel, Error, Pattern, Receiver, Region, RxConfig, RxMode};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const USAGE: &str = "nic_recv --listen IP:PORT --iface IF [--queue Q] [--rx zcrx|devmem|auto] [--mem host|udmabuf] [--area BYTES] [--seed N] [--timeout SECONDS]";

struct Args {
    listen: String,
    iface: String,
    queue: Option<u32>,
    rx: RxMode,
    udmabuf: bool,
    area: Option<usize>,
    seed: u64,
    timeout: u64,
}

/// A number for `flag` (bytes may end in K, M or G), or the one-line error naming it.
fn number(flag: &str, v: &str) -> Res<u64> {
    let (digits, mul) = match v.as_bytes().last() {
        Some(b'K' | b'k') => (&v[..v.len() - 1], 1 << 10),
        Some(b'M' | b'm') => (&v[..v.len() - 1], 1 << 20),
        Some(b'G' | b'g') => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    let n = digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .ok_or_else(|| format!("{flag} wants a number, not '{v}'"))?;
    Ok(n)
}

fn parse(mut it: impl Iterator<Item = String>) -> Res<Args> {
    let (mut listen, mut iface) = (None, None);
    let mut a = Args {
        listen: String::new(),
        iface: String::new(),
        queue: None,
        rx: RxMode::Zcrx,
        udmabuf: false,
        area: None,
        seed: 1,
        timeout: 120,
    };
    while let Some(flag) = it.next() {
        if flag == "-h" || flag == "--help" {
            println!("usage: {USAGE}");
            std::process::exit(0);
        }
        let v = it
            .next()
            .ok_or_else(|| format!("{flag} wants a value (usage: {USAGE})"))?;
        match flag.as_str() {
            "--listen" => listen = Some(v),
            "--iface" => iface = Some(v),
            "--queue" => {
                let q = u32::try_from(number(&flag, &v)?)
                    .map_err(|_| format!("--queue {v}: give a queue number"))?;
                a.queue = Some(q);
            }
            "--rx" => {
                a.rx = RxMode::parse(&v)?;
                if matches!(a.rx, RxMode::Copy | RxMode::Uring) {
                    return Err(format!(
                        "--rx {v} receives from a socket, not a NIC queue: give zcrx, devmem or auto"
                    )
                    .into());
                }
            }
            "--mem" => {
                a.udmabuf = match v.as_str() {
                    "host" => false,
                    "udmabuf" => true,
                    _ => return Err(format!("--mem {v}: give host or udmabuf").into()),
                }
            }
            "--area" => {
                let n = usize::try_from(number(&flag, &v)?).ok().filter(|&n| n > 0);
                a.area = Some(n.ok_or_else(|| format!("--area {v}: give a size above 0"))?);
            }
            "--seed" => a.seed = number(&flag, &v)?,
            "--timeout" => {
                a.timeout = Some(number(&flag, &v)?)
                    .filter(|&s| s > 0)
                    .ok_or_else(|| format!("--timeout {v}: give whole seconds above 0"))?
            }
            _ => return Err(format!("unknown argument '{flag}' (usage: {USAGE})").into()),
        }
    }
    a.listen = listen.ok_or_else(|| format!("--listen IP:PORT is needed (usage: {USAGE})"))?;
    a.iface = iface.ok_or_else(|| {
        format!("--iface IF is needed: the NIC whose queue the flow is steered to (usage: {USAGE})")
    })?;
    if a.udmabuf && a.rx == RxMode::Auto {
        return Err(
            "--mem udmabuf needs --rx zcrx or --rx devmem (auto never takes devmem)".into(),
        );
    }
    if a.rx == RxMode::Devmem && !a.udmabuf {
        return Err("--rx devmem lands the payload in a dma-buf: add --mem udmabuf to read it back and verify it".into());
    }
    Ok(a)
}

fn run(a: &Args) -> Result<serde_json::Value, Error> {
    let addr = net::parse_addr(&a.listen)?;
    let cancel = Cancel::new();
    let mut cfg = RxConfig::new(a.rx);
    cfg.iface = Some(a.iface.clone());
    cfg.queue = a.queue;
    cfg.cancel = cancel.clone();
    if let Some(n) = a.area {
        cfg.area_len = n;
    }
    // The udmabuf the NIC writes into (zcrx's dma-buf area or devmem's binding): declared
    // before the receiver, so that the receiver (and its binding) goes first.
    let udmabuf = match a.udmabuf {
        true => {
            let mut r = Region::udmabuf(cfg.area_len)?;
            cfg.dmabuf = Some(r.dmabuf()?);
            Some(r)
        }
        false => None,
    };
    let udmabuf = RefCell::new(udmabuf);
    let mut rx = Receiver::new(&cfg)?;
    let listener = net::listen_tcp(addr)?;
    eprintln!("nic_recv: listening on {addr} with {}", rx.mode());
    // The time limit: the token stops the accept and the receive.
    let limit = Duration::from_secs(a.timeout);
    let stop = cancel.clone();
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        stop.cancel();
    });
    let (stream, peer) = net::accept(&listener, &cancel)?;
    let read_back = |d: &DeviceSlice, out: &mut [u8]| match udmabuf.borrow_mut().as_mut() {
        Some(r) => r.read_back(d.offset as usize, out),
        None => Err(Error::invalid_input("device memory without a host mapping")),
    };
    let reader: Option<zcnet::rx::DeviceReader<'_>> = a.udmabuf.then_some(&read_back as _);
    let rep = zcnet::rx::receive_stream_reading_device(
        &mut rx,
        stream,
        Some(Pattern::new(a.seed)),
        None,
        reader,
    )?;
    if rep.recv.bytes == 0 {
        return Err(Error::io(
            "nothing to verify",
            std::io::Error::other("0 B of payload arrived, so the pattern was not checked"),
        ));
    }
    let st = &rep.stats;
    Ok(serde_json::json!({
        "api": "rust",
        "rx": rx.mode().name(),
        "mem": if a.udmabuf { "udmabuf" } else { "host" },
        "peer": peer.to_string(),
        "bytes": rep.recv.bytes,
        "reads": rep.recv.reads,
        "seconds": rep.recv.seconds,
        "verified": true,
        "zerocopy_bytes": st.zerocopy_bytes,
        "copied_bytes": st.copied_bytes,
        "unknown_copy_bytes": st.unknown_copy_bytes,
        "device_bytes": rep.device_bytes,
        "unsteered": st.unsteered,
        "linear_fallbacks": st.linear_fallbacks,
    }))
}

fn main() {
    let a = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("nic_recv: {e}");
            std::process::exit(2);
        }
    };
    match run(&a) {
        Ok(doc) => println!("{doc}"),
        Err(e) => {
            eprintln!("nic_recv: {e}");
            std::process::exit(1);
        }
    }
}
