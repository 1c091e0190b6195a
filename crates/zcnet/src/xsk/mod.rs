//! AF_XDP: packets sent and received through a UMEM in a zcnet [`Region`], one queue of one
//! interface, with an XDP program that hands the socket the UDP packets of one port.
//!
//! ```no_run
//! use std::time::Duration;
//! use zcnet::xsk::{Xsk, XskConfig};
//! use zcnet::Region;
//! # fn main() -> zcnet::Result<()> {
//! let mut cfg = XskConfig::new(0); // queue 0
//! cfg.rx_port = Some(5201);        // UDP to port 5201 comes here; everything else to the stack
//! let mut xsk = Xsk::open("eth0", Region::anonymous(cfg.umem_len())?, &cfg)?;
//! let mut frames = Vec::new();
//! xsk.recv(&mut frames, 64, Duration::from_millis(100))?;
//! for f in frames.drain(..) {
//!     println!("{} B", f.data().len()); // dropping the frame gives it back to the kernel
//! }
//! # Ok(()) }
//! ```
//!
//! Ownership is that of [`crate::TxBuf`]/[`crate::RxBuf`]: a [`TxFrame`] handed to
//! [`Xsk::send`] is the kernel's until its completion, and comes back from [`Xsk::tx_frame`]
//! only after that; an [`RxFrame`] is the application's until it is dropped, which puts the
//! frame back on the fill ring. The socket takes `rx_frames` frames of the UMEM for receiving
//! and `tx_frames` for sending; the rest of the region waits for [`Xsk::open_shared`].
//!
//! Frames come back to their `Xsk` without a channel: through its own calls ([`Xsk::send`]
//! keeps those the ring had no room for in the caller's vector, [`Xsk::release`] and
//! [`Xsk::recycle`] take batches back) at no atomic operation per frame, and — when the
//! application just drops one — through a list shared with the frame, one uncontended lock per
//! frame, emptied by the `Xsk`'s next call. `tests/xsk_speed.rs` measures the send path against
//! driving `zcnet_sys::xsk_socket::XdpSocket` directly (docs/perf.md).
//!
//! Several sockets can share one UMEM (`XDP_SHARED_UMEM`): [`Xsk::open_shared`] binds another
//! queue of the interface, or a queue of another interface, with its own four rings and its own
//! frames taken from the UMEM's unassigned ones. Each socket's frames stay its own (a frame
//! handed out by one is refused by another's `send`); sockets on one interface share its XDP
//! program, each in the XSKMAP at its queue.
//!
//! The XDP program is attached with a bpf_link: it goes away when the [`Xsk`] is dropped or the
//! process dies (SIGKILL included). Nothing is pinned. What Linux 6.18 and veth allow, as
//! measured here (docs/perf.md, "AF_XDP vs AF_PACKET"): copy mode only (a zero-copy bind is
//! `EOPNOTSUPP`: veth has no `ndo_xsk_wakeup`, net/xdp/xsk_buff_pool.c `xp_assign_dev`), native
//! XDP on veth.

use crate::cancel::Cancel;
use crate::error::{Error, Result};
use crate::region::Region;
use crate::remedy::Remedy;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};
use zcnet_sys::bpf::{BpfProg, XdpAttachMode, XdpLink, XskMap};
/// The kernel's XDP socket counters (`XDP_STATISTICS`), as [`XskStats::kernel`] carries them.
pub use zcnet_sys::xsk::XdpStatistics;
use zcnet_sys::xsk::XskBindMode;
use zcnet_sys::xsk_socket::{UmemFrame, XdpSocket, XdpSocketConfig};

mod config;
mod setup;
pub use config::{XdpMode, XskConfig, XskMode};

/// Keys of the XSKMAP an [`Xsk`] creates: a queue index below this can join the program of
/// another socket of the same UMEM on the same interface ([`Xsk::open_shared`]).
pub const XSKMAP_ENTRIES: u32 = 64;

/// The XDP program and what keeps it attached. Field order is drop order: the link goes first.
#[derive(Debug)]
struct Attachment {
    link: XdpLink,
    prog: BpfProg,
    map: XskMap,
    mode: XdpAttachMode,
}

/// An XDP program attached for a socket of the UMEM: sockets of the same UMEM on the same
/// interface (and network namespace) share it, each in the XSKMAP at its queue.
#[derive(Debug)]
struct Program {
    netns: u64,
    ifindex: u32,
    port: u16,
    att: Weak<Attachment>,
}

/// What the sockets sharing one UMEM share: the frames none of them holds and the XDP programs.
#[derive(Debug)]
struct Group {
    /// Frames of the UMEM with no socket: past the first socket's, and those of closed sockets.
    spare: Mutex<Vec<UmemFrame>>,
    programs: Mutex<Vec<Program>>,
}

/// Frames the application dropped, on their way back to their [`Xsk`].
#[derive(Debug, Default)]
struct Returns {
    closed: bool,
    tx: Vec<UmemFrame>,
    rx: Vec<UmemFrame>,
}

/// Where an [`Xsk`]'s frames go back to when the application drops them. Every frame handed
/// out carries an `Arc` of it, taken from a pool the `Xsk` keeps: handing a frame out and taking
/// it back through the `Xsk`'s own calls ([`Xsk::send`], [`Xsk::recycle`], [`Xsk::release`])
/// moves the `Arc` and costs no atomic operation; only a dropped frame takes the lock.
#[derive(Debug)]
struct Home {
    returns: Mutex<Returns>,
    /// Whether `returns` may hold frames (checked without the lock on every call).
    pending: AtomicBool,
    group: Arc<Group>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves plain vectors behind: still usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Home {
    /// A frame the application dropped: to its `Xsk`, or to the UMEM's spare frames when that
    /// is closed.
    fn put(&self, f: UmemFrame, rx: bool) {
        let mut r = lock(&self.returns);
        if r.closed {
            drop(r);
            lock(&self.group.spare).push(f);
            return;
        }
        if rx { &mut r.rx } else { &mut r.tx }.push(f);
        self.pending.store(true, Ordering::Release);
    }
}

/// A frame with the application and the way home of its [`Xsk`]: what [`TxFrame`] and
/// [`RxFrame`] hold. Both are `Some` until the frame goes back (`take`, or the owner's drop).
// Two options rather than one of a pair: taking the pair out copied it through the stack in
// pieces that the next load straddled, a store-forwarding stall per frame on the send path.
#[derive(Debug)]
struct Parcel {
    frame: Option<UmemFrame>,
    home: Option<Arc<Home>>,
}

impl Parcel {
    fn new(frame: UmemFrame, home: Arc<Home>) -> Parcel {
        Parcel {
            frame: Some(frame),
            home: Some(home),
        }
    }

    fn frame(&self) -> &UmemFrame {
        self.frame.as_ref().unwrap_or_else(|| unreachable!())
    }

    fn frame_mut(&mut self) -> &mut UmemFrame {
        self.frame.as_mut().unwrap_or_else(|| unreachable!())
    }

    fn is_from(&self, home: &Arc<Home>) -> bool {
        self.home.as_ref().is_some_and(|h| Arc::ptr_eq(h, home))
    }

    /// The frame and its `Arc` of home, moved out (`None` when already taken).
    fn take(&mut self) -> Option<(UmemFrame, Arc<Home>)> {
        let (Some(f), Some(h)) = (self.frame.take(), self.home.take()) else {
            return None;
        };
        Some((f, h))
    }

    /// The owner's drop: the frame goes home.
    #[inline]
    fn go_home(&mut self, rx: bool) {
        if let (Some(f), Some(home)) = (self.frame.take(), &self.home) {
            home.put(f, rx);
        }
    }
}

/// A frame to send: write the packet, then hand it to [`Xsk::send`]. Dropping it gives it back
/// to its [`Xsk`].
#[derive(Debug)]
pub struct TxFrame {
    p: Parcel,
}

impl TxFrame {
    /// Bytes one frame holds.
    pub fn capacity(&self) -> usize {
        self.p.frame().capacity()
    }

    /// The whole frame, to build a packet in place; then [`TxFrame::set_len`].
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.p.frame_mut().bytes_mut()
    }

    /// Sends the first `len` bytes of the frame.
    pub fn set_len(&mut self, len: usize) -> Result<()> {
        let cap = self.capacity();
        if len == 0 || len > cap {
            return Err(Error::invalid_input(format!(
                "a {len} B packet does not fit the {cap} B AF_XDP frame: use frame_size 4096 or a smaller packet"
            )));
        }
        self.p
            .frame_mut()
            .set_data(0, len as u32)
            .map_err(|e| Error::io("AF_XDP frame", e))
    }

    /// Copies `packet` into the frame and sends all of it.
    pub fn write(&mut self, packet: &[u8]) -> Result<()> {
        let cap = self.capacity();
        if packet.len() > cap {
            return self.set_len(packet.len());
        }
        self.bytes_mut()[..packet.len()].copy_from_slice(packet);
        self.set_len(packet.len())
    }

    /// The packet length set so far.
    pub fn len(&self) -> usize {
        self.p.frame().len() as usize
    }

    /// Whether no packet is set.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The UMEM frame it is.
    pub fn frame_index(&self) -> u32 {
        self.p.frame().index()
    }
}

impl Drop for TxFrame {
    fn drop(&mut self) {
        self.p.go_home(false);
    }
}

/// A received packet. Dropping it puts the frame back on the fill ring (at the next
/// [`Xsk::recv`]); [`Xsk::recycle`] does the same for a batch, without taking a lock per frame.
#[derive(Debug)]
pub struct RxFrame {
    p: Parcel,
}

impl RxFrame {
    /// The packet (Ethernet frame).
    pub fn data(&self) -> &[u8] {
        self.p
            .frame
            .as_ref()
            .map(UmemFrame::data)
            .unwrap_or_default()
    }

    /// The UMEM frame it is in.
    pub fn frame_index(&self) -> u32 {
        self.p.frame.as_ref().map_or(0, UmemFrame::index)
    }
}

impl Drop for RxFrame {
    fn drop(&mut self) {
        self.p.go_home(true);
    }
}

/// What the socket did, and what the kernel counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct XskStats {
    /// Frames handed to the kernel to send.
    pub tx_frames: u64,
    /// Of those, completed: sent, or dropped by the device (`tx_dropped`).
    pub tx_completed: u64,
    /// Of the completed, dropped by the device instead of sent (copy mode: the kernel's
    /// NET_XMIT_DROP, which a kick sees as `EBUSY`; zero-copy drivers do not say).
    pub tx_dropped: u64,
    /// Frames received.
    pub rx_frames: u64,
    /// `sendto` kicks made (only when the TX ring asked for one).
    pub kicks: u64,
    /// The kernel's counters (`XDP_STATISTICS`): drops, invalid descriptors, full rings.
    pub kernel: XdpStatistics,
}

/// An AF_XDP socket bound to one queue, its UMEM (its own, or shared with other `Xsk`s through
/// [`Xsk::open_shared`]), and optionally the XDP program that feeds it.
#[derive(Debug)]
pub struct Xsk {
    // Field order is drop order: the program is detached (when no other socket of the UMEM
    // uses it) before the socket closes.
    xdp: Option<Arc<Attachment>>,
    sock: XdpSocket,
    /// TX frames with the application's Xsk (not handed out, not in the kernel).
    tx_free: Vec<UmemFrame>,
    /// RX frames waiting to go back on the fill ring.
    rx_spare: Vec<UmemFrame>,
    /// Frames between the rings and the caller's vectors (kept to avoid an allocation a call).
    scratch: Vec<UmemFrame>,
    /// `Arc`s of `home` for the frames handed out next (see [`Home`]).
    tokens: Vec<Arc<Home>>,
    home: Arc<Home>,
    iface: String,
    ifindex: u32,
    config: XskConfig,
    cancel: Cancel,
}

impl Xsk {
    /// The interface.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// The configuration.
    pub fn config(&self) -> &XskConfig {
        &self.config
    }

    /// Whether the kernel bound the socket in zero-copy mode.
    pub fn is_zerocopy(&self) -> Result<bool> {
        self.sock
            .is_zerocopy()
            .map_err(|e| Error::io("getsockopt(XDP_OPTIONS)", e))
    }

    /// Where the XDP program runs, when there is one ("native" or "generic").
    pub fn xdp_mode(&self) -> Option<&'static str> {
        self.xdp.as_ref().map(|a| a.mode.name())
    }

    /// The bpf_link id of the XDP attachment (for `bpftool link` or
    /// [`zcnet_sys::bpf::link_info`]).
    pub fn xdp_link_id(&self) -> Option<u32> {
        self.xdp
            .as_ref()
            .and_then(|a| a.link.info().ok())
            .map(|i| i.id)
    }

    /// The XDP program's id.
    pub fn xdp_prog_id(&self) -> Option<u32> {
        self.xdp.as_ref().and_then(|a| a.prog.id().ok())
    }

    /// Whether `other` is on the same UMEM (opened from this one with [`Xsk::open_shared`], or
    /// this one from it, or both from a third).
    pub fn shares_umem_with(&self, other: &Xsk) -> bool {
        self.sock.shares_umem_with(&other.sock)
    }

    /// Frames of the UMEM that no socket holds (what [`Xsk::open_shared`] can take).
    pub fn unassigned_frames(&self) -> usize {
        lock(&self.home.group.spare).len()
    }

    /// A frame for the caller: its `Arc` of `home` from the pool, a new one when the pool is
    /// empty (only after frames were dropped, which gives theirs up).
    fn token(&mut self) -> Arc<Home> {
        self.tokens.pop().unwrap_or_else(|| Arc::clone(&self.home))
    }

    /// Frames the application dropped since the last call: the lock is taken only when there
    /// are some.
    fn take_returns(&mut self) {
        if !self.home.pending.load(Ordering::Acquire) {
            return;
        }
        let mut r = lock(&self.home.returns);
        self.home.pending.store(false, Ordering::Relaxed);
        self.tx_free.append(&mut r.tx);
        self.rx_spare.append(&mut r.rx);
    }

    fn refill(&mut self) -> Result<()> {
        self.take_returns();
        if self.rx_spare.is_empty() {
            return Ok(());
        }
        self.sock
            .fill(&mut self.rx_spare)
            .map(drop)
            .map_err(|e| Error::io("AF_XDP fill ring", e))
    }

    /// Kicks the kernel when it asks and descriptors are pending, then takes back the frames
    /// it has sent. Returns how many came back.
    pub fn complete(&mut self) -> Result<usize> {
        self.sock
            .kick_tx()
            .map_err(|e| Error::io(format!("AF_XDP transmit on {}", self.iface), e))?;
        self.sock
            .complete(&mut self.tx_free, u32::MAX)
            .map_err(|e| Error::io("AF_XDP completion ring", e))
    }

    /// A frame to send, if one is free (after taking back completed ones).
    pub fn tx_frame(&mut self) -> Result<Option<TxFrame>> {
        self.take_returns();
        if self.tx_free.is_empty() {
            self.complete()?;
        }
        let Some(f) = self.tx_free.pop() else {
            return Ok(None);
        };
        Ok(Some(TxFrame {
            p: Parcel::new(f, self.token()),
        }))
    }

    /// Appends up to `max` free frames to `out` (after taking back completed ones); returns how
    /// many. The batch form of [`Xsk::tx_frame`].
    pub fn tx_frames(&mut self, out: &mut Vec<TxFrame>, max: usize) -> Result<usize> {
        self.take_returns();
        if self.tx_free.len() < max {
            self.complete()?;
        }
        let n = max.min(self.tx_free.len());
        out.reserve(n);
        for _ in 0..n {
            let f = self.tx_free.pop().unwrap_or_else(|| unreachable!());
            let t = self.token();
            out.push(TxFrame {
                p: Parcel::new(f, t),
            });
        }
        Ok(n)
    }

    /// Hands frames from the front of `frames` to the kernel, as many as the TX ring has room
    /// for, and kicks it if it asks. The frames sent are removed from `frames`; they come back
    /// from [`Xsk::tx_frame`] once the kernel has completed them. Returns how many went. A
    /// frame with no packet, or one handed out by another socket (of this UMEM or another),
    /// is refused and nothing is sent.
    pub fn send(&mut self, frames: &mut Vec<TxFrame>) -> Result<usize> {
        for f in frames.iter() {
            if f.is_empty() {
                return Err(Error::invalid_input(format!(
                    "AF_XDP frame with no packet ({} B capacity): write it or set_len first",
                    f.capacity()
                )));
            }
            if !f.p.is_from(&self.home) {
                return Err(Error::invalid_input(format!(
                    "AF_XDP frame {} was handed out by another socket, not this one on queue {} of {}: send it with the Xsk it came from",
                    f.frame_index(),
                    self.config.queue,
                    self.iface
                )));
            }
        }
        let ring = |e| Error::io("AF_XDP TX ring", e);
        let mut q = self.sock.tx_queue(frames.len()).map_err(ring)?;
        let room = q.room();
        // Taken in place and drained after: moving each `TxFrame` out first made the compiler
        // copy it through the stack in pieces that the next load straddled (a store-forwarding
        // stall twice a frame, 5 % of the send path in `tests/xsk_speed.rs`).
        let (mut failed, mut pushed) = (None, 0);
        for t in frames[..room].iter_mut() {
            // Checked above: only a frame table out of step with the rings fails here.
            if let Err(e) = q.push_from(&mut t.p.frame) {
                failed = Some(e);
                break;
            }
            if let Some(home) = t.p.home.take() {
                self.tokens.push(home);
            }
            pushed += 1;
        }
        // The frames pushed go (the queue submits them); on an error those not pushed stay.
        let n = q.submit().map_err(ring)?;
        frames.drain(..pushed);
        if let Some(e) = failed {
            return Err(ring(e));
        }
        self.complete()?;
        Ok(n)
    }

    /// Gives back frames from [`Xsk::tx_frame`] that will not be sent (as dropping them does,
    /// without a lock per frame). Empties `frames`; frames of another socket go back to it.
    pub fn release(&mut self, frames: &mut Vec<TxFrame>) {
        for mut t in frames.drain(..) {
            if !t.p.is_from(&self.home) {
                continue; // dropped: it goes back to its own socket
            }
            if let Some((f, home)) = t.p.take() {
                self.tokens.push(home);
                self.tx_free.push(f);
            }
        }
    }

    /// Frames handed to the kernel and not yet completed.
    pub fn tx_in_flight(&self) -> usize {
        self.sock.frames_in_tx()
    }

    /// Kicks and completes until every frame sent has come back, or `timeout` passes.
    /// Returns whether all came back.
    pub fn flush(&mut self, timeout: Duration) -> Result<bool> {
        let end = Instant::now() + timeout;
        loop {
            self.complete()?;
            if self.tx_in_flight() == 0 {
                return Ok(true);
            }
            if Instant::now() >= end {
                return Ok(false);
            }
            std::thread::yield_now();
        }
    }

    /// Gives the socket the caller's cancel token: once it is cancelled, [`Xsk::recv`] returns
    /// [`Error::Interrupted`] instead of waiting out its timeout (it looks at the token every
    /// [`zcnet_sys::os::STOP_CHECK`] at most). A new socket has a fresh token nobody cancels.
    pub fn set_cancel(&mut self, cancel: Cancel) {
        self.cancel = cancel;
    }

    /// Appends up to `max` received packets to `out`, waiting up to `timeout` for the first.
    /// Frames dropped or recycled since the last call go back on the fill ring first. Returns
    /// how many.
    pub fn recv(&mut self, out: &mut Vec<RxFrame>, max: usize, timeout: Duration) -> Result<usize> {
        let n = match self.receive_wait(max, timeout) {
            Ok(n) => n,
            Err(e) => {
                // Frames taken before the error go back to the fill ring, not astray.
                self.rx_spare.append(&mut self.scratch);
                return Err(e);
            }
        };
        out.reserve(n);
        while let Some(f) = self.scratch.pop() {
            let t = self.token();
            out.push(RxFrame {
                p: Parcel::new(f, t),
            });
        }
        // Popped from the back: put this call's packets back in arrival order.
        let len = out.len();
        out[len - n..].reverse();
        Ok(n)
    }

    /// Refills, then receives into `scratch`, waiting up to `timeout` for the first packet.
    fn receive_wait(&mut self, max: usize, timeout: Duration) -> Result<usize> {
        self.refill()?;
        let max = u32::try_from(max).unwrap_or(u32::MAX);
        let mut n = self.receive_scratch(max)?;
        if n == 0 && !timeout.is_zero() {
            let end = Instant::now() + timeout;
            while n == 0 {
                let left = end.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                self.sock
                    .wait_rx(left.min(zcnet_sys::os::STOP_CHECK))
                    .map_err(|e| Error::io("poll on the AF_XDP socket", e))?;
                self.cancel.check()?;
                self.refill()?;
                n = self.receive_scratch(max)?;
            }
        }
        Ok(n)
    }

    fn receive_scratch(&mut self, max: u32) -> Result<usize> {
        self.sock
            .receive(&mut self.scratch, max)
            .map_err(|e| Error::io("AF_XDP RX ring", e))
    }

    /// Gives received frames back for the fill ring (at the next [`Xsk::recv`]), as dropping
    /// them does but without a lock per frame. Empties `frames`; frames of another socket go
    /// back to it.
    pub fn recycle(&mut self, frames: &mut Vec<RxFrame>) {
        for mut r in frames.drain(..) {
            if !r.p.is_from(&self.home) {
                continue; // dropped: it goes back to its own socket
            }
            if let Some((f, home)) = r.p.take() {
                self.tokens.push(home);
                self.rx_spare.push(f);
            }
        }
    }

    /// What the socket did and what the kernel counted.
    pub fn stats(&self) -> Result<XskStats> {
        let c = self.sock.frames().counts();
        Ok(XskStats {
            tx_frames: c.sent,
            tx_completed: c.completed,
            tx_dropped: self.sock.tx_dropped(),
            rx_frames: c.received,
            kicks: self.sock.kicks(),
            kernel: self
                .sock
                .statistics()
                .map_err(|e| Error::io("getsockopt(XDP_STATISTICS)", e))?,
        })
    }
}

impl Drop for Xsk {
    /// The frames this socket holds (not those in the kernel, which go with the socket) go back
    /// to the UMEM for sockets opened on it later; frames the application still holds go there
    /// when it drops them.
    fn drop(&mut self) {
        let mut r = lock(&self.home.returns);
        r.closed = true;
        let mut spare = lock(&self.home.group.spare);
        spare.append(&mut r.tx);
        spare.append(&mut r.rx);
        spare.append(&mut self.tx_free);
        spare.append(&mut self.rx_spare);
        spare.append(&mut self.scratch);
    }
}

/// The MAC address of `iface` in the calling thread's network namespace.
pub fn interface_mac(iface: &str) -> Result<[u8; 6]> {
    zcnet_sys::ifaddr::if_hwaddr(iface).map_err(|e| match e.raw_os_error() {
        Some(libc::ENODEV) => Error::UnknownInterface {
            given: iface.to_string(),
        },
        _ => Error::io(format!("reading the MAC address of {iface}"), e),
    })
}
