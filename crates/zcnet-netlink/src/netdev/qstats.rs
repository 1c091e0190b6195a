//! qstats-get: per-device or per-queue statistics (`NETDEV_A_QSTATS_*`,
//! include/uapi/linux/netdev.h; every counter is a `uint`).

use super::types::QueueKind;
use crate::error::Result;
use crate::wire::{malformed, Attrs};

/// `NETDEV_A_QSTATS_IFINDEX`.
pub(crate) const IFINDEX: u16 = 1;
/// `NETDEV_A_QSTATS_QUEUE_TYPE`.
pub(crate) const QUEUE_TYPE: u16 = 2;
/// `NETDEV_A_QSTATS_QUEUE_ID`.
pub(crate) const QUEUE_ID: u16 = 3;
/// `NETDEV_A_QSTATS_SCOPE`.
pub(crate) const SCOPE: u16 = 4;
/// `NETDEV_QSTATS_SCOPE_QUEUE` (enum netdev_qstats_scope).
pub(crate) const SCOPE_QUEUE: u32 = 1;

/// The counter names, starting at `NETDEV_A_QSTATS_RX_PACKETS` (8), in attribute order.
pub const COUNTER_NAMES: [&str; 27] = [
    "rx-packets",
    "rx-bytes",
    "tx-packets",
    "tx-bytes",
    "rx-alloc-fail",
    "rx-hw-drops",
    "rx-hw-drop-overruns",
    "rx-csum-complete",
    "rx-csum-unnecessary",
    "rx-csum-none",
    "rx-csum-bad",
    "rx-hw-gro-packets",
    "rx-hw-gro-bytes",
    "rx-hw-gro-wire-packets",
    "rx-hw-gro-wire-bytes",
    "rx-hw-drop-ratelimits",
    "tx-hw-drops",
    "tx-hw-drop-errors",
    "tx-csum-none",
    "tx-needs-csum",
    "tx-hw-gso-packets",
    "tx-hw-gso-bytes",
    "tx-hw-gso-wire-packets",
    "tx-hw-gso-wire-bytes",
    "tx-hw-drop-ratelimits",
    "tx-stop",
    "tx-wake",
];
/// Attribute type of the first counter.
const FIRST_COUNTER: u16 = 8;

/// How qstats-get aggregates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QStatsScope {
    /// One entry per device.
    Device,
    /// One entry per queue.
    Queue,
}

/// One qstats-get entry: the counters the driver reports (absent ones are not supported).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QStats {
    /// The device.
    pub ifindex: u32,
    /// The queue, for queue scope.
    pub queue: Option<(QueueKind, u32)>,
    /// `(name, value)` for each counter present, in attribute order. Counters newer than this
    /// crate appear as `attr-N`.
    pub counters: Vec<(String, u64)>,
}

impl QStats {
    /// Parses a qstats-get reply.
    pub fn parse(attrs: &[u8]) -> Result<QStats> {
        let mut ifindex = None;
        let (mut kind, mut id) = (None, None);
        let mut counters = Vec::new();
        for a in Attrs::new(attrs) {
            let a = a?;
            match a.kind() {
                IFINDEX => ifindex = Some(a.u32()?),
                QUEUE_TYPE => {
                    let v = a.u32()?;
                    kind = Some(
                        QueueKind::from_value(v)
                            .ok_or_else(|| malformed(format!("queue type {v}")))?,
                    );
                }
                QUEUE_ID => id = Some(a.u32()?),
                SCOPE => {}
                t if t >= FIRST_COUNTER => {
                    let name = COUNTER_NAMES
                        .get(usize::from(t - FIRST_COUNTER))
                        .map(|s| s.to_string())
                        .unwrap_or_else(|| format!("attr-{t}"));
                    counters.push((name, a.uint()?));
                }
                _ => {}
            }
        }
        let queue = match (kind, id) {
            (Some(k), Some(i)) => Some((k, i)),
            (None, None) => None,
            _ => {
                return Err(malformed(
                    "qstats reply with only one of queue-type, queue-id",
                ))
            }
        };
        Ok(QStats {
            ifindex: ifindex.ok_or_else(|| malformed("qstats reply without ifindex"))?,
            queue,
            counters,
        })
    }

    /// The value of counter `name` (e.g. `"rx-packets"`), if the driver reports it.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.counters
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
    }
}
