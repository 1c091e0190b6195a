//! Registered memory: where the bytes that are sent without copying live.
//!
//! A [`Region`] is anonymous pages, 2 MiB huge pages (falling back to transparent huge pages,
//! and saying so), or memory the caller hands over. A [`crate::Sender`] cuts it into
//! [`TxBuf`]s and registers it once with io_uring as fixed buffers. The shape is ready for
//! device memory (a dma-buf the CPU cannot read): [`TxBuf::bytes_mut`] returns `None` there,
//! and nothing else changes for callers.

use crate::error::{Error, Result};
use zcnet_sys::mem::{Backing, Mapping, Slot, HUGE_2M};

/// Which memory to allocate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryKind {
    /// Anonymous 4 KiB pages.
    Anonymous,
    /// 2 MiB huge pages; transparent huge pages (madvise) when none are reserved.
    Huge,
}

impl MemoryKind {
    /// Parses `anon` or `huge`.
    pub fn parse(s: &str) -> Option<MemoryKind> {
        match s {
            "anon" | "anonymous" | "pages" => Some(MemoryKind::Anonymous),
            "huge" | "hugepages" => Some(MemoryKind::Huge),
            _ => None,
        }
    }
}

/// Memory for zero-copy I/O.
#[derive(Debug)]
pub struct Region {
    map: Mapping,
    note: Option<String>,
}

impl Region {
    /// `len` bytes of page-aligned anonymous memory.
    pub fn anonymous(len: usize) -> Result<Region> {
        let map = Mapping::anonymous(len).map_err(|e| Error::io(format!("mmap {len} B"), e))?;
        Ok(Region { map, note: None })
    }

    /// `len` bytes (rounded up to 2 MiB) of reserved 2 MiB huge pages; when none are free,
    /// transparent huge pages via `madvise(MADV_HUGEPAGE)`, with a [`Region::note`] saying so.
    pub fn huge(len: usize) -> Result<Region> {
        match Region::huge_strict(len) {
            Ok(r) => Ok(r),
            Err(Error::NoHugePages { pages }) => {
                let map = Mapping::transparent_huge(len)
                    .map_err(|e| Error::io(format!("mmap {len} B (THP)"), e))?;
                Ok(Region {
                    map,
                    note: Some(format!(
                        "no free 2 MiB huge pages for {pages} page(s) (vm.nr_hugepages): using transparent huge pages via madvise; reserve with 'echo {pages} > /proc/sys/vm/nr_hugepages'"
                    )),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Reserved 2 MiB huge pages only: [`Error::NoHugePages`] when none are free.
    pub fn huge_strict(len: usize) -> Result<Region> {
        match Mapping::huge_tlb(len) {
            Ok(map) => Ok(Region { map, note: None }),
            Err(e) if e.raw_os_error() == Some(libc::ENOMEM) => Err(Error::NoHugePages {
                pages: len.max(1).div_ceil(HUGE_2M),
            }),
            Err(e) => Err(Error::io("mmap MAP_HUGETLB", e)),
        }
    }

    /// Memory the caller owns, handed over for the region's lifetime.
    pub fn from_boxed(bytes: Box<[u8]>) -> Result<Region> {
        let map = Mapping::from_boxed(bytes).map_err(|e| Error::io("caller memory", e))?;
        Ok(Region { map, note: None })
    }

    /// Allocates `len` bytes of the given kind.
    pub fn new(kind: MemoryKind, len: usize) -> Result<Region> {
        match kind {
            MemoryKind::Anonymous => Region::anonymous(len),
            MemoryKind::Huge => Region::huge(len),
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Never true.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Where the pages come from.
    pub fn backing(&self) -> Backing {
        self.map.backing()
    }

    /// A fallback the allocation took, in words (e.g. THP instead of reserved huge pages).
    pub fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }

    pub(crate) fn into_mapping(self) -> Mapping {
        self.map
    }
}

/// A buffer of a region, owned by whoever may write it: the application until it is sent, then
/// the kernel until the send's completion (for zero-copy: its notification). A `TxBuf` handed to
/// [`crate::Sender::send`] comes back from [`crate::Sender::buffer`] only after that, so a buffer the
/// kernel may still read cannot be written: the type system enforces the zero-copy contract.
#[derive(Debug)]
pub struct TxBuf {
    pub(crate) slot: Slot,
}

impl TxBuf {
    /// Capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.slot.len()
    }

    /// The buffer's index in its region.
    pub fn id(&self) -> u32 {
        self.slot.id()
    }

    /// The bytes, writable; `None` for device memory the CPU cannot access.
    pub fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        self.slot.bytes_mut()
    }

    /// The bytes; `None` for device memory.
    pub fn bytes(&self) -> Option<&[u8]> {
        self.slot.bytes()
    }

    /// Copies `data` into the start of the buffer; returns how many bytes fit.
    pub fn write(&mut self, data: &[u8]) -> Result<usize> {
        let b = self.bytes_mut().ok_or(Error::NotCpuAccessible)?;
        let n = data.len().min(b.len());
        b[..n].copy_from_slice(&data[..n]);
        Ok(n)
    }
}
