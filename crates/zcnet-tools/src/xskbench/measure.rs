//! One `bench xsk`: the CPUs, the lab and its flows, every case at every size, interleaved
//! (see the parent module).

use super::*;

/// Progress, for a caller that shows it.
#[derive(Debug, Clone, Copy)]
pub enum Progress {
    /// A run starts.
    Run {
        /// Runs done so far.
        index: usize,
        /// Runs in all.
        total: usize,
        /// The lab path.
        path: &'static str,
        /// The case.
        case: Case,
        /// Frame bytes.
        size: usize,
        /// Which repetition (from 1).
        rep: usize,
    },
}

/// The sender and receiver CPUs: `wanted`, or the first two CPUs this thread may run on.
pub fn pick_cpus(wanted: Option<(usize, usize)>) -> Result<(usize, usize)> {
    let allowed = zcnet::os::thread_affinity()
        .map_err(|e| Error::io("sched_getaffinity (which CPUs this process may use)", e))?;
    if let Some((t, r)) = wanted {
        for c in [t, r] {
            if !allowed.contains(&c) {
                return Err(Error::invalid_input(format!(
                    "--cpus: CPU {c} is not one this process may run on ({allowed:?})"
                )));
            }
        }
        return Ok((t, r));
    }
    match allowed.as_slice() {
        [] => Err(Error::invalid_input("no CPU to run on")),
        [only] => Ok((*only, *only)),
        [a, b, ..] => Ok((*a, *b)),
    }
}

/// Runs every case of `cfg` at every size, `repeat` times interleaved, in a fresh lab (deleted
/// when this returns, on every path). Needs root. Ctrl-C (with
/// [`crate::interrupt::install_handler`]) stops it within milliseconds with
/// [`Error::Interrupted`].
pub fn run(cfg: &XskBenchConfig, progress: &mut dyn FnMut(Progress)) -> Result<XskReport> {
    cfg.check()?;
    let (tx_cpu, rx_cpu) = pick_cpus(cfg.cpus)?;
    let mut lab = Lab::new()?;
    let mut links = Vec::new();
    for &path in &cfg.paths {
        links.push(match path {
            PathKind::Veth => {
                let v = lab.veth()?;
                let flow = veth_flow(&v, !cfg.other_host)?;
                Link {
                    path,
                    tx_ns: v.a,
                    tx_dev: "vA",
                    rx: Some((v.b, "vB")),
                    flow,
                }
            }
            PathKind::Sink => {
                let k = lab.sink()?;
                let flow = sink_flow(&k)?;
                Link {
                    path,
                    tx_ns: k.ns,
                    tx_dev: SINK_DEV,
                    rx: None,
                    flow,
                }
            }
        });
    }
    let mut rows: Vec<(usize, Row)> = Vec::new();
    for &size in &cfg.sizes {
        for (li, link) in links.iter().enumerate() {
            let mut seen = Vec::new();
            for &case in &cfg.cases {
                // The sink has no receiver: one row per sender.
                let case = match link.path {
                    PathKind::Veth => case,
                    PathKind::Sink => Case {
                        rx: RxVariant::None,
                        ..case
                    },
                };
                if seen.contains(&case) {
                    continue;
                }
                seen.push(case);
                rows.push((
                    li,
                    Row {
                        path: link.path.name(),
                        case,
                        size,
                        runs: Vec::new(),
                        error: None,
                        refused: false,
                    },
                ));
            }
        }
    }
    let total = rows.len() * cfg.repeat;
    let mut index = 0;
    for rep in 1..=cfg.repeat {
        for (li, row) in rows.iter_mut() {
            index += 1;
            if row.error.is_some() {
                continue;
            }
            progress(Progress::Run {
                index,
                total,
                path: row.path,
                case: row.case,
                size: row.size,
                rep,
            });
            let link = &links[*li];
            let tmpl = template(&link.flow, row.size)?;
            match run_once(
                link,
                &tmpl,
                row.case,
                cfg.duration,
                (tx_cpu, rx_cpu),
                cfg.rx_wait,
            ) {
                Ok(r) => row.runs.push(r),
                Err(Error::Interrupted) => return Err(Error::Interrupted),
                Err(e) => {
                    row.refused = matches!(e, Error::Unsupported { .. });
                    row.error = Some(e.into());
                }
            }
            if crate::interrupt::interrupted() {
                return Err(Error::Interrupted);
            }
        }
    }
    let rows: Vec<Row> = rows.into_iter().map(|(_, r)| r).collect();
    let mut placement = format!(
        "sender pinned to CPU {tx_cpu}, receiver pinned to CPU {rx_cpu}, receivers wait by {}",
        match cfg.rx_wait {
            RxWait::Sleep => "sleeping 50 µs",
            RxWait::Poll => "poll()",
            RxWait::Spin => "spinning",
        }
    );
    for l in &links {
        placement += &match &l.rx {
            Some((rx_ns, rx_dev)) => format!(
                "; {}: {} ({}) → {} ({}), frames to {}",
                l.path.name(),
                l.tx_dev,
                l.tx_ns,
                rx_dev,
                rx_ns,
                if cfg.other_host {
                    "another host's MAC address (the stack drops each one after the AF_PACKET tap)"
                } else {
                    "vB's own MAC address (the stack also processes each one)"
                }
            ),
            None => format!(
                "; {}: {} ({}), an ifb device that drops every frame (TX only)",
                l.path.name(),
                l.tx_dev,
                l.tx_ns
            ),
        };
    }
    drop(lab);
    Ok(XskReport {
        ratios: ratios(&rows, &cfg.sizes),
        rows,
        sender_cpu: tx_cpu,
        receiver_cpu: rx_cpu,
        placement,
        repeat: cfg.repeat,
        duration: cfg.duration,
    })
}

/// The flow vA → vB:[`PORT`], MAC addresses read inside each namespace; to vB's MAC address
/// with `to_host`, else to [`OTHER_HOST_MAC`] (another one if vB happens to have it).
pub fn veth_flow(p: &VethPath, to_host: bool) -> Result<UdpFlow> {
    let mac = |ns: &str, dev: &str| -> Result<[u8; 6]> {
        std::thread::scope(|s| {
            s.spawn(|| {
                lab::enter(ns)?;
                interface_mac(dev)
            })
            .join()
            .unwrap_or_else(|_| Err(Error::invalid_input("reading a MAC address panicked")))
        })
    };
    let vb = mac(&p.b, "vB")?;
    let dst_mac = match (to_host, vb == OTHER_HOST_MAC) {
        (true, _) => vb,
        (false, false) => OTHER_HOST_MAC,
        (false, true) => [0x02, 0, 0, 0, 0, 1],
    };
    Ok(UdpFlow {
        src_mac: mac(&p.a, "vA")?,
        dst_mac,
        src: std::net::Ipv4Addr::new(10, 10, 0, 1),
        dst: std::net::Ipv4Addr::new(10, 10, 0, 2),
        src_port: 40_000,
        dst_port: PORT,
        udp_checksum: false,
    })
}

/// The flow from the sink's device to 10.30.0.2:[`PORT`] (routed into the ifb, which drops it).
pub fn sink_flow(k: &SinkPath) -> Result<UdpFlow> {
    let src_mac = std::thread::scope(|s| {
        s.spawn(|| {
            lab::enter(&k.ns)?;
            interface_mac(SINK_DEV)
        })
        .join()
        .unwrap_or_else(|_| Err(Error::invalid_input("reading a MAC address panicked")))
    })?;
    Ok(UdpFlow {
        src_mac,
        dst_mac: OTHER_HOST_MAC,
        src: std::net::Ipv4Addr::new(10, 20, 0, 1),
        dst: std::net::Ipv4Addr::new(10, 30, 0, 2),
        src_port: 40_000,
        dst_port: PORT,
        udp_checksum: false,
    })
}

/// Where one path's sender and receiver run, and the flow between them.
#[derive(Debug, Clone)]
pub struct Link {
    /// The path.
    pub path: PathKind,
    /// The sender's namespace.
    pub tx_ns: String,
    /// The sender's device.
    pub tx_dev: &'static str,
    /// The receiver's namespace and device, if there is one.
    pub rx: Option<(String, &'static str)>,
    /// The frames' addresses.
    pub flow: UdpFlow,
}
