//! `auto`: zero-copy (io_uring SEND_ZC) until the kernel says it copies, then plain `send()`.
//!
//! The decision is zcnet-core's send driver's (`SendDriver`, with its `AutoPolicy`), as for the
//! NCCL plugin; this backend feeds it the notification counts and switches engines. Before a switch to copying on a stream, every zero-copy send already handed
//! over is allowed to reach the socket (its result CQE), so the byte stream stays in order.
//!
//! When zero copy cannot be set up — its memory cannot be locked (RLIMIT_MEMLOCK without
//! CAP_IPC_LOCK: the ring and the registered region), or io_uring / SEND_ZC is refused — `auto`
//! falls back to `uring` (IORING_OP_SEND: only the ring is locked), and when that is refused too,
//! to `copy`; each refusal is kept as a [`Fallback`] with the reason. The zero-copy sends use
//! the registered region (fixed buffers), whose pages are charged once, at registration: a send
//! after a successful setup is not charged again (io_uring/net.c charges only non-fixed SEND_ZC
//! sends), so the decision is complete at setup.

use super::copy::send_all;
use super::uring::UringTx;
use super::{Fallback, Payload, Shared, TxBackend, TxMode};
use crate::error::{Error, Result};
use std::sync::Arc;
use std::time::Duration;
use zcnet_core::{Asked, Mode, SendDriver};
use zcnet_sys::mem::Mapping;

#[derive(Debug)]
pub(crate) struct AutoTx {
    /// Zero copy; `None` when it does not pay (small sends) or was refused at setup.
    zc: Option<UringTx>,
    /// io_uring SEND, used when zero copy was refused at setup and this was not.
    uring: Option<UringTx>,
    /// Why the better engines are not used (empty when zero copy is set up).
    fallbacks: Vec<Fallback>,
    /// Zero copy or copy for the next send: zcnet-core's send driver.
    driver: SendDriver,
    mode: Mode,
    fed: (u64, u64),
    /// Clock reading reused between reads (the policy's timers are in hundreds of ms).
    now_ns: u64,
    sends: u64,
    /// An event loop drives the sender ([`TxBackend::ready_fd`] was asked for): copying goes
    /// through the zero-copy engine's ring as IORING_OP_SEND, whose sends never block, instead
    /// of `send()` (which blocks when the socket is full, and before it, waits for every
    /// zero-copy send to reach the socket): a loop thread blocked there could not run the peer
    /// it waits for.
    event_loop: bool,
}

/// Read the clock once per this many sends while copying.
const CLOCK_EVERY: u64 = 32;

impl AutoTx {
    /// `zero_copy_pays` is false for buffers below [`super::AUTO_MIN_ZERO_COPY`]: they are
    /// copied whatever the kernel says, and nothing is registered.
    pub(crate) fn new(
        fd: std::os::fd::RawFd,
        map: &Arc<Mapping>,
        buffers: usize,
        stream: bool,
        zero_copy_pays: bool,
    ) -> Result<Self> {
        let mut fallbacks = Vec::new();
        let (mut zc, mut uring) = (None, None);
        // Sends too small for zero copy to pay are copied: nothing to register or lock.
        if zero_copy_pays {
            match UringTx::new(fd, map, buffers, true, stream) {
                Ok(t) => zc = Some(t),
                Err(e) if refusal(&e) => {
                    fallbacks.push(Fallback {
                        tried: TxMode::UringZc,
                        reason: e.text(),
                    });
                    match UringTx::new(fd, map, buffers, false, stream) {
                        Ok(t) => uring = Some(t),
                        Err(e) if refusal(&e) => fallbacks.push(Fallback {
                            tried: TxMode::Uring,
                            reason: e.text(),
                        }),
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(AutoTx {
            zc,
            uring,
            fallbacks,
            driver: SendDriver::new(Asked::Auto, true),
            mode: Mode::ZeroCopy,
            fed: (0, 0),
            now_ns: 0,
            sends: 0,
            event_loop: false,
        })
    }

    /// The engines refused at setup, best first, with the reasons.
    pub(crate) fn fallbacks(&self) -> &[Fallback] {
        &self.fallbacks
    }

    /// The engine used when zero copy is not set up: `uring` or `copy`.
    pub(crate) fn fixed_engine(&self) -> TxMode {
        if self.uring.is_some() {
            TxMode::Uring
        } else {
            TxMode::Copy
        }
    }

    fn feed(&mut self, sh: &mut Shared) {
        if self.zc.is_none() {
            return; // no notifications: the policy has nothing to decide
        }
        let copied = sh.stats.copied_notifications;
        let zero = sh.stats.notifications - copied;
        let (z0, c0) = self.fed;
        if zero > z0 || copied > c0 {
            self.driver
                .on_notifications(zero - z0, copied - c0, sh.now_ns());
            self.fed = (zero, copied);
        }
        if self.driver.switches().len() != sh.stats.switches.len() {
            sh.stats.switches = self.driver.switches().to_vec();
        }
    }
}

/// Whether setting up an engine failed in a way the next one may not: its memory could not be
/// locked, or the kernel refused the mechanism. Other errors end `auto` as they would any mode.
fn refusal(e: &Error) -> bool {
    matches!(e, Error::MemlockTooSmall { .. } | Error::Unsupported { .. })
}

impl TxBackend for AutoTx {
    fn send(&mut self, sh: &mut Shared, p: Payload, len: usize) -> Result<()> {
        self.feed(sh);
        let Some(zc) = self.zc.as_mut() else {
            return match self.uring.as_mut() {
                Some(uring) => uring.send(sh, p, len),
                None => {
                    let r = send_all(sh, &p, len);
                    p.release(sh);
                    r
                }
            };
        };
        self.sends += 1;
        if self.sends.is_multiple_of(CLOCK_EVERY) {
            self.now_ns = sh.now_ns();
        }
        let mode = self.driver.mode(self.now_ns);
        if self.event_loop {
            // Under an event loop nothing may block: copying goes through the same ring
            // (IORING_OP_SEND, in order after the zero-copy sends), no settling needed.
            if mode != self.mode {
                self.mode = mode;
                sh.stats.switches = self.driver.switches().to_vec();
            }
            zc.set_copying(mode == Mode::Copy);
            return zc.send(sh, p, len);
        }
        if mode != self.mode {
            if mode == Mode::Copy {
                if let Err(e) = zc.settle(sh) {
                    p.release(sh);
                    return Err(e);
                }
            }
            self.mode = mode;
            sh.stats.switches = self.driver.switches().to_vec();
        }
        match mode {
            Mode::ZeroCopy => zc.send(sh, p, len),
            Mode::Copy => {
                let r = send_all(sh, &p, len);
                p.release(sh);
                // Late notifications from the zero-copy period still return buffers.
                if r.is_ok() && zc.outstanding() > 0 {
                    zc.reap(sh, Duration::ZERO)?;
                }
                r
            }
        }
    }

    fn reap(&mut self, sh: &mut Shared, wait: Duration) -> Result<()> {
        let engine = match (self.zc.as_mut(), self.uring.as_mut()) {
            (Some(zc), _) => zc,
            (None, Some(uring)) => uring,
            (None, None) => return Ok(()),
        };
        let wait = if engine.outstanding() > 0 {
            wait
        } else {
            Duration::ZERO
        };
        let r = engine.reap(sh, wait);
        self.feed(sh);
        r
    }

    fn outstanding(&self) -> usize {
        self.zc
            .as_ref()
            .or(self.uring.as_ref())
            .map_or(0, UringTx::outstanding)
    }

    /// The engine's ring's (the one [`Self::reap`] reaps); none when both were refused and
    /// every send copies. From then on the sender copies through that engine's ring (see
    /// `event_loop`).
    fn ready_fd(&mut self) -> Result<Option<std::os::fd::BorrowedFd<'_>>> {
        self.event_loop = true;
        match (self.zc.as_mut(), self.uring.as_mut()) {
            (Some(zc), _) => zc.ready_fd(),
            (None, Some(uring)) => uring.ready_fd(),
            (None, None) => Ok(None),
        }
    }
}
