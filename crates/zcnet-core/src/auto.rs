//! The `auto` send policy: start zero-copy, fall back to copying when the kernel says it copies.
//!
//! On paths where the kernel must copy anyway (TCP over loopback or veth: the skb loops back into
//! a receive path, `skb_orphan_frags_rx`), zero-copy sends are slower than plain `send()`: the
//! page pinning and notification are pure overhead (Documentation/networking/msg_zerocopy.rst,
//! "Loopback": packets looped to a local socket incur a deferred copy; measured in
//! docs/perf.md). The policy
//! counts notifications; when most of the last `window` report COPIED, it switches to copying and
//! re-checks after a back-off (doubling up to a cap while the answer stays "copied").

/// Which kind of send the policy wants now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Zero-copy sends (io_uring SEND_ZC).
    ZeroCopy,
    /// Plain copying sends.
    Copy,
}

impl Mode {
    /// A short lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::ZeroCopy => "zero-copy",
            Mode::Copy => "copy",
        }
    }
}

/// One change of mode, for the statistics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Switch {
    /// When, in nanoseconds of the caller's clock.
    pub at_ns: u64,
    /// The new mode.
    pub to: Mode,
    /// Notifications reporting COPIED in the window that decided (0 for a re-check).
    pub copied: u32,
    /// Notifications in that window.
    pub of: u32,
    /// Set when the switch was not the policy's: why zero copy could not be used at all (e.g.
    /// its memory could not be locked), and what is used instead. One line, its terms typed.
    pub reason: Option<crate::text::Text>,
}

impl Switch {
    /// A switch to copying, made at `at_ns` because zero copy could not be used: `reason` says
    /// why and what sends instead.
    pub fn fallback(at_ns: u64, reason: impl Into<crate::text::Text>) -> Switch {
        Switch {
            at_ns,
            to: Mode::Copy,
            copied: 0,
            of: 0,
            reason: Some(reason.into()),
        }
    }

    /// The switch in a front end's `words` (`Display` is the library's).
    pub fn render(&self, words: &dyn crate::text::Words) -> String {
        match &self.reason {
            Some(reason) => format!(
                "at {:.3}s: {}",
                self.at_ns as f64 / 1e9,
                reason.render(words)
            ),
            None => self.to_string(),
        }
    }
}

impl std::fmt::Display for Switch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let t = self.at_ns as f64 / 1e9;
        if let Some(reason) = &self.reason {
            return write!(f, "at {t:.3}s: {reason}");
        }
        match self.to {
            Mode::Copy => write!(
                f,
                "at {t:.3}s: switched to copy ({} of the last {} notifications said COPIED)",
                self.copied, self.of
            ),
            Mode::ZeroCopy if self.of == 0 => write!(f, "at {t:.3}s: re-checking zero-copy"),
            Mode::ZeroCopy => write!(
                f,
                "at {t:.3}s: staying zero-copy ({} of {} notifications said COPIED)",
                self.copied, self.of
            ),
        }
    }
}

/// Decides between zero-copy and copying sends from the kernel's notifications.
#[derive(Debug, Clone)]
pub struct AutoPolicy {
    mode: Mode,
    window: u32,
    recheck_window: u32,
    /// Size of the window being filled now (`recheck_window` right after a re-check starts).
    current: u32,
    seen: u32,
    copied: u32,
    min_backoff_ns: u64,
    max_backoff_ns: u64,
    backoff_ns: u64,
    next_probe_ns: u64,
    switches: Vec<Switch>,
}

impl Default for AutoPolicy {
    /// The first decision and every re-check on 8 notifications, later ones on windows of 32;
    /// re-check after 1 s, doubling up to 8 s.
    fn default() -> Self {
        AutoPolicy::new(32, 1_000_000_000, 8_000_000_000).with_recheck_window(8)
    }
}

impl AutoPolicy {
    /// Decide on every `window` notifications; back off between `min_backoff_ns` and
    /// `max_backoff_ns` before re-checking a path that copied.
    pub(crate) fn new(window: u32, min_backoff_ns: u64, max_backoff_ns: u64) -> Self {
        AutoPolicy {
            mode: Mode::ZeroCopy,
            window: window.max(1),
            recheck_window: window.max(1),
            current: window.max(1),
            seen: 0,
            copied: 0,
            min_backoff_ns,
            max_backoff_ns: max_backoff_ns.max(min_backoff_ns),
            backoff_ns: min_backoff_ns,
            next_probe_ns: 0,
            switches: Vec::new(),
        }
    }

    /// Decide the first window and every re-check on `w` notifications instead of the full
    /// window: on a path that copies, starting and re-checking then cost only `w` slow zero-copy
    /// sends (on TCP each may wait for a delayed ACK). Later decisions use the full window.
    pub(crate) fn with_recheck_window(mut self, w: u32) -> Self {
        self.recheck_window = w.clamp(1, self.window);
        if self.switches.is_empty() && self.seen == 0 {
            self.current = self.recheck_window;
        }
        self
    }

    /// The mode to use for a send at `now_ns`; a copy period that has lasted its back-off turns
    /// into a zero-copy re-check here.
    pub fn mode(&mut self, now_ns: u64) -> Mode {
        if self.mode == Mode::Copy && now_ns >= self.next_probe_ns {
            self.mode = Mode::ZeroCopy;
            self.seen = 0;
            self.copied = 0;
            self.current = self.recheck_window;
            self.switches.push(Switch {
                at_ns: now_ns,
                to: Mode::ZeroCopy,
                copied: 0,
                of: 0,
                reason: None,
            });
        }
        self.mode
    }

    /// Feeds notifications that arrived: `zero_copy` said zero-copy, `copied` said COPIED.
    /// Notifications that arrive while copying (late ones from earlier zero-copy sends) are
    /// ignored.
    pub fn on_notifications(&mut self, zero_copy: u64, copied: u64, now_ns: u64) {
        if self.mode != Mode::ZeroCopy {
            return;
        }
        let mut zero_copy = zero_copy;
        let mut copied = copied;
        while zero_copy + copied > 0 {
            // Fill the window one notification kind at a time, copied first (the order inside one
            // batch is unknown; counting copied first decides no earlier than the truth would).
            let room = u64::from(self.current - self.seen);
            let c = copied.min(room);
            copied -= c;
            let z = zero_copy.min(room - c);
            zero_copy -= z;
            self.seen += (c + z) as u32;
            self.copied += c as u32;
            if self.seen == self.current {
                self.decide(now_ns);
                if self.mode == Mode::Copy {
                    return;
                }
            }
        }
    }

    fn decide(&mut self, now_ns: u64) {
        let (copied, of) = (self.copied, self.seen);
        self.seen = 0;
        self.copied = 0;
        self.current = self.window;
        if copied * 2 > of {
            self.mode = Mode::Copy;
            self.next_probe_ns = now_ns.saturating_add(self.backoff_ns);
            self.backoff_ns = (self.backoff_ns.saturating_mul(2)).min(self.max_backoff_ns);
            self.switches.push(Switch {
                at_ns: now_ns,
                to: Mode::Copy,
                copied,
                of,
                reason: None,
            });
        } else {
            if self.switches.last().is_some_and(|s| s.of == 0) {
                // A re-check found zero-copy working again: say so.
                self.switches.push(Switch {
                    at_ns: now_ns,
                    to: Mode::ZeroCopy,
                    copied,
                    of,
                    reason: None,
                });
            }
            self.backoff_ns = self.min_backoff_ns;
        }
    }

    /// Every mode change so far.
    pub fn switches(&self) -> &[Switch] {
        &self.switches
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn copied_path_switches_then_rechecks_with_backoff() {
        let mut p = AutoPolicy::new(4, S, 4 * S);
        assert_eq!(p.mode(0), Mode::ZeroCopy);
        p.on_notifications(0, 3, 10);
        assert_eq!(p.mode(10), Mode::ZeroCopy, "window not full yet");
        p.on_notifications(0, 1, 20);
        assert_eq!(p.mode(20), Mode::Copy);
        assert_eq!(p.mode(S + 19), Mode::Copy);
        assert_eq!(
            p.mode(S + 20),
            Mode::ZeroCopy,
            "re-check after the back-off"
        );
        p.on_notifications(1, 3, S + 30);
        assert_eq!(p.mode(S + 30), Mode::Copy);
        // back-off doubled
        assert_eq!(p.mode(3 * S + 29), Mode::Copy);
        assert_eq!(p.mode(3 * S + 30), Mode::ZeroCopy);
        assert_eq!(p.switches().len(), 4);
        assert!(p.switches()[0].to_string().contains("4 of the last 4"));
    }

    #[test]
    fn recheck_uses_the_short_window() {
        let mut p = AutoPolicy::new(32, S, S).with_recheck_window(4);
        p.on_notifications(0, 3, 0);
        assert_eq!(p.mode(1), Mode::ZeroCopy);
        p.on_notifications(0, 1, 0);
        assert_eq!(
            p.mode(1),
            Mode::Copy,
            "the first decision uses the short window too"
        );
        assert_eq!(p.mode(S + 1), Mode::ZeroCopy);
        p.on_notifications(0, 4, S + 2);
        assert_eq!(
            p.mode(S + 3),
            Mode::Copy,
            "4 COPIED notifications end a re-check"
        );
        assert_eq!(p.mode(3 * S + 3), Mode::ZeroCopy);
        p.on_notifications(4, 0, 3 * S + 4);
        assert_eq!(p.mode(3 * S + 5), Mode::ZeroCopy);
        // back in normal operation: the full window decides again
        p.on_notifications(0, 31, 3 * S + 6);
        assert_eq!(p.mode(3 * S + 7), Mode::ZeroCopy);
        p.on_notifications(0, 1, 3 * S + 8);
        assert_eq!(p.mode(3 * S + 9), Mode::Copy);
    }

    #[test]
    fn zero_copy_path_stays() {
        let mut p = AutoPolicy::new(8, S, 4 * S);
        for i in 0..100 {
            p.on_notifications(7, 1, i);
            assert_eq!(p.mode(i), Mode::ZeroCopy);
        }
        assert!(p.switches().is_empty());
    }

    #[test]
    fn late_notifications_while_copying_are_ignored() {
        let mut p = AutoPolicy::new(2, S, S);
        p.on_notifications(0, 2, 0);
        assert_eq!(p.mode(1), Mode::Copy);
        p.on_notifications(100, 0, 2);
        assert_eq!(p.mode(3), Mode::Copy);
    }

    proptest! {
        /// Whatever the batching, a stream of notifications that is mostly COPIED ends in copy
        /// mode within one window, and one that is mostly zero-copy never leaves zero-copy.
        #[test]
        fn decides_by_majority(batches in prop::collection::vec(1u64..50, 1..40), copied_path in any::<bool>()) {
            let mut p = AutoPolicy::new(16, S, S);
            let mut total = 0;
            for b in batches {
                total += b;
                if copied_path { p.on_notifications(0, b, 0) } else { p.on_notifications(b, 0, 0) }
            }
            if copied_path && total >= 16 {
                prop_assert_eq!(p.mode(0), Mode::Copy);
            } else {
                prop_assert_eq!(p.mode(0), Mode::ZeroCopy);
            }
        }
    }
}
