//! The user side of the zcrx refill ring (see the parent module).

use super::{IoUringZcrxOffsets, IoUringZcrxRqe};
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

/// The user side of the refill ring: raw pointers into a region shared with the kernel, which
/// reads entries up to `tail` and publishes how far it got in `head`.
pub(super) struct RefillRing {
    pub(super) head: NonNull<AtomicU32>,
    pub(super) tail: NonNull<AtomicU32>,
    pub(super) rqes: NonNull<IoUringZcrxRqe>,
    pub(super) entries: u32,
    /// Entries written but perhaps not yet published end here.
    pub(super) local_tail: u32,
}

impl RefillRing {
    /// Validates `off`/`entries` against the region `[base, base+len)` and builds the ring.
    ///
    /// # Safety
    /// `[base, base+len)` must be mapped, readable and writable for as long as the ring is used,
    /// and accessed by nothing but this ring and the kernel.
    pub(super) unsafe fn new(
        base: NonNull<u8>,
        len: usize,
        off: &IoUringZcrxOffsets,
        entries: u32,
    ) -> io::Result<RefillRing> {
        let bad = |what: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("kernel returned a refill ring that does not fit its region: {what}"),
            )
        };
        if entries == 0 || !entries.is_power_of_two() {
            return Err(bad("entries not a power of two"));
        }
        let (head, tail, rqes) = (off.head as usize, off.tail as usize, off.rqes as usize);
        let rq_bytes = (entries as usize)
            .checked_mul(std::mem::size_of::<IoUringZcrxRqe>())
            .and_then(|b| b.checked_add(rqes))
            .ok_or_else(|| bad("size overflow"))?;
        if head % 4 != 0 || tail % 4 != 0 || rqes % 8 != 0 {
            return Err(bad("misaligned offsets"));
        }
        if head + 4 > len || tail + 4 > len || rq_bytes > len {
            return Err(bad("offsets past the end"));
        }
        // SAFETY: every offset was just checked to lie inside [base, base+len) with room for the
        // object and its alignment (the base is page-aligned); the caller keeps it mapped.
        let ring = unsafe {
            RefillRing {
                head: base.add(head).cast(),
                tail: base.add(tail).cast(),
                rqes: base.add(rqes).cast(),
                entries,
                local_tail: 0,
            }
        };
        let local_tail = ring.tail().load(Ordering::Relaxed);
        Ok(RefillRing { local_tail, ..ring })
    }

    pub(super) fn head(&self) -> &AtomicU32 {
        // SAFETY: validated, aligned and mapped for the ring's life (constructor contract); the
        // kernel only ever stores to it atomically (smp_store_release).
        unsafe { self.head.as_ref() }
    }

    pub(super) fn tail(&self) -> &AtomicU32 {
        // SAFETY: as for head; only this ring stores to it, the kernel load-acquires it.
        unsafe { self.tail.as_ref() }
    }

    /// Entries that can be pushed now.
    pub(super) fn free(&self) -> u32 {
        let head = self.head().load(Ordering::Acquire);
        self.entries
            .saturating_sub(self.local_tail.wrapping_sub(head))
    }

    /// Writes one entry after the last; not visible to the kernel until [`Self::commit`].
    pub(super) fn push(&mut self, rqe: IoUringZcrxRqe) -> bool {
        if self.free() == 0 {
            return false;
        }
        let idx = (self.local_tail & (self.entries - 1)) as usize;
        // SAFETY: idx < entries, inside the validated entry array; slots between the published
        // tail and head + entries are not read by the kernel until the tail moves past them.
        unsafe { self.rqes.as_ptr().add(idx).write(rqe) };
        self.local_tail = self.local_tail.wrapping_add(1);
        true
    }

    /// Publishes the pushed entries (store-release of the tail).
    pub(super) fn commit(&mut self) {
        self.tail().store(self.local_tail, Ordering::Release);
    }
}
