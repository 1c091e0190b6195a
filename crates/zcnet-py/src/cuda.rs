//! `zcnet.DeviceBuffer` and `zcnet.cuda_buffer()`: CUDA device memory allocated through zcnet's
//! CUDA driver wrapper, for users without torch (and for the tests, which run against the CUDA
//! driver stand-in), and the one place the Python layer turns a tensor's device address into
//! memory zcnet may copy to and from ([`borrow`]).

use crate::dlpack;
use crate::errors;
use crate::OnThisThread;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::Mutex;

/// CUDA device memory owned by zcnet (`cuMemAlloc`), freed when the last reference goes: the
/// DeviceBuffer and every tensor made from it through DLPack.
///
/// `torch.from_dlpack(buf)` / any DLPack consumer: a 1-D uint8 tensor on `kDLCUDA` over the
/// memory, no copy, writable. `buf.fill(data)` copies bytes to the device (synchronous),
/// `buf.tobytes()` copies them back (**a copy**, synchronous). `len(buf)` is its size in bytes;
/// `buf.device` is `(2, ordinal)` (kDLCUDA), `buf.data_ptr()` the device address (not a host
/// pointer). Its contents are undefined until written. Made by `zcnet.cuda_buffer(nbytes,
/// device=0)`.
#[pyclass(frozen, module = "zcnet")]
pub(crate) struct DeviceBuffer {
    /// The memory (a zcnet CUDA region; its length is rounded up to pages).
    region: Mutex<zcnet::Region>,
    /// The device address of the first byte.
    addr: u64,
    len: usize,
    ordinal: u32,
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("len", &self.len)
            .field("ordinal", &self.ordinal)
            .finish_non_exhaustive()
    }
}

fn poisoned() -> PyErr {
    errors::Error::new_err("zcnet.DeviceBuffer: an earlier copy panicked")
}

/// `nbytes` bytes of device memory on CUDA device `device` (`cuMemAlloc` through zcnet's
/// driver wrapper; the driver is opened now), as a `zcnet.DeviceBuffer`.
#[pyfunction]
#[pyo3(signature = (nbytes, device=0))]
pub(crate) fn cuda_buffer(py: Python<'_>, nbytes: usize, device: u32) -> PyResult<DeviceBuffer> {
    if nbytes == 0 {
        return Err(PyValueError::new_err(
            "zcnet.cuda_buffer: nbytes must be positive",
        ));
    }
    let region = py
        .detach(move || zcnet::Region::cuda(device, nbytes))
        .map_err(errors::to_py)?;
    let addr = region.device_addr().ok_or_else(|| {
        errors::Error::new_err("zcnet.cuda_buffer: the driver gave no device address")
    })?;
    Ok(DeviceBuffer {
        region: Mutex::new(region),
        addr,
        len: nbytes,
        ordinal: device,
    })
}

#[pymethods]
impl DeviceBuffer {
    /// The DLPack capsule of the memory: kDLCUDA on this buffer's device, 1-D uint8, writable.
    /// `stream` is accepted and not waited on: every write zcnet makes to the memory is
    /// synchronous (finished when its call returned).
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        slf: &Bound<'py, Self>,
        stream: Option<&Bound<'py, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = stream;
        let this = slf.get();
        let here = (dlpack::DL_CUDA, this.ordinal as i32);
        let versioned = dlpack::check_request(
            "zcnet.DeviceBuffer",
            here,
            &format!("on {here:?} (kDLCUDA, ordinal)"),
            dl_device,
            copy,
            "tobytes() copies it to the host",
            max_version,
        )?;
        dlpack::export(
            slf.py(),
            // A device address: carried in the tensor, never dereferenced by the host.
            this.addr as usize as *const u8,
            this.len,
            slf.clone().unbind().into_any(),
            dlpack::cuda(this.ordinal, false, versioned),
        )
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        (dlpack::DL_CUDA, self.ordinal as i32)
    }

    /// `(2, ordinal)`: kDLCUDA and the device, as `__dlpack_device__`.
    #[getter]
    fn device(&self) -> (i32, i32) {
        self.__dlpack_device__()
    }

    /// Size in bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.len
    }

    fn __len__(&self) -> usize {
        self.len
    }

    /// The device address of the first byte (for CUDA code; the CPU cannot read it).
    fn data_ptr(&self) -> u64 {
        self.addr
    }

    /// Copies `data` (a bytes-like object, C-contiguous) to the device at byte `offset`: a
    /// synchronous copy, finished when this returns.
    #[pyo3(signature = (data, offset=0))]
    fn fill(&self, py: Python<'_>, data: &Bound<'_, PyAny>, offset: usize) -> PyResult<()> {
        let view = crate::pybuf::get(data, false)?.ok_or_else(|| {
            pyo3::exceptions::PyTypeError::new_err(
                "zcnet.DeviceBuffer.fill takes a bytes-like object (bytes, bytearray, numpy array)",
            )
        })?;
        let (ptr, n) = (view.ptr().cast_const(), view.len());
        let r = if offset.checked_add(n).is_none_or(|end| end > self.len) {
            Err(PyValueError::new_err(format!(
                "zcnet.DeviceBuffer.fill: {n} B at offset {offset} do not fit its {} B",
                self.len
            )))
        } else {
            let region = &self.region;
            let src = OnThisThread(ptr);
            py.detach(move || {
                let p = src.get();
                // SAFETY: the view (released below, after this) exports `n` readable bytes at `p`.
                let bytes = unsafe { std::slice::from_raw_parts(p, n) };
                OnThisThread(
                    region
                        .lock()
                        .map_err(|_| poisoned())
                        .and_then(|mut r| r.write_at(offset, bytes).map_err(errors::to_py)),
                )
            })
            .get()
        };
        view.release(py);
        r
    }

    /// The bytes as a new `bytes` object: **a copy** from the device (synchronous).
    fn tobytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let mut out = vec![0u8; self.len];
        let region = &self.region;
        let o = OnThisThread(&mut out);
        py.detach(move || {
            let out = o.get();
            OnThisThread(
                region
                    .lock()
                    .map_err(|_| poisoned())
                    .and_then(|r| r.read_at(0, out).map_err(errors::to_py)),
            )
        })
        .get()?;
        Ok(PyBytes::new(py, &out))
    }

    fn __repr__(&self) -> String {
        format!(
            "zcnet.DeviceBuffer(nbytes={}, device=cuda:{})",
            self.len, self.ordinal
        )
    }
}

/// The device memory of an imported CUDA tensor as a zcnet region zcnet may copy to and from
/// (it frees nothing). `who` names the caller in messages.
///
/// The caller keeps the tensor's capsule alive while the region is used and drops the region
/// before it returns to Python: every copy zcnet makes through it has completed by then.
pub(crate) fn borrow(py: Python<'_>, imp: &dlpack::Imported, who: &str) -> PyResult<zcnet::Region> {
    let Some(ordinal) = imp.cuda else {
        return Err(PyValueError::new_err(format!(
            "{who}: the tensor is host memory, not CUDA device memory"
        )));
    };
    if imp.data.is_null() {
        return Err(PyValueError::new_err(format!(
            "{who}: the CUDA tensor has a null address"
        )));
    }
    // SAFETY: `imp` describes a live DLPack tensor of `len` bytes on `cuda:ordinal`, whose
    // capsule the caller holds for as long as the region is used (see above); every copy through
    // the region (synchronous copies, `StagedSender::send_from`) completes before its call
    // returns, so none outlives the caller's hold.
    let b = unsafe { zcnet::gpu::BorrowedDevice::new(ordinal, imp.data as usize as u64, imp.len) };
    py.detach(move || zcnet::gpu::borrow_device(b))
        .map_err(errors::to_py)
}
