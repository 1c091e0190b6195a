//! The receive rules: the header-split rules a device must meet for zcrx and devmem RX, and
//! the zcrx verdict (io_uring support, the device, the registration trial, RLIMIT_MEMLOCK).

use super::remedy::{add_rx_queues, needs_upgrade, setup_command};
use super::trial::{apply_trial, Trial};
use super::{Finding, HeaderSplit, IfaceFacts, KernelFacts, Verdict};

/// The header-split rules shared by zcrx and devmem RX (iou-zcrx.rst, devmem.rst): the driver
/// must split headers, hds-thresh must be 0, and the queue's flow must be steered to it.
///
/// These are the device's own requirements, whoever asks: a refusal here is one root gets too.
/// `Unsupported` without a remedy means no change to this device would do (a software device,
/// no header split reported, no way to add the second queue); with one, a configuration
/// change (which needs root) would. `what` names the mechanism ("zcrx", "devmem TCP").
/// `ethtool_cli`: the `ethtool` command is installed ([`KernelFacts::ethtool_cli`]).
pub fn rx_device_rules(i: &IfaceFacts, what: &str, ethtool_cli: bool) -> Finding {
    let name = &i.name;
    if i.is_software() {
        return Finding::new(
            Verdict::Unsupported,
            format!(
                "software devices have no queue-management ops and no header split; {what} \
                 needs a NIC driver with both (bnxt, mlx5, gve, fbnic)"
            ),
        );
    }
    let setup = setup_command(i);
    match &i.header_split {
        HeaderSplit::NotReported(why) => Finding::new(
            Verdict::Unsupported,
            format!("{} does not report header split ({why}); {what} needs it", i.driver_name()),
        ),
        HeaderSplit::Unknown | HeaderSplit::Disabled => Finding::new(
            Verdict::Unsupported,
            format!("header split is off on {name}; {what} needs tcp-data-split on and hds-thresh 0"),
        )
        // zcnet's own command rather than `ethtool -G`: it needs no other tool, and ethtool
        // before 6.3 (Debian bookworm's 6.1) does not know tcp-data-split or hds-thresh.
        .remedy(setup.clone()),
        HeaderSplit::Enabled if i.hds_thresh.unwrap_or(0) != 0 => Finding::new(
            Verdict::Unsupported,
            format!(
                "hds-thresh is {} on {name}: payloads under it land in header buffers; {what} needs 0",
                i.hds_thresh.unwrap_or(0)
            ),
        )
        .remedy(setup.clone()),
        HeaderSplit::Enabled if i.rx_queues < 2 => {
            let reason = format!(
                "{name} has one RX queue; {what} takes a queue out of RSS, so it needs two or more"
            );
            match add_rx_queues(name, 2, i.channels.as_ref(), ethtool_cli) {
                Ok(cmd) => Finding::new(Verdict::Unsupported, reason).remedy(cmd),
                Err(none) => Finding::new(Verdict::Unsupported, format!("{reason}: {none}")),
            }
        }
        HeaderSplit::Enabled => {
            let mut f = Finding::new(
                Verdict::ZeroCopy,
                format!("header split is on, hds-thresh 0: {what} can own RX queue {}", i.trial_queue()),
            );
            if i.ntuple != Some(true) {
                f.reason.push_str("; flows must still be steered to that queue");
                f.remedy = Some(match i.ntuple {
                    None => format!(
                        "{name} has no ntuple filters: steer with RSS (ethtool -X {name} ...) or pick the queue the flow hashes to"
                    ).into(),
                    // `nic setup --port` turns ntuple-filters on itself.
                    Some(_) => setup,
                });
            }
            f
        }
    }
}

pub(super) fn zcrx(k: &KernelFacts, i: &IfaceFacts, trial: Trial<'_>) -> Finding {
    if let Some(why) = &k.uring.unusable {
        return Finding::new(Verdict::Unsupported, format!("io_uring is unusable: {why}"))
            .remedy("sysctl -w kernel.io_uring_disabled=0");
    }
    if !k.uring.recv_zc {
        return needs_upgrade(
            "the kernel has no IORING_OP_RECV_ZC (Linux 6.15 or newer, CONFIG_IO_URING_ZCRX)",
        );
    }
    if !k.uring.zcrx_ring {
        return needs_upgrade(
            "io_uring refuses a ring with SINGLE_ISSUER|DEFER_TASKRUN|CQE32, which zcrx needs",
        );
    }
    let f = rx_device_rules(i, "zcrx", k.ethtool_cli);
    let f = apply_trial(
        f,
        trial,
        &format!(
            "zcrx registration on {} rx queue {}",
            i.name,
            i.trial_queue()
        ),
    );
    memlock_note(k, f)
}

/// Pinning an area is charged to RLIMIT_MEMLOCK without CAP_IPC_LOCK: say so when it is small.
fn memlock_note(k: &KernelFacts, mut f: Finding) -> Finding {
    const SMALL: u64 = 64 << 20;
    if let (Some(limit), false) = (k.memlock, k.ipc_lock) {
        if limit < SMALL && f.verdict == Verdict::ZeroCopy {
            f.reason.push_str(&format!(
                "; RLIMIT_MEMLOCK is {} KiB, which caps the area",
                limit / 1024
            ));
            f.remedy.get_or_insert_with(|| "ulimit -l unlimited".into());
        }
    }
    f
}
