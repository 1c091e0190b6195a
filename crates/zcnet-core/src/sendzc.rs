//! The lifecycle of io_uring send requests, zero-copy or not.
//!
//! io_uring_prep_send_zc(3), io_uring/net.c: an `IORING_OP_SEND_ZC` request posts a first CQE
//! whose `res` is the byte count or `-errno`; if that CQE carries `IORING_CQE_F_MORE`, a second
//! CQE follows with `IORING_CQE_F_NOTIF` once the kernel no longer references the buffer — and
//! only then may the buffer be written again. A *failed* send can still have `F_MORE` and a
//! notification. With `IORING_SEND_ZC_REPORT_USAGE` in the SQE's `ioprio`, the notification's
//! `res` has `IORING_NOTIF_USAGE_ZC_COPIED` set when the kernel fell back to copying.
//! A plain `IORING_OP_SEND` posts one CQE without `F_MORE`: the data was copied.
//!
//! [`SendZcTracker`] keeps one state per request slot (a slot is a buffer: a buffer has at most
//! one request in flight) and says, for each CQE, what it means and when the slot is free.

/// `IORING_CQE_F_MORE` (include/uapi/linux/io_uring.h): another CQE follows for this request.
pub const IORING_CQE_F_MORE: u32 = 1 << 1;
/// `IORING_CQE_F_NOTIF`: this CQE is a zero-copy notification.
pub const IORING_CQE_F_NOTIF: u32 = 1 << 3;
/// `IORING_NOTIF_USAGE_ZC_COPIED`: in a notification's `res`, the kernel copied the data.
pub const IORING_NOTIF_USAGE_ZC_COPIED: u32 = 1 << 31;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Idle,
    AwaitResult { len: u32 },
    AwaitNotif { sent: u32 },
}

/// A notification: the kernel released the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Notification {
    /// Bytes the request had sent (0 for a failed request that still notified).
    pub bytes: u64,
    /// The kernel copied them (`IORING_NOTIF_USAGE_ZC_COPIED`).
    pub copied: bool,
}

/// What one CQE meant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CqeOutcome {
    /// A result CQE: bytes accepted (`Ok`) or the errno (`Err`), with the length submitted.
    pub result: Option<(Result<u32, i32>, u32)>,
    /// A notification CQE.
    pub notification: Option<Notification>,
    /// The request is over: its buffer may be reused.
    pub released: bool,
}

/// A CQE or submission that contradicts the protocol: a bug here or in the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TrackerError {
    /// The slot id is out of range.
    UnknownSlot(usize),
    /// A submit on a slot that still has a request in flight.
    Busy(usize),
    /// A CQE for a slot with no request in flight.
    Unexpected(usize),
    /// A notification arrived before the request's result.
    NotificationBeforeResult(usize),
    /// A second result for a request that already had one.
    DuplicateResult(usize),
}

impl std::fmt::Display for TrackerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TrackerError::UnknownSlot(s) => write!(f, "completion for unknown request slot {s}"),
            TrackerError::Busy(s) => write!(f, "request slot {s} submitted while still in flight"),
            TrackerError::Unexpected(s) => write!(f, "completion for idle request slot {s}"),
            TrackerError::NotificationBeforeResult(s) => {
                write!(
                    f,
                    "zero-copy notification before the result of request slot {s}"
                )
            }
            TrackerError::DuplicateResult(s) => write!(f, "second result for request slot {s}"),
        }
    }
}

impl std::error::Error for TrackerError {}

/// Per-slot state of io_uring send requests.
#[derive(Debug, Clone)]
pub struct SendZcTracker {
    state: Vec<State>,
    awaiting_result: usize,
    in_flight: usize,
}

impl SendZcTracker {
    /// A tracker for slots `0..slots`.
    pub fn new(slots: usize) -> Self {
        SendZcTracker {
            state: vec![State::Idle; slots],
            awaiting_result: 0,
            in_flight: 0,
        }
    }

    /// Makes room for slots `0..slots` (new slots idle); never shrinks.
    pub fn ensure(&mut self, slots: usize) {
        if slots > self.state.len() {
            self.state.resize(slots, State::Idle);
        }
    }

    /// Requests submitted and not yet released (result or notification outstanding).
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Requests whose result CQE has not arrived.
    pub fn awaiting_result(&self) -> usize {
        self.awaiting_result
    }

    /// Records the submission of `len` bytes from slot `slot`.
    pub fn on_submit(&mut self, slot: usize, len: u32) -> Result<(), TrackerError> {
        let st = self
            .state
            .get_mut(slot)
            .ok_or(TrackerError::UnknownSlot(slot))?;
        if *st != State::Idle {
            return Err(TrackerError::Busy(slot));
        }
        *st = State::AwaitResult { len };
        self.in_flight += 1;
        self.awaiting_result += 1;
        Ok(())
    }

    /// Interprets a CQE (`res`, `flags`) for slot `slot`.
    pub fn on_cqe(
        &mut self,
        slot: usize,
        res: i32,
        flags: u32,
    ) -> Result<CqeOutcome, TrackerError> {
        let st = self
            .state
            .get_mut(slot)
            .ok_or(TrackerError::UnknownSlot(slot))?;
        let mut out = CqeOutcome::default();
        if flags & IORING_CQE_F_NOTIF != 0 {
            match *st {
                State::AwaitNotif { sent } => {
                    out.notification = Some(Notification {
                        bytes: u64::from(sent),
                        copied: (res as u32) & IORING_NOTIF_USAGE_ZC_COPIED != 0,
                    });
                    *st = State::Idle;
                }
                State::AwaitResult { .. } => {
                    return Err(TrackerError::NotificationBeforeResult(slot))
                }
                State::Idle => return Err(TrackerError::Unexpected(slot)),
            }
        } else {
            match *st {
                State::AwaitResult { len } => {
                    // -errno; i32::MIN is none, and has no negation: it saturates (found by
                    // fuzz/, target sendzc: the negation overflowed).
                    let result = if res >= 0 {
                        Ok(res as u32)
                    } else {
                        Err(res.saturating_neg())
                    };
                    out.result = Some((result, len));
                    self.awaiting_result -= 1;
                    *st = if flags & IORING_CQE_F_MORE != 0 {
                        State::AwaitNotif {
                            sent: res.max(0) as u32,
                        }
                    } else {
                        State::Idle
                    };
                }
                State::AwaitNotif { .. } => return Err(TrackerError::DuplicateResult(slot)),
                State::Idle => return Err(TrackerError::Unexpected(slot)),
            }
        }
        if *st == State::Idle {
            out.released = true;
            self.in_flight -= 1;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn zero_copy_request_needs_both_cqes() {
        let mut t = SendZcTracker::new(2);
        t.on_submit(0, 100).unwrap();
        assert_eq!(t.on_submit(0, 100), Err(TrackerError::Busy(0)));
        let r = t.on_cqe(0, 100, IORING_CQE_F_MORE).unwrap();
        assert_eq!(r.result, Some((Ok(100), 100)));
        assert!(!r.released);
        assert_eq!(t.awaiting_result(), 0);
        assert_eq!(t.in_flight(), 1);
        let n = t
            .on_cqe(0, IORING_NOTIF_USAGE_ZC_COPIED as i32, IORING_CQE_F_NOTIF)
            .unwrap();
        assert_eq!(
            n.notification,
            Some(Notification {
                bytes: 100,
                copied: true
            })
        );
        assert!(n.released);
        assert_eq!(t.in_flight(), 0);
        assert_eq!(
            t.on_cqe(0, 0, IORING_CQE_F_NOTIF),
            Err(TrackerError::Unexpected(0))
        );
    }

    #[test]
    fn failed_send_can_still_notify() {
        let mut t = SendZcTracker::new(1);
        t.on_submit(0, 64).unwrap();
        let r = t.on_cqe(0, -104, IORING_CQE_F_MORE).unwrap();
        assert_eq!(r.result, Some((Err(104), 64)));
        assert!(!r.released, "buffer must stay held until the notification");
        let n = t.on_cqe(0, 0, IORING_CQE_F_NOTIF).unwrap();
        assert_eq!(
            n.notification,
            Some(Notification {
                bytes: 0,
                copied: false
            })
        );
        assert!(n.released);
    }

    /// Step by step: after a result CQE with `F_MORE` the slot is still in flight
    /// (not released, a new submit on it is `Busy`) and only the notification frees it; a
    /// result *without* `F_MORE` (a plain send, or a zero-copy request that failed before it
    /// took the buffer: no notification will come) frees it at once. Two slots interleaved so
    /// that one slot's release cannot stand in for the other's.
    #[test]
    fn the_slot_is_free_only_after_the_notification() {
        let mut t = SendZcTracker::new(2);
        t.on_submit(0, 4096).unwrap();
        t.on_submit(1, 512).unwrap();
        assert_eq!((t.in_flight(), t.awaiting_result()), (2, 2));

        let r = t.on_cqe(0, 4096, IORING_CQE_F_MORE).unwrap();
        assert_eq!(r.result, Some((Ok(4096), 4096)));
        assert_eq!(r.notification, None);
        assert!(
            !r.released,
            "released on the result CQE (F_MORE): the kernel still holds the buffer"
        );
        assert_eq!((t.in_flight(), t.awaiting_result()), (2, 1));
        assert_eq!(
            t.on_submit(0, 1),
            Err(TrackerError::Busy(0)),
            "not free yet"
        );

        // Slot 1: a result without F_MORE, no notification will come: free now.
        let r = t.on_cqe(1, 512, 0).unwrap();
        assert_eq!(r.result, Some((Ok(512), 512)));
        assert!(
            r.released,
            "a result without F_MORE is the request's last CQE"
        );
        assert_eq!((t.in_flight(), t.awaiting_result()), (1, 0));
        assert_eq!(
            t.on_cqe(1, 0, IORING_CQE_F_NOTIF),
            Err(TrackerError::Unexpected(1)),
            "no notification follows a result without F_MORE"
        );
        t.on_submit(1, 64).unwrap();

        // Slot 0 is still held until its notification.
        assert_eq!(t.on_submit(0, 1), Err(TrackerError::Busy(0)));
        let n = t.on_cqe(0, 0, IORING_CQE_F_NOTIF).unwrap();
        assert_eq!(n.result, None);
        assert_eq!(
            n.notification,
            Some(Notification {
                bytes: 4096,
                copied: false
            })
        );
        assert!(n.released, "the notification frees the slot");
        assert_eq!((t.in_flight(), t.awaiting_result()), (1, 1));
        t.on_submit(0, 8).unwrap();

        // A zero-copy request that failed without F_MORE (e.g. -EINVAL at prep): freed by
        // its only CQE.
        let r = t.on_cqe(0, -22, 0).unwrap();
        assert_eq!(r.result, Some((Err(22), 8)));
        assert!(r.released);
        let r = t.on_cqe(1, 64, 0).unwrap();
        assert!(r.released);
        assert_eq!((t.in_flight(), t.awaiting_result()), (0, 0));
    }

    /// Found by fuzz/ (target sendzc): a result of i32::MIN overflowed the negation.
    #[test]
    fn a_result_of_i32_min_is_an_error_not_a_panic() {
        let mut t = SendZcTracker::new(1);
        t.on_submit(0, 8).unwrap();
        let r = t.on_cqe(0, i32::MIN, 0).unwrap();
        assert_eq!(r.result, Some((Err(i32::MAX), 8)));
        assert!(r.released);
        assert_eq!(t.in_flight(), 0);
    }

    #[test]
    fn protocol_violations_are_errors() {
        let mut t = SendZcTracker::new(1);
        assert_eq!(t.on_cqe(3, 0, 0), Err(TrackerError::UnknownSlot(3)));
        t.on_submit(0, 1).unwrap();
        assert_eq!(
            t.on_cqe(0, 0, IORING_CQE_F_NOTIF),
            Err(TrackerError::NotificationBeforeResult(0))
        );
        t.on_cqe(0, 1, IORING_CQE_F_MORE).unwrap();
        assert_eq!(t.on_cqe(0, 1, 0), Err(TrackerError::DuplicateResult(0)));
    }

    #[derive(Debug, Clone)]
    struct Req {
        len: u32,
        res: i32,
        more: bool,
        copied: bool,
    }

    fn req() -> impl Strategy<Value = Req> {
        (
            1u32..65536,
            prop::bool::weighted(0.1),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(len, fail, more, copied)| Req {
                len,
                res: if fail { -32 } else { len as i32 },
                more: more || !fail,
                copied,
            })
    }

    proptest! {
        /// A simulated kernel completes rounds of requests with results and notifications
        /// interleaved at random (each request's result before its notification); every slot
        /// is released exactly once and every notified byte is attributed once.
        #[test]
        fn lifecycle_under_reordering(rounds in prop::collection::vec(prop::collection::vec(req(), 1..16), 1..20), seed in any::<u64>()) {
            let slots = 16;
            let mut t = SendZcTracker::new(slots);
            let mut s = seed | 1;
            let mut next = || { s ^= s << 13; s ^= s >> 7; s ^= s << 17; s };
            let (mut zc, mut copied, mut expect_zc, mut expect_copied) = (0u64, 0u64, 0u64, 0u64);
            for round in &rounds {
                let mut queue: Vec<(usize, bool)> = Vec::new(); // (slot, is_notif)
                for (slot, r) in round.iter().enumerate() {
                    t.on_submit(slot, r.len).unwrap();
                    queue.push((slot, false));
                }
                let mut released = vec![0u32; slots];
                while !queue.is_empty() {
                    let i = (next() % queue.len() as u64) as usize;
                    let (slot, notif) = queue.swap_remove(i);
                    let r = &round[slot];
                    let out = if notif {
                        let res = if r.copied { IORING_NOTIF_USAGE_ZC_COPIED as i32 } else { 0 };
                        t.on_cqe(slot, res, IORING_CQE_F_NOTIF).unwrap()
                    } else {
                        let flags = if r.more { IORING_CQE_F_MORE } else { 0 };
                        if r.more { queue.push((slot, true)); }
                        t.on_cqe(slot, r.res, flags).unwrap()
                    };
                    if let Some(n) = out.notification {
                        if n.copied { copied += n.bytes } else { zc += n.bytes }
                    }
                    if out.released { released[slot] += 1; }
                }
                for (slot, r) in round.iter().enumerate() {
                    prop_assert_eq!(released[slot], 1);
                    if r.more && r.res > 0 {
                        if r.copied { expect_copied += r.len as u64 } else { expect_zc += r.len as u64 }
                    }
                }
                prop_assert_eq!(t.in_flight(), 0);
            }
            prop_assert_eq!(zc, expect_zc);
            prop_assert_eq!(copied, expect_copied);
        }
    }
}
