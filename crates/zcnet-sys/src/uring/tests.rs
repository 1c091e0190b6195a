use super::*;
use crate::mem::Mapping;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Instant;
use zcnet_testkit::{skip, Need};

fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let a = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
    let (b, _) = l.accept().expect("accept");
    (a, b)
}

fn ring(entries: u32, fixed: u32) -> Ring {
    Ring::new(entries, fixed).unwrap_or_else(|e| skip(Need::Kernel, format!("io_uring: {e}")))
}

/// Drains until `done(seen so far)`; fails after 5 s.
fn drain_until(ring: &mut Ring, seen: &mut Vec<Completion>, done: impl Fn(&[Completion]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done(seen) {
        assert!(Instant::now() < deadline, "completions so far: {seen:?}");
        ring.submit_and_wait(1, Duration::from_millis(50))
            .expect("io_uring_enter");
        ring.drain(|c| seen.push(c));
    }
}

fn finals(seen: &[Completion]) -> usize {
    seen.iter().filter(|c| c.lease.is_some()).count()
}

/// The memory rule itself. A zero-copy send's result CQE (`F_MORE`) must not hand its
/// lease back: the kernel still references the bytes until the notification (`F_NOTIF`),
/// which is the CQE that returns it. A CQE without `F_MORE` (a plain send's only CQE: no
/// notification will come) returns its lease at once. The send is made with `MSG_MORE` so
/// the kernel holds the partial segment after accepting it: the result arrives while the
/// notification cannot have (it comes once the next send without `MSG_MORE` pushes the
/// segment out). Every completion is read as it should be, and counted.
#[zcnet_testkit::test]
fn a_zero_copy_send_keeps_its_lease_until_the_notification() {
    let mut ring = ring(8, 0);
    if !ring.supports_send_zc().unwrap_or(false) {
        skip(Need::Kernel, "no IORING_OP_SEND_ZC (Linux 6.0)");
    }
    let (_map, slots) = Mapping::anonymous(2 * 4096)
        .expect("mmap")
        .into_slots(4096, 2)
        .expect("slots");
    let [mut zc, mut plain] = <[Slot; 2]>::try_from(slots).expect("two slots");
    zc.bytes_mut().expect("cpu memory").fill(0x5a);
    plain.bytes_mut().expect("cpu memory").fill(0xa5);
    let (a, mut b) = pair();
    let req = |op: Op, more: bool| Request {
        fd: a.as_raw_fd(),
        off: 0,
        len: 4096,
        op,
        flags: if more { libc::MSG_MORE } else { 0 },
        link: false,
    };
    let mut seen = Vec::new();

    let zc_tag = ring
        .push(Lease::Slot(zc), &req(Op::SendZc { fixed: None }, true))
        .map_err(|(_, e)| e)
        .expect("queue the zero-copy send");
    ring.submit().expect("submit");
    let is_result = |c: &Completion| matches!(c.outcome, Outcome::Sent { .. });
    drain_until(&mut ring, &mut seen, |s| {
        s.iter().any(|c| c.tag == zc_tag && is_result(c))
    });
    let result = seen
        .iter()
        .find(|c| c.tag == zc_tag && is_result(c))
        .expect("the result");
    assert_eq!(
        result.outcome,
        Outcome::Sent {
            res: Ok(4096),
            asked: 4096,
            zero_copy: true
        },
        "{seen:?}"
    );
    assert_eq!(
        ring.awaiting_result(),
        0,
        "the result is in, the notification announced (F_MORE): {seen:?}"
    );
    assert!(
        result.lease.is_none(),
        "the lease came back with the result CQE (F_MORE): the kernel may still read it"
    );
    assert_eq!(
        ring.in_flight(),
        1 - finals(&seen),
        "in flight until the notification: {seen:?}"
    );

    // A plain send: its only CQE has no F_MORE and returns its lease. Without MSG_MORE it
    // also pushes the held segment out, so the zero-copy notification follows.
    let plain_tag = ring
        .push(Lease::Slot(plain), &req(Op::Send, false))
        .map_err(|(_, e)| e)
        .expect("queue the plain send");
    assert_ne!(plain_tag, zc_tag, "two requests in flight, two tags");
    ring.submit().expect("submit");
    let mut got = vec![0u8; 8192];
    b.read_exact(&mut got).expect("read");
    assert!(got[..4096].iter().all(|&x| x == 0x5a));
    assert!(got[4096..].iter().all(|&x| x == 0xa5));
    drain_until(&mut ring, &mut seen, |s| finals(s) == 2);
    assert_eq!(ring.in_flight(), 0);

    for c in &seen {
        // The zero-copy result is the one CQE with more to come.
        let last = !(c.tag == zc_tag && is_result(c));
        assert_eq!(
            c.lease.is_some(),
            last,
            "a lease comes back with its request's final CQE and only then: {c:?}"
        );
        match c.outcome {
            Outcome::Notified { bytes, .. } => assert_eq!((c.tag, bytes), (zc_tag, 4096)),
            Outcome::Sent {
                res,
                asked,
                zero_copy,
            } => assert_eq!((res, asked, zero_copy), (Ok(4096), 4096, c.tag == zc_tag)),
            _ => panic!("{c:?}"),
        }
    }
    let counts = ring.counts();
    assert_eq!(
        (counts.sends, counts.bytes_sent, counts.notifications),
        (2, 8192, 1)
    );
    assert_eq!(
        counts.zerocopy_bytes + counts.copied_bytes,
        8192,
        "every byte counted once, zero-copy or copied: {counts:?}"
    );
    assert_eq!(ring.awaiting_result(), 0);
    let notif = seen
        .iter()
        .find(|c| matches!(c.outcome, Outcome::Notified { .. }))
        .expect("the notification");
    assert_eq!(notif.tag, zc_tag);
    let back = notif
        .lease
        .as_ref()
        .expect("the notification returns the lease");
    assert!(matches!(back, Lease::Slot(s) if s.id() == 0), "{back:?}");
    assert_eq!(
        seen.len(),
        3,
        "result, notification, plain result: {seen:?}"
    );
}

/// Borrowed memory through the same ring: a zero-copy send from a registered foreign buffer
/// linked to a plain send, and a receive with MSG_WAITALL into the middle of another.
#[zcnet_testkit::test]
fn borrowed_memory_sends_from_a_fixed_buffer_and_receives_in_place() {
    let mut ring = ring(16, 4);
    let (a, mut b) = pair();
    let mut data: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
    let (addr, len) = (data.as_mut_ptr() as usize, data.len());
    // SAFETY: `data` outlives the ring's registration (unregistered below, before drop).
    let idx = ring.register_foreign(unsafe { ForeignMr::new(addr, len) });
    // SAFETY: `data` is not touched until every request on it has ended (drained below).
    let buf = Arc::new(unsafe { ForeignBuf::new(data.as_mut_ptr(), len) }.expect("buf"));
    let fixed = idx.as_ref().ok().copied();
    assert_eq!(ring.fixed_index(addr + 10, 100), fixed);
    assert_eq!(ring.fixed_index(addr + len - 1, 2), None);
    let zc = ring.supports_send_zc().unwrap_or(false);
    let send = Request {
        fd: a.as_raw_fd(),
        off: 0,
        len: 1000,
        op: if zc { Op::SendZc { fixed } } else { Op::Send },
        flags: libc::MSG_WAITALL,
        link: true,
    };
    let t1 = ring
        .push(Lease::Borrowed(Arc::clone(&buf)), &send)
        .map_err(|(_, e)| e)
        .expect("push");
    let rest = Request {
        off: 1000,
        len: (len - 1000) as u32,
        op: Op::Send,
        link: false,
        ..send
    };
    let t2 = ring
        .push(Lease::Borrowed(Arc::clone(&buf)), &rest)
        .map_err(|(_, e)| e)
        .expect("push");
    ring.submit().expect("submit");
    let mut got = vec![0u8; len];
    b.read_exact(&mut got).expect("read");
    assert_eq!(got, data);
    let mut seen = Vec::new();
    drain_until(&mut ring, &mut seen, |s| finals(s) == 2);
    let sent = |c: &Completion| match c.outcome {
        Outcome::Sent { res: Ok(n), .. } => Some((c.tag, n)),
        _ => None,
    };
    assert!(seen.iter().any(|c| sent(c) == Some((t1, 1000))));
    assert!(seen
        .iter()
        .any(|c| sent(c) == Some((t2, (len - 1000) as u32))));
    assert_eq!(ring.in_flight(), 0);
    drop(seen);
    assert_eq!(Arc::strong_count(&buf), 1, "every lease came back");
    if let Ok(i) = idx {
        ring.unregister(i).expect("unregister");
        assert_eq!(ring.fixed_index(addr, 1), None);
    }

    let mut into = vec![0u8; 100];
    // SAFETY: `into` is not touched until the request ended.
    let rb = Arc::new(unsafe { ForeignBuf::new(into.as_mut_ptr(), 100) }.expect("buf"));
    let recv = Request {
        fd: a.as_raw_fd(),
        off: 10,
        len: 80,
        op: Op::Recv,
        flags: libc::MSG_WAITALL,
        link: false,
    };
    ring.push(Lease::Borrowed(rb), &recv)
        .map_err(|(_, e)| e)
        .expect("push");
    ring.submit().expect("submit");
    b.write_all(&[5u8; 30]).expect("write");
    std::thread::sleep(Duration::from_millis(20));
    b.write_all(&[6u8; 50]).expect("write");
    let mut seen = Vec::new();
    drain_until(&mut ring, &mut seen, |s| finals(s) == 1);
    assert_eq!(seen[0].outcome, Outcome::Received(Ok(80)));
    drop(seen);
    assert_eq!(&into[..10], &[0u8; 10]);
    assert_eq!(&into[10..40], &[5u8; 30]);
    assert_eq!(&into[40..90], &[6u8; 50]);
    assert_eq!(&into[90..], &[0u8; 10]);
}

/// Refusals hand the lease back; a region is registered whole where the ring has no sparse
/// table; dropping the ring cancels a pending receive and gives its lease back.
#[zcnet_testkit::test]
fn bad_requests_are_refused_and_drop_cancels_pending_receives() {
    let mut ring = ring(8, 0);
    let (a, _b) = pair();
    let mut into = vec![0u8; 64];
    // SAFETY: `into` is not touched until the ring (and its requests) is gone.
    let rb = Arc::new(unsafe { ForeignBuf::new(into.as_mut_ptr(), 64) }.expect("buf"));
    let mut req = Request {
        fd: a.as_raw_fd(),
        off: 60,
        len: 8,
        op: Op::Recv,
        flags: 0,
        link: false,
    };
    let err = |r: Result<u32, (Lease, io::Error)>| r.err().and_then(|(_, e)| e.raw_os_error());
    assert_eq!(
        err(ring.push(Lease::Borrowed(Arc::clone(&rb)), &req)),
        Some(libc::EINVAL),
        "outside the lease"
    );
    req.off = 0;
    // Bytes of our own take a receive only as the one reference: a second could read them
    // while the kernel writes (safe code, so the ring must refuse it).
    let own = Arc::new(ForeignBuf::owned(vec![0u8; 8].into_boxed_slice()));
    let reader = Arc::clone(&own);
    let (back, e) = ring
        .push(Lease::Borrowed(own), &req)
        .expect_err("a shared receive target");
    assert_eq!(e.raw_os_error(), Some(libc::EBUSY));
    drop(back);
    assert_eq!(
        reader.slice(0, 8),
        Some(&[0u8; 8][..]),
        "handed back untouched"
    );
    let weak = Arc::downgrade(&reader);
    assert_eq!(
        err(ring.push(Lease::Borrowed(reader), &req)),
        Some(libc::EBUSY),
        "a weak reference could be upgraded to read"
    );
    drop(weak);
    let zc = Request {
        op: Op::SendZc { fixed: Some(0) },
        ..req
    };
    assert_eq!(
        err(ring.push(Lease::Borrowed(Arc::clone(&rb)), &zc)),
        Some(libc::EFAULT),
        "no such fixed buffer"
    );
    // SAFETY: never used for I/O: the table is absent.
    let mr = unsafe { ForeignMr::new(into.as_ptr() as usize, 64) };
    assert_eq!(
        ring.register_foreign(mr)
            .err()
            .and_then(|e| e.raw_os_error()),
        Some(libc::ENOSPC)
    );
    let map = Arc::new(Mapping::anonymous(8192).expect("mmap"));
    match ring.register_mapping(&map) {
        Ok(i) => {
            assert_eq!(i, 0);
            assert_eq!(ring.fixed_index(map.addr() + 4096, 4096), Some(0));
            assert_eq!(
                ring.register_mapping(&map)
                    .err()
                    .and_then(|e| e.raw_os_error()),
                Some(libc::EBUSY),
                "one region without a sparse table"
            );
        }
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOMEM), "{e}"),
    }
    assert_eq!(Arc::strong_count(&rb), 1, "refused leases came back");
    ring.push(Lease::Borrowed(Arc::clone(&rb)), &req)
        .map_err(|(_, e)| e)
        .expect("push");
    ring.submit().expect("submit");
    assert_eq!(ring.in_flight(), 1);
    let t = Instant::now();
    let leaked = leaked_leases();
    drop(ring);
    assert!(t.elapsed() < Duration::from_secs(2));
    assert_eq!(leaked_leases(), leaked);
    assert_eq!(
        Arc::strong_count(&rb),
        1,
        "the cancelled receive's lease came back"
    );
    assert_eq!(
        Arc::strong_count(&map),
        1,
        "the registration let go of the region"
    );
    drop(rb);
    assert_eq!(into, vec![0u8; 64]);
}

/// `cancel_all` whose requests end on their own before its cancels went in (here: their
/// peers closed) still hands its cancels to the kernel before returning: none stays queued
/// to reach a later request that reuses a tag.
#[zcnet_testkit::test]
fn cancel_all_leaves_no_cancel_queued() {
    let mut ring = ring(4, 0);
    let pairs: Vec<(TcpStream, TcpStream)> = (0..4).map(|_| pair()).collect();
    for (a, _) in &pairs {
        let own = Arc::new(ForeignBuf::owned(vec![0u8; 64].into_boxed_slice()));
        let req = Request {
            fd: a.as_raw_fd(),
            off: 0,
            len: 64,
            op: Op::Recv,
            flags: 0,
            link: false,
        };
        ring.push(Lease::Borrowed(own), &req)
            .map_err(|(_, e)| e)
            .expect("push");
    }
    ring.submit().expect("submit");
    assert_eq!(ring.in_flight(), 4);
    // The peers go: every receive ends (0 B), its CQE posted on this thread's way out.
    drop(pairs.into_iter().map(|(a, _)| a).collect::<Vec<_>>());
    std::thread::sleep(Duration::from_millis(50));
    let mut ended = Vec::new();
    assert!(ring.cancel_all(Duration::from_secs(2), |c| ended.push(c)));
    assert_eq!(ended.len(), 4, "{ended:?}");
    assert_eq!(ring.queued(), 0, "cancels left queued");
}

/// A `SEND_ZC` refused before its notification exists never gets one: the kernel fails
/// `IOSQE_CQE_SKIP_SUCCESS` (and an allocation failure of the notification) in the request's
/// preparation, before io_uring/net.c `io_send_zc_prep` makes it, with a result without
/// `F_MORE` and nothing after. The ring reads that as the refusal that a stray
/// notification follows (`ReqState::Stray`), so the tag is kept for good. Pinned here as
/// harmless: the lease comes back with the result, nothing counts as in flight or awaiting
/// a result, later requests get other tags and complete, and cancel and drop return at
/// once. The cost is one idle entry in the tag table per such refusal.
#[zcnet_testkit::test]
fn a_zero_copy_send_refused_before_its_notification_exists_keeps_its_tag_harmlessly() {
    let mut ring = ring(8, 0);
    if !ring.supports_send_zc().unwrap_or(false) {
        skip(Need::Kernel, "no IORING_OP_SEND_ZC (Linux 6.0)");
    }
    let (a, mut b) = pair();
    let buf = Arc::new(ForeignBuf::owned(vec![7u8; 100].into_boxed_slice()));
    let entry = opcode::SendZc::new(types::Fd(a.as_raw_fd()), buf.addr() as *const u8, 100)
        .build()
        .flags(squeue::Flags::SKIP_SUCCESS);
    // SAFETY: the SQE points into `buf`, the lease.
    let refused =
        unsafe { ring.queue(Lease::Borrowed(Arc::clone(&buf)), entry, Kind::SendZc, 100) }
            .map_err(|(_, e)| e)
            .expect("queue");
    ring.submit().expect("submit");
    let mut seen = Vec::new();
    drain_until(&mut ring, &mut seen, |s| finals(s) == 1);
    assert_eq!(
        seen[0].outcome,
        Outcome::Sent {
            res: Err(libc::EINVAL),
            asked: 100,
            zero_copy: true
        },
        "{seen:?}"
    );
    assert!(
        seen[0].lease.is_some(),
        "the lease came back with the result"
    );
    drop(seen);
    assert_eq!(ring.held[refused as usize].state, ReqState::Stray);
    assert_eq!((ring.in_flight(), ring.awaiting_result()), (0, 0));
    // No notification comes, and nothing waits for one.
    std::thread::sleep(Duration::from_millis(50));
    let mut late = Vec::new();
    ring.submit_and_wait(1, Duration::from_millis(50))
        .expect("io_uring_enter");
    ring.drain(|c| late.push(c));
    assert!(late.is_empty(), "{late:?}");
    assert_eq!(
        ring.held[refused as usize].state,
        ReqState::Stray,
        "kept for good"
    );
    let req = Request {
        fd: a.as_raw_fd(),
        off: 0,
        len: 100,
        op: Op::SendZc { fixed: None },
        flags: 0,
        link: false,
    };
    for _ in 0..3 {
        let t = ring
            .push(Lease::Borrowed(Arc::clone(&buf)), &req)
            .map_err(|(_, e)| e)
            .expect("push");
        assert_ne!(t, refused, "the kept tag is not handed out");
        ring.submit().expect("submit");
        let mut seen = Vec::new();
        drain_until(&mut ring, &mut seen, |s| finals(s) == 1);
        assert!(
            seen.iter()
                .any(|c| c.tag == t && matches!(c.outcome, Outcome::Sent { res: Ok(100), .. })),
            "{seen:?}"
        );
    }
    let mut got = vec![0u8; 300];
    b.read_exact(&mut got).expect("read");
    assert_eq!(ring.held.len(), 2, "one tag kept, one reused");
    let t = Instant::now();
    assert!(ring.cancel_all(Duration::from_secs(2), drop));
    drop(ring);
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(Arc::strong_count(&buf), 1, "every lease came back");
}

/// Tags are reused after their final CQE, so a long run keeps a small table.
/// A fixed buffer the kernel would not unregister stays in the table covering nothing: new
/// memory at its addresses is never sent from its old pages, and its index is not reused.
#[zcnet_testkit::test]
fn a_fixed_buffer_that_failed_to_unregister_covers_nothing() {
    let mut ring = ring(8, 4);
    if !ring.sparse {
        zcnet_testkit::skip(
            zcnet_testkit::Need::Kernel,
            "no sparse fixed-buffer table (IORING_RSRC_REGISTER_SPARSE, Linux 5.19)",
        );
    }
    let mem = vec![0u8; 8192];
    // SAFETY: `mem` outlives the ring (dropped after it, below).
    let mr = unsafe { ForeignMr::new(mem.as_ptr() as usize, mem.len()) };
    let idx = ring.register_foreign(mr).expect("register");
    assert_eq!(ring.fixed_index(mem.as_ptr() as usize, 100), Some(idx));
    // What unregister leaves when the kernel refuses.
    ring.fixed[usize::from(idx)] = Some(Fixed::Stale);
    assert_eq!(ring.fixed_index(mem.as_ptr() as usize, 100), None);
    assert_eq!(
        ring.unregister(idx).err().and_then(|e| e.raw_os_error()),
        Some(libc::EINVAL)
    );
    // SAFETY: as above.
    let mr = unsafe { ForeignMr::new(mem.as_ptr() as usize, mem.len()) };
    let next = ring.register_foreign(mr).expect("register again");
    assert_ne!(next, idx, "the stale index is not handed out again");
    assert_eq!(ring.fixed_index(mem.as_ptr() as usize, 100), Some(next));
    drop(ring);
    drop(mem);
}

#[zcnet_testkit::test]
fn tags_are_reused_once_their_request_ended() {
    let mut ring = ring(8, 0);
    let (a, mut b) = pair();
    let buf = Arc::new(ForeignBuf::owned(vec![1u8; 100].into_boxed_slice()));
    let req = Request {
        fd: a.as_raw_fd(),
        off: 0,
        len: 100,
        op: Op::Send,
        flags: 0,
        link: false,
    };
    let mut tags = std::collections::BTreeSet::new();
    for _ in 0..50 {
        let t = ring
            .push(Lease::Borrowed(Arc::clone(&buf)), &req)
            .map_err(|(_, e)| e)
            .expect("push");
        tags.insert(t);
        ring.submit().expect("submit");
        let mut seen = Vec::new();
        drain_until(&mut ring, &mut seen, |s| finals(s) == 1);
        assert_eq!(seen[0].tag, t);
        assert!(matches!(
            seen[0].outcome,
            Outcome::Sent {
                res: Ok(100),
                zero_copy: false,
                ..
            }
        ));
    }
    let mut got = vec![0u8; 5000];
    b.read_exact(&mut got).expect("read");
    assert_eq!(
        tags.len(),
        1,
        "one request at a time reuses one tag: {tags:?}"
    );
}
