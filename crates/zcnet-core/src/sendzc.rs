//! The lifecycle of an io_uring request on memory: a send, zero-copy or not, or a receive.
//!
//! io_uring_prep_send_zc(3), io_uring/net.c: an `IORING_OP_SEND_ZC` request posts a first CQE
//! whose `res` is the byte count or `-errno`; if that CQE carries `IORING_CQE_F_MORE`, a second
//! CQE follows with `IORING_CQE_F_NOTIF` once the kernel no longer references the buffer — and
//! only then may the buffer be written again. A *failed* send can still have `F_MORE` and a
//! notification. With `IORING_SEND_ZC_REPORT_USAGE` in the SQE's `ioprio`, the notification's
//! `res` has `IORING_NOTIF_USAGE_ZC_COPIED` set when the kernel fell back to copying.
//! A plain `IORING_OP_SEND` posts one CQE without `F_MORE`: the data was copied.
//!
//! [`ReqState`] is one request's place in that protocol: a ring keeps one per request tag, beside
//! the request's memory, and [`ReqState::on_cqe`] says what each CQE means ([`Outcome`], counted
//! by [`Counts::add`]), when the memory may be reused and when the tag may be handed out again.
//! It is the one reading of these CQEs in zcnet (zcnet-sys's ring applies it per tag).

/// `IORING_CQE_F_MORE` (include/uapi/linux/io_uring.h): another CQE follows for this request.
pub const IORING_CQE_F_MORE: u32 = 1 << 1;
/// `IORING_CQE_F_NOTIF`: this CQE is a zero-copy notification.
pub const IORING_CQE_F_NOTIF: u32 = 1 << 3;
/// `IORING_NOTIF_USAGE_ZC_COPIED`: in a notification's `res`, the kernel copied the data.
pub const IORING_NOTIF_USAGE_ZC_COPIED: u32 = 1 << 31;

/// A CQE or submission that contradicts the protocol: a bug here or in the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TrackerError {
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

/// What a request is, for reading its CQEs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `IORING_OP_SEND`: one CQE; the kernel copied.
    Send,
    /// `IORING_OP_SEND_ZC`: a result, then a notification when the result has `F_MORE`.
    SendZc,
    /// `IORING_OP_RECV`: one CQE.
    Recv,
}

/// One request's place in its CQE protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReqState {
    /// No request: the tag is free.
    #[default]
    Idle,
    /// Submitted; its first CQE has not come.
    Pending {
        /// What it is.
        kind: Kind,
        /// Bytes asked for.
        len: u32,
    },
    /// A zero-copy send whose result had `F_MORE`: the kernel still references the memory
    /// until the notification.
    Notifying {
        /// Bytes the result said were sent (0 for a failed send).
        sent: u32,
    },
    /// A `SEND_ZC` refused before it ran (a failed result *without* `F_MORE`, seen as `ENOMEM`
    /// when RLIMIT_MEMLOCK cannot cover the pages, Linux 6.18): the kernel never pinned the
    /// memory, which is free again, but it still posts a notification later, so the tag is not.
    /// One refused before its notification exists gets none and stays here for good: the
    /// ring's owner hands out other tags and waits for none in this state (zcnet-sys's ring
    /// tests that).
    Stray,
}

/// What one CQE did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// What it meant; `None` for the stray notification of a refused `SEND_ZC`, which means
    /// nothing to the request's owner.
    pub outcome: Option<Outcome>,
    /// The request's memory may be reused from now on (its final CQE as far as the memory goes).
    pub released: bool,
    /// The tag is free from now on: no CQE will come for this request any more.
    pub ended: bool,
}

/// What one completion meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A send's result: bytes accepted or the errno, with the length asked for.
    Sent {
        /// Bytes accepted (`Ok`) or the errno (`Err`).
        res: Result<u32, i32>,
        /// The length the request asked for.
        asked: u32,
        /// It was a `SEND_ZC` (its bytes are counted by its notification, if one follows).
        zero_copy: bool,
    },
    /// A `SEND_ZC` notification: the kernel no longer references the bytes.
    Notified {
        /// Bytes the request had sent.
        bytes: u64,
        /// The kernel copied them (`IORING_NOTIF_USAGE_ZC_COPIED`).
        copied: bool,
    },
    /// A receive's result: bytes filled (0: the peer closed) or the errno.
    Received(Result<u32, i32>),
    /// A completion that contradicts the protocol (a bug here or in the kernel).
    Protocol(TrackerError),
}

/// `res` as bytes or a positive errno; i32::MIN is none and has no negation: it saturates
/// (found by fuzz/, target sendzc: the negation overflowed).
#[inline]
fn result_of(res: i32) -> Result<u32, i32> {
    if res >= 0 {
        Ok(res as u32)
    } else {
        Err(res.saturating_neg())
    }
}

impl ReqState {
    /// Records the submission of a `kind` request of `len` bytes (`Busy` unless idle).
    #[inline]
    pub fn submit(&mut self, tag: usize, kind: Kind, len: u32) -> Result<(), TrackerError> {
        if *self != ReqState::Idle {
            return Err(TrackerError::Busy(tag));
        }
        *self = ReqState::Pending { kind, len };
        Ok(())
    }

    /// Whether this is a send whose result has not come (its bytes may not be in the socket).
    #[inline]
    pub fn awaits_send_result(&self) -> bool {
        matches!(
            self,
            ReqState::Pending {
                kind: Kind::Send | Kind::SendZc,
                ..
            }
        )
    }

    /// Reads one CQE (`res`, `flags`) for the request in this state (`tag` names it in
    /// errors). A CQE the state does not wait for is [`Outcome::Protocol`]; one that ends the
    /// request anyway (no `F_MORE`) still releases it, so a confused kernel cannot strand
    /// memory.
    #[inline]
    pub fn on_cqe(&mut self, tag: usize, res: i32, flags: u32) -> Step {
        let notif = flags & IORING_CQE_F_NOTIF != 0;
        let more = flags & IORING_CQE_F_MORE != 0;
        let done = |outcome| Step {
            outcome: Some(outcome),
            released: true,
            ended: true,
        };
        match (*self, notif) {
            (ReqState::Pending { kind, len }, false) => {
                let outcome = match kind {
                    Kind::Recv => Outcome::Received(result_of(res)),
                    _ => Outcome::Sent {
                        res: result_of(res),
                        asked: len,
                        zero_copy: kind == Kind::SendZc,
                    },
                };
                if more && kind != Kind::Recv {
                    *self = ReqState::Notifying {
                        sent: res.max(0) as u32,
                    };
                    return Step {
                        outcome: Some(outcome),
                        released: false,
                        ended: false,
                    };
                }
                if kind == Kind::SendZc && res < 0 {
                    *self = ReqState::Stray;
                    return Step {
                        outcome: Some(outcome),
                        released: true,
                        ended: false,
                    };
                }
                *self = ReqState::Idle;
                done(outcome)
            }
            (ReqState::Notifying { sent }, true) => {
                *self = ReqState::Idle;
                done(Outcome::Notified {
                    bytes: u64::from(sent),
                    copied: (res as u32) & IORING_NOTIF_USAGE_ZC_COPIED != 0,
                })
            }
            (ReqState::Stray, _) => {
                *self = ReqState::Idle;
                Step {
                    outcome: None,
                    released: false,
                    ended: true,
                }
            }
            (ReqState::Idle, _) => Step {
                outcome: Some(Outcome::Protocol(TrackerError::Unexpected(tag))),
                released: false,
                ended: false,
            },
            (ReqState::Pending { .. } | ReqState::Notifying { .. }, _) => {
                let e = if notif {
                    TrackerError::NotificationBeforeResult(tag)
                } else {
                    TrackerError::DuplicateResult(tag)
                };
                if more {
                    return Step {
                        outcome: Some(Outcome::Protocol(e)),
                        released: false,
                        ended: false,
                    };
                }
                *self = ReqState::Idle;
                done(Outcome::Protocol(e))
            }
        }
    }
}

/// What moved through a ring, as the kernel reported it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Send requests queued.
    pub sends: u64,
    /// Bytes the kernel accepted from sends.
    pub bytes_sent: u64,
    /// Bytes of `SEND_ZC` requests whose notification said the kernel did not copy.
    pub zerocopy_bytes: u64,
    /// Bytes of `IORING_OP_SEND` requests, and of `SEND_ZC` requests whose notification said
    /// the kernel copied.
    pub copied_bytes: u64,
    /// Zero-copy notifications.
    pub notifications: u64,
    /// Notifications that said the kernel copied.
    pub copied_notifications: u64,
    /// Bytes receives filled.
    pub bytes_received: u64,
}

impl Counts {
    /// Counts what `outcome` says moved: the one rule. A send's accepted bytes are sent, and
    /// copied unless it was a `SEND_ZC`; a `SEND_ZC`'s bytes are zero-copy or copied as its
    /// notification says (none without one: a failed or refused send moved nothing); a
    /// receive's bytes are received. Failures count nothing.
    #[inline]
    pub fn add(&mut self, outcome: &Outcome) {
        match *outcome {
            Outcome::Sent {
                res: Ok(n),
                zero_copy,
                ..
            } => {
                self.bytes_sent += u64::from(n);
                if !zero_copy {
                    self.copied_bytes += u64::from(n);
                }
            }
            Outcome::Notified { bytes, copied } => {
                self.notifications += 1;
                // A send that moved nothing (failed, or 0 B) is notified as COPIED all the
                // same (the kernel's "not used"): it says nothing of copying, so it is not
                // counted as a copied notification (auto's verdict reads those).
                if copied && bytes > 0 {
                    self.copied_notifications += 1;
                    self.copied_bytes += bytes;
                } else {
                    self.zerocopy_bytes += bytes;
                }
            }
            Outcome::Received(Ok(n)) => self.bytes_received += u64::from(n),
            _ => {}
        }
    }

    /// What was counted since `earlier` (a snapshot of the same counts; a later one or another
    /// ring's counts nothing where it is ahead, rather than wrapping).
    pub fn since(&self, earlier: &Counts) -> Counts {
        Counts {
            sends: self.sends.saturating_sub(earlier.sends),
            bytes_sent: self.bytes_sent.saturating_sub(earlier.bytes_sent),
            zerocopy_bytes: self.zerocopy_bytes.saturating_sub(earlier.zerocopy_bytes),
            copied_bytes: self.copied_bytes.saturating_sub(earlier.copied_bytes),
            notifications: self.notifications.saturating_sub(earlier.notifications),
            copied_notifications: self
                .copied_notifications
                .saturating_sub(earlier.copied_notifications),
            bytes_received: self.bytes_received.saturating_sub(earlier.bytes_received),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NOTIF: u32 = IORING_CQE_F_NOTIF;
    const MORE: u32 = IORING_CQE_F_MORE;
    const COPIED: i32 = IORING_NOTIF_USAGE_ZC_COPIED as i32;
    /// include/uapi/asm-generic/errno-base.h
    const ENOMEM: i32 = 12;

    fn pending(kind: Kind, len: u32) -> ReqState {
        let mut s = ReqState::Idle;
        s.submit(0, kind, len).unwrap();
        s
    }

    fn step(outcome: Option<Outcome>, released: bool, ended: bool) -> Step {
        Step {
            outcome,
            released,
            ended,
        }
    }

    #[test]
    fn zero_copy_request_needs_both_cqes() {
        let mut s = pending(Kind::SendZc, 100);
        assert_eq!(s.submit(0, Kind::SendZc, 100), Err(TrackerError::Busy(0)));
        assert!(s.awaits_send_result());
        assert!(!pending(Kind::Recv, 1).awaits_send_result());
        let sent = Outcome::Sent {
            res: Ok(100),
            asked: 100,
            zero_copy: true,
        };
        assert_eq!(s.on_cqe(0, 100, MORE), step(Some(sent), false, false));
        assert!(!s.awaits_send_result());
        assert_eq!(
            s.submit(0, Kind::Send, 1),
            Err(TrackerError::Busy(0)),
            "the kernel still holds the memory until the notification"
        );
        let n = Outcome::Notified {
            bytes: 100,
            copied: true,
        };
        assert_eq!(s.on_cqe(0, COPIED, NOTIF), step(Some(n), true, true));
        assert_eq!(s, ReqState::Idle);
        assert_eq!(
            s.on_cqe(0, 0, NOTIF),
            step(
                Some(Outcome::Protocol(TrackerError::Unexpected(0))),
                false,
                false
            )
        );
    }

    #[test]
    fn failed_send_can_still_notify() {
        let mut s = pending(Kind::SendZc, 64);
        let r = s.on_cqe(0, -104, MORE);
        assert_eq!(
            r.outcome,
            Some(Outcome::Sent {
                res: Err(104),
                asked: 64,
                zero_copy: true
            })
        );
        assert!(!r.released, "memory held until the notification");
        let n = s.on_cqe(0, 0, NOTIF);
        assert_eq!(
            n,
            step(
                Some(Outcome::Notified {
                    bytes: 0,
                    copied: false
                }),
                true,
                true
            )
        );
    }

    /// A failed send's notification says COPIED ("not used": io_uring/notif.c with
    /// REPORT_USAGE): it moved no byte, so it counts as a notification but not a copied one.
    #[test]
    fn a_notification_of_nothing_sent_is_not_a_copied_one() {
        let mut c = Counts::default();
        c.add(&Outcome::Notified {
            bytes: 0,
            copied: true,
        });
        assert_eq!((c.notifications, c.copied_notifications), (1, 0));
        c.add(&Outcome::Notified {
            bytes: 10,
            copied: true,
        });
        assert_eq!((c.copied_notifications, c.copied_bytes), (1, 10));
        // A snapshot from elsewhere does not wrap.
        let later = Counts {
            notifications: 9,
            ..Counts::default()
        };
        assert_eq!(c.since(&later).notifications, 0);
    }

    /// A `SEND_ZC` refused before it ran (a failed result without `F_MORE`) frees its memory at
    /// once, but its tag only with the stray notification that still follows, which means
    /// nothing to the owner: a late notification can never be taken for the next request's.
    #[test]
    fn a_refused_zero_copy_send_keeps_its_tag_until_the_stray_notification() {
        let mut s = pending(Kind::SendZc, 8);
        let r = s.on_cqe(0, -ENOMEM, 0);
        assert_eq!(
            r,
            step(
                Some(Outcome::Sent {
                    res: Err(ENOMEM),
                    asked: 8,
                    zero_copy: true
                }),
                true,
                false
            )
        );
        assert_eq!(s, ReqState::Stray);
        assert_eq!(s.submit(0, Kind::SendZc, 8), Err(TrackerError::Busy(0)));
        assert_eq!(s.on_cqe(0, 0, NOTIF), step(None, false, true));
        assert_eq!(s, ReqState::Idle);
        // A plain send that failed has nothing to follow: both at once.
        let mut p = pending(Kind::Send, 8);
        assert!(matches!(
            p.on_cqe(0, -32, 0),
            Step {
                released: true,
                ended: true,
                ..
            }
        ));
    }

    /// A plain send's and a receive's single CQE ends the request; what they moved is counted
    /// as copied and received.
    #[test]
    fn single_cqe_requests_end_at_once_and_count_by_kind() {
        let mut counts = Counts::default();
        let mut s = pending(Kind::Send, 512);
        let r = s.on_cqe(0, 512, 0);
        assert!(r.released && r.ended);
        counts.add(&r.outcome.unwrap());
        let mut rx = pending(Kind::Recv, 4096);
        let r = rx.on_cqe(0, 1000, 0);
        assert_eq!(r, step(Some(Outcome::Received(Ok(1000))), true, true));
        counts.add(&r.outcome.unwrap());
        let mut zc = pending(Kind::SendZc, 300);
        counts.add(&zc.on_cqe(0, 300, MORE).outcome.unwrap());
        counts.add(&zc.on_cqe(0, 0, NOTIF).outcome.unwrap());
        let mut copied = pending(Kind::SendZc, 50);
        counts.add(&copied.on_cqe(0, 50, MORE).outcome.unwrap());
        counts.add(&copied.on_cqe(0, COPIED, NOTIF).outcome.unwrap());
        let mut failed = pending(Kind::Send, 70);
        counts.add(&failed.on_cqe(0, -104, 0).outcome.unwrap());
        assert_eq!(
            counts,
            Counts {
                sends: 0,
                bytes_sent: 512 + 300 + 50,
                zerocopy_bytes: 300,
                copied_bytes: 512 + 50,
                notifications: 2,
                copied_notifications: 1,
                bytes_received: 1000,
            }
        );
        let later = Counts {
            bytes_sent: counts.bytes_sent + 5,
            ..counts
        };
        assert_eq!(later.since(&counts).bytes_sent, 5);
    }

    /// Found by fuzz/ (target sendzc): a result of i32::MIN overflowed the negation.
    #[test]
    fn a_result_of_i32_min_is_an_error_not_a_panic() {
        let mut s = pending(Kind::Send, 8);
        let r = s.on_cqe(0, i32::MIN, 0);
        assert_eq!(
            r.outcome,
            Some(Outcome::Sent {
                res: Err(i32::MAX),
                asked: 8,
                zero_copy: false
            })
        );
        assert!(r.released && r.ended);
    }

    #[test]
    fn protocol_violations_are_errors() {
        let mut s = pending(Kind::SendZc, 1);
        assert_eq!(
            s.on_cqe(3, 0, NOTIF | MORE).outcome,
            Some(Outcome::Protocol(TrackerError::NotificationBeforeResult(3)))
        );
        assert!(!s.on_cqe(0, 1, MORE).released);
        let r = s.on_cqe(0, 1, 0);
        assert_eq!(
            r,
            step(
                Some(Outcome::Protocol(TrackerError::DuplicateResult(0))),
                true,
                true
            ),
            "a CQE without F_MORE ends the request even when it makes no sense"
        );
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
        /// A simulated kernel completes rounds of zero-copy requests with results and
        /// notifications interleaved at random (each request's result before its notification,
        /// a refused one's stray notification too); every request releases its memory exactly
        /// once and ends exactly once, and every notified byte is counted once.
        #[test]
        fn lifecycle_under_reordering(rounds in prop::collection::vec(prop::collection::vec(req(), 1..16), 1..20), seed in any::<u64>()) {
            let mut slots = [ReqState::Idle; 16];
            let mut s = seed | 1;
            let mut next = || { s ^= s << 13; s ^= s >> 7; s ^= s << 17; s };
            let mut counts = Counts::default();
            let (mut expect_zc, mut expect_copied) = (0u64, 0u64);
            for round in &rounds {
                let mut queue: Vec<(usize, bool)> = Vec::new(); // (slot, is_notif)
                for (slot, r) in round.iter().enumerate() {
                    slots[slot].submit(slot, Kind::SendZc, r.len).unwrap();
                    queue.push((slot, false));
                }
                let mut released = [0u32; 16];
                let mut ended = [0u32; 16];
                while !queue.is_empty() {
                    let i = (next() % queue.len() as u64) as usize;
                    let (slot, notif) = queue.swap_remove(i);
                    let r = &round[slot];
                    let st = if notif {
                        let res = if r.copied { COPIED } else { 0 };
                        slots[slot].on_cqe(slot, res, NOTIF)
                    } else {
                        // Every SEND_ZC notifies, a refused one (no F_MORE) too.
                        queue.push((slot, true));
                        slots[slot].on_cqe(slot, r.res, if r.more { MORE } else { 0 })
                    };
                    prop_assert!(!matches!(st.outcome, Some(Outcome::Protocol(_))), "{:?}", st);
                    if let Some(o) = st.outcome { counts.add(&o) }
                    released[slot] += u32::from(st.released);
                    ended[slot] += u32::from(st.ended);
                }
                for (slot, r) in round.iter().enumerate() {
                    prop_assert_eq!((released[slot], ended[slot]), (1, 1));
                    prop_assert_eq!(slots[slot], ReqState::Idle);
                    if r.more && r.res > 0 {
                        if r.copied { expect_copied += r.len as u64 } else { expect_zc += r.len as u64 }
                    }
                }
            }
            prop_assert_eq!(counts.zerocopy_bytes, expect_zc);
            prop_assert_eq!(counts.copied_bytes, expect_copied);
        }
    }
}
