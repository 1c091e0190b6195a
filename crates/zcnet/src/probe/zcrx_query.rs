//! The newer zcrx features, as the running kernel answers `IORING_REGISTER_QUERY`
//! ([`zcnet_sys::uring_query::ZcrxCaps`]), and one verdict per feature zcnet uses: zcrx without
//! a device (`ZCRX_REG_NODEV`), the kernel's copy statistics (honest copy accounting in device
//! mode), events and large receive buffers (`rx_buf_len`). Each verdict is decided by the
//! kernel's answer alone; a Linux version appears only as a hint in the reason and the fix (a
//! distribution kernel may carry backports, a newer one may be built without a feature). A
//! kernel that cannot be asked has none of them.

use zcnet_sys::uring_query::ZcrxCaps;

/// One zcrx feature and whether this kernel has it, with why not and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZcrxVerdict {
    /// Short name for JSON: `no-device`, `copy-stats`, `events`, `large-rx-buffers`.
    pub name: &'static str,
    /// What it is, in words ("zcrx without a device").
    pub what: &'static str,
    /// Whether the kernel says it has it.
    pub available: bool,
    /// What the kernel's answer says, its terms typed.
    pub reason: crate::text::Text,
    /// What would give it, when absent.
    pub remedy: Option<String>,
}

/// What the kernel said about zcrx through its query interface.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ZcrxQuery {
    /// The raw answer.
    pub caps: ZcrxCaps,
    /// Whether the kernel has `IORING_REGISTER_QUERY` at all.
    pub queryable: bool,
    /// [`ZcrxCaps::feature_names`]: `nodev`, `rx-buf-len`, `events`, `stats`, `ctrl-flush-rq`...
    pub features: Vec<String>,
    /// How this was learned, one line.
    pub how: String,
    /// The verdicts, in a fixed order.
    pub verdicts: Vec<ZcrxVerdict>,
}

/// The sentence of a kernel that has no query interface.
pub const NOT_QUERYABLE: &str =
    "this kernel cannot be asked (no IORING_REGISTER_QUERY): newer zcrx features taken as absent";

/// Asks the running kernel (once per process).
pub fn gather() -> ZcrxQuery {
    from_caps(&ZcrxCaps::get())
}

/// Why a feature is absent: what the answer lacks (`listed`, e.g. `ZCRX_REG_NODEV`), with the
/// Linux version that added it as a hint only.
fn absent(c: &ZcrxCaps, listed: &str, since: &str) -> String {
    if c.zcrx.is_some() {
        format!("this kernel's zcrx query does not list {listed} (Linux {since} added it)")
    } else if c.queryable() {
        format!(
            "this kernel has no zcrx query (IO_URING_QUERY_ZCRX), so no {listed} (Linux \
             {since} added it)"
        )
    } else {
        format!(
            "this kernel cannot be asked (no IORING_REGISTER_QUERY), so {listed} is taken as \
             absent (Linux {since} added it)"
        )
    }
}

fn verdict(
    c: &ZcrxCaps,
    name: &'static str,
    what: &'static str,
    yes: Option<crate::text::Text>,
    (listed, since): (&str, &str),
    then: &str,
) -> ZcrxVerdict {
    match yes {
        Some(reason) => ZcrxVerdict {
            name,
            what,
            available: true,
            reason,
            remedy: None,
        },
        None => ZcrxVerdict {
            name,
            what,
            available: false,
            reason: absent(c, listed, since).into(),
            remedy: Some(format!(
                "a kernel whose zcrx query lists {listed} (Linux {since} or later, or a \
                 backport); {then}"
            )),
        },
    }
}

/// The report for answer `c` (pure: the tests give it other kernels' answers).
pub fn from_caps(c: &ZcrxCaps) -> ZcrxQuery {
    let how = if !c.queryable() {
        NOT_QUERYABLE.to_string()
    } else if c.zcrx.is_none() {
        "asked the kernel (IORING_REGISTER_QUERY): it has no zcrx query (IO_URING_QUERY_ZCRX), \
         so newer zcrx features are absent"
            .to_string()
    } else {
        "asked the kernel (IORING_REGISTER_QUERY)".to_string()
    };
    let events: Vec<&str> = [
        ("alloc-fail", zcnet_sys::uring_query::ZCRX_EVENT_ALLOC_FAIL),
        ("copy", zcnet_sys::uring_query::ZCRX_EVENT_COPY),
    ]
    .into_iter()
    .filter(|&(_, t)| c.event(t))
    .map(|(n, _)| n)
    .collect();
    let verdicts = vec![
        verdict(
            c,
            "no-device",
            "zcrx without a device",
            c.nodev().then(|| {
                crate::text!(
                    "the kernel lists ZCRX_REG_NODEV: ",
                    crate::rx::RxMode::Zcrx.term(),
                    " with ",
                    crate::text::Field::RxNoDevice,
                    " receives on any TCP connection (the kernel copies every byte)",
                )
            }),
            ("ZCRX_REG_NODEV", "7.1"),
            "until then zcrx needs a NIC queue with header split",
        ),
        verdict(
            c,
            "copy-stats",
            "copy statistics",
            c.stats().map(|(size, _)| {
                format!(
                    "the kernel keeps zcrx copy statistics (struct zcrx_stats, {size} bytes): in \
                     device mode the bytes it copied are counted as copied"
                )
                .into()
            }),
            ("zcrx_stats", "7.2"),
            "until then bytes the kernel copies in device mode are counted as unknown, never as \
             zero-copy",
        ),
        verdict(
            c,
            "events",
            "zcrx events",
            c.events().then(|| {
                format!(
                    "the kernel lists ZCRX_FEATURE_EVENT (event types: {})",
                    if events.is_empty() {
                        "none".to_string()
                    } else {
                        events.join(", ")
                    }
                )
                .into()
            }),
            ("ZCRX_FEATURE_EVENT", "7.2"),
            "until then a starved queue is noticed only by its missing completions",
        ),
        verdict(
            c,
            "large-rx-buffers",
            "large receive buffers",
            c.rx_buf_len().then(|| {
                "the kernel lists ZCRX_FEATURE_RX_PAGE_SIZE: rx_buf_len chooses the receive \
                 buffer size"
                    .into()
            }),
            ("ZCRX_FEATURE_RX_PAGE_SIZE", "7.2"),
            "until then each receive buffer is one page",
        ),
    ];
    ZcrxQuery {
        caps: *c,
        queryable: c.queryable(),
        features: c.feature_names(),
        how,
        verdicts,
    }
}

impl ZcrxQuery {
    /// The verdict named `name`.
    pub fn verdict(&self, name: &str) -> Option<&ZcrxVerdict> {
        self.verdicts.iter().find(|v| v.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zcnet_sys::uring_query::QueryZcrx;

    /// What Linux 7.2.13 answered in the kernel lab.
    fn caps_7_2() -> ZcrxCaps {
        ZcrxCaps::answered_by_linux_7_2_13()
    }

    fn yes(q: &ZcrxQuery) -> Vec<(&str, bool)> {
        q.verdicts.iter().map(|v| (v.name, v.available)).collect()
    }

    #[zcnet_testkit::test]
    fn a_7_2_answer_has_every_feature() {
        let q = from_caps(&caps_7_2());
        assert!(q.queryable);
        assert_eq!(q.how, "asked the kernel (IORING_REGISTER_QUERY)");
        assert_eq!(
            yes(&q),
            [
                ("no-device", true),
                ("copy-stats", true),
                ("events", true),
                ("large-rx-buffers", true)
            ]
        );
        for f in [
            "nodev",
            "rx-buf-len",
            "events",
            "stats",
            "event-copy",
            "ctrl-flush-rq",
        ] {
            assert!(q.features.iter().any(|n| n == f), "{f}: {:?}", q.features);
        }
        assert!(q.verdicts.iter().all(|v| v.remedy.is_none()), "{q:?}");
        let ev = q.verdict("events").unwrap();
        assert!(ev.reason.contains("alloc-fail, copy"), "{ev:?}");
    }

    #[zcnet_testkit::test]
    fn verdicts_follow_the_answer_not_a_version() {
        // 6.18: the query interface, no zcrx query.
        let c = ZcrxCaps {
            zcrx: None,
            events: None,
            ..caps_7_2()
        };
        let q = from_caps(&c);
        assert!(q.queryable && q.features.is_empty());
        assert!(
            q.how
                .starts_with("asked the kernel (IORING_REGISTER_QUERY)"),
            "{}",
            q.how
        );
        assert!(yes(&q).iter().all(|(_, a)| !a), "{q:?}");
        let nd = q.verdict("no-device").unwrap();
        assert!(
            nd.reason.contains("ZCRX_REG_NODEV (Linux 7.1 added it)"),
            "{nd:?}"
        );
        assert!(
            nd.remedy
                .as_ref()
                .map(ToString::to_string)
                .as_deref()
                .unwrap()
                .contains("7.1 or later"),
            "{nd:?}"
        );

        // A zcrx query without NODEV but with events (a backport): decided by the answer.
        let mut c = caps_7_2();
        c.zcrx = c.zcrx.map(|z| QueryZcrx {
            register_flags: 1,
            features: 2,
            ..z
        });
        let q = from_caps(&c);
        let nd = q.verdict("no-device").unwrap();
        assert_eq!(
            nd.reason,
            "this kernel's zcrx query does not list ZCRX_REG_NODEV (Linux 7.1 added it)"
        );
        assert!(q.verdict("events").unwrap().available);
        assert!(q.verdict("copy-stats").unwrap().available);
        assert!(!q.verdict("large-rx-buffers").unwrap().available);

        // Before 6.18: nothing can be asked.
        let q = from_caps(&ZcrxCaps::default());
        assert!(!q.queryable);
        assert_eq!(q.how, NOT_QUERYABLE);
        assert!(yes(&q).iter().all(|(_, a)| !a), "{q:?}");
        assert!(q
            .verdicts
            .iter()
            .all(|v| v.reason.contains("cannot be asked")));
    }

    /// The running kernel's verdicts agree with its answer, whatever its version.
    #[zcnet_testkit::test]
    fn the_running_kernel_is_judged_by_its_answer() {
        let c = ZcrxCaps::query().unwrap();
        let q = gather();
        assert_eq!(q.caps, c);
        assert_eq!(q.verdict("no-device").unwrap().available, c.nodev());
        assert_eq!(
            q.verdict("copy-stats").unwrap().available,
            c.stats().is_some()
        );
        assert_eq!(q.verdict("events").unwrap().available, c.events());
        assert_eq!(
            q.verdict("large-rx-buffers").unwrap().available,
            c.rx_buf_len()
        );
    }
}
