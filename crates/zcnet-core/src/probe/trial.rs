//! What an `--active` trial's answer does to an inferred finding: a success confirms it, a
//! refusal replaces or confirms it, and a trial this process may not make or that found its
//! queue in use confirms nothing.

use super::{errno, Finding, Refusal, Verdict};
use crate::text::Field;

/// A bind or registration trial's answer, as [`Trials`](super::Trials) holds it (`None`: not
/// tried).
pub(super) type Trial<'a> = Option<&'a Result<(), Refusal>>;

/// Applies an `--active` trial result: success confirms zero copy, a refusal is the verdict
/// with the kernel's words, other errors mean "the device would, the probe fd would not".
pub(super) fn apply_trial(mut f: Finding, trial: Trial<'_>, tried: &str) -> Finding {
    match trial {
        None => f,
        Some(Err(r)) if r.errno == errno::EPERM => not_permitted(f, tried, r),
        Some(Err(r)) if r.errno == errno::EBUSY || r.errno == errno::EEXIST => {
            queue_busy(f, tried, r)
        }
        Some(Ok(())) => {
            f.verdict = Verdict::ZeroCopy;
            f.reason = format!("{tried} worked (and was undone)").into();
            f.remedy = None;
            f.confirmed = true;
            f
        }
        // Refused as the inferred finding said it would be, for a reason a change to the
        // device's configuration removes (header split off, hds-thresh, one queue): the trial
        // confirms "not as configured now", and the reason and the remedy stay. (Seen on the
        // software NIC with header split off: zcrx registration EINVAL had replaced "header
        // split is off" and read as "unsupported, confirmed" on a device that can.)
        Some(Err(r))
            if f.verdict == Verdict::Unsupported
                && f.remedy.is_some()
                && r.errno != errno::ENOMEM =>
        {
            f.reason
                .push_str(&format!("; {tried} refused as expected: {}", r.message));
            f.confirmed = true;
            f
        }
        Some(Err(r)) => {
            f.verdict = Verdict::Unsupported;
            f.reason = format!("{tried} refused: {}", r.message).into();
            if r.errno == errno::ENOMEM {
                f.remedy = Some("ulimit -l unlimited (RLIMIT_MEMLOCK)".into());
            }
            f.confirmed = true;
            f
        }
    }
}

/// A trial that found its queue in use (another socket, a running application, a binding the
/// kernel is still releasing) says nothing about the device: the inferred verdict stays,
/// unconfirmed, with what was in the way.
fn queue_busy(mut f: Finding, tried: &str, r: &Refusal) -> Finding {
    f.reason.push_str(&format!(
        "; not confirmed: {tried} found the queue in use ({})",
        r.message
    ));
    f.remedy
        .get_or_insert_with(|| "probe again while nothing uses the queue, to confirm".into());
    f.confirmed = false;
    f
}

/// A trial this process was not allowed to make says nothing about the machine: the inferred
/// verdict stays, unconfirmed. Where that verdict is "unsupported" for the device's own reasons
/// root would be refused too, so no privilege is offered as a remedy; otherwise the report says
/// how to confirm it.
pub(super) fn not_permitted(mut f: Finding, tried: &str, r: &Refusal) -> Finding {
    f.reason.push_str(&format!(
        "; not confirmed: {tried} needs root or CAP_NET_ADMIN ({})",
        r.message
    ));
    if f.verdict != Verdict::Unsupported {
        f.remedy.get_or_insert_with(|| {
            crate::text!(
                "probe again with ",
                Field::ProbeActive,
                ", as root, to confirm"
            )
        });
    }
    f.confirmed = false;
    f
}
