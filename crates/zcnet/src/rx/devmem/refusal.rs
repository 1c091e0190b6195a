//! Why a devmem binding was refused, and the way out (see the parent module).

use super::*;
use crate::text::{Field, Piece, Term, Text};

/// Why the device (or the kernel) refused a binding, and the way out; the kernel's own
/// message (extack) goes in the line too.
pub(super) fn bind_refusal(t: &Target, e: &zcnet_netlink::Error) -> Error {
    let errno = e.errno();
    let (reason, fix): (Text, Remedy) = match errno {
        Some(libc::EOPNOTSUPP) => (
            "the device cannot take a dma-buf binding: its driver has no queue-management ops or header split; virtual devices such as veth, lo, ifb and tun never have them".into(),
            Remedy::Any(&[
                Remedy::UseNic(&crate::remedy::Nic {
                    needs: "devmem support and header split",
                    drivers: "mlx5, bnxt, gve, fbnic",
                }),
                Remedy::SetupNic,
                Remedy::UseRxMode(RxMode::Uring),
            ]),
        ),
        Some(libc::EINVAL) => (
            "the kernel refused the binding: header split (tcp-data-split) is off, hds-thresh is not 0, or the fd is not a dma-buf the device can map".into(),
            Remedy::Any(&[
                Remedy::All(&[
                    Remedy::SetupNic,
                    Remedy::Other("pass a dma-buf the NIC can reach"),
                ]),
                Remedy::UseRxMode(RxMode::Uring),
            ]),
        ),
        Some(n @ (libc::EEXIST | libc::EBUSY)) => {
            return Error::Busy {
                what: format!("devmem TCP receive on {} queue {}", t.iface, t.queue).into(),
                holder: format!(
                    "the queue already has a memory provider (a zcrx area or another binding) or an XDP program{}",
                    kernel_says(e)
                ).into(),
                source: io::Error::from_raw_os_error(n),
                remedy: Remedy::OtherQueue,
            }
        }
        Some(libc::ERANGE) => (
            "the queue index is past the device's RX queues".into(),
            Remedy::ChooseQueue,
        ),
        Some(libc::ENODEV) => (
            "the interface is not in this network namespace (any more)".into(),
            Remedy::Any(&[
                Remedy::CheckLink,
                Remedy::UseRxMode(RxMode::Uring),
            ]),
        ),
        Some(libc::EPERM) | Some(libc::EACCES) => {
            let (reason, fix) = not_permitted(
                t,
                "devmem TCP",
                "binding a dma-buf needs CAP_NET_ADMIN",
            );
            (reason, fix)
        }
        Some(libc::ENOMEM) => (
            "mapping the dma-buf for the device failed (out of memory or IOMMU space)".into(),
            Remedy::Any(&[Remedy::SmallerDmabuf, Remedy::UseRxMode(RxMode::Uring)]),
        ),
        _ => (
            e.to_string().into(),
            Remedy::Any(&[
                Remedy::NeedKernel("Linux 6.12+ (netdev bind-rx) and a NIC with header split"),
                Remedy::UseRxMode(RxMode::Uring),
            ]),
        ),
    };
    let kernel = kernel_says(e);
    Error::Unsupported {
        what: crate::text!(
            format!("devmem TCP receive on {} queue {} (", t.iface, t.queue),
            reason,
            format!("{kernel})"),
        ),
        source: io::Error::from_raw_os_error(errno.unwrap_or(libc::EOPNOTSUPP)),
        remedy: fix,
    }
}

/// "; kernel: " and the kernel's own message (extack), if it sent one.
fn kernel_says(e: &zcnet_netlink::Error) -> String {
    e.extack()
        .filter(|m| !m.is_empty())
        .map(|m| format!("; kernel: {}", m.replace(['\n', '\r'], " ")))
        .unwrap_or_default()
}

/// Asks whether the device would take a binding, without a dma-buf: bind-rx with `/dev/null`
/// (as `zcnet probe --active` does). The kernel checks the device (present, queue-management
/// ops) before it looks at the fd (net/core/netdev-genl.c), so `EINVAL`/`EBADF` mean "the
/// device got past that; the fd is no dma-buf" and nothing is bound; other errors are the
/// device's (or the caller's) refusal.
pub(super) fn device_refusal(t: &Target) -> Option<Error> {
    let null = std::fs::File::open("/dev/null").ok()?;
    match RxBinding::bind(t.ifindex, null.as_raw_fd(), &[t.queue]) {
        // Bound to /dev/null: impossible, but nothing to complain about; dropping unbinds.
        Ok(_) => None,
        Err(e) if matches!(e.errno(), Some(libc::EINVAL | libc::EBADF)) => None,
        Err(e) => Some(bind_refusal(t, &e)),
    }
}

/// The dma-buf could not be made (and the device would take one).
pub(super) fn no_dmabuf(t: &Target, e: io::Error) -> Error {
    let reason = sys::explain_udmabuf_errno(e.raw_os_error().unwrap_or(0));
    Error::Unsupported {
        what: format!(
            "devmem TCP receive on {} queue {}: no dma-buf to bind (a udmabuf of host memory could not be made: {reason})",
            t.iface, t.queue
        ).into(),
        source: e,
        remedy: Remedy::Any(&[
            Remedy::Say(&[
                Piece::Str("pass a dma-buf of device memory ("),
                Piece::Term(Term::Field(Field::RxDmabuf)),
                Piece::Str(", e.g. exported by a GPU driver)"),
            ]),
            Remedy::Other("load udmabuf (CONFIG_UDMABUF) for host memory"),
            Remedy::UseRxMode(RxMode::Uring),
        ]),
    }
}
