//! Memory the kernel can send from: page-aligned anonymous memory, 2 MiB huge pages, transparent
//! huge pages, or memory the caller hands over.
//!
//! A [`Mapping`] gives no access to its bytes. It is cut once, by [`Mapping::into_slots`], into
//! disjoint [`Slot`]s; a slot is not `Clone`, so `&mut Slot` is the only way to write its bytes
//! and whoever holds a slot (the application, or a ring while the kernel uses it) holds it alone.

use std::io;
use std::num::NonZeroU32;
use std::ptr::NonNull;
use std::sync::Arc;

/// 2 MiB, the huge page size used here.
pub const HUGE_2M: usize = 2 << 20;

/// Where a mapping's pages come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backing {
    /// Anonymous 4 KiB pages, pre-faulted.
    Anonymous,
    /// Reserved 2 MiB huge pages (`MAP_HUGETLB`).
    HugeTlb,
    /// Anonymous memory with `madvise(MADV_HUGEPAGE)`: transparent huge pages where the kernel
    /// can find them.
    TransparentHuge,
    /// Memory the caller handed over.
    Caller,
    /// GPU memory (CUDA): the addresses are device addresses the CPU cannot dereference.
    Device,
    /// A shared mapping of a memfd (pre-faulted): the pages of a udmabuf
    /// ([`crate::devmem::udmabuf_region`]).
    Memfd,
}

/// A span of memory, unmapped (or dropped) when the last reference goes.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    backing: Backing,
    /// For `Backing::Caller`: the allocation that owns the bytes.
    owned: Option<Box<[u8]>>,
    /// For `Backing::Device`: the device allocation (a `cuda::DeviceMem`), freed when the last
    /// holder goes. Kept as `Any` so that this module needs nothing of the device's driver:
    /// `Mapping::device_mem` (in `cuda`) gives it back typed.
    device: Option<Arc<dyn std::any::Any + Send + Sync>>,
    /// Bytes from one slot's start to the next's, once cut ([`Mapping::into_slots_strided`]):
    /// a slot is its mapping and its index, so it fits two registers.
    stride: usize,
}

// SAFETY: `Mapping` exposes no access to its bytes through `&Mapping` (only the address, for
// registration with the kernel); byte access goes through `Slot`s, which are disjoint and unique.
unsafe impl Send for Mapping {}
// SAFETY: as above: shared references give only the address and length.
unsafe impl Sync for Mapping {}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

fn round_up(len: usize, to: usize) -> usize {
    len.div_ceil(to) * to
}

fn mmap_anon(len: usize, extra_flags: libc::c_int) -> io::Result<NonNull<u8>> {
    // SAFETY: an anonymous private mapping at an address of the kernel's choosing aliases no
    // existing Rust object; the result is checked for MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra_flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(crate::last_err());
    }
    NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned NULL"))
}

impl Mapping {
    /// `len` bytes (rounded up to the page size) of pre-faulted anonymous memory.
    pub fn anonymous(len: usize) -> io::Result<Mapping> {
        let len = round_up(len.max(1), page_size());
        let ptr = mmap_anon(len, libc::MAP_POPULATE)?;
        Ok(Mapping {
            ptr,
            len,
            backing: Backing::Anonymous,
            owned: None,
            device: None,
            stride: 0,
        })
    }

    /// `len` bytes (rounded up to 2 MiB) of reserved huge pages. Fails with `ENOMEM` when
    /// `/proc/sys/vm/nr_hugepages` has too few free pages.
    pub fn huge_tlb(len: usize) -> io::Result<Mapping> {
        let len = round_up(len.max(1), HUGE_2M);
        // MAP_HUGE_2MB = 21 << MAP_HUGE_SHIFT (include/uapi/asm-generic/hugetlb_encode.h).
        let flags = libc::MAP_HUGETLB | (21 << libc::MAP_HUGE_SHIFT) | libc::MAP_POPULATE;
        let ptr = mmap_anon(len, flags)?;
        Ok(Mapping {
            ptr,
            len,
            backing: Backing::HugeTlb,
            owned: None,
            device: None,
            stride: 0,
        })
    }

    /// `len` bytes (rounded up to 2 MiB), 2 MiB-aligned, advised as `MADV_HUGEPAGE` and then
    /// touched, so that the kernel backs it with transparent huge pages when it can.
    pub fn transparent_huge(len: usize) -> io::Result<Mapping> {
        let len = round_up(len.max(1), HUGE_2M);
        let raw = mmap_anon(len + HUGE_2M, 0)?;
        let start = raw.as_ptr() as usize;
        let aligned = round_up(start, HUGE_2M);
        let head = aligned - start;
        let tail = HUGE_2M - head;
        // SAFETY: [start, start+head) and [aligned+len, aligned+len+tail) lie inside the mapping
        // just made, which nothing else references yet; unmapping them leaves [aligned, +len).
        unsafe {
            if head > 0 {
                crate::cvt(libc::munmap(raw.as_ptr().cast(), head))?;
            }
            if tail > 0 {
                crate::cvt(libc::munmap((aligned + len) as *mut libc::c_void, tail))?;
            }
        }
        // Own it before anything can fail, so it is unmapped on every path.
        let ptr =
            NonNull::new(aligned as *mut u8).ok_or_else(|| io::Error::other("null mapping"))?;
        let m = Mapping {
            ptr,
            len,
            backing: Backing::TransparentHuge,
            owned: None,
            device: None,
            stride: 0,
        };
        // SAFETY: the range is our own mapping; madvise does not touch Rust-visible memory.
        crate::cvt(unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_HUGEPAGE) })?;
        // Fault it in now so a benchmark does not measure page faults.
        let mut off = 0;
        while off < len {
            // SAFETY: off < len, inside our private writable mapping, not yet shared with anyone.
            unsafe { ptr.as_ptr().add(off).write_volatile(0) };
            off += page_size();
        }
        Ok(m)
    }

    /// `len` bytes (a page multiple, at most the file's size) of `fd` from offset 0, mapped
    /// shared, readable and writable, and pre-faulted: the pages of a memfd that a udmabuf also
    /// holds. The mapping keeps the pages after `fd` is closed.
    pub(crate) fn shared_fd(fd: std::os::fd::BorrowedFd<'_>, len: usize) -> io::Result<Mapping> {
        if len == 0 || !len.is_multiple_of(page_size()) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: a new shared mapping of an fd we borrow (open) at an address of the kernel's
        // choosing aliases no existing Rust object; the result is checked for MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(crate::last_err());
        }
        let ptr =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        Ok(Mapping {
            ptr,
            len,
            backing: Backing::Memfd,
            owned: None,
            device: None,
            stride: 0,
        })
    }

    /// Memory the caller owns; dropped with the mapping. It starts wherever the allocator put it,
    /// in general not on a page boundary, so slots cut from it are not page-aligned either.
    pub fn from_boxed(mut bytes: Box<[u8]>) -> io::Result<Mapping> {
        if bytes.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty buffer"));
        }
        let len = bytes.len();
        let ptr =
            NonNull::new(bytes.as_mut_ptr()).ok_or_else(|| io::Error::other("null buffer"))?;
        Ok(Mapping {
            ptr,
            len,
            backing: Backing::Caller,
            owned: Some(bytes),
            device: None,
            stride: 0,
        })
    }

    /// A mapping over `len` bytes of device memory at device address `addr`, which `owner`
    /// keeps allocated: slots carry device addresses and no byte access.
    pub(crate) fn over_device(
        owner: Arc<dyn std::any::Any + Send + Sync>,
        addr: u64,
        len: usize,
    ) -> Mapping {
        // A device address is an integer the CPU never dereferences; NonNull only stores it.
        let ptr = NonNull::new(addr as usize as *mut u8).unwrap_or(NonNull::dangling());
        Mapping {
            ptr,
            len,
            backing: Backing::Device,
            owned: None,
            device: Some(owner),
            stride: 0,
        }
    }

    /// What keeps a `Backing::Device` mapping's memory allocated.
    pub(crate) fn device_owner(&self) -> Option<&Arc<dyn std::any::Any + Send + Sync>> {
        self.device.as_ref()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true (mappings are at least one byte); here for API completeness.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Start address, for registering with the kernel. Not for dereferencing.
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Where the pages come from.
    pub fn backing(&self) -> Backing {
        self.backing
    }

    /// Copies the bytes at `off..off + out.len()` of a host mapping into `out`: what a device
    /// wrote there through a dma-buf of it (a udmabuf of the memfd this maps), read back to check
    /// it. `&mut self`: no slot can have been cut from a mapping its owner still holds
    /// exclusively, so no `&mut [u8]` into it exists in this process. EINVAL for device memory
    /// (read through [`crate::cuda::DeviceMem`]) and a range past the end.
    pub fn read_exclusive(&mut self, off: usize, out: &mut [u8]) -> io::Result<()> {
        if !self.cpu_accessible() || off.checked_add(out.len()).is_none_or(|e| e > self.len) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: `off..off + out.len()` lies inside the live mapping (checked above, CPU memory),
        // `out` is a distinct Rust buffer, and `&mut self` rules out any other reference into the
        // mapping in this process. A device may be writing other parts of it (DMA, outside the
        // Rust memory model); the caller reads ranges the kernel has handed to it.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), out.as_mut_ptr(), out.len());
        }
        Ok(())
    }

    /// Whether the CPU can read and write the bytes (false for device memory).
    pub(crate) fn cpu_accessible(&self) -> bool {
        self.device.is_none()
    }

    /// Cuts the mapping into `count` disjoint slots of `slot_len` bytes (ids `0..count`), each
    /// starting `stride` bytes after the previous (`stride >= slot_len`; a page-multiple stride
    /// keeps every slot page-aligned when the mapping starts on a page, as every mapping made
    /// here does but a [`Mapping::from_boxed`] one need not, so a 64,000 B send spans 16 pages,
    /// not 17, and fits the kernel's MAX_SKB_FRAGS for zero-copy).
    pub fn into_slots_strided(
        self,
        slot_len: usize,
        stride: usize,
        count: usize,
    ) -> io::Result<(Arc<Mapping>, Vec<Slot>)> {
        // A slot's length is a `NonZeroU32` (two words per slot).
        if slot_len > u32::MAX as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("slots of {slot_len} B: each must be under 4 GiB"),
            ));
        }
        let need = stride
            .checked_mul(count - count.min(1))
            .and_then(|v| v.checked_add(slot_len))
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        if slot_len == 0
            || stride < slot_len
            || count == 0
            || need > self.len
            || count > u32::MAX as usize
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "cannot cut {count} slots of {slot_len} B from a {} B region",
                    self.len
                ),
            ));
        }
        // Checked above: above 0 and under 4 GiB.
        let Some(len) = u32::try_from(slot_len).ok().and_then(NonZeroU32::new) else {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        };
        let mut map = self;
        map.stride = stride;
        let map = Arc::new(map);
        let slots = (0..count)
            .map(|i| Slot {
                map: Arc::clone(&map),
                id: i as u32,
                len,
            })
            .collect();
        Ok((map, slots))
    }

    /// Cuts the mapping into `count` adjacent slots of `slot_len` bytes.
    pub fn into_slots(
        self,
        slot_len: usize,
        count: usize,
    ) -> io::Result<(Arc<Mapping>, Vec<Slot>)> {
        self.into_slots_strided(slot_len, slot_len, count)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if self.owned.is_none() && self.device.is_none() {
            // SAFETY: ptr/len describe a mapping this value created and nobody else unmaps; every
            // Slot holds an Arc to this Mapping, so no slot outlives it.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
        }
    }
}

/// A disjoint piece of a [`Mapping`]. Unique: not `Clone`. Two words: its mapping and its
/// index (the offset is the index times the mapping's stride), so a slot, and a
/// [`crate::uring::Lease`] holding one, moves in registers rather than through the stack.
#[derive(Debug)]
pub struct Slot {
    map: Arc<Mapping>,
    id: u32,
    len: NonZeroU32,
}

impl Slot {
    /// The slot's index in its mapping (`0..count`).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Capacity in bytes.
    pub fn len(&self) -> usize {
        self.len.get() as usize
    }

    /// Never true.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Offset in the mapping.
    fn off(&self) -> usize {
        self.id as usize * self.map.stride
    }

    /// Start address (for the kernel); not for dereferencing.
    pub fn addr(&self) -> usize {
        self.map.addr() + self.off()
    }

    /// The mapping this slot belongs to.
    pub fn mapping(&self) -> &Arc<Mapping> {
        &self.map
    }

    /// The bytes, if the CPU can read them.
    pub fn bytes(&self) -> Option<&[u8]> {
        if !self.map.cpu_accessible() {
            return None;
        }
        // SAFETY: [off, off+len) lies inside the live mapping (Arc held); slots are disjoint and
        // unique, so no `&mut` to these bytes exists while `&self` is borrowed.
        Some(unsafe {
            std::slice::from_raw_parts(self.map.ptr.as_ptr().add(self.off()), self.len())
        })
    }

    /// The bytes, writable, if the CPU can write them.
    pub fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        if !self.map.cpu_accessible() {
            return None;
        }
        // SAFETY: as for `bytes`, and `&mut self` makes this the only reference to the range.
        Some(unsafe {
            std::slice::from_raw_parts_mut(self.map.ptr.as_ptr().add(self.off()), self.len())
        })
    }
}

/// Host bytes that stay where they are and unwritten while the value lives, wherever it moves:
/// what an asynchronous copy to the device may read (`cuda::Stream::copy_to_device` takes the
/// value and gives it back only once the copy completed), and what a [`crate::foreign::ForeignBuf`]
/// may lend on while it keeps the value ([`crate::bufring::RecvRing::lend`]).
///
/// # Safety
/// `host_bytes` returns the same bytes (address and length) for as long as the value lives,
/// wherever the value is moved, and nobody writes those bytes while it lives (only shared
/// access, or exclusive access that needs the value itself).
pub unsafe trait StableBytes: Send {
    /// The bytes.
    fn host_bytes(&self) -> &[u8];
}

// SAFETY: a slot is a unique range of a mapping its Arc keeps mapped (its address does not move
// with the value); writing it needs `&mut Slot`, which nobody has while the value is held.
// Device memory has no host bytes: an empty slice, which no registration contains.
unsafe impl StableBytes for Slot {
    fn host_bytes(&self) -> &[u8] {
        self.bytes().unwrap_or(&[])
    }
}

// SAFETY: an Arc gives only shared access to `T`, which stays where it is on the heap however
// the Arc moves; `T`'s own contract holds while any clone (and so `T`) lives.
unsafe impl<T: StableBytes + Sync> StableBytes for Arc<T> {
    fn host_bytes(&self) -> &[u8] {
        (**self).host_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[zcnet_testkit::test]
    fn an_exclusive_host_mapping_reads_back_any_range_in_it() {
        let bytes: Box<[u8]> = (0..=255u8).cycle().take(10_000).collect();
        let mut m = Mapping::from_boxed(bytes).unwrap();
        let mut out = [0u8; 300];
        m.read_exclusive(4_000, &mut out).unwrap();
        assert!(out
            .iter()
            .enumerate()
            .all(|(i, &b)| b == ((4_000 + i) % 256) as u8));
        // The last byte, and past the end.
        m.read_exclusive(9_999, &mut out[..1]).unwrap();
        assert_eq!(out[0], (9_999 % 256) as u8);
        for (off, len) in [(9_999, 2), (10_000, 1), (usize::MAX, 1)] {
            let e = m.read_exclusive(off, &mut out[..len]).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{off}+{len}");
        }
    }

    #[zcnet_testkit::test]
    fn slots_are_disjoint_and_writable() {
        let m = Mapping::anonymous(3 * 4096).unwrap();
        assert_eq!(m.addr() % page_size(), 0);
        let (map, mut slots) = m.into_slots(4096, 3).unwrap();
        for (i, s) in slots.iter_mut().enumerate() {
            s.bytes_mut().unwrap().fill(i as u8 + 1);
        }
        for (i, s) in slots.iter().enumerate() {
            assert!(s.bytes().unwrap().iter().all(|&b| b == i as u8 + 1));
            assert_eq!(s.addr(), map.addr() + i * 4096);
        }
    }

    /// A slot, and a lease holding one, are two words: they move in registers, not through
    /// stack copies the CPU cannot forward (measured: a 40-byte lease cost the send path).
    #[zcnet_testkit::test]
    fn a_slot_and_a_lease_are_two_words() {
        assert_eq!(std::mem::size_of::<Slot>(), 16);
        assert_eq!(std::mem::size_of::<crate::uring::Lease>(), 16);
        let (map, slots) = Mapping::anonymous(3 * 4096)
            .unwrap()
            .into_slots_strided(1000, 4096, 3)
            .unwrap();
        assert_eq!(slots[2].addr(), map.addr() + 2 * 4096);
        assert_eq!((slots[2].id(), slots[2].len()), (2, 1000));
        let e = Mapping::anonymous(4096)
            .unwrap()
            .into_slots(1 << 32, 1)
            .unwrap_err();
        assert!(e.to_string().contains("under 4 GiB"), "{e}");
    }

    #[zcnet_testkit::test]
    fn too_many_slots_is_an_error() {
        let m = Mapping::anonymous(4096).unwrap();
        assert!(m.into_slots(4096, 2).is_err());
    }

    #[zcnet_testkit::test]
    fn transparent_huge_is_aligned() {
        let m = Mapping::transparent_huge(3 << 20).unwrap();
        assert_eq!(m.addr() % HUGE_2M, 0);
        assert_eq!(m.len(), 4 << 20);
    }

    #[zcnet_testkit::test]
    fn a_shared_memfd_mapping_writes_the_file() {
        use std::os::fd::{AsFd, FromRawFd, OwnedFd};
        use std::os::unix::fs::FileExt;
        // SAFETY: the name is a NUL-terminated literal; memfd_create only reads it.
        let fd =
            crate::cvt(unsafe { libc::memfd_create(c"zcnet-test".as_ptr(), libc::MFD_CLOEXEC) })
                .unwrap();
        // SAFETY: memfd_create returned a fresh fd that nothing else owns.
        let f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let len = 2 * page_size();
        f.set_len(len as u64).unwrap();
        assert!(
            Mapping::shared_fd(f.as_fd(), 100).is_err(),
            "not a page multiple"
        );
        let m = Mapping::shared_fd(f.as_fd(), len).unwrap();
        assert_eq!((m.backing(), m.len()), (Backing::Memfd, len));
        let (_map, mut slots) = m.into_slots(page_size(), 2).unwrap();
        slots[1].bytes_mut().unwrap()[..3].copy_from_slice(b"zcn");
        let mut back = [0u8; 3];
        f.read_exact_at(&mut back, page_size() as u64).unwrap();
        assert_eq!(&back, b"zcn");
    }

    #[zcnet_testkit::test]
    fn caller_memory() {
        let m = Mapping::from_boxed(vec![7u8; 100].into_boxed_slice()).unwrap();
        let (_, slots) = m.into_slots(50, 2).unwrap();
        assert!(slots[1].bytes().unwrap().iter().all(|&b| b == 7));
    }
}
