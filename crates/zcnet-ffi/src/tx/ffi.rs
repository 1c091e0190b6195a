//! The exported functions of `zcnet_sender`: each turns its raw arguments into safe types and
//! calls [`zcnet_sender`]'s methods.

use super::{mode_name, tx_config, zcnet_sender, zcnet_tx_config, zcnet_tx_stats, zcnet_txbuf};
use crate::error::{call, call_void, invalid, need, need_str, zcnet_status};
use crate::region::zcnet_region;
use std::ffi::{c_char, CStr};
use std::mem::MaybeUninit;

/// The region size, in bytes, that a sender with `cfg` (NULL: the defaults) cuts into its
/// buffers: allocate a region of at least this much for `zcnet_sender_connect`.
///
/// # Safety
/// `cfg` is NULL or points to a `zcnet_tx_config`; `len` is NULL or points to a writable
/// `size_t`.
#[no_mangle]
pub unsafe extern "C" fn zcnet_sender_region_len(
    cfg: *const zcnet_tx_config,
    len: *mut usize,
) -> zcnet_status {
    call("zcnet_sender_region_len", || {
        // SAFETY: by the contract, non-NULL `cfg` points to a readable zcnet_tx_config (any
        // bit pattern of its integer fields is valid).
        let cfg = unsafe { cfg.as_ref() };
        // SAFETY: by the contract, non-NULL `len` is aligned and writable.
        let len = unsafe { len.cast::<MaybeUninit<usize>>().as_mut() };
        let need_len = zcnet::tx::region_len(&tx_config(cfg)?);
        if need_len > isize::MAX as usize {
            return Err(invalid(
                "cfg->inflight buffers of cfg->buf_size B are more memory than an address space holds",
            ));
        }
        need(len, "len")?.write(need_len);
        Ok(())
    })
}

/// Connects a TCP stream to `addr` (a numeric "IP:PORT", e.g. `"127.0.0.1:5201"` or
/// `"[::1]:5201"`; names are not resolved) and makes a sender on it with `cfg` (NULL: the
/// defaults). Its buffers are cut from `region` or, with NULL, from new host memory of
/// `zcnet_sender_region_len` bytes. Once connected, the region's memory moves into the sender
/// (even if making the sender then fails): it cannot be given again, and the handle stays the
/// caller's to free. `*out` is the new sender, or NULL on failure.
///
/// # Safety
/// `addr` is NULL or a NUL-terminated string; `cfg` is NULL or points to a
/// `zcnet_tx_config`; `region` is NULL or a live region; `out` is NULL or points to
/// writable memory for one pointer.
#[no_mangle]
pub unsafe extern "C" fn zcnet_sender_connect(
    addr: *const c_char,
    cfg: *const zcnet_tx_config,
    region: *mut zcnet_region,
    out: *mut *mut zcnet_sender,
) -> zcnet_status {
    call("zcnet_sender_connect", || {
        // SAFETY: by the contract, non-NULL `addr` is a NUL-terminated string that outlives
        // the call.
        let addr = (!addr.is_null()).then(|| unsafe { CStr::from_ptr(addr) });
        // SAFETY: by the contract, non-NULL `cfg` points to a readable zcnet_tx_config.
        let cfg = unsafe { cfg.as_ref() };
        // SAFETY: by the contract, non-NULL `region` is a live handle no other thread uses
        // during the call.
        let region = unsafe { region.as_mut() };
        // SAFETY: by the contract, non-NULL `out` is aligned and writable.
        let out = unsafe { out.cast::<MaybeUninit<*mut zcnet_sender>>().as_mut() };
        let out = need(out, "out")?;
        out.write(std::ptr::null_mut());
        let tx = zcnet_sender::connect(need_str(addr, "addr")?, cfg, region)?;
        out.write(Box::into_raw(Box::new(tx)));
        Ok(())
    })
}

/// Lends the caller a free buffer, waiting until the kernel releases one when all are in
/// flight (at most the stall timeout). Write the payload into `buf->data` (or with
/// `zcnet_sender_write`), then hand it back with `zcnet_sender_send`.
///
/// # Safety
/// `tx` is NULL or a live sender no other thread uses during the call; `buf` is NULL or
/// points to a writable `zcnet_txbuf`.
#[no_mangle]
pub unsafe extern "C" fn zcnet_sender_buffer(
    tx: *mut zcnet_sender,
    buf: *mut zcnet_txbuf,
) -> zcnet_status {
    call("zcnet_sender_buffer", || {
        // SAFETY: by the contract, non-NULL `tx` is a live handle used by this thread only.
        let tx = unsafe { tx.as_mut() };
        // SAFETY: by the contract, non-NULL `buf` is aligned and writable.
        let buf = unsafe { buf.cast::<MaybeUninit<zcnet_txbuf>>().as_mut() };
        let buf = need(buf, "buf")?;
        buf.write(need(tx, "tx")?.buffer()?);
        Ok(())
    })
}

/// Copies `data[0..len]` into the start of lent buffer `id` (for device memory, a synchronous
/// copy to the GPU); `*written` is how many bytes fit. `data` lying in the buffer itself is
/// refused (`ZCNET_E_INVALID`): write the buffer through its `data` pointer instead.
///
/// # Safety
/// `tx` is NULL or a live sender no other thread uses during the call; `data` is NULL or
/// points to `len` readable bytes; `written` is NULL or points to a writable `size_t`.
#[no_mangle]
pub unsafe extern "C" fn zcnet_sender_write(
    tx: *mut zcnet_sender,
    id: u32,
    data: *const u8,
    len: usize,
    written: *mut usize,
) -> zcnet_status {
    call("zcnet_sender_write", || {
        // SAFETY: by the contract, non-NULL `tx` is a live handle used by this thread only.
        let tx = unsafe { tx.as_mut() };
        let data = (!data.is_null() && len <= isize::MAX as usize).then(|| {
            // SAFETY: non-NULL, len within isize::MAX, and by the contract `len` readable
            // bytes that stay unchanged during the call.
            unsafe { std::slice::from_raw_parts(data, len) }
        });
        // SAFETY: by the contract, non-NULL `written` is aligned and writable.
        let written = unsafe { written.cast::<MaybeUninit<usize>>().as_mut() };
        let (tx, written) = (need(tx, "tx")?, need(written, "written")?);
        written.write(tx.write(id, need(data, "data (or len is above PTRDIFF_MAX)")?)?);
        Ok(())
    })
}

/// Sends the first `len` bytes of lent buffer `id`; the buffer goes back to the sender, which
/// lends it again once the kernel is done with it (for zero copy: after its notification).
/// `len` 0 gives the buffer back unsent. io_uring modes queue the send and submit it with the
/// next wait (or `zcnet_sender_flush`).
///
/// # Safety
/// `tx` is NULL or a live sender no other thread uses during the call.
#[no_mangle]
pub unsafe extern "C" fn zcnet_sender_send(
    tx: *mut zcnet_sender,
    id: u32,
    len: usize,
) -> zcnet_status {
    call("zcnet_sender_send", || {
        // SAFETY: by the contract, non-NULL `tx` is a live handle used by this thread only.
        let tx = unsafe { tx.as_mut() };
        need(tx, "tx")?.send(id, len)
    })
}

/// Sends `data[0..len]` straight from the caller's memory, without copying it into a buffer of
/// the sender: the io_uring modes (uring, uring-zc, auto) hand it to the kernel as it is (a
/// zero-copy send pins its pages for the send, charged to RLIMIT_MEMLOCK without
/// CAP_IPC_LOCK), copy sends it at once; msg-zerocopy and devmem send only from their region
/// and refuse, as does a sender of GPU memory. The sender holds the memory until the kernel is
/// done with it: it is the caller's again once `zcnet_sender_flush` or `zcnet_sender_finish`
/// returned `ZCNET_OK`. `len` 0 sends nothing.
///
/// # Safety
/// `tx` is NULL or a live sender no other thread uses during the call; `data` is NULL or
/// points to `len` readable bytes that stay valid and unchanged until a later
/// `zcnet_sender_flush` or `zcnet_sender_finish` on this sender returned `ZCNET_OK`, or, when
/// the sender is freed without that, for good (`zcnet_sender_free` waits up to 2 s for the
/// kernel to let go and leaks what it still holds then, never giving it back early).
#[no_mangle]
pub unsafe extern "C" fn zcnet_sender_send_borrowed(
    tx: *mut zcnet_sender,
    data: *const u8,
    len: usize,
) -> zcnet_status {
    call("zcnet_sender_send_borrowed", || {
        // SAFETY: by the contract, non-NULL `tx` is a live handle used by this thread only.
        let tx = unsafe { tx.as_mut() };
        let tx = need(tx, "tx")?;
        if len == 0 {
            return Ok(());
        }
        let data = (!data.is_null() && len <= isize::MAX as usize).then_some(data);
        let data = need(data, "data (or len is above PTRDIFF_MAX)")?;
        // SAFETY: by the contract, `data[0..len]` stays valid and unchanged until the kernel
        // is done with it, which the sender's flush (or its drop's bounded wait, leaking past
        // it) waits for; the sender only reads it.
        let buf = unsafe { zcnet::engine::ForeignBuf::new(data.cast_mut(), len) }
            .ok_or_else(|| crate::error::invalid("data is NULL"))?;
        tx.sender()?.send_borrowed(std::sync::Arc::new(buf), len)?;
        Ok(())
    })
}

/// Waits until the kernel is done with every buffer sent (every send completed and every
/// zero-copy notification arrived).
///
/// # Safety
/// `tx` is NULL or a live sender no other thread uses during the call.
#[no_mangle]
pub unsafe extern "C" fn zcnet_sender_flush(tx: *mut zcnet_sender) -> zcnet_status {
    call("zcnet_sender_flush", || {
        // SAFETY: by the contract, non-NULL `tx` is a live handle used by this thread only.
        let tx = unsafe { tx.as_mut() };
        Ok(need(tx, "tx")?.sender()?.flush()?)
    })
}

/// The statistics so far.
///
/// # Safety
/// `tx` is NULL or a live sender no other thread uses during the call; `stats` is NULL or
/// points to a writable `zcnet_tx_stats`.
#[no_mangle]
pub unsafe extern "C" fn zcnet_sender_stats(
    tx: *mut zcnet_sender,
    stats: *mut zcnet_tx_stats,
) -> zcnet_status {
    call("zcnet_sender_stats", || {
        // SAFETY: by the contract, non-NULL `tx` is a live handle used by this thread only.
        let tx = unsafe { tx.as_mut() };
        // SAFETY: by the contract, non-NULL `stats` is aligned and writable.
        let stats = unsafe { stats.cast::<MaybeUninit<zcnet_tx_stats>>().as_mut() };
        let s = (&need(tx, "tx")?.sender()?.stats()).into();
        need(stats, "stats")?.write(s);
        Ok(())
    })
}

/// Flushes, closes the connection and writes the final statistics to `*stats` (NULL: not
/// wanted). CPU time is the calling thread's: finish on the thread that sent. Buffers still
/// lent are dropped. The sender can do nothing more; free it with `zcnet_sender_free`.
///
/// # Safety
/// `tx` is NULL or a live sender no other thread uses during the call; `stats` is NULL or
/// points to a writable `zcnet_tx_stats`.
#[no_mangle]
pub unsafe extern "C" fn zcnet_sender_finish(
    tx: *mut zcnet_sender,
    stats: *mut zcnet_tx_stats,
) -> zcnet_status {
    call("zcnet_sender_finish", || {
        // SAFETY: by the contract, non-NULL `tx` is a live handle used by this thread only.
        let tx = unsafe { tx.as_mut() };
        // SAFETY: by the contract, non-NULL `stats` is aligned and writable.
        let stats = unsafe { stats.cast::<MaybeUninit<zcnet_tx_stats>>().as_mut() };
        let s = need(tx, "tx")?.finish()?;
        if let Some(out) = stats {
            out.write(s);
        }
        Ok(())
    })
}

/// The sender's mode, e.g. "uring-zc" (a static string).
///
/// # Safety
/// `tx` is NULL or a live sender no other thread uses during the call; `name` is NULL or
/// points to a writable pointer.
#[no_mangle]
pub unsafe extern "C" fn zcnet_sender_mode(
    tx: *mut zcnet_sender,
    name: *mut *const c_char,
) -> zcnet_status {
    call("zcnet_sender_mode", || {
        // SAFETY: by the contract, non-NULL `tx` is a live handle used by this thread only.
        let tx = unsafe { tx.as_mut() };
        // SAFETY: by the contract, non-NULL `name` is aligned and writable.
        let name = unsafe { name.cast::<MaybeUninit<*const c_char>>().as_mut() };
        let mode = need(tx, "tx")?.sender()?.mode();
        need(name, "name")?.write(mode_name(mode).as_ptr());
        Ok(())
    })
}

/// Frees a sender (closing its connection; sends still in flight are cancelled). NULL is
/// ignored.
///
/// # Safety
/// `tx` is NULL or a sender from `zcnet_sender_connect` that was not freed before and that no
/// other thread uses.
#[no_mangle]
pub unsafe extern "C" fn zcnet_sender_free(tx: *mut zcnet_sender) {
    call_void("zcnet_sender_free", || {
        if !tx.is_null() {
            // SAFETY: non-NULL, and by the contract a pointer from Box::into_raw in
            // zcnet_sender_connect that was not freed before: from_raw takes it back once.
            drop(unsafe { Box::from_raw(tx) });
        }
        Ok(())
    })
}
