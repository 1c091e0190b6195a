//! What to do about an error, as data: [`Remedy`]. Its `Display` speaks the library's language
//! (config fields, modes, functions); a front end (the `zcnet` command, a binding) renders each
//! remedy in its own (flags, keyword arguments) through its [`Voice`], as it renders the
//! error around it ([`Error::render`]).
//!
//! [`Error::render`]: crate::Error::render

use crate::kinds::{MemoryKind, RxMode, TxMode};
use crate::text;
use crate::text::{Call, Field, Library, Piece, Term, Text, Words};
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
    /// A kernel built with this option (`"CONFIG_XDP_SOCKETS"`, one that cannot be a module).
    KernelConfig(&'static str),
    /// A kernel with this module (`"udmabuf"`): built in (`CONFIG_UDMABUF=y`) or loaded.
    KernelModule(&'static str),
    /// A NIC whose driver has what was missing.
    UseNic(&'static Nic),
    /// The interface went away or changed: check it (`ip link`) and retry.
    CheckLink,
    /// A contradiction zcnet cannot explain (its bookkeeping or the kernel's answer): report it.
    Report,
    /// A remedy that names no option of any front end.
    Other(&'static str),
    /// A remedy in words and terms (settings, modes, calls) that each front end says its way.
    Say(&'static [Piece]),
    /// Any one of these.
    Any(&'static [Remedy]),
    /// All of these, in order.
    All(&'static [Remedy]),
}

/// What a NIC's driver must have for a remedy's [`Remedy::UseNic`], and drivers that have it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nic {
    /// What the driver must have ("header split").
    pub needs: &'static str,
    /// Drivers that have it (a hint: "mlx5, bnxt, gve, fbnic").
    pub drivers: &'static str,
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
            Remedy::KernelConfig("CONFIG_XDP_SOCKETS"),
            Remedy::KernelModule("udmabuf"),
            Remedy::UseNic(&Nic {
                needs: "header split",
                drivers: "mlx5, bnxt, gve, fbnic",
            }),
            Remedy::CheckLink,
            Remedy::Report,
            Remedy::Report,
            Remedy::Say(&[
                Piece::Str("set "),
                Piece::Term(Term::Field(Field::RxIface)),
                Piece::Str(" to the NIC"),
            ]),
            Remedy::Any(&[Remedy::SetupNic, Remedy::UseRxMode(RxMode::Uring)]),
            Remedy::All(&[Remedy::RaiseMemlock, Remedy::SmallerArea]),
        ]);
        v
    }

    /// The remedy in `voice`: each leaf in the front end's own wording where it has one
    /// ([`Voice::remedy`]), else the library's [`Remedy::text`] with its terms in the front
    /// end's words; alternatives joined by ", or ", steps by " and ".
    pub fn render(&self, voice: &dyn Voice) -> String {
        self.voiced(voice).render(voice)
    }

    /// The remedy as text with each leaf in `voice`'s own wording where it has one (its terms
    /// still typed): what [`Remedy::render`] renders, and what an error carrying it holds.
    pub(crate) fn voiced(&self, voice: &dyn Voice) -> Text {
        match self {
            Remedy::Any(rs) => join(rs.iter().map(|r| r.voiced(voice)), ", or "),
            Remedy::All(rs) => join(rs.iter().map(|r| r.voiced(voice)), " and "),
            r => voice.remedy(r).map_or_else(|| r.text(), Text::from),
        }
    }

    /// The library's wording of the remedy, its settings, modes, memory kinds and calls as
    /// typed terms ([`crate::text`](mod@crate::text)).
    pub fn text(&self) -> Text {
        match self {
            Remedy::None => Text::new(),
            Remedy::UseRxMode(m) => text!("use ", m.term()),
            Remedy::UseTxMode(m) => text!("use ", m.term()),
            Remedy::Staging => text!("receive by staging (", RxMode::Auto.term(), ")"),
            Remedy::UseMemory(k @ MemoryKind::Anonymous) => {
                text!("use host memory (", k.term(), ")")
            }
            Remedy::UseMemory(k @ MemoryKind::Cuda(_)) => {
                text!("use device memory (", k.term(), ", exported as a dma-buf)")
            }
            Remedy::UseMemory(k @ MemoryKind::Udmabuf) => text!(
                "use host memory made a dma-buf (",
                k.term(),
                ", where /dev/udmabuf exists)"
            ),
            Remedy::UseMemory(k @ MemoryKind::Huge) => text!("use huge pages (", k.term(), ")"),
            Remedy::UseMemory(k @ MemoryKind::Auto) => text!(
                "use host memory of the library's choice (",
                k.term(),
                ", ",
                Call::RegionForSender,
                ")"
            ),
            Remedy::SetupNic => text!(
                "turn header split on (hds-thresh 0) on the interface with ",
                Call::NicSetup {
                    iface: None,
                    queue: None
                }
            ),
            Remedy::SteerFlow => text!(
                "steer the flow to the queue and turn header split on (",
                Call::NicSetupFlow,
                ")"
            ),
            Remedy::ProbeIface => text!("check what ", Call::Probe, " reports for the interface"),
            Remedy::ChooseQueue => text!(
                "pick a queue (",
                Field::RxQueue,
                ") below the RX queue count (",
                Call::Probe,
                " lists the queues), or leave it unset"
            ),
            Remedy::OtherQueue => text!(
                "use another queue (",
                Field::RxQueue,
                "), or stop the other user of the queue"
            ),
            Remedy::SmallerArea => text!("use a smaller receive area (", Field::RxAreaLen, ")"),
            Remedy::PageSizedArea => text!(
                "make the receive area (",
                Field::RxAreaLen,
                ") a page multiple of at least one page"
            ),
            Remedy::SmallerDmabuf => text!("use a smaller dma-buf (", Field::RxDmabuf, ")"),
            Remedy::DmabufUpTo1G => text!("use a dma-buf of 1 GiB or less (", Field::RxDmabuf, ")"),
            Remedy::FewerRxBuffers => text!(
                "use fewer or smaller buffers (",
                Field::RxBuffers,
                ", ",
                Field::RxBufSize,
                ")"
            ),
            Remedy::FewerSends => text!(
                "use fewer or smaller sends in flight (",
                Field::TxInflight,
                ", ",
                Field::TxBufSize,
                ")"
            ),
            Remedy::LessGpuMemory => text!(
                "use less GPU memory (sends: ",
                Field::TxBufSize,
                ", ",
                Field::TxInflight,
                "; receives: ",
                Field::RxAreaLen,
                " or a smaller region) or free GPU memory (nvidia-smi shows who holds it)"
            ),
            Remedy::RaiseMemlock => "raise the locked-memory limit (RLIMIT_MEMLOCK)".into(),
            Remedy::RunAsRoot => "run it as root (CAP_NET_ADMIN)".into(),
            Remedy::EnableIoUring => {
                "turn io_uring on: 'sysctl -w kernel.io_uring_disabled=0'".into()
            }
            Remedy::StartReceiver(addr) => format!(
                "start a receiver listening on {} first",
                crate::addr::AddrText(*addr)
            )
            .into(),
            Remedy::NeedKernel(k) => format!("needs {k}").into(),
            Remedy::KernelConfig(opt) => format!("boot a kernel built with {opt}=y").into(),
            Remedy::KernelModule(m) => format!(
                "boot a kernel built with CONFIG_{}=y (or =m and 'modprobe {m}')",
                m.to_uppercase()
            )
            .into(),
            Remedy::UseNic(n) => {
                format!("use a NIC whose driver has {} ({})", n.needs, n.drivers).into()
            }
            Remedy::CheckLink => "check the interface ('ip link') and retry".into(),
            Remedy::Report => "please report this".into(),
            Remedy::Other(s) => (*s).into(),
            Remedy::Say(pieces) => Text::from(*pieces),
            Remedy::Any(rs) => join(rs.iter().map(Remedy::text), ", or "),
            Remedy::All(rs) => join(rs.iter().map(Remedy::text), " and "),
        }
    }
}

/// A front end's language: its [`Words`] for the terms of a message, and its own wording of
/// the remedies it says differently from the library (a flag where the library names a field).
/// The library's own voice is [`Library`]; the `zcnet` command, the Python binding and the C
/// ABI each have theirs.
pub trait Voice: Words {
    /// This front end's wording of one remedy (never [`Remedy::Any`] or [`Remedy::All`]), or
    /// `None` for the library's text with its terms in this front end's words.
    fn remedy(&self, r: &Remedy) -> Option<String> {
        let _ = r;
        None
    }
}

impl Voice for Library {}

impl fmt::Debug for dyn Voice + Sync {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Voice")
    }
}

/// Alternatives or steps, `sep` between them; one that says nothing ([`Remedy::None`]) is left
/// out.
fn join(parts: impl Iterator<Item = Text>, sep: &'static str) -> Text {
    Text::join(parts.filter(|t| !t.is_empty()), sep)
}

impl fmt::Display for Remedy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(&Library))
    }
}
