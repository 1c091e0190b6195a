//! Making an [`Xsk`]: binding the socket (alone, or sharing another's UMEM), taking its frames,
//! and attaching the XDP program that hands it one UDP port; why a bind was refused.

use super::*;

fn bind_error(e: io::Error, iface: &str, cfg: &XskConfig, umem_len: usize) -> Error {
    let what = format!(
        "AF_XDP {} bind to queue {} of {iface}",
        cfg.mode.name(),
        cfg.queue
    );
    match e.raw_os_error() {
        // net/xdp/xdp_umem.c `xdp_umem_account_pages`: the UMEM's pages are charged to the
        // user's locked memory unless the process has CAP_IPC_LOCK; over the limit: ENOBUFS.
        Some(libc::ENOBUFS) => {
            let page = zcnet_sys::mem::page_size() as u64;
            let need = (umem_len as u64).div_ceil(page) * page;
            let umem = format!(
                "the AF_XDP UMEM ({})",
                crate::error::size_words(need)
            );
            crate::tx::memlock::too_small(umem, need, need).unwrap_or_else(|| Error::io(what, e))
        }
        Some(libc::EPERM) => Error::NotRoot { what: "AF_XDP" },
        Some(libc::EAFNOSUPPORT) => Error::Unsupported {
            what: what.into(),
            source: e,
            remedy: Remedy::KernelConfig("CONFIG_XDP_SOCKETS"),
        },
        Some(libc::EOPNOTSUPP) if cfg.mode == XskMode::ZeroCopy => Error::Unsupported {
            what: what.into(),
            source: e,
            remedy: Remedy::Other("the driver has no AF_XDP zero-copy support: use AF_XDP copy mode"),
        },
        Some(libc::EINVAL) => Error::Unsupported {
            what: what.into(),
            source: e,
            remedy: Remedy::Other("the interface has no such queue (see 'ethtool -l IFACE'), or the frame/ring sizes are invalid"),
        },
        Some(libc::EBUSY) => Error::Unsupported {
            what: what.into(),
            source: e,
            remedy: Remedy::Other("another AF_XDP socket is bound to that queue: close it or use another queue"),
        },
        // xsk_bind with XDP_SHARED_UMEM: the socket to share with is not a bound AF_XDP socket.
        Some(libc::EBADF | libc::ENOPROTOOPT | libc::ENOTSOCK) => Error::Unsupported {
            what: format!("{what} sharing a UMEM").into(),
            source: e,
            remedy: Remedy::Other("the socket to share the UMEM with is closed or not bound: share with an open Xsk"),
        },
        _ => Error::io(what, e),
    }
}

/// An identity of the calling thread's network namespace (the inode of its nsfs file), so
/// that XDP programs are shared only between sockets that see the same interfaces.
fn netns_id() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/thread-self/ns/net").map_or(0, |m| m.ino())
}

impl Xsk {
    /// Opens an AF_XDP socket on queue `cfg.queue` of `iface` (in the calling thread's network
    /// namespace) with its UMEM in `region`, gives the receive frames to the kernel, and — with
    /// `cfg.rx_port` — attaches the XDP program that redirects that UDP port to it. On error
    /// nothing stays attached, bound or mapped.
    ///
    /// The whole region becomes the UMEM, `region.len() / cfg.frame_size` frames (all pinned):
    /// the socket takes `cfg.rx_frames` for receiving and `cfg.tx_frames` for sending, and the
    /// rest wait for sockets that share the UMEM ([`Xsk::open_shared`]).
    pub fn open(iface: &str, region: Region, cfg: &XskConfig) -> Result<Xsk> {
        cfg.check()?;
        if region.len() < cfg.umem_len() {
            return Err(Error::RegionTooSmall {
                need: cfg.umem_len(),
                have: region.len(),
            });
        }
        if region.backing() == zcnet_sys::mem::Backing::Device {
            return Err(Error::NotCpuAccessible);
        }
        if region.backing() == zcnet_sys::mem::Backing::Caller {
            // The kernel pins the UMEM's pages and a zero-copy driver may still DMA into them
            // after the socket closes (the pool is released later); memory zcnet maps itself
            // outlives that (unmapping leaves pinned pages alone), a caller's heap memory would
            // be reused meanwhile. XDP_UMEM_REG also wants it page-aligned.
            return Err(Error::invalid_input(crate::text!(
                "an AF_XDP UMEM must be memory zcnet maps (",
                crate::text::Call::RegionAnonymous,
                " or ",
                crate::text::Call::RegionHuge,
                "), not the caller's",
            )));
        }
        let ifindex = zcnet_sys::zcrx::if_index(iface).ok_or_else(|| Error::UnknownInterface {
            given: iface.to_string(),
        })?;
        let frame_count = u32::try_from(region.len() / cfg.frame_size as usize).unwrap_or(u32::MAX);
        let scfg = XdpSocketConfig {
            frame_size: cfg.frame_size,
            frame_count,
            headroom: cfg.headroom,
            fill_size: cfg.ring_size,
            comp_size: cfg.ring_size,
            rx_size: cfg.ring_size,
            tx_size: cfg.ring_size,
            need_wakeup: cfg.need_wakeup,
            mode: cfg.mode.bind(),
        };
        let (sock, mut frames) = XdpSocket::new(region.into_mapping(), ifindex, cfg.queue, &scfg)
            .map_err(|e| bind_error(e, iface, cfg, scfg.umem_len()))?;
        let spare = frames.split_off((cfg.rx_frames + cfg.tx_frames) as usize);
        let tx_free = frames.split_off(cfg.rx_frames as usize);
        let group = Arc::new(Group {
            spare: Mutex::new(spare),
            programs: Mutex::new(Vec::new()),
        });
        Self::start(sock, frames, tx_free, group, iface, ifindex, cfg)
    }

    /// Opens another AF_XDP socket on the UMEM of this one (`XDP_SHARED_UMEM`), bound to queue
    /// `cfg.queue` of `iface`: another queue of the same interface, or any queue of another
    /// interface (kernel 5.10+). It has its own fill, completion, RX and TX rings, and takes
    /// `cfg.rx_frames + cfg.tx_frames` frames from those of the UMEM no socket holds (open the
    /// first socket on a region of the sum of every socket's [`XskConfig::umem_len`]). Its
    /// frames are its own: they come back to it, and [`Xsk::send`] refuses another socket's.
    /// When it closes, the frames it holds (not those in the kernel) go back to the UMEM.
    ///
    /// The frame size, headroom, mode and need-wakeup are the UMEM's: `cfg` must repeat this
    /// socket's. With `cfg.rx_port` on an interface where a socket of this UMEM already has
    /// the XDP program, the new socket joins that program (it must redirect the same port);
    /// elsewhere it attaches its own. On error nothing new stays bound or attached and the
    /// frames go back.
    pub fn open_shared(&self, iface: &str, cfg: &XskConfig) -> Result<Xsk> {
        cfg.check()?;
        let mine = &self.config;
        if (cfg.frame_size, cfg.headroom) != (mine.frame_size, mine.headroom) {
            return Err(Error::invalid_input(format!(
                "a socket sharing a UMEM has its frame size and headroom ({} B, headroom {}); {} B, headroom {} were asked for: use the first socket's",
                mine.frame_size, mine.headroom, cfg.frame_size, cfg.headroom
            )));
        }
        if (cfg.mode, cfg.need_wakeup) != (mine.mode, mine.need_wakeup) {
            return Err(Error::invalid_input(format!(
                "a socket sharing a UMEM binds as the first one did ({} mode, need-wakeup {}): set mode and need_wakeup as for the first socket",
                mine.mode.name(),
                mine.need_wakeup
            )));
        }
        let ifindex = zcnet_sys::zcrx::if_index(iface).ok_or_else(|| Error::UnknownInterface {
            given: iface.to_string(),
        })?;
        if ifindex == self.ifindex && cfg.queue == mine.queue {
            return Err(Error::invalid_input(format!(
                "queue {} of {iface} is the queue of the socket whose UMEM it would share: use another queue or interface",
                cfg.queue
            )));
        }
        let need = (cfg.rx_frames + cfg.tx_frames) as usize;
        let mut frames = {
            let mut spare = lock(&self.home.group.spare);
            if spare.len() < need {
                return Err(Error::invalid_input(format!(
                    "the shared UMEM has {} frames no socket holds, the socket on queue {} of {iface} asks for {need}: open the first socket on a region as large as every socket's umem_len() together",
                    spare.len(),
                    cfg.queue
                )));
            }
            let at = spare.len() - need;
            spare.split_off(at)
        };
        let s = self.sock.config();
        let scfg = XdpSocketConfig {
            fill_size: cfg.ring_size,
            comp_size: cfg.ring_size,
            rx_size: cfg.ring_size,
            tx_size: cfg.ring_size,
            ..*s
        };
        let sock = match XdpSocket::new_shared(&self.sock, ifindex, cfg.queue, &scfg) {
            Ok(sock) => sock,
            Err(e) => {
                lock(&self.home.group.spare).append(&mut frames);
                return Err(bind_error(e, iface, cfg, 0));
            }
        };
        let tx_free = frames.split_off(cfg.rx_frames as usize);
        let group = Arc::clone(&self.home.group);
        // On error from here, the new Xsk's drop gives its frames back to the group.
        Self::start(sock, frames, tx_free, group, iface, ifindex, cfg)
    }

    fn start(
        sock: XdpSocket,
        rx_spare: Vec<UmemFrame>,
        tx_free: Vec<UmemFrame>,
        group: Arc<Group>,
        iface: &str,
        ifindex: u32,
        cfg: &XskConfig,
    ) -> Result<Xsk> {
        let home = Arc::new(Home {
            returns: Mutex::new(Returns::default()),
            pending: AtomicBool::new(false),
            group,
        });
        let mut xsk = Xsk {
            xdp: None,
            sock,
            tx_free,
            rx_spare,
            scratch: Vec::new(),
            tokens: Vec::new(),
            home,
            iface: iface.to_string(),
            ifindex,
            config: *cfg,
            cancel: Cancel::new(),
        };
        // The program first: when it cannot attach, no frame is in the kernel yet, so all of
        // them go back to the UMEM with the dropped socket (frames on a closed socket's fill
        // ring are lost to it).
        if let Some(port) = cfg.rx_port {
            xsk.attach(port)?;
        }
        xsk.refill()?;
        Ok(xsk)
    }

    fn attach(&mut self, port: u16) -> Result<()> {
        let (ifindex, q) = (self.ifindex, self.config.queue);
        let iface = self.iface.clone();
        let netns = netns_id();
        let group = Arc::clone(&self.home.group);
        let mut programs = lock(&group.programs);
        programs.retain(|p| p.att.strong_count() > 0);
        if let Some(p) = programs
            .iter()
            .find(|p| p.netns == netns && p.ifindex == ifindex)
        {
            if let Some(att) = p.att.upgrade() {
                if p.port != port {
                    return Err(Error::invalid_input(format!(
                        "the XDP program on {iface} (one per interface, shared by the sockets of this UMEM) redirects UDP port {}, not {port}: use rx_port Some({}) on {iface}",
                        p.port, p.port
                    )));
                }
                if q >= att.map.entries() {
                    return Err(Error::invalid_input(format!(
                        "queue {q} of {iface} is past the {} keys of the XSKMAP shared on {iface}: use a queue below {}",
                        att.map.entries(),
                        att.map.entries()
                    )));
                }
                att.map
                    .set(q, self.sock.fd())
                    .map_err(|e| Error::io("putting the AF_XDP socket in the XSKMAP", e))?;
                self.xdp = Some(att);
                return Ok(());
            }
        }
        let map = XskMap::create((q + 1).max(XSKMAP_ENTRIES), "zcnet_xsk").map_err(|e| match e
            .raw_os_error()
        {
            Some(libc::EPERM) => Error::NotRoot {
                what: "loading an XDP program",
            },
            _ => Error::io("creating the XSKMAP (bpf BPF_MAP_CREATE)", e),
        })?;
        map.set(q, self.sock.fd())
            .map_err(|e| Error::io("putting the AF_XDP socket in the XSKMAP", e))?;
        let insns = zcnet_core::xdp_prog::udp_port_redirect(map.fd().as_raw_fd(), port);
        let prog = BpfProg::load_xdp(&insns, "zcnet_xsk").map_err(|e| Error::Kernel {
            what: "the kernel refused the XDP program".into(),
            errno: e.source.raw_os_error(),
            message: format!("{} (a bug in zcnet: please report it with this log)", e).into(),
        })?;
        let modes: &[XdpAttachMode] = match self.config.xdp_mode {
            XdpMode::Auto => &[XdpAttachMode::Native, XdpAttachMode::Generic],
            XdpMode::Native => &[XdpAttachMode::Native],
            XdpMode::Generic => &[XdpAttachMode::Generic],
        };
        let mut last = None;
        for (i, &mode) in modes.iter().enumerate() {
            match XdpLink::attach(&prog, ifindex, mode) {
                Ok(link) => {
                    let att = Arc::new(Attachment {
                        link,
                        prog,
                        map,
                        mode,
                    });
                    programs.push(Program {
                        netns,
                        ifindex,
                        port,
                        att: Arc::downgrade(&att),
                    });
                    self.xdp = Some(att);
                    return Ok(());
                }
                // Native unsupported by the driver: try generic.
                Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) && i + 1 < modes.len() => {}
                Err(e) => {
                    last = Some((mode, e));
                    break;
                }
            }
        }
        let (mode, e) = last.unwrap_or_else(|| unreachable!("the loop ends with an error"));
        let what = format!("attaching the {} XDP program to {iface}", mode.name());
        Err(match e.raw_os_error() {
            Some(libc::EBUSY) | Some(libc::EEXIST) => Error::Unsupported {
                what: what.into(),
                source: e,
                remedy: Remedy::Other("another XDP program is attached to the interface: detach it ('ip link set dev IFACE xdp off', or end the process holding its bpf link) or use another interface"),
            },
            Some(libc::EOPNOTSUPP) => Error::Unsupported {
                what: what.into(),
                source: e,
                remedy: Remedy::Other("the driver has no native XDP: attach the program in generic (skb) mode, or let the mode be chosen automatically"),
            },
            Some(libc::EPERM) => Error::NotRoot {
                what: "attaching an XDP program",
            },
            _ => Error::io(what, e),
        })
    }
}
