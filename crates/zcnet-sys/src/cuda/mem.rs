//! Device memory and the contexts it lives in: a device's primary context made current around each call, device allocations (owned or borrowed), and host memory registered for the copy engines.

use super::*;

/// A device's primary context, retained while this lives. Every call below makes it current on
/// the calling thread first, so objects can be used from any thread.
#[derive(Debug)]
pub struct Context {
    dev: CuDevice,
    ctx: Handle,
    ordinal: u32,
}

// SAFETY: a CUDA context may be made current on any thread; the handle is an opaque token.
unsafe impl Send for Context {}
// SAFETY: as above; the driver serialises what needs it.
unsafe impl Sync for Context {}

impl Context {
    /// Retains device `ordinal`'s primary context.
    pub fn new(ordinal: u32) -> Result<Arc<Context>> {
        let d = driver()?;
        let dev = device_handle(d, ordinal)?;
        let mut ctx: Handle = std::ptr::null_mut();
        // SAFETY: `ctx` is a live out-parameter; `dev` a valid device handle.
        d.check("cuDevicePrimaryCtxRetain", unsafe {
            (d.fns.primary_ctx_retain)(&mut ctx, dev)
        })?;
        let c = Context { dev, ctx, ordinal };
        // Bound (and unbound) here only to check it can be.
        drop(c.bind()?);
        Ok(Arc::new(c))
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> u32 {
        self.ordinal
    }

    /// Waits for every piece of work queued in the context, on every stream
    /// (`cuCtxSynchronize`): another producer's kernels or copies writing memory zcnet is
    /// about to read (a tensor handed over through DLPack) have finished then.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: no arguments; waits for the current context's work.
        self.call("cuCtxSynchronize", |f| unsafe { (f.ctx_synchronize)() })
    }

    /// Makes the context current on the calling thread for the life of the guard, which puts
    /// back the one that was current before: the CUDA runtime takes a context made current
    /// through the driver API for its own, so leaving ours current would move the caller's
    /// (torch's, CuPy's) work on this thread to our device.
    pub(super) fn bind(&self) -> Result<Rebind> {
        let d = driver()?;
        let mut prev: Handle = std::ptr::null_mut();
        // SAFETY: `prev` is a live out-parameter.
        let known = unsafe { (d.fns.ctx_get_current)(&mut prev) } == 0;
        if known && prev == self.ctx {
            return Ok(Rebind { prev: None });
        }
        // SAFETY: the context is retained by `self`.
        d.check("cuCtxSetCurrent", unsafe {
            (d.fns.ctx_set_current)(self.ctx)
        })?;
        // Where the previous one could not be read, ours stays current (as before this guard).
        Ok(Rebind {
            prev: known.then_some(prev),
        })
    }

    pub(super) fn call(&self, call: &'static str, f: impl FnOnce(&Fns) -> c_int) -> Result<()> {
        let _bound = self.bind()?;
        let d = driver()?;
        d.check(call, f(&d.fns))
    }

    /// Whether this context is the calling thread's current one.
    pub fn is_current(&self) -> Result<bool> {
        let d = driver()?;
        let mut cur: Handle = std::ptr::null_mut();
        // SAFETY: `cur` is a live out-parameter.
        d.check("cuCtxGetCurrent", unsafe {
            (d.fns.ctx_get_current)(&mut cur)
        })?;
        Ok(cur == self.ctx)
    }
}

/// The context to put back when a [`Context::bind`] ends (`None`: nothing to do).
pub(super) struct Rebind {
    prev: Option<Handle>,
}

impl Drop for Rebind {
    fn drop(&mut self) {
        if let (Some(prev), Ok(d)) = (self.prev, driver()) {
            // SAFETY: `prev` was the thread's current context (or null) when the bind began.
            unsafe { (d.fns.ctx_set_current)(prev) };
        }
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        if let Ok(d) = driver() {
            // SAFETY: releases the retain taken in `new`.
            unsafe { (d.fns.primary_ctx_release)(self.dev) };
        }
    }
}

/// Device memory: `cuMemAlloc`, page-aligned in address and length so that it can be exported
/// as a dma-buf; freed on drop. Or memory someone else allocated ([`DeviceMem::borrowed`]: a
/// tensor's), which is never freed or exported here.
#[derive(Debug)]
pub struct DeviceMem {
    ctx: Arc<Context>,
    base: CuPtr,
    ptr: CuPtr,
    len: usize,
    /// Allocated here (freed on drop), not borrowed.
    owned: bool,
}

impl DeviceMem {
    /// `len` bytes (rounded up to the host page size) on `ctx`'s device.
    pub fn alloc(ctx: &Arc<Context>, len: usize) -> Result<DeviceMem> {
        let page = crate::mem::page_size();
        let len = len.max(1).div_ceil(page) * page;
        // cuMemAlloc aligns to at least 256 B (2 MiB for large sizes in practice); ask for one
        // page more and align, so the export's page-alignment rule holds whatever it gives.
        let mut base: CuPtr = 0;
        let alloc_len = len + page;
        ctx.call("cuMemAlloc", |f| {
            // SAFETY: `base` is a live out-parameter.
            unsafe { (f.mem_alloc)(&mut base, alloc_len) }
        })?;
        let ptr = base.div_ceil(page as u64) * page as u64;
        Ok(DeviceMem {
            ctx: Arc::clone(ctx),
            base,
            ptr,
            len,
            owned: true,
        })
    }

    /// The device memory `b` names, in `ctx` (which must be `cuda:b.ordinal`'s): copies read
    /// and write it like any `DeviceMem`, but dropping the value frees nothing, and it is never
    /// exported as a dma-buf (its owner may free or reuse the pages). The promise that the memory
    /// stays valid was made where `b` was made ([`BorrowedDevice::new`]).
    pub fn borrowed(ctx: &Arc<Context>, b: BorrowedDevice) -> DeviceMem {
        DeviceMem {
            ctx: Arc::clone(ctx),
            base: b.ptr,
            ptr: b.ptr,
            len: b.len,
            owned: false,
        }
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device address (for kernels and descriptors; not a host pointer).
    pub fn device_addr(&self) -> u64 {
        self.ptr
    }

    /// The context it lives in.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    pub(super) fn range(&self, off: u64, len: usize) -> Result<CuPtr> {
        match off.checked_add(len as u64) {
            Some(end) if end <= self.len as u64 => Ok(self.ptr + off),
            _ => Err(CudaError::Call {
                call: "zcnet range check",
                code: E::CUDA_ERROR_INVALID_VALUE as i32,
                text: format!(
                    "{len} B at offset {off} is outside the {} B device buffer",
                    self.len
                ),
            }),
        }
    }

    /// Exports the memory as a dma-buf (`cuMemGetHandleForAddressRange`). The fd must not outlive
    /// this memory's users: keep both in one owner (zcnet's `Region` does).
    pub fn export_dmabuf(&self) -> Result<OwnedFd> {
        if !self.owned {
            return Err(CudaError::Call {
                call: "cuMemGetHandleForAddressRange",
                code: E::CUDA_ERROR_NOT_SUPPORTED as i32,
                text: "zcnet exports only device memory it allocated; this memory is borrowed (its owner may free or reuse it while a dma-buf of it lives)".into(),
            });
        }
        let mut fd: c_int = -1;
        let (ptr, len) = (self.ptr, self.len);
        let d = driver()?;
        let export = d.fns.get_handle_for_range.ok_or(CudaError::MissingSymbol {
            name: "cuMemGetHandleForAddressRange",
        })?;
        // Map through the PCIe BAR where the driver knows the flag (CUDA 12.8+; an older driver
        // rejects any non-zero flags), as a NIC importing the dma-buf needs. A driver that knows
        // it but will not map this way here (the flag is for platforms with more than one path
        // to GPU memory) refuses it: then the default mapping, as NCCL's and aws-ofi-nccl's
        // exporters retry.
        let pcie = driver_version().is_ok_and(|v| v >= DMA_BUF_PCIE_MIN_DRIVER);
        let try_export = |flags: u64, fd: &mut c_int| {
            self.ctx.call("cuMemGetHandleForAddressRange", |_| {
                // SAFETY: `fd` is a live int out-parameter (the handle type DMA_BUF_FD writes
                // an int); [ptr, ptr+len) is page-aligned memory allocated here.
                unsafe {
                    export(
                        (fd as *mut c_int).cast(),
                        ptr,
                        len,
                        HANDLE_DMA_BUF_FD,
                        flags,
                    )
                }
            })
        };
        let first = try_export(if pcie { DMA_BUF_MAPPING_TYPE_PCIE } else { 0 }, &mut fd);
        match first {
            Err(CudaError::Call { code, .. })
                if pcie
                    && (code == E::CUDA_ERROR_NOT_SUPPORTED as i32
                        || code == E::CUDA_ERROR_INVALID_VALUE as i32) =>
            {
                try_export(0, &mut fd)?
            }
            r => r?,
        }
        // SAFETY: the driver returned a new fd that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Copies `src` to `off` (synchronous: for setup and verification, not the data path),
    /// and waits until the bytes are in device memory. cuMemcpyHtoD from pageable memory returns
    /// once the source is staged, "but the DMA to final destination may not have completed"
    /// (CUDA driver API, API synchronization behavior), on the legacy stream, which the staging
    /// pipelines' non-blocking copy stream does not wait for: on an H100 a staged send's copy
    /// out of the buffer read zeros not yet written. Hence the cuCtxSynchronize.
    pub fn write(&self, off: u64, src: &[u8]) -> Result<()> {
        let dst = self.range(off, src.len())?;
        self.ctx.call("cuMemcpyHtoD", |f| {
            // SAFETY: `src` is a live slice; `dst` was bounds-checked against this allocation.
            unsafe { (f.memcpy_htod)(dst, src.as_ptr().cast(), src.len()) }
        })?;
        self.settle()
    }

    /// Waits for the context's work on the legacy stream (`cuCtxSynchronize`): a synchronous
    /// write or a memset is then visible to every stream.
    fn settle(&self) -> Result<()> {
        // SAFETY: no arguments; waits for the current context's work.
        self.ctx
            .call("cuCtxSynchronize", |f| unsafe { (f.ctx_synchronize)() })
    }

    /// Copies from `off` into `dst` (synchronous).
    pub fn read(&self, off: u64, dst: &mut [u8]) -> Result<()> {
        let src = self.range(off, dst.len())?;
        self.ctx.call("cuMemcpyDtoH", |f| {
            // SAFETY: `dst` is a live, exclusively borrowed slice; `src` was bounds-checked.
            unsafe { (f.memcpy_dtoh)(dst.as_mut_ptr().cast(), src, dst.len()) }
        })
    }

    /// Fills the whole buffer with `byte` and waits until it is done (cuMemsetD8 is
    /// asynchronous with respect to the host for device memory; see [`Self::write`]).
    pub fn fill(&self, byte: u8) -> Result<()> {
        let (ptr, len) = (self.ptr, self.len);
        self.ctx.call("cuMemsetD8", |f| {
            // SAFETY: the range is this allocation.
            unsafe { (f.memset_d8)(ptr, byte, len) }
        })?;
        self.settle()
    }

    /// A [`Mapping`] over this memory, for cutting into send buffers: its slots' addresses are
    /// device addresses (offset in the dma-buf = slot address - mapping address) and the CPU
    /// cannot read or write them.
    pub fn into_mapping(self: Arc<Self>) -> Mapping {
        let len = self.len;
        let addr = self.device_addr();
        Mapping::over_device(self, addr, len)
    }
}

/// Device memory someone else allocated (a tensor's: torch's, a DLPack producer's), lent to
/// zcnet: the one `unsafe` promise about it is made here, where the address arrives; zcnet's
/// `gpu::borrow_device` turns it into a region ([`DeviceMem::borrowed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BorrowedDevice {
    ordinal: u32,
    ptr: u64,
    len: usize,
}

impl BorrowedDevice {
    /// `len` bytes at device address `ptr` on `cuda:ordinal`.
    ///
    /// # Safety
    /// `[ptr, ptr + len)` must be device memory on that device (in its primary context, as
    /// torch's and the CUDA runtime's is) and stay allocated, and not be reused, for as long as
    /// anything made from this value lives and until every copy it took part in completed (the
    /// staging pipelines and synchronous copies return only then).
    pub unsafe fn new(ordinal: u32, ptr: u64, len: usize) -> BorrowedDevice {
        BorrowedDevice { ordinal, ptr, len }
    }

    /// The device.
    pub fn ordinal(&self) -> u32 {
        self.ordinal
    }

    /// The device address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for DeviceMem {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let base = self.base;
        // SAFETY: frees the allocation made in `alloc`; nothing refers to it any more (copies
        // hold an Arc to their buffers through their owners and are synchronised before drop).
        let _ = self
            .ctx
            .call("cuMemFree", |f| unsafe { (f.mem_free)(base) });
    }
}

impl Mapping {
    /// The device memory behind a `Backing::Device` mapping (`None` for host memory).
    pub fn device_mem(&self) -> Option<Arc<DeviceMem>> {
        Arc::clone(self.device_owner()?)
            .downcast::<DeviceMem>()
            .ok()
    }
}

/// Host memory page-locked for the GPU's copy engines (`cuMemHostRegister`), unregistered on
/// drop before the memory can be unmapped (this holds the mapping).
#[derive(Debug)]
pub struct HostRegistration {
    ctx: Arc<Context>,
    map: Arc<Mapping>,
}

impl HostRegistration {
    /// Registers all of `map`.
    pub fn new(ctx: &Arc<Context>, map: Arc<Mapping>) -> Result<HostRegistration> {
        if !map.cpu_accessible() {
            return Err(CudaError::Call {
                call: "cuMemHostRegister",
                code: E::CUDA_ERROR_INVALID_VALUE as i32,
                text: "device memory cannot be registered as host memory".into(),
            });
        }
        let (addr, len) = (map.addr(), map.len());
        ctx.call("cuMemHostRegister", |f| {
            // SAFETY: [addr, addr+len) is a live mapping held by the Arc kept in `self`.
            unsafe { (f.mem_host_register)(addr as *mut c_void, len, 1) }
        })?;
        Ok(HostRegistration {
            ctx: Arc::clone(ctx),
            map,
        })
    }

    /// The registered mapping.
    pub(crate) fn mapping(&self) -> &Arc<Mapping> {
        &self.map
    }

    pub(super) fn contains(&self, p: usize, len: usize) -> bool {
        p >= self.map.addr() && p + len <= self.map.addr() + self.map.len()
    }
}

impl Drop for HostRegistration {
    fn drop(&mut self) {
        let addr = self.map.addr();
        // SAFETY: undoes the registration made in `new`; the mapping is still alive (held here).
        let _ = self.ctx.call("cuMemHostUnregister", |f| unsafe {
            (f.mem_host_unregister)(addr as *mut c_void)
        });
    }
}
