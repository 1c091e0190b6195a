//! Per-run send statistics.

use crate::auto::Switch;

/// What one sender did, and what the kernel said about it.
///
/// Invariant once every request is complete: `bytes == zerocopy_bytes + copied_bytes`.
/// Before that, the difference is bytes the kernel accepted but has not yet confirmed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TxStats {
    /// Bytes the kernel accepted (sum of send results).
    pub bytes: u64,
    /// Send calls or io_uring send requests issued.
    pub sends: u64,
    /// Zero-copy notifications received (error-queue messages or notification CQEs).
    pub notifications: u64,
    /// Of those, notifications that said the kernel copied.
    pub copied_notifications: u64,
    /// Bytes the kernel confirmed it sent from the application's pages. For `msg-zerocopy`,
    /// per reported range of send ids: the kernel extends an unread range with ids completed
    /// later and keeps its code, so ids it copied after zero-copy ones can count here
    /// (SEND_ZC reports each request on its own).
    pub zerocopy_bytes: u64,
    /// Bytes the kernel copied (a copying backend, or a zero-copy send the kernel reported COPIED).
    pub copied_bytes: u64,
    /// Completions for ids that had already completed (MSG_ZEROCOPY ranges reported twice).
    pub duplicate_completions: u64,
    /// Completions for ids never sent: the id sequence drifted (should stay 0).
    pub unknown_completions: u64,
    /// Times a send had to wait because the kernel's option-memory budget (ENOBUFS) was full.
    pub enobufs_waits: u64,
    /// Wall-clock seconds of the run.
    pub seconds: f64,
    /// CPU seconds (user + system) of the sending thread.
    pub cpu_seconds: f64,
    /// Mode changes of the `auto` backend.
    pub switches: Vec<Switch>,
}

impl TxStats {
    /// Bytes accepted but not yet confirmed as zero-copy or copied.
    pub fn unconfirmed_bytes(&self) -> u64 {
        self.bytes
            .saturating_sub(self.zerocopy_bytes + self.copied_bytes)
    }

    /// Throughput in MB/s (10^6 bytes per second).
    pub fn mb_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / self.seconds / 1e6
        } else {
            0.0
        }
    }

    /// Fraction (0..=1) of confirmed bytes that were zero-copy; `None` if nothing was confirmed.
    pub fn zerocopy_fraction(&self) -> Option<f64> {
        let confirmed = self.zerocopy_bytes + self.copied_bytes;
        (confirmed > 0).then(|| self.zerocopy_bytes as f64 / confirmed as f64)
    }

    /// CPU seconds spent per GB (10^9 bytes) sent.
    pub fn cpu_seconds_per_gb(&self) -> f64 {
        if self.bytes > 0 {
            self.cpu_seconds / (self.bytes as f64 / 1e9)
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_figures() {
        let s = TxStats {
            bytes: 3_000_000_000,
            zerocopy_bytes: 2_000_000_000,
            copied_bytes: 500_000_000,
            seconds: 2.0,
            cpu_seconds: 1.5,
            ..TxStats::default()
        };
        assert_eq!(s.unconfirmed_bytes(), 500_000_000);
        assert!((s.mb_per_s() - 1500.0).abs() < 1e-9);
        assert!((s.zerocopy_fraction().unwrap() - 0.8).abs() < 1e-9);
        assert!((s.cpu_seconds_per_gb() - 0.5).abs() < 1e-9);
        assert_eq!(TxStats::default().zerocopy_fraction(), None);
    }
}
