//! Reading (and writing) the memory of bytes-like objects through the buffer protocol.
//!
//! `PyObject_GetBuffer` and `Py_buffer` are in the limited API from 3.11 only, so pyo3's abi3-py39
//! bindings leave them out; the functions are exported by every CPython 3 and `Py_buffer`'s layout
//! has not changed since 3.3 (3.11 froze it into the stable ABI), so they are declared here.

use pyo3::ffi::{PyObject, Py_ssize_t};
use pyo3::prelude::*;
use std::ffi::{c_char, c_int, c_void};

#[repr(C)]
struct PyBufferRaw {
    buf: *mut c_void,
    obj: *mut PyObject,
    len: Py_ssize_t,
    itemsize: Py_ssize_t,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut Py_ssize_t,
    strides: *mut Py_ssize_t,
    suboffsets: *mut Py_ssize_t,
    internal: *mut c_void,
}

const PYBUF_WRITABLE: c_int = 0x0001;
const PYBUF_ND: c_int = 0x0008;
const PYBUF_STRIDES: c_int = 0x0010 | PYBUF_ND;

extern "C" {
    fn PyObject_GetBuffer(obj: *mut PyObject, view: *mut PyBufferRaw, flags: c_int) -> c_int;
    fn PyBuffer_Release(view: *mut PyBufferRaw);
}

/// A buffer exported by an object, released when dropped (with the GIL: it holds a `Py`-ish
/// reference to the exporter, which `PyBuffer_Release` gives back).
pub(crate) struct View {
    raw: Box<PyBufferRaw>,
}

impl std::fmt::Debug for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("View")
            .field("len", &self.raw.len)
            .finish_non_exhaustive()
    }
}

impl View {
    /// The first byte.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.raw.buf.cast()
    }

    /// Bytes.
    pub(crate) fn len(&self) -> usize {
        usize::try_from(self.raw.len).unwrap_or(0)
    }

    /// Releases the view; needs the GIL, which `py` proves.
    pub(crate) fn release(mut self, _py: Python<'_>) {
        // SAFETY: the view was filled by a successful PyObject_GetBuffer and is released once
        // (here; `Drop` is skipped by `forget`), with the GIL held.
        unsafe { PyBuffer_Release(&mut *self.raw) };
        std::mem::forget(self);
    }
}

impl Drop for View {
    fn drop(&mut self) {
        Python::attach(|_py| {
            // SAFETY: as in `release`; this runs only when `release` was not called.
            unsafe { PyBuffer_Release(&mut *self.raw) };
        });
    }
}

/// The object's memory through the buffer protocol, C-contiguous only (`writable`: for
/// writing). `Ok(None)` when the object does not export a buffer (the caller tries DLPack).
pub(crate) fn get(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<Option<View>> {
    let py = obj.py();
    let mut raw = Box::new(PyBufferRaw {
        buf: std::ptr::null_mut(),
        obj: std::ptr::null_mut(),
        len: 0,
        itemsize: 0,
        readonly: 0,
        ndim: 0,
        format: std::ptr::null_mut(),
        shape: std::ptr::null_mut(),
        strides: std::ptr::null_mut(),
        suboffsets: std::ptr::null_mut(),
        internal: std::ptr::null_mut(),
    });
    let flags = PYBUF_STRIDES | if writable { PYBUF_WRITABLE } else { 0 };
    // SAFETY: `obj` is a live object and the GIL is held (`py`); `raw` is a Py_buffer-sized,
    // writable struct that outlives the call.
    let rc = unsafe { PyObject_GetBuffer(obj.as_ptr(), &mut *raw, flags) };
    if rc != 0 {
        let err = PyErr::fetch(py);
        // A read-only exporter asked for a writable buffer is an error to report; an object
        // without the protocol (a TypeError) is left to DLPack.
        if err.is_instance_of::<pyo3::exceptions::PyTypeError>(py) && !writable {
            return Ok(None);
        }
        if writable && err.is_instance_of::<pyo3::exceptions::PyBufferError>(py) {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "zcnet: the destination is read-only ({err})"
            )));
        }
        if err.is_instance_of::<pyo3::exceptions::PyTypeError>(py) {
            return Ok(None);
        }
        return Err(err);
    }
    let view = View { raw };
    let ndim = usize::try_from(view.raw.ndim).unwrap_or(0);
    let item = u64::try_from(view.raw.itemsize).unwrap_or(1).max(1);
    if ndim > 0 && !view.raw.shape.is_null() {
        // SAFETY: with PYBUF_ND the exporter fills `shape` with `ndim` entries, alive until
        // the release.
        let shape = unsafe { std::slice::from_raw_parts(view.raw.shape, ndim) };
        let strides = if view.raw.strides.is_null() {
            None
        } else {
            // SAFETY: with PYBUF_STRIDES, `strides` has `ndim` entries (in bytes).
            Some(unsafe { std::slice::from_raw_parts(view.raw.strides, ndim) })
        };
        let shape_u: Vec<u64> = shape.iter().map(|&d| d.max(0) as u64).collect();
        let strides_i: Option<Vec<i64>> = strides.map(|s| s.iter().map(|&x| x as i64).collect());
        if let Err(e) = check_c_contiguous(&shape_u, strides_i.as_deref(), item) {
            view.release(py);
            return Err(e);
        }
    }
    Ok(Some(view))
}

/// Refuses memory that is not one C-contiguous range: `strides` in bytes (`None`: C order),
/// `item` bytes per element. Dimensions of extent 1 may have any stride; an empty array is
/// contiguous.
pub(crate) fn check_c_contiguous(
    shape: &[u64],
    strides: Option<&[i64]>,
    item: u64,
) -> PyResult<()> {
    let Some(strides) = strides else {
        return Ok(());
    };
    if shape.contains(&0) {
        return Ok(());
    }
    let mut expect = item as i64;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d != 1 && s != expect {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "zcnet: the array is not C-contiguous (shape {shape:?}, strides {strides:?} bytes, \
                 {item} B per element): zcnet sends and receives one contiguous range of memory; \
                 pass a contiguous copy (numpy: np.ascontiguousarray(a); torch: t.contiguous())"
            )));
        }
        expect = expect.saturating_mul(d as i64);
    }
    Ok(())
}
