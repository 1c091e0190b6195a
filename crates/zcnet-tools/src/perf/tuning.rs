//! Two socket options on a test's TCP streams: `TCP_NOTSENT_LOWAT` on the sending side and
//! `SO_RCVLOWAT` on the receiving side, each `auto` (the rule below), off, or a byte count
//! (`--notsent-lowat`, `--rcvlowat`).
//!
//! Both were measured (docs/perf.md, "zcnet perf: socket low-water marks"): on a 2-vCPU VM,
//! TCP over veth and loopback, `-l 128K`,
//!
//! - **`SO_RCVLOWAT` 128 KiB** on a bulk receiver: the socket wakes its reader (epoll or
//!   io_uring's multishot receive) once 128 KiB are queued instead of for every segment
//!   train. Fewer, larger reads mean fewer window-update ACKs, and on veth and loopback the
//!   sender processes those ACKs itself (its socket is owned while it sends: the ACKs go
//!   through its backlog). iperf3 → zcnet at `-P 4` on veth went from 17 to 29–30 Gbit/s
//!   (iperf3 → iperf3: 25–27), and zcnet → zcnet at `-P 1` from 19.5 to 29. 64 KiB did not
//!   help; 256 and 512 KiB were no better than 128.
//! - **`TCP_NOTSENT_LOWAT` 128 KiB** on a sender whose streams are at least as many as the
//!   CPUs: a blocking send waits until less than 128 KiB of its socket is unsent, so the
//!   socket never holds a backlog that the receiver's ACKs would transmit from the
//!   receiver's context (on one machine that context is the receiving process). zcnet →
//!   iperf3 at `-P 4` on veth went from 19.6 to 32 Gbit/s, zcnet → zcnet from 35 to 45.
//!   With one stream on two CPUs it cost 15–20 % (the sender sleeps and wakes more, and no
//!   one competes for its CPU), so `auto` leaves it off when the streams are fewer than the
//!   CPUs.
//!
//! A client counting `-n` or `-k` gets no receive low-water mark: it ends the test when it has
//! received the count, and the last bytes below the mark would never wake it (a deadlock
//! found by the -R -n test). A paced test (`-b`) gets a receive low-water mark of at most 1 ms of its rate, so that
//! interval reports do not lump; draining at the end of a test sets it back to 1 byte, so
//! the last bytes of a stream are not held back (`tcp_set_rcvlowat` wakes the reader when it
//! lowers the mark).

/// The low-water mark `auto` uses for both options.
pub const BULK_LOWAT: u32 = 128 * 1024;

/// One option as the user set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lowat {
    /// The rule in this module's documentation.
    #[default]
    Auto,
    /// Never set (the kernel's default).
    Off,
    /// Exactly this many bytes.
    Bytes(u32),
}

impl Lowat {
    /// `auto`, `off` (or `0`), or a size with an optional K/M suffix (powers of 1024).
    pub fn parse(s: &str) -> Option<Lowat> {
        match s {
            "auto" => Some(Lowat::Auto),
            "off" => Some(Lowat::Off),
            _ => match super::units::parse_size(s)? {
                0 => Some(Lowat::Off),
                n => u32::try_from(n).ok().map(Lowat::Bytes),
            },
        }
    }
}

/// The user's choice for both options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SocketTuning {
    /// `--notsent-lowat`.
    pub notsent: Lowat,
    /// `--rcvlowat`.
    pub rcvlowat: Lowat,
}

/// What one test's TCP streams on this side get: `None` leaves the option alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamTuning {
    /// `TCP_NOTSENT_LOWAT` of each sending stream.
    pub notsent_lowat: Option<u32>,
    /// `SO_RCVLOWAT` of each receiving stream (until it drains).
    pub rcvlowat: Option<u32>,
}

impl SocketTuning {
    /// The options for a test in which this side sends on `sending` TCP streams, with `cpus`
    /// CPUs to run on, each stream paced at `rate` bits/s (0: not paced); `counts_received`:
    /// this side ends the test once it has received a byte or block count (a client with
    /// `-n` or `-k`), so it must see every byte as it comes.
    pub fn resolve(
        &self,
        sending: usize,
        cpus: usize,
        rate: u64,
        counts_received: bool,
    ) -> StreamTuning {
        let notsent_lowat = match self.notsent {
            Lowat::Auto => (sending > 0 && sending >= cpus).then_some(BULK_LOWAT),
            Lowat::Off => None,
            Lowat::Bytes(n) => Some(n),
        };
        let rcvlowat = match self.rcvlowat {
            Lowat::Auto if counts_received => None,
            Lowat::Auto if rate == 0 => Some(BULK_LOWAT),
            Lowat::Auto => {
                // 1 ms of the rate in bytes; below two segments it changes nothing.
                let per_ms = rate / 8 / 1000;
                u32::try_from(per_ms.min(u64::from(BULK_LOWAT)))
                    .ok()
                    .filter(|&n| n >= MIN_USEFUL)
            }
            Lowat::Off => None,
            Lowat::Bytes(n) => Some(n),
        };
        StreamTuning {
            notsent_lowat,
            rcvlowat,
        }
    }
}

/// A receive low-water mark below two full Ethernet segments saves no wakeups.
const MIN_USEFUL: u32 = 2 * 1448;

/// The CPUs this process may run on (1 when the kernel will not say).
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[zcnet_testkit::test]
    fn parse_takes_auto_off_zero_and_sizes() {
        assert_eq!(Lowat::parse("auto"), Some(Lowat::Auto));
        assert_eq!(Lowat::parse("off"), Some(Lowat::Off));
        assert_eq!(Lowat::parse("0"), Some(Lowat::Off));
        assert_eq!(Lowat::parse("64K"), Some(Lowat::Bytes(65536)));
        assert_eq!(Lowat::parse("1000"), Some(Lowat::Bytes(1000)));
        assert_eq!(Lowat::parse("8G"), None, "past u32");
        assert_eq!(Lowat::parse("lots"), None);
        assert_eq!(Lowat::parse("-1"), None);
    }

    #[zcnet_testkit::test]
    fn auto_sets_notsent_only_when_streams_reach_the_cpus() {
        let t = SocketTuning::default();
        assert_eq!(t.resolve(1, 2, 0, false).notsent_lowat, None);
        assert_eq!(t.resolve(2, 2, 0, false).notsent_lowat, Some(BULK_LOWAT));
        assert_eq!(t.resolve(4, 2, 0, false).notsent_lowat, Some(BULK_LOWAT));
        assert_eq!(t.resolve(4, 16, 0, false).notsent_lowat, None);
        assert_eq!(
            t.resolve(0, 1, 0, false).notsent_lowat,
            None,
            "nothing sent"
        );
    }

    #[zcnet_testkit::test]
    fn auto_rcvlowat_is_bulk_unpaced_and_a_millisecond_paced() {
        let t = SocketTuning::default();
        assert_eq!(t.resolve(0, 2, 0, false).rcvlowat, Some(BULK_LOWAT));
        // 10 Gbit/s: 1.25 MB per ms, capped at 128 KiB.
        assert_eq!(
            t.resolve(0, 2, 10_000_000_000, false).rcvlowat,
            Some(BULK_LOWAT)
        );
        // 400 Mbit/s: 50,000 B per ms.
        assert_eq!(t.resolve(0, 2, 400_000_000, false).rcvlowat, Some(50_000));
        // 1 Mbit/s: 125 B per ms, not worth setting.
        assert_eq!(t.resolve(0, 2, 1_000_000, false).rcvlowat, None);
    }

    #[zcnet_testkit::test]
    fn auto_never_holds_back_bytes_that_end_the_test() {
        let t = SocketTuning::default();
        assert_eq!(t.resolve(0, 2, 0, true).rcvlowat, None);
        assert_eq!(t.resolve(4, 2, 0, true).notsent_lowat, Some(BULK_LOWAT));
    }

    #[zcnet_testkit::test]
    fn explicit_values_win_over_the_rule() {
        let t = SocketTuning {
            notsent: Lowat::Bytes(4096),
            rcvlowat: Lowat::Off,
        };
        let r = t.resolve(1, 64, 0, true);
        assert_eq!(r.notsent_lowat, Some(4096));
        assert_eq!(r.rcvlowat, None);
        let t = SocketTuning {
            notsent: Lowat::Off,
            rcvlowat: Lowat::Bytes(1 << 20),
        };
        let r = t.resolve(8, 2, 1_000_000, true);
        assert_eq!(r.notsent_lowat, None);
        assert_eq!(r.rcvlowat, Some(1 << 20));
    }
}
