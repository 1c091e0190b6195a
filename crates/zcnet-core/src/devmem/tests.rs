use super::*;
use proptest::prelude::*;

fn dmabuf(token: u32, offset: u64, size: u32) -> DevmemCmsg {
    DevmemCmsg::Dmabuf(DmabufCmsg {
        frag_offset: offset,
        frag_size: size,
        frag_token: token,
        dmabuf_id: 3,
        flags: 0,
    })
}

fn tok(token_start: u32, token_count: u32) -> DmabufToken {
    DmabufToken {
        token_start,
        token_count,
    }
}

/// Receives and releases `tokens` (one 100-byte frag each).
fn with_released(rx: &mut DevmemRx, tokens: &[u32]) {
    for &t in tokens {
        rx.on_cmsg(dmabuf(t, u64::from(t) * 4096, 100)).unwrap();
        rx.release(t).unwrap();
    }
}

#[cfg(target_endian = "little")]
#[test]
fn cmsg_and_token_bytes() {
    // struct dmabuf_cmsg { u64 frag_offset; u32 frag_size; u32 frag_token; u32 dmabuf_id;
    //                     u32 flags; }
    let b: [u8; 24] = [
        0x00, 0x20, 0, 0, 0x01, 0, 0, 0, // frag_offset 0x1_0000_2000
        0x00, 0x10, 0, 0, // frag_size 4096
        0x07, 0, 0, 0, // frag_token 7
        0x03, 0, 0, 0, // dmabuf_id 3
        0, 0, 0, 0, // flags
    ];
    let c = DmabufCmsg::parse(&b).unwrap();
    let want = DmabufCmsg {
        frag_offset: 0x1_0000_2000,
        frag_size: 4096,
        frag_token: 7,
        dmabuf_id: 3,
        flags: 0,
    };
    assert_eq!(c, want);
    assert_eq!(c.to_bytes(), b);
    for n in [0, 8, 20, 23, 25, 32] {
        let got = DmabufCmsg::parse(&[0u8; 32][..n]);
        assert_eq!(
            got,
            Err(DevmemError::BadLength {
                expected: 24,
                got: n
            })
        );
    }
    assert_eq!(
        DevmemCmsg::parse(SOL_SOCKET, SCM_DEVMEM_DMABUF, &b),
        Ok(Some(DevmemCmsg::Dmabuf(want)))
    );
    let linear = DmabufCmsg {
        frag_size: 66,
        ..DmabufCmsg::default()
    }
    .to_bytes();
    assert_eq!(
        DevmemCmsg::parse(1, 78, &linear),
        Ok(Some(DevmemCmsg::Linear { len: 66 }))
    );
    assert_eq!(DevmemCmsg::parse(1, SO_DEVMEM_DONTNEED, &b), Ok(None));
    assert_eq!(
        DevmemCmsg::parse(6, 79, &b),
        Ok(None),
        "IPPROTO_TCP level: not ours"
    );
    assert!(DevmemCmsg::parse(1, 78, &linear[..12]).is_err());

    // struct dmabuf_token { u32 token_start; u32 token_count; }
    assert_eq!(tok(5, 3).to_bytes(), [5, 0, 0, 0, 3, 0, 0, 0]);
    assert_eq!(
        DmabufToken::parse(&[9, 1, 0, 0, 2, 0, 0, 0]),
        Ok(tok(0x109, 2))
    );
    assert!(DmabufToken::parse(&[0; 7]).is_err());
    let opt = dontneed_optval(&[tok(1, 2), tok(0x01020304, 1)]);
    assert_eq!(opt, [1, 0, 0, 0, 2, 0, 0, 0, 4, 3, 2, 1, 1, 0, 0, 0]);
}

#[test]
fn batches_coalesce_and_respect_the_limits() {
    let mut rx = DevmemRx::new();
    with_released(&mut rx, &[10, 2, 3, 1, 7, 8]);
    assert_eq!(
        rx.take_dontneed_batch(128),
        Ok(vec![tok(1, 3), tok(7, 2), tok(10, 1)])
    );
    assert_eq!(rx.take_dontneed_batch(128), Err(DevmemError::BatchInFlight));
    assert_eq!(
        rx.on_dontneed_result(6),
        Ok(DontneedOutcome { freed: 6, retry: 0 })
    );
    assert_eq!(
        rx.take_dontneed_batch(128),
        Ok(vec![]),
        "nothing pending: no call"
    );
    assert_eq!(rx.on_dontneed_result(0), Err(DevmemError::NoBatchInFlight));

    // The caller's entry limit, then the frag limit per call.
    with_released(&mut rx, &[1, 2, 3, 7, 8, 10]);
    assert_eq!(rx.take_dontneed_batch(2), Ok(vec![tok(1, 3), tok(7, 2)]));
    rx.on_dontneed_result(5).unwrap();
    rx.take_dontneed_batch(2).unwrap();
    rx.on_dontneed_result(1).unwrap();
    let mut small = DevmemRx::with_limits(128, 4).unwrap();
    with_released(&mut small, &[1, 2, 3, 7, 8, 10]);
    assert_eq!(
        small.take_dontneed_batch(128),
        Ok(vec![tok(1, 3), tok(7, 1)])
    );
    assert!(DevmemRx::with_limits(0, 4).is_err() && DevmemRx::with_limits(129, 4).is_err());
    assert!(DevmemRx::with_limits(1, 1025).is_err());

    // The kernel's: at most 128 entries and 1024 tokens per call.
    let mut rx = DevmemRx::new();
    let scattered: Vec<u32> = (0..300).map(|i| i * 2).collect();
    with_released(&mut rx, &scattered);
    let b = rx.take_dontneed_batch(usize::MAX).unwrap();
    assert_eq!((b.len(), b[127]), (128, tok(254, 1)));
    rx.on_dontneed_result(128).unwrap();
    let mut rx = DevmemRx::new();
    with_released(&mut rx, &(0..2000).collect::<Vec<_>>());
    assert_eq!(rx.take_dontneed_batch(128), Ok(vec![tok(0, 1024)]));
    assert_eq!((rx.pending(), rx.in_flight_tokens()), (976, 1024));
    rx.check().unwrap();
}

/// A short count frees the first tokens in array order; the rest are sent again.
#[test]
fn partial_frees_and_failures_are_retried() {
    let mut rx = DevmemRx::new();
    with_released(&mut rx, &[1, 2, 3, 7, 8]);
    rx.on_cmsg(dmabuf(20, 0, 100)).unwrap();
    assert_eq!(rx.take_dontneed_batch(128), Ok(vec![tok(1, 3), tok(7, 2)]));
    let before = rx.stats().clone();
    assert_eq!(
        rx.on_dontneed_result(6),
        Err(DevmemError::FreedTooMany { asked: 5, freed: 6 })
    );
    assert_eq!(
        (rx.stats().rejected, rx.in_flight_tokens()),
        (before.rejected + 1, 5)
    );
    assert_eq!(
        rx.on_dontneed_result(2),
        Ok(DontneedOutcome { freed: 2, retry: 3 })
    );
    let s = rx.stats();
    assert_eq!(
        (s.tokens_returned, s.tokens_outstanding, s.partial_frees),
        (2, 4, 1)
    );
    assert_eq!(rx.take_dontneed_batch(128), Ok(vec![tok(3, 1), tok(7, 2)]));
    assert_eq!(rx.on_dontneed_error(12), Ok(3));
    assert_eq!(
        (
            rx.stats().failed_batches,
            rx.stats().last_errno,
            rx.pending()
        ),
        (1, 12, 3)
    );
    assert_eq!(rx.take_dontneed_batch(128), Ok(vec![tok(3, 1), tok(7, 2)]));
    rx.on_dontneed_result(3).unwrap();
    let s = rx.stats();
    assert_eq!(
        (s.tokens_received, s.tokens_returned, s.tokens_outstanding),
        (6, 5, 1)
    );
    assert_eq!(
        (s.device_bytes, s.outstanding_bytes, rx.held()),
        (600, 100, 1)
    );
    rx.check().unwrap();
}

#[test]
fn bad_tokens_change_nothing() {
    let mut rx = DevmemRx::new();
    rx.bind_dmabuf(3, 1 << 20);
    rx.on_cmsg(dmabuf(5, 0, 100)).unwrap();
    rx.on_cmsg(dmabuf(6, 4096, 100)).unwrap();
    rx.release(6).unwrap();
    let before = rx.stats().clone();
    let other = DevmemCmsg::Dmabuf(DmabufCmsg {
        frag_size: 1,
        frag_token: 9,
        dmabuf_id: 4,
        ..DmabufCmsg::default()
    });
    let cases = [
        (
            rx.on_cmsg(dmabuf(5, 8192, 10)).err(),
            DevmemError::DuplicateToken(5),
        ),
        (
            rx.on_cmsg(dmabuf(6, 8192, 10)).err(),
            DevmemError::DuplicateToken(6),
        ),
        (
            rx.on_cmsg(dmabuf(1 << 31, 0, 10)).err(),
            DevmemError::BadToken(1 << 31),
        ),
        (rx.on_cmsg(dmabuf(7, 0, 0)).err(), DevmemError::EmptyFrag(7)),
        (rx.on_cmsg(other).err(), DevmemError::UnknownDmabuf(4)),
        (
            rx.on_cmsg(dmabuf(8, (1 << 20) - 10, 11)).err(),
            DevmemError::OutOfBounds(8),
        ),
        (
            rx.on_cmsg(dmabuf(8, u64::MAX, 11)).err(),
            DevmemError::OutOfBounds(8),
        ),
        (
            rx.on_cmsg_bytes(1, 79, &[0; 20]).err(),
            DevmemError::BadLength {
                expected: 24,
                got: 20,
            },
        ),
        (rx.release(6).err(), DevmemError::AlreadyReleased(6)),
        (rx.release(99).err(), DevmemError::NotHeld(99)),
        (rx.on_dontneed_error(4).err(), DevmemError::NoBatchInFlight),
    ];
    for (got, want) in cases {
        assert_eq!(got, Some(want));
    }
    assert_eq!(
        DevmemStats {
            rejected: before.rejected,
            ..rx.stats().clone()
        },
        before
    );
    assert_eq!(rx.stats().rejected, 11);
    // In flight is not held either.
    rx.take_dontneed_batch(128).unwrap();
    assert_eq!(rx.release(6), Err(DevmemError::AlreadyReleased(6)));
    assert_eq!(
        rx.on_cmsg(dmabuf(6, 0, 1)),
        Err(DevmemError::DuplicateToken(6))
    );
    rx.on_dontneed_result(1).unwrap();
    // Freed: the kernel may hand token 6 out again, for another frag.
    assert_eq!(rx.release(6), Err(DevmemError::NotHeld(6)));
    let f = rx.on_cmsg(dmabuf(6, 12288, 7)).unwrap();
    assert_eq!(
        f,
        Some(DeviceFrag {
            dmabuf_id: 3,
            offset: 12288,
            len: 7,
            token: 6
        })
    );
    assert_eq!(
        rx.on_cmsg_bytes(
            1,
            78,
            &DmabufCmsg {
                frag_size: 40,
                ..DmabufCmsg::default()
            }
            .to_bytes()
        ),
        Ok(None)
    );
    assert_eq!((rx.stats().linear_bytes, rx.stats().linear_cmsgs), (40, 1));
    rx.check().unwrap();
}

/// A simulated 6.18 socket: tokens are the lowest free xarray index; SO_DEVMEM_DONTNEED
/// checks the entry limit, walks entries in order, stops after its frag limit, skips unknown
/// tokens, and sometimes fails before freeing anything.
struct SimSocket {
    /// token -> generation (which frag it stands for now).
    xa: BTreeMap<u32, u64>,
    gens: u64,
    released: BTreeSet<u64>,
    freed: BTreeSet<u64>,
    violations: Vec<String>,
    partial: u64,
    failed: u64,
}

impl SimSocket {
    fn alloc(&mut self) -> (u32, u64) {
        let t = (0..).find(|t| !self.xa.contains_key(t)).unwrap_or(0);
        self.gens += 1;
        self.xa.insert(t, self.gens);
        (t, self.gens)
    }

    fn dontneed(&mut self, batch: &[DmabufToken], cap: u32, fail: bool) -> Result<u32, i32> {
        if batch.len() > MAX_DONTNEED_TOKENS {
            self.violations.push(format!("{} entries", batch.len()));
            return Err(22);
        }
        if fail {
            self.failed += 1;
            return Err(12);
        }
        let (mut looked, mut freed, mut asked) = (0, 0, 0);
        for r in batch {
            asked += r.token_count;
            for t in r.token_start..r.token_start + r.token_count {
                looked += 1;
                if looked > cap {
                    continue;
                }
                match self.xa.remove(&t) {
                    Some(g) if !self.released.contains(&g) => {
                        self.violations.push(format!("freed held token {t}"))
                    }
                    Some(g) if !self.freed.insert(g) => {
                        self.violations.push(format!("frag {g} freed twice"))
                    }
                    Some(_) => freed += 1,
                    None => self
                        .violations
                        .push(format!("DONTNEED for unknown token {t}")),
                }
            }
        }
        self.partial += u64::from(freed < asked);
        Ok(freed)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    /// Random recvmsg bursts (device and linear cmsgs), random releases, batches of random
    /// size, a kernel that frees only up to a random frag limit per call or fails: at the end
    /// every frag's token is freed exactly once, never while held, and the counters balance.
    #[test]
    fn simulated_socket_frees_every_token_once(
        steps in 5usize..120, small_cap in any::<bool>(), seed in any::<u64>(),
    ) {
        let mut s = seed | 1;
        let mut r = move || { s ^= s << 13; s ^= s >> 7; s ^= s << 17; s };
        let mut rx = DevmemRx::new();
        let mut k = SimSocket {
            xa: BTreeMap::new(), gens: 0, released: BTreeSet::new(), freed: BTreeSet::new(),
            violations: Vec::new(), partial: 0, failed: 0,
        };
        let (mut held, mut dev_bytes, mut lin_bytes) = (Vec::<(u32, u64)>::new(), 0u64, 0u64);
        let mut step = 0;
        while step < steps || rx.pending() > 0 || !held.is_empty() {
            let last = step >= steps;
            step += 1;
            prop_assert!(step < steps + 10_000, "no progress");
            for _ in 0..(if last { 0 } else { r() % 16 }) {
                let size = 1 + (r() % 4096) as u32;
                if r() % 5 == 0 {
                    let b = DmabufCmsg { frag_size: size, ..DmabufCmsg::default() }.to_bytes();
                    prop_assert_eq!(rx.on_cmsg_bytes(SOL_SOCKET, SCM_DEVMEM_LINEAR, &b), Ok(None));
                    lin_bytes += u64::from(size);
                    continue;
                }
                let (t, g) = k.alloc();
                let (frag_offset, frag_token) = (r() % (1 << 30), t);
                let c = DmabufCmsg {
                    frag_offset, frag_size: size, frag_token, dmabuf_id: 1, flags: 0,
                };
                let f = rx.on_cmsg_bytes(SOL_SOCKET, SCM_DEVMEM_DMABUF, &c.to_bytes()).unwrap();
                let f = f.map(|f| (f.token, f.len, f.offset));
                prop_assert_eq!(f, Some((t, size, c.frag_offset)));
                held.push((t, g));
                dev_bytes += u64::from(size);
            }
            let mut i = 0;
            while i < held.len() {
                if last || r() % 3 == 0 {
                    let (t, g) = held.swap_remove(i);
                    rx.release(t).unwrap();
                    k.released.insert(g);
                } else {
                    i += 1;
                }
            }
            if last || r() % 2 == 0 {
                let batch = rx.take_dontneed_batch(1 + (r() % 200) as usize).unwrap();
                if !batch.is_empty() {
                    let cap = 1 + (r() % if small_cap { 24 } else { 1100 }) as u32;
                    match k.dontneed(&batch, cap.min(MAX_DONTNEED_FRAGS), r() % 8 == 0) {
                        Ok(n) => { rx.on_dontneed_result(n).unwrap(); }
                        Err(e) => { rx.on_dontneed_error(e).unwrap(); }
                    }
                }
            }
            rx.check().map_err(TestCaseError::fail)?;
        }
        prop_assert!(k.violations.is_empty(), "{:?}", k.violations);
        prop_assert!(k.xa.is_empty(), "tokens never returned: {:?}", k.xa);
        prop_assert_eq!(k.freed.len() as u64, k.gens);
        let st = rx.stats();
        let tokens = (st.tokens_received, st.tokens_returned, st.tokens_outstanding);
        prop_assert_eq!(tokens, (k.gens, k.gens, 0));
        let bytes = (st.device_bytes, st.outstanding_bytes, st.linear_bytes);
        prop_assert_eq!(bytes, (dev_bytes, 0, lin_bytes));
        let calls = (st.partial_frees, st.failed_batches, st.releases);
        prop_assert_eq!(calls, (k.partial, k.failed, k.gens));
    }
}
