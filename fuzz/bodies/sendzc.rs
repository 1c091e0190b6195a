//! io_uring SEND / SEND_ZC completions (`SendZcTracker`): arbitrary submissions and arbitrary
//! CQEs (any slot, result and flags, in any order) against a model of each slot: a CQE is
//! accepted exactly when the slot is waiting for it; every submission is released exactly
//! once, at its last CQE; a notification comes only after the result and reports the bytes the
//! result said were sent; `in_flight` and `awaiting_result` are exact.

use crate::input::Input;
use zcnet_core::sendzc::{
    SendZcTracker, IORING_CQE_F_MORE, IORING_CQE_F_NOTIF, IORING_NOTIF_USAGE_ZC_COPIED,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Idle,
    Result(u32),
    Notif(u32),
}

pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let n = 1 + inp.index(16);
    let mut t = SendZcTracker::new(n);
    let mut model = vec![Slot::Idle; n];
    let (mut submitted, mut released) = (0u64, 0u64);
    while !inp.is_empty() {
        let op = inp.u8();
        let slot = if op & 0x80 != 0 {
            inp.index(n + 2)
        } else {
            inp.index(n)
        };
        if op.is_multiple_of(4) {
            let len = inp.u32();
            let ok = t.on_submit(slot, len).is_ok();
            assert_eq!(ok, model.get(slot) == Some(&Slot::Idle));
            if ok {
                model[slot] = Slot::Result(len);
                submitted += 1;
            }
        } else {
            let res = match inp.u8() % 4 {
                0 => inp.i32(),
                1 => -i32::from(inp.u8()),
                2 => IORING_NOTIF_USAGE_ZC_COPIED as i32,
                _ => i32::from(inp.u16()),
            };
            let flags = match inp.u8() % 5 {
                0 => 0,
                1 => IORING_CQE_F_MORE,
                2 => IORING_CQE_F_NOTIF,
                3 => IORING_CQE_F_NOTIF | IORING_CQE_F_MORE,
                _ => inp.u32(),
            };
            let notif = flags & IORING_CQE_F_NOTIF != 0;
            let r = t.on_cqe(slot, res, flags);
            match (model.get(slot).copied(), notif) {
                (Some(Slot::Notif(sent)), true) => {
                    let o = r.expect("the notification the slot waits for");
                    let n = o.notification.expect("a notification");
                    assert_eq!(n.bytes, u64::from(sent));
                    assert_eq!(n.copied, (res as u32) & IORING_NOTIF_USAGE_ZC_COPIED != 0);
                    assert!(o.result.is_none() && o.released);
                    model[slot] = Slot::Idle;
                    released += 1;
                }
                (Some(Slot::Result(len)), false) => {
                    let o = r.expect("the result the slot waits for");
                    let (result, l) = o.result.expect("a result");
                    assert_eq!(l, len);
                    match result {
                        Ok(b) => assert!(res >= 0 && b == res as u32),
                        Err(e) => assert!(res < 0 && e > 0, "errno {e} from res {res}"),
                    }
                    assert!(o.notification.is_none());
                    let more = flags & IORING_CQE_F_MORE != 0;
                    assert_eq!(o.released, !more);
                    if more {
                        model[slot] = Slot::Notif(res.max(0) as u32);
                    } else {
                        model[slot] = Slot::Idle;
                        released += 1;
                    }
                }
                _ => assert!(r.is_err(), "a CQE the slot does not wait for was accepted"),
            }
        }
        let busy = model.iter().filter(|s| **s != Slot::Idle).count();
        let waiting = model
            .iter()
            .filter(|s| matches!(s, Slot::Result(_)))
            .count();
        assert_eq!(t.in_flight(), busy);
        assert_eq!(t.awaiting_result(), waiting);
        assert_eq!(submitted - released, busy as u64);
    }
}
