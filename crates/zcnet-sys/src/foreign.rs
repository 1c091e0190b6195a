//! Memory that foreign code owns and lends to zcnet for a while: NCCL's send and receive buffers
//! (and, through the C ABI, an application's). The one `unsafe` promise is made where the
//! pointer arrives ([`ForeignBuf::new`]); after that the bytes are reached through bounds-checked
//! safe methods.

use crate::mem::StableBytes;
use std::ptr::NonNull;

/// `len` bytes at `ptr`, lent by foreign code until this value is dropped.
#[derive(Debug)]
pub struct ForeignBuf {
    ptr: NonNull<u8>,
    len: usize,
    /// The bytes are our own (from [`ForeignBuf::owned`]) and are freed with the value.
    owned: bool,
    /// Only reads are allowed ([`Self::slice_mut`] is `None`, a receive into it is refused).
    read_only: bool,
    /// What keeps the bytes valid and unwritten while the value lives, dropped after it (a
    /// received buffer taken out of its ring, going back to it: [`ForeignBuf::returning`]).
    _keep: Option<Box<dyn std::any::Any + Send + Sync>>,
}

// SAFETY: a ForeignBuf is a lease on plain bytes; whoever created it promised (see `new`) that
// nobody else touches them while it lives, so moving it to another thread is sound.
unsafe impl Send for ForeignBuf {}
// SAFETY: shared access only reads (`slice`); writing needs `&mut` (`slice_mut`), so sharing a
// ForeignBuf between threads cannot race through it.
unsafe impl Sync for ForeignBuf {}

impl Drop for ForeignBuf {
    fn drop(&mut self) {
        if self.owned {
            let raw = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
            // SAFETY: `owned` is set only by `owned()`, where ptr/len came from Box::into_raw of a
            // Box<[u8]> of this length; this is the one place it is freed.
            drop(unsafe { Box::from_raw(raw) });
        }
    }
}

impl ForeignBuf {
    /// Wraps `len` bytes at `ptr`. `None` when `ptr` is null and `len` is not zero. A zero-length
    /// buffer may have any pointer (it is never dereferenced).
    ///
    /// # Safety
    /// Until the returned value is dropped, `ptr..ptr + len` must be valid for reads and writes
    /// (reads only if only [`Self::slice`] is used) and must not be accessed by anyone else in a
    /// way that conflicts: this is the contract of NCCL's `isend`/`irecv` (the buffer belongs to
    /// the plugin until `test` reports the request done). And the caller reads no bytes through
    /// [`Self::slice`] that a receive queued on the value (an io_uring receive lease) may still
    /// be writing: the ring cannot tell, since the value is shared by design (several receives
    /// fill parts of one NCCL buffer at once).
    pub unsafe fn new(ptr: *mut u8, len: usize) -> Option<ForeignBuf> {
        if len == 0 {
            return Some(ForeignBuf {
                ptr: NonNull::dangling(),
                len: 0,
                owned: false,
                read_only: false,
                _keep: None,
            });
        }
        NonNull::new(ptr).map(|ptr| ForeignBuf {
            ptr,
            len,
            owned: false,
            read_only: false,
            _keep: None,
        })
    }

    /// Bytes of our own in the same shape (a chunk header an io_uring request reads or fills),
    /// freed when the value is dropped.
    pub fn owned(bytes: Box<[u8]>) -> ForeignBuf {
        let len = bytes.len();
        // Box::into_raw never returns null; the block is given back to a Box in Drop.
        let ptr = NonNull::new(Box::into_raw(bytes).cast::<u8>()).unwrap_or(NonNull::dangling());
        ForeignBuf {
            ptr,
            len,
            owned: true,
            read_only: false,
            _keep: None,
        }
    }

    /// The first `len` bytes of a received buffer taken out of its ring, read-only. The handle
    /// is dropped with the value, which queues the buffer for its ring
    /// ([`crate::bufring::RecvRing::lend`]). `None` when `len` exceeds the buffer.
    pub(crate) fn returning<B: StableBytes + Sync + 'static>(
        held: B,
        len: usize,
    ) -> Option<ForeignBuf> {
        let bytes = held.host_bytes();
        if len > bytes.len() {
            return None;
        }
        // By `StableBytes`'s contract these bytes stay where they are and unwritten while `held`
        // lives, and `_keep` keeps it exactly as long as this value: the lease `new` asks for.
        let ptr = NonNull::new(bytes.as_ptr().cast_mut()).unwrap_or(NonNull::dangling());
        Some(ForeignBuf {
            ptr,
            len,
            owned: false,
            read_only: true,
            _keep: Some(Box::new(held)),
        })
    }

    /// Whether the bytes are our own ([`Self::owned`]).
    pub(crate) fn is_owned(&self) -> bool {
        self.owned
    }

    /// Whether only reads are allowed (a received buffer lent on: `Self::returning`).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its address (for registration and logs).
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// `len` bytes from `off`, if inside.
    pub fn slice(&self, off: usize, len: usize) -> Option<&[u8]> {
        let end = off.checked_add(len)?;
        if end > self.len {
            return None;
        }
        if len == 0 {
            return Some(&[]);
        }
        // SAFETY: off..end lies inside the lent range, which `new`'s caller promised is valid
        // for reads while self lives; the borrow of self bounds the slice's life.
        Some(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off), len) })
    }

    /// `len` bytes from `off` for writing, if inside and not read-only.
    pub fn slice_mut(&mut self, off: usize, len: usize) -> Option<&mut [u8]> {
        if self.read_only {
            return None;
        }
        let end = off.checked_add(len)?;
        if end > self.len {
            return None;
        }
        if len == 0 {
            return Some(&mut []);
        }
        // SAFETY: as in `slice`, and for writes; `&mut self` makes this the only live view.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(off), len) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[zcnet_testkit::test]
    fn bounds_are_checked_and_null_is_refused() {
        let mut v = vec![1u8, 2, 3, 4];
        // SAFETY: v outlives b and is not touched while b lives.
        let mut b = unsafe { ForeignBuf::new(v.as_mut_ptr(), v.len()) }.expect("buf");
        assert_eq!(b.slice(1, 2), Some(&[2u8, 3][..]));
        assert_eq!(b.slice(3, 2), None);
        assert_eq!(b.slice(usize::MAX, 2), None);
        b.slice_mut(0, 1).expect("in")[0] = 9;
        assert!(b.slice_mut(4, 1).is_none());
        assert_eq!(b.slice(4, 0), Some(&[][..]));
        let _ = b;
        assert_eq!(v[0], 9);
        // SAFETY: null is refused before any use.
        assert!(unsafe { ForeignBuf::new(std::ptr::null_mut(), 8) }.is_none());
        // SAFETY: zero length is never dereferenced.
        let z = unsafe { ForeignBuf::new(std::ptr::null_mut(), 0) }.expect("empty");
        assert!(z.is_empty() && z.slice(0, 0).is_some());
    }

    #[zcnet_testkit::test]
    fn owned_bytes_move_with_the_value() {
        let mut b = ForeignBuf::owned(vec![7u8; 40].into_boxed_slice());
        b.slice_mut(39, 1).expect("in")[0] = 1;
        let moved = std::sync::Arc::new(b);
        assert_eq!(moved.len(), 40);
        assert_eq!(moved.slice(38, 2), Some(&[7u8, 1][..]));
        assert!(moved.slice(40, 1).is_none());
    }
}
