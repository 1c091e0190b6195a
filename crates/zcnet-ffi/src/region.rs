//! `zcnet_region`: memory to send from (host pages, huge pages, or CUDA device memory), or
//! for a receiver to bind (a udmabuf, CUDA device memory).

use crate::error::{call, call_void, invalid, need, need_str, zcnet_status, Result};
use std::ffi::{c_char, CStr, CString};
use std::mem::MaybeUninit;
use zcnet::{MemoryKind, Region};

/// Memory for zero-copy sends: host pages, 2 MiB huge pages or CUDA device memory. Give it to
/// `zcnet_sender_connect`, which cuts it into buffers, or (a udmabuf, CUDA memory) to
/// `zcnet_receiver_new_in`, which binds it as a NIC queue's receive memory; free the handle
/// with `zcnet_region_free` either way.
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct zcnet_region {
    /// `None` once given to a sender or a receiver.
    region: Option<Region>,
    len: usize,
    device: i32,
    note: Option<CString>,
    /// The kind it was made as.
    kind: MemoryKind,
}

impl zcnet_region {
    /// The memory, while no sender or receiver has taken it.
    pub(crate) fn memory(&self) -> Result<&Region> {
        self.region
            .as_ref()
            .ok_or_else(|| invalid("region was given to a sender or a receiver"))
    }

    /// The memory, while no sender or receiver has taken it, to change (export its dma-buf).
    pub(crate) fn memory_mut(&mut self) -> Result<&mut Region> {
        self.region
            .as_mut()
            .ok_or_else(|| invalid("region was given to a sender or a receiver"))
    }

    /// The kind of memory it was made as.
    pub(crate) fn kind(&self) -> MemoryKind {
        self.kind
    }

    /// Takes the memory out (for a sender or a receiver); the handle keeps answering questions
    /// about it.
    pub(crate) fn take(&mut self) -> Result<Region> {
        self.region
            .take()
            .ok_or_else(|| invalid("region was already given to a sender or a receiver"))
    }
}

/// Allocates `len` bytes of `kind` memory: "host" (alias "anon"), "hugepage" (alias "huge":
/// reserved 2 MiB pages, else transparent huge pages with a note saying so), "udmabuf" (host
/// pages that are also a dma-buf, made through `/dev/udmabuf`: what `zcnet_receiver_new_in`
/// binds on a machine without a GPU), "cuda" or "cuda:N" (device memory of GPU N, which the
/// CPU cannot read; the CUDA driver is opened now). `*out` is the new region, or NULL on
/// failure.
///
/// # Safety
/// `kind` is NULL or a NUL-terminated string; `out` is NULL or points to writable memory for
/// one pointer.
#[no_mangle]
pub unsafe extern "C" fn zcnet_region_new(
    kind: *const c_char,
    len: usize,
    out: *mut *mut zcnet_region,
) -> zcnet_status {
    call("zcnet_region_new", || {
        // SAFETY: by the contract, non-NULL `kind` is a NUL-terminated string that outlives
        // the call.
        let kind = (!kind.is_null()).then(|| unsafe { CStr::from_ptr(kind) });
        // SAFETY: by the contract, non-NULL `out` is aligned and writable; MaybeUninit makes
        // no claim about what it holds now.
        let out = unsafe { out.cast::<MaybeUninit<*mut zcnet_region>>().as_mut() };
        region_new(kind, len, out)
    })
}

fn region_new(
    kind: Option<&CStr>,
    len: usize,
    out: Option<&mut MaybeUninit<*mut zcnet_region>>,
) -> Result<()> {
    let out = need(out, "out")?;
    out.write(std::ptr::null_mut());
    let kind = need_str(kind, "kind")?;
    let mem = MemoryKind::parse(kind).ok_or_else(|| {
        invalid(format!(
            "unknown memory kind '{kind}': use one of {}",
            MemoryKind::NAMES
        ))
    })?;
    if len == 0 {
        return Err(invalid("len is 0"));
    }
    let region = Region::new(mem, len)?;
    let handle = zcnet_region {
        len: region.len(),
        device: region
            .device_ordinal()
            .map_or(-1, |n| i32::try_from(n).unwrap_or(i32::MAX)),
        note: region
            .note()
            .map(|n| CString::new(n.replace('\0', "?")).unwrap_or_default()),
        kind: mem,
        region: Some(region),
    };
    out.write(Box::into_raw(Box::new(handle)));
    Ok(())
}

/// The region's length in bytes (rounded up to whole pages, or to 2 MiB for huge pages).
///
/// # Safety
/// `region` is NULL or a live region; `len` is NULL or points to a writable `size_t`.
#[no_mangle]
pub unsafe extern "C" fn zcnet_region_len(
    region: *const zcnet_region,
    len: *mut usize,
) -> zcnet_status {
    call("zcnet_region_len", || {
        // SAFETY: by the contract, non-NULL `region` is a live handle from zcnet_region_new.
        let region = unsafe { region.as_ref() };
        // SAFETY: by the contract, non-NULL `len` is aligned and writable.
        let len = unsafe { len.cast::<MaybeUninit<usize>>().as_mut() };
        need(len, "len")?.write(need(region, "region")?.len);
        Ok(())
    })
}

/// Copies `len` bytes at `offset` of a device region into `out`, a synchronous copy from the
/// GPU (to check what landed there, e.g. after `zcnet_receiver_copy_to_device`). Refused
/// (`ZCNET_E_INVALID`) for host memory, whose bytes are read through the buffers of the sender
/// it was given to, for a region given to a sender, and for a range outside the region.
///
/// # Safety
/// `region` is NULL or a live region; `out` is NULL or points to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn zcnet_region_read(
    region: *const zcnet_region,
    offset: usize,
    out: *mut u8,
    len: usize,
) -> zcnet_status {
    call("zcnet_region_read", || {
        // SAFETY: by the contract, non-NULL `region` is a live handle from zcnet_region_new.
        let region = unsafe { region.as_ref() };
        let r = need(region, "region")?.memory()?;
        if offset.checked_add(len).is_none_or(|end| end > r.len()) {
            return Err(invalid(format!(
                "{len} B at {offset} do not lie inside the region's {} B",
                r.len()
            )));
        }
        if len == 0 {
            return Ok(());
        }
        let out = need((!out.is_null()).then_some(out), "out")?;
        // SAFETY: by the contract, `out` points to `len` writable bytes (checked non-NULL).
        let out = unsafe { std::slice::from_raw_parts_mut(out, len) };
        Ok(r.read_at(offset, out)?)
    })
}

/// The CUDA device the region's memory is on, or -1 for host memory.
///
/// # Safety
/// `region` is NULL or a live region; `ordinal` is NULL or points to a writable `int32_t`.
#[no_mangle]
pub unsafe extern "C" fn zcnet_region_device(
    region: *const zcnet_region,
    ordinal: *mut i32,
) -> zcnet_status {
    call("zcnet_region_device", || {
        // SAFETY: by the contract, non-NULL `region` is a live handle from zcnet_region_new.
        let region = unsafe { region.as_ref() };
        // SAFETY: by the contract, non-NULL `ordinal` is aligned and writable.
        let ordinal = unsafe { ordinal.cast::<MaybeUninit<i32>>().as_mut() };
        need(ordinal, "ordinal")?.write(need(region, "region")?.device);
        Ok(())
    })
}

/// A fallback the allocation took, in words (e.g. transparent instead of reserved huge pages),
/// or NULL when there was none. The string lives as long as the region handle.
///
/// # Safety
/// `region` is NULL or a live region; `note` is NULL or points to a writable pointer.
#[no_mangle]
pub unsafe extern "C" fn zcnet_region_note(
    region: *const zcnet_region,
    note: *mut *const c_char,
) -> zcnet_status {
    call("zcnet_region_note", || {
        // SAFETY: by the contract, non-NULL `region` is a live handle from zcnet_region_new.
        let region = unsafe { region.as_ref() };
        // SAFETY: by the contract, non-NULL `note` is aligned and writable.
        let note = unsafe { note.cast::<MaybeUninit<*const c_char>>().as_mut() };
        let text = need(region, "region")?.note.as_ref();
        need(note, "note")?.write(text.map_or(std::ptr::null(), |n| n.as_ptr()));
        Ok(())
    })
}

/// Frees a region handle (and its memory, unless a sender took it). NULL is ignored.
///
/// # Safety
/// `region` is NULL or a handle from `zcnet_region_new` that was not freed before.
#[no_mangle]
pub unsafe extern "C" fn zcnet_region_free(region: *mut zcnet_region) {
    call_void("zcnet_region_free", || {
        if !region.is_null() {
            // SAFETY: non-NULL, and by the contract a pointer from Box::into_raw in
            // zcnet_region_new that was not freed before: from_raw takes it back once.
            drop(unsafe { Box::from_raw(region) });
        }
        Ok(())
    })
}
