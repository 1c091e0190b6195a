//! The send rules (MSG_ZEROCOPY, io_uring SEND_ZC): what the kernel offers, whether the path
//! through the interface copies (local delivery, scatter-gather off), and the loopback trial.

use super::remedy::needs_upgrade;
use super::{errno, Finding, IfaceFacts, IfaceKind, KernelFacts, Mechanism, Refusal, Verdict};

/// Why the path through this interface copies, if it does (software devices deliver locally).
/// The words do not name the device, so that the report can say them once for all of them.
/// They say the protocol: the verdict is TCP's (a stream always ends in a socket), while UDP
/// that no socket on this host receives is not copied (the ifb sink of `bench tx`).
/// A dummy device leaves none: it delivers nothing (see [`is_dummy`]).
fn local_delivery(i: &IfaceFacts) -> Option<String> {
    match i.kind {
        IfaceKind::Physical => None,
        _ if is_dummy(i) => None,
        _ => Some(
            "TCP: a stream through lo, veth or another software device ends in a socket on this \
             host: the kernel copies the pages (skb_orphan_frags_rx) and reports COPIED (so does \
             UDP delivered to a socket here)"
                .to_string(),
        ),
    }
}

/// A dummy device (driver `dummy`, drivers/net/dummy.c): a software device (no queue-management
/// ops, no netmem TX: no zcrx or devmem) whose transmit, `dummy_xmit`, counts each skb and frees
/// it (`dev_kfree_skb`) without reading or copying its pages. So a zero-copy send routed through
/// it completes without a COPIED report (`zcnet bench tx --path dummy` measures 100 % zero copy
/// on Linux 7.2), and nothing comes back: no socket receives it and TCP reaches no peer.
fn is_dummy(i: &IfaceFacts) -> bool {
    i.kind == IfaceKind::Virtual && i.driver.as_deref() == Some("dummy")
}

/// The send verdict's words for a dummy device (see [`is_dummy`]).
fn dummy_send(what: &str) -> String {
    format!(
        "UDP: {what} sends routed through a dummy device are zero copy: the dummy driver frees \
         each skb without copying its pages (dummy_xmit), so the kernel reports no COPIED; \
         TCP through it reaches no peer (it drops every packet)"
    )
}

/// The remedy of [`local_delivery`]: what is zero copy, for which protocol.
const LOCAL_DELIVERY_FIX: &str = "TCP zero copy needs a path that leaves through a NIC; UDP that \
     no socket on this host receives is not copied: UDP sent into an ifb device that drops it \
     is 100 % zero-copy";

pub(super) fn send_path(
    m: Mechanism,
    k: &KernelFacts,
    i: &IfaceFacts,
    trial: Option<&Result<f64, Refusal>>,
) -> Finding {
    let (what, min) = match m {
        Mechanism::MsgZerocopy => ("MSG_ZEROCOPY", (4, 14)),
        _ => ("io_uring SEND_ZC", (6, 0)),
    };
    if m == Mechanism::UringZc {
        if let Some(why) = &k.uring.unusable {
            return Finding::new(
                Verdict::Unsupported,
                format!("TCP and UDP: io_uring is unusable: {why}"),
            )
            .remedy("sysctl -w kernel.io_uring_disabled=0");
        }
        if !k.uring.send_zc {
            return needs_upgrade(
                "TCP and UDP: the kernel has no IORING_OP_SEND_ZC (Linux 6.0 or newer)",
            );
        }
    } else if !k.at_least(min.0, min.1) {
        return needs_upgrade("TCP and UDP: the kernel has no MSG_ZEROCOPY (Linux 4.14 or newer)");
    }
    // The trial runs over TCP loopback only: it confirms a verdict for `lo` alone. For any other
    // interface it is evidence about the mechanism, never a confirmation of that path.
    let over_this = i.kind == IfaceKind::Loopback;
    // A failed loopback trial is the verdict for `lo`; for another device it says nothing
    // about the path through it (lo may be down in this namespace, memlock may be short): the
    // inferred verdict stands, unconfirmed, with the failure beside it.
    let mut loopback_failed = None;
    if let Some(Err(r)) = trial.filter(|r| !matches!(r, Err(r) if r.errno == errno::EPERM)) {
        if over_this {
            let mut f = Finding::new(
                Verdict::Unsupported,
                format!("TCP: {what} over loopback failed: {}", r.message),
            );
            f.confirmed = true;
            return f;
        }
        loopback_failed = Some(format!(
            " (not confirmed: {what} over loopback failed: {}; the trial runs over TCP loopback, not over this device)",
            r.message
        ));
    }
    let mut f = match local_delivery(i) {
        Some(why) => Finding::new(Verdict::Copies, why).remedy(LOCAL_DELIVERY_FIX),
        None if i.scatter_gather == Some(false) => Finding::new(
            Verdict::Copies,
            format!("TCP and UDP: scatter-gather is off on {}: the stack linearizes (copies) each payload", i.name),
        )
        .remedy(if k.ethtool_cli {
            format!("ethtool -K {} sg on", i.name)
        } else {
            format!("install ethtool (it is not installed here), then: ethtool -K {} sg on", i.name)
        }),
        None if is_dummy(i) => Finding::new(Verdict::ZeroCopy, dummy_send(what)),
        None => Finding::new(
            Verdict::ZeroCopy,
            format!(
                "TCP and UDP: {what} sends from pinned user pages through {} (scatter-gather on); the kernel's COPIED reports say per flow what was copied",
                i.driver_name()
            ),
        ),
    };
    if let Some(Ok(frac)) = trial {
        let pct = (frac * 100.0).round();
        if over_this {
            // The trial ran over exactly this path: its answer is the verdict.
            f.verdict = if *frac >= 0.5 {
                Verdict::ZeroCopy
            } else {
                Verdict::Copies
            };
            f.reason = format!(
                "tried {what} over TCP loopback: the kernel reported {pct}% of bytes zero-copy"
            )
            .into();
            f.confirmed = true;
        } else {
            // Evidence that the mechanism works in this kernel, not a trial over this device.
            f.reason.push_str(&format!(
                " ({what} works over TCP loopback, where the trial ran; not tried over this device)"
            ));
        }
    }
    if let Some(note) = loopback_failed {
        f.reason.push_str(&note);
        f.confirmed = false;
    }
    f
}
