//! Copy engines for the staging pipelines: the GPU's (a CUDA stream, an event per copy) and, for
//! tests, a host one (the "device" is host memory) that runs the same pipelines where there is
//! no GPU, completing copies out of order and failing on request, so the drivers are tested in
//! CI.

use crate::error::{Error, Result};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use zcnet_core::staging::CopyId;
use zcnet_sys::bufring::HeldBuf;
use zcnet_sys::cuda::{
    Context, DeviceMem, HostRegistration, Pending, PendingSlot, SourceRange, Stream,
};
use zcnet_sys::mem::{Mapping, Slot};

/// What a host-to-device copy reads: a range of a received ring buffer, shared by the copies out
/// of it, held (so the ring cannot hand it to the kernel) until the copy completed.
pub(crate) type HostSrc = SourceRange<Arc<HeldBuf>>;

/// A finished copy: its id, its outcome, and the host memory it used, given back: the slot it
/// wrote (device-to-host), or the source it read (host-to-device).
#[derive(Debug)]
pub(crate) struct Done {
    pub id: CopyId,
    pub result: Result<()>,
    pub slot: Option<Slot>,
    pub src: Option<HostSrc>,
}

/// Runs asynchronous copies between pinned host memory and a device buffer.
pub(crate) trait CopyEngine: Send + std::fmt::Debug {
    /// Starts copying `src` (inside the host memory the engine was made for) to `dst_off` of
    /// the device buffer; the engine keeps `src` until the copy is reported done (with it), or
    /// gives it back with the error.
    // The source must come back with the error so that no buffer is lost; a cold path.
    #[allow(clippy::result_large_err)]
    fn to_device(
        &mut self,
        id: CopyId,
        src: HostSrc,
        dst_off: u64,
    ) -> std::result::Result<(), (HostSrc, Error)>;
    /// Starts copying `len` bytes at `src_off` of the device buffer into `dst`, which the engine
    /// keeps until the copy is reported done (with it).
    // The slot must come back with the error so that no buffer is lost; a cold path.
    #[allow(clippy::result_large_err)]
    fn to_host(
        &mut self,
        id: CopyId,
        src_off: u64,
        dst: Slot,
        len: usize,
    ) -> std::result::Result<(), (Slot, Error)>;
    /// Copies that finished since the last call, in any order.
    fn poll(&mut self, done: &mut Vec<Done>);
    /// Blocks up to `timeout` until at least one copy finished (returns at once with none in
    /// flight).
    fn wait(&mut self, timeout: Duration);
    /// Copies started and not yet reported.
    fn in_flight(&self) -> usize;
    /// Makes `dev` the device memory later copies use (a caller's tensor, for one send), or
    /// none (copies are refused until one is set). Refused while copies are in flight: they
    /// read or write the memory set before.
    fn set_device(&mut self, dev: Option<Arc<DeviceMem>>) -> Result<()>;
}

enum InFlight {
    ToDevice(Pending<HostSrc>),
    ToHost(PendingSlot),
}

/// The GPU's engine: every copy on one CUDA stream (so they complete in order), an event
/// after each.
pub(crate) struct CudaEngine {
    pending: VecDeque<(CopyId, InFlight)>,
    stream: Stream,
    reg: HostRegistration,
    /// The device memory copies use; none between the sends of a caller's memory.
    dev: Option<Arc<DeviceMem>>,
    ctx: Arc<Context>,
}

impl std::fmt::Debug for CudaEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaEngine")
            .field("in_flight", &self.pending.len())
            .field("device", &self.ctx.ordinal())
            .finish()
    }
}

impl CudaEngine {
    /// An engine between `host` (registered with CUDA here) and `dev`.
    pub(crate) fn new(dev: Arc<DeviceMem>, host: Arc<Mapping>) -> Result<CudaEngine> {
        let ctx = Arc::clone(dev.context());
        let mut e = CudaEngine::on(ctx, host)?;
        e.dev = Some(dev);
        Ok(e)
    }

    /// An engine between `host` (registered with CUDA here) and memory of `ctx`'s device named
    /// later ([`CopyEngine::set_device`]).
    pub(crate) fn on(ctx: Arc<Context>, host: Arc<Mapping>) -> Result<CudaEngine> {
        let ord = ctx.ordinal();
        let reg = HostRegistration::new(&ctx, host).map_err(|e| {
            crate::cuda::gpu_error(format!("pinning the staging buffers for cuda:{ord}"), e)
        })?;
        let stream = Stream::new(&ctx).map_err(|e| {
            crate::cuda::gpu_error(format!("creating a copy stream on cuda:{ord}"), e)
        })?;
        Ok(CudaEngine {
            pending: VecDeque::new(),
            stream,
            reg,
            dev: None,
            ctx,
        })
    }

    fn err(&self, what: &str, e: zcnet_sys::cuda::CudaError) -> Error {
        crate::cuda::gpu_error(format!("{what} cuda:{}", self.ctx.ordinal()), e)
    }

    fn no_device(&self) -> Error {
        Error::invalid_input(format!(
            "the staging copy engine on cuda:{} has no device memory to copy: name it with StagedSender::send_from",
            self.ctx.ordinal()
        ))
    }
}

#[allow(clippy::result_large_err)] // see CopyEngine::to_host
impl CopyEngine for CudaEngine {
    fn to_device(
        &mut self,
        id: CopyId,
        src: HostSrc,
        dst_off: u64,
    ) -> std::result::Result<(), (HostSrc, Error)> {
        let Some(dev) = &self.dev else {
            return Err((src, self.no_device()));
        };
        match self.stream.copy_to_device(&self.reg, src, dev, dst_off) {
            Ok(p) => {
                self.pending.push_back((id, InFlight::ToDevice(p)));
                Ok(())
            }
            Err((src, e)) => Err((src, self.err("copying to", e))),
        }
    }

    fn to_host(
        &mut self,
        id: CopyId,
        src_off: u64,
        dst: Slot,
        len: usize,
    ) -> std::result::Result<(), (Slot, Error)> {
        let Some(dev) = &self.dev else {
            return Err((dst, self.no_device()));
        };
        match self.stream.copy_to_host(&self.reg, dev, src_off, dst, len) {
            Ok(p) => {
                self.pending.push_back((id, InFlight::ToHost(p)));
                Ok(())
            }
            Err((slot, e)) => Err((slot, self.err("copying from", e))),
        }
    }

    fn poll(&mut self, done: &mut Vec<Done>) {
        // One stream: copies finish in order, so stop at the first one still running.
        while let Some((id, p)) = self.pending.pop_front() {
            match p {
                InFlight::ToDevice(p) => match p.poll() {
                    Ok(Err(still)) => {
                        self.pending.push_front((id, InFlight::ToDevice(still)));
                        return;
                    }
                    Ok(Ok(src)) => done.push(Done {
                        id,
                        result: Ok(()),
                        slot: None,
                        src: Some(src),
                    }),
                    Err((src, e)) => {
                        let result = Err(self.err("copying to", e));
                        done.push(Done {
                            id,
                            result,
                            slot: None,
                            src: Some(src),
                        });
                    }
                },
                InFlight::ToHost(ps) => match ps.poll() {
                    Ok(Err(still)) => {
                        self.pending.push_front((id, InFlight::ToHost(still)));
                        return;
                    }
                    Ok(Ok(slot)) => done.push(Done {
                        id,
                        result: Ok(()),
                        slot: Some(slot),
                        src: None,
                    }),
                    Err((slot, e)) => {
                        let result = Err(self.err("copying from", e));
                        done.push(Done {
                            id,
                            result,
                            slot: Some(slot),
                            src: None,
                        });
                    }
                },
            }
        }
    }

    fn wait(&mut self, timeout: Duration) {
        // An event wait would block past `timeout`, and copies of a few hundred KiB take
        // microseconds: poll the oldest copy (the stream finishes them in order), yielding the
        // CPU between polls. Sleeping between them cost ~100 µs per 64 KiB chunk on an H100
        // (a 20 µs sleep lasts far longer with the timer slack): staged sends ran at 637 MB/s
        // where the naive loop did 1.9 GB/s.
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let ready = match self.pending.front() {
                None => return,
                Some((_, InFlight::ToDevice(p))) => p.ready(),
                Some((_, InFlight::ToHost(p))) => p.ready(),
            };
            if ready || std::time::Instant::now() >= deadline {
                return;
            }
            std::thread::yield_now();
        }
    }

    fn in_flight(&self) -> usize {
        self.pending.len()
    }

    fn set_device(&mut self, dev: Option<Arc<DeviceMem>>) -> Result<()> {
        let (have, want) = (
            self.ctx.ordinal(),
            dev.as_ref()
                .map_or(self.ctx.ordinal(), |d| d.context().ordinal()),
        );
        if have != want {
            return Err(Error::invalid_input(format!(
                "the staging copy engine is on cuda:{have}; the memory is on cuda:{want}"
            )));
        }
        if !self.pending.is_empty() {
            return Err(Error::invalid_input(format!(
                "the staging copy engine still runs {} copies of the memory before",
                self.pending.len()
            )));
        }
        self.dev = dev;
        Ok(())
    }
}

#[cfg(any(test, feature = "testing"))]
pub(crate) use host::{HostEngine, HostEngineFaults};

/// The host engine: tests, and `host_staged_receiver` (feature `testing`) for machines without
/// a GPU.
#[cfg(any(test, feature = "testing"))]
mod host {
    use super::{CopyEngine, Done, HostSrc};
    use crate::error::{Error, Result};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    use zcnet_core::staging::CopyId;
    use zcnet_sys::mem::Slot;
    use zcnet_sys::mem::StableBytes;

    /// What the host engine does, for tests: complete copies newest first (out of order), and
    /// fail the copy with a given id.
    #[derive(Debug, Clone, Copy, Default)]
    pub(crate) struct HostEngineFaults {
        /// Report completions in reverse order of issue.
        pub reorder: bool,
        /// Report this copy as failed.
        pub fail: Option<u64>,
    }

    /// An engine whose "device" is host memory (`dev`): the copy happens when it is started, the
    /// completion is reported at the next poll, in the order the faults say.
    #[derive(Debug)]
    pub(crate) struct HostEngine {
        dev: Arc<Mutex<Vec<u8>>>,
        pending: Vec<(CopyId, Option<Slot>, Option<HostSrc>)>,
        faults: HostEngineFaults,
    }

    impl HostEngine {
        pub(crate) fn new(dev: Arc<Mutex<Vec<u8>>>, faults: HostEngineFaults) -> HostEngine {
            HostEngine {
                dev,
                pending: Vec::new(),
                faults,
            }
        }

        fn range(&self, off: u64, len: usize) -> Result<std::ops::Range<usize>> {
            let have = self.dev.lock().map(|d| d.len()).unwrap_or(0);
            let start = usize::try_from(off).unwrap_or(usize::MAX);
            match start.checked_add(len) {
                Some(end) if end <= have => Ok(start..end),
                _ => Err(Error::invalid_input(format!(
                    "host engine: {len} B at {off} outside the {have} B buffer"
                ))),
            }
        }
    }

    #[allow(clippy::result_large_err)] // see CopyEngine::to_host
    impl CopyEngine for HostEngine {
        fn to_device(
            &mut self,
            id: CopyId,
            src: HostSrc,
            dst_off: u64,
        ) -> std::result::Result<(), (HostSrc, Error)> {
            let r = match self.range(dst_off, src.host_bytes().len()) {
                Ok(r) => r,
                Err(e) => return Err((src, e)),
            };
            if let Ok(mut d) = self.dev.lock() {
                d[r].copy_from_slice(src.host_bytes());
            }
            // Held until the completion is reported, as the GPU's engine holds it.
            self.pending.push((id, None, Some(src)));
            Ok(())
        }

        fn to_host(
            &mut self,
            id: CopyId,
            src_off: u64,
            mut dst: Slot,
            len: usize,
        ) -> std::result::Result<(), (Slot, Error)> {
            let r = match self.range(src_off, len) {
                Ok(r) => r,
                Err(e) => return Err((dst, e)),
            };
            match (dst.bytes_mut(), self.dev.lock()) {
                (Some(b), Ok(d)) if len <= b.len() => b[..len].copy_from_slice(&d[r]),
                _ => {
                    return Err((
                        dst,
                        Error::invalid_input("host engine: bad destination slot"),
                    ))
                }
            }
            self.pending.push((id, Some(dst), None));
            Ok(())
        }

        fn poll(&mut self, done: &mut Vec<Done>) {
            if self.faults.reorder {
                self.pending.reverse();
            }
            for (id, slot, src) in self.pending.drain(..) {
                let result = if self.faults.fail == Some(id.0) {
                    Err(Error::Gpu {
                        what: format!("{id}").into(),
                        cause: "injected copy failure".into(),
                        remedy: crate::Remedy::Other("none (test)"),
                        bad_argument: false,
                    })
                } else {
                    Ok(())
                };
                done.push(Done {
                    id,
                    result,
                    slot,
                    src,
                });
            }
        }

        fn wait(&mut self, _timeout: Duration) {}

        fn in_flight(&self) -> usize {
            self.pending.len()
        }

        fn set_device(&mut self, _dev: Option<Arc<zcnet_sys::cuda::DeviceMem>>) -> Result<()> {
            Err(Error::invalid_input(
                "the host copy engine has host memory for a device",
            ))
        }
    }
}
