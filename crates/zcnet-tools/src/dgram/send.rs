//! `zcnet send --udp --tx af-xdp`: datagrams as AF_XDP frames, and the report of what moved.

use super::*;

/// What [`XskUdpSender::open`] sets up.
#[derive(Debug, Clone)]
pub struct XskSendConfig {
    /// The interface the frames leave from.
    pub iface: String,
    /// Its queue.
    pub queue: u32,
    /// Where the datagrams go.
    pub dst: SocketAddrV4,
    /// The UMEM's memory (host or hugepage).
    pub memory: MemoryKind,
}

/// Sends UDP datagrams as Ethernet/IPv4/UDP frames written into AF_XDP UMEM frames.
#[derive(Debug)]
pub struct XskUdpSender {
    xsk: Xsk,
    flow: UdpFlow,
    hop: NextHop,
    limits: XskLimits,
    /// Holds the source port, so that no socket of the stack takes it meanwhile.
    _port: UdpSocket,
    /// Frames written, not yet on the TX ring.
    batch: Vec<TxFrame>,
    ip_id: u16,
    bytes: u64,
    datagrams: u64,
    zerocopy_refused: Option<String>,
    start: Instant,
    cpu0: f64,
    progress: Instant,
}

impl XskUdpSender {
    /// Resolves where the frames go ([`nexthop::resolve`]), takes an ephemeral source port on
    /// the source address, binds an AF_XDP socket to the queue (zero-copy where the driver
    /// allows, else copy) with a UMEM of [`TX_FRAMES`] frames. No XDP program is attached.
    pub fn open(cfg: &XskSendConfig) -> Result<XskUdpSender> {
        let limits = XskLimits::of(&cfg.iface)?;
        let hop = nexthop::resolve(
            &cfg.iface,
            *cfg.dst.ip(),
            RESOLVE_WAIT,
            &crate::interrupt::token(),
        )?;
        let port = UdpSocket::bind((hop.src, 0))
            .map_err(|e| Error::io(format!("taking a UDP source port on {}", hop.src), e))?;
        let src_port = port
            .local_addr()
            .map_err(|e| Error::io("getsockname", e))?
            .port();
        let mut xcfg = XskConfig::new(cfg.queue);
        xcfg.frame_size = limits.frame_size;
        xcfg.rx_frames = 0;
        xcfg.tx_frames = TX_FRAMES;
        xcfg.ring_size = TX_FRAMES;
        let (xsk, zerocopy_refused) = open_xsk(&cfg.iface, cfg.memory, &xcfg)?;
        let flow = UdpFlow {
            src_mac: hop.src_mac,
            dst_mac: hop.dst_mac,
            src: hop.src,
            dst: *cfg.dst.ip(),
            src_port,
            dst_port: cfg.dst.port(),
            udp_checksum: true,
        };
        let now = Instant::now();
        Ok(XskUdpSender {
            xsk,
            flow,
            hop,
            limits,
            _port: port,
            batch: Vec::with_capacity(BATCH),
            ip_id: 0,
            bytes: 0,
            datagrams: 0,
            zerocopy_refused,
            start: now,
            cpu0: zcnet::os::thread_cpu_seconds(),
            progress: now,
        })
    }

    /// The largest payload one datagram may carry.
    pub fn max_payload(&self) -> usize {
        self.limits.max_payload
    }

    /// Why the zero-copy bind was refused, if it was (the socket then runs in copy mode).
    pub fn zerocopy_refused(&self) -> Option<&str> {
        self.zerocopy_refused.as_deref()
    }

    /// One line saying what is sent from where to where, and how the address was had.
    pub fn describe(&self) -> String {
        let f = &self.flow;
        let how = match self.hop.resolution {
            Resolution::Cached(state) => format!("neighbour entry {state}"),
            Resolution::Resolved(d) => format!("resolved by ARP in {} ms", d.as_millis()),
        };
        let via = self
            .hop
            .gateway
            .map_or(String::new(), |g| format!(" via gateway {g}"));
        format!(
            "af-xdp: {}:{} ({} {}, queue {}) → {}:{} ({}{via}, {how}), {} mode, {} B frames",
            f.src,
            f.src_port,
            self.hop.iface,
            zcnet::os::format_mac(&f.src_mac),
            self.xsk.config().queue,
            f.dst,
            f.dst_port,
            zcnet::os::format_mac(&f.dst_mac),
            self.mode_name(),
            self.limits.frame_size
        )
    }

    fn mode_name(&self) -> &'static str {
        if self.xsk.is_zerocopy().unwrap_or(false) {
            "zero-copy"
        } else {
            "copy"
        }
    }

    fn stalled(&self) -> Error {
        Error::Stalled {
            seconds: STALL.as_secs(),
            outstanding: self.xsk.tx_in_flight() + self.batch.len(),
        }
    }

    /// Hands the written frames to the TX ring, as many as it takes (and kicks).
    fn push(&mut self) -> Result<()> {
        if self.xsk.send(&mut self.batch)? > 0 {
            self.progress = Instant::now();
        } else {
            if crate::interrupt::interrupted() {
                return Err(Error::Interrupted);
            }
            if self.progress.elapsed() > STALL {
                return Err(self.stalled());
            }
            std::thread::yield_now();
        }
        Ok(())
    }

    /// A free frame, waiting for completions when every frame is with the kernel.
    fn frame(&mut self) -> Result<TxFrame> {
        loop {
            if let Some(f) = self.xsk.tx_frame()? {
                return Ok(f);
            }
            self.push()?;
        }
    }

    /// Sends one datagram of at most `len` payload bytes: `fill` writes the payload in place
    /// and returns how many bytes it wrote (0: nothing is sent). The frame goes to the kernel
    /// with the next batch. Returns the payload bytes.
    pub fn send_with(
        &mut self,
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<usize>,
    ) -> Result<usize> {
        if len > self.limits.max_payload {
            return Err(Error::invalid_input(format!(
                "a {len} B datagram does not fit one AF_XDP frame (at most {} B)",
                self.limits.max_payload
            )));
        }
        let mut f = self.frame()?;
        let buf = f.bytes_mut();
        let n = fill(&mut buf[HEADERS_LEN..HEADERS_LEN + len])?.min(len);
        if n == 0 {
            return Ok(0);
        }
        // Headers around the payload already in place; the checksums cover it.
        let total = self
            .flow
            .write_with(buf, self.ip_id, n, |_| {})
            .map_err(|e| Error::invalid_input(format!("building a UDP frame: {e}")))?;
        f.set_len(total)?;
        self.ip_id = self.ip_id.wrapping_add(1);
        self.batch.push(f);
        self.bytes += n as u64;
        self.datagrams += 1;
        if self.batch.len() >= BATCH {
            self.push()?;
        }
        Ok(n)
    }

    /// Hands over what is left, waits until the kernel has completed every frame, and reports.
    pub fn finish(mut self) -> Result<XskSendReport> {
        self.progress = Instant::now();
        while !self.batch.is_empty() {
            self.push()?;
        }
        if !self.xsk.flush(STALL)? {
            return Err(self.stalled());
        }
        let seconds = self.start.elapsed().as_secs_f64();
        let stats = self.xsk.stats()?;
        let zerocopy = self.xsk.is_zerocopy()?;
        Ok(XskSendReport {
            bytes: self.bytes,
            datagrams: self.datagrams,
            seconds,
            cpu_seconds: zcnet::os::thread_cpu_seconds() - self.cpu0,
            zerocopy,
            zerocopy_refused: self.zerocopy_refused.clone(),
            stats,
            src: SocketAddrV4::new(self.flow.src, self.flow.src_port),
            dst: SocketAddrV4::new(self.flow.dst, self.flow.dst_port),
            iface: self.hop.iface.clone(),
            queue: self.xsk.config().queue,
            frame_size: self.limits.frame_size,
        })
    }
}

/// What [`XskUdpSender`] did, and what the kernel counted.
#[derive(Debug, Clone)]
pub struct XskSendReport {
    /// Payload bytes sent.
    pub bytes: u64,
    /// Datagrams (frames) sent.
    pub datagrams: u64,
    /// Seconds from the socket's bind to the last completion.
    pub seconds: f64,
    /// CPU seconds of the sending thread.
    pub cpu_seconds: f64,
    /// Whether the socket was bound in zero-copy mode.
    pub zerocopy: bool,
    /// Why it was not, when the driver refused.
    pub zerocopy_refused: Option<String>,
    /// Frames, completions, kicks and `XDP_STATISTICS`.
    pub stats: XskStats,
    /// The source address and port.
    pub src: SocketAddrV4,
    /// The destination.
    pub dst: SocketAddrV4,
    /// The interface.
    pub iface: String,
    /// Its queue.
    pub queue: u32,
    /// The UMEM frame size.
    pub frame_size: u32,
}

impl XskSendReport {
    /// Payload bytes the kernel sent without copying them: all of them with a zero-copy bind,
    /// none in copy mode.
    pub fn zerocopy_bytes(&self) -> u64 {
        if self.zerocopy {
            self.bytes
        } else {
            0
        }
    }

    /// Payload bytes the kernel copied (into an skb per frame, in copy mode).
    pub fn copied_bytes(&self) -> u64 {
        self.bytes - self.zerocopy_bytes()
    }

    /// The human summary (one line).
    pub fn summary(&self) -> String {
        let s = &self.stats;
        let mode = if self.zerocopy {
            "AF_XDP zero-copy mode (the driver sent from the UMEM: zero copy)"
        } else {
            "AF_XDP copy mode (the kernel copied each frame into an skb: not zero copy)"
        };
        format!(
            "{} B in {:.2} s ({:.0} MB/s) with af-xdp: {} datagrams {} → {} from {} queue {}, {mode}: {} frames sent, {} completed ({} dropped by the device), {} kicks; kernel: {} invalid TX descriptors, TX ring empty {}x; CPU {:.3} s",
            self.bytes,
            self.seconds,
            mb_per_s(self.bytes, self.seconds),
            self.datagrams,
            self.src,
            self.dst,
            self.iface,
            self.queue,
            s.tx_frames,
            s.tx_completed,
            s.tx_dropped,
            s.kicks,
            s.kernel.tx_invalid_descs,
            s.kernel.tx_ring_empty_descs,
            self.cpu_seconds
        )
    }

    /// The `--json` document, with the keys of the other send modes and an `af_xdp` section.
    pub fn to_json(&self) -> Value {
        let s = &self.stats;
        json!({
            "tx": "af-xdp",
            "proto": "udp",
            "bytes": self.bytes,
            "sends": self.datagrams,
            "seconds": self.seconds,
            "mb_per_s": mb_per_s(self.bytes, self.seconds),
            "notifications": s.tx_completed,
            "zerocopy_bytes": self.zerocopy_bytes(),
            "copied_bytes": self.copied_bytes(),
            "cpu_seconds": self.cpu_seconds,
            "switches": [],
            "af_xdp": {
                "bind": if self.zerocopy { "zero-copy" } else { "copy" },
                "zerocopy_refused": self.zerocopy_refused,
                "iface": self.iface,
                "queue": self.queue,
                "frame_size": self.frame_size,
                "src": self.src.to_string(),
                "dst": self.dst.to_string(),
                "frames": s.tx_frames,
                "completions": s.tx_completed,
                "dropped": s.tx_dropped,
                "kicks": s.kicks,
                "xdp_statistics": kernel_json(&s.kernel),
            },
        })
    }
}
