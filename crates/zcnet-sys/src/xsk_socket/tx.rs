//! The transmit path: frames queued on the TX ring (whole, or pushed one at a time into a
//! [`TxQueue`]), the kick that makes the kernel send them, and their return on the completion
//! ring.

use super::{end_batch, invalid, protocol, UmemFrame, XdpSocket};
use crate::xsk::XdpDesc;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use zcnet_core::xsk::{self as core_xsk, Batch};

/// Room reserved on a socket's TX ring ([`XdpSocket::tx_queue`]). Frames pushed go to the
/// kernel at [`TxQueue::submit`], or when the queue is dropped; room not used is given back.
#[derive(Debug)]
pub struct TxQueue<'a> {
    sock: &'a mut XdpSocket,
    batch: Batch,
    done: bool,
}

impl TxQueue<'_> {
    /// Frames that can still be pushed.
    pub fn room(&self) -> usize {
        (self.batch.len - self.sock.tx_pushed) as usize
    }

    /// Writes the TX descriptor of `f` (its span is the packet) into the next reserved entry;
    /// the socket holds the frame until its completion. A frame with an empty span, of another
    /// UMEM, or with no room left comes back with an `InvalidInput` error.
    #[inline]
    pub(crate) fn push(&mut self, f: UmemFrame) -> Result<(), (io::Error, UmemFrame)> {
        match self.describe(&f) {
            Ok(idx) => {
                self.sock.held[idx as usize] = Some(f.slot);
                Ok(())
            }
            Err(e) => Err((e, f)),
        }
    }

    /// `TxQueue::push` of the frame in `*f`, taken out on success (`None` afterwards) and left
    /// there on error; `InvalidInput` for `None` too. For a caller keeping frames in options
    /// of its own: the frame is not copied through an argument.
    #[inline]
    pub fn push_from(&mut self, f: &mut Option<UmemFrame>) -> io::Result<()> {
        let Some(fr) = f.as_ref() else {
            return Err(invalid("no frame to push".into()));
        };
        let idx = self.describe(fr)?;
        self.sock.held[idx as usize] = f.take().map(|fr| fr.slot);
        Ok(())
    }

    /// Checks `f`, marks it sent and writes its descriptor in the next reserved entry; the
    /// caller then moves its slot into `held`. Returns the frame index.
    #[inline]
    fn describe(&mut self, f: &UmemFrame) -> io::Result<u32> {
        if self.sock.tx_pushed == self.batch.len {
            return Err(invalid("no room reserved on the TX ring".into()));
        }
        if !Arc::ptr_eq(f.slot.mapping(), &self.sock.umem) {
            return Err(invalid(format!(
                "UMEM frame {} belongs to another AF_XDP socket",
                f.index()
            )));
        }
        if f.len == 0 {
            return Err(invalid(format!(
                "UMEM frame {} has no packet to send (set_data)",
                f.index()
            )));
        }
        let idx = f.index();
        let addr = self
            .sock
            .frames
            .give_tx(idx, f.off, f.len)
            .map_err(protocol)?;
        self.sock.tx.write(
            self.batch.slot(self.sock.tx_pushed),
            XdpDesc {
                addr,
                len: f.len,
                options: 0,
            },
        );
        self.sock.tx_pushed += 1;
        Ok(idx)
    }

    /// Publishes the frames pushed (a release store of the producer index) and gives back the
    /// room not used. Returns how many went.
    pub fn submit(mut self) -> io::Result<usize> {
        self.finish()
    }

    fn finish(&mut self) -> io::Result<usize> {
        if std::mem::replace(&mut self.done, true) {
            return Ok(0);
        }
        self.sock.finish_tx_reservation()
    }
}

impl Drop for TxQueue<'_> {
    fn drop(&mut self) {
        // Only a producer out of step with itself fails, which `submit` would have reported.
        let _ = self.finish();
    }
}

impl XdpSocket {
    /// Queues frames for transmission, from the front of `frames` (each frame's span is the
    /// packet), as many as the TX ring has room for; those queued are removed from `frames`.
    /// Nothing is sent until [`Self::kick_tx`] (copy mode) or the driver's next poll. A frame
    /// with an empty span, or of another socket, is `InvalidInput` and nothing is queued.
    pub fn transmit(&mut self, frames: &mut Vec<UmemFrame>) -> io::Result<usize> {
        self.check_own(frames)?;
        if let Some(f) = frames.iter().find(|f| f.len == 0) {
            return Err(invalid(format!(
                "UMEM frame {} has no packet to send (set_data)",
                f.index()
            )));
        }
        let mut q = self.tx_queue(frames.len())?;
        let n = q.room();
        for f in frames.drain(..n) {
            // Checked above: only a frame table out of step with the rings fails here.
            q.push(f).map_err(|(e, _)| e)?;
        }
        q.submit()
    }

    /// Reserves room for up to `want` frames on the TX ring (fewer when it has less, maybe
    /// none): `TxQueue::push` frames into it, then [`TxQueue::submit`] them. For callers that
    /// keep their frames in their own containers ([`Self::transmit`] takes a `Vec`).
    pub fn tx_queue(&mut self, want: usize) -> io::Result<TxQueue<'_>> {
        // A queue forgotten rather than dropped (`mem::forget` is safe) left its reservation:
        // finish it as its drop would have, or this queue's entries would come after entries
        // never published, and its submit would publish the old ones, stale included.
        if self.tx_idx.reserved() > 0 {
            self.finish_tx_reservation()?;
        }
        let want = u32::try_from(want).unwrap_or(u32::MAX);
        let tx = &self.tx;
        let batch = self
            .tx_idx
            .reserve(want, || tx.load_consumer())
            .map_err(protocol)?;
        Ok(TxQueue {
            sock: self,
            batch,
            done: false,
        })
    }

    /// Publishes the descriptors pushed into the TX reservation (a release store of the
    /// producer index) and gives back the room not used; how many went.
    fn finish_tx_reservation(&mut self) -> io::Result<usize> {
        let pushed = std::mem::take(&mut self.tx_pushed);
        let unused = self.tx_idx.reserved() - pushed;
        self.tx_idx.cancel(unused).map_err(protocol)?;
        let p = self.tx_idx.submit(pushed).map_err(protocol)?;
        self.tx.store_producer(p);
        Ok(pushed as usize)
    }

    /// TX descriptors published and not yet taken by the kernel (reads its index).
    pub(crate) fn tx_pending(&mut self) -> io::Result<u32> {
        let tx = &self.tx;
        self.tx_idx
            .refresh(|| tx.load_consumer())
            .map_err(protocol)?;
        Ok(self.tx_idx.pending())
    }

    /// Wakes the kernel to transmit (`sendto(MSG_DONTWAIT)` of nothing) when descriptors are
    /// pending and — with need-wakeup — the TX ring asks for it
    /// ([`zcnet_core::xsk::tx_kick_needed`]). In copy mode one kick sends at most the kernel's
    /// TX budget (32 frames by default) and the ring keeps asking; `EAGAIN`, `EBUSY` and
    /// `ENOBUFS` (the kernel is busy or out of completion room: try again after
    /// [`Self::complete`]) are not errors. Returns whether a syscall was made.
    pub fn kick_tx(&mut self) -> io::Result<bool> {
        let pending = self.tx_pending()?;
        if !core_xsk::tx_kick_needed(self.config.need_wakeup, self.tx.load_flags(), pending) {
            return Ok(false);
        }
        self.kicks += 1;
        // SAFETY: a zero-length sendto with null buffers and no address: the kernel reads no
        // user memory (xsk_sendmsg only triggers transmission of the TX ring).
        let r = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        };
        if r < 0 {
            let e = crate::last_err();
            match e.raw_os_error() {
                // Copy mode (net/xdp/xsk.c __xsk_generic_xmit): the device answered
                // NET_XMIT_DROP for one frame, "completed but not sent": its address goes on
                // the completion ring like a sent one's, and the kernel stops the kick there.
                Some(libc::EBUSY) => self.tx_dropped += 1,
                // EAGAIN: the device is busy or the completion ring full (try again); EINTR.
                Some(libc::EAGAIN | libc::ENOBUFS | libc::EINTR) => {}
                _ => return Err(e),
            }
        }
        Ok(true)
    }

    /// Takes back up to `max` transmitted frames from the completion ring into `out`. An entry
    /// the frame table refuses (only a table out of step with the rings) is an error; the
    /// frames before it are taken and their entries released, it and the rest stay unread.
    pub fn complete(&mut self, out: &mut Vec<UmemFrame>, max: u32) -> io::Result<usize> {
        let comp = &self.comp;
        let b = self
            .comp_idx
            .peek(max, || comp.load_producer())
            .map_err(protocol)?;
        let mut taken = 0;
        let r = b.slots().try_for_each(|slot| {
            let addr = self.comp.read(slot);
            let idx = self.frames.on_complete(addr).map_err(protocol)?;
            let slot = self.held[idx as usize]
                .take()
                .ok_or_else(|| protocol(format!("frame {idx} completed but not held")))?;
            out.push(UmemFrame {
                slot,
                off: 0,
                len: 0,
            });
            taken += 1;
            Ok(())
        });
        let c = end_batch(&mut self.comp_idx, b.len, taken)?;
        self.comp.store_consumer(c);
        r.map(|()| taken as usize)
    }
}
