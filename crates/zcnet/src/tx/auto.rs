//! `auto`: zero-copy (io_uring SEND_ZC) until the kernel says it copies, then plain `send()`.
//!
//! The decision is `zcnet_core::AutoPolicy`'s; this backend feeds it the notification counts and
//! switches engines. Before a switch to copying on a stream, every zero-copy send already handed
//! over is allowed to reach the socket (its result CQE), so the byte stream stays in order.

use super::copy::send_all;
use super::uring::UringTx;
use super::{Shared, TxBackend};
use crate::error::Result;
use crate::region::TxBuf;
use std::sync::Arc;
use zcnet_core::{AutoPolicy, Mode};
use zcnet_sys::mem::Mapping;

#[derive(Debug)]
pub(crate) struct AutoTx {
    zc: UringTx,
    policy: AutoPolicy,
    /// False for buffers below [`super::AUTO_MIN_ZERO_COPY`]: copy, whatever the kernel says.
    zero_copy_pays: bool,
    mode: Mode,
    fed: (u64, u64),
    /// Clock reading reused between reads (the policy's timers are in hundreds of ms).
    now_ns: u64,
    sends: u64,
}

/// Read the clock once per this many sends while copying.
const CLOCK_EVERY: u64 = 32;

impl AutoTx {
    pub(crate) fn new(
        map: &Arc<Mapping>,
        buffers: usize,
        stream: bool,
        zero_copy_pays: bool,
    ) -> Result<Self> {
        Ok(AutoTx {
            zc: UringTx::new(map, buffers, true, stream)?,
            policy: AutoPolicy::default(),
            zero_copy_pays,
            mode: if zero_copy_pays {
                Mode::ZeroCopy
            } else {
                Mode::Copy
            },
            fed: (0, 0),
            now_ns: 0,
            sends: 0,
        })
    }

    fn feed(&mut self, sh: &mut Shared) {
        let copied = sh.stats.copied_notifications;
        let zero = sh.stats.notifications - copied;
        let (z0, c0) = self.fed;
        if zero > z0 || copied > c0 {
            self.policy
                .on_notifications(zero - z0, copied - c0, sh.now_ns());
            self.fed = (zero, copied);
        }
        if self.policy.switches().len() != sh.stats.switches.len() {
            sh.stats.switches = self.policy.switches().to_vec();
        }
    }
}

impl TxBackend for AutoTx {
    fn send(&mut self, sh: &mut Shared, buf: TxBuf, len: usize) -> Result<()> {
        self.feed(sh);
        self.sends += 1;
        if self.sends.is_multiple_of(CLOCK_EVERY) {
            self.now_ns = sh.now_ns();
        }
        let mode = if self.zero_copy_pays {
            self.policy.mode(self.now_ns)
        } else {
            Mode::Copy
        };
        if mode != self.mode {
            if mode == Mode::Copy {
                if let Err(e) = self.zc.settle(sh) {
                    sh.free.push(buf);
                    return Err(e);
                }
            }
            self.mode = mode;
            sh.stats.switches = self.policy.switches().to_vec();
        }
        match mode {
            Mode::ZeroCopy => self.zc.send(sh, buf, len),
            Mode::Copy => {
                let r = send_all(sh, &buf, len);
                sh.free.push(buf);
                // Late notifications from the zero-copy period still return buffers.
                if r.is_ok() && self.zc.outstanding() > 0 {
                    self.zc.reap(sh, false)?;
                }
                r
            }
        }
    }

    fn reap(&mut self, sh: &mut Shared, wait: bool) -> Result<()> {
        let r = self.zc.reap(sh, wait && self.zc.outstanding() > 0);
        self.feed(sh);
        r
    }

    fn outstanding(&self) -> usize {
        self.zc.outstanding()
    }
}
