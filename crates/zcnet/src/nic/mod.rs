//! Setting a NIC up for zero-copy receive, and putting it back.
//!
//! What zcrx and devmem TCP need of the device (Documentation/networking/iou-zcrx.rst,
//! devmem.rst): header/data split on with `hds-thresh` 0, one RX queue taken out of the RSS
//! indirection table so that only steered flows land on it, and an ntuple rule steering the
//! flow there. In ethtool terms:
//!
//! ```text
//! ethtool -G eth0 tcp-data-split on hds-thresh 0
//! ethtool -K eth0 ntuple on
//! ethtool -X eth0 weight 1 1 1 0        # queue 3 out of RSS
//! ethtool -N eth0 flow-type tcp4 dst-port 9999 action 3
//! ```
//!
//! [`NicGuard::apply`] makes these changes one by one, writing each to a state file
//! ([`state`]) before making it, and undoes them in reverse order when it is dropped, when
//! [`NicGuard::restore`] is called, or when a later change is refused (then the error carries
//! the kernel's message and nothing stays half-applied). [`restore_from_file`] undoes what a
//! crashed process left. The device is reached through [`NicControl`], implemented for real
//! devices by [`LiveNic`] (ethtool netlink and ioctls) and by a simulated NIC in the tests.

pub(crate) mod live;
pub mod state;

use std::path::Path;
use std::time::Duration;

pub use live::{ChannelCounts, LiveNic};
use state::{Owner, Record, StateFile};
pub use zcnet_core::probe::RxChannels;

use crate::text::{Call, IfName, Text};
use crate::{Error, Result};

/// errno for "no such rule" (asm-generic/errno-base.h).
const ENOENT: i32 = 2;
/// errno for "operation not supported" (asm-generic/errno.h).
const EOPNOTSUPP: i32 = 95;

/// `ETHTOOL_TCP_DATA_SPLIT_*` (include/uapi/linux/ethtool.h): the values of tcp-data-split.
pub mod split {
    /// Unknown / driver default.
    pub const UNKNOWN: u8 = 0;
    /// Off.
    pub const DISABLED: u8 = 1;
    /// On.
    pub const ENABLED: u8 = 2;
}

/// Transport protocol of a steered flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

impl Proto {
    /// "tcp" or "udp".
    pub fn name(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }

    /// Parses "tcp" / "udp".
    pub fn parse(s: &str) -> Option<Proto> {
        match s {
            "tcp" => Some(Proto::Tcp),
            "udp" => Some(Proto::Udp),
            _ => None,
        }
    }
}

/// An ntuple rule: flows to `dst_port` go to RX queue `queue`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowSpec {
    /// Protocol.
    pub proto: Proto,
    /// IPv6 (else IPv4).
    pub ipv6: bool,
    /// Destination port.
    pub dst_port: u16,
    /// RX queue.
    pub queue: u32,
}

/// Ring parameters that matter here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingsState {
    /// tcp-data-split ([`split`]).
    pub split: u8,
    /// hds-thresh, if the driver reports one.
    pub hds_thresh: Option<u32>,
}

/// One change made to a NIC, with what is needed to undo it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Header split turned on (and hds-thresh set to 0).
    HeaderSplit {
        /// tcp-data-split before.
        prev_split: u8,
        /// hds-thresh before, if reported.
        prev_hds: Option<u32>,
    },
    /// The ntuple-filters feature turned on.
    Ntuple {
        /// Whether it was on before (always false when recorded).
        prev_on: bool,
    },
    /// The RSS indirection table rewritten without the queue.
    Rss {
        /// The table before.
        prev: Vec<u32>,
        /// Whether that was the driver's default (restored by a reset, not a write).
        was_default: bool,
    },
    /// An ntuple rule inserted.
    Rule {
        /// The rule.
        spec: FlowSpec,
        /// Where the driver put it (unknown until the insert returns).
        location: Option<u32>,
    },
}

impl Change {
    /// A short description for status output.
    pub fn describe(&self) -> String {
        match self {
            Change::HeaderSplit {
                prev_split,
                prev_hds,
            } => format!(
                "header split on, hds-thresh 0 (was tcp-data-split {}, hds-thresh {})",
                split_name(*prev_split),
                prev_hds.map_or_else(|| "n/a".into(), |v| v.to_string())
            ),
            Change::Ntuple { .. } => "ntuple-filters on (was off)".into(),
            Change::Rss { prev, was_default } => format!(
                "RSS indirection table rewritten (was {} over {} entries)",
                if *was_default {
                    "the default"
                } else {
                    "a custom table"
                },
                prev.len()
            ),
            Change::Rule { spec, location } => format!(
                "ntuple rule flow-type {}{} dst-port {} action {}{}",
                spec.proto.name(),
                if spec.ipv6 { 6 } else { 4 },
                spec.dst_port,
                spec.queue,
                location.map_or_else(String::new, |l| format!(" (location {l})"))
            ),
        }
    }
}

/// The name of a tcp-data-split value.
pub fn split_name(v: u8) -> &'static str {
    match v {
        split::DISABLED => "off",
        split::ENABLED => "on",
        _ => "unknown",
    }
}

/// The device operations a setup needs; every error carries the kernel's own message.
pub trait NicControl {
    /// The interface name.
    fn name(&self) -> &str;
    /// The interface index.
    fn ifindex(&self) -> u32;
    /// tcp-data-split and hds-thresh.
    fn rings(&mut self) -> Result<RingsState>;
    /// Sets tcp-data-split and, if given, hds-thresh.
    fn set_rings(&mut self, split: u8, hds_thresh: Option<u32>) -> Result<()>;
    /// The ntuple-filters feature: `None` if the device does not offer it, else whether it is on.
    fn ntuple(&mut self) -> Result<Option<bool>>;
    /// Turns ntuple-filters on or off.
    fn set_ntuple(&mut self, on: bool) -> Result<()>;
    /// Number of RX rings (queues).
    fn rx_rings(&mut self) -> Result<u32>;
    /// The RX channels the driver reports (ethtool channels-get); `Ok(None)` when it has no
    /// channel control (lo, ifb), so nothing can change its queue count.
    fn channels(&mut self) -> Result<Option<RxChannels>>;
    /// The RSS indirection table.
    fn indir(&mut self) -> Result<Vec<u32>>;
    /// Writes the RSS indirection table (`None`: back to the driver's default).
    fn set_indir(&mut self, table: Option<&[u32]>) -> Result<()>;
    /// Inserts an ntuple rule; returns the location the driver chose.
    fn insert_rule(&mut self, spec: &FlowSpec) -> Result<u32>;
    /// Deletes the rule at `location`.
    fn delete_rule(&mut self, location: u32) -> Result<()>;
    /// The rules installed, with their locations.
    fn rules(&mut self) -> Result<Vec<(u32, FlowSpec)>>;
}

/// What `zcnet nic setup` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicSetup {
    /// The RX queue to set aside for zero copy.
    pub queue: u32,
    /// The flow to steer there (no rule if `None`).
    pub flow: Option<(Proto, bool, u16)>,
}

/// The default indirection table the kernel gives a device with `rings` RX rings
/// (`ethtool_rxfh_indir_default`: entry i is i mod rings).
pub fn default_indir(len: usize, rings: u32) -> Vec<u32> {
    (0..len as u32).map(|i| i % rings.max(1)).collect()
}

/// The indirection table spreading over every ring but `queue`, same length as `current`.
pub fn indir_without(current_len: usize, rings: u32, queue: u32) -> Vec<u32> {
    let others: Vec<u32> = (0..rings).filter(|&q| q != queue).collect();
    (0..current_len).map(|i| others[i % others.len()]).collect()
}

/// How `iface` can get `need` RX queues: the channel change ([`LiveNic::set_channels`], a
/// [`Call::SetChannels`] term), with `ethtool -L` beside it where that is installed; or why no
/// change can ([`zcnet_core::probe::rx_queue_plan`]).
pub(crate) fn add_rx_queues(
    iface: &str,
    need: u32,
    ch: Option<&zcnet_core::probe::RxChannels>,
) -> std::result::Result<Text, String> {
    zcnet_core::probe::add_rx_queues(iface, need, ch, crate::iface::ethtool_installed())
}

/// Why a device with `rings` queues of `kind` has no queue at or past `rings`, and the fix: a
/// queue it has (or `default`, what leaving the flag out gives), or `more` (a command that adds
/// queues, or why none can).
fn no_such_queue(
    iface: &str,
    rings: u32,
    kind: &str,
    default: Option<&str>,
    more: std::result::Result<Text, String>,
) -> Text {
    let add = match more {
        Ok(cmd) => Text::from(", or add queues: ") + cmd,
        Err(none) => format!(" ({none})").into(),
    };
    Text::from(format!(
        "{iface} has {rings} {kind}(s) (0..{}): pick one of them{}",
        rings.saturating_sub(1),
        default.map_or(String::new(), |d| format!(" or {d}"))
    )) + add
}

/// Refuses `--queue queue` of interface `iface` when the interface has no such queue, before
/// anything is made or changed for it: [`Error::invalid_input`] (exit code 2) naming `--queue`,
/// the interface's queue count and the fix (a queue it has, or the command that adds queues
/// where its driver can: [`zcnet_core::probe::add_rx_queues`]). `default` (e.g. "leave --queue
/// out") is offered beside it where the flag has one. The count is the probe's (the queues the
/// netdev family lists, else ethtool channels, else those rtnetlink says are allocated); AF_XDP
/// (`af_xdp`) binds to any index below the larger of the RX and TX counts
/// (`xsk_reg_pool_at_qid`), so TX queues listed count there too; for zero-copy receive (not
/// `af_xdp`) no command to add queues is offered on a device that cannot split headers. With no
/// count at all, nothing
/// is refused here (the kernel answers later). An interface that does not exist is
/// [`Error::UnknownInterface`].
pub fn check_queue(iface: &str, queue: u32, af_xdp: bool, default: Option<&str>) -> Result<()> {
    let mut ctl = LiveNic::open(iface)?;
    let rx = crate::iface::rx_queues(ctl.ifindex(), ctl.ethtool());
    let tx = if af_xdp {
        zcnet_netlink::netdev::Netdev::open()
            .and_then(|mut nd| nd.queue_dump(ctl.ifindex()))
            .map(|qs| {
                qs.iter()
                    .filter(|q| q.kind == zcnet_netlink::netdev::QueueKind::Tx)
                    .count() as u32
            })
            .unwrap_or(0)
    } else {
        0
    };
    let have = rx.max(tx);
    if have == 0 || queue < have {
        return Ok(());
    }
    // Zero-copy receive needs header split: on a device that can never split headers (no ring
    // parameters: veth, lo, ifb) more queues would not help, so no command to add them is
    // offered (as `nic setup` says that first, check_header_split).
    let no_split = !af_xdp
        && matches!(
            ctl.rings(),
            Err(Error::Kernel {
                errno: Some(EOPNOTSUPP),
                ..
            })
        );
    let more = match ctl.channels() {
        _ if no_split => Err(format!(
            "more queues would not help: {iface} reports no ring parameters, so it cannot split headers, which zero-copy receive needs"
        )),
        Ok(ch) => add_rx_queues(iface, queue + 1, ch.as_ref()),
        Err(e) => Err(format!("its channels could not be read ({e})")),
    };
    let kind = if tx > rx { "TX queue" } else { "RX queue" };
    Err(Error::invalid_input(crate::text!(
        crate::text::Field::RxQueue,
        format!(" {queue}: "),
        no_such_queue(iface, have, kind, default, more),
    )))
}

/// The checks [`NicGuard::apply`] makes before it changes anything: the queue exists, and
/// taking it out of RSS leaves another. A refusal names a command that adds queues where the
/// driver reports channels it can change (zcnet's own, `ethtool -L` beside it only when
/// installed), or says that nothing can. Returns the RX queue count; an error carries the step.
fn check_queues<C: NicControl + ?Sized>(
    ctl: &mut C,
    setup: &NicSetup,
) -> std::result::Result<u32, (&'static str, Error)> {
    let iface = ctl.name().to_string();
    let rings = ctl
        .rx_rings()
        .map_err(|e| ("reading the RX ring count", e))?;
    // How to get `need` RX queues: a command, or why there is none.
    let mut more = |need: u32| match ctl.channels() {
        Ok(ch) => add_rx_queues(&iface, need, ch.as_ref()),
        Err(e) => Err(format!("its channels could not be read ({e})")),
    };
    if setup.queue >= rings {
        return Err((
            "checking the queue",
            Error::Kernel {
                what: format!("queue {}", setup.queue).into(),
                message: no_such_queue(&iface, rings, "RX queue", None, more(setup.queue + 1)),
                errno: None,
            },
        ));
    }
    if rings < 2 {
        let add = match more(2) {
            Ok(cmd) => format!("add one: {cmd}"),
            Err(none) => none,
        };
        return Err((
            "checking the queue",
            Error::Kernel {
                what: "RSS".into(),
                message: format!(
                    "{iface} has one RX queue; taking it out of RSS would leave none: {add}"
                )
                .into(),
                errno: None,
            },
        ));
    }
    Ok(rings)
}

/// The first check of a setup, before any about queues: whether the device can split headers
/// at all. A device that reports no ring parameters (no `get_ringparam`: veth, lo, ifb) is
/// refused every rings-set by the kernel, root included, so header split can never be turned
/// on there; said first, so that no advice to change its channels (which zcnet does not undo)
/// comes before a refusal that no change of channels avoids. Returns the ring parameters.
fn check_header_split<C: NicControl + ?Sized>(
    ctl: &mut C,
) -> std::result::Result<RingsState, (&'static str, Error)> {
    let iface = ctl.name().to_string();
    match ctl.rings() {
        Err(Error::Kernel {
            errno: Some(EOPNOTSUPP),
            ..
        }) => Err((
            "reading ring parameters",
            Error::Kernel {
                what: String::new().into(),
                message: format!(
                    "{iface} reports no ring parameters (its driver has no get_ringparam, as veth, lo and ifb), so header split cannot be turned on: the kernel refuses this for root too; zero-copy receive needs a NIC with header split (mlx5, bnxt, gve, fbnic)"
                ).into(),
                errno: Some(EOPNOTSUPP),
            },
        )),
        Err(e) => Err(("reading ring parameters", e)),
        Ok(r) => Ok(r),
    }
}

/// What [`NicGuard::apply`] would refuse for the device's own reasons, found with reads any
/// user may make, so that a process without the privileges to apply learns that root would be
/// refused too instead of being told to get root: the checks of `apply`, in its order (header
/// split first, `check_header_split`, then the queues). `Ok` means only privileges stand in
/// the way, as far as reads can tell. Nothing is changed either way.
pub fn preflight<C: NicControl + ?Sized>(ctl: &mut C, setup: &NicSetup) -> Result<()> {
    let iface = ctl.name().to_string();
    let refuse = |step: &str, cause: Error| Error::NicSetup {
        iface: iface.clone(),
        step: step.to_string().into(),
        cause: Box::new(cause),
        undo: "nothing was changed".into(),
    };
    check_header_split(ctl).map_err(|(step, e)| refuse(step, e))?;
    check_queues(ctl, setup).map_err(|(step, e)| refuse(step, e))?;
    Ok(())
}

/// NIC changes for zero copy, undone on drop.
#[derive(Debug)]
pub struct NicGuard<C: NicControl> {
    ctl: C,
    state: Option<StateFile>,
    changes: Vec<Change>,
}

impl<C: NicControl> NicGuard<C> {
    /// Makes the changes `setup` asks for on the device behind `ctl`, recording each in a state
    /// file under `state_dir` first. On a refusal, undoes what was made and returns the kernel's
    /// message.
    pub fn apply(ctl: C, setup: &NicSetup, state_dir: &Path) -> Result<NicGuard<C>> {
        let mut g = NicGuard {
            ctl,
            state: None,
            changes: Vec::new(),
        };
        let iface = g.ctl.name().to_string();
        // Validate before touching anything: header split first (no queue advice for a device
        // that can never split headers), then the queues.
        g.checked(setup)?;
        g.state = Some(StateFile::create(
            state_dir,
            &Owner::this_process(&iface, g.ctl.ifindex(), setup.queue),
        )?);
        // Read again now that the interface is ours: a setup that held it until just now may
        // have put back what the first read saw (its header split, say), and the steps must
        // start from what the device has.
        let (r, rings) = g.checked(setup)?;
        g.apply_steps(setup, rings, r)?;
        Ok(g)
    }

    /// The device's header split state and ring count, checked for `setup`; a refusal undoes
    /// what was made (nothing, before the steps) and says why.
    fn checked(&mut self, setup: &NicSetup) -> Result<(RingsState, u32)> {
        let r = check_header_split(&mut self.ctl).map_err(|(step, e)| self.fail(step, e))?;
        let rings = check_queues(&mut self.ctl, setup).map_err(|(step, e)| self.fail(step, e))?;
        Ok((r, rings))
    }

    fn apply_steps(&mut self, setup: &NicSetup, rings: u32, r: RingsState) -> Result<()> {
        // 1. Header split on, hds-thresh 0 (`r`: the ring parameters read before anything).
        if r.split != split::ENABLED || r.hds_thresh.unwrap_or(0) != 0 {
            let c = Change::HeaderSplit {
                prev_split: r.split,
                prev_hds: r.hds_thresh,
            };
            let hds = r.hds_thresh.map(|_| 0);
            self.make(c, "enabling header split", |ctl| {
                ctl.set_rings(split::ENABLED, hds).map(|()| None)
            })?;
        }
        // 2. ntuple filters on (only needed for a rule).
        if setup.flow.is_some() {
            match self
                .ctl
                .ntuple()
                .map_err(|e| self.fail("reading features", e))?
            {
                None => {
                    let name = self.ctl.name().to_string();
                    return Err(self.fail(
                        "checking ntuple filters",
                        Error::Kernel {
                            what: format!("features of {name}").into(),
                            message: crate::text!(
                                format!("{name} does not offer ntuple-filters, so flows cannot be steered to a queue: steer no port ("),
                                crate::text::Field::NicFlow,
                                ") and pick the queue RSS hashes the flow to",
                            ),
                            errno: None,
                        },
                    ));
                }
                Some(false) => self.make(
                    Change::Ntuple { prev_on: false },
                    "enabling ntuple filters",
                    |ctl| ctl.set_ntuple(true).map(|()| None),
                )?,
                Some(true) => {}
            }
        }
        // 3. The queue out of the RSS table.
        let prev = self
            .ctl
            .indir()
            .map_err(|e| self.fail("reading the RSS table", e))?;
        let want = indir_without(prev.len(), rings, setup.queue);
        if !prev.is_empty() && prev != want {
            let was_default = prev == default_indir(prev.len(), rings);
            let c = Change::Rss { prev, was_default };
            self.make(c, "taking the queue out of RSS", |ctl| {
                ctl.set_indir(Some(&want)).map(|()| None)
            })?;
        }
        // 4. The rule, unless the very rule is installed already (the user's own): then there
        // is nothing to insert, and were a duplicate inserted, a restore after a crash between
        // its insert and its record (which finds the rule by what it matches, see
        // `undo_records`) could not tell the two apart and would delete the user's rule too.
        if let Some((proto, ipv6, dst_port)) = setup.flow {
            let spec = FlowSpec {
                proto,
                ipv6,
                dst_port,
                queue: setup.queue,
            };
            let installed = self
                .ctl
                .rules()
                .map_err(|e| self.fail("reading the ntuple rules", e))?;
            if installed.iter().any(|(_, s)| *s == spec) {
                return Ok(());
            }
            let c = Change::Rule {
                spec,
                location: None,
            };
            self.make(c, "inserting the ntuple rule", |ctl| {
                ctl.insert_rule(&spec).map(Some)
            })?;
        }
        Ok(())
    }

    /// Records `c`, makes it, marks it done (with a rule location).
    fn make(
        &mut self,
        mut c: Change,
        step: &str,
        f: impl FnOnce(&mut C) -> Result<Option<u32>>,
    ) -> Result<()> {
        // `apply` creates the state file before any step: without one, a change could not be
        // undone after a crash, so it is refused (a bug, loudly) rather than made or skipped.
        let Some(st) = self.state.as_mut() else {
            let e = Error::io(
                "recording the change",
                std::io::Error::other("no state file is open (internal error, please report)"),
            );
            return Err(self.fail(step, e));
        };
        let id = st.pending(&c).map_err(|e| self.fail(step, e))?;
        match f(&mut self.ctl) {
            Ok(loc) => {
                if let (Change::Rule { location, .. }, Some(l)) = (&mut c, loc) {
                    *location = Some(l);
                }
                self.changes.push(c);
                if let Some(st) = self.state.as_mut() {
                    st.done(id, loc).map_err(|e| self.fail(step, e))?;
                }
                Ok(())
            }
            // The kernel did not answer in time: the change may be applied anyway, so its
            // undo goes with the others' (every undo is safe whether its change happened or
            // not, see `undo_records`; the pending record stays in the state file until then).
            Err(e) if outcome_unknown(&e) => {
                self.changes.push(c);
                Err(self.fail_uncertain(step, e))
            }
            // The kernel said no: nothing of this step was made.
            Err(e) => Err(self.fail(step, e)),
        }
    }

    /// Undoes everything made so far and turns `cause` into the setup error.
    fn fail(&mut self, step: &str, cause: Error) -> Error {
        self.fail_counting(step, cause, 0)
    }

    /// [`Self::fail`] after a step whose own change may or may not have been made (it is the
    /// last of `changes`, undone with them, and not counted as one made before it).
    fn fail_uncertain(&mut self, step: &str, cause: Error) -> Error {
        self.fail_counting(step, cause, 1)
    }

    fn fail_counting(&mut self, step: &str, cause: Error, uncertain: usize) -> Error {
        let undo: Text = match self.undo_all().map(|n| n.saturating_sub(uncertain)) {
            Ok(0) => "nothing was changed".into(),
            Ok(n) => format!("the {n} change(s) made before it were undone").into(),
            Err(e) => crate::text!(
                format!("undoing the changes made before it also failed ({e}): undo them with "),
                Call::NicRestore {
                    iface: Some(IfName::new(self.ctl.name())),
                }
            ),
        };
        Error::NicSetup {
            iface: self.ctl.name().to_string(),
            step: step.to_string().into(),
            cause: Box::new(cause),
            undo,
        }
    }

    /// Undoes the changes in reverse order; removes the state file when all were undone.
    fn undo_all(&mut self) -> Result<usize> {
        let n = self.changes.len();
        let records: Vec<Record> = self
            .changes
            .drain(..)
            .map(|change| Record { change, done: true })
            .collect();
        let r = undo_records(&mut self.ctl, &records);
        match (r, self.state.take()) {
            (Ok(()), Some(st)) => st.remove().map(|()| n),
            (Ok(()), None) => Ok(n),
            // The state file stays for `zcnet nic restore`.
            (Err(e), _) => Err(e),
        }
    }

    /// The changes in force.
    pub fn changes(&self) -> &[Change] {
        &self.changes
    }

    /// The state file recording them.
    pub fn state_path(&self) -> Option<&Path> {
        self.state.as_ref().map(StateFile::path)
    }

    /// Undoes every change now, reporting failures.
    pub fn restore(mut self) -> Result<usize> {
        self.undo_all()
    }

    /// Leaves the changes applied (for `zcnet nic restore` later); returns the state file.
    pub fn keep(mut self) -> Option<std::path::PathBuf> {
        self.changes.clear();
        self.state.take().map(|s| s.path().to_path_buf())
    }
}

impl<C: NicControl> Drop for NicGuard<C> {
    fn drop(&mut self) {
        if self.changes.is_empty() && self.state.is_none() {
            return;
        }
        if let Err(e) = self.undo_all() {
            use std::io::Write as _;
            // Not eprintln!: a closed stderr would panic here, in a drop.
            let _ = writeln!(
                std::io::stderr(),
                "zcnet: restoring {} failed: {e}",
                self.ctl.name()
            );
        }
    }
}

/// Whether a failed step's change may have been made all the same: its request timed out (the
/// kernel may apply it after the answer was given up on), rather than being refused.
fn outcome_unknown(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::TimedOut)
}

/// Undoes `records` (in the order they were made) in reverse. Pending records are undone too:
/// their change may or may not have happened, and every undo here is safe either way. Stops
/// at the first failure.
pub fn undo_records<C: NicControl + ?Sized>(ctl: &mut C, records: &[Record]) -> Result<()> {
    undo_records_waiting(ctl, records, PROVIDER_WAIT)
}

/// How long an undo waits for a memory provider to let go of the device (see
/// [`provider_bound`]).
pub const PROVIDER_WAIT: Duration = Duration::from_secs(3);

/// Whether `e` is the kernel refusing a ring change because a queue of the device still has a
/// memory provider (devmem's dma-buf binding, a zcrx area): `ethnl_set_rings` (net/ethtool/
/// rings.c) "can't disable tcp-data-split while device has memory provider enabled" (and the
/// same for a non-zero hds_thresh), EINVAL. A zcrx area is let go of by the ring's exit work,
/// which the kernel runs after the process that made it has exited: a restore right then meets
/// this for a moment.
pub fn provider_bound(e: &Error) -> bool {
    matches!(e, Error::Kernel { errno: Some(libc::EINVAL), message, .. } if message.contains("memory provider"))
}

/// Runs `step`, again every 50 ms for up to `wait` while it is refused because a memory
/// provider is still bound ([`provider_bound`]).
fn while_provider_bound(wait: Duration, mut step: impl FnMut() -> Result<()>) -> Result<()> {
    let until = std::time::Instant::now() + wait;
    loop {
        match step() {
            Err(e) if provider_bound(&e) && std::time::Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

/// [`undo_records`], waiting up to `wait` for a memory provider to let go of the device.
pub fn undo_records_waiting<C: NicControl + ?Sized>(
    ctl: &mut C,
    records: &[Record],
    wait: Duration,
) -> Result<()> {
    for r in records.iter().rev() {
        match &r.change {
            Change::HeaderSplit {
                prev_split,
                prev_hds,
            } => while_provider_bound(wait, || ctl.set_rings(*prev_split, *prev_hds))?,
            Change::Ntuple { prev_on } => ctl.set_ntuple(*prev_on)?,
            Change::Rss { prev, was_default } => while_provider_bound(wait, || {
                ctl.set_indir(if *was_default { None } else { Some(prev) })
            })?,
            Change::Rule {
                spec,
                location: Some(l),
            } => {
                // Only while the rule at `l` is still the one made: an earlier, partial restore
                // may have deleted it, and the driver may since have put someone else's rule
                // at that location (`ethtool -N ... loc any`), which is not ours to delete.
                if !ctl.rules()?.iter().any(|(loc, s)| loc == l && s == spec) {
                    continue;
                }
                match ctl.delete_rule(*l) {
                    // Gone meanwhile: nothing to undo.
                    Err(Error::Kernel {
                        errno: Some(ENOENT),
                        ..
                    }) => {}
                    other => other?,
                }
            }
            Change::Rule {
                spec,
                location: None,
            } => {
                // Crashed between insert and record: find the rule by what it matches (setup
                // inserts none while the same rule is installed, so a match is the one it made).
                for (loc, s) in ctl.rules()? {
                    if s == *spec {
                        ctl.delete_rule(loc)?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// Undoes what the state file at `path` records on the device behind `ctl`, then deletes the
/// file. Refuses while the process that made the changes is alive.
pub fn restore_from_file<C: NicControl + ?Sized>(ctl: &mut C, path: &Path) -> Result<Vec<Record>> {
    let (owner, records) = state::read(path)?;
    if !state::is_this_process(&owner) {
        let refused = |problem: String| Error::NicState {
            path: path.to_path_buf(),
            problem: problem.into(),
        };
        match state::owner_liveness(&owner) {
            state::Liveness::Gone => {}
            state::Liveness::Alive => {
                return Err(refused(format!(
                "pid {} that made these changes is still running (stop it and it restores them)",
                owner.pid
            )))
            }
            state::Liveness::Unknown(why) => return Err(refused(why)),
        }
    }
    undo_records(ctl, &records)?;
    std::fs::remove_file(path).map_err(|e| Error::io(format!("removing {}", path.display()), e))?;
    Ok(records)
}
