//! `--tx devmem` refused for real: without a dma-buf (host memory has none here: no
//! /dev/udmabuf), on a UDP socket, and by the kernel's bind-tx on veth and lo ("Driver does not
//! support netmem TX", net/core/netdev-genl.c). Every refusal is one line with the errno and the fix, and
//! leaves no fd open (the socket handed over is closed, the binding's netlink socket too).
//! Lab tests need root and skip with a printed reason otherwise; the lab deletes its
//! namespaces on every exit path (drop, also when a test panics).
//!
//! Every test holds `SERIAL`, so the fd counts are taken while no other test of this binary
//! opens or closes anything.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use common::{in_ns, open_fds, serial, veth_lab};

use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::OwnedFd;
use std::sync::Arc;

use zcnet::tx::region_len;
use zcnet::{Error, Region, Sender, Socket, TxConfig, TxMode};

fn cfg(dmabuf: Option<&Arc<OwnedFd>>, iface: Option<&str>) -> TxConfig {
    let mut c = TxConfig::new(TxMode::Devmem);
    c.inflight = 4;
    c.dmabuf = dmabuf.cloned();
    c.iface = iface.map(str::to_string);
    c
}

/// `Sender::new` on a fresh connection to `listener` (accepted and closed at once), which must
/// fail.
fn refused(listener: &TcpListener, c: &TxConfig) -> Error {
    let s = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    drop(listener.accept().unwrap());
    let region = Region::anonymous(region_len(c)).unwrap();
    match Sender::new(Socket::from(s), region, c) {
        Ok(tx) => panic!("devmem accepted: {tx:?}"),
        Err(e) => e,
    }
}

/// Fails `n` times after a warm-up; returns how many more fds are open than before.
fn fds_leaked_by_failures(listener: &TcpListener, c: &TxConfig, n: usize) -> usize {
    let _ = refused(listener, c);
    let before = open_fds();
    for _ in 0..n {
        let _ = refused(listener, c);
    }
    open_fds().saturating_sub(before)
}

fn errno_of(e: &Error) -> Option<i32> {
    match e {
        Error::Unsupported { source, .. } | Error::Io { source, .. } => source.raw_os_error(),
        _ => None,
    }
}

fn dev_null() -> Arc<OwnedFd> {
    Arc::new(std::fs::File::open("/dev/null").unwrap().into())
}

fn assert_no_dmabuf(e: &Error) {
    let msg = e.to_string();
    assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
    assert_eq!(errno_of(e), Some(libc::EINVAL), "{msg}");
    for want in [
        "TxMode::Devmem",
        "without a dma-buf",
        "MemoryKind::Cuda",
        "udmabuf",
        "TxMode::MsgZerocopy",
    ] {
        assert!(msg.contains(want), "missing '{want}' in: {msg}");
    }
    if !std::path::Path::new("/dev/udmabuf").exists() {
        assert!(msg.contains("CONFIG_UDMABUF off"), "{msg}");
    }
    assert!(!msg.contains('\n'), "one line: {msg}");
}

#[zcnet_testkit::test]
fn without_a_dmabuf_host_memory_is_refused_in_one_line() {
    let _g = serial();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = cfg(None, None);
    let e = refused(&l, &c);
    eprintln!("devmem without a dma-buf: {e}");
    assert_no_dmabuf(&e);
    assert_eq!(fds_leaked_by_failures(&l, &c, 16), 0);
}

#[zcnet_testkit::test]
fn udp_is_refused_before_anything_else() {
    let _g = serial();
    let before = open_fds();
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.connect(rx.local_addr().unwrap()).unwrap();
    let c = cfg(Some(&dev_null()), None);
    let region = Region::anonymous(region_len(&c)).unwrap();
    let e = Sender::new(Socket::from(s), region, &c).unwrap_err();
    let msg = e.to_string();
    assert_eq!(errno_of(&e), Some(libc::EPROTONOSUPPORT), "{msg}");
    assert!(
        msg.contains("TCP only") && msg.contains("TxMode::MsgZerocopy"),
        "{msg}"
    );
    drop((rx, c));
    assert_eq!(open_fds(), before);
}

#[zcnet_testkit::test]
fn an_unknown_interface_is_named() {
    let _g = serial();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let e = refused(&l, &cfg(Some(&dev_null()), Some("zcnet-no-such-if")));
    assert!(
        matches!(&e, Error::UnknownInterface { given } if given == "zcnet-no-such-if"),
        "{e:?}"
    );
}

/// The kernel's refusal of bind-tx on `iface` (chosen, or found from the socket when `None`),
/// with `/dev/null` as the dma-buf: bind-tx checks the device (`netmem_tx`) before the fd.
fn assert_bind_refused(l: &TcpListener, iface: Option<&str>, expect: &str) {
    let null = dev_null();
    let c = cfg(Some(&null), iface);
    let e = refused(l, &c);
    let msg = e.to_string();
    eprintln!("devmem on {expect}: {msg}");
    assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
    assert_eq!(errno_of(&e), Some(libc::EOPNOTSUPP), "{msg}");
    let on = format!("devmem TCP transmit on {expect}");
    for want in [
        on.as_str(),
        "kernel: Driver does not support netmem TX",
        "Operation not supported",
        "no netmem TX",
        "mlx5, bnxt, gve",
        "TxMode::MsgZerocopy",
    ] {
        assert!(msg.contains(want), "missing '{want}' in: {msg}");
    }
    assert!(!msg.contains('\n'), "one line: {msg}");
    assert_eq!(
        fds_leaked_by_failures(l, &c, 16),
        0,
        "a refused devmem sender left fds open"
    );
    drop(c);
    assert_eq!(
        Arc::strong_count(&null),
        1,
        "the backend kept a reference to the caller's dma-buf"
    );
}

#[zcnet_testkit::test]
fn bind_tx_on_veth_is_refused_with_the_kernels_words() {
    let _g = serial();
    let (_lab, p) = veth_lab();
    // The receiver listens in B; the sender connects from A over the veth pair.
    let l = in_ns(&p.b, || {
        TcpListener::bind(SocketAddr::new(p.b_addr, 0)).unwrap()
    });
    in_ns(&p.a, || {
        // No dma-buf: the same one-line refusal as outside the lab.
        assert_no_dmabuf(&refused(&l, &cfg(None, None)));
        // The interface found from the socket (10.10.0.1 is on vA), and named explicitly.
        assert_bind_refused(&l, None, "vA");
        assert_bind_refused(&l, Some("vA"), "vA");
        // lo refuses too.
        assert_bind_refused(&l, Some("lo"), "lo");
    });
}

zcnet_testkit::main!();
