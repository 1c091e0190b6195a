//! What a receiver is asked to be: the receive modes, [`RxConfig`], and the fallbacks `auto`
//! reports.

use super::*;
pub use crate::kinds::RxMode;

impl RxMode {
    /// Parses a `--rx` name.
    pub fn parse(s: &str) -> Result<RxMode> {
        RxMode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| Error::UnknownRxMode {
                given: s.to_string(),
            })
    }
}

/// How to receive.
#[derive(Debug, Clone)]
pub struct RxConfig {
    /// The mechanism.
    pub mode: RxMode,
    /// Bytes per buffer (`copy`, `uring`, devmem's linear buffers). Default 16 KiB.
    pub buf_size: usize,
    /// Buffers (`copy`; `uring`: rounded up to a power of two). Default 64 (1 MiB of 16 KiB
    /// buffers): the provided-buffer ring is FIFO, so a small ring keeps the buffers the kernel
    /// writes into warm in the cache (measured: docs/perf.md); a consumer that holds more gets
    /// `RxStats::starved`, never a silent stall.
    pub buffers: usize,
    /// `uring`: use bundles (one completion for several buffers) when the kernel has them.
    /// Default true.
    pub bundle: bool,
    /// `zcrx`, `devmem`: the interface the connections arrive on (they must be steered to
    /// `queue`, see `zcnet nic setup`). `auto` tries zcrx only when it is set.
    pub iface: Option<String>,
    /// `zcrx`, `devmem`: the receive queue. Default: the interface's last queue (the one
    /// `zcnet nic setup` reserves).
    pub queue: Option<u32>,
    /// `zcrx`: bytes of host memory registered as the receive area. Default 64 MiB. Each
    /// connection added to an area a NIC writes into may hold at most half of it: where its
    /// receive buffer, or autotuning's maximum (`net.ipv4.tcp_rmem`), is larger, it is lowered
    /// to half the area (`SO_RCVBUF`), so that out-of-order segments can never take the
    /// buffers the missing segment needs (zcnet_core::rxring::zcrx_socket_limit). Several
    /// connections on one small area can still take it all: give it twice the sum of their
    /// receive buffers.
    pub area_len: usize,
    /// `devmem`: the dma-buf to bind (e.g. exported by a GPU driver). `None`: a udmabuf of
    /// `area_len` bytes is made from host memory (needs `/dev/udmabuf`).
    pub dmabuf: Option<Arc<std::os::fd::OwnedFd>>,
    /// `copy`, `uring`: `SO_RCVLOWAT` of each connection added, so that the receiver is woken
    /// once this many bytes are queued (or the stream ends) instead of for every segment
    /// train. For bulk streams 128 KiB cuts the wakeups and the window updates the sender has
    /// to process (on veth and loopback 1.2–1.6× the rate: docs/perf.md). Default `None` (the
    /// kernel's 1 byte): a message smaller than the mark would wait for more data or the end
    /// of the stream, so request/response traffic must leave it unset, and a bulk receiver that
    /// must see a stream's last bytes before the peer closes it lowers the mark first
    /// ([`Receiver::set_low_water`]). The mark gates wakeups only: a `uring` receive armed
    /// (or re-armed after a starvation) while data is queued takes what is there at once. Not
    /// applied to `zcrx` or `devmem` (untested there).
    pub low_water: Option<u32>,
    /// `zcrx` (explicit, not `auto`): register the area without a network device
    /// (`ZCRX_REG_NODEV`, Linux 7.1+): RECV_ZC then works on any TCP connection, loopback
    /// included, but the kernel *copies* every byte into the area, so it is counted as copied.
    /// `iface`, `queue` and `dmabuf` must be unset. Default false. A kernel without it refuses
    /// with its errno (`EINVAL`) and a reason naming Linux 7.1.
    pub no_device: bool,
    /// `zcrx` with a device: the size of each receive buffer (`rx_buf_len`), a power of two
    /// from a page to 2 MiB; 0 (default) for the kernel's choice, a page. Larger buffers mean
    /// fewer completions and refill entries per byte. They need a kernel whose zcrx query
    /// lists `ZCRX_FEATURE_RX_PAGE_SIZE` (Linux 7.0 added it), a driver that takes the queue's
    /// buffer size (bnxt, fbnic), and an area whose physically contiguous runs are at least
    /// that long: the area is then made of reserved 2 MiB huge pages (`vm.nr_hugepages`).
    /// Without a device only a page is possible. Untested on hardware here: on Linux 7.2 without
    /// a device the kernel's refusal is what is tested.
    pub rx_buf_len: usize,
    /// The caller's cancel token: once cancelled, [`Receiver::poll`] (and the calls that
    /// receive a whole stream through the receiver) return [`Error::Interrupted`] within
    /// [`zcnet_sys::os::STOP_CHECK`], however long their timeout. Default: a fresh token
    /// nobody cancels.
    pub cancel: Cancel,
}

impl RxConfig {
    /// Defaults for `mode`.
    pub fn new(mode: RxMode) -> Self {
        RxConfig {
            mode,
            buf_size: 16 << 10,
            buffers: 64,
            bundle: true,
            iface: None,
            queue: None,
            area_len: 64 << 20,
            dmabuf: None,
            low_water: None,
            no_device: false,
            rx_buf_len: 0,
            cancel: Cancel::new(),
        }
    }
}

/// A receive mechanism `auto` tried and the kernel (or the machine) refused, and why.
pub type Fallback = crate::fallback::Fallback<RxMode>;
