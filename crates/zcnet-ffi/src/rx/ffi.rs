//! The exported functions of `zcnet_receiver`: each turns its raw arguments into safe types
//! and calls [`zcnet_receiver`]'s methods.

use super::{
    mode_name, zcnet_receiver, zcnet_rx_config, zcnet_rx_event, zcnet_rx_stats, zcnet_stream_report,
};
use crate::error::{call, call_void, invalid, need, need_str, zcnet_status};
use crate::region::zcnet_region;
use std::ffi::{c_char, c_int, CStr};
use std::mem::MaybeUninit;

/// Makes a receiver with `cfg` (NULL: the defaults) on the calling thread, which it belongs
/// to from then on. An explicit mode the kernel refuses is an error (the message names the
/// errno and the fix); `ZCNET_RX_AUTO` takes the best that works. `*out` is the new
/// receiver, or NULL on failure.
///
/// # Safety
/// `cfg` is NULL or points to a `zcnet_rx_config`; `out` is NULL or points to writable memory
/// for one pointer.
#[no_mangle]
pub unsafe extern "C" fn zcnet_receiver_new(
    cfg: *const zcnet_rx_config,
    out: *mut *mut zcnet_receiver,
) -> zcnet_status {
    call("zcnet_receiver_new", || {
        // SAFETY: by the contract, non-NULL `cfg` points to a readable zcnet_rx_config (any
        // bit pattern of its integer fields is valid).
        let cfg = unsafe { cfg.as_ref() };
        // SAFETY: by the contract, non-NULL `out` is aligned and writable.
        let out = unsafe { out.cast::<MaybeUninit<*mut zcnet_receiver>>().as_mut() };
        let out = need(out, "out")?;
        out.write(std::ptr::null_mut());
        out.write(Box::into_raw(Box::new(zcnet_receiver::new(cfg)?)));
        Ok(())
    })
}

/// Makes a receiver whose NIC queue writes into `region`'s memory, on the calling thread: the
/// region's dma-buf is bound to queue `cfg->queue` of `cfg->iface` by devmem TCP
/// (`ZCNET_RX_DEVMEM`) or registered as the zcrx area (`ZCNET_RX_ZCRX`,
/// `IORING_ZCRX_AREA_DMABUF`); `cfg->area_len` is ignored (the region's length is the area).
/// `region` is "udmabuf" memory (host pages the NIC writes through a dma-buf) or "cuda:N";
/// the receiver takes it when it was made (as a sender does; free the handle either way) and
/// keeps it until it is freed. Data events in it have `data` NULL and a `dmabuf_offset`:
/// `zcnet_receiver_read` copies their bytes out, and `zcnet_receiver_recv_stream` verifies them
/// that way. The flows must be steered to the queue, with header split on (`zcnet nic setup`).
/// A host region, another mode, an empty `iface` are `ZCNET_E_INVALID`; a NIC or kernel that
/// refuses is the library's error (its errno and fix), with the region left to the caller.
/// `*out` is the new receiver, or NULL on failure.
///
/// # Safety
/// `cfg` is NULL or points to a `zcnet_rx_config`; `region` is NULL or a live region; `out` is
/// NULL or points to writable memory for one pointer.
#[no_mangle]
pub unsafe extern "C" fn zcnet_receiver_new_in(
    cfg: *const zcnet_rx_config,
    region: *mut zcnet_region,
    out: *mut *mut zcnet_receiver,
) -> zcnet_status {
    call("zcnet_receiver_new_in", || {
        // SAFETY: by the contract, non-NULL `cfg` points to a readable zcnet_rx_config (any
        // bit pattern of its integer fields is valid).
        let cfg = unsafe { cfg.as_ref() };
        // SAFETY: by the contract, non-NULL `region` is a live handle nothing else uses during
        // the call.
        let region = unsafe { region.as_mut() };
        // SAFETY: by the contract, non-NULL `out` is aligned and writable.
        let out = unsafe { out.cast::<MaybeUninit<*mut zcnet_receiver>>().as_mut() };
        let out = need(out, "out")?;
        out.write(std::ptr::null_mut());
        let rx = zcnet_receiver::new_in(cfg, need(region, "region")?)?;
        out.write(Box::into_raw(Box::new(rx)));
        Ok(())
    })
}

/// Listens for TCP connections on `addr`, a numeric "IP:PORT" ("127.0.0.1:0" picks a free
/// port: `zcnet_receiver_local_port` says which).
///
/// # Safety
/// `rx` is NULL or a live receiver; `addr` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn zcnet_receiver_listen(
    rx: *mut zcnet_receiver,
    addr: *const c_char,
) -> zcnet_status {
    call("zcnet_receiver_listen", || {
        // SAFETY: by the contract, non-NULL `rx` is a live handle (used on its own thread:
        // checked below).
        let rx = unsafe { rx.as_mut() };
        // SAFETY: by the contract, non-NULL `addr` is a NUL-terminated string that outlives
        // the call.
        let addr = (!addr.is_null()).then(|| unsafe { CStr::from_ptr(addr) });
        need(rx, "rx")?.on_thread()?.listen(need_str(addr, "addr")?)
    })
}

/// The port the receiver listens on.
///
/// # Safety
/// `rx` is NULL or a live receiver; `port` is NULL or points to a writable `uint16_t`.
#[no_mangle]
pub unsafe extern "C" fn zcnet_receiver_local_port(
    rx: *mut zcnet_receiver,
    port: *mut u16,
) -> zcnet_status {
    call("zcnet_receiver_local_port", || {
        // SAFETY: by the contract, non-NULL `rx` is a live handle.
        let rx = unsafe { rx.as_mut() };
        // SAFETY: by the contract, non-NULL `port` is aligned and writable.
        let port = unsafe { port.cast::<MaybeUninit<u16>>().as_mut() };
        let p = need(rx, "rx")?.on_thread()?.local_port()?;
        need(port, "port")?.write(p);
        Ok(())
    })
}

/// Waits for the next connection on the listening address and starts receiving on it;
/// `*conn` is its id (in the events of `zcnet_receiver_poll`).
///
/// # Safety
/// `rx` is NULL or a live receiver; `conn` is NULL or points to a writable `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn zcnet_receiver_accept(
    rx: *mut zcnet_receiver,
    conn: *mut u64,
) -> zcnet_status {
    call("zcnet_receiver_accept", || {
        // SAFETY: by the contract, non-NULL `rx` is a live handle.
        let rx = unsafe { rx.as_mut() };
        // SAFETY: by the contract, non-NULL `conn` is aligned and writable.
        let conn = unsafe { conn.cast::<MaybeUninit<u64>>().as_mut() };
        let (rx, conn) = (need(rx, "rx")?.on_thread()?, need(conn, "conn")?);
        conn.write(rx.accept()?);
        Ok(())
    })
}

/// Gives released buffers back to the kernel, then receives what is ready, waiting up to
/// `timeout_ms` when nothing is. Writes up to `cap` events to `events` and their number to
/// `*n` (0 when the wait ended with nothing). Events that do not fit come with the next call.
///
/// # Safety
/// `rx` is NULL or a live receiver; `events` is NULL or points to `cap` writable
/// `zcnet_rx_event`s; `n` is NULL or points to a writable `size_t`.
#[no_mangle]
pub unsafe extern "C" fn zcnet_receiver_poll(
    rx: *mut zcnet_receiver,
    events: *mut zcnet_rx_event,
    cap: usize,
    timeout_ms: u32,
    n: *mut usize,
) -> zcnet_status {
    call("zcnet_receiver_poll", || {
        // SAFETY: by the contract, non-NULL `rx` is a live handle.
        let rx = unsafe { rx.as_mut() };
        let fits = cap
            .checked_mul(std::mem::size_of::<zcnet_rx_event>())
            .is_some_and(|b| b <= isize::MAX as usize);
        let events = (!events.is_null() && fits).then(|| {
            // SAFETY: non-NULL, the size fits isize::MAX, and by the contract `cap` writable
            // events that nothing else uses during the call; MaybeUninit makes no claim about
            // what they hold now.
            unsafe { std::slice::from_raw_parts_mut(events.cast::<MaybeUninit<_>>(), cap) }
        });
        // SAFETY: by the contract, non-NULL `n` is aligned and writable.
        let n = unsafe { n.cast::<MaybeUninit<usize>>().as_mut() };
        let (rx, n) = (need(rx, "rx")?.on_thread()?, need(n, "n")?);
        n.write(0);
        let events = need(events, "events (or cap is too large)")?;
        n.write(rx.poll(events, timeout_ms)?);
        Ok(())
    })
}

/// Gives a lent buffer back (its `data` pointer is invalid from now on); the next poll hands
/// it to the kernel.
///
/// # Safety
/// `rx` is NULL or a live receiver.
#[no_mangle]
pub unsafe extern "C" fn zcnet_receiver_release(rx: *mut zcnet_receiver, buf: u64) -> zcnet_status {
    call("zcnet_receiver_release", || {
        // SAFETY: by the contract, non-NULL `rx` is a live handle.
        let rx = unsafe { rx.as_mut() };
        need(rx, "rx")?.on_thread()?.release(buf)
    })
}

/// Copies the first `len` bytes of lent buffer `buf` into `out` (`len` at most the buffer's):
/// host bytes as they are, bytes in device memory (`data` NULL) read back from the region the
/// receiver bound (`zcnet_receiver_new_in`: a udmabuf's pages, or a copy from the GPU). The
/// buffer stays lent. Device bytes of a receiver made without a region (devmem binds a
/// udmabuf of its own) cannot be read: `ZCNET_E_INVALID`.
///
/// # Safety
/// `rx` is NULL or a live receiver; `out` is NULL or points to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn zcnet_receiver_read(
    rx: *mut zcnet_receiver,
    buf: u64,
    out: *mut u8,
    len: usize,
) -> zcnet_status {
    call("zcnet_receiver_read", || {
        // SAFETY: by the contract, non-NULL `rx` is a live handle.
        let rx = unsafe { rx.as_mut() };
        let rx = need(rx, "rx")?.on_thread()?;
        let out = (!out.is_null() && len <= isize::MAX as usize).then(|| {
            // SAFETY: non-NULL, len within isize::MAX, and by the contract `len` writable
            // bytes that nothing else uses during the call.
            unsafe { std::slice::from_raw_parts_mut(out, len) }
        });
        rx.read(buf, need(out, "out (or len is above PTRDIFF_MAX)")?)
    })
}

/// Copies lent buffer `buf` (all of its bytes) into `region` at byte `offset` with the GPU's
/// copy engine, asynchronously, and gives the buffer back once the copy completed: as after
/// `zcnet_receiver_release`, its `data` pointer is invalid from this call on. The bytes are in
/// device memory once `zcnet_receiver_device_wait` returned `ZCNET_OK`. The first call pins the
/// receiver's buffers with CUDA. `region` is CUDA device memory ("cuda" or "cuda:N"); copies
/// to another region first wait for those in flight (and a failure among them is this call's
/// error). The device memory stays allocated until `zcnet_receiver_device_wait` returned, even
/// if the region handle is freed before. uring receivers only (`ZCNET_E_UNSUPPORTED` otherwise). On an error
/// the buffer stays lent (release it as usual) unless the copy itself failed to start, which
/// gives it back: `zcnet_receiver_stats`' `held` tells.
///
/// # Safety
/// `rx` is NULL or a live receiver; `region` is NULL or a live region.
#[no_mangle]
pub unsafe extern "C" fn zcnet_receiver_copy_to_device(
    rx: *mut zcnet_receiver,
    buf: u64,
    region: *const crate::region::zcnet_region,
    offset: u64,
) -> zcnet_status {
    call("zcnet_receiver_copy_to_device", || {
        // SAFETY: by the contract, non-NULL `rx` is a live handle.
        let rx = unsafe { rx.as_mut() };
        // SAFETY: by the contract, non-NULL `region` is a live handle from zcnet_region_new.
        let region = unsafe { region.as_ref() };
        let region = need(region, "region")?.memory()?;
        need(rx, "rx")?
            .on_thread()?
            .copy_to_device(buf, region, offset)
    })
}

/// Waits until every copy `zcnet_receiver_copy_to_device` started has completed; the first
/// that failed, if any, is the error (reported once).
///
/// # Safety
/// `rx` is NULL or a live receiver.
#[no_mangle]
pub unsafe extern "C" fn zcnet_receiver_device_wait(rx: *mut zcnet_receiver) -> zcnet_status {
    call("zcnet_receiver_device_wait", || {
        // SAFETY: by the contract, non-NULL `rx` is a live handle.
        let rx = unsafe { rx.as_mut() };
        need(rx, "rx")?.on_thread()?.device_wait()
    })
}

/// Stops receiving on `conn` and closes its socket (as soon as the kernel lets go of it).
/// Buffers already lent stay valid until released; its events not yet polled are dropped
/// (their buffers go back). An unknown id is ignored.
///
/// # Safety
/// `rx` is NULL or a live receiver.
#[no_mangle]
pub unsafe extern "C" fn zcnet_receiver_close(rx: *mut zcnet_receiver, conn: u64) -> zcnet_status {
    call("zcnet_receiver_close", || {
        // SAFETY: by the contract, non-NULL `rx` is a live handle.
        let rx = unsafe { rx.as_mut() };
        need(rx, "rx")?.on_thread()?.close(conn);
        Ok(())
    })
}

/// The counters so far.
///
/// # Safety
/// `rx` is NULL or a live receiver; `stats` is NULL or points to a writable `zcnet_rx_stats`.
#[no_mangle]
pub unsafe extern "C" fn zcnet_receiver_stats(
    rx: *mut zcnet_receiver,
    stats: *mut zcnet_rx_stats,
) -> zcnet_status {
    call("zcnet_receiver_stats", || {
        // SAFETY: by the contract, non-NULL `rx` is a live handle.
        let rx = unsafe { rx.as_mut() };
        // SAFETY: by the contract, non-NULL `stats` is aligned and writable.
        let stats = unsafe { stats.cast::<MaybeUninit<zcnet_rx_stats>>().as_mut() };
        let s = need(rx, "rx")?.on_thread()?.stats();
        need(stats, "stats")?.write(s);
        Ok(())
    })
}

/// The receive mode in use (for `ZCNET_RX_AUTO`, the one it chose), e.g. "uring" (a static
/// string).
///
/// # Safety
/// `rx` is NULL or a live receiver; `name` is NULL or points to a writable pointer.
#[no_mangle]
pub unsafe extern "C" fn zcnet_receiver_mode(
    rx: *mut zcnet_receiver,
    name: *mut *const c_char,
) -> zcnet_status {
    call("zcnet_receiver_mode", || {
        // SAFETY: by the contract, non-NULL `rx` is a live handle.
        let rx = unsafe { rx.as_mut() };
        // SAFETY: by the contract, non-NULL `name` is aligned and writable.
        let name = unsafe { name.cast::<MaybeUninit<*const c_char>>().as_mut() };
        let mode = need(rx, "rx")?.on_thread()?.mode();
        need(name, "name")?.write(mode_name(mode).as_ptr());
        Ok(())
    })
}

/// The modes `ZCNET_RX_AUTO` tried and the kernel refused, with the reasons, in one line
/// ("" when none). The string lives as long as the receiver.
///
/// # Safety
/// `rx` is NULL or a live receiver; `text` is NULL or points to a writable pointer.
#[no_mangle]
pub unsafe extern "C" fn zcnet_receiver_fallbacks(
    rx: *mut zcnet_receiver,
    text: *mut *const c_char,
) -> zcnet_status {
    call("zcnet_receiver_fallbacks", || {
        // SAFETY: by the contract, non-NULL `rx` is a live handle.
        let rx = unsafe { rx.as_mut() };
        // SAFETY: by the contract, non-NULL `text` is aligned and writable.
        let text = unsafe { text.cast::<MaybeUninit<*const c_char>>().as_mut() };
        let s = need(rx, "rx")?.on_thread()?.fallbacks().as_ptr();
        need(text, "text")?.write(s);
        Ok(())
    })
}

/// Convenience: waits for one connection on the listening address and reads it to its end,
/// giving every buffer back at once. With `verify` non-zero, checks every byte against
/// zcnet's pattern for `seed` (`zcnet_pattern_fill`) and fails with `ZCNET_E_DATA` at the
/// first wrong one; bytes in device memory are read back from the region the receiver bound
/// (`zcnet_receiver_new_in`) before their buffer goes back, and without one cannot be
/// verified (an error). The receiver must have no other connection.
///
/// # Safety
/// `rx` is NULL or a live receiver; `report` is NULL or points to a writable
/// `zcnet_stream_report`.
#[no_mangle]
pub unsafe extern "C" fn zcnet_receiver_recv_stream(
    rx: *mut zcnet_receiver,
    verify: c_int,
    seed: u64,
    report: *mut zcnet_stream_report,
) -> zcnet_status {
    call("zcnet_receiver_recv_stream", || {
        // SAFETY: by the contract, non-NULL `rx` is a live handle.
        let rx = unsafe { rx.as_mut() };
        // SAFETY: by the contract, non-NULL `report` is aligned and writable.
        let report = unsafe { report.cast::<MaybeUninit<zcnet_stream_report>>().as_mut() };
        let (rx, report) = (need(rx, "rx")?.on_thread()?, need(report, "report")?);
        report.write(rx.recv_stream(verify != 0, seed)?);
        Ok(())
    })
}

/// Frees a receiver: closes its connections and listening socket; every lent buffer's `data`
/// becomes invalid. NULL is ignored. On another thread than its own it is not freed (its
/// io_uring rings belong to that thread): the call records the error and leaks it.
///
/// # Safety
/// `rx` is NULL or a receiver from `zcnet_receiver_new` that was not freed before.
#[no_mangle]
pub unsafe extern "C" fn zcnet_receiver_free(rx: *mut zcnet_receiver) {
    call_void("zcnet_receiver_free", || {
        if rx.is_null() {
            return Ok(());
        }
        // SAFETY: non-NULL, and by the contract a pointer from Box::into_raw in
        // zcnet_receiver_new that was not freed before: from_raw takes it back once.
        let mut rx = unsafe { Box::from_raw(rx) };
        if rx.on_thread().is_err() {
            Box::leak(rx);
            return Err(invalid(
                "called on another thread than the receiver's own: the receiver was leaked, not freed",
            ));
        }
        Ok(())
    })
}
