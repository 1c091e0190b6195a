//! Receive buffers typed by who may touch them (see "Who may touch a buffer" in the
//! parent module): the kernel's have no way to their bytes.

use crate::mem::{Mapping, Slot};
use std::sync::Arc;

/// A buffer the kernel may write: published in the ring, or taken by the kernel and its
/// completion not yet drained. Nothing reaches its bytes: only its address (to publish it)
/// and its mapping (which stays mapped) can be read, and it becomes a [`Slot`] again only
/// through [`Target::drained`], for a buffer a drained completion names.
#[derive(Debug)]
pub(super) struct InKernel(Slot);

/// One buffer of the ring.
#[derive(Debug)]
pub(super) enum Target {
    /// The kernel's.
    InKernel(InKernel),
    /// The application's: readable until it is recycled. `taken`: a `HeldBuf` has it out,
    /// and only `give_back` (or the handle's drop) returns it.
    Held { slot: Slot, taken: bool },
    /// Between two states, inside one method only.
    Moving,
}

impl Target {
    /// A buffer the application holds (as every buffer does before it is first published).
    pub(super) fn held(slot: Slot) -> Target {
        Target::Held { slot, taken: false }
    }

    pub(super) fn is_held(&self) -> bool {
        matches!(self, Target::Held { .. })
    }

    pub(super) fn is_taken(&self) -> bool {
        matches!(self, Target::Held { taken: true, .. })
    }

    /// The slot of a held buffer; `None` while the kernel may write it.
    pub(super) fn held_slot(&self) -> Option<&Slot> {
        match self {
            Target::Held { slot, .. } => Some(slot),
            _ => None,
        }
    }

    /// The mapping the buffer lies in (its bytes are not reached through it).
    pub(super) fn mapping(&self) -> Option<&Arc<Mapping>> {
        match self {
            Target::InKernel(InKernel(slot)) | Target::Held { slot, .. } => Some(slot.mapping()),
            Target::Moving => None,
        }
    }

    /// Marks a held buffer taken out (or back in); whether it was held and `taken` changed.
    pub(super) fn set_taken(&mut self, to: bool) -> bool {
        match self {
            Target::Held { taken, .. } if *taken != to => {
                *taken = to;
                true
            }
            _ => false,
        }
    }

    /// A held buffer not taken out becomes the kernel's: its address, for the ring entry
    /// that lends it. `None`, unchanged, for any other.
    pub(super) fn publish(&mut self) -> Option<usize> {
        match std::mem::replace(self, Target::Moving) {
            Target::Held { slot, taken: false } => {
                let addr = slot.addr();
                *self = Target::InKernel(InKernel(slot));
                Some(addr)
            }
            other => {
                *self = other;
                None
            }
        }
    }

    /// A drained completion names the buffer: the kernel wrote it and let go, so it is the
    /// application's. A held one stays as it is.
    pub(super) fn drained(&mut self) {
        if let Target::InKernel(_) = self {
            if let Target::InKernel(InKernel(slot)) = std::mem::replace(self, Target::Moving) {
                *self = Target::held(slot);
            }
        }
    }
}
