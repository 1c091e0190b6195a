//! DLPack (dlpack.h, version 1.x) for Python: the structures, the capsules a
//! [`crate::rx::Buffer`] and a [`crate::cuda::DeviceBuffer`] export, and reading a tensor's
//! memory from another producer's capsule (what `Sender.send` and `Receiver.recv_into` do with a
//! torch tensor, host or CUDA).
//!
//! Export: `__dlpack__(max_version=(1, x))` gives a `dltensor_versioned` capsule holding a
//! `DLManagedTensorVersioned` (a received Buffer's with the read-only flag set); an older
//! consumer (no `max_version`, or a major version below 1) gets the legacy `dltensor` capsule
//! (`DLManagedTensor`). Either is one 1-D uint8 tensor (on the CPU over the received bytes, or on
//! `kDLCUDA` over a DeviceBuffer's memory), and holds a strong reference to its owner until its
//! deleter runs: the consumer calls it when its tensor dies, or the capsule's destructor does
//! when no consumer took the capsule (its name unchanged).

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use std::ffi::{c_void, CStr};

/// `kDLCPU`.
pub(crate) const DL_CPU: i32 = 1;
/// `kDLCUDA`.
pub(crate) const DL_CUDA: i32 = 2;
/// `kDLCUDAHost`: pinned host memory, readable by the CPU.
pub(crate) const DL_CUDA_HOST: i32 = 3;
/// `kDLUInt`.
const DL_UINT: u8 = 1;
/// `DLPACK_FLAG_BITMASK_READ_ONLY`.
const FLAG_READ_ONLY: u64 = 1;

/// The DLPack version this module exports.
pub(crate) const VERSION: (u32, u32) = (1, 0);

pub(crate) const LEGACY_NAME: &CStr = c"dltensor";
pub(crate) const VERSIONED_NAME: &CStr = c"dltensor_versioned";

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct DLDevice {
    pub device_type: i32,
    pub device_id: i32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

#[repr(C)]
#[derive(Debug)]
pub(crate) struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

#[repr(C)]
#[derive(Debug)]
pub(crate) struct DLManagedTensor {
    pub dl_tensor: DLTensor,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct DLPackVersion {
    pub major: u32,
    pub minor: u32,
}

#[repr(C)]
#[derive(Debug)]
pub(crate) struct DLManagedTensorVersioned {
    pub version: DLPackVersion,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    pub flags: u64,
    pub dl_tensor: DLTensor,
}

/// What one exported capsule owns: the managed tensor (first, so that its address is the
/// holder's), the shape it points to, and the reference that keeps the Buffer, and so its
/// kernel buffer, alive.
#[repr(C)]
struct Holder<M> {
    managed: M,
    shape: [i64; 1],
    owner: Option<Py<PyAny>>,
}

/// Drops a holder: with the thread attached to Python, as releasing the Buffer's reference
/// needs (consumers may call deleters from any thread).
fn drop_holder<M>(h: Box<Holder<M>>) {
    Python::attach(move |_py| drop(h));
}

unsafe extern "C" fn delete_legacy(m: *mut DLManagedTensor) {
    if m.is_null() {
        return;
    }
    // SAFETY: `m` came from `export` below, where it is the first field of a boxed
    // `Holder<DLManagedTensor>` leaked with `Box::into_raw`; DLPack calls the deleter once.
    drop_holder(unsafe { Box::from_raw(m.cast::<Holder<DLManagedTensor>>()) });
}

unsafe extern "C" fn delete_versioned(m: *mut DLManagedTensorVersioned) {
    if m.is_null() {
        return;
    }
    // SAFETY: as in `delete_legacy`, for `Holder<DLManagedTensorVersioned>`.
    drop_holder(unsafe { Box::from_raw(m.cast::<Holder<DLManagedTensorVersioned>>()) });
}

/// The capsule destructor: a capsule no consumer took (its name is still the producer's) owns
/// its tensor, so it calls the deleter; a consumed one (renamed `used_dltensor[_versioned]`)
/// leaves that to the consumer.
unsafe extern "C" fn capsule_destructor_legacy(cap: *mut ffi::PyObject) {
    // SAFETY: Python calls a capsule's destructor with the GIL held and a valid capsule;
    // PyCapsule_IsValid only reads it (and sets no exception).
    if unsafe { ffi::PyCapsule_IsValid(cap, LEGACY_NAME.as_ptr()) } != 1 {
        return;
    }
    // SAFETY: the name matched, so GetPointer returns the pointer stored by `export` and sets no
    // exception.
    let m =
        unsafe { ffi::PyCapsule_GetPointer(cap, LEGACY_NAME.as_ptr()) }.cast::<DLManagedTensor>();
    // SAFETY: an unconsumed capsule still owns `m` (from `export`), whose deleter is ours.
    unsafe { delete_legacy(m) };
}

unsafe extern "C" fn capsule_destructor_versioned(cap: *mut ffi::PyObject) {
    // SAFETY: as in `capsule_destructor_legacy`.
    if unsafe { ffi::PyCapsule_IsValid(cap, VERSIONED_NAME.as_ptr()) } != 1 {
        return;
    }
    // SAFETY: as in `capsule_destructor_legacy`.
    let m = unsafe { ffi::PyCapsule_GetPointer(cap, VERSIONED_NAME.as_ptr()) }
        .cast::<DLManagedTensorVersioned>();
    // SAFETY: as in `capsule_destructor_legacy`.
    unsafe { delete_versioned(m) };
}

fn tensor(data: *mut u8, device: DLDevice, shape: *mut i64) -> DLTensor {
    DLTensor {
        data: data.cast(),
        device,
        ndim: 1,
        dtype: DLDataType {
            code: DL_UINT,
            bits: 8,
            lanes: 1,
        },
        shape,
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    }
}

/// How an exported tensor is described: where its bytes are, and whether consumers may write.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Export {
    /// `kDLCPU` for received host buffers, `kDLCUDA` (with the ordinal) for device buffers.
    pub device: DLDevice,
    /// The read-only flag of a versioned capsule (a legacy capsule cannot say it).
    pub read_only: bool,
    /// A DLPack 1.x `dltensor_versioned` capsule; else the legacy `dltensor` one.
    pub versioned: bool,
}

/// Host memory, read-only: what a received [`crate::rx::Buffer`] exports.
pub(crate) fn host_read_only(versioned: bool) -> Export {
    Export {
        device: DLDevice {
            device_type: DL_CPU,
            device_id: 0,
        },
        read_only: true,
        versioned,
    }
}

/// Device memory of CUDA device `ordinal`: what a `DeviceBuffer` (writable) and a received
/// `Buffer` in GPU memory (read-only: the kernel owns it again once the buffer goes) export.
pub(crate) fn cuda(ordinal: u32, read_only: bool, versioned: bool) -> Export {
    Export {
        device: DLDevice {
            device_type: DL_CUDA,
            device_id: ordinal as i32,
        },
        read_only,
        versioned,
    }
}

/// The keywords of `__dlpack__` every exporter here checks alike: a `dl_device` other than
/// `here` (`where_` words it: "host memory (kDLCPU, 0)") and `copy=True` are refused, the
/// latter with `copy_hint` saying how to copy instead; whether the consumer takes the versioned
/// capsule (`max_version` 1.x).
pub(crate) fn check_request(
    what: &str,
    here: (i32, i32),
    where_: &str,
    dl_device: Option<(i32, i32)>,
    copy: Option<bool>,
    copy_hint: &str,
    max_version: Option<(u32, u32)>,
) -> PyResult<bool> {
    if let Some(d) = dl_device.filter(|&d| d != here) {
        return Err(PyBufferError::new_err(format!(
            "{what} is {where_}; it cannot be exported to device {d:?}"
        )));
    }
    if copy == Some(true) {
        return Err(PyBufferError::new_err(format!(
            "{what} exports its memory without a copy only ({copy_hint})"
        )));
    }
    Ok(max_version.is_some_and(|(major, _)| major >= VERSION.0))
}

/// A capsule over `len` bytes at `data` (a host or a device address, as `how.device` says),
/// keeping `owner` alive until it is deleted.
///
/// The caller guarantees that the bytes stay valid while `owner` lives (and unchanged, for a
/// read-only export).
pub(crate) fn export<'py>(
    py: Python<'py>,
    data: *const u8,
    len: usize,
    owner: Py<PyAny>,
    how: Export,
) -> PyResult<Bound<'py, PyAny>> {
    let Export {
        device,
        read_only,
        versioned,
    } = how;
    let len = i64::try_from(len)
        .map_err(|_| pyo3::exceptions::PyOverflowError::new_err("buffer too large"))?;
    // DLPack asks for a non-null data pointer even for zero elements.
    let data = if data.is_null() {
        std::ptr::NonNull::<u8>::dangling().as_ptr()
    } else {
        data.cast_mut()
    };
    let (ptr, name, destructor): (*mut c_void, &CStr, ffi::PyCapsule_Destructor) = if versioned {
        let h = Box::into_raw(Box::new(Holder {
            managed: DLManagedTensorVersioned {
                version: DLPackVersion {
                    major: VERSION.0,
                    minor: VERSION.1,
                },
                manager_ctx: std::ptr::null_mut(),
                deleter: Some(delete_versioned),
                flags: if read_only { FLAG_READ_ONLY } else { 0 },
                dl_tensor: tensor(data, device, std::ptr::null_mut()),
            },
            shape: [len],
            owner: Some(owner),
        }));
        // SAFETY: `h` was just leaked from a Box: valid and unaliased until the deleter.
        unsafe {
            (*h).managed.manager_ctx = h.cast();
            (*h).managed.dl_tensor.shape = (*h).shape.as_mut_ptr();
        }
        (h.cast(), VERSIONED_NAME, capsule_destructor_versioned)
    } else {
        let h = Box::into_raw(Box::new(Holder {
            managed: DLManagedTensor {
                dl_tensor: tensor(data, device, std::ptr::null_mut()),
                manager_ctx: std::ptr::null_mut(),
                deleter: Some(delete_legacy),
            },
            shape: [len],
            owner: Some(owner),
        }));
        // SAFETY: as above.
        unsafe {
            (*h).managed.manager_ctx = h.cast();
            (*h).managed.dl_tensor.shape = (*h).shape.as_mut_ptr();
        }
        (h.cast(), LEGACY_NAME, capsule_destructor_legacy)
    };
    // SAFETY: `ptr` is non-null, `name` a static C string (capsules keep the pointer, not a
    // copy), and the destructor matches the name; the GIL is held (`py`).
    let cap = unsafe { ffi::PyCapsule_New(ptr, name.as_ptr(), Some(destructor)) };
    if cap.is_null() {
        // No capsule owns the holder: delete it here.
        // SAFETY: `ptr` is the managed tensor leaked above, not yet handed to anyone.
        unsafe {
            if versioned {
                delete_versioned(ptr.cast());
            } else {
                delete_legacy(ptr.cast());
            }
        }
        return Err(PyErr::fetch(py));
    }
    // SAFETY: PyCapsule_New returned a new reference.
    Ok(unsafe { Bound::from_owned_ptr(py, cap) })
}

/// Memory borrowed from another producer's capsule, for as long as the capsule lives.
#[derive(Debug)]
pub(crate) struct Imported {
    /// The first byte: a host address, or a device address for [`Self::cuda`] memory.
    pub data: *const u8,
    pub len: usize,
    /// `Some(ordinal)`: CUDA device memory (`kDLCUDA`) on that device; `None`: host memory
    /// (CPU or CUDA-pinned).
    pub cuda: Option<u32>,
    /// The producer flagged the tensor read-only (DLPack 1.x only; a legacy capsule cannot).
    pub read_only: bool,
}

/// Reads a tensor's memory from `obj.__dlpack__()`: host memory (CPU or CUDA-pinned) or CUDA
/// device memory, C-contiguous, of whole bytes per element. `who` names the caller in messages.
/// Returns the capsule (which must be kept alive while the memory is used; dropping it
/// unconsumed gives the tensor back to its producer) and the memory.
pub(crate) fn import<'py>(
    obj: &Bound<'py, PyAny>,
    who: &str,
) -> PyResult<(Bound<'py, PyAny>, Imported)> {
    let py = obj.py();
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("max_version", (VERSION.0, VERSION.1))?;
    // A CUDA producer is asked for the legacy default stream (1): it makes its own streams'
    // work on the tensor visible there, and zcnet waits for the context before copying.
    let on_cuda = obj.hasattr("__dlpack_device__")?
        && obj
            .call_method0("__dlpack_device__")?
            .extract::<(i32, i32)>()
            .is_ok_and(|(t, _)| t == DL_CUDA);
    if on_cuda {
        kwargs.set_item("stream", 1)?;
    }
    let cap = match obj.call_method("__dlpack__", (), Some(&kwargs)) {
        Ok(c) => c,
        // Producers older than DLPack 1.0 take no max_version.
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyTypeError>(py) => {
            let legacy = pyo3::types::PyDict::new(py);
            if on_cuda {
                legacy.set_item("stream", 1)?;
            }
            obj.call_method("__dlpack__", (), Some(&legacy))?
        }
        Err(e) => return Err(e),
    };
    let raw = cap.as_ptr();
    let mut read_only = false;
    // SAFETY: PyCapsule_IsValid accepts any object and only reads it; the GIL is held.
    let t: &DLTensor = if unsafe { ffi::PyCapsule_IsValid(raw, VERSIONED_NAME.as_ptr()) } == 1 {
        // SAFETY: the name matched; the capsule (kept alive by `cap`) owns the managed tensor.
        let m = unsafe { ffi::PyCapsule_GetPointer(raw, VERSIONED_NAME.as_ptr()) }
            .cast::<DLManagedTensorVersioned>();
        // SAFETY: a valid `dltensor_versioned` capsule points to a live DLManagedTensorVersioned.
        let mt = unsafe { &*m };
        if mt.version.major != VERSION.0 {
            return Err(pyo3::exceptions::PyBufferError::new_err(format!(
                "zcnet: the tensor's DLPack version {}.{} is not 1.x",
                mt.version.major, mt.version.minor
            )));
        }
        read_only = mt.flags & FLAG_READ_ONLY != 0;
        &mt.dl_tensor
    // SAFETY: as above.
    } else if unsafe { ffi::PyCapsule_IsValid(raw, LEGACY_NAME.as_ptr()) } == 1 {
        // SAFETY: as above, for the legacy structure.
        let m = unsafe { ffi::PyCapsule_GetPointer(raw, LEGACY_NAME.as_ptr()) }
            .cast::<DLManagedTensor>();
        // SAFETY: a valid `dltensor` capsule points to a live DLManagedTensor.
        unsafe { &(*m).dl_tensor }
    } else {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "zcnet: __dlpack__ returned something that is not a DLPack capsule",
        ));
    };
    let cuda = match t.device.device_type {
        DL_CPU | DL_CUDA_HOST => None,
        DL_CUDA => Some(u32::try_from(t.device.device_id).map_err(|_| {
            pyo3::exceptions::PyValueError::new_err(format!(
                "{who}: the tensor names CUDA device {}, which cannot exist",
                t.device.device_id
            ))
        })?),
        other => {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "{who}: the tensor is on DLPack device type {other}, neither host memory nor CUDA device memory (kDLCPU, kDLCUDAHost, kDLCUDA): copy it to the host first"
            )))
        }
    };
    let ndim = usize::try_from(t.ndim).unwrap_or(0);
    let bits = u64::from(t.dtype.bits) * u64::from(t.dtype.lanes);
    if bits % 8 != 0 {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "zcnet: elements of {bits} bits are not whole bytes"
        )));
    }
    let item = bits / 8;
    let shape: &[i64] = if ndim == 0 || t.shape.is_null() {
        &[]
    } else {
        // SAFETY: DLPack: `shape` points to `ndim` int64s, alive with the tensor.
        unsafe { std::slice::from_raw_parts(t.shape, ndim) }
    };
    let strides: Option<&[i64]> = if t.strides.is_null() || ndim == 0 {
        None
    } else {
        // SAFETY: DLPack: non-null `strides` points to `ndim` int64s (in elements).
        Some(unsafe { std::slice::from_raw_parts(t.strides, ndim) })
    };
    let shape_u: Vec<u64> = shape.iter().map(|&d| d.max(0) as u64).collect();
    if let Some(st) = strides {
        let st_bytes: Vec<i64> = st.iter().map(|&s| s.saturating_mul(item as i64)).collect();
        crate::pybuf::check_c_contiguous(&shape_u, Some(&st_bytes), item)?;
    }
    let elems: u64 = shape_u.iter().product();
    let len = usize::try_from(elems * item)
        .map_err(|_| pyo3::exceptions::PyOverflowError::new_err("tensor too large"))?;
    // `data + byte_offset` is the first element (DLPack); only the address is computed (a
    // device address is never dereferenced here).
    let data = t
        .data
        .cast::<u8>()
        .cast_const()
        .wrapping_add(t.byte_offset as usize);
    Ok((
        cap,
        Imported {
            data,
            len,
            cuda,
            read_only,
        },
    ))
}
