//! The receive path: frames given to the kernel on the fill ring, taken back with their packets
//! from the RX ring, and the waits and wakeups between.

use super::{end_batch, protocol, UmemFrame, XdpSocket};
use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;
use zcnet_core::xsk as core_xsk;

impl XdpSocket {
    /// Gives frames to the kernel for receiving, from the end of `frames`, as many as the fill
    /// ring has room for. Returns how many went. When one of those is of another socket, the
    /// call is `InvalidInput` and nothing goes. A frame the frame table refuses (only a table
    /// out of step with the rings) is an error with the reservation finished: the frames
    /// before it go, it and the rest stay in `frames`.
    pub fn fill(&mut self, frames: &mut Vec<UmemFrame>) -> io::Result<usize> {
        let fill = &self.fill;
        let b = self
            .fill_idx
            .reserve(frames.len() as u32, || fill.load_consumer())
            .map_err(protocol)?;
        // Only the frames that go are checked: `frames` is often all of a socket's spare
        // frames, and checking every one on every call cost more than the receive itself
        // (measured with `zcnet bench xsk`).
        if let Err(e) = self.check_own(&frames[frames.len() - b.len as usize..]) {
            self.fill_idx.cancel(b.len).map_err(protocol)?;
            return Err(e);
        }
        let (mut written, mut failed) = (0, None);
        for slot in b.slots() {
            let Some(f) = frames.pop() else { break };
            let idx = f.index();
            match self.frames.give_fill(idx) {
                Ok(addr) => {
                    self.fill.write(slot, addr);
                    self.held[idx as usize] = Some(f.slot);
                    written += 1;
                }
                Err(e) => {
                    frames.push(f);
                    failed = Some(protocol(e));
                    break;
                }
            }
        }
        // The reservation ends here whatever happened: the entries written go, the rest is
        // given back (left reserved, the next fill would publish them, stale, before its own).
        self.fill_idx.cancel(b.len - written).map_err(protocol)?;
        let p = self.fill_idx.submit(written).map_err(protocol)?;
        self.fill.store_producer(p);
        if let Some(e) = failed {
            return Err(e);
        }
        // A driver that ran out of fill entries stopped and set XDP_RING_NEED_WAKEUP on the
        // fill ring (zero-copy drivers do, include/uapi/linux/if_xdp.h): with entries back it
        // must be woken, or nothing more is received however long the caller polls the RX ring
        // without a system call.
        if written > 0
            && self.config.need_wakeup
            && core_xsk::fill_wakeup_needed(true, self.fill.load_flags())
        {
            self.wake_rx()?;
        }
        Ok(written as usize)
    }

    /// Wakes the driver's receive path (`recvfrom` of nothing, `MSG_DONTWAIT`: xsk_recvmsg
    /// kicks the driver's NAPI). `EAGAIN`, `EBUSY`, `ENOBUFS` and `EINTR` only mean try later.
    fn wake_rx(&mut self) -> io::Result<()> {
        self.rx_wakeups += 1;
        // SAFETY: a zero-length recvfrom with null buffer and address: the kernel writes no
        // user memory (xsk_recvmsg only wakes the driver).
        let r = unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            let e = crate::last_err();
            match e.raw_os_error() {
                Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::EINTR) => {}
                _ => return Err(e),
            }
        }
        Ok(())
    }

    /// Takes up to `max` received frames from the RX ring into `out`, each with its packet
    /// span. A descriptor the frame table refuses (only a table out of step with the rings) is
    /// an error; the frames before it are taken and their entries released, it and the rest
    /// stay unread.
    pub fn receive(&mut self, out: &mut Vec<UmemFrame>, max: u32) -> io::Result<usize> {
        let rx = &self.rx;
        let b = self
            .rx_idx
            .peek(max, || rx.load_producer())
            .map_err(protocol)?;
        let mut taken = 0;
        let r = b.slots().try_for_each(|slot| {
            let d = self.rx.read(slot);
            let span = self.frames.on_rx(d.addr, d.len).map_err(protocol)?;
            let slot = self.held[span.frame as usize]
                .take()
                .ok_or_else(|| protocol(format!("frame {} received but not held", span.frame)))?;
            out.push(UmemFrame {
                slot,
                off: span.offset,
                len: span.len,
            });
            taken += 1;
            Ok(())
        });
        let c = end_batch(&mut self.rx_idx, b.len, taken)?;
        self.rx.store_consumer(c);
        r.map(|()| taken as usize)
    }

    /// Waits up to `timeout` for a received frame (`poll(POLLIN)`, which also wakes the driver
    /// when the fill ring asks). `true` when the RX ring has entries.
    pub fn wait_rx(&mut self, timeout: Duration) -> io::Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // Rounded up: a wait under a millisecond must not become a poll of 0 (a busy loop).
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
        // SAFETY: one live pollfd, count 1; the kernel writes only its revents.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r < 0 {
            let e = crate::last_err();
            if e.raw_os_error() == Some(libc::EINTR) {
                return Ok(false);
            }
            return Err(e);
        }
        Ok(pfd.revents & libc::POLLIN != 0)
    }
}
