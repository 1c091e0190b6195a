//! `--active`: try each mechanism and undo it at once. Every resource a trial takes (a zcrx
//! registration, an XSK socket, a netlink binding, a loopback connection) is an owned value
//! dropped before the trial returns.

use std::io;
use std::os::fd::AsRawFd;

use zcnet_core::probe::xsk::{QueueBind, QueuePlan, QueueTrials};
use zcnet_core::probe::{errno, IfaceFacts, KernelFacts, Refusal, Trials};
use zcnet_sys::xsk::{self, XskBindMode};
use zcnet_sys::zcrx::ZcrxIfq;

use crate::tx::{region_len, Sender, Socket, TxConfig, TxMode};
use crate::Region;

/// Bytes each loopback send trial moves: enough notifications to be sure, short enough to be
/// instant.
const TRIAL_BYTES: usize = 4 << 20;

fn refusal(e: &io::Error) -> Refusal {
    Refusal {
        errno: e.raw_os_error().unwrap_or(0),
        message: e.to_string(),
    }
}

fn nl_refusal(e: &zcnet_netlink::Error) -> Refusal {
    Refusal {
        errno: e.errno().unwrap_or(0),
        message: e.to_string(),
    }
}

/// Whether AF_XDP sockets exist: a bind to ifindex 0 fails with ENODEV after the socket was
/// made, or with EAFNOSUPPORT when the kernel has no AF_XDP.
pub(super) fn af_xdp_available() -> bool {
    match xsk::try_bind(0, 0, XskBindMode::Copy) {
        Err(e) => e.raw_os_error() != Some(libc::EAFNOSUPPORT),
        Ok(()) => true,
    }
}

/// MSG_ZEROCOPY and SEND_ZC over TCP loopback: the fraction of bytes the kernel reported
/// zero-copy.
pub(super) fn loopback() -> Trials {
    Trials {
        msg_zerocopy_loopback: Some(send_trial(TxMode::MsgZerocopy)),
        send_zc_loopback: Some(send_trial(TxMode::UringZc)),
        ..Trials::default()
    }
}

/// How long a trial waits for its loopback connection.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

fn send_trial(mode: TxMode) -> Result<f64, Refusal> {
    let to_refusal = |e: crate::Error| Refusal {
        errno: e.errno().unwrap_or(0),
        message: e.to_string(),
    };
    let listener = crate::net::listen_tcp("127.0.0.1:0".parse().map_err(|_| Refusal {
        errno: errno::EINVAL,
        message: "bad loopback address".into(),
    })?)
    .map_err(to_refusal)?;
    let addr = listener.local_addr().map_err(|e| refusal(&e))?;
    // Connected and accepted here, before the reader thread exists: a connect that fails
    // must not leave a thread waiting in accept for a peer that never comes, which the join
    // below would wait for forever. A loopback handshake takes microseconds; with `lo` down
    // (after it was up: 127.0.0.1 is still assigned) the SYNs are dropped and the kernel's
    // retries would hold each trial for two minutes.
    let stream = zcnet_sys::sock::connect_tcp(&addr, Some(CONNECT_TIMEOUT), &Default::default())
        .map_err(|e| {
            let why = if e.kind() == io::ErrorKind::TimedOut {
                format!(
                    "connecting to {addr} got no answer in {} s (is lo up?)",
                    CONNECT_TIMEOUT.as_secs()
                )
            } else {
                format!("connecting to {addr}: {e}")
            };
            Refusal {
                errno: e.raw_os_error().unwrap_or(0),
                message: why,
            }
        })?;
    let (mut peer, _) = crate::net::accept(&listener, &crate::Cancel::new()).map_err(to_refusal)?;
    let reader = std::thread::spawn(move || -> crate::Result<u64> {
        io::copy(&mut peer, &mut io::sink()).map_err(|e| crate::Error::io("recv", e))
    });
    let run = move || -> crate::Result<f64> {
        let mut cfg = TxConfig::new(mode);
        // Enough in flight that delayed ACKs do not stall the trial (docs/perf.md).
        cfg.inflight = 64;
        let region = Region::anonymous(region_len(&cfg))?;
        let mut tx = Sender::new(Socket::from(stream), region, &cfg)?;
        let mut sent = 0;
        while sent < TRIAL_BYTES {
            let b = tx.buffer()?;
            let n = b.capacity();
            tx.send(b, n)?;
            sent += n;
        }
        let stats = tx.finish()?;
        Ok(stats.zerocopy_fraction().unwrap_or(0.0))
    };
    let r = run().map_err(to_refusal);
    // The reader ends when the sender's socket closes (finish or drop above).
    let _ = reader.join();
    r
}

/// One AF_XDP bind in `mode` on queue `q` of `ifindex`, closed at once (zcnet-sys
/// `xsk::try_bind`: default UMEM of 64 frames, 64-entry rings; `EBUSY` retried briefly, since
/// the previous bind's buffer pool is released asynchronously after close).
fn bind(ifindex: u32, q: u32, mode: XskBindMode) -> Result<(), Refusal> {
    xsk::try_bind(ifindex, q, mode).map_err(|e| refusal(&e))
}

/// The per-queue AF_XDP bind trial: each queue of `plan` bound in copy mode, then in zero-copy
/// mode, each socket closed before the next bind. Copy first: it never reconfigures the queue.
pub(super) fn xsk_queues(ifindex: u32, plan: &QueuePlan) -> QueueTrials {
    let binds = plan
        .queues
        .iter()
        .map(|&q| QueueBind {
            queue: q,
            copy: bind(ifindex, q, XskBindMode::Copy),
            zerocopy: bind(ifindex, q, XskBindMode::ZeroCopy),
        })
        .collect();
    QueueTrials {
        plan: plan.clone(),
        binds,
    }
}

/// The per-interface trials, on the interface's last RX queue. The AF_XDP binds are taken
/// from `per_queue` when it tried that queue, instead of being made again.
pub(super) fn on_iface(
    f: &IfaceFacts,
    ifindex: u32,
    k: &KernelFacts,
    per_queue: Option<&QueueTrials>,
) -> Trials {
    let q = f.trial_queue();
    let mut t = Trials::default();
    if k.uring.unusable.is_none() && k.uring.recv_zc {
        // EBUSY: the queue is still held by the AF_XDP pool of a socket the per-queue trial
        // closed just before (the kernel releases it later, in deferred work): retry a while.
        let register = || ZcrxIfq::register(ifindex, q, 2 << 20, 64).map(drop);
        let until = std::time::Instant::now() + std::time::Duration::from_secs(1);
        let mut r = register();
        while matches!(&r, Err(e) if e.raw_os_error() == Some(libc::EBUSY))
            && std::time::Instant::now() < until
        {
            std::thread::sleep(std::time::Duration::from_millis(50));
            r = register();
        }
        t.zcrx = Some(r.map_err(|e| refusal(&e)));
    }
    if let Some(b) = per_queue.and_then(|p| p.get(q)) {
        t.xsk_copy = Some(b.copy.clone());
        t.xsk_zerocopy = Some(b.zerocopy.clone());
    } else if k.af_xdp {
        t.xsk_copy = Some(bind(ifindex, q, XskBindMode::Copy));
        t.xsk_zerocopy = Some(bind(ifindex, q, XskBindMode::ZeroCopy));
    }
    // A probe fd that is no dma-buf: the kernel checks the device before the fd, so the answer
    // says whether the device could take a binding, and nothing gets bound.
    if let Ok(fd) = std::fs::File::open("/dev/null") {
        if k.netdev_has("bind-rx") {
            t.devmem_rx = Some(
                zcnet_netlink::netdev::RxBinding::bind(ifindex, fd.as_raw_fd(), &[q])
                    .map(drop)
                    .map_err(|e| nl_refusal(&e)),
            );
        }
        if k.netdev_has("bind-tx") {
            t.devmem_tx = Some(
                zcnet_netlink::netdev::TxBinding::bind(ifindex, fd.as_raw_fd())
                    .map(drop)
                    .map_err(|e| nl_refusal(&e)),
            );
        }
    }
    t
}
