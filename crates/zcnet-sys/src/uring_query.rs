//! What the running kernel's io_uring says it supports, asked through `IORING_REGISTER_QUERY`
//! (register opcode 35, Linux 6.18): a "blind" registration call (ring fd `-1`, no ring needed)
//! that walks a chain of `struct io_uring_query_hdr` entries and fills each one's payload.
//!
//! zcnet detects the newer zcrx interface by asking, never by kernel version: a distribution
//! kernel may carry backports, and a 7.x kernel may be built without a feature. What is asked:
//!
//! | query op | payload | first kernel | what zcnet reads |
//! |---|---|---|---|
//! | `IO_URING_QUERY_OPCODES` (0) | `io_uring_query_opcode` (48 B) | 6.18 | opcode and register-op counts, feature/setup flags, number of query ops |
//! | `IO_URING_QUERY_ZCRX` (1) | `io_uring_query_zcrx` (40 B) | 6.19 | `ZCRX_REG_*` flags (NODEV), area flags (dma-buf), number of `ZCRX_CTRL_*` ops, `ZCRX_FEATURE_*` (rx_buf_len, events) |
//! | `IO_URING_QUERY_SCQ` (2) | `io_uring_query_scq` (16 B) | 6.19 | not used |
//! | `IO_URING_QUERY_ZCRX_EVENT` (3) | `io_uring_query_zcrx_event` (48 B) | 7.2 | event types (ALLOC_FAIL, COPY), `zcrx_stats` size and alignment |
//!
//! Layouts are those of `include/uapi/linux/io_uring/query.h` and `io_uring/zcrx.h` of Linux
//! 7.2.13 (Debian's linux-libc-dev 7.2.13-1); the kernel side is `io_uring/query.c`
//! (`io_handle_query_entry`: an unknown op gives `result = -EOPNOTSUPP` in that entry, the call
//! itself still succeeds; the payload is copied with `copy_struct_to_user`, so a shorter or
//! longer user struct is fine and `size` comes back as the kernel's size). A kernel without the
//! register op at all (before 6.18) fails the call with `EINVAL`.
//!
//! Measured here: Linux 6.18.44 answers op 0 and gives `EOPNOTSUPP` for ops 1–3; Linux 7.2.13
//! (in the kernel lab) answers all four: zcrx register flags `IMPORT|NODEV`, area flags
//! `DMABUF`, 3 control ops (FLUSH_RQ, EXPORT, ARM_EVENT), features `RX_PAGE_SIZE|EVENT`, event
//! types `ALLOC_FAIL|COPY`, statistics 16 bytes aligned to 8.

use std::io;
use std::sync::OnceLock;

/// `IORING_REGISTER_QUERY` (6.18).
pub(crate) const IORING_REGISTER_QUERY: u32 = 35;
/// `IO_URING_QUERY_OPCODES`.
pub(crate) const IO_URING_QUERY_OPCODES: u32 = 0;
/// `IO_URING_QUERY_ZCRX`.
pub(crate) const IO_URING_QUERY_ZCRX: u32 = 1;
/// `IO_URING_QUERY_ZCRX_EVENT`.
pub(crate) const IO_URING_QUERY_ZCRX_EVENT: u32 = 3;

/// `ZCRX_REG_IMPORT` (`enum zcrx_reg_flags`): register by importing an exported ifq.
pub(crate) const ZCRX_REG_IMPORT: u64 = 1;
/// `ZCRX_REG_NODEV`: an ifq without a network device (the kernel copies every byte).
pub(crate) const ZCRX_REG_NODEV_FLAG: u64 = 2;
/// `ZCRX_FEATURE_RX_PAGE_SIZE` (`enum zcrx_features`): `io_uring_zcrx_ifq_reg.rx_buf_len`
/// chooses the receive buffer size.
pub const ZCRX_FEATURE_RX_PAGE_SIZE: u32 = 1 << 0;
/// `ZCRX_FEATURE_EVENT`: `io_uring_zcrx_ifq_reg.event_desc` (events and statistics).
pub(crate) const ZCRX_FEATURE_EVENT: u32 = 1 << 1;
/// `ZCRX_EVENT_ALLOC_FAIL` (`enum zcrx_event_type`): the page pool found no free buffer.
pub const ZCRX_EVENT_ALLOC_FAIL: u32 = 0;
/// `ZCRX_EVENT_COPY`: the kernel copied received data into the area.
pub const ZCRX_EVENT_COPY: u32 = 1;

/// `enum zcrx_ctrl_op` of Linux 7.3 with the names zcnet reports; a kernel supports the first
/// `nr_ctrl_opcodes` of them.
pub(crate) const ZCRX_CTRL_OPS: &[&str] = &["flush-rq", "export", "arm-event", "add-area"];

/// `struct io_uring_query_hdr` (40 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IoUringQueryHdr {
    /// Pointer to the next header, 0 to end the chain.
    pub(crate) next_entry: u64,
    /// Pointer to the payload.
    pub(crate) query_data: u64,
    /// `IO_URING_QUERY_*`.
    pub(crate) query_op: u32,
    /// Payload size in; the kernel's payload size out.
    pub(crate) size: u32,
    /// 0, or a negative errno for this entry (`-EOPNOTSUPP`: unknown op).
    pub(crate) result: i32,
    /// Must be 0.
    pub(crate) resv: [u32; 3],
}

/// `struct io_uring_query_opcode` (48 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QueryOpcodes {
    /// `IORING_OP_LAST`.
    pub(crate) nr_request_opcodes: u32,
    /// `IORING_REGISTER_LAST`.
    pub(crate) nr_register_opcodes: u32,
    /// Every `IORING_FEAT_*` the kernel has.
    pub(crate) feature_flags: u64,
    /// Every `IORING_SETUP_*` flag it accepts.
    pub(crate) ring_setup_flags: u64,
    /// Every `IORING_ENTER_*` flag.
    pub(crate) enter_flags: u64,
    /// Every `IOSQE_*` flag.
    pub(crate) sqe_flags: u64,
    /// The number of query ops (`__IO_URING_QUERY_MAX`).
    pub(crate) nr_query_opcodes: u32,
    /// Padding.
    pub(crate) pad: u32,
}

/// `struct io_uring_query_zcrx` (40 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QueryZcrx {
    /// Supported `ZCRX_REG_*` flags.
    pub register_flags: u64,
    /// Supported `IORING_ZCRX_AREA_*` flags.
    pub area_flags: u64,
    /// The number of supported `ZCRX_CTRL_*` ops (they are numbered from 0).
    pub nr_ctrl_opcodes: u32,
    /// `ZCRX_FEATURE_*` (6.19 has this as a reserved 0).
    pub features: u32,
    /// The refill ring header size.
    pub rq_hdr_size: u32,
    /// The refill ring header alignment.
    pub rq_hdr_alignment: u32,
    /// Reserved.
    pub resv2: u64,
}

/// `struct io_uring_query_zcrx_event` (48 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QueryZcrxEvent {
    /// Supported event types, bit `1 << ZCRX_EVENT_*`.
    pub(crate) event_flags: u32,
    /// `sizeof(struct zcrx_stats)`.
    pub(crate) stats_size: u32,
    /// Alignment the statistics' offset in the refill region must have.
    pub(crate) stats_off_alignment: u32,
    /// Reserved.
    pub(crate) resv1: u32,
    /// Reserved.
    pub(crate) resv2: [u64; 4],
}

/// One query: `Ok(Some(payload))`, `Ok(None)` when the kernel does not know the query op (or
/// the query register op at all), `Err` for anything else.
fn query<T: Default + Copy>(op: u32) -> io::Result<Option<T>> {
    let mut out = T::default();
    let mut hdr = IoUringQueryHdr {
        query_data: &mut out as *mut T as u64,
        query_op: op,
        size: u32::try_from(std::mem::size_of::<T>()).map_err(|_| io::Error::other("size"))?,
        ..IoUringQueryHdr::default()
    };
    // SAFETY: a blind io_uring_register (fd -1) of IORING_REGISTER_QUERY with nr_args 0 reads
    // one io_uring_query_hdr (hdr: live, writable, the uapi layout pinned by the tests, its
    // next_entry 0 ending the chain) and writes at most hdr.size bytes at query_data (out: a
    // live, writable T of exactly that size) and back into hdr. Both outlive the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_io_uring_register,
            -1 as libc::c_int,
            IORING_REGISTER_QUERY,
            &mut hdr as *mut IoUringQueryHdr,
            0 as libc::c_uint,
        )
    };
    if ret < 0 {
        let e = crate::last_err();
        // Before 6.18 the blind register path knows no such op.
        return match e.raw_os_error() {
            Some(libc::EINVAL) => Ok(None),
            _ => Err(e),
        };
    }
    match hdr.result {
        0 => Ok(Some(out)),
        r if r == -libc::EOPNOTSUPP => Ok(None),
        r => Err(io::Error::from_raw_os_error(-r)),
    }
}

/// What the kernel's io_uring query interface says about zcrx. Each part is `None` where the
/// kernel cannot be asked it (no query interface before 6.18, no zcrx query before 6.19, no
/// event query before 7.2): then the feature is taken as absent.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ZcrxCaps {
    /// `IO_URING_QUERY_OPCODES`.
    pub opcodes: Option<QueryOpcodes>,
    /// `IO_URING_QUERY_ZCRX`.
    pub zcrx: Option<QueryZcrx>,
    /// `IO_URING_QUERY_ZCRX_EVENT`.
    pub events: Option<QueryZcrxEvent>,
}

impl ZcrxCaps {
    /// Asks the running kernel (three blind query calls).
    pub fn query() -> io::Result<ZcrxCaps> {
        Ok(ZcrxCaps {
            opcodes: query(IO_URING_QUERY_OPCODES)?,
            zcrx: query(IO_URING_QUERY_ZCRX)?,
            events: query(IO_URING_QUERY_ZCRX_EVENT)?,
        })
    }

    /// What Linux 7.2.13 (Debian's 7.2.13-1, in the kernel lab) answered: zcrx register flags
    /// `IMPORT|NODEV`, area flags `DMABUF`, 3 control ops, features `RX_PAGE_SIZE|EVENT`,
    /// event types `ALLOC_FAIL|COPY`, statistics of 16 bytes aligned to 8. For tests and
    /// examples that need a kernel with every feature of that release.
    pub fn answered_by_linux_7_2_13() -> ZcrxCaps {
        ZcrxCaps {
            opcodes: Some(QueryOpcodes {
                nr_query_opcodes: 4,
                ..QueryOpcodes::default()
            }),
            zcrx: Some(QueryZcrx {
                register_flags: 3,
                area_flags: 1,
                nr_ctrl_opcodes: 3,
                features: 3,
                rq_hdr_size: 8,
                rq_hdr_alignment: 64,
                resv2: 0,
            }),
            events: Some(QueryZcrxEvent {
                event_flags: 3,
                stats_size: 16,
                stats_off_alignment: 8,
                ..QueryZcrxEvent::default()
            }),
        }
    }

    /// The running kernel's answer, asked once per process. A query that fails for an
    /// unexpected reason counts as "cannot be asked": every feature absent.
    pub fn get() -> ZcrxCaps {
        static CAPS: OnceLock<ZcrxCaps> = OnceLock::new();
        *CAPS.get_or_init(|| ZcrxCaps::query().unwrap_or_default())
    }

    /// Whether the kernel has the query interface at all.
    pub fn queryable(&self) -> bool {
        self.opcodes.is_some()
    }

    fn zcrx_flag(&self, f: impl Fn(&QueryZcrx) -> bool) -> bool {
        self.zcrx.as_ref().is_some_and(f)
    }

    /// `ZCRX_REG_NODEV`: an ifq without a network device.
    pub fn nodev(&self) -> bool {
        self.zcrx_flag(|z| z.register_flags & ZCRX_REG_NODEV_FLAG != 0)
    }

    /// `ZCRX_REG_IMPORT`: share an ifq between rings.
    pub(crate) fn import(&self) -> bool {
        self.zcrx_flag(|z| z.register_flags & ZCRX_REG_IMPORT != 0)
    }

    /// `IORING_ZCRX_AREA_DMABUF`: a dma-buf area.
    pub(crate) fn dmabuf_area(&self) -> bool {
        self.zcrx_flag(|z| z.area_flags & 1 != 0)
    }

    /// Whether control op `op` (`ZCRX_CTRL_*`, numbered from 0) exists.
    pub(crate) fn ctrl_op(&self, op: u32) -> bool {
        self.zcrx_flag(|z| op < z.nr_ctrl_opcodes)
    }

    /// `ZCRX_CTRL_FLUSH_RQ` (op 0).
    #[cfg(test)]
    pub(crate) fn flush_rq(&self) -> bool {
        self.ctrl_op(0)
    }

    /// `ZCRX_CTRL_ARM_EVENT` (op 2).
    pub(crate) fn arm_event(&self) -> bool {
        self.ctrl_op(2)
    }

    /// `ZCRX_CTRL_ADD_AREA` (op 3, Linux 7.3).
    #[cfg(test)]
    pub(crate) fn add_area(&self) -> bool {
        self.ctrl_op(3)
    }

    /// The names of the control ops the kernel has (`ZCRX_CTRL_OPS`, then `op-N`).
    pub fn ctrl_op_names(&self) -> Vec<String> {
        let n = self.zcrx.map_or(0, |z| z.nr_ctrl_opcodes);
        (0..n)
            .map(|i| match ZCRX_CTRL_OPS.get(i as usize) {
                Some(name) => (*name).to_string(),
                None => format!("op-{i}"),
            })
            .collect()
    }

    /// `ZCRX_FEATURE_RX_PAGE_SIZE`: `rx_buf_len` chooses the buffer size.
    pub fn rx_buf_len(&self) -> bool {
        self.zcrx_flag(|z| z.features & ZCRX_FEATURE_RX_PAGE_SIZE != 0)
    }

    /// `ZCRX_FEATURE_EVENT`: `event_desc` is accepted.
    pub fn events(&self) -> bool {
        self.zcrx_flag(|z| z.features & ZCRX_FEATURE_EVENT != 0)
    }

    /// Whether event type `ty` (`ZCRX_EVENT_*`) can be asked for.
    pub fn event(&self, ty: u32) -> bool {
        self.events()
            && ty < 32
            && self
                .events
                .as_ref()
                .is_some_and(|e| e.event_flags & (1 << ty) != 0)
    }

    /// The kernel's copy statistics (`ZCRX_EVENT_DESC_FLAG_STATS`): `(size, offset alignment)`
    /// of `struct zcrx_stats`, where event descriptors are accepted and the kernel says so.
    pub fn stats(&self) -> Option<(u32, u32)> {
        if !self.events() {
            return None;
        }
        self.events
            .filter(|e| e.stats_size >= 16)
            .map(|e| (e.stats_size, e.stats_off_alignment.max(1)))
    }

    /// Names of what the kernel has, in a fixed order, for reports: `nodev`, `import`,
    /// `dmabuf-area`, `rx-buf-len`, `events`, `stats`, `event-alloc-fail`, `event-copy`, then
    /// `ctrl-` and each control op.
    pub fn feature_names(&self) -> Vec<String> {
        let mut v: Vec<String> = [
            ("nodev", self.nodev()),
            ("import", self.import()),
            ("dmabuf-area", self.dmabuf_area()),
            ("rx-buf-len", self.rx_buf_len()),
            ("events", self.events()),
            ("stats", self.stats().is_some()),
            ("event-alloc-fail", self.event(ZCRX_EVENT_ALLOC_FAIL)),
            ("event-copy", self.event(ZCRX_EVENT_COPY)),
        ]
        .into_iter()
        .filter(|&(_, on)| on)
        .map(|(n, _)| n.to_string())
        .collect();
        v.extend(
            self.ctrl_op_names()
                .into_iter()
                .map(|n| format!("ctrl-{n}")),
        );
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[zcnet_testkit::test]
    fn layouts_match_the_7_2_uapi() {
        assert_eq!(size_of::<IoUringQueryHdr>(), 40);
        assert_eq!(offset_of!(IoUringQueryHdr, query_op), 16);
        assert_eq!(offset_of!(IoUringQueryHdr, result), 24);
        assert_eq!(size_of::<QueryOpcodes>(), 48);
        assert_eq!(offset_of!(QueryOpcodes, nr_query_opcodes), 40);
        assert_eq!(size_of::<QueryZcrx>(), 40);
        assert_eq!(offset_of!(QueryZcrx, nr_ctrl_opcodes), 16);
        assert_eq!(offset_of!(QueryZcrx, features), 20);
        assert_eq!(offset_of!(QueryZcrx, rq_hdr_size), 24);
        assert_eq!(size_of::<QueryZcrxEvent>(), 48);
        assert_eq!(offset_of!(QueryZcrxEvent, stats_off_alignment), 8);
    }

    fn caps_7_2() -> ZcrxCaps {
        ZcrxCaps::answered_by_linux_7_2_13()
    }

    #[zcnet_testkit::test]
    fn features_follow_the_answer_not_a_version() {
        let c = caps_7_2();
        assert!(c.nodev() && c.import() && c.dmabuf_area());
        assert!(c.flush_rq() && c.arm_event() && !c.add_area());
        assert!(c.rx_buf_len() && c.events());
        assert_eq!(c.stats(), Some((16, 8)));
        assert!(c.event(ZCRX_EVENT_ALLOC_FAIL) && c.event(ZCRX_EVENT_COPY) && !c.event(2));
        assert_eq!(
            c.feature_names().join(","),
            "nodev,import,dmabuf-area,rx-buf-len,events,stats,event-alloc-fail,event-copy,\
             ctrl-flush-rq,ctrl-export,ctrl-arm-event"
        );
        // A 6.19-like answer: the zcrx query without features or the event query.
        let mut old = c;
        old.zcrx = old.zcrx.map(|z| QueryZcrx {
            register_flags: 1,
            features: 0,
            nr_ctrl_opcodes: 2,
            ..z
        });
        old.events = None;
        assert!(!old.nodev() && !old.rx_buf_len() && !old.events() && old.stats().is_none());
        assert!(old.flush_rq() && !old.arm_event());
        // Event types without the EVENT feature bit are not usable.
        let mut odd = c;
        odd.zcrx = odd.zcrx.map(|z| QueryZcrx { features: 1, ..z });
        assert!(!odd.event(ZCRX_EVENT_COPY) && odd.stats().is_none());
        // A future control op gets a generic name.
        let mut new = c;
        new.zcrx = new.zcrx.map(|z| QueryZcrx {
            nr_ctrl_opcodes: 5,
            ..z
        });
        assert_eq!(
            new.ctrl_op_names(),
            ["flush-rq", "export", "arm-event", "add-area", "op-4"]
        );
        assert_eq!(ZcrxCaps::default().feature_names(), Vec::<String>::new());
    }

    /// The running kernel answers the opcode query from 6.18 on and its counts agree with
    /// IORING_REGISTER_PROBE; the zcrx answers agree with each other.
    #[zcnet_testkit::test]
    fn the_running_kernel_answers() {
        let (maj, min, _) = crate::os::kernel_version().unwrap_or((0, 0, 0));
        let c = ZcrxCaps::query().unwrap();
        if (maj, min) < (6, 18) {
            assert!(!c.queryable(), "{c:?}");
            return;
        }
        let ops = c.opcodes.expect("6.18+ answers IO_URING_QUERY_OPCODES");
        if let Ok(p) = crate::uring_probe::probe() {
            assert_eq!(ops.nr_request_opcodes, u32::from(p.last_op) + 1, "{ops:?}");
            assert_eq!(
                ops.feature_flags & u64::from(p.features),
                u64::from(p.features)
            );
        }
        assert!(ops.nr_query_opcodes >= 1);
        // An op the kernel says it has answers; one past them does not.
        assert_eq!(c.zcrx.is_some(), ops.nr_query_opcodes > IO_URING_QUERY_ZCRX);
        assert_eq!(
            c.events.is_some(),
            ops.nr_query_opcodes > IO_URING_QUERY_ZCRX_EVENT
        );
        assert!(query::<QueryZcrx>(ops.nr_query_opcodes).unwrap().is_none());
        if let Some(z) = c.zcrx {
            assert!(z.rq_hdr_size > 0 && z.rq_hdr_alignment.is_power_of_two());
            assert!(c.flush_rq(), "every zcrx query kernel has FLUSH_RQ: {z:?}");
        }
    }
}
