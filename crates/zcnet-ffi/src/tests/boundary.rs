//! NULL pointers, bad strings, bad addresses, panics, wrong threads: each gives its code and a
//! message naming the function and the argument, and nothing crosses the boundary.

use super::*;
use crate::error::{call, zcnet_status::*};
use crate::region::{zcnet_region_device, zcnet_region_len, zcnet_region_note};
use crate::rx::{zcnet_receiver_poll, zcnet_receiver_release, zcnet_rx_event, ZCNET_RX_QUEUE};
use crate::tx::{zcnet_sender_buffer, zcnet_sender_send, zcnet_sender_write, ZCNET_TX_DEVMEM};
use std::ffi::CString;

#[zcnet_testkit::test]
fn version_is_the_crate_version() {
    // SAFETY: zcnet_version returns a static NUL-terminated string.
    let v = unsafe { CStr::from_ptr(crate::zcnet_version()) };
    assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
}

#[zcnet_testkit::test]
fn status_names_cover_every_code() {
    for (i, s) in zcnet_status::ALL.iter().enumerate() {
        assert_eq!(*s as usize, i, "codes are numbered in order");
        // SAFETY: zcnet_status_name returns a static NUL-terminated string.
        let name = unsafe { CStr::from_ptr(crate::zcnet_status_name(i as i32)) };
        assert_eq!(name, s.name());
        assert!(name.to_str().unwrap().starts_with("ZCNET_"));
    }
    for bad in [-1, 14, i32::MAX] {
        // SAFETY: as above.
        let name = unsafe { CStr::from_ptr(crate::zcnet_status_name(bad)) };
        assert_eq!(name, c"ZCNET_E_UNKNOWN");
    }
}

#[zcnet_testkit::test]
fn null_arguments_are_named() {
    let (st, r) = region(c"host", 4096);
    assert_eq!(st, ZCNET_OK);
    assert_eq!(last_error(), "", "a success clears the message");
    let mut out = ptr::null_mut();
    // SAFETY: a NULL kind is what is tested; `out` is a local.
    let st = unsafe { zcnet_region_new(ptr::null(), 4096, &mut out) };
    assert_fails(st, ZCNET_E_INVALID, &["zcnet_region_new", "kind is NULL"]);
    assert!(out.is_null(), "*out is NULL after a failure");
    // SAFETY: a NULL out is what is tested; the kind is a literal.
    let st = unsafe { zcnet_region_new(c"host".as_ptr(), 4096, ptr::null_mut()) };
    assert_fails(st, ZCNET_E_INVALID, &["out is NULL"]);
    // SAFETY: NULL region, then NULL len: each is checked before use.
    let st = unsafe { zcnet_region_len(ptr::null(), &mut 0) };
    assert_fails(st, ZCNET_E_INVALID, &["zcnet_region_len", "region is NULL"]);
    // SAFETY: `r` is live; NULL out-pointers are what is tested.
    let st = unsafe { zcnet_region_device(r, ptr::null_mut()) };
    assert_fails(st, ZCNET_E_INVALID, &["ordinal is NULL"]);
    // SAFETY: as above.
    let st = unsafe { zcnet_region_note(r, ptr::null_mut()) };
    assert_fails(st, ZCNET_E_INVALID, &["note is NULL"]);

    let (st, tx) = connect(ptr::null(), None, ptr::null_mut());
    assert_fails(
        st,
        ZCNET_E_INVALID,
        &["zcnet_sender_connect", "addr is NULL"],
    );
    assert!(tx.is_null());
    // SAFETY: NULL handles and out-pointers are what is tested.
    let st = unsafe { zcnet_sender_buffer(ptr::null_mut(), ptr::null_mut()) };
    assert_fails(st, ZCNET_E_INVALID, &["zcnet_sender_buffer", "is NULL"]);
    // SAFETY: as above.
    let st = unsafe { zcnet_sender_send(ptr::null_mut(), 0, 1) };
    assert_fails(st, ZCNET_E_INVALID, &["zcnet_sender_send", "tx is NULL"]);
    // SAFETY: as above.
    let st = unsafe { zcnet_sender_write(ptr::null_mut(), 0, ptr::null(), 0, &mut 0) };
    assert_fails(st, ZCNET_E_INVALID, &["tx is NULL"]);
    // SAFETY: as above.
    let st = unsafe { zcnet_receiver_release(ptr::null_mut(), 1) };
    assert_fails(
        st,
        ZCNET_E_INVALID,
        &["zcnet_receiver_release", "rx is NULL"],
    );

    // SAFETY: as above.
    let st = unsafe { crate::rx::zcnet_receiver_copy_to_device(ptr::null_mut(), 1, r, 0) };
    assert_fails(
        st,
        ZCNET_E_INVALID,
        &["zcnet_receiver_copy_to_device", "rx is NULL"],
    );
    // SAFETY: as above.
    let st = unsafe { crate::rx::zcnet_receiver_device_wait(ptr::null_mut()) };
    assert_fails(
        st,
        ZCNET_E_INVALID,
        &["zcnet_receiver_device_wait", "rx is NULL"],
    );
    let mut byte = 0u8;
    // SAFETY: NULL region, then NULL out with a length: each is checked before use.
    let st = unsafe { crate::region::zcnet_region_read(ptr::null(), 0, &mut byte, 1) };
    assert_fails(
        st,
        ZCNET_E_INVALID,
        &["zcnet_region_read", "region is NULL"],
    );
    // SAFETY: `r` is live (4096 B of host memory); NULL out is what is tested.
    let st = unsafe { crate::region::zcnet_region_read(r, 0, ptr::null_mut(), 1) };
    assert_fails(st, ZCNET_E_INVALID, &["out is NULL"]);
    // SAFETY: `r` is live; one byte past its end is what is tested.
    let st = unsafe { crate::region::zcnet_region_read(r, 4096, &mut byte, 1) };
    assert_fails(st, ZCNET_E_INVALID, &["inside the region"]);
    // SAFETY: `r` is live, `byte` a local: host memory is read through a sender's buffers.
    let st = unsafe { crate::region::zcnet_region_read(r, 0, &mut byte, 1) };
    assert_fails(st, ZCNET_E_INVALID, &["on host memory"]);

    let (rx, _) = listening_receiver(&zcnet_rx_config::default());
    // SAFETY: `rx` is live on this thread; NULL region is what is tested.
    let st = unsafe { crate::rx::zcnet_receiver_copy_to_device(rx, 1, ptr::null(), 0) };
    assert_fails(st, ZCNET_E_INVALID, &["region is NULL"]);
    // SAFETY: `rx` and `r` are live; `r` is host memory, which is what is tested.
    let st = unsafe { crate::rx::zcnet_receiver_copy_to_device(rx, 1, r, 0) };
    assert_fails(st, ZCNET_E_INVALID, &["host memory"]);
    let mut n = 7usize;
    // SAFETY: `rx` is live on this thread; NULL events is what is tested; `n` is a local.
    let st = unsafe { zcnet_receiver_poll(rx, ptr::null_mut(), 4, 0, &mut n) };
    assert_fails(st, ZCNET_E_INVALID, &["zcnet_receiver_poll", "events"]);
    assert_eq!(n, 0, "*n is 0 after a failure");
    let mut evs = [zcnet_rx_event::default(); 2];
    // SAFETY: `evs` holds 2 events; cap 0 is what is tested.
    let st = unsafe { zcnet_receiver_poll(rx, evs.as_mut_ptr(), 0, 0, &mut n) };
    assert_fails(st, ZCNET_E_INVALID, &["cap is 0"]);
    // SAFETY: NULL frees are no-ops by contract.
    unsafe {
        crate::zcnet_string_free(ptr::null_mut());
        crate::tx::zcnet_sender_free(ptr::null_mut());
    }
    free_receiver(ptr::null_mut());
    free_region(ptr::null_mut());
    free_receiver(rx);
    free_region(r);
}

#[zcnet_testkit::test]
fn strings_must_be_utf8() {
    let bad = CString::new(b"ho\xffst".to_vec()).unwrap();
    let (st, r) = region(&bad, 4096);
    assert_fails(
        st,
        ZCNET_E_INVALID,
        &["zcnet_region_new", "kind is not valid UTF-8"],
    );
    assert!(r.is_null());
    let addr = CString::new(b"127.0.0.1:\xff1".to_vec()).unwrap();
    let (st, _) = connect(addr.as_ptr(), None, ptr::null_mut());
    assert_fails(st, ZCNET_E_INVALID, &["addr is not valid UTF-8"]);
}

#[zcnet_testkit::test]
fn bad_addresses_and_kinds_are_refused() {
    for addr in [
        c"nonsense",
        c"127.0.0.1",
        c"localhost:5201",
        c"[::1]",
        c"1.2.3.4:99999",
    ] {
        let (st, tx) = connect(addr.as_ptr(), None, ptr::null_mut());
        let given = addr.to_str().unwrap();
        assert_fails(st, ZCNET_E_INVALID, &["bad address", given, "HOST:PORT"]);
        assert!(tx.is_null());
    }
    let (st, _) = region(c"floppy", 4096);
    assert_fails(
        st,
        ZCNET_E_INVALID,
        &["unknown memory kind 'floppy'", "hugepage"],
    );
    let (st, _) = region(c"host", 0);
    assert_fails(st, ZCNET_E_INVALID, &["len is 0"]);
    let cfg = zcnet_tx_config {
        mode: 99,
        ..Default::default()
    };
    let (st, _) = connect(c"127.0.0.1:9".as_ptr(), Some(&cfg), ptr::null_mut());
    assert_fails(st, ZCNET_E_INVALID, &["cfg->mode 99 is no ZCNET_TX_* mode"]);
}

#[zcnet_testkit::test]
fn nobody_listening_is_a_connection_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr = CString::new(format!("127.0.0.1:{port}")).unwrap();
    let (st, tx) = connect(addr.as_ptr(), None, ptr::null_mut());
    assert_fails(st, ZCNET_E_CONNECTION, &["connection refused by 127.0.0.1"]);
    assert!(tx.is_null());
}

#[zcnet_testkit::test]
fn a_panic_is_caught_and_named() {
    let st = call("zcnet_test_panic", || panic!("boom {}", 42));
    assert_fails(
        st,
        ZCNET_E_PANIC,
        &["zcnet_test_panic", "panic inside zcnet", "boom 42"],
    );
    let st = call("zcnet_test_panic", || std::panic::panic_any(7u8));
    assert_fails(st, ZCNET_E_PANIC, &["(no message)"]);
    // The thread goes on working, and the next success clears the message.
    assert_eq!(call("zcnet_test_ok", || Ok(())), ZCNET_OK);
    assert_eq!(last_error(), "");
}

#[zcnet_testkit::test]
fn rx_config_is_checked() {
    let mut cfg = zcnet_rx_config {
        mode: 42,
        ..Default::default()
    };
    let mut rx = ptr::null_mut();
    // SAFETY: `cfg` is a live config and `rx` a local.
    let st = unsafe { zcnet_receiver_new(&cfg, &mut rx) };
    assert_fails(st, ZCNET_E_INVALID, &["cfg->mode 42 is no ZCNET_RX_* mode"]);
    assert!(rx.is_null());
    cfg.mode = 0;
    cfg.flags = 0x80;
    let r = crate::rx::rx_config(Some(&cfg));
    assert!(matches!(r, Err(crate::error::Failure::Invalid(m)) if m.contains("unknown bits")));
    cfg.flags = ZCNET_RX_QUEUE;
    cfg.queue = 3;
    cfg.iface = [b'x' as c_char; 16];
    let r = crate::rx::rx_config(Some(&cfg));
    assert!(matches!(r, Err(crate::error::Failure::Invalid(m)) if m.contains("NUL-terminated")));
    cfg.iface = [0; 16];
    cfg.iface[..2].copy_from_slice(&[b'l' as c_char, b'o' as c_char]);
    let r = crate::rx::rx_config(Some(&cfg)).unwrap();
    assert_eq!(
        (r.iface.as_deref(), r.queue, r.bundle),
        (Some("lo"), Some(3), true)
    );
    let d = crate::rx::rx_config(None).unwrap();
    assert_eq!((d.iface, d.queue, d.buffers), (None, None, 64));
}

#[zcnet_testkit::test]
fn tx_config_zero_means_defaults() {
    let t = crate::tx::tx_config(Some(&zcnet_tx_config::default())).unwrap();
    assert_eq!(
        (t.mode, t.inflight, t.buf_size),
        (zcnet::TxMode::Auto, 8, 64 << 10)
    );
    let cfg = zcnet_tx_config {
        mode: ZCNET_TX_DEVMEM,
        inflight: 2,
        buf_size: 4096,
        stall_timeout_ms: 1500,
    };
    let t = crate::tx::tx_config(Some(&cfg)).unwrap();
    assert_eq!(
        (t.mode, t.inflight, t.buf_size),
        (zcnet::TxMode::Devmem, 2, 4096)
    );
    assert_eq!(t.stall_timeout, std::time::Duration::from_millis(1500));
    // A send's length is 32 bits: a larger buffer is refused, not wrapped.
    let big = zcnet_tx_config {
        buf_size: u64::from(u32::MAX) + 1,
        ..Default::default()
    };
    let r = crate::tx::tx_config(Some(&big));
    assert!(
        matches!(r, Err(crate::error::Failure::Invalid(m)) if m.contains("at most 4294967295 B"))
    );
    // A region no address space holds is refused, not a wrapped length.
    let huge = zcnet_tx_config {
        inflight: u32::MAX,
        buf_size: u64::from(u32::MAX),
        ..Default::default()
    };
    let mut len = 7usize;
    // SAFETY: `huge` and `len` are locals.
    let st = unsafe { crate::tx::zcnet_sender_region_len(&huge, &mut len) };
    assert_fails(
        st,
        ZCNET_E_INVALID,
        &["more memory than an address space holds"],
    );
}

#[zcnet_testkit::test]
fn a_receiver_refuses_other_threads() {
    let (rx, _) = listening_receiver(&zcnet_rx_config::default());
    let addr = rx as usize;
    let msgs = std::thread::spawn(move || {
        let rx = addr as *mut zcnet_receiver;
        // SAFETY: `rx` is live (the owner thread waits for this one); using it from here is
        // what is tested and is refused before anything is touched.
        let st = unsafe { zcnet_receiver_release(rx, 1) };
        let on_call = (st, last_error());
        free_receiver(rx);
        (on_call, last_error())
    })
    .join()
    .unwrap();
    let ((st, msg), free_msg) = msgs;
    assert_eq!(st, ZCNET_E_INVALID);
    assert!(msg.contains("another thread"), "{msg}");
    assert!(free_msg.contains("leaked, not freed"), "{free_msg}");
    // Still alive and usable on its own thread; freed here for real.
    // SAFETY: `rx` is live on this thread.
    let st = unsafe { zcnet_receiver_release(rx, 1) };
    assert_fails(st, ZCNET_E_INVALID, &["buffer 1 is not lent"]);
    free_receiver(rx);
}

#[zcnet_testkit::test]
fn a_region_note_and_device() {
    let (st, r) = region(c"host", 10_000);
    assert_eq!(st, ZCNET_OK, "{}", last_error());
    let (mut len, mut dev, mut note) = (0usize, 0i32, c"x".as_ptr());
    // SAFETY: `r` is live; the out-pointers are locals.
    unsafe {
        assert_eq!(zcnet_region_len(r, &mut len), ZCNET_OK);
        assert_eq!(zcnet_region_device(r, &mut dev), ZCNET_OK);
        assert_eq!(zcnet_region_note(r, &mut note), ZCNET_OK);
    }
    assert_eq!((len % 4096, len >= 10_000, dev), (0, true, -1));
    assert!(note.is_null());
    free_region(r);
}

/// A library refusal reaches C in the ABI's words: the field that carries the fix out, not the
/// library's Rust name; `zcnet_last_remedy()` holds the remedy alone, and a success clears both.
#[zcnet_testkit::test]
fn a_refusal_names_the_abis_fields_and_its_remedy_is_apart() {
    let cfg = zcnet_rx_config {
        mode: crate::rx::ZCNET_RX_ZCRX,
        ..Default::default()
    };
    let mut rx = ptr::null_mut();
    // SAFETY: `cfg` is a live config and `rx` a local.
    let st = unsafe { zcnet_receiver_new(&cfg, &mut rx) };
    assert!(rx.is_null());
    assert_ne!(st, ZCNET_OK);
    let msg = crate::error::last_error_string();
    let remedy = crate::error::last_remedy_string();
    assert!(msg.contains("zcnet_rx_config.iface"), "{msg}");
    assert!(!msg.contains("RxConfig::"), "{msg}");
    assert!(remedy.contains("set zcnet_rx_config.iface"), "{remedy}");
    assert!(msg.ends_with(&remedy), "{msg} / {remedy}");
    // SAFETY: a static string from the library.
    let c_remedy = unsafe { std::ffi::CStr::from_ptr(crate::zcnet_last_remedy()) };
    assert_eq!(c_remedy.to_string_lossy(), remedy);
    // A call that succeeds clears both.
    let mut len = 0usize;
    // SAFETY: a NULL config means the defaults; `len` is a local.
    let st = unsafe { crate::tx::zcnet_sender_region_len(ptr::null(), &mut len) };
    assert_eq!(st, ZCNET_OK);
    assert_eq!(crate::error::last_remedy_string(), "");
    assert_eq!(crate::error::last_error_string(), "");
}
