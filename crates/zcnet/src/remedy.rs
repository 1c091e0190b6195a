//! What to do about an error, as data: [`Remedy`]. Its `Display` speaks the library's language
//! (config fields, modes, functions); a front end (the `zcnet` command, a binding) renders each
//! remedy in its own (flags, keyword arguments) with [`Error::display_with`].
//!
//! [`Error::display_with`]: crate::Error::display_with

use crate::region::MemoryKind;
use crate::rx::RxMode;
use crate::tx::TxMode;
use std::fmt;
use std::net::SocketAddr;

/// A way out of an error. Alternatives and steps nest ([`Remedy::Any`], [`Remedy::All`]); every
/// value is `Copy` and can be a constant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Remedy {
    /// Nothing to suggest.
    None,
    /// Receive with another mode ([`RxConfig::mode`](crate::rx::RxConfig::mode)).
    UseRxMode(RxMode),
    /// Send with another mode ([`TxConfig::mode`](crate::tx::TxConfig::mode)).
    UseTxMode(TxMode),
    /// Receive device memory by staging it through host memory ([`RxMode::Auto`]).
    Staging,
    /// Use another kind of memory for the region.
    UseMemory(MemoryKind),
    /// Turn header split on (hds-thresh 0) on the interface: a [`NicSetup`] applied with
    /// [`NicGuard::apply`].
    ///
    /// [`NicSetup`]: crate::nic::NicSetup
    /// [`NicGuard::apply`]: crate::nic::NicGuard::apply
    SetupNic,
    /// Steer the flow to the queue and turn header split on: a [`NicSetup`] with the queue and
    /// the port.
    ///
    /// [`NicSetup`]: crate::nic::NicSetup
    SteerFlow,
    /// Look at what the probe reports for the interface.
    ProbeIface,
    /// Pick a queue below the RX queue count, or leave the queue unset.
    ChooseQueue,
    /// Use another queue, or stop the other user of this one.
    OtherQueue,
    /// A smaller receive area ([`RxConfig::area_len`](crate::rx::RxConfig::area_len)).
    SmallerArea,
    /// A receive area that is a page multiple of at least one page.
    PageSizedArea,
    /// A smaller dma-buf.
    SmallerDmabuf,
    /// A dma-buf of at most 1 GiB.
    DmabufUpTo1G,
    /// Fewer or smaller receive buffers.
    FewerRxBuffers,
    /// Fewer or smaller sends in flight.
    FewerSends,
    /// Smaller GPU buffers, or free GPU memory.
    LessGpuMemory,
    /// Raise RLIMIT_MEMLOCK.
    RaiseMemlock,
    /// Run as root (CAP_NET_ADMIN).
    RunAsRoot,
    /// Turn io_uring on (`kernel.io_uring_disabled=0`).
    EnableIoUring,
    /// Start a receiver at the address first.
    StartReceiver(SocketAddr),
    /// The kernel (and hardware) that has it, e.g. "Linux 6.15+ with io_uring".
    NeedKernel(&'static str),
    /// A remedy that names no option of any front end.
    Other(&'static str),
    /// Any one of these.
    Any(&'static [Remedy]),
    /// All of these, in order.
    All(&'static [Remedy]),
}

impl Remedy {
    /// One value of every variant (the nested ones with two leaves), for tests of renderers.
    pub fn examples() -> Vec<Remedy> {
        let mut v = vec![Remedy::None];
        v.extend(RxMode::ALL.map(Remedy::UseRxMode));
        v.extend(TxMode::NAMED.map(Remedy::UseTxMode));
        v.extend(
            [
                MemoryKind::Anonymous,
                MemoryKind::Auto,
                MemoryKind::Huge,
                MemoryKind::Udmabuf,
                MemoryKind::Cuda(0),
            ]
            .map(Remedy::UseMemory),
        );
        v.extend([
            Remedy::Staging,
            Remedy::SetupNic,
            Remedy::SteerFlow,
            Remedy::ProbeIface,
            Remedy::ChooseQueue,
            Remedy::OtherQueue,
            Remedy::SmallerArea,
            Remedy::PageSizedArea,
            Remedy::SmallerDmabuf,
            Remedy::DmabufUpTo1G,
            Remedy::FewerRxBuffers,
            Remedy::FewerSends,
            Remedy::LessGpuMemory,
            Remedy::RaiseMemlock,
            Remedy::RunAsRoot,
            Remedy::EnableIoUring,
            Remedy::StartReceiver(SocketAddr::from(([127, 0, 0, 1], 5201))),
            Remedy::NeedKernel("Linux 6.15+"),
            Remedy::Other("please report this"),
            Remedy::Any(&[Remedy::SetupNic, Remedy::UseRxMode(RxMode::Uring)]),
            Remedy::All(&[Remedy::RaiseMemlock, Remedy::SmallerArea]),
        ]);
        v
    }

    /// Renders the remedy with `leaf` for everything but the nesting: alternatives joined by
    /// ", or ", steps by " and ". `leaf` is called for every variant other than
    /// [`Remedy::Any`] and [`Remedy::All`].
    pub fn render(&self, leaf: &dyn Fn(&Remedy) -> String) -> String {
        match self {
            Remedy::Any(rs) => join(rs, ", or ", leaf),
            Remedy::All(rs) => join(rs, " and ", leaf),
            r => leaf(r),
        }
    }

    /// The library's wording of one remedy that is not [`Remedy::Any`] or [`Remedy::All`].
    pub fn library_text(&self) -> String {
        match self {
            Remedy::None => String::new(),
            Remedy::UseRxMode(m) => format!("use RxMode::{m:?}"),
            Remedy::UseTxMode(m) => format!("use TxMode::{m:?}"),
            Remedy::Staging => "receive by staging (RxMode::Auto)".into(),
            Remedy::UseMemory(MemoryKind::Anonymous) => {
                "use host memory (MemoryKind::Anonymous)".into()
            }
            Remedy::UseMemory(MemoryKind::Cuda(_)) => {
                "use device memory (MemoryKind::Cuda, exported as a dma-buf)".into()
            }
            Remedy::UseMemory(MemoryKind::Udmabuf) => {
                "use host memory made a dma-buf (MemoryKind::Udmabuf, where /dev/udmabuf exists)"
                    .into()
            }
            Remedy::UseMemory(MemoryKind::Huge) => "use huge pages (MemoryKind::Huge)".into(),
            Remedy::UseMemory(MemoryKind::Auto) => {
                "use host memory of the library's choice (MemoryKind::Auto, Region::for_sender)".into()
            }
            Remedy::SetupNic => "turn header split on (hds-thresh 0) on the interface with nic::NicGuard::apply".into(),
            Remedy::SteerFlow => "steer the flow to the queue and turn header split on (a nic::NicSetup with the queue and the port)".into(),
            Remedy::ProbeIface => "check what probe::probe reports for the interface".into(),
            Remedy::ChooseQueue => "pick a queue (RxConfig::queue) below the RX queue count (probe::probe lists the queues), or leave it unset".into(),
            Remedy::OtherQueue => "use another queue (RxConfig::queue), or stop the other user of the queue".into(),
            Remedy::SmallerArea => "use a smaller receive area (RxConfig::area_len)".into(),
            Remedy::PageSizedArea => "make the receive area (RxConfig::area_len) a page multiple of at least one page".into(),
            Remedy::SmallerDmabuf => "use a smaller dma-buf (RxConfig::dmabuf)".into(),
            Remedy::DmabufUpTo1G => "use a dma-buf of 1 GiB or less (RxConfig::dmabuf)".into(),
            Remedy::FewerRxBuffers => "use fewer or smaller buffers (RxConfig::buffers, RxConfig::buf_size)".into(),
            Remedy::FewerSends => "use fewer or smaller sends in flight (TxConfig::inflight, TxConfig::buf_size)".into(),
            Remedy::LessGpuMemory => "use less GPU memory (sends: TxConfig::buf_size, TxConfig::inflight; receives: RxConfig::area_len or a smaller region) or free GPU memory (nvidia-smi shows who holds it)".into(),
            Remedy::RaiseMemlock => "raise the locked-memory limit (RLIMIT_MEMLOCK)".into(),
            Remedy::RunAsRoot => "run it as root (CAP_NET_ADMIN)".into(),
            Remedy::EnableIoUring => "turn io_uring on: 'sysctl -w kernel.io_uring_disabled=0'".into(),
            Remedy::StartReceiver(addr) => format!("start a receiver listening on {addr} first"),
            Remedy::NeedKernel(k) => format!("needs {k}"),
            Remedy::Other(s) => (*s).to_string(),
            Remedy::Any(_) | Remedy::All(_) => self.render(&Remedy::library_text),
        }
    }
}

fn join(rs: &[Remedy], sep: &str, leaf: &dyn Fn(&Remedy) -> String) -> String {
    rs.iter()
        .map(|r| r.render(leaf))
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(sep)
}

impl fmt::Display for Remedy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(&Remedy::library_text))
    }
}
