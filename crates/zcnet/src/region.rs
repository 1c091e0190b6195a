//! Registered memory: where the bytes that are sent without copying live.
//!
//! A [`Region`] is anonymous pages, 2 MiB huge pages (falling back to transparent huge pages,
//! and saying so), a udmabuf (host pages that are also a dma-buf, [`Region::udmabuf`]), memory
//! the caller hands over, or GPU memory ([`Region::cuda`]). A
//! [`crate::Sender`] cuts it into [`TxBuf`]s and registers it once with io_uring as fixed
//! buffers. Device memory is a region the CPU cannot read: [`TxBuf::bytes_mut`] returns `None`
//! there, [`TxBuf::write`] copies to the device, and [`Region::dmabuf`] exports it as a dma-buf
//! for devmem TCP.

use crate::error::{Error, Result};
pub use crate::kinds::MemoryKind;
use crate::remedy::Remedy;
use std::os::fd::OwnedFd;
use std::sync::Arc;
/// What backs a region's memory (anonymous pages, a memfd, huge pages), as [`Region::backing`] says.
pub use zcnet_sys::mem::Backing;
use zcnet_sys::mem::{Mapping, Slot, HUGE_2M};

/// Memory for zero-copy I/O.
#[derive(Debug)]
pub struct Region {
    map: Mapping,
    note: Option<String>,
    dmabuf: Option<Arc<OwnedFd>>,
}

impl Region {
    /// `len` bytes of page-aligned anonymous memory.
    pub fn anonymous(len: usize) -> Result<Region> {
        let map = Mapping::anonymous(len).map_err(|e| Error::io(format!("mmap {len} B"), e))?;
        Ok(Region::of(map))
    }

    /// `len` bytes (rounded up to 2 MiB) of anonymous memory advised as transparent huge pages.
    pub(crate) fn transparent_huge(len: usize) -> Result<Region> {
        let map = Mapping::transparent_huge(len)
            .map_err(|e| Error::io(format!("mmap {len} B (THP)"), e))?;
        Ok(Region::of(map))
    }

    /// `len` bytes (rounded up to 2 MiB) of reserved 2 MiB huge pages; when none are free,
    /// transparent huge pages via `madvise(MADV_HUGEPAGE)`, with a [`Region::note`] saying so.
    pub fn huge(len: usize) -> Result<Region> {
        match Region::huge_strict(len) {
            Ok(r) => Ok(r),
            Err(Error::NoHugePages { pages }) => {
                let mut r = Region::transparent_huge(len)?;
                r.note = Some(format!(
                    "no free 2 MiB huge pages for {pages} page(s) (vm.nr_hugepages): using transparent huge pages via madvise; reserve with 'echo {pages} > /proc/sys/vm/nr_hugepages'"
                ));
                Ok(r)
            }
            Err(e) => Err(e),
        }
    }

    /// Reserved 2 MiB huge pages only: [`Error::NoHugePages`] when none are free.
    pub fn huge_strict(len: usize) -> Result<Region> {
        match Mapping::huge_tlb(len) {
            Ok(map) => Ok(Region::of(map)),
            Err(e) if e.raw_os_error() == Some(libc::ENOMEM) => Err(Error::NoHugePages {
                pages: len.max(1).div_ceil(HUGE_2M),
            }),
            Err(e) => Err(Error::io("mmap MAP_HUGETLB", e)),
        }
    }

    /// Memory the caller owns, handed over for the region's lifetime. It starts where the
    /// allocator put it, in general not on a page boundary, so buffers cut from it are not
    /// page-aligned (a send may then span one page more than from [`Region::anonymous`]).
    pub fn from_boxed(bytes: Box<[u8]>) -> Result<Region> {
        let map = Mapping::from_boxed(bytes).map_err(|e| Error::io("caller memory", e))?;
        Ok(Region::of(map))
    }

    /// Allocates `len` bytes of the given kind.
    pub fn new(kind: MemoryKind, len: usize) -> Result<Region> {
        match kind {
            MemoryKind::Anonymous => Region::anonymous(len),
            MemoryKind::Auto => Region::anonymous(len),
            MemoryKind::Huge => Region::huge(len),
            MemoryKind::Udmabuf => Region::udmabuf(len),
            MemoryKind::Cuda(n) => Region::cuda(n, len),
        }
    }

    /// `len` bytes (rounded up to the page size) of host memory that is also a dma-buf: a memfd
    /// sealed against shrinking (F_SEAL_SHRINK), mapped here and handed to `/dev/udmabuf`
    /// (`UDMABUF_CREATE`), so that [`Region::dmabuf`] is that dma-buf (offset 0 = the region's
    /// start) and the CPU fills the same pages a device reads. For devmem TX and zcrx's dma-buf
    /// areas on machines without a GPU exporter. Without `/dev/udmabuf` (a kernel built without
    /// CONFIG_UDMABUF, or the module not loaded): [`Error::Unsupported`] in one line with the fix.
    pub fn udmabuf(len: usize) -> Result<Region> {
        let (map, dmabuf) = zcnet_sys::devmem::udmabuf_region(len).map_err(|e| {
            let errno = e.raw_os_error().unwrap_or(0);
            let fix = match errno {
                libc::ENOENT | libc::ENODEV | libc::ENXIO => {
                    Remedy::Any(&[
                        Remedy::KernelModule("udmabuf"),
                        Remedy::All(&[
                            Remedy::UseMemory(MemoryKind::Anonymous),
                            Remedy::Say(&[
                                crate::text::Piece::Str("devmem transmit then needs device memory ("),
                                crate::text::Piece::Term(crate::text::Term::Memory(crate::text::Memory::Cuda)),
                                crate::text::Piece::Str(")"),
                            ]),
                        ]),
                    ])
                }
                libc::EACCES | libc::EPERM => {
                    Remedy::Other("run as root, or give your user read-write access to /dev/udmabuf")
                }
                libc::EINVAL => {
                    Remedy::Other("use a smaller region, or raise udmabuf's size_limit_mb (modprobe udmabuf size_limit_mb=N)")
                }
                _ => Remedy::None,
            };
            Error::Unsupported {
                what: crate::text!(
                    format!("a udmabuf region of {len} B ("),
                    MemoryKind::Udmabuf.term(),
                    format!(": {})", zcnet_sys::devmem::explain_udmabuf_errno(errno)),
                ),
                source: e,
                remedy: fix,
            }
        })?;
        let mut r = Region::of(map);
        r.dmabuf = Some(Arc::new(dmabuf));
        Ok(r)
    }

    fn of(map: Mapping) -> Region {
        Region {
            map,
            note: None,
            dmabuf: None,
        }
    }

    /// `len` bytes (rounded up to the page size) of memory on CUDA device `ordinal`, page-aligned
    /// so that it can be exported as a dma-buf. The CPU cannot read it; the driver is opened now.
    pub fn cuda(ordinal: u32, len: usize) -> Result<Region> {
        let ctx = crate::cuda::context(ordinal)?;
        let mem = zcnet_sys::cuda::DeviceMem::alloc(&ctx, len).map_err(|e| {
            crate::cuda::gpu_error(
                format!(
                    "allocating {} on cuda:{ordinal}",
                    crate::error::size_words(len as u64)
                ),
                e,
            )
        })?;
        Ok(Region::of_device(Arc::new(mem)))
    }

    /// A region over device memory (allocated here, or borrowed: `gpu::borrow_device`).
    pub(crate) fn of_device(mem: Arc<zcnet_sys::cuda::DeviceMem>) -> Region {
        Region::of(mem.into_mapping())
    }

    /// The device address of a CUDA region's first byte (for DLPack and kernels; the CPU cannot
    /// dereference it); `None` for host memory.
    pub fn device_addr(&self) -> Option<u64> {
        self.map.device_mem().map(|m| m.device_addr())
    }

    /// The device memory behind a CUDA region.
    pub(crate) fn device_mem(&self) -> Option<Arc<zcnet_sys::cuda::DeviceMem>> {
        self.map.device_mem()
    }

    /// The CUDA device the memory is on (`None` for host memory).
    pub fn device_ordinal(&self) -> Option<u32> {
        self.map.device_mem().map(|m| m.context().ordinal())
    }

    /// The region as a dma-buf whose offset 0 is the region's start: exported from CUDA device
    /// memory on first use (`cuMemGetHandleForAddressRange`), or the one given with
    /// [`Region::with_dmabuf`]. Host memory without one: [`Error::Unsupported`].
    pub fn dmabuf(&mut self) -> Result<Arc<OwnedFd>> {
        if let Some(d) = &self.dmabuf {
            return Ok(Arc::clone(d));
        }
        let Some(mem) = self.map.device_mem() else {
            return Err(Error::Unsupported {
                what: "a dma-buf of host memory".into(),
                source: std::io::Error::from_raw_os_error(libc::EOPNOTSUPP),
                remedy: Remedy::Any(&[
                    Remedy::UseMemory(MemoryKind::Cuda(0)),
                    Remedy::Other(
                        "pass a dma-buf (a udmabuf of a memfd where /dev/udmabuf exists)",
                    ),
                ]),
            });
        };
        let ord = mem.context().ordinal();
        // cuda.h: export is defined only where CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is set;
        // asking first gives the reason instead of the driver's generic NOT_SUPPORTED.
        let info = zcnet_sys::cuda::device_info(ord)
            .map_err(|e| crate::cuda::gpu_error(format!("reading cuda:{ord}"), e))?;
        if !info.dma_buf {
            return Err(Error::Gpu {
                what: format!("exporting cuda:{ord} memory as a dma-buf").into(),
                cause: format!(
                    "{} does not report CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED",
                    info.name
                ).into(),
                remedy: Remedy::Other("use the open NVIDIA kernel modules (r515+) on a kernel with dma-buf support; staging works without it"),
                bad_argument: false,
            });
        }
        let fd = mem.export_dmabuf().map_err(|e| {
            crate::cuda::gpu_error(
                format!(
                    "exporting cuda:{} memory as a dma-buf",
                    mem.context().ordinal()
                ),
                e,
            )
        })?;
        let fd = Arc::new(fd);
        self.dmabuf = Some(Arc::clone(&fd));
        Ok(fd)
    }

    /// Declares that `dmabuf` is this region's memory (offset 0 = the region's start), e.g. a
    /// udmabuf made from the memfd the region maps.
    pub fn with_dmabuf(mut self, dmabuf: Arc<OwnedFd>) -> Region {
        self.dmabuf = Some(dmabuf);
        self
    }

    /// Copies `data` to `off` (for device memory a synchronous copy to the GPU): for filling a
    /// region before it is cut into buffers, and for tests.
    pub fn write_at(&mut self, off: usize, data: &[u8]) -> Result<()> {
        write_mapping(&self.map, off, data)
    }

    /// Copies from `off` into `out` (device memory: copied back from the GPU).
    pub fn read_at(&self, off: usize, out: &mut [u8]) -> Result<()> {
        read_mapping(&self.map, off, out)
    }

    /// [`Self::read_at`] that also reads host memory: what a device wrote into this region
    /// through its dma-buf ([`Self::udmabuf`], bound for devmem TCP or as a zcrx area), read back
    /// to check it. Needs the region itself (no buffers cut from it).
    pub fn read_back(&mut self, off: usize, out: &mut [u8]) -> Result<()> {
        if self.map.device_mem().is_some() {
            return self.read_at(off, out);
        }
        let len = self.map.len();
        self.map
            .read_exclusive(off, out)
            .map_err(|_| out_of_range(off, out.len(), len))
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

    pub(crate) fn mapping(&self) -> &Mapping {
        &self.map
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

    /// Copies `data` into the start of the buffer; returns how many bytes fit. For device
    /// memory this is a synchronous copy to the GPU.
    pub fn write(&mut self, data: &[u8]) -> Result<usize> {
        let n = data.len().min(self.capacity());
        if let Some(b) = self.bytes_mut() {
            b[..n].copy_from_slice(&data[..n]);
            return Ok(n);
        }
        let off = self.slot.addr() - self.slot.mapping().addr();
        write_mapping(self.slot.mapping(), off, &data[..n])?;
        Ok(n)
    }

    /// Copies the first `out.len()` bytes of the buffer into `out` (device memory: from the GPU).
    pub fn read(&self, out: &mut [u8]) -> Result<()> {
        if out.len() > self.capacity() {
            return Err(Error::invalid_input(
                "TxBuf::read: more bytes than the buffer holds",
            ));
        }
        if let Some(b) = self.bytes() {
            out.copy_from_slice(&b[..out.len()]);
            return Ok(());
        }
        let off = self.slot.addr() - self.slot.mapping().addr();
        read_mapping(self.slot.mapping(), off, out)
    }
}

fn out_of_range(off: usize, len: usize, have: usize) -> Error {
    Error::invalid_input(format!(
        "{len} B at offset {off} does not fit the {have} B region"
    ))
}

fn device_error(map: &Mapping, what: &str, e: zcnet_sys::cuda::CudaError) -> Error {
    let ord = map.device_mem().map_or(0, |m| m.context().ordinal());
    crate::cuda::gpu_error(format!("{what} cuda:{ord}"), e)
}

fn write_mapping(map: &Mapping, off: usize, data: &[u8]) -> Result<()> {
    if off.checked_add(data.len()).is_none_or(|e| e > map.len()) {
        return Err(out_of_range(off, data.len(), map.len()));
    }
    match map.device_mem() {
        Some(mem) => mem
            .write(off as u64, data)
            .map_err(|e| device_error(map, "copying to", e)),
        None => Err(Error::invalid_input(crate::text!(
            crate::text::Call::RegionWriteAt,
            " on host memory: write through the region's buffers (TxBuf::write)",
        ))),
    }
}

fn read_mapping(map: &Mapping, off: usize, out: &mut [u8]) -> Result<()> {
    if off.checked_add(out.len()).is_none_or(|e| e > map.len()) {
        return Err(out_of_range(off, out.len(), map.len()));
    }
    match map.device_mem() {
        Some(mem) => mem
            .read(off as u64, out)
            .map_err(|e| device_error(map, "copying from", e)),
        None => Err(Error::invalid_input(crate::text!(
            crate::text::Call::RegionReadAt,
            " on host memory: read through the region's buffers",
        ))),
    }
}
