//! A receiver on a NIC queue through the C API: `zcnet_receiver_new_in` (a region's dma-buf
//! bound by devmem or registered as the zcrx area) refuses what cannot work before it takes the
//! region, and `zcnet_receiver_read` copies a lent buffer's bytes out. The successful binds need
//! a NIC with memory providers: scripts/hw-suite.sh's c-zcrx and c-devmem run them on the
//! software NIC (kmod/zcnic).

use super::loopback::{ok, send_pattern};
use super::*;
use crate::error::zcnet_status::*;
use crate::region::zcnet_region_read;
use crate::rx::*;
use crate::tx::zcnet_tx_config;
use std::time::{Duration, Instant};

/// `zcnet_receiver_new_in` with `cfg` and `region`: the status and the receiver (or NULL).
fn new_in(cfg: &zcnet_rx_config, region: *mut zcnet_region) -> (zcnet_status, *mut zcnet_receiver) {
    let mut out = ptr::null_mut();
    // SAFETY: `cfg` is a live config, `region` NULL or a live region, `out` a local pointer.
    let st = unsafe { zcnet_receiver_new_in(cfg, region, &mut out) };
    (st, out)
}

/// A config for `mode` on interface `iface`.
fn on(mode: u32, iface: &str) -> zcnet_rx_config {
    let mut cfg = zcnet_rx_config {
        mode,
        ..Default::default()
    };
    for (d, s) in cfg.iface.iter_mut().zip(iface.bytes()) {
        *d = s as c_char;
    }
    cfg
}

/// Whether the region is still the caller's: reading it is refused for being host memory,
/// not for having been given away.
fn still_callers(r: *mut zcnet_region) {
    let mut b = [0u8; 8];
    // SAFETY: `r` is a live region; `b` holds 8 writable bytes.
    let st = unsafe { zcnet_region_read(r, 0, b.as_mut_ptr(), b.len()) };
    let msg = last_error();
    assert_eq!(st, ZCNET_E_INVALID, "{msg}");
    assert!(!msg.contains("given to a"), "the region was taken: {msg}");
}

#[zcnet_testkit::test]
fn new_in_refuses_what_cannot_bind_and_keeps_the_region() {
    let (st, host) = region(c"host", 1 << 20);
    ok(st);
    for (cfg, words) in [
        (
            on(ZCNET_RX_URING, "lo"),
            &["cfg->mode is uring", "ZCNET_RX_ZCRX and ZCNET_RX_DEVMEM"][..],
        ),
        (
            on(ZCNET_RX_AUTO, "lo"),
            &["cfg->mode is auto", "zcnet_receiver_new"][..],
        ),
        (on(ZCNET_RX_ZCRX, ""), &["cfg->iface is empty"][..]),
        (
            on(ZCNET_RX_DEVMEM, "lo"),
            &["region is host memory", "\"udmabuf\"", "cuda:N"][..],
        ),
    ] {
        let (st, rx) = new_in(&cfg, host);
        assert_fails(st, ZCNET_E_INVALID, words);
        assert!(rx.is_null());
        assert!(last_error().starts_with("zcnet_receiver_new_in: "));
        still_callers(host);
    }
    let (st, rx) = new_in(&on(ZCNET_RX_ZCRX, "lo"), ptr::null_mut());
    assert_fails(st, ZCNET_E_INVALID, &["region is NULL"]);
    assert!(rx.is_null());
    let mut out = ptr::null_mut();
    // SAFETY: a NULL out-pointer is what is checked; the config and region are live.
    let st = unsafe { zcnet_receiver_new_in(&on(ZCNET_RX_ZCRX, "lo"), host, ptr::null_mut()) };
    assert_fails(st, ZCNET_E_INVALID, &["out is NULL"]);
    // A bad config is refused as zcnet_receiver_new refuses it.
    let mut bad = on(ZCNET_RX_ZCRX, "lo");
    bad.flags = 1 << 7;
    // SAFETY: `bad` and `host` are live, `out` a local.
    let st = unsafe { zcnet_receiver_new_in(&bad, host, &mut out) };
    assert_fails(st, ZCNET_E_INVALID, &["unknown bits"]);
    assert!(out.is_null());
    still_callers(host);
    free_region(host);
}

/// A udmabuf region on lo: the kernel refuses the queue (lo has no queue management), the
/// region stays the caller's. Needs /dev/udmabuf (Linux 7.2's lab guest has it).
#[zcnet_testkit::test]
fn new_in_with_a_udmabuf_on_lo_is_the_kernels_refusal() {
    if !std::path::Path::new("/dev/udmabuf").exists() {
        zcnet_testkit::skip(
            zcnet_testkit::Need::Hardware,
            "no /dev/udmabuf (a kernel without CONFIG_UDMABUF): a \"udmabuf\" region cannot be made",
        );
    }
    let (st, r) = region(c"udmabuf", 1 << 20);
    if st == ZCNET_E_PERMISSION {
        zcnet_testkit::skip(zcnet_testkit::Need::Root, last_error());
    }
    ok(st);
    for mode in [ZCNET_RX_ZCRX, ZCNET_RX_DEVMEM] {
        let (st, rx) = new_in(&on(mode, "lo"), r);
        let msg = last_error();
        assert!(rx.is_null());
        assert_ne!(st, ZCNET_OK);
        assert_ne!(
            st, ZCNET_E_INVALID,
            "a refusal of lo, not of the arguments: {msg}"
        );
        assert!(msg.contains("lo"), "{msg}");
        // Not taken: a second try gets the same refusal, not "given to a receiver".
        let (st2, _) = new_in(&on(mode, "lo"), r);
        assert_eq!(st2, st, "{}", last_error());
    }
    free_region(r);
}

/// `zcnet_receiver_read` of host buffers over loopback: the first `len` bytes as they are; a
/// `len` past the buffer, a buffer not lent and a NULL `out` are refused.
#[zcnet_testkit::test]
fn read_copies_a_lent_host_buffer() {
    let cfg = zcnet_rx_config {
        mode: ZCNET_RX_COPY,
        buffers: 4,
        buf_size: 4096,
        ..Default::default()
    };
    let (rx, port) = listening_receiver(&cfg);
    let total = 100_000u64;
    let sender =
        std::thread::spawn(move || send_pattern(port, zcnet_tx_config::default(), total, 3));
    let mut conn = 0u64;
    // SAFETY: `rx` is live on this thread; `conn` is a local.
    ok(unsafe { zcnet_receiver_accept(rx, &mut conn) });
    let pattern = zcnet::Pattern::new(3);
    let mut evs = [zcnet_rx_event::default(); 4];
    let (mut got, deadline) = (0u64, Instant::now() + Duration::from_secs(60));
    let mut checked_refusals = false;
    'outer: while Instant::now() < deadline {
        let mut n = 0usize;
        // SAFETY: `evs` holds 4 writable events; `n` is a local.
        ok(unsafe { zcnet_receiver_poll(rx, evs.as_mut_ptr(), evs.len(), 100, &mut n) });
        for ev in &evs[..n] {
            match ev.kind {
                ZCNET_RX_DATA => {
                    let mut out = vec![0u8; ev.len as usize];
                    // SAFETY: `rx` is live; `out` holds `ev.len` writable bytes.
                    ok(unsafe { zcnet_receiver_read(rx, ev.buf, out.as_mut_ptr(), out.len()) });
                    pattern.verify(got, &out).expect("the bytes read");
                    if !checked_refusals {
                        checked_refusals = true;
                        let mut more = vec![0u8; out.len() + 1];
                        // SAFETY: `more` holds its length in writable bytes.
                        let st = unsafe {
                            zcnet_receiver_read(rx, ev.buf, more.as_mut_ptr(), more.len())
                        };
                        assert_fails(st, ZCNET_E_INVALID, &["is more than buffer"]);
                        // SAFETY: as above; buffer 9999 was never lent.
                        let st = unsafe { zcnet_receiver_read(rx, 9999, more.as_mut_ptr(), 1) };
                        assert_fails(st, ZCNET_E_INVALID, &["buffer 9999 is not lent"]);
                        // SAFETY: a NULL `out` is what is checked.
                        let st = unsafe { zcnet_receiver_read(rx, ev.buf, ptr::null_mut(), 1) };
                        assert_fails(st, ZCNET_E_INVALID, &["out"]);
                        // A prefix.
                        let mut head = [0u8; 7];
                        // SAFETY: `head` holds 7 writable bytes; the buffer holds more.
                        ok(unsafe { zcnet_receiver_read(rx, ev.buf, head.as_mut_ptr(), 7) });
                        assert_eq!(&head[..], &out[..7.min(out.len())]);
                    }
                    got += ev.len;
                    // SAFETY: `rx` is live; `ev.buf` is lent.
                    ok(unsafe { zcnet_receiver_release(rx, ev.buf) });
                    // Released: no longer readable.
                    // SAFETY: `out` holds its length in writable bytes.
                    let st = unsafe { zcnet_receiver_read(rx, ev.buf, out.as_mut_ptr(), 1) };
                    assert_fails(st, ZCNET_E_INVALID, &["not lent"]);
                }
                ZCNET_RX_EOF => break 'outer,
                _ => panic!("unexpected event {ev:?}"),
            }
        }
    }
    sender.join().expect("the sender");
    assert_eq!(got, total);
    assert!(checked_refusals);
    free_receiver(rx);
}
