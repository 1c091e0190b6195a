//! Messages as data: a [`Text`] is words and [`Term`]s, the things a message names that each
//! front end says in its own language. The library names a receive area `RxConfig::area_len`,
//! the `zcnet` command `--area`, Python `area=`, C the field `area_len`; a NIC change is
//! `nic::NicGuard::apply (eth1, queue 3, the flow's port)` to the library and
//! `zcnet nic setup --iface eth1 --queue 3 --port PORT` to the command. A message is built once,
//! with its terms typed, and each front end renders it with its [`Words`]; none of them parses
//! another's text.
//!
//! ```
//! use zcnet_core::text::{Field, Library, Term, Text, Words};
//!
//! let t = Text::from("use a smaller receive area (") + Field::RxAreaLen + ")";
//! assert_eq!(t.to_string(), "use a smaller receive area (RxConfig::area_len)");
//!
//! struct Flags;
//! impl Words for Flags {
//!     fn term(&self, t: &Term) -> String {
//!         match t {
//!             Term::Field(Field::RxAreaLen) => "--area".into(),
//!             other => Library.term(other),
//!         }
//!     }
//! }
//! assert_eq!(t.render(&Flags), "use a smaller receive area (--area)");
//! ```

use std::borrow::Cow;
use std::fmt;

/// A setting of the library's configuration: a field of `RxConfig`, `TxConfig`,
/// `ProbeOptions` or `NicSetup`, or an argument the caller chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Field {
    /// `RxConfig::area_len`: the zcrx receive area's length.
    RxAreaLen,
    /// `RxConfig::iface`: the interface whose queue receives.
    RxIface,
    /// `RxConfig::queue`: the NIC queue.
    RxQueue,
    /// `RxConfig::no_device`: zcrx without a device.
    RxNoDevice,
    /// `RxConfig::buffers`: the number of receive buffers.
    RxBuffers,
    /// `RxConfig::buf_size`: the size of each receive buffer.
    RxBufSize,
    /// `RxConfig::dmabuf`: the dma-buf received into.
    RxDmabuf,
    /// `RxConfig::low_water`: SO_RCVLOWAT.
    RxLowWater,
    /// `RxConfig::mode`: the receive mode.
    RxMode,
    /// `TxConfig::dmabuf`: the dma-buf sent from.
    TxDmabuf,
    /// `TxConfig::iface`: the egress interface.
    TxIface,
    /// `TxConfig::buffers`: the number of send buffers.
    TxBuffers,
    /// `TxConfig::inflight`: sends in flight.
    TxInflight,
    /// `TxConfig::window`: bytes in flight.
    TxWindow,
    /// `TxConfig::buf_size`: the size of each send.
    TxBufSize,
    /// `TxConfig::mode`: the send mode.
    TxMode,
    /// `ProbeOptions::iface`: the interface probed.
    ProbeIface,
    /// `ProbeOptions::all_ifaces`: probe every interface.
    ProbeAllIfaces,
    /// `ProbeOptions::active`: try the mechanisms, not only read facts.
    ProbeActive,
    /// The queue given to the probe of one queue.
    ProbeQueue,
    /// `NicSetup::flow`: the port steered to the queue.
    NicFlow,
    /// The seed of the verified byte pattern.
    PatternSeed,
}

impl Field {
    /// Every field, for tests of renderers.
    pub const ALL: [Field; 22] = [
        Field::RxAreaLen,
        Field::RxIface,
        Field::RxQueue,
        Field::RxNoDevice,
        Field::RxBuffers,
        Field::RxBufSize,
        Field::RxDmabuf,
        Field::RxLowWater,
        Field::RxMode,
        Field::TxDmabuf,
        Field::TxIface,
        Field::TxBuffers,
        Field::TxInflight,
        Field::TxWindow,
        Field::TxBufSize,
        Field::TxMode,
        Field::ProbeIface,
        Field::ProbeAllIfaces,
        Field::ProbeActive,
        Field::ProbeQueue,
        Field::NicFlow,
        Field::PatternSeed,
    ];

    /// The struct that holds the field, and the field's own name (`("RxConfig", "area_len")`);
    /// `None` for a setting that is an argument rather than a field.
    pub fn path(self) -> Option<(&'static str, &'static str)> {
        Some(match self {
            Field::RxAreaLen => ("RxConfig", "area_len"),
            Field::RxIface => ("RxConfig", "iface"),
            Field::RxQueue => ("RxConfig", "queue"),
            Field::RxNoDevice => ("RxConfig", "no_device"),
            Field::RxBuffers => ("RxConfig", "buffers"),
            Field::RxBufSize => ("RxConfig", "buf_size"),
            Field::RxDmabuf => ("RxConfig", "dmabuf"),
            Field::RxLowWater => ("RxConfig", "low_water"),
            Field::RxMode => ("RxConfig", "mode"),
            Field::TxDmabuf => ("TxConfig", "dmabuf"),
            Field::TxIface => ("TxConfig", "iface"),
            Field::TxBuffers => ("TxConfig", "buffers"),
            Field::TxInflight => ("TxConfig", "inflight"),
            Field::TxWindow => ("TxConfig", "window"),
            Field::TxBufSize => ("TxConfig", "buf_size"),
            Field::TxMode => ("TxConfig", "mode"),
            Field::ProbeIface => ("ProbeOptions", "iface"),
            Field::ProbeAllIfaces => ("ProbeOptions", "all_ifaces"),
            Field::ProbeActive => ("ProbeOptions", "active"),
            Field::NicFlow => ("NicSetup", "flow"),
            Field::ProbeQueue | Field::PatternSeed => return None,
        })
    }
}

/// A kind of memory a region can be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Memory {
    /// Anonymous host memory (`MemoryKind::Anonymous`).
    Host,
    /// 2 MiB huge pages (`MemoryKind::Huge`).
    Huge,
    /// Host memory made a dma-buf by /dev/udmabuf (`MemoryKind::Udmabuf`).
    Udmabuf,
    /// GPU memory (`MemoryKind::Cuda`).
    Cuda,
    /// Host memory of the library's choice (`MemoryKind::Auto`).
    Auto,
}

impl Memory {
    /// Every kind.
    pub const ALL: [Memory; 5] = [
        Memory::Host,
        Memory::Huge,
        Memory::Udmabuf,
        Memory::Cuda,
        Memory::Auto,
    ];

    /// The variant's name in the library (`MemoryKind::Anonymous` is `"Anonymous"`).
    pub fn ident(self) -> &'static str {
        match self {
            Memory::Host => "Anonymous",
            Memory::Huge => "Huge",
            Memory::Udmabuf => "Udmabuf",
            Memory::Cuda => "Cuda",
            Memory::Auto => "Auto",
        }
    }

    /// The short name front ends take (`host`, `hugepage`, `udmabuf`, `cuda`, `auto`).
    pub fn name(self) -> &'static str {
        match self {
            Memory::Host => "host",
            Memory::Huge => "hugepage",
            Memory::Udmabuf => "udmabuf",
            Memory::Cuda => "cuda",
            Memory::Auto => "auto",
        }
    }
}

/// An interface name held inline (at most 15 bytes, as the kernel's IFNAMSIZ allows), so that a
/// [`Term`] naming one stays `Copy`. A longer name is cut at 15 bytes (no interface has one).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct IfName {
    len: u8,
    bytes: [u8; 15],
}

impl IfName {
    /// The name (cut at a character boundary at or below 15 bytes).
    pub fn new(name: &str) -> IfName {
        let mut end = name.len().min(15);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        let mut bytes = [0u8; 15];
        bytes[..end].copy_from_slice(&name.as_bytes()[..end]);
        IfName {
            len: end as u8,
            bytes,
        }
    }

    /// The name as a string.
    pub fn as_str(&self) -> &str {
        // Cut at a character boundary of valid UTF-8: always valid.
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or("")
    }
}

impl fmt::Debug for IfName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for IfName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A call of the library the user makes to carry out a remedy; front ends without the call say
/// the command that makes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Call {
    /// Turn header split on and steer a flow (`nic::NicGuard::apply`): the interface, and the
    /// queue a flow is steered to (`None`: header split only).
    NicSetup {
        /// The interface, if known.
        iface: Option<IfName>,
        /// The queue the flow's port is steered to.
        queue: Option<u32>,
    },
    /// A NIC setup with the queue and the port, neither known yet.
    NicSetupFlow,
    /// Undo zcnet's NIC changes from the state file (`nic::restore_from_file`).
    NicRestore {
        /// The interface, if known.
        iface: Option<IfName>,
    },
    /// Change the channel count (`nic::LiveNic::set_channels`): the interface and the change
    /// (`("combined", 4)`), if known.
    SetChannels {
        /// The interface, if known.
        iface: Option<IfName>,
        /// The kind of channel (`combined`, `rx`) and the count asked for.
        change: Option<(&'static str, u32)>,
    },
    /// Probe the machine (`probe::probe`).
    Probe,
    /// A region of anonymous host memory (`Region::anonymous`).
    RegionAnonymous,
    /// A region of huge pages (`Region::huge`).
    RegionHuge,
    /// A region of GPU memory (`Region::cuda`).
    RegionCuda,
    /// A region of the library's choice for a sender (`Region::for_sender`).
    RegionForSender,
    /// A write into device memory (`Region::write_at`).
    RegionWriteAt,
    /// A read of device memory (`Region::read_at`).
    RegionReadAt,
    /// Sending from lent memory (`Sender::send_lent`).
    SendLent,
}

/// What a message names that a front end says its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Term {
    /// A configuration setting.
    Field(Field),
    /// A send mode: its variant name in the library (`UringZc`) and its short name
    /// (`uring-zc`).
    TxMode {
        /// The `TxMode` variant's name.
        ident: &'static str,
        /// The short name front ends take.
        name: &'static str,
    },
    /// A receive mode, as [`Term::TxMode`].
    RxMode {
        /// The `RxMode` variant's name.
        ident: &'static str,
        /// The short name front ends take.
        name: &'static str,
    },
    /// A kind of memory.
    Memory(Memory),
    /// A call that carries out a remedy.
    Call(Call),
}

impl From<Field> for Term {
    fn from(f: Field) -> Term {
        Term::Field(f)
    }
}

impl From<Memory> for Term {
    fn from(m: Memory) -> Term {
        Term::Memory(m)
    }
}

impl From<Call> for Term {
    fn from(c: Call) -> Term {
        Term::Call(c)
    }
}

/// How a front end says each [`Term`].
pub trait Words {
    /// The term in this front end's language.
    fn term(&self, t: &Term) -> String;
}

/// The library's own words: Rust paths (`RxConfig::area_len`, `TxMode::UringZc`,
/// `nic::NicGuard::apply (eth1, queue 3, the flow's port)`). `Display` of a [`Text`] uses them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Library;

impl Words for Library {
    fn term(&self, t: &Term) -> String {
        match t {
            Term::Field(Field::ProbeQueue) => "the queue given to probe_queue".into(),
            Term::Field(Field::PatternSeed) => "another pattern seed".into(),
            Term::Field(f) => {
                let (s, n) = f.path().unwrap_or(("", ""));
                format!("{s}::{n}")
            }
            Term::TxMode { ident, .. } => format!("TxMode::{ident}"),
            Term::RxMode { ident, .. } => format!("RxMode::{ident}"),
            Term::Memory(m) => format!("MemoryKind::{}", m.ident()),
            Term::Call(c) => library_call(c),
        }
    }
}

fn library_call(c: &Call) -> String {
    match c {
        Call::NicSetup {
            iface: Some(i),
            queue: Some(q),
        } => format!("nic::NicGuard::apply ({i}, queue {q}, the flow's port)"),
        Call::NicSetup { iface: Some(i), .. } => format!("nic::NicGuard::apply ({i})"),
        Call::NicSetup { .. } => "nic::NicGuard::apply".into(),
        Call::NicSetupFlow => "a nic::NicSetup with the queue and the port".into(),
        Call::NicRestore { iface: Some(i) } => format!("nic::restore_from_file (interface {i})"),
        Call::NicRestore { iface: None } => "nic::restore_from_file".into(),
        Call::SetChannels {
            iface: Some(i),
            change: Some((kind, n)),
        } => format!("nic::LiveNic::set_channels ({i}, {kind} {n})"),
        Call::SetChannels { iface: Some(i), .. } => format!("nic::LiveNic::set_channels ({i})"),
        Call::SetChannels { .. } => "nic::LiveNic::set_channels".into(),
        Call::Probe => "probe::probe".into(),
        Call::RegionAnonymous => "Region::anonymous".into(),
        Call::RegionHuge => "Region::huge".into(),
        Call::RegionCuda => "Region::cuda".into(),
        Call::RegionForSender => "Region::for_sender".into(),
        Call::RegionWriteAt => "Region::write_at".into(),
        Call::RegionReadAt => "Region::read_at".into(),
        Call::SendLent => "Sender::send_lent".into(),
    }
}

/// A piece of a message that can live in a `static` (a [`Text`] built from `&'static [Piece]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Piece {
    /// Words said the same in every front end.
    Str(&'static str),
    /// A term each front end says its own way.
    Term(Term),
}

/// A part of a [`Text`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Part {
    /// Words said the same in every front end.
    Lit(Cow<'static, str>),
    /// A term each front end says its own way.
    Term(Term),
}

/// A message: words and typed [`Term`]s. `Display` is the library's wording ([`Library`]);
/// [`Text::render`] is any front end's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Text {
    parts: Vec<Part>,
}

impl Text {
    /// An empty text.
    pub fn new() -> Text {
        Text::default()
    }

    /// The text in `words`.
    pub fn render(&self, words: &dyn Words) -> String {
        let mut s = String::new();
        for p in &self.parts {
            match p {
                Part::Lit(l) => s.push_str(l),
                Part::Term(t) => s.push_str(&words.term(t)),
            }
        }
        s
    }

    /// The parts, in order.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// The terms the text names, in order.
    pub fn terms(&self) -> impl Iterator<Item = &Term> {
        self.parts.iter().filter_map(|p| match p {
            Part::Term(t) => Some(t),
            Part::Lit(_) => None,
        })
    }

    /// Whether the text says nothing.
    pub fn is_empty(&self) -> bool {
        self.parts.iter().all(|p| match p {
            Part::Lit(l) => l.is_empty(),
            Part::Term(_) => false,
        })
    }

    /// Whether the text in the library's words ([`Library`]) contains `pat`.
    pub fn contains(&self, pat: &str) -> bool {
        self.to_string().contains(pat)
    }

    /// Appends words or a term.
    pub fn push(&mut self, p: impl Into<Text>) {
        let t = p.into();
        for part in t.parts {
            match (self.parts.last_mut(), part) {
                (Some(Part::Lit(prev)), Part::Lit(l)) => prev.to_mut().push_str(&l),
                (_, part) => self.parts.push(part),
            }
        }
    }

    /// Whether the text in the library's words starts with `pat`.
    pub fn starts_with(&self, pat: &str) -> bool {
        self.to_string().starts_with(pat)
    }

    /// Appends words (as `String::push_str`).
    pub fn push_str(&mut self, s: &str) {
        self.push(s.to_string());
    }

    /// The texts one after another with `sep` between them.
    pub fn join(parts: impl IntoIterator<Item = Text>, sep: &'static str) -> Text {
        let mut t = Text::new();
        for (i, p) in parts.into_iter().enumerate() {
            if i > 0 {
                t.push(sep);
            }
            t.push(p);
        }
        t
    }

    /// `other` after this text.
    pub fn then(mut self, other: impl Into<Text>) -> Text {
        self.push(other);
        self
    }
}

/// A text equals a string that says it in the library's words.
impl PartialEq<str> for Text {
    fn eq(&self, other: &str) -> bool {
        self.render(&Library).as_str() == other
    }
}

impl PartialEq<&str> for Text {
    fn eq(&self, other: &&str) -> bool {
        self.render(&Library).as_str() == *other
    }
}

/// `write!` into a text appends words.
impl fmt::Write for Text {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.push(s.to_string());
        Ok(())
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(&Library))
    }
}

impl From<&'static str> for Text {
    fn from(s: &'static str) -> Text {
        Text {
            parts: vec![Part::Lit(Cow::Borrowed(s))],
        }
    }
}

impl From<String> for Text {
    fn from(s: String) -> Text {
        Text {
            parts: vec![Part::Lit(Cow::Owned(s))],
        }
    }
}

impl From<&String> for Text {
    fn from(s: &String) -> Text {
        Text::from(s.clone())
    }
}

impl From<Term> for Text {
    fn from(t: Term) -> Text {
        Text {
            parts: vec![Part::Term(t)],
        }
    }
}

impl From<Field> for Text {
    fn from(f: Field) -> Text {
        Text::from(Term::Field(f))
    }
}

impl From<Memory> for Text {
    fn from(m: Memory) -> Text {
        Text::from(Term::Memory(m))
    }
}

impl From<Call> for Text {
    fn from(c: Call) -> Text {
        Text::from(Term::Call(c))
    }
}

impl From<Piece> for Text {
    fn from(p: Piece) -> Text {
        match p {
            Piece::Str(s) => Text::from(s),
            Piece::Term(t) => Text::from(t),
        }
    }
}

impl From<&[Piece]> for Text {
    fn from(ps: &[Piece]) -> Text {
        let mut t = Text::new();
        for p in ps {
            t.push(*p);
        }
        t
    }
}

impl<T: Into<Text>> std::ops::Add<T> for Text {
    type Output = Text;
    fn add(self, rhs: T) -> Text {
        self.then(rhs)
    }
}

impl<T: Into<Text>> std::ops::AddAssign<T> for Text {
    fn add_assign(&mut self, rhs: T) {
        self.push(rhs);
    }
}

/// A [`Text`] from words and terms in order: `text!("use a smaller area (", Field::RxAreaLen, ")")`.
#[macro_export]
macro_rules! text {
    ($($part:expr),* $(,)?) => {{
        let mut t = $crate::text::Text::new();
        $( t.push($part); )*
        t
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Upper;
    impl Words for Upper {
        fn term(&self, t: &Term) -> String {
            Library.term(t).to_uppercase()
        }
    }

    #[test]
    fn a_text_renders_each_term_in_the_words_given_and_words_as_they_are() {
        let t = crate::text!(
            "use ",
            Term::TxMode {
                ident: "UringZc",
                name: "uring-zc"
            },
            " or a smaller ",
            Field::TxBufSize,
            String::from(" (now 64 KiB)"),
        );
        assert_eq!(
            t.to_string(),
            "use TxMode::UringZc or a smaller TxConfig::buf_size (now 64 KiB)"
        );
        assert_eq!(
            t.render(&Upper),
            "use TXMODE::URINGZC or a smaller TXCONFIG::BUF_SIZE (now 64 KiB)"
        );
        assert_eq!(t.terms().count(), 2);
        // Adjacent words are one part, so a text's parts alternate.
        assert_eq!(t.parts().len(), 5);
        assert!(Text::new().is_empty() && Text::from("").is_empty());
        assert!(!Text::from(Field::RxQueue).is_empty());
    }

    #[test]
    fn calls_say_their_arguments_where_they_have_them() {
        let eth = Some(IfName::new("eth1"));
        let cases = [
            (
                Call::NicSetup {
                    iface: eth,
                    queue: Some(3),
                },
                "nic::NicGuard::apply (eth1, queue 3, the flow's port)",
            ),
            (
                Call::NicSetup {
                    iface: eth,
                    queue: None,
                },
                "nic::NicGuard::apply (eth1)",
            ),
            (
                Call::NicRestore { iface: eth },
                "nic::restore_from_file (interface eth1)",
            ),
            (
                Call::SetChannels {
                    iface: eth,
                    change: Some(("combined", 4)),
                },
                "nic::LiveNic::set_channels (eth1, combined 4)",
            ),
        ];
        for (c, want) in cases {
            assert_eq!(Text::from(c).to_string(), want);
        }
    }

    #[test]
    fn an_interface_name_is_kept_whole_up_to_ifnamsiz() {
        assert_eq!(IfName::new("enp1s0f0np0").as_str(), "enp1s0f0np0");
        assert_eq!(IfName::new("0123456789abcdefg").as_str(), "0123456789abcde");
        // Cut at a character boundary, never inside one.
        assert_eq!(IfName::new("ééééééééé").as_str(), "ééééééé");
    }

    #[test]
    fn every_field_has_a_library_name_with_no_spaces_unless_it_is_an_argument() {
        for f in Field::ALL {
            let s = Library.term(&Term::Field(f));
            match f.path() {
                Some(_) => assert!(s.contains("::") && !s.contains(' '), "{f:?}: {s}"),
                None => assert!(!s.contains("::"), "{f:?}: {s}"),
            }
        }
    }
}
