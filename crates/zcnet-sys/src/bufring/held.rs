//! Buffers taken out of a [`RecvRing`]: the [`HeldBuf`] handle, and the ring's side of it
//! ([`RecvRing::take`], [`RecvRing::lend`], [`RecvRing::reclaim_lent`],
//! [`RecvRing::give_back`]).

use super::target::Target;
use super::{einval, RecvRing};
use crate::epoll::ReturnQueue;
use crate::foreign::ForeignBuf;
use crate::mem::Mapping;
use std::io;
use std::sync::Arc;

impl RecvRing {
    /// Takes held buffer `buf_id` out of the ring as an owned handle: until the handle comes
    /// back through [`give_back`](Self::give_back), nothing can recycle the buffer, so the
    /// kernel cannot receive into it while whoever holds the handle (e.g. an asynchronous copy
    /// to a GPU) reads it. `EINVAL` if the application does not hold it or it is already taken.
    pub fn take(&mut self, buf_id: u16) -> io::Result<HeldBuf> {
        let t = self.bufs.get_mut(buf_id as usize).ok_or_else(einval)?;
        if !t.set_taken(true) {
            return Err(einval());
        }
        let slot = t.held_slot().ok_or_else(einval)?;
        Ok(HeldBuf {
            map: Arc::clone(slot.mapping()),
            addr: slot.addr(),
            len: self.buf_size as usize,
            id: buf_id,
            back: Some(Arc::clone(&self.lent_back)),
        })
    }

    /// Lends the first `len` bytes of held buffer `buf_id` on, read-only (to send them without
    /// a copy): the buffer is taken out of the ring ([`take`](Self::take)), and comes back to
    /// it at the first [`wait`](Self::wait) after the returned value (and every clone of an
    /// `Arc` around it) is dropped. `EINVAL` as for `take`, or when `len` exceeds the buffer.
    pub fn lend(&mut self, buf_id: u16, len: usize) -> io::Result<ForeignBuf> {
        if len > self.buf_size as usize {
            return Err(einval());
        }
        let h = self.take(buf_id)?;
        ForeignBuf::returning(h, len).ok_or_else(einval)
    }

    /// Gives back every lent buffer whose lease ended (each [`wait`](Self::wait) does this
    /// first; a caller deciding whether buffers are [`available`](Self::available) calls it
    /// before asking).
    pub fn reclaim_lent(&mut self) {
        let mut back = Vec::new();
        self.lent_back.take_into(&mut back);
        for id in back {
            // A taken buffer of this ring (only its handles hold this queue).
            let Some(t) = self.bufs.get_mut(id as usize) else {
                continue;
            };
            if t.set_taken(false) && self.recycle(id).is_err() {
                self.bufs[id as usize].set_taken(true);
            }
        }
    }

    /// Recycles a buffer taken with [`take`](Self::take) (see [`recycle`](Self::recycle)).
    /// `EINVAL`, with the handle back, if it is not one of this ring's.
    #[allow(clippy::result_large_err)] // the handle comes back with the error
    pub fn give_back(&mut self, mut buf: HeldBuf) -> Result<(), (HeldBuf, io::Error)> {
        let id = buf.id as usize;
        let mine = self
            .bufs
            .get(id)
            .and_then(Target::held_slot)
            .is_some_and(|s| Arc::ptr_eq(s.mapping(), &buf.map) && s.addr() == buf.addr);
        if !mine || !self.bufs[id].set_taken(false) {
            return Err((buf, einval()));
        }
        if let Err(e) = self.recycle(buf.id) {
            self.bufs[id].set_taken(true);
            return Err((buf, e));
        }
        // Given back here: its drop must not queue it again.
        buf.back = None;
        Ok(())
    }
}

/// A received buffer taken out of its [`RecvRing`] ([`RecvRing::take`]): the ring cannot give
/// it back to the kernel until [`RecvRing::give_back`] returns this handle, so its bytes stay
/// as received for as long as it lives (a [`crate::mem::StableBytes`]: an asynchronous copy to
/// the GPU keeps it until the copy completed; several copies share it through an `Arc`).
/// Dropped instead of given back, the buffer goes back to the ring at its next wait.
#[derive(Debug)]
pub struct HeldBuf {
    /// Keeps the buffers mapped, even past the ring.
    map: Arc<Mapping>,
    addr: usize,
    len: usize,
    id: u16,
    /// The ring's queue of dropped handles: a handle dropped instead of given back goes back
    /// to the ring at its next wait (`None` once given back).
    back: Option<Arc<ReturnQueue<u16>>>,
}

impl Drop for HeldBuf {
    fn drop(&mut self) {
        if let Some(back) = self.back.take() {
            back.push(self.id);
        }
    }
}

impl HeldBuf {
    /// The buffer's id in its ring.
    pub fn id(&self) -> u16 {
        self.id
    }

    /// The whole buffer (the ring's buffer size; what was received is at its start).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: [addr, addr+len) is one buffer of the mapping `map` keeps alive; the ring
        // marked it taken, so it is neither published to the kernel (which writes only
        // published buffers) nor written by the ring until this handle comes back.
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.len) }
    }
}

// SAFETY: `bytes` is the same range for the handle's whole life, wherever it moves (the mapping
// stays put), and nothing writes it while the handle lives (see `bytes`).
unsafe impl crate::mem::StableBytes for HeldBuf {
    fn host_bytes(&self) -> &[u8] {
        self.bytes()
    }
}
