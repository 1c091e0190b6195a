//! Device-memory TCP receive: the control messages of a `recvmsg(MSG_SOCK_DEVMEM)` walked by
//! zcnet-sys's safe `cmsgs` (arbitrary control bytes), each given to `DevmemRx::on_cmsg_bytes`,
//! and then releases and `SO_DEVMEM_DONTNEED` batches with any kernel answer. The walk stays
//! inside the buffer and stops at its first error; after every step `DevmemRx::check()` holds
//! and, against a model, a token is handed out once while outstanding, released once, batched
//! once, and freed or requeued as the kernel's count says.

use crate::input::Input;
use std::collections::BTreeMap;
use zcnet_core::devmem::{
    DevmemRx, DmabufCmsg, MAX_DONTNEED_FRAGS, MAX_DONTNEED_TOKENS, SCM_DEVMEM_DMABUF,
    SCM_DEVMEM_LINEAR, SOL_SOCKET,
};
use zcnet_sys::devmem::{cmsg_space, cmsgs, CMSG_HDR_LEN};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    Held,
    Pending,
    InFlight,
}

/// Control bytes: mostly well-formed devmem messages with chosen fields, sometimes damaged.
fn control(inp: &mut Input<'_>) -> Vec<u8> {
    if inp.one_in(4) {
        return inp.small_bytes(200).to_vec();
    }
    let mut c = Vec::new();
    for _ in 0..inp.index(5) {
        let (level, ty) = match inp.u8() % 8 {
            0 => (SOL_SOCKET, SCM_DEVMEM_LINEAR),
            1 => (i32::from(inp.u8()), i32::from(inp.u8())),
            _ => (SOL_SOCKET, SCM_DEVMEM_DMABUF),
        };
        let d = DmabufCmsg {
            frag_offset: u64::from(inp.u16()) * 64,
            frag_size: u32::from(inp.u16() % 9000),
            // Few distinct tokens, so that they meet again (duplicates, coalesced batches).
            frag_token: if inp.one_in(16) {
                inp.u32()
            } else {
                u32::from(inp.u8() % 64)
            },
            dmabuf_id: u32::from(inp.u8() % 3),
            flags: 0,
        };
        let mut data = d.to_bytes().to_vec();
        if inp.one_in(16) {
            data.truncate(inp.index(24));
        }
        let len = CMSG_HDR_LEN + data.len();
        let at = c.len();
        c.resize(at + cmsg_space(data.len()), 0);
        c[at..at + 8].copy_from_slice(&(len as u64).to_ne_bytes());
        c[at + 8..at + 12].copy_from_slice(&level.to_ne_bytes());
        c[at + 12..at + 16].copy_from_slice(&ty.to_ne_bytes());
        c[at + CMSG_HDR_LEN..at + len].copy_from_slice(&data);
    }
    if inp.one_in(8) && !c.is_empty() {
        let at = inp.index(c.len());
        c[at] = inp.u8();
    }
    if inp.one_in(8) {
        c.truncate(inp.index(c.len() + 1));
    }
    c
}

pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let mut rx = if inp.bool() {
        let e = 1 + inp.index(MAX_DONTNEED_TOKENS);
        let f = 1 + inp.below(u64::from(MAX_DONTNEED_FRAGS)) as u32;
        DevmemRx::with_limits(e, f).expect("limits in range")
    } else {
        DevmemRx::new()
    };
    assert!(DevmemRx::with_limits(0, 1).is_err() && DevmemRx::with_limits(1, 0).is_err());
    if inp.bool() {
        rx.bind_dmabuf(0, 1 << 22);
        rx.bind_dmabuf(1, u64::from(inp.u32()));
    }
    let mut model: BTreeMap<u32, (St, u32)> = BTreeMap::new();
    let mut flight: Vec<u32> = Vec::new();
    // Up to 96 steps per input: enough for several hand-out/release/batch cycles.
    for _ in 0..96 {
        if inp.is_empty() {
            break;
        }
        match inp.u8() % 6 {
            0 | 1 => {
                let ctrl = control(&mut inp);
                let mut end = 0usize;
                let mut failed = false;
                for c in cmsgs(&ctrl) {
                    assert!(!failed, "a message after a walk error");
                    let Ok(c) = c else {
                        failed = true;
                        continue;
                    };
                    let at = c.data.as_ptr() as usize - ctrl.as_ptr() as usize;
                    assert!(at >= end + CMSG_HDR_LEN && at + c.data.len() <= ctrl.len());
                    end = at + c.data.len();
                    let outstanding = rx.stats().tokens_outstanding;
                    match rx.on_cmsg_bytes(c.level, c.ty, c.data) {
                        Ok(Some(f)) => {
                            assert_eq!((c.level, c.ty), (SOL_SOCKET, SCM_DEVMEM_DMABUF));
                            let d = DmabufCmsg::parse(c.data).expect("accepted bytes parse");
                            assert_eq!(
                                (f.token, f.len, f.offset),
                                (d.frag_token, d.frag_size, d.frag_offset)
                            );
                            assert!(f.len > 0);
                            assert!(
                                model.insert(f.token, (St::Held, f.len)).is_none(),
                                "token handed out twice"
                            );
                            assert_eq!(rx.stats().tokens_outstanding, outstanding + 1);
                        }
                        Ok(None) | Err(_) => assert_eq!(rx.stats().tokens_outstanding, outstanding),
                    }
                }
            }
            2 => {
                let keys: Vec<u32> = model.keys().copied().collect();
                let t = if !keys.is_empty() && !inp.one_in(4) {
                    keys[inp.index(keys.len())]
                } else {
                    inp.u32()
                };
                let ok = rx.release(t).is_ok();
                let was = model.get(&t).map(|e| e.0);
                assert_eq!(ok, was == Some(St::Held), "release of token {t} in {was:?}");
                if ok {
                    if let Some(e) = model.get_mut(&t) {
                        e.0 = St::Pending;
                    }
                }
            }
            3 => {
                let max = inp.index(MAX_DONTNEED_TOKENS + 2);
                match rx.take_dontneed_batch(max) {
                    Ok(batch) => {
                        assert!(flight.is_empty(), "a batch while one is in flight");
                        assert!(batch.len() <= max.min(MAX_DONTNEED_TOKENS));
                        let mut n = 0u32;
                        for r in &batch {
                            assert!(r.token_count >= 1);
                            for t in r.token_start..r.token_start + r.token_count {
                                let e = model.get_mut(&t).expect("batched token outstanding");
                                assert_eq!(e.0, St::Pending, "token {t} batched while {:?}", e.0);
                                e.0 = St::InFlight;
                                flight.push(t);
                                n += 1;
                            }
                        }
                        assert!(n <= MAX_DONTNEED_FRAGS);
                        let pending = model.values().filter(|e| e.0 == St::Pending).count();
                        assert!(batch.is_empty() == (n == 0));
                        assert!(n > 0 || pending == 0 || max == 0);
                    }
                    Err(_) => assert!(!flight.is_empty()),
                }
            }
            4 => {
                let total = flight.len() as u32;
                let freed = match inp.u8() % 4 {
                    0 => inp.u32(),
                    1 => total,
                    _ => inp.below(u64::from(total) + 1) as u32,
                };
                match rx.on_dontneed_result(freed) {
                    Ok(o) => {
                        assert!(!flight.is_empty() && freed <= total);
                        assert_eq!((o.freed, o.retry), (freed, total - freed));
                        for (i, t) in flight.drain(..).enumerate() {
                            if (i as u32) < freed {
                                model.remove(&t);
                            } else if let Some(e) = model.get_mut(&t) {
                                e.0 = St::Pending;
                            }
                        }
                    }
                    Err(_) => assert!(flight.is_empty() || freed > total),
                }
            }
            _ => {
                let ok = rx.on_dontneed_error(inp.i32()).is_ok();
                assert_eq!(ok, !flight.is_empty());
                for t in flight.drain(..) {
                    if let Some(e) = model.get_mut(&t) {
                        e.0 = St::Pending;
                    }
                }
            }
        }
        if let Err(e) = rx.check() {
            panic!("state broken: {e}");
        }
        let count = |s: St| model.values().filter(|e| e.0 == s).count();
        assert_eq!(rx.held(), count(St::Held));
        assert_eq!(rx.pending(), count(St::Pending));
        assert_eq!(rx.in_flight_tokens(), count(St::InFlight));
        let bytes: u64 = model.values().map(|e| u64::from(e.1)).sum();
        assert_eq!(rx.stats().outstanding_bytes, bytes);
    }
}
