//! The two AF_XDP verdicts: copy mode (any device, through generic XDP) and zero-copy mode
//! (a driver that advertises xsk-zerocopy); the rules beyond them are in [`super::xsk`].

use super::trial::{apply_trial, not_permitted, Trial};
use super::{errno, Finding, IfaceFacts, KernelFacts, Verdict, XDP_ACT_XSK_ZEROCOPY};

pub(super) fn xsk_copy(k: &KernelFacts, i: &IfaceFacts, trial: Trial<'_>) -> Finding {
    if !k.af_xdp {
        return no_af_xdp().remedy("use a kernel built with CONFIG_XDP_SOCKETS=y");
    }
    let mut f = Finding::new(
        Verdict::Copies,
        "AF_XDP copy mode works on any device (generic XDP) and copies each frame into the UMEM",
    );
    match trial {
        Some(Ok(())) => {
            f.reason = format!(
                "bound an AF_XDP socket (XDP_COPY) to {} queue {}: works, copying each frame",
                i.name,
                i.trial_queue()
            )
            .into();
            f.confirmed = true;
        }
        Some(Err(r)) if r.errno == errno::EPERM => {
            f = not_permitted(f, &format!("AF_XDP bind (XDP_COPY) on {}", i.name), r);
        }
        Some(Err(r)) => {
            f = Finding::new(
                Verdict::Unsupported,
                format!("AF_XDP bind (XDP_COPY) on {} failed: {}", i.name, r.message),
            );
            f.confirmed = true;
        }
        None => {}
    }
    f
}

pub(super) fn xsk_zerocopy(k: &KernelFacts, i: &IfaceFacts, trial: Trial<'_>) -> Finding {
    if !k.af_xdp {
        return no_af_xdp();
    }
    let f = match i.xdp_features {
        Some(x) if x & XDP_ACT_XSK_ZEROCOPY != 0 => Finding::new(
            Verdict::ZeroCopy,
            format!(
                "{} advertises xsk-zerocopy in its xdp-features",
                i.driver_name()
            ),
        ),
        Some(_) => Finding::new(
            Verdict::Unsupported,
            "the driver does not advertise xsk-zerocopy in its xdp-features",
        ),
        None => Finding::new(
            Verdict::Unsupported,
            "xdp-features could not be read (no netdev netlink family)",
        ),
    };
    apply_trial(
        f,
        trial,
        &format!(
            "AF_XDP bind (XDP_ZEROCOPY) to {} queue {}",
            i.name,
            i.trial_queue()
        ),
    )
}

/// The verdict of both modes on a kernel without AF_XDP sockets.
fn no_af_xdp() -> Finding {
    Finding::new(
        Verdict::Unsupported,
        "the kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS)",
    )
}
