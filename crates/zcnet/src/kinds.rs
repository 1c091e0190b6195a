//! The names the library's modules share: the send modes, the receive modes and the kinds of
//! memory. A leaf: it imports nothing of the crate but its words ([`crate::text`](mod@crate::text)),
//! so that errors and remedies can name a mode without importing the send and receive paths.
//! Each is re-exported where it is used: [`crate::tx::TxMode`], [`crate::rx::RxMode`],
//! [`crate::region::MemoryKind`]; parsing a mode name is the mode's own module's
//! ([`TxMode::parse`], [`RxMode::parse`]), since a bad name is an [`crate::Error`].

/// A send mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxMode {
    /// `send()`: the kernel copies. The baseline.
    Copy,
    /// `MSG_ZEROCOPY` sends; completions from the socket error queue.
    MsgZerocopy,
    /// io_uring `IORING_OP_SEND` (copies), several in flight.
    Uring,
    /// io_uring `IORING_OP_SEND_ZC` from registered buffers, several in flight.
    UringZc,
    /// `uring-zc` until most notifications say COPIED, then `copy`; re-checks now and then.
    Auto,
    /// devmem TCP transmit: `sendmsg(MSG_ZEROCOPY)` from a dma-buf ([`TxConfig::dmabuf`](crate::tx::TxConfig::dmabuf))
    /// bound to the egress interface with netdev `bind-tx`; completions as `msg-zerocopy`.
    Devmem,
}

impl TxMode {
    /// The modes `zcnet bench tx` compares by default, in table order: every mode that works
    /// on host memory. [`TxMode::Devmem`] is not among them (see [`TxMode::NAMED`]).
    pub const ALL: [TxMode; 5] = [
        TxMode::Copy,
        TxMode::MsgZerocopy,
        TxMode::Uring,
        TxMode::UringZc,
        TxMode::Auto,
    ];

    /// Every mode `--tx` accepts: [`TxMode::ALL`] and [`TxMode::Devmem`].
    pub const NAMED: [TxMode; 6] = [
        TxMode::Copy,
        TxMode::MsgZerocopy,
        TxMode::Uring,
        TxMode::UringZc,
        TxMode::Auto,
        TxMode::Devmem,
    ];

    /// The `--tx` name.
    pub fn name(self) -> &'static str {
        match self {
            TxMode::Copy => "copy",
            TxMode::MsgZerocopy => "msg-zerocopy",
            TxMode::Uring => "uring",
            TxMode::UringZc => "uring-zc",
            TxMode::Auto => "auto",
            TxMode::Devmem => "devmem",
        }
    }

    /// The mode as a term of a message ([`crate::text`](mod@crate::text)), which each front end says its way.
    pub fn term(self) -> crate::text::Term {
        let ident = match self {
            TxMode::Copy => "Copy",
            TxMode::MsgZerocopy => "MsgZerocopy",
            TxMode::Uring => "Uring",
            TxMode::UringZc => "UringZc",
            TxMode::Auto => "Auto",
            TxMode::Devmem => "Devmem",
        };
        crate::text::Term::TxMode {
            ident,
            name: self.name(),
        }
    }
}

impl std::fmt::Display for TxMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A receive mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RxMode {
    /// epoll + `recv()`: the kernel copies into the application's buffers. The baseline.
    Copy,
    /// io_uring multishot receive into a provided buffer ring (the kernel still copies, but one
    /// request serves a connection for its lifetime and completions come in batches).
    Uring,
    /// io_uring zero-copy receive (zcrx): the NIC writes payload into a registered area.
    Zcrx,
    /// devmem TCP: the NIC writes payload into a dma-buf (device memory) bound to its queues.
    Devmem,
    /// The best of zcrx, uring and copy that works here; the reasons for the others are kept.
    Auto,
}

impl RxMode {
    /// Every mode, in table order.
    pub const ALL: [RxMode; 5] = [
        RxMode::Copy,
        RxMode::Uring,
        RxMode::Zcrx,
        RxMode::Devmem,
        RxMode::Auto,
    ];

    /// The `--rx` name.
    pub fn name(self) -> &'static str {
        match self {
            RxMode::Copy => "copy",
            RxMode::Uring => "uring",
            RxMode::Zcrx => "zcrx",
            RxMode::Devmem => "devmem",
            RxMode::Auto => "auto",
        }
    }

    /// The mode as a term of a message ([`crate::text`](mod@crate::text)), which each front end says its way.
    pub fn term(self) -> crate::text::Term {
        let ident = match self {
            RxMode::Copy => "Copy",
            RxMode::Uring => "Uring",
            RxMode::Zcrx => "Zcrx",
            RxMode::Devmem => "Devmem",
            RxMode::Auto => "Auto",
        };
        crate::text::Term::RxMode {
            ident,
            name: self.name(),
        }
    }

    /// Whether the data lands in device memory the CPU may not read (only `devmem`).
    pub fn is_device(self) -> bool {
        self == RxMode::Devmem
    }
}

impl std::fmt::Display for RxMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Which memory to allocate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryKind {
    /// Anonymous 4 KiB pages.
    Anonymous,
    /// The library's choice of host memory for a sender, by its mode
    /// ([`Region::for_sender`](crate::Region::for_sender)): transparent huge pages for `MSG_ZEROCOPY`, anonymous 4 KiB
    /// pages otherwise (and from [`Region::new`](crate::Region::new), which knows no mode).
    Auto,
    /// 2 MiB huge pages; transparent huge pages (madvise) when none are reserved.
    Huge,
    /// Memory of CUDA device `N` (`cuda:N`).
    Cuda(u32),
    /// Host memory that is also a dma-buf: a memfd made into a udmabuf ([`Region::udmabuf`](crate::Region::udmabuf);
    /// needs `/dev/udmabuf`, CONFIG_UDMABUF).
    Udmabuf,
}

impl MemoryKind {
    /// The `--mem` values, for messages.
    pub const NAMES: &'static str = "auto, host, hugepage, udmabuf, cuda[:N]";

    /// Parses a `--mem` value: `auto`, `host` (alias `anon`), `hugepage` (alias `huge`),
    /// `udmabuf`, `cuda` or `cuda:N`.
    pub fn parse(s: &str) -> Option<MemoryKind> {
        match s {
            "auto" => Some(MemoryKind::Auto),
            "host" | "anon" | "anonymous" | "pages" => Some(MemoryKind::Anonymous),
            "hugepage" | "huge" | "hugepages" => Some(MemoryKind::Huge),
            "udmabuf" => Some(MemoryKind::Udmabuf),
            "cuda" | "gpu" => Some(MemoryKind::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(MemoryKind::Cuda),
        }
    }

    /// The `--mem` name.
    pub fn name(self) -> String {
        match self {
            MemoryKind::Anonymous => "host".into(),
            MemoryKind::Auto => "auto".into(),
            MemoryKind::Huge => "hugepage".into(),
            MemoryKind::Udmabuf => "udmabuf".into(),
            MemoryKind::Cuda(n) => format!("cuda:{n}"),
        }
    }

    /// The kind as a term of a message ([`crate::text`](mod@crate::text)), which each front end says its way.
    pub fn term(self) -> crate::text::Term {
        use crate::text::Memory;
        crate::text::Term::Memory(match self {
            MemoryKind::Anonymous => Memory::Host,
            MemoryKind::Auto => Memory::Auto,
            MemoryKind::Huge => Memory::Huge,
            MemoryKind::Cuda(_) => Memory::Cuda,
            MemoryKind::Udmabuf => Memory::Udmabuf,
        })
    }

    /// Whether it is device memory.
    pub fn is_device(self) -> bool {
        matches!(self, MemoryKind::Cuda(_))
    }
}
