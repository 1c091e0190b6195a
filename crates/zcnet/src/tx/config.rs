//! What a sender is asked to be: the send modes, [`TxConfig`], the sizing rules of its region
//! and buffers, the pacing a small zero-copy window meets, and the fallbacks `auto` reports.

use super::*;
pub use crate::kinds::TxMode;

impl TxMode {
    /// Parses a `--tx` name.
    pub fn parse(s: &str) -> Result<TxMode> {
        TxMode::NAMED
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| Error::UnknownMode {
                given: s.to_string(),
            })
    }
}

/// A send mechanism `auto` did not use, and why: the kernel refused it, or its memory could not
/// be locked (RLIMIT_MEMLOCK). See [`Sender::fallbacks`].
pub type Fallback = crate::fallback::Fallback<TxMode>;

/// How to send.
#[derive(Debug, Clone)]
pub struct TxConfig {
    /// The mechanism.
    pub mode: TxMode,
    /// Buffers (and so sends) in flight: at least this many. Default 8.
    pub inflight: usize,
    /// Bytes in flight: the sender cuts enough buffers to hold at least this many bytes, so
    /// that small sends keep as much data moving as large ones ([`TxConfig::buffers`]).
    /// Default [`DEFAULT_WINDOW`] (512 KiB: the default 8 buffers of 64 KiB); 0 leaves the
    /// count to `inflight` alone.
    pub window: usize,
    /// Size of each buffer. Default 64 KiB.
    pub buf_size: usize,
    /// Give up with [`Error::Stalled`] after this long without any completion. Default 10 s.
    pub stall_timeout: Duration,
    /// `devmem`: the dma-buf to send from, whose offset 0 is the region's first byte (for host
    /// memory, a udmabuf made from the region's memfd). Default none: the region's own
    /// ([`Region::dmabuf`]: a CUDA region exports one; a host region has none, and `devmem`
    /// then fails saying so). Ignored by the other modes.
    pub dmabuf: Option<Arc<OwnedFd>>,
    /// `devmem`: the interface to bind the dma-buf to (`bind-tx`); the socket's route must
    /// leave through it. Default: the device the socket is bound to (`SO_BINDTODEVICE`), else
    /// the interface that owns the socket's local address.
    pub iface: Option<String>,
    /// The caller's cancel token: once cancelled, the sender's waits (for a buffer, a flush,
    /// the end of [`Sender::finish`]) return [`Error::Interrupted`], a send cut short by a
    /// signal (`EINTR`) is not retried, and a TCP sender dropped with buffers still held
    /// aborts its connection so that they come back at once. A token made with
    /// [`Cancel::ending_at_signals`] also ends those calls at any signal that cuts one of
    /// their system calls short ([`Sender::last_call_accepted`] then says what went). Default: a
    /// fresh token nobody cancels.
    pub cancel: Cancel,
}

impl TxConfig {
    /// Defaults for `mode`: 8 in flight and a 512 KiB window, 64 KiB buffers, 10 s stall
    /// timeout.
    pub fn new(mode: TxMode) -> Self {
        TxConfig {
            mode,
            inflight: 8,
            window: DEFAULT_WINDOW,
            buf_size: 64 << 10,
            stall_timeout: Duration::from_secs(10),
            dmabuf: None,
            iface: None,
            cancel: Cancel::new(),
        }
    }

    /// The buffers the sender cuts its region into, each of them one send in flight at most:
    /// `inflight`, raised to hold `window` bytes (at most [`MAX_WINDOW_BUFFERS`] for the
    /// window's sake). 8 × 64 KiB by default; 128 × 4 KiB for 4 KiB sends.
    ///
    /// ```
    /// use zcnet::{TxConfig, TxMode};
    /// let mut cfg = TxConfig::new(TxMode::UringZc);
    /// assert_eq!(cfg.buffers(), 8);
    /// cfg.buf_size = 4096;
    /// assert_eq!(cfg.buffers(), 128);
    /// cfg.window = 0;
    /// assert_eq!(cfg.buffers(), 8);
    /// ```
    pub fn buffers(&self) -> usize {
        let by_window = self
            .window
            .div_ceil(self.buf_size.max(1))
            .min(MAX_WINDOW_BUFFERS);
        self.inflight.max(1).max(by_window)
    }
}

/// The default [`TxConfig::window`]: 512 KiB, the bytes the default 8 buffers of 64 KiB hold.
/// With fewer bytes in flight, a zero-copy TCP sender waits for ACKs: at 4 KiB, 8 buffers in
/// flight ran at a few MB/s on loopback (docs/perf.md).
pub const DEFAULT_WINDOW: usize = 512 << 10;

/// The most buffers [`TxConfig::window`] adds: sends smaller than `window / 1024` (512 B by
/// default) get fewer bytes in flight than the window, not an ever larger ring.
pub const MAX_WINDOW_BUFFERS: usize = 1024;

/// Send size below which `auto` copies: measured on the lab's sink (UDP, truly zero-copy),
/// `uring-zc` runs at 0.92x copy at 4 KiB, 0.93x at 8 KiB and 1.04x at 16 KiB (docs/perf.md).
pub const AUTO_MIN_ZERO_COPY: usize = 16 << 10;

/// Bytes of zero-copy sends in flight below which a TCP stream stalls with Nagle on: every
/// buffer waits for its notification, the notification for its bytes to leave, and Nagle holds a
/// segment smaller than the MSS until the receiver's (delayed, ~40 ms) ACK of the previous one.
/// 64 KiB is the loopback MSS; on a 1500-byte link the window is far above it.
pub const NAGLE_SAFE_WINDOW: usize = 128 << 10;

/// Whether a zero-copy TCP sender of `mode` should turn Nagle off (TCP_NODELAY), for sends of
/// `buf_size` bytes with `window` bytes of buffers in flight, on a path whose full segment is
/// `segment` bytes (`None`: unknown; see [`path_segment`]):
/// - a window under [`NAGLE_SAFE_WINDOW`] stalls with Nagle on (see there);
/// - sends of two full segments or more gain nothing from Nagle's coalescing, and its holding
///   back of each send's last, short segment holds the send's buffer (its notification waits
///   for it): measured on the lab veth (segments of 1,448 B), TCP_NODELAY took 4/16/64 KiB
///   zero-copy sends from 0.7-0.9x copy to 1.3-2.8x; on loopback (65,484 B) every size up to
///   64 KiB is below two segments and Nagle's coalescing wins (64 KiB: 2.8x copy with it,
///   0.9-2.4x without; docs/perf.md).
///
/// Copying senders keep the socket as the caller gave it.
pub fn zero_copy_wants_nodelay(
    mode: TxMode,
    buf_size: usize,
    window: usize,
    segment: Option<usize>,
) -> bool {
    let zero_copy = matches!(mode, TxMode::MsgZerocopy | TxMode::UringZc | TxMode::Auto);
    let whole_segments = segment.is_some_and(|m| m > 0 && buf_size >= 2 * m);
    zero_copy && (window < NAGLE_SAFE_WINDOW || whole_segments)
}

/// Why a zero-copy TCP sender of `count` buffers of `buf_size` bytes will crawl, when its bytes
/// in flight are under one full `segment`: Nagle is off then (the rule above), but each buffer
/// comes back only once the receiver ACKs its bytes, and a receiver that does not read them at
/// once (`zcnet recv` under its default SO_RCVLOWAT) ACKs less than a segment only when its
/// delayed-ACK timer fires, about 40 ms later: one window per 40 ms (1-byte sends with one
/// buffer: 100 B in 3.7 s on loopback; with the receiver reading at once, or copying, 0.003 s).
/// `None` otherwise.
pub fn ack_paced(
    mode: TxMode,
    count: usize,
    buf_size: usize,
    segment: Option<usize>,
) -> Option<Text> {
    use crate::text::Field;
    let zero_copy = matches!(mode, TxMode::MsgZerocopy | TxMode::UringZc | TxMode::Auto);
    let in_flight = count.saturating_mul(buf_size);
    let segment = segment.filter(|&m| zero_copy && in_flight < m)?;
    Some(crate::text!(
        format!("{count} buffer(s) of {buf_size} B in flight ({in_flight} B, under one {segment} B segment): each comes back only once the receiver ACKs it, and a receiver that does not read at once delays that ACK (~40 ms; e.g. a receiver with its default low-water mark, "),
        Field::RxLowWater,
        "), which then paces every send: raise ",
        Field::TxWindow,
        " or ",
        Field::TxInflight,
        ", send with ",
        TxMode::Copy.term(),
        ", or receive with ",
        Field::RxLowWater,
        " off",
    ))
}

/// A connected TCP socket's full segment: its path MTU (TCP_INFO `tcpi_pmtu`) less the IPv4,
/// TCP and timestamp headers (52 B): 65,484 on loopback, 1,448 on a 1500-byte link. Not the
/// current MSS (`TCP_MAXSEG`), which starts at half the peer's first window on loopback
/// (32,741) and grows as the window opens.
pub fn path_segment(fd: RawFd) -> Option<usize> {
    let info = crate::net::tcp_info(fd)?;
    (info.pmtu as usize).checked_sub(52).filter(|&s| s > 0)
}

/// Distance between buffer starts: the buffer size rounded up to the page size, so every buffer
/// is page-aligned when its region starts on a page (fewer pages per send, and zero-copy fits
/// MAX_SKB_FRAGS). Anonymous, huge-page and CUDA regions do; a `Region::from_boxed` one starts
/// where the allocator put the box, and its buffers are then not page-aligned.
/// Saturates at `usize::MAX` (for a size no buffer can have: [`Sender::new`] refuses it).
pub fn buffer_stride(buf_size: usize) -> usize {
    let page = zcnet_sys::mem::page_size();
    buf_size.div_ceil(page).saturating_mul(page)
}

/// Region size a [`Sender`] needs for `cfg`; `usize::MAX` for a configuration no memory can
/// hold (a region of that size cannot be made).
pub fn region_len(cfg: &TxConfig) -> usize {
    cfg.buffers().saturating_mul(buffer_stride(cfg.buf_size))
}

/// The error of a wait for a buffer when none is free and none is with the kernel: the
/// application holds them all (a [`TxBuf`] dropped unsent never comes back), so none will be
/// released.
pub fn every_buffer_held() -> Error {
    Error::invalid_input(
        "no buffer is free and none is in flight: every buffer was taken and not sent (a TxBuf dropped unsent is gone for good; send(buf, 0) gives one back)",
    )
}

/// The smallest region a [`Sender`] takes for `cfg`: room for `cfg.inflight` buffers (the
/// window's extra ones are taken as far as the region holds them); saturates like
/// [`region_len`].
pub fn min_region_len(cfg: &TxConfig) -> usize {
    cfg.inflight
        .max(1)
        .saturating_mul(buffer_stride(cfg.buf_size))
}

/// The longest a blocking `send()` of the modes that send in the call (`copy`, `msg-zerocopy`,
/// `auto` when it copies, `devmem`) waits for room before it returns (`SO_SNDTIMEO`, set on the
/// socket by [`Sender::new`]): the token, the stall timeout and (for a token that ends at
/// signals) a signal that came between two system calls are looked at at least this often.
pub const SEND_SLICE: Duration = Duration::from_millis(100);

/// The sender's own choice of memory lives with the sender's configuration, so that the region
/// module needs nothing of the send path.
impl Region {
    /// Host memory for a sender of `cfg` ([`region_len`] bytes) of `kind`, with
    /// [`MemoryKind::Auto`] resolved by the mode: for `TxMode::MsgZerocopy`, transparent huge
    /// pages (`madvise(MADV_HUGEPAGE)`, rounded up to 2 MiB) unless they are off
    /// (`/sys/kernel/mm/transparent_hugepage/enabled` says `never`); for every other mode
    /// anonymous 4 KiB pages. Any other kind is [`Region::new`].
    ///
    /// Why: `MSG_ZEROCOPY` pins each send's pages; on a huge page the kernel takes its
    /// references per folio rather than per 4 KiB page. Measured: docs/perf.md, row S5.
    /// Not for `IORING_OP_SEND_ZC`: from a registered buffer on a huge page, the kernel
    /// charges each fragment as if it ran from the start of its huge page (`io_sg_from_iter`
    /// in io_uring/net.c adds `PAGE_ALIGN(offset + len)` to the skb's truesize, the offset
    /// counted from the start of the folio, as of Linux 6.18), so a send of 1,000 B can count
    /// as up to 2 MiB against the sender's and the receiver's socket buffers: looped back to
    /// a local UDP socket, 9 of 41 such datagrams arrived. [`MemoryKind::Huge`] has the same
    /// hazard with `uring-zc`. Which pages were taken is [`Region::backing`].
    pub fn for_sender(kind: MemoryKind, cfg: &TxConfig) -> Result<Region> {
        let len = region_len(cfg);
        if kind != MemoryKind::Auto {
            return Region::new(kind, len);
        }
        let thp_off = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .is_ok_and(|s| s.contains("[never]"));
        if cfg.mode != TxMode::MsgZerocopy || thp_off {
            return Region::anonymous(len);
        }
        Region::transparent_huge(len)
    }
}
