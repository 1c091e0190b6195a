//! io_uring zero-copy receive into a dma-buf area (`RxMode::Zcrx` with `RxConfig::dmabuf`) on a
//! device that cannot do it (veth here: no queue-management ops): the kernel checks the device before the
//! area, so whatever the fd (`/dev/null`, a memfd: not dma-bufs), the answer is `EOPNOTSUPP`,
//! reported in one line with the reason and the fix; a failed construction leaves no fd open
//! and keeps no reference to the caller's dma-buf. The data path (device fragments, refill)
//! cannot run here: it is unit-tested (crates/zcnet/src/rx/zcrx.rs, crates/zcnet-sys/src/zcrx/).
//! Lab tests need root and skip with a printed reason otherwise.
//!
//! Every test holds `SERIAL`, so the fd counts are taken while no other test of this binary
//! opens or closes anything.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use common::{in_ns, open_fds, serial, veth_lab};

use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;

use zcnet::rx::{Receiver, RxConfig, RxMode};
use zcnet::Error;

fn dev_null() -> Arc<OwnedFd> {
    Arc::new(std::fs::File::open("/dev/null").unwrap().into())
}

/// A memfd of `len` bytes: not a dma-buf, but with a size, as a GPU's dma-buf would have.
fn memfd(len: i64) -> Arc<OwnedFd> {
    // SAFETY: the name is a NUL-terminated literal; memfd_create only reads it.
    let fd = unsafe { libc::memfd_create(c"zcnet-zcrx-dmabuf".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: memfd_create returned a fresh fd that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ftruncate takes an open fd and an integer; it touches no memory of ours.
    let r = unsafe { libc::ftruncate(std::os::fd::AsRawFd::as_raw_fd(&fd), len) };
    assert_eq!(r, 0, "ftruncate: {}", std::io::Error::last_os_error());
    Arc::new(fd)
}

fn cfg(dmabuf: &Arc<OwnedFd>) -> RxConfig {
    let mut c = RxConfig::new(RxMode::Zcrx);
    c.iface = Some("vB".into());
    c.dmabuf = Some(Arc::clone(dmabuf));
    c
}

fn refused(c: &RxConfig) -> Error {
    match Receiver::new(c) {
        Ok(rx) => panic!("{} accepted on {:?}: mode {}", c.mode, c.iface, rx.mode()),
        Err(e) => e,
    }
}

fn errno_of(e: &Error) -> Option<i32> {
    match e {
        Error::Unsupported { source, .. } | Error::Io { source, .. } => source.raw_os_error(),
        _ => None,
    }
}

#[zcnet_testkit::test]
fn zcrx_with_a_dmabuf_on_veth_is_refused_with_the_errno_and_the_fix() {
    let _g = serial();
    let (_lab, p) = veth_lab();
    let results = in_ns(&p.b, || {
        let mut out = Vec::new();
        for (what, fd) in [("/dev/null", dev_null()), ("memfd", memfd(4 << 20))] {
            let c = cfg(&fd);
            let e = refused(&c);
            // Warm-up done (the first failure may open lazily kept fds); count the rest.
            let before = open_fds();
            for _ in 0..16 {
                let _ = refused(&c);
            }
            let leaked = open_fds().saturating_sub(before);
            drop(c);
            out.push((what, e, leaked, Arc::strong_count(&fd)));
        }
        out
    });
    for (what, e, leaked, refs) in results {
        let msg = e.to_string();
        eprintln!("zcrx into a dma-buf ({what}) on veth: {msg}");
        assert!(matches!(e, Error::Unsupported { .. }), "{what}: {e:?}");
        assert_eq!(errno_of(&e), Some(libc::EOPNOTSUPP), "{what}: {msg}");
        for want in [
            "zero-copy receive (zcrx) into a dma-buf on vB queue 0",
            "Operation not supported",
            "queue-management ops or header split",
            "exporter cannot attach",
            "mlx5, bnxt, gve, fbnic",
            "nic::NicGuard::apply",
            "staging (RxMode::Auto)",
        ] {
            assert!(msg.contains(want), "{what}: missing '{want}' in: {msg}");
        }
        assert!(!msg.contains('\n'), "one line: {msg}");
        assert_eq!(
            leaked, 0,
            "{what}: 16 failed constructions left {leaked} fd(s) open"
        );
        assert_eq!(
            refs, 1,
            "{what}: the backend kept a reference to the caller's dma-buf"
        );
    }
}

#[zcnet_testkit::test]
fn zcrx_with_a_dmabuf_needs_an_interface() {
    // Without an interface there is no queue to register: refused before anything is opened.
    let _g = serial();
    let fd = memfd(1 << 20);
    let mut c = cfg(&fd);
    c.iface = None;
    let before = open_fds();
    let e = refused(&c);
    assert_eq!(errno_of(&e), Some(libc::EINVAL), "{e}");
    assert!(e.to_string().contains("RxConfig::iface"), "{e}");
    assert_eq!(open_fds(), before);
}

#[zcnet_testkit::test]
fn auto_on_veth_ignores_the_dmabuf_and_receives_into_host_memory() {
    // `auto` never chooses device memory: its zcrx attempt is the host-memory one (refused on
    // veth as before), and what it takes is a host backend.
    let _g = serial();
    let (_lab, p) = veth_lab();
    let fd = memfd(4 << 20);
    let (mode, fallbacks) = in_ns(&p.b, || {
        let mut c = cfg(&fd);
        c.mode = RxMode::Auto;
        c.area_len = 4 << 20;
        let rx = Receiver::new(&c).unwrap();
        (rx.mode(), rx.fallbacks().to_vec())
    });
    assert_ne!(mode, RxMode::Zcrx);
    assert_eq!(fallbacks[0].tried, RxMode::Zcrx);
    assert!(
        !fallbacks[0].reason.contains("dma-buf"),
        "auto tried a dma-buf area: {}",
        fallbacks[0].reason
    );
    assert_eq!(Arc::strong_count(&fd), 1);
}

zcnet_testkit::main!();
