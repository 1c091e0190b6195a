//! zcrx without a device (`RxConfig::no_device`, `ZCRX_REG_NODEV`, Linux 7.1+): several
//! loopback connections on one receiver through an area of a few pages (every buffer goes
//! round many times: the refill ring must be flushed), checked byte for byte, and every byte
//! counted as copied. Before 7.1 the kernel refuses the flag (`EINVAL`), which is what the
//! host (6.18) checks; the receiving test runs in the kernel lab (scripts/kernel-lab.sh
//! --kernel 7.2 -- target/debug/deps/zcrx_nodev-*).

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::collections::HashMap;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};
use zcnet::rx::{Receiver, RxConfig, RxEvent, RxMode};
use zcnet::{Error, Pattern};

fn nodev(area_len: usize) -> RxConfig {
    let mut c = RxConfig::new(RxMode::Zcrx);
    c.no_device = true;
    c.area_len = area_len;
    c
}

#[zcnet_testkit::test]
fn nodev_is_refused_with_the_kernels_errno_where_the_kernel_does_not_list_it() {
    zcnet_testkit::require_root("zcrx needs CAP_NET_ADMIN, checked before the flag");
    if zcnet_sys::uring_query::ZcrxCaps::get().nodev() {
        zcnet_testkit::skip(
            zcnet_testkit::Need::KernelVersion,
            "this kernel's zcrx query lists ZCRX_REG_NODEV",
        );
    }
    let e = match Receiver::new(&nodev(1 << 20)) {
        Ok(rx) => panic!(
            "NODEV accepted by a kernel that does not list it: {}",
            rx.mode()
        ),
        Err(e) => e,
    };
    let msg = e.to_string();
    assert!(
        msg.contains("needs ZCRX_REG_NODEV, which this kernel's zcrx query does not list"),
        "{msg}"
    );
    assert!(!msg.contains('\n'), "{msg}");
    match e {
        Error::Unsupported { source, .. } => assert_eq!(source.raw_os_error(), Some(libc::EINVAL)),
        e => panic!("{e:?}"),
    }
}

#[zcnet_testkit::test]
fn nodev_takes_no_interface_and_auto_never_uses_it() {
    let mut c = nodev(1 << 20);
    c.iface = Some("lo".into());
    let e = Receiver::new(&c).err().unwrap();
    assert!(e.is_bad_argument(), "{e}");
    // `auto` ignores the flag: it copies, so it is no zero-copy mechanism to prefer.
    let mut c = nodev(1 << 20);
    c.mode = RxMode::Auto;
    let rx = Receiver::new(&c).unwrap();
    assert_ne!(rx.mode(), RxMode::Zcrx);
}

/// A zcrx receiver without a device on an area of 4 pages (every buffer goes round many times),
/// and a loopback listener to connect to it; skips below Linux 7.1 and without root.
fn small_area_receiver() -> (Receiver, TcpListener) {
    zcnet_testkit::require_kernel(7, 1, "zcrx without a device (ZCRX_REG_NODEV)");
    zcnet_testkit::require_root("zcrx needs CAP_NET_ADMIN");
    let page = zcnet_sys::mem::page_size();
    let rx = Receiver::new(&nodev(4 * page)).unwrap();
    assert_eq!(rx.mode(), RxMode::Zcrx);
    (rx, TcpListener::bind("127.0.0.1:0").unwrap())
}

#[zcnet_testkit::test(timeout = 600)]
fn nodev_receives_several_connections_through_a_small_area() {
    let (mut rx, l) = small_area_receiver();
    let at = l.local_addr().unwrap();
    // Three connections of different lengths and seeds, sent at once.
    let plan = [(1u64, 3 << 20), (2, 1 << 20), (3, 100_000)];
    let mut want = HashMap::new();
    let mut senders = Vec::new();
    for (seed, len) in plan {
        let mut tx = TcpStream::connect(at).unwrap();
        let (sock, _) = l.accept().unwrap();
        let conn = rx.add(sock).unwrap();
        want.insert(conn, (Pattern::new(seed), len as u64, 0u64));
        senders.push(std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 << 10];
            let mut off = 0u64;
            while off < len as u64 {
                let n = buf.len().min((len as u64 - off) as usize);
                Pattern::new(seed).fill(off, &mut buf[..n]);
                tx.write_all(&buf[..n]).unwrap();
                off += n as u64;
            }
        }));
    }
    let mut open = want.len();
    let mut events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    while open > 0 {
        assert!(Instant::now() < deadline, "stalled: {want:?}");
        rx.poll(&mut events, Duration::from_millis(100)).unwrap();
        for ev in events.drain(..) {
            match ev {
                RxEvent::Data(buf) => {
                    assert!(buf.copied(), "NODEV data is copied by the kernel");
                    let (p, _, got) = want.get_mut(&buf.conn()).unwrap();
                    let bytes = rx.bytes(&buf).unwrap();
                    p.verify(*got, bytes).unwrap();
                    *got += bytes.len() as u64;
                }
                RxEvent::Eof(conn) => {
                    let (_, len, got) = want[&conn];
                    assert_eq!(got, len, "connection {conn}");
                    rx.close(conn);
                    open -= 1;
                }
                RxEvent::Failed(conn, e) => panic!("connection {conn}: {e}"),
            }
        }
    }
    for s in senders {
        s.join().unwrap();
    }
    let st = rx.stats();
    let total: u64 = plan.iter().map(|p| p.1 as u64).sum();
    assert_eq!(st.bytes, total, "{st:?}");
    assert_eq!(
        (st.copied_bytes, st.zerocopy_bytes, st.unknown_copy_bytes),
        (total, 0, 0),
        "{st:?}"
    );
}

/// Every buffer of a small area held by the application: the kernel has nowhere to put the
/// data waiting in the socket and nothing to signal, and the loop sleeps on the readiness fd.
/// The buffers dropped from another thread must wake it (else each wait runs into its 5 s
/// bound).
#[zcnet_testkit::test(timeout = 600)]
fn nodev_starving_receiver_is_woken_by_buffers_dropped_elsewhere() {
    use std::os::fd::AsRawFd;
    use zcnet_sys::epoll::{self, Epoll};
    let (mut rx, l) = small_area_receiver();
    let mut tx = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (sock, _) = l.accept().unwrap();
    rx.add(sock).unwrap();
    let mut ep = Epoll::new(4).unwrap();
    ep.add(
        rx.readiness_fd().unwrap().as_raw_fd(),
        1,
        epoll::IN | epoll::ET,
    )
    .unwrap();
    let len = 256u64 << 10;
    let sender = std::thread::spawn(move || {
        let mut buf = vec![0u8; len as usize];
        Pattern::new(9).fill(0, &mut buf);
        tx.write_all(&buf).unwrap();
    });
    let p = Pattern::new(9);
    let (mut got, mut starved, mut eof) = (0u64, 0u32, false);
    let mut kept = Vec::new();
    let mut givers = Vec::new();
    let mut events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    while !eof {
        assert!(Instant::now() < deadline, "stalled at {got} of {len} B");
        // Poll until nothing more comes, keeping every buffer.
        loop {
            rx.poll(&mut events, Duration::ZERO).unwrap();
            if events.is_empty() {
                break;
            }
            for ev in events.drain(..) {
                match ev {
                    RxEvent::Data(buf) => {
                        let bytes = rx.bytes(&buf).unwrap();
                        p.verify(got, bytes).unwrap();
                        got += bytes.len() as u64;
                        kept.push(buf);
                    }
                    RxEvent::Eof(_) => eof = true,
                    RxEvent::Failed(c, e) => panic!("connection {c}: {e}"),
                }
            }
        }
        if eof {
            break;
        }
        if !kept.is_empty() {
            starved += 1;
            let k = std::mem::take(&mut kept);
            givers.push(std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                drop(k);
            }));
        }
        let mut ready = Vec::new();
        let t = Instant::now();
        while ready.is_empty() {
            let left = Duration::from_secs(5).saturating_sub(t.elapsed());
            assert!(
                !left.is_zero(),
                "at {got} of {len} B (starved {starved} times): the readiness fd did not become readable within 5 s"
            );
            ep.wait(&mut ready, left.as_millis().max(1) as i32).unwrap();
        }
    }
    sender.join().unwrap();
    for g in givers {
        g.join().unwrap();
    }
    assert_eq!(got, len);
    assert!(starved >= 2, "never starved: {starved}");
    assert!(rx.stats().starved > 0, "{:?}", rx.stats());
}

zcnet_testkit::main!();
