//! Accounting: what each comm moved, and how. A send comm counts the payload bytes it put in
//! sockets and, for `SEND_ZC` payloads, the kernel's verdict from each notification CQE
//! (`IORING_NOTIF_USAGE_ZC_COPIED` set: the kernel copied after all, as loopback and veth always
//! do); a receive comm counts the payload bytes it took. Falling back from a zero-copy mode to a
//! copying one is counted with its reason.
//!
//! Each comm folds its counters into the process totals when it closes; when the last open comm
//! closes, the totals go to NCCL's log as one INFO line and, with `ZCNET_NCCL_STATS=FILE`, to
//! FILE as a JSON object (written to `FILE.tmp`, then renamed).
//!
//! The counting is plain Rust; [`report`] is the only part that touches the outside world.

use std::collections::BTreeMap;
use std::sync::Mutex;
use zcnet::engine::{Counts, Outcome};

/// The environment variable naming the JSON file of the process totals.
pub const STATS_ENV: &str = "ZCNET_NCCL_STATS";

/// The counters of one comm, or of the process.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counters {
    /// Payload bytes put in sockets.
    pub bytes_sent: u64,
    /// Payload bytes received.
    pub bytes_received: u64,
    /// Bytes of `SEND_ZC` payloads whose notification said the kernel did not copy.
    pub zerocopy_bytes: u64,
    /// Bytes sent by a copying path, plus `SEND_ZC` payloads the kernel reported copied.
    pub copied_bytes: u64,
    /// `SEND_ZC` notification CQEs seen.
    pub notifications: u64,
    /// Falls back from a zero-copy mode to a copying one.
    pub fallbacks: u64,
    /// The fallbacks by reason.
    pub fallback_reasons: BTreeMap<String, u64>,
}

impl Counters {
    /// `n` payload bytes sent by a copying path (`send()`, `IORING_OP_SEND`).
    pub fn sent_copied(&mut self, n: u64) {
        self.bytes_sent += n;
        self.copied_bytes += n;
    }

    /// What the engine made of a payload request's completion (`zcnet::engine::Counts::add`,
    /// the one counting rule: a result counts the bytes sent, copied unless it is a `SEND_ZC`;
    /// the notification of a `SEND_ZC` attributes them to zero-copy or copied, as the kernel
    /// says; a failure counts nothing).
    pub fn payload(&mut self, outcome: &Outcome) {
        let mut c = Counts::default();
        c.add(outcome);
        self.bytes_sent += c.bytes_sent;
        self.bytes_received += c.bytes_received;
        self.zerocopy_bytes += c.zerocopy_bytes;
        self.copied_bytes += c.copied_bytes;
        self.notifications += c.notifications;
    }

    /// `n` payload bytes received.
    pub fn received(&mut self, n: u64) {
        self.bytes_received += n;
    }

    /// A fall back from a zero-copy mode to a copying one, because of `reason`.
    pub fn fallback(&mut self, reason: &str) {
        self.fallbacks += 1;
        *self.fallback_reasons.entry(reason.to_string()).or_default() += 1;
    }

    /// Adds `other` (a closing comm's counters) to these.
    pub fn fold(&mut self, other: &Counters) {
        self.bytes_sent += other.bytes_sent;
        self.bytes_received += other.bytes_received;
        self.zerocopy_bytes += other.zerocopy_bytes;
        self.copied_bytes += other.copied_bytes;
        self.notifications += other.notifications;
        self.fallbacks += other.fallbacks;
        for (r, n) in &other.fallback_reasons {
            *self.fallback_reasons.entry(r.clone()).or_default() += n;
        }
    }

    /// The INFO line.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "zcnet: sent {} B ({} zero-copy, {} copied), received {} B, notifications {}, fallbacks {}",
            self.bytes_sent,
            self.zerocopy_bytes,
            self.copied_bytes,
            self.bytes_received,
            self.notifications,
            self.fallbacks
        );
        if !self.fallback_reasons.is_empty() {
            let reasons: Vec<String> = self
                .fallback_reasons
                .iter()
                .map(|(r, n)| format!("{r}: {n}"))
                .collect();
            s.push_str(&format!(" ({})", reasons.join(", ")));
        }
        s
    }

    /// The JSON object (one line).
    pub fn to_json(&self) -> String {
        let reasons: Vec<String> = self
            .fallback_reasons
            .iter()
            .map(|(r, n)| format!("{}:{n}", json_string(r)))
            .collect();
        format!(
            "{{\"bytes_sent\":{},\"bytes_received\":{},\"zerocopy_bytes\":{},\"copied_bytes\":{},\"notifications\":{},\"fallbacks\":{},\"fallback_reasons\":{{{}}}}}",
            self.bytes_sent,
            self.bytes_received,
            self.zerocopy_bytes,
            self.copied_bytes,
            self.notifications,
            self.fallbacks,
            reasons.join(",")
        )
    }
}

/// `s` as a JSON string literal.
pub fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The process totals and the number of send and receive comms open.
#[derive(Debug, Default)]
pub struct Process {
    /// What closed comms moved.
    pub totals: Counters,
    /// Send and receive comms open.
    pub open: usize,
}

impl Process {
    /// A comm opened.
    pub fn opened(&mut self) {
        self.open += 1;
    }

    /// A comm closed with `c`: folded into the totals; the totals when it was the last one open.
    pub fn closed(&mut self, c: &Counters) -> Option<Counters> {
        self.totals.fold(c);
        self.open = self.open.saturating_sub(1);
        (self.open == 0).then(|| self.totals.clone())
    }
}

static PROCESS: Mutex<Process> = Mutex::new(Process {
    totals: Counters {
        bytes_sent: 0,
        bytes_received: 0,
        zerocopy_bytes: 0,
        copied_bytes: 0,
        notifications: 0,
        fallbacks: 0,
        fallback_reasons: BTreeMap::new(),
    },
    open: 0,
});

/// A send or receive comm opened.
pub fn comm_opened() {
    if let Ok(mut p) = PROCESS.lock() {
        p.opened();
    }
}

/// A send or receive comm closed with `c`; reports the totals when it was the last one open.
pub fn comm_closed(c: &Counters) {
    let last = PROCESS.lock().ok().and_then(|mut p| p.closed(c));
    if let Some(totals) = last {
        report(&totals, std::env::var_os(STATS_ENV).as_deref());
    }
}

/// The process totals so far (comms still open not included).
pub fn totals() -> Counters {
    PROCESS.lock().map(|p| p.totals.clone()).unwrap_or_default()
}

/// Logs `c` as the INFO line and, when `file` is given, writes it there as JSON (a failure is a
/// WARN line).
pub fn report(c: &Counters, file: Option<&std::ffi::OsStr>) {
    crate::log::info(&c.summary());
    if let Some(f) = file.filter(|f| !f.is_empty()) {
        let path = std::path::Path::new(f);
        if let Err(e) = write_atomically(path, &c.to_json()) {
            crate::log::warn(&format!(
                "{STATS_ENV}={}: writing the counters: {e}",
                path.display()
            ));
        }
    }
}

/// Writes `text` to `path.tmp`, then renames it to `path`.
pub fn write_atomically(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    std::fs::write(&tmp, format!("{text}\n"))?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(n: i64, len: u32, zero_copy: bool) -> Outcome {
        Outcome::Sent {
            res: if n >= 0 { Ok(n as u32) } else { Err(-n as i32) },
            asked: len,
            zero_copy,
        }
    }

    #[zcnet_testkit::test]
    fn a_notification_without_the_copied_flag_counts_zero_copy() {
        let mut c = Counters::default();
        c.payload(&sent(4096, 4096, true));
        assert_eq!(
            (c.bytes_sent, c.zerocopy_bytes, c.copied_bytes),
            (4096, 0, 0)
        );
        c.payload(&Outcome::Notified {
            bytes: 4096,
            copied: false,
        });
        assert_eq!(c.notifications, 1);
        assert_eq!(
            (c.bytes_sent, c.zerocopy_bytes, c.copied_bytes),
            (4096, 4096, 0)
        );
    }

    #[zcnet_testkit::test]
    fn a_notification_with_the_copied_flag_counts_copied() {
        let mut c = Counters::default();
        c.payload(&sent(1000, 1000, true));
        c.payload(&Outcome::Notified {
            bytes: 1000,
            copied: true,
        });
        assert_eq!(c.notifications, 1);
        assert_eq!(
            (c.bytes_sent, c.zerocopy_bytes, c.copied_bytes),
            (1000, 0, 1000)
        );
    }

    #[zcnet_testkit::test]
    fn copying_sends_count_copied_and_failures_count_nothing() {
        let mut c = Counters::default();
        c.payload(&sent(500, 500, false));
        c.sent_copied(100);
        c.payload(&sent(-(libc::EPIPE as i64), 500, false));
        c.payload(&sent(-(libc::EPIPE as i64), 500, true));
        c.payload(&Outcome::Received(Ok(77)));
        assert_eq!(
            (c.bytes_sent, c.copied_bytes, c.zerocopy_bytes),
            (600, 600, 0)
        );
        assert_eq!((c.notifications, c.bytes_received), (0, 77));
    }

    #[zcnet_testkit::test]
    fn a_fallback_is_counted_with_its_reason() {
        let mut c = Counters::default();
        c.fallback("memlock");
        c.fallback("memlock");
        c.fallback("no SEND_ZC");
        assert_eq!(c.fallbacks, 3);
        assert_eq!(c.fallback_reasons.get("memlock"), Some(&2));
        assert_eq!(c.fallback_reasons.get("no SEND_ZC"), Some(&1));
        assert!(
            c.summary()
                .ends_with("fallbacks 3 (memlock: 2, no SEND_ZC: 1)"),
            "{}",
            c.summary()
        );
    }

    #[zcnet_testkit::test]
    fn closing_comms_fold_into_the_process_and_the_last_one_reports() {
        let mut p = Process::default();
        p.opened();
        p.opened();
        let mut s = Counters::default();
        s.sent_copied(10);
        s.fallback("io_uring unavailable");
        let mut r = Counters::default();
        r.received(7);
        r.fallback("io_uring unavailable");
        assert_eq!(p.closed(&s), None, "one comm still open");
        let t = p.closed(&r).expect("the last close reports");
        assert_eq!(
            (t.bytes_sent, t.copied_bytes, t.bytes_received),
            (10, 10, 7)
        );
        assert_eq!(t.fallbacks, 2);
        assert_eq!(t.fallback_reasons.get("io_uring unavailable"), Some(&2));
        p.opened();
        let t = p.closed(&Counters::default()).expect("a later last close");
        assert_eq!(t.bytes_sent, 10, "totals are for the whole process");
    }

    #[zcnet_testkit::test]
    fn json_has_exactly_the_keys_and_escapes_reasons() {
        let mut c = Counters {
            bytes_sent: 1,
            bytes_received: 2,
            zerocopy_bytes: 3,
            copied_bytes: 4,
            notifications: 5,
            ..Counters::default()
        };
        c.fallback("a \"quoted\"\\reason\n");
        assert_eq!(
            c.to_json(),
            r#"{"bytes_sent":1,"bytes_received":2,"zerocopy_bytes":3,"copied_bytes":4,"notifications":5,"fallbacks":1,"fallback_reasons":{"a \"quoted\"\\reason\n":1}}"#
        );
        assert_eq!(json_string("\u{1}é"), "\"\\u0001é\"");
        assert!(Counters::default()
            .to_json()
            .ends_with("\"fallback_reasons\":{}}"));
    }

    #[zcnet_testkit::test]
    fn the_file_is_written_whole_and_a_bad_path_is_no_crash() {
        let dir = std::env::temp_dir().join(format!("zcnet-nccl-stats-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let f = dir.join("stats.json");
        let mut c = Counters::default();
        c.sent_copied(42);
        report(&c, Some(f.as_os_str()));
        let text = std::fs::read_to_string(&f).expect("written");
        assert_eq!(text.trim(), c.to_json());
        assert!(!dir.join("stats.json.tmp").exists(), "renamed, not left");
        report(&c, Some(dir.join("no/such/dir/x.json").as_os_str()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
