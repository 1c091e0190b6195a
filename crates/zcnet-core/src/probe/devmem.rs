//! The devmem TCP rules: receive (the netdev family's bind-rx and the device's header split)
//! and transmit (bind-tx and the driver's netmem TX), and what a bind trial with a probe fd
//! that is not a dma-buf can tell.

use super::remedy::needs_upgrade;
use super::rx::rx_device_rules;
use super::trial::{apply_trial, Trial};
use super::{errno, Finding, IfaceFacts, KernelFacts, Verdict};
use crate::text::Field;

/// Drivers that set `netdev->netmem_tx` (devmem TX) as of Linux 6.18: mlx5, bnxt, gve (DQO
/// queue format only). Used only when the probe is not `--active`; `--active` asks the kernel.
const NETMEM_TX_DRIVERS: &[&str] = &["mlx5_core", "bnxt_en", "gve"];

fn netdev_op_missing(k: &KernelFacts, op: &str, since: &str) -> Option<Finding> {
    if k.netdev_ops.is_none() {
        return Some(needs_upgrade(
            "the kernel has no netdev generic netlink family (Linux 6.3 or newer)",
        ));
    }
    if !k.netdev_has(op) {
        return Some(needs_upgrade(format!(
            "the netdev family has no {op} operation ({since})"
        )));
    }
    None
}

pub(super) fn devmem_rx(k: &KernelFacts, i: &IfaceFacts, trial: Trial<'_>) -> Finding {
    if let Some(f) = netdev_op_missing(k, "bind-rx", "devmem TCP RX needs Linux 6.12") {
        return f;
    }
    let mut f = rx_device_rules(i, "devmem TCP", k.ethtool_cli);
    if f.verdict == Verdict::ZeroCopy {
        f.reason
            .push_str("; the payload memory must be a dma-buf (GPU memory, or udmabuf)");
    }
    let tried = format!(
        "bind-rx of a probe fd to {} rx queue {}",
        i.name,
        i.trial_queue()
    );
    devmem_trial(f, trial, &tried, false)
}

/// bind-rx / bind-tx trials use a probe fd that is not a dma-buf, so the kernel can only
/// refuse. EOPNOTSUPP means the device cannot. EBADF/EINVAL about the fd means the device got
/// past its own checks (net/core/netdev-genl.c checks the device before `dma_buf_get`): for
/// bind-tx that is the whole device check (`netdev->netmem_tx`), so it confirms zero copy; for
/// bind-rx the header-split check comes later, at queue binding, so the inferred verdict stays.
fn devmem_trial(
    f: Finding,
    trial: Trial<'_>,
    tried: &str,
    device_check_is_complete: bool,
) -> Finding {
    match trial {
        Some(Err(r)) if r.errno == errno::EBADF || r.errno == errno::EINVAL => {
            let mut f = f;
            f.reason.push_str(&format!("; {tried}: the device passed its checks and only the probe fd (not a dma-buf) was refused ({})", r.message));
            if device_check_is_complete {
                f.verdict = Verdict::ZeroCopy;
                f.remedy = None;
            }
            // bind-rx: what the kernel checks before the fd differs between releases (6.12-6.14
            // nothing at all, later the queue-management ops, later still the queue ids), and
            // the header-split check comes only at queue binding: the inferred verdict stands,
            // not confirmed by this.
            f.confirmed = device_check_is_complete;
            f
        }
        other => apply_trial(f, other, tried),
    }
}

pub(super) fn devmem_tx(k: &KernelFacts, i: &IfaceFacts, trial: Trial<'_>) -> Finding {
    if let Some(f) = netdev_op_missing(k, "bind-tx", "devmem TCP TX needs Linux 6.16") {
        return f;
    }
    let drv = i.driver_name();
    let f = if i.is_software() {
        Finding::new(
            Verdict::Unsupported,
            "software devices do not support netmem TX (devmem TCP transmit)",
        )
    } else if NETMEM_TX_DRIVERS.contains(&drv) {
        Finding::new(
            Verdict::ZeroCopy,
            crate::text!(
                format!("{drv} supports netmem TX (inferred from the driver; "),
                Field::ProbeActive,
                " asks the kernel)",
            ),
        )
    } else {
        Finding::new(
            Verdict::Unsupported,
            crate::text!(
                format!("{drv} is not known to support netmem TX ("),
                Field::ProbeActive,
                " asks the kernel)",
            ),
        )
    };
    devmem_trial(f, trial, &format!("bind-tx on {}", i.name), true)
}
