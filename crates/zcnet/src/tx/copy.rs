//! `copy`: plain `send()`. The kernel copies every byte; the buffer is free again on return.

use super::{Payload, Shared, TxBackend};
use crate::error::Result;
use std::time::Duration;

#[derive(Debug)]
pub(crate) struct CopyTx;

impl TxBackend for CopyTx {
    fn send(&mut self, sh: &mut Shared, p: Payload, len: usize) -> Result<()> {
        let r = send_all(sh, &p, len);
        p.release(sh);
        r
    }

    fn reap(&mut self, _sh: &mut Shared, _wait: Duration) -> Result<()> {
        Ok(())
    }

    fn outstanding(&self) -> usize {
        0
    }
}

/// Sends `p`'s first `len` bytes with as many `send()` calls as it takes (a stream may accept
/// less).
pub(crate) fn send_all(sh: &mut Shared, p: &Payload, len: usize) -> Result<()> {
    let data = p.bytes(len)?;
    let mut off = 0;
    while off < len {
        match zcnet_sys::sock::send(sh.fd, &data[off..], 0) {
            Ok(n) => {
                off += n;
                sh.stall.moved();
                sh.stats.sends += 1;
                sh.stats.bytes += n as u64;
                sh.stats.copied_bytes += n as u64;
                sh.call_accepted += n as u64;
            }
            Err(e) if e.raw_os_error() == Some(libc::EINTR) && !sh.cancel.ends_at_eintr() => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => sh.no_room()?,
            Err(e) => return Err(sh.send_error(e)),
        }
    }
    Ok(())
}
