//! The staging drivers over loopback TCP with the host copy engine (the "device" is host
//! memory): the same code that runs with CUDA, minus the CUDA calls, so it is tested without a
//! GPU. Copies complete out of order and fail on request.

use super::super::engine::{HostEngine, HostEngineFaults};
use super::*;
use crate::tx::TxMode;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Mutex;
use zcnet_core::Pattern;

fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let c = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
    let (s, _) = l.accept().expect("accept");
    (c, s)
}

fn small() -> StagingOptions {
    StagingOptions {
        host_bufs: 8,
        host_buf_size: 16 << 10,
        max_copies: None,
        ..StagingOptions::default()
    }
}

/// Receives `total` pattern bytes into a GPU ring of `ring_len` and checks every delivered byte
/// where the ring says it is; the reader releases in odd-sized steps so ranges wrap.
fn staged_receive(total: u64, ring_len: usize, faults: HostEngineFaults) -> Result<StagedStats> {
    let (mut client, server) = pair();
    let pat = Pattern::new(42);
    let writer = std::thread::spawn(move || {
        let mut off = 0u64;
        let mut buf = vec![0u8; 100_003];
        while off < total {
            let n = (buf.len() as u64).min(total - off) as usize;
            pat.fill(off, &mut buf[..n]);
            if client.write_all(&buf[..n]).is_err() {
                return off;
            }
            off += n as u64;
        }
        off
    });
    let dev = Arc::new(Mutex::new(vec![0u8; ring_len]));
    let engine = HostEngine::new(Arc::clone(&dev), faults);
    let opts = small();
    let ring = new_ring(&opts)?;
    let mut rx =
        StagedReceiver::with_engine(server, Box::new(engine), ring_len as u64, ring, &opts)?;
    let mut checked = 0u64;
    let res = loop {
        if let Err(e) = rx.poll(Duration::from_millis(50)) {
            // A failed transfer hands every host buffer back to the kernel's ring at once.
            assert_eq!(rx.engine.in_flight(), 0);
            assert_eq!(rx.core.held_host_bufs(), 0, "{e}");
            assert_eq!(rx.ring.held_count(), 0, "{e}");
            break Err(e);
        }
        for (off, len) in rx.readable() {
            if len == 0 {
                continue;
            }
            // Take at most 7919 B per step so releases do not line up with chunks.
            let take = len.min(7919);
            let d = dev.lock().expect("lock");
            pat.verify(checked, &d[off as usize..(off + take) as usize])
                .map_err(Error::Verify)?;
            drop(d);
            checked += take;
            rx.release(take)?;
            break;
        }
        if rx.finished() && rx.readable()[0].1 == 0 {
            break Ok(rx.stats());
        }
    };
    drop(rx);
    let sent = writer.join().expect("writer");
    if res.is_ok() {
        assert_eq!(checked, total, "every byte checked");
        assert_eq!(sent, total);
    }
    res
}

#[zcnet_testkit::test]
fn receive_in_order_through_a_wrapping_ring_with_reordered_copies() {
    let faults = HostEngineFaults {
        reorder: true,
        fail: None,
    };
    // A 100 KiB ring (not a multiple of the 16 KiB host buffers) for 8 MiB: many wraps.
    let st = staged_receive(8 << 20, 100 << 10, faults).expect("staged receive");
    assert_eq!(st.bytes, 8 << 20);
    assert!(
        st.pipeline.copies_completed >= (8u64 << 20) / (16 << 10),
        "{st:?}"
    );
}

#[zcnet_testkit::test]
fn a_ring_smaller_than_the_host_buffers_pauses_receiving_but_loses_nothing() {
    // 40 KiB of ring for eight 16 KiB buffers: the ring, not the buffers, limits.
    let st = staged_receive(1 << 20, 40 << 10, HostEngineFaults::default()).expect("staged");
    assert_eq!(st.bytes, 1 << 20);
    assert!(st.pipeline.ring_full > 0, "{st:?}");
}

#[zcnet_testkit::test]
fn a_failed_copy_ends_the_transfer_with_its_error() {
    let faults = HostEngineFaults {
        reorder: false,
        fail: Some(5),
    };
    let e = staged_receive(4 << 20, 256 << 10, faults).expect_err("the copy fails");
    assert!(e.to_string().contains("injected copy failure"), "{e}");
}

#[zcnet_testkit::test]
fn receiving_into_host_memory_is_refused_with_the_reason() {
    let (_c, s) = pair();
    let region = Region::anonymous(1 << 20).expect("region");
    let e = StagedReceiver::new(s, &region, &StagingOptions::default()).expect_err("host");
    assert!(
        e.to_string().contains("staging is for device memory"),
        "{e}"
    );
}

fn staged_send(total: u64, src_len: usize, mode: TxMode, faults: HostEngineFaults) -> Result<u64> {
    let (client, mut server) = pair();
    let pat = Pattern::new(7);
    let mut src = vec![0u8; src_len];
    pat.fill(0, &mut src);
    let dev = Arc::new(Mutex::new(src));
    let reader = std::thread::spawn(move || {
        let mut got = 0u64;
        let mut buf = vec![0u8; 1 << 16];
        let mut bad = None;
        loop {
            match server.read(&mut buf) {
                Ok(0) | Err(_) => return (got, bad),
                Ok(n) => {
                    // The source is sent again and again: stream offset modulo its length.
                    for (i, &b) in buf[..n].iter().enumerate() {
                        let at = (got + i as u64) % src_len as u64;
                        if b != pat.byte_at(at) && bad.is_none() {
                            bad = Some(got + i as u64);
                        }
                    }
                    got += n as u64;
                }
            }
        }
    });
    let mut cfg = TxConfig::new(mode);
    cfg.buf_size = 16 << 10;
    cfg.inflight = 6;
    let tx = Sender::new(
        Socket::from(client),
        Region::anonymous(crate::tx::region_len(&cfg))?,
        &cfg,
    )?;
    let d2 = Arc::clone(&dev);
    let mut st = StagedSender::with_sender(tx, move |_| {
        Ok(Box::new(HostEngine::new(d2, faults)) as Box<dyn CopyEngine>)
    })
    .map_err(|n| n.error)?;
    let mut sent = 0u64;
    let r = (|| {
        while sent < total {
            let n = (src_len as u64).min(total - sent);
            st.send(0, n)?;
            sent += n;
        }
        st.finish()
    })();
    // The sender (and its socket) is gone here: the reader sees the end of the stream.
    let (got, bad) = reader.join().expect("reader");
    let (tx, staged) = r?;
    assert_eq!(bad, None, "corrupt byte at stream offset {bad:?}");
    assert_eq!(got, total);
    assert_eq!(staged.bytes, total);
    assert_eq!(tx.bytes, total);
    Ok(got)
}

#[zcnet_testkit::test]
fn send_from_device_memory_in_order_with_reordered_copies() {
    let faults = HostEngineFaults {
        reorder: true,
        fail: None,
    };
    for mode in [TxMode::Copy, TxMode::UringZc, TxMode::MsgZerocopy] {
        // 300,007 B of source (not a multiple of the 16 KiB buffers), 16 times.
        let got = staged_send(16 * 300_007, 300_007, mode, faults).expect("staged send");
        assert_eq!(got, 16 * 300_007, "{mode}");
    }
}

#[zcnet_testkit::test]
fn a_failed_device_to_host_copy_ends_the_send() {
    let faults = HostEngineFaults {
        reorder: false,
        fail: Some(3),
    };
    let e = staged_send(1 << 20, 1 << 20, TxMode::UringZc, faults).expect_err("fails");
    assert!(e.to_string().contains("injected copy failure"), "{e}");
}

#[zcnet_testkit::test]
fn sending_from_host_memory_is_refused_with_the_reason() {
    let (c, _s) = pair();
    let region = Region::anonymous(1 << 20).expect("region");
    let e = StagedSender::new(Socket::from(c), &region, &TxConfig::new(TxMode::UringZc))
        .expect_err("host");
    assert!(
        e.to_string().contains("staging is for device memory"),
        "{e}"
    );
}
