//! Why a zcrx registration was refused, and the way out (see the parent module): the
//! errnos of a host area, a dma-buf area and a registration without a device, and the
//! privilege refusal the devmem binding shares.

use super::*;

/// Why `IORING_REGISTER_ZCRX_IFQ` with a dma-buf area of `len` bytes was refused, where the
/// reason (or the fix) differs from a host area's: the dma-buf's own checks (6.18
/// `io_import_area`/`io_import_dmabuf`, reached only once the device passed), and a device
/// refusal, whose fix for device memory is staging rather than another host mechanism; `None`
/// for errnos that mean what they mean for host areas.
fn dmabuf_reason(errno: i32, len: u64) -> Option<(String, Remedy)> {
    const DEVMEM_OR_STAGING: Remedy =
        Remedy::Any(&[Remedy::UseRxMode(RxMode::Devmem), Remedy::Staging]);
    let fix_fd = Remedy::Any(&[
        Remedy::Say(&[
            Piece::Str("pass the dma-buf of the memory to receive into ("),
            Piece::Term(Term::Field(Field::RxDmabuf)),
            Piece::Str(", e.g. exported by the GPU driver)"),
        ]),
        DEVMEM_OR_STAGING,
    ]);
    Some(match errno {
        libc::EOPNOTSUPP => (
            "the driver has no queue-management ops or header split; virtual devices such as veth, lo, ifb and tun never have them; or the dma-buf's exporter cannot attach it to this NIC (no peer-to-peer DMA path)".into(),
            Remedy::Any(&[
                Remedy::Other("use a NIC with header split (mlx5, bnxt, gve, fbnic) that can reach the dma-buf's memory"),
                Remedy::SetupNic,
                Remedy::Staging,
            ]),
        ),
        libc::EBADF => ("the dma-buf fd is not open".into(), fix_fd),
        libc::EINVAL if len == 0 => (
            "the fd has size 0: it is not a dma-buf".into(),
            fix_fd,
        ),
        libc::EINVAL => (
            format!("the kernel refused the dma-buf area ({len} bytes at offset 0): the fd is not a dma-buf, its size is not a page multiple or not what the exporter maps, header split (tcp-data-split) is off on the queue, or the kernel predates dma-buf areas (Linux 6.16)"),
            Remedy::Any(&[
                Remedy::All(&[
                    Remedy::Other("pass a whole dma-buf of page-multiple size"),
                    Remedy::SetupNic,
                ]),
                DEVMEM_OR_STAGING,
            ]),
        ),
        libc::EFAULT | libc::EOVERFLOW => (
            format!("a dma-buf area of {len} bytes is out of range: 0, or above Linux 6.18's 1 GiB limit for areas (io_validate_user_buf_range)"),
            Remedy::Any(&[Remedy::DmabufUpTo1G, DEVMEM_OR_STAGING]),
        ),
        libc::ENOMEM => (
            "mapping the dma-buf for the NIC failed (out of memory or IOMMU space)".into(),
            Remedy::Any(&[Remedy::SmallerDmabuf, DEVMEM_OR_STAGING]),
        ),
        _ => return None,
    })
}

/// Why `IORING_REGISTER_ZCRX_IFQ` (or the ring it needs) was refused, and the way out.
/// `dmabuf`: the length of the dma-buf area tried, `None` for host memory.
pub(super) fn refusal(t: &Target, e: io::Error, dmabuf: Option<u64>) -> Error {
    if let (Some(len), Some(errno)) = (dmabuf, e.raw_os_error()) {
        if let Some((reason, fix)) = dmabuf_reason(errno, len) {
            return Error::Unsupported {
                what: format!(
                    "io_uring zero-copy receive (zcrx) into a dma-buf on {} queue {} ({reason})",
                    t.iface, t.queue
                )
                .into(),
                source: e,
                remedy: fix,
            };
        }
    }
    let (reason, fix): (Text, Remedy) = match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) => (
            "the driver has no queue-management ops or header split; virtual devices such as veth, lo, ifb and tun never have them".into(),
            Remedy::Any(&[
                Remedy::UseNic(&crate::remedy::Nic {
                    needs: "header split",
                    drivers: "mlx5, bnxt, gve, fbnic",
                }),
                Remedy::SetupNic,
                Remedy::UseRxMode(RxMode::Uring),
            ]),
        ),
        Some(libc::EINVAL) => (
            "the kernel refused the setup: header split (tcp-data-split) is off on the queue, or the kernel lacks zcrx (Linux 6.15+)".into(),
            Remedy::Any(&[
                Remedy::SetupNic,
                Remedy::ProbeIface,
                Remedy::UseRxMode(RxMode::Uring),
            ]),
        ),
        Some(libc::ENODEV) => (
            "the interface is not in this network namespace (any more)".into(),
            Remedy::Any(&[
                Remedy::CheckLink,
                Remedy::UseRxMode(RxMode::Uring),
            ]),
        ),
        Some(libc::EPERM) | Some(libc::EACCES) => not_permitted(
            t,
            "zcrx",
            "needs CAP_NET_ADMIN (or io_uring is disabled by kernel.io_uring_disabled)",
        ),
        Some(libc::ENOMEM) => (
            "pinning the receive area failed: out of memory, or past RLIMIT_MEMLOCK".into(),
            Remedy::Any(&[
                Remedy::RaiseMemlock,
                Remedy::SmallerArea,
                Remedy::UseRxMode(RxMode::Uring),
            ]),
        ),
        Some(libc::ERANGE) => (
            "the queue index is past the device's RX queues".into(),
            Remedy::ChooseQueue,
        ),
        Some(libc::EEXIST) | Some(libc::EBUSY) => {
            return Error::Busy {
                what: format!(
                    "io_uring zero-copy receive (zcrx){} on {} queue {}",
                    if dmabuf.is_some() { " into a dma-buf" } else { "" },
                    t.iface,
                    t.queue
                ).into(),
                holder: "the queue already has a memory provider (another zcrx area or a devmem binding)".into(),
                source: e,
                remedy: Remedy::OtherQueue,
            }
        }
        Some(libc::ENOSYS) => (
            "the kernel has no io_uring".into(),
            Remedy::Any(&[
                Remedy::NeedKernel("Linux 6.15+ with io_uring"),
                Remedy::UseRxMode(RxMode::Copy),
            ]),
        ),
        Some(errno) => (
            zcnet_sys::zcrx::explain_register_errno(errno).into(),
            Remedy::Any(&[
                Remedy::NeedKernel("Linux 6.15+ with CONFIG_IO_URING_ZCRX and a NIC with header split"),
                Remedy::UseRxMode(RxMode::Uring),
            ]),
        ),
        None => (
            "the kernel's reply did not fit the refill region".into(),
            Remedy::Any(&[
                Remedy::Report,
                Remedy::UseRxMode(RxMode::Uring),
            ]),
        ),
    };
    let into = if dmabuf.is_some() {
        " into a dma-buf"
    } else {
        ""
    };
    Error::Unsupported {
        what: crate::text!(
            format!(
                "io_uring zero-copy receive (zcrx){into} on {} queue {} (",
                t.iface, t.queue
            ),
            reason,
            ")",
        ),
        source: e,
        remedy: fix,
    }
}

/// Why a registration without a device (`ZCRX_REG_NODEV`) was refused, and the way out.
/// Whether the kernel's zcrx query lists the flag (`listed`, [`ZcrxCaps::nodev`]) decides what
/// `EINVAL` means: where it does not, the flag itself (6.18 refuses any `flags`); where it
/// does, the area or refill ring. The release `release` is only named in the message.
pub(super) fn nodev_refusal(e: io::Error, listed: bool, release: Option<(u32, u32, u32)>) -> Error {
    let this = release.map_or(
        "this kernel's release is unknown".to_string(),
        |(a, b, c)| format!("this is Linux {a}.{b}.{c}"),
    );
    let (reason, fix): (String, Remedy) = match e.raw_os_error() {
        Some(libc::EINVAL) if !listed => (
            format!("needs ZCRX_REG_NODEV, which this kernel's zcrx query does not list (Linux 7.1 added it); {this}"),
            Remedy::Any(&[
                Remedy::NeedKernel("Linux 7.1 or later"),
                Remedy::UseRxMode(RxMode::Uring),
            ]),
        ),
        Some(libc::EINVAL) => (
            "the kernel refused the area or the refill ring".into(),
            Remedy::Any(&[Remedy::PageSizedArea, Remedy::UseRxMode(RxMode::Uring)]),
        ),
        // The kernel checks the privilege before the flag: where its zcrx query does not list
        // the flag, root would be refused too (EINVAL), so the kernel is the reason, not root.
        Some(libc::EPERM) | Some(libc::EACCES) if !listed => (
            format!("needs ZCRX_REG_NODEV, which this kernel's zcrx query does not list (Linux 7.1 added it), and CAP_NET_ADMIN; {this}; root is refused too"),
            Remedy::Any(&[
                Remedy::NeedKernel("Linux 7.1 or later"),
                Remedy::UseRxMode(RxMode::Uring),
            ]),
        ),
        Some(libc::EPERM) | Some(libc::EACCES) => (
            "needs CAP_NET_ADMIN (or io_uring is disabled by kernel.io_uring_disabled)".into(),
            AS_ROOT,
        ),
        Some(libc::ENOMEM) => (
            "pinning the receive area failed: out of memory, or past RLIMIT_MEMLOCK".into(),
            Remedy::Any(&[
                Remedy::RaiseMemlock,
                Remedy::SmallerArea,
                Remedy::UseRxMode(RxMode::Uring),
            ]),
        ),
        Some(libc::EOPNOTSUPP) => (
            "the kernel is built without zcrx (CONFIG_IO_URING_ZCRX)".into(),
            Remedy::UseRxMode(RxMode::Uring),
        ),
        Some(libc::ENOSYS) => (
            "the kernel has no io_uring".into(),
            Remedy::UseRxMode(RxMode::Copy),
        ),
        Some(errno) => (
            zcnet_sys::zcrx::explain_register_errno(errno).into(),
            Remedy::UseRxMode(RxMode::Uring),
        ),
        None => (
            "the kernel's reply did not fit the refill region".into(),
            Remedy::Any(&[
                Remedy::Report,
                Remedy::UseRxMode(RxMode::Uring),
            ]),
        ),
    };
    Error::Unsupported {
        what: format!("io_uring zero-copy receive (zcrx) without a device ({reason})").into(),
        source: e,
        remedy: fix,
    }
}

/// Use root, or receive with io_uring.
const AS_ROOT: Remedy = Remedy::Any(&[Remedy::RunAsRoot, Remedy::UseRxMode(RxMode::Uring)]);

/// The reason and fix for `EPERM`/`EACCES` from a zcrx registration or a devmem binding
/// (`what`: "zcrx", "devmem TCP"). The kernel checks CAP_NET_ADMIN before it looks at the
/// device, so the errno says nothing about whether root would succeed; the probe's device rules
/// do (from reads any user may make). Where the device itself cannot, root would be refused
/// too: the reason is the device's and no privilege is offered as the fix. Where a setting is
/// off, the reason says which and the remedy (as root). Otherwise: `missing_privilege`.
pub(in crate::rx) fn not_permitted(
    t: &Target,
    what: &str,
    missing_privilege: &'static str,
) -> (Text, Remedy) {
    use zcnet_core::probe::{rx_device_rules, Verdict};
    let as_root = AS_ROOT;
    let Some(facts) = crate::iface::iface_facts(&t.iface) else {
        return (missing_privilege.into(), as_root);
    };
    let f = rx_device_rules(&facts, what, crate::iface::ethtool_installed());
    match (f.verdict, f.remedy) {
        (Verdict::Unsupported, None) => (
            crate::text!(
                format!("{}: ", t.iface),
                f.reason,
                "; root is refused too (the errno is for CAP_NET_ADMIN, which this process lacks and the kernel checks before the device)",
            ),
            Remedy::Any(&[
                Remedy::UseNic(&crate::remedy::Nic {
                    needs: "queue-management ops and header split",
                    drivers: "mlx5, bnxt, gve, fbnic",
                }),
                Remedy::UseRxMode(RxMode::Uring),
            ]),
        ),
        // Header split off or hds-thresh above 0: the typed remedy says the same as the probe.
        (Verdict::Unsupported, Some(remedy))
            if remedy == zcnet_core::probe::setup_command(&facts) =>
        {
            (
                crate::text!(format!("{missing_privilege}; and {}: ", t.iface), f.reason),
                Remedy::Any(&[
                    Remedy::All(&[Remedy::SteerFlow, Remedy::RunAsRoot]),
                    Remedy::UseRxMode(RxMode::Uring),
                ]),
            )
        }
        (Verdict::Unsupported, Some(remedy)) => {
            (
                crate::text!(
                    format!("{missing_privilege}; and {}: ", t.iface),
                    f.reason,
                    "; as root: ",
                    remedy,
                ),
                Remedy::Any(&[
                    Remedy::Other("then run it as root (CAP_NET_ADMIN)"),
                    Remedy::UseRxMode(RxMode::Uring),
                ]),
            )
        }
        _ => (missing_privilege.into(), as_root),
    }
}
