//! Remedies more than one rule gives: the channel change that adds RX queues, zcnet's NIC
//! set-up for header split, and the kernel upgrade.

use super::{Finding, IfaceFacts, RxChannels, Verdict};
use crate::text::{Call, IfName, Text};

/// How interface `name` can get at least `need` RX queues, as the channel change that works on
/// this machine ([`Call::SetChannels`], which a front end says as its own command; `Ok`), or
/// why there is none (`Err`).
/// Only a driver that reports channels it can change (max above current) can get more: lo and
/// ifb report none, so nothing can add a queue to them. The change is made over ethtool netlink,
/// so it needs no other tool; `ethtool -L` is named beside it only when `ethtool_cli` says it is
/// installed.
pub fn add_rx_queues(
    name: &str,
    need: u32,
    ch: Option<&RxChannels>,
    ethtool_cli: bool,
) -> Result<Text, String> {
    let (kind, want) = rx_queue_plan(name, need, ch)?;
    let ethtool = if ethtool_cli {
        format!(" (or: ethtool -L {name} {kind} {want})")
    } else {
        " (ethtool is not installed; this uses the same ethtool netlink request)".to_string()
    };
    Ok(crate::text!(
        Call::SetChannels {
            iface: Some(IfName::new(name)),
            change: Some((kind, want)),
        },
        ethtool
    ))
}

/// The set-up that turns header split on for zero-copy receive on `i` and steers a flow to its
/// trial queue ([`Call::NicSetup`], which a front end says as its own command): the remedy
/// [`rx_device_rules`] gives for header split that is off or not at 0.
///
/// [`rx_device_rules`]: super::rx_device_rules
pub fn setup_command(i: &IfaceFacts) -> Text {
    Text::from(Call::NicSetup {
        iface: Some(IfName::new(&i.name)),
        queue: Some(i.trial_queue()),
    })
}

/// The channel change that gives `name` `need` RX queues: the kind of channel to set
/// ("combined" where the driver has them, else "rx") and its count, or why no change can.
pub fn rx_queue_plan(
    name: &str,
    need: u32,
    ch: Option<&RxChannels>,
) -> Result<(&'static str, u32), String> {
    let Some(c) = ch.filter(|c| c.rx_max > 0 || c.combined_max > 0) else {
        return Err(format!(
            "{name} reports no channels that could be changed (its driver has no channel \
             control), so no command can give it more RX queues"
        ));
    };
    // Combined channels where the driver has them (most NICs), else RX-only ones (veth).
    let (kind, other, cur, max) = if c.combined_max > 0 {
        ("combined", c.rx, c.combined, c.combined_max)
    } else {
        ("rx", c.combined, c.rx, c.rx_max)
    };
    let want = need.saturating_sub(other);
    if want > max || max <= cur {
        return Err(format!(
            "{name} allows at most {} RX queue(s) ({kind} channels: {cur} in use, at most \
             {max}), so no command can give it {need}",
            other + max
        ));
    }
    Ok((kind, want))
}

const UPGRADE: &str = "upgrade the kernel";

/// "Unsupported" for a kernel too old for a mechanism (or built without it): the remedy is an
/// upgrade.
pub(super) fn needs_upgrade(reason: impl Into<Text>) -> Finding {
    Finding::new(Verdict::Unsupported, reason).remedy(UPGRADE)
}
