//! The staged GPU sender sending from device memory zcnet did not allocate (a tensor's:
//! `gpu::borrow_device`, `StagedSender::over` / `send_from` / `into_sender`), run against the
//! CUDA driver stand-in (crates/zcnet-sys/tests/cuda-standin, built with `cc` by zcnet-testkit's
//! `cuda_standin`). The stand-in is NOT a GPU: it proves the copies follow the driver's contract
//! (pending until waited for, nothing freed under a copy, nothing leaked), never speed.
//!
//! The driver is opened once per process, so each case runs in a child process: the parent runs
//! one ignored `child_*` test of this executable with `ZCNET_LIBCUDA` set, then checks its exit
//! status and the stand-in's summary.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use zcnet::gpu::{borrow_device, BorrowedDevice, StagedSender};
use zcnet::{Region, Sender, TxConfig, TxMode};
use zcnet_core::Pattern;
use zcnet_testkit::cuda_standin::{child_passes, in_child, Variant};

zcnet_testkit::main!();

fn run_and_check(name: &str) {
    let s = child_passes(name, Variant::Full, &[]);
    assert!(s.count("async_dtoh") > 0, "no staged copy ran: {s}");
}

#[zcnet_testkit::test]
fn a_staged_send_from_borrowed_device_memory_follows_host_sends_in_order() {
    run_and_check("child_borrowed_send");
}

#[zcnet_testkit::test]
fn a_gpu_sender_on_a_udp_socket_stages_one_datagram_per_buffer() {
    run_and_check("child_udp_gpu_sender");
}

/// `GpuSender` on a UDP socket: devmem asked for by name is refused (TCP only), `auto` says it
/// did not try devmem and stages, each chunk one datagram with the pattern at its offset.
#[zcnet_testkit::test]
#[ignore = "run by its parent test in a child process with the CUDA stand-in loaded"]
fn child_udp_gpu_sender() {
    use zcnet::gpu::{GpuPath, GpuSender};
    in_child();
    let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sink.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let to = sink.local_addr().unwrap();
    let mut cfg = TxConfig::new(TxMode::Devmem);
    cfg.buf_size = 3000;
    let region = |cfg: &TxConfig| Region::cuda(0, zcnet::tx::region_len(cfg)).unwrap();
    let sock = || zcnet::net::connect_udp_for(to, 3000).unwrap().into();
    let e = GpuSender::open(sock(), region(&cfg), &cfg).unwrap_err();
    assert!(e.to_string().contains("TCP streams only"), "{e}");
    cfg.mode = TxMode::Auto;
    let (mut tx, refused) = GpuSender::open(sock(), region(&cfg), &cfg).unwrap();
    assert_eq!(tx.path(), GpuPath::Staging);
    assert!(
        refused
            .iter()
            .any(|r| r.tried == GpuPath::Devmem && r.reason.contains("UDP")),
        "{refused:?}"
    );
    let pat = Pattern::new(5);
    let mut scratch = Vec::new();
    for (off, n) in [(0u64, 3000usize), (3000, 3000), (6000, 1234)] {
        tx.send_chunk(off, n, Some(&pat), &mut scratch).unwrap();
    }
    let st = tx.finish().unwrap();
    assert_eq!(st.tx.bytes, 7234);
    let mut buf = [0u8; 4096];
    for (off, n) in [(0u64, 3000usize), (3000, 3000), (6000, 1234)] {
        let got = sink.recv(&mut buf).unwrap();
        assert_eq!(got, n, "datagram at {off}");
        pat.verify(off, &buf[..got]).unwrap();
    }
}

/// One connection: host bytes, then two borrowed device ranges (two different allocations, one
/// at an odd offset), then host bytes again through the sender given back, then a range out of
/// bounds refused; the reader checks every byte of the stream against the pattern.
#[zcnet_testkit::test]
#[ignore = "run by its parent test in a child process with the CUDA stand-in loaded"]
fn child_borrowed_send() {
    in_child();
    let pat = Pattern::new(11);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let sock = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (mut peer, _) = l.accept().unwrap();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        peer.read_to_end(&mut got).unwrap();
        got
    });
    let (a_len, b_len, host_len) = (3 << 20, (1 << 20) + 777, 100_000usize);
    let mut expect = vec![0u8; host_len * 2 + a_len + b_len];
    pat.fill(0, &mut expect);

    let mut cfg = TxConfig::new(TxMode::Auto);
    cfg.buf_size = 64 << 10;
    let region = Region::anonymous(zcnet::tx::region_len(&cfg)).unwrap();
    let mut tx = Sender::new(sock.into(), region, &cfg).unwrap();
    let mut at = 0;
    let send_host = |tx: &mut Sender, at: &mut usize| {
        let mut left = host_len;
        while left > 0 {
            let mut b = tx.buffer().unwrap();
            let n = b.write(&expect[*at..*at + left]).unwrap();
            tx.send(b, n).unwrap();
            *at += n;
            left -= n;
        }
        tx.flush().unwrap();
    };
    send_host(&mut tx, &mut at);

    // "Caller" memory: allocated by someone else (here a Region the test owns), lent by address.
    let mut owner_a = Region::cuda(0, a_len).unwrap();
    owner_a.write_at(0, &expect[at..at + a_len]).unwrap();
    let mut owner_b = Region::cuda(0, b_len + 4096).unwrap();
    owner_b
        .write_at(123, &expect[at + a_len..at + a_len + b_len])
        .unwrap();
    // SAFETY: the owners outlive the borrowed regions, and every send_from returns only after
    // its copies completed.
    let (ba, bb) = unsafe {
        (
            BorrowedDevice::new(0, owner_a.device_addr().unwrap(), a_len),
            BorrowedDevice::new(0, owner_b.device_addr().unwrap() + 123, b_len),
        )
    };
    let (ra, rb) = (borrow_device(ba).unwrap(), borrow_device(bb).unwrap());
    // Borrowed memory is never exported: devmem TX cannot send from it.
    assert!(borrow_device(ba).unwrap().dmabuf().is_err());

    let mut st = StagedSender::over(tx, 0).unwrap();
    st.send_from(&ra, 0, a_len as u64).unwrap();
    st.send_from(&rb, 0, b_len as u64).unwrap();
    // Out of bounds of the borrowed range: refused before any copy.
    let e = st.send_from(&rb, 1, b_len as u64).unwrap_err();
    assert!(e.to_string().contains("outside"), "{e}");
    at += a_len + b_len;
    drop((ra, rb));
    // The caller's memory is free once send_from returned.
    drop((owner_a, owner_b));
    let mut tx = st.into_sender().unwrap();
    assert_eq!(tx.outstanding(), 0);
    // Every buffer came back to the sender.
    let mut all = Vec::new();
    while let Some(b) = tx.try_buffer().unwrap() {
        all.push(b);
    }
    assert_eq!(all.len(), tx.buffers());
    for b in all {
        tx.send(b, 0).unwrap();
    }
    send_host(&mut tx, &mut at);
    let stats = tx.finish().unwrap();
    assert_eq!(stats.bytes, expect.len() as u64);
    let got = reader.join().unwrap();
    assert_eq!(got.len(), expect.len());
    if let Some(i) = (0..got.len()).find(|&i| got[i] != expect[i]) {
        panic!("byte {i} differs: {} for {}", got[i], expect[i]);
    }

    // Between sends the pipeline holds no device memory: a plain send has nothing to copy.
    let sock = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let _peer = l.accept().unwrap();
    let region = Region::anonymous(zcnet::tx::region_len(&cfg)).unwrap();
    let tx = Sender::new(sock.into(), region, &cfg).unwrap();
    let mut st = StagedSender::over(tx, 0).unwrap();
    let e = st.send(0, 10).unwrap_err();
    assert!(e.to_string().contains("no device memory"), "{e}");
}

#[zcnet_testkit::test]
fn a_device_fill_copies_uring_buffers_to_the_gpu_asynchronously() {
    let name = "child_device_fill";
    let s = child_passes(name, Variant::Full, &[]);
    // Every whole buffer went by an asynchronous copy out of registered memory: none was copied
    // synchronously (the read-back below is the one device-to-host copy).
    assert!(
        s.count("async_htod") >= 80,
        "too few asynchronous copies: {s}"
    );
    assert_eq!(s.count("sync_htod"), 0, "{s}");
    assert!(
        s.count("registers") >= 1,
        "the ring was never registered: {s}"
    );
}

/// A uring receiver's buffers copied into device memory with `DeviceFill`: the bytes land in
/// stream order at the offsets given, every buffer comes back to the ring, a copy-mode receiver
/// is refused with the remedy, and a target on the wrong side (host memory) is refused.
#[zcnet_testkit::test]
#[ignore = "run by its parent test in a child process with the CUDA stand-in loaded"]
fn child_device_fill() {
    use std::io::Write;
    use std::time::{Duration, Instant};
    use zcnet::gpu::DeviceFill;
    use zcnet::{Receiver, RxConfig, RxEvent, RxMode};
    in_child();
    let total = (5usize << 20) + 123;
    let pat = Pattern::new(9);
    let ls = TcpListener::bind("127.0.0.1:0").unwrap();
    let to = ls.local_addr().unwrap();
    let writer = std::thread::spawn(move || {
        let mut s = TcpStream::connect(to).unwrap();
        let mut data = vec![0u8; total];
        pat.fill(0, &mut data);
        s.write_all(&data).unwrap();
    });
    let (conn, _) = ls.accept().unwrap();

    let copy_rx = Receiver::new(&RxConfig::new(RxMode::Copy)).unwrap();
    let e = DeviceFill::new(&copy_rx, 0, 4).unwrap_err().to_string();
    assert!(e.contains("uring"), "{e}");

    let mut cfg = RxConfig::new(RxMode::Uring);
    cfg.buf_size = 64 << 10;
    let mut rx = Receiver::new(&cfg).unwrap();
    rx.add(conn).unwrap();
    let mut fill = DeviceFill::new(&rx, 0, 4).unwrap();
    let host = Region::anonymous(4096).unwrap();
    assert!(
        fill.set_target(Some(&host)).is_err(),
        "host memory taken as a target"
    );
    let dst = Region::cuda(0, total).unwrap();
    fill.set_target(Some(&dst)).unwrap();
    let (mut off, mut events, mut eof) = (0u64, Vec::new(), false);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !eof {
        assert!(Instant::now() < deadline, "timed out at {off} of {total} B");
        rx.poll(&mut events, Duration::from_millis(50)).unwrap();
        for ev in events.drain(..) {
            match ev {
                RxEvent::Data(b) => {
                    let n = b.len() as u64;
                    fill.copy(&mut rx, b, off).unwrap();
                    off += n;
                }
                RxEvent::Eof(_) => eof = true,
                RxEvent::Failed(_, e) => panic!("{e}"),
            }
        }
    }
    writer.join().unwrap();
    fill.wait().unwrap();
    assert_eq!(off as usize, total);
    let st = fill.stats();
    assert_eq!(st.bytes as usize, total);
    assert!(st.copies >= 80, "{st:?}");
    fill.set_target(None).unwrap();
    let mut back = vec![0u8; total];
    dst.read_at(0, &mut back).unwrap();
    pat.verify(0, &back).unwrap();
    // Every buffer is the ring's again once a poll has reclaimed them.
    rx.poll(&mut events, Duration::ZERO).unwrap();
    assert_eq!(rx.held(), 0);
    drop(fill);
}

#[zcnet_testkit::test]
fn a_received_device_range_maps_to_its_address_in_the_bound_region() {
    let name = "child_device_addr_of";
    let s = child_passes(name, Variant::Full, &[]);
    assert!(s.count("allocs") >= 1, "{s}");
}

/// `gpu::device_addr_of`: a range inside the region is the region's device address plus its
/// offset; one that ends past the region, or an offset that overflows, is `None`, and so is any
/// range of host memory.
#[zcnet_testkit::test]
#[ignore = "run by its parent test in a child process with the CUDA stand-in loaded"]
fn child_device_addr_of() {
    use zcnet::gpu::device_addr_of;
    use zcnet::rx::DeviceSlice;
    in_child();
    let len = 1usize << 20;
    let region = Region::cuda(0, len).unwrap();
    let base = region.device_addr().unwrap();
    let slice = |offset: u64, n: usize| DeviceSlice {
        dmabuf_id: 7,
        offset,
        len: n,
    };
    assert_eq!(device_addr_of(&region, &slice(0, 4096)), Some(base));
    assert_eq!(
        device_addr_of(&region, &slice(8192, 100)),
        Some(base + 8192)
    );
    assert_eq!(
        device_addr_of(&region, &slice(len as u64 - 10, 10)),
        Some(base + len as u64 - 10)
    );
    assert_eq!(device_addr_of(&region, &slice(len as u64 - 10, 11)), None);
    assert_eq!(device_addr_of(&region, &slice(u64::MAX, 2)), None);
    let host = Region::anonymous(len).unwrap();
    assert_eq!(device_addr_of(&host, &slice(0, 10)), None);
}
