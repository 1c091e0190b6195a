//! The backend without a binding (no device here takes one): cmsgs as the kernel writes
//! them, fed to the read path, and a real TCP socket over loopback, whose host-memory data
//! `recvmsg(MSG_SOCK_DEVMEM)` returns as a plain receive.
#![allow(clippy::unwrap_used)]

use super::super::{Returns, RxBuf, RxEvent, RxStats};
use super::*;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use zcnet_core::devmem::{DmabufCmsg, SCM_DEVMEM_DMABUF, SCM_DEVMEM_LINEAR, SOL_SOCKET};
use zcnet_sys::devmem::{cmsg_space, CMSG_HDR_LEN};

const DMABUF_ID: u32 = 9;

/// A control message to write: type and payload.
type Msg = (i32, DmabufCmsg);

struct Harness {
    out: Vec<RxEvent>,
    stats: RxStats,
    ret: Arc<Returns>,
    closable: Vec<ConnId>,
}

impl Harness {
    fn new() -> Harness {
        Harness {
            out: Vec::new(),
            stats: RxStats::default(),
            ret: Arc::default(),
            closable: Vec::new(),
        }
    }

    fn ctx(&mut self) -> Ctx<'_> {
        Ctx {
            out: &mut self.out,
            stats: &mut self.stats,
            ret: &self.ret,
            closable: &mut self.closable,
        }
    }

    /// What the receiver does at the start of a poll: dropped handles go back.
    fn recycle(&mut self, st: &mut Socks) {
        let mut back = Vec::new();
        self.ret.take_into(&mut back);
        for (k, l) in back {
            st.release(k, l);
        }
    }

    fn bufs(&mut self) -> Vec<RxBuf> {
        self.out
            .drain(..)
            .map(|e| match e {
                RxEvent::Data(b) => b,
                other => panic!("expected data, got {other:?}"),
            })
            .collect()
    }
}

fn socks(buffers: usize, buf_size: usize) -> Socks {
    let mut cfg = RxConfig::new(RxMode::Devmem);
    cfg.buffers = buffers;
    cfg.buf_size = buf_size;
    let t = Target {
        iface: "test0".into(),
        ifindex: 0,
        queue: 3,
    };
    Socks::new(&cfg, t, DMABUF_ID, 1 << 20).unwrap()
}

fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    (a, b)
}

/// Writes one control message as the kernel does (`put_cmsg`).
fn put(ctrl: &mut Vec<u8>, ty: i32, c: DmabufCmsg) {
    let start = ctrl.len();
    ctrl.extend_from_slice(&(CMSG_HDR_LEN + DMABUF_CMSG_LEN).to_ne_bytes());
    ctrl.extend_from_slice(&SOL_SOCKET.to_ne_bytes());
    ctrl.extend_from_slice(&ty.to_ne_bytes());
    ctrl.resize(start + CMSG_HDR_LEN, 0);
    ctrl.extend_from_slice(&c.to_bytes());
    ctrl.resize(start + cmsg_space(DMABUF_CMSG_LEN), 0);
}

fn linear(n: u32) -> DmabufCmsg {
    DmabufCmsg {
        frag_size: n,
        ..Default::default()
    }
}

fn frag(off: u64, n: u32, token: u32, id: u32) -> DmabufCmsg {
    DmabufCmsg {
        frag_offset: off,
        frag_size: n,
        frag_token: token,
        dmabuf_id: id,
        flags: 0,
    }
}

/// One read as the kernel would return it: `lin` copied to the start of a pool buffer, the
/// cmsgs in the control buffer.
fn feed(st: &mut Socks, h: &mut Harness, lin: &[u8], cmsgs: &[u8], bytes: usize) -> bool {
    feed_bufs(st, h, 1, lin, cmsgs, bytes)
}

/// The same with `nbufs` pool buffers as the iovec: `lin` fills them in order, as the
/// kernel's copies advance the iovec.
fn feed_bufs(
    st: &mut Socks,
    h: &mut Harness,
    nbufs: usize,
    lin: &[u8],
    cmsgs: &[u8],
    bytes: usize,
) -> bool {
    let mut idxs = Vec::new();
    st.pool.take_many(nbufs, &mut idxs);
    assert_eq!(idxs.len(), nbufs);
    let mut rest = lin;
    for b in st.pool.bufs_mut(&idxs) {
        let n = rest.len().min(b.len());
        b[..n].copy_from_slice(&rest[..n]);
        rest = &rest[n..];
    }
    assert!(rest.is_empty(), "more linear bytes than buffers");
    st.ctrl[..cmsgs.len()].copy_from_slice(cmsgs);
    let r = sys::Received {
        bytes,
        ctrl_len: cmsgs.len(),
        ctrl_truncated: false,
    };
    st.deliver(&mut h.ctx(), 0, &idxs, r)
}

#[zcnet_testkit::test]
fn linear_and_device_pieces_keep_stream_order() {
    let (_a, b) = tcp_pair();
    let mut st = socks(4, 4096);
    let mut h = Harness::new();
    st.add(ConnId(1), b.as_raw_fd()).unwrap();
    let mut ctrl = Vec::new();
    put(&mut ctrl, SCM_DEVMEM_LINEAR, linear(4));
    put(
        &mut ctrl,
        SCM_DEVMEM_DMABUF,
        frag(0x1000, 1448, 0, DMABUF_ID),
    );
    put(&mut ctrl, SCM_DEVMEM_LINEAR, linear(5));
    put(
        &mut ctrl,
        SCM_DEVMEM_DMABUF,
        frag(0x2000, 100, 1, DMABUF_ID),
    );
    assert!(feed(
        &mut st,
        &mut h,
        b"HDR1HDR22",
        &ctrl,
        4 + 1448 + 5 + 100
    ));
    let bufs = h.bufs();
    let locs: Vec<_> = bufs
        .iter()
        .map(|b| (b.location(), b.len(), b.copied()))
        .collect();
    let dev = |offset, len| {
        Location::Device(DeviceSlice {
            dmabuf_id: DMABUF_ID,
            offset,
            len,
        })
    };
    assert_eq!(
        locs,
        [
            (Location::Host, 4, true),
            (dev(0x1000, 1448), 1448, false),
            (Location::Host, 5, true),
            (dev(0x2000, 100), 100, false),
        ]
    );
    assert_eq!(st.bytes(bufs[0].key, 4), Some(&b"HDR1"[..]));
    assert_eq!(st.bytes(bufs[2].key, 5), Some(&b"HDR22"[..]));
    assert_eq!(st.bytes(bufs[1].key, 1448), None, "device memory");
    assert_eq!(
        st.bytes(bufs[0].key, 5),
        Some(&b"HDR1H"[..]),
        "same buffer, longer"
    );
    let s = h.stats;
    assert_eq!(
        (s.linear_fallbacks, s.copied_bytes, s.zerocopy_bytes),
        (2, 9, 1548)
    );
    assert_eq!(st.held(), 4);
    assert_eq!(
        st.pool.held(),
        1,
        "both linear pieces share one pool buffer"
    );

    // Host pieces: the buffer comes back with the last of them.
    let mut bufs = bufs.into_iter();
    let (h1, d1, h2, d2) = (
        bufs.next().unwrap(),
        bufs.next().unwrap(),
        bufs.next().unwrap(),
        bufs.next().unwrap(),
    );
    let k2 = h2.key;
    drop(h1);
    h.recycle(&mut st);
    assert_eq!((st.held(), st.pool.held()), (3, 1));
    assert_eq!(
        st.bytes(k2, 5),
        Some(&b"HDR22"[..]),
        "the other piece stays readable"
    );
    drop(h2);
    h.recycle(&mut st);
    assert_eq!((st.held(), st.pool.held()), (2, 0));
    assert_eq!(st.bytes(k2, 5), None);

    // Device pieces: their tokens go to SO_DEVMEM_DONTNEED. This socket's kernel side never
    // handed them out, so it frees none: they stay outstanding, and a removed connection
    // stays open (its frags would be freed by the close) until they are back.
    drop((d1, d2));
    h.recycle(&mut st);
    assert_eq!(st.held(), 0);
    st.return_tokens(&mut h.ctx());
    let toks = &st.socks[&0].toks;
    assert_eq!(toks.stats().batches, 1);
    assert_eq!(toks.stats().tokens_outstanding, 2);
    assert_eq!(toks.pending(), 2, "queued again for the next poll");
    assert!(
        !st.remove(ConnId(1)),
        "tokens outstanding: the socket must stay open"
    );
    st.return_tokens(&mut h.ctx());
    assert!(h.closable.is_empty());
}

#[zcnet_testkit::test]
fn cmsgs_that_do_not_add_up_fail_the_connection_and_lend_nothing() {
    let (_a, b) = tcp_pair();
    let mut st = socks(4, 4096);
    let mut h = Harness::new();
    st.add(ConnId(7), b.as_raw_fd()).unwrap();
    let cases: [(Vec<Msg>, usize, &str); 4] = [
        // Describes 1448 + 2 bytes of a 2000-byte read.
        (
            vec![
                (SCM_DEVMEM_DMABUF, frag(0, 1448, 0, DMABUF_ID)),
                (SCM_DEVMEM_LINEAR, linear(2)),
            ],
            2000,
            "describe 1450 B of a 2000 B read",
        ),
        // A frag of a dma-buf that is not bound.
        (
            vec![(SCM_DEVMEM_DMABUF, frag(0, 10, 1, DMABUF_ID + 1))],
            10,
            "unbound dma-buf",
        ),
        // A frag past the end of the dma-buf.
        (
            vec![(SCM_DEVMEM_DMABUF, frag(1 << 20, 10, 2, DMABUF_ID))],
            10,
            "beyond its dma-buf",
        ),
        // A bad frag, then a good one: the good one's token is still recorded, to go back.
        (
            vec![
                (SCM_DEVMEM_DMABUF, frag(1 << 20, 10, 3, DMABUF_ID)),
                (SCM_DEVMEM_DMABUF, frag(0, 10, 4, DMABUF_ID)),
            ],
            20,
            "beyond its dma-buf",
        ),
    ];
    for (cmsgs, bytes, want) in cases {
        let mut ctrl = Vec::new();
        for (ty, c) in cmsgs {
            put(&mut ctrl, ty, c);
        }
        assert!(!feed(&mut st, &mut h, b"ab", &ctrl, bytes));
        match h.out.pop() {
            Some(RxEvent::Failed(c, e)) => {
                assert_eq!(c, ConnId(7));
                let msg = e.to_string();
                assert!(msg.contains(want) && msg.contains("test0 queue 3"), "{msg}");
            }
            other => panic!("{want}: {other:?}"),
        }
        assert!(h.out.is_empty());
        assert_eq!((st.held(), st.pool.held()), (0, 0), "{want}");
    }
    // The tokens of good frags (before the mismatch, and after a bad cmsg) go back to the
    // kernel, none is lent.
    let toks = &st.socks[&0].toks;
    assert_eq!((toks.held(), toks.pending()), (0, 2));
    assert_eq!(h.stats.failures, 4);
}

#[zcnet_testkit::test]
fn a_read_spans_several_buffers_one_handle_per_buffer() {
    // Three 8-byte buffers' worth of linear data, with device frags between the pieces:
    // the kernel packs the linear copies from the first buffer on, so the second and third
    // pieces cross buffer boundaries.
    let (_a, b) = tcp_pair();
    let mut st = socks(5, 8);
    let mut h = Harness::new();
    st.add(ConnId(1), b.as_raw_fd()).unwrap();
    let mut ctrl = Vec::new();
    put(&mut ctrl, SCM_DEVMEM_LINEAR, linear(5));
    put(
        &mut ctrl,
        SCM_DEVMEM_DMABUF,
        frag(0x1000, 1448, 0, DMABUF_ID),
    );
    put(&mut ctrl, SCM_DEVMEM_LINEAR, linear(6));
    put(
        &mut ctrl,
        SCM_DEVMEM_DMABUF,
        frag(0x2000, 100, 1, DMABUF_ID),
    );
    put(&mut ctrl, SCM_DEVMEM_LINEAR, linear(9));
    let lin = b"AAAAABBBBBBCCCCCCCCC";
    let bytes = 20 + 1448 + 100;
    // Four buffers in the iovec; the fourth gets nothing and goes back at once.
    assert!(feed_bufs(&mut st, &mut h, 4, lin, &ctrl, bytes));
    let bufs = h.bufs();
    let dev = |offset, len| {
        Location::Device(DeviceSlice {
            dmabuf_id: DMABUF_ID,
            offset,
            len,
        })
    };
    let got: Vec<_> = bufs
        .iter()
        .map(|b| {
            let host = st.bytes(b.key, b.len()).map(<[u8]>::to_vec);
            (b.location(), b.len(), b.copied(), host)
        })
        .collect();
    let h_ = |s: &[u8]| (Location::Host, s.len(), true, Some(s.to_vec()));
    assert_eq!(
        got,
        [
            h_(b"AAAAA"),
            (dev(0x1000, 1448), 1448, false, None),
            h_(b"BBB"),
            h_(b"BBB"),
            (dev(0x2000, 100), 100, false, None),
            h_(b"CCCCC"),
            h_(b"CCCC"),
        ]
    );
    // Each host handle is one buffer: never longer than what is left of it.
    assert_eq!(st.bytes(bufs[2].key, 4), None, "past the end of buffer 0");
    let s = h.stats;
    assert_eq!(
        (
            s.linear_fallbacks,
            s.unsteered,
            s.copied_bytes,
            s.zerocopy_bytes
        ),
        (3, 0, 20, 1548)
    );
    assert_eq!(s.bytes, bytes as u64);
    assert_eq!((st.held(), st.pool.held()), (7, 3), "three buffers lent");
    // A buffer comes back with the last of its pieces, in any order.
    let mut v: Vec<Option<RxBuf>> = bufs.into_iter().map(Some).collect();
    for (i, pool_held) in [(3, 3), (0, 3), (2, 2), (6, 1), (5, 0)] {
        drop(v[i].take());
        h.recycle(&mut st);
        assert_eq!(st.pool.held(), pool_held, "after dropping handle {i}");
    }
    drop(v);
    h.recycle(&mut st);
    assert_eq!(st.held(), 0);
    assert!(st.pool.has_free());
}

#[zcnet_testkit::test]
fn a_read_without_devmem_cmsgs_is_unsteered_host_data() {
    // No cmsg at all: a plain receive of host memory (the flow was not steered to the
    // bound queue). It spans buffers like linear data, and counts as unsteered bytes,
    // not as an SCM_DEVMEM_LINEAR fallback.
    let (_a, b) = tcp_pair();
    let mut st = socks(4, 8);
    let mut h = Harness::new();
    st.add(ConnId(1), b.as_raw_fd()).unwrap();
    assert!(feed_bufs(&mut st, &mut h, 3, b"0123456789", &[], 10));
    let bufs = h.bufs();
    let got: Vec<_> = bufs
        .iter()
        .map(|b| (b.copied(), st.bytes(b.key, b.len()).unwrap().to_vec()))
        .collect();
    assert_eq!(got, [(true, b"01234567".to_vec()), (true, b"89".to_vec())]);
    let s = h.stats;
    assert_eq!(
        (s.unsteered, s.linear_fallbacks, s.copied_bytes),
        (10, 0, 10)
    );
    assert_eq!(st.pool.held(), 2, "the third buffer went back unused");
    // A devmem read after it: linear fallbacks count, unsteered does not move.
    let mut ctrl = Vec::new();
    put(&mut ctrl, SCM_DEVMEM_LINEAR, linear(2));
    put(&mut ctrl, SCM_DEVMEM_DMABUF, frag(0, 64, 5, DMABUF_ID));
    assert!(feed(&mut st, &mut h, b"hi", &ctrl, 66));
    assert_eq!((h.stats.unsteered, h.stats.linear_fallbacks), (10, 1));
    drop(bufs);
    drop(h.bufs());
    h.recycle(&mut st);
    assert_eq!((st.held(), st.pool.held()), (0, 0));
}

#[zcnet_testkit::test]
fn linear_bytes_beyond_the_buffers_fail_the_connection() {
    let (_a, b) = tcp_pair();
    let mut st = socks(4, 8);
    let mut h = Harness::new();
    st.add(ConnId(2), b.as_raw_fd()).unwrap();
    let mut ctrl = Vec::new();
    put(&mut ctrl, SCM_DEVMEM_LINEAR, linear(17));
    assert!(!feed_bufs(&mut st, &mut h, 2, b"", &ctrl, 17));
    match h.out.pop() {
        Some(RxEvent::Failed(_, e)) => {
            assert!(e.to_string().contains("17 B of linear data in 16 B"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!((st.held(), st.pool.held()), (0, 0));
}

#[zcnet_testkit::test]
fn host_memory_arrives_as_copied_pieces_in_order() {
    // Loopback traffic is host memory: MSG_SOCK_DEVMEM reads it like recv() (a flow that is
    // not steered to the bound queue looks like this), counted as unsteered bytes. Small
    // pool buffers and few of them, held for a while: starvation is counted, not fatal;
    // one read takes every free buffer as its iovec.
    let (mut a, b) = tcp_pair();
    let mut st = socks(4, 1000);
    let mut h = Harness::new();
    st.add(ConnId(3), b.as_raw_fd()).unwrap();
    const N: usize = 200_000;
    let p = zcnet_core::Pattern::new(42);
    let writer = std::thread::spawn(move || {
        let mut data = vec![0u8; N];
        p.fill(0, &mut data);
        a.write_all(&data).unwrap();
        // `a` drops here: end of stream.
    });
    let (mut got, mut eof, mut reads) = (0u64, false, 0u64);
    let mut kept = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !eof {
        assert!(std::time::Instant::now() < deadline, "stuck at {got}");
        h.recycle(&mut st);
        st.poll(&mut h.ctx(), Duration::from_millis(50)).unwrap();
        for ev in std::mem::take(&mut h.out) {
            match ev {
                RxEvent::Data(buf) => {
                    assert!(buf.copied() && buf.location() == Location::Host);
                    let bytes = st.bytes(buf.key, buf.len()).unwrap();
                    p.verify(got, bytes).unwrap();
                    got += bytes.len() as u64;
                    reads += 1;
                    kept.push(buf);
                }
                RxEvent::Eof(c) => {
                    assert_eq!(c, ConnId(3));
                    eof = true;
                }
                RxEvent::Failed(_, e) => panic!("{e}"),
            }
        }
        // A slow consumer: hold every buffer until all four are out, then give them back.
        if kept.len() >= 4 || eof {
            kept.clear();
        }
    }
    writer.join().unwrap();
    assert_eq!(got, N as u64);
    assert!(reads >= (N / 1000) as u64, "one handle per buffer at least");
    assert_eq!(h.stats.linear_fallbacks, 0, "no SCM_DEVMEM_LINEAR came");
    assert_eq!(h.stats.unsteered, N as u64);
    assert_eq!(h.stats.copied_bytes, N as u64);
    assert!(h.stats.starved > 0, "four buffers held: reading paused");
    h.recycle(&mut st);
    assert_eq!((st.held(), st.pool.held()), (0, 0));
    assert!(st.remove(ConnId(3)), "no token outstanding: close at once");
}

#[zcnet_testkit::test]
fn a_queue_with_a_memory_provider_is_busy_with_the_kernels_words() {
    use zcnet_netlink::{wire::Extack, KernelError};
    let t = Target {
        iface: "eth1".into(),
        ifindex: 3,
        queue: 5,
    };
    for errno in [libc::EEXIST, libc::EBUSY] {
        let e = bind_refusal(
            &t,
            &zcnet_netlink::Error::from_kernel(KernelError {
                op: "bind-rx",
                target: "ifindex 3".into(),
                errno,
                extack: Extack {
                    msg: Some("rx queue already\nhas a provider".into()),
                    ..Extack::default()
                },
                bad_attr: None,
                missing_attr: None,
            }),
        );
        let msg = e.to_string();
        assert!(
            msg.starts_with("devmem TCP receive on eth1 queue 5 is refused: the queue already has a memory provider"),
            "{msg}"
        );
        assert!(
            msg.contains("kernel: rx queue already has a provider"),
            "{msg}"
        );
        assert!(!msg.contains('\n'), "one line: {msg}");
        assert_eq!(e.errno(), Some(errno));
        assert_eq!(e.remedy(), Some(crate::Remedy::OtherQueue));
        assert!(matches!(e, Error::Busy { .. }), "{e:?}");
    }
}
