//! What the probe says: the mechanisms it judges, its verdicts, and a finding (a verdict with
//! its reason and remedy).

use crate::text::Text;
use std::fmt;

/// A zero-copy (or copying) mechanism the probe judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mechanism {
    /// send()/recv(): the baseline; always copies.
    Copy,
    /// `MSG_ZEROCOPY` sends with error-queue notifications.
    MsgZerocopy,
    /// io_uring `SEND_ZC`.
    UringZc,
    /// io_uring zero-copy receive into a registered area.
    Zcrx,
    /// devmem TCP receive into a dma-buf bound to RX queues.
    DevmemRx,
    /// devmem TCP transmit from a dma-buf.
    DevmemTx,
    /// AF_XDP in copy mode.
    AfXdpCopy,
    /// AF_XDP zero-copy mode.
    AfXdpZerocopy,
}

impl Mechanism {
    /// Every mechanism, in report order.
    pub const ALL: [Mechanism; 8] = [
        Mechanism::Copy,
        Mechanism::MsgZerocopy,
        Mechanism::UringZc,
        Mechanism::Zcrx,
        Mechanism::DevmemRx,
        Mechanism::DevmemTx,
        Mechanism::AfXdpCopy,
        Mechanism::AfXdpZerocopy,
    ];

    /// The name used in output and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Copy => "copy",
            Mechanism::MsgZerocopy => "msg-zerocopy",
            Mechanism::UringZc => "uring-zc",
            Mechanism::Zcrx => "zcrx",
            Mechanism::DevmemRx => "devmem-rx",
            Mechanism::DevmemTx => "devmem-tx",
            Mechanism::AfXdpCopy => "af-xdp-copy",
            Mechanism::AfXdpZerocopy => "af-xdp-zerocopy",
        }
    }
}

/// What the probe concludes about one mechanism on one interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Works, and the kernel moves the payload without copying it.
    ZeroCopy,
    /// Works, but the kernel copies (loopback, veth, copy mode).
    Copies,
    /// Does not work here.
    Unsupported,
}

impl Verdict {
    /// The name used in output and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::ZeroCopy => "zero-copy",
            Verdict::Copies => "copies",
            Verdict::Unsupported => "unsupported",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A verdict with its reason and, where one exists, the remedy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The verdict.
    pub verdict: Verdict,
    /// Why, in plain words, its terms typed ([`crate::text`](mod@crate::text)).
    pub reason: Text,
    /// What to run to get zero copy, if anything would, its calls and settings typed.
    pub remedy: Option<Text>,
    /// Whether the verdict was confirmed by trying the mechanism (`--active`).
    pub confirmed: bool,
}

impl Finding {
    pub(super) fn new(verdict: Verdict, reason: impl Into<Text>) -> Finding {
        Finding {
            verdict,
            reason: reason.into(),
            remedy: None,
            confirmed: false,
        }
    }

    pub(super) fn remedy(mut self, r: impl Into<Text>) -> Finding {
        self.remedy = Some(r.into());
        self
    }
}
