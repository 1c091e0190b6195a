//! io_uring SEND / SEND_ZC / RECV completions (`ReqState`, one per ring tag): arbitrary
//! submissions and arbitrary CQEs (any slot, result and flags, in any order) against a model of
//! each slot: a CQE is read as what the slot waits for exactly when it waits for it, and as a
//! protocol error otherwise; every submission releases its memory exactly once and ends
//! exactly once (a refused SEND_ZC's tag only with its stray notification); a notification
//! comes only after the result and reports the bytes the result said were sent.

use crate::input::Input;
use zcnet_core::sendzc::{
    Kind, Outcome, ReqState, IORING_CQE_F_MORE, IORING_CQE_F_NOTIF, IORING_NOTIF_USAGE_ZC_COPIED,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Idle,
    Result(Kind, u32),
    Notif(u32),
    Stray,
}

pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let n = 1 + inp.index(16);
    let mut states = vec![ReqState::Idle; n];
    let mut model = vec![Slot::Idle; n];
    let (mut submitted, mut released, mut ended) = (0u64, 0u64, 0u64);
    while !inp.is_empty() {
        let op = inp.u8();
        let slot = inp.index(n);
        if op.is_multiple_of(4) {
            let len = inp.u32();
            let kind = match (op >> 2) % 3 {
                0 => Kind::SendZc,
                1 => Kind::Send,
                _ => Kind::Recv,
            };
            let ok = states[slot].submit(slot, kind, len).is_ok();
            assert_eq!(ok, model[slot] == Slot::Idle);
            if ok {
                model[slot] = Slot::Result(kind, len);
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
            let more = flags & IORING_CQE_F_MORE != 0;
            let st = states[slot].on_cqe(slot, res, flags);
            match (model[slot], notif) {
                (Slot::Notif(sent), true) => {
                    let Some(Outcome::Notified { bytes, copied }) = st.outcome else {
                        panic!("the notification the slot waits for: {st:?}");
                    };
                    assert_eq!(bytes, u64::from(sent));
                    assert_eq!(copied, (res as u32) & IORING_NOTIF_USAGE_ZC_COPIED != 0);
                    assert!(st.released && st.ended);
                    model[slot] = Slot::Idle;
                }
                (Slot::Result(kind, len), false) => {
                    let result = match st.outcome {
                        Some(Outcome::Sent {
                            res,
                            asked,
                            zero_copy,
                        }) => {
                            assert_ne!(kind, Kind::Recv);
                            assert_eq!(asked, len);
                            assert_eq!(zero_copy, kind == Kind::SendZc);
                            res
                        }
                        Some(Outcome::Received(r)) => {
                            assert_eq!(kind, Kind::Recv);
                            r
                        }
                        other => panic!("the result the slot waits for, not {other:?}"),
                    };
                    match result {
                        Ok(b) => assert!(res >= 0 && b == res as u32),
                        Err(e) => assert!(res < 0 && e > 0, "errno {e} from res {res}"),
                    }
                    model[slot] = if more && kind != Kind::Recv {
                        assert!(!st.released && !st.ended);
                        Slot::Notif(res.max(0) as u32)
                    } else if kind == Kind::SendZc && res < 0 {
                        assert!(st.released && !st.ended);
                        Slot::Stray
                    } else {
                        assert!(st.released && st.ended);
                        Slot::Idle
                    };
                }
                (Slot::Stray, _) => {
                    assert_eq!(st.outcome, None, "a stray notification means nothing");
                    assert!(!st.released && st.ended);
                    model[slot] = Slot::Idle;
                }
                (Slot::Idle, _) => {
                    assert!(matches!(st.outcome, Some(Outcome::Protocol(_))));
                    assert!(!st.released && !st.ended);
                }
                (Slot::Result(..) | Slot::Notif(_), _) => {
                    assert!(
                        matches!(st.outcome, Some(Outcome::Protocol(_))),
                        "a CQE the slot does not wait for was accepted: {st:?}"
                    );
                    assert_eq!(st.ended, !more, "without F_MORE it ends anyway");
                    assert_eq!(st.released, !more);
                    if !more {
                        model[slot] = Slot::Idle;
                    }
                }
            }
            released += u64::from(st.released);
            ended += u64::from(st.ended);
        }
        for (s, m) in states.iter().zip(&model) {
            let expect = match *m {
                Slot::Idle => ReqState::Idle,
                Slot::Result(kind, len) => ReqState::Pending { kind, len },
                Slot::Notif(sent) => ReqState::Notifying { sent },
                Slot::Stray => ReqState::Stray,
            };
            assert_eq!(*s, expect);
        }
        let busy = model.iter().filter(|s| **s != Slot::Idle).count();
        let holding = model
            .iter()
            .filter(|s| matches!(s, Slot::Result(..) | Slot::Notif(_)))
            .count();
        assert_eq!(submitted - ended, busy as u64);
        assert_eq!(submitted - released, holding as u64);
    }
}
