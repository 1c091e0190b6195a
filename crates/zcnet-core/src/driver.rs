//! The send driver: the decisions every zcnet sender makes, made once, without I/O — which kind
//! of send the next payload gets, what a refusal of zero copy means for the sends after it, and
//! when a sender that gets nothing back from the kernel has stalled. The library's sender
//! (`zcnet::Sender`) and the NCCL plugin's data path drive it with what their kernels said; the
//! clock readings are theirs too.
//!
//! - **Zero copy or copy** ([`SendDriver::zero_copy`]): what was asked (copy, zero copy, or
//!   `auto`, whose [`AutoPolicy`] follows the kernel's notifications), unless zero copy was
//!   refused.
//! - **Refusals** ([`Refusal`]): a kernel without `IORING_OP_SEND_ZC`, or locked memory spent
//!   (`ENOMEM`: RLIMIT_MEMLOCK, which `SEND_ZC` charges for the pages it pins per request from
//!   memory that is not a registered buffer, io_uring/net.c). Neither comes back soon: the
//!   sender copies from then on, and the refusal is kept for its statistics.
//! - **Stalls** ([`StallClock`]): the clock starts at the first wait that brought nothing back
//!   and stops at anything that moved; a sender has stalled once it ran past its timeout.

use crate::auto::{AutoPolicy, Mode, Switch};

/// What a sender was asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    /// Copy every payload (`send()`, `IORING_OP_SEND`).
    Copy,
    /// Zero copy for every payload (`IORING_OP_SEND_ZC`).
    ZeroCopy,
    /// Zero copy until the kernel says it copies ([`AutoPolicy`]).
    Auto,
}

/// Why zero copy is not used any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The kernel has no `IORING_OP_SEND_ZC` (Linux 6.0).
    NoSendZc,
    /// A zero-copy send was refused for want of locked memory (`ENOMEM`, RLIMIT_MEMLOCK).
    Memlock,
}

impl Refusal {
    /// The short label statistics count it under.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::NoSendZc => "no SEND_ZC",
            Refusal::Memlock => "memlock",
        }
    }
}

#[derive(Debug, Clone)]
enum Kind {
    Copy,
    ZeroCopy,
    Auto(Box<AutoPolicy>),
}

/// The decisions of one sender (see the module docs).
#[derive(Debug, Clone)]
pub struct SendDriver {
    kind: Kind,
    refusals: Vec<Refusal>,
}

impl SendDriver {
    /// A sender asked to do `asked` where the kernel has (`send_zc`) or lacks `SEND_ZC`: without
    /// it, anything but [`Asked::Copy`] copies, refused with [`Refusal::NoSendZc`].
    pub fn new(asked: Asked, send_zc: bool) -> SendDriver {
        let mut d = SendDriver {
            kind: match asked {
                Asked::Copy => Kind::Copy,
                Asked::ZeroCopy => Kind::ZeroCopy,
                Asked::Auto => Kind::Auto(Box::default()),
            },
            refusals: Vec::new(),
        };
        if !send_zc {
            d.refused(Refusal::NoSendZc);
        }
        d
    }

    /// How the next payload goes, at `now_ns` of the caller's clock.
    #[inline]
    pub fn mode(&mut self, now_ns: u64) -> Mode {
        match &mut self.kind {
            Kind::Copy => Mode::Copy,
            Kind::ZeroCopy => Mode::ZeroCopy,
            Kind::Auto(p) => p.mode(now_ns),
        }
    }

    /// Whether the next payload goes with zero copy ([`SendDriver::mode`]).
    #[inline]
    pub fn zero_copy(&mut self, now_ns: u64) -> bool {
        self.mode(now_ns) == Mode::ZeroCopy
    }

    /// Zero copy was refused for `why`: the sender copies from now on. True the first time
    /// (the caller says so once); false when it copied already.
    pub fn refused(&mut self, why: Refusal) -> bool {
        if matches!(self.kind, Kind::Copy) {
            return false;
        }
        self.kind = Kind::Copy;
        self.refusals.push(why);
        true
    }

    /// The refusals so far, oldest first.
    pub fn refusals(&self) -> &[Refusal] {
        &self.refusals
    }

    /// Zero-copy notifications came back: `zero` said the kernel did not copy, `copied` that it
    /// did. For `auto`, the switch this made, if any.
    pub fn on_notifications(&mut self, zero: u64, copied: u64, now_ns: u64) -> Option<&Switch> {
        let Kind::Auto(p) = &mut self.kind else {
            return None;
        };
        let before = p.switches().len();
        p.on_notifications(zero, copied, now_ns);
        p.switches().get(before)
    }

    /// `auto`'s switches so far (none for the other kinds).
    pub fn switches(&self) -> &[Switch] {
        match &self.kind {
            Kind::Auto(p) => p.switches(),
            _ => &[],
        }
    }
}

/// A sender's stall clock, in nanoseconds of the caller's clock: it runs from the first wait
/// that brought nothing back and stops at anything that moved (a completion, a buffer back,
/// bytes accepted). It spans calls: a caller that waits in bounded slices (checking for
/// signals between them) stalls after the same time as one that blocks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StallClock {
    since_ns: Option<u64>,
}

impl StallClock {
    /// Something moved: the clock stops.
    #[inline]
    pub fn moved(&mut self) {
        self.since_ns = None;
    }

    /// Whether it runs (a wait brought nothing back since something last moved).
    pub fn running(&self) -> bool {
        self.since_ns.is_some()
    }

    /// A wait brought nothing back at `now_ns`: starts the clock if it was stopped; `Err` with
    /// the nanoseconds it has run once that is more than `timeout_ns`.
    pub fn still(&mut self, now_ns: u64, timeout_ns: u64) -> Result<(), u64> {
        let since = *self.since_ns.get_or_insert(now_ns);
        let ran = now_ns.saturating_sub(since);
        if ran > timeout_ns {
            return Err(ran);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_was_asked_is_done_until_zero_copy_is_refused() {
        let mut d = SendDriver::new(Asked::ZeroCopy, true);
        assert!(d.zero_copy(0));
        assert!(d.refused(Refusal::Memlock), "said once");
        assert!(!d.zero_copy(1));
        assert!(!d.refused(Refusal::Memlock), "not twice");
        assert_eq!(d.refusals(), [Refusal::Memlock]);
        let mut c = SendDriver::new(Asked::Copy, true);
        assert!(!c.zero_copy(0));
        assert!(
            !c.refused(Refusal::Memlock),
            "copying already: nothing refused"
        );
        assert!(c.refusals().is_empty());
    }

    #[test]
    fn a_kernel_without_send_zc_copies_and_says_why_unless_copy_was_asked() {
        let mut d = SendDriver::new(Asked::Auto, false);
        assert!(!d.zero_copy(0));
        assert_eq!(d.refusals(), [Refusal::NoSendZc]);
        assert_eq!(Refusal::NoSendZc.label(), "no SEND_ZC");
        assert!(SendDriver::new(Asked::Copy, false).refusals().is_empty());
    }

    #[test]
    fn auto_switches_to_copy_when_the_kernel_copies() {
        let mut d = SendDriver::new(Asked::Auto, true);
        assert!(d.zero_copy(0));
        let mut switched = None;
        for i in 0..64 {
            if let Some(s) = d.on_notifications(0, 16, i * 1_000) {
                switched = Some(s.to);
                break;
            }
        }
        assert_eq!(switched, Some(Mode::Copy));
        assert!(!d.zero_copy(100_000));
        assert_eq!(d.switches().len(), 1);
        // The other kinds have no policy to feed.
        let mut z = SendDriver::new(Asked::ZeroCopy, true);
        assert!(z.on_notifications(0, 1_000, 0).is_none());
        assert!(z.switches().is_empty());
    }

    #[test]
    fn the_stall_clock_runs_from_the_first_still_wait_across_calls() {
        let mut c = StallClock::default();
        assert!(!c.running());
        assert_eq!(c.still(100, 50), Ok(()));
        assert!(c.running());
        assert_eq!(c.still(140, 50), Ok(()), "40 ns: within");
        assert_eq!(c.still(151, 50), Err(51));
        c.moved();
        assert!(!c.running());
        assert_eq!(c.still(1_000, 50), Ok(()), "restarted by the move");
        assert_eq!(c.still(1_049, 50), Ok(()));
        assert_eq!(c.still(1_051, 50), Err(51));
    }
}
