//! `msg-zerocopy`: `SO_ZEROCOPY` + `send(MSG_ZEROCOPY)`, completions from the error queue.
//!
//! Documentation/networking/msg_zerocopy.rst: each successful send call gets the next 32-bit id;
//! the kernel reports ranges of ids on the error queue, signalled by `POLLERR`; a range with
//! `SO_EE_CODE_ZEROCOPY_COPIED` was copied. Sends fail with `ENOBUFS` when the socket's option
//! memory (`net.core.optmem_max`) is full of pending notifications: read the error queue and
//! retry. A stream send may be partial; each partial call has its own id, and a buffer is free
//! only when every id of its sends has completed.

use super::{Shared, TxBackend};
use crate::error::{Error, Result};
use crate::region::TxBuf;
use std::os::fd::RawFd;
use std::time::Duration;
use zcnet_core::{Completed, ZcRanges};
use zcnet_sys::sock::{self, ErrqueueEntry};

const POLL_MS: i32 = 100;

#[derive(Debug)]
pub(crate) struct MsgZcTx {
    ranges: ZcRanges<u32>,
    held: Vec<Option<TxBuf>>,
    /// Ids not yet completed, per buffer.
    pending: Vec<u32>,
    entries: Vec<ErrqueueEntry>,
    done: Vec<Completed<u32>>,
    outstanding: usize,
}

impl MsgZcTx {
    pub(crate) fn new(fd: RawFd, buffers: usize) -> Result<Self> {
        sock::enable_zerocopy(fd).map_err(|e| Error::Unsupported {
            what: "SO_ZEROCOPY".into(),
            source: e,
            fix: "MSG_ZEROCOPY needs Linux 4.14 for TCP and 5.0 for UDP",
        })?;
        let mut held = Vec::with_capacity(buffers);
        held.resize_with(buffers, || None);
        Ok(MsgZcTx {
            ranges: ZcRanges::new(),
            held,
            pending: vec![0; buffers],
            entries: Vec::new(),
            done: Vec::new(),
            outstanding: 0,
        })
    }

    fn park(&mut self, sh: &mut Shared, buf: TxBuf) {
        let id = buf.id() as usize;
        if self.pending[id] == 0 {
            sh.free.push(buf);
        } else {
            self.held[id] = Some(buf);
            self.outstanding += 1;
        }
    }

    fn read_completions(&mut self, sh: &mut Shared) -> Result<usize> {
        self.entries.clear();
        sock::read_errqueue(sh.fd, &mut self.entries)
            .map_err(|e| Error::io("reading the error queue", e))?;
        let n = self.entries.len();
        for i in 0..n {
            match self.entries[i] {
                ErrqueueEntry::Zerocopy { lo, hi, copied } => {
                    sh.stats.notifications += 1;
                    if copied {
                        sh.stats.copied_notifications += 1;
                    }
                    self.done.clear();
                    let o = self.ranges.complete(lo, hi, copied, &mut self.done);
                    sh.stats.duplicate_completions += o.duplicate;
                    sh.stats.unknown_completions += o.unknown;
                    for c in self.done.drain(..) {
                        if c.copied {
                            sh.stats.copied_bytes += c.bytes;
                        } else {
                            sh.stats.zerocopy_bytes += c.bytes;
                        }
                        let id = c.token as usize;
                        self.pending[id] -= 1;
                        if self.pending[id] == 0 {
                            if let Some(b) = self.held[id].take() {
                                self.outstanding -= 1;
                                sh.free.push(b);
                            }
                        }
                    }
                }
                ErrqueueEntry::Other { errno, origin } => {
                    return Err(Error::io(
                        format!("error queue (origin {origin})"),
                        std::io::Error::from_raw_os_error(errno as i32),
                    ));
                }
            }
        }
        Ok(n)
    }
}

impl TxBackend for MsgZcTx {
    fn send(&mut self, sh: &mut Shared, buf: TxBuf, len: usize) -> Result<()> {
        let id = buf.id();
        let mut off = 0;
        let mut waited = std::time::Instant::now();
        while off < len {
            let r = match buf.bytes() {
                Some(b) => sock::send(sh.fd, &b[off..len], libc::MSG_ZEROCOPY),
                None => {
                    self.park(sh, buf);
                    return Err(Error::NotCpuAccessible);
                }
            };
            match r {
                Ok(n) => {
                    self.ranges.push(n as u64, id);
                    self.pending[id as usize] += 1;
                    off += n;
                    sh.stats.sends += 1;
                    sh.stats.bytes += n as u64;
                    waited = std::time::Instant::now();
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    sh.stats.enobufs_waits += 1;
                    if self.ranges.outstanding() == 0 || waited.elapsed() > sh.stall_timeout {
                        self.park(sh, buf);
                        return Err(Error::OptmemExhausted {
                            optmem_max: crate::sysctl_u64("net/core/optmem_max"),
                        });
                    }
                    if let Err(e) = self.reap(sh, true) {
                        self.park(sh, buf);
                        return Err(e);
                    }
                }
                Err(e)
                    if e.raw_os_error() == Some(libc::EINTR) && !zcnet_sys::os::interrupted() => {}
                Err(e) => {
                    let err = sh.send_error(e);
                    self.park(sh, buf);
                    return Err(err);
                }
            }
        }
        self.park(sh, buf);
        // Keep the error queue short: read what is there without waiting.
        self.read_completions(sh)?;
        Ok(())
    }

    fn reap(&mut self, sh: &mut Shared, wait: bool) -> Result<()> {
        let n = self.read_completions(sh)?;
        if n > 0 || !wait || self.ranges.outstanding() == 0 {
            return Ok(());
        }
        // POLLERR is always reported, whatever the requested events: it signals the error queue.
        let rev = sock::poll_one(sh.fd, 0, POLL_MS).map_err(|e| Error::io("poll", e))?;
        if rev & libc::POLLERR != 0 {
            let got = self.read_completions(sh)?;
            if got == 0 {
                // POLLERR without queued messages: a socket error (e.g. reset).
                if let Ok(Some(e)) = sock::take_error(sh.fd) {
                    return Err(sh.send_error(e));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        } else if rev & libc::POLLHUP != 0 {
            let e = sock::take_error(sh.fd)
                .ok()
                .flatten()
                .unwrap_or_else(|| std::io::Error::from_raw_os_error(libc::EPIPE));
            return Err(sh.send_error(e));
        }
        Ok(())
    }

    fn outstanding(&self) -> usize {
        self.outstanding
    }
}
