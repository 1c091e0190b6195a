//! The four AF_XDP rings, mapped from the socket: where their indexes, flags and entries are,
//! and the atomic loads and stores on them.
//!
//! Each ring is `mmap(fd, XDP_PGOFF_RX_RING | XDP_PGOFF_TX_RING | XDP_UMEM_PGOFF_FILL_RING |
//! XDP_UMEM_PGOFF_COMPLETION_RING)` of `desc + entries * entry size` bytes, at the offsets
//! `getsockopt(XDP_MMAP_OFFSETS)` reports (include/uapi/linux/if_xdp.h, struct
//! `xdp_ring_offset`: producer, consumer, desc, flags). Index arithmetic is
//! [`zcnet_core::xsk`]'s; memory ordering follows net/xdp/xsk_queue.h: the side that owns an
//! index store-releases it after writing or reading entries, the other side load-acquires it
//! before reading or writing entries. The fill and TX rings' entries are written here and read
//! by the kernel; the completion and RX rings' the other way round.

use crate::xsk::XdpRingOffset;
use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

/// A ring entry: `u64` (a UMEM address, fill and completion rings) or
/// [`crate::xsk::XdpDesc`] (RX and TX rings). Plain old data, every bit pattern valid.
///
/// # Safety
/// Implementors must be `repr(C)` integer-only types with no padding, valid for any bytes.
pub(crate) unsafe trait RingEntry: Copy {}
// SAFETY: an integer.
unsafe impl RingEntry for u64 {}
// SAFETY: repr(C) of u64, u32, u32: no padding, any bytes valid.
unsafe impl RingEntry for crate::xsk::XdpDesc {}

/// One mapped ring. Unmapped on drop. Entry reads and writes are only offered through
/// `MappedRing::read` and `MappedRing::write` (crate-private), which the socket calls for slots
/// its [`zcnet_core::xsk::Producer`] reserved or [`zcnet_core::xsk::Consumer`] peeked.
#[derive(Debug)]
pub(crate) struct MappedRing<T: RingEntry> {
    base: NonNull<u8>,
    len: usize,
    producer: NonNull<AtomicU32>,
    consumer: NonNull<AtomicU32>,
    flags: NonNull<AtomicU32>,
    descs: NonNull<T>,
    entries: u32,
    _entries: PhantomData<T>,
}

// SAFETY: the ring is plain shared memory reached through atomics and raw pointers; moving the
// owner to another thread changes nothing (the socket that owns it is used by one thread at a
// time, `&mut` for every access that writes).
unsafe impl<T: RingEntry> Send for MappedRing<T> {}

fn bad(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("kernel reported an AF_XDP ring layout that does not fit: {what}"),
    )
}

impl<T: RingEntry> MappedRing<T> {
    /// Maps the ring of `entries` entries at page offset `pgoff` of the AF_XDP socket `fd`,
    /// laid out as `off` says. The socket must have the ring sized (setsockopt) already.
    pub(crate) fn map(
        fd: BorrowedFd<'_>,
        pgoff: libc::off_t,
        off: &XdpRingOffset,
        entries: u32,
    ) -> io::Result<MappedRing<T>> {
        if entries == 0 || !entries.is_power_of_two() {
            return Err(bad("entries not a power of two"));
        }
        let size = std::mem::size_of::<T>();
        let field = |v: u64, align: usize| -> io::Result<usize> {
            let v = usize::try_from(v).map_err(|_| bad("offset overflow"))?;
            if v % align != 0 {
                return Err(bad("misaligned offset"));
            }
            Ok(v)
        };
        let producer = field(off.producer, 4)?;
        let consumer = field(off.consumer, 4)?;
        let flags = field(off.flags, 4)?;
        let desc = field(off.desc, std::mem::align_of::<T>())?;
        let len = (entries as usize)
            .checked_mul(size)
            .and_then(|b| b.checked_add(desc))
            .ok_or_else(|| bad("size overflow"))?;
        if producer + 4 > len || consumer + 4 > len || flags + 4 > len {
            return Err(bad("index past the ring"));
        }
        // SAFETY: a shared mapping of the socket's ring at an address of the kernel's choosing
        // aliases no Rust object; the result is checked for MAP_FAILED. The kernel checks that
        // `len` does not exceed the ring it allocated (xsk_mmap: EINVAL otherwise).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                pgoff,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(crate::last_err());
        }
        let base = NonNull::new(p.cast::<u8>()).ok_or_else(|| bad("mmap returned NULL"))?;
        // SAFETY: every offset was checked to lie inside [base, base+len) with room for its
        // object and its alignment (the base is page-aligned); the mapping lives as long as
        // the returned value, which unmaps it on drop.
        unsafe {
            Ok(MappedRing {
                base,
                len,
                producer: base.add(producer).cast(),
                consumer: base.add(consumer).cast(),
                flags: base.add(flags).cast(),
                descs: base.add(desc).cast(),
                entries,
                _entries: PhantomData,
            })
        }
    }

    fn atomic(&self, p: NonNull<AtomicU32>) -> &AtomicU32 {
        // SAFETY: p points at an aligned u32 inside the live mapping (checked in `map`); the
        // kernel accesses it only with READ_ONCE/WRITE_ONCE/acquire/release, as this does.
        unsafe { p.as_ref() }
    }

    /// The producer index, load-acquire ((C) in net/xdp/xsk_queue.h when the kernel produces).
    pub(crate) fn load_producer(&self) -> u32 {
        self.atomic(self.producer).load(Ordering::Acquire)
    }

    /// The consumer index, load-acquire ((A): before reusing slots the kernel read).
    pub(crate) fn load_consumer(&self) -> u32 {
        self.atomic(self.consumer).load(Ordering::Acquire)
    }

    /// Publishes our producer index, store-release ((B): after writing the entries).
    pub(crate) fn store_producer(&mut self, v: u32) {
        self.atomic(self.producer).store(v, Ordering::Release);
    }

    /// Publishes our consumer index, store-release ((D): after reading the entries).
    pub(crate) fn store_consumer(&mut self, v: u32) {
        self.atomic(self.consumer).store(v, Ordering::Release);
    }

    /// The ring's flags word (`XDP_RING_NEED_WAKEUP`).
    pub(crate) fn load_flags(&self) -> u32 {
        self.atomic(self.flags).load(Ordering::Acquire)
    }

    /// Reads the entry in `slot` (`slot < entries`, a slot the consumer peeked).
    pub(crate) fn read(&self, slot: usize) -> T {
        assert!(
            slot < self.entries as usize,
            "ring slot {slot} out of range"
        );
        // SAFETY: slot < entries, inside the validated entry array; T is plain old data. A
        // peeked slot was published by the kernel (acquire on the producer) and is not written
        // again until our consumer index moves past it.
        unsafe { self.descs.as_ptr().add(slot).read() }
    }

    /// Writes the entry in `slot` (`slot < entries`, a slot the producer reserved).
    pub(crate) fn write(&mut self, slot: usize, v: T) {
        assert!(
            slot < self.entries as usize,
            "ring slot {slot} out of range"
        );
        // SAFETY: slot < entries, inside the validated entry array; a reserved slot is behind
        // the kernel's consumer index plus the ring size, so the kernel does not read it until
        // our producer index is published past it.
        unsafe { self.descs.as_ptr().add(slot).write(v) }
    }
}

impl<T: RingEntry> Drop for MappedRing<T> {
    fn drop(&mut self) {
        // SAFETY: base/len describe the mapping `map` made, unmapped only here; no reference
        // into it outlives `self` (reads and writes copy entries out and in).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}
