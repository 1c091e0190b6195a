//! The zero-copy receive backends on a machine whose devices refuse them (veth here: no
//! queue-management ops, no header split, no dma-buf binding): an explicit `zcrx`/`devmem` fails with the kernel's
//! errno, the reason and the fix; `auto` falls back to `uring`, says why, and still delivers
//! every byte; a failed construction leaves no fd behind. Lab tests need root and skip with a
//! printed reason otherwise.
//!
//! Every test holds `SERIAL`, so the fd counts are taken while no other test of this binary
//! opens or closes anything.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use common::{in_ns, open_fds, serial, veth_lab};

use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;
use zcnet::rx::{Receiver, RxConfig, RxMode};
use zcnet::{Error, Pattern};
use zcnet_lab as lab;

fn cfg(mode: RxMode, iface: Option<&str>) -> RxConfig {
    let mut c = RxConfig::new(mode);
    c.iface = iface.map(str::to_string);
    c.area_len = 4 << 20;
    c
}

/// The error of a construction that must fail (a receiver is not Debug-printable on success).
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

/// Constructs `c` (failing) `n` times after a warm-up; returns how many more fds are open.
fn fds_leaked_by_failures(c: &RxConfig, n: usize) -> usize {
    let _ = refused(c);
    let before = open_fds();
    for _ in 0..n {
        let _ = refused(c);
    }
    open_fds().saturating_sub(before)
}

#[zcnet_testkit::test]
fn zcrx_on_veth_is_refused_with_the_errno_and_the_fix() {
    let _g = serial();
    let (_lab, p) = veth_lab();
    let (e, leaked) = in_ns(&p.b, || {
        let c = cfg(RxMode::Zcrx, Some("vB"));
        let e = refused(&c);
        (e, fds_leaked_by_failures(&c, 16))
    });
    let msg = e.to_string();
    eprintln!("zcrx on veth: {msg}");
    assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
    assert_eq!(errno_of(&e), Some(libc::EOPNOTSUPP), "{msg}");
    for want in [
        "zcrx",
        "vB queue 0",
        "Operation not supported",
        "queue-management ops or header split",
        "mlx5, bnxt, gve, fbnic",
        "nic::NicGuard::apply",
        "RxMode::Uring",
    ] {
        assert!(msg.contains(want), "missing '{want}' in: {msg}");
    }
    assert!(!msg.contains('\n'), "one line: {msg}");
    assert_eq!(
        leaked, 0,
        "a failed zcrx construction left {leaked} fd(s) open"
    );
}

#[zcnet_testkit::test]
fn zcrx_queue_choice_reaches_the_kernel() {
    // An explicit queue past veth's only RX queue: the kernel still refuses the device first
    // (no DMA device), so the errno stays EOPNOTSUPP and the message names the queue asked for.
    let _g = serial();
    let (_lab, p) = veth_lab();
    let e = in_ns(&p.b, || {
        let mut c = cfg(RxMode::Zcrx, Some("vB"));
        c.queue = Some(7);
        refused(&c)
    });
    assert_eq!(errno_of(&e), Some(libc::EOPNOTSUPP), "{e}");
    assert!(e.to_string().contains("vB queue 7"), "{e}");
}

#[zcnet_testkit::test]
fn devmem_on_veth_names_the_device_refusal() {
    let _g = serial();
    let (_lab, p) = veth_lab();
    // No dma-buf given: making a udmabuf fails here (no /dev/udmabuf), but the device's
    // refusal is the one that matters and the one reported.
    let (e, leaked) = in_ns(&p.b, || {
        let c = cfg(RxMode::Devmem, Some("vB"));
        let e = refused(&c);
        (e, fds_leaked_by_failures(&c, 16))
    });
    let msg = e.to_string();
    eprintln!("devmem on veth: {msg}");
    assert_eq!(errno_of(&e), Some(libc::EOPNOTSUPP), "{msg}");
    for want in [
        "devmem",
        "vB queue 0",
        "device cannot take a dma-buf binding",
        "Operation not supported",
        "RxMode::Uring",
    ] {
        assert!(msg.contains(want), "missing '{want}' in: {msg}");
    }
    assert!(!msg.contains("no dma-buf"), "device refusal first: {msg}");
    assert_eq!(
        leaked, 0,
        "a failed devmem construction left {leaked} fd(s) open"
    );

    // With a dma-buf given (any fd: the device is checked first), the bind itself is refused;
    // the caller's fd stays open and nothing else does.
    let (e, leaked, still_open) = in_ns(&p.b, || {
        let fd: std::os::fd::OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
        let fd = Arc::new(fd);
        let mut c = cfg(RxMode::Devmem, Some("vB"));
        c.dmabuf = Some(Arc::clone(&fd));
        let e = refused(&c);
        let leaked = fds_leaked_by_failures(&c, 16);
        drop(c);
        (e, leaked, Arc::strong_count(&fd) == 1)
    });
    assert_eq!(errno_of(&e), Some(libc::EOPNOTSUPP), "{e}");
    assert!(e.to_string().contains("device cannot take"), "{e}");
    assert_eq!(leaked, 0);
    assert!(
        still_open,
        "the backend kept a reference to the caller's dma-buf"
    );
}

#[zcnet_testkit::test]
fn devmem_checks_the_interface_before_making_a_dmabuf() {
    // An unknown interface is reported as such, and no udmabuf (nor anything else) is left.
    let _g = serial();
    let before = open_fds();
    let e = refused(&cfg(RxMode::Devmem, Some("zcnet-no-such-if")));
    assert!(
        matches!(&e, Error::UnknownInterface { given } if given == "zcnet-no-such-if"),
        "{e:?}"
    );
    assert_eq!(open_fds(), before);
}

#[zcnet_testkit::test]
fn unknown_interfaces_and_missing_ones_are_clear() {
    let _g = serial();
    for mode in [RxMode::Zcrx, RxMode::Devmem] {
        let e = refused(&cfg(mode, Some("zcnet-no-such-if")));
        assert!(
            matches!(&e, Error::UnknownInterface { given } if given == "zcnet-no-such-if"),
            "{mode}: {e:?}"
        );
        assert!(e.to_string().contains("ip link"), "{e}");

        let e = refused(&cfg(mode, None));
        let msg = e.to_string();
        eprintln!("{mode} without an interface: {msg}");
        assert_eq!(errno_of(&e), Some(libc::EINVAL), "{msg}");
        assert!(msg.contains(mode.name()), "{msg}");
        // The library names its field; the command line maps it to its flag.
        assert!(msg.contains("RxConfig::iface"), "{msg}");
        assert!(!msg.contains("--iface"), "{msg}");
    }
    // auto with an unknown interface: zcrx is refused for that reason, uring is taken.
    let rx = Receiver::new(&cfg(RxMode::Auto, Some("zcnet-no-such-if"))).unwrap();
    assert_ne!(rx.mode(), RxMode::Zcrx);
    assert_eq!(rx.fallbacks()[0].tried, RxMode::Zcrx);
    assert!(
        rx.fallbacks()[0]
            .reason
            .contains("no interface named 'zcnet-no-such-if'"),
        "{:?}",
        rx.fallbacks()
    );
}

#[zcnet_testkit::test]
fn auto_on_veth_falls_back_to_uring_and_delivers_everything() {
    let _g = serial();
    let (_lab, p) = veth_lab();
    const BYTES: u64 = 24 << 20;
    let seed = 0x5eed_2024;
    let a_ns = p.a.clone();
    let (mode, fallbacks, report) = in_ns(&p.b, || {
        let mut rx = Receiver::new(&cfg(RxMode::Auto, Some("vB"))).unwrap();
        let fallbacks: Vec<_> = rx.fallbacks().to_vec();
        let l = zcnet::net::listen_tcp(SocketAddr::new(p.b_addr, 0)).unwrap();
        let addr = l.local_addr().unwrap();
        let sender = std::thread::spawn(move || {
            lab::enter(&a_ns).unwrap();
            let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
            let pat = Pattern::new(seed);
            let mut buf = vec![0u8; 100_000];
            let mut off = 0u64;
            while off < BYTES {
                let n = buf.len().min((BYTES - off) as usize);
                pat.fill(off, &mut buf[..n]);
                s.write_all(&buf[..n]).unwrap();
                off += n as u64;
            }
            s.shutdown(Shutdown::Write).unwrap();
        });
        let (stream, _) = l.accept().unwrap();
        let report =
            zcnet::rx::receive_stream(&mut rx, stream, Some(Pattern::new(seed)), None).unwrap();
        sender.join().unwrap();
        assert_eq!(rx.held(), 0, "every buffer given back");
        (rx.mode(), fallbacks, report)
    });
    assert_eq!(mode, RxMode::Uring);
    assert_eq!(fallbacks[0].tried, RxMode::Zcrx);
    let why = &fallbacks[0].reason;
    assert!(why.contains("Operation not supported"), "{why}");
    assert!(why.contains("RxMode::Uring"), "{why}");
    assert_eq!(report.recv.bytes, BYTES);
    assert_eq!(report.stats.bytes, BYTES);
    assert_eq!(report.stats.copied_bytes, BYTES, "uring copies");
    assert_eq!(report.stats.zerocopy_bytes, 0);
    assert_eq!(report.device_bytes, 0);
}

zcnet_testkit::main!();
