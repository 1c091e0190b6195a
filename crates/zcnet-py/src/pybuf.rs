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

/// The object `Buffer.memoryview()` wraps: a minimal type whose only protocol is the buffer
/// protocol, exporting `len` read-only bytes at `ptr` and holding a strong reference to `owner`
/// (the `zcnet.Buffer`) until it is deallocated, so every view made from it keeps the kernel
/// buffer lent.
///
/// `zcnet.Buffer` itself cannot export the buffer protocol in this abi3 build: PyO3 generates
/// `__getbuffer__` only where the limited API declares the buffer slots (`Py_LIMITED_API` ≥ 3.11),
/// and the wheel's floor is 3.9. CPython has accepted the buffer slots in a type spec since 3.9,
/// so this type is made at run time with `PyType_FromSpec` and the slot numbers of
/// `typeslots.h` (`Py_bf_getbuffer` is 1 up to 3.14).
#[repr(C)]
struct ExportObject {
    ob_base: PyObject,
    owner: *mut PyObject,
    ptr: *mut c_void,
    len: Py_ssize_t,
}

const PY_BF_GETBUFFER: c_int = 1;

extern "C" {
    fn PyBuffer_FillInfo(
        view: *mut PyBufferRaw,
        obj: *mut PyObject,
        buf: *mut c_void,
        len: Py_ssize_t,
        readonly: c_int,
        flags: c_int,
    ) -> c_int;
}

unsafe extern "C" fn export_getbuffer(
    obj: *mut PyObject,
    view: *mut PyBufferRaw,
    flags: c_int,
) -> c_int {
    if flags & PYBUF_WRITABLE != 0 {
        // SAFETY: called by CPython with the GIL held; the message is a C string literal.
        unsafe {
            pyo3::ffi::PyErr_SetString(
                pyo3::ffi::PyExc_BufferError,
                c"zcnet.Buffer is read-only (the bytes are lent by the receiver): copy it to write, e.g. bytearray(buf.memoryview())".as_ptr(),
            );
        }
        return -1;
    }
    // SAFETY: `obj` is an ExportObject (this slot belongs to its type only); `view` is the
    // caller's Py_buffer. PyBuffer_FillInfo stores a new reference to `obj` in it, released by
    // PyBuffer_Release, so the bytes (held by `owner`) outlive the export.
    unsafe {
        let e = obj.cast::<ExportObject>();
        PyBuffer_FillInfo(view, obj, (*e).ptr, (*e).len, 1, flags)
    }
}

unsafe extern "C" fn export_dealloc(obj: *mut PyObject) {
    // SAFETY: `obj` is an ExportObject whose last reference is gone; its type is a heap type,
    // which its instances hold a reference to (dropped last), and whose tp_free frees it.
    unsafe {
        let e = obj.cast::<ExportObject>();
        let owner = std::mem::replace(&mut (*e).owner, std::ptr::null_mut());
        if !owner.is_null() {
            pyo3::ffi::Py_DECREF(owner);
        }
        let tp = pyo3::ffi::Py_TYPE(obj);
        let free = pyo3::ffi::PyType_GetSlot(tp, pyo3::ffi::Py_tp_free);
        if !free.is_null() {
            let free: pyo3::ffi::freefunc = std::mem::transmute(free);
            free(obj.cast());
        }
        pyo3::ffi::Py_DECREF(tp.cast());
    }
}

static EXPORT_TYPE: pyo3::sync::PyOnceLock<Py<pyo3::types::PyType>> = pyo3::sync::PyOnceLock::new();

fn export_type(py: Python<'_>) -> PyResult<&Py<pyo3::types::PyType>> {
    EXPORT_TYPE.get_or_try_init(py, || {
        let mut slots = [
            pyo3::ffi::PyType_Slot {
                slot: PY_BF_GETBUFFER,
                pfunc: export_getbuffer as *mut c_void,
            },
            pyo3::ffi::PyType_Slot {
                slot: pyo3::ffi::Py_tp_dealloc,
                pfunc: export_dealloc as *mut c_void,
            },
            pyo3::ffi::PyType_Slot {
                slot: pyo3::ffi::Py_tp_doc,
                pfunc: c"The bytes of a zcnet.Buffer for memoryview (read-only, no copy)."
                    .as_ptr()
                    .cast_mut()
                    .cast(),
            },
            pyo3::ffi::PyType_Slot {
                slot: 0,
                pfunc: std::ptr::null_mut(),
            },
        ];
        let mut spec = pyo3::ffi::PyType_Spec {
            name: c"zcnet._zcnet.BufferExport".as_ptr(),
            basicsize: std::mem::size_of::<ExportObject>() as c_int,
            itemsize: 0,
            flags: pyo3::ffi::Py_TPFLAGS_DEFAULT as _,
            slots: slots.as_mut_ptr(),
        };
        // SAFETY: the spec and its slots are valid for the call (CPython copies what it keeps;
        // the doc string is static); the GIL is held.
        let tp = unsafe { pyo3::ffi::PyType_FromSpec(&mut spec) };
        if tp.is_null() {
            return Err(PyErr::fetch(py));
        }
        // SAFETY: a new reference to a type object.
        let tp = unsafe { Bound::from_owned_ptr(py, tp) };
        Ok(tp.cast_into::<pyo3::types::PyType>()?.unbind())
    })
}

/// A read-only `memoryview` of `len` bytes at `ptr`, without a copy, keeping `owner` alive
/// while the view (or any view or array made from it) lives.
pub(crate) fn readonly_memoryview<'py>(
    owner: &Bound<'py, PyAny>,
    ptr: *const u8,
    len: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let py = owner.py();
    let tp = export_type(py)?.bind(py);
    let len = Py_ssize_t::try_from(len)
        .map_err(|_| pyo3::exceptions::PyBufferError::new_err("zcnet: buffer too long"))?;
    // SAFETY: GIL held; a heap type made above, allocated with its basicsize (zeroed).
    let obj = unsafe { pyo3::ffi::PyType_GenericAlloc(tp.as_type_ptr(), 0) };
    if obj.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new reference, owned from here (dropped at the end, or on error).
    let export = unsafe { Bound::from_owned_ptr(py, obj) };
    // SAFETY: `obj` is a fresh ExportObject; it takes a strong reference to `owner`.
    unsafe {
        let e = obj.cast::<ExportObject>();
        (*e).owner = owner.clone().into_ptr();
        (*e).ptr = ptr.cast_mut().cast();
        (*e).len = len;
    }
    // SAFETY: GIL held; `export` supports the buffer protocol (its type's slot).
    let mv = unsafe { pyo3::ffi::PyMemoryView_FromObject(export.as_ptr()) };
    if mv.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new reference.
    Ok(unsafe { Bound::from_owned_ptr(py, mv) })
}
