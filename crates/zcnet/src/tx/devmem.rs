//! `devmem`: devmem TCP transmit (Documentation/networking/devmem.rst, "TX Interface"; Linux
//! 6.16: net-next commits 8802087d20c0 "net: devmem: TCP tx netlink api" and bd61848900bf
//! "net: devmem: Implement TX path"). The region's dma-buf ([`TxConfig::dmabuf`], offset 0 =
//! the region's first byte) is bound to the egress interface with the netdev family's
//! `bind-tx`; each send is `sendmsg(MSG_ZEROCOPY)` with an `SCM_DEVMEM_DMABUF` control message
//! naming the binding, and an iovec whose base is the buffer's *offset* in the dma-buf
//! (`zcnet_sys::devmem_tx::sendmsg_devmem`). The NIC reads the payload from the dma-buf; the
//! CPU never touches it, so a device region (GPU memory) works as well as host memory.
//!
//! Completions are MSG_ZEROCOPY's (error-queue id ranges), so this backend is the same
//! bookkeeping as `msg-zerocopy` ([`super::msgzc::ErrqueueTx`]) with another kernel call.
//!
//! What 6.18 checks, and what zcnet does about it:
//! - bind-tx refuses a device whose driver does not set `netmem_tx` with `EOPNOTSUPP` "Driver
//!   does not support netmem TX" before it looks at the fd (net/core/netdev-genl.c): veth, lo,
//!   ifb, tun here. The refusal is an [`Error::Unsupported`] with the kernel's words and the
//!   fix; nothing stays bound (the binding's netlink socket is closed) and no fd is left.
//! - Each send checks that the socket's route leaves through the binding's device (`ENODEV`
//!   otherwise; net/core/devmem.c `net_devmem_get_binding`). `SO_BINDTODEVICE` is recommended,
//!   not required; zcnet binds the dma-buf to [`TxConfig::iface`], else to the device the
//!   socket is bound to, else to the interface that owns the socket's local address, and
//!   explains an `ENODEV` at send.
//! - An offset past the dma-buf is `EFAULT`: zcnet refuses a dma-buf smaller than the region
//!   when it is made, so every buffer's offset is in range.
//! - TCP only: on UDP the kernel ignores the control message and would read the offset as an
//!   address of this process, so a datagram socket is refused up front.

use super::msgzc::{ErrqueueTx, ZcKernel};
use super::{Shared, TxConfig};
use crate::error::{Error, Result};
use crate::region::{MemoryKind, Region, TxBuf};
use crate::remedy::Remedy;
use crate::tx::TxMode;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use zcnet_netlink::netdev::TxBinding;
use zcnet_sys::devmem_tx;
use zcnet_sys::mem::Mapping;

/// The `devmem` backend.
pub(crate) type DevmemTx = ErrqueueTx<DevmemKernel>;

/// `sendmsg` from the bound dma-buf.
#[derive(Debug)]
pub(crate) struct DevmemKernel {
    // Field order: the binding is released (its netlink socket closed) before the dma-buf fd;
    // skbs still in flight keep the kernel's binding, and its dma-buf reference, alive.
    binding: TxBinding,
    _dmabuf: Arc<OwnedFd>,
    /// Address of the region's first byte: offset 0 in the dma-buf.
    base: usize,
    iface: String,
}

/// The offset in the dma-buf of byte `off` of a buffer at `addr` in a region starting at
/// `base`.
fn dmabuf_offset(base: usize, addr: usize, off: usize) -> u64 {
    (addr - base + off) as u64
}

impl ZcKernel for DevmemKernel {
    fn mode(&self) -> TxMode {
        TxMode::Devmem
    }

    fn send(&mut self, fd: RawFd, buf: &TxBuf, off: usize, len: usize) -> io::Result<usize> {
        let offset = dmabuf_offset(self.base, buf.slot.addr(), off);
        devmem_tx::sendmsg_devmem(fd, self.binding.id(), offset, len - off, 0)
    }

    fn send_error(&self, sh: &Shared, e: io::Error) -> Error {
        let why = match e.raw_os_error() {
            Some(libc::ENODEV) => crate::text!(
                format!(
                    "devmem send: the socket's route does not leave through {}, the interface the dma-buf is bound to: connect through {} (SO_BINDTODEVICE) or bind the egress interface (",
                    self.iface, self.iface
                ),
                crate::text::Field::TxIface,
                ")",
            ),
            Some(libc::EHOSTUNREACH) => format!(
                "devmem send: the socket's route expired and could not be rebuilt (is {} still up?)",
                self.iface
            )
            .into(),
            Some(libc::EFAULT) => {
                "devmem send: a buffer lies outside the dma-buf (offset past its size)".into()
            }
            Some(libc::EINVAL) => format!(
                "devmem send: the kernel refused binding {} (released, an RX binding, or SO_ZEROCOPY off)",
                self.binding.id()
            )
            .into(),
            _ => return sh.send_error(e),
        };
        Error::io(why, e)
    }
}

/// Or send with `MSG_ZEROCOPY` from host memory.
const MSG_ZC: Remedy = Remedy::UseTxMode(TxMode::MsgZerocopy);

/// What to say when no dma-buf was given.
fn no_dmabuf() -> Error {
    let udmabuf = std::path::Path::new(zcnet_sys::devmem::UDMABUF_DEV).exists();
    Error::Unsupported {
        what: crate::text!(
            "devmem TCP transmit (",
            TxMode::Devmem.term(),
            ") from host memory without a dma-buf (the NIC reads from a dma-buf whose offset 0 is the region's start; ",
            crate::text::Field::TxDmabuf,
            " is unset",
            if udmabuf {
                ""
            } else {
                ", and without /dev/udmabuf (CONFIG_UDMABUF off) host memory cannot be made one"
            },
            ")",
        ),
        source: io::Error::from_raw_os_error(libc::EINVAL),
        remedy: Remedy::Any(&[
            Remedy::UseMemory(MemoryKind::Cuda(0)),
            Remedy::UseMemory(MemoryKind::Udmabuf),
            MSG_ZC,
        ]),
    }
}

/// Why bind-tx was refused, with the kernel's own message (extack), and the way out.
fn bind_refusal(iface: &str, e: &zcnet_netlink::Error) -> Error {
    let errno = e.errno();
    let (reason, fix) = match errno {
        Some(libc::EOPNOTSUPP) => (
            "the driver cannot transmit from a dma-buf (no netmem TX); virtual devices such as veth, lo, ifb and tun never can".to_string(),
            Remedy::Any(&[
                Remedy::UseNic(&crate::remedy::Nic {
                    needs: "netmem TX",
                    drivers: "mlx5, bnxt, gve DQO in Linux 6.18",
                }),
                MSG_ZC,
            ]),
        ),
        Some(libc::EBADF) | Some(libc::EINVAL) => (
            "the fd is not a dma-buf the device can map".to_string(),
            Remedy::Any(&[
                Remedy::Say(&[
                    crate::text::Piece::Str("pass a dma-buf ("),
                    crate::text::Piece::Term(crate::text::Term::Field(crate::text::Field::TxDmabuf)),
                    crate::text::Piece::Str("): a GPU allocation's export"),
                ]),
                Remedy::UseMemory(MemoryKind::Cuda(0)),
                Remedy::UseMemory(MemoryKind::Udmabuf),
            ]),
        ),
        Some(libc::ENODEV) => (
            "the interface is not in this network namespace (any more)".to_string(),
            Remedy::Any(&[Remedy::CheckLink, MSG_ZC]),
        ),
        Some(libc::EPERM) | Some(libc::EACCES) => (
            "the kernel refused the binding for lack of privilege".to_string(),
            Remedy::Any(&[Remedy::RunAsRoot, MSG_ZC]),
        ),
        Some(libc::ENOMEM) => (
            "mapping the dma-buf for the device failed (out of memory or IOMMU space)".to_string(),
            Remedy::Any(&[Remedy::Other("use a smaller region"), MSG_ZC]),
        ),
        _ => (
            e.to_string(),
            Remedy::Any(&[
                Remedy::NeedKernel("Linux 6.16+ (netdev bind-tx) and a NIC with netmem TX for devmem TCP transmit"),
                MSG_ZC,
            ]),
        ),
    };
    let kernel = e
        .extack()
        .filter(|m| !m.is_empty())
        .map(|m| format!("; kernel: {}", m.replace(['\n', '\r'], " ")))
        .unwrap_or_default();
    Error::Unsupported {
        what: format!("devmem TCP transmit on {iface} ({reason}{kernel})").into(),
        source: io::Error::from_raw_os_error(errno.unwrap_or(libc::EOPNOTSUPP)),
        remedy: fix,
    }
}

/// The interface a connected socket sends through, as far as the socket tells: the device it
/// is bound to (`SO_BINDTODEVICE`), else the interface that owns its local address. (A route
/// can leave through another interface than the one holding the source address; the kernel
/// then refuses each send with `ENODEV`, explained by [`DevmemKernel::send_error`].)
fn egress_iface(fd: RawFd) -> Result<String> {
    if let Some(dev) = devmem_tx::bound_device(fd).map_err(|e| Error::io("SO_BINDTODEVICE", e))? {
        return Ok(dev);
    }
    let unknown = |what: String| Error::Unsupported {
        what: format!(
            "devmem TCP transmit: cannot tell which interface the socket sends through ({what})"
        )
        .into(),
        source: io::Error::from_raw_os_error(libc::ENODEV),
        remedy: Remedy::Say(&[
            crate::text::Piece::Str("name the egress interface ("),
            crate::text::Piece::Term(crate::text::Term::Field(crate::text::Field::TxIface)),
            crate::text::Piece::Str(") or bind the socket to it (SO_BINDTODEVICE)"),
        ]),
    };
    let ip = devmem_tx::local_ip(fd)
        .map_err(|e| Error::io("getsockname", e))?
        .ok_or_else(|| unknown("not an IP socket".into()))?;
    devmem_tx::ifaces_with_addr(ip)
        .map_err(|e| Error::io("getifaddrs", e))?
        .into_iter()
        .next()
        .ok_or_else(|| unknown(format!("no interface of this network namespace has {ip}")))
}

/// The checks that come before the region is cut: a stream socket, then the dma-buf to send
/// from: [`TxConfig::dmabuf`], else the region's own ([`Region::dmabuf`], exported from device
/// memory on first use), else [`no_dmabuf`].
pub(crate) fn dmabuf_for(
    region: &mut Region,
    stream: bool,
    cfg: &TxConfig,
) -> Result<Arc<OwnedFd>> {
    if !stream {
        return Err(Error::Unsupported {
            what: "devmem transmit over UDP (the kernel implements it for TCP only; a datagram socket would take the dma-buf offset for an address)".into(),
            source: io::Error::from_raw_os_error(libc::EPROTONOSUPPORT),
            remedy: Remedy::Any(&[
                Remedy::Other("use TCP for devmem transmit"),
                MSG_ZC,
                Remedy::UseTxMode(TxMode::UringZc),
            ]),
        });
    }
    if let Some(d) = &cfg.dmabuf {
        return Ok(Arc::clone(d));
    }
    match region.dmabuf() {
        Ok(d) => Ok(d),
        // Host memory without a dma-buf: say what devmem needs.
        Err(_) if region.device_ordinal().is_none() => Err(no_dmabuf()),
        // Device memory whose export failed: the GPU's own error and fix.
        Err(e) => Err(e),
    }
}

/// A `devmem` backend for the connected socket `fd`, sending from `dmabuf` (see
/// [`dmabuf_for`]) with the region `map` cut into `buffers` buffers. Checks, in order:
/// `SO_ZEROCOPY`, the interface, bind-tx (the device), the dma-buf's size against the region.
/// Every failure leaves nothing bound.
pub(crate) fn new(
    fd: RawFd,
    dmabuf: Option<Arc<OwnedFd>>,
    map: &Arc<Mapping>,
    buffers: usize,
    cfg: &TxConfig,
) -> Result<DevmemTx> {
    let dmabuf = dmabuf.ok_or_else(no_dmabuf)?;
    zcnet_sys::sock::enable_zerocopy(fd).map_err(|e| Error::Unsupported {
        what: "SO_ZEROCOPY (devmem transmit completes like MSG_ZEROCOPY)".into(),
        source: e,
        remedy: Remedy::NeedKernel("Linux 6.16+ for devmem TCP transmit"),
    })?;
    let iface = match &cfg.iface {
        Some(i) => i.clone(),
        None => egress_iface(fd)?,
    };
    let ifindex = zcnet_sys::zcrx::if_index(&iface).ok_or_else(|| Error::UnknownInterface {
        given: iface.clone(),
    })?;
    let binding =
        TxBinding::bind(ifindex, dmabuf.as_raw_fd()).map_err(|e| bind_refusal(&iface, &e))?;
    let size = zcnet_sys::devmem::dmabuf_size(dmabuf.as_fd())
        .map_err(|e| Error::io("dma-buf size (lseek SEEK_END)", e))?;
    if size < map.len() as u64 {
        return Err(Error::Unsupported {
            what: format!(
                "devmem TCP transmit from a {size} B dma-buf for a {} B region (its buffers would lie past the dma-buf's end)",
                map.len()
            ).into(),
            source: io::Error::from_raw_os_error(libc::EFAULT),
            remedy: Remedy::Other("export the dma-buf from the whole region (offset 0 = the region's start)"),
        });
    }
    Ok(ErrqueueTx::with_kernel(
        DevmemKernel {
            binding,
            _dmabuf: dmabuf,
            base: map.addr(),
            iface,
        },
        buffers,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use zcnet_netlink::wire::Extack;
    use zcnet_netlink::KernelError;

    #[zcnet_testkit::test]
    fn offsets_are_relative_to_the_region_start() {
        let base = 0x7f00_0000_0000;
        assert_eq!(dmabuf_offset(base, base, 0), 0);
        assert_eq!(dmabuf_offset(base, base + 3 * 65536, 0), 3 * 65536);
        // A partial send resumes inside the buffer.
        assert_eq!(dmabuf_offset(base, base + 65536, 1448), 65536 + 1448);
    }

    fn kernel_error(errno: i32, msg: Option<&str>) -> zcnet_netlink::Error {
        zcnet_netlink::Error::from_kernel(KernelError {
            op: "bind-tx",
            target: "ifindex 5".into(),
            errno,
            extack: Extack {
                msg: msg.map(str::to_string),
                ..Extack::default()
            },
            bad_attr: None,
            missing_attr: None,
        })
    }

    #[zcnet_testkit::test]
    fn refusals_carry_the_kernels_words_the_errno_and_the_fix() {
        // What 6.18 answers for veth: bind-tx checks the driver's netmem TX support first
        // (net/core/netdev-genl.c).
        let e = bind_refusal(
            "vA",
            &kernel_error(libc::EOPNOTSUPP, Some("Driver does not support netmem TX")),
        );
        let msg = e.to_string();
        for want in [
            "devmem TCP transmit on vA",
            "kernel: Driver does not support netmem TX",
            "Operation not supported",
            "mlx5, bnxt, gve",
            "TxMode::MsgZerocopy",
        ] {
            assert!(msg.contains(want), "missing '{want}' in: {msg}");
        }
        assert!(!msg.contains('\n'));
        assert!(
            matches!(&e, Error::Unsupported { source, .. } if source.raw_os_error() == Some(libc::EOPNOTSUPP))
        );
        // A capable device and an fd that is no dma-buf; multi-line kernel text stays on one.
        let e = bind_refusal("eth1", &kernel_error(libc::EBADF, Some("a\nb")));
        let msg = e.to_string();
        assert!(
            msg.contains("not a dma-buf") && msg.contains("kernel: a b"),
            "{msg}"
        );
        assert!(!msg.contains('\n'));
        // An old kernel: no bind-tx operation.
        let e = bind_refusal(
            "eth1",
            &zcnet_netlink::Error::OpMissing {
                family: "netdev".into(),
                op: "bind-tx",
                needs: "Linux 6.16",
            },
        );
        assert!(e.to_string().contains("6.16+"), "{e}");
    }

    #[zcnet_testkit::test]
    fn no_dmabuf_names_the_cause_and_the_fix() {
        let msg = no_dmabuf().to_string();
        for want in [
            "TxMode::Devmem",
            "dma-buf",
            "MemoryKind::Cuda",
            "udmabuf",
            "TxMode::MsgZerocopy",
        ] {
            assert!(msg.contains(want), "missing '{want}' in: {msg}");
        }
        assert!(!msg.contains('\n'));
    }
}
